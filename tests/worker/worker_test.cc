// Tests of trial-worker: the report protocol writer, parameter parsing, the LibTorch objective,
// and the executable end to end (fork/exec with a real report pipe, as the daemon runs it).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "tests/worker/child_run.h"
#include "worker/builtin_objectives.h"
#include "worker/params.h"
#include "worker/reporter.h"

namespace triald::worker {
namespace {

namespace json = boost::json;

// A pipe whose ends close themselves; -1 marks a closed end.
struct Pipe {
  int read_fd = -1;
  int write_fd = -1;
  Pipe() {
    int fds[2];
    REQUIRE(pipe2(fds, O_CLOEXEC) == 0);
    read_fd = fds[0];
    write_fd = fds[1];
  }
  ~Pipe() {
    CloseRead();
    CloseWrite();
  }
  void CloseRead() {
    if (read_fd >= 0) close(read_fd);
    read_fd = -1;
  }
  void CloseWrite() {
    if (write_fd >= 0) close(write_fd);
    write_fd = -1;
  }
};

// Everything until EOF; the write end must be closed first.
std::string ReadAll(int fd) {
  std::string data;
  char buffer[4096];
  for (;;) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    REQUIRE(n >= 0);
    if (n == 0) return data;
    data.append(buffer, static_cast<size_t>(n));
  }
}

std::vector<std::string> SplitLines(const std::string& data) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < data.size()) {
    size_t end = data.find('\n', start);
    REQUIRE(end != std::string::npos);  // every line is complete
    lines.push_back(data.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// Parses a protocol line and checks its shape as the daemon would: an object with a known
// "type" and the members that type requires, numbers finite.
json::object ParseProtocolLine(const std::string& line) {
  INFO("line: " << line);
  REQUIRE(line.size() + 1 <= Reporter::kMaxLineBytes);
  json::error_code ec;
  json::value value = json::parse(line, ec);
  REQUIRE(!ec);
  REQUIRE(value.is_object());
  json::object object = value.as_object();
  REQUIRE(object.contains("type"));
  REQUIRE(object.at("type").is_string());
  std::string type(object.at("type").as_string());
  if (type == "report") {
    REQUIRE(object.at("step").is_int64());
    REQUIRE(object.at("value").is_number());
  } else if (type == "final") {
    REQUIRE(object.at("value").is_number());
  } else if (type == "attr") {
    REQUIRE(object.at("key").is_string());
    REQUIRE(object.contains("value"));
  } else if (type == "error") {
    REQUIRE(object.at("message").is_string());
  } else {
    REQUIRE(type == "heartbeat");
  }
  return object;
}

std::vector<json::object> ParseProtocol(const std::string& data) {
  std::vector<json::object> objects;
  for (const std::string& line : SplitLines(data)) objects.push_back(ParseProtocolLine(line));
  return objects;
}

std::string TypeOf(const json::object& line) { return std::string(line.at("type").as_string()); }

TEST_CASE("Reporter writes one exact JSON line per call", "[worker]") {
  Pipe pipe;
  Reporter reporter(pipe.write_fd);
  REQUIRE(reporter.Report(3, 0.5).ok());
  REQUIRE(reporter.Report(4, 2).ok());
  REQUIRE(reporter.Final(0.25).ok());
  REQUIRE(reporter.Attr("tokens_seen", 123456).ok());
  REQUIRE(reporter.Attr("note", "warm \"start\"").ok());
  REQUIRE(reporter.Attr("shape", json::value{{"layers", 2}, {"dims", {64, 128}}}).ok());
  REQUIRE(reporter.Error("CUDA out of memory").ok());
  REQUIRE(reporter.Heartbeat().ok());
  pipe.CloseWrite();
  std::string data = ReadAll(pipe.read_fd);

  // Numbers are in Boost.JSON's own notation (5E-1); any JSON parser reads them back exactly.
  CHECK(SplitLines(data) ==
        std::vector<std::string>{
            R"({"type":"report","step":3,"value":5E-1})",
            R"({"type":"report","step":4,"value":2E0})",
            R"({"type":"final","value":2.5E-1})",
            R"({"type":"attr","key":"tokens_seen","value":123456})",
            R"({"type":"attr","key":"note","value":"warm \"start\""})",
            R"({"type":"attr","key":"shape","value":{"layers":2,"dims":[64,128]}})",
            R"({"type":"error","message":"CUDA out of memory"})",
            R"({"type":"heartbeat"})",
        });
  std::vector<json::object> lines = ParseProtocol(data);
  REQUIRE(lines.size() == 8);
  CHECK(lines[0].at("value").as_double() == 0.5);
  CHECK(lines[2].at("value").as_double() == 0.25);
}

TEST_CASE("Reporter refuses non-finite values and says so on the pipe", "[worker]") {
  Pipe pipe;
  Reporter reporter(pipe.write_fd);
  common::Status nan_report = reporter.Report(7, std::numeric_limits<double>::quiet_NaN());
  common::Status inf_final = reporter.Final(std::numeric_limits<double>::infinity());
  common::Status inf_attr = reporter.Attr("loss", json::array{1.0, -HUGE_VAL});
  pipe.CloseWrite();

  CHECK(nan_report.code() == common::Code::kInvalidArgument);
  CHECK(nan_report.message().find("step 7") != std::string::npos);
  CHECK(inf_final.code() == common::Code::kInvalidArgument);
  CHECK(inf_final.message().find("inf") != std::string::npos);
  CHECK(inf_attr.code() == common::Code::kInvalidArgument);
  CHECK(inf_attr.message().find("'loss'") != std::string::npos);

  // No report or final line carries a bogus number: each refusal of a value became an error
  // line, and the attr was simply not sent.
  std::vector<json::object> lines = ParseProtocol(ReadAll(pipe.read_fd));
  REQUIRE(lines.size() == 2);
  CHECK(TypeOf(lines[0]) == "error");
  CHECK(std::string(lines[0].at("message").as_string()).find("nan") != std::string::npos);
  CHECK(TypeOf(lines[1]) == "error");
  CHECK(std::string(lines[1].at("message").as_string()).find("final value is inf") !=
        std::string::npos);
}

TEST_CASE("Reporter keeps lines within 64 KiB and valid UTF-8", "[worker]") {
  Pipe pipe;
  // Room for two maximal lines, so the writes below do not wait for a reader.
  REQUIRE(fcntl(pipe.write_fd, F_SETPIPE_SZ, 1 << 20) >= 0);
  Reporter reporter(pipe.write_fd);
  common::Status big_attr = reporter.Attr("blob", std::string(70 * 1024, 'a'));
  CHECK(big_attr.code() == common::Code::kInvalidArgument);
  CHECK(big_attr.message().find("65536") != std::string::npos);
  CHECK(reporter.Attr("bad", std::string("caf\xc3", 4)).code() == common::Code::kInvalidArgument);

  // An error message is the last word of a failing worker: shortened and repaired, never lost.
  std::string huge_message = std::string(40 * 1024, '\x01') + std::string(100 * 1024, 'x');
  REQUIRE(reporter.Error(huge_message).ok());
  REQUIRE(reporter.Error("bad byte \xff here").ok());
  pipe.CloseWrite();
  std::string data = ReadAll(pipe.read_fd);
  std::vector<std::string> raw = SplitLines(data);
  REQUIRE(raw.size() == 2);
  CHECK(raw[0].size() + 1 <= Reporter::kMaxLineBytes);
  CHECK(raw[0].size() + 1 > Reporter::kMaxLineBytes - 16);
  std::vector<json::object> lines = ParseProtocol(data);
  std::string shortened(lines[0].at("message").as_string());
  CHECK(shortened.substr(shortened.size() - 11) == "[truncated]");
  CHECK(std::string(lines[1].at("message").as_string()) == "bad byte \xEF\xBF\xBD here");
}

TEST_CASE("Reporter finishes long lines across partial writes on a non-blocking pipe", "[worker]") {
  Pipe pipe;
  // A one-page pipe and a non-blocking writer force short writes and EAGAIN.
  REQUIRE(fcntl(pipe.write_fd, F_SETPIPE_SZ, 4096) >= 0);
  REQUIRE(fcntl(pipe.write_fd, F_SETFL, O_NONBLOCK) == 0);
  std::string received;
  std::thread reader([&] { received = ReadAll(pipe.read_fd); });
  Reporter reporter(pipe.write_fd);
  std::string payload(60 * 1024, 'z');
  common::Status status = reporter.Attr("payload", payload);
  REQUIRE(reporter.Heartbeat().ok());
  pipe.CloseWrite();
  reader.join();
  REQUIRE(status.ok());
  std::vector<json::object> lines = ParseProtocol(received);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].at("value").as_string() == payload);
  CHECK(TypeOf(lines[1]) == "heartbeat");
}

TEST_CASE("Reporter turns a closed pipe into an error status, not a SIGPIPE death", "[worker]") {
  // SIGPIPE keeps its default (fatal) disposition here: if the Reporter did not shield the
  // write, this test process would die.
  Pipe pipe;
  pipe.CloseRead();
  Reporter reporter(pipe.write_fd);
  common::Status status = reporter.Final(1.0);
  CHECK(status.code() == common::Code::kIo);
  CHECK(status.message().find("Broken pipe") != std::string::npos);
  sigset_t pending;
  sigemptyset(&pending);
  sigpending(&pending);
  CHECK(sigismember(&pending, SIGPIPE) == 0);
}

TEST_CASE("Reporter::FromEnvValue explains a missing or unusable descriptor", "[worker]") {
  auto missing = Reporter::FromEnvValue(nullptr);
  REQUIRE(!missing.ok());
  CHECK(missing.status().message() ==
        "TRIALD_REPORT_FD is not set; trial-worker is meant to be started by triald");
  auto garbage = Reporter::FromEnvValue("three");
  REQUIRE(!garbage.ok());
  CHECK(garbage.status().message().find("'three'") != std::string::npos);
  auto closed = Reporter::FromEnvValue("987");
  REQUIRE(!closed.ok());
  CHECK(closed.status().message().find("not an open file descriptor") != std::string::npos);
  Pipe pipe;
  auto read_end = Reporter::FromEnvValue(std::to_string(pipe.read_fd).c_str());
  REQUIRE(!read_end.ok());
  CHECK(read_end.status().message().find("read-only") != std::string::npos);
  auto good = Reporter::FromEnvValue(std::to_string(pipe.write_fd).c_str());
  REQUIRE(good.ok());
  CHECK(good->fd() == pipe.write_fd);
}

TEST_CASE("Params gives typed values, defaults, and errors naming the parameter", "[worker]") {
  auto params = Params::Parse(
      R"({"learning_rate": 0.01, "steps": 20, "steps_f": 30.0, "half": 2.5,
          "device": "cpu", "flag": true, "big": 18446744073709551615})");
  REQUIRE(params.ok());
  CHECK(params->GetDouble("learning_rate", 1).value() == Approx(0.01));
  CHECK(params->GetDouble("steps", 1).value() == 20.0);
  CHECK(params->GetDouble("absent", 1.5).value() == 1.5);
  CHECK(params->GetInt("steps", 1).value() == 20);
  CHECK(params->GetInt("steps_f", 1).value() == 30);
  CHECK(params->GetInt("absent", -4).value() == -4);
  CHECK(params->GetString("device", "x").value() == "cpu");
  CHECK(params->GetString("absent", "dflt").value() == "dflt");

  auto half = params->GetInt("half", 0);
  REQUIRE(!half.ok());
  CHECK(half.status().code() == common::Code::kInvalidArgument);
  CHECK(half.status().message() ==
        "TRIALD_PARAMS: parameter 'half' must be an integer, got a number 2.5E0");
  auto flag = params->GetDouble("flag", 0);
  REQUIRE(!flag.ok());
  CHECK(flag.status().message() ==
        "TRIALD_PARAMS: parameter 'flag' must be a number, got a boolean true");
  auto device = params->GetInt("device", 0);
  REQUIRE(!device.ok());
  CHECK(device.status().message().find("'device' must be an integer, got a string \"cpu\"") !=
        std::string::npos);
  CHECK(params->GetString("steps", "").status().message().find("must be a string") !=
        std::string::npos);
  CHECK(params->GetInt("big", 0).status().message().find("fits in 64 bits") != std::string::npos);
  auto overflow = Params::Parse(R"({"x0": 1e999})");
  REQUIRE(overflow.ok());
  CHECK(overflow->GetDouble("x0", 0).status().message().find("'x0' must be a finite number") !=
        std::string::npos);

  // UnreadNames lists what no Get* call asked for: how objectives catch a misspelt parameter.
  auto fresh = Params::Parse(R"({"learning_rate": 1, "learnig_rate": 2})");
  REQUIRE(fresh.ok());
  (void)fresh->GetDouble("learning_rate", 0);
  CHECK(fresh->UnreadNames() == std::vector<std::string>{"learnig_rate"});
}

TEST_CASE("TRIALD_* environment parsing", "[worker]") {
  auto env = TrialEnvFromValues(R"({"x": 1})", "sweep-a", "17", "/tmp/trial-17");
  REQUIRE(env.ok());
  CHECK(env->params.GetDouble("x", 0).value() == 1.0);
  CHECK(env->study == "sweep-a");
  CHECK(env->trial == 17);
  CHECK(env->trial_dir == "/tmp/trial-17");

  auto unset = TrialEnvFromValues(nullptr, nullptr, nullptr, nullptr);
  REQUIRE(unset.ok());
  CHECK(unset->params.values().empty());
  CHECK(!unset->trial.has_value());

  auto not_json = TrialEnvFromValues("{x: 1}", nullptr, nullptr, nullptr);
  REQUIRE(!not_json.ok());
  CHECK(not_json.status().message().rfind("TRIALD_PARAMS is not valid JSON", 0) == 0);
  auto not_object = TrialEnvFromValues("[1, 2]", nullptr, nullptr, nullptr);
  REQUIRE(!not_object.ok());
  CHECK(not_object.status().message() ==
        "TRIALD_PARAMS must be a JSON object of parameters, got an array [1,2]");
  auto bad_trial = TrialEnvFromValues(nullptr, nullptr, "7a", nullptr);
  REQUIRE(!bad_trial.ok());
  CHECK(bad_trial.status().message().find("TRIALD_TRIAL='7a'") != std::string::npos);
}

// Records what an objective reports; can ask it to stop after some steps.
class RecordingContext : public ObjectiveContext {
 public:
  common::Status OnStep(int64_t step, double value) override {
    steps.push_back(step);
    values.push_back(value);
    return common::Status::Ok();
  }
  bool StopRequested() const override {
    return stop_after >= 0 && static_cast<int64_t>(steps.size()) >= stop_after;
  }

  std::vector<int64_t> steps;
  std::vector<double> values;
  int64_t stop_after = -1;
};

Params MakeParams(const char* json_text) {
  auto params = Params::Parse(json_text);
  REQUIRE(params.ok());
  return *params;
}

TEST_CASE("quadratic-sgd converges with a stable learning rate", "[worker]") {
  RecordingContext ctx;
  auto result =
      RunObjective("quadratic-sgd", MakeParams(R"({"learning_rate": 0.08, "steps": 25})"), ctx);
  REQUIRE(result.ok());
  REQUIRE(ctx.values.size() == 25);
  for (size_t i = 0; i < ctx.steps.size(); ++i) CHECK(ctx.steps[i] == static_cast<int64_t>(i));
  // Step 0 is the starting point (3, -3): (3-1)^2 + 10 (-3+2)^2.
  CHECK(ctx.values[0] == Approx(14.0));
  int decreases = 0;
  for (size_t i = 1; i < ctx.values.size(); ++i) decreases += ctx.values[i] < ctx.values[i - 1];
  CHECK(decreases >= 22);
  CHECK(*result < ctx.values.back());
  CHECK(*result < 1e-2 * ctx.values[0]);
  CHECK(*result >= 0.0);
}

TEST_CASE("quadratic-sgd defaults converge too", "[worker]") {
  RecordingContext ctx;
  auto result = RunObjective("quadratic-sgd", Params(), ctx);
  REQUIRE(result.ok());
  CHECK(ctx.values.size() == 20);
  CHECK(*result < 0.1);
}

TEST_CASE("quadratic-sgd diverges above the stability limit of 0.1", "[worker]") {
  // The y curvature is 20, so each step multiplies the y error by 1 - 20 * 0.2 = -3.
  RecordingContext ctx;
  auto result =
      RunObjective("quadratic-sgd", MakeParams(R"({"learning_rate": 0.2, "steps": 10})"), ctx);
  REQUIRE(result.ok());
  REQUIRE(ctx.values.size() == 10);
  for (size_t i = 1; i < ctx.values.size(); ++i) CHECK(ctx.values[i] > ctx.values[i - 1]);
  CHECK(*result > 1e4 * ctx.values[0]);

  // Long enough, the loss overflows; that is an error naming the cause, not a NaN result.
  RecordingContext long_ctx;
  auto overflow = RunObjective("quadratic-sgd",
                               MakeParams(R"({"learning_rate": 0.2, "steps": 1000})"), long_ctx);
  REQUIRE(!overflow.ok());
  CHECK(overflow.status().message().find("diverges") != std::string::npos);
  CHECK(long_ctx.values.size() < 1000);
  for (double value : long_ctx.values) CHECK(std::isfinite(value));
}

TEST_CASE("quadratic-sgd rejects bad parameters by name", "[worker]") {
  RecordingContext ctx;
  auto cuda = RunObjective("quadratic-sgd", MakeParams(R"({"device": "cuda:0"})"), ctx);
  REQUIRE(!cuda.ok());
  CHECK(cuda.status().message().find("'cuda:0'") != std::string::npos);
  auto typo = RunObjective("quadratic-sgd", MakeParams(R"({"learning_rat": 0.01})"), ctx);
  REQUIRE(!typo.ok());
  CHECK(typo.status().message().find("unknown parameter 'learning_rat'") != std::string::npos);
  auto zero_steps = RunObjective("quadratic-sgd", MakeParams(R"({"steps": 0})"), ctx);
  REQUIRE(!zero_steps.ok());
  CHECK(zero_steps.status().message().find("'steps' must be >= 1") != std::string::npos);
  auto negative_lr = RunObjective("quadratic-sgd", MakeParams(R"({"learning_rate": -1})"), ctx);
  CHECK(!negative_lr.ok());
  auto unknown = RunObjective("resnet", Params(), ctx);
  REQUIRE(!unknown.ok());
  CHECK(unknown.status().message() ==
        "unknown objective 'resnet' (known: quadratic-sgd, echo, lm)");
  CHECK(ctx.values.empty());
}

TEST_CASE("quadratic-sgd stops between steps when asked", "[worker]") {
  RecordingContext ctx;
  ctx.stop_after = 3;
  auto result = RunObjective("quadratic-sgd", MakeParams(R"({"steps": 100})"), ctx);
  REQUIRE(!result.ok());
  CHECK(result.status().message() == StoppedStatus().message());
  CHECK(ctx.values.size() == 3);
}

TEST_CASE("echo returns its value and reports nothing", "[worker]") {
  RecordingContext ctx;
  auto result = RunObjective("echo", MakeParams(R"({"value": -2.5, "other": "ignored"})"), ctx);
  REQUIRE(result.ok());
  CHECK(*result == -2.5);
  CHECK(ctx.values.empty());
  CHECK(RunObjective("echo", Params(), ctx).value() == 0.0);
}

// ---- trial-worker as a child process, the way the daemon runs it -------------------------

using testing::ChildResult;

// trial-worker as the daemon runs it (tests/worker/child_run.h), with or without a report pipe.
ChildResult RunChild(std::vector<std::string> argv, std::vector<std::string> env,
                     bool with_report_pipe, int sigterm_after_reports = 0) {
  return testing::RunChild(std::move(argv), std::move(env), sigterm_after_reports,
                           std::chrono::seconds(120), with_report_pipe);
}

const std::string kWorker = std::string(TRIALD_BIN_DIR) + "/trial-worker";

TEST_CASE("trial-worker reports every step then one final, and exits 0", "[worker]") {
  ChildResult run = RunChild(
      {kWorker},
      {R"(TRIALD_PARAMS={"learning_rate":0.05,"steps":6})", "TRIALD_STUDY=s", "TRIALD_TRIAL=3"},
      /*with_report_pipe=*/true);
  INFO("stderr: " << run.err);
  CHECK(run.exit_code == 0);
  std::vector<json::object> lines = ParseProtocol(run.report);
  REQUIRE(lines.size() == 7);
  for (int i = 0; i < 6; ++i) {
    CHECK(TypeOf(lines[i]) == "report");
    CHECK(lines[i].at("step").as_int64() == i);
  }
  CHECK(lines[0].at("value").as_double() == Approx(14.0));
  CHECK(TypeOf(lines[6]) == "final");
  CHECK(lines[6].at("value").as_double() < lines[5].at("value").as_double());
  // A human-readable line per step on stdout.
  CHECK(SplitLines(run.out).size() == 7);
  CHECK(run.out.rfind("step 0 value 14\n", 0) == 0);
}

TEST_CASE("trial-worker --objective echo sends only the final", "[worker]") {
  ChildResult run =
      RunChild({kWorker, "--objective", "echo"}, {R"(TRIALD_PARAMS={"value":4.5})"}, true);
  CHECK(run.exit_code == 0);
  CHECK(run.report == "{\"type\":\"final\",\"value\":4.5E0}\n");
}

TEST_CASE("trial-worker reports its errors on the pipe and stderr, exit 1", "[worker]") {
  ChildResult run = RunChild({kWorker}, {R"(TRIALD_PARAMS={"steps":"many"})"}, true);
  CHECK(run.exit_code == 1);
  std::vector<json::object> lines = ParseProtocol(run.report);
  REQUIRE(lines.size() == 1);
  CHECK(TypeOf(lines[0]) == "error");
  std::string message(lines[0].at("message").as_string());
  CHECK(message.find("'steps' must be an integer") != std::string::npos);
  CHECK(run.err.find(message) != std::string::npos);

  ChildResult bad_objective = RunChild({kWorker, "--objective", "nope"}, {}, true);
  CHECK(bad_objective.exit_code == 1);
  CHECK(bad_objective.report.find("unknown objective 'nope'") != std::string::npos);
}

TEST_CASE("trial-worker without TRIALD_REPORT_FD says it needs triald", "[worker]") {
  ChildResult run = RunChild({kWorker}, {R"(TRIALD_PARAMS={})"}, /*with_report_pipe=*/false);
  CHECK(run.exit_code == 1);
  CHECK(run.err.find("TRIALD_REPORT_FD is not set; trial-worker is meant to be started by "
                     "triald") != std::string::npos);
}

TEST_CASE("trial-worker stops promptly on SIGTERM with exit 143", "[worker]") {
  // 100000 steps of 20 ms would take over half an hour; the stop must cut that to moments.
  ChildResult run =
      RunChild({kWorker}, {R"(TRIALD_PARAMS={"steps":100000,"step_delay_ms":20})"}, true,
               /*sigterm_after_reports=*/2);
  CHECK(run.exit_code == 143);
  CHECK(run.seconds_after_sigterm < 10.0);
  std::vector<json::object> lines = ParseProtocol(run.report);
  REQUIRE(lines.size() >= 3);
  CHECK(lines.size() < 1000);
  CHECK(TypeOf(lines.back()) == "error");
  CHECK(lines.back().at("message").as_string() == "stopped by SIGTERM");
  for (size_t i = 0; i + 1 < lines.size(); ++i) CHECK(TypeOf(lines[i]) == "report");
}

TEST_CASE("triald-noop-worker reports final = x in one line", "[worker]") {
  const std::string noop = std::string(TRIALD_BIN_DIR) + "/triald-noop-worker";
  ChildResult run = RunChild({noop}, {R"(TRIALD_PARAMS={"y": 1, "x": -0.5})"}, true);
  CHECK(run.exit_code == 0);
  CHECK(run.report == "{\"type\":\"final\",\"value\":-0.5}\n");
  ChildResult no_x = RunChild({noop}, {}, true);
  CHECK(no_x.report == "{\"type\":\"final\",\"value\":0}\n");
  ParseProtocol(no_x.report);
  ChildResult no_fd = RunChild({noop}, {}, false);
  CHECK(no_fd.exit_code == 1);
}

}  // namespace
}  // namespace triald::worker
