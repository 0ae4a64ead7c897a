// The Storage contract (daemon/storage/storage.h), run against every implementation, followed
// by tests of what only SqliteStorage promises (WAL, fsync-safe reopen, fds, integrity check).
//
// A new backend joins the contract suite by adding a fixture type to `TRIALD_STORAGE_BACKENDS`: a
// struct with an `Open()` that returns a fresh, empty Storage.

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
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
#include <vector>

#include "daemon/storage/sqlite_storage.h"
#include "daemon/storage/storage.h"
#include "tests/support/temp_dir.h"

namespace triald::storage {
namespace {

using common::Code;
using config::Distribution;
using config::ParamType;

constexpr double kInf = std::numeric_limits<double>::infinity();

using triald::testing::TempDir;

std::unique_ptr<Storage> OpenSqliteOrFail(const std::string& path) {
  auto r = OpenSqliteStorage({path});
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return std::move(r).value();
}

struct SqliteFileBackend {
  TempDir dir;
  std::unique_ptr<Storage> Open() { return OpenSqliteOrFail(dir.path() + "/triald.db"); }
};

struct SqliteMemoryBackend {
  std::unique_ptr<Storage> Open() { return OpenSqliteOrFail(":memory:"); }
};

// Every Storage implementation; each contract test case runs once per backend, named after it.
#define TRIALD_STORAGE_BACKENDS SqliteFileBackend, SqliteMemoryBackend

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
  NewStudy b = MakeStudy("beta");
  b.direction = config::Direction::kMinimize;
  b.seed = 42;
  StudyRecord ra = Unwrap(s->CreateStudy(a, 1000.5));
  StudyRecord rb = Unwrap(s->CreateStudy(b, 1001.25));

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

}  // namespace
}  // namespace triald::storage
