#pragma once
// The daemon's descriptor limit. Every trial costs the daemon a few descriptors (pipes, a
// pidfd, cgroup files) and every client connection one, so the soft RLIMIT_NOFILE a shell or
// service manager hands out (often 1024) is too low for a wide sweep with clients attached.
// At start the daemon raises its soft limit to the hard limit, which an unprivileged process
// may do. Trials inherit the raised limit.
//
// Thread-safety: reads and sets the process's limit; call once at start, before other threads.

#include <sys/resource.h>

#include "common/logging.h"
#include "common/status.h"

namespace triald::daemon {

struct DescriptorLimit {
  rlim_t before = 0;  // the soft limit at start
  rlim_t after = 0;   // the soft limit now (the hard limit, unless raising it failed)
  rlim_t hard = 0;
};

// Raises the soft RLIMIT_NOFILE to the hard limit and logs the change (info) or why it could
// not (warn). An error only when the limit cannot even be read.
common::Result<DescriptorLimit> RaiseDescriptorLimit(const common::Logger& log);

}  // namespace triald::daemon
