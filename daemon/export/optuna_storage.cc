// WriteOptunaStorage (see study_export.h): the schema below is the one Optuna 3.1 creates
// (optuna/storages/_rdb/models.py through SQLAlchemy, then stamped with alembic head v3.0.0.d),
// as `sqlite3 FILE .schema` prints it for a storage Optuna made itself; Optuna refuses a
// storage whose alembic version is not its head, and reads enum columns by name.
#include <sqlite3.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "daemon/export/study_export.h"

namespace triald::exports {
namespace {

namespace json = boost::json;
using common::Result;
using common::Status;

constexpr const char* kOptunaSchema = R"sql(
CREATE TABLE studies (
	study_id INTEGER NOT NULL,
	study_name VARCHAR(512) NOT NULL,
	PRIMARY KEY (study_id)
);
CREATE UNIQUE INDEX ix_studies_study_name ON studies (study_name);
CREATE TABLE version_info (
	version_info_id INTEGER NOT NULL,
	schema_version INTEGER,
	library_version VARCHAR(256),
	PRIMARY KEY (version_info_id),
	CHECK (version_info_id=1)
);
CREATE TABLE study_directions (
	study_direction_id INTEGER NOT NULL,
	direction VARCHAR(8) NOT NULL,
	study_id INTEGER NOT NULL,
	objective INTEGER NOT NULL,
	PRIMARY KEY (study_direction_id),
	UNIQUE (study_id, objective),
	FOREIGN KEY(study_id) REFERENCES studies (study_id)
);
CREATE TABLE study_user_attributes (
	study_user_attribute_id INTEGER NOT NULL,
	study_id INTEGER,
	"key" VARCHAR(512),
	value_json TEXT,
	PRIMARY KEY (study_user_attribute_id),
	UNIQUE (study_id, "key"),
	FOREIGN KEY(study_id) REFERENCES studies (study_id)
);
CREATE TABLE study_system_attributes (
	study_system_attribute_id INTEGER NOT NULL,
	study_id INTEGER,
	"key" VARCHAR(512),
	value_json TEXT,
	PRIMARY KEY (study_system_attribute_id),
	UNIQUE (study_id, "key"),
	FOREIGN KEY(study_id) REFERENCES studies (study_id)
);
CREATE TABLE trials (
	trial_id INTEGER NOT NULL,
	number INTEGER,
	study_id INTEGER,
	state VARCHAR(8) NOT NULL,
	datetime_start DATETIME,
	datetime_complete DATETIME,
	PRIMARY KEY (trial_id),
	FOREIGN KEY(study_id) REFERENCES studies (study_id)
);
CREATE TABLE trial_user_attributes (
	trial_user_attribute_id INTEGER NOT NULL,
	trial_id INTEGER,
	"key" VARCHAR(512),
	value_json TEXT,
	PRIMARY KEY (trial_user_attribute_id),
	UNIQUE (trial_id, "key"),
	FOREIGN KEY(trial_id) REFERENCES trials (trial_id)
);
CREATE TABLE trial_system_attributes (
	trial_system_attribute_id INTEGER NOT NULL,
	trial_id INTEGER,
	"key" VARCHAR(512),
	value_json TEXT,
	PRIMARY KEY (trial_system_attribute_id),
	UNIQUE (trial_id, "key"),
	FOREIGN KEY(trial_id) REFERENCES trials (trial_id)
);
CREATE TABLE trial_params (
	param_id INTEGER NOT NULL,
	trial_id INTEGER,
	param_name VARCHAR(512),
	param_value FLOAT,
	distribution_json TEXT,
	PRIMARY KEY (param_id),
	UNIQUE (trial_id, param_name),
	FOREIGN KEY(trial_id) REFERENCES trials (trial_id)
);
CREATE TABLE trial_values (
	trial_value_id INTEGER NOT NULL,
	trial_id INTEGER NOT NULL,
	objective INTEGER NOT NULL,
	value FLOAT,
	value_type VARCHAR(7) NOT NULL,
	PRIMARY KEY (trial_value_id),
	UNIQUE (trial_id, objective),
	FOREIGN KEY(trial_id) REFERENCES trials (trial_id)
);
CREATE TABLE trial_intermediate_values (
	trial_intermediate_value_id INTEGER NOT NULL,
	trial_id INTEGER NOT NULL,
	step INTEGER NOT NULL,
	intermediate_value FLOAT,
	intermediate_value_type VARCHAR(7) NOT NULL,
	PRIMARY KEY (trial_intermediate_value_id),
	UNIQUE (trial_id, step),
	FOREIGN KEY(trial_id) REFERENCES trials (trial_id)
);
CREATE TABLE trial_heartbeats (
	trial_heartbeat_id INTEGER NOT NULL,
	trial_id INTEGER NOT NULL,
	heartbeat DATETIME NOT NULL,
	PRIMARY KEY (trial_heartbeat_id),
	UNIQUE (trial_id),
	FOREIGN KEY(trial_id) REFERENCES trials (trial_id)
);
CREATE TABLE alembic_version (
	version_num VARCHAR(32) NOT NULL,
	CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
);
INSERT INTO alembic_version (version_num) VALUES ('v3.0.0.d');
INSERT INTO version_info (version_info_id, schema_version, library_version) VALUES (1, 12, '3.1.0');
)sql";

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close(db); }
};
struct StmtFinalizer {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using Stmt = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

// One INSERT with positional parameters; a value is text, a double, an integer or NULL.
class Writer {
 public:
  Writer(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

  Status Exec(const char* sql) {
    char* msg = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &msg) != SQLITE_OK) {
      std::string m = msg != nullptr ? msg : sqlite3_errmsg(db_);
      sqlite3_free(msg);
      return common::IoError("writing Optuna storage " + path_ + ": " + m);
    }
    return Status::Ok();
  }

  Result<Stmt> Prepare(const char* sql) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db_, sql, -1, &s, nullptr) != SQLITE_OK) return Error("prepare");
    return Stmt(s);
  }

  // Binds `values` (std::nullopt = NULL) and runs the statement once.
  template <typename... T>
  Status Insert(const Stmt& s, const T&... values) {
    sqlite3_reset(s.get());
    sqlite3_clear_bindings(s.get());
    int i = 0;
    (Bind(s.get(), ++i, values), ...);
    if (sqlite3_step(s.get()) != SQLITE_DONE) return Error("insert");
    return Status::Ok();
  }

 private:
  static void Bind(sqlite3_stmt* s, int i, const std::string& v) {
    sqlite3_bind_text(s, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  static void Bind(sqlite3_stmt* s, int i, const char* v) {
    sqlite3_bind_text(s, i, v, -1, SQLITE_TRANSIENT);
  }
  static void Bind(sqlite3_stmt* s, int i, int64_t v) { sqlite3_bind_int64(s, i, v); }
  static void Bind(sqlite3_stmt* s, int i, int v) { sqlite3_bind_int64(s, i, v); }
  static void Bind(sqlite3_stmt* s, int i, double v) { sqlite3_bind_double(s, i, v); }
  static void Bind(sqlite3_stmt* s, int i, const std::optional<double>& v) {
    if (v) {
      sqlite3_bind_double(s, i, *v);
    } else {
      sqlite3_bind_null(s, i);
    }
  }
  static void Bind(sqlite3_stmt* s, int i, const std::optional<std::string>& v) {
    if (v) {
      Bind(s, i, *v);
    } else {
      sqlite3_bind_null(s, i);
    }
  }

  Status Error(const char* what) {
    return common::IoError("writing Optuna storage " + path_ + " (" + what +
                           "): " + sqlite3_errmsg(db_));
  }

  sqlite3* db_;
  std::string path_;
};

// Optuna's TrialValueType / TrialIntermediateValueType: a finite value is stored as is; an
// infinite one (or NaN, intermediate values only) as NULL with its kind.
std::pair<std::optional<double>, const char*> OptunaValue(double v) {
  if (std::isnan(v)) return {std::nullopt, "NAN"};
  if (std::isinf(v)) return {std::nullopt, v > 0 ? "INF_POS" : "INF_NEG"};
  return {v, "FINITE"};
}

// A list of numbers as Python's json.dumps writes it (Optuna stores system attributes so):
// "[0.5, -1.0]", NaN and Infinity as Python writes them.
std::string PythonNumberList(const std::vector<double>& xs) {
  std::string out = "[";
  for (size_t i = 0; i < xs.size(); ++i) {
    if (i > 0) out += ", ";
    const double x = xs[i];
    if (std::isnan(x)) {
      out += "NaN";
    } else if (std::isinf(x)) {
      out += x > 0 ? "Infinity" : "-Infinity";
    } else {
      out += config::DoubleRepr(x);
    }
  }
  return out + "]";
}

Status WriteRows(Writer& w, const StudyData& study) {
  TRIALD_RETURN_IF_ERROR(w.Exec("BEGIN"));
  TRIALD_RETURN_IF_ERROR(w.Exec(kOptunaSchema));
  TRIALD_ASSIGN_OR_RETURN(Stmt st, w.Prepare("INSERT INTO studies VALUES (1, ?)"));
  TRIALD_RETURN_IF_ERROR(w.Insert(st, study.name));
  TRIALD_ASSIGN_OR_RETURN(Stmt dir, w.Prepare("INSERT INTO study_directions (direction, "
                                              "study_id, objective) VALUES (?, 1, ?)"));
  for (size_t k = 0; k < study.directions.size(); ++k) {
    TRIALD_RETURN_IF_ERROR(w.Insert(
        dir, study.directions[k] == "maximize" ? "MAXIMIZE" : "MINIMIZE", static_cast<int>(k)));
  }
  // Where Optuna (3.2 on) keeps study.set_metric_names's names.
  if (!study.metric_names.empty()) {
    TRIALD_ASSIGN_OR_RETURN(Stmt names, w.Prepare("INSERT INTO study_system_attributes "
                                                  "(study_id, \"key\", value_json) VALUES "
                                                  "(1, 'study:metric_names', ?)"));
    json::array list;
    for (const std::string& n : study.metric_names) list.emplace_back(n);
    TRIALD_RETURN_IF_ERROR(w.Insert(
        names, WriteJson(json::value(std::move(list)), JsonStyle{.python_spacing = true})));
  }

  TRIALD_ASSIGN_OR_RETURN(
      Stmt trial, w.Prepare("INSERT INTO trials (trial_id, number, study_id, state, "
                            "datetime_start, datetime_complete) VALUES (?, ?, 1, ?, ?, ?)"));
  TRIALD_ASSIGN_OR_RETURN(Stmt param, w.Prepare("INSERT INTO trial_params (trial_id, param_name, "
                                                "param_value, distribution_json) VALUES "
                                                "(?, ?, ?, ?)"));
  TRIALD_ASSIGN_OR_RETURN(Stmt value, w.Prepare("INSERT INTO trial_values (trial_id, objective, "
                                                "value, value_type) VALUES (?, ?, ?, ?)"));
  TRIALD_ASSIGN_OR_RETURN(Stmt sys_attr, w.Prepare("INSERT INTO trial_system_attributes "
                                                   "(trial_id, \"key\", value_json) VALUES "
                                                   "(?, ?, ?)"));
  TRIALD_ASSIGN_OR_RETURN(Stmt inter,
                          w.Prepare("INSERT INTO trial_intermediate_values (trial_id, step, "
                                    "intermediate_value, intermediate_value_type) VALUES "
                                    "(?, ?, ?, ?)"));
  TRIALD_ASSIGN_OR_RETURN(Stmt attr, w.Prepare("INSERT INTO trial_user_attributes (trial_id, "
                                               "\"key\", value_json) VALUES (?, ?, ?)"));
  const JsonStyle py{.python_spacing = true};
  for (const ExportTrial& t : study.trials) {
    const int64_t id = t.number + 1;
    std::optional<std::string> start, complete;
    if (t.started_at > 0) start = OptunaDatetime(t.started_at);
    if (t.finished_at > 0) complete = OptunaDatetime(t.finished_at);
    TRIALD_RETURN_IF_ERROR(w.Insert(trial, id, t.number, t.state, start, complete));
    for (const ExportParam& p : t.params) {
      TRIALD_RETURN_IF_ERROR(
          w.Insert(param, id, p.name, p.internal, OptunaDistributionJson(p.dist)));
    }
    // Optuna keeps a value for COMPLETE trials and, as triald does, the last intermediate value
    // of a PRUNED one; a NaN objective is not a value Optuna can hold. With several
    // objectives, a COMPLETE trial has one row per objective (all of them, or none).
    if (study.directions.size() > 1) {
      bool storable = t.state == "COMPLETE" && t.values.size() == study.directions.size();
      for (double x : t.values) storable = storable && !std::isnan(x);
      for (size_t k = 0; storable && k < t.values.size(); ++k) {
        auto [v, kind] = OptunaValue(t.values[k]);
        TRIALD_RETURN_IF_ERROR(w.Insert(value, id, static_cast<int>(k), v, kind));
      }
    } else if ((t.state == "COMPLETE" || t.state == "PRUNED") && t.value && !std::isnan(*t.value)) {
      auto [v, kind] = OptunaValue(*t.value);
      TRIALD_RETURN_IF_ERROR(w.Insert(value, id, 0, v, kind));
    }
    // Where Optuna 3.1 keeps a trial's constraints (optuna/samplers/_base.py _CONSTRAINTS_KEY,
    // read by NSGAIISampler and TPESampler), as its samplers' after_trial stores them.
    if (!t.constraints.empty()) {
      TRIALD_RETURN_IF_ERROR(
          w.Insert(sys_attr, id, "constraints", PythonNumberList(t.constraints)));
    }
    for (const auto& [step, x] : t.intermediate) {
      auto [v, kind] = OptunaValue(x);
      TRIALD_RETURN_IF_ERROR(w.Insert(inter, id, step, v, kind));
    }
    for (const auto& kv : t.attrs) {
      TRIALD_RETURN_IF_ERROR(w.Insert(attr, id, std::string(kv.key()), WriteJson(kv.value(), py)));
    }
    if (t.state == "FAIL") {
      TRIALD_RETURN_IF_ERROR(
          w.Insert(attr, id, "triald_fail_reason", WriteJson(json::value(t.fail_reason), py)));
      TRIALD_RETURN_IF_ERROR(
          w.Insert(attr, id, "triald_fail_detail", WriteJson(json::value(t.fail_detail), py)));
    }
    if (t.retry_of) {
      TRIALD_RETURN_IF_ERROR(w.Insert(attr, id, "triald_retry_of", std::to_string(*t.retry_of)));
    }
    // What triald measured, one user attribute per measured value (study_export.h names them).
    if (t.resources) {
      const model::TrialResources& r = *t.resources;
      auto seconds = [](double x) { return WriteJson(json::value(x)); };
      if (r.peak_memory_bytes) {
        TRIALD_RETURN_IF_ERROR(
            w.Insert(attr, id, "triald_peak_memory_bytes", std::to_string(*r.peak_memory_bytes)));
      }
      if (r.peak_gpu_memory_bytes) {
        TRIALD_RETURN_IF_ERROR(w.Insert(attr, id, "triald_peak_gpu_memory_bytes",
                                        std::to_string(*r.peak_gpu_memory_bytes)));
      }
      if (r.cpu_time_s) {
        TRIALD_RETURN_IF_ERROR(w.Insert(attr, id, "triald_cpu_time_s", seconds(*r.cpu_time_s)));
      }
      if (r.wall_s) {
        TRIALD_RETURN_IF_ERROR(w.Insert(attr, id, "triald_wall_s", seconds(*r.wall_s)));
      }
      if (!r.memory_source.empty()) {
        TRIALD_RETURN_IF_ERROR(w.Insert(attr, id, "triald_memory_source",
                                        WriteJson(json::value(r.memory_source), py)));
      }
      if (!r.cpu_source.empty()) {
        TRIALD_RETURN_IF_ERROR(
            w.Insert(attr, id, "triald_cpu_source", WriteJson(json::value(r.cpu_source), py)));
      }
    }
  }
  return w.Exec("COMMIT");
}

}  // namespace

Status WriteOptunaStorage(const StudyData& study, const std::string& path, bool overwrite) {
  std::error_code ec;
  if (!overwrite && std::filesystem::exists(path, ec)) {
    return common::AlreadyExists("Optuna storage " + path +
                                 " already exists; remove it, choose another --out, or add "
                                 "--force to replace it");
  }
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  std::filesystem::remove(tmp, ec);
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(tmp.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  std::unique_ptr<sqlite3, DbCloser> db(raw);
  if (rc != SQLITE_OK) {
    return common::IoError("cannot create Optuna storage " + tmp + ": " +
                           (raw != nullptr ? sqlite3_errmsg(raw) : sqlite3_errstr(rc)));
  }
  Writer w(db.get(), path);
  Status st = WriteRows(w, study);
  db.reset();
  if (st.ok()) {
    std::filesystem::rename(tmp, path, ec);
    if (ec) st = common::IoError("renaming " + tmp + " to " + path + ": " + ec.message());
  }
  if (!st.ok()) std::filesystem::remove(tmp, ec);
  return st;
}

}  // namespace triald::exports
