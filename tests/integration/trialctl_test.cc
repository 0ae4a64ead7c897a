// trialctl against a real triald: verbs, --json shapes, errors and exit codes.
#include "daemon/ctl/trialctl.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <regex>
#include <sstream>

#include "common/json.h"
#include "tests/integration/harness.h"

namespace triald::testing {
namespace json = boost::json;

TEST_CASE("trialctl without a daemon: one clear line and exit code 3", "[trialctl][integration]") {
  TempDir dir;
  Ctl c = Trialctl(dir.File("nothing.sock"), {"studies"});
  CHECK(c.code == ctl::kExitUnavailable);
  CHECK_THAT(c.err,
             Catch::StartsWith("trialctl: cannot reach triald at " + dir.File("nothing.sock")));
  CHECK(std::count(c.err.begin(), c.err.end(), '\n') == 1);
}

TEST_CASE("trialctl bad command lines exit 2 with usage", "[trialctl][integration]") {
  CHECK(Trialctl("/x", {}).code == ctl::kExitUsage);
  CHECK(Trialctl("/x", {"frobnicate"}).code == ctl::kExitUsage);
  CHECK(Trialctl("/x", {"status"}).code == ctl::kExitUsage);
  CHECK(Trialctl("/x", {"logs", "s", "abc"}).code == ctl::kExitUsage);
  CHECK(Trialctl("/x", {"trials", "s", "--bogus"}).code == ctl::kExitUsage);
  CHECK(Trialctl("/x", {"trials"}).code == ctl::kExitUsage);
  CHECK(Trialctl("/x", {"studies", "extra"}).code == ctl::kExitUsage);
  CHECK(Trialctl("/x", {"report", "s"}).code == ctl::kExitUsage);  // no -o
  Ctl help = Trialctl("/x", {"--help"});
  CHECK(help.code == 0);
  CHECK_THAT(help.out, Catch::Contains("submit FILE [--name NAME] [--resume] [--no-check]"));
}

TEST_CASE("trialctl submit --wait, trials --json, best --json, logs, studies, status",
          "[trialctl][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  dir.Write("w.sh",
            "echo \"hello from $TRIALD_TRIAL\"\necho warn >&2\n"
            "echo '{\"type\":\"final\",\"value\":'$TRIALD_TRIAL'}' >&3\n",
            0755);
  std::string sweep = dir.Write("s.toml", ExecSweep("ctl", "[\"sh\", \"w.sh\"]", 4, 2));
  Ctl submit = Trialctl(d.socket(), {"submit", sweep, "--wait"});
  INFO(submit.err);
  REQUIRE(submit.code == 0);
  CHECK_THAT(submit.out, Catch::StartsWith("ctl\n"));
  CHECK_THAT(submit.out, Catch::Contains("best trial 0: COMPLETE  value 0"));

  Ctl trials = Trialctl(d.socket(), {"trials", "ctl", "--json"});
  REQUIRE(trials.code == 0);
  json::array arr = json::parse(trials.out).as_array();
  REQUIRE(arr.size() == 4);
  for (const json::value& v : arr) {
    const json::object& t = v.as_object();
    for (const char* key :
         {"number", "state", "value", "params", "fail_reason", "duration_s", "resources"}) {
      CHECK(t.contains(key));
    }
    CHECK(t.at("state").as_string() == "COMPLETE");
    CHECK(t.at("params").as_object().contains("x"));
  }
  Ctl best = Trialctl(d.socket(), {"best", "ctl", "--json"});
  REQUIRE(best.code == 0);
  CHECK(json::parse(best.out).at("number").as_int64() == 0);
  CHECK(json::parse(best.out).at("value").to_number<double>() == 0.0);

  Ctl table = Trialctl(d.socket(), {"trials", "ctl"});
  CHECK_THAT(table.out, Catch::StartsWith("#  STATE"));
  Ctl studies = Trialctl(d.socket(), {"studies"});
  CHECK_THAT(studies.out, Catch::Contains("ctl    COMPLETE"));
  Ctl status = Trialctl(d.socket(), {"status", "ctl"});
  CHECK_THAT(status.out, Catch::Contains("4/4 finished (4 complete, 0 pruned, 0 failed)"));

  Ctl out_log = Trialctl(d.socket(), {"logs", "ctl", "2"});
  CHECK(out_log.code == 0);
  CHECK(out_log.out == "hello from 2\n");
  Ctl err_log = Trialctl(d.socket(), {"logs", "ctl", "2", "--stderr"});
  CHECK(err_log.out == "warn\n");

  // --opt=value as well as --opt value, and global options after the verb.
  std::ostringstream out, err;
  CHECK(ctl::RunTrialctl({"status", "ctl", "--socket=" + d.socket(), "--json"}, out, err) == 0);
  CHECK(json::parse(out.str()).at("name").as_string() == "ctl");
  Ctl csv = Trialctl(d.socket(), {"export", "ctl", "--format=csv"});
  CHECK(csv.code == 0);
  CHECK_THAT(csv.out, Catch::StartsWith("number,state,value"));

  SECTION("errors: unknown study, duplicate name, invalid sweep, missing file") {
    Ctl unknown = Trialctl(d.socket(), {"status", "nope"});
    CHECK(unknown.code == ctl::kExitError);
    CHECK(unknown.err == "trialctl: no study named \"nope\" (see `trialctl studies`)\n");
    Ctl dup = Trialctl(d.socket(), {"submit", sweep});
    CHECK(dup.code == ctl::kExitError);
    CHECK_THAT(dup.err, Catch::Contains("already exists"));
    CHECK_THAT(dup.err, Catch::Contains(sweep));
    std::string bad = dir.Write("bad.toml", "[study]\nname = \"b\"\nn_trials = 0\n");
    Ctl invalid = Trialctl(d.socket(), {"submit", bad});
    CHECK(invalid.code == ctl::kExitError);
    CHECK_THAT(invalid.err, Catch::Contains(bad + ":3:"));
    CHECK_THAT(invalid.err, Catch::Contains("n_trials"));
    Ctl missing = Trialctl(d.socket(), {"submit", dir.File("missing.toml")});
    CHECK(missing.code == ctl::kExitError);
    CHECK_THAT(missing.err, Catch::Contains("missing.toml"));
    // Nothing was stored by the failed submissions.
    Ctl all = Trialctl(d.socket(), {"studies", "--json"});
    CHECK(json::parse(all.out).as_array().size() == 1);
    Ctl cancel_done = Trialctl(d.socket(), {"cancel", "ctl"});
    CHECK(cancel_done.code == ctl::kExitError);
  }
}

TEST_CASE("trialctl cancel stops a running study", "[trialctl][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  dir.Write("slow.sh", "sleep 1000\n", 0755);
  std::string sweep = dir.Write("s.toml", ExecSweep("long", "[\"sh\", \"slow.sh\"]", 10, 2));
  REQUIRE(Trialctl(d.socket(), {"submit", sweep}).code == 0);
  Ctl c = Trialctl(d.socket(), {"cancel", "long"});
  CHECK(c.code == 0);
  json::object st = d.WaitStudy("long");
  CHECK(st.at("state").as_string() == "CANCELLED");
  CHECK(WaitNoProcessesOfStudy("long").empty());
  json::array trials = d.Trials("long");
  CHECK(trials.size() <= 2);
  for (const json::value& t : trials) CHECK(t.at("fail_reason").as_string() == "cancelled");
}

TEST_CASE("trialctl enqueue: bad command lines exit 2 with usage", "[trialctl][integration]") {
  CHECK(Trialctl("/x", {"enqueue"}).code == ctl::kExitUsage);
  CHECK(Trialctl("/x", {"enqueue", "s", "extra"}).code == ctl::kExitUsage);
  Ctl no_eq = Trialctl("/x", {"enqueue", "s", "--param", "x"});
  CHECK(no_eq.code == ctl::kExitUsage);
  CHECK_THAT(no_eq.err, Catch::Contains("--param \"x\": expected NAME=VALUE"));
  CHECK(Trialctl("/x", {"enqueue", "s", "--param"}).code == ctl::kExitUsage);
  CHECK(Trialctl("/x", {"enqueue", "s", "--param", "=1"}).code == ctl::kExitUsage);
  Ctl joined = Trialctl("/x", {"enqueue", "s", "--param=x"});
  CHECK(joined.code == ctl::kExitUsage);
  CHECK_THAT(joined.err, Catch::Contains("--param \"x\": expected NAME=VALUE"));
  Ctl twice = Trialctl("/x", {"enqueue", "s", "--param", "x=1", "--param", "x=2"});
  CHECK(twice.code == ctl::kExitUsage);
  CHECK_THAT(twice.err, Catch::Contains("--param x given twice"));
  CHECK(Trialctl("/x", {"status", "s", "--param", "x=1"}).code == ctl::kExitUsage);
  Ctl help = Trialctl("/x", {"--help"});
  CHECK_THAT(help.out, Catch::Contains("enqueue STUDY [--skip-if-exists] [--param NAME=VALUE]..."));
}

TEST_CASE("trialctl enqueue queues trials that run next with the given params",
          "[trialctl][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  // Each trial waits for the file "go", then reports its x as its value.
  dir.Write("w.sh",
            "while [ ! -e go ]; do sleep 0.02; done\n"
            "x=${TRIALD_PARAMS#*\\\"x\\\":}\nx=${x%\\}}\n"
            "echo \"{\\\"type\\\":\\\"final\\\",\\\"value\\\":$x}\" >&3\n",
            0755);
  std::string sweep = dir.Write("s.toml", ExecSweep("queue", "[\"sh\", \"w.sh\"]", 4, 1));
  REQUIRE(Trialctl(d.socket(), {"submit", sweep}).code == 0);

  Ctl first = Trialctl(d.socket(), {"enqueue", "queue", "--param", "x=0.25"});
  INFO(first.err);
  REQUIRE(first.code == 0);
  CHECK(first.out == "1\n");
  // --param=NAME=VALUE works as well as --param NAME=VALUE.
  Ctl second = Trialctl(d.socket(), {"enqueue", "queue", "--param=x=-0.5", "--json"});
  REQUIRE(second.code == 0);
  json::value reply = json::parse(second.out);
  CHECK(reply.at("trial").as_int64() == 2);
  CHECK(reply.at("params").at("x").to_number<double>() == -0.5);
  // Refused: an unknown parameter, a bad value, an unknown study; nothing is queued.
  Ctl unknown = Trialctl(d.socket(), {"enqueue", "queue", "--param", "y=1"});
  CHECK(unknown.code == ctl::kExitError);
  CHECK_THAT(unknown.err, Catch::Contains("no parameter \"y\"; expected one of: x"));
  Ctl bad = Trialctl(d.socket(), {"enqueue", "queue", "--param", "x=abc"});
  CHECK(bad.code == ctl::kExitError);
  CHECK_THAT(bad.err, Catch::Contains("parameter x") && Catch::Contains("abc") &&
                          Catch::Contains("expected"));
  Ctl out_of_range = Trialctl(d.socket(), {"enqueue", "queue", "--param", "x=5"});
  CHECK(out_of_range.code == ctl::kExitError);
  CHECK_THAT(out_of_range.err, Catch::Contains("expected a number in"));
  Ctl nope = Trialctl(d.socket(), {"enqueue", "nope", "--param", "x=0"});
  CHECK(nope.code == ctl::kExitError);
  CHECK(nope.err == "trialctl: no study named \"nope\" (see `trialctl studies`)\n");

  Ctl sampled = Trialctl(d.socket(), {"enqueue", "queue"});  // every parameter sampled
  REQUIRE(sampled.code == 0);
  CHECK(sampled.out == "3\n");
  Ctl full = Trialctl(d.socket(), {"enqueue", "queue", "--param", "x=0"});
  CHECK(full.code == ctl::kExitError);
  CHECK(full.err == "trialctl: study \"queue\" already has its n_trials = 4 trials\n");

  dir.Write("go", "");
  json::object st = d.WaitStudy("queue");
  CHECK(st.at("state").as_string() == "COMPLETE");
  json::array trials = d.Trials("queue");
  REQUIRE(trials.size() == 4);
  for (const json::value& t : trials) CHECK(t.at("state").as_string() == "COMPLETE");
  CHECK(trials[1].at("value").to_number<double>() == 0.25);
  CHECK(trials[2].at("value").to_number<double>() == -0.5);
  // Enqueued trials ran in order, after the trial that was running.
  double started_1 = trials[1].at("started_at").to_number<double>();
  double started_2 = trials[2].at("started_at").to_number<double>();
  double started_3 = trials[3].at("started_at").to_number<double>();
  CHECK(trials[0].at("started_at").to_number<double>() <= started_1);
  CHECK(started_1 <= started_2);
  CHECK(started_2 <= started_3);
  Ctl done = Trialctl(d.socket(), {"enqueue", "queue"});
  CHECK(done.code == ctl::kExitError);
  CHECK_THAT(done.err, Catch::Contains("COMPLETE"));
}

TEST_CASE("trialctl escapes control characters a worker sent before they reach the terminal",
          "[trialctl][security][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  // An error message with a title-setting OSC sequence, a bell, a clear-screen CSI, a carriage
  // return and a C1 CSI (U+009B).
  dir.Write("w.sh",
            "printf '%s\\n' '{\"type\":\"error\",\"message\":\"\\u001b]0;pwned\\u0007\\u001b[2J "
            "bad\\rX\\u009b31m\"}' >&3\nexit 1\n",
            0755);
  std::string sweep = dir.Write("e.toml", ExecSweep("esc", "[\"sh\", \"w.sh\"]", 1, 1));
  REQUIRE(Trialctl(d.socket(), {"submit", sweep, "--wait"}).code == ctl::kExitError);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"trials", "esc"}, {"best", "esc"}, {"status", "esc"}}) {
    Ctl c = Trialctl(d.socket(), args);
    INFO(args[0] << ": " << c.out << c.err);
    const std::string all = c.out + c.err;
    for (char bad : {'\x1b', '\x07', '\r'}) CHECK(all.find(bad) == std::string::npos);
    CHECK(all.find("\xc2\x9b") == std::string::npos);
  }
  Ctl trials = Trialctl(d.socket(), {"trials", "esc"});
  // REASON is the failure's one line (the worker's error line), its controls made visible.
  CHECK_THAT(trials.out, Catch::Contains("exit: \\x1b]0;pwned\\x07\\x1b[2J bad\\rX\\u009b31m"));
  // --json stays exact: it is JSON, with the characters escaped as JSON does.
  Ctl json_out = Trialctl(d.socket(), {"trials", "esc", "--json"});
  CHECK_THAT(std::string(json::parse(json_out.out).as_array()[0].at("fail_detail").as_string()),
             Catch::Contains("\x1b]0;pwned\x07"));
}

TEST_CASE("trialctl --json writes numbers in their shortest form", "[trialctl][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  dir.Write("w.sh", "echo '{\"type\":\"final\",\"value\":0.005}' >&3\n", 0755);
  const std::string sweep = dir.Write("s.toml", ExecSweep("short", "[\"sh\", \"w.sh\"]", 1, 1));
  REQUIRE(Trialctl(d.socket(), {"submit", sweep, "--wait"}).code == 0);
  const std::regex boost_exponent("[0-9]E[-+]?[0-9]");  // Boost's own form: 5E-3, 1.7E9
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"trials", "short", "--json"},
                                             {"best", "short", "--json"},
                                             {"status", "short", "--json"}}) {
    Ctl c = Trialctl(d.socket(), args);
    INFO(args[0] << ": " << c.out << c.err);
    REQUIRE(c.code == 0);
    CHECK_FALSE(std::regex_search(c.out, boost_exponent));
    if (args[0] != "status") CHECK_THAT(c.out, Catch::Contains("\"value\":0.005,"));
    // Timestamps (seconds since 1970) in positional form, each exactly as written.
    std::smatch m;
    REQUIRE(std::regex_search(c.out, m, std::regex("\"created_at\":([^,}]+)")));
    const std::string stamp = m[1];
    CHECK(std::regex_match(stamp, std::regex("1[0-9]{9}(\\.[0-9]+)?")));
    common::Result<json::value> parsed = common::ParseJsonExact(stamp);
    REQUIRE(parsed.ok());
    CHECK(common::JsonDoubleText(parsed->to_number<double>()) == stamp);
  }
}

namespace {

// `trialctl status STUDY --json`, parsed.
json::object StatusJson(const std::string& socket, const std::string& study) {
  Ctl c = Trialctl(socket, {"status", study, "--json"});
  INFO(c.err);
  REQUIRE(c.code == 0);
  return json::parse(c.out).as_object();
}

}  // namespace

TEST_CASE("trialctl pause, resume, set parallelism, extend, events and delete a study",
          "[trialctl][integration][control]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  // Each trial waits for the file "go" (in the sweep's folder), then reports its number.
  dir.Write("gate.sh",
            "while [ ! -f go ]; do sleep 0.05; done\n"
            "echo '{\"type\":\"final\",\"value\":'$TRIALD_TRIAL'}' >&3\n",
            0755);
  std::string sweep = dir.Write("s.toml", ExecSweep("ctl", "[\"sh\", \"gate.sh\"]", 4, 1));
  REQUIRE(Trialctl(d.socket(), {"submit", sweep}).code == 0);
  WaitStatus(d, "ctl", [](const json::object& s) { return s.at("running").as_int64() == 1; });

  Ctl pause = Trialctl(d.socket(), {"pause", "ctl"});
  INFO(pause.err);
  REQUIRE(pause.code == 0);
  CHECK_THAT(pause.out, Catch::Contains("study ctl paused"));
  Ctl status = Trialctl(d.socket(), {"status", "ctl"});
  CHECK_THAT(status.out, Catch::StartsWith("study ctl: PAUSED"));
  CHECK_THAT(Trialctl(d.socket(), {"studies"}).out, Catch::Contains("PAUSED"));
  CHECK(StatusJson(d.socket(), "ctl").at("paused").as_bool());

  // The running trial goes on and ends; no other starts while paused. The daemon decides on
  // the next launch in the same step that records the end, before it answers another request:
  // once status counts the trial finished, a launch it made would show. (That a paused study
  // never starts a trial later either is the scheduler's unit check, "a paused study starts no
  // trial, ...".)
  dir.Write("go", "");
  WaitStatus(d, "ctl", [](const json::object& s) { return s.at("finished").as_int64() == 1; });
  json::object paused = StatusJson(d.socket(), "ctl");
  CHECK(paused.at("running").as_int64() == 0);
  CHECK(d.Trials("ctl").size() == 1);
  CHECK(paused.at("state").as_string() == "RUNNING");

  // Settings: bad ones are refused saying what was wrong.
  Ctl zero = Trialctl(d.socket(), {"set", "ctl", "parallelism=0"});
  CHECK(zero.code == ctl::kExitError);
  CHECK_THAT(zero.err, Catch::Contains("parallelism") && Catch::Contains("expected"));
  Ctl bad_key = Trialctl(d.socket(), {"set", "ctl", "speed=2"});
  CHECK(bad_key.code == ctl::kExitUsage);
  CHECK_THAT(bad_key.err, Catch::Contains("expected parallelism=N"));
  Ctl set = Trialctl(d.socket(), {"set", "ctl", "parallelism=2"});
  INFO(set.err);
  REQUIRE(set.code == 0);
  CHECK(StatusJson(d.socket(), "ctl").at("parallelism").as_int64() == 2);

  REQUIRE(Trialctl(d.socket(), {"resume", "ctl"}).code == 0);
  json::object done = d.WaitStudy("ctl");
  CHECK(done.at("state").as_string() == "COMPLETE");
  CHECK(d.Trials("ctl").size() == 4);

  // Extend: not above the finished trials is refused naming both; above it runs again.
  Ctl low = Trialctl(d.socket(), {"extend", "ctl", "--n-trials", "4"});
  CHECK(low.code == ctl::kExitError);
  CHECK_THAT(low.err, Catch::Contains("--n-trials 4") && Catch::Contains("4 finished"));
  CHECK(Trialctl(d.socket(), {"extend", "ctl", "--n-trials", "0"}).code == ctl::kExitUsage);
  Ctl unknown = Trialctl(d.socket(), {"extend", "nope", "--n-trials", "9"});
  CHECK(unknown.code == ctl::kExitError);
  CHECK_THAT(unknown.err, Catch::Contains("no study named \"nope\""));
  Ctl ext = Trialctl(d.socket(), {"extend", "ctl", "--n-trials", "6"});
  INFO(ext.err);
  REQUIRE(ext.code == 0);
  CHECK_THAT(ext.out, Catch::Contains("6 trials"));
  WaitStatus(d, "ctl", [](const json::object& s) {
    return s.at("state").as_string() == "COMPLETE" && s.at("finished").as_int64() == 6;
  });
  CHECK(d.Trials("ctl").size() == 6);

  Ctl events = Trialctl(d.socket(), {"events", "ctl"});
  REQUIRE(events.code == 0);
  for (const char* kind :
       {"study_paused", "study_parallelism", "study_resumed", "study_extended"}) {
    CHECK_THAT(events.out, Catch::Contains(kind));
  }

  // Delete: asks on a terminal, refused without one unless --yes; --purge removes the folder.
  Ctl unconfirmed = Trialctl(d.socket(), {"delete", "ctl"});
  CHECK(unconfirmed.code == ctl::kExitUsage);
  CHECK_THAT(unconfirmed.err, Catch::Contains("--yes"));
  CHECK(Trialctl(d.socket(), {"studies", "--json"}).out.find("\"ctl\"") != std::string::npos);
  REQUIRE(std::filesystem::exists(dir.File("state") + "/studies/ctl"));
  Ctl del = Trialctl(d.socket(), {"delete", "ctl", "--purge", "--yes"});
  INFO(del.err);
  REQUIRE(del.code == 0);
  CHECK_THAT(del.out, Catch::Contains("study ctl deleted (6 trials"));
  CHECK(json::parse(Trialctl(d.socket(), {"studies", "--json"}).out).as_array().empty());
  CHECK_FALSE(std::filesystem::exists(dir.File("state") + "/studies/ctl"));
  Ctl gone = Trialctl(d.socket(), {"status", "ctl"});
  CHECK(gone.code == ctl::kExitError);
  Ctl daemon_events = Trialctl(d.socket(), {"events", "--json"});
  REQUIRE(daemon_events.code == 0);
  CHECK_THAT(daemon_events.out, Catch::Contains("study_deleted") && Catch::Contains("study ctl"));
}

TEST_CASE("trialctl delete asks for the study's name again on a terminal",
          "[trialctl][integration][control]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  dir.Write("w.sh", "echo '{\"type\":\"final\",\"value\":1}' >&3\n", 0755);
  std::string sweep = dir.Write("s.toml", ExecSweep("asked", "[\"sh\", \"w.sh\"]", 1, 1));
  REQUIRE(Trialctl(d.socket(), {"submit", sweep, "--wait"}).code == 0);
  ctl::Terminals typed_wrong;
  std::istringstream wrong("other\n");
  typed_wrong.in = &wrong;
  std::ostringstream out, err;
  CHECK(ctl::RunTrialctl({"--socket", d.socket(), "delete", "asked"}, out, err, typed_wrong) ==
        ctl::kExitError);
  CHECK_THAT(err.str(),
             Catch::Contains("Type the study's name") && Catch::Contains("nothing deleted"));
  CHECK(StatusJson(d.socket(), "asked").at("state").as_string() == "COMPLETE");
  ctl::Terminals typed_right;
  std::istringstream right("asked\n");
  typed_right.in = &right;
  std::ostringstream out2, err2;
  CHECK(ctl::RunTrialctl({"--socket", d.socket(), "delete", "asked"}, out2, err2, typed_right) ==
        ctl::kExitOk);
  CHECK_THAT(out2.str(), Catch::Contains("study asked deleted (1 trials)"));
  CHECK(Trialctl(d.socket(), {"status", "asked"}).code == ctl::kExitError);
}

}  // namespace triald::testing
