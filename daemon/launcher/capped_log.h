#pragma once
// CappedLog: a per-trial output file of bounded size. The first `head_bytes` are written
// through as they arrive; after that only the last `tail_bytes` are kept in memory and written
// after an "[triald: N bytes omitted]" marker when the log is closed. A worker that floods its
// output therefore costs the daemon at most head + 2*tail bytes of disk and memory.
//
// Logs never take the database's last bytes: a write that would leave less than the reserve
// free on the log's file system (fstatvfs before each write) is not made, the head stops there,
// and the log ends with "[triald: N bytes not written: ...]" while a quarter of the reserve is
// still free. The database
// lives on the same file system (the state directory), so the reserve is what keeps trial
// results storable when trials flood their output onto a small disk.
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
  // Options::reserve_bytes: a tenth of the log's file system, at least 8 MiB (SQLite's WAL grows
  // to 4 MiB between checkpoints), at most 256 MiB.
  static constexpr uint64_t kAutoReserve = UINT64_MAX;
  struct Options {
    size_t head_bytes = 1 << 20;
    size_t tail_bytes = 1 << 20;
    // The free space a write must leave on the log's file system (0: none; checked for
    // regular files only).
    uint64_t reserve_bytes = kAutoReserve;
  };
  // The reserve that Options::reserve_bytes `reserve` means on a file system of `fs_bytes`.
  static uint64_t ReserveFor(uint64_t reserve, uint64_t fs_bytes);

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
  CappedLog(common::UniqueFd fd, const Options& options, bool regular)
      : fd_(std::move(fd)), options_(options), regular_(regular) {}
  // Whether `n` more bytes leave the reserve free (a `note` that output was dropped: a quarter
  // of it); true when it cannot be known.
  bool Fits(size_t n, bool note = false) const;

  common::UniqueFd fd_;
  Options options_;
  bool regular_ = true;
  bool starved_ = false;  // a write was not made for the reserve: the head ended there
  uint64_t total_ = 0;
  uint64_t head_written_ = 0;
  std::string tail_;  // the most recent bytes; trimmed to tail_bytes when it doubles
  common::Status write_error_;
};

}  // namespace triald::launcher
