#pragma once
// VforkSpawn: starts one process the way every trial and fork server starts. vfork, so the child
// borrows the daemon's memory until it execs (no page tables copied, no copy-on-write faults:
// on this project's test machines that doubles trial throughput over fork); in the child the
// standard streams, then ChildSetup's steps (child_setup.h), then execve. Nothing else: no
// execution context, no pidfd, no descriptor the daemon has to close afterwards (the Reaper
// waits for the process; process_launcher.h).
//
// Every signal is blocked in the calling thread from just before the vfork until the child has
// exec'd or exited, so no handler of the daemon runs in the child (on the daemon's memory);
// ChildSetup restores the default dispositions and unblocks them all before exec.
//
// Thread-safety: any thread; the caller is suspended until the child has exec'd or exited.

#include <sys/types.h>

#include <string>
#include <vector>

#include "daemon/launcher/child_setup.h"

namespace triald::launcher::internal {

struct SpawnStdio {
  int in = -1;   // becomes the child's 0
  int out = -1;  // its 1
  int err = -1;  // its 2
};

struct Spawned {
  pid_t pid = -1;  // > 0: the child has exec'd
  int error = 0;   // else the errno of what failed: vfork, a step of `setup` (its `step` says
                   // which; kFork: the vfork itself) or execve
  // The child's start time (common::ProcessStartTime's clock ticks) when the boot clock read
  // just before the vfork and just after it returned fall in one tick
  // (common::StartTimeBetween); 0: read it from /proc.
  uint64_t start_time = 0;
};

// Runs `executable` (a path; no search of PATH) with argv {executable, args...}, the
// environment `setup.envp` and `stdio` as its 0, 1 and 2.
Spawned VforkSpawn(const std::string& executable, const std::vector<std::string>& args,
                   SpawnStdio stdio, const ChildSetup& setup);

}  // namespace triald::launcher::internal
