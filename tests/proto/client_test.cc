// The worker-side clients of the report protocol (proto/client): whatever the C++ header and the
// Python module write must be accepted by the daemon's own decoder (proto/report.h), with the
// numbers exact; what the decoder would reject must be refused by the client already.

#include <fcntl.h>
#include <signal.h>
#include <triald/trial.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "proto/report.h"
#include "tests/worker/child_run.h"

namespace triald::proto {
namespace {

using worker::testing::RunChild;

// A pipe whose read end is drained after the writes: its buffer is enlarged to 1 MiB, far more
// than a test writes, so the writes never block.
class Pipe {
 public:
  Pipe() {
    REQUIRE(pipe2(fds_, O_CLOEXEC) == 0);
    REQUIRE(fcntl(fds_[1], F_SETPIPE_SZ, 1 << 20) >= (1 << 20));
  }
  ~Pipe() {
    close(fds_[0]);
    if (fds_[1] >= 0) close(fds_[1]);
  }
  std::string write_fd() const { return std::to_string(fds_[1]); }
  std::vector<std::string> Lines() {
    close(fds_[1]);
    fds_[1] = -1;
    std::string all;
    char buf[4096];
    for (ssize_t n; (n = read(fds_[0], buf, sizeof buf)) > 0;) all.append(buf, size_t(n));
    return SplitLines(all);
  }
  static std::vector<std::string> SplitLines(const std::string& all) {
    std::vector<std::string> lines;
    std::istringstream in(all);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

 private:
  int fds_[2];
};

ReportMessage Decode(const std::string& line) {
  auto m = ParseReportLine(line);
  INFO(line);
  REQUIRE(m.ok());
  return *m;
}

TEST_CASE("C++ client: every message it writes is accepted by the daemon's decoder, exactly") {
  Pipe pipe;
  const std::string fd = pipe.write_fd();
  const double tricky = std::nextafter(0.1, 1.0);
  {
    triald::Trial trial("{}", fd.c_str(), {}, /*handle_sigterm=*/false);
    trial.Report(0, 0.1);
    trial.Report(7, tricky);
    trial.Report(8, -1e-300);
    trial.Attr("tokens", int64_t{123456789012});
    trial.Attr("ratio", 2.5);
    trial.Attr("ok", true);
    trial.Attr("note", "quote \" backslash \\ tab \t newline \n bad \xff byte, caf\xc3\xa9");
    trial.Heartbeat();
    trial.Error(std::string(200000, 'x'));  // shortened to fit one line, never refused
    trial.Final(std::vector<double>{1.5, 1e300});
  }
  const std::vector<std::string> lines = pipe.Lines();
  REQUIRE(lines.size() == 10);
  std::vector<ReportMessage> m;
  for (const std::string& line : lines) m.push_back(Decode(line));
  CHECK(m[0].type == ReportType::kReport);
  CHECK(m[0].value == 0.1);
  CHECK(m[1].step == 7);
  CHECK(m[1].value == tricky);  // bit for bit
  CHECK(m[2].value == -1e-300);
  CHECK(m[3].json_value == "123456789012");
  CHECK(std::stod(m[4].json_value) == 2.5);
  CHECK(m[5].json_value == "true");
  CHECK(m[6].key == "note");
  CHECK(m[6].json_value.find("caf\xc3\xa9") != std::string::npos);
  CHECK(m[6].json_value.find("\xef\xbf\xbd") != std::string::npos);  // U+FFFD for the bad byte
  CHECK(m[7].type == ReportType::kHeartbeat);
  CHECK(m[8].type == ReportType::kError);
  CHECK(m[8].message.size() < kMaxReportLineBytes);
  CHECK(m[8].message.size() > 1000);
  CHECK(m[9].type == ReportType::kFinal);
  CHECK(m[9].values == std::vector<double>{1.5, 1e300});
}

TEST_CASE("C++ client: refuses what the daemon would reject, before writing anything") {
  Pipe pipe;
  const std::string fd = pipe.write_fd();
  {
    triald::Trial trial("{}", fd.c_str(), {}, false);
    CHECK_THROWS_WITH(trial.Report(1, std::nan("")), Catch::Contains("finite"));
    CHECK_THROWS_WITH(trial.Report(-1, 1.0), Catch::Contains("step must be >= 0"));
    CHECK_THROWS_WITH(trial.Final(INFINITY), Catch::Contains("finite"));
    CHECK_THROWS_WITH(trial.Attr(std::string(300, 'k'), 1.0), Catch::Contains("key"));
    CHECK_THROWS_WITH(trial.Attr("big", std::string(70000, 'v')), Catch::Contains("limit"));
    trial.Final(1.0);
    CHECK_THROWS_WITH(trial.Final(2.0), Catch::Contains("already"));
  }
  const std::vector<std::string> lines = pipe.Lines();
  REQUIRE(lines.size() == 1);
  CHECK(Decode(lines[0]).value == 1.0);
}

TEST_CASE("C++ client: constraints before the final line, one value in a vector stays value") {
  Pipe pipe;
  const std::string fd = pipe.write_fd();
  {
    triald::Trial trial("{}", fd.c_str(), {}, false);
    CHECK(trial.n_objectives() == 1);  // TRIALD_N_OBJECTIVES is unset in the test's environment
    CHECK_THROWS_WITH(trial.Constraints({0.0, std::nan("")}), Catch::Contains("finite"));
    trial.Constraints({});  // nothing to send: feasible
    trial.Constraints({-1.0, std::nextafter(0.5, 1.0)});
    trial.Final(std::vector<double>{2.5});
    CHECK_THROWS_AS(trial.Constraints({1.0}), std::logic_error);
  }
  const std::vector<std::string> lines = pipe.Lines();
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == R"({"type":"constraints","values":[-1,0.50000000000000011]})");
  CHECK(lines[1] == R"({"type":"final","value":2.5})");
  CHECK(Decode(lines[1]).values == std::vector<double>{2.5});
}

namespace {
std::vector<std::string> HeaderObjectiveEnv(const std::string& params, const char* n_objectives) {
  std::vector<std::string> env = {"TRIALD_PARAMS=" + params, "PATH=/usr/bin:/bin"};
  if (n_objectives != nullptr) env.push_back(std::string("TRIALD_N_OBJECTIVES=") + n_objectives);
  return env;
}
}  // namespace

TEST_CASE("C++ client: Run() sends one value per objective and refuses another count") {
  const std::string objective = TRIALD_BIN_DIR "/triald-header-objective";
  SECTION("one objective: value, as before") {
    auto r = RunChild({objective}, HeaderObjectiveEnv(R"({"x": 3, "steps": 0})", nullptr));
    INFO(r.err);
    CHECK(r.exit_code == 0);
    const std::vector<std::string> lines = Pipe::SplitLines(r.report);
    REQUIRE(lines.size() == 2);
    CHECK(lines[1] == R"({"type":"final","value":4})");
  }
  SECTION("two objectives, with a constraint") {
    auto r =
        RunChild({objective}, HeaderObjectiveEnv(R"({"x": 0.5, "steps": 1, "max_x": 0.25})", "2"));
    INFO(r.err);
    CHECK(r.exit_code == 0);
    const std::vector<std::string> lines = Pipe::SplitLines(r.report);
    REQUIRE(lines.size() == 4);
    CHECK(Decode(lines[1]).type == ReportType::kReport);
    CHECK(lines[2] == R"({"type":"constraints","values":[0.25]})");
    CHECK(lines[3] == R"({"type":"final","values":[0.25,2.25]})");
    CHECK(Decode(lines[3]).values == std::vector<double>{0.25, 2.25});
  }
  SECTION("three objectives, two values: the trial fails with Optuna's message") {
    auto r = RunChild({objective}, HeaderObjectiveEnv(R"({"x": 0.5, "steps": 0})", "3"));
    CHECK(r.exit_code == 1);
    const std::vector<std::string> lines = Pipe::SplitLines(r.report);
    REQUIRE(lines.size() == 2);
    CHECK(Decode(lines[1]).message ==
          "The number of the values 2 did not match the number of the objectives 3.");
  }
  SECTION("a malformed count is refused") {
    auto r = RunChild({objective}, HeaderObjectiveEnv(R"({"x": 0.5})", "two"));
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("TRIALD_N_OBJECTIVES=two is not a positive integer") != std::string::npos);
  }
}

TEST_CASE("C++ client: parameters from TRIALD_PARAMS, typed, with errors that name them") {
  triald::Trial trial(
      R"({"lr": 0.001, "layers": 4, "big": 9007199254740993, "opt": "adam\u00e9\ud83d\ude00",)"
      R"( "flag": true, "whole": 3.0})",
      nullptr, {}, false);
  CHECK(trial.Param<double>("lr") == 0.001);
  CHECK(trial.Param<int64_t>("layers") == 4);
  CHECK(trial.Param<double>("layers") == 4.0);
  CHECK(trial.Param<int64_t>("big") == 9007199254740993);  // not rounded through a double
  CHECK(trial.Param<std::string>("opt") == "adam\xc3\xa9\xf0\x9f\x98\x80");
  CHECK(trial.Param<bool>("flag"));
  CHECK(trial.Param<int>("whole") == 3);
  CHECK(trial.Param<int>("missing", 7) == 7);
  CHECK(trial.Param("missing", "dflt") == "dflt");
  CHECK_THROWS_WITH(trial.Param<double>("missing"),
                    Catch::Contains("\"missing\"") && Catch::Contains("lr"));
  CHECK_THROWS_WITH(trial.Param<int>("lr"), Catch::Contains("\"lr\" is not an integer"));
  CHECK_THROWS_WITH(trial.Param<std::string>("layers"), Catch::Contains("not a string"));

  CHECK_THROWS_WITH(triald::Trial("{\"a\": [1]}", nullptr, {}, false),
                    Catch::Contains("parameter \"a\""));
  CHECK_THROWS_WITH(triald::Trial("{\"a\": 1", nullptr, {}, false),
                    Catch::Contains("TRIALD_PARAMS") && Catch::Contains("offset"));
  CHECK_THROWS_WITH(triald::Trial("{}", "99999", {}, false),
                    Catch::Contains("TRIALD_REPORT_FD=99999"));
  // Run by hand: the defaults given to the constructor.
  triald::Trial by_hand(nullptr, nullptr, {{"lr", 0.5}}, false);
  CHECK(by_hand.Param<double>("lr") == 0.5);
}

TEST_CASE("C++ client: ResumeDir() names a retry's resume folder, empty for a first attempt") {
  // The constructor reads the process environment, as a worker's would be set.
  const char* saved = std::getenv("TRIALD_RESUME_DIR");
  const std::string previous = saved != nullptr ? saved : "";
  REQUIRE(setenv("TRIALD_RESUME_DIR", "/srv/triald/studies/s/trials/3", 1) == 0);
  triald::Trial retry(nullptr, nullptr, {}, false);
  CHECK(retry.ResumeDir() == "/srv/triald/studies/s/trials/3");
  REQUIRE(unsetenv("TRIALD_RESUME_DIR") == 0);
  triald::Trial first(nullptr, nullptr, {}, false);
  CHECK(first.ResumeDir().empty());
  if (saved != nullptr) setenv("TRIALD_RESUME_DIR", previous.c_str(), 1);
}

TEST_CASE("C++ client: SIGTERM makes the next report throw TrialStopped, nothing is sent") {
  Pipe pipe;
  const std::string fd = pipe.write_fd();
  struct sigaction old {};
  sigaction(SIGTERM, nullptr, &old);
  {
    triald::Trial trial("{}", fd.c_str(), {}, /*handle_sigterm=*/true);
    trial.Report(0, 1.0);
    CHECK_FALSE(trial.stop_requested());
    REQUIRE(raise(SIGTERM) == 0);  // the handler only sets a flag
    CHECK(trial.stop_requested());
    CHECK_THROWS_AS(trial.Report(1, 0.5), triald::TrialStopped);
    CHECK_THROWS_AS(trial.CheckStop(), triald::TrialStopped);
  }
  triald::detail::g_stop_requested = 0;
  sigaction(SIGTERM, &old, nullptr);
  CHECK(pipe.Lines().size() == 1);
}

// The Python package, run by python3 as triald runs an exec objective.
std::vector<std::string> PythonEnv(const std::string& params) {
  return {"PYTHONPATH=" TRIALD_SOURCE_DIR "/proto/client/python", "TRIALD_PARAMS=" + params,
          "TRIALD_STUDY=s", "TRIALD_TRIAL=3", "PATH=/usr/bin:/bin"};
}

TEST_CASE("Python client: every message it writes is accepted by the daemon's decoder, exactly") {
  const std::string script = R"py(
import math, triald
t = triald.Trial()
assert t.param("lr") == 0.001 and t.param("n") == 4 and t.param("missing", 9) == 9
assert t.number == 3 and t.study == "s"
t.report(0, 0.1)
t.report(7, math.nextafter(0.1, 1.0))
t.attr("meta", {"tokens": 123456789012, "name": "caf\u00e9", "list": [1.5, True, None]})
t.heartbeat()
t.error("x" * 200000)
for bad in (lambda: t.report(1, float("nan")), lambda: t.report(-1, 1.0),
            lambda: t.report(1, True), lambda: t.attr("k", float("inf")),
            lambda: t.attr("k" * 300, 1), lambda: t.attr("big", "v" * 70000),
            lambda: t.finish(float("inf"))):
    try:
        bad()
    except ValueError:
        pass
    else:
        raise SystemExit("not refused")
try:
    t.param("nope")
except KeyError as e:
    assert "nope" in str(e) and "lr" in str(e)
t.finish(values=[1.5, 1e300])
)py";
  auto r = RunChild({"/usr/bin/python3", "-c", script}, PythonEnv(R"({"lr": 0.001, "n": 4})"));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const std::vector<std::string> lines = Pipe::SplitLines(r.report);
  REQUIRE(lines.size() == 6);
  std::vector<ReportMessage> m;
  for (const std::string& line : lines) m.push_back(Decode(line));
  CHECK(m[0].value == 0.1);
  CHECK(m[1].step == 7);
  CHECK(m[1].value == std::nextafter(0.1, 1.0));
  CHECK(m[2].key == "meta");
  CHECK(m[2].json_value.find("123456789012") != std::string::npos);
  CHECK(m[3].type == ReportType::kHeartbeat);
  CHECK(m[4].type == ReportType::kError);
  CHECK(m[4].message.size() < kMaxReportLineBytes);
  CHECK(m[5].values == std::vector<double>{1.5, 1e300});
}

TEST_CASE("Python client: run() sends one value per objective and refuses another count") {
  const std::string script = R"py(
import triald
triald.run(lambda trial: (0.25, 812))
)py";
  std::vector<std::string> env = PythonEnv("{}");
  env.push_back("TRIALD_N_OBJECTIVES=2");
  auto r = RunChild({"/usr/bin/python3", "-c", script}, env);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  std::vector<std::string> lines = Pipe::SplitLines(r.report);
  REQUIRE(lines.size() == 1);
  CHECK(Decode(lines[0]).values == std::vector<double>{0.25, 812});

  r = RunChild({"/usr/bin/python3", "-c", script}, PythonEnv("{}"));  // one objective
  CHECK(r.exit_code == 1);
  lines = Pipe::SplitLines(r.report);
  REQUIRE(lines.size() == 1);
  CHECK(Decode(lines[0]).message ==
        "The number of the values 2 did not match the number of the objectives 1.");
}

TEST_CASE("Python client: run() stops at the next report on SIGTERM and exits 143") {
  const std::string script = R"py(
import time, triald
def objective(trial):
    for step in range(100000):
        time.sleep(0.01)
        trial.report(step, 1.0 / (step + 1))
    return 0.0
triald.run(objective)
)py";
  auto r = RunChild({"/usr/bin/python3", "-c", script}, PythonEnv("{}"),
                    /*sigterm_after_reports=*/3);
  INFO(r.err);
  CHECK(r.exit_code == 143);
  CHECK(r.err.find("Traceback") == std::string::npos);
  for (const std::string& line : Pipe::SplitLines(r.report)) {
    CHECK(Decode(line).type == ReportType::kReport);  // no final after the stop
  }
  CHECK(r.seconds_after_sigterm < 5);  // generous: the next step boundary is 10 ms away
}

TEST_CASE("Python client: run() sends the objective's exception as the trial's error") {
  const std::string script = R"py(
import triald
def objective(trial):
    raise RuntimeError("CUDA out of memory (simulated)")
triald.run(objective)
)py";
  auto r = RunChild({"/usr/bin/python3", "-c", script}, PythonEnv("{}"));
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("Traceback") != std::string::npos);
  const std::vector<std::string> lines = Pipe::SplitLines(r.report);
  REQUIRE(lines.size() == 1);
  CHECK(Decode(lines[0]).message == "RuntimeError: CUDA out of memory (simulated)");
}

}  // namespace
}  // namespace triald::proto
