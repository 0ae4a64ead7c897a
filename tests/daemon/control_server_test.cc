// The control server on a thread of its own (daemon/control/server.h): `ping` is
// answered there while the event loop is held (as by a storage call that does not come back),
// `status` too from the loop's last reply when storage is what holds it, every other verb runs
// on the loop and is answered once the loop runs again (with a ReadThread, the read verbs read
// and the control changes are stored there first), and a streamed reply crosses between
// the two threads piece by piece. Real sockets, a real asio loop on a
// thread of the test, the scheduler harness's scheduler and SQLite in memory.
#include <unistd.h>

#include <atomic>
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "daemon/control/ping_board.h"
#include "daemon/control/server.h"
#include "daemon/control/verbs.h"
#include "daemon/storage/sqlite_storage.h"
#include "daemon/storage/wait_gauge.h"
#include "proto/control.h"
#include "tests/daemon/flaky_storage.h"
#include "tests/daemon/scheduler_harness.h"
#include "tests/integration/raw_socket.h"
#include "tests/support/loop_thread.h"

namespace triald::daemon {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using testing::ConnectRaw;
using testing::ReadLine;
using testing::ReplyCode;
using testing::SendAll;

constexpr int kTrials = 600;  // more than two pieces of a streamed reply (kTrialsPerPiece)

// A study of kTrials finished trials, stored directly.
void StoreBigStudy(storage::Storage& s) {
  model::NewStudy ns;
  ns.name = "big";
  ns.direction = config::Direction::kMinimize;
  ns.n_trials = kTrials;
  ns.spec_toml = "[study]\n";
  ns.spec_path = "/big.toml";
  auto study = s.CreateStudy(ns, 1);
  REQUIRE(study.ok());
  config::Distribution d;
  d.type = config::ParamType::kFloat;
  d.low = 0;
  d.high = 1000;
  REQUIRE(s.BeginBatch().ok());
  for (int i = 0; i < kTrials; ++i) {
    auto t = s.CreateTrial(study->id, {{"x", {static_cast<double>(i), d}}}, 10);
    REQUIRE(t.ok());
    REQUIRE(s.MarkRunning(t->id, {100, 100, 1}, 20).ok());
    model::TrialOutcome o;
    o.state = model::TrialState::kComplete;
    o.value = i;
    REQUIRE(s.FinishTrial(t->id, o, 22).ok());
  }
  REQUIRE(s.CommitBatch().ok());
}

std::string FixtureDir() {
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("triald-control-server-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// `reads`: the harness's storage is a file, and the server's ReadThread has a connection of its
// own to it (a FlakyStorage: read_storage).
SchedulerHarnessOptions FlakyHarness(const std::string& dir, bool reads) {
  SchedulerHarnessOptions o;
  o.flaky = true;  // before_get_study holds a `status` inside storage
  if (reads) {
    storage::SqliteOptions so;
    so.path = dir + "/triald.db";
    o.sqlite = so;
  }
  return o;
}

// The event loop on a thread of the test, and a control server on a thread of its own.
struct Fixture {
  // `with_admissions`: a `submit`'s checks run on a TaskThread of the server's.
  explicit Fixture(bool with_reads = false, bool with_admissions = false)
      : dir(FixtureDir()), h(FlakyHarness(dir, with_reads)) {
    StoreBigStudy(h.storage());
    board = std::make_unique<PingBoard>(dir, h.node(), false);
    board->Publish(h.scheduler());
    ControlServerOptions o;
    o.io = &loop.io();
    o.ping_board = board.get();
    o.storage_wait = &storage_wait;
    o.scheduler = &h.scheduler();
    o.storage = &h.storage();
    if (with_reads) {
      storage::SqliteOptions so;
      so.path = dir + "/triald.db";
      auto opened = storage::OpenSqliteStorage(so);
      REQUIRE(opened.ok());
      auto flaky = std::make_unique<testing::FlakyStorage>(std::move(opened).value());
      read_storage = flaky.get();
      read_storage->gauge = &read_wait;
      reads = std::make_shared<ReadThread>(std::move(flaky));
      o.reads = reads;
    }
    if (with_admissions) o.admissions = std::make_shared<TaskThread>();
    o.socket_path = dir + "/triald.sock";
    o.state_dir = dir;
    o.access.daemon_uid = ::geteuid();
    o.access.allowed_gid = ::getegid();
    server = std::make_unique<ControlServer>(o);
    common::Status st = server->Start();
    INFO(st.ToString());
    REQUIRE(st.ok());
  }
  ~Fixture() {
    loop.StopThenDestroy(server);
    reads.reset();
    std::filesystem::remove_all(dir);
  }

  std::string dir;
  SchedulerHarness h;
  testing::LoopThread loop;
  std::unique_ptr<PingBoard> board;
  storage::WaitGauge storage_wait;  // what the test says of storage's waits
  storage::WaitGauge read_wait;     // ... and of the ReadThread's storage's
  std::shared_ptr<ReadThread> reads;
  testing::FlakyStorage* read_storage = nullptr;  // the ReadThread's (with_reads)
  std::unique_ptr<ControlServer> server;

  std::shared_ptr<std::promise<void>> HoldLoop() { return loop.Hold(); }

  common::UniqueFd Connect() {
    common::UniqueFd fd = ConnectRaw(dir + "/triald.sock");
    REQUIRE(fd.valid());
    return fd;
  }
};

std::string Request(const std::string& verb, json::object args = {}) {
  return proto::EncodeRequest(verb, args);
}

TEST_CASE(
    "control server on its own thread: ping answers while the loop is held, other verbs "
    "once it runs again",
    "[control]") {
  Fixture f;
  common::UniqueFd pinger = f.Connect();
  common::UniqueFd reader = f.Connect();
  REQUIRE(SendAll(pinger.get(), Request("ping")));
  REQUIRE(ReplyCode(ReadLine(pinger.get())) == "ok");

  auto release = f.HoldLoop();
  // Held: ping is answered on the server's thread, with what the loop last published.
  REQUIRE(SendAll(pinger.get(), Request("ping")));
  const std::string pong = ReadLine(pinger.get());
  REQUIRE(ReplyCode(pong) == "ok");
  const json::value ping = json::parse(pong);
  CHECK(ping.at("result").at("pid").as_int64() == ::getpid());
  CHECK(ping.at("result").at("state_dir").as_string() == f.dir);
  CHECK(ping.at("result").at("storage").is_null());
  // A verb of the loop waits for it: nothing comes while it is held.
  REQUIRE(SendAll(reader.get(), Request("studies")));
  CHECK(ReadLine(reader.get(), 0.5) == "<timeout>");
  // Pings go on meanwhile, on a connection of their own and on a new one.
  REQUIRE(SendAll(pinger.get(), Request("ping")));
  CHECK(ReplyCode(ReadLine(pinger.get())) == "ok");
  common::UniqueFd late = f.Connect();
  REQUIRE(SendAll(late.get(), Request("ping")));
  CHECK(ReplyCode(ReadLine(late.get())) == "ok");

  release->set_value();
  const std::string studies = ReadLine(reader.get());
  REQUIRE(ReplyCode(studies) == "ok");
  CHECK(json::parse(studies).at("result").as_array().size() == 1);
}

TEST_CASE(
    "control server on its own thread: a streamed reply crosses piece by piece, and a "
    "refused or unknown verb is an ordinary error",
    "[control]") {
  Fixture f;
  common::UniqueFd c = f.Connect();
  REQUIRE(SendAll(c.get(), Request("trials", {{"study", "big"}})));
  const std::string line = ReadLine(c.get());
  REQUIRE(ReplyCode(line) == "ok");
  const json::value reply = json::parse(line);
  const json::array& trials = reply.at("result").as_array();
  REQUIRE(trials.size() == kTrials);
  for (int i = 0; i < kTrials; ++i) CHECK(trials[i].at("number").as_int64() == i);

  // The same connection serves the next requests, errors included.
  REQUIRE(SendAll(c.get(), Request("nosuchverb")));
  CHECK(ReplyCode(ReadLine(c.get())) == "invalid_argument");
  REQUIRE(SendAll(c.get(), Request("status", {{"study", "missing"}})));
  CHECK(ReplyCode(ReadLine(c.get())) == "not_found");
  REQUIRE(SendAll(c.get(), Request("status", {{"study", "big"}})));
  CHECK(ReplyCode(ReadLine(c.get())) == "ok");
}

TEST_CASE(
    "control server on its own thread: a client that leaves in the middle of a streamed "
    "reply costs nothing, and the server stops with requests still waiting for the loop",
    "[control]") {
  Fixture f;
  {
    common::UniqueFd c = f.Connect();
    REQUIRE(SendAll(c.get(), Request("trials", {{"study", "big"}})));
  }  // closed before reading anything
  auto release = f.HoldLoop();
  common::UniqueFd waiting = f.Connect();
  REQUIRE(SendAll(waiting.get(), Request("studies")));
  common::UniqueFd pinger = f.Connect();
  REQUIRE(SendAll(pinger.get(), Request("ping")));
  CHECK(ReplyCode(ReadLine(pinger.get())) == "ok");
  release->set_value();
  CHECK(ReplyCode(ReadLine(waiting.get())) == "ok");
  // Held again at the end: the fixture stops the loop and the server with a request posted.
  auto held = f.HoldLoop();
  REQUIRE(SendAll(waiting.get(), Request("studies")));
  std::thread([held] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    held->set_value();
  }).detach();
}

json::value Result(const std::string& line) {
  INFO(line);
  REQUIRE(ReplyCode(line) == "ok");
  return json::parse(line).at("result");
}

TEST_CASE(
    "control server on its own thread: status is answered from the loop's last reply while "
    "storage holds the loop, and only then",
    "[control]") {
  Fixture f;
  common::UniqueFd c = f.Connect();
  // Never asked yet: nothing to answer with, so it waits for the loop even while storage waits.
  {
    auto release = f.HoldLoop();
    f.storage_wait.Begin();
    REQUIRE(SendAll(c.get(), Request("status", {{"study", "big"}})));
    CHECK(ReadLine(c.get(), 0.3) == "<timeout>");
    f.storage_wait.End();
    release->set_value();
    const json::value fresh = Result(ReadLine(c.get()));
    CHECK(fresh.at("name").as_string() == "big");
    CHECK_FALSE(fresh.as_object().contains("from_memory"));
  }
  // Asked once: a loop held by storage answers from that reply, saying so.
  {
    auto release = f.HoldLoop();
    f.storage_wait.Begin();
    REQUIRE(SendAll(c.get(), Request("status", {{"study", "big"}})));
    const json::value memory = Result(ReadLine(c.get()));
    CHECK(memory.at("name").as_string() == "big");
    CHECK(memory.at("state") == json::value("RUNNING"));
    CHECK_THAT(std::string(memory.at("from_memory").as_string()),
               Catch::Contains("storage has kept the daemon waiting for") &&
                   Catch::Contains("as the daemon gave it"));
    // A study never asked for waits, as does a loop held for another reason.
    common::UniqueFd other = f.Connect();
    REQUIRE(SendAll(other.get(), Request("status", {{"study", "missing"}})));
    CHECK(ReadLine(other.get(), 0.3) == "<timeout>");
    f.storage_wait.End();
    common::UniqueFd busy = f.Connect();
    REQUIRE(SendAll(busy.get(), Request("status", {{"study", "big"}})));
    CHECK(ReadLine(busy.get(), 0.3) == "<timeout>");
    release->set_value();
    CHECK(ReplyCode(ReadLine(other.get())) == "not_found");
    CHECK_FALSE(Result(ReadLine(busy.get())).as_object().contains("from_memory"));
  }
  // The loop's own answer to the request answered from memory is dropped: the connection's next
  // reply is its next request's.
  REQUIRE(SendAll(c.get(), Request("studies")));
  CHECK(Result(ReadLine(c.get())).is_array());
  CHECK(ReadLine(c.get(), 0.3) == "<timeout>");
  // A verb that is not a read (even one refused) forgets the kept replies: no answer from before
  // a change.
  REQUIRE(SendAll(c.get(), Request("cancel", {{"study", "missing"}})));
  CHECK(ReplyCode(ReadLine(c.get())) == "not_found");
  auto release = f.HoldLoop();
  f.storage_wait.Begin();
  REQUIRE(SendAll(c.get(), Request("status", {{"study", "big"}})));
  CHECK(ReadLine(c.get(), 0.3) == "<timeout>");
  f.storage_wait.End();
  release->set_value();
  CHECK_FALSE(Result(ReadLine(c.get())).as_object().contains("from_memory"));
}

TEST_CASE(
    "control server on its own thread: a status the loop is running when storage stops "
    "answering is answered from the last reply, and the loop's late reply is dropped",
    "[control]") {
  Fixture f;
  common::UniqueFd c = f.Connect();
  REQUIRE(SendAll(c.get(), Request("status", {{"study", "big"}})));
  CHECK_FALSE(Result(ReadLine(c.get())).as_object().contains("from_memory"));
  // The next status reads storage, which stops answering inside it.
  auto inside = std::make_shared<std::promise<void>>();
  auto release = std::make_shared<std::promise<void>>();
  std::shared_future<void> released = release->get_future().share();
  auto once = std::make_shared<std::atomic<bool>>(false);
  f.h.flaky().before_get_study = [&f, inside, released, once] {
    if (once->exchange(true)) return;
    f.storage_wait.Begin();
    inside->set_value();
    released.wait();
    f.storage_wait.End();
  };
  REQUIRE(SendAll(c.get(), Request("status", {{"study", "big"}})));
  inside->get_future().wait();
  const json::value memory = Result(ReadLine(c.get()));
  CHECK(memory.at("name").as_string() == "big");
  CHECK(memory.as_object().contains("from_memory"));
  release->set_value();
  // The loop's own reply to it never comes; the next request's does.
  REQUIRE(SendAll(c.get(), Request("studies")));
  CHECK(Result(ReadLine(c.get())).is_array());
  CHECK(ReadLine(c.get(), 0.3) == "<timeout>");
}

TEST_CASE(
    "control server with a ReadThread: read verbs and code are answered while the loop is held, "
    "status is completed on the loop, a control change is stored off it and followed on it",
    "[control][reads]") {
  Fixture f(/*with_reads=*/true);
  common::UniqueFd c = f.Connect();
  auto release = f.HoldLoop();
  // The loop is held: the read verbs read on the ReadThread, a streamed one piece by piece.
  REQUIRE(SendAll(c.get(), Request("studies")));
  CHECK(Result(ReadLine(c.get())).as_array().size() == 1);
  REQUIRE(SendAll(c.get(), Request("trials", {{"study", "big"}})));
  const json::value trials = Result(ReadLine(c.get()));
  REQUIRE(trials.as_array().size() == kTrials);
  CHECK(trials.as_array()[kTrials - 1].at("number").as_int64() == kTrials - 1);
  REQUIRE(SendAll(c.get(), Request("status", {{"study", "missing"}})));
  CHECK(ReplyCode(ReadLine(c.get())) == "not_found");  // read, and refused, off the loop
  // `code` (a mutating verb for its access, but it only reads storage) is answered too.
  REQUIRE(SendAll(c.get(), Request("code", {{"study", "big"}})));
  const json::value code = Result(ReadLine(c.get()));
  CHECK(code.at("study").as_string() == "big");
  CHECK(code.at("files").as_array().empty());
  REQUIRE(SendAll(c.get(), Request("code", {{"study", "missing"}})));
  CHECK(ReplyCode(ReadLine(c.get())) == "not_found");
  // status is read, then waits for the loop for what only memory holds.
  REQUIRE(SendAll(c.get(), Request("status", {{"study", "big"}})));
  CHECK(ReadLine(c.get(), 0.3) == "<timeout>");
  common::UniqueFd changer = f.Connect();
  REQUIRE(SendAll(changer.get(), Request("cancel", {{"study", "missing"}})));
  CHECK(ReplyCode(ReadLine(changer.get())) == "not_found");  // refused off the loop
  // A pause is stored off the loop (a connection of the test's own sees it), and answered once
  // the loop has followed it.
  REQUIRE(SendAll(changer.get(), Request("pause", {{"study", "big"}})));
  CHECK(ReadLine(changer.get(), 0.3) == "<timeout>");
  // So are the metric names `set` names.
  common::UniqueFd namer = f.Connect();
  REQUIRE(SendAll(namer.get(),
                  Request("set", {{"study", "big"}, {"metric_names", json::array{"loss"}}})));
  CHECK(ReadLine(namer.get(), 0.3) == "<timeout>");
  {
    storage::SqliteOptions so;
    so.path = f.dir + "/triald.db";
    auto look = storage::OpenSqliteStorage(so);
    REQUIRE(look.ok());
    auto big = (*look)->GetStudy("big");
    REQUIRE(big.ok());
    CHECK(big->paused);
    CHECK(big->submit.metric_names == std::vector<std::string>{"loss"});
  }
  // Any other change runs on the loop.
  common::UniqueFd deleter = f.Connect();
  REQUIRE(SendAll(deleter.get(), Request("delete", {{"study", "missing"}})));
  CHECK(ReadLine(deleter.get(), 0.3) == "<timeout>");
  release->set_value();
  const json::value paused = Result(ReadLine(changer.get()));
  CHECK(paused.at("study").as_string() == "big");
  CHECK(paused.at("paused").as_bool());
  const json::value named = Result(ReadLine(namer.get()));
  CHECK(named.at("metric_names") == json::array{"loss"});
  CHECK(ReplyCode(ReadLine(deleter.get())) == "not_found");
  const json::value status = Result(ReadLine(c.get()));
  CHECK(status.at("name").as_string() == "big");
  for (const char* key : {"spawn", "storage", "fork_server", "slurm", "sampler", "failures"}) {
    INFO(key);
    CHECK(status.as_object().contains(key));
  }
  CHECK_FALSE(status.as_object().contains("from_memory"));
}

TEST_CASE(
    "control server with a ReadThread: status is answered from the last reply while the reads' "
    "storage waits, never from one read while a change ran",
    "[control][reads]") {
  Fixture f(/*with_reads=*/true);
  common::UniqueFd c = f.Connect();
  REQUIRE(SendAll(c.get(), Request("status", {{"study", "big"}})));
  CHECK_FALSE(Result(ReadLine(c.get())).as_object().contains("from_memory"));

  // The ReadThread's storage stops answering inside the next status: its last reply answers.
  auto hold_read = [&f](std::function<void()> inside_fn) {
    auto inside = std::make_shared<std::promise<void>>();
    auto release = std::make_shared<std::promise<void>>();
    std::shared_future<void> released = release->get_future().share();
    auto once = std::make_shared<std::atomic<bool>>(false);
    f.read_storage->before_get_study = [&f, inside, released, once, inside_fn] {
      if (once->exchange(true)) return;
      f.read_wait.Begin();
      if (inside_fn) inside_fn();
      inside->set_value();
      released.wait();
      f.read_wait.End();
    };
    return std::make_pair(inside, release);
  };
  {
    auto [inside, release] = hold_read(nullptr);
    REQUIRE(SendAll(c.get(), Request("status", {{"study", "big"}})));
    inside->get_future().wait();
    const json::value memory = Result(ReadLine(c.get()));
    CHECK(memory.at("name").as_string() == "big");
    CHECK_THAT(std::string(memory.at("from_memory").as_string()),
               Catch::Contains("storage has kept the daemon waiting for"));
    release->set_value();
    // Its own late reply is dropped: the next reply is the next request's.
    REQUIRE(SendAll(c.get(), Request("studies")));
    CHECK(Result(ReadLine(c.get())).is_array());
  }
  // Read, it waits for the loop, which is inside a storage call of its own (a trial's end, say):
  // that wait counts too.
  {
    auto release = f.HoldLoop();
    f.storage_wait.Begin();
    REQUIRE(SendAll(c.get(), Request("status", {{"study", "big"}})));
    const json::value memory = Result(ReadLine(c.get()));
    CHECK(memory.as_object().contains("from_memory"));
    f.storage_wait.End();
    release->set_value();
    REQUIRE(SendAll(c.get(), Request("studies")));
    CHECK(Result(ReadLine(c.get())).is_array());
  }
  // A status read while a change runs on the loop is not kept: it may be from before the
  // change. The change (a refused submit counts: without admissions it runs on the loop) comes
  // while the read waits inside storage.
  common::UniqueFd changer = f.Connect();
  {
    auto [inside, release] = hold_read([&] {
      REQUIRE(SendAll(changer.get(),
                      Request("submit", {{"sweep", "[study]\nname = 1\n"}, {"path", "/x.toml"}})));
      REQUIRE(ReplyCode(ReadLine(changer.get())) == "invalid_argument");
    });
    REQUIRE(SendAll(c.get(), Request("status", {{"study", "big"}})));
    inside->get_future().wait();
    // The change forgot the kept reply: nothing to answer from while the read waits.
    CHECK(ReadLine(c.get(), 0.3) == "<timeout>");
    release->set_value();
    CHECK_FALSE(Result(ReadLine(c.get())).as_object().contains("from_memory"));
  }
  // So the next status while the reads wait has nothing kept to answer from either.
  {
    auto [inside, release] = hold_read(nullptr);
    REQUIRE(SendAll(c.get(), Request("status", {{"study", "big"}})));
    inside->get_future().wait();
    CHECK(ReadLine(c.get(), 0.3) == "<timeout>");
    release->set_value();
    CHECK_FALSE(Result(ReadLine(c.get())).as_object().contains("from_memory"));
  }
}

}  // namespace
}  // namespace triald::daemon

namespace triald::daemon {
namespace {

TEST_CASE(
    "control server: a submit is checked off the loop, which answers meanwhile, then stored "
    "and started on it, and a refused one leaves nothing",
    "[control]") {
  // With a ReadThread (shared storage) the new study is stored there, with its connection.
  const bool with_reads = GENERATE(false, true);
  Fixture f(with_reads, /*with_admissions=*/true);
  std::filesystem::create_directories(testing::kSweepDir + "/run");
  std::atomic<int> stored_on_reads{0};
  if (with_reads) f.read_storage->before_batch = [&] { stored_on_reads.fetch_add(1); };
  // The checks wait here until the test lets them go, saying on which thread they run.
  std::promise<std::thread::id> checking;
  std::promise<void> go;
  std::shared_future<void> may_go = go.get_future().share();
  std::atomic<int> checks{0};
  f.h.BeforeSubmitCheck([&] {
    if (checks.fetch_add(1) == 0) {
      checking.set_value(std::this_thread::get_id());
      may_go.wait();
    }
  });
  std::thread::id loop_thread;
  {
    std::promise<std::thread::id> on_loop;
    asio::post(f.loop.io(), [&] { on_loop.set_value(std::this_thread::get_id()); });
    loop_thread = on_loop.get_future().get();
  }
  testing::Sweep sweep;
  sweep.name = "offloop";
  sweep.n_trials = 3;
  common::UniqueFd submitter = f.Connect();
  REQUIRE(SendAll(submitter.get(),
                  Request("submit", {{"sweep", sweep.Toml()}, {"path", sweep.Path()}})));
  std::future<std::thread::id> checked_on = checking.get_future();
  REQUIRE(checked_on.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK(checked_on.get() != loop_thread);

  // The checks hold: the loop answers another client, and nothing is stored yet.
  common::UniqueFd reader = f.Connect();
  REQUIRE(SendAll(reader.get(), Request("studies")));
  CHECK(Result(ReadLine(reader.get(), 5)).as_array().size() == 1);
  CHECK(ReadLine(submitter.get(), 0.2) == "<timeout>");
  CHECK(stored_on_reads.load() == 0);

  go.set_value();
  const json::value submitted = Result(ReadLine(submitter.get()));
  CHECK(submitted.at("study").as_string() == "offloop");
  CHECK(submitted.at("resumed").as_bool() == false);
  REQUIRE(SendAll(reader.get(), Request("studies")));
  CHECK(Result(ReadLine(reader.get())).as_array().size() == 2);
  // Started on the loop as any submission is.
  std::promise<size_t> live;
  asio::post(f.loop.io(), [&] { live.set_value(f.h.launcher().Live("offloop").size()); });
  CHECK(live.get_future().get() == 1);
  CHECK(stored_on_reads.load() == (with_reads ? 1 : 0));

  // A sweep the checks refuse is answered from there, naming the file and key; nothing stored.
  testing::Sweep bad = sweep;
  bad.name = "nowhere";
  bad.objective_extra = "workdir = \"/nonexistent/triald-admission\"\n";
  REQUIRE(
      SendAll(submitter.get(), Request("submit", {{"sweep", bad.Toml()}, {"path", bad.Path()}})));
  const std::string refused = ReadLine(submitter.get());
  CHECK(ReplyCode(refused) == "invalid_argument");
  CHECK_THAT(refused, Catch::Contains(bad.Path()) && Catch::Contains("workdir"));
  REQUIRE(SendAll(reader.get(), Request("studies")));
  CHECK(Result(ReadLine(reader.get())).as_array().size() == 2);
  // The same name again: checked off the loop, refused on it as a name in use.
  REQUIRE(SendAll(submitter.get(),
                  Request("submit", {{"sweep", sweep.Toml()}, {"path", sweep.Path()}})));
  const std::string in_use = ReadLine(submitter.get());
  CHECK(ReplyCode(in_use) == "already_exists");
  CHECK_THAT(in_use, Catch::Contains("[study] name = \\\"offloop\\\""));
  CHECK(checks.load() == 3);
  CHECK(stored_on_reads.load() == (with_reads ? 2 : 0));
}

}  // namespace
}  // namespace triald::daemon

namespace triald::daemon {
namespace {

// Runs `fn` on the fixture's event loop and returns what it returns.
template <typename Fn>
auto OnLoop(Fixture& f, Fn fn) {
  std::promise<decltype(fn())> done;
  asio::post(f.loop.io(), [&] { done.set_value(fn()); });
  return done.get_future().get();
}

TEST_CASE(
    "control server with a ReadThread: delete is stored there, its study held on the loop "
    "meanwhile, and refused as the loop refuses, and enqueue is checked there",
    "[control][reads]") {
  Fixture f(/*with_reads=*/true);
  std::filesystem::create_directories(testing::kSweepDir + "/run");
  common::UniqueFd c = f.Connect();
  // A study with a trial running here: refused, with the loop's message, and it goes on.
  testing::Sweep sweep;
  sweep.name = "live";
  sweep.n_trials = 2;
  REQUIRE(OnLoop(f, [&] { return f.h.Submit(sweep).ok(); }));
  REQUIRE(OnLoop(f, [&] { return f.h.launcher().Live("live").size(); }) == 1);
  REQUIRE(SendAll(c.get(), Request("delete", {{"study", "live"}})));
  const std::string refused = ReadLine(c.get());
  CHECK(ReplyCode(refused) == "failed_precondition");
  CHECK_THAT(refused, Catch::Contains("cannot delete study \\\"live\\\": 1 of its trials is "
                                      "running; expected none"));
  // Released: its next trial starts when the first ends.
  OnLoop(f, [&] {
    f.h.launcher().Complete(*f.h.launcher().Live("live").front(), 0.5);
    return 0;
  });
  CHECK(OnLoop(f, [&] { return f.h.launcher().launch_count(); }) == 2);

  // An enqueue goes by the ReadThread too (its checks there; on a storage of its own the
  // scheduler then enqueues on the loop): the verb's answers.
  REQUIRE(SendAll(c.get(), Request("enqueue", {{"study", "live"}, {"params", json::object{}}})));
  const std::string full = ReadLine(c.get());
  CHECK(ReplyCode(full) == "failed_precondition");
  CHECK_THAT(full, Catch::Contains("already has its n_trials = 2 trials"));
  REQUIRE(SendAll(c.get(), Request("enqueue", {{"study", "big"}, {"params", json::object{}}})));
  CHECK_THAT(ReadLine(c.get()), Catch::Contains("is not loaded by this triald"));
  REQUIRE(SendAll(c.get(), Request("enqueue", {{"study", "nope"}, {"params", json::object{}}})));
  CHECK(ReplyCode(ReadLine(c.get())) == "not_found");
  REQUIRE(SendAll(c.get(), Request("enqueue", {{"study", "live"}, {"skip_if_exists", 3}})));
  CHECK(ReplyCode(ReadLine(c.get())) == "invalid_argument");

  // The loop's own storage answers nothing: the deletion needs none of it.
  f.h.flaky().down = true;
  REQUIRE(SendAll(c.get(), Request("delete", {{"study", "big"}})));
  const json::value deleted = Result(ReadLine(c.get()));
  f.h.flaky().down = false;
  CHECK(deleted.at("study").as_string() == "big");
  CHECK(deleted.at("deleted_trials").as_int64() == kTrials);
  CHECK(deleted.at("purged").as_bool() == false);
  REQUIRE(SendAll(c.get(), Request("studies")));
  CHECK(Result(ReadLine(c.get())).as_array().size() == 1);
  // Stored with its event, naming it.
  auto events = f.h.storage().GetEvents(std::nullopt);
  REQUIRE(events.ok());
  CHECK(std::any_of(events->begin(), events->end(), [](const model::EventRecord& e) {
    return e.kind == "study_deleted" && e.detail == "study big (RUNNING, 600 trials)";
  }));
  // Bad arguments and a missing study: the verb's own errors.
  REQUIRE(SendAll(c.get(), Request("delete", {{"study", "big"}, {"purge", "yes"}})));
  CHECK(ReplyCode(ReadLine(c.get())) == "invalid_argument");
  REQUIRE(SendAll(c.get(), Request("delete", {{"study", "big"}})));
  CHECK(ReplyCode(ReadLine(c.get())) == "not_found");
}

}  // namespace
}  // namespace triald::daemon
