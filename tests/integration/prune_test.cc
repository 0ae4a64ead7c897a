// Pruning end to end: a real triald, a sweep with [pruner] kind = "median", and shell workers
// that report learning curves. Bad trials (x > 0) report poor values slowly and would run for
// a long time; the median pruner must stop them (SIGTERM to their group, then SIGKILL after
// kill_grace if they ignore it) and record them PRUNED with their last intermediate value,
// while good trials complete, the study ends with exactly n_trials finished trials, and no
// process or zombie of the study is left.

#include <unistd.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <string>

#include "tests/integration/harness.h"

namespace triald::testing {
namespace {

namespace json = boost::json;

constexpr int kSteps = 300;  // a bad trial left alone runs kSteps * 0.05 s = 15 s

// A worker: x <= 0 is good (reports 1.0 at every step at once, then its final value); x > 0
// is bad (reports 100 + step, one step every 50 ms). `on_term` is the bad worker's SIGTERM
// trap: it notes the signal in its trial folder, then exits or carries on.
std::string Worker(const std::string& on_term) {
  return "x=${TRIALD_PARAMS#*\\\"x\\\":}\nx=${x%\\}}\n"
         "report() { echo \"{\\\"type\\\":\\\"report\\\",\\\"step\\\":$1,\\\"value\\\":$2}\" "
         ">&3; }\n"
         "i=0\n"
         "case \"$x\" in\n"
         "  -*)\n"
         "    while [ $i -le " +
         std::to_string(kSteps) +
         " ]; do report $i 1.0; i=$((i+1)); done\n"
         "    echo '{\"type\":\"final\",\"value\":1.0}' >&3\n"
         "    exit 0;;\n"
         "esac\n"
         "trap '" +
         on_term +
         "' TERM\n"
         "while [ $i -le " +
         std::to_string(kSteps) +
         " ]; do report $i $((100+i)); i=$((i+1)); sleep 0.05; done\n"
         "echo '{\"type\":\"final\",\"value\":100}' >&3\n";
}

std::string PrunedSweep(
    const std::string& study, int n_trials, double kill_grace,
    const std::string& pruner = "kind = \"median\"\nn_startup_trials = 2\nn_warmup_steps = 0\n") {
  // Seed 11 gives trials 0 and 1 x <= 0, and trials 3, 4 and 5 x > 0. The median pruner needs
  // two COMPLETE trials before it prunes anything; a bad trial running before that would run to
  // its end (checked below, so that a sampler change shows up as such).
  std::string toml = ExecSweep(study, "[\"sh\", \"w.sh\"]", n_trials, /*parallelism=*/2,
                               /*timeout_s=*/0, kill_grace);
  const std::string seed = "seed = 1";
  toml.replace(toml.find(seed), seed.size(), "seed = 11");
  return toml + "\n[pruner]\n" + pruner;
}

double ParamX(const json::object& t) { return t.at("params").at("x").to_number<double>(); }

// Both workers below note the SIGTERM they get in their trial folder ("term"). With
// `pruned_at` > 0, bad trials must have been pruned at that report (threshold: the first;
// wilcoxon: the fourth, the first whose p-value is under 0.1).
void CheckStudy(TestDaemon& d, const std::string& study, int n_trials, size_t pruned_at = 0) {
  json::object st = d.WaitStudy(study, 120);
  CHECK(st.at("state").as_string() == "COMPLETE");
  json::array trials = d.Trials(study);
  REQUIRE(static_cast<int>(trials.size()) == n_trials);
  CHECK(st.at("finished").as_int64() == n_trials);
  REQUIRE(ParamX(trials[0].as_object()) <= 0);  // see PrunedSweep
  REQUIRE(ParamX(trials[1].as_object()) <= 0);
  int bad = 0;
  for (const json::value& v : trials) {
    const json::object& t = v.as_object();
    const int64_t number = t.at("number").as_int64();
    INFO("trial " << number << ": " << json::serialize(t));
    const json::array& inter = t.at("intermediate").as_array();
    REQUIRE(!inter.empty());
    if (ParamX(t) <= 0) {
      CHECK(t.at("state").as_string() == "COMPLETE");
      CHECK(t.at("value").to_number<double>() == 1.0);
      CHECK(inter.size() == kSteps + 1);
      continue;
    }
    ++bad;
    CHECK(t.at("state").as_string() == "PRUNED");
    CHECK(t.at("fail_reason").is_null());
    // Its value is its last intermediate value, and it was stopped long before its end.
    const json::array& last = inter.back().as_array();
    CHECK(t.at("value").to_number<double>() == last.at(1).to_number<double>());
    CHECK(inter.size() < kSteps / 2);
    // Reports sent after the decision are dropped, however many the worker got out first.
    if (pruned_at > 0) CHECK(inter.size() == pruned_at);
    const std::string marker =
        d.state_dir() + "/studies/" + study + "/trials/" + std::to_string(number) + "/term";
    CHECK(::access(marker.c_str(), F_OK) == 0);  // SIGTERM came first
  }
  CHECK(bad >= 2);  // the seed gives bad trials to prune
  CHECK(WaitNoProcessesOfStudy(study).empty());
  CHECK(ZombieChildren(d.pid()).empty());
}

TEST_CASE("the median pruner stops bad trials and good ones complete", "[integration][prune]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  // The bad worker exits on SIGTERM, leaving a marker that it got one.
  dir.Write("w.sh", Worker("echo term > \"$TRIALD_TRIAL_DIR/term\"; exit 143"), 0755);
  d.Submit(PrunedSweep("median", 10, /*kill_grace=*/5), dir.File("s.toml"));
  CheckStudy(d, "median", 10);
  // The daemon kept serving.
  CHECK(d.Call("ping").at("running").as_int64() == 0);
}

TEST_CASE("a pruned trial that ignores SIGTERM is killed after kill_grace and still PRUNED",
          "[integration][prune]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  // The bad worker notes SIGTERM and carries on (its sleep dies with the group's SIGTERM).
  dir.Write("w.sh", Worker("echo term > \"$TRIALD_TRIAL_DIR/term\""), 0755);
  d.Submit(PrunedSweep("stubborn", 6, /*kill_grace=*/0.5), dir.File("s.toml"));
  CheckStudy(d, "stubborn", 6);
  CHECK_THAT(d.log(), Catch::Contains("grace period over, SIGKILL to group"));
}

TEST_CASE("the threshold pruner stops a trial at its first value above upper",
          "[integration][prune]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  dir.Write("w.sh", Worker("echo term > \"$TRIALD_TRIAL_DIR/term\"; exit 143"), 0755);
  // Good trials report 1.0 and bad ones 100 + step: no other trial is needed to judge them.
  d.Submit(PrunedSweep("threshold", 8, /*kill_grace=*/5,
                       "kind = \"threshold\"\nupper = 50\nlower = -1\n"),
           dir.File("s.toml"));
  CheckStudy(d, "threshold", 8, /*pruned_at=*/1);
}

TEST_CASE("the wilcoxon pruner stops a trial worse than the best one at the same steps",
          "[integration][prune]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  dir.Write("w.sh", Worker("echo term > \"$TRIALD_TRIAL_DIR/term\"; exit 143"), 0755);
  // A bad trial's differences with the best (a good trial: 1.0 at every step) are 99, 100, ...:
  // the exact one-sided p-value is 1/2^n, under 0.1 from the fourth step on.
  d.Submit(PrunedSweep("wilcoxon", 8, /*kill_grace=*/5, "kind = \"wilcoxon\"\n"),
           dir.File("s.toml"));
  CheckStudy(d, "wilcoxon", 8, /*pruned_at=*/4);
}

}  // namespace
}  // namespace triald::testing
