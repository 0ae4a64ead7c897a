#pragma once
// Cgroups for trials: the daemon's own cgroup subtree, in which every trial gets a leaf.
//
// CgroupTree::Open detects, it does not assume. It finds the cgroup v2 mount in mountinfo
// (/sys/fs/cgroup on unified hosts, /sys/fs/cgroup/unified on hybrid ones) and the daemon's own
// cgroup ("0::/PATH" in /proc/self/cgroup), then picks the parent of its trial cgroups:
//   - own cgroup is the hierarchy's root (a hybrid host, a plain root shell): that root;
//   - otherwise (systemd with Delegate=yes): the daemon first moves itself into the leaf
//     OWN/daemon, because a cgroup with processes may not enable controllers for children (the
//     no-internal-process rule), and the trials go under the sibling OWN/trials.
// The hierarchy counts as writable when a trial cgroup can be made there (a probe is). The
// memory and pids controllers are enabled down to the parent where the ancestors allow it
// (they stay off otherwise; the launcher then falls back to RLIMIT_AS for memory). Where v2 has
// no pids controller but a v1 pids hierarchy is mounted and writable (hybrid hosts), a
// parallel v1 leaf carries pids.max.
//
// Resource accounting (Options::resource_accounting, on by default): where v2 has no memory
// controller but a v1 memory hierarchy is mounted and writable (hybrid hosts), each trial also
// gets a parallel v1 memory leaf of the same name, for its memory.max_usage_in_bytes only (no
// limit is set there; memory_limit stays RLIMIT_AS). ReadResources() reads what the leaves
// counted once the trial is over: ReadLeafResources below says which file gives what. Making and
// removing a v1 memory cgroup costs the kernel far more than the trial's other cgroup work, so
// these leaves are not made per trial: a thread of the tree's own keeps a few ready and
// recycles those whose trial is over (watermark reset; what stays charged from the previous
// trial, at most 16 MiB, is that leaf's baseline, subtracted from the next peak; a leaf with
// more is removed and replaced). See LeafMaker in cgroup.cc. They are named
// triald-<hash>-<daemon pid>-m<n>.
//
// The v2 leaves are not made or removed on the event loop either: from the first CreateTrial on,
// a second LeafMaker thread keeps up to four empty leaves ready, their cgroup.procs open
// (CreateTrial takes one and writes the trial's limits into it; it makes one itself only when
// none is ready) and takes back the leaves of trials that are over (Remove() hands the leaf and
// its cgroup.procs over, emptied, and returns; the thread picks them up within 50 ms). Where the
// trials' parent has no memory controller (nothing of a trial stays charged to its leaf), a
// leaf left as CreateTrial made it is reused by a later trial, its pids.max reset and its CPU
// time so far that trial's baseline: the first process exec'd in a never-used cgroup costs the
// kernel far more than one in a used cgroup, while the event loop waits for the vfork. Where the
// memory controller is on, each v2 leaf serves one trial and is removed (memory.peak and
// memory.events cannot be reset). Which leaf is reused, and why, is in LeafMaker (cgroup.cc).
//
// Trial cgroups are named triald-<hash of the state directory>-<daemon pid>-<sequence>, flat
// under the parent (no per-daemon folder that a SIGKILLed daemon would leave behind): a
// restarted daemon finds what its predecessor on the same state directory left
// (CleanLeftovers), two daemons never share a name, and an empty one whose daemon is dead is
// removed by whichever daemon starts next.
//
// A TrialCgroup is one trial's leaf. The launcher opens it before
// the vfork; the child writes "0" to procs_fd() (and pids_v1_procs_fd(), memory_v1_procs_fd())
// in its setup hook, so
// everything the trial ever forks, setsid or not, stays inside. The trial is over when
// Populated() is false; Kill() writes cgroup.kill (Linux >= 5.14; SIGKILL to every listed pid
// before that). Remove() has the leaf deleted once it is empty (on the maker's thread; a leaf
// still busy is tried again for 50 ms, then left to the next daemon start, with a warning).
//
// Thread-safety: none; the daemon uses it from its event-loop thread (the leaf makers' threads
// touch only the leaves they hold, through their own locks).

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/logging.h"
#include "common/status.h"
#include "daemon/model/records.h"

namespace triald::launcher {

class LeafMaker;

struct CgroupLimits {
  uint64_t memory_max_bytes = 0;  // 0: none
  int64_t pids_max = 0;           // 0: none
};

class TrialCgroup {
 public:
  ~TrialCgroup();  // closes the descriptors; Remove() is explicit

  const std::string& path() const { return path_; }
  // cgroup.procs of the v2 leaf, write-only, close-on-exec: the child writes "0" to it.
  int procs_fd() const { return procs_fd_.get(); }
  // The same for the v1 pids leaf; -1 when there is none.
  int pids_v1_procs_fd() const { return pids_v1_procs_fd_.valid() ? pids_v1_procs_fd_.get() : -1; }
  // The same for the v1 memory leaf (accounting only); -1 when there is none.
  int memory_v1_procs_fd() const {
    return memory_v1_procs_fd_.valid() ? memory_v1_procs_fd_.get() : -1;
  }
  const std::string& memory_v1_path() const { return memory_v1_path_; }
  bool memory_limited() const { return memory_limited_; }
  bool pids_limited() const { return pids_limited_; }

  // False once no process is left in the leaf (cgroup.events "populated 0"). An unreadable
  // events file counts as empty (the leaf is gone).
  bool Populated() const;
  // Sends `sig` to every process listed in the leaf.
  void Signal(int sig) const;
  // Kills everything in the leaf: cgroup.kill where the kernel has it, else SIGKILL to each.
  void Kill() const;
  // The oom_kill count of memory.events (0 without the memory controller).
  uint64_t OomKills() const;
  // What the leaves counted (ReadLeafResources); call once the trial is over and before
  // Remove(). Empty when the tree was opened without resource accounting.
  model::TrialResources ReadResources() const;
  // Removes the leaf (and the v1 leaves); fails with EBUSY while processes remain.
  common::Status Remove();

 private:
  friend class CgroupTree;
  TrialCgroup() = default;

  std::string path_;
  std::string pids_v1_path_;
  std::string memory_v1_path_;
  common::UniqueFd procs_fd_;
  common::UniqueFd pids_v1_procs_fd_;
  common::UniqueFd memory_v1_procs_fd_;
  uint64_t memory_v1_baseline_ = 0;             // bytes charged to it before the trial
  uint64_t cpu_usec_baseline_ = 0;              // usage_usec of a reused v2 leaf before it
  std::shared_ptr<LeafMaker> maker_;            // made the v2 leaf; reuses or removes it
  std::shared_ptr<LeafMaker> memory_v1_maker_;  // takes the v1 memory leaf back
  bool accounting_ = false;
  bool has_kill_ = false;
  bool memory_limited_ = false;
  bool pids_limited_ = false;
  bool removed_ = false;
};

class CgroupTree {
 public:
  struct Options {
    std::string state_dir;  // names the subtree (triald-<hash>)
    common::Logger logger;
    // Seams for tests; the defaults are the real files.
    std::string mountinfo_path = "/proc/self/mountinfo";
    std::string self_cgroup_path = "/proc/self/cgroup";
    // Measure each trial (ReadResources); false: no v1 memory leaf, no reads.
    bool resource_accounting = true;
  };

  // The daemon's trial subtree, created (or found) and prepared. kUnavailable when there is no
  // writable cgroup v2 hierarchy; the message says what was missing.
  static common::Result<std::unique_ptr<CgroupTree>> Open(const Options& options);

  // Kills what a previous daemon on the same state directory left in its trial cgroups (e.g. a
  // setsid escapee of a trial it was running when it was SIGKILLed) and removes those cgroups,
  // and removes empty trial cgroups of dead daemons. Returns how many of this state
  // directory's leftover cgroups were found. Call before any trial starts.
  int CleanLeftovers();

  common::Result<std::unique_ptr<TrialCgroup>> CreateTrial(const CgroupLimits& limits);

  // "cgroup v2 at PARENT/triald-<hash>-* (controllers: memory pids; cgroup.kill)", naming the
  // v1 pids parent, the reuse of leaves and the RLIMIT_AS fallback where they apply.
  std::string Describe() const;
  const std::string& parent() const { return parent_; }
  bool has_memory() const { return has_memory_; }
  bool has_pids() const { return has_pids_ || !pids_v1_parent_.empty(); }
  bool has_kill() const { return has_kill_; }
  // The v1 memory cgroup holding the accounting leaves; "" when there is none.
  const std::string& memory_v1_parent() const { return memory_v1_parent_; }
  bool resource_accounting() const { return accounting_; }

 private:
  CgroupTree() = default;

  common::Logger logger_;
  std::string parent_;            // v2 cgroup holding the trial cgroups
  std::string prefix_;            // "triald-<hash>-"
  std::string pids_v1_parent_;    // v1 pids cgroup holding the v1 leaves, "" when none
  std::string memory_v1_parent_;  // v1 memory cgroup holding the accounting leaves, "" when none
  std::shared_ptr<LeafMaker> memory_v1_maker_;  // set with memory_v1_parent_
  std::shared_ptr<LeafMaker> leaf_maker_;       // the v2 leaves; from the first CreateTrial
  bool accounting_ = false;
  bool has_memory_ = false;
  bool has_pids_ = false;
  bool has_kill_ = false;
};

// Parses the text of /proc/self/mountinfo and returns the mount point of the cgroup2 file
// system ("" when none). Exposed for tests.
std::string FindCgroup2Mount(const std::string& mountinfo);
// The mount point of the v1 hierarchy carrying `controller` ("" when none).
std::string FindCgroup1Mount(const std::string& mountinfo, const std::string& controller);
// From the text of /proc/self/cgroup: the v2 path ("0::/PATH") or a v1 controller's path.
std::string OwnCgroupPath(const std::string& proc_cgroup, const std::string& v1_controller = "");

// What a trial's cgroup leaves counted, read from the folders of its v2 leaf (`v2_dir`) and of
// its v1 memory leaf (`memory_v1_dir`, "" when none), after the trial's processes are gone:
//   - peak memory: `memory.peak` of the v2 leaf (memory controller on, Linux >= 5.19), memory
//     source "cgroup2 memory.peak"; else `memory.max_usage_in_bytes` of the v1 leaf less
//     `memory_v1_baseline` (what a recycled leaf held before the trial), source
//     "cgroup1 memory.max_usage_in_bytes". Both count every page charged to the trial, page
//     cache and kernel memory included.
//   - CPU time: usage_usec of the v2 leaf's `cpu.stat` (present in every v2 cgroup, controller
//     or not) less `cpu_usec_baseline` (what a reused leaf had counted before the trial), source
//     "cgroup2 cpu.stat".
// A file that is missing or does not parse leaves its fields unset (the caller falls back to
// getrusage). wall_s and peak_gpu_memory_bytes are never set here. Exposed for tests.
model::TrialResources ReadLeafResources(const std::string& v2_dir, const std::string& memory_v1_dir,
                                        uint64_t memory_v1_baseline = 0,
                                        uint64_t cpu_usec_baseline = 0);

}  // namespace triald::launcher
