// The dashboard's HTTP server and JSON API against a real triald (--http 127.0.0.1:0): the
// shapes the page reads, the token rule, the errors, and the bounds on what a client may send.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <set>
#include <thread>
#include <vector>

#include "common/json.h"
#include "tests/http/dashboard_fixture.h"
#include "tests/http/http_client.h"
#include "tests/integration/harness.h"

namespace triald::testing {
namespace json = boost::json;

namespace {

json::value Body(const HttpAnswer& a) {
  INFO(a.raw.substr(0, 2000));
  auto v = common::ParseJsonExact(a.body, 64);
  REQUIRE(v.ok());
  return *v;
}

std::string ErrorOf(const HttpAnswer& a) {
  json::value v = Body(a);
  CHECK(v.at("ok") == false);
  return std::string(v.at("error").as_string());
}

json::object StatusOf(TestDaemon& d, const std::string& study) {
  return d.Call("status", {{"study", study}}).as_object();
}

}  // namespace

TEST_CASE("dashboard: the page, the API's shapes, errors and the token rule",
          "[http][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"), 4);
  d.AddArgs({"--http", "127.0.0.1:0", "--socket-read-open"});
  d.Start();
  const int port = DashboardPort(d.log());
  const std::string token = ReadToken(d.state_dir());
  CHECK_THAT(d.log(),
             Catch::Contains("actions need the token in " + d.state_dir() + "/http.token"));
  CHECK(token.size() == 64);
  struct stat st {};
  REQUIRE(::stat((d.state_dir() + "/http.token").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  CHECK(st.st_uid == ::geteuid());

  const std::string fast = SubmitDashboardSweep(d, dir, "fast", 6, 2, 0.05);
  d.WaitStudy(fast, 120);
  const std::string slow = SubmitDashboardSweep(d, dir, "slow", 50, 1, 2.0);

  SECTION("the page: every view is the one embedded document, with a strict CSP") {
    for (const std::string path : {"/", "/studies/fast", "/studies/fast/trials/0"}) {
      HttpAnswer a = Http(port, "GET", path);
      INFO(path);
      CHECK(a.status == 200);
      CHECK(a.headers["content-type"] == "text/html; charset=utf-8");
      CHECK_THAT(a.headers["content-security-policy"], Catch::Contains("default-src 'none'"));
      CHECK(a.headers["cache-control"] == "no-store");
      CHECK_THAT(a.body, Catch::Contains("<title>triald dashboard</title>"));
      // Nothing is fetched from elsewhere.
      CHECK(a.body.find("<script src") == std::string::npos);
      CHECK(a.body.find("<link") == std::string::npos);
    }
  }

  SECTION("GET /api/studies: each study with its progress, best, ETA and nodes") {
    json::value v = Body(Http(port, "GET", "/api/studies"));
    CHECK(v.at("node").is_string());
    CHECK(v.at("generated_at").is_number());
    const json::array& studies = v.at("studies").as_array();
    REQUIRE(studies.size() == 2);
    for (const json::value& s : studies) {
      for (const char* key : {"name", "state", "paused", "n_trials", "finished", "running",
                              "failed", "best", "eta_s", "nodes", "submitter", "directions"}) {
        INFO(key);
        CHECK(s.as_object().contains(key));
      }
      if (s.at("name") == "fast") {
        CHECK(s.at("state") == "COMPLETE");
        CHECK(s.at("finished") == 6);
        CHECK(s.at("best").at("number").is_int64());
        CHECK(s.at("eta_s").is_null());
      }
    }
  }

  SECTION("GET /api/studies/NAME: the snapshot the study page draws") {
    json::value v = Body(Http(port, "GET", "/api/studies/fast"));
    CHECK(v.at("study").at("name") == "fast");
    CHECK(v.at("study").at("finished") == 6);
    const json::array& trials = v.at("trials").as_array();
    REQUIRE(trials.size() == 6);
    for (const json::value& t : trials) {
      CHECK(t.at("state") == "COMPLETE");
      CHECK(t.at("params").at("x").is_number());
      CHECK(t.at("intermediate").as_array().size() == 3);
      CHECK(t.at("intermediate_steps") == 3);
      CHECK(t.at("value").is_number());
      CHECK(t.at("fail_reason").is_null());
      CHECK(t.at("retry_of").is_null());
    }
    CHECK(v.at("trials_omitted") == 0);
    REQUIRE(v.at("best_numbers").as_array().size() == 1);
    CHECK(v.at("best_numbers").at(0) == v.at("study").at("best").at("number"));
    CHECK(v.at("importance").at("method") == "eta_squared_binned");
    const json::array& imp = v.at("importance").at("params").as_array();
    REQUIRE(imp.size() == 1);  // one parameter, all of the variance (y = x^2)
    CHECK(imp.at(0).at("param") == "x");
    CHECK(imp.at(0).at("importance").to_number<double>() == Approx(1.0));
    CHECK(v.at("nodes").as_array().size() == 1);
    CHECK(v.at("running").as_array().empty());
    // A running study shows its running trial, with its (CPU) slot.
    json::value s = Body(Http(port, "GET", "/api/studies/slow"));
    for (int i = 0; i < 100 && s.at("running").as_array().empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      s = Body(Http(port, "GET", "/api/studies/slow"));
    }
    REQUIRE(s.at("running").as_array().size() == 1);
    CHECK(s.at("running").at(0).at("gpu_slots") == "");
  }

  SECTION("GET /api/studies/NAME/trials/N: params, values, curve, attrs, events, log tails") {
    json::value v = Body(Http(port, "GET", "/api/studies/fast/trials/2"));
    const json::object& t = v.at("trial").as_object();
    CHECK(t.at("number") == 2);
    CHECK(t.at("intermediate").as_array().size() == 3);
    CHECK(t.at("attrs").at("seen").is_number());
    CHECK_FALSE(v.at("events").as_array().empty());
    CHECK(v.at("stdout").at("exists") == true);
    CHECK_THAT(std::string(v.at("stdout").at("content").as_string()),
               Catch::Contains("hello from trial 2"));
    CHECK_THAT(std::string(v.at("stderr").at("content").as_string()),
               Catch::Contains("a line on stderr"));
  }

  SECTION("404, 405 and 400 say what was wrong") {
    CHECK(Http(port, "GET", "/api/studies/nope").status == 404);
    CHECK_THAT(ErrorOf(Http(port, "GET", "/api/studies/nope")), Catch::Contains("nope"));
    CHECK(Http(port, "GET", "/api/studies/fast/trials/99").status == 404);
    CHECK(Http(port, "GET", "/api/studies/fast/trials/x").status == 400);
    CHECK(Http(port, "GET", "/nope").status == 404);
    CHECK(Http(port, "GET", "/api/studies/fast/nope").status == 404);
    CHECK(Http(port, "POST", "/api/studies/nope/pause", token, "{}").status == 404);
    HttpAnswer wrong_method = Http(port, "GET", "/api/studies/fast/pause");
    CHECK(wrong_method.status == 405);
    CHECK(wrong_method.headers["allow"] == "POST");
    CHECK(Http(port, "POST", "/api/studies", token, "{}").status == 405);
    HttpAnswer delete_page = Http(port, "DELETE", "/", token);
    CHECK(delete_page.status == 405);
    CHECK(delete_page.headers["allow"] == "GET, HEAD");
    // HEAD: GET's status and headers, Content-Length included, and no body.
    HttpAnswer page = Http(port, "GET", "/", token);
    HttpAnswer head = Http(port, "HEAD", "/", token);
    CHECK(head.status == 200);
    CHECK(head.body.empty());
    CHECK(head.headers["content-length"] == std::to_string(page.body.size()));
    CHECK(head.headers["content-type"] == page.headers["content-type"]);
    HttpAnswer head_api = Http(port, "HEAD", "/api/studies/fast", token);
    CHECK(head_api.status == 200);
    CHECK(head_api.body.empty());
    CHECK(std::stoul(head_api.headers["content-length"]) > 0);
    CHECK(Http(port, "HEAD", "/api/studies/nope", token).status == 404);
    // Bad values: the control verbs' own messages; nothing changes.
    CHECK_THAT(
        ErrorOf(Http(port, "POST", "/api/studies/slow/parallelism", token, "{\"parallelism\":0}")),
        Catch::Contains("parallelism") && Catch::Contains("expected an integer from 1"));
    CHECK(Http(port, "POST", "/api/studies/slow/extend", token, "{\"n_trials\":\"x\"}").status ==
          400);
    CHECK(Http(port, "POST", "/api/studies/slow/extend", token, "{}").status == 400);
    CHECK(Http(port, "POST", "/api/studies/slow/extend", token, "not json").status == 400);
    CHECK_THAT(ErrorOf(Http(port, "POST", "/api/studies/slow/pause", token, "{\"now\":1}")),
               Catch::Contains("unknown key \"now\""));
    CHECK(StatusOf(d, "slow").at("paused") == false);
    CHECK(StatusOf(d, "slow").at("parallelism").is_null());
    // A DNS-rebinding page's Host is refused.
    CHECK(Http(port, "GET", "/api/studies", "", "", "evil.example").status == 421);
  }

  SECTION("actions: 403 and nothing changes without the token or with a wrong one") {
    for (const std::string& given : {std::string(), std::string(64, '0'), token + "x"}) {
      for (const char* action : {"pause", "cancel"}) {
        HttpAnswer a = Http(port, "POST", std::string("/api/studies/slow/") + action, given, "{}");
        CHECK(a.status == 403);
        CHECK_THAT(ErrorOf(a), Catch::Contains("http.token"));
      }
      CHECK(Http(port, "POST", "/api/studies/slow/extend", given, "{\"n_trials\":60}").status ==
            403);
      CHECK(Http(port, "POST", "/api/studies/slow/parallelism", given, "{\"parallelism\":3}")
                .status == 403);
    }
    json::object s = StatusOf(d, "slow");
    CHECK(s.at("paused") == false);
    CHECK(s.at("state") == "RUNNING");
    CHECK(s.at("n_trials") == 50);
    CHECK(s.at("parallelism").is_null());
  }

  SECTION("actions with the token: pause, resume, parallelism, extend, cancel") {
    json::value p = Body(Http(port, "POST", "/api/studies/slow/pause", token));
    CHECK(p.at("ok") == true);
    CHECK(p.at("result").at("paused") == true);
    CHECK(StatusOf(d, "slow").at("paused") == true);
    // The study snapshot shows it at once.
    CHECK(Body(Http(port, "GET", "/api/studies/slow")).at("study").at("paused") == true);
    CHECK(Http(port, "POST", "/api/studies/slow/pause", token).status == 409);  // already
    CHECK(Body(Http(port, "POST", "/api/studies/slow/resume", token, "{}"))
              .at("result")
              .at("paused") == false);
    CHECK(StatusOf(d, "slow").at("paused") == false);
    CHECK(Body(Http(port, "POST", "/api/studies/slow/parallelism", token, "{\"parallelism\":2}"))
              .at("result")
              .at("parallelism") == 2);
    CHECK(StatusOf(d, "slow").at("parallelism") == 2);
    CHECK(Body(Http(port, "POST", "/api/studies/slow/extend", token, "{\"n_trials\":60}"))
              .at("result")
              .at("n_trials") == 60);
    CHECK(StatusOf(d, "slow").at("n_trials") == 60);
    // Below what finished: the verb's own refusal.
    CHECK(Http(port, "POST", "/api/studies/fast/extend", token, "{\"n_trials\":2}").status == 400);
    CHECK(Body(Http(port, "POST", "/api/studies/slow/cancel", token)).at("result").at("state") ==
          "CANCELLED");
    CHECK(StatusOf(d, "slow").at("state") == "CANCELLED");
  }

  (void)Http(port, "POST", "/api/studies/slow/cancel", token);
  d.WaitStudy(slow, 60);
  d.Call("ping");
}

TEST_CASE("dashboard: without --socket-read-open, reading needs the token too",
          "[http][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"), 2);
  d.AddArgs({"--http", "127.0.0.1:0"});
  d.Start();
  const int port = DashboardPort(d.log());
  const std::string token = ReadToken(d.state_dir());
  const std::string study = SubmitDashboardSweep(d, dir, "closed", 2, 2, 0.01);
  d.WaitStudy(study, 60);
  for (const char* path : {"/api/studies", "/api/studies/closed", "/api/studies/closed/trials/0"}) {
    INFO(path);
    HttpAnswer a = Http(port, "GET", path);
    CHECK(a.status == 403);
    CHECK_THAT(ErrorOf(a), Catch::Contains("--socket-read-open"));
    CHECK(Http(port, "GET", path, std::string(64, 'f')).status == 403);
    CHECK(Http(port, "GET", path, token).status == 200);
  }
  // The page holds no data: served to anyone, it asks for the token.
  CHECK(Http(port, "GET", "/").status == 200);
  // A new token at each start; the old one stops working.
  d.Stop();
  d.Start();
  const std::string log = d.log();
  const int port2 = DashboardPort(log.substr(log.rfind("dashboard: http")));
  const std::string token2 = ReadToken(d.state_dir());
  CHECK(token2 != token);
  CHECK(Http(port2, "GET", "/api/studies", token).status == 403);
  CHECK(Http(port2, "GET", "/api/studies", token2).status == 200);
}

TEST_CASE(
    "dashboard: oversized, malformed and too many requests get errors and triald stays healthy",
    "[http][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"), 2);
  d.AddArgs({"--http", "127.0.0.1:0", "--socket-read-open"});
  d.Start();
  const int port = DashboardPort(d.log());
  const std::string token = ReadToken(d.state_dir());
  auto healthy = [&] {
    d.Call("ping");
    CHECK(Http(port, "GET", "/api/studies").status == 200);
  };

  // A header over 8 KiB: 431.
  HttpAnswer big_header = SendRaw(port, "GET /api/studies HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " +
                                            std::string(10000, 'a') + "\r\n\r\n");
  CHECK(big_header.status == 431);
  healthy();
  // A body over 64 KiB: 413, before it is read whole.
  HttpAnswer big_body = SendRaw(
      port, "POST /api/studies/x/pause HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " +
                token + "\r\nContent-Length: 200000\r\n\r\n" + std::string(200000, '{'));
  CHECK(big_body.status == 413);
  healthy();
  // Not HTTP at all, a bad chunk, a bad version: 400.
  CHECK(SendRaw(port, "GARBAGE\r\n\r\n").status == 400);
  CHECK(SendRaw(port, "GET / HTTP/1.1\r\nHost 127.0.0.1\r\n\r\n").status == 400);
  CHECK(SendRaw(port,
                "POST /api/studies/x/pause HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: "
                "chunked\r\n\r\nzz\r\n")
            .status == 400);
  CHECK(SendRaw(port, std::string("GET / HTTP/1.1\r\nHost: \x01\x02\r\n\r\n")).status != 200);
  healthy();
  // Keep-alive: several requests on one connection.
  {
    common::UniqueFd fd = ConnectLoopback(port);
    const std::string one = "GET /api/studies HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    const std::string last =
        "GET /api/studies HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    const std::string all = one + one + last;
    REQUIRE(::write(fd.get(), all.data(), all.size()) == static_cast<ssize_t>(all.size()));
    HttpAnswer a = ReadAnswer(fd.get());
    size_t count = 0;
    for (size_t at = a.raw.find("HTTP/1.1 200"); at != std::string::npos;
         at = a.raw.find("HTTP/1.1 200", at + 1)) {
      ++count;
    }
    CHECK(count == 3);
  }
  // The connection cap (64): one more is answered 503 and closed; the others are served.
  {
    std::vector<common::UniqueFd> held;
    for (int i = 0; i < 64; ++i) held.push_back(ConnectLoopback(port));
    // The server counts a connection once it has accepted it: until it has accepted all 64, a
    // request is served (and its connection closed again). Each try is one more request.
    HttpAnswer over = Http(port, "GET", "/api/studies");
    for (int i = 0; i < 100 && over.status == 200; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      over = Http(port, "GET", "/api/studies");
    }
    CHECK(over.status == 503);
    CHECK_THAT(over.body, Catch::Contains("too many dashboard connections"));
    d.Call("ping");  // the control socket is another door
    held.clear();
  }
  for (int i = 0; i < 50 && Http(port, "GET", "/api/studies").status != 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  healthy();
  CHECK(::kill(d.pid(), 0) == 0);
}

TEST_CASE("triald --http: a bad address is a usage error naming it", "[http][integration]") {
  auto [code, out] = Shell(BinDir() + "/triald --state-dir /nonexistent-x --http 127.0.0.1:99999");
  CHECK(code == 2);
  CHECK_THAT(out, Catch::Contains("--http") && Catch::Contains("99999"));
  auto [code2, out2] =
      Shell(BinDir() + "/triald --state-dir /nonexistent-x --http host.example:80");
  CHECK(code2 == 2);
  CHECK_THAT(out2, Catch::Contains("not an IP address"));
  // The config file's value is checked the same way, and the message says where it came from.
  TempDir dir;
  const std::string config = dir.File("triald.toml");
  std::ofstream(config) << "[daemon]\nhttp = \"bogus\"\n";
  auto [code3, out3] =
      Shell(BinDir() + "/triald --state-dir " + dir.File("state") + " --config " + config);
  CHECK(code3 == 2);
  CHECK_THAT(out3, Catch::Contains(config + ": [daemon] http: --http \"bogus\""));
}

}  // namespace triald::testing

namespace triald::testing {

TEST_CASE("dashboard: a study with two objectives carries its Pareto front",
          "[http][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"), 4);
  d.AddArgs({"--http", "127.0.0.1:0", "--socket-read-open"});
  d.Start();
  const int port = DashboardPort(d.log());
  const std::string script = dir.File("two.py");
  std::ofstream(script) << "import json, os\n"
                           "x = json.loads(os.environ['TRIALD_PARAMS'])['x']\n"
                           "out = os.fdopen(3, 'w')\n"
                           "out.write(json.dumps({'type': 'final', 'values': [x * x, (x - 1) ** "
                           "2]}) + '\\n')\n";
  std::string toml = ExecSweep("two", "[\"/usr/bin/python3\", \"" + script + "\"]", 12, 4);
  const size_t at = toml.find("parallelism");
  REQUIRE(at != std::string::npos);
  toml.insert(at, "directions = [\"minimize\", \"minimize\"]\n");
  const std::string study = d.Submit(toml, dir.File("two.toml"));
  d.WaitStudy(study, 120);

  json::value v = Body(Http(port, "GET", "/api/studies/two"));
  CHECK(v.at("study").at("directions").as_array().size() == 2);
  std::set<int64_t> front;
  for (const json::value& n : v.at("best_numbers").as_array()) front.insert(n.as_int64());
  // The same front as the `best` verb's.
  std::set<int64_t> expected;
  json::value best = d.Call("best", {{"study", study}});
  for (const json::value& t : best.at("best_trials").as_array()) {
    expected.insert(t.at("number").as_int64());
  }
  CHECK_FALSE(expected.empty());
  CHECK(front == expected);
  for (const json::value& t : v.at("trials").as_array()) {
    CHECK(t.at("values").as_array().size() == 2);
  }
}

}  // namespace triald::testing
