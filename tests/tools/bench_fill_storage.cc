// triald-bench-fill: writes a state directory's database straight through the Storage API, for
// scripts/bench_read_verbs.py: STUDIES finished studies of TRIALS finished trials each, every
// trial with two parameters and STEPS intermediate values, as a long sweep would leave them.
// Much faster than running the trials (one batch per study).
//
//   triald-bench-fill STATE_DIR STUDIES TRIALS STEPS
//
// Prints one JSON line: {"studies":..., "trials":..., "seconds":...}.
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "daemon/storage/sqlite_storage.h"

namespace {

using triald::config::Distribution;
using triald::config::ParamType;
namespace model = triald::model;

int Fail(const std::string& what) {
  std::fprintf(stderr, "triald-bench-fill: %s\n", what.c_str());
  return 1;
}

int Run(const std::string& state_dir, int studies, int trials, int steps) {
  ::mkdir(state_dir.c_str(), 0700);
  triald::storage::SqliteOptions options;
  options.path = state_dir + "/triald.db";
  auto opened = triald::storage::OpenSqliteStorage(options);
  if (!opened.ok()) return Fail(opened.status().message());
  triald::storage::Storage& st = **opened;

  Distribution lr;
  lr.type = ParamType::kFloat;
  lr.low = 1e-5;
  lr.high = 1e-1;
  lr.log = true;
  Distribution layers;
  layers.type = ParamType::kInt;
  layers.low = 1;
  layers.high = 12;
  layers.step = 1;

  const auto start = std::chrono::steady_clock::now();
  for (int s = 0; s < studies; ++s) {
    model::NewStudy ns;
    ns.name = "bench-" + std::to_string(s);
    ns.direction = triald::config::Direction::kMinimize;
    ns.n_trials = trials;
    ns.spec_toml = "[study]\nname = \"" + ns.name + "\"\nn_trials = " + std::to_string(trials) +
                   "\n\n[objective]\nkind = \"exec\"\ncommand = [\"true\"]\n\n[space.lr]\ntype = "
                   "\"float\"\nlow = 1e-5\nhigh = 1e-1\nlog = true\n\n[space.layers]\ntype = "
                   "\"int\"\nlow = 1\nhigh = 12\n";
    ns.spec_path = state_dir + "/" + ns.name + ".toml";
    ns.seed = static_cast<uint64_t>(s + 1);
    if (auto b = st.BeginBatch(); !b.ok()) return Fail(b.message());
    auto study = st.CreateStudy(ns, 1000);
    if (!study.ok()) return Fail(study.status().message());
    for (int t = 0; t < trials; ++t) {
      model::ParamMap params;
      params["lr"] = {1e-4 * (1 + t % 97), lr};
      params["layers"] = {static_cast<double>(1 + t % 12), layers};
      const double at = 1000 + t;
      auto trial = st.CreateTrial(study->id, params, at);
      if (!trial.ok()) return Fail(trial.status().message());
      if (auto m = st.MarkRunning(trial->id, {1000 + t, 1000 + t, 1}, at); !m.ok()) {
        return Fail(m.message());
      }
      for (int i = 0; i < steps; ++i) {
        if (auto a = st.AddIntermediate(trial->id, i, 1.0 / (1 + i + t % 7)); !a.ok()) {
          return Fail(a.message());
        }
      }
      model::TrialOutcome o;
      o.state = t % 10 == 9 ? model::TrialState::kPruned : model::TrialState::kComplete;
      o.value = 1.0 / (1 + t % 1009);
      if (auto f = st.FinishTrial(trial->id, o, at + 0.5); !f.ok()) return Fail(f.message());
    }
    if (auto d = st.SetStudyState(study->id, model::StudyState::kComplete, 1000 + trials);
        !d.ok()) {
      return Fail(d.message());
    }
    if (auto c = st.CommitBatch(); !c.ok()) return Fail(c.message());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("{\"studies\": %d, \"trials\": %d, \"steps\": %d, \"seconds\": %.1f}\n", studies,
              trials, steps, seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: triald-bench-fill STATE_DIR STUDIES TRIALS STEPS\n");
    return 2;
  }
  const int studies = std::atoi(argv[2]);
  const int trials = std::atoi(argv[3]);
  const int steps = std::atoi(argv[4]);
  if (studies < 1 || trials < 1 || steps < 0) {
    std::fprintf(stderr, "triald-bench-fill: STUDIES and TRIALS must be positive, STEPS >= 0\n");
    return 2;
  }
  return Run(argv[1], studies, trials, steps);
}
