#include "daemon/control/best.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "common/json.h"
#include "daemon/control/requests.h"
#include "daemon/control/study_json.h"
#include "daemon/sampler/pareto.h"

namespace triald::daemon {
namespace json = boost::json;
using common::Result;
using model::TrialRecord;
using model::TrialState;

std::vector<config::Direction> StudyDirections(const model::StudyRecord& study) {
  if (study.directions.empty()) return {study.direction};
  return study.directions;
}

FrontBuilder::FrontBuilder(std::vector<config::Direction> directions)
    : directions_(std::move(directions)) {}

void FrontBuilder::Add(const std::vector<TrialRecord>& page) {
  // The front of the trials so far and this page is the front of everything added: a trial
  // dropped earlier is dominated by one that is kept, or by one that dominates that one.
  std::vector<TrialRecord> pool = std::move(front_);
  front_.clear();
  for (const TrialRecord& t : page) {
    if (t.state != TrialState::kComplete) continue;
    ++complete_;
    if (!t.Feasible() || t.values.size() != directions_.size()) continue;
    ++feasible_;
    pool.push_back(t);
  }
  for (size_t i : sampler::pareto::ParetoFront(pool, directions_)) {
    front_.push_back(std::move(pool[i]));
  }
  std::sort(front_.begin(), front_.end(),
            [](const TrialRecord& a, const TrialRecord& b) { return a.number < b.number; });
}

void BestFeasible::Add(const std::vector<TrialRecord>& page) {
  const bool max = direction_ == config::Direction::kMaximize;
  for (const TrialRecord& t : page) {
    if (t.state != TrialState::kComplete || !t.value || std::isnan(*t.value) || !t.Feasible()) {
      continue;
    }
    if (best_) {
      const double v = *t.value, b = *best_->value;
      const bool better = max ? v > b : v < b;
      if (!better && !(v == b && t.number < best_->number)) continue;
    }
    best_ = t;
  }
}

namespace {

// The best feasible trial, and whether the study has a COMPLETE trial with a value at all (to
// tell "none yet" from "none feasible").
struct SingleBest {
  std::optional<TrialRecord> best;
  bool any_complete = false;
};

Result<SingleBest> FindSingleBest(storage::ReadModel& storage, const model::StudyRecord& study) {
  SingleBest out;
  TRIALD_ASSIGN_OR_RETURN(std::optional<TrialRecord> top,
                          storage.GetBestTrial(study.id, study.direction));
  if (!top) return out;
  out.any_complete = true;
  if (top->Feasible()) {
    out.best = std::move(top);
    return out;
  }
  BestFeasible scan(study.direction);
  for (int from = 0;; from += kTrialsPerPiece) {
    TRIALD_ASSIGN_OR_RETURN(
        std::vector<TrialRecord> page,
        storage.GetTrialPage(study.id, from, kTrialsPerPiece, storage::Curves::kCount));
    scan.Add(page);
    if (static_cast<int>(page.size()) < kTrialsPerPiece) break;
  }
  out.best = scan.best();
  return out;
}

json::array DirectionsJson(const std::vector<config::Direction>& directions) {
  json::array a;
  for (config::Direction d : directions) a.push_back(json::string(config::DirectionName(d)));
  return a;
}

// A single-objective study's best trial, whole.
class SingleBestReply final : public ReplyStream {
 public:
  SingleBestReply(storage::ReadModel* storage, model::StudyRecord study)
      : storage_(storage), study_(std::move(study)) {}

  Result<std::string> Next() override {
    if (done_) return std::string();
    done_ = true;
    TRIALD_ASSIGN_OR_RETURN(SingleBest found, FindSingleBest(*storage_, study_));
    if (!found.best) {
      if (found.any_complete) {
        return common::NotFound("study \"" + study_.name +
                                "\" has no feasible COMPLETE trial: every COMPLETE trial "
                                "violates a constraint (a constraint value above 0)");
      }
      return common::NotFound("study \"" + study_.name + "\" has no COMPLETE trial yet");
    }
    return common::SerializeJson(TrialToJson(*found.best));
  }

 private:
  storage::ReadModel* storage_;
  model::StudyRecord study_;
  bool done_ = false;
};

// A multi-objective study's front: the head, then one page read per step (a space sent for
// it), then the counts and the front's trials a page of them per piece.
class FrontReply final : public ReplyStream {
 public:
  FrontReply(storage::ReadModel* storage, model::StudyRecord study)
      : storage_(storage), study_(std::move(study)), builder_(StudyDirections(study_)) {}

  Result<std::string> Next() override {
    switch (phase_) {
      case Phase::kHead: {
        phase_ = Phase::kScan;
        json::object head{{"study", study_.name},
                          {"directions", DirectionsJson(StudyDirections(study_))}};
        if (!study_.submit.metric_names.empty()) head["metric_names"] = MetricNamesJson(study_);
        std::string text = common::SerializeJson(head);
        text.pop_back();  // the object continues after the scan
        return text;
      }
      case Phase::kScan: {
        TRIALD_ASSIGN_OR_RETURN(
            std::vector<TrialRecord> page,
            storage_->GetTrialPage(study_.id, next_, kTrialsPerPiece, storage::Curves::kCount));
        builder_.Add(page);
        next_ += kTrialsPerPiece;
        if (static_cast<int>(page.size()) < kTrialsPerPiece) {
          phase_ = Phase::kFront;
          return ",\"complete\":" + std::to_string(builder_.complete()) +
                 ",\"feasible\":" + std::to_string(builder_.feasible()) + ",\"best_trials\":[";
        }
        return std::string(" ");  // JSON whitespace: the reply goes on after the next page
      }
      case Phase::kFront: {
        const std::vector<TrialRecord>& front = builder_.front();
        std::string piece;
        const size_t end = std::min(front.size(), sent_ + kTrialsPerPiece);
        for (; sent_ < end; ++sent_) {
          if (sent_ > 0) piece += ',';
          piece += common::SerializeJson(TrialToJson(front[sent_]));
        }
        if (sent_ == front.size()) {
          piece += "]}";
          phase_ = Phase::kDone;
        }
        return piece;
      }
      case Phase::kDone:
        break;
    }
    return std::string();
  }

 private:
  enum class Phase { kHead, kScan, kFront, kDone };
  storage::ReadModel* storage_;
  model::StudyRecord study_;
  FrontBuilder builder_;
  Phase phase_ = Phase::kHead;
  int next_ = 0;     // the next page's first trial number
  size_t sent_ = 0;  // front trials written
};

}  // namespace

Result<std::optional<TrialRecord>> BestFeasibleTrial(storage::ReadModel& storage,
                                                     const model::StudyRecord& study) {
  TRIALD_ASSIGN_OR_RETURN(SingleBest found, FindSingleBest(storage, study));
  return std::move(found.best);
}

Result<std::unique_ptr<ReplyStream>> BestStreamer(const VerbContext& c, const json::object& args) {
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord s, LookUpStudy(*c.storage, args));
  if (StudyDirections(s).size() > 1) {
    return std::unique_ptr<ReplyStream>(std::make_unique<FrontReply>(c.storage, std::move(s)));
  }
  return std::unique_ptr<ReplyStream>(std::make_unique<SingleBestReply>(c.storage, std::move(s)));
}

}  // namespace triald::daemon
