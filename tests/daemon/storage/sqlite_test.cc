// What only SqliteStorage promises (daemon/storage/sqlite_storage.h): a file that survives
// reopening and a crash, the WAL journal, the integrity check, the upgrade of every older schema
// version (databases written by hand as old daemons left them), close-on-exec descriptors, open
// errors.

#include "tests/daemon/storage/backend_fixture.h"

namespace triald::storage {
namespace {

using namespace contract;  // NOLINT: the suites' shared fixture

// Fills a database with one trial in each state plus intermediates, attrs and events.
struct Populated {
  StudyRecord study;
  std::vector<TrialRecord> trials;
};

Populated Populate(Storage& s) {
  Populated p;
  p.study = Unwrap(s.CreateStudy(MakeStudy("persist"), 1));
  for (int i = 0; i < 5; ++i) Unwrap(s.CreateTrial(p.study.id, AllKindsOfParams(), 2 + i));
  auto t = Unwrap(s.GetTrials(p.study.id));
  for (int i = 1; i < 5; ++i) REQUIRE_OK(s.MarkRunning(t[i].id, {1000 + i, 1000 + i, 77}, 10));
  REQUIRE_OK(s.AddIntermediate(t[1].id, 0, 0.5));
  REQUIRE_OK(s.SetAttr(t[1].id, "epoch", "3"));
  REQUIRE_OK(s.FinishTrial(t[2].id, Outcome(TrialState::kComplete, -kInf), 20));
  REQUIRE_OK(s.FinishTrial(t[3].id, Outcome(TrialState::kPruned, 0.25), 21));
  TrialOutcome fail = Outcome(TrialState::kFail);
  fail.fail = {"oom", -1, 9, false, "killed by the OOM killer", "tail\n"};
  REQUIRE_OK(s.FinishTrial(t[4].id, fail, 22));
  // The intermediate and attr below were written with synchronous=NORMAL and are made
  // durable by the FULL commit of AppendEvent.
  REQUIRE_OK(s.AddIntermediate(t[1].id, 1, 0.4));
  REQUIRE_OK(s.SetAttr(t[1].id, "epoch", "4"));
  REQUIRE_OK(s.AppendEvent(p.study.id, t[1].id, "trial_started", "", 30));
  p.trials = Unwrap(s.GetTrials(p.study.id));
  return p;
}

void RequireSamePopulated(Storage& s, const Populated& p) {
  RequireSameStudy(Unwrap(s.GetStudy("persist")), p.study);
  auto trials = Unwrap(s.GetTrials(p.study.id));
  REQUIRE(trials.size() == p.trials.size());
  for (size_t i = 0; i < trials.size(); ++i) RequireSameTrial(trials[i], p.trials[i]);
  CHECK(trials[1].intermediate.at(1) == 0.4);
  CHECK(trials[1].attrs.at("epoch") == "4");
  REQUIRE(Unwrap(s.GetEvents(p.study.id)).size() == 1);
}

TEST_CASE("sqlite: data survives closing and reopening the file", "[storage][sqlite]") {
  TempDir dir;
  const std::string path = dir.path() + "/triald.db";
  Populated p;
  {
    auto s = OpenSqliteOrFail(path);
    p = Populate(*s);
  }
  auto s = OpenSqliteOrFail(path);
  RequireSamePopulated(*s, p);
  CHECK(Unwrap(s->GetRunningTrials()).size() == 1);
  // Numbering continues after the reopen.
  CHECK(Unwrap(s->CreateTrial(p.study.id, {}, 40)).number == 5);
  REQUIRE_CODE(s->CreateStudy(MakeStudy("persist"), 41), Code::kAlreadyExists);
}

TEST_CASE("sqlite: committed state survives a process that dies without closing",
          "[storage][sqlite]") {
  TempDir dir;
  const std::string path = dir.path() + "/triald.db";
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // No Catch assertions here: report through the exit status, and never run destructors.
    auto s = OpenSqliteStorage({path});
    if (!s.ok()) _exit(2);
    auto study = (*s)->CreateStudy(MakeStudy("crash"), 1);
    if (!study.ok()) _exit(3);
    auto t = (*s)->CreateTrial(study->id, OneParam(1), 2);
    if (!t.ok() || !(*s)->MarkRunning(t->id, {getpid(), getpid(), 5}, 3).ok()) _exit(4);
    _exit(0);  // the WAL is left behind, un-checkpointed
  }
  int wstatus = 0;
  REQUIRE(waitpid(child, &wstatus, 0) == child);
  REQUIRE(WIFEXITED(wstatus));
  REQUIRE(WEXITSTATUS(wstatus) == 0);

  auto s = OpenSqliteOrFail(path);
  auto running = Unwrap(s->GetRunningTrials());
  REQUIRE(running.size() == 1);
  CHECK(running[0].process.pid == child);
  CHECK(running[0].params.at("x").internal == 1);
  CHECK(Unwrap(SqliteIntegrityCheck(path)) == "ok");
}

TEST_CASE("sqlite: a file database uses the WAL journal", "[storage][sqlite]") {
  TempDir dir;
  const std::string path = dir.path() + "/triald.db";
  auto s = OpenSqliteOrFail(path);
  Unwrap(s->CreateStudy(MakeStudy("w"), 1));

  // Bytes 18 and 19 of the database header (file format write/read version) are 2 in WAL mode.
  std::ifstream in(path, std::ios::binary);
  char header[20] = {};
  REQUIRE(in.read(header, sizeof header));
  CHECK(header[18] == 2);
  CHECK(header[19] == 2);
  CHECK(std::filesystem::exists(path + "-wal"));
  CHECK(std::filesystem::exists(path + "-shm"));
}

TEST_CASE("sqlite: integrity check", "[storage][sqlite]") {
  TempDir dir;
  const std::string path = dir.path() + "/triald.db";

  SECTION("a healthy database is ok while open and after closing") {
    auto s = OpenSqliteOrFail(path);
    Populate(*s);
    CHECK(Unwrap(SqliteIntegrityCheck(path)) == "ok");
    s.reset();
    CHECK(Unwrap(SqliteIntegrityCheck(path)) == "ok");
    // Checking neither created nor left anything besides the database.
    CHECK_FALSE(std::filesystem::exists(path + "-journal"));
  }
  SECTION("a missing file is an error naming the path, and is not created") {
    auto r = SqliteIntegrityCheck(path);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(), Catch::Contains(path));
    CHECK_FALSE(std::filesystem::exists(path));
  }
  SECTION("a file that is not a database is an error naming the path") {
    std::ofstream(path) << std::string(8192, 'x');
    auto r = SqliteIntegrityCheck(path);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(), Catch::Contains(path));
  }
}

// The schema as version 1 created it (before trials recorded their node), written by hand so
// that the upgrade is tested against what old daemons really left behind.
constexpr const char* kSqliteSchemaV1 = R"sql(
CREATE TABLE studies (
  id          INTEGER PRIMARY KEY,
  name        TEXT NOT NULL UNIQUE,
  direction   TEXT NOT NULL CHECK (direction IN ('MINIMIZE', 'MAXIMIZE')),
  n_trials    INTEGER NOT NULL,
  state       TEXT NOT NULL CHECK (state IN ('RUNNING', 'COMPLETE', 'CANCELLED')),
  spec_toml   TEXT NOT NULL,
  spec_path   TEXT NOT NULL,
  seed        INTEGER NOT NULL,
  created_at  REAL NOT NULL,
  finished_at REAL NOT NULL DEFAULT 0
);
CREATE TABLE trials (
  id               INTEGER PRIMARY KEY,
  study_id         INTEGER NOT NULL REFERENCES studies(id),
  number           INTEGER NOT NULL,
  state            TEXT NOT NULL
                   CHECK (state IN ('WAITING', 'RUNNING', 'COMPLETE', 'PRUNED', 'FAIL')),
  value            REAL,
  value_is_nan     INTEGER NOT NULL DEFAULT 0,
  fail_reason      TEXT NOT NULL DEFAULT '',
  fail_exit_code   INTEGER NOT NULL DEFAULT -1,
  fail_signal      INTEGER NOT NULL DEFAULT 0,
  fail_core_dumped INTEGER NOT NULL DEFAULT 0,
  fail_detail      TEXT NOT NULL DEFAULT '',
  stderr_tail      TEXT NOT NULL DEFAULT '',
  pid              INTEGER NOT NULL DEFAULT 0,
  pgid             INTEGER NOT NULL DEFAULT 0,
  pid_start_time   INTEGER NOT NULL DEFAULT 0,
  created_at       REAL NOT NULL,
  started_at       REAL NOT NULL DEFAULT 0,
  finished_at      REAL NOT NULL DEFAULT 0,
  retry_of         INTEGER REFERENCES trials(id),
  UNIQUE (study_id, number)
);
CREATE INDEX trials_by_state ON trials(state);
CREATE TABLE trial_params (
  trial_id          INTEGER NOT NULL REFERENCES trials(id),
  name              TEXT NOT NULL,
  internal_value    REAL NOT NULL,
  distribution_json TEXT NOT NULL,
  PRIMARY KEY (trial_id, name)
) WITHOUT ROWID;
CREATE TABLE trial_intermediate (
  trial_id INTEGER NOT NULL REFERENCES trials(id),
  step     INTEGER NOT NULL,
  value    REAL,
  PRIMARY KEY (trial_id, step)
) WITHOUT ROWID;
CREATE TABLE trial_attrs (
  trial_id   INTEGER NOT NULL REFERENCES trials(id),
  key        TEXT NOT NULL,
  value_json TEXT NOT NULL,
  PRIMARY KEY (trial_id, key)
) WITHOUT ROWID;
CREATE TABLE events (
  id       INTEGER PRIMARY KEY,
  at       REAL NOT NULL,
  study_id INTEGER REFERENCES studies(id),
  trial_id INTEGER REFERENCES trials(id),
  kind     TEXT NOT NULL,
  detail   TEXT NOT NULL
);
CREATE INDEX events_by_study ON events(study_id);
CREATE INDEX events_by_trial ON events(trial_id);
PRAGMA user_version = 1;
)sql";

// Runs SQL on a SQLite file directly, outside any storage.
void SqliteExecOrFail(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open(path.c_str(), &db);
  char* err = nullptr;
  if (rc == SQLITE_OK) rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  std::string msg = err != nullptr ? err : sqlite3_errstr(rc);
  sqlite3_free(err);
  sqlite3_close(db);
  INFO(path << ": " << msg);
  REQUIRE(rc == SQLITE_OK);
}

TEST_CASE("sqlite: a version-1 database is upgraded in place", "[storage][sqlite]") {
  TempDir dir;
  const std::string path = dir.path() + "/triald.db";
  const std::string dist = FloatDist(0, 1, false, 0).ToJson();
  SqliteExecOrFail(
      path, std::string(kSqliteSchemaV1) +
                "INSERT INTO studies (id, name, direction, n_trials, state, spec_toml, spec_path, "
                "seed, created_at) VALUES (1, 'old', 'MINIMIZE', 5, 'RUNNING', '', '/old.toml', "
                "7, 10);"
                "INSERT INTO trials (id, study_id, number, state, created_at, started_at, pid, "
                "pgid, pid_start_time) VALUES (1, 1, 0, 'RUNNING', 11, 12, 100, 100, 5);"
                "INSERT INTO trials (id, study_id, number, state, created_at) "
                "VALUES (2, 1, 1, 'WAITING', 13);"
                "INSERT INTO trial_params VALUES (1, 'x', 0.5, '" +
                dist + "');");

  {
    auto s = OpenSqliteOrFail(path);
    CHECK_FALSE(Unwrap(s->GetStudy("old")).submitter.known());
    auto trials = Unwrap(s->GetTrials(1));
    REQUIRE(trials.size() == 2);
    // Trials from before the upgrade ran on an unknown node.
    CHECK(trials[0].node.empty());
    CHECK(trials[1].node.empty());
    CHECK(trials[0].state == TrialState::kRunning);
    CHECK(trials[0].process.pid == 100);
    CHECK(trials[0].params.at("x").internal == 0.5);
    CHECK(Unwrap(s->GetRunningTrials()).size() == 1);

    REQUIRE_OK(s->ClaimTrial(trials[1].id));
    CHECK(Unwrap(s->GetTrial(1, 1)).node == kNode);
    REQUIRE_OK(s->Heartbeat(20));
    auto nodes = Unwrap(s->GetNodes(25));
    REQUIRE(nodes.size() == 1);
    CHECK(nodes[0].name == kNode);
    CHECK(nodes[0].silent_for == 5);
    CHECK(Unwrap(s->CreateTrial(1, {}, 30)).number == 2);
  }
  // Reopened at version 2: nothing is upgraded twice, nothing is lost.
  auto s = OpenSqliteOrFail(path);
  CHECK(Unwrap(s->GetNodes(25)).size() == 1);
  auto trials = Unwrap(s->GetTrials(1));
  REQUIRE(trials.size() == 3);
  CHECK(trials[1].node == kNode);
  CHECK(Unwrap(SqliteIntegrityCheck(path)) == "ok");
}

// What version 2 added to version 1, as the daemons of version 2 applied it: a database they
// wrote is kSqliteSchemaV1 followed by this.
constexpr const char* kSqliteSchemaV2Upgrade = R"sql(
ALTER TABLE trials ADD COLUMN node TEXT NOT NULL DEFAULT '';
CREATE TABLE IF NOT EXISTS nodes (
  name       TEXT PRIMARY KEY,
  instance   TEXT NOT NULL,
  first_beat REAL NOT NULL,
  last_beat  REAL NOT NULL
) WITHOUT ROWID;
PRAGMA user_version = 2;
)sql";

TEST_CASE("sqlite: a version-2 database gets submitters, unknown for its studies",
          "[storage][sqlite]") {
  TempDir dir;
  const std::string path = dir.path() + "/triald.db";
  SqliteExecOrFail(path, std::string(kSqliteSchemaV1) + kSqliteSchemaV2Upgrade +
                             "INSERT INTO studies (id, name, direction, n_trials, state, "
                             "spec_toml, spec_path, seed, created_at) VALUES (1, 'old', "
                             "'MINIMIZE', 5, 'RUNNING', '', '/old.toml', 7, 10);"
                             "INSERT INTO trials (id, study_id, number, state, created_at, node) "
                             "VALUES (1, 1, 0, 'WAITING', 11, 'n1');");
  {
    auto s = OpenSqliteOrFail(path);
    StudyRecord old = Unwrap(s->GetStudy("old"));
    CHECK_FALSE(old.submitter.known());
    CHECK(old.submitter.name.empty());
    CHECK(old.spec_path == "/old.toml");
    CHECK(Unwrap(s->GetTrial(1, 0)).node == "n1");
    NewStudy fresh = MakeStudy("new");
    fresh.submitter = {1001, "alice"};
    REQUIRE_OK(s->CreateStudy(fresh, 20).status());
  }
  // Reopened at the current version: nothing is upgraded twice, nothing is lost.
  auto s = OpenSqliteOrFail(path);
  CHECK_FALSE(Unwrap(s->GetStudy("old")).submitter.known());
  StudyRecord fresh = Unwrap(s->GetStudy("new"));
  CHECK(fresh.submitter.uid == 1001);
  CHECK(fresh.submitter.name == "alice");
  CHECK(Unwrap(SqliteIntegrityCheck(path)) == "ok");
}

// What version 3 added to version 2, as the daemons of version 3 applied it: a database they
// wrote is kSqliteSchemaV1, kSqliteSchemaV2Upgrade and this.
constexpr const char* kSqliteSchemaV3Upgrade = R"sql(
ALTER TABLE studies ADD COLUMN submitter_uid INTEGER NOT NULL DEFAULT -1;
ALTER TABLE studies ADD COLUMN submitter_name TEXT NOT NULL DEFAULT '';
PRAGMA user_version = 3;
)sql";

TEST_CASE("sqlite: a version-3 database keeps its studies and values and takes several objectives",
          "[storage][sqlite][objectives]") {
  TempDir dir;
  const std::string path = dir.path() + "/triald.db";
  const std::string dist = FloatDist(0, 1, false, 0).ToJson();
  SqliteExecOrFail(
      path, std::string(kSqliteSchemaV1) + kSqliteSchemaV2Upgrade + kSqliteSchemaV3Upgrade +
                "INSERT INTO studies (id, name, direction, n_trials, state, spec_toml, spec_path, "
                "seed, created_at, finished_at, submitter_uid, submitter_name) VALUES (1, 'old', "
                "'MAXIMIZE', 3, 'COMPLETE', 'spec', '/old.toml', 7, 10, 20, 1001, 'alice');"
                "INSERT INTO trials (id, study_id, number, state, value, created_at, started_at, "
                "finished_at, node) VALUES (1, 1, 0, 'COMPLETE', 0.75, 11, 12, 13, 'n1');"
                "INSERT INTO trials (id, study_id, number, state, value, created_at, "
                "finished_at) VALUES (2, 1, 1, 'PRUNED', 0.5, 14, 15);"
                "INSERT INTO trials (id, study_id, number, state, fail_reason, fail_detail, "
                "created_at, finished_at) VALUES (3, 1, 2, 'FAIL', 'exit', 'exited with code 1', "
                "16, 17);"
                "INSERT INTO trial_params VALUES (1, 'x', 0.5, '" +
                dist +
                "');"
                "INSERT INTO trial_intermediate VALUES (1, 3, 0.25);");
  {
    auto s = OpenSqliteOrFail(path);
    StudyRecord old = Unwrap(s->GetStudy("old"));
    CHECK(old.direction == config::Direction::kMaximize);
    CHECK(old.directions == std::vector<config::Direction>{config::Direction::kMaximize});
    CHECK(old.state == StudyState::kComplete);
    CHECK(old.submitter.uid == 1001);
    std::vector<TrialRecord> trials = Unwrap(s->GetTrials(1));
    REQUIRE(trials.size() == 3);
    CHECK(trials[0].value == 0.75);
    CHECK(trials[0].values == std::vector<double>{0.75});
    CHECK(trials[0].constraints.empty());
    CHECK(trials[0].Feasible());
    CHECK(trials[0].params.at("x").internal == 0.5);
    CHECK(trials[0].intermediate == std::map<int64_t, double>{{3, 0.25}});
    CHECK(trials[0].node == "n1");
    CHECK(trials[1].value == 0.5);
    CHECK(trials[1].values.empty());
    CHECK(trials[2].fail.detail == "exited with code 1");
    std::optional<TrialRecord> best = Unwrap(s->GetBestTrial(1, config::Direction::kMaximize));
    REQUIRE(best.has_value());
    CHECK(best->number == 0);

    NewStudy mo = MakeStudy("mo");
    mo.direction = config::Direction::kMinimize;
    mo.directions = {config::Direction::kMinimize, config::Direction::kMaximize};
    int64_t id = Unwrap(s->CreateStudy(mo, 30)).id;
    TrialRecord t = Unwrap(s->CreateTrial(id, OneParam(1), 31));
    TrialOutcome o = Outcome(TrialState::kComplete);
    o.values = {0.31, 812.0};
    o.constraints = {-1.0};
    REQUIRE_OK(s->FinishTrial(t.id, o, 32));
  }
  // Reopened at the current version: nothing is upgraded twice, nothing is lost.
  auto s = OpenSqliteOrFail(path);
  CHECK(Unwrap(s->GetTrial(1, 0)).values == std::vector<double>{0.75});
  StudyRecord mo = Unwrap(s->GetStudy("mo"));
  CHECK(mo.directions ==
        std::vector<config::Direction>{config::Direction::kMinimize, config::Direction::kMaximize});
  TrialRecord t = Unwrap(s->GetTrial(mo.id, 0));
  CHECK(t.values == std::vector<double>{0.31, 812.0});
  CHECK(t.constraints == std::vector<double>{-1.0});
  CHECK_FALSE(t.value.has_value());
  CHECK(Unwrap(SqliteIntegrityCheck(path)) == "ok");
}

// What version 4 added to version 3: a database it wrote is kSqliteSchemaV1, the upgrades to
// version 3 and this.
constexpr const char* kSqliteSchemaV4Upgrade = R"sql(
ALTER TABLE studies ADD COLUMN directions TEXT NOT NULL DEFAULT '';
ALTER TABLE trials ADD COLUMN values_json TEXT NOT NULL DEFAULT '';
ALTER TABLE trials ADD COLUMN constraints_json TEXT NOT NULL DEFAULT '';
PRAGMA user_version = 4;
)sql";

TEST_CASE("sqlite: a version-4 database keeps its trials, which have no resources",
          "[storage][sqlite][resources]") {
  TempDir dir;
  const std::string path = dir.path() + "/triald.db";
  SqliteExecOrFail(
      path, std::string(kSqliteSchemaV1) + kSqliteSchemaV2Upgrade + kSqliteSchemaV3Upgrade +
                kSqliteSchemaV4Upgrade +
                "INSERT INTO studies (id, name, direction, n_trials, state, spec_toml, spec_path, "
                "seed, created_at, finished_at) VALUES (1, 'old', 'MINIMIZE', 3, 'COMPLETE', "
                "'spec', '/old.toml', 7, 10, 20);"
                "INSERT INTO trials (id, study_id, number, state, value, created_at, started_at, "
                "finished_at, constraints_json) VALUES (1, 1, 0, 'COMPLETE', 0.75, 11, 12, 13, "
                "'[-1]');"
                "INSERT INTO trials (id, study_id, number, state, fail_reason, created_at, "
                "finished_at) VALUES (2, 1, 1, 'FAIL', 'oom', 14, 15);");
  {
    auto s = OpenSqliteOrFail(path);
    std::vector<TrialRecord> trials = Unwrap(s->GetTrials(1));
    REQUIRE(trials.size() == 2);
    CHECK(trials[0].value == 0.75);
    CHECK(trials[0].constraints == std::vector<double>{-1.0});
    CHECK_FALSE(trials[0].resources.has_value());
    CHECK(trials[1].fail.reason == "oom");
    CHECK_FALSE(trials[1].resources.has_value());
    int64_t id = Unwrap(s->CreateStudy(MakeStudy("new"), 30)).id;
    TrialRecord t = Unwrap(s->CreateTrial(id, OneParam(1), 31));
    TrialOutcome o = Outcome(TrialState::kComplete);
    o.resources = MeasuredResources();
    REQUIRE_OK(s->FinishTrial(t.id, o, 32));
  }
  // Reopened at the current version: nothing is upgraded twice, nothing is lost.
  auto s = OpenSqliteOrFail(path);
  CHECK_FALSE(Unwrap(s->GetTrial(1, 0)).resources.has_value());
  CHECK(Unwrap(s->GetTrial(Unwrap(s->GetStudy("new")).id, 0)).resources == MeasuredResources());
  CHECK(Unwrap(SqliteIntegrityCheck(path)) == "ok");
}

// What version 5 added to version 4.
constexpr const char* kSqliteSchemaV5Upgrade = R"sql(
ALTER TABLE trials ADD COLUMN resources_json TEXT NOT NULL DEFAULT '';
PRAGMA user_version = 5;
)sql";

TEST_CASE("sqlite: a version-5 database's studies are not paused and keep their parallelism",
          "[storage][sqlite][control]") {
  TempDir dir;
  const std::string path = dir.path() + "/triald.db";
  SqliteExecOrFail(
      path, std::string(kSqliteSchemaV1) + kSqliteSchemaV2Upgrade + kSqliteSchemaV3Upgrade +
                kSqliteSchemaV4Upgrade + kSqliteSchemaV5Upgrade +
                "INSERT INTO studies (id, name, direction, n_trials, state, spec_toml, spec_path, "
                "seed, created_at, finished_at) VALUES (1, 'old', 'MINIMIZE', 3, 'RUNNING', "
                "'spec', '/old.toml', 7, 10, 0);"
                "INSERT INTO trials (id, study_id, number, state, value, created_at, started_at, "
                "finished_at) VALUES (1, 1, 0, 'COMPLETE', 0.75, 11, 12, 13);");
  {
    auto s = OpenSqliteOrFail(path);
    StudyRecord old = Unwrap(s->GetStudy("old"));
    CHECK_FALSE(old.paused);
    CHECK(old.parallelism == 0);
    CHECK(old.n_trials == 3);
    CHECK(Unwrap(s->GetTrial(1, 0)).value == 0.75);
    REQUIRE_OK(s->SetStudyControl(old.id, true, 9, 2));
  }
  // Reopened at the current version: nothing is upgraded twice, nothing is lost.
  auto s = OpenSqliteOrFail(path);
  StudyRecord old = Unwrap(s->GetStudy("old"));
  CHECK(old.paused);
  CHECK(old.n_trials == 9);
  CHECK(old.parallelism == 2);
  REQUIRE_OK(s->DeleteStudy(old.id));
  CHECK(Unwrap(s->ListStudies()).empty());
  CHECK(Unwrap(SqliteIntegrityCheck(path)) == "ok");
}

// What version 6 added to version 5.
constexpr const char* kSqliteSchemaV6Upgrade = R"sql(
ALTER TABLE studies ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;
ALTER TABLE studies ADD COLUMN parallelism INTEGER NOT NULL DEFAULT 0;
PRAGMA user_version = 6;
)sql";

TEST_CASE("sqlite: a version-6 database's studies may end FAILED and keep their trials and events",
          "[storage][sqlite]") {
  TempDir dir;
  const std::string path = dir.path() + "/triald.db";
  SqliteExecOrFail(
      path, std::string(kSqliteSchemaV1) + kSqliteSchemaV2Upgrade + kSqliteSchemaV3Upgrade +
                kSqliteSchemaV4Upgrade + kSqliteSchemaV5Upgrade + kSqliteSchemaV6Upgrade +
                "INSERT INTO studies (id, name, direction, n_trials, state, spec_toml, spec_path, "
                "seed, created_at, finished_at, paused, parallelism) VALUES (1, 'old', "
                "'MINIMIZE', 3, 'RUNNING', 'spec', '/old.toml', 7, 10, 0, 1, 2);"
                "INSERT INTO trials (id, study_id, number, state, value, created_at, started_at, "
                "finished_at) VALUES (1, 1, 0, 'COMPLETE', 0.75, 11, 12, 13);"
                "INSERT INTO events (at, study_id, trial_id, kind, detail) VALUES "
                "(14, 1, 1, 'trial_complete', 'old');");
  {
    auto s = OpenSqliteOrFail(path);
    StudyRecord old = Unwrap(s->GetStudy("old"));
    CHECK(old.paused);
    CHECK(old.parallelism == 2);
    REQUIRE_OK(s->SetStudyState(old.id, StudyState::kFailed, 20));
  }
  // Reopened at the current version: the copied studies table kept its id, so the trial and
  // the event still name it, and the foreign keys hold.
  auto s = OpenSqliteOrFail(path);
  StudyRecord old = Unwrap(s->GetStudy("old"));
  CHECK(old.state == StudyState::kFailed);
  CHECK(old.finished_at == 20);
  CHECK(Unwrap(s->GetTrial(old.id, 0)).value == 0.75);
  CHECK(Unwrap(s->GetEvents(old.id)).size() == 1);
  REQUIRE_OK(s->DeleteStudy(old.id));
  CHECK(Unwrap(s->ListStudies()).empty());
  CHECK(Unwrap(SqliteIntegrityCheck(path)) == "ok");
}

TEST_CASE("sqlite: a version-8 database's studies have no submit choices, and take them",
          "[storage][sqlite]") {
  TempDir dir;
  const std::string path = dir.path() + "/triald.db";
  {
    auto s = OpenSqliteOrFail(path);
    REQUIRE_OK(s->CreateStudy(MakeStudy("old"), 10).status());
  }
  // Version 8 is the current schema without version 9's column.
  SqliteExecOrFail(path, "ALTER TABLE studies DROP COLUMN submit_json; PRAGMA user_version = 8;");
  auto s = OpenSqliteOrFail(path);
  CHECK(Unwrap(s->GetStudy("old")).submit.empty());
  NewStudy fresh = MakeStudy("new");
  fresh.submit.python = "/usr/bin/python3";
  REQUIRE_OK(s->CreateStudy(fresh, 20).status());
  CHECK(Unwrap(s->GetStudy("new")).submit.python == "/usr/bin/python3");
  CHECK(Unwrap(SqliteIntegrityCheck(path)) == "ok");
}

TEST_CASE("sqlite: every descriptor of an open database is close-on-exec", "[storage][sqlite]") {
  TempDir dir;
  const std::string path = dir.path() + "/triald.db";
  auto before = OpenFds();

  auto s = OpenSqliteOrFail(path);
  Populate(*s);  // writes, so the -wal and -shm files are open too
  CHECK(Unwrap(SqliteIntegrityCheck(path)) == "ok");

  std::set<std::string> db_files;
  int checked = 0;
  for (const auto& [fd, target] : OpenFds()) {
    bool ours = target.rfind(dir.path(), 0) == 0;
    bool is_new = before.count(fd) == 0 || before.at(fd) != target;
    if (!ours && !is_new) continue;
    int flags = fcntl(fd, F_GETFD);
    if (flags == -1) continue;  // the directory listing's own descriptor, closed by now
    INFO("fd " << fd << " -> " << target);
    CHECK((flags & FD_CLOEXEC) != 0);
    ++checked;
    if (ours) db_files.insert(target);
  }
  CHECK(db_files.count(path) == 1);
  CHECK(db_files.count(path + "-wal") == 1);
  CHECK(db_files.count(path + "-shm") == 1);
  CHECK(checked >= 3);
}

TEST_CASE("sqlite: open errors name the path", "[storage][sqlite]") {
  TempDir dir;

  SECTION("a path in a missing directory") {
    const std::string path = dir.path() + "/no/such/dir/triald.db";
    auto r = OpenSqliteStorage({path});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kIo);
    CHECK_THAT(r.status().message(), Catch::Contains(path));
  }
  SECTION("a file that is not a database") {
    const std::string path = dir.path() + "/notes.txt";
    std::ofstream(path) << std::string(8192, 'x');
    auto r = OpenSqliteStorage({path});
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(), Catch::Contains(path));
    CHECK_THAT(r.status().message(), Catch::Contains("not a database"));
  }
  SECTION("an empty path") {
    auto r = OpenSqliteStorage({""});
    REQUIRE_CODE(r, Code::kInvalidArgument);
  }
}

TEST_CASE("sqlite: in-memory databases are private to their storage", "[storage][sqlite]") {
  auto a = OpenSqliteOrFail(":memory:");
  auto b = OpenSqliteOrFail(":memory:");
  Unwrap(a->CreateStudy(MakeStudy("only-in-a"), 1));
  CHECK(Unwrap(b->ListStudies()).empty());
  Unwrap(b->CreateStudy(MakeStudy("only-in-a"), 1));
}

}  // namespace
}  // namespace triald::storage
