#include "daemon/launcher/run_as.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/fd.h"

namespace triald::launcher {
using common::Result;
using common::Status;

std::string RunAs::Describe() const {
  return name + " (uid " + std::to_string(uid) + ", gid " + std::to_string(gid) + ")";
}

Result<RunAs> LookUpRunAs(const model::Submitter& submitter) {
  const std::string who =
      (submitter.name.empty() ? std::string("uid ") + std::to_string(submitter.uid)
                              : "user \"" + submitter.name + "\" (uid " +
                                    std::to_string(submitter.uid) + " when it submitted)");
  if (!submitter.known()) return common::InvalidArgument("the study's submitter is unknown");
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  int err = 0;
  for (;;) {
    err = submitter.name.empty()
              ? ::getpwuid_r(static_cast<uid_t>(submitter.uid), &pw, buf.data(), buf.size(), &found)
              : ::getpwnam_r(submitter.name.c_str(), &pw, buf.data(), buf.size(), &found);
    if (err != ERANGE || buf.size() > (1 << 20)) break;
    buf.resize(buf.size() * 2);
  }
  if (err != 0 || found == nullptr) {
    return common::NotFound("cannot run the trial as its submitter: " + who +
                            " has no passwd entry on this host" +
                            (err != 0 ? std::string(" (") + std::strerror(err) + ")" : ""));
  }
  RunAs out;
  out.uid = pw.pw_uid;
  out.gid = pw.pw_gid;
  out.name = pw.pw_name;
  out.home = pw.pw_dir != nullptr ? pw.pw_dir : "";
  int n = 64;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  while (::getgrouplist(out.name.c_str(), out.gid, groups.data(), &n) < 0) {
    if (n <= static_cast<int>(groups.size())) n = static_cast<int>(groups.size()) * 2;
    if (n > 65536) {
      return common::Internal("cannot list the groups of " + who + ": more than 65536");
    }
    groups.resize(static_cast<size_t>(n));
  }
  groups.resize(static_cast<size_t>(n));
  out.groups = std::move(groups);
  return out;
}

std::vector<std::string> WithUserEnvironment(std::vector<std::string> env, const RunAs& user) {
  std::vector<std::string> out;
  out.reserve(env.size() + 3);
  for (std::string& kv : env) {
    if (kv.rfind("HOME=", 0) == 0 || kv.rfind("USER=", 0) == 0 || kv.rfind("LOGNAME=", 0) == 0) {
      continue;
    }
    out.push_back(std::move(kv));
  }
  out.push_back("HOME=" + user.home);
  out.push_back("USER=" + user.name);
  out.push_back("LOGNAME=" + user.name);
  return out;
}

namespace {

// o+x on the folders from `root` (inclusive) down to `dir`'s parent; nothing when `dir` is not
// below `root`.
Status MakeParentsSearchable(const std::string& root, const std::string& dir) {
  if (root.empty() || dir.size() <= root.size() || dir.compare(0, root.size(), root) != 0 ||
      dir[root.size()] != '/') {
    return Status::Ok();
  }
  std::string path = dir;
  while (path.size() > root.size()) {
    path.erase(path.find_last_of('/'));
    if (path.size() < root.size()) break;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return common::ErrnoError("stat " + path, errno);
    if (!S_ISDIR(st.st_mode)) {
      return common::FailedPrecondition(path + " is not a folder (a trial folder's parent)");
    }
    if ((st.st_mode & S_IXOTH) == 0 && ::chmod(path.c_str(), (st.st_mode & 07777) | S_IXOTH) != 0) {
      return common::ErrnoError("make " + path + " searchable for trial users", errno);
    }
  }
  return Status::Ok();
}

}  // namespace

Status PrepareTrialFolder(const std::string& root, const std::string& dir, const RunAs& user) {
  common::UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return common::ErrnoError("open trial folder " + dir, errno);
  if (::fchown(fd.get(), user.uid, user.gid) != 0) {
    return common::ErrnoError("give trial folder " + dir + " to " + user.Describe(), errno);
  }
  if (::fchmod(fd.get(), 0750) != 0) return common::ErrnoError("chmod trial folder " + dir, errno);
  // The folders above it, up to and including root: searchable, so the user can reach it.
  return MakeParentsSearchable(root, dir);
}

Status ShareLogFolder(const std::string& root, const std::string& dir,
                      const std::vector<std::string>& files, const RunAs& user) {
  common::UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return common::ErrnoError("open log folder " + dir, errno);
  const uid_t keep = static_cast<uid_t>(-1);
  if (::fchown(fd.get(), keep, user.gid) != 0) {
    return common::ErrnoError("give log folder " + dir + " to gid " + std::to_string(user.gid),
                              errno);
  }
  for (const std::string& name : files) {
    if (::fchownat(fd.get(), name.c_str(), keep, user.gid, AT_SYMLINK_NOFOLLOW) != 0) {
      return common::ErrnoError(
          "give log file " + dir + "/" + name + " to gid " + std::to_string(user.gid), errno);
    }
  }
  return MakeParentsSearchable(root, dir);
}

}  // namespace triald::launcher
