#include "daemon/scheduler/retry_policy.h"

#include <algorithm>

namespace triald::daemon {

RetryDecision DecideRetry(const StudyRuntime& study, const model::TrialRecord& ended) {
  RetryDecision d;
  const config::StudyConfig& cfg = study.spec.study;
  if (ended.state != model::TrialState::kFail || study.record.state != model::StudyState::kRunning)
    return d;
  // Stopped by a stop of triald: put back, whatever retries says (requeue_on_shutdown).
  const bool requeue = ended.fail.reason == "shutdown" && cfg.requeue_on_shutdown;
  if (!requeue && (cfg.retries == 0 || std::find(cfg.retry_on.begin(), cfg.retry_on.end(),
                                                 ended.fail.reason) == cfg.retry_on.end())) {
    return d;
  }
  const int attempts = study.RetriesBehind(ended);
  if (!requeue && attempts >= cfg.retries) {
    d.exhausted = "FAIL(" + ended.fail.reason + ") after " + std::to_string(attempts) + " retries";
    return d;
  }
  EndWrite::Retry r;
  r.params = ended.params;
  r.kind = requeue ? "trial_requeued" : "trial_retry";
  r.what = [requeue, number = ended.number, reason = ended.fail.reason, attempts,
            retries = cfg.retries](int created) {
    return requeue
               ? "trial " + std::to_string(created) + " puts back trial " + std::to_string(number) +
                     " (stopped with triald; it runs when triald starts again)"
               : "trial " + std::to_string(created) + " retries trial " + std::to_string(number) +
                     " (FAIL(" + reason + "), retry " + std::to_string(attempts + 1) + " of " +
                     std::to_string(retries) + ")";
  };
  d.retry = std::move(r);
  return d;
}

}  // namespace triald::daemon
