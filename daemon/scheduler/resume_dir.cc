#include "daemon/scheduler/resume_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "common/fd.h"
#include "daemon/model/records.h"
#include "daemon/scheduler/scheduler_env.h"

namespace triald::daemon {

ResumeFolder FindResumeFolder(const std::string& state_dir, const std::string& study, int number,
                              uid_t uid) {
  const std::string dir = model::TrialDir(state_dir, study, number);
  const std::string whose = "trial " + std::to_string(number) + "'s folder " + dir;
  auto refuse = [](std::string reason) { return ResumeFolder{"", std::move(reason)}; };
  // The state directory itself is the administrator's choice and may be reached through a link;
  // below it, every component is opened without following one and checked to be a folder.
  common::UniqueFd at(::open(state_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!at.valid()) {
    return refuse(whose + ": the state directory cannot be opened: " + std::strerror(errno));
  }
  const std::vector<std::string> parts = model::TrialDirComponents(study, number);
  struct stat st {};
  std::string path = state_dir;
  for (const std::string& part : parts) {
    path += "/" + part;
    struct stat link {};
    if (::fstatat(at.get(), part.c_str(), &link, AT_SYMLINK_NOFOLLOW) != 0) {
      const int e = errno;
      if (e == ENOENT) return refuse(whose + " does not exist on this node");
      return refuse(whose + ": " + path + ": " + std::strerror(e));
    }
    if (S_ISLNK(link.st_mode)) {
      return refuse(whose + ": " + path + " is a symbolic link, not the trial's own folder");
    }
    if (!S_ISDIR(link.st_mode)) return refuse(whose + ": " + path + " is not a folder");
    common::UniqueFd next(
        ::openat(at.get(), part.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid()) return refuse(whose + ": " + path + ": " + std::strerror(errno));
    // The folder opened is the one checked, not a replacement made in between.
    if (::fstat(next.get(), &st) != 0) return refuse(whose + ": " + std::strerror(errno));
    if (st.st_dev != link.st_dev || st.st_ino != link.st_ino) {
      return refuse(whose + ": " + path + " changed while it was checked");
    }
    at = std::move(next);
  }
  if (st.st_uid != uid) {
    return refuse(whose + " belongs to uid " + std::to_string(st.st_uid) +
                  ", not to the retry's user (uid " + std::to_string(uid) + ")");
  }
  if ((st.st_mode & (S_IRUSR | S_IXUSR)) != (S_IRUSR | S_IXUSR)) {
    return refuse(whose + " is not readable by its owner (mode " + [&] {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", st.st_mode & 07777);
      return std::string(mode);
    }() + ")");
  }
  return ResumeFolder{dir, ""};
}

ResumeFolder ResumeFolderForRetry(const RetryFolderQuery& q) {
  // Shared storage: the attempt may have run on another node, whose folders are its own.
  if (q.shared && q.failed != nullptr && !q.failed->node.empty() && q.failed->node != q.node) {
    return ResumeFolder{"", "trial " + std::to_string(q.of) + " ran on node " + q.failed->node +
                                ", and its folder is there, not on this node (" + q.node + ")"};
  }
  common::Result<uid_t> uid = q.env->TrialUid(q.study->submitter, q.as_submitter);
  if (!uid.ok()) return ResumeFolder{"", uid.status().message()};
  return q.env->FindResumeFolder(q.state_dir, q.study->name, q.of, *uid);
}

std::string DescribeResumeFolder(const ResumeFolder& folder, int number, int of) {
  if (folder.dir.empty()) {
    return "trial " + std::to_string(number) + " starts without a resume folder: " + folder.reason;
  }
  return "trial " + std::to_string(number) + " resumes from " + folder.dir + " (trial " +
         std::to_string(of) + "'s folder, TRIALD_RESUME_DIR)";
}

}  // namespace triald::daemon
