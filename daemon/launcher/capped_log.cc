#include "daemon/launcher/capped_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
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
  return std::unique_ptr<CappedLog>(
      new CappedLog(common::UniqueFd(fd), options, S_ISREG(st.st_mode)));
}

uint64_t CappedLog::ReserveFor(uint64_t reserve, uint64_t fs_bytes) {
  if (reserve != kAutoReserve) return reserve;
  return std::clamp<uint64_t>(fs_bytes / 10, uint64_t{8} << 20, uint64_t{256} << 20);
}

bool CappedLog::Fits(size_t n, bool note) const {
  if (options_.reserve_bytes == 0 || !regular_) return true;
  struct statvfs vs {};
  if (::fstatvfs(fd_.get(), &vs) != 0) return true;  // a failed write is reported instead
  const uint64_t block = vs.f_frsize != 0 ? vs.f_frsize : vs.f_bsize;
  const uint64_t free_bytes = static_cast<uint64_t>(vs.f_bavail) * block;
  const uint64_t reserve =
      ReserveFor(options_.reserve_bytes, static_cast<uint64_t>(vs.f_blocks) * block);
  const uint64_t keep = note ? reserve / 4 : reserve;
  return free_bytes >= keep && free_bytes - keep >= n;
}

CappedLog::~CappedLog() { (void)Close(); }

void CappedLog::Append(std::string_view data) {
  total_ += data.size();
  if (head_written_ < options_.head_bytes && fd_.valid() && !starved_) {
    size_t n = std::min<uint64_t>(data.size(), options_.head_bytes - head_written_);
    if (Fits(n)) {
      common::Status st = common::WriteAll(fd_.get(), data.data(), n);
      if (!st.ok() && write_error_.ok()) write_error_ = st;
      head_written_ += n;
    } else {
      starved_ = true;
    }
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
    if (starved_) {
      // Nothing more is written after the reserve stopped the head, the tail included.
      out = "\n[triald: " + std::to_string(beyond_head) +
            " bytes not written: they would have left less free space on this file system than "
            "the reserve kept for the database]\n";
    } else {
      if (omitted > 0) out = "\n[triald: " + std::to_string(omitted) + " bytes omitted]\n";
      out.append(tail_, tail_.size() - tail_len, tail_len);
    }
    // The note that output was dropped may use three quarters of the reserve (the database
    // has used some of it meanwhile): it is what tells the user why the log stops, a few
    // hundred bytes per trial.
    if (Fits(out.size(), /*note=*/starved_)) {
      common::Status st = common::WriteAll(fd_.get(), out.data(), out.size());
      if (!st.ok() && write_error_.ok()) write_error_ = st;
    }
  }
  fd_.Reset();
  return write_error_;
}

}  // namespace triald::launcher
