#pragma once
// Test harness for the integration suites: a real triald on a temporary state directory, a
// control-socket client, and process-table checks (zombies, leftover trial processes).

#include <sys/resource.h>
#include <sys/types.h>

#include <boost/json.hpp>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/temp_dir.h"

namespace triald::testing {

class TestDaemon {
 public:
  explicit TestDaemon(std::string state_dir, int max_workers = 4);
  ~TestDaemon();  // kills the daemon if still running

  // Extra triald command-line arguments for the next Start().
  void AddArgs(std::vector<std::string> args) {
    extra_args_.insert(extra_args_.end(), args.begin(), args.end());
  }

  // The descriptor limit (RLIMIT_NOFILE) the next Start() gives triald; unchanged by default.
  void SetDescriptorLimit(rlim_t soft, rlim_t hard) {
    nofile_ = {soft, hard};
    set_nofile_ = true;
  }

  // Runs the next Start()'s triald as `uid` and `gid` (no supplementary groups) instead of as
  // this process's user; needs root.
  void RunAs(uid_t uid, gid_t gid) {
    run_as_uid_ = uid;
    run_as_gid_ = gid;
  }

  // Runs the next Start()'s triald in the network namespace whose file is `ns_path` (e.g.
  // /run/netns/NAME, as scripts/netns_lab.sh makes them); needs root. Its control socket is a
  // file, so the test still reaches it.
  void InNetns(std::string ns_path) { netns_ = std::move(ns_path); }

  // Starts triald and waits until it answers a ping.
  void Start();
  // SIGTERM and wait for exit; returns the exit status (waitpid form).
  int Stop(double timeout_s = 60);
  // SIGKILL and reap.
  void Kill();

  pid_t pid() const { return pid_; }
  std::string socket() const { return state_dir_ + "/triald.sock"; }
  const std::string& state_dir() const { return state_dir_; }
  std::string log() const;

  // One control request; fails the test on an error reply.
  boost::json::value Call(const std::string& verb, boost::json::object args = {});
  // Submits TOML text (path used for messages and relative paths); returns the study name.
  std::string Submit(const std::string& toml, const std::string& path);
  // Polls status until the study is no longer RUNNING and none of its trials runs; returns its
  // final status object.
  boost::json::object WaitStudy(const std::string& study, double timeout_s = 60);
  boost::json::array Trials(const std::string& study);

 private:
  std::string state_dir_;
  int max_workers_;
  std::vector<std::string> extra_args_;
  uid_t run_as_uid_ = static_cast<uid_t>(-1);  // -1: this process's user
  gid_t run_as_gid_ = static_cast<gid_t>(-1);
  std::string netns_;  // "": this process's network namespace
  pid_t pid_ = -1;
  struct rlimit nofile_ {};
  bool set_nofile_ = false;
};

// trialctl run in-process (ctl::RunTrialctl) against `socket`: its exit code and output.
struct Ctl {
  int code = -1;
  std::string out, err;
};
Ctl Trialctl(const std::string& socket, std::vector<std::string> args);

// Children of `parent` that are zombies.
std::vector<pid_t> ZombieChildren(pid_t parent);
// Live processes whose environment has TRIALD_STUDY=<study>.
std::vector<pid_t> ProcessesOfStudy(const std::string& study);
// Waits (polling, bounded) until ProcessesOfStudy(study) is empty; returns what is left.
std::vector<pid_t> WaitNoProcessesOfStudy(const std::string& study, double timeout_s = 10);

// Polls `done` every 50 ms until it is true or `timeout_s` passes; returns its last answer.
bool WaitFor(const std::function<bool()>& done, double timeout_s);

// Waits (polling, bounded) until process `pid` is gone (kill(pid, 0) fails: a zombie still
// counts); true when it is.
bool WaitPidGone(pid_t pid, double timeout_s = 10);

// The `fork_server` object of `status STUDY` once its state is "on" (polling, bounded); an
// empty object when it never is.
boost::json::object WaitForkServerOn(TestDaemon& d, const std::string& study, double timeout_s);

// The `status STUDY` reply once `done` holds for it (polling, bounded); fails the test case,
// showing the last reply and the daemon's log, when it never does. A test waits here for what
// the daemon will do instead of polling status by hand or sleeping.
boost::json::object WaitStatus(TestDaemon& d, const std::string& study,
                               const std::function<bool(const boost::json::object&)>& done,
                               double timeout_s = 30);

// The `trials STUDY` reply once `done` holds for it (polling, bounded); fails the test case as
// WaitStatus does.
boost::json::array WaitTrials(TestDaemon& d, const std::string& study,
                              const std::function<bool(const boost::json::array&)>& done,
                              double timeout_s = 30);

// The study's events, as `trialctl events STUDY` prints them, once they contain `text` (polling,
// bounded); fails the test case as WaitStatus does.
std::string WaitEvent(TestDaemon& d, const std::string& study, const std::string& text,
                      double timeout_s = 30);

// A sweep file for an exec objective `command` (a TOML array literal) with one float param.
std::string ExecSweep(const std::string& study, const std::string& command, int n_trials,
                      int parallelism, double timeout_s = 0, double kill_grace_s = 2,
                      const std::string& workdir = "");

// Counts trials per state name.
int CountState(const boost::json::array& trials, const std::string& state);

std::string BinDir();
// The example sweeps and objectives (config/examples).
std::string ExamplesDir();

// A file's whole text; fails the test case when it cannot be read.
std::string ReadTextFile(const std::string& path);
// Replaces the first "key = ..." line of `toml` with "key = value"; fails the test case when
// there is none.
std::string SetTomlKey(std::string toml, const std::string& key, const std::string& value);

// A local group made for one test case, removed when it ends; needs root (groupadd).
class ScratchGroup {
 public:
  ScratchGroup();
  ~ScratchGroup();
  ScratchGroup(const ScratchGroup&) = delete;
  ScratchGroup& operator=(const ScratchGroup&) = delete;
  const std::string& name() const { return name_; }
  gid_t gid() const { return gid_; }

 private:
  std::string name_;
  gid_t gid_ = 0;
};

// A local user made for one test case (a unique name, its own primary group, the given
// supplementary groups), removed with its home when it ends; needs root (useradd). With a
// `home_root`, its home is created there and its shell is /bin/sh; without one it has neither
// (a client or daemon identity only).
class ScratchUser {
 public:
  explicit ScratchUser(const std::string& home_root = "",
                       const std::vector<const ScratchGroup*>& groups = {});
  ~ScratchUser();
  ScratchUser(const ScratchUser&) = delete;
  ScratchUser& operator=(const ScratchUser&) = delete;
  const std::string& name() const { return name_; }
  const std::string& home() const { return home_; }
  uid_t uid() const { return uid_; }
  gid_t gid() const { return gid_; }

 private:
  std::string name_, home_;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
};

// Runs `body` in a forked child once `become` (e.g. setgroups/setgid/setuid) has succeeded, and
// returns the text `body` returned; the child exits 3 when `become` fails, and the caller's test
// fails on any exit but 0.
std::string OutputOfChild(const std::function<bool()>& become,
                          const std::function<std::string()>& body);

// Runs a shell command; its exit status (-1 when it did not exit) and its stdout, with stderr
// too unless `with_stderr` is false (then stderr is dropped).
std::pair<int, std::string> Shell(const std::string& cmd, bool with_stderr = true);

// Exports `study` to a new Optuna SQLite database `db` (trialctl export --format optuna) and
// checks with tests/integration/check_optuna_export.py that Optuna loads the same `n_trials`
// trials as the JSON export in the file `exported_json`.
void CheckOptunaExport(const std::string& socket, const std::string& study, const std::string& db,
                       const std::string& exported_json, int n_trials);

}  // namespace triald::testing
