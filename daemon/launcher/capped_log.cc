#include "daemon/launcher/capped_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

namespace triald::launcher {

namespace {
// At least this much tail is kept even for a tiny tail cap, so that stderr_tail is useful.
constexpr size_t kMinTailBytes = 8 * 1024;
}  // namespace

common::Status MakeLogDir(const std::string& dir) {
  TRIALD_RETURN_IF_ERROR(common::MakeDirs(dir, 0750));
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return common::ErrnoError("stat " + dir, errno);
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) {
    return common::FailedPrecondition(
        "log folder " + dir + " is not a directory owned by uid " + std::to_string(::geteuid()) +
        " (a symlink, or someone else's); refusing to write trial logs there");
  }
  if ((st.st_mode & 07777) != 0750 && ::chmod(dir.c_str(), 0750) != 0) {
    return common::ErrnoError("chmod 0750 " + dir, errno);
  }
  return common::Status::Ok();
}

common::Result<std::unique_ptr<CappedLog>> CappedLog::Open(const std::string& path,
                                                           const Options& options) {
  // Never follows a link; O_NONBLOCK so that a FIFO without a reader fails (ENXIO) instead of
  // blocking; writes then block as usual (a regular file never waits).
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                  0640);
  if (fd < 0) return common::ErrnoError("open " + path, errno);
  common::UniqueFd owned(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return common::ErrnoError("stat " + path, errno);
  // 0640 whatever the umask (a device such as /dev/null keeps its mode).
  if (S_ISREG(st.st_mode) && (st.st_mode & 07777) != 0640 && ::fchmod(fd, 0640) != 0) {
    return common::ErrnoError("chmod " + path, errno);
  }
  TRIALD_RETURN_IF_ERROR(common::SetNonBlocking(fd, false));
  fd = owned.Release();
  return std::unique_ptr<CappedLog>(new CappedLog(common::UniqueFd(fd), options));
}

CappedLog::~CappedLog() { (void)Close(); }

void CappedLog::Append(std::string_view data) {
  total_ += data.size();
  if (head_written_ < options_.head_bytes && fd_.valid()) {
    size_t n = std::min<uint64_t>(data.size(), options_.head_bytes - head_written_);
    common::Status st = common::WriteAll(fd_.get(), data.data(), n);
    if (!st.ok() && write_error_.ok()) write_error_ = st;
    head_written_ += n;
  }
  size_t keep = std::max(options_.tail_bytes, kMinTailBytes);
  if (data.size() >= keep) {
    tail_.assign(data.substr(data.size() - keep));
  } else {
    tail_.append(data);
    if (tail_.size() > 2 * keep) tail_.erase(0, tail_.size() - keep);
  }
}

std::string CappedLog::Tail(size_t n) const {
  if (tail_.size() <= n) return tail_;
  return tail_.substr(tail_.size() - n);
}

common::Status CappedLog::Close() {
  if (!fd_.valid()) return write_error_;
  uint64_t beyond_head = total_ - head_written_;
  if (beyond_head > 0) {
    size_t tail_len = std::min<uint64_t>({beyond_head, options_.tail_bytes, tail_.size()});
    uint64_t omitted = beyond_head - tail_len;
    std::string out;
    if (omitted > 0) {
      out = "\n[triald: " + std::to_string(omitted) + " bytes omitted]\n";
    }
    out.append(tail_, tail_.size() - tail_len, tail_len);
    common::Status st = common::WriteAll(fd_.get(), out.data(), out.size());
    if (!st.ok() && write_error_.ok()) write_error_ = st;
  }
  fd_.Reset();
  return write_error_;
}

}  // namespace triald::launcher
