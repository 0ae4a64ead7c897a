// A newcomer's first hour against a real triald: the trials run the submitter's Python (as
// trialctl finds it: $VIRTUAL_ENV, $CONDA_PREFIX, then its PATH; daemon/ctl/submit_check.h),
// the objective is imported at submit before any trial, a study that only fails stops
// (fail-fast), `submit --name`, and a planned stop of triald (SIGTERM) that puts the running
// trial back.
//
// The interpreter is /usr/bin/python3 (which has what the runner needs), reached through links
// in a folder of the test's own, so the tests do not depend on which python3 comes first on
// PATH.

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/sha256.h"
#include "daemon/ctl/submit_check.h"
#include "daemon/ctl/submit_code.h"
#include "tests/integration/harness.h"

namespace triald::testing {
namespace {

namespace json = boost::json;
namespace fs = std::filesystem;

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// A folder standing for a virtual environment: bin/python3, a link to /usr/bin/python3 (its
// sys.executable is the link, as a venv's is).
std::string FakeVenv(const TempDir& dir, const std::string& name) {
  const std::string root = dir.File(name);
  fs::create_directories(root + "/bin");
  fs::create_symlink("/usr/bin/python3", root + "/bin/python3");
  return root;
}

// Sets an environment variable of this process (trialctl runs in-process) for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    had_ = std::getenv(name) != nullptr;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_, old_.c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

const char kRecordsInterpreter[] = R"(import os, sys

def objective(trial):
    trial.set_user_attr("executable", sys.executable)
    return trial.suggest_float("x", 0.0, 1.0)
)";

std::string PythonSweep(const std::string& name, const std::string& function, int n_trials,
                        const std::string& study_extra = "",
                        const std::string& objective_extra = "") {
  return "[study]\nname = \"" + name + "\"\nn_trials = " + std::to_string(n_trials) + "\n" +
         study_extra + "\n[objective]\nkind = \"python\"\nfunction = \"" + function + "\"\n" +
         objective_extra;
}

config::SweepSpec Parse(const std::string& toml, const std::string& path) {
  common::Result<config::SweepSpec> spec = config::ParseSweep({toml, path, {}});
  INFO(spec.status().ToString());
  REQUIRE(spec.ok());
  return *spec;
}

}  // namespace

TEST_CASE("the interpreter: $VIRTUAL_ENV, then $CONDA_PREFIX, then PATH, a path from workdir",
          "[first-hour]") {
  TempDir dir;
  const std::string venv = FakeVenv(dir, "venv");
  const std::string conda = FakeVenv(dir, "conda");
  const std::string on_path = FakeVenv(dir, "path");
  ctl::SubmitterEnvironment env;
  env.path = on_path + "/bin:/usr/bin";
  CHECK(*ctl::ResolveInterpreter("python3", dir.path(), env) == on_path + "/bin/python3");
  env.conda_prefix = conda;
  CHECK(*ctl::ResolveInterpreter("python3", dir.path(), env) == conda + "/bin/python3");
  env.virtual_env = venv;
  CHECK(*ctl::ResolveInterpreter("python3", dir.path(), env) == venv + "/bin/python3");
  // A path is the file it names (relative to the objective's workdir), wherever the
  // environments are.
  CHECK(*ctl::ResolveInterpreter("conda/bin/python3", dir.path(), env) == conda + "/bin/python3");
  common::Result<std::string> missing = ctl::ResolveInterpreter("python3.99", dir.path(), env);
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.status().message(), Catch::Contains(venv + "/bin"));
}

TEST_CASE("the check at submit imports the objective in the trials' interpreter", "[first-hour]") {
  TempDir dir;
  const std::string venv = FakeVenv(dir, "venv");
  ctl::SubmitterEnvironment env;
  env.virtual_env = venv;
  env.path = "/usr/bin:/bin";
  const std::string where = dir.File("sweep.toml");
  WriteFile(dir.File("good.py"), kRecordsInterpreter);
  WriteFile(dir.File("needs.py"),
            "import no_such_module_triald\n\ndef objective(trial):\n"
            "    return 1.0\n");
  WriteFile(dir.File("slow.py"),
            "import time\ntime.sleep(30)\n\ndef objective(trial):\n"
            "    return 1.0\n");
  ctl::SubmitCheckOptions options;

  common::Result<ctl::CheckedInterpreter> good = ctl::CheckPythonSweep(
      Parse(PythonSweep("s", "good.py:objective", 1), where), where, env, options);
  INFO(good.status().ToString());
  REQUIRE(good.ok());
  CHECK(good->executable == venv + "/bin/python3");
  CHECK_FALSE(good->version.empty());
  CHECK(good->version[0] == '3');

  // The objective's own import fails: refused, naming the interpreter, the function and the
  // exception's last line.
  common::Result<ctl::CheckedInterpreter> needs = ctl::CheckPythonSweep(
      Parse(PythonSweep("s", "needs.py:objective", 1), where), where, env, options);
  REQUIRE_FALSE(needs.ok());
  CHECK_THAT(needs.status().message(),
             Catch::Contains("[objective] function = \"needs.py:objective\" does not import in " +
                             venv + "/bin/python3 (Python 3."));
  CHECK_THAT(needs.status().message(),
             Catch::Contains("ModuleNotFoundError: No module named 'no_such_module_triald'"));
  CHECK_THAT(needs.status().message(), Catch::Contains("--no-check"));
  // --no-check: only the interpreter is asked what it is.
  ctl::SubmitCheckOptions no_check;
  no_check.import_objective = false;
  common::Result<ctl::CheckedInterpreter> unchecked = ctl::CheckPythonSweep(
      Parse(PythonSweep("s", "needs.py:objective", 1), where), where, env, no_check);
  INFO(unchecked.status().ToString());
  CHECK(unchecked.ok());

  // A preload module that is not there.
  common::Result<ctl::CheckedInterpreter> preload = ctl::CheckPythonSweep(
      Parse(PythonSweep("s", "good.py:objective", 1, "", "preload = [\"no_such_preload\"]\n"),
            where),
      where, env, options);
  REQUIRE_FALSE(preload.ok());
  CHECK_THAT(preload.status().message(),
             Catch::Contains("[objective] preload module \"no_such_preload\" does not import"));
  CHECK_THAT(preload.status().message(), Catch::Contains("No module named 'no_such_preload'"));

  // Bounded in time.
  ctl::SubmitCheckOptions quick;
  quick.timeout_s = 1;
  common::Result<ctl::CheckedInterpreter> slow = ctl::CheckPythonSweep(
      Parse(PythonSweep("s", "slow.py:objective", 1), where), where, env, quick);
  REQUIRE_FALSE(slow.ok());
  CHECK_THAT(slow.status().message(), Catch::Contains("did not finish within 1 s"));
}

TEST_CASE("trialctl submit: the trials run the submitter's interpreter, not the daemon's",
          "[first-hour][integration]") {
  TempDir dir;
  const std::string venv = FakeVenv(dir, "venv");
  WriteFile(dir.File("objective.py"), kRecordsInterpreter);
  const std::string sweep = dir.File("sweep.toml");
  WriteFile(sweep, PythonSweep("mine", "objective.py:objective", 2));
  TestDaemon d(dir.File("state"));
  d.Start();  // without VIRTUAL_ENV: its PATH knows nothing of the venv

  Ctl submitted;
  {
    ScopedEnv active("VIRTUAL_ENV", venv);
    submitted = Trialctl(d.socket(), {"submit", sweep, "--wait"});
  }
  INFO(submitted.out << submitted.err << d.log());
  REQUIRE(submitted.code == 0);
  for (const json::value& v : d.Trials("mine")) {
    const json::object& attrs = v.at("attrs").as_object();
    REQUIRE(attrs.contains("executable"));
    CHECK(attrs.at("executable") == json::value(venv + "/bin/python3"));
  }
  Ctl status = Trialctl(d.socket(), {"status", "mine"});
  CHECK_THAT(status.out, Catch::Contains("python: " + venv + "/bin/python3 (Python 3."));
  json::object s = d.Call("status", {{"study", "mine"}}).as_object();
  CHECK(s.at("python").at("path").as_string() == venv + "/bin/python3");

  // The same file again: the name is taken; the error says what to do, --name gives another.
  Ctl again = Trialctl(d.socket(), {"submit", sweep});
  CHECK(again.code != 0);
  CHECK_THAT(again.err, Catch::Contains("--name NEW_NAME"));
  CHECK_THAT(again.err, Catch::Contains("trialctl extend mine"));
  CHECK_THAT(again.err, Catch::Contains("trialctl delete mine"));
  Ctl renamed = Trialctl(d.socket(), {"submit", sweep, "--name", "mine-2", "--wait"});
  INFO(renamed.err);
  CHECK(renamed.code == 0);
  CHECK(d.Call("status", {{"study", "mine-2"}}).at("state").as_string() == "COMPLETE");

  // A restart re-reads the study with its interpreter.
  REQUIRE(d.Stop() == 0);
  d.Start();
  CHECK(d.Call("status", {{"study", "mine"}}).at("python").at("path").as_string() ==
        venv + "/bin/python3");

  // A missing preload is refused at submit, and nothing is stored.
  const std::string preload = dir.File("preload.toml");
  WriteFile(preload, PythonSweep("preloads", "objective.py:objective", 2, "",
                                 "preload = [\"no_such_preload_module\"]\n"));
  Ctl refused = Trialctl(d.socket(), {"submit", preload});
  CHECK(refused.code != 0);
  CHECK_THAT(refused.err, Catch::Contains("no_such_preload_module"));
  CHECK_FALSE(d.Call("studies").as_array().size() > 2);
}

TEST_CASE("an objective that raises at import stops after max_failures_in_a_row",
          "[first-hour][integration]") {
  TempDir dir;
  WriteFile(dir.File("broken.py"),
            "raise RuntimeError('config file missing')\n\n"
            "def objective(trial):\n    return 1.0\n");
  const std::string sweep = dir.File("broken.toml");
  WriteFile(sweep, PythonSweep("broken", "broken.py:objective", 20, "parallelism = 1\n",
                               "python = \"/usr/bin/python3\"\n"));
  TestDaemon d(dir.File("state"));
  d.Start();
  // Refused at submit first, then sent anyway with --no-check.
  Ctl checked = Trialctl(d.socket(), {"submit", sweep});
  CHECK(checked.code != 0);
  CHECK_THAT(checked.err, Catch::Contains("RuntimeError: config file missing"));
  Ctl submitted = Trialctl(d.socket(), {"submit", sweep, "--no-check", "--wait"});
  INFO(submitted.out << submitted.err << d.log());
  CHECK(submitted.code != 0);
  CHECK_THAT(submitted.err, Catch::Contains("FAILED: 5 trials in a row failed the same way"));
  CHECK_THAT(submitted.err,
             Catch::Contains("5 failed; most often (5 of them): exit: RuntimeError: config file "
                             "missing"));
  json::array trials = d.Trials("broken");
  CHECK(trials.size() == 5);
  CHECK(d.Call("status", {{"study", "broken"}}).at("state").as_string() == "FAILED");
  // `trials` shows one line of why; --json keeps the whole traceback.
  Ctl listed = Trialctl(d.socket(), {"trials", "broken"});
  CHECK_THAT(listed.out, Catch::Contains("exit: RuntimeError: config file missing"));
  CHECK_THAT(listed.out, !Catch::Contains("Traceback"));
  CHECK_THAT(std::string(trials[0].at("fail_detail").as_string()), Catch::Contains("Traceback"));
}

TEST_CASE("submit --resume and load_if_exists continue a study, keeping its numbers",
          "[first-hour][integration]") {
  TempDir dir;
  // Fails until the file "fixed" exists beside it: a study that fail-fast stopped, then resumed.
  WriteFile(dir.File("flaky.py"), R"(import os

FIXED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixed")

def objective(trial):
    x = trial.suggest_float("x", 0.0, 1.0)
    if not os.path.exists(FIXED):
        raise RuntimeError("data not ready")
    return x

def other(trial):
    return trial.suggest_float("x", 0.0, 1.0)
)");
  const std::string sweep = dir.File("rerun.toml");
  const std::string toml =
      PythonSweep("rerun", "flaky.py:objective", 3, "max_failures_in_a_row = 2\n",
                  "python = \"/usr/bin/python3\"\n");
  WriteFile(sweep, toml);
  TestDaemon d(dir.File("state"));
  d.Start();
  Ctl failed = Trialctl(d.socket(), {"submit", sweep, "--no-check", "--wait"});
  INFO(failed.out << failed.err << d.log());
  CHECK(failed.code != 0);
  REQUIRE(d.Call("status", {{"study", "rerun"}}).at("state").as_string() == "FAILED");
  const size_t before = d.Trials("rerun").size();

  // Fixed: the same file again with --resume continues the FAILED study, 3 more trials.
  WriteFile(dir.File("fixed"), "");
  Ctl resumed = Trialctl(d.socket(), {"submit", sweep, "--resume", "--wait"});
  INFO(resumed.out << resumed.err);
  REQUIRE(resumed.code == 0);
  CHECK_THAT(resumed.err, Catch::Contains("continuing study rerun"));
  json::object s = d.Call("status", {{"study", "rerun"}}).as_object();
  CHECK(s.at("state").as_string() == "COMPLETE");
  CHECK(s.at("complete").as_int64() == 3);
  json::array trials = d.Trials("rerun");
  REQUIRE(trials.size() == before + 3);
  for (size_t i = 0; i < trials.size(); ++i) CHECK(trials[i].at("number").as_int64() == int64_t(i));
  CHECK_THAT(WaitEvent(d, "rerun", "study_resubmitted"), Catch::Contains("FAILED -> RUNNING"));

  // [study] load_if_exists = true in the file does the same, without --resume.
  WriteFile(sweep, SetTomlKey(toml, "max_failures_in_a_row", "2\nload_if_exists = true"));
  Ctl loaded = Trialctl(d.socket(), {"submit", sweep, "--wait"});
  INFO(loaded.err);
  REQUIRE(loaded.code == 0);
  CHECK(d.Trials("rerun").size() == before + 6);

  // Another objective or space is refused, naming what differs, and changes nothing.
  WriteFile(sweep, SetTomlKey(toml, "function", "\"flaky.py:other\""));
  Ctl other = Trialctl(d.socket(), {"submit", sweep, "--resume"});
  CHECK(other.code != 0);
  CHECK_THAT(other.err, Catch::Contains("cannot resume study \"rerun\""));
  CHECK_THAT(other.err, Catch::Contains("[objective] function"));
  CHECK_THAT(other.err, Catch::Contains("flaky.py:other\" now"));
  CHECK(d.Trials("rerun").size() == before + 6);
  // Without --resume or load_if_exists the name is taken, and the error says how to go on.
  WriteFile(sweep, toml);
  Ctl taken = Trialctl(d.socket(), {"submit", sweep});
  CHECK(taken.code != 0);
  CHECK_THAT(taken.err, Catch::Contains("trialctl submit --resume FILE"));
}

TEST_CASE("enqueue answers the suggests of a define-by-run objective, once with skip_if_exists",
          "[first-hour][integration]") {
  TempDir dir;
  WriteFile(dir.File("suggests.py"), R"(import time

def objective(trial):
    time.sleep(0.2)
    lr = trial.suggest_float("lr", 1e-5, 1e-1, log=True)
    opt = trial.suggest_categorical("opt", ["adam", "sgd"])
    layers = trial.suggest_int("layers", 1, 4)
    return lr * layers + (opt == "sgd")
)");
  const std::string sweep = dir.File("suggests.toml");
  WriteFile(sweep, PythonSweep("suggests", "suggests.py:objective", 4, "parallelism = 1\n",
                               "python = \"/usr/bin/python3\"\n"));
  TestDaemon d(dir.File("state"));
  d.Start();
  const std::string study = d.Submit(ReadTextFile(sweep), sweep);
  Ctl first = Trialctl(d.socket(), {"enqueue", study, "--param", "lr=0.001", "--param", "opt=sgd",
                                    "--skip-if-exists"});
  INFO(first.out << first.err << d.log());
  REQUIRE(first.code == 0);
  const int64_t number = std::stoll(first.out);
  // The same values again: a trial has them (not suggested yet): nothing is queued.
  Ctl again = Trialctl(d.socket(), {"enqueue", study, "--param", "lr=0.001", "--param", "opt=sgd",
                                    "--skip-if-exists"});
  CHECK(again.code == 0);
  CHECK(std::stoll(again.out) == number);
  CHECK_THAT(again.err, Catch::Contains("nothing queued"));
  // A value the suggest's distribution does not hold is not used; an event says so.
  Ctl outside = Trialctl(d.socket(), {"enqueue", study, "--param", "opt=rmsprop"});
  REQUIRE(outside.code == 0);
  const int64_t outside_number = std::stoll(outside.out);
  json::object s = d.WaitStudy(study, 120);
  CHECK(s.at("state").as_string() == "COMPLETE");
  json::array trials = d.Trials(study);
  REQUIRE(trials.size() == 4);
  const json::object& p = trials[number].at("params").as_object();
  INFO(json::serialize(p));
  CHECK(p.at("lr").to_number<double>() == 0.001);
  CHECK(p.at("opt").as_string() == "sgd");
  CHECK(p.contains("layers"));  // not given: the sampler's
  CHECK(trials[outside_number].at("params").at("opt").as_string() != "rmsprop");
  CHECK_THAT(WaitEvent(d, study, "enqueued_value_ignored"), Catch::Contains("rmsprop"));
}

TEST_CASE("a SIGTERM to triald mid-trial puts the trial back, the restart runs it",
          "[first-hour][integration]") {
  TempDir dir;
  // The first run of the configuration waits to be stopped; its rerun finishes at once.
  WriteFile(dir.File("long.py"), R"(import os, time

MARK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "started")

def objective(trial):
    x = trial.suggest_float("x", 0.0, 1.0)
    if not os.path.exists(MARK):
        open(MARK, "w").close()
        time.sleep(120)
    return x
)");
  const std::string sweep = dir.File("long.toml");
  WriteFile(sweep, PythonSweep("long", "long.py:objective", 1, "kill_grace = 5\n",
                               "python = \"/usr/bin/python3\"\n"));
  TestDaemon d(dir.File("state"));
  d.Start();
  const std::string study = d.Submit(ReadTextFile(sweep), sweep);
  REQUIRE(WaitFor([&] { return fs::exists(dir.File("started")); }, 60));
  REQUIRE(d.Stop() == 0);
  json::array stored;
  d.Start();
  json::object s = d.WaitStudy(study, 60);
  INFO(json::serialize(s) << d.log());
  CHECK(s.at("state").as_string() == "COMPLETE");
  stored = d.Trials(study);
  REQUIRE(stored.size() == 2);
  CHECK(stored[0].at("fail_reason").as_string() == "shutdown");
  CHECK(stored[1].at("state").as_string() == "COMPLETE");
  CHECK(stored[1].at("retry_of").as_int64() == 0);
  CHECK(stored[1].at("params") == stored[0].at("params"));
  CHECK(s.at("finished").as_int64() == 1);  // n_trials counts configurations
  CHECK_THAT(WaitEvent(d, study, "trial_requeued"), Catch::Contains("puts back trial 0"));
}

}  // namespace triald::testing

namespace triald::testing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST_CASE("which files are the objective's code: the scripts a command runs, the function's file",
          "[first-hour]") {
  TempDir dir;
  WriteFile(dir.File("train.py"), "print(1)\n");
  WriteFile(dir.File("run.sh"), "exit 0\n");
  const std::string where = dir.File("s.toml");
  auto exec = [&](const std::string& command) {
    return Parse("[study]\nname = \"s\"\nn_trials = 1\n[objective]\nkind = \"exec\"\ncommand = " +
                     command + "\n[space.x]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n",
                 where);
  };
  // An interpreter found through PATH, a compiled program and options are not the study's code;
  // the scripts it names are, once each; a name that is no file is not.
  CHECK(ctl::ObjectiveCodePaths(exec(R"(["python3", "train.py", "--lr", "train.py"])"), {}) ==
        std::vector<std::string>{dir.File("train.py")});
  CHECK(ctl::ObjectiveCodePaths(exec(R"(["/usr/bin/python3", "-u", "nope.py"])"), {}).empty());
  CHECK(ctl::ObjectiveCodePaths(exec(R"(["./run.sh"])"), {}) ==
        std::vector<std::string>{dir.File("run.sh")});
  config::SweepSpec py = Parse(PythonSweep("p", "train.py:objective", 1), where);
  CHECK(ctl::ObjectiveCodePaths(py, {dir.File("train.py"), dir.File("run.sh")}) ==
        std::vector<std::string>{dir.File("train.py"), dir.File("run.sh")});

  std::vector<config::CodeFile> read =
      ctl::ReadCodeFiles({dir.File("train.py"), dir.File("missing.py")});
  REQUIRE(read.size() == 1);
  CHECK(read[0].sha256 == common::Sha256Hex("print(1)\n"));
  CHECK(read[0].bytes == 9);
  CHECK(read[0].source == "print(1)\n");
  CHECK(ctl::CodeFileNow(dir.File("train.py"), read[0].sha256) == "unchanged");
  WriteFile(dir.File("train.py"), "print(2)\n");
  CHECK(ctl::CodeFileNow(dir.File("train.py"), read[0].sha256) ==
        "CHANGED since submit (sha256 now " + common::Sha256Hex("print(2)\n").substr(0, 12) + ")");
  CHECK(ctl::CodeFileNow(dir.File("missing.py"), read[0].sha256) ==
        "missing now (No such file or directory)");
  // A file too large to keep is recorded by its hash alone.
  WriteFile(dir.File("big.py"), std::string(config::kMaxKeptSourceBytes + 1, '#'));
  std::vector<config::CodeFile> big = ctl::ReadCodeFiles({dir.File("big.py")});
  REQUIRE(big.size() == 1);
  CHECK(big[0].source.empty());
  CHECK(big[0].bytes == config::kMaxKeptSourceBytes + 1);
}

TEST_CASE("the objective's file is kept at submit, status says when it changed, trials record it",
          "[first-hour][integration]") {
  TempDir dir;
  const std::string file = dir.File("objective.py");
  const std::string v1 = "def objective(trial):\n    return trial.suggest_float('x', 0, 1)\n";
  WriteFile(file, v1);
  const std::string sha1 = common::Sha256Hex(v1);
  const std::string sweep = dir.File("sweep.toml");
  WriteFile(sweep, PythonSweep("coded", "objective.py:objective", 2));
  TestDaemon d(dir.File("state"));
  d.Start();
  Ctl submitted = Trialctl(d.socket(), {"submit", sweep, "--wait"});
  INFO(submitted.out << submitted.err << d.log());
  REQUIRE(submitted.code == 0);
  json::object s = d.Call("status", {{"study", "coded"}}).as_object();
  REQUIRE(s.at("code").is_array());
  REQUIRE(s.at("code").as_array().size() == 1);
  const json::object& code = s.at("code").as_array()[0].as_object();
  CHECK(code.at("path").as_string() == file);
  CHECK(code.at("sha256").as_string() == sha1);
  CHECK(code.at("bytes").as_int64() == static_cast<int64_t>(v1.size()));
  CHECK_FALSE(code.contains("source"));  // the source is the owner's: `code`
  CHECK_THAT(Trialctl(d.socket(), {"status", "coded"}).out,
             Catch::Contains("code: " + file + " (sha256 " + sha1.substr(0, 12) + "): unchanged"));
  // Each trial says which code it ran.
  for (const json::value& t : d.Trials("coded")) {
    CHECK(t.at("attrs").at("triald.code").at("objective").at("sha256").as_string() == sha1);
    CHECK(t.at("attrs").at("triald.code").at("objective").at("path").as_string() == file);
  }
  // The file changes: status says so, --code shows what the study started with, and the trials
  // after the change record the new version.
  const std::string v2 = v1 + "# tuned\n";
  WriteFile(file, v2);
  CHECK_THAT(Trialctl(d.socket(), {"status", "coded"}).out,
             Catch::Contains("CHANGED since submit (sha256 now " +
                             common::Sha256Hex(v2).substr(0, 12) + ")"));
  Ctl kept = Trialctl(d.socket(), {"status", "coded", "--code"});
  CHECK(kept.code == 0);
  CHECK_THAT(kept.out, Catch::Contains("== " + file + " (sha256 " + sha1.substr(0, 12)));
  CHECK_THAT(kept.out, Catch::EndsWith(v1));
  REQUIRE(Trialctl(d.socket(), {"extend", "coded", "--n-trials", "3"}).code == 0);
  REQUIRE(d.WaitStudy("coded", 60).at("state").as_string() == "COMPLETE");
  CHECK(d.Trials("coded")[2].at("attrs").at("triald.code").at("objective").at("sha256") ==
        json::value(common::Sha256Hex(v2)));
  CHECK(ReadAll(file) == v2);
}

}  // namespace
}  // namespace triald::testing
