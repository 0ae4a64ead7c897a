// The TrialStore contract (daemon/storage/trial_store.h), on every backend (backend_fixture.h).

#include "tests/daemon/storage/backend_fixture.h"

namespace triald::storage {
namespace {

using namespace contract;  // NOLINT: the suites' shared fixture

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

TEMPLATE_TEST_CASE("AddLazyWrites makes many writes at once, the last of a step or key winning",
                   "[storage]", TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  int64_t study = Unwrap(s->CreateStudy(MakeStudy("lazy"), 1)).id;
  TrialRecord t = Unwrap(s->CreateTrial(study, OneParam(0), 1));
  TrialRecord other = Unwrap(s->CreateTrial(study, OneParam(1), 1));
  TrialRecord ended = Unwrap(s->CreateTrial(study, OneParam(2), 1));
  REQUIRE_OK(s->MarkRunning(t.id, {10, 10, 1}, 2));
  REQUIRE_OK(s->AddIntermediate(t.id, 1, 0.5));  // stored before: overwritten below
  REQUIRE_OK(s->FinishTrial(ended.id, Outcome(TrialState::kComplete, 1.0), 3));
  using W = TrialStore::LazyWrite;
  auto step = [](int64_t id, int64_t n, double v) {
    W w;
    w.trial_id = id;
    w.step = n;
    w.value = v;
    return w;
  };
  auto attr = [](int64_t id, std::string key, std::string json) {
    W w;
    w.trial_id = id;
    w.attr = true;
    w.key = std::move(key);
    w.json = std::move(json);
    return w;
  };
  std::vector<W> writes = {step(t.id, 1, 0.25),
                           step(t.id, 2, std::nan("")),
                           attr(t.id, std::string("k\0ey", 4), "1"),
                           step(ended.id, 1, 9.0),  // a finished trial: refused
                           step(t.id, 1, 0.125),    // the same step again: this one wins
                           step(other.id, 1000000000000LL, -kInf),
                           attr(t.id, std::string("k\0ey", 4), "{\"a\":[2]}"),
                           attr(ended.id, "x", "1"),  // refused
                           step(-5, 1, 1.0)};         // no such trial: refused
  std::vector<size_t> refused;
  REQUIRE_OK(s->AddLazyWrites(writes, &refused));
  CHECK(refused == std::vector<size_t>{3, 7, 8});
  TrialRecord got = Unwrap(s->GetTrial(study, t.number));
  REQUIRE(got.intermediate.size() == 2);
  CHECK(got.intermediate.at(1) == 0.125);
  CHECK(std::isnan(got.intermediate.at(2)));
  CHECK(got.attrs.at(std::string("k\0ey", 4)) == "{\"a\":[2]}");
  CHECK(Unwrap(s->GetTrial(study, other.number)).intermediate ==
        std::map<int64_t, double>{{1000000000000LL, -kInf}});
  CHECK(Unwrap(s->GetTrial(study, ended.number)).intermediate.empty());
  CHECK(Unwrap(s->GetTrial(study, ended.number)).attrs.empty());
  refused.clear();
  REQUIRE_OK(s->AddLazyWrites({}, &refused));
  CHECK(refused.empty());
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

TEMPLATE_TEST_CASE("what a trial consumed round-trips, in every state, unmeasured stays unset",
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
  CHECK(Unwrap(s->GetTrialPage(study, 0, 10, Curves::kLoad))[0].resources == MeasuredResources());
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
  CHECK(Unwrap(s->GetTrialPage(study, 0, 10, Curves::kLoad))[0].constraints ==
        complete.constraints);
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

  // A claim given back: any node may take the trial then, and only the claimer gives it back.
  TrialRecord back = Unwrap(a->CreateTrial(study, OneParam(2), 7));
  REQUIRE_OK(a->ClaimTrial(back.id));
  auto not_mine = b->ReleaseClaim(back.id);
  CHECK(not_mine.code() == Code::kFailedPrecondition);
  CHECK_THAT(not_mine.message(), Catch::Contains("claimed by node \"node-a\""));
  CHECK(Unwrap(a->GetTrial(study, back.number)).node == kNode);
  REQUIRE_OK(a->ReleaseClaim(back.id));
  CHECK(Unwrap(a->GetTrial(study, back.number)).node.empty());
  REQUIRE_OK(a->ReleaseClaim(back.id));  // unclaimed already: nothing to give back
  REQUIRE_OK(b->ClaimTrial(back.id));
  CHECK(Unwrap(a->GetTrial(study, back.number)).node == "node-b");
  CHECK(a->ReleaseClaim(t.id).code() == Code::kFailedPrecondition);  // RUNNING
  CHECK(a->ReleaseClaim(987654).code() == Code::kNotFound);

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

}  // namespace
}  // namespace triald::storage
