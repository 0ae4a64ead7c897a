// LazyWriter (daemon/scheduler/lazy_writer.h): the trials' lazily durable writes on a thread and
// a storage connection of their own. Two connections to one SQLite file play the event loop's
// storage and the writer's; the writer's is a FlakyStorage, which goes down (an outage) or holds
// a write (a frozen server) when a test says so.

#include "daemon/scheduler/lazy_writer.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon/control/ping_board.h"
#include "daemon/scheduler.h"
#include "daemon/storage/sqlite_storage.h"
#include "tests/daemon/fakes.h"
#include "tests/daemon/flaky_storage.h"
#include "tests/daemon/scheduler_harness.h"
#include "tests/support/temp_dir.h"

namespace triald::daemon {
namespace {

using common::Status;
using Write = PendingWrites::Write;

std::unique_ptr<storage::Storage> Open(const std::string& path) {
  storage::SqliteOptions o;
  o.path = path;
  o.node = "node-a";
  auto s = storage::OpenSqliteStorage(o);
  INFO(s.status().ToString());
  REQUIRE(s.ok());
  return std::move(s).value();
}

// Holds the writer's writes while closed: a frozen server.
class Gate {
 public:
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  void Pass() {
    std::unique_lock<std::mutex> lock(mu_);
    ++waiting_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
    --waiting_;
  }
  // Until a write waits at the gate.
  void AwaitWaiter() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return waiting_ > 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  int waiting_ = 0;
};

// What the writer posted to the event loop, run on the test's thread by Drain().
class Loop {
 public:
  void Post(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    posted_.push_back(std::move(fn));
  }
  void Drain() {
    std::vector<std::function<void()>> fns;
    {
      std::lock_guard<std::mutex> lock(mu_);
      fns.swap(posted_);
    }
    for (auto& fn : fns) fn();
  }

 private:
  std::mutex mu_;
  std::vector<std::function<void()>> posted_;
};

struct Fixture {
  testing::TempDir dir;
  std::unique_ptr<storage::Storage> loop_store = Open(dir.File("triald.db"));
  testing::FlakyStorage* flaky = nullptr;
  Gate gate;
  Loop loop;
  std::vector<Status> outages;
  std::vector<std::pair<int64_t, Status>> refused;
  int64_t study_id = 0;

  std::unique_ptr<LazyWriter> Writer(size_t batch = 256, size_t max_writes = 1'000'000) {
    auto flaky_store = std::make_shared<testing::FlakyStorage>(Open(dir.File("triald.db")));
    flaky = flaky_store.get();
    flaky->before_lazy_write = [this] { gate.Pass(); };
    LazyWriter::Options o;
    o.storage = flaky_store;
    o.post = [this](std::function<void()> fn) { loop.Post(std::move(fn)); };
    o.on_outage = [this](const Status& st) { outages.push_back(st); };
    o.on_refused = [this](int64_t id, const Status& st) { refused.emplace_back(id, st); };
    o.batch = batch;
    o.max_writes = max_writes;
    return std::make_unique<LazyWriter>(std::move(o));
  }

  model::TrialRecord Trial() {
    if (study_id == 0) {
      model::NewStudy ns;
      ns.name = "lazy";
      ns.n_trials = 10;
      ns.spec_toml = "[study]\nname = \"lazy\"\n";
      auto st = loop_store->CreateStudy(ns, 1.0);
      REQUIRE(st.ok());
      study_id = st->id;
    }
    auto t = loop_store->CreateTrial(study_id, {}, 2.0);
    REQUIRE(t.ok());
    REQUIRE(loop_store->MarkRunning(t->id, {4242, 4242, 1}, 3.0).ok());
    return *t;
  }

  std::map<int64_t, double> Intermediate(int number) {
    auto t = loop_store->GetTrial(study_id, number);
    REQUIRE(t.ok());
    return t->intermediate;
  }
};

// Until `done` (a few seconds at most: the writer has its own thread), running what the writer
// posted to the loop meanwhile when given one.
void Await(const std::function<bool()>& done, Loop* loop = nullptr) {
  for (int i = 0; i < 5000 && !done(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (loop != nullptr) loop->Drain();
  }
  REQUIRE(done());
}
// Until `queued` says nothing waits.
void AwaitNone(const std::function<size_t()>& queued) {
  Await([&queued] { return queued() == 0; });
}
void AwaitIdle(const LazyWriter& w) {
  AwaitNone([&w] { return w.queued(); });
}

TEST_CASE("lazy writer: every write stored, in the order it came, on its own thread",
          "[lazy_writer]") {
  Fixture f;
  model::TrialRecord t = f.Trial();
  std::unique_ptr<LazyWriter> w = f.Writer(/*batch=*/7);
  const std::thread::id loop_thread = std::this_thread::get_id();
  std::thread::id writing_thread;
  f.flaky->before_lazy_write = [&] { writing_thread = std::this_thread::get_id(); };
  for (int step = 0; step < 100; ++step) w->Write(Write::Intermediate(t.id, step, step * 0.5));
  w->Write(Write::Intermediate(t.id, 3, -1.0));  // a step again: the last value wins
  w->Write(Write::Attr(t.id, "epoch", "\"last\""));
  AwaitIdle(*w);
  CHECK(writing_thread != loop_thread);
  std::map<int64_t, double> got = f.Intermediate(t.number);
  REQUIRE(got.size() == 100);
  CHECK(got[0] == 0.0);
  CHECK(got[3] == -1.0);
  CHECK(got[99] == 49.5);
  auto stored = f.loop_store->GetTrial(f.study_id, t.number);
  REQUIRE(stored.ok());
  CHECK(stored->attrs.at("epoch") == "\"last\"");
  CHECK(f.outages.empty());
  CHECK(f.refused.empty());
}

TEST_CASE("lazy writer: a frozen server never makes a write wait, a trial's end takes its own",
          "[lazy_writer]") {
  Fixture f;
  model::TrialRecord held = f.Trial();
  model::TrialRecord other = f.Trial();
  std::unique_ptr<LazyWriter> w = f.Writer(/*batch=*/1);
  f.gate.Close();
  w->Write(Write::Intermediate(held.id, 1, 1.0));
  f.gate.AwaitWaiter();  // that write is in flight, held inside "the server"
  // Writes keep going into the queue while the server holds the one in flight.
  for (int step = 1; step <= 1000; ++step) w->Write(Write::Intermediate(other.id, step, 2.0));
  w->Write(Write::Intermediate(held.id, 2, 3.0));
  CHECK(w->queued() == 1002);
  // The other trial's writes are not in flight: its end takes them at once, in order.
  std::vector<Write> taken = w->TakeTrial(other.id);
  REQUIRE(taken.size() == 1000);
  CHECK(taken.front().step == 1);
  CHECK(taken.back().step == 1000);
  CHECK(w->queued() == 2);
  CHECK(w->TakeTrial(other.id).empty());
  // The held trial's first write is in flight: its end waits for that batch.
  auto end = std::async(std::launch::async, [&] { return w->TakeTrial(held.id); });
  CHECK(end.wait_for(std::chrono::milliseconds(100)) == std::future_status::timeout);
  f.gate.Open();
  std::vector<Write> rest = end.get();
  // The write in flight was stored; the one behind it was handed back (unless the writer took
  // it first, in which case it was stored before TakeTrial could return).
  std::map<int64_t, double> got = f.Intermediate(held.number);
  CHECK(got.at(1) == 1.0);
  CHECK(rest.size() + got.count(2) == 1);
  CHECK(f.Intermediate(other.number).empty());  // handed back, not written by the writer
}

TEST_CASE(
    "lazy writer: an outage keeps the writes in order, says so once, and they go once "
    "storage is back",
    "[lazy_writer]") {
  Fixture f;
  model::TrialRecord t = f.Trial();
  std::unique_ptr<LazyWriter> w = f.Writer(/*batch=*/4);
  f.flaky->down = true;
  for (int step = 0; step < 10; ++step) w->Write(Write::Intermediate(t.id, step, step));
  // Tried and refused: kept, one outage posted however many batches failed.
  Await([&f] { return !f.outages.empty(); }, &f.loop);
  REQUIRE(f.outages.size() == 1);
  CHECK(f.outages[0].code() == common::Code::kUnavailable);
  CHECK(w->queued() == 10);
  w->Write(Write::Intermediate(t.id, 0, 100.0));  // behind the kept one of step 0: it wins
  f.flaky->down = false;
  w->Resume();
  AwaitIdle(*w);
  f.loop.Drain();
  CHECK(f.outages.size() == 1);
  std::map<int64_t, double> got = f.Intermediate(t.number);
  REQUIRE(got.size() == 10);
  CHECK(got[0] == 100.0);
  CHECK(got[9] == 9.0);
}

TEST_CASE("lazy writer: writes kept elsewhere go in front, in order, and a trial's end takes them",
          "[lazy_writer]") {
  Fixture f;
  model::TrialRecord kept = f.Trial();
  model::TrialRecord other = f.Trial();
  std::unique_ptr<LazyWriter> w = f.Writer(/*batch=*/4);
  f.gate.Close();
  w->Write(Write::Intermediate(other.id, 1, 1.0));
  f.gate.AwaitWaiter();  // in flight, held inside "the server"
  w->Write(Write::Intermediate(other.id, 2, 2.0));
  // The scheduler's kept writes (its probe succeeded), then a newer one of the same step.
  w->WriteFirst({Write::Intermediate(kept.id, 0, 5.0), Write::Intermediate(kept.id, 3, 1.0)});
  w->WriteFirst({});
  CHECK(w->queued() == 4);
  // A kept end's retry takes them back, oldest first.
  std::vector<Write> taken = w->TakeTrial(kept.id);
  REQUIRE(taken.size() == 2);
  CHECK(taken[0].step == 0);
  CHECK(taken[1].step == 3);
  w->WriteFirst(std::move(taken));
  w->Write(Write::Intermediate(kept.id, 3, 2.0));  // after them: it wins
  f.gate.Open();
  AwaitIdle(*w);
  std::map<int64_t, double> got = f.Intermediate(kept.number);
  REQUIRE(got.size() == 2);
  CHECK(got[0] == 5.0);
  CHECK(got[3] == 2.0);
  CHECK(f.Intermediate(other.number).size() == 2);
}

TEST_CASE("lazy writer: a write refused for itself is dropped and reported, the batch goes on",
          "[lazy_writer]") {
  Fixture f;
  model::TrialRecord ended = f.Trial();
  model::TrialRecord open = f.Trial();
  model::TrialOutcome out;
  out.state = model::TrialState::kComplete;
  out.value = 1.0;
  out.values = {1.0};
  REQUIRE(f.loop_store->FinishTrial(ended.id, out, 4.0).ok());
  std::unique_ptr<LazyWriter> w = f.Writer();
  f.gate.Close();
  w->Write(Write::Intermediate(open.id, 1, 1.0));
  f.gate.AwaitWaiter();
  w->Write(Write::Intermediate(ended.id, 1, 1.0));  // the trial ended elsewhere
  w->Write(Write::Intermediate(open.id, 2, 2.0));
  f.gate.Open();
  AwaitIdle(*w);
  Await([&f] { return !f.refused.empty(); }, &f.loop);
  REQUIRE(f.refused.size() == 1);
  CHECK(f.refused[0].first == ended.id);
  CHECK(f.refused[0].second.code() == common::Code::kFailedPrecondition);
  CHECK(f.Intermediate(open.number) == std::map<int64_t, double>{{1, 1.0}, {2, 2.0}});
  CHECK(f.outages.empty());
}

TEST_CASE("lazy writer: bounded while storage holds a write, and the rest written at the end",
          "[lazy_writer]") {
  Fixture f;
  model::TrialRecord t = f.Trial();
  {
    std::unique_ptr<LazyWriter> w = f.Writer(/*batch=*/256, /*max_writes=*/10);
    f.gate.Close();
    w->Write(Write::Intermediate(t.id, 0, 0.0));
    f.gate.AwaitWaiter();  // in flight, held
    for (int step = 1; step < 15; ++step) w->Write(Write::Intermediate(t.id, step, step));
    // Ten in all, the one in flight included: the oldest waiting ones (steps 1 to 5) went.
    CHECK(w->queued() == 10);
    CHECK(w->dropped() == 5);
    f.gate.Open();  // and destroyed at once: what its thread did not write, the destructor does
  }
  std::map<int64_t, double> got = f.Intermediate(t.number);
  std::vector<int64_t> steps;
  for (const auto& [step, value] : got) steps.push_back(step);
  CHECK(steps == std::vector<int64_t>{0, 6, 7, 8, 9, 10, 11, 12, 13, 14});
}

TEST_CASE(
    "scheduler with a lazy writer: reports never wait on the loop, an end stores its own "
    "first, and the writer's outage holds the daemon",
    "[lazy_writer][scheduler]") {
  testing::TempDir dir;
  Gate gate;
  Loop loop;
  auto writes = std::make_shared<testing::FlakyStorage>(Open(dir.File("triald.db")));
  // Held before its transaction begins: SQLite's one writer lock would hold the loop's writes
  // too, where a server's row locks do not (the daemon writes this way on PostgreSQL only).
  writes->before_batch = [&gate] { gate.Pass(); };
  SchedulerHarnessOptions o;
  storage::SqliteOptions so;
  so.path = dir.File("triald.db");
  so.node = "node-a";
  o.sqlite = so;
  o.post = [&loop](std::function<void()> fn) { loop.Post(std::move(fn)); };
  o.trial_write_storage = writes;
  SchedulerHarness h(std::move(o));
  auto idle = [&] {
    AwaitNone([&h] { return h.scheduler().lazy_writes_queued(); });
    loop.Drain();
  };
  FakeLauncher& l = h.launcher();
  Sweep sweep;
  sweep.n_trials = 2;
  sweep.parallelism = 2;
  h.SubmitOk(sweep);
  REQUIRE(l.launch_count() == 2);
  Launched& running = l.launch(0);
  Launched& ending = l.launch(1);
  l.Report(running, 1, 0.5);
  l.Attr(running, "epoch", "1");
  idle();
  std::vector<TrialRecord> trials = h.Trials("study");
  CHECK(trials[0].intermediate == std::map<int64_t, double>{{1, 0.5}});
  CHECK(trials[0].attrs.at("epoch") == "1");

  // A frozen server: the writer waits inside it; the reports and the other trial's end do not
  // (on the event loop, this would never return).
  gate.Close();
  l.Report(running, 2, 0.25);
  gate.AwaitWaiter();
  l.Report(running, 3, 0.125);
  l.Report(ending, 1, 4.0);
  l.Complete(ending, 2.0);  // its report is taken back and stored with its end
  trials = h.Trials("study");
  CHECK(trials[1].state == TrialState::kComplete);
  CHECK(trials[1].intermediate == std::map<int64_t, double>{{1, 4.0}});
  CHECK(trials[0].intermediate == std::map<int64_t, double>{{1, 0.5}});
  gate.Open();
  idle();
  CHECK(h.Trials("study")[0].intermediate ==
        std::map<int64_t, double>{{1, 0.5}, {2, 0.25}, {3, 0.125}});

  // The writer's storage away: the daemon holds, as for a write of its own; back, all is stored.
  writes->down = true;
  l.Report(running, 4, 0.0625);
  Await([&h] { return h.scheduler().storage_outage().held(); }, &loop);
  // `status --json`, `ping --json` and `trialctl status` count the writes kept.
  CHECK(StorageHoldOf(h.scheduler()).writes_kept >= 1);
  writes->down = false;
  h.PassWait();  // the scheduler's probe succeeds: the writer is told to try at once
  CHECK_FALSE(h.scheduler().storage_outage().held());
  idle();
  CHECK(h.Trials("study")[0].intermediate.count(4) == 1);
  l.Complete(running, 1.0);
  trials = h.Trials("study");
  CHECK(trials[0].state == TrialState::kComplete);
  CHECK(trials[0].intermediate.size() == 4);
}

TEST_CASE(
    "shared storage: reading the study again keeps what this node's trial reported and the "
    "lazy writer has not stored yet",
    "[lazy_writer][scheduler][shared]") {
  testing::TempDir dir;
  Gate gate;
  Loop loop;
  storage::SqliteOptions so;
  so.path = dir.File("shared.db");
  so.node = "node-a";
  so.instance = "host-a:/srv/triald";
  so.shared = true;
  auto opened = storage::OpenSqliteStorage(so);
  REQUIRE(opened.ok());
  auto writes = std::make_shared<testing::FlakyStorage>(std::move(opened).value());
  writes->before_batch = [&gate] { gate.Pass(); };
  SchedulerHarnessOptions o;
  o.sqlite = so;
  o.post = [&loop](std::function<void()> fn) { loop.Post(std::move(fn)); };
  o.trial_write_storage = writes;
  SchedulerHarness h(std::move(o));
  REQUIRE(h.scheduler().Recover().ok());
  FakeLauncher& l = h.launcher();
  Sweep sweep;
  sweep.n_trials = 1;
  h.SubmitOk(sweep);
  REQUIRE(l.launch_count() == 1);
  gate.Close();
  l.Report(l.launch(0), 1, 0.5);
  gate.AwaitWaiter();  // the writer holds step 1; step 2 waits behind it
  l.Report(l.launch(0), 2, 0.25);
  h.scheduler().SharedTick();  // reads the study's open trials from storage again
  const StudyCache* study = h.scheduler().active_study("study");
  REQUIRE(study != nullptr);
  CHECK(study->trials.at(0).intermediate == std::map<int64_t, double>{{1, 0.5}, {2, 0.25}});
  gate.Open();
  AwaitNone([&h] { return h.scheduler().lazy_writes_queued(); });
  CHECK(h.Trials("study").at(0).intermediate == std::map<int64_t, double>{{1, 0.5}, {2, 0.25}});
}

}  // namespace
}  // namespace triald::daemon
