#include "daemon/storage/sql.h"

#include <cctype>
#include <cmath>
#include <utility>

#include "daemon/storage/backend_util.h"
#include "daemon/storage/read_model.h"

namespace triald::storage::sql {

using backend::TrialIdLabel;

std::string For(Dialect dialect, const std::string& sql) {
  if (dialect == Dialect::kSqlite) return sql;
  std::string out = sql;
  for (size_t i = 0; i + 1 < out.size(); ++i) {
    if (out[i] == '?' && std::isdigit(static_cast<unsigned char>(out[i + 1]))) out[i] = '$';
  }
  return out;
}

// ---- Studies ----

const char kStudyColumns[] =
    "id, name, direction, n_trials, state, spec_toml, spec_path, seed, created_at, finished_at, "
    "submitter_uid, submitter_name, directions, paused, parallelism, submit_json";

common::Result<model::StudyRecord> ReadStudyRow(const Row& r, const std::string& location) {
  model::StudyRecord s;
  s.id = r.Int(0);
  s.name = r.Text(1);
  std::string direction = r.Text(2);
  if (direction == "MAXIMIZE") {
    s.direction = config::Direction::kMaximize;
  } else if (direction == "MINIMIZE") {
    s.direction = config::Direction::kMinimize;
  } else {
    return common::Internal("study \"" + s.name + "\" has unknown direction \"" + direction +
                            "\" in " + location);
  }
  s.n_trials = static_cast<int>(r.Int(3));
  std::string state = r.Text(4);
  auto parsed = model::ParseStudyState(state);
  if (!parsed) {
    return common::Internal("study \"" + s.name + "\" has unknown state \"" + state + "\" in " +
                            location);
  }
  s.state = *parsed;
  s.spec_toml = r.Text(5);
  s.spec_path = r.Text(6);
  s.seed = static_cast<uint64_t>(r.Int(7));
  s.created_at = r.Real(8);
  s.finished_at = r.Real(9);
  s.submitter.uid = r.Int(10);
  s.submitter.name = r.Text(11);
  TRIALD_ASSIGN_OR_RETURN(s.directions,
                          backend::ParseDirectionsText(r.Text(12), s.direction,
                                                       "study \"" + s.name + "\" in " + location));
  s.paused = r.Int(13) != 0;
  s.parallelism = static_cast<int>(r.Int(14));
  TRIALD_ASSIGN_OR_RETURN(s.submit, backend::ParseSubmitChoicesText(
                                        r.Text(15), "study \"" + s.name + "\" in " + location));
  return s;
}

// ---- Trials ----

std::string RecentFailuresSql(Dialect dialect) {
  const std::string tail =
      dialect == Dialect::kSqlite
          ? "CAST(substr(CAST(fail_detail AS BLOB), -512) AS TEXT)"
          : "substring(fail_detail from greatest(octet_length(fail_detail) - 511, 1))";
  static_assert(ReadModel::kRecentFailureDetailBytes == 512);
  return For(dialect, "SELECT fail_reason, fail_exit_code, fail_signal, " + tail +
                          " FROM trials WHERE study_id = ?1 AND state = 'FAIL' "
                          "ORDER BY number DESC LIMIT ?2");
}

model::FailInfo ReadFailureRow(const Row& r) {
  model::FailInfo f;
  f.reason = r.Text(0);
  f.exit_code = static_cast<int>(r.Int(1));
  f.signal = static_cast<int>(r.Int(2));
  f.detail = r.Text(3);
  return f;
}

std::string TrialColumns(Dialect dialect) {
  return std::string("t.id, t.study_id, t.number, t.state, t.value, ") +
         (dialect == Dialect::kSqlite ? "t.value_is_nan" : "0") +
         ", t.fail_reason, t.fail_exit_code, t.fail_signal, t.fail_core_dumped, t.fail_detail, "
         "t.stderr_tail, t.pid, t.pgid, t.pid_start_time, t.created_at, t.started_at, "
         "t.finished_at, t.retry_of, (SELECT r.number FROM trials r WHERE r.id = t.retry_of), "
         "t.node, t.values_json, t.constraints_json, t.resources_json";
}

common::Result<model::TrialRecord> ReadTrialRow(const Row& r, const std::string& location) {
  model::TrialRecord t;
  t.id = r.Int(0);
  t.study_id = r.Int(1);
  t.number = static_cast<int>(r.Int(2));
  std::string state = r.Text(3);
  auto parsed = model::ParseTrialState(state);
  if (!parsed) {
    return common::Internal(TrialIdLabel(t.id) + " has unknown state \"" + state + "\" in " +
                            location);
  }
  t.state = *parsed;
  if (r.Int(5) != 0) {
    t.value = std::nan("");
  } else if (!r.IsNull(4)) {
    t.value = r.Real(4);
  }
  t.fail.reason = r.Text(6);
  t.fail.exit_code = static_cast<int>(r.Int(7));
  t.fail.signal = static_cast<int>(r.Int(8));
  t.fail.core_dumped = r.Int(9) != 0;
  t.fail.detail = r.Text(10);
  t.fail.stderr_tail = r.Text(11);
  t.process.pid = static_cast<pid_t>(r.Int(12));
  t.process.pgid = static_cast<pid_t>(r.Int(13));
  t.process.start_time = static_cast<uint64_t>(r.Int(14));
  t.created_at = r.Real(15);
  t.started_at = r.Real(16);
  t.finished_at = r.Real(17);
  if (!r.IsNull(18)) t.retry_of = r.Int(18);
  if (!r.IsNull(19)) t.retry_of_number = static_cast<int>(r.Int(19));
  t.node = r.Text(20);
  const std::string where = TrialIdLabel(t.id) + " in " + location;
  TRIALD_ASSIGN_OR_RETURN(std::vector<double> values, backend::ParseDoublesText(r.Text(21), where));
  t.values = backend::TrialValues(t, std::move(values));
  TRIALD_ASSIGN_OR_RETURN(t.constraints, backend::ParseDoublesText(r.Text(22), where));
  TRIALD_ASSIGN_OR_RETURN(t.resources, backend::ParseResourcesText(r.Text(23), where));
  return t;
}

TrialQueries LoadTrialsSql(Dialect dialect, TrialFilter filter) {
  const char* where = "";
  switch (filter) {
    case TrialFilter::kStudy:
      where = " WHERE t.study_id = ?1";
      break;
    case TrialFilter::kStudyNumber:
      where = " WHERE t.study_id = ?1 AND t.number = ?2";
      break;
    case TrialFilter::kRunning:
      where = " WHERE t.state = 'RUNNING'";
      break;
    case TrialFilter::kSince:
      where = dialect == Dialect::kSqlite ? " WHERE t.study_id = ?1 AND (t.number >= ?2 OR "
                                            "t.number IN (SELECT value FROM json_each(?3)))"
                                          : " WHERE t.study_id = ?1 AND (t.number >= ?2 OR "
                                            "t.number = ANY(?3))";
      break;
    case TrialFilter::kRange:
      where = " WHERE t.study_id = ?1 AND t.number >= ?2 AND t.number < ?3";
      break;
  }
  TrialQueries q;
  q.trials = For(dialect, "SELECT " + TrialColumns(dialect) + " FROM trials t" + where +
                              " ORDER BY t.study_id, t.number");
  q.params = For(dialect, std::string("SELECT p.trial_id, p.name, p.internal_value, "
                                      "p.distribution_json FROM trial_params p "
                                      "JOIN trials t ON t.id = p.trial_id") +
                              where);
  q.intermediate = For(dialect, std::string("SELECT i.trial_id, i.step, i.value FROM "
                                            "trial_intermediate i JOIN trials t ON t.id = "
                                            "i.trial_id") +
                                    where);
  q.intermediate_counts =
      For(dialect, std::string("SELECT i.trial_id, COUNT(*) FROM trial_intermediate i JOIN trials "
                               "t ON t.id = i.trial_id") +
                       where + " GROUP BY i.trial_id");
  q.attrs = For(dialect, std::string("SELECT a.trial_id, a.key, a.value_json FROM trial_attrs a "
                                     "JOIN trials t ON t.id = a.trial_id") +
                             where);
  return q;
}

TrialAssembly::TrialAssembly(DistributionCache* distributions, std::string op, std::string location)
    : distributions_(distributions), op_(std::move(op)), location_(std::move(location)) {}

common::Status TrialAssembly::AddTrial(const Row& row) {
  TRIALD_ASSIGN_OR_RETURN(model::TrialRecord t, ReadTrialRow(row, location_));
  index_.emplace(t.id, trials_.size());
  trials_.push_back(std::move(t));
  return common::Status::Ok();
}

model::TrialRecord* TrialAssembly::Find(int64_t trial_id) {
  auto pos = index_.find(trial_id);
  return pos == index_.end() ? nullptr : &trials_[pos->second];
}

common::Status TrialAssembly::AddParam(const Row& row) {
  const int64_t trial_id = row.Int(0);
  std::string name = row.Text(1);
  std::string json = row.Text(3);
  // Every trial of a study carries the same few distributions: each text is parsed once per
  // daemon, not per read (distribution_cache.h).
  auto dist = distributions_->Parse(json);
  if (!dist.ok()) {
    return common::Internal(op_ + ": " + TrialIdLabel(trial_id) + " parameter \"" + name +
                            "\": stored distribution " + json +
                            " does not parse: " + dist.status().message());
  }
  if (model::TrialRecord* t = Find(trial_id)) {
    t->params[name] = model::ParamValue{row.Real(2), **dist};
  }
  return common::Status::Ok();
}

void TrialAssembly::AddIntermediate(const Row& row) {
  if (model::TrialRecord* t = Find(row.Int(0))) {
    t->intermediate[row.Int(1)] = row.IsNull(2) ? std::nan("") : row.Real(2);
  }
}

void TrialAssembly::AddIntermediateCount(const Row& row) {
  if (model::TrialRecord* t = Find(row.Int(0))) t->intermediate_not_loaded = row.Int(1);
}

void TrialAssembly::AddAttr(const Row& row) {
  if (model::TrialRecord* t = Find(row.Int(0))) t->attrs[row.Text(1)] = row.Text(2);
}

// ---- Guarded writes ----

const char kTrialStateSql[] =
    "SELECT t.number, s.name, t.state, t.node FROM trials t JOIN studies s ON s.id = t.study_id "
    "WHERE t.id = ?1";

common::Status TrialNotMutable(const Row* row, int64_t trial_id, const std::string& op,
                               bool require_waiting, const std::string& node) {
  if (row == nullptr) return common::NotFound(TrialIdLabel(trial_id) + " not found");
  std::string who = "trial " + std::to_string(row->Int(0)) + " of study \"" + row->Text(1) +
                    "\" (" + TrialIdLabel(trial_id) + ")";
  std::string state = row->Text(2);
  auto parsed = model::ParseTrialState(state);
  if (parsed && model::IsFinished(*parsed)) {
    return common::FailedPrecondition(op + ": " + who + " is " + state +
                                      "; finished trials cannot be changed");
  }
  if (require_waiting && state == "WAITING") {
    return common::FailedPrecondition(op + ": " + who + " is claimed by node \"" + row->Text(3) +
                                      "\"; this is node \"" + node + "\"");
  }
  if (require_waiting) {
    return common::FailedPrecondition(op + ": " + who + " is " + state + "; expected WAITING");
  }
  // The guarded statement saw a finished trial that is not finished now: impossible, as a
  // finished trial never changes again; say so rather than report success.
  return common::Internal(op + ": " + who + " was not updated (state " + state + ")");
}

// ---- Events ----

const char kEventColumns[] = "id, at, study_id, trial_id, kind, detail";

model::EventRecord ReadEventRow(const Row& row) {
  model::EventRecord e;
  e.id = row.Int(0);
  e.at = row.Real(1);
  if (!row.IsNull(2)) e.study_id = row.Int(2);
  if (!row.IsNull(3)) e.trial_id = row.Int(3);
  e.kind = row.Text(4);
  e.detail = row.Text(5);
  return e;
}

// ---- Studies: deletion ----

std::vector<std::string> DeleteStudyStatements(Dialect dialect) {
  const std::string trials = "(SELECT id FROM trials WHERE study_id = ?1)";
  std::vector<std::string> out = {
      "DELETE FROM trial_params WHERE trial_id IN " + trials,
      "DELETE FROM trial_intermediate WHERE trial_id IN " + trials,
      "DELETE FROM trial_attrs WHERE trial_id IN " + trials,
      "DELETE FROM events WHERE study_id = ?1 OR trial_id IN " + trials,
      // A retry refers to the trial it retries (same study): unlink them, then delete them all.
      "UPDATE trials SET retry_of = NULL WHERE study_id = ?1 AND retry_of IS NOT NULL",
      "DELETE FROM trials WHERE study_id = ?1",
      "DELETE FROM studies WHERE id = ?1",
  };
  for (std::string& s : out) s = For(dialect, s);
  return out;
}

}  // namespace triald::storage::sql
