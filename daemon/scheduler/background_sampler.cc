#include "daemon/scheduler/background_sampler.h"

#include <sys/resource.h>
#include <unistd.h>

#include <utility>

namespace triald::daemon {

BackgroundSampler::BackgroundSampler(std::unique_ptr<sampler::Sampler> inner,
                                     std::function<void()> on_ready)
    : inner_(std::move(inner)), on_ready_(std::move(on_ready)) {
  inner_->SetCancel(&cancel_);
}

BackgroundSampler::~BackgroundSampler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cancel_.store(true);
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool BackgroundSampler::Matches(int trial_number, const config::SearchSpace& relative_space) const {
  // A sample computed for a lower number serves too: on shared storage other nodes may have
  // taken the number it was asked for while it was computed (one node alone, the number never
  // moves between the ask and the take).
  if (!done_ || done_->trial_number > trial_number) return false;
  if (done_->relative_space.size() != relative_space.size()) return false;
  for (size_t i = 0; i < relative_space.size(); ++i) {
    if (done_->relative_space[i].name != relative_space[i].name ||
        done_->relative_space[i].dist != relative_space[i].dist) {
      return false;
    }
  }
  return true;
}

bool BackgroundSampler::RelativeReady(const sampler::StudyView& study, int trial_number) {
  config::SearchSpace relative = inner_->InferRelativeSearchSpace(study, trial_number);
  if (relative.empty()) return true;  // nothing to compute
  std::lock_guard<std::mutex> lock(mu_);
  if (Matches(trial_number, relative)) return true;
  if (busy_) return false;  // asked again once the one in progress is done
  done_.reset();
  Job job;
  job.trial_number = trial_number;
  job.relative_space = std::move(relative);
  if (study.space != nullptr) job.space = *study.space;
  job.directions = study.directions;
  // What a sampler reads of the trials below this one (no curves, attributes or logs).
  for (const model::TrialRecord& t : *study.trials) {
    if (t.number >= trial_number) continue;
    model::TrialRecord copy;
    copy.id = t.id;
    copy.number = t.number;
    copy.state = t.state;
    copy.value = t.value;
    copy.values = t.values;
    copy.constraints = t.constraints;
    copy.params = t.params;
    copy.created_at = t.created_at;
    copy.finished_at = t.finished_at;
    job.trials.push_back(std::move(copy));
  }
  job_ = std::move(job);
  busy_ = true;
  if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
  cv_.notify_one();
  return false;
}

void BackgroundSampler::Run() {
  // Below the event loop and the trials: on a busy host the fit waits, not `status`.
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), kNice);
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || job_.has_value(); });
      if (stop_) return;
      job = std::move(*job_);
      job_.reset();
    }
    sampler::StudyView view;
    view.direction = job.directions.empty() ? config::Direction::kMinimize : job.directions[0];
    view.directions = job.directions;
    view.space = &job.space;
    view.trials = &job.trials;
    common::Result<config::ParamValues> values =
        inner_->SampleRelative(view, job.trial_number, job.relative_space);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      done_ = Done{job.trial_number, std::move(job.relative_space), std::move(values)};
      busy_ = false;
      ++computed_;
    }
    on_ready_();
  }
}

config::SearchSpace BackgroundSampler::InferRelativeSearchSpace(const sampler::StudyView& study,
                                                                int trial_number) {
  return inner_->InferRelativeSearchSpace(study, trial_number);
}

common::Result<config::ParamValues> BackgroundSampler::SampleRelative(
    const sampler::StudyView& study, int trial_number, const config::SearchSpace& relative_space) {
  (void)study;
  if (relative_space.empty()) return config::ParamValues{};
  std::lock_guard<std::mutex> lock(mu_);
  if (!Matches(trial_number, relative_space)) return config::ParamValues{};  // not asked ahead
  common::Result<config::ParamValues> values = std::move(done_->values);
  done_.reset();
  return values;
}

common::Result<double> BackgroundSampler::SampleIndependent(const sampler::StudyView& study,
                                                            int trial_number,
                                                            const config::ParamSpec& param) {
  return inner_->SampleIndependent(study, trial_number, param);
}

bool BackgroundSampler::Exhausted(const sampler::StudyView& study) const {
  return inner_->Exhausted(study);
}

int BackgroundSampler::computed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return computed_;
}

}  // namespace triald::daemon
