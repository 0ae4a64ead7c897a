#pragma once
// BackgroundSampler: runs a sampler's relative sampling (the GP's fit and acquisition search)
// on a thread of its own, so the scheduler's event loop never waits for it: `status`, the
// dashboard and every trial channel answer while a study's model is being fitted.
//
// The scheduler asks RelativeReady(study, n) before it takes trial n's relative sample (a new
// trial's, and a define-by-run retry's or enqueued trial's before it starts). The first ask
// copies what the sampler reads of the study (the trials below n: numbers, states, values,
// constraints and parameters) and hands it to the thread; it answers false until the sample is
// computed, and the thread then calls `on_ready` (the daemon posts a Pump() to the event loop),
// after which RelativeReady answers true and SampleRelative returns the sample at once. So a
// trial sampled in the background sees the study as it stood when its sample was asked for:
// trials that finish during the fit count from the next trial on (a study run one trial at a
// time sees exactly what a synchronous sampler would).
//
// On shared storage (several daemons on one study) another node may take trial n while n's
// sample is computed; the sample then serves the next number this node asks for (it saw a
// little less of the study), so a node whose fits are slow is not starved by faster ones.
//
// Bounded: one thread per study, at nice kNice, and one sample at a time; an ask for another trial
// (or for a relative space that changed) while one is computed waits for it, then computes its own.
// The thread starts at the first ask and is cancelled (the sampler's SetCancel flag, checked at
// every evaluation of the fit and of the acquisition) and joined when the study is dropped or
// the daemon stops, within one evaluation.
//
// A relative sample asked without RelativeReady (trialctl enqueue drawing the parameters it was
// not given) is not computed on the event loop: it is empty, so those parameters are sampled
// independently (the GP sampler: by its QMC sampler).
//
// Restart: nothing of it is stored; the next daemon computes the next trial's sample again from
// the stored trials, which for the GP sampler (fitted from a fixed start, its search seeded from
// (seed, trial number)) gives the same point for the same history.
//
// Thread-safety: the Sampler interface is called from the event-loop thread only; `inner` must
// allow SampleRelative on the background thread while its other methods run on the event loop
// (GpSampler does). `on_ready` is called from the background thread.

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "daemon/sampler/sampler.h"

namespace triald::daemon {

class BackgroundSampler final : public sampler::Sampler {
 public:
  // The thread's nice value (Linux nices threads one by one): on a host whose cores are busy,
  // the event loop and the trials run first and the fit takes what is left.
  static constexpr int kNice = 10;

  BackgroundSampler(std::unique_ptr<sampler::Sampler> inner, std::function<void()> on_ready);
  ~BackgroundSampler() override;  // cancels the sample in progress and joins the thread
  BackgroundSampler(const BackgroundSampler&) = delete;
  BackgroundSampler& operator=(const BackgroundSampler&) = delete;

  bool RelativeReady(const sampler::StudyView& study, int trial_number) override;
  config::SearchSpace InferRelativeSearchSpace(const sampler::StudyView& study,
                                               int trial_number) override;
  common::Result<config::ParamValues> SampleRelative(
      const sampler::StudyView& study, int trial_number,
      const config::SearchSpace& relative_space) override;
  common::Result<double> SampleIndependent(const sampler::StudyView& study, int trial_number,
                                           const config::ParamSpec& param) override;
  bool Exhausted(const sampler::StudyView& study) const override;

  // Samples computed on the thread so far (for tests).
  int computed() const;

 private:
  struct Job {
    int trial_number = 0;
    config::SearchSpace relative_space;
    config::SearchSpace space;  // the sweep's [space]
    std::vector<model::TrialRecord> trials;
    std::vector<config::Direction> directions;
  };
  struct Done {
    int trial_number = 0;
    config::SearchSpace relative_space;
    common::Result<config::ParamValues> values;
  };
  void Run();
  bool Matches(int trial_number, const config::SearchSpace& relative_space) const;

  std::unique_ptr<sampler::Sampler> inner_;
  std::function<void()> on_ready_;
  std::atomic<bool> cancel_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Job> job_;  // handed to the thread, not yet taken
  bool busy_ = false;       // a job is queued or being computed
  std::optional<Done> done_;
  bool stop_ = false;
  int computed_ = 0;
  std::thread thread_;  // started at the first job
};

}  // namespace triald::daemon
