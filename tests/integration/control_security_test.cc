// Control-socket security against a real triald: who may do what (SO_PEERCRED, the socket
// group, --socket-read-open), and requests that are oversized, malformed, half-sent or many at
// once. Every case checks that the daemon kept serving other clients.
//
// The permission cases need root (the test forks a child that drops to uid 65534, "nobody");
// without root they are skipped (TRIALD_SKIP: CTest reports them as skipped).
#include <grp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/fd.h"
#include "proto/control.h"
#include "tests/integration/harness.h"
#include "tests/integration/raw_socket.h"
#include "tests/support/skip.h"

namespace triald::testing {
namespace json = boost::json;
using common::UniqueFd;

namespace {

constexpr uid_t kNobody = 65534;
constexpr gid_t kNogroup = 65534;
// A gid no account on the test machine has (the socket's group in the group tests).
constexpr gid_t kTestGroup = 42424;

std::string Request(const std::string& verb, json::object args = {}) {
  return proto::EncodeRequest(verb, std::move(args));
}

// Runs `requests` on fresh connections from a child that has dropped to uid nobody with the
// given supplementary groups; returns one entry per request: the reply line, or
// "<connect: strerror>" when the connection was refused.
std::vector<std::string> AsNobody(const std::string& socket, std::vector<gid_t> groups,
                                  const std::vector<std::string>& requests) {
  const std::string all = OutputOfChild(
      [&] {
        return ::setgroups(groups.size(), groups.data()) == 0 && ::setgid(kNogroup) == 0 &&
               ::setuid(kNobody) == 0;
      },
      [&] {
        std::string out;
        for (const std::string& req : requests) {
          int err = 0;
          UniqueFd fd = ConnectRaw(socket, &err);
          if (!fd.valid()) {
            out += std::string("<connect: ") + std::strerror(err) + ">\n";
            continue;
          }
          SendAll(fd.get(), req);
          out += ReadLine(fd.get()) + "\n";
        }
        return out;
      });
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < all.size()) {
    size_t nl = all.find('\n', pos);
    lines.push_back(all.substr(pos, nl - pos));
    pos = nl + 1;
  }
  REQUIRE(lines.size() == requests.size());
  return lines;
}

bool IsRoot() { return ::geteuid() == 0; }

// A daemon on a state directory uid nobody can reach (the temp dir is made world-searchable).
struct SecDaemon {
  TempDir dir;
  TestDaemon daemon{dir.File("state")};
  explicit SecDaemon(std::vector<std::string> args = {}) {
    ::chmod(dir.path().c_str(), 0755);
    daemon.AddArgs(std::move(args));
    daemon.Start();
  }
  // A submit request for a one-trial study that runs until cancelled.
  std::string Sweep(const std::string& study) {
    std::string toml = ExecSweep(study, "[\"sleep\", \"60\"]", 1, 1);
    std::string path = dir.Write(study + ".toml", toml);
    return Request("submit", {{"sweep", toml}, {"path", path}});
  }
};

}  // namespace

TEST_CASE("control socket: a uid outside the allowed set may read (read-open) but not change",
          "[control][security][integration]") {
  if (!IsRoot()) TRIALD_SKIP("needs root to run a client as uid 65534");
  SecDaemon s({"--socket-read-open"});
  struct stat st {};
  REQUIRE(::stat(s.daemon.socket().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0666);

  std::vector<std::string> replies =
      AsNobody(s.daemon.socket(), {},
               {Request("ping"), Request("studies"), s.Sweep("denied"),
                Request("cancel", {{"study", "denied"}}),
                Request("enqueue", {{"study", "denied"}, {"params", json::object{}}}),
                Request("no-such-verb")});
  CHECK(ReplyCode(replies[0]) == "ok");
  CHECK(ReplyCode(replies[1]) == "ok");
  for (size_t i = 2; i < replies.size(); ++i) {
    INFO(replies[i]);
    CHECK(ReplyCode(replies[i]) == "permission_denied");
  }
  CHECK_THAT(replies[2], Catch::Contains("uid 65534 may not use \\\"submit\\\""));
  // Nothing was submitted; the daemon still serves root.
  CHECK(s.daemon.Call("studies").as_array().empty());
}

TEST_CASE("control socket: without read-open, others cannot even connect (mode 0660)",
          "[control][security][integration]") {
  if (!IsRoot()) TRIALD_SKIP("needs root to run a client as uid 65534");
  SecDaemon s;
  struct stat st {};
  REQUIRE(::stat(s.daemon.socket().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0660);
  CHECK(st.st_gid == ::getegid());  // default group: the daemon's primary group

  std::vector<std::string> replies = AsNobody(s.daemon.socket(), {}, {Request("ping")});
  CHECK(replies[0] == std::string("<connect: ") + std::strerror(EACCES) + ">");
  s.daemon.Call("ping");
}

TEST_CASE("control socket: members of --socket-group may submit and cancel",
          "[control][security][integration]") {
  if (!IsRoot()) TRIALD_SKIP("needs root to run a client as uid 65534");
  SecDaemon s({"--socket-group", std::to_string(kTestGroup)});
  struct stat st {};
  REQUIRE(::stat(s.daemon.socket().c_str(), &st) == 0);
  CHECK(st.st_gid == kTestGroup);
  CHECK((st.st_mode & 0777) == 0660);

  // Supplementary membership is enough (the child's primary group is nogroup).
  std::vector<std::string> replies =
      AsNobody(s.daemon.socket(), {kTestGroup},
               {Request("ping"), s.Sweep("grouped"), Request("cancel", {{"study", "grouped"}})});
  for (const std::string& r : replies) {
    INFO(r);
    CHECK(ReplyCode(r) == "ok");
  }
  json::value status = s.daemon.Call("status", {{"study", "grouped"}});
  CHECK(status.at("name").as_string() == "grouped");
  // A non-member is still kept out by the file mode.
  replies = AsNobody(s.daemon.socket(), {}, {Request("ping")});
  CHECK(replies[0] == std::string("<connect: ") + std::strerror(EACCES) + ">");
}

TEST_CASE("control socket: an oversized request gets an error and a closed connection",
          "[control][security][integration]") {
  SecDaemon s;
  UniqueFd fd = ConnectRaw(s.daemon.socket());
  REQUIRE(fd.valid());
  // Over the cap and no newline: the daemon must answer before the client finishes sending.
  std::string huge(proto::kMaxRequestBytes + 256 * 1024, 'a');
  std::thread writer([&] { SendAll(fd.get(), huge); });
  std::string reply = ReadLine(fd.get());
  writer.join();
  CHECK(ReplyCode(reply) == "invalid_argument");
  CHECK_THAT(reply, Catch::Contains("larger than " + std::to_string(proto::kMaxRequestBytes)));
  CHECK(ReadLine(fd.get()) == "<eof>");

  // A large request under the cap (a sweep file just under its own 2 MiB limit) is served.
  std::string toml = "# " + std::string(proto::kMaxSweepBytes - 4096, 'x') + "\n" +
                     ExecSweep("big", "[\"true\"]", 1, 1);
  json::value r = s.daemon.Call("submit", {{"sweep", toml}, {"path", s.dir.File("big.toml")}});
  CHECK(r.at("study").as_string() == "big");
  s.daemon.Call("ping");
}

TEST_CASE("control socket: malformed requests get errors and the connection stays usable",
          "[control][security][integration]") {
  SecDaemon s;
  UniqueFd fd = ConnectRaw(s.daemon.socket());
  REQUIRE(fd.valid());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{not json\n", "invalid_argument"},
      {std::string("\x00\xff\xfe garbage", 12) + "\n", "invalid_argument"},
      {"[1,2,3]\n", "invalid_argument"},
      {"{}\n", "invalid_argument"},
      {"{\"verb\":7}\n", "invalid_argument"},
      {std::string(100000, '[') + "\n", "invalid_argument"},
      {"{\"verb\":\"status\"}\n", "invalid_argument"},
      {"{\"verb\":\"status\",\"study\":[]}\n", "invalid_argument"},
      {"{\"verb\":\"logs\",\"study\":\"x\",\"trial\":1e300}\n", "not_found"},
      {"{\"verb\":\"ping\"} trailing\n", "invalid_argument"},
      {"\n", "invalid_argument"},
      {"{\"verb\":\"ping\"}\n", "ok"},
  };
  for (const auto& [req, code] : cases) {
    INFO(req.substr(0, 60));
    REQUIRE(SendAll(fd.get(), req));
    CHECK(ReplyCode(ReadLine(fd.get())) == code);
  }
  // Two requests in one write are answered in order.
  REQUIRE(SendAll(fd.get(), "{\"verb\":\"ping\"}\n{\"verb\":\"nope\"}\n"));
  CHECK(ReplyCode(ReadLine(fd.get())) == "ok");
  CHECK(ReplyCode(ReadLine(fd.get())) == "invalid_argument");
}

TEST_CASE("control socket: a half-sent request times out while other clients are served",
          "[control][security][integration]") {
  SecDaemon s({"--request-timeout", "1"});
  UniqueFd stalled = ConnectRaw(s.daemon.socket());
  REQUIRE(stalled.valid());
  REQUIRE(SendAll(stalled.get(), "{\"verb\":\"pi"));  // and nothing more, ever

  // Meanwhile other clients get answers.
  for (int i = 0; i < 5; ++i) s.daemon.Call("ping");

  std::string reply = ReadLine(stalled.get());
  CHECK(ReplyCode(reply) == "invalid_argument");
  CHECK_THAT(reply, Catch::Contains("not completed"));
  CHECK(ReadLine(stalled.get()) == "<eof>");

  // A client that ends its stream mid-request gets an error, not a hang.
  UniqueFd partial = ConnectRaw(s.daemon.socket());
  REQUIRE(SendAll(partial.get(), "{\"verb\":\"ping\"}"));
  ::shutdown(partial.get(), SHUT_WR);
  reply = ReadLine(partial.get());
  CHECK(ReplyCode(reply) == "invalid_argument");
  CHECK_THAT(reply, Catch::Contains("without a newline"));
  CHECK(ReadLine(partial.get()) == "<eof>");
  s.daemon.Call("ping");
}

TEST_CASE("control socket: 200 concurrent clients are all answered",
          "[control][security][integration]") {
  SecDaemon s;
  std::string toml = ExecSweep("many", "[\"true\"]", 1, 1);
  s.daemon.Submit(toml, s.dir.Write("many.toml", toml));

  std::vector<UniqueFd> clients;
  for (int i = 0; i < 200; ++i) {
    clients.push_back(ConnectRaw(s.daemon.socket()));
    REQUIRE(clients.back().valid());
  }
  for (UniqueFd& c : clients) REQUIRE(SendAll(c.get(), Request("status", {{"study", "many"}})));
  int answered = 0;
  for (UniqueFd& c : clients) {
    std::string reply = ReadLine(c.get());
    INFO(reply.substr(0, 200));
    CHECK(ReplyCode(reply) == "ok");
    answered += ReplyCode(reply) == "ok";
  }
  CHECK(answered == 200);
}

TEST_CASE("control socket: connections beyond the bound are refused, not queued without end",
          "[control][security][integration]") {
  SecDaemon s;
  constexpr int kOpen = 600;  // the daemon serves at most 512 at once
  std::vector<UniqueFd> clients;
  for (int i = 0; i < kOpen; ++i) {
    clients.push_back(ConnectRaw(s.daemon.socket()));
    REQUIRE(clients.back().valid());
  }
  int ok = 0, refused = 0;
  for (UniqueFd& c : clients) {
    SendAll(c.get(), Request("ping"));  // a refused one may already be closed
    std::string code = ReplyCode(ReadLine(c.get()));
    ok += code == "ok";
    refused += code == "unavailable";
  }
  CHECK(ok + refused == kOpen);
  CHECK(ok <= 512);
  CHECK(ok >= 500);
  CHECK(refused >= kOpen - 512);
  clients.clear();
  // Once they are gone, new clients are served again.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool served = false;
  while (!served && std::chrono::steady_clock::now() < deadline) {
    UniqueFd c = ConnectRaw(s.daemon.socket());
    SendAll(c.get(), Request("ping"));
    served = ReplyCode(ReadLine(c.get())) == "ok";
  }
  CHECK(served);
}

}  // namespace triald::testing
