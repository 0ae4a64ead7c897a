#pragma once
// Processes of a trial that left its process group (a `setsid` daemon, double-forked so that it
// is no one's child). Without a cgroup nothing holds them, but the daemon is a child subreaper
// (reaper.h): once the process that forked one exits, the kernel makes it a child of the daemon.
// It keeps the trial's environment unless it clears it, so its TRIALD_TRIAL_DIR names the trial.
// The launcher counts such adopted processes as part of the trial in process-group mode: the
// trial is not over while one lives, and they are signalled with the group.
//
// Reads /proc/self/task/*/children (CONFIG_PROC_CHILDREN, on in Debian's and most distribution
// kernels; without it the list is empty and such a process lives on until the next triald start
// kills it by its TRIALD_TRIAL_DIR). A process that cleared its environment is not found.
//
// Thread-safety: stateless; safe from any thread.

#include <sys/types.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace triald::launcher {

// The value of `key` in /proc/PID/environ ("" when absent or unreadable, e.g. a zombie's).
std::string EnvironValue(pid_t pid, std::string_view key);

// The live children of this process whose environment has TRIALD_TRIAL_DIR=trial_dir. Children
// for which `known(pid)` is true (the trials' own main processes) are skipped unread: reading a
// process's environ costs tens of microseconds, and without escapees every child is known.
std::vector<pid_t> AdoptedProcessesOf(const std::string& trial_dir,
                                      const std::function<bool(pid_t)>& known);

}  // namespace triald::launcher
