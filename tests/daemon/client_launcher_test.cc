// The connection's side of a client's trial (launcher/client_launcher.h) on a socket pair, its
// event loop run one handler at a time: the program reads EOF only after on_exit has run, so
// a tell that waits for EOF (the Python client's) has its trial ended in the scheduler before
// it returns, and the program's next ask finds the slot free.
#include "daemon/launcher/client_launcher.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <memory>
#include <optional>
#include <string>

#include "common/fd.h"
#include "common/logging.h"
#include "tests/daemon/fakes.h"

namespace triald::launcher {
namespace {

struct Pair {
  Pair() {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    daemon_side = std::make_shared<common::UniqueFd>(fds[0]);
    program = common::UniqueFd(fds[1]);
  }
  std::shared_ptr<common::UniqueFd> daemon_side;
  common::UniqueFd program;
};

LaunchSpec ClientSpec(std::shared_ptr<common::UniqueFd> connection) {
  LaunchSpec spec;
  spec.env = {"TRIALD_STUDY=asked", "TRIALD_TRIAL=3", "TRIALD_PARAMS={}", "TRIALD_N_OBJECTIVES=1"};
  spec.kill_grace_s = 5;
  spec.client = std::move(connection);
  return spec;
}

// What the program's side reads now without waiting: bytes, "" at EOF, nullopt when nothing.
std::optional<std::string> ReadNow(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return std::nullopt;
  char buf[4096];
  const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
  if (n < 0) return std::nullopt;
  return std::string(buf, static_cast<size_t>(n));
}

void Send(int fd, const std::string& text) {
  REQUIRE(::send(fd, text.data(), text.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(text.size()));
}

// Runs the loop one handler at a time until the program's side reads EOF, checking after each
// handler that EOF never comes before on_exit. Returns what the program read.
std::string RunToEof(boost::asio::io_context& io, int program, const bool& exited) {
  std::string read;
  for (int handlers = 0; handlers < 1000; ++handlers) {
    if (std::optional<std::string> got = ReadNow(program)) {
      if (got->empty()) return read;
      read += *got;
      continue;
    }
    if (io.run_one_for(std::chrono::milliseconds(200)) == 0 && exited) {
      // Nothing left to run: the connection must be closed by now.
      std::optional<std::string> last = ReadNow(program);
      REQUIRE(last);
      REQUIRE(last->empty());
      return read;
    }
    std::optional<std::string> after = ReadNow(program);
    if (after && after->empty()) {
      INFO("the program read EOF after handler " << handlers);
      REQUIRE(exited);
      return read;
    }
    if (after) read += *after;
  }
  FAIL("the program never read EOF");
  return read;
}

TEST_CASE("a told client trial's connection closes only after on_exit has run") {
  boost::asio::io_context io(1);
  testing::FakeLauncher next;
  ClientLauncher launcher({&io, &next, common::MakeNullLogger()});
  Pair pair;
  bool exited = false;
  ProcessOutcome outcome;
  std::unique_ptr<TrialProcess> process;
  TrialCallbacks callbacks;
  callbacks.on_exit = [&](const ProcessOutcome& o) {
    exited = true;
    outcome = o;
    process.reset();  // as the scheduler does: the handle goes in on_exit
  };
  LaunchResult launched = launcher.Launch(ClientSpec(pair.daemon_side), std::move(callbacks));
  REQUIRE(launched.ok());
  process = std::move(*launched);

  SECTION("told a value, then shut its write side down (as tell does)") {
    Send(pair.program.get(), "{\"type\":\"final\",\"values\":[1.5]}\n");
    REQUIRE(::shutdown(pair.program.get(), SHUT_WR) == 0);
    const std::string read = RunToEof(io, pair.program.get(), exited);
    CHECK(read.find("\"trial\":3") != std::string::npos);  // the ask's reply
    CHECK(outcome.exit.code == 0);
    CHECK(outcome.executor_failure.empty());
    CHECK(outcome.ended_by == "told by the client");
  }
  SECTION("went away without telling: lost") {
    REQUIRE(::shutdown(pair.program.get(), SHUT_WR) == 0);
    RunToEof(io, pair.program.get(), exited);
    CHECK(outcome.executor_failure == "lost");
  }
  CHECK(exited);
}

}  // namespace
}  // namespace triald::launcher
