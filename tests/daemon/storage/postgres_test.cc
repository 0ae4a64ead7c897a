// What only PostgresStorage promises (daemon/storage/postgres_storage.h): several daemons on one
// database, study locks, call timeouts, reconnection, connection errors, the upgrade of every
// older schema version, the text PostgreSQL cannot store. The [postgres] cases need the server of
// CTest's `postgres` fixture (backend_fixture.h).

#include <fstream>
#include <tuple>
#include <utility>

#include "daemon/storage/schema.h"
#include "tests/daemon/storage/backend_fixture.h"

namespace triald::storage {
namespace {

using namespace contract;  // NOLINT: the suites' shared fixture

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

// Threads in this process now (from /proc/self/status).
int ThreadCount() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

// Options without a watchdog thread, for a test that forks (OpenSingleThreaded) and for the
// storages its forked children open: a child forked from a threaded parent may inherit a lock
// another thread held (the allocator's under ASan) and hang.
PostgresOptions ChildOptions(const std::string& url, const std::string& node) {
  PostgresOptions options;
  options.url = url;
  options.node = node;
  options.unresponsive_after_s = 0;
  return options;
}

std::unique_ptr<Storage> OpenSingleThreaded(const std::string& url, const std::string& node) {
  auto r = OpenPostgresStorage(ChildOptions(url, node));
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return std::move(r).value();
}

// Forks a child that runs `body` and exits with its return value (0 for success). No Catch
// assertion runs in the child, and no destructor: the parent's connections, inherited across
// fork, are left alone. The parent must have no thread but its own (see OpenSingleThreaded).
template <typename F>
pid_t ForkChild(F&& body) {
  REQUIRE(ThreadCount() == 1);
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
  auto parent = OpenSingleThreaded(db.url(), "parent");
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
      auto s = OpenPostgresStorage(ChildOptions(db.url(), "child-" + std::to_string(c)));
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
  auto a = OpenSingleThreaded(db.url(), "locker-a");
  StudyRecord study = Unwrap(a->CreateStudy(MakeStudy("lock"), 1));

  REQUIRE_OK(a->BeginBatch());
  Unwrap(a->LockStudy(study.id));
  // B locks the same study, then records how many trials it saw once it held the lock.
  pid_t b = ForkChild([&]() -> int {
    PostgresOptions options = ChildOptions(db.url(), "locker-b");
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

TEST_CASE("postgres: a server that stops answering everyone fails calls at once (the watchdog)",
          "[storage][postgres]") {
  TestDatabase db;
  PostgresOptions o;
  o.url = db.url();
  o.node = "frozen";
  o.call_timeout_s = 8;
  o.unresponsive_after_s = 0.4;
  auto s = Unwrap(OpenPostgresStorage(o));
  Unwrap(s->CreateStudy(MakeStudy("freeze"), 1));
  // Both server processes of this node, stopped: the storage's own and its watchdog's (a frozen
  // server, as far as this node can tell).
  std::vector<pid_t> stopped;
  const auto waited = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (stopped.size() < 2 && std::chrono::steady_clock::now() < waited) {
    stopped.clear();
    for (const char* name : {"triald:frozen", "triald:frozen watchdog"}) {
      const std::string pid =
          PostgresQuery(db.url(), "SELECT pid FROM pg_stat_activity WHERE application_name = '" +
                                      std::string(name) + "'");
      if (!pid.empty()) stopped.push_back(static_cast<pid_t>(std::stol(pid)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE(stopped.size() == 2);
  struct Resume {
    std::vector<pid_t> pids;
    ~Resume() {
      for (pid_t p : pids) ::kill(p, SIGCONT);
    }
  } resume{stopped};
  for (pid_t p : stopped) REQUIRE(::kill(p, SIGSTOP) == 0);

  auto timed = [&](auto&& call) {
    const auto start = std::chrono::steady_clock::now();
    auto r = call();
    return std::make_pair(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
        r.status());
  };
  // The call in progress gives up once the watchdog has waited 0.4 s, not after 8 s.
  auto [took, st] = timed([&] { return s->ListStudies(); });
  CHECK(st.code() == Code::kUnavailable);
  CHECK_THAT(st.message(), Catch::Contains("has not answered for") &&
                               Catch::Contains("the connection was dropped"));
  CHECK(took < 4);  // about 0.4 s plus a probe interval; generous for a loaded machine
  // The next calls do not even try to connect while it stays silent.
  std::tie(took, st) = timed([&] { return s->ListStudies(); });
  CHECK(st.code() == Code::kUnavailable);
  CHECK_THAT(st.message(), Catch::Contains("not reconnecting until it answers"));
  CHECK(took < 0.5);

  // Thawed: the watchdog's next probe is answered, and calls work again.
  for (pid_t p : stopped) REQUIRE(::kill(p, SIGCONT) == 0);
  bool back = false;
  for (int i = 0; i < 200 && !back; ++i) {
    back = s->ListStudies().ok();
    if (!back) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(back);
}

TEST_CASE("postgres: connections given another's watchdog share it (one probe connection)",
          "[storage][postgres]") {
  TestDatabase db;
  PostgresOptions o;
  o.url = db.url();
  o.node = "sharing";
  o.unresponsive_after_s = 0.4;
  auto first = Unwrap(OpenPostgresStorage(o));
  REQUIRE(PostgresWatchdogOf(*first) != nullptr);
  o.watchdog = PostgresWatchdogOf(*first);
  auto second = Unwrap(OpenPostgresStorage(o));
  auto third = Unwrap(OpenPostgresStorage(o));
  CHECK(PostgresWatchdogOf(*second) == PostgresWatchdogOf(*first));
  CHECK(PostgresWatchdogOf(*third) == PostgresWatchdogOf(*first));
  const std::string count =
      "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'triald:sharing watchdog'";
  // Its first probe connects at once; a few probe intervals later there is still one.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (PostgresQuery(db.url(), count) != "1" && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(PostgresQuery(db.url(), count) == "1");
  CHECK(second->ListStudies().ok());
  // Not a PostgreSQL storage: none.
  auto sqlite = OpenSqliteStorage({":memory:"});
  REQUIRE(sqlite.ok());
  CHECK(PostgresWatchdogOf(**sqlite) == nullptr);
}

TEST_CASE("postgres: a server that refuses writes is an I/O error (an outage), not a bug",
          "[storage][postgres]") {
  TestDatabase db;
  auto a = OpenPostgresOrFail(db.url(), "host-a");
  StudyRecord study = Unwrap(a->CreateStudy(MakeStudy("ro"), 1));
  // New sessions of the database are read-only, as on a standby after a failover.
  PostgresQuery(PostgresAdminUrl(),
                "ALTER DATABASE \"" + db.name() + "\" SET default_transaction_read_only = on");
  PostgresOptions options;
  options.url = db.url();
  options.node = "host-b";
  options.instance = kInstance;
  auto b = OpenPostgresStorage(options);
  common::Status refused =
      b.ok() ? (*b)->CreateTrial(study.id, OneParam(1), 2).status() : b.status();
  CHECK(refused.code() == Code::kIo);
  CHECK_THAT(refused.message(), Catch::Contains("25006"));
}

TEST_CASE("postgres: the connection's socket is close-on-exec", "[storage][postgres]") {
  TestDatabase db;
  auto before = OpenFds();
  auto s = OpenPostgresOrFail(db.url());
  Unwrap(s->CreateStudy(MakeStudy("fds"), 1));
  // The storage's session and its watchdog's, once the watchdog has connected.
  WaitUntil("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'triald:" +
                std::string(kNode) + "%' AND datname = '" + db.name() + "'",
            "2");

  int sockets = 0;
  for (const auto& [fd, target] : OpenFds()) {
    if (before.count(fd) == 1 && before.at(fd) == target) continue;
    int flags = fcntl(fd, F_GETFD);
    if (flags == -1) continue;  // the directory listing's own descriptor, closed by now
    INFO("fd " << fd << " -> " << target);
    CHECK((flags & FD_CLOEXEC) != 0);
    if (target.rfind("socket:", 0) == 0) ++sockets;
  }
  CHECK(sockets == 2);
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
      auto s = OpenPostgresStorage(ChildOptions(db.url(), "opener-" + std::to_string(c)));
      if (!s.ok()) return 3;
      return (*s)->ListStudies().ok() ? 0 : 4;
    }));
  }
  close(go[0]);
  close(go[1]);
  for (pid_t pid : children) RequireExitsZero(pid);
  CHECK(PostgresQuery(db.url(), "SELECT count(*) FROM schema_version") == "1");
  CHECK(PostgresQuery(db.url(), "SELECT max(version) FROM schema_version") ==
        std::to_string(storage::schema::kVersion));
}

TEST_CASE("postgres: a version-1 database gets submitters, unknown for its studies",
          "[storage][postgres]") {
  TestDatabase db;
  OpenPostgresOrFail(db.url());
  // Version 1 is the current schema without the columns of versions 2 and 3.
  PostgresQuery(db.url(),
                "ALTER TABLE studies DROP COLUMN submit_json, DROP COLUMN submitter_uid, DROP "
                "COLUMN submitter_name, "
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
  CHECK(PostgresQuery(db.url(), "SELECT max(version) FROM schema_version") ==
        std::to_string(storage::schema::kVersion));
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
  PostgresQuery(
      db.url(),
      "ALTER TABLE studies DROP COLUMN submit_json, DROP COLUMN directions, DROP COLUMN paused, "
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
  CHECK(PostgresQuery(db.url(), "SELECT max(version) FROM schema_version") ==
        std::to_string(storage::schema::kVersion));
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
  PostgresQuery(
      db.url(),
      "ALTER TABLE trials DROP COLUMN resources_json; "
      "ALTER TABLE studies DROP COLUMN submit_json, DROP COLUMN paused, DROP COLUMN parallelism; "
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
  CHECK(PostgresQuery(db.url(), "SELECT max(version) FROM schema_version") ==
        std::to_string(storage::schema::kVersion));
  auto s = OpenPostgresOrFail(db.url());
  CHECK_FALSE(Unwrap(s->GetTrial(Unwrap(s->GetStudy("old")).id, 0)).resources.has_value());
  CHECK(Unwrap(s->GetTrial(Unwrap(s->GetStudy("new")).id, 0)).resources == MeasuredResources());
}

TEST_CASE("postgres: a version-4 database's studies are not paused and keep their parallelism",
          "[storage][postgres][control]") {
  TestDatabase db;
  OpenPostgresOrFail(db.url());
  // Version 4 is the current schema without version 5's columns.
  PostgresQuery(
      db.url(),
      "ALTER TABLE studies DROP COLUMN submit_json, DROP COLUMN paused, DROP COLUMN parallelism; "
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
  CHECK(PostgresQuery(db.url(), "SELECT max(version) FROM schema_version") ==
        std::to_string(storage::schema::kVersion));
  auto s = OpenPostgresOrFail(db.url());
  StudyRecord old = Unwrap(s->GetStudy("old"));
  CHECK(old.paused);
  CHECK(old.n_trials == 6);
  CHECK(old.parallelism == 4);
}

TEST_CASE("postgres: a version-8 database's studies have no submit choices, and take them",
          "[storage][postgres]") {
  TestDatabase db;
  {
    auto s = OpenPostgresOrFail(db.url());
    REQUIRE_OK(s->CreateStudy(MakeStudy("old"), 10).status());
  }
  // Version 8 is the current schema without version 9's column.
  PostgresQuery(db.url(),
                "ALTER TABLE studies DROP COLUMN submit_json; "
                "UPDATE schema_version SET version = 8");
  auto s = OpenPostgresOrFail(db.url());
  CHECK(Unwrap(s->GetStudy("old")).submit.empty());
  NewStudy fresh = MakeStudy("new");
  fresh.submit.python = "/usr/bin/python3";
  REQUIRE_OK(s->CreateStudy(fresh, 20).status());
  CHECK(Unwrap(s->GetStudy("new")).submit.python == "/usr/bin/python3");
  CHECK(PostgresQuery(db.url(), "SELECT max(version) FROM schema_version") == "9");
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
