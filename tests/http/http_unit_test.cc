// The dashboard's parts alone: the token and its file, the listening address and Host check,
// paths, and parameter importance.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "daemon/http/address.h"
#include "daemon/http/api.h"
#include "daemon/http/importance.h"
#include "daemon/http/token.h"
#include "tests/support/temp_dir.h"

namespace triald::daemon::http {
namespace {

using testing::TempDir;

TEST_CASE("dashboard token: 256 random bits in hex, compared in full", "[http]") {
  auto a = MakeToken();
  auto b = MakeToken();
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->size() == 64);
  CHECK(a->find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(*a != *b);
  CHECK(TokensEqual(*a, *a));
  CHECK_FALSE(TokensEqual(*b, *a));
  CHECK_FALSE(TokensEqual(a->substr(0, 63), *a));
  CHECK_FALSE(TokensEqual(*a + "0", *a));
  CHECK_FALSE(TokensEqual("", *a));
  CHECK_FALSE(TokensEqual("", ""));  // no token configured: nothing matches
  CHECK(BearerToken("Bearer abc") == "abc");
  CHECK(BearerToken("bearer  abc ") == "abc");
  CHECK(BearerToken("Basic abc").empty());
  CHECK(BearerToken("Bearer").empty());
  CHECK(BearerToken("").empty());
}

TEST_CASE("dashboard token file: 0600, the daemon's own, replaced atomically", "[http]") {
  TempDir dir;
  ::umask(0);  // the mode must not depend on the umask
  auto path = WriteTokenFile(dir.path(), "0123");
  ::umask(022);
  REQUIRE(path.ok());
  CHECK(*path == dir.path() + "/http.token");
  struct stat st {};
  REQUIRE(::lstat(path->c_str(), &st) == 0);
  CHECK(S_ISREG(st.st_mode));
  CHECK((st.st_mode & 07777) == 0600);
  CHECK(st.st_uid == ::geteuid());
  std::ifstream in(*path);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str() == "0123\n");
  // A second start replaces it, also through a link planted at the name (the link itself is
  // replaced; its target is untouched).
  const std::string victim = dir.File("victim");
  { std::ofstream(victim) << "keep"; }
  REQUIRE(::unlink(path->c_str()) == 0);
  REQUIRE(::symlink(victim.c_str(), path->c_str()) == 0);
  REQUIRE(WriteTokenFile(dir.path(), "4567").ok());
  REQUIRE(::lstat(path->c_str(), &st) == 0);
  CHECK(S_ISREG(st.st_mode));
  std::ifstream v(victim);
  std::stringstream kept;
  kept << v.rdbuf();
  CHECK(kept.str() == "keep");
  // No temporary file is left behind.
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    entries += !e.is_directory();
  CHECK(entries == 2);  // http.token and victim
}

TEST_CASE("dashboard address: loopback by default, errors say what is expected", "[http]") {
  auto a = ParseListenAddress("127.0.0.1:8080");
  REQUIRE(a.ok());
  CHECK(a->port == 8080);
  CHECK(a->loopback());
  CHECK(a->Url() == "http://127.0.0.1:8080");
  auto port_only = ParseListenAddress("9000");
  REQUIRE(port_only.ok());
  CHECK(port_only->address.to_string() == "127.0.0.1");
  CHECK(port_only->port == 9000);
  auto v6 = ParseListenAddress("[::1]:8080");
  REQUIRE(v6.ok());
  CHECK(v6->loopback());
  CHECK(v6->Url() == "http://[::1]:8080");
  auto local = ParseListenAddress("localhost:1");
  REQUIRE(local.ok());
  CHECK(local->loopback());
  auto any = ParseListenAddress("0.0.0.0:8080");
  REQUIRE(any.ok());
  CHECK_FALSE(any->loopback());
  for (const char* bad : {"", "127.0.0.1:", "127.0.0.1:70000", "127.0.0.1:x", "example.com:80",
                          "::1:8080", "[::1]8080", "[::1"}) {
    INFO(bad);
    auto r = ParseListenAddress(bad);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(), Catch::Contains("--http") && Catch::Contains("expected"));
  }
}

TEST_CASE("dashboard Host check: IP literals and localhost, not other names", "[http]") {
  auto listen = ParseListenAddress("127.0.0.1:8080");
  REQUIRE(listen.ok());
  CHECK(HostAllowed("127.0.0.1:8080", *listen));
  CHECK(HostAllowed("localhost:9000", *listen));  // an SSH tunnel's local port
  CHECK(HostAllowed("localhost", *listen));
  CHECK(HostAllowed("[::1]:8080", *listen));
  CHECK(HostAllowed("10.1.2.3", *listen));
  CHECK_FALSE(HostAllowed("evil.example:8080", *listen));
  CHECK_FALSE(HostAllowed("localhost.evil.example", *listen));
  CHECK_FALSE(HostAllowed("", *listen));
  CHECK_FALSE(HostAllowed("[::1", *listen));
}

TEST_CASE("dashboard paths: %-escapes decoded, bad ones refused", "[http]") {
  std::string out;
  CHECK(PercentDecode("a%20b%2Fc", &out));
  CHECK(out == "a b/c");
  CHECK_FALSE(PercentDecode("a%2", &out));
  CHECK_FALSE(PercentDecode("a%zz", &out));
  CHECK_FALSE(PercentDecode("%", &out));
}

model::TrialRecord Trial(int number, double x, const std::string& opt, double value,
                         model::TrialState state = model::TrialState::kComplete) {
  model::TrialRecord t;
  t.number = number;
  t.state = state;
  t.value = value;
  t.values = {value};
  config::Distribution fd;
  fd.type = config::ParamType::kFloat;
  fd.low = 0;
  fd.high = 1;
  t.params["x"] = {x, fd};
  config::Distribution cd;
  cd.type = config::ParamType::kCategorical;
  t.params["opt"] = {opt == "a" ? 0.0 : 1.0, cd};
  return t;
}

TEST_CASE("parameter importance: eta squared over bins, shares summing to 1", "[http]") {
  // The objective is decided by the categorical "opt" alone; x is noise-free but irrelevant.
  std::vector<model::TrialRecord> trials;
  for (int i = 0; i < 40; ++i) {
    const std::string opt = i % 2 == 0 ? "a" : "b";
    trials.push_back(Trial(i, (i * 37 % 40) / 40.0, opt, opt == "a" ? 1.0 : 5.0));
  }
  // Trials that are not COMPLETE, or infeasible, are not used.
  trials.push_back(Trial(40, 0.5, "a", 1000, model::TrialState::kPruned));
  model::TrialRecord infeasible = Trial(41, 0.5, "a", -1000);
  infeasible.constraints = {1.0};
  trials.push_back(infeasible);
  auto imp = ParameterImportance(trials);
  REQUIRE(imp.size() == 2);
  CHECK(imp[0].name == "opt");
  CHECK(imp[0].eta_squared == Approx(1.0));
  CHECK(imp[0].trials == 40);
  CHECK(imp[1].name == "x");
  CHECK(imp[1].eta_squared < 0.2);
  CHECK(imp[0].importance + imp[1].importance == Approx(1.0));
  CHECK(imp[0].importance > 0.8);

  // A numeric parameter that decides the objective: y = x.
  std::vector<model::TrialRecord> linear;
  for (int i = 0; i < 100; ++i) linear.push_back(Trial(i, i / 100.0, i % 2 ? "a" : "b", i / 100.0));
  auto lin = ParameterImportance(linear);
  REQUIRE(lin.size() == 2);
  CHECK(lin[0].name == "x");
  CHECK(lin[0].eta_squared > 0.95);  // 10 bins of a uniform line: 1 - 1/100
  CHECK(lin[1].eta_squared < 0.05);

  // Too few trials, or an objective that does not vary: nothing to show.
  CHECK(ParameterImportance(std::vector<model::TrialRecord>(linear.begin(), linear.begin() + 4))
            .empty());
  std::vector<model::TrialRecord> flat;
  for (int i = 0; i < 20; ++i) flat.push_back(Trial(i, i / 20.0, "a", 3.0));
  CHECK(ParameterImportance(flat).empty());
}

}  // namespace
}  // namespace triald::daemon::http
