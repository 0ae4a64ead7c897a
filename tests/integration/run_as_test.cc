// Trials run as their submitters, and only a study's submitter, triald's uid and root may
// change it (daemon/README.md, "Security"), against a real triald and clients that really are
// other users: scratch users and groups made with useradd/groupadd for one case and removed
// after it, each client a child process that has become one of them (initgroups, setgid,
// setuid), so the daemon sees them through SO_PEERCRED like any other local user. A root
// daemon, and a daemon run as a scratch user with and without --trust-group.
//
// Every case needs root (to add users and switch to them); without it they are skipped
// (TRIALD_SKIP: CTest reports them as skipped).
#include "daemon/launcher/run_as.h"

#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "common/fd.h"
#include "daemon/ctl/client.h"
#include "tests/integration/harness.h"
#include "tests/support/skip.h"

namespace triald::testing {
namespace json = boost::json;

namespace {

bool RunAsRoot() { return ::geteuid() == 0; }

// One request's answer: "ok" or the error code's name, and the reply or error text.
struct Reply {
  std::string code;
  std::string text;
};

// Sends each request (verb, args) on its own connection from a child process that has become
// `user` (all its groups, from the group database); returns one Reply per request.
std::vector<Reply> AsUser(const ScratchUser& user, const std::string& socket,
                          const std::vector<std::pair<std::string, json::object>>& requests) {
  const std::string all = OutputOfChild(
      [&] {
        return ::initgroups(user.name().c_str(), user.gid()) == 0 && ::setgid(user.gid()) == 0 &&
               ::setuid(user.uid()) == 0;
      },
      [&] {
        json::array out;
        for (const auto& [verb, args] : requests) {
          common::Result<ctl::Client> c = ctl::Client::Connect(socket);
          common::Result<json::value> r =
              c.ok() ? c->Call(verb, args) : common::Result<json::value>(c.status());
          json::object reply;
          reply["code"] = r.ok() ? "ok" : common::CodeName(r.status().code());
          reply["text"] = r.ok() ? json::serialize(*r) : r.status().message();
          out.push_back(std::move(reply));
        }
        return json::serialize(out);
      });
  std::vector<Reply> replies;
  const json::value parsed = json::parse(all);
  for (const json::value& v : parsed.as_array()) {
    replies.push_back(
        {std::string(v.at("code").as_string()), std::string(v.at("text").as_string())});
  }
  REQUIRE(replies.size() == requests.size());
  return replies;
}

// What a trial saw of itself, written to id.txt in its trial folder by the probe script:
// "uid gid groups...", HOME|USER|LOGNAME, whether it could write triald's database, its
// state directory and its own cgroup's control files, and whether it could read and write its
// stdout.log in the daemon's log folder (studies/S/logs/N beside studies/S/trials/N).
constexpr const char kProbe[] = R"sh(#!/bin/sh
state="$1"
{
  echo "$(id -u) $(id -g) $(id -G)"
  echo "$HOME|$USER|$LOGNAME"
  if true >> "$state/triald.db" 2>/dev/null; then echo db=writable; else echo db=denied; fi
  if touch "$state/planted" 2>/dev/null; then echo state=writable; else echo state=denied; fi
  cg=$(sed -n 's/^0:://p' /proc/self/cgroup)
  if echo 0 > "/sys/fs/cgroup$cg/cgroup.procs" 2>/dev/null; then echo cg=writable; else echo cg=denied; fi
  log="$(dirname "$(dirname "$TRIALD_TRIAL_DIR")")/logs/$(basename "$TRIALD_TRIAL_DIR")/stdout.log"
  if cat "$log" >/dev/null 2>&1; then r=readable; else r=unreadable; fi
  if true >> "$log" 2>/dev/null; then w=writable; else w=denied; fi
  echo "log=$r,$w"
} > "$TRIALD_TRIAL_DIR/id.tmp"
mv "$TRIALD_TRIAL_DIR/id.tmp" "$TRIALD_TRIAL_DIR/id.txt"  # appears complete, never half-written
echo '{"type":"final","value":1}' >&3
exec sleep "${2:-0}"
)sh";

// A test folder every scratch user can reach, with the probe in it.
struct Site {
  TempDir dir;
  std::string probe;
  Site() {
    ::chmod(dir.path().c_str(), 0755);
    probe = dir.Write("probe.sh", kProbe, 0755);
  }
  // A submit request's arguments: `n_trials` probe trials, each sleeping `sleep_s` after it
  // wrote id.txt.
  json::object Sweep(const std::string& study, const std::string& state_dir, int n_trials = 1,
                     int sleep_s = 0) {
    std::string toml = ExecSweep(study,
                                 "[\"/bin/sh\", \"" + probe + "\", \"" + state_dir + "\", \"" +
                                     std::to_string(sleep_s) + "\"]",
                                 n_trials, 1);
    std::string path = dir.Write(study + ".toml", toml);
    return {{"sweep", toml}, {"path", path}};
  }
};

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    out.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return out;
}

// Waits (bounded) for a file to appear; its content.
std::string WaitForFile(const std::string& path, double timeout_s = 30) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    // The probe renames a finished file into place: once there, it is complete.
    if (::access(path.c_str(), F_OK) == 0) return ReadTextFile(path);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  FAIL("no " << path << " after " << timeout_s << " s");
  return "";
}

}  // namespace

TEST_CASE("run as submitter: a root triald runs each trial as the user who submitted it",
          "[security][run-as][integration]") {
  if (!RunAsRoot()) TRIALD_SKIP("needs root to add scratch users and switch to them");
  Site site;
  ScratchGroup team, extra;
  ScratchUser alice(site.dir.path(), {&team, &extra});
  TestDaemon daemon(site.dir.File("state"));
  daemon.AddArgs({"--socket-group", team.name()});
  daemon.Start();
  const std::string state = daemon.state_dir();

  std::vector<Reply> r = AsUser(alice, daemon.socket(), {{"submit", site.Sweep("mine", state)}});
  INFO(r[0].text);
  REQUIRE(r[0].code == "ok");
  json::object done = daemon.WaitStudy("mine");
  CHECK(done.at("complete").as_int64() == 1);

  const std::string trial_dir = state + "/studies/mine/trials/0";
  std::vector<std::string> seen = Lines(ReadTextFile(trial_dir + "/id.txt"));
  REQUIRE(seen.size() == 6);
  // uid, gid, then every group of the user: its own, the team and the extra group.
  const std::string ids = seen[0] + " ";
  CHECK(ids.rfind(std::to_string(alice.uid()) + " " + std::to_string(alice.gid()) + " ", 0) == 0);
  CHECK_THAT(ids, Catch::Contains(" " + std::to_string(team.gid()) + " "));
  CHECK_THAT(ids, Catch::Contains(" " + std::to_string(extra.gid()) + " "));
  CHECK_THAT(ids, !Catch::Contains(" 0 "));  // root's group is not among them
  CHECK(seen[1] == alice.home() + "|" + alice.name() + "|" + alice.name());
  // triald's database, state directory and the trial's cgroup are not the trial's to write.
  CHECK(seen[2] == "db=denied");
  CHECK(seen[3] == "state=denied");
  CHECK(seen[4] == "cg=denied");
  // Its log files are the daemon's: it may read them, never write or replace them.
  CHECK(seen[5] == "log=readable,denied");
  CHECK(::access((state + "/planted").c_str(), F_OK) != 0);

  // The trial folder is the user's; the log folder beside it stays the daemon's, readable by
  // the user's group.
  struct stat st {};
  REQUIRE(::stat(trial_dir.c_str(), &st) == 0);
  CHECK(st.st_uid == alice.uid());
  CHECK(st.st_gid == alice.gid());
  CHECK((st.st_mode & 07777) == 0750);
  const std::string log_dir = state + "/studies/mine/logs/0";
  REQUIRE(::lstat(log_dir.c_str(), &st) == 0);
  CHECK(st.st_uid == 0);
  CHECK(st.st_gid == alice.gid());
  CHECK((st.st_mode & 07777) == 0750);
  for (const char* name : {"/stdout.log", "/stderr.log"}) {
    INFO(name);
    REQUIRE(::lstat((log_dir + name).c_str(), &st) == 0);
    CHECK(st.st_uid == 0);
    CHECK(st.st_gid == alice.gid());
    CHECK((st.st_mode & 07777) == 0640);
  }
  // The state directory: others may pass through it, never list it.
  REQUIRE(::stat(state.c_str(), &st) == 0);
  CHECK((st.st_mode & 0007) == 0001);
  REQUIRE(::stat((state + "/triald.db").c_str(), &st) == 0);
  CHECK(st.st_uid == 0);

  // `studies` and `status` name the submitter, in JSON and as text.
  json::value status = daemon.Call("status", {{"study", "mine"}});
  CHECK(status.at("submitter").at("uid").as_int64() == alice.uid());
  CHECK(status.at("submitter").at("name").as_string() == alice.name());
  json::value studies = daemon.Call("studies");
  CHECK(studies.as_array()[0].at("submitter").at("name").as_string() == alice.name());
  Ctl text = Trialctl(daemon.socket(), {"studies"});
  CHECK(text.code == 0);
  CHECK_THAT(text.out, Catch::Contains("SUBMITTER"));
  CHECK_THAT(text.out,
             Catch::Contains(alice.name() + " (uid " + std::to_string(alice.uid()) + ")"));
  text = Trialctl(daemon.socket(), {"status", "mine"});
  CHECK_THAT(text.out, Catch::Contains("submitted by " + alice.name() + " (uid " +
                                       std::to_string(alice.uid()) + ")"));

  // A study root submits runs as root, as before.
  daemon.Call("submit", site.Sweep("roots", state));
  daemon.WaitStudy("roots");
  CHECK(Lines(ReadTextFile(state + "/studies/roots/trials/0/id.txt"))[0].rfind("0 0 ", 0) == 0);
  CHECK(daemon.Call("status", {{"study", "roots"}}).at("submitter").at("uid").as_int64() == 0);
}

TEST_CASE("run as submitter: a root triald checks a sweep's files with the submitter's rights",
          "[security][run-as][integration]") {
  if (!RunAsRoot()) TRIALD_SKIP("needs root to add scratch users and switch to them");
  Site site;
  ScratchGroup team;
  ScratchUser alice(site.dir.path(), {&team});
  // Root's secrets: a 0700 folder with a Python file, an executable and a folder in it.
  const std::string secret = site.dir.File("secret");
  REQUIRE(::mkdir(secret.c_str(), 0700) == 0);
  site.dir.Write("secret/x.py", "API_TOKEN = 'do-not-tell'\n\ndef objective(trial):\n  return 1\n");
  site.dir.Write("secret/train.sh", "#!/bin/sh\necho '{\"type\":\"final\",\"value\":1}' >&3\n",
                 0755);
  REQUIRE(::mkdir((secret + "/work").c_str(), 0755) == 0);
  TestDaemon daemon(site.dir.File("state"));
  daemon.AddArgs({"--socket-group", team.name()});
  daemon.Start();

  auto python = [&](const std::string& name, const std::string& function) {
    std::string toml = "[study]\nname = \"" + name +
                       "\"\nn_trials = 1\n\n[objective]\nkind = \"python\"\n"
                       "python = \"/usr/bin/python3\"\nfunction = \"" +
                       function + "\"\n";
    return json::object{{"sweep", toml}, {"path", site.dir.Write(name + ".toml", toml)}};
  };
  auto exec = [&](const std::string& name, const std::string& command, const std::string& workdir) {
    std::string toml = "[study]\nname = \"" + name +
                       "\"\nn_trials = 1\n\n[objective]\nkind = \"exec\"\ncommand = [\"" + command +
                       "\"]\n" + (workdir.empty() ? "" : "workdir = \"" + workdir + "\"\n") +
                       "\n[space.x]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n";
    return json::object{{"sweep", toml}, {"path", site.dir.Write(name + ".toml", toml)}};
  };
  std::vector<Reply> r = AsUser(alice, daemon.socket(),
                                {{"submit", python("a", secret + "/x.py:API_TOKEN")},
                                 {"submit", python("b", secret + "/missing.py:API_TOKEN")},
                                 {"submit", python("c", secret + "/x.py:NO_SUCH_NAME")},
                                 {"submit", exec("d", secret + "/train.sh", "")},
                                 {"submit", exec("e", "/bin/true", secret + "/work")},
                                 {"submit", exec("f", "/bin/true", secret + "/no-such-folder")}});
  for (const Reply& reply : r) {
    INFO(reply.text);
    CHECK(reply.code != "ok");
    // Nothing about what the folder holds: never "bound to a literal", never the token.
    CHECK_THAT(reply.text, !Catch::Contains("literal") && !Catch::Contains("do-not-tell"));
  }
  // Whether the file (or name) exists or not, the same refusal: the folder cannot be searched.
  auto same_but_names = [](const std::string& text) {
    return std::regex_replace(std::regex_replace(text, std::regex("secret/[^\"; ]*"), "secret/X"),
                              std::regex("/[a-f]\\.toml"), "/S.toml");
  };
  CHECK(same_but_names(r[0].text) == same_but_names(r[1].text));
  CHECK(same_but_names(r[0].text) == same_but_names(r[2].text));
  CHECK_THAT(r[0].text, Catch::Contains("ermission denied"));
  CHECK_THAT(r[3].text, Catch::Contains("is not an executable file"));
  CHECK(same_but_names(r[4].text) == same_but_names(r[5].text));
  CHECK(daemon.Call("studies").as_array().empty());
  // Root, who can read them, is checked with its own rights as before.
  json::value ok = daemon.Call("submit", exec("g", secret + "/train.sh", secret + "/work"));
  CHECK(daemon.WaitStudy("g").at("complete").as_int64() == 1);
}

TEST_CASE("run as submitter: only a study's submitter and root may cancel or enqueue on it",
          "[security][run-as][integration]") {
  if (!RunAsRoot()) TRIALD_SKIP("needs root to add scratch users and switch to them");
  Site site;
  ScratchGroup team;
  ScratchUser alice(site.dir.path(), {&team});
  ScratchUser bob(site.dir.path(), {&team});
  TestDaemon daemon(site.dir.File("state"));
  daemon.AddArgs({"--socket-group", team.name()});
  daemon.Start();
  const std::string state = daemon.state_dir();

  std::vector<Reply> r = AsUser(
      alice, daemon.socket(),
      {{"submit", site.Sweep("a1", state, 3, 60)}, {"submit", site.Sweep("a2", state, 3, 60)}});
  REQUIRE(r[0].code == "ok");
  REQUIRE(r[1].code == "ok");
  WaitForFile(state + "/studies/a1/trials/0/id.txt");
  const size_t trials_before = daemon.Trials("a1").size();

  // Bob may read alice's studies and submit his own, but not change hers.
  r = AsUser(bob, daemon.socket(),
             {{"status", {{"study", "a1"}}},
              {"cancel", {{"study", "a1"}}},
              {"enqueue", {{"study", "a1"}, {"params", json::object{{"x", "0.5"}}}}},
              {"cancel", {}}});
  CHECK(r[0].code == "ok");
  for (size_t i = 1; i < r.size(); ++i) {
    INFO(r[i].text);
    CHECK(r[i].code == "permission_denied");
  }
  CHECK_THAT(r[1].text, Catch::Contains("uid " + std::to_string(bob.uid()) +
                                        " may not use \"cancel\" on study \"a1\": only its "
                                        "submitter (" +
                                        alice.name() + ", uid " + std::to_string(alice.uid())));
  json::value a1 = daemon.Call("status", {{"study", "a1"}});
  CHECK(a1.at("state").as_string() == "RUNNING");
  CHECK(daemon.Trials("a1").size() == trials_before);  // nothing enqueued

  // Alice may, and so may root (here triald's own uid as well).
  r = AsUser(alice, daemon.socket(),
             {{"enqueue", {{"study", "a1"}, {"params", json::object{{"x", "0.5"}}}}},
              {"cancel", {{"study", "a2"}}}});
  for (const Reply& reply : r) {
    INFO(reply.text);
    CHECK(reply.code == "ok");
  }
  daemon.Call("enqueue", {{"study", "a1"}, {"params", json::object{{"x", "0.25"}}}});
  daemon.Call("cancel", {{"study", "a1"}});
  CHECK(daemon.Call("status", {{"study", "a1"}}).at("state").as_string() == "CANCELLED");
  CHECK(daemon.Call("status", {{"study", "a2"}}).at("state").as_string() == "CANCELLED");
  CHECK(daemon.Trials("a1").size() == trials_before + 2);
}

TEST_CASE("run as submitter: a non-root triald changes only for its uid and root, or --trust-group",
          "[security][run-as][integration]") {
  if (!RunAsRoot()) TRIALD_SKIP("needs root to add scratch users and switch to them");
  Site site;
  ScratchGroup team;
  ScratchUser service(site.dir.path(), {});
  ScratchUser eve(site.dir.path(), {&team});
  ScratchUser frank(site.dir.path(), {&team});
  const std::string state = site.dir.File("state");
  REQUIRE(::mkdir(state.c_str(), 0750) == 0);
  REQUIRE(::chown(state.c_str(), service.uid(), team.gid()) == 0);

  {
    TestDaemon daemon(state);
    // Primary group: the team, so the daemon may give the socket to it.
    daemon.RunAs(service.uid(), team.gid());
    daemon.AddArgs({"--socket-group", std::to_string(team.gid()), "--no-cgroups"});
    daemon.Start();
    // The socket group may read, not submit: its trials would run as the daemon's user.
    std::vector<Reply> r =
        AsUser(eve, daemon.socket(), {{"ping", {}}, {"submit", site.Sweep("eves", state)}});
    CHECK(r[0].code == "ok");
    INFO(r[1].text);
    CHECK(r[1].code == "permission_denied");
    CHECK_THAT(r[1].text, Catch::Contains("not root, so its socket group may only read"));
    // triald's own uid and root may.
    r = AsUser(service, daemon.socket(), {{"submit", site.Sweep("own", state, 1, 60)}});
    INFO(r[0].text);
    CHECK(r[0].code == "ok");
    WaitForFile(state + "/studies/own/trials/0/id.txt");
    r = AsUser(eve, daemon.socket(), {{"cancel", {{"study", "own"}}}});
    CHECK(r[0].code == "permission_denied");
    daemon.Call("cancel", {{"study", "own"}});
    CHECK(daemon.Call("studies").as_array().size() == 1);
    CHECK(daemon.Stop() == 0);
  }

  TestDaemon daemon(state);
  daemon.RunAs(service.uid(), team.gid());
  daemon.AddArgs({"--socket-group", team.name(), "--trust-group", team.name(), "--no-cgroups"});
  daemon.Start();
  std::vector<Reply> r =
      AsUser(eve, daemon.socket(), {{"submit", site.Sweep("trusted", state, 2, 60)}});
  INFO(r[0].text);
  REQUIRE(r[0].code == "ok");
  // Trusted, but the daemon cannot switch users: the trial runs as triald's user.
  std::vector<std::string> seen = Lines(WaitForFile(state + "/studies/trusted/trials/0/id.txt"));
  REQUIRE(!seen.empty());
  CHECK(seen[0].rfind(std::to_string(service.uid()) + " ", 0) == 0);
  CHECK(daemon.Call("status", {{"study", "trusted"}}).at("submitter").at("uid").as_int64() ==
        eve.uid());
  // Another trusted member may not change eve's study; triald's own uid may.
  r = AsUser(frank, daemon.socket(), {{"cancel", {{"study", "trusted"}}}});
  CHECK(r[0].code == "permission_denied");
  r = AsUser(service, daemon.socket(), {{"cancel", {{"study", "trusted"}}}});
  INFO(r[0].text);
  CHECK(r[0].code == "ok");
  CHECK(daemon.Call("status", {{"study", "trusted"}}).at("state").as_string() == "CANCELLED");
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("RunAsCache: a submitter's answer is reused for its ttl, failures are never kept",
          "[run_as]") {
  using launcher::RunAs;
  using launcher::RunAsCache;
  int lookups = 0;
  bool fail = false;
  gid_t group = 100;
  RunAsCache cache(std::chrono::seconds(2), /*max_entries=*/2,
                   [&](const model::Submitter& s) -> common::Result<RunAs> {
                     ++lookups;
                     if (fail) return common::NotFound("no passwd entry for " + s.name);
                     RunAs r;
                     r.uid = static_cast<uid_t>(s.uid);
                     r.gid = 1000;
                     r.name = s.name;
                     r.groups = {1000, group};
                     return r;
                   });
  const auto t0 = RunAsCache::Clock::time_point{} + std::chrono::hours(1);
  model::Submitter alice;
  alice.uid = 1001;
  alice.name = "alice";
  REQUIRE(cache.Get(alice, t0).ok());
  CHECK(lookups == 1);
  // Within the ttl: the same answer, no lookup; a change of groups is not seen yet.
  group = 200;
  auto again = cache.Get(alice, t0 + std::chrono::milliseconds(1999));
  REQUIRE(again.ok());
  CHECK(lookups == 1);
  CHECK(again->groups.back() == 100);
  // From the ttl on: looked up again, the change seen.
  auto later = cache.Get(alice, t0 + std::chrono::seconds(2));
  REQUIRE(later.ok());
  CHECK(lookups == 2);
  CHECK(later->groups.back() == 200);
  // A clock that went back is not trusted either.
  REQUIRE(cache.Get(alice, t0).ok());
  CHECK(lookups == 3);
  // The same name under another uid is another submitter.
  model::Submitter alice2 = alice;
  alice2.uid = 1002;
  REQUIRE(cache.Get(alice2, t0).ok());
  CHECK(lookups == 4);
  // A failure is returned, drops what was kept, and is asked again next time.
  fail = true;
  const auto t1 = t0 + std::chrono::seconds(10);
  CHECK_FALSE(cache.Get(alice, t1).ok());
  CHECK_FALSE(cache.Get(alice, t1).ok());
  CHECK(lookups == 6);
  fail = false;
  REQUIRE(cache.Get(alice, t1).ok());
  CHECK(lookups == 7);
  REQUIRE(cache.Get(alice, t1).ok());
  CHECK(lookups == 7);
  // At most max_entries users: a third pushes out the oldest answer (alice2's, from t0).
  model::Submitter bob;
  bob.uid = 1003;
  bob.name = "bob";
  REQUIRE(cache.Get(bob, t1).ok());
  CHECK(lookups == 8);
  REQUIRE(cache.Get(alice, t1).ok());
  REQUIRE(cache.Get(bob, t1).ok());
  CHECK(lookups == 8);
  REQUIRE(cache.Get(alice2, t1).ok());
  CHECK(lookups == 9);
}

}  // namespace triald::testing

namespace triald::testing {
namespace {

TEST_CASE(
    "CallAsUser left to the process's reaper: whole answers from a thread while another thread "
    "reaps every child, and a check past its time killed",
    "[run_as]") {
  if (!RunAsRoot()) TRIALD_SKIP("needs root to switch to another user");
  // nobody (65534) is in every Debian passwd.
  model::Submitter nobody;
  nobody.uid = 65534;
  nobody.name = "nobody";
  common::Result<launcher::RunAs> user = launcher::LookUpRunAs(nobody);
  REQUIRE(user.ok());
  // The daemon's Reaper, as it works: wait4(-1) for whatever child exits.
  std::atomic<bool> stop{false};
  std::atomic<int> reaped{0};
  std::thread reaper([&] {
    while (!stop.load()) {
      int status = 0;
      if (::waitpid(-1, &status, WNOHANG) > 0) {
        reaped.fetch_add(1);
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  });
  for (int i = 0; i < 20; ++i) {
    const common::Status st = launcher::CallAsUser(
        *user,
        [] {
          return common::PermissionDenied("checked as uid " + std::to_string(::getuid()) +
                                          std::string(300, '.'));
        },
        10, launcher::ChildReaping::kByProcessReaper);
    INFO(st.ToString());
    CHECK(st.code() == common::Code::kPermissionDenied);
    CHECK(st.message() == "checked as uid 65534" + std::string(300, '.'));
  }
  const common::Status ok = launcher::CallAsUser(
      *user, [] { return common::Status::Ok(); }, 10, launcher::ChildReaping::kByProcessReaper);
  CHECK(ok.ok());
  const common::Status slow = launcher::CallAsUser(
      *user,
      [] {
        std::this_thread::sleep_for(std::chrono::seconds(30));
        return common::Status::Ok();
      },
      0.3, launcher::ChildReaping::kByProcessReaper);
  CHECK(slow.code() == common::Code::kUnavailable);
  CHECK_THAT(slow.message(), Catch::Contains("took longer than"));
  // Every child was reaped there, the killed one too.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (reaped.load() < 22 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stop = true;
  reaper.join();
  CHECK(reaped.load() == 22);
  errno = 0;
  CHECK(::waitpid(-1, nullptr, WNOHANG) < 0);
  CHECK(errno == ECHILD);
}

}  // namespace
}  // namespace triald::testing
