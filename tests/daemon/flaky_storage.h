#pragma once
// FlakyStorage: forwards to a storage, or fails every call with kUnavailable while `down` (a
// database that cannot be reached); before_get_study lets a test hold a read inside storage, and
// before_lazy_write a trial's lazily durable write (a frozen server). Used by the shared-storage
// scheduler tests, the coordinator tests (a coordinator that must not touch storage works with it
// down) and the lazy writer's (whose thread makes the calls).
//
// Thread-safety: as the storage it wraps; `down` may be set from any thread.

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/storage/storage.h"

namespace triald::testing {

class FlakyStorage final : public storage::Storage {
 public:
  explicit FlakyStorage(std::unique_ptr<storage::Storage> inner) : inner_(std::move(inner)) {}
  std::atomic<bool> down{false};
  bool get_trials_down = false;  // only GetTrials fails (a study cannot be loaded)
  // Runs at the start of every GetStudy when set (a test holds a read inside storage with it).
  std::function<void()> before_get_study;
  // Runs at the start of every AddIntermediate, SetAttr and AddTrialParam when set, and of every
  // BeginBatch (before a SQLite transaction takes the file's write lock).
  std::function<void()> before_lazy_write;
  std::function<void()> before_batch;
  // What wait_gauge() gives when set (a test says when storage waits); else the inner one's.
  const storage::WaitGauge* gauge = nullptr;
  const storage::WaitGauge* wait_gauge() const override {
    return gauge != nullptr ? gauge : inner_->wait_gauge();
  }

  common::Status BeginBatch() override {
    if (before_batch) before_batch();
    return down ? Away() : inner_->BeginBatch();
  }
  common::Status CommitBatch() override { return down ? Away() : inner_->CommitBatch(); }
  bool shared() const override { return inner_->shared(); }
  const std::string& node() const override { return inner_->node(); }
  const std::string& instance() const override { return inner_->instance(); }
  common::Result<model::StudyRecord> LockStudy(int64_t id) override {
    if (down) return Away();
    return inner_->LockStudy(id);
  }
  common::Result<model::StudyRecord> CreateStudy(const model::NewStudy& s, double at) override {
    if (down) return Away();
    return inner_->CreateStudy(s, at);
  }
  common::Result<model::StudyRecord> GetStudy(const std::string& name) override {
    if (before_get_study) before_get_study();
    if (down) return Away();
    return inner_->GetStudy(name);
  }
  common::Result<std::vector<model::StudyRecord>> ListStudies() override {
    if (down) return Away();
    return inner_->ListStudies();
  }
  common::Status SetStudyState(int64_t id, model::StudyState st, double at) override {
    return down ? Away() : inner_->SetStudyState(id, st, at);
  }
  common::Status SetStudyControl(int64_t id, bool paused, int n_trials, int parallelism) override {
    return down ? Away() : inner_->SetStudyControl(id, paused, n_trials, parallelism);
  }
  common::Status SetStudySubmit(int64_t id, const config::SubmitChoices& submit) override {
    return down ? Away() : inner_->SetStudySubmit(id, submit);
  }
  common::Status DeleteStudy(int64_t id) override {
    return down ? Away() : inner_->DeleteStudy(id);
  }
  common::Result<model::TrialRecord> CreateTrial(int64_t id, const model::ParamMap& p, double at,
                                                 std::optional<int64_t> retry_of) override {
    if (down) return Away();
    return inner_->CreateTrial(id, p, at, retry_of);
  }
  common::Status ClaimTrial(int64_t id) override { return down ? Away() : inner_->ClaimTrial(id); }
  common::Status ReleaseClaim(int64_t id) override {
    return down ? Away() : inner_->ReleaseClaim(id);
  }
  common::Status MarkRunning(int64_t id, const model::ProcessIdentity& p, double at) override {
    return down ? Away() : inner_->MarkRunning(id, p, at);
  }
  common::Status AddTrialParam(int64_t id, const std::string& n,
                               const model::ParamValue& p) override {
    if (before_lazy_write) before_lazy_write();
    return down ? Away() : inner_->AddTrialParam(id, n, p);
  }
  common::Status AddIntermediate(int64_t id, int64_t step, double v) override {
    if (before_lazy_write) before_lazy_write();
    return down ? Away() : inner_->AddIntermediate(id, step, v);
  }
  common::Status SetAttr(int64_t id, const std::string& k, const std::string& v) override {
    if (before_lazy_write) before_lazy_write();
    return down ? Away() : inner_->SetAttr(id, k, v);
  }
  common::Status FinishTrial(int64_t id, const model::TrialOutcome& o, double at) override {
    return down ? Away() : inner_->FinishTrial(id, o, at);
  }
  common::Result<std::vector<model::TrialRecord>> GetTrials(int64_t id) override {
    if (down || get_trials_down) return Away();
    return inner_->GetTrials(id);
  }
  common::Result<model::TrialRecord> GetTrial(int64_t id, int number) override {
    if (down) return Away();
    return inner_->GetTrial(id, number);
  }
  common::Result<std::vector<model::TrialRecord>> GetTrialsSince(
      int64_t id, int from, const std::vector<int>& n) override {
    if (down) return Away();
    return inner_->GetTrialsSince(id, from, n);
  }
  common::Result<std::vector<model::TrialRecord>> GetRunningTrials() override {
    if (down) return Away();
    return inner_->GetRunningTrials();
  }
  common::Result<storage::TrialCounts> CountTrials(int64_t id) override {
    if (down) return Away();
    return inner_->CountTrials(id);
  }
  common::Result<std::optional<model::TrialRecord>> GetBestTrial(int64_t id,
                                                                 config::Direction d) override {
    if (down) return Away();
    return inner_->GetBestTrial(id, d);
  }
  common::Result<std::vector<model::TrialRecord>> GetTrialPage(int64_t id, int from, int limit,
                                                               storage::Curves curves) override {
    if (down) return Away();
    return inner_->GetTrialPage(id, from, limit, curves);
  }
  common::Status Heartbeat(double at) override { return down ? Away() : inner_->Heartbeat(at); }
  common::Result<std::vector<model::NodeRecord>> GetNodes(double now) override {
    if (down) return Away();
    return inner_->GetNodes(now);
  }
  common::Status AppendEvent(std::optional<int64_t> s, std::optional<int64_t> t,
                             const std::string& kind, const std::string& detail,
                             double at) override {
    return down ? Away() : inner_->AppendEvent(s, t, kind, detail, at);
  }
  common::Result<std::vector<model::EventRecord>> GetEvents(std::optional<int64_t> s) override {
    if (down) return Away();
    return inner_->GetEvents(s);
  }
  common::Result<std::vector<model::FailInfo>> GetRecentFailures(int64_t s, int limit) override {
    if (down) return Away();
    return inner_->GetRecentFailures(s, limit);
  }
  common::Result<std::vector<model::EventRecord>> GetTrialEvents(int64_t t) override {
    if (down) return Away();
    return inner_->GetTrialEvents(t);
  }

 private:
  static common::Status Away() { return common::Unavailable("the database cannot be reached"); }
  std::unique_ptr<storage::Storage> inner_;
};

}  // namespace triald::testing
