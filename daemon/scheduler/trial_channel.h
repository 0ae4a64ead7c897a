#pragma once
// TrialChannel: the scheduler's end of one running trial's channel (proto/report.h): it owns
// what the trial's lines have said so far and answers its requests.
//   report        checked against the report caps (report_caps.h), stored, then the pruner is
//                 asked (with the other nodes' values first, on shared storage); a yes stops
//                 the trial (kind = "python": after kill_grace, so the objective can learn it
//                 through should_prune and raise). Reports after that are dropped: a pruned
//                 trial ends at the step it was pruned at, as in Optuna.
//   attr          checked against the caps, stored
//   final, constraints, error, pruned   kept for the exit's classification (Observe)
//   suggest       answered from the trial's sample (sampler.h define-by-run: the parameters it
//                 holds, then the relative sample, then an independent draw), the new
//                 parameter stored
//   should_prune  answered with the pruner's last decision
//   relative_params  answered with the trial's relative sample (external values)
// A refused request (a bad distribution, a suggest after the final line, more than 1,000
// distinct parameters or 1,000,000 requests) is answered with an error line and ends the
// trial FAIL(protocol).
//
// Once another node has ended the trial (shared storage, MarkTakenOver), nothing it sends is
// stored any more.
//
// Thread-safety: not thread-safe; the scheduler's event-loop thread owns it.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/logging.h"
#include "daemon/launcher/launcher.h"
#include "daemon/sampler/sampler.h"
#include "daemon/scheduler/lazy_writer.h"
#include "daemon/scheduler/pending_writes.h"
#include "daemon/scheduler/report_caps.h"
#include "daemon/scheduler/study_runtime.h"
#include "daemon/scheduler/trial_outcome.h"
#include "daemon/storage/storage.h"
#include "proto/report.h"

namespace triald::daemon {

class TrialChannel {
 public:
  // Limits on what one trial may ask (DEFINE_BY_RUN.md).
  static constexpr size_t kMaxTrialParams = 1000;
  static constexpr int64_t kMaxTrialRequests = 1'000'000;

  struct Options {
    storage::Storage* storage = nullptr;  // not owned
    common::Logger logger;
    launcher::TrialProcess* process = nullptr;  // not owned: the trial's process
    StudyRuntime* study = nullptr;              // not owned: the trial's study
    int number = 0;                             // the trial's number in the study
    // Called before the pruner is asked (shared storage: reads the other nodes' values; it
    // may replace the study's trials). Empty: nothing to read.
    std::function<void()> refresh_for_pruning;
    // Called when the storage refuses a write of this trial because its record is no longer
    // open (kFailedPrecondition: shared storage, another node ended it while this one was cut
    // off; the database checks the trial's state in the write itself). It reads the study
    // again, which stops the trial as ended elsewhere; it may replace the study's trials.
    // Empty: nothing to read.
    std::function<void()> on_write_refused;
    // Writes refused during a storage outage are kept here (null: logged and dropped) and
    // written later; while storage_held() says the scheduler holds, or while this trial has
    // kept writes, new ones are kept behind them. on_storage_refused tells the scheduler of an
    // outage a write met (it then holds, and probes until storage takes writes).
    PendingWrites* pending_writes = nullptr;
    std::function<bool()> storage_held;
    // Set: every write goes to it (a thread makes them, lazy_writer.h), outage or not, and
    // pending_writes is not used; its refusals reach the scheduler from there.
    LazyWriter* lazy_writer = nullptr;
    std::function<void(const common::Status&)> on_storage_refused;
    // Records an event of the trial (kind, detail); empty: none.
    std::function<void(const std::string&, const std::string&)> on_event;
  };
  explicit TrialChannel(Options options);

  // Begins the trial's define-by-run sampling: with `drawn`, the sample taken when its
  // parameters were drawn (sampler::StartTrial; the relative sample is not computed again);
  // else the relative sample is computed now (sampler::StartRelative), with the parameters the
  // trial holds. A failed relative sample leaves every suggest to independent sampling. Called
  // at start for kind = "python", else at the first suggest.
  void StartSample(std::optional<sampler::TrialSample> drawn = std::nullopt);

  void OnMessage(const proto::ReportMessage& message);

  // Shared storage: another node ended the trial (this node was silent).
  void MarkTakenOver() { taken_over_ = true; }
  bool taken_over() const { return taken_over_; }
  // Whether the pruner stopped the trial.
  bool pruned() const { return pruned_; }
  // What the lines said, for the exit's classification: final values, constraints, the
  // worker's error and whether the objective raised TrialPruned.
  void Observe(TrialObservation* seen) const;

 private:
  model::TrialRecord& trial() { return options_.study->trials[options_.number]; }
  int64_t trial_id() { return trial().id; }
  void OnReport(const proto::ReportMessage& m);
  void OnAttr(const proto::ReportMessage& m);
  void AnswerSuggest(const proto::ReportMessage& m);
  // relative_params: the trial's relative sample (Optuna's trial.relative_params), each value
  // external; {} when the sample holds none (a sampler without one, TPE's start-up trials).
  void AnswerRelativeParams();
  // Answers with an error line, then ends the trial FAIL(protocol).
  void Refuse(const std::string& message);
  // Stores `w` (an intermediate value, attribute or parameter of this trial), hands it to the
  // lazy writer, or keeps it (Options::pending_writes); a refusal of the write itself is logged,
  // and a kFailedPrecondition calls on_write_refused.
  void Store(PendingWrites::Write w, const std::string& what);
  // Counts a request; false (and the trial refused once) past kMaxTrialRequests.
  bool CountRequest();

  Options options_;
  ReportCaps caps_;                   // [study] max_intermediate_steps, max_attrs...
  std::vector<double> final_values_;  // from the last "final" line
  std::vector<double> constraints_;   // from the last "constraints" line
  std::string worker_error_;          // from the last "error" line
  bool pruned_ = false;               // the pruner said stop; later reports are dropped
  bool final_seen_ = false;           // a "final" line came; suggests are refused
  bool worker_pruned_ = false;        // a "pruned" line came (the objective raised)
  bool taken_over_ = false;
  int64_t requests_ = 0;                        // suggest and should_prune lines so far
  std::optional<sampler::TrialSample> sample_;  // define-by-run sampling state
  // Values enqueued for parameters the objective suggests (kEnqueuedAttr), by name, until its
  // suggest of that name takes them.
  std::map<std::string, std::string> enqueued_;
};

}  // namespace triald::daemon
