#include "daemon/app/state_dir_modes.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "common/fd.h"
#include "daemon/model/records.h"

namespace triald::daemon {
using common::Status;
using common::UniqueFd;

namespace {

std::string Octal(mode_t mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

// Sets the mode (and group, when given) of the open `fd` naming `path`; logs a change.
Status Fix(int fd, const std::string& path, mode_t want, std::optional<gid_t> group,
           const common::Logger& log) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return common::ErrnoError("stat " + path, errno);
  if (group && st.st_gid != *group) {
    if (::fchown(fd, static_cast<uid_t>(-1), *group) != 0) {
      return common::ErrnoError("give " + path + " to gid " + std::to_string(*group), errno);
    }
    log->info("{}: group set to gid {} (was gid {})", path, *group, st.st_gid);
  }
  if ((st.st_mode & 07777) != want) {
    if (::fchmod(fd, want) != 0)
      return common::ErrnoError("chmod " + Octal(want) + " " + path, errno);
    log->warn("{}: mode {} fixed to {}", path, Octal(st.st_mode), Octal(want));
  }
  return Status::Ok();
}

// Opens `name` in `dir` without following a link; -1 with errno when it cannot.
int OpenNoFollow(int dir, const std::string& name, int flags) {
  return ::openat(dir, name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
}

// Removes o+r, o+w and g+w from `name` in `dir` when it is a folder of the daemon's (a trial
// folder given to its submitter is left as it is); true when it changed it.
bool Narrow(int dir, const char* name) {
  UniqueFd fd(OpenNoFollow(dir, name, O_RDONLY | O_DIRECTORY));
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || st.st_uid != ::geteuid()) return false;
  const mode_t want = st.st_mode & 07777 & ~mode_t{0026};
  return want != (st.st_mode & 07777) && ::fchmod(fd.get(), want) == 0;
}

// The study folders, and their trials/ and logs/, made before they were created 0750: nobody
// else may list a study's trial numbers.
void NarrowStudyFolders(int studies_fd, const std::string& studies, const common::Logger& log) {
  int listing = ::dup(studies_fd);
  if (listing < 0) return;
  DIR* d = ::fdopendir(listing);
  if (d == nullptr) {
    ::close(listing);
    return;
  }
  size_t narrowed = 0;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    narrowed += Narrow(studies_fd, e->d_name) ? 1 : 0;
    UniqueFd study(OpenNoFollow(studies_fd, e->d_name, O_RDONLY | O_DIRECTORY));
    if (!study.valid()) continue;
    for (const char* sub : {"trials", "logs"}) narrowed += Narrow(study.get(), sub) ? 1 : 0;
  }
  ::closedir(d);
  if (narrowed > 0) {
    log->warn("{}: {} study folders no longer readable by others (o-rw, g-w)", studies, narrowed);
  }
}

}  // namespace

mode_t StateDirMode(const StateDirAccess& access) {
  mode_t mode = access.group ? 0750 : 0700;
  if (access.others_traverse || access.trials_as_users) mode |= 0001;
  return mode;
}

Status SecureStateDir(const std::string& state_dir, const StateDirAccess& access,
                      const common::Logger& log) {
  const mode_t old_mask = ::umask(0);
  const mode_t mask = old_mask | 022;
  ::umask(mask);
  if (mask != old_mask) {
    log->info("umask {} raised to {}: nothing triald creates is group- or world-writable",
              Octal(old_mask), Octal(mask));
  }

  UniqueFd dir(::open(state_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir.valid()) return common::ErrnoError("open state directory " + state_dir, errno);
  TRIALD_RETURN_IF_ERROR(Fix(dir.get(), state_dir, StateDirMode(access), access.group, log));

  const mode_t folder_mode = (access.group ? 0750 : 0700) | (access.trials_as_users ? 0001 : 0);
  const std::string studies = state_dir + "/" + model::kStudiesFolder;
  if (::mkdirat(dir.get(), model::kStudiesFolder, folder_mode) != 0 && errno != EEXIST) {
    return common::ErrnoError("create " + studies, errno);
  }
  UniqueFd studies_fd(OpenNoFollow(dir.get(), model::kStudiesFolder, O_RDONLY | O_DIRECTORY));
  if (!studies_fd.valid()) return common::ErrnoError("open " + studies, errno);
  TRIALD_RETURN_IF_ERROR(Fix(studies_fd.get(), studies, folder_mode, access.group, log));
  NarrowStudyFolders(studies_fd.get(), studies, log);

  if (!access.sqlite) return Status::Ok();
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    const std::string name = std::string("triald.db") + suffix;
    const std::string path = state_dir + "/" + name;
    int flags = O_RDONLY;
    // An empty database file of the right mode: SQLite uses it as a new database, and creates
    // the WAL and SHM files with its mode.
    if (suffix[0] == '\0') flags = O_RDWR | O_CREAT;
    UniqueFd fd(::openat(dir.get(), name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0600));
    if (!fd.valid()) {
      if (errno == ENOENT) continue;
      return common::ErrnoError("open " + path, errno);
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return common::ErrnoError("stat " + path, errno);
    if (!S_ISREG(st.st_mode)) {
      return common::FailedPrecondition(path + " is not a regular file; refusing to use it");
    }
    TRIALD_RETURN_IF_ERROR(Fix(fd.get(), path, 0600, std::nullopt, log));
  }
  return Status::Ok();
}

}  // namespace triald::daemon
