#pragma once
// Running a trial as the user who submitted its study (a daemon running as root; see
// daemon/README.md, "Security").
//
// The launcher resolves the submitter on this host before it forks (LookUpRunAs: the passwd
// entry by the recorded name, else by uid, and the supplementary groups from getgrouplist),
// gives the trial folder to that user (PrepareTrialFolder) and, in the child between vfork and
// exec, drops to the user with setgroups, setgid and setuid, in that order: groups and gid
// can only be changed while still root, and setuid comes last because it gives up the right to
// change them. The environment's HOME, USER and LOGNAME come from the passwd entry
// (WithUserEnvironment). triald's state directory, database and socket stay the daemon's, and
// the trial's cgroup folder stays root's, so the trial can neither write them nor raise its
// own limits.
//
// Thread-safety: a RunAsCache is not thread-safe (the launcher's thread uses it). LookUpRunAs reads
// the user and group databases (NSS) and PrepareTrialFolder changes the file system; both are safe
// to call from any thread. WithUserEnvironment is pure.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "daemon/model/records.h"

namespace triald::launcher {

// The identity a trial runs under.
struct RunAs {
  uid_t uid = 0;
  gid_t gid = 0;              // the passwd entry's primary group
  std::vector<gid_t> groups;  // every group of the user (getgrouplist), gid included
  std::string name;
  std::string home;
  std::string Describe() const;  // "alice (uid 1001, gid 1001)"
};

// `submitter` on this host: its passwd entry by name when one was recorded (the same person on
// every node that shares the storage), else by uid. An error names the user when there is no
// entry (e.g. the account was removed after the study was submitted).
common::Result<RunAs> LookUpRunAs(const model::Submitter& submitter);

// LookUpRunAs for a launcher that starts many trials of one submitter: an answer is reused for
// `ttl` after it was looked up (a sweep of short trials would otherwise read the user and group
// databases at every start), so a change to the user's groups or passwd entry reaches the trials
// started from `ttl` after it on. Failed lookups are not kept: each asks again. At most
// `max_entries` users are kept (the oldest answer goes first).
class RunAsCache {
 public:
  using Clock = std::chrono::steady_clock;
  using LookUp = std::function<common::Result<RunAs>(const model::Submitter&)>;
  explicit RunAsCache(Clock::duration ttl = std::chrono::seconds(2), size_t max_entries = 64,
                      LookUp look_up = LookUpRunAs);
  common::Result<RunAs> Get(const model::Submitter& submitter,
                            Clock::time_point now = Clock::now());

 private:
  struct Entry {
    RunAs user;
    Clock::time_point looked_up;
  };
  Clock::duration ttl_;
  size_t max_entries_;
  LookUp look_up_;
  std::map<std::pair<std::string, int64_t>, Entry> entries_;  // by (name, uid) as submitted
};

// Runs `check` with `user`'s rights and returns its Status: in a child process forked for it,
// which drops to the user (setgroups, setgid, setuid) before calling it, so every file it opens
// or stats is opened as that user would (a root daemon checking a sweep's files learns nothing
// about files the submitter could not read: daemon/README.md, "Security"). The child is killed,
// and kUnavailable returned, after `timeout_s` (a hung network file system); a child that dies
// any other way is kInternal. Needs root (kPermissionDenied otherwise). Blocks its caller up to
// `timeout_s`.
//
// Who reaps the child: kWaitHere waits for it here (a process with no reaper of its own); in
// the daemon, whose Reaper (reaper.h) reaps every child with wait4(-1) and must be the only one
// to wait, kByProcessReaper leaves it to that Reaper, so the call may run on any thread (a
// waitpid here would race the Reaper, and a pid reaped there and reused by a trial could have
// this thread take the trial's exit). The answer then proves itself whole (it carries its own
// length); the child is killed on timeout only while it still holds its end of the pipe, so
// that pid is still its own.
enum class ChildReaping { kWaitHere, kByProcessReaper };
common::Status CallAsUser(const RunAs& user, const std::function<common::Status()>& check,
                          double timeout_s, ChildReaping reaping = ChildReaping::kWaitHere);

// `env` ("KEY=VALUE") with HOME, USER and LOGNAME set from `user`.
std::vector<std::string> WithUserEnvironment(std::vector<std::string> env, const RunAs& user);

// Gives the trial folder `dir` (already created by the daemon) to `user`, mode 0750, without
// following a link, and makes the folders from `root` (inclusive) down to `dir`'s parent
// searchable by others (o+x, not readable), so the user can reach the folder but not list or
// change anything else in the state directory. Folders outside `root` are left alone.
common::Status PrepareTrialFolder(const std::string& root, const std::string& dir,
                                  const RunAs& user);

// Lets `user` read the daemon's log folder `dir` (already created by the daemon, 0750) and the
// `files` in it (0640) by giving them `user`'s group; their owner stays the daemon, so the
// trial can neither write nor replace them (daemon/control/trial_log.cc refuses a log file
// that is not the daemon's). The folders from `root` down to `dir`'s parent are made
// searchable by others as in PrepareTrialFolder. Links are not followed.
common::Status ShareLogFolder(const std::string& root, const std::string& dir,
                              const std::vector<std::string>& files, const RunAs& user);

}  // namespace triald::launcher
