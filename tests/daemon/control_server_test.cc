// The control server on a thread of its own (daemon/control/server.h): `ping` is
// answered there while the event loop is held (as by a storage call that does not come back),
// every other verb runs on the loop and is answered once the loop runs again, and a streamed
// reply crosses between the two threads piece by piece. Real sockets, a real asio loop on a
// thread of the test, the scheduler harness's scheduler and SQLite in memory.
#include <unistd.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <future>
#include <string>
#include <thread>

#include "daemon/control/ping_board.h"
#include "daemon/control/server.h"
#include "daemon/control/verbs.h"
#include "proto/control.h"
#include "tests/daemon/scheduler_harness.h"
#include "tests/integration/raw_socket.h"

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

// The event loop on a thread of the test, and a control server on a thread of its own.
struct Fixture {
  SchedulerHarness h;
  std::string dir;
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::thread loop;
  std::unique_ptr<PingBoard> board;
  std::unique_ptr<ControlServer> server;

  Fixture() {
    dir = std::filesystem::temp_directory_path() /
          ("triald-control-server-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    StoreBigStudy(h.storage());
    board = std::make_unique<PingBoard>(dir, h.node(), false);
    board->Publish(h.scheduler());
    ControlServerOptions o;
    o.io = &io;
    o.ping_board = board.get();
    o.scheduler = &h.scheduler();
    o.storage = &h.storage();
    o.socket_path = dir + "/triald.sock";
    o.state_dir = dir;
    o.access.daemon_uid = ::geteuid();
    o.access.allowed_gid = ::getegid();
    server = std::make_unique<ControlServer>(o);
    common::Status st = server->Start();
    INFO(st.ToString());
    REQUIRE(st.ok());
    work.emplace(io.get_executor());
    loop = std::thread([this] { io.run(); });
  }
  ~Fixture() {
    // As the daemon: the server stops, the loop ends, then the server goes.
    asio::post(io, [this] { server->Stop(); });
    work.reset();
    io.stop();
    loop.join();
    server.reset();
    std::filesystem::remove_all(dir);
  }

  // Holds the event loop until the returned promise is set (a storage call that does not come
  // back); returns once the loop is held.
  std::shared_ptr<std::promise<void>> HoldLoop() {
    auto release = std::make_shared<std::promise<void>>();
    auto held = std::make_shared<std::promise<void>>();
    std::future<void> is_held = held->get_future();
    asio::post(io, [release, held] {
      held->set_value();
      release->get_future().wait();
    });
    is_held.wait();
    return release;
  }

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

}  // namespace
}  // namespace triald::daemon
