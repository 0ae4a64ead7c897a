#include "daemon/control/trial_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "common/fd.h"

namespace triald::daemon {
using common::Result;
using common::UniqueFd;

namespace {

std::vector<std::string> SplitPath(const std::string& relative) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= relative.size()) {
    size_t slash = relative.find('/', start);
    if (slash == std::string::npos) slash = relative.size();
    if (slash > start) parts.push_back(relative.substr(start, slash - start));
    start = slash + 1;
  }
  return parts;
}

common::Status OpenError(const std::string& path, int err) {
  if (err == ENOENT) return common::NotFound(path + ": no such file");
  if (err == ELOOP) {
    return common::FailedPrecondition(path + " is a symbolic link; trial logs are never followed");
  }
  if (err == ENOTDIR) return common::FailedPrecondition(path + ": a component is not a folder");
  return common::ErrnoError("open " + path, err);
}

// Reads up to `n` bytes at `offset`; fewer when the file is shorter (it may shrink meanwhile).
Result<std::string> ReadAt(int fd, uint64_t offset, size_t n, const std::string& path) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd, out.data() + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return common::ErrnoError("read " + path, errno);
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return out;
}

}  // namespace

Result<TrialLogContent> ReadTrialLog(const std::string& state_dir, const std::string& relative,
                                     const TrialLogLimits& limits) {
  std::vector<std::string> parts = SplitPath(relative);
  if (parts.empty()) return common::InvalidArgument("empty trial log path");
  for (const std::string& p : parts) {
    if (p == "." || p == "..") {
      return common::InvalidArgument("trial log path \"" + relative + "\" has a \"" + p +
                                     "\" component");
    }
  }
  UniqueFd dir(::open(state_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return common::ErrnoError("open state directory " + state_dir, errno);
  std::string path = state_dir;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    path += "/" + parts[i];
    int fd = ::openat(dir.get(), parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return OpenError(path, errno);
    dir = UniqueFd(fd);
  }
  path += "/" + parts.back();
  // O_NONBLOCK: opening a FIFO (or a device) must not wait for a writer; O_NOCTTY: a terminal
  // never becomes the daemon's.
  UniqueFd file(::openat(dir.get(), parts.back().c_str(),
                         O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!file.valid()) return OpenError(path, errno);
  struct stat st {};
  if (::fstat(file.get(), &st) != 0) return common::ErrnoError("stat " + path, errno);
  if (!S_ISREG(st.st_mode)) {
    return common::FailedPrecondition(path + " is not a regular file; trial logs are only read " +
                                      "from files triald wrote");
  }
  if (st.st_uid != ::geteuid() || st.st_nlink != 1) {
    return common::FailedPrecondition(path + " is not a file triald wrote (owner uid " +
                                      std::to_string(st.st_uid) + ", " +
                                      std::to_string(st.st_nlink) + " links; expected uid " +
                                      std::to_string(::geteuid()) + " and 1 link)");
  }
  TrialLogContent out;
  out.size = static_cast<uint64_t>(st.st_size);
  const uint64_t cap = static_cast<uint64_t>(limits.head_bytes) + limits.tail_bytes;
  if (out.size <= cap) {
    TRIALD_ASSIGN_OR_RETURN(out.content,
                            ReadAt(file.get(), 0, static_cast<size_t>(out.size), path));
    return out;
  }
  TRIALD_ASSIGN_OR_RETURN(out.content, ReadAt(file.get(), 0, limits.head_bytes, path));
  TRIALD_ASSIGN_OR_RETURN(
      std::string tail, ReadAt(file.get(), out.size - limits.tail_bytes, limits.tail_bytes, path));
  out.omitted = out.size - limits.head_bytes - limits.tail_bytes;
  out.content += "\n[triald: " + std::to_string(out.omitted) + " bytes not shown]\n";
  out.content += tail;
  return out;
}

}  // namespace triald::daemon
