#include "daemon/storage/schema.h"

#include <string>
#include <utility>
#include <vector>

namespace triald::storage::schema {
namespace {

using sql::Dialect;

// A column's type, written per dialect by TypeSql.
enum class Type {
  kKey,    // the table's generated 64-bit primary key
  kInt32,  // integer (SQLite: INTEGER)
  kInt64,  // bigint (SQLite: INTEGER)
  kReal,   // double precision (SQLite: REAL)
  kText,   // text: UTF-8 without NUL bytes in PostgreSQL
  kBytes,  // any bytes: bytea (SQLite: TEXT)
  kBool,   // boolean (SQLite: INTEGER 0 or 1)
};

// Which dialects have a column, table constraint or index.
enum class Only { kBoth, kSqlite, kPostgres };

struct Column {
  const char* name;
  Type type;
  // The rest of the definition, after the type: NOT NULL, DEFAULT, CHECK, REFERENCES. A boolean
  // column's default is written "false" and becomes 0 in SQLite.
  const char* constraints;
  int since = 1;  // the version that added it
  Only only = Only::kBoth;
};

struct Table {
  const char* name;
  std::vector<Column> columns;
  std::vector<const char*> table_constraints;  // PRIMARY KEY (...), UNIQUE (...)
  bool without_rowid = false;                  // SQLite: a table clustered on its primary key
  int since = 1;
};

struct Index {
  const char* name;
  const char* table;
  const char* definition;  // "(columns)" and, in PostgreSQL, a WHERE clause of a partial index
  Only only = Only::kBoth;
  int since = 1;
};

// Tables in creation order (a table after those it references).
const std::vector<Table>& Tables() {
  static const std::vector<Table> tables = {
      {"studies",
       {
           {"id", Type::kKey, ""},
           {"name", Type::kText, "NOT NULL UNIQUE"},
           {"direction", Type::kText, "NOT NULL CHECK (direction IN ('MINIMIZE', 'MAXIMIZE'))"},
           {"n_trials", Type::kInt32, "NOT NULL"},
           // FAILED since version 8 (the sampler or storage failed; the reason is the study's
           // study_failed event): see kStudyStateCheckSince.
           {"state", Type::kText,
            "NOT NULL CHECK (state IN ('RUNNING', 'COMPLETE', 'CANCELLED', 'FAILED'))"},
           {"spec_toml", Type::kText, "NOT NULL"},
           {"spec_path", Type::kBytes, "NOT NULL"},
           {"seed", Type::kInt64, "NOT NULL"},
           {"created_at", Type::kReal, "NOT NULL"},
           {"finished_at", Type::kReal, "NOT NULL DEFAULT 0"},
           // Unknown for studies stored before version 3 (uid -1, name ""): only root and
           // triald's own uid may change them. A passwd name is bytes, not necessarily UTF-8.
           {"submitter_uid", Type::kInt64, "NOT NULL DEFAULT -1", 3},
           {"submitter_name", Type::kBytes, "NOT NULL DEFAULT ''", 3},
           // Every direction when there are two or more ("" for one, which `direction` holds).
           {"directions", Type::kText, "NOT NULL DEFAULT ''", 4},
           // Control after submit (model::StudyRecord): 0 parallelism is the sweep's own.
           {"paused", Type::kInt32, "NOT NULL DEFAULT 0", 6},
           {"parallelism", Type::kInt32, "NOT NULL DEFAULT 0", 6},
           // What the submitter chose outside the file (model::NewStudy::submit), as JSON.
           {"submit_json", Type::kText, "NOT NULL DEFAULT ''", 9},
       },
       {}},
      {"trials",
       {
           {"id", Type::kKey, ""},
           {"study_id", Type::kInt64, "NOT NULL REFERENCES studies(id)"},
           {"number", Type::kInt32, "NOT NULL"},
           {"state", Type::kText,
            "NOT NULL CHECK (state IN ('WAITING', 'RUNNING', 'COMPLETE', 'PRUNED', 'FAIL'))"},
           {"value", Type::kReal, ""},
           {"value_is_nan", Type::kInt32, "NOT NULL DEFAULT 0", 1, Only::kSqlite},
           {"fail_reason", Type::kText, "NOT NULL DEFAULT ''"},
           {"fail_exit_code", Type::kInt32, "NOT NULL DEFAULT -1"},
           {"fail_signal", Type::kInt32, "NOT NULL DEFAULT 0"},
           {"fail_core_dumped", Type::kBool, "NOT NULL DEFAULT false"},
           {"fail_detail", Type::kBytes, "NOT NULL DEFAULT ''"},
           {"stderr_tail", Type::kBytes, "NOT NULL DEFAULT ''"},
           {"pid", Type::kInt32, "NOT NULL DEFAULT 0"},
           {"pgid", Type::kInt32, "NOT NULL DEFAULT 0"},
           {"pid_start_time", Type::kInt64, "NOT NULL DEFAULT 0"},
           {"created_at", Type::kReal, "NOT NULL"},
           {"started_at", Type::kReal, "NOT NULL DEFAULT 0"},
           {"finished_at", Type::kReal, "NOT NULL DEFAULT 0"},
           {"retry_of", Type::kInt64, "REFERENCES trials(id)"},
           // The node that claimed or ran the trial; "" for trials stored before version 2.
           {"node", Type::kText, "NOT NULL DEFAULT ''", 2},
           {"values_json", Type::kText, "NOT NULL DEFAULT ''", 4},
           {"constraints_json", Type::kText, "NOT NULL DEFAULT ''", 4},
           {"resources_json", Type::kText, "NOT NULL DEFAULT ''", 5},
       },
       {"UNIQUE (study_id, number)"}},
      {"trial_params",
       {
           {"trial_id", Type::kInt64, "NOT NULL REFERENCES trials(id)"},
           {"name", Type::kText, "NOT NULL"},
           {"internal_value", Type::kReal, "NOT NULL"},
           {"distribution_json", Type::kText, "NOT NULL"},
       },
       {"PRIMARY KEY (trial_id, name)"},
       true},
      {"trial_intermediate",
       {
           {"trial_id", Type::kInt64, "NOT NULL REFERENCES trials(id)"},
           {"step", Type::kInt64, "NOT NULL"},
           {"value", Type::kReal, "", 1, Only::kSqlite},  // NULL: a reported NaN
           {"value", Type::kReal, "NOT NULL", 1, Only::kPostgres},
       },
       {"PRIMARY KEY (trial_id, step)"},
       true},
      {"trial_attrs",
       {
           {"trial_id", Type::kInt64, "NOT NULL REFERENCES trials(id)"},
           {"key", Type::kBytes, "NOT NULL"},
           {"value_json", Type::kText, "NOT NULL"},
       },
       {"PRIMARY KEY (trial_id, key)"},
       true},
      {"events",
       {
           {"id", Type::kKey, ""},
           {"at", Type::kReal, "NOT NULL"},
           {"study_id", Type::kInt64, "REFERENCES studies(id)"},
           {"trial_id", Type::kInt64, "REFERENCES trials(id)"},
           {"kind", Type::kText, "NOT NULL"},
           {"detail", Type::kBytes, "NOT NULL"},
       },
       {}},
      {"nodes",
       {
           {"name", Type::kText, "PRIMARY KEY"},
           {"instance", Type::kText, "NOT NULL"},
           {"first_beat", Type::kReal, "NOT NULL"},
           {"last_beat", Type::kReal, "NOT NULL"},
       },
       {},
       true,
       2},
  };
  return tables;
}

const std::vector<Index>& Indexes() {
  static const std::vector<Index> indexes = {
      // SQLite finds RUNNING trials through an index on the state; PostgreSQL through a partial
      // index of the RUNNING ones only.
      {"trials_by_state", "trials", "(state)", Only::kSqlite},
      {"trials_running", "trials", "(id) WHERE state = 'RUNNING'", Only::kPostgres},
      {"events_by_study", "events", "(study_id)"},
      {"events_by_trial", "events", "(trial_id)"},
  };
  return indexes;
}

bool In(Dialect dialect, Only only) {
  return only == Only::kBoth || (only == Only::kSqlite) == (dialect == Dialect::kSqlite);
}

const char* TypeSql(Dialect dialect, Type type) {
  const bool lite = dialect == Dialect::kSqlite;
  switch (type) {
    case Type::kKey:
      return lite ? "INTEGER PRIMARY KEY" : "bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY";
    case Type::kInt32:
      return lite ? "INTEGER" : "integer";
    case Type::kInt64:
      return lite ? "INTEGER" : "bigint";
    case Type::kReal:
      return lite ? "REAL" : "double precision";
    case Type::kText:
      return lite ? "TEXT" : "text";
    case Type::kBytes:
      return lite ? "TEXT" : "bytea";
    case Type::kBool:
      return lite ? "INTEGER" : "boolean";
  }
  return "";
}

std::string ColumnSql(Dialect dialect, const Column& c) {
  std::string out = std::string(c.name) + " " + TypeSql(dialect, c.type);
  std::string constraints = c.constraints;
  if (c.type == Type::kBool && dialect == Dialect::kSqlite) {
    const std::string no = "DEFAULT false";
    size_t at = constraints.find(no);
    if (at != std::string::npos) constraints.replace(at, no.size(), "DEFAULT 0");
  }
  if (!constraints.empty()) out += " " + constraints;
  return out;
}

std::string CreateTableSql(Dialect dialect, const Table& t) {
  std::string out = std::string("CREATE TABLE IF NOT EXISTS ") + t.name + " (\n";
  bool first = true;
  auto add = [&](const std::string& line) {
    out += (first ? "  " : ",\n  ") + line;
    first = false;
  };
  for (const Column& c : t.columns) {
    if (In(dialect, c.only)) add(ColumnSql(dialect, c));
  }
  for (const char* constraint : t.table_constraints) add(constraint);
  out += "\n)";
  if (t.without_rowid && dialect == Dialect::kSqlite) out += " WITHOUT ROWID";
  return out;
}

// The version whose studies.state CHECK first allowed FAILED. PostgreSQL changes the constraint
// in place; SQLite cannot, so the table is copied into one with the new definition (the copy
// keeps every id, so the trials and events that name studies still find theirs; the backend
// enables foreign keys only after its upgrade, since the copy drops the table they point at).
constexpr int kStudyStateCheckSince = 8;

std::vector<std::string> StudyStateCheckStatements(Dialect dialect) {
  const Table& studies = Tables().front();
  if (dialect == Dialect::kPostgres) {
    std::string check;
    for (const Column& c : studies.columns) {
      if (std::string(c.name) == "state") check = c.constraints;
    }
    check = check.substr(check.find("CHECK"));
    return {
        "ALTER TABLE studies DROP CONSTRAINT studies_state_check, ADD CONSTRAINT "
        "studies_state_check " +
        check};
  }
  Table copy = studies;
  copy.name = "studies_new";
  std::string columns;
  for (const Column& c : studies.columns) {
    if (In(dialect, c.only)) columns += (columns.empty() ? "" : ", ") + std::string(c.name);
  }
  return {CreateTableSql(dialect, copy),
          "INSERT INTO studies_new (" + columns + ") SELECT " + columns + " FROM studies",
          "DROP TABLE studies", "ALTER TABLE studies_new RENAME TO studies"};
}

}  // namespace

int LegacyPostgresVersion(int stored) { return stored >= 1 && stored <= 5 ? stored + 1 : stored; }

std::vector<std::string> UpgradeStatements(Dialect dialect, int from) {
  std::vector<std::string> out;
  for (const Table& t : Tables()) {
    if (t.since > from) {
      out.push_back(CreateTableSql(dialect, t));
      continue;
    }
    for (const Column& c : t.columns) {
      if (c.since > from && In(dialect, c.only)) {
        out.push_back(std::string("ALTER TABLE ") + t.name + " ADD COLUMN " +
                      ColumnSql(dialect, c));
      }
    }
  }
  if (from >= 1 && from < kStudyStateCheckSince) {
    for (std::string& statement : StudyStateCheckStatements(dialect)) {
      out.push_back(std::move(statement));
    }
  }
  for (const Index& i : Indexes()) {
    if (i.since > from && In(dialect, i.only)) {
      out.push_back(std::string("CREATE INDEX IF NOT EXISTS ") + i.name + " ON " + i.table + " " +
                    i.definition);
    }
  }
  return out;
}

}  // namespace triald::storage::schema
