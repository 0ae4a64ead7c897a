// The StudyStore contract (daemon/storage/study_store.h) and the batches Storage promises, on
// every backend (backend_fixture.h).

#include "tests/daemon/storage/backend_fixture.h"

namespace triald::storage {
namespace {

using namespace contract;  // NOLINT: the suites' shared fixture

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
  SECTION("the submitter's choices outside the file are kept with the study") {
    NewStudy c = MakeStudy("gamma");
    c.submit.name = "gamma";
    c.submit.python = "/home/ålice/venv/bin/python3";
    c.submit.python_version = "3.11.7";
    StudyRecord rc = Unwrap(s->CreateStudy(c, 1002));
    for (const StudyRecord& got : {rc, Unwrap(s->GetStudy("gamma"))}) {
      CHECK(got.submit.name == "gamma");
      CHECK(got.submit.python == "/home/ålice/venv/bin/python3");
      CHECK(got.submit.python_version == "3.11.7");
    }
    CHECK(Unwrap(s->GetStudy("alpha")).submit.empty());  // none given: none stored
  }
  SECTION("a study whose sampler or storage failed is stored FAILED") {
    REQUIRE_OK(s->SetStudyState(ra.id, StudyState::kFailed, 2002));
    StudyRecord got = Unwrap(s->GetStudy("alpha"));
    CHECK(got.state == StudyState::kFailed);
    CHECK(got.finished_at == 2002);
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

TEMPLATE_TEST_CASE("SetStudySubmit replaces the submit choices, and they read back whole",
                   "[storage][control]", TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  StudyRecord a = Unwrap(s->CreateStudy(MakeStudy("a"), 1));
  StudyRecord b = Unwrap(s->CreateStudy(MakeStudy("b"), 1));
  config::SubmitChoices choices;
  choices.python = "/usr/bin/python3";
  choices.metric_names = {"loss", "tokens/s"};
  choices.code = {config::CodeFile{"/srv/x.py", std::string(64, 'a'), 12, "print('x')\n"}};
  REQUIRE_OK(s->SetStudySubmit(a.id, choices));
  StudyRecord got = Unwrap(s->GetStudy("a"));
  CHECK(got.submit.python == "/usr/bin/python3");
  CHECK(got.submit.metric_names == std::vector<std::string>{"loss", "tokens/s"});
  REQUIRE(got.submit.code.size() == 1);
  CHECK(got.submit.code[0] == choices.code[0]);
  CHECK(Unwrap(s->GetStudy("b")).submit.metric_names.empty());  // only the one study
  REQUIRE_OK(s->SetStudySubmit(a.id, config::SubmitChoices{}));
  CHECK(Unwrap(s->GetStudy("a")).submit.empty());
  CHECK(s->SetStudySubmit(a.id + b.id + 100, choices).code() == Code::kNotFound);
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

}  // namespace
}  // namespace triald::storage
