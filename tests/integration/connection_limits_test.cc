// Control connections against a real triald: a user other than the owner cannot use up the
// connection slots (per-uid cap, slots kept for root and triald's user), a connection that sends
// no complete request is closed after --request-timeout, running out of descriptors gets clients
// an answer instead of a hang, and triald raises its soft descriptor limit to the hard limit.
//
// The cases with a second user need root: they create a scratch user (useradd) and remove it
// at the end; without root they are skipped (TRIALD_SKIP).
#include <grp.h>
#include <pwd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/fd.h"
#include "daemon/ctl/client.h"
#include "proto/control.h"
#include "tests/integration/harness.h"
#include "tests/integration/raw_socket.h"
#include "tests/support/skip.h"

namespace triald::testing {
namespace {

using common::UniqueFd;
using Clock = std::chrono::steady_clock;

// How long a reply may take before the case fails.
constexpr double kReplyTimeout = 20;

std::string Ping() { return proto::EncodeRequest("ping", {}); }

// A child running as `user` that opens `count` connections, pings on each, and holds them all
// open until Release(). Replies() tells how each ping was answered.
class HeldConnections {
 public:
  HeldConnections(const ScratchUser& user, const std::string& socket, int count) {
    auto out = common::MakePipe(false);
    auto hold = common::MakePipe(false);
    REQUIRE(out.ok());
    REQUIRE(hold.ok());
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      out->read.Reset();
      hold->write.Reset();
      if (::setgroups(0, nullptr) != 0 || ::setgid(user.gid()) != 0 || ::setuid(user.uid()) != 0) {
        ::_exit(3);
      }
      std::vector<UniqueFd> fds;
      std::string replies;
      for (int i = 0; i < count; ++i) {
        fds.push_back(ConnectRaw(socket));
        if (!fds.back().valid()) {
          replies += "<connect failed>\n";
          continue;
        }
        SendAll(fds.back().get(), Ping());
        replies += ReadLine(fds.back().get(), kReplyTimeout) + "\n";
      }
      (void)common::WriteAll(out->write.get(), replies.data(), replies.size());
      out->write.Reset();
      char c;
      (void)::read(hold->read.get(), &c, 1);  // until the parent lets go
      ::_exit(0);
    }
    out->write.Reset();
    hold->read.Reset();
    release_ = std::move(hold->write);
    std::string all;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(out->read.get(), buf, sizeof(buf))) > 0) all.append(buf, n);
    std::istringstream lines(all);
    for (std::string line; std::getline(lines, line);) replies_.push_back(line);
  }
  ~HeldConnections() { Release(); }

  void Release() {
    if (pid_ <= 0) return;
    release_.Reset();
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  const std::vector<std::string>& replies() const { return replies_; }
  int Count(const std::string& code) const {
    int n = 0;
    for (const std::string& r : replies_) n += ReplyCode(r) == code;
    return n;
  }

 private:
  pid_t pid_ = -1;
  UniqueFd release_;
  std::vector<std::string> replies_;
};

// A daemon any local user can reach with the read verbs.
struct OpenDaemon {
  TempDir dir;
  TestDaemon daemon{dir.File("state")};
  explicit OpenDaemon(std::vector<std::string> args) {
    ::chmod(dir.path().c_str(), 0755);
    daemon.AddArgs({"--socket-read-open"});
    daemon.AddArgs(std::move(args));
    daemon.Start();
    ::chmod(daemon.state_dir().c_str(), 0755);
  }
};

// Whether the last of `replies` that was refused names `what`.
bool RefusalSays(const std::vector<std::string>& replies, const std::string& what) {
  for (auto it = replies.rbegin(); it != replies.rend(); ++it) {
    if (ReplyCode(*it) == "unavailable") return it->find(what) != std::string::npos;
  }
  return false;
}

}  // namespace

TEST_CASE("connections: a user holding many connections cannot lock the owner out",
          "[control][security][integration]") {
  if (::geteuid() != 0) TRIALD_SKIP("needs root (creates a scratch user)");
  ScratchUser user;
  // A long deadline: the held connections stay open for the whole case.
  OpenDaemon s({"--request-timeout", "60"});
  HeldConnections held(user, s.daemon.socket(), 100);
  REQUIRE(held.replies().size() == 100);
  INFO(held.replies().back());
  // The default cap per user is 32; the rest are refused with a reason.
  CHECK(held.Count("ok") == 32);
  CHECK(held.Count("unavailable") == 68);
  CHECK(RefusalSays(held.replies(), "uid " + std::to_string(user.uid()) + " has 32 connections"));

  // The owner (root here) is served meanwhile, by trialctl and on many connections at once.
  Ctl ping = Trialctl(s.daemon.socket(), {"ping"});
  CHECK(ping.code == 0);
  CHECK_THAT(ping.out, Catch::Contains("triald pid"));
  std::vector<UniqueFd> mine;
  for (int i = 0; i < 100; ++i) {
    mine.push_back(ConnectRaw(s.daemon.socket()));
    REQUIRE(SendAll(mine.back().get(), Ping()));
    CHECK(ReplyCode(ReadLine(mine.back().get(), kReplyTimeout)) == "ok");
  }
  mine.clear();

  // Once the user lets go, its slots are free again.
  held.Release();
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  std::string code;
  while (code != "ok" && Clock::now() < deadline) {
    HeldConnections again(user, s.daemon.socket(), 1);
    code = again.replies().empty() ? "" : ReplyCode(again.replies()[0]);
    if (code != "ok") std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(code == "ok");
}

TEST_CASE("connections: slots are kept for root and triald's user when others fill the rest",
          "[control][security][integration]") {
  if (::geteuid() != 0) TRIALD_SKIP("needs root (creates a scratch user)");
  ScratchUser user;
  // 64 in all, 32 kept: another user gets at most 32 even with a per-user cap above that.
  OpenDaemon s(
      {"--request-timeout", "60", "--max-connections", "64", "--max-user-connections", "100"});
  HeldConnections held(user, s.daemon.socket(), 50);
  CHECK(held.Count("ok") == 32);
  CHECK(held.Count("unavailable") == 18);
  CHECK(RefusalSays(held.replies(), "kept for root and triald's user"));

  // Root gets the kept ones, and then the global cap holds for root too.
  CHECK(Trialctl(s.daemon.socket(), {"ping"}).code == 0);
  // trialctl's connection is gone once the daemon has seen it close.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::vector<UniqueFd> mine;
  int ok = 0;
  std::string last;
  for (int i = 0; i < 40; ++i) {
    mine.push_back(ConnectRaw(s.daemon.socket()));
    SendAll(mine.back().get(), Ping());  // a refused one may already be closed
    last = ReadLine(mine.back().get(), kReplyTimeout);
    ok += ReplyCode(last) == "ok";
  }
  CHECK(ok >= 31);  // 31 if trialctl's connection was still counted
  CHECK(ok <= 32);
  CHECK(ReplyCode(last) == "unavailable");
  CHECK_THAT(last, Catch::Contains("too many connections (64 open)"));
}

TEST_CASE("connections: one that sends no complete request is closed after --request-timeout",
          "[control][security][integration]") {
  TempDir dir;
  TestDaemon daemon(dir.File("state"));
  daemon.AddArgs({"--request-timeout", "1"});
  daemon.Start();

  // Idle from the start: closed after about a second, silently.
  UniqueFd idle = ConnectRaw(daemon.socket());
  REQUIRE(idle.valid());
  const auto opened = Clock::now();
  CHECK(ReadLine(idle.get(), 10) == "<eof>");
  const double idle_s = std::chrono::duration<double>(Clock::now() - opened).count();
  CHECK(idle_s >= 0.8);
  CHECK(idle_s < 5);

  // Half a request: an error reply naming the deadline, then closed.
  UniqueFd half = ConnectRaw(daemon.socket());
  REQUIRE(SendAll(half.get(), "{\"verb\":\"pi"));
  std::string reply = ReadLine(half.get(), 10);
  CHECK(ReplyCode(reply) == "invalid_argument");
  CHECK_THAT(reply, Catch::Contains("not completed") && Catch::Contains("1 s"));
  CHECK(ReadLine(half.get(), 10) == "<eof>");

  // The clock restarts with each reply: a client that keeps asking keeps its connection.
  UniqueFd busy = ConnectRaw(daemon.socket());
  for (int i = 0; i < 4; ++i) {
    REQUIRE(SendAll(busy.get(), Ping()));
    CHECK(ReplyCode(ReadLine(busy.get(), kReplyTimeout)) == "ok");
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }

  // trialctl's client replaces a connection the daemon closed while it waited between calls.
  auto client = ctl::Client::Connect(daemon.socket());
  REQUIRE(client.ok());
  REQUIRE(client->Call("ping").ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  auto again = client->Call("ping");
  INFO(again.status().ToString());
  CHECK(again.ok());
}

TEST_CASE("connections: triald raises its soft descriptor limit to the hard limit",
          "[control][integration]") {
  TempDir dir;
  TestDaemon daemon(dir.File("state"));
  struct rlimit mine {};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &mine) == 0);
  const rlim_t hard = std::min<rlim_t>(mine.rlim_max, 4096);
  REQUIRE(hard > 256);
  daemon.SetDescriptorLimit(256, hard);
  daemon.Start();

  std::ifstream limits("/proc/" + std::to_string(daemon.pid()) + "/limits");
  std::string line, found;
  while (std::getline(limits, line)) {
    if (line.rfind("Max open files", 0) == 0) found = line;
  }
  std::istringstream fields(found.substr(std::strlen("Max open files")));
  std::string soft_text, hard_text;
  fields >> soft_text >> hard_text;
  INFO(found);
  CHECK(soft_text == std::to_string(hard));
  CHECK(hard_text == std::to_string(hard));
  CHECK_THAT(daemon.log(), Catch::Contains("descriptor limit raised from 256 to the hard limit " +
                                           std::to_string(hard)));
}

TEST_CASE("connections: out of descriptors, clients get an answer and triald does not spin",
          "[control][integration]") {
  TempDir dir;
  TestDaemon daemon(dir.File("state"));
  // Hard limit 64: triald cannot raise it; a few dozen connections use up what is left.
  daemon.SetDescriptorLimit(64, 64);
  daemon.Start();

  auto cpu_seconds = [&] {
    std::ifstream stat("/proc/" + std::to_string(daemon.pid()) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    std::istringstream rest(text.substr(text.rfind(')') + 2));
    std::string field;
    long utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::stol(field);
      if (i == 15) stime = std::stol(field);
    }
    return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  };

  std::vector<UniqueFd> clients;
  for (int i = 0; i < 100; ++i) {
    clients.push_back(ConnectRaw(daemon.socket()));
    REQUIRE(clients.back().valid());  // the kernel queues them (listen backlog)
  }
  int ok = 0, out_of_fds = 0;
  for (UniqueFd& c : clients) {
    SendAll(c.get(), Ping());  // a refused one may already be closed
    std::string reply = ReadLine(c.get(), 5);
    ok += ReplyCode(reply) == "ok";
    out_of_fds += reply.find("out of file descriptors") != std::string::npos;
  }
  INFO(daemon.log());
  CHECK(ok > 0);
  CHECK(out_of_fds > 0);
  CHECK(ok + out_of_fds == 100);  // none left hanging

  // Out of descriptors while these are held: idle, the daemon must not busy-loop on accept().
  const double before = cpu_seconds();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  CHECK(cpu_seconds() - before < 0.5);

  clients.clear();
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  bool served = false;
  while (!served && Clock::now() < deadline) {
    UniqueFd c = ConnectRaw(daemon.socket());
    SendAll(c.get(), Ping());
    served = ReplyCode(ReadLine(c.get(), 5)) == "ok";
  }
  CHECK(served);
}

}  // namespace triald::testing
