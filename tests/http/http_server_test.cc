// The dashboard's HTTP server on a thread of its own (daemon/http/server.h): while storage
// holds the event loop, a GET is answered with the loop's last answer to it (saying so in a
// header), and only then; a request never answered before, or one to a loop held for another
// reason, waits for the loop; an action forgets the kept answers and, with a ReadThread, is
// stored on that thread's connection and followed on the loop. Real sockets, a real asio loop
// on a thread of the test, the scheduler harness's scheduler and SQLite in memory.
#include <catch2/catch.hpp>
#include <future>
#include <string>
#include <thread>

#include "daemon/http/server.h"
#include "daemon/storage/sqlite_storage.h"
#include "daemon/storage/wait_gauge.h"
#include "tests/daemon/scheduler_harness.h"
#include "tests/http/http_client.h"
#include "tests/support/loop_thread.h"
#include "tests/support/temp_dir.h"

namespace triald::daemon::http {
namespace {

namespace asio = boost::asio;
using testing::ConnectLoopback;
using testing::Http;
using testing::HttpAnswer;
using testing::ReadAnswer;

constexpr const char* kToken = "test-token";

// `db`: the storage is that SQLite file (with_reads: the ReadThread opens it too).
SchedulerHarnessOptions FlakyHarness(const std::string& db) {
  SchedulerHarnessOptions o;
  o.flaky = true;  // storage that cannot be reached, on demand
  if (!db.empty()) {
    storage::SqliteOptions so;
    so.path = db;
    o.sqlite = so;
  }
  return o;
}

struct Fixture {
  // `with_reads`: GETs read on a ReadThread (control/read_thread.h) with a connection of its own
  // to the same file, and the answers are cached for `snapshot_s`.
  explicit Fixture(bool with_reads = false, double snapshot_s = 0)
      : h(FlakyHarness(with_reads ? dir.path() + "/triald.db" : "")) {
    HttpServerOptions o;
    if (with_reads) {
      storage::SqliteOptions so;
      so.path = dir.path() + "/triald.db";
      auto opened = storage::OpenSqliteStorage(so);
      REQUIRE(opened.ok());
      o.reads = std::make_shared<ReadThread>(std::move(opened).value());
    }
    o.io = &loop.io();
    o.storage_wait = &storage_wait;
    auto listen = ParseListenAddress("127.0.0.1:0");
    REQUIRE(listen.ok());
    o.listen = *listen;
    o.api.scheduler = &h.scheduler();
    o.api.storage = &h.storage();
    o.api.state_dir = "/nonexistent";
    o.api.read_open = true;
    o.api.token = kToken;
    o.api.snapshot_interval_s = snapshot_s;  // 0: every GET reads storage
    server = std::make_unique<HttpServer>(o);
    common::Status st = server->Start();
    INFO(st.ToString());
    REQUIRE(st.ok());
  }
  ~Fixture() { loop.StopThenDestroy(server); }

  triald::testing::TempDir dir;
  SchedulerHarness h;
  testing::LoopThread loop;
  storage::WaitGauge storage_wait;  // what the test says of storage's waits
  std::unique_ptr<HttpServer> server;
  int port() const { return server->port(); }

  // Storage cannot be reached (or can again), as the loop sees it.
  void StorageDown(bool down) {
    loop.Run([this, down] { h.flaky().down = down; });
  }

  std::shared_ptr<std::promise<void>> HoldLoop() { return loop.Hold(); }

  // A GET sent on a connection of its own; its answer is read with ReadAnswer.
  common::UniqueFd SendGet(const std::string& target) {
    common::UniqueFd fd = ConnectLoopback(port());
    const std::string request =
        "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    REQUIRE(::send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(request.size()));
    return fd;
  }
};

TEST_CASE(
    "dashboard server on its own thread: a GET is answered from the loop's last answer "
    "while storage holds the loop, and only then",
    "[http]") {
  Fixture f;
  const HttpAnswer first = Http(f.port(), "GET", "/api/studies");
  REQUIRE(first.status == 200);
  CHECK(first.headers.count("x-triald-from-memory") == 0);

  auto release = f.HoldLoop();
  // Held, but not by storage: the GET waits for the loop.
  common::UniqueFd busy = f.SendGet("/api/studies");
  CHECK(ReadAnswer(busy.get(), 0.3).status == 0);
  // Held by storage: the last answer, saying so; a target never answered waits.
  f.storage_wait.Begin();
  const HttpAnswer memory = Http(f.port(), "GET", "/api/studies");
  REQUIRE(memory.status == 200);
  CHECK(memory.body == first.body);
  REQUIRE(memory.headers.count("x-triald-from-memory") == 1);
  CHECK_THAT(memory.headers.at("x-triald-from-memory"),
             Catch::Contains("storage has kept the daemon waiting for"));
  common::UniqueFd never = f.SendGet("/api/studies/nosuch");
  CHECK(ReadAnswer(never.get(), 0.3).status == 0);
  f.storage_wait.End();
  release->set_value();
  CHECK(ReadAnswer(busy.get()).status == 200);
  CHECK(ReadAnswer(never.get()).status == 404);

  // An action (even one refused) forgets the kept answers.
  CHECK(Http(f.port(), "POST", "/api/studies/nosuch/pause", kToken, "{}").status == 404);
  auto again = f.HoldLoop();
  f.storage_wait.Begin();
  common::UniqueFd after = f.SendGet("/api/studies");
  CHECK(ReadAnswer(after.get(), 0.3).status == 0);
  f.storage_wait.End();
  again->set_value();
  const HttpAnswer fresh = ReadAnswer(after.get());
  CHECK(fresh.status == 200);
  CHECK(fresh.headers.count("x-triald-from-memory") == 0);
}

TEST_CASE(
    "dashboard server on its own thread: a GET storage cannot answer (503) gets the last answer, "
    "saying so",
    "[http]") {
  Fixture f;
  const HttpAnswer first = Http(f.port(), "GET", "/api/studies");
  REQUIRE(first.status == 200);
  f.StorageDown(true);
  const HttpAnswer down = Http(f.port(), "GET", "/api/studies");
  CHECK(down.status == 200);
  CHECK(down.body == first.body);
  REQUIRE(down.headers.count("x-triald-from-memory") == 1);
  CHECK_THAT(down.headers.at("x-triald-from-memory"), Catch::StartsWith("storage cannot answer ("));
  // Nothing kept for it: the error as it is.
  CHECK(Http(f.port(), "GET", "/api/studies/nosuch").status == 503);
  f.StorageDown(false);
  const HttpAnswer back = Http(f.port(), "GET", "/api/studies");
  CHECK(back.status == 200);
  CHECK(back.headers.count("x-triald-from-memory") == 0);
}

TEST_CASE(
    "dashboard server with a ReadThread: GETs read on its connection, with the scheduler's "
    "memory gathered on the loop, and an action stored on its connection shows in the next GET",
    "[http][reads]") {
  Fixture f(/*with_reads=*/true, /*snapshot_s=*/60);
  triald::testing::Sweep sweep;
  sweep.name = "live";
  sweep.parallelism = 2;
  f.loop.Run([&f, &sweep] { f.h.SubmitOk(sweep); });
  // The loop's own storage cannot answer: what is read comes through the ReadThread's.
  f.StorageDown(true);
  const HttpAnswer page = Http(f.port(), "GET", "/api/studies/live");
  REQUIRE(page.status == 200);
  CHECK(page.headers.count("x-triald-from-memory") == 0);
  const boost::json::value v = boost::json::parse(page.body);
  CHECK(v.at("study").at("name").as_string() == "live");
  // From the scheduler's memory: its two running trials, and status's memory fields.
  CHECK(v.at("running").as_array().size() == 2);
  for (const char* key : {"spawn", "storage", "fork_server", "slurm"}) {
    INFO(key);
    CHECK(v.at("study").as_object().contains(key));
  }
  CHECK(v.at("study").at("paused") == boost::json::value(false));
  const HttpAnswer list = Http(f.port(), "GET", "/api/studies");
  REQUIRE(list.status == 200);
  CHECK(boost::json::parse(list.body).at("studies").as_array().size() == 1);

  // An action too: checked and stored on the ReadThread's connection (the loop's still cannot
  // answer), followed on the loop; the next GETs are built afresh, though answers are cached
  // 60 s. A refused one is answered as on the loop.
  CHECK(Http(f.port(), "POST", "/api/studies/live/pause", "wrong", "{}").status == 403);
  CHECK(Http(f.port(), "POST", "/api/studies/nosuch/pause", kToken, "{}").status == 404);
  CHECK(Http(f.port(), "POST", "/api/studies/live/extend", kToken, "{}").status == 400);
  CHECK(Http(f.port(), "POST", "/api/studies/live/resume", kToken, "{}").status == 409);
  const HttpAnswer paused = Http(f.port(), "POST", "/api/studies/live/pause", kToken, "{}");
  REQUIRE(paused.status == 200);
  CHECK(boost::json::parse(paused.body).at("result").at("paused") == boost::json::value(true));
  f.loop.Run([&f] {
    const StudyCache* cached = f.h.scheduler().active_study("live");
    REQUIRE(cached != nullptr);
    CHECK(cached->record.paused);
  });
  f.StorageDown(false);
  const HttpAnswer after = Http(f.port(), "GET", "/api/studies/live");
  REQUIRE(after.status == 200);
  CHECK(boost::json::parse(after.body).at("study").at("paused") == boost::json::value(true));
  const boost::json::value listed = boost::json::parse(Http(f.port(), "GET", "/api/studies").body);
  CHECK(listed.at("studies").as_array()[0].at("paused") == boost::json::value(true));
}

}  // namespace
}  // namespace triald::daemon::http
