// kind = "lm" with [objective] fork_server = true end to end: a real triald starts the study's
// trials as forks of `trial-worker --fork-server` (worker/fork_server.h), which maps the tiny
// GPT-2 and tokenizes the texts once. The forked trials must compute exactly what exec'd ones
// compute, and the daemon must treat them as it treats any trial (timeouts included).
#include <signal.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "tests/integration/harness.h"
#include "tests/worker/fixtures.h"

namespace triald::testing {
namespace {

namespace json = boost::json;

// The tiny fixture's sweep: `max_steps` CPU steps of batch 2 x 32 tokens, an evaluation every 2,
// dropout on (so that LibTorch's generator is part of what both paths must compute alike), two
// trials at a time, the random sampler with a fixed seed (so both paths get the same
// parameters). `extra_study` and `extra_objective` are added to [study] and [objective].
std::string Sweep(const std::string& name, bool fork_server, int n_trials, int64_t max_steps,
                  const std::string& extra_study = "", const std::string& extra_objective = "") {
  const std::string fixtures = worker::testing::FixtureDir();
  const std::string corpus = worker::testing::TinyCorpusDir();
  std::ostringstream toml;
  toml << "[study]\nname = \"" << name << "\"\nn_trials = " << n_trials << "\nparallelism = 2\n"
       << extra_study << "\n"
       << "[objective]\nkind = \"lm\"\nmodel = \"" << fixtures << "/tiny-gpt2\"\n"
       << "train_file = \"" << corpus << "/train.txt\"\neval_file = \"" << corpus
       << "/eval.txt\"\nmax_steps = " << max_steps << "\nseq_len = 32\neval_every = 2\n"
       << "device = \"cpu\"\nbatch_size = 2\ndropout = 0.1\nfork_server = "
       << (fork_server ? "true" : "false") << "\n"
       << extra_objective << "\n"
       << "[space.learning_rate]\ntype = \"float\"\nlow = 1e-4\nhigh = 1e-2\nlog = true\n\n"
       << "[sampler]\nkind = \"random\"\nseed = 3\n";
  return toml.str();
}

// The pid of the study's fork server once `status` shows it on, with LibTorch and the objective
// loaded.
int64_t WaitServerOn(TestDaemon& d, const std::string& study) {
  const json::object server = WaitForkServerOn(d, study, 120);
  if (server.empty()) {
    INFO(d.log());
    FAIL("the fork server of " << study << " was not on within 120 s");
  }
  CHECK(json::serialize(server.at("preloaded")) == "[\"libtorch\"]");
  CHECK(server.at("objective_loaded").as_bool());
  return server.at("pid").as_int64();
}

// How many times `word` occurs in `text`.
int Occurrences(const std::string& text, const std::string& word) {
  int n = 0;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++n;
  return n;
}

// After the study: one server served it all (started once, never exited or off), is gone, and
// says in its log that it forked `forks` trials; nothing of the study is left.
void CheckOneServerServed(TestDaemon& d, const std::string& study, int64_t server_pid, int forks) {
  Ctl events = Trialctl(d.socket(), {"events", study});
  REQUIRE(events.code == 0);
  INFO(events.out);
  CHECK(Occurrences(events.out, "fork_server_started") == 1);
  CHECK_THAT(events.out, !Catch::Contains("fork_server_off"));
  CHECK_THAT(events.out, !Catch::Contains("fork_server_exited"));
  CHECK(WaitPidGone(static_cast<pid_t>(server_pid)));
  const std::string server_log =
      ReadTextFile(d.state_dir() + "/studies/" + study + "/fork-server.log");
  INFO(server_log);
  CHECK_THAT(server_log,
             Catch::Contains("after " + std::to_string(forks) + " forked trials; exiting"));
  CHECK(WaitNoProcessesOfStudy(study).empty());
  CHECK(ZombieChildren(d.pid()).empty());
}

}  // namespace

// How the server forks each trial here (worker/clone_parent.h).
#if defined(__x86_64__) || defined(__aarch64__)
constexpr int64_t kForks = 1;
const std::string kForksText = "one fork per trial";
#else
constexpr int64_t kForks = 2;
const std::string kForksText = "two forks per trial";
#endif

TEST_CASE("a kind = \"lm\" sweep forked from its fork server gives exactly the exec'd losses",
          "[lm][integration][fork_server]") {
  TempDir dir;
  TestDaemon d(dir.File("state"), 2);
  d.Start();

  const std::string exec_toml = Sweep("lm-exec", false, 4, 4);
  d.Submit(exec_toml, dir.Write("exec.toml", exec_toml));
  CHECK(d.WaitStudy("lm-exec", 300).at("state").as_string() == "COMPLETE");
  CHECK(d.Call("status", {{"study", "lm-exec"}}).at("fork_server").is_null());

  const std::string fork_toml = Sweep("lm-fork", true, 4, 4);
  d.Submit(fork_toml, dir.Write("fork.toml", fork_toml));
  const int64_t server_pid = WaitServerOn(d, "lm-fork");
  Ctl text = Trialctl(d.socket(), {"status", "lm-fork"});
  CHECK_THAT(text.out, Catch::Contains("fork server: on (pid " + std::to_string(server_pid) +
                                       ", preloaded: libtorch, " + kForksText + ")"));
  CHECK(d.Call("status", {{"study", "lm-fork"}}).at("fork_server").at("forks").as_int64() ==
        kForks);
  CHECK(d.WaitStudy("lm-fork", 300).at("state").as_string() == "COMPLETE");

  // The same parameters in both studies (the sampler's seed), each with the same evaluation
  // losses, bit for bit: a forked trial is the exec'd trial, less the loading.
  std::map<std::string, json::object> exec_by_params;
  for (const json::value& v : d.Trials("lm-exec")) {
    const json::object& t = v.as_object();
    INFO(json::serialize(t));
    CHECK(t.at("state").as_string() == "COMPLETE");
    exec_by_params[json::serialize(t.at("params"))] = t;
  }
  REQUIRE(exec_by_params.size() == 4);
  json::array forked = d.Trials("lm-fork");
  REQUIRE(forked.size() == 4);
  std::set<int64_t> pids;
  for (const json::value& v : forked) {
    const json::object& t = v.as_object();
    INFO(json::serialize(t));
    CHECK(t.at("state").as_string() == "COMPLETE");
    REQUIRE(t.at("pid").is_int64());
    pids.insert(t.at("pid").as_int64());
    const auto same = exec_by_params.find(json::serialize(t.at("params")));
    REQUIRE(same != exec_by_params.end());
    const json::object& e = same->second;
    INFO("exec'd: " << json::serialize(e));
    CHECK(t.at("value").to_number<double>() == e.at("value").to_number<double>());
    CHECK(json::serialize(t.at("intermediate")) == json::serialize(e.at("intermediate")));
    CHECK(t.at("intermediate").as_array().size() == 2);  // steps 2 and 4
    CHECK(t.at("attrs").at("device").as_string() == "cpu");
    // Measured as an exec'd trial is: at least the worker's plan, with CPU time of its own.
    const json::object& resources = t.at("resources").as_object();
    CHECK(resources.at("peak_memory_bytes").to_number<double>() >
          resources.at("planned_memory_bytes").to_number<double>());
    CHECK(resources.at("cpu_time_s").to_number<double>() > 0);
  }
  // Four processes of their own, none of them the server.
  CHECK(pids.size() == 4);
  CHECK(pids.count(server_pid) == 0);

  CheckOneServerServed(d, "lm-fork", server_pid, 4);
}

TEST_CASE("a forked lm trial past its trial_timeout ends FAIL(timeout), its server serving on",
          "[lm][integration][fork_server]") {
  TempDir dir;
  TestDaemon d(dir.File("state"), 2);
  d.Start();
  // Far more steps than 4 s allow: every trial is stopped by its timeout, mid-training.
  const std::string toml = Sweep("lm-slow", true, 3, 1000000, "trial_timeout = 4\n");
  d.Submit(toml, dir.Write("slow.toml", toml));
  const int64_t server_pid = WaitServerOn(d, "lm-slow");

  // Once the first trial has timed out, the same server is still on and starts the third.
  WaitTrials(
      d, "lm-slow", [](const json::array& trials) { return CountState(trials, "FAIL") > 0; }, 120);
  CHECK(::kill(static_cast<pid_t>(server_pid), 0) == 0);

  CHECK(d.WaitStudy("lm-slow", 120).at("state").as_string() == "COMPLETE");
  json::array trials = d.Trials("lm-slow");
  REQUIRE(trials.size() == 3);
  std::set<int64_t> pids;
  for (const json::value& v : trials) {
    const json::object& t = v.as_object();
    INFO(json::serialize(t));
    CHECK(t.at("state").as_string() == "FAIL");
    CHECK(t.at("fail_reason").as_string() == "timeout");
    // SIGTERM, which the trial answered as an exec'd one does: it stopped between steps.
    CHECK(t.at("exit_code") == json::value(143));
    // It was training when it was stopped: evaluations had arrived.
    CHECK_FALSE(t.at("intermediate").as_array().empty());
    REQUIRE(t.at("pid").is_int64());
    pids.insert(t.at("pid").as_int64());
  }
  CHECK(pids.size() == 3);
  CHECK(pids.count(server_pid) == 0);
  CheckOneServerServed(d, "lm-slow", server_pid, 3);
}

// OpenBLAS starts its threads as trial-worker loads, and a server with threads is not safe to fork
// from: triald starts the server with one, whatever the study's environment asks for its trials.
TEST_CASE("an lm study whose environment sets OPENBLAS_NUM_THREADS keeps its fork server",
          "[lm][integration][fork_server]") {
  TempDir dir;
  TestDaemon d(dir.File("state"), 2);
  d.Start();
  const std::string toml =
      Sweep("lm-blas", true, 2, 2, "", "env = { OPENBLAS_NUM_THREADS = \"2\" }\n");
  d.Submit(toml, dir.Write("blas.toml", toml));
  CHECK(d.WaitStudy("lm-blas", 300).at("state").as_string() == "COMPLETE");
  for (const json::value& t : d.Trials("lm-blas")) {
    INFO(json::serialize(t));
    CHECK(t.at("state").as_string() == "COMPLETE");
  }
  Ctl events = Trialctl(d.socket(), {"events", "lm-blas"});
  REQUIRE(events.code == 0);
  INFO(events.out);
  CHECK(Occurrences(events.out, "fork_server_started") == 1);
  CHECK_THAT(events.out, !Catch::Contains("fork_server_off"));
  const std::string server_log = ReadTextFile(d.state_dir() + "/studies/lm-blas/fork-server.log");
  INFO(server_log);
  CHECK_THAT(server_log, Catch::Contains("after 2 forked trials; exiting"));
  CHECK(WaitNoProcessesOfStudy("lm-blas").empty());
}

}  // namespace triald::testing
