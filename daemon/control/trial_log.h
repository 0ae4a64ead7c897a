#pragma once
// Reading a trial's captured stdout/stderr for `trialctl logs`, safely whatever the trial did.
//
// The daemon writes the logs in a folder of its own (model::TrialLogDir), out of the trial's
// reach, but the reader does not rely on that alone: every path component below the state
// directory is opened with O_NOFOLLOW (a symlink anywhere is refused), the file with O_NONBLOCK
// (a FIFO cannot block the event loop) and fstat-checked to be a regular file owned by the
// daemon's own uid with a single link (a hard link to someone else's file is refused), and at
// most `head_bytes` + `tail_bytes` of it are read, whatever its size, with a marker saying how
// much was left out in between. So a request costs bounded memory and time.
//
// Thread-safety: a pure function of the file system; safe from any thread.

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace triald::daemon {

struct TrialLogLimits {
  size_t head_bytes = 4 << 20;
  size_t tail_bytes = 4 << 20;
};

struct TrialLogContent {
  std::string content;   // head, "[triald: N bytes not shown]" marker, tail (or the whole file)
  uint64_t size = 0;     // the file's size when it was read
  uint64_t omitted = 0;  // bytes left out between head and tail
};

// Reads STATE_DIR/`relative` (e.g. "studies/s/logs/3/stdout.log"; no "." or ".." components).
// NotFound when a component is missing; FailedPrecondition naming the path and what it is when
// it is a symlink, not a directory, not a regular file, not owned by the daemon or hard-linked.
common::Result<TrialLogContent> ReadTrialLog(const std::string& state_dir,
                                             const std::string& relative,
                                             const TrialLogLimits& limits);

}  // namespace triald::daemon
