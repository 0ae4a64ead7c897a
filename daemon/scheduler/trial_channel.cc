#include "daemon/scheduler/trial_channel.h"

#include <algorithm>
#include <utility>

#include "common/json_text.h"
#include "config/suggest.h"
#include "daemon/scheduler/enqueued_params.h"

namespace triald::daemon {

using launcher::StopReason;

TrialChannel::TrialChannel(Options options)
    : options_(std::move(options)),
      caps_(options_.study->spec.study, options_.study->trials[options_.number]) {}

void TrialChannel::StartSample(std::optional<sampler::TrialSample> drawn) {
  StudyRuntime& study = *options_.study;
  const int number = options_.number;
  common::Result<sampler::TrialSample> sample =
      drawn ? common::Result<sampler::TrialSample>(std::move(*drawn))
            : sampler::StartRelative(*study.sampler, study.view(), number);
  if (!sample.ok()) {
    // Every suggest is then sampled independently, which is always valid.
    options_.logger->warn("study {} trial {}: relative sampling failed: {}", study.record.name,
                          number, sample.status().message());
    sample = sampler::TrialSample{};
    sample->trial_number = number;
  }
  // The parameters the trial already holds (its [space] values, drawn up front, or enqueued
  // ones) answer suggests for their names.
  for (const auto& [name, value] : trial().params) {
    sampler::Hold(*sample, name, value.internal, value.dist);
  }
  // Values enqueued for parameters the objective suggests itself (trialctl enqueue): they
  // answer those suggests, checked against each suggest's distribution (AnswerSuggest).
  enqueued_ = EnqueuedValues(trial());
  sample_ = std::move(sample).value();
}

void TrialChannel::OnMessage(const proto::ReportMessage& m) {
  launcher::TrialProcess& process = *options_.process;
  switch (m.type) {
    case proto::ReportType::kReport:
      OnReport(m);
      break;
    case proto::ReportType::kFinal:
      final_values_ = m.values;
      final_seen_ = true;
      break;
    case proto::ReportType::kAttr:
      OnAttr(m);
      break;
    case proto::ReportType::kError:
      worker_error_ = m.message;
      break;
    case proto::ReportType::kHeartbeat:
      break;
    case proto::ReportType::kSuggest:
      if (CountRequest()) AnswerSuggest(m);
      break;
    case proto::ReportType::kShouldPrune:
      if (CountRequest()) process.Answer(proto::EncodeShouldPruneAnswer(pruned_));
      break;
    case proto::ReportType::kRelativeParams:
      if (CountRequest()) AnswerRelativeParams();
      break;
    case proto::ReportType::kPruned:
      worker_pruned_ = true;
      break;
    case proto::ReportType::kConstraints:
      // Constraints describe the result: they come before it (the last such line counts).
      if (final_seen_) {
        process.FailProtocol(
            "a constraints line after the final line; send constraints before "
            "final");
        break;
      }
      constraints_ = m.values;
      break;
  }
}

void TrialChannel::OnReport(const proto::ReportMessage& m) {
  // A pruned trial ends at the step it was pruned at, as in Optuna (where the objective raises
  // TrialPruned and reports nothing more): what it sends during its grace period would
  // otherwise change its value and the other trials' pruning decisions.
  if (pruned_ || taken_over_) return;
  if (auto over = caps_.Admit(trial(), m)) {
    options_.process->FailProtocol(*over);
    return;
  }
  StudyRuntime& study = *options_.study;
  Store(PendingWrites::Write::Intermediate(trial_id(), m.step, m.value), "intermediate value");
  if (taken_over_) return;
  if (options_.refresh_for_pruning) options_.refresh_for_pruning();
  if (taken_over_) return;
  model::TrialRecord& t = trial();  // after the refresh, which may replace the trials
  t.intermediate[m.step] = m.value;
  pruner::PruneContext ctx{study.spec.study.direction, &study.trials, &t, study.record.name};
  if (!study.pruner->ShouldPrune(ctx)) return;
  pruned_ = true;
  options_.logger->info("study {} trial {}: pruned at step {} (value {})", study.record.name,
                        options_.number, m.step, m.value);
  if (study.spec.objective.define_by_run()) {
    // Cooperative first: the objective learns it through should_prune and raises; it is
    // stopped as for other kinds only if it has not ended within kill_grace.
    options_.process->StopAfterGrace(StopReason::kPrune);
  } else {
    options_.process->Stop(StopReason::kPrune);
  }
}

void TrialChannel::OnAttr(const proto::ReportMessage& m) {
  if (taken_over_) return;
  if (auto over = caps_.Admit(trial(), m)) {
    options_.process->FailProtocol(*over);
    return;
  }
  Store(PendingWrites::Write::Attr(trial_id(), m.key, m.json_value), "attribute");
  if (taken_over_) return;
  trial().attrs[m.key] = m.json_value;
}

void TrialChannel::Store(PendingWrites::Write w, const std::string& what) {
  if (options_.lazy_writer != nullptr) {
    options_.lazy_writer->Write(std::move(w));
    return;
  }
  PendingWrites* pending = options_.pending_writes;
  if (pending != nullptr &&
      (pending->Has(w.trial_id) || (options_.storage_held && options_.storage_held()))) {
    pending->Keep(std::move(w), options_.logger);
    return;
  }
  common::Status st = PendingWrites::Apply(*options_.storage, w);
  if (st.ok()) return;
  if (pending != nullptr && PendingWrites::IsOutage(st)) {
    pending->Keep(std::move(w), options_.logger);
    if (options_.on_storage_refused) options_.on_storage_refused(st);
    return;
  }
  options_.logger->error("study {} trial {}: storing {}: {}", options_.study->record.name,
                         options_.number, what, st.message());
  if (st.code() == common::Code::kFailedPrecondition && options_.on_write_refused) {
    options_.on_write_refused();
  }
}

void TrialChannel::Refuse(const std::string& message) {
  // The answer first, so a worker waiting for one learns why it is stopped.
  options_.process->Answer(proto::EncodeErrorAnswer(message));
  options_.process->FailProtocol(message);
}

bool TrialChannel::CountRequest() {
  if (++requests_ <= kMaxTrialRequests) return true;
  if (requests_ == kMaxTrialRequests + 1) {
    Refuse("more than " + std::to_string(kMaxTrialRequests) +
           " requests (suggest, should_prune) in one trial");
  }
  return false;
}

void TrialChannel::AnswerRelativeParams() {
  if (!sample_) StartSample();
  std::string params = "{";
  for (const auto& [name, internal] : sample_->relative) {
    auto spec = std::find_if(sample_->relative_space.begin(), sample_->relative_space.end(),
                             [&](const config::ParamSpec& p) { return p.name == name; });
    if (spec == sample_->relative_space.end()) continue;
    params += (params.size() > 1 ? "," : "") + common::JsonQuote(name) + ":" +
              config::ExternalJson(spec->dist, internal);
  }
  options_.process->Answer(proto::EncodeRelativeParamsAnswer(params + "}"));
}

void TrialChannel::AnswerSuggest(const proto::ReportMessage& m) {
  StudyRuntime& study = *options_.study;
  if (final_seen_) {
    Refuse("suggest \"" + m.name + "\" after the final value; suggests come before it");
    return;
  }
  common::Result<config::Distribution> dist =
      config::DistributionFromSuggest(m.name, m.distribution);
  if (!dist.ok()) {
    Refuse(dist.status().message());
    return;
  }
  if (!sample_) StartSample();
  sampler::TrialSample& sample = *sample_;
  auto known = sample.answered.find(m.name);
  if (known != sample.answered.end() && !(known->second.dist == *dist)) {
    Refuse(config::DistributionConflictMessage(m.name, known->second.dist, *dist));
    return;
  }
  if (known == sample.answered.end() && sample.answered.size() >= kMaxTrialParams) {
    Refuse("suggest \"" + m.name + "\": more than " + std::to_string(kMaxTrialParams) +
           " distinct parameters in one trial");
    return;
  }
  if (auto e = enqueued_.find(m.name); known == sample.answered.end() && e != enqueued_.end()) {
    // An enqueued value answers, when the suggest's distribution holds it (as Optuna's
    // enqueue_trial: a value outside it is not used; the sampler answers and an event says so).
    common::Result<double> fixed = config::InternalFromText(*dist, e->second);
    if (fixed.ok()) {
      sampler::Hold(sample, m.name, *fixed, *dist);
    } else {
      options_.logger->warn("study {} trial {}: enqueued {}={} not used: {}", study.record.name,
                            options_.number, m.name, e->second, fixed.status().message());
      if (options_.on_event) {
        options_.on_event("enqueued_value_ignored", "parameter " + m.name + " = " + e->second +
                                                        ": " + fixed.status().message() +
                                                        "; the sampler chose its value");
      }
    }
    enqueued_.erase(e);
  }
  common::Result<double> value =
      sampler::Suggest(*study.sampler, study.view(), sample, {m.name, *dist});
  if (!value.ok()) {
    options_.logger->warn("study {} trial {}: suggest \"{}\": {}", study.record.name,
                          options_.number, m.name, value.status().message());
    Refuse("suggest \"" + m.name + "\": " + value.status().message());
    return;
  }
  if (known == sample.answered.end() || trial().params.count(m.name) == 0) {
    model::ParamValue pv{*value, *dist};
    if (!taken_over_) {
      Store(PendingWrites::Write::Param(trial_id(), m.name, pv), "parameter " + m.name);
    }
    trial().params[m.name] = pv;  // after WriteFailed, which may replace the study's trials
  }
  options_.process->Answer(
      proto::EncodeSuggestionAnswer(m.name, config::ExternalJson(*dist, *value)));
}

void TrialChannel::Observe(TrialObservation* seen) const {
  seen->final_values = final_values_;
  seen->constraints = constraints_;
  seen->worker_error = worker_error_;
  seen->worker_pruned = worker_pruned_;
}

}  // namespace triald::daemon
