// The Storage contract (daemon/storage/storage.h), run against every implementation, followed
// by tests of what only SqliteStorage promises (WAL, fsync-safe reopen, fds, integrity check,
// schema upgrade) and of what only PostgresStorage promises (several daemons on one database,
// locking, reconnection, connection errors).
//
// A new backend joins the contract suite by adding a fixture type to `TRIALD_STORAGE_BACKENDS`: a
// struct with an `Open()` that returns a fresh, empty Storage whose node is kNode.
//
// The PostgreSQL cases (the PostgresBackend instances and the [postgres] tests) need the server
// of CTest's `postgres` fixture (tests/support/postgres.h); tests/daemon/CMakeLists.txt
// registers them apart from the others, with that fixture.

#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "daemon/storage/postgres_storage.h"
#include "daemon/storage/sqlite_storage.h"
#include "daemon/storage/storage.h"
#include "tests/support/postgres.h"
#include "tests/support/temp_dir.h"

namespace triald::storage {
namespace {

using common::Code;
using config::Distribution;
using config::ParamType;
using namespace triald::model;  // the records the storage keeps

constexpr double kInf = std::numeric_limits<double>::infinity();

using triald::testing::TempDir;

// The node name every contract backend is opened with, and where that node runs.
const char kNode[] = "node-a";
const char kInstance[] = "host-a:/srv/triald";

std::unique_ptr<Storage> OpenSqliteOrFail(const std::string& path, const std::string& node = kNode,
                                          const std::string& instance = kInstance) {
  SqliteOptions options;
  options.path = path;
  options.node = node;
  options.instance = instance;
  auto r = OpenSqliteStorage(options);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return std::move(r).value();
}

std::unique_ptr<Storage> OpenPostgresOrFail(const std::string& url, const std::string& node = kNode,
                                            const std::string& instance = kInstance) {
  PostgresOptions options;
  options.url = url;
  options.node = node;
  options.instance = instance;
  auto r = OpenPostgresStorage(options);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return std::move(r).value();
}

struct SqliteFileBackend {
  TempDir dir;
  std::unique_ptr<Storage> Open() { return OpenSqliteOrFail(dir.path() + "/triald.db"); }
  // Another daemon's view of the same database.
  std::unique_ptr<Storage> OpenAs(const std::string& node,
                                  const std::string& instance = kInstance) {
    return OpenSqliteOrFail(dir.path() + "/triald.db", node, instance);
  }
};

struct SqliteMemoryBackend {
  std::unique_ptr<Storage> Open() { return OpenSqliteOrFail(":memory:"); }
};

// A fresh database on the test server per test case.
struct PostgresBackend {
  triald::testing::TestDatabase db;
  std::unique_ptr<Storage> Open() { return OpenPostgresOrFail(db.url()); }
  std::unique_ptr<Storage> OpenAs(const std::string& node,
                                  const std::string& instance = kInstance) {
    return OpenPostgresOrFail(db.url(), node, instance);
  }
};

// Every Storage implementation; each contract test case runs once per backend, named after it.
#define TRIALD_STORAGE_BACKENDS SqliteFileBackend, SqliteMemoryBackend, PostgresBackend

#define REQUIRE_OK(expr)                   \
  do {                                     \
    auto _st = (expr);                     \
    INFO(#expr << ": " << _st.ToString()); \
    REQUIRE(_st.ok());                     \
  } while (0)

template <typename T>
T Unwrap(common::Result<T> r) {
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return std::move(r).value();
}

#define REQUIRE_CODE(expr, want_code)              \
  do {                                             \
    const auto& _r = (expr);                       \
    INFO(#expr << ": " << _r.status().ToString()); \
    REQUIRE_FALSE(_r.ok());                        \
    REQUIRE(_r.status().code() == (want_code));    \
  } while (0)

NewStudy MakeStudy(const std::string& name) {
  NewStudy s;
  s.name = name;
  s.direction = config::Direction::kMaximize;
  s.n_trials = 25;
  s.spec_toml = "[study]\nname = \"" + name + "\"\n# ünïcödé comment\n";
  s.spec_path = "/sweeps/" + name + ".toml";
  s.seed = std::numeric_limits<uint64_t>::max() - 6;  // above 2^63: must survive the bit-cast
  return s;
}

Distribution FloatDist(double low, double high, bool log, double step) {
  Distribution d;
  d.type = ParamType::kFloat;
  d.low = low;
  d.high = high;
  d.log = log;
  d.step = step;
  return d;
}

Distribution IntDist(double low, double high, bool log, double step) {
  Distribution d = FloatDist(low, high, log, step);
  d.type = ParamType::kInt;
  return d;
}

Distribution CategoricalDist(std::vector<config::Choice> choices) {
  Distribution d;
  d.type = ParamType::kCategorical;
  d.choices = std::move(choices);
  return d;
}

// One parameter of every distribution type and option.
ParamMap AllKindsOfParams() {
  ParamMap p;
  p["lr"] = {3e-4, FloatDist(1e-5, 1e-1, true, 0)};
  p["dropout"] = {0.25, FloatDist(0.0, 0.5, false, 0.05)};
  p["warmup"] = {0.125, FloatDist(0.0, 1.0, false, 0)};
  p["layers"] = {4, IntDist(1, 12, false, 1)};
  p["batch"] = {64, IntDist(8, 512, true, 1)};
  p["seq_len"] = {256, IntDist(128, 1024, false, 128)};
  p["optimizer"] = {1, CategoricalDist({std::string("sgd"), std::string("adamw")})};
  p["mixed"] = {3, CategoricalDist({true, int64_t{7}, 0.5, std::string("x")})};
  return p;
}

ParamMap OneParam(double x) { return {{"x", {x, FloatDist(-10, 10, false, 0)}}}; }

bool SameDouble(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }
bool SameOptDouble(const std::optional<double>& a, const std::optional<double>& b) {
  return a.has_value() == b.has_value() && (!a || SameDouble(*a, *b));
}

void RequireSameParams(const ParamMap& got, const ParamMap& want) {
  REQUIRE(got.size() == want.size());
  for (const auto& [name, w] : want) {
    INFO("param " << name);
    auto it = got.find(name);
    REQUIRE(it != got.end());
    CHECK(it->second.internal == w.internal);
    CHECK(it->second.dist == w.dist);
  }
}

void RequireSameTrial(const TrialRecord& got, const TrialRecord& want) {
  INFO("trial id " << want.id << " number " << want.number);
  CHECK(got.id == want.id);
  CHECK(got.study_id == want.study_id);
  CHECK(got.number == want.number);
  CHECK(TrialStateName(got.state) == std::string(TrialStateName(want.state)));
  CHECK(SameOptDouble(got.value, want.value));
  RequireSameParams(got.params, want.params);
  REQUIRE(got.intermediate.size() == want.intermediate.size());
  for (const auto& [step, v] : want.intermediate) {
    REQUIRE(got.intermediate.count(step) == 1);
    CHECK(SameDouble(got.intermediate.at(step), v));
  }
  CHECK(got.attrs == want.attrs);
  CHECK(got.fail.reason == want.fail.reason);
  CHECK(got.fail.exit_code == want.fail.exit_code);
  CHECK(got.fail.signal == want.fail.signal);
  CHECK(got.fail.core_dumped == want.fail.core_dumped);
  CHECK(got.fail.detail == want.fail.detail);
  CHECK(got.fail.stderr_tail == want.fail.stderr_tail);
  CHECK(got.process.pid == want.process.pid);
  CHECK(got.process.pgid == want.process.pgid);
  CHECK(got.process.start_time == want.process.start_time);
  CHECK(got.created_at == want.created_at);
  CHECK(got.started_at == want.started_at);
  CHECK(got.finished_at == want.finished_at);
  CHECK(got.retry_of == want.retry_of);
  CHECK(got.retry_of_number == want.retry_of_number);
  CHECK(got.node == want.node);
}

void RequireSameStudy(const StudyRecord& got, const StudyRecord& want) {
  CHECK(got.id == want.id);
  CHECK(got.name == want.name);
  CHECK(got.direction == want.direction);
  CHECK(got.n_trials == want.n_trials);
  CHECK(got.state == want.state);
  CHECK(got.spec_toml == want.spec_toml);
  CHECK(got.spec_path == want.spec_path);
  CHECK(got.seed == want.seed);
  CHECK(got.created_at == want.created_at);
  CHECK(got.finished_at == want.finished_at);
  CHECK(got.submitter.uid == want.submitter.uid);
  CHECK(got.submitter.name == want.submitter.name);
}

TrialOutcome Outcome(TrialState state, std::optional<double> value = {}) {
  TrialOutcome o;
  o.state = state;
  o.value = value;
  return o;
}

// ---------------------------------------------------------------------------------------------
// Contract suite
// ---------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("studies are created, read back and listed", "[storage]",
                   TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();

  NewStudy a = MakeStudy("alpha");
  a.submitter = {4294967294, "ålice"};  // the largest uid besides (uid_t)-1, a non-ASCII name
  NewStudy b = MakeStudy("beta");
  b.direction = config::Direction::kMinimize;
  b.seed = 42;
  StudyRecord ra = Unwrap(s->CreateStudy(a, 1000.5));
  StudyRecord rb = Unwrap(s->CreateStudy(b, 1001.25));
  CHECK(ra.submitter.uid == 4294967294);
  CHECK(ra.submitter.name == "ålice");
  CHECK_FALSE(rb.submitter.known());  // none given: unknown

  CHECK(ra.id != rb.id);
  CHECK(ra.name == "alpha");
  CHECK(ra.state == StudyState::kRunning);
  CHECK(ra.seed == a.seed);
  CHECK(ra.created_at == 1000.5);
  CHECK(ra.finished_at == 0);

  RequireSameStudy(Unwrap(s->GetStudy("alpha")), ra);
  RequireSameStudy(Unwrap(s->GetStudy("beta")), rb);
  CHECK(Unwrap(s->GetStudy("beta")).direction == config::Direction::kMinimize);

  auto all = Unwrap(s->ListStudies());
  REQUIRE(all.size() == 2);
  RequireSameStudy(all[0], ra);
  RequireSameStudy(all[1], rb);

  SECTION("SetStudyState records the state and when it finished") {
    REQUIRE_OK(s->SetStudyState(ra.id, StudyState::kComplete, 2000));
    StudyRecord got = Unwrap(s->GetStudy("alpha"));
    CHECK(got.state == StudyState::kComplete);
    CHECK(got.finished_at == 2000);
    REQUIRE_OK(s->SetStudyState(rb.id, StudyState::kCancelled, 2001));
    CHECK(Unwrap(s->GetStudy("beta")).state == StudyState::kCancelled);
    // The other study is untouched.
    CHECK(Unwrap(s->GetStudy("alpha")).state == StudyState::kComplete);
  }
}

TEMPLATE_TEST_CASE("a taken study name is rejected", "[storage]", TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  StudyRecord first = Unwrap(s->CreateStudy(MakeStudy("dup"), 1));

  NewStudy again = MakeStudy("dup");
  again.n_trials = 99;
  auto r = s->CreateStudy(again, 2);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kAlreadyExists);
  CHECK_THAT(r.status().message(), Catch::Contains("study \"dup\" already exists"));

  auto all = Unwrap(s->ListStudies());
  REQUIRE(all.size() == 1);
  RequireSameStudy(all[0], first);
}

TEMPLATE_TEST_CASE("unknown studies and trials are kNotFound naming what was looked up",
                   "[storage]", TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  StudyRecord study = Unwrap(s->CreateStudy(MakeStudy("known"), 1));
  TrialRecord trial = Unwrap(s->CreateTrial(study.id, OneParam(1), 2));
  const int64_t kMissing = 987654;

  auto r = s->GetStudy("nope");
  REQUIRE_CODE(r, Code::kNotFound);
  CHECK_THAT(r.status().message(), Catch::Contains("\"nope\""));

  auto names_missing = [&](const common::Status& st) {
    INFO(st.ToString());
    CHECK(st.code() == Code::kNotFound);
    CHECK_THAT(st.message(), Catch::Contains(std::to_string(kMissing)));
  };
  names_missing(s->SetStudyState(kMissing, StudyState::kComplete, 3));
  names_missing(s->CreateTrial(kMissing, OneParam(1), 3).status());
  names_missing(s->CreateTrial(study.id, OneParam(1), 3, kMissing).status());
  names_missing(s->MarkRunning(kMissing, {100, 100, 5}, 3));
  names_missing(s->AddIntermediate(kMissing, 0, 1.0));
  names_missing(s->SetAttr(kMissing, "k", "1"));
  names_missing(s->AddTrialParam(kMissing, "y", {1.0, FloatDist(0, 2, false, 0)}));
  names_missing(s->FinishTrial(kMissing, Outcome(TrialState::kComplete, 1.0), 3));
  names_missing(s->GetTrials(kMissing).status());
  names_missing(s->GetTrial(kMissing, 0).status());
  names_missing(s->GetEvents(kMissing).status());
  names_missing(s->AppendEvent(kMissing, std::nullopt, "x", "", 3));
  names_missing(s->AppendEvent(study.id, kMissing, "x", "", 3));

  auto missing_number = s->GetTrial(study.id, 7);
  REQUIRE_CODE(missing_number, Code::kNotFound);
  CHECK_THAT(missing_number.status().message(), Catch::Contains("trial 7"));

  // None of the failed calls left anything behind.
  auto trials = Unwrap(s->GetTrials(study.id));
  REQUIRE(trials.size() == 1);
  RequireSameTrial(trials[0], trial);
  CHECK(Unwrap(s->GetEvents(std::nullopt)).empty());
}

TEMPLATE_TEST_CASE("trial numbers are dense and 0-based per study", "[storage]",
                   TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  int64_t a = Unwrap(s->CreateStudy(MakeStudy("a"), 1)).id;
  int64_t b = Unwrap(s->CreateStudy(MakeStudy("b"), 1)).id;

  // Interleaved creation: each study counts on its own.
  std::vector<std::pair<int64_t, int>> expected = {{a, 0}, {b, 0}, {a, 1}, {a, 2},
                                                   {b, 1}, {a, 3}, {b, 2}};
  std::set<int64_t> ids;
  for (const auto& [study_id, number] : expected) {
    TrialRecord t = Unwrap(s->CreateTrial(study_id, OneParam(number), 10 + number));
    CHECK(t.study_id == study_id);
    CHECK(t.number == number);
    CHECK(t.state == TrialState::kWaiting);
    CHECK(t.created_at == 10 + number);
    ids.insert(t.id);
  }
  CHECK(ids.size() == expected.size());

  auto ta = Unwrap(s->GetTrials(a));
  auto tb = Unwrap(s->GetTrials(b));
  REQUIRE(ta.size() == 4);
  REQUIRE(tb.size() == 3);
  for (size_t i = 0; i < ta.size(); ++i) {
    CHECK(ta[i].number == static_cast<int>(i));
    CHECK(ta[i].study_id == a);
    CHECK(ta[i].params.at("x").internal == static_cast<double>(i));
  }
  for (size_t i = 0; i < tb.size(); ++i) CHECK(tb[i].number == static_cast<int>(i));

  // Finishing trials does not free their numbers.
  REQUIRE_OK(s->FinishTrial(ta[3].id, Outcome(TrialState::kFail), 20));
  CHECK(Unwrap(s->CreateTrial(a, {}, 21)).number == 4);

  // A study without trials is not an error.
  int64_t c = Unwrap(s->CreateStudy(MakeStudy("c"), 1)).id;
  CHECK(Unwrap(s->GetTrials(c)).empty());
}

TEMPLATE_TEST_CASE("params round-trip with every distribution type", "[storage]",
                   TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  int64_t study = Unwrap(s->CreateStudy(MakeStudy("p"), 1)).id;
  ParamMap params = AllKindsOfParams();

  TrialRecord created = Unwrap(s->CreateTrial(study, params, 5));
  RequireSameParams(created.params, params);
  RequireSameParams(Unwrap(s->GetTrial(study, created.number)).params, params);

  // A second trial with other values but the same distributions, and one with no params.
  ParamMap other = params;
  other["lr"].internal = 1e-3;
  other["optimizer"].internal = 0;
  Unwrap(s->CreateTrial(study, other, 6));
  Unwrap(s->CreateTrial(study, {}, 7));
  auto trials = Unwrap(s->GetTrials(study));
  REQUIRE(trials.size() == 3);
  RequireSameParams(trials[0].params, params);
  RequireSameParams(trials[1].params, other);
  CHECK(trials[2].params.empty());
}

TEMPLATE_TEST_CASE("AddTrialParam adds the parameters a trial suggests while it runs", "[storage]",
                   TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  int64_t study = Unwrap(s->CreateStudy(MakeStudy("dbr"), 1)).id;
  // One trial with a parameter drawn up front, one with none (a define-by-run trial without a
  // [space]), and a bystander.
  TrialRecord t = Unwrap(s->CreateTrial(study, OneParam(2), 1));
  TrialRecord bare = Unwrap(s->CreateTrial(study, {}, 1));
  TrialRecord other = Unwrap(s->CreateTrial(study, OneParam(3), 1));
  REQUIRE_OK(s->MarkRunning(t.id, {10, 10, 1}, 2));

  ParamMap all = AllKindsOfParams();
  for (const auto& [name, p] : all) REQUIRE_OK(s->AddTrialParam(t.id, name, p));
  REQUIRE_OK(s->AddTrialParam(bare.id, "lr", all.at("lr")));  // a WAITING trial takes them too
  REQUIRE_OK(s->AddTrialParam(other.id, "lr", {0.01, all.at("lr").dist}));  // same name

  ParamMap want = all;
  want["x"] = OneParam(2).at("x");
  RequireSameParams(Unwrap(s->GetTrial(study, t.number)).params, want);
  RequireSameParams(Unwrap(s->GetTrial(study, bare.number)).params, {{"lr", all.at("lr")}});
  ParamMap want_other = OneParam(3);
  want_other["lr"] = {0.01, all.at("lr").dist};
  RequireSameParams(Unwrap(s->GetTrial(study, other.number)).params, want_other);

  // Every read returns them, and they stay once the trial has finished.
  auto running = Unwrap(s->GetRunningTrials());
  REQUIRE(running.size() == 1);
  RequireSameParams(running[0].params, want);
  REQUIRE_OK(s->FinishTrial(t.id, Outcome(TrialState::kPruned, 0.5), 3));
  auto since = Unwrap(s->GetTrialsSince(study, 0, {}));
  REQUIRE(since.size() == 3);
  RequireSameParams(since[0].params, want);
  RequireSameParams(Unwrap(s->GetTrials(study))[1].params, {{"lr", all.at("lr")}});
}

TEMPLATE_TEST_CASE("AddTrialParam refuses a name the trial has and a NaN value", "[storage]",
                   TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  int64_t study = Unwrap(s->CreateStudy(MakeStudy("dup"), 1)).id;
  TrialRecord t = Unwrap(s->CreateTrial(study, OneParam(2), 1));
  REQUIRE_OK(s->MarkRunning(t.id, {10, 10, 1}, 2));
  REQUIRE_OK(s->AddTrialParam(t.id, "units", {64, IntDist(16, 256, false, 16)}));
  TrialRecord before = Unwrap(s->GetTrial(study, t.number));

  std::vector<std::pair<std::string, common::Status>> refused = {
      // drawn up front by CreateTrial, same value and distribution
      {"x", s->AddTrialParam(t.id, "x", {2, FloatDist(-10, 10, false, 0)})},
      // added before, another value and distribution
      {"units", s->AddTrialParam(t.id, "units", {1, CategoricalDist({int64_t{1}, int64_t{2}})})},
  };
  for (const auto& [name, st] : refused) {
    INFO(st.ToString());
    CHECK(st.code() == Code::kAlreadyExists);
    CHECK_THAT(st.message(), Catch::Contains("\"" + name + "\""));
  }
  common::Status nan = s->AddTrialParam(t.id, "y", {std::nan(""), FloatDist(0, 1, false, 0)});
  CHECK(nan.code() == Code::kInvalidArgument);
  CHECK_THAT(nan.message(), Catch::Contains("NaN"));
  RequireSameTrial(Unwrap(s->GetTrial(study, t.number)), before);
}

TEMPLATE_TEST_CASE("intermediate values: a repeated step overwrites", "[storage]",
                   TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  int64_t study = Unwrap(s->CreateStudy(MakeStudy("i"), 1)).id;
  TrialRecord t = Unwrap(s->CreateTrial(study, OneParam(0), 1));
  TrialRecord other = Unwrap(s->CreateTrial(study, OneParam(1), 1));

  REQUIRE_OK(s->AddIntermediate(t.id, 0, 0.9));
  REQUIRE_OK(s->MarkRunning(t.id, {10, 10, 1}, 2));
  REQUIRE_OK(s->AddIntermediate(t.id, 1, 0.8));
  REQUIRE_OK(s->AddIntermediate(t.id, 2, 0.7));
  REQUIRE_OK(s->AddIntermediate(t.id, 1, 0.75));                 // overwrite
  REQUIRE_OK(s->AddIntermediate(t.id, 3, std::nan("")));         // a diverged loss
  REQUIRE_OK(s->AddIntermediate(t.id, 1000000000000LL, -kInf));  // large step, -inf
  REQUIRE_OK(s->AddIntermediate(other.id, 1, 5.0));

  auto got = Unwrap(s->GetTrial(study, t.number)).intermediate;
  REQUIRE(got.size() == 5);
  CHECK(got.at(0) == 0.9);
  CHECK(got.at(1) == 0.75);
  CHECK(got.at(2) == 0.7);
  CHECK(std::isnan(got.at(3)));
  CHECK(got.at(1000000000000LL) == -kInf);
  auto got_other = Unwrap(s->GetTrial(study, other.number)).intermediate;
  CHECK(got_other == std::map<int64_t, double>{{1, 5.0}});
}

TEMPLATE_TEST_CASE("attrs are set and overwritten per key", "[storage]", TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  int64_t study = Unwrap(s->CreateStudy(MakeStudy("a"), 1)).id;
  TrialRecord t = Unwrap(s->CreateTrial(study, OneParam(0), 1));

  REQUIRE_OK(s->SetAttr(t.id, "tokens_seen", "123"));
  REQUIRE_OK(s->SetAttr(t.id, "device", "\"cuda:0\""));
  REQUIRE_OK(s->SetAttr(t.id, "tokens_seen", "456"));
  REQUIRE_OK(s->SetAttr(t.id, "nested", R"({"a":[1,2,{"b":null}]})"));

  std::map<std::string, std::string> want = {
      {"tokens_seen", "456"}, {"device", "\"cuda:0\""}, {"nested", R"({"a":[1,2,{"b":null}]})"}};
  CHECK(Unwrap(s->GetTrial(study, 0)).attrs == want);
}

TEMPLATE_TEST_CASE("MarkRunning stores the process identity and start time", "[storage]",
                   TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  int64_t study = Unwrap(s->CreateStudy(MakeStudy("r"), 1)).id;
  TrialRecord t = Unwrap(s->CreateTrial(study, OneParam(0), 100));

  ProcessIdentity p{4242, 4240, 0x8000000000000123ULL};  // start time above 2^63
  REQUIRE_OK(s->MarkRunning(t.id, p, 101.5));
  TrialRecord got = Unwrap(s->GetTrial(study, t.number));
  CHECK(got.state == TrialState::kRunning);
  CHECK(got.process.pid == 4242);
  CHECK(got.process.pgid == 4240);
  CHECK(got.process.start_time == 0x8000000000000123ULL);
  CHECK(got.created_at == 100);
  CHECK(got.started_at == 101.5);
  CHECK(got.finished_at == 0);

  // A trial starts once: a second MarkRunning is refused and changes nothing.
  auto again = s->MarkRunning(t.id, {1, 1, 1}, 200);
  CHECK(again.code() == Code::kFailedPrecondition);
  RequireSameTrial(Unwrap(s->GetTrial(study, t.number)), got);
}

TEMPLATE_TEST_CASE("FinishTrial records each outcome", "[storage]", TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  int64_t study = Unwrap(s->CreateStudy(MakeStudy("f"), 1)).id;
  auto running = [&](double at) {
    TrialRecord t = Unwrap(s->CreateTrial(study, OneParam(at), at));
    REQUIRE_OK(s->MarkRunning(t.id, {static_cast<pid_t>(at), static_cast<pid_t>(at), 9}, at + 1));
    return t;
  };

  SECTION("COMPLETE with its objective") {
    TrialRecord t = running(10);
    REQUIRE_OK(s->FinishTrial(t.id, Outcome(TrialState::kComplete, 0.4213), 20));
    TrialRecord got = Unwrap(s->GetTrial(study, t.number));
    CHECK(got.state == TrialState::kComplete);
    REQUIRE(got.value.has_value());
    CHECK(*got.value == 0.4213);
    CHECK(got.started_at == 11);
    CHECK(got.finished_at == 20);
    CHECK(got.DurationSeconds() == 9);
    CHECK(got.fail.reason.empty());
  }
  SECTION("PRUNED with its last intermediate value") {
    TrialRecord t = running(10);
    REQUIRE_OK(s->AddIntermediate(t.id, 4, 1.5));
    REQUIRE_OK(s->FinishTrial(t.id, Outcome(TrialState::kPruned, 1.5), 20));
    TrialRecord got = Unwrap(s->GetTrial(study, t.number));
    CHECK(got.state == TrialState::kPruned);
    CHECK(got.value == std::optional<double>(1.5));
    CHECK(got.intermediate.at(4) == 1.5);
  }
  SECTION("FAIL by signal keeps every fail field and the stderr tail byte for byte") {
    TrialRecord t = running(10);
    TrialOutcome o = Outcome(TrialState::kFail);
    o.fail.reason = "signal";
    o.fail.signal = 11;
    o.fail.core_dumped = true;
    o.fail.detail = "killed by SIGSEGV (core dumped)";
    // Multi-line, a NUL byte and bytes that are not UTF-8: a crashing worker writes anything.
    const char kTail[] = "Traceback:\n  line 1\n\0after nul \xff\xfe end\n";
    o.fail.stderr_tail = std::string(kTail, sizeof kTail - 1);
    REQUIRE_OK(s->FinishTrial(t.id, o, 20));
    TrialRecord got = Unwrap(s->GetTrial(study, t.number));
    CHECK(got.state == TrialState::kFail);
    CHECK_FALSE(got.value.has_value());
    CHECK(got.fail.reason == "signal");
    CHECK(got.fail.signal == 11);
    CHECK(got.fail.core_dumped);
    CHECK(got.fail.detail == "killed by SIGSEGV (core dumped)");
    CHECK(got.fail.stderr_tail.size() == sizeof kTail - 1);
    CHECK(got.fail.stderr_tail == o.fail.stderr_tail);
  }
  SECTION("FAIL by exit code") {
    TrialRecord t = running(10);
    TrialOutcome o = Outcome(TrialState::kFail);
    o.fail.reason = "exit";
    o.fail.exit_code = 3;
    o.fail.detail = "exited with status 3";
    o.fail.stderr_tail = "RuntimeError: CUDA out of memory\n";
    REQUIRE_OK(s->FinishTrial(t.id, o, 20));
    TrialRecord got = Unwrap(s->GetTrial(study, t.number));
    CHECK(got.fail.reason == "exit");
    CHECK(got.fail.exit_code == 3);
    CHECK(got.fail.signal == 0);
    CHECK_FALSE(got.fail.core_dumped);
    CHECK(got.fail.stderr_tail == "RuntimeError: CUDA out of memory\n");
  }
  SECTION("a WAITING trial can fail without ever running (spawn failure)") {
    TrialRecord t = Unwrap(s->CreateTrial(study, OneParam(0), 10));
    TrialOutcome o = Outcome(TrialState::kFail);
    o.fail.reason = "spawn";
    o.fail.detail = "execve: No such file or directory";
    REQUIRE_OK(s->FinishTrial(t.id, o, 12));
    TrialRecord got = Unwrap(s->GetTrial(study, t.number));
    CHECK(got.state == TrialState::kFail);
    CHECK(got.fail.reason == "spawn");
    CHECK(got.started_at == 0);
    CHECK(got.finished_at == 12);
    CHECK(got.DurationSeconds() == 0);
  }
  SECTION("an outcome that is not a finished state is kInvalidArgument and changes nothing") {
    TrialRecord t = running(10);
    TrialRecord before = Unwrap(s->GetTrial(study, t.number));
    for (TrialState bad : {TrialState::kWaiting, TrialState::kRunning}) {
      auto st = s->FinishTrial(t.id, Outcome(bad, 1.0), 20);
      INFO(st.ToString());
      CHECK(st.code() == Code::kInvalidArgument);
    }
    RequireSameTrial(Unwrap(s->GetTrial(study, t.number)), before);
  }
}

TEMPLATE_TEST_CASE("trial values round-trip including infinities and NaN", "[storage]",
                   TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  int64_t study = Unwrap(s->CreateStudy(MakeStudy("v"), 1)).id;
  const std::vector<std::optional<double>> values = {kInf, -kInf, std::nan(""), std::nullopt, 0.0,
                                                     -0.0, 1e308, -5e-324,      0.1};
  for (size_t i = 0; i < values.size(); ++i) {
    TrialRecord t = Unwrap(s->CreateTrial(study, OneParam(0), 1));
    REQUIRE_OK(s->FinishTrial(t.id, Outcome(TrialState::kComplete, values[i]), 2));
  }
  auto trials = Unwrap(s->GetTrials(study));
  REQUIRE(trials.size() == values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    INFO("value #" << i);
    CHECK(SameOptDouble(trials[i].value, values[i]));
  }
  CHECK(*trials[0].value == kInf);
  CHECK(*trials[1].value == -kInf);
  CHECK(std::isnan(*trials[2].value));
  CHECK_FALSE(trials[3].value.has_value());
}

// Resources as a trial on a GPU slot measured them, with exact binary fractions and the
// largest byte count a uint64 holds.
model::TrialResources MeasuredResources() {
  model::TrialResources r;
  r.peak_memory_bytes = 212'000'768;
  r.memory_source = "cgroup1 memory.max_usage_in_bytes";
  r.peak_gpu_memory_bytes = ~uint64_t{0} - 1;
  r.cpu_time_s = 1.0 / 3.0;
  r.cpu_source = "cgroup2 cpu.stat";
  r.wall_s = 12.125;
  return r;
}

TEMPLATE_TEST_CASE("what a trial consumed round-trips, in every state; unmeasured stays unset",
                   "[storage][resources]", TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  const int64_t study = Unwrap(s->CreateStudy(MakeStudy("r"), 1)).id;
  auto finish = [&](TrialOutcome o) {
    TrialRecord t = Unwrap(s->CreateTrial(study, OneParam(0), 1));
    REQUIRE_OK(s->FinishTrial(t.id, o, 2));
  };
  TrialOutcome complete = Outcome(TrialState::kComplete, 1.0);
  complete.resources = MeasuredResources();
  finish(complete);
  TrialOutcome failed = Outcome(TrialState::kFail);
  failed.resources = model::TrialResources{};
  failed.resources->peak_memory_bytes = 0;  // measured as nothing: not the same as unmeasured
  failed.resources->memory_source = "getrusage ru_maxrss";
  finish(failed);
  finish(Outcome(TrialState::kPruned, 2.0));      // no resources (e.g. it never ran)
  Unwrap(s->CreateTrial(study, OneParam(0), 1));  // still WAITING

  std::vector<TrialRecord> trials = Unwrap(s->GetTrials(study));
  REQUIRE(trials.size() == 4);
  REQUIRE(trials[0].resources.has_value());
  CHECK(*trials[0].resources == MeasuredResources());
  REQUIRE(trials[1].resources.has_value());
  CHECK(trials[1].resources->peak_memory_bytes == uint64_t{0});
  CHECK_FALSE(trials[1].resources->cpu_time_s.has_value());
  CHECK_FALSE(trials[1].resources->peak_gpu_memory_bytes.has_value());
  CHECK_FALSE(trials[2].resources.has_value());
  CHECK_FALSE(trials[3].resources.has_value());
  // Every read gives the same.
  CHECK(Unwrap(s->GetTrial(study, 0)).resources == MeasuredResources());
  CHECK(Unwrap(s->GetTrialPage(study, 0, 10))[0].resources == MeasuredResources());
  CHECK(Unwrap(s->GetTrialsSince(study, 0, {}))[0].resources == MeasuredResources());
  std::optional<TrialRecord> best = Unwrap(s->GetBestTrial(study, config::Direction::kMaximize));
  REQUIRE(best.has_value());
  CHECK(best->resources == MeasuredResources());
}

TEMPLATE_TEST_CASE("directions, objective values and constraints round-trip",
                   "[storage][objectives]", TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  using config::Direction;
  NewStudy mo = MakeStudy("mo");
  mo.direction = Direction::kMinimize;
  mo.directions = {Direction::kMinimize, Direction::kMaximize, Direction::kMinimize};
  StudyRecord created = Unwrap(s->CreateStudy(mo, 1));
  CHECK(created.directions == mo.directions);
  CHECK(Unwrap(s->GetStudy("mo")).directions == mo.directions);
  CHECK(Unwrap(s->GetStudy("mo")).direction == Direction::kMinimize);
  // A single-objective study: one direction, whether or not `directions` was given.
  NewStudy single = MakeStudy("single");
  CHECK(Unwrap(s->CreateStudy(single, 1)).directions ==
        std::vector<Direction>{Direction::kMaximize});
  NewStudy single2 = MakeStudy("single2");
  single2.directions = {Direction::kMaximize};
  Unwrap(s->CreateStudy(single2, 1));
  std::vector<StudyRecord> all = Unwrap(s->ListStudies());
  REQUIRE(all.size() == 3);
  CHECK(all[0].directions == mo.directions);
  CHECK(all[1].directions == std::vector<Direction>{Direction::kMaximize});
  CHECK(all[2].directions == std::vector<Direction>{Direction::kMaximize});
  // directions[0] must be the direction.
  NewStudy bad = MakeStudy("bad");
  bad.directions = {Direction::kMinimize, Direction::kMinimize};
  REQUIRE_CODE(s->CreateStudy(bad, 1), Code::kInvalidArgument);

  const int64_t study = created.id;
  auto finish = [&](TrialOutcome o) {
    TrialRecord t = Unwrap(s->CreateTrial(study, OneParam(0), 1));
    REQUIRE_OK(s->FinishTrial(t.id, o, 2));
  };
  TrialOutcome complete = Outcome(TrialState::kComplete);
  complete.values = {0.31, 812.0, -0.0};
  complete.constraints = {-1.5, 0.25};
  finish(complete);
  TrialOutcome feasible = Outcome(TrialState::kComplete);
  feasible.values = {5e-324, -1e308, 0.1};
  feasible.constraints = {0.0, -2.0};
  finish(feasible);
  TrialOutcome pruned = Outcome(TrialState::kPruned);
  pruned.constraints = {3.0};
  finish(pruned);
  finish(Outcome(TrialState::kFail));

  std::vector<TrialRecord> trials = Unwrap(s->GetTrials(study));
  REQUIRE(trials.size() == 4);
  CHECK_FALSE(trials[0].value.has_value());
  CHECK(trials[0].values == complete.values);
  CHECK(std::signbit(trials[0].values[2]));
  CHECK(trials[0].constraints == complete.constraints);
  CHECK_FALSE(trials[0].Feasible());
  CHECK(trials[1].values == feasible.values);
  CHECK(trials[1].constraints == feasible.constraints);
  CHECK(trials[1].Feasible());
  CHECK(trials[2].values.empty());
  CHECK(trials[2].constraints == std::vector<double>{3.0});
  CHECK(trials[3].values.empty());
  CHECK(trials[3].constraints.empty());
  CHECK(trials[3].Feasible());
  // Every read gives the same.
  CHECK(Unwrap(s->GetTrial(study, 0)).values == complete.values);
  CHECK(Unwrap(s->GetTrial(study, 1)).constraints == feasible.constraints);
  CHECK(Unwrap(s->GetTrialPage(study, 0, 10))[0].constraints == complete.constraints);
  CHECK(Unwrap(s->GetTrialsSince(study, 1, {}))[0].values == feasible.values);

  // A single-objective trial: values are {value}, constraints as given.
  const int64_t one = Unwrap(s->GetStudy("single")).id;
  TrialRecord t = Unwrap(s->CreateTrial(one, OneParam(0), 1));
  TrialOutcome o = Outcome(TrialState::kComplete, 2.5);
  o.values = {2.5};
  o.constraints = {0.5};
  REQUIRE_OK(s->FinishTrial(t.id, o, 2));
  TrialRecord u = Unwrap(s->CreateTrial(one, OneParam(0), 1));
  REQUIRE_OK(s->FinishTrial(u.id, Outcome(TrialState::kComplete, -1.0), 2));  // values not given
  TrialRecord v = Unwrap(s->CreateTrial(one, OneParam(0), 1));
  REQUIRE_OK(s->FinishTrial(v.id, Outcome(TrialState::kPruned, 4.0), 2));
  std::vector<TrialRecord> ones = Unwrap(s->GetTrials(one));
  REQUIRE(ones.size() == 3);
  CHECK(ones[0].value == 2.5);
  CHECK(ones[0].values == std::vector<double>{2.5});
  CHECK(ones[0].constraints == std::vector<double>{0.5});
  CHECK(ones[1].values == std::vector<double>{-1.0});
  CHECK(ones[2].value == 4.0);
  CHECK(ones[2].values.empty());  // a pruned trial's value is not an objective value
  // The best trial of a single-objective study is unchanged by all this.
  std::optional<TrialRecord> best = Unwrap(s->GetBestTrial(one, Direction::kMaximize));
  REQUIRE(best.has_value());
  CHECK(best->number == 0);
  CHECK(best->values == std::vector<double>{2.5});
}

TEMPLATE_TEST_CASE("finished trials are immutable", "[storage]", TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  int64_t study = Unwrap(s->CreateStudy(MakeStudy("imm"), 1)).id;

  for (TrialState final_state : {TrialState::kComplete, TrialState::kPruned, TrialState::kFail}) {
    INFO("finished as " << TrialStateName(final_state));
    TrialRecord t = Unwrap(s->CreateTrial(study, OneParam(2), 1));
    REQUIRE_OK(s->MarkRunning(t.id, {50, 50, 7}, 2));
    REQUIRE_OK(s->AddIntermediate(t.id, 0, 3.0));
    REQUIRE_OK(s->SetAttr(t.id, "k", "\"v\""));
    TrialOutcome o = Outcome(final_state, 3.0);
    o.fail.reason = final_state == TrialState::kFail ? "timeout" : "";
    REQUIRE_OK(s->FinishTrial(t.id, o, 3));
    TrialRecord before = Unwrap(s->GetTrial(study, t.number));

    std::vector<common::Status> attempts = {
        s->MarkRunning(t.id, {60, 60, 8}, 4),
        s->FinishTrial(t.id, Outcome(TrialState::kComplete, 9.0), 4),
        s->FinishTrial(t.id, Outcome(TrialState::kFail), 4),
        s->AddIntermediate(t.id, 0, 9.0),  // existing step
        s->AddIntermediate(t.id, 1, 9.0),  // new step
        s->SetAttr(t.id, "k", "\"changed\""),
        s->SetAttr(t.id, "new", "1"),
        s->AddTrialParam(t.id, "x", {3.0, FloatDist(-10, 10, false, 0)}),  // existing name
        s->AddTrialParam(t.id, "y", {1.0, FloatDist(0, 2, false, 0)}),     // new name
    };
    for (const auto& st : attempts) {
      INFO(st.ToString());
      CHECK(st.code() == Code::kFailedPrecondition);
      CHECK_THAT(st.message(), Catch::Contains(TrialStateName(final_state)));
    }
    RequireSameTrial(Unwrap(s->GetTrial(study, t.number)), before);
  }
}

TEMPLATE_TEST_CASE("GetRunningTrials returns the running trials of every study", "[storage]",
                   TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  int64_t a = Unwrap(s->CreateStudy(MakeStudy("a"), 1)).id;
  int64_t b = Unwrap(s->CreateStudy(MakeStudy("b"), 1)).id;
  CHECK(Unwrap(s->GetRunningTrials()).empty());

  TrialRecord a0 = Unwrap(s->CreateTrial(a, AllKindsOfParams(), 1));  // running
  TrialRecord a1 = Unwrap(s->CreateTrial(a, OneParam(1), 1));         // waiting
  TrialRecord a2 = Unwrap(s->CreateTrial(a, OneParam(2), 1));         // finished
  TrialRecord b0 = Unwrap(s->CreateTrial(b, OneParam(3), 1));         // running
  REQUIRE_OK(s->MarkRunning(a0.id, {100, 100, 1000}, 2));
  REQUIRE_OK(s->MarkRunning(a2.id, {101, 101, 1001}, 2));
  REQUIRE_OK(s->FinishTrial(a2.id, Outcome(TrialState::kComplete, 1), 3));
  REQUIRE_OK(s->MarkRunning(b0.id, {102, 102, 1002}, 2));
  REQUIRE_OK(s->AddIntermediate(b0.id, 0, 0.5));

  auto running = Unwrap(s->GetRunningTrials());
  REQUIRE(running.size() == 2);
  std::map<int64_t, TrialRecord> by_id;
  for (auto& t : running) by_id[t.id] = t;
  REQUIRE(by_id.count(a0.id) == 1);
  REQUIRE(by_id.count(b0.id) == 1);
  CHECK(by_id[a0.id].process.start_time == 1000);
  CHECK(by_id[b0.id].process.pid == 102);
  RequireSameParams(by_id[a0.id].params, AllKindsOfParams());
  CHECK(by_id[b0.id].intermediate.at(0) == 0.5);
  CHECK(by_id.count(a1.id) == 0);
}

TEMPLATE_TEST_CASE("retries link to the trial they retry", "[storage]", TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  int64_t a = Unwrap(s->CreateStudy(MakeStudy("a"), 1)).id;
  int64_t b = Unwrap(s->CreateStudy(MakeStudy("b"), 1)).id;
  TrialRecord lost = Unwrap(s->CreateTrial(a, OneParam(1), 1));
  TrialOutcome o = Outcome(TrialState::kFail);
  o.fail.reason = "lost";
  REQUIRE_OK(s->FinishTrial(lost.id, o, 2));

  TrialRecord retry = Unwrap(s->CreateTrial(a, lost.params, 3, lost.id));
  CHECK(retry.retry_of == std::optional<int64_t>(lost.id));
  CHECK(retry.number == 1);
  CHECK(Unwrap(s->GetTrial(a, 1)).retry_of == std::optional<int64_t>(lost.id));
  CHECK_FALSE(Unwrap(s->GetTrial(a, 0)).retry_of.has_value());
  // The retried trial's number, for users (trialctl trials shows numbers, not ids).
  CHECK(retry.retry_of_number == std::optional<int>(0));
  CHECK(Unwrap(s->GetTrial(a, 1)).retry_of_number == std::optional<int>(0));
  CHECK_FALSE(Unwrap(s->GetTrial(a, 0)).retry_of_number.has_value());

  // A retry belongs to the study of the trial it retries.
  auto cross = s->CreateTrial(b, lost.params, 4, lost.id);
  REQUIRE_CODE(cross, Code::kInvalidArgument);
  CHECK(Unwrap(s->GetTrials(b)).empty());
}

TEMPLATE_TEST_CASE("events are appended and listed per study", "[storage]",
                   TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  int64_t a = Unwrap(s->CreateStudy(MakeStudy("a"), 1)).id;
  int64_t b = Unwrap(s->CreateStudy(MakeStudy("b"), 1)).id;
  int64_t ta = Unwrap(s->CreateTrial(a, {}, 1)).id;
  int64_t tb = Unwrap(s->CreateTrial(b, {}, 1)).id;

  REQUIRE_OK(s->AppendEvent(std::nullopt, std::nullopt, "daemon_started", "pid 1", 10));
  REQUIRE_OK(s->AppendEvent(a, std::nullopt, "study_created", "", 11));
  REQUIRE_OK(s->AppendEvent(a, ta, "trial_started", "pid 77", 12));
  REQUIRE_OK(s->AppendEvent(std::nullopt, tb, "trial_finished", "COMPLETE 0.5", 13));
  REQUIRE_OK(s->AppendEvent(b, std::nullopt, "study_cancelled", "by user\nline 2", 14));

  auto all = Unwrap(s->GetEvents(std::nullopt));
  REQUIRE(all.size() == 5);
  for (size_t i = 1; i < all.size(); ++i) CHECK(all[i - 1].id < all[i].id);
  CHECK(all[0].kind == "daemon_started");
  CHECK(all[0].detail == "pid 1");
  CHECK(all[0].at == 10);
  CHECK_FALSE(all[0].study_id.has_value());
  CHECK_FALSE(all[0].trial_id.has_value());
  CHECK(all[2].study_id == std::optional<int64_t>(a));
  CHECK(all[2].trial_id == std::optional<int64_t>(ta));
  CHECK(all[4].detail == "by user\nline 2");

  auto of_a = Unwrap(s->GetEvents(a));
  REQUIRE(of_a.size() == 2);
  CHECK(of_a[0].kind == "study_created");
  CHECK(of_a[1].kind == "trial_started");
  // An event recorded against one of b's trials belongs to b.
  auto of_b = Unwrap(s->GetEvents(b));
  REQUIRE(of_b.size() == 2);
  CHECK(of_b[0].kind == "trial_finished");
  CHECK(of_b[1].kind == "study_cancelled");
}

TEMPLATE_TEST_CASE("a trial's events are read by its id alone", "[storage]",
                   TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  int64_t a = Unwrap(s->CreateStudy(MakeStudy("a"), 1)).id;
  int64_t t0 = Unwrap(s->CreateTrial(a, {}, 1)).id;
  int64_t t1 = Unwrap(s->CreateTrial(a, {}, 1)).id;
  REQUIRE_OK(s->AppendEvent(a, std::nullopt, "study_created", "", 10));
  REQUIRE_OK(s->AppendEvent(a, t0, "trial_started", "pid 7", 11));
  REQUIRE_OK(s->AppendEvent(a, t1, "trial_started", "pid 8", 12));
  REQUIRE_OK(s->AppendEvent(std::nullopt, t0, "trial_finished", "COMPLETE", 13));

  auto of_t0 = Unwrap(s->GetTrialEvents(t0));
  REQUIRE(of_t0.size() == 2);
  CHECK(of_t0[0].kind == "trial_started");
  CHECK(of_t0[0].detail == "pid 7");
  CHECK(of_t0[0].at == 11);
  CHECK(of_t0[0].study_id == std::optional<int64_t>(a));
  CHECK(of_t0[1].kind == "trial_finished");
  CHECK_FALSE(of_t0[1].study_id.has_value());
  CHECK(of_t0[0].id < of_t0[1].id);
  for (const model::EventRecord& e : of_t0) CHECK(e.trial_id == std::optional<int64_t>(t0));
  auto of_t1 = Unwrap(s->GetTrialEvents(t1));
  REQUIRE(of_t1.size() == 1);
  CHECK(of_t1[0].detail == "pid 8");
  // A trial without events has none; an unknown id is NotFound, naming it.
  int64_t t2 = Unwrap(s->CreateTrial(a, {}, 1)).id;
  CHECK(Unwrap(s->GetTrialEvents(t2)).empty());
  auto missing = s->GetTrialEvents(t2 + 1000);
  REQUIRE_CODE(missing, Code::kNotFound);
  CHECK_THAT(missing.status().message(), Catch::Contains(std::to_string(t2 + 1000)));
}

TEMPLATE_TEST_CASE("SetStudyControl stores paused, n_trials and parallelism together",
                   "[storage][control]", TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  StudyRecord a = Unwrap(s->CreateStudy(MakeStudy("a"), 1));
  StudyRecord b = Unwrap(s->CreateStudy(MakeStudy("b"), 1));
  CHECK_FALSE(a.paused);
  CHECK(a.parallelism == 0);
  CHECK_FALSE(Unwrap(s->GetStudy("a")).paused);
  CHECK(Unwrap(s->GetStudy("a")).parallelism == 0);

  REQUIRE_OK(s->SetStudyControl(a.id, true, 40, 3));
  StudyRecord got = Unwrap(s->GetStudy("a"));
  CHECK(got.paused);
  CHECK(got.n_trials == 40);
  CHECK(got.parallelism == 3);
  CHECK(got.state == StudyState::kRunning);  // the state is not touched
  StudyRecord other = Unwrap(s->GetStudy("b"));
  CHECK_FALSE(other.paused);
  CHECK(other.n_trials == b.n_trials);
  std::vector<StudyRecord> all = Unwrap(s->ListStudies());
  REQUIRE(all.size() == 2);
  CHECK(all[0].paused);
  CHECK(all[0].parallelism == 3);

  REQUIRE_OK(s->SetStudyControl(a.id, false, 41, 0));
  got = Unwrap(s->GetStudy("a"));
  CHECK_FALSE(got.paused);
  CHECK(got.n_trials == 41);
  CHECK(got.parallelism == 0);

  CHECK(s->SetStudyControl(a.id + b.id + 100, true, 5, 1).code() == Code::kNotFound);
  common::Status zero = s->SetStudyControl(a.id, true, 0, 1);
  CHECK(zero.code() == Code::kInvalidArgument);
  CHECK_THAT(zero.message(), Catch::Contains("n_trials 0"));
  CHECK(s->SetStudyControl(a.id, true, 5, -1).code() == Code::kInvalidArgument);
  CHECK(Unwrap(s->GetStudy("a")).n_trials == 41);

  // Inside a batch, LockStudy reads the fields too.
  REQUIRE_OK(s->SetStudyControl(a.id, true, 41, 2));
  REQUIRE_OK(s->BeginBatch());
  StudyRecord locked = Unwrap(s->LockStudy(a.id));
  REQUIRE_OK(s->CommitBatch());
  CHECK(locked.paused);
  CHECK(locked.parallelism == 2);
}

TEMPLATE_TEST_CASE("DeleteStudy removes a study with its trials and everything stored with them",
                   "[storage][control]", TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  int64_t a = Unwrap(s->CreateStudy(MakeStudy("a"), 1)).id;
  int64_t b = Unwrap(s->CreateStudy(MakeStudy("b"), 1)).id;
  TrialRecord first = Unwrap(s->CreateTrial(a, OneParam(1), 2));
  REQUIRE_OK(s->AddIntermediate(first.id, 1, 0.5));
  REQUIRE_OK(s->SetAttr(first.id, "k", "1"));
  REQUIRE_OK(s->FinishTrial(first.id, Outcome(TrialState::kFail), 3));
  TrialRecord retry = Unwrap(s->CreateTrial(a, OneParam(1), 4, first.id));
  REQUIRE_OK(s->AddTrialParam(retry.id, "extra", OneParam(2).begin()->second));
  TrialRecord kept = Unwrap(s->CreateTrial(b, OneParam(3), 5));
  REQUIRE_OK(s->AddIntermediate(kept.id, 1, 0.25));
  REQUIRE_OK(s->AppendEvent(a, std::nullopt, "study_submitted", "", 6));
  REQUIRE_OK(s->AppendEvent(std::nullopt, first.id, "trial_lost", "", 7));
  REQUIRE_OK(s->AppendEvent(b, std::nullopt, "study_submitted", "", 8));
  REQUIRE_OK(s->AppendEvent(std::nullopt, std::nullopt, "daemon_started", "", 9));

  REQUIRE_OK(s->DeleteStudy(a));
  REQUIRE_CODE(s->GetStudy("a"), Code::kNotFound);
  REQUIRE_CODE(s->GetTrials(a), Code::kNotFound);
  CHECK(s->DeleteStudy(a).code() == Code::kNotFound);
  std::vector<StudyRecord> all = Unwrap(s->ListStudies());
  REQUIRE(all.size() == 1);
  CHECK(all[0].name == "b");
  // The other study keeps its trial, values and events; the daemon's own events stay.
  TrialRecord still = Unwrap(s->GetTrial(b, 0));
  CHECK(still.intermediate.size() == 1);
  CHECK(Unwrap(s->GetEvents(b)).size() == 1);
  std::vector<model::EventRecord> events = Unwrap(s->GetEvents(std::nullopt));
  REQUIRE(events.size() == 2);
  CHECK(events[0].kind == "study_submitted");
  CHECK(events[0].study_id == std::optional<int64_t>(b));
  CHECK(events[1].kind == "daemon_started");
  // Its name is free again, and the new study starts at trial 0.
  int64_t again = Unwrap(s->CreateStudy(MakeStudy("a"), 10)).id;
  CHECK(Unwrap(s->CreateTrial(again, OneParam(1), 11)).number == 0);
  CHECK(Unwrap(s->GetTrial(again, 0)).intermediate.empty());
  CHECK(Unwrap(s->GetTrial(again, 0)).attrs.empty());
}

TEMPLATE_TEST_CASE("a batch commits its calls together and survives a failed call", "[storage]",
                   TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  StudyRecord taken = Unwrap(s->CreateStudy(MakeStudy("taken"), 1));

  REQUIRE_OK(s->BeginBatch());
  StudyRecord study = Unwrap(s->CreateStudy(MakeStudy("batched"), 2));
  TrialRecord t0 = Unwrap(s->CreateTrial(study.id, OneParam(0), 3));
  // Failed calls inside the batch: a constraint the database enforces, one this class checks,
  // and a statement on a missing row. None undoes what came before.
  REQUIRE_CODE(s->CreateStudy(MakeStudy("taken"), 4), Code::kAlreadyExists);
  REQUIRE_CODE(s->CreateTrial(987654, OneParam(1), 4), Code::kNotFound);
  CHECK(s->MarkRunning(987654, {1, 1, 1}, 4).code() == Code::kNotFound);
  REQUIRE_OK(s->BeginBatch());  // nested: only the outermost commit counts
  TrialRecord t1 = Unwrap(s->CreateTrial(study.id, OneParam(1), 5));
  REQUIRE_OK(s->CommitBatch());
  REQUIRE_OK(s->MarkRunning(t0.id, {7, 7, 7}, 6));
  REQUIRE_OK(s->AppendEvent(study.id, t0.id, "trial_started", "", 6));
  REQUIRE_OK(s->AddTrialParam(t0.id, "y", {0.5, FloatDist(0, 1, false, 0)}));
  CHECK(s->AddTrialParam(t0.id, "y", {0.25, FloatDist(0, 1, false, 0)}).code() ==
        Code::kAlreadyExists);
  REQUIRE_OK(s->CommitBatch());

  CHECK(t1.number == 1);
  auto trials = Unwrap(s->GetTrials(study.id));
  REQUIRE(trials.size() == 2);
  CHECK(trials[0].state == TrialState::kRunning);
  CHECK(trials[1].state == TrialState::kWaiting);
  CHECK(trials[0].params.at("y").internal == 0.5);
  CHECK(Unwrap(s->GetEvents(study.id)).size() == 1);
  RequireSameStudy(Unwrap(s->GetStudy("taken")), taken);
  CHECK(Unwrap(s->ListStudies()).size() == 2);

  // A commit without a batch is a caller's bug, reported as such.
  CHECK(s->CommitBatch().code() == Code::kFailedPrecondition);
}

TEMPLATE_TEST_CASE("LockStudy needs a batch and returns the study as stored", "[storage]",
                   TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  StudyRecord study = Unwrap(s->CreateStudy(MakeStudy("locked"), 1));

  auto outside = s->LockStudy(study.id);
  REQUIRE_CODE(outside, Code::kFailedPrecondition);
  CHECK_THAT(outside.status().message(), Catch::Contains("outside a batch"));

  REQUIRE_OK(s->BeginBatch());
  RequireSameStudy(Unwrap(s->LockStudy(study.id)), study);
  // Locking again in the same batch is harmless and sees the batch's own changes.
  REQUIRE_OK(s->SetStudyState(study.id, StudyState::kComplete, 2));
  StudyRecord again = Unwrap(s->LockStudy(study.id));
  CHECK(again.state == StudyState::kComplete);
  CHECK(again.finished_at == 2);
  auto missing = s->LockStudy(987654);
  REQUIRE_CODE(missing, Code::kNotFound);
  CHECK_THAT(missing.status().message(), Catch::Contains("987654"));
  // The batch goes on after the failed lock.
  TrialRecord t = Unwrap(s->CreateTrial(study.id, OneParam(1), 3));
  REQUIRE_OK(s->CommitBatch());
  CHECK(Unwrap(s->GetTrial(study.id, t.number)).id == t.id);
  CHECK(Unwrap(s->GetStudy("locked")).state == StudyState::kComplete);
}

TEMPLATE_TEST_CASE("ClaimTrial sets the node of a WAITING trial and refuses any other", "[storage]",
                   TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  CHECK(s->node() == kNode);
  int64_t study = Unwrap(s->CreateStudy(MakeStudy("claims"), 1)).id;
  TrialRecord t = Unwrap(s->CreateTrial(study, OneParam(0), 1));
  CHECK(t.node.empty());
  CHECK(Unwrap(s->GetTrial(study, t.number)).node.empty());

  REQUIRE_OK(s->ClaimTrial(t.id));
  TrialRecord claimed = Unwrap(s->GetTrial(study, t.number));
  CHECK(claimed.node == kNode);
  CHECK(claimed.state == TrialState::kWaiting);
  REQUIRE_OK(s->ClaimTrial(t.id));  // still WAITING: claiming again is allowed

  REQUIRE_OK(s->MarkRunning(t.id, {10, 10, 1}, 2));
  auto running = s->ClaimTrial(t.id);
  CHECK(running.code() == Code::kFailedPrecondition);
  CHECK_THAT(running.message(), Catch::Contains("RUNNING"));
  REQUIRE_OK(s->FinishTrial(t.id, Outcome(TrialState::kComplete, 1), 3));
  auto finished = s->ClaimTrial(t.id);
  CHECK(finished.code() == Code::kFailedPrecondition);
  CHECK_THAT(finished.message(), Catch::Contains("COMPLETE"));
  auto missing = s->ClaimTrial(987654);
  CHECK(missing.code() == Code::kNotFound);
  CHECK_THAT(missing.message(), Catch::Contains("987654"));
  CHECK(Unwrap(s->GetTrial(study, t.number)).node == kNode);
}

// Backends a second daemon can open (OpenAs): an in-memory database has one connection.
TEMPLATE_TEST_CASE("a claimed trial is started by the node that claimed it only", "[storage]",
                   SqliteFileBackend, PostgresBackend) {
  TestType backend;
  auto a = backend.Open();
  auto b = backend.OpenAs("node-b");
  int64_t study = Unwrap(a->CreateStudy(MakeStudy("claimed"), 1)).id;
  TrialRecord t = Unwrap(a->CreateTrial(study, OneParam(0), 1));
  REQUIRE_OK(a->ClaimTrial(t.id));

  auto refused = b->MarkRunning(t.id, {20, 20, 2}, 2);
  CHECK(refused.code() == Code::kFailedPrecondition);
  CHECK_THAT(refused.message(), Catch::Contains("claimed by node \"node-a\""));
  CHECK_THAT(refused.message(), Catch::Contains("node-b"));
  TrialRecord unchanged = Unwrap(a->GetTrial(study, t.number));
  CHECK(unchanged.state == TrialState::kWaiting);
  CHECK(unchanged.node == kNode);

  // The claim taken over (the caller judged node-a dead), node-b starts the trial, and node-a
  // can no longer start it.
  REQUIRE_OK(b->ClaimTrial(t.id));
  CHECK(a->MarkRunning(t.id, {10, 10, 1}, 3).code() == Code::kFailedPrecondition);
  REQUIRE_OK(b->MarkRunning(t.id, {20, 20, 2}, 3));
  TrialRecord running = Unwrap(a->GetTrial(study, t.number));
  CHECK(running.state == TrialState::kRunning);
  CHECK(running.node == "node-b");
  CHECK(running.process.pid == 20);
  CHECK(a->MarkRunning(t.id, {10, 10, 1}, 4).code() == Code::kFailedPrecondition);

  // An unclaimed trial is started by whichever node gets there.
  TrialRecord free = Unwrap(a->CreateTrial(study, OneParam(1), 5));
  REQUIRE_OK(b->MarkRunning(free.id, {30, 30, 3}, 6));
  CHECK(Unwrap(a->GetTrial(study, free.number)).node == "node-b");
}

TEMPLATE_TEST_CASE("MarkRunning records the storage's node", "[storage]", TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  int64_t study = Unwrap(s->CreateStudy(MakeStudy("nodes"), 1)).id;
  TrialRecord unclaimed = Unwrap(s->CreateTrial(study, OneParam(0), 1));
  REQUIRE_OK(s->MarkRunning(unclaimed.id, {10, 10, 1}, 2));
  TrialRecord got = Unwrap(s->GetTrial(study, unclaimed.number));
  CHECK(got.node == kNode);
  // And keeps it through the finish, for `trials --json`.
  REQUIRE_OK(s->FinishTrial(unclaimed.id, Outcome(TrialState::kComplete, 1), 3));
  CHECK(Unwrap(s->GetTrials(study))[0].node == kNode);
  CHECK(Unwrap(s->GetRunningTrials()).empty());
}

// A study `name` with `n` trials of every parameter kind, trial 3 RUNNING with an intermediate
// value and an attr, beside a study "other" with 3 trials; returns both ids and the first
// study's trials as GetTrials reads them.
struct NumberedStudy {
  int64_t study = 0, other = 0;
  std::vector<TrialRecord> trials;
};
NumberedStudy NumberedTrials(Storage& s, const std::string& name, int n) {
  int64_t study = Unwrap(s.CreateStudy(MakeStudy(name), 1)).id;
  int64_t other = Unwrap(s.CreateStudy(MakeStudy("other"), 1)).id;
  for (int i = 0; i < n; ++i) Unwrap(s.CreateTrial(study, AllKindsOfParams(), i));
  for (int i = 0; i < 3; ++i) Unwrap(s.CreateTrial(other, OneParam(i), i));
  auto all = Unwrap(s.GetTrials(study));
  REQUIRE_OK(s.MarkRunning(all[3].id, {5, 5, 5}, 7));
  REQUIRE_OK(s.AddIntermediate(all[3].id, 2, 0.5));
  REQUIRE_OK(s.SetAttr(all[3].id, "k", "1"));
  return {study, other, Unwrap(s.GetTrials(study))};
}

// The trials' numbers, in order.
std::vector<int> TrialNumbers(const std::vector<TrialRecord>& ts) {
  std::vector<int> out;
  for (const auto& t : ts) out.push_back(t.number);
  return out;
}

TEMPLATE_TEST_CASE("GetTrialsSince returns the trials from a number on plus the listed ones",
                   "[storage]", TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  auto [study, other, all] = NumberedTrials(*s, "since", 6);
  auto since = Unwrap(s->GetTrialsSince(study, 4, {1, 3}));
  CHECK(TrialNumbers(since) == std::vector<int>{1, 3, 4, 5});
  // Full records, as GetTrials returns them.
  for (const auto& t : since) RequireSameTrial(t, all[t.number]);

  CHECK(TrialNumbers(Unwrap(s->GetTrialsSince(study, 0, {}))) ==
        std::vector<int>{0, 1, 2, 3, 4, 5});
  CHECK(Unwrap(s->GetTrialsSince(study, 6, {})).empty());
  // Listed numbers below from_number, unknown or repeated, are each returned at most once.
  CHECK(TrialNumbers(Unwrap(s->GetTrialsSince(study, 5, {2, 2, 99, 5, 0}))) ==
        std::vector<int>{0, 2, 5});
  CHECK(TrialNumbers(Unwrap(s->GetTrialsSince(other, 2, {0}))) == std::vector<int>{0, 2});
  // A study without trials, and an unknown study.
  int64_t empty = Unwrap(s->CreateStudy(MakeStudy("empty"), 1)).id;
  CHECK(Unwrap(s->GetTrialsSince(empty, 0, {1})).empty());
  auto missing = s->GetTrialsSince(987654, 0, {});
  REQUIRE_CODE(missing, Code::kNotFound);
  CHECK_THAT(missing.status().message(), Catch::Contains("987654"));
}

// What a summary shows, computed from the full records (as the read verbs once did): the
// reference CountTrials and GetBestTrial are checked against.
storage::TrialCounts CountFromRecords(const std::vector<TrialRecord>& trials) {
  storage::TrialCounts c;
  for (const TrialRecord& t : trials) {
    switch (t.state) {
      case TrialState::kWaiting:
        ++c.waiting;
        break;
      case TrialState::kRunning:
        ++c.running;
        break;
      case TrialState::kComplete:
        ++c.complete;
        break;
      case TrialState::kPruned:
        ++c.pruned;
        break;
      case TrialState::kFail:
        ++c.failed;
        break;
    }
    c.retries += t.retry_of.has_value();
    if (model::IsFinished(t.state) && t.started_at > 0) {
      ++c.ran;
      c.ran_seconds += t.DurationSeconds();
    }
  }
  return c;
}

void RequireSameCounts(const storage::TrialCounts& got, const storage::TrialCounts& want) {
  CHECK(got.waiting == want.waiting);
  CHECK(got.running == want.running);
  CHECK(got.complete == want.complete);
  CHECK(got.pruned == want.pruned);
  CHECK(got.failed == want.failed);
  CHECK(got.retries == want.retries);
  CHECK(got.ran == want.ran);
  CHECK(got.ran_seconds == Approx(want.ran_seconds));
}

TEMPLATE_TEST_CASE("CountTrials and GetBestTrial answer a summary without loading the trials",
                   "[storage]", TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  NewStudy max_spec = MakeStudy("max");
  max_spec.direction = config::Direction::kMaximize;
  NewStudy min_spec = MakeStudy("min");
  min_spec.direction = config::Direction::kMinimize;
  int64_t max = Unwrap(s->CreateStudy(max_spec, 1)).id;
  int64_t min = Unwrap(s->CreateStudy(min_spec, 1)).id;
  int64_t empty = Unwrap(s->CreateStudy(MakeStudy("empty"), 1)).id;

  // Both studies get the same trials: every state, a retry, NaN and infinite values, and two
  // trials tied for the best value of the maximizing study (the lower number wins).
  struct Plan {
    TrialState state;
    std::optional<double> value;
    bool start;
  };
  const std::vector<Plan> plans = {
      {TrialState::kComplete, 1.0, true},          {TrialState::kComplete, 3.0, true},
      {TrialState::kComplete, std::nan(""), true}, {TrialState::kPruned, 2.0, true},
      {TrialState::kFail, std::nullopt, true},     {TrialState::kRunning, std::nullopt, true},
      {TrialState::kWaiting, std::nullopt, false}, {TrialState::kComplete, 3.0, true},
      {TrialState::kComplete, -kInf, true},        {TrialState::kFail, std::nullopt, false},
      {TrialState::kComplete, std::nullopt, true},
  };
  for (int64_t study : {max, min}) {
    int64_t failed_id = 0;
    for (size_t i = 0; i < plans.size(); ++i) {
      const Plan& p = plans[i];
      TrialRecord t = Unwrap(s->CreateTrial(study, OneParam(static_cast<double>(i)), 10));
      if (p.state == TrialState::kFail && failed_id == 0) failed_id = t.id;
      if (p.start) REQUIRE_OK(s->MarkRunning(t.id, {100, 100, 7}, 20 + static_cast<double>(i)));
      if (p.state == TrialState::kRunning) REQUIRE_OK(s->AddIntermediate(t.id, 1, 0.5));
      if (model::IsFinished(p.state)) {
        REQUIRE_OK(
            s->FinishTrial(t.id, Outcome(p.state, p.value), 30 + 2 * static_cast<double>(i)));
      }
    }
    Unwrap(s->CreateTrial(study, OneParam(0), 40, failed_id));  // a retry, WAITING
  }

  for (int64_t study : {max, min}) {
    INFO("study id " << study);
    auto all = Unwrap(s->GetTrials(study));
    storage::TrialCounts counts = Unwrap(s->CountTrials(study));
    RequireSameCounts(counts, CountFromRecords(all));
    CHECK(counts.complete == 6);
    CHECK(counts.waiting == 2);
    CHECK(counts.retries == 1);
    CHECK(counts.total() == static_cast<int64_t>(all.size()));
  }
  // The best: the highest value (3.0 at numbers 1 and 7: the first), the lowest (-inf); NaN
  // and a missing value never win.
  auto best_max = Unwrap(s->GetBestTrial(max, config::Direction::kMaximize));
  REQUIRE(best_max.has_value());
  CHECK(best_max->number == 1);
  RequireSameTrial(*best_max, Unwrap(s->GetTrial(max, 1)));
  auto best_min = Unwrap(s->GetBestTrial(min, config::Direction::kMinimize));
  REQUIRE(best_min.has_value());
  CHECK(best_min->number == 8);
  CHECK(*best_min->value == -kInf);

  // A study without trials; one with only NaN and valueless COMPLETE trials has no best.
  RequireSameCounts(Unwrap(s->CountTrials(empty)), storage::TrialCounts{});
  CHECK_FALSE(Unwrap(s->GetBestTrial(empty, config::Direction::kMaximize)).has_value());
  int64_t nan_only = Unwrap(s->CreateStudy(MakeStudy("nan-only"), 1)).id;
  for (std::optional<double> v : {std::optional<double>(std::nan("")), std::optional<double>()}) {
    TrialRecord t = Unwrap(s->CreateTrial(nan_only, OneParam(0), 1));
    REQUIRE_OK(s->FinishTrial(t.id, Outcome(TrialState::kComplete, v), 2));
  }
  CHECK_FALSE(Unwrap(s->GetBestTrial(nan_only, config::Direction::kMinimize)).has_value());

  auto missing = s->CountTrials(987654);
  REQUIRE_CODE(missing, Code::kNotFound);
  CHECK_THAT(missing.status().message(), Catch::Contains("987654"));
  REQUIRE_CODE(s->GetBestTrial(987654, config::Direction::kMinimize), Code::kNotFound);
}

TEMPLATE_TEST_CASE("GetTrialPage returns a page of full records by number", "[storage]",
                   TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  auto [study, other, all] = NumberedTrials(*s, "paged", 7);
  auto page = Unwrap(s->GetTrialPage(study, 2, 3));
  CHECK(TrialNumbers(page) == std::vector<int>{2, 3, 4});
  for (const auto& t : page) RequireSameTrial(t, all[t.number]);
  CHECK(TrialNumbers(Unwrap(s->GetTrialPage(study, 5, 100))) == std::vector<int>{5, 6});
  CHECK(TrialNumbers(Unwrap(s->GetTrialPage(study, 0, 1))) == std::vector<int>{0});
  CHECK(Unwrap(s->GetTrialPage(study, 7, 10)).empty());
  CHECK(TrialNumbers(Unwrap(s->GetTrialPage(other, 0, 1000))) == std::vector<int>{0, 1, 2});
  // The pages of a study put together are GetTrials.
  std::vector<int> joined;
  for (int from = 0; from < 7; from += 2) {
    for (int n : TrialNumbers(Unwrap(s->GetTrialPage(study, from, 2)))) joined.push_back(n);
  }
  CHECK(joined == TrialNumbers(all));

  auto bad = s->GetTrialPage(study, 0, 0);
  REQUIRE_CODE(bad, Code::kInvalidArgument);
  CHECK_THAT(bad.status().message(), Catch::Contains("limit of 0"));
  REQUIRE_CODE(s->GetTrialPage(study, -1, 5), Code::kInvalidArgument);
  auto missing = s->GetTrialPage(987654, 0, 5);
  REQUIRE_CODE(missing, Code::kNotFound);
  CHECK_THAT(missing.status().message(), Catch::Contains("987654"));
}

TEMPLATE_TEST_CASE("Heartbeat records this node and GetNodes how long it has been silent",
                   "[storage]", TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  CHECK(Unwrap(s->GetNodes(1000)).empty());

  // SQLite measures with the caller's times, PostgreSQL with the server's clock (ignoring
  // them): the checks hold for both.
  REQUIRE_OK(s->Heartbeat(1000));
  auto first = Unwrap(s->GetNodes(1005));
  REQUIRE(first.size() == 1);
  CHECK(first[0].name == kNode);
  CHECK(first[0].instance == kInstance);
  CHECK(first[0].first_beat == first[0].last_beat);
  CHECK(first[0].silent_for >= 0);

  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto later = Unwrap(s->GetNodes(1006));
  REQUIRE(later.size() == 1);
  CHECK(later[0].silent_for > first[0].silent_for);
  CHECK(later[0].last_beat == first[0].last_beat);

  REQUIRE_OK(s->Heartbeat(1010));
  auto beat = Unwrap(s->GetNodes(1010));
  REQUIRE(beat.size() == 1);
  CHECK(beat[0].first_beat == first[0].first_beat);
  CHECK(beat[0].last_beat > first[0].last_beat);
  CHECK(beat[0].silent_for >= 0);

  // Heartbeats inside a batch count too.
  REQUIRE_OK(s->BeginBatch());
  REQUIRE_OK(s->Heartbeat(1020));
  REQUIRE_OK(s->CommitBatch());
  CHECK(Unwrap(s->GetNodes(1020))[0].last_beat >= beat[0].last_beat);
}

TEMPLATE_TEST_CASE("a node name beaten for from elsewhere records the new instance", "[storage]",
                   SqliteFileBackend, PostgresBackend) {
  TestType backend;
  auto here = backend.Open();
  REQUIRE_OK(here->Heartbeat(1000));
  const NodeRecord before = Unwrap(here->GetNodes(1000)).at(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto elsewhere = backend.OpenAs(kNode, "host-b:/var/lib/triald");
  CHECK(elsewhere->instance() == "host-b:/var/lib/triald");
  REQUIRE_OK(elsewhere->Heartbeat(1030));
  std::vector<NodeRecord> nodes = Unwrap(here->GetNodes(1030));
  REQUIRE(nodes.size() == 1);
  CHECK(nodes[0].instance == "host-b:/var/lib/triald");
  CHECK(nodes[0].first_beat > before.first_beat);  // a new daemon under the old name
}

TEMPLATE_TEST_CASE("text that may carry any byte round-trips byte for byte", "[storage]",
                   TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  // What a worker or the OS may hand over: NUL bytes, bytes that are not UTF-8, newlines.
  const char kRaw[] = "a\0b \xff\xfe\xc3 line\nend";
  const std::string raw(kRaw, sizeof kRaw - 1);

  NewStudy n = MakeStudy("bytes");
  n.spec_path = "/sweeps/\xff\xfe/latin1-\xe9.toml";  // a path need not be UTF-8
  StudyRecord study = Unwrap(s->CreateStudy(n, 1));
  CHECK(Unwrap(s->GetStudy("bytes")).spec_path == n.spec_path);

  TrialRecord t = Unwrap(s->CreateTrial(study.id, OneParam(1), 1));
  REQUIRE_OK(s->SetAttr(t.id, raw, "\"v\""));  // attr keys come from a worker's JSON
  REQUIRE_OK(s->AppendEvent(study.id, t.id, "trial_finished", raw, 2));
  TrialOutcome o = Outcome(TrialState::kFail);
  o.fail.reason = "protocol";
  o.fail.detail = "worker error: " + raw;
  o.fail.stderr_tail = raw;
  REQUIRE_OK(s->FinishTrial(t.id, o, 3));

  TrialRecord got = Unwrap(s->GetTrial(study.id, t.number));
  CHECK(got.attrs == std::map<std::string, std::string>{{raw, "\"v\""}});
  CHECK(got.fail.detail == o.fail.detail);
  CHECK(got.fail.stderr_tail == raw);
  auto events = Unwrap(s->GetEvents(study.id));
  REQUIRE(events.size() == 1);
  CHECK(events[0].detail == raw);
}

// ---------------------------------------------------------------------------------------------
// SQLite only
// ---------------------------------------------------------------------------------------------

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

// fd -> symlink target, for every descriptor of this process.
std::map<int, std::string> OpenFds() {
  std::map<int, std::string> fds;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    auto target = std::filesystem::read_symlink(entry.path(), ec);
    fds[std::stoi(entry.path().filename().string())] = ec ? "" : target.string();
  }
  return fds;
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

// ---------------------------------------------------------------------------------------------
// PostgreSQL only
// ---------------------------------------------------------------------------------------------

using triald::testing::PostgresAdminUrl;
using triald::testing::PostgresQuery;
using triald::testing::TestDatabase;

TEST_CASE("postgres: MaskPostgresUrl hides passwords and keeps the rest", "[storage]") {
  CHECK(MaskPostgresUrl("postgresql://u:s3cret@db.example:5432/triald") ==
        "postgresql://u:***@db.example:5432/triald");
  CHECK(MaskPostgresUrl("postgres://u@h/d?password=s3cret&sslmode=require") ==
        "postgres://u@h/d?password=***&sslmode=require");
  CHECK(MaskPostgresUrl("postgresql://u:p@ss@h1:1,h2:2/d") == "postgresql://u:***@h1:1,h2:2/d");
  CHECK(MaskPostgresUrl("postgresql://u@h:5432/d") == "postgresql://u@h:5432/d");
  CHECK(MaskPostgresUrl("postgresql://h/d?user=u") == "postgresql://h/d?user=u");
}

// Waits until `sql` on the admin URL returns `want`. `child`, when given, must not exit first.
void WaitUntil(const std::string& sql, const std::string& want, pid_t child = 0) {
  for (int i = 0; i < 6000; ++i) {
    if (PostgresQuery(PostgresAdminUrl(), sql) == want) return;
    int wstatus = 0;
    if (child > 0 && waitpid(child, &wstatus, WNOHANG) == child) {
      FAIL("child " << child << " exited (status " << wstatus << ") before " << sql << " returned "
                    << want);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL(sql << " did not return " << want << " within 60 s");
}

// Forks a child that runs `body` and exits with its return value (0 for success). No Catch
// assertion runs in the child, and no destructor: the parent's connections, inherited across
// fork, are left alone.
template <typename F>
pid_t ForkChild(F&& body) {
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) _exit(body());
  return pid;
}

void RequireExitsZero(pid_t pid) {
  int wstatus = 0;
  REQUIRE(waitpid(pid, &wstatus, 0) == pid);
  INFO("child " << pid << " wait status " << wstatus);
  REQUIRE(WIFEXITED(wstatus));
  REQUIRE(WEXITSTATUS(wstatus) == 0);
}

TEST_CASE("postgres: daemons on one database share studies, trials and heartbeats",
          "[storage][postgres]") {
  TestDatabase db;
  auto a = OpenPostgresOrFail(db.url(), "host-a");
  auto b = OpenPostgresOrFail(db.url(), "host-b");
  CHECK(a->shared());
  CHECK(a->node() == "host-a");
  CHECK(b->node() == "host-b");

  StudyRecord study = Unwrap(a->CreateStudy(MakeStudy("shared"), 1));
  RequireSameStudy(Unwrap(b->GetStudy("shared")), study);
  REQUIRE_CODE(b->CreateStudy(MakeStudy("shared"), 2), Code::kAlreadyExists);

  TrialRecord t0 = Unwrap(b->CreateTrial(study.id, AllKindsOfParams(), 2));
  TrialRecord t1 = Unwrap(a->CreateTrial(study.id, OneParam(1), 3));
  CHECK(t0.number == 0);
  CHECK(t1.number == 1);
  REQUIRE_OK(a->ClaimTrial(t0.id));
  CHECK(Unwrap(b->GetTrial(study.id, 0)).node == "host-a");
  REQUIRE_OK(b->MarkRunning(t1.id, {321, 321, 9}, 4));
  REQUIRE_OK(b->AddIntermediate(t1.id, 1, 0.5));
  auto seen = Unwrap(a->GetTrialsSince(study.id, 0, {}));
  REQUIRE(seen.size() == 2);
  RequireSameParams(seen[0].params, AllKindsOfParams());
  CHECK(seen[1].node == "host-b");
  CHECK(seen[1].state == TrialState::kRunning);
  CHECK(seen[1].intermediate.at(1) == 0.5);
  CHECK(Unwrap(a->GetRunningTrials()).size() == 1);

  // A batch is invisible to the other daemon until it commits.
  REQUIRE_OK(b->BeginBatch());
  Unwrap(b->CreateTrial(study.id, OneParam(2), 5));
  REQUIRE_OK(b->FinishTrial(t1.id, Outcome(TrialState::kComplete, 0.25), 5));
  CHECK(Unwrap(a->GetTrials(study.id)).size() == 2);
  CHECK(Unwrap(a->GetTrial(study.id, 1)).state == TrialState::kRunning);
  REQUIRE_OK(b->CommitBatch());
  CHECK(Unwrap(a->GetTrials(study.id)).size() == 3);
  // What one daemon finished, the other cannot change.
  CHECK(a->FinishTrial(t1.id, Outcome(TrialState::kFail), 6).code() == Code::kFailedPrecondition);
  CHECK(Unwrap(a->GetTrial(study.id, 1)).value == std::optional<double>(0.25));

  REQUIRE_OK(a->Heartbeat(0));
  REQUIRE_OK(b->Heartbeat(0));
  auto nodes = Unwrap(b->GetNodes(0));
  REQUIRE(nodes.size() == 2);
  CHECK(nodes[0].name == "host-a");
  CHECK(nodes[1].name == "host-b");
  for (const auto& n : nodes) {
    CHECK(n.silent_for >= 0);
    // The server's clock: unix seconds of today, not the 0 passed in.
    CHECK(n.last_beat > 1.6e9);
  }
}

TEST_CASE("postgres: processes creating trials of one study at once get dense unique numbers",
          "[storage][postgres]") {
  TestDatabase db;
  auto parent = OpenPostgresOrFail(db.url(), "parent");
  StudyRecord study = Unwrap(parent->CreateStudy(MakeStudy("race"), 1));
  constexpr int kChildren = 6;
  constexpr int kEach = 15;

  // The children connect, then wait on the pipe and start creating together.
  int go[2];
  REQUIRE(pipe(go) == 0);
  std::vector<pid_t> children;
  for (int c = 0; c < kChildren; ++c) {
    children.push_back(ForkChild([&, c]() -> int {
      close(go[1]);
      PostgresOptions options;
      options.url = db.url();
      options.node = "child-" + std::to_string(c);
      auto s = OpenPostgresStorage(options);
      if (!s.ok()) return 2;
      char byte;
      if (read(go[0], &byte, 1) != 0) return 3;
      for (int k = 0; k < kEach; ++k) {
        // A third of them the way the scheduler does it (a batch under LockStudy), the rest
        // without any lock of the caller's: CreateTrial must number them safely either way.
        bool batched = k % 3 == 0;
        if (batched && (!(*s)->BeginBatch().ok() || !(*s)->LockStudy(study.id).ok())) return 4;
        if (!(*s)->CreateTrial(study.id, OneParam(c * 100 + k), k).ok()) return 5;
        if (batched && !(*s)->CommitBatch().ok()) return 6;
      }
      return 0;
    }));
  }
  close(go[0]);
  close(go[1]);
  for (pid_t pid : children) RequireExitsZero(pid);

  auto trials = Unwrap(parent->GetTrials(study.id));
  REQUIRE(trials.size() == static_cast<size_t>(kChildren * kEach));
  std::set<double> xs;
  for (size_t i = 0; i < trials.size(); ++i) {
    CHECK(trials[i].number == static_cast<int>(i));
    xs.insert(trials[i].params.at("x").internal);
  }
  std::set<double> want;
  for (int c = 0; c < kChildren; ++c) {
    for (int k = 0; k < kEach; ++k) want.insert(c * 100 + k);
  }
  CHECK(xs == want);
}

TEST_CASE("postgres: LockStudy holds off another daemon's LockStudy until the batch commits",
          "[storage][postgres]") {
  TestDatabase db;
  auto a = OpenPostgresOrFail(db.url(), "locker-a");
  StudyRecord study = Unwrap(a->CreateStudy(MakeStudy("lock"), 1));

  REQUIRE_OK(a->BeginBatch());
  Unwrap(a->LockStudy(study.id));
  // B locks the same study, then records how many trials it saw once it held the lock.
  pid_t b = ForkChild([&]() -> int {
    PostgresOptions options;
    options.url = db.url();
    options.node = "locker-b";
    options.lock_timeout_s = 60;  // waits for A however slow this machine is
    auto s = OpenPostgresStorage(options);
    if (!s.ok()) return 2;
    if (!(*s)->BeginBatch().ok()) return 3;
    if (!(*s)->LockStudy(study.id).ok()) return 4;
    auto trials = (*s)->GetTrials(study.id);
    if (!trials.ok()) return 5;
    if (!(*s)->AppendEvent(study.id, std::nullopt, "b_locked", std::to_string(trials->size()), 2)
             .ok()) {
      return 6;
    }
    return (*s)->CommitBatch().ok() ? 0 : 7;
  });
  // B is seen waiting for A's lock (and must not get past it before A commits).
  WaitUntil(
      "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'triald:locker-b' "
      "AND datname = '" +
          db.name() + "' AND wait_event_type = 'Lock'",
      "1", b);
  Unwrap(a->CreateTrial(study.id, OneParam(1), 2));
  REQUIRE_OK(a->AppendEvent(study.id, std::nullopt, "a_created", "", 2));
  REQUIRE_OK(a->CommitBatch());
  RequireExitsZero(b);

  auto events = Unwrap(a->GetEvents(study.id));
  REQUIRE(events.size() == 2);
  CHECK(events[0].kind == "a_created");
  CHECK(events[1].kind == "b_locked");
  CHECK(events[1].detail == "1");  // B's lock came after A's commit: it saw A's trial
}

TEST_CASE("postgres: a daemon frozen inside a batch holds its study lock only for a while",
          "[storage][postgres]") {
  TestDatabase db;
  PostgresOptions ao;
  ao.url = db.url();
  ao.node = "frozen";
  ao.idle_in_transaction_timeout_s = 1;
  auto a = Unwrap(OpenPostgresStorage(ao));
  StudyRecord study = Unwrap(a->CreateStudy(MakeStudy("frozen"), 1));
  REQUIRE_OK(a->BeginBatch());
  Unwrap(a->LockStudy(study.id));  // ... and A sends nothing more: frozen (SIGSTOP, a VM pause)

  PostgresOptions bo;
  bo.url = db.url();
  bo.node = "waiter";
  bo.lock_timeout_s = 0.2;
  auto b = Unwrap(OpenPostgresStorage(bo));
  // B does not wait for ever: its LockStudy gives up, and its batch stays usable.
  REQUIRE_OK(b->BeginBatch());
  auto refused = b->LockStudy(study.id);
  CHECK(refused.status().code() == Code::kUnavailable);
  CHECK_THAT(refused.status().message(), Catch::Contains("lock timeout"));
  REQUIRE_OK(b->CommitBatch());
  // Once A has been idle in its transaction for a second, the server ends A's session and the
  // lock is free.
  bool locked = false;
  for (int i = 0; i < 200 && !locked; ++i) {
    REQUIRE_OK(b->BeginBatch());
    locked = b->LockStudy(study.id).ok();
    REQUIRE_OK(b->CommitBatch());
    if (!locked) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(locked);
  // A, thawed, finds its batch gone, and its next batch runs on a new connection.
  CHECK(a->CommitBatch().code() == Code::kUnavailable);
  REQUIRE_OK(a->BeginBatch());
  Unwrap(a->LockStudy(study.id));
  REQUIRE_OK(a->CommitBatch());
}

TEST_CASE("postgres: a server that stops answering fails a call within call_timeout",
          "[storage][postgres]") {
  TestDatabase db;
  PostgresOptions o;
  o.url = db.url();
  o.node = "stopped";
  o.call_timeout_s = 1;
  auto s = Unwrap(OpenPostgresStorage(o));
  Unwrap(s->CreateStudy(MakeStudy("stop"), 1));
  // The server process serving this connection, stopped: the kernel still accepts and
  // acknowledges what the client sends, so neither TCP nor a server-side timeout ends the wait
  // (the same as a database host whose network drops replies). Only the client's own deadline
  // does.
  const std::string pid_text = PostgresQuery(
      db.url(), "SELECT pid FROM pg_stat_activity WHERE application_name = 'triald:stopped'");
  REQUIRE_FALSE(pid_text.empty());
  const pid_t backend = static_cast<pid_t>(std::stol(pid_text));
  REQUIRE(::kill(backend, SIGSTOP) == 0);
  struct Resume {
    pid_t pid;
    ~Resume() { ::kill(pid, SIGCONT); }
  } resume{backend};

  const auto start = std::chrono::steady_clock::now();
  auto stalled = s->ListStudies();
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE_FALSE(stalled.ok());
  CHECK(stalled.status().code() == Code::kUnavailable);
  CHECK_THAT(stalled.status().message(),
             Catch::Contains("did not answer within 1 s (call timeout)") &&
                 Catch::Contains("the connection was dropped"));
  CHECK(took >= 0.9);
  CHECK(took < 10);  // one call timeout, no retry; generous for a loaded machine

  // The next calls run on a new connection (a new server process, not stopped).
  REQUIRE_OK(s->BeginBatch());
  CHECK(s->ListStudies().ok());
  REQUIRE_OK(s->CommitBatch());
  std::vector<StudyRecord> studies = Unwrap(s->ListStudies());
  REQUIRE(studies.size() == 1);
  CHECK(studies[0].name == "stop");
}

TEST_CASE("postgres: the connection's socket is close-on-exec", "[storage][postgres]") {
  TestDatabase db;
  auto before = OpenFds();
  auto s = OpenPostgresOrFail(db.url());
  Unwrap(s->CreateStudy(MakeStudy("fds"), 1));

  int sockets = 0;
  for (const auto& [fd, target] : OpenFds()) {
    if (before.count(fd) == 1 && before.at(fd) == target) continue;
    int flags = fcntl(fd, F_GETFD);
    if (flags == -1) continue;  // the directory listing's own descriptor, closed by now
    INFO("fd " << fd << " -> " << target);
    CHECK((flags & FD_CLOEXEC) != 0);
    if (target.rfind("socket:", 0) == 0) ++sockets;
  }
  CHECK(sockets == 1);
}

TEST_CASE("postgres: connection errors name the URL with its password masked",
          "[storage][postgres]") {
  auto open_fails = [](const std::string& url, Code code) {
    PostgresOptions options;
    options.url = url;
    options.node = kNode;
    auto r = OpenPostgresStorage(options);
    INFO(url << " -> " << r.status().ToString());
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == code);
    CHECK_THAT(r.status().message(), !Catch::Contains("s3cret"));
    return r.status().message();
  };

  SECTION("no server listening") {
    std::string msg =
        open_fails("postgresql://triald:s3cret@127.0.0.1:1/triald", Code::kUnavailable);
    CHECK_THAT(msg, Catch::Contains("postgresql://triald:***@127.0.0.1:1/triald"));
  }
  SECTION("a password given as a parameter") {
    std::string msg =
        open_fails("postgres://triald@127.0.0.1:1/triald?password=s3cret", Code::kUnavailable);
    CHECK_THAT(msg, Catch::Contains("postgres://triald@127.0.0.1:1/triald?password=***"));
  }
  SECTION("a database the server does not have") {
    // postgresql://postgres@127.0.0.1:PORT/postgres -> ...postgres:s3cret@.../no_such_database
    std::string admin = PostgresAdminUrl();
    size_t at = admin.find('@');
    size_t path = admin.find('/', at);
    REQUIRE(at != std::string::npos);
    REQUIRE(path != std::string::npos);
    std::string url =
        admin.substr(0, at) + ":s3cret" + admin.substr(at, path - at) + "/no_such_database";
    std::string msg = open_fails(url, Code::kUnavailable);
    CHECK_THAT(msg, Catch::Contains(MaskPostgresUrl(url)));
    CHECK_THAT(msg, Catch::Contains("no_such_database"));
    CHECK_THAT(msg, Catch::Contains(":***@"));
  }
  SECTION("a malformed URL") {
    std::string msg = open_fails("postgresql://triald:s3cret@127.0.0.1/triald?no_such_option=1",
                                 Code::kInvalidArgument);
    CHECK_THAT(msg, Catch::Contains("postgresql://triald:***@127.0.0.1/triald?no_such_option=1"));
    CHECK_THAT(msg, Catch::Contains("no_such_option"));
  }
  SECTION("not a PostgreSQL URL") {
    std::string msg = open_fails("mysql://triald:s3cret@127.0.0.1/triald", Code::kInvalidArgument);
    CHECK_THAT(msg, Catch::Contains("mysql://triald:***@127.0.0.1/triald"));
    open_fails("", Code::kInvalidArgument);
  }
}

TEST_CASE("postgres: a session the server ends is replaced by a new connection",
          "[storage][postgres]") {
  TestDatabase db;
  auto s = OpenPostgresOrFail(db.url(), "reconnect");
  StudyRecord study = Unwrap(s->CreateStudy(MakeStudy("r"), 1));
  const std::string pid_sql =
      "SELECT pid FROM pg_stat_activity WHERE application_name = 'triald:reconnect' AND "
      "datname = '" +
      db.name() + "'";
  // Ends the storage's session the way a server shutdown or restart does (FATAL, "terminating
  // connection due to administrator command"), waiting until it is gone.
  auto end_session = [&]() {
    std::string pid = PostgresQuery(PostgresAdminUrl(), pid_sql);
    REQUIRE_FALSE(pid.empty());
    REQUIRE(PostgresQuery(PostgresAdminUrl(), "SELECT pg_terminate_backend(" + pid + ", 30000)") ==
            "t");
    return pid;
  };

  SECTION("between calls: the next call reconnects and runs once") {
    std::string old_pid = end_session();
    TrialRecord t = Unwrap(s->CreateTrial(study.id, OneParam(1), 2));
    CHECK(t.number == 0);
    std::string new_pid = PostgresQuery(PostgresAdminUrl(), pid_sql);
    CHECK_FALSE(new_pid.empty());
    CHECK(new_pid != old_pid);
    CHECK(Unwrap(s->GetTrials(study.id)).size() == 1);  // created once, not twice
    end_session();
    CHECK(Unwrap(s->ListStudies()).size() == 1);  // reads reconnect too
    end_session();
    REQUIRE_OK(s->BeginBatch());  // and so does a batch
    Unwrap(s->CreateTrial(study.id, OneParam(2), 3));
    REQUIRE_OK(s->CommitBatch());
    CHECK(Unwrap(s->GetTrials(study.id)).size() == 2);
    // The new connection's socket is close-on-exec like the first.
    int sockets = 0;
    for (const auto& [fd, target] : OpenFds()) {
      if (target.rfind("socket:", 0) != 0) continue;
      int flags = fcntl(fd, F_GETFD);
      if (flags == -1) continue;
      ++sockets;
      CHECK((flags & FD_CLOEXEC) != 0);
    }
    CHECK(sockets >= 1);
  }
  SECTION("inside a batch: the batch fails, and the next batch reconnects") {
    REQUIRE_OK(s->BeginBatch());
    Unwrap(s->CreateTrial(study.id, OneParam(1), 2));
    end_session();
    auto lost = s->CreateTrial(study.id, OneParam(2), 3);
    REQUIRE_CODE(lost, Code::kUnavailable);
    CHECK_THAT(lost.status().message(), Catch::Contains(db.url()));
    // The rest of the batch fails too, and so does its commit: nothing of it was stored.
    CHECK(s->AppendEvent(study.id, std::nullopt, "x", "", 3).code() == Code::kUnavailable);
    CHECK(s->CommitBatch().code() == Code::kUnavailable);
    REQUIRE_OK(s->BeginBatch());
    TrialRecord t = Unwrap(s->CreateTrial(study.id, OneParam(3), 4));
    REQUIRE_OK(s->CommitBatch());
    CHECK(t.number == 0);
    CHECK(Unwrap(s->GetTrials(study.id)).size() == 1);
    CHECK(Unwrap(s->GetEvents(study.id)).empty());
  }
}

TEST_CASE("postgres: a server restart between calls is survived", "[storage][postgres]") {
  // A private server: restarting the shared one would disturb the tests running beside this.
  TempDir dir;
  const std::string script = std::string(TRIALD_SOURCE_DIR) + "/scripts/pg_test_server.sh";
  const std::string server = dir.path() + "/server";
  struct StopServer {
    std::string command;
    ~StopServer() { (void)std::system(command.c_str()); }
  } stop{"bash '" + script + "' stop '" + server + "' >/dev/null 2>&1"};
  REQUIRE(std::system(("bash '" + script + "' start '" + server + "' >/dev/null").c_str()) == 0);
  std::string admin;
  std::getline(std::ifstream(server + "/url"), admin);
  REQUIRE_FALSE(admin.empty());

  auto s = OpenPostgresOrFail(admin, "restarted");
  StudyRecord study = Unwrap(s->CreateStudy(MakeStudy("before"), 1));
  REQUIRE(std::system(("bash '" + script + "' restart '" + server + "'").c_str()) == 0);
  TrialRecord t = Unwrap(s->CreateTrial(study.id, OneParam(1), 2));
  CHECK(t.number == 0);
  RequireSameStudy(Unwrap(s->GetStudy("before")), study);
  CHECK(Unwrap(s->GetTrials(study.id)).size() == 1);
}

TEST_CASE("postgres: daemons opening an empty database together create the schema once",
          "[storage][postgres]") {
  TestDatabase db;
  int go[2];
  REQUIRE(pipe(go) == 0);
  std::vector<pid_t> children;
  for (int c = 0; c < 4; ++c) {
    children.push_back(ForkChild([&, c]() -> int {
      close(go[1]);
      char byte;
      if (read(go[0], &byte, 1) != 0) return 2;
      PostgresOptions options;
      options.url = db.url();
      options.node = "opener-" + std::to_string(c);
      auto s = OpenPostgresStorage(options);
      if (!s.ok()) return 3;
      return (*s)->ListStudies().ok() ? 0 : 4;
    }));
  }
  close(go[0]);
  close(go[1]);
  for (pid_t pid : children) RequireExitsZero(pid);
  CHECK(PostgresQuery(db.url(), "SELECT count(*) FROM schema_version") == "1");
  CHECK(PostgresQuery(db.url(), "SELECT max(version) FROM schema_version") == "6");
}

TEST_CASE("postgres: a version-1 database gets submitters, unknown for its studies",
          "[storage][postgres]") {
  TestDatabase db;
  OpenPostgresOrFail(db.url());
  // Version 1 is the current schema without the columns of versions 2 and 3.
  PostgresQuery(db.url(),
                "ALTER TABLE studies DROP COLUMN submitter_uid, DROP COLUMN submitter_name, "
                "DROP COLUMN directions, DROP COLUMN paused, DROP COLUMN parallelism; "
                "ALTER TABLE trials DROP COLUMN values_json, DROP COLUMN constraints_json, "
                "DROP COLUMN resources_json; "
                "UPDATE schema_version SET version = 1; "
                "INSERT INTO studies (name, direction, n_trials, state, spec_toml, spec_path, "
                "seed, created_at) VALUES ('old', 'MINIMIZE', 5, 'RUNNING', '', "
                "'/old.toml'::bytea, 7, 10)");
  {
    auto s = OpenPostgresOrFail(db.url());
    StudyRecord old = Unwrap(s->GetStudy("old"));
    CHECK_FALSE(old.submitter.known());
    CHECK(old.spec_path == "/old.toml");
    NewStudy fresh = MakeStudy("new");
    fresh.submitter = {1001, "alice"};
    REQUIRE_OK(s->CreateStudy(fresh, 20).status());
  }
  CHECK(PostgresQuery(db.url(), "SELECT max(version) FROM schema_version") == "6");
  auto s = OpenPostgresOrFail(db.url());
  CHECK_FALSE(Unwrap(s->GetStudy("old")).submitter.known());
  CHECK(Unwrap(s->GetStudy("new")).submitter.uid == 1001);
  CHECK(Unwrap(s->GetStudy("new")).submitter.name == "alice");
}

TEST_CASE(
    "postgres: a version-2 database keeps its studies and values and takes several "
    "objectives",
    "[storage][postgres][objectives]") {
  TestDatabase db;
  OpenPostgresOrFail(db.url());
  // Version 2 is the current schema without the columns of versions 3 and 4.
  PostgresQuery(db.url(),
                "ALTER TABLE studies DROP COLUMN directions, DROP COLUMN paused, "
                "DROP COLUMN parallelism; "
                "ALTER TABLE trials DROP COLUMN values_json, DROP COLUMN constraints_json, "
                "DROP COLUMN resources_json; "
                "UPDATE schema_version SET version = 2; "
                "INSERT INTO studies (name, direction, n_trials, state, spec_toml, spec_path, "
                "seed, created_at) VALUES ('old', 'MAXIMIZE', 5, 'COMPLETE', '', "
                "'/old.toml'::bytea, 7, 10); "
                "INSERT INTO trials (study_id, number, state, value, created_at, finished_at) "
                "SELECT id, 0, 'COMPLETE', 0.75, 11, 12 FROM studies WHERE name = 'old'; "
                "INSERT INTO trials (study_id, number, state, value, created_at, finished_at) "
                "SELECT id, 1, 'PRUNED', 0.5, 13, 14 FROM studies WHERE name = 'old'");
  {
    auto s = OpenPostgresOrFail(db.url());
    StudyRecord old = Unwrap(s->GetStudy("old"));
    CHECK(old.directions == std::vector<config::Direction>{config::Direction::kMaximize});
    std::vector<TrialRecord> trials = Unwrap(s->GetTrials(old.id));
    REQUIRE(trials.size() == 2);
    CHECK(trials[0].value == 0.75);
    CHECK(trials[0].values == std::vector<double>{0.75});
    CHECK(trials[0].constraints.empty());
    CHECK(trials[1].values.empty());
    NewStudy mo = MakeStudy("mo");
    mo.direction = config::Direction::kMinimize;
    mo.directions = {config::Direction::kMinimize, config::Direction::kMaximize};
    int64_t id = Unwrap(s->CreateStudy(mo, 30)).id;
    TrialRecord t = Unwrap(s->CreateTrial(id, OneParam(1), 31));
    TrialOutcome o = Outcome(TrialState::kComplete);
    o.values = {0.31, 812.0};
    o.constraints = {-1.0, 2.0};
    REQUIRE_OK(s->FinishTrial(t.id, o, 32));
  }
  CHECK(PostgresQuery(db.url(), "SELECT max(version) FROM schema_version") == "6");
  auto s = OpenPostgresOrFail(db.url());
  CHECK(Unwrap(s->GetTrial(Unwrap(s->GetStudy("old")).id, 0)).values == std::vector<double>{0.75});
  StudyRecord mo = Unwrap(s->GetStudy("mo"));
  CHECK(mo.directions.size() == 2);
  TrialRecord t = Unwrap(s->GetTrial(mo.id, 0));
  CHECK(t.values == std::vector<double>{0.31, 812.0});
  CHECK(t.constraints == std::vector<double>{-1.0, 2.0});
}

TEST_CASE("postgres: a version-3 database keeps its trials, which have no resources",
          "[storage][postgres][resources]") {
  TestDatabase db;
  OpenPostgresOrFail(db.url());
  // Version 3 is the current schema without the columns of versions 4 and 5.
  PostgresQuery(db.url(),
                "ALTER TABLE trials DROP COLUMN resources_json; "
                "ALTER TABLE studies DROP COLUMN paused, DROP COLUMN parallelism; "
                "UPDATE schema_version SET version = 3; "
                "INSERT INTO studies (name, direction, n_trials, state, spec_toml, spec_path, "
                "seed, created_at) VALUES ('old', 'MINIMIZE', 5, 'COMPLETE', '', "
                "'/old.toml'::bytea, 7, 10); "
                "INSERT INTO trials (study_id, number, state, value, created_at, finished_at, "
                "constraints_json) SELECT id, 0, 'COMPLETE', 0.75, 11, 12, '[-1]' FROM studies "
                "WHERE name = 'old'");
  {
    auto s = OpenPostgresOrFail(db.url());
    TrialRecord old = Unwrap(s->GetTrial(Unwrap(s->GetStudy("old")).id, 0));
    CHECK(old.value == 0.75);
    CHECK(old.constraints == std::vector<double>{-1.0});
    CHECK_FALSE(old.resources.has_value());
    int64_t id = Unwrap(s->CreateStudy(MakeStudy("new"), 30)).id;
    TrialRecord t = Unwrap(s->CreateTrial(id, OneParam(1), 31));
    TrialOutcome o = Outcome(TrialState::kComplete);
    o.resources = MeasuredResources();
    REQUIRE_OK(s->FinishTrial(t.id, o, 32));
  }
  CHECK(PostgresQuery(db.url(), "SELECT max(version) FROM schema_version") == "6");
  auto s = OpenPostgresOrFail(db.url());
  CHECK_FALSE(Unwrap(s->GetTrial(Unwrap(s->GetStudy("old")).id, 0)).resources.has_value());
  CHECK(Unwrap(s->GetTrial(Unwrap(s->GetStudy("new")).id, 0)).resources == MeasuredResources());
}

TEST_CASE("postgres: a version-4 database's studies are not paused and keep their parallelism",
          "[storage][postgres][control]") {
  TestDatabase db;
  OpenPostgresOrFail(db.url());
  // Version 4 is the current schema without version 5's columns.
  PostgresQuery(db.url(),
                "ALTER TABLE studies DROP COLUMN paused, DROP COLUMN parallelism; "
                "UPDATE schema_version SET version = 4; "
                "INSERT INTO studies (name, direction, n_trials, state, spec_toml, spec_path, "
                "seed, created_at) VALUES ('old', 'MINIMIZE', 5, 'RUNNING', '', "
                "'/old.toml'::bytea, 7, 10)");
  {
    auto s = OpenPostgresOrFail(db.url());
    StudyRecord old = Unwrap(s->GetStudy("old"));
    CHECK_FALSE(old.paused);
    CHECK(old.parallelism == 0);
    REQUIRE_OK(s->SetStudyControl(old.id, true, 6, 4));
  }
  CHECK(PostgresQuery(db.url(), "SELECT max(version) FROM schema_version") == "6");
  auto s = OpenPostgresOrFail(db.url());
  StudyRecord old = Unwrap(s->GetStudy("old"));
  CHECK(old.paused);
  CHECK(old.n_trials == 6);
  CHECK(old.parallelism == 4);
}

TEST_CASE("postgres: a schema newer than this triald is refused", "[storage][postgres]") {
  TestDatabase db;
  OpenPostgresOrFail(db.url());
  PostgresQuery(db.url(), "UPDATE schema_version SET version = 99");
  PostgresOptions options;
  options.url = db.url();
  auto r = OpenPostgresStorage(options);
  REQUIRE_CODE(r, Code::kFailedPrecondition);
  CHECK_THAT(r.status().message(), Catch::Contains("99"));
  CHECK_THAT(r.status().message(), Catch::Contains(db.url()));
}

TEST_CASE("postgres: text PostgreSQL cannot store is kInvalidArgument naming the field",
          "[storage][postgres]") {
  TestDatabase db;
  auto s = OpenPostgresOrFail(db.url());
  int64_t study = Unwrap(s->CreateStudy(MakeStudy("ok"), 1)).id;
  TrialRecord t = Unwrap(s->CreateTrial(study, OneParam(1), 1));

  auto bad_name = s->CreateStudy(MakeStudy(std::string("bad\xff", 4)), 2);
  REQUIRE_CODE(bad_name, Code::kInvalidArgument);
  CHECK_THAT(bad_name.status().message(), Catch::Contains("study name"));
  ParamMap bad_param = OneParam(1);
  bad_param[std::string("n\0ul", 4)] = bad_param["x"];
  REQUIRE_CODE(s->CreateTrial(study, bad_param, 2), Code::kInvalidArgument);
  CHECK(s->SetAttr(t.id, "k", std::string("\"\xc3\"", 3)).code() == Code::kInvalidArgument);

  // Inside a batch the refusal leaves the batch's other changes alone.
  REQUIRE_OK(s->BeginBatch());
  Unwrap(s->CreateTrial(study, OneParam(2), 3));
  CHECK(s->AppendEvent(study, std::nullopt, std::string("k\0", 2), "", 3).code() ==
        Code::kInvalidArgument);
  REQUIRE_OK(s->CommitBatch());
  CHECK(Unwrap(s->ListStudies()).size() == 1);
  CHECK(Unwrap(s->GetTrials(study)).size() == 2);
  CHECK(Unwrap(s->GetTrial(study, 0)).attrs.empty());
}

}  // namespace
}  // namespace triald::storage
