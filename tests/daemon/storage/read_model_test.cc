// The ReadModel contract (daemon/storage/read_model.h), on every backend (backend_fixture.h).

#include "tests/daemon/storage/backend_fixture.h"

namespace triald::storage {
namespace {

using namespace contract;  // NOLINT: the suites' shared fixture

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

TEMPLATE_TEST_CASE("GetRecentFailures: the last failed trials, newest first, details' ends only",
                   "[storage]", TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  int64_t a = Unwrap(s->CreateStudy(MakeStudy("a"), 1)).id;
  int64_t b = Unwrap(s->CreateStudy(MakeStudy("b"), 1)).id;
  CHECK(Unwrap(s->GetRecentFailures(a, 10)).empty());
  const std::string long_detail = "exited with code 1; worker said: Traceback\n" +
                                  std::string(5000, 'x') + "\nValueError: läst line";
  for (int i = 0; i < 4; ++i) {
    TrialRecord t = Unwrap(s->CreateTrial(a, OneParam(i), 1));
    REQUIRE_OK(s->MarkRunning(t.id, {100 + i, 100 + i, 1000}, 2));
    model::TrialOutcome out = Outcome(i == 2 ? TrialState::kComplete : TrialState::kFail, 1);
    if (i != 2) {
      out.fail.reason = i == 0 ? "signal" : "exit";
      out.fail.exit_code = i == 0 ? -1 : 1;
      out.fail.signal = i == 0 ? 11 : 0;
      out.fail.detail = i == 0 ? "killed by SIGSEGV" : long_detail;
      out.fail.stderr_tail = "not read";
    }
    REQUIRE_OK(s->FinishTrial(t.id, out, 3));
  }
  TrialRecord other = Unwrap(s->CreateTrial(b, OneParam(9), 1));
  REQUIRE_OK(s->MarkRunning(other.id, {200, 200, 1000}, 2));
  model::TrialOutcome out = Outcome(TrialState::kFail, 1);
  out.fail.reason = "oom";
  REQUIRE_OK(s->FinishTrial(other.id, out, 3));

  std::vector<model::FailInfo> got = Unwrap(s->GetRecentFailures(a, 10));
  REQUIRE(got.size() == 3);  // trials 3, 1, 0
  CHECK(got[0].reason == "exit");
  CHECK(got[0].exit_code == 1);
  CHECK(got[0].detail.size() <= static_cast<size_t>(ReadModel::kRecentFailureDetailBytes));
  CHECK(model::FailSummary(got[0]) == "ValueError: läst line");
  CHECK(got[0].stderr_tail.empty());
  CHECK(got[2].reason == "signal");
  CHECK(got[2].signal == 11);
  CHECK(got[2].detail == "killed by SIGSEGV");
  CHECK(Unwrap(s->GetRecentFailures(a, 1)).size() == 1);
  CHECK(Unwrap(s->GetRecentFailures(b, 10)).size() == 1);
  CHECK(s->GetRecentFailures(a, 0).status().code() == common::Code::kInvalidArgument);
  CHECK(s->GetRecentFailures(9999, 10).status().code() == common::Code::kNotFound);
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
  auto page = Unwrap(s->GetTrialPage(study, 2, 3, Curves::kLoad));
  CHECK(TrialNumbers(page) == std::vector<int>{2, 3, 4});
  for (const auto& t : page) RequireSameTrial(t, all[t.number]);
  CHECK(TrialNumbers(Unwrap(s->GetTrialPage(study, 5, 100, Curves::kLoad))) ==
        std::vector<int>{5, 6});
  CHECK(TrialNumbers(Unwrap(s->GetTrialPage(study, 0, 1, Curves::kLoad))) == std::vector<int>{0});
  CHECK(Unwrap(s->GetTrialPage(study, 7, 10, Curves::kLoad)).empty());
  CHECK(TrialNumbers(Unwrap(s->GetTrialPage(other, 0, 1000, Curves::kLoad))) ==
        std::vector<int>{0, 1, 2});
  // The pages of a study put together are GetTrials.
  std::vector<int> joined;
  for (int from = 0; from < 7; from += 2) {
    for (int n : TrialNumbers(Unwrap(s->GetTrialPage(study, from, 2, Curves::kLoad))))
      joined.push_back(n);
  }
  CHECK(joined == TrialNumbers(all));

  auto bad = s->GetTrialPage(study, 0, 0, Curves::kLoad);
  REQUIRE_CODE(bad, Code::kInvalidArgument);
  CHECK_THAT(bad.status().message(), Catch::Contains("limit of 0"));
  REQUIRE_CODE(s->GetTrialPage(study, -1, 5, Curves::kLoad), Code::kInvalidArgument);
  auto missing = s->GetTrialPage(987654, 0, 5, Curves::kLoad);
  REQUIRE_CODE(missing, Code::kNotFound);
  CHECK_THAT(missing.status().message(), Catch::Contains("987654"));
}

TEMPLATE_TEST_CASE("Curves::kCount reads trials without their intermediate values, counted",
                   "[storage]", TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  auto [study, other, all] = NumberedTrials(*s, "counted", 5);
  REQUIRE_OK(s->AddIntermediate(all[3].id, 3, 0.25));
  REQUIRE_OK(s->AddIntermediate(all[3].id, 4, std::nan("")));
  auto loaded = Unwrap(s->GetTrialPage(study, 0, 5, Curves::kLoad));
  auto counted = Unwrap(s->GetTrialPage(study, 0, 5, Curves::kCount));
  REQUIRE(counted.size() == loaded.size());
  for (size_t i = 0; i < loaded.size(); ++i) {
    INFO("trial " << loaded[i].number);
    CHECK(loaded[i].intermediate_not_loaded == 0);
    CHECK(counted[i].intermediate.empty());
    CHECK(counted[i].IntermediateSteps() == loaded[i].IntermediateSteps());
    // Everything else is as loaded.
    TrialRecord with = counted[i];
    with.intermediate = loaded[i].intermediate;
    with.intermediate_not_loaded = 0;
    RequireSameTrial(with, loaded[i]);
  }
  CHECK(counted[3].intermediate_not_loaded == 3);

  // The best trial comes counted: a summary costs the same whatever the trial reported.
  REQUIRE_OK(s->FinishTrial(all[3].id, Outcome(TrialState::kComplete, 1.0), 9));
  auto best = Unwrap(s->GetBestTrial(study, config::Direction::kMinimize));
  REQUIRE(best.has_value());
  CHECK(best->number == 3);
  CHECK(best->intermediate.empty());
  CHECK(best->IntermediateSteps() == 3);
}

}  // namespace
}  // namespace triald::storage
