// Resuming from checkpoints end to end: an lm trial with checkpoint_every and retries = 1 is
// SIGKILLed once its second checkpoint is in its trial folder; its retry gets the failed
// attempt's folder as TRIALD_RESUME_DIR, resumes at that checkpoint's step, reports only later
// steps and ends with the evaluation loss of an uninterrupted run of the same trial.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "tests/integration/harness.h"
#include "tests/worker/fixtures.h"

namespace triald::testing {
namespace {

namespace json = boost::json;

// The step in the header of an lm checkpoint file (worker/lm_checkpoint.h: "step N" is its second
// line); 0 while there is none. The file is replaced by rename, so a read sees a whole one.
int64_t CheckpointStep(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string magic, step_line;
  if (!std::getline(in, magic) || !std::getline(in, step_line)) return 0;
  REQUIRE(magic == "triald-lm-checkpoint 1");
  REQUIRE(step_line.rfind("step ", 0) == 0);
  return std::stoll(step_line.substr(5));
}

std::string Sweep(const std::string& name, const std::string& fixtures, const std::string& corpus) {
  // One configuration (a single-choice learning rate), dropout on so that LibTorch's generator
  // is part of the path, an evaluation every 2 steps and a checkpoint every 2 steps.
  std::ostringstream toml;
  toml << "[study]\nname = \"" << name << "\"\nn_trials = 1\nretries = 1\n\n"
       << "[objective]\nkind = \"lm\"\nmodel = \"" << fixtures << "/tiny-gpt2\"\n"
       << "train_file = \"" << corpus << "/train.txt\"\neval_file = \"" << corpus
       << "/eval.txt\"\nmax_steps = 12\nseq_len = 32\neval_every = 2\ncheckpoint_every = 2\n"
       << "device = \"cpu\"\nbatch_size = 4\ndropout = 0.1\nwarmup_steps = 2\n\n"
       << "[space.learning_rate]\ntype = \"categorical\"\nchoices = [3e-3]\n";
  return toml.str();
}

std::vector<int64_t> Steps(const json::object& trial) {
  std::vector<int64_t> steps;
  for (const json::value& p : trial.at("intermediate").as_array()) {
    steps.push_back(p.as_array().at(0).as_int64());
  }
  return steps;
}

}  // namespace

TEST_CASE("a killed lm trial's retry resumes from its checkpoint and ends as if never killed",
          "[lm][integration][retry][resume]") {
  const std::string fixtures = worker::testing::FixtureDir();
  const std::string corpus = worker::testing::TinyCorpusDir();
  TempDir dir;
  TestDaemon d(dir.File("state"), 1);
  d.Start();
  const std::string killed_toml = Sweep("lm-killed", fixtures, corpus);
  d.Submit(killed_toml, dir.Write("killed.toml", killed_toml));

  // Wait for the second checkpoint (step 4) of trial 0, then SIGKILL its process.
  const std::string folder = d.state_dir() + "/studies/lm-killed/trials/0";
  const std::string checkpoint = folder + "/checkpoint";
  pid_t pid = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while (CheckpointStep(checkpoint) < 4) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    json::array trials = d.Trials("lm-killed");
    REQUIRE(trials.size() == 1);
    INFO(json::serialize(trials));
    REQUIRE(trials[0].at("state").as_string() != "COMPLETE");  // killed before it ends
    if (trials[0].at("pid").is_int64()) pid = static_cast<pid_t>(trials[0].at("pid").as_int64());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE(pid > 0);
  REQUIRE(::kill(pid, SIGKILL) == 0);
  // The step the retry must resume from: the checkpoint there once the process is gone.
  json::object status = d.WaitStudy("lm-killed", 300);
  const int64_t resume_step = CheckpointStep(checkpoint);
  CHECK(resume_step >= 4);
  CHECK(resume_step < 12);
  CHECK(status.at("state").as_string() == "COMPLETE");

  json::array trials = d.Trials("lm-killed");
  REQUIRE(trials.size() == 2);
  const json::object& first = trials[0].as_object();
  const json::object& retry = trials[1].as_object();
  INFO(json::serialize(trials));
  CHECK(first.at("state").as_string() == "FAIL");
  CHECK(first.at("fail_reason").as_string() == "signal");
  CHECK(retry.at("state").as_string() == "COMPLETE");
  CHECK(retry.at("retry_of").as_int64() == 0);
  CHECK(retry.at("attrs").at("resumed_from_step").as_int64() == resume_step);
  CHECK_FALSE(retry.at("attrs").as_object().contains("resume_refused"));

  // Intermediate values: the failed attempt's up to the resume point, the retry's after it,
  // exactly the evaluation steps after it, and no step twice.
  const std::vector<int64_t> before = Steps(first), after = Steps(retry);
  for (int64_t s : before) CHECK(s <= resume_step);
  std::vector<int64_t> expected_after;
  for (int64_t s = resume_step + 2; s <= 12; s += 2) expected_after.push_back(s);
  CHECK(after == expected_after);
  std::set<int64_t> all(before.begin(), before.end());
  for (int64_t s : after) CHECK(all.insert(s).second);

  // The event says where the retry resumed from.
  bool event = false;
  const json::value events = d.Call("events", {{"study", "lm-killed"}});
  for (const json::value& e : events.as_array()) {
    if (e.at("kind").as_string() != "resume_folder") continue;
    CHECK(e.at("detail").as_string() ==
          "trial 1 resumes from " + folder + " (trial 0's folder, TRIALD_RESUME_DIR)");
    event = true;
  }
  CHECK(event);

  // The same trial uninterrupted, in a study of its own: the same evaluation loss.
  const std::string whole_toml = Sweep("lm-whole", fixtures, corpus);
  d.Submit(whole_toml, dir.Write("whole.toml", whole_toml));
  CHECK(d.WaitStudy("lm-whole", 300).at("state").as_string() == "COMPLETE");
  json::array whole = d.Trials("lm-whole");
  REQUIRE(whole.size() == 1);
  INFO(json::serialize(whole));
  CHECK(whole[0].at("state").as_string() == "COMPLETE");
  CHECK_FALSE(whole[0].at("attrs").as_object().contains("resumed_from_step"));
  const double whole_loss = whole[0].at("value").to_number<double>();
  const double resumed_loss = retry.at("value").to_number<double>();
  CHECK(std::abs(resumed_loss - whole_loss) <= 1e-6);
  // And the same evaluations at the steps the retry reported.
  std::map<int64_t, double> whole_curve;
  for (const json::value& p : whole[0].at("intermediate").as_array()) {
    whole_curve[p.as_array().at(0).as_int64()] = p.as_array().at(1).to_number<double>();
  }
  for (const json::value& p : retry.at("intermediate").as_array()) {
    const int64_t s = p.as_array().at(0).as_int64();
    CHECK(std::abs(p.as_array().at(1).to_number<double>() - whole_curve.at(s)) <= 1e-6);
  }
  CHECK(WaitNoProcessesOfStudy("lm-killed").empty());
  CHECK(ZombieChildren(d.pid()).empty());
}

}  // namespace triald::testing
