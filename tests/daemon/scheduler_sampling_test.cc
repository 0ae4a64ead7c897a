// A study whose sampler computes in the background ([sampler] kind = "gp" behind
// BackgroundSampler): its next trial waits for the sample without holding the scheduler, which
// keeps answering and running its other trials; the trial starts once the sample is ready, with
// the point the sampler computes for that history. And kind = "auto": the choice is recorded.

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "daemon/control/verbs.h"
#include "daemon/sampler/gp_sampler.h"
#include "daemon/sampler/sampler.h"
#include "tests/daemon/scheduler_harness.h"

namespace triald {
namespace {

using testing::SchedulerHarness;
using testing::SchedulerHarnessOptions;
using testing::Sweep;

// Runs `inner`, but its relative samples wait until the gate opens (a fit that takes long).
class GatedSampler final : public sampler::Sampler {
 public:
  struct Gate {
    std::mutex mu;
    std::condition_variable cv;
    bool open = false;
    int waiting = 0;  // relative samples waiting at the gate
  };
  GatedSampler(std::unique_ptr<sampler::Sampler> inner, std::shared_ptr<Gate> gate)
      : inner_(std::move(inner)), gate_(std::move(gate)) {}
  config::SearchSpace InferRelativeSearchSpace(const sampler::StudyView& s, int n) override {
    return inner_->InferRelativeSearchSpace(s, n);
  }
  common::Result<config::ParamValues> SampleRelative(const sampler::StudyView& s, int n,
                                                     const config::SearchSpace& space) override {
    std::unique_lock<std::mutex> lock(gate_->mu);
    ++gate_->waiting;
    gate_->cv.notify_all();
    // Wakes up to see a cancel (the study dropped while it waits), as a fit would.
    while (!gate_->open && !(cancel_ != nullptr && cancel_->load())) {
      gate_->cv.wait_for(lock, std::chrono::milliseconds(10));
    }
    --gate_->waiting;
    lock.unlock();
    return inner_->SampleRelative(s, n, space);
  }
  common::Result<double> SampleIndependent(const sampler::StudyView& s, int n,
                                           const config::ParamSpec& p) override {
    return inner_->SampleIndependent(s, n, p);
  }
  void SetCancel(const std::atomic<bool>* cancel) override {
    cancel_ = cancel;
    inner_->SetCancel(cancel);
  }

 private:
  std::unique_ptr<sampler::Sampler> inner_;
  std::shared_ptr<Gate> gate_;
  const std::atomic<bool>* cancel_ = nullptr;
};

// What the daemon's asio::post does, for the test's thread to run.
struct PostQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> fns;
  void Post(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu);
    fns.push_back(std::move(fn));
    cv.notify_all();
  }
  // Runs what was posted, waiting up to 30 s for the first; false if nothing came.
  bool RunPosted() {
    std::deque<std::function<void()>> ready;
    {
      std::unique_lock<std::mutex> lock(mu);
      if (!cv.wait_for(lock, std::chrono::seconds(30), [this] { return !fns.empty(); })) {
        return false;
      }
      ready.swap(fns);
    }
    for (auto& fn : ready) fn();
    return true;
  }
};

TEST_CASE("a trial waits for its background sample while the scheduler goes on", "[gp]") {
  auto gate = std::make_shared<GatedSampler::Gate>();
  auto posted = std::make_shared<PostQueue>();
  SchedulerHarnessOptions o;
  o.post = [posted](std::function<void()> fn) { posted->Post(std::move(fn)); };
  o.make_sampler = [gate](const config::SamplerConfig& c, const config::SearchSpace& space)
      -> common::Result<std::unique_ptr<sampler::Sampler>> {
    TRIALD_ASSIGN_OR_RETURN(std::unique_ptr<sampler::Sampler> real, sampler::MakeSampler(c, space));
    if (c.kind != "gp") return real;
    return std::unique_ptr<sampler::Sampler>(new GatedSampler(std::move(real), gate));
  };
  SchedulerHarness h(o);
  Sweep gp;
  gp.name = "gp";
  gp.n_trials = 3;
  gp.space = testing::kUnitSpace;
  gp.sampler = "kind = \"gp\"\nseed = 3\nn_startup_trials = 2";
  h.SubmitOk(gp);
  testing::FakeLauncher& l = h.launcher();
  // Trial 0 needs no model (no trial has finished): it starts at once.
  REQUIRE(l.live_count("gp") == 1);
  l.Complete(*l.Live("gp").at(0), 0.5);
  // Trial 1's relative sample is computed on the sampler's thread, held at the gate; the
  // scheduler does not wait for it.
  {
    std::unique_lock<std::mutex> lock(gate->mu);
    REQUIRE(gate->cv.wait_for(lock, std::chrono::seconds(30), [&] { return gate->waiting == 1; }));
  }
  h.scheduler().Pump();  // returns at once: nothing of "gp" to start yet
  CHECK(l.live_count("gp") == 0);
  CHECK(h.State("gp") == model::StudyState::kRunning);
  // The control verbs answer meanwhile: status of the study whose sample is being computed.
  daemon::VerbContext verbs;
  verbs.scheduler = &h.scheduler();
  verbs.storage = &h.storage();
  verbs.state_dir = "/nonexistent";
  common::Result<boost::json::value> status =
      daemon::HandleVerb(verbs, "status", boost::json::object{{"study", "gp"}});
  REQUIRE(status.ok());
  CHECK(status->at("sampler").at("kind") == "gp");
  CHECK(status->at("complete").as_int64() == 1);
  // Another study runs its trials meanwhile, start to end.
  Sweep other;
  other.name = "other";
  other.n_trials = 2;
  other.space = testing::kUnitSpace;
  h.SubmitOk(other);
  for (int i = 0; i < 2; ++i) {
    REQUIRE(l.live_count("other") == 1);
    l.Complete(*l.Live("other").at(0), 1.0);
  }
  CHECK(h.State("other") == model::StudyState::kComplete);
  CHECK(l.live_count("gp") == 0);
  // The gate opens: the sampler's thread asks for a Pump(), which starts trial 1; trial 2's
  // sample, asked when trial 1 ends, comes the same way.
  {
    std::lock_guard<std::mutex> lock(gate->mu);
    gate->open = true;
  }
  gate->cv.notify_all();
  REQUIRE(posted->RunPosted());
  REQUIRE(l.live_count("gp") == 1);
  l.Complete(*l.Live("gp").at(0), 0.25);
  REQUIRE(posted->RunPosted());
  REQUIRE(l.live_count("gp") == 1);
  // Trial 2's x is what the GP computes here, on this thread, from trials 0 and 1.
  const std::vector<model::TrialRecord> trials = h.Trials("gp");
  REQUIRE(trials.size() == 3);
  const std::vector<model::TrialRecord> seen(trials.begin(), trials.begin() + 2);
  const config::SearchSpace space = {{"x", trials[0].params.at("x").dist}};
  config::GpConfig gc;
  gc.n_startup_trials = 2;
  auto sync = sampler::GpSampler::Create(space, 3, gc);
  REQUIRE(sync.ok());
  sampler::StudyView view;
  view.space = &space;
  view.trials = &seen;
  auto expected = (*sync)->SampleRelative(view, 2, space);
  REQUIRE(expected.ok());
  REQUIRE(expected->count("x") == 1);
  CHECK((*sync)->diagnostics().observations == 2);
  CHECK(trials[2].params.at("x").internal == expected->at("x"));
  l.Complete(*l.Live("gp").at(0), 0.1);
  CHECK(h.State("gp") == model::StudyState::kComplete);
}

TEST_CASE("kind = \"auto\" records its choice with the study", "[gp]") {
  SchedulerHarness h;
  Sweep sweep;
  sweep.n_trials = 3;
  sweep.space = testing::kUnitSpace;
  sweep.sampler = "kind = \"auto\"";
  h.SubmitOk(sweep);
  bool found = false;
  for (const auto& [kind, detail] : h.Events("study")) {
    if (kind != "sampler_chosen") continue;
    found = true;
    CHECK(detail ==
          "[sampler] kind = \"auto\" chose gp: 1 numeric parameter, 3 trials, one objective");
  }
  CHECK(found);
  Sweep choice = sweep;
  choice.name = "with-choice";
  choice.space = testing::kDefaultSpace;
  h.SubmitOk(choice);
  bool tpe = false;
  for (const auto& [kind, detail] : h.Events("with-choice")) {
    tpe = tpe || (kind == "sampler_chosen" &&
                  detail == "[sampler] kind = \"auto\" chose tpe: categorical parameter \"opt\"");
  }
  CHECK(tpe);
}

}  // namespace
}  // namespace triald
