#pragma once
// The storage schema, described once (schema.cc: tables, columns with a logical type and the
// version that added them, indexes), from which both dialects' DDL come: the statements that
// create it in an empty database and those that bring an older one up to date.
//
// One version number for both dialects: kVersion. SQLite keeps it in PRAGMA user_version,
// PostgreSQL in table schema_version. Before the numbers were joined (version 7) each dialect
// counted on its own; the versions below are SQLite's count, and PostgreSQL's old count is one
// behind it (its first schema already had the nodes):
//   1  studies, trials, trial_params, trial_intermediate, trial_attrs, events   (SQLite 1)
//   2  trials.node and table nodes                                (SQLite 2, PostgreSQL 1)
//   3  studies.submitter_uid, submitter_name                      (SQLite 3, PostgreSQL 2)
//   4  studies.directions, trials.values_json, constraints_json   (SQLite 4, PostgreSQL 3)
//   5  trials.resources_json                                      (SQLite 5, PostgreSQL 4)
//   6  studies.paused, parallelism                                (SQLite 6, PostgreSQL 5)
//   7  the versions joined; no change to the tables               (both 7)
//   8  studies.state may be FAILED (its CHECK widened)            (both 8)
//   9  studies.submit_json (the submitter's choices outside the file) (both 9)
// A PostgreSQL database at 1 to 5 is therefore at version 2 to 6 (LegacyPostgresVersion); from
// 7 on both dialects write the same number. A later change adds its columns here with the next
// version, and both dialects migrate through UpgradeStatements.
//
// Encodings that the column types do not make obvious:
// - studies.seed and trials.pid_start_time hold uint64 values bit-cast to a signed 64-bit
//   integer: a seed >= 2^63 reads as a negative number in a SQL shell, and reads back exactly
//   through the storage.
// - SQLite turns a NaN REAL into NULL, so there trials.value is NULL both for "no value" and
//   for NaN; trials.value_is_nan (SQLite only) tells the two apart, and trial_intermediate.value
//   is NULL for a reported NaN. PostgreSQL stores NaN and infinities as themselves.
// - Columns that may hold a worker's or the operating system's bytes (kBytes: stderr tail,
//   failure detail, attribute keys, event details, the sweep file's path, the submitter's name)
//   are bytea in PostgreSQL, TEXT in SQLite (which stores bytes as given).
// - State and direction columns hold the upper-case names trialctl shows (records.cc).
// - studies.submit_json holds backend_util.h's SubmitChoicesText ("" for none: a study stored
//   before version 9, or submitted without choices).
// - studies.directions, trials.values_json, constraints_json and resources_json hold the texts
//   of backend_util.h ("" for none), so what older versions stored reads as it did.
// - nodes' times are the storage's clock (PostgreSQL: the server's), in unix seconds.
// Rows are deleted only with their study (DeleteStudy, children first), so the foreign keys
// guard inserts and need no child indexes beyond the primary keys.
//
// Thread-safety: pure functions.

#include <string>
#include <vector>

#include "daemon/storage/sql.h"

namespace triald::storage::schema {

// The schema version this triald creates and reads, in both dialects.
constexpr int kVersion = 9;

// The version of a PostgreSQL database whose schema_version says `stored`: stored + 1 for the
// numbers written before the versions were joined (1 to 5), else `stored`.
int LegacyPostgresVersion(int stored);

// The statements that bring a database of `dialect` at version `from` (0: empty) to kVersion:
// the tables a newer version added, created whole, and the columns and indexes added since
// `from` to the tables it had. Neither records the version: that is the backend's.
std::vector<std::string> UpgradeStatements(sql::Dialect dialect, int from);

}  // namespace triald::storage::schema
