#pragma once
// CappedLog: a per-trial output file of bounded size. The first `head_bytes` are written
// through as they arrive; after that only the last `tail_bytes` are kept in memory and written
// after an "[triald: N bytes omitted]" marker when the log is closed. A worker that floods its
// output therefore costs the daemon at most head + 2*tail bytes of disk and memory.
//
// Thread-safety: not thread-safe.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/fd.h"
#include "common/status.h"

namespace triald::launcher {

// Creates `dir` (and missing parents) as a folder of the daemon's: it must end up a real
// directory (not a symlink) owned by the daemon's uid, and is set to 0750 whatever the umask, so
// that nobody else (a trial running as another user included) can add, rename or replace files
// in it. Errors name the folder and what was wrong.
common::Status MakeLogDir(const std::string& dir);

class CappedLog {
 public:
  struct Options {
    size_t head_bytes = 1 << 20;
    size_t tail_bytes = 1 << 20;
  };

  // Creates or truncates `path` (a link is never followed), mode 0640 whatever the umask.
  static common::Result<std::unique_ptr<CappedLog>> Open(const std::string& path,
                                                         const Options& options);
  ~CappedLog();

  void Append(std::string_view data);
  // Writes the tail (if anything was omitted) and closes the file. Idempotent.
  common::Status Close();

  // The last `n` bytes appended (n <= tail_bytes, or everything when less was written).
  std::string Tail(size_t n) const;
  uint64_t total_bytes() const { return total_; }

 private:
  CappedLog(common::UniqueFd fd, const Options& options) : fd_(std::move(fd)), options_(options) {}

  common::UniqueFd fd_;
  Options options_;
  uint64_t total_ = 0;
  uint64_t head_written_ = 0;
  std::string tail_;  // the most recent bytes; trimmed to tail_bytes when it doubles
  common::Status write_error_;
};

}  // namespace triald::launcher
