// The command lines of triald and trialctl as users type them: both option forms (--opt value
// and --opt=value), errors that name the option with exit code 2, and the installed bash
// completion files offering every verb and option the parsers declare.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "common/fd.h"
#include "daemon/ctl/command_line.h"
#include "daemon/ctl/trialctl.h"
#include "tests/integration/harness.h"

namespace triald::testing {
namespace {

struct Run {
  int code = -1;
  std::string out, err;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs triald with `args` to its exit (for command lines it refuses, or --help).
Run RunTriald(TempDir& dir, const std::vector<std::string>& args) {
  const std::string out_path = dir.File("triald.out"), err_path = dir.File("triald.err");
  std::vector<std::string> all = {BinDir() + "/triald"};
  all.insert(all.end(), args.begin(), args.end());
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, 1);
    ::dup2(err, 2);
    std::vector<char*> argv;
    for (std::string& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  Run r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = ReadAll(out_path);
  r.err = ReadAll(err_path);
  return r;
}

Run RunCtl(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  Run r;
  r.code = ctl::RunTrialctl(args, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

// The words of a completion file that look like verbs or options.
std::set<std::string> Words(const std::string& text) {
  std::set<std::string> words;
  std::regex word(R"((--?[a-z][a-z-]*|[a-z]+))");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), word); it != std::sregex_iterator();
       ++it) {
    words.insert(it->str());
  }
  return words;
}

}  // namespace

TEST_CASE("triald takes --opt=value as well as --opt value", "[cli][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  // After the harness's "--max-workers 4": the last value given wins.
  d.AddArgs({"--max-workers=2", "--request-timeout=5", "--shutdown-timeout=30"});
  d.Start();
  CHECK_THAT(d.log(), Catch::Contains("2 worker slot(s)"));
  Run ping = RunCtl({"--socket=" + d.socket(), "ping"});
  CHECK(ping.code == 0);
  CHECK_THAT(ping.out, Catch::StartsWith("triald pid " + std::to_string(d.pid())));
  CHECK(WEXITSTATUS(d.Stop()) == 0);

  // The = form reaches the same checks: both values were read.
  Run twice = RunTriald(
      dir, {"--state-dir=" + dir.File("s2"), "--heartbeat-interval=5", "--node-timeout=6"});
  CHECK(twice.code == 2);
  CHECK_THAT(twice.err, Catch::Contains("--node-timeout (6.000000 s) must be at least twice "
                                        "--heartbeat-interval (5.000000 s)"));
}

TEST_CASE("triald's command-line errors name the option and exit 2", "[cli][integration]") {
  TempDir dir;
  const std::string state = "--state-dir=" + dir.File("state");
  Run workers = RunTriald(dir, {state, "--max-workers=0"});
  CHECK(workers.code == 2);
  CHECK_THAT(workers.err,
             Catch::StartsWith("triald: --max-workers: expected an integer from 1 to 4096\n"));
  Run timeout = RunTriald(dir, {state, "--request-timeout", "0"});
  CHECK(timeout.code == 2);
  CHECK_THAT(timeout.err, Catch::StartsWith("triald: --request-timeout: expected a positive "
                                            "number of seconds (at most 86400)\n"));
  Run shutdown = RunTriald(dir, {state, "--shutdown-timeout", "1e10"});
  CHECK(shutdown.code == 2);
  CHECK_THAT(shutdown.err, Catch::StartsWith("triald: --shutdown-timeout: expected a positive "
                                             "number of seconds (at most 31536000)\n"));
  Run unknown = RunTriald(dir, {state, "--bogus"});
  CHECK(unknown.code == 2);
  CHECK_THAT(unknown.err, Catch::StartsWith("triald: ") && Catch::Contains("--bogus"));
  Run missing = RunTriald(dir, {state, "--socket"});
  CHECK(missing.code == 2);
  CHECK_THAT(missing.err, Catch::StartsWith("triald: --socket"));
  Run gpus = RunTriald(dir, {state, "--gpus=0,x"});
  CHECK(gpus.code == 2);
  CHECK_THAT(gpus.err, Catch::StartsWith("triald: --gpus \"0,x\""));
  Run help = RunTriald(dir, {"--help"});
  CHECK(help.code == 0);
  CHECK_THAT(help.out, Catch::Contains("--state-dir DIR") && Catch::Contains("--node-timeout S"));
}

TEST_CASE("trialctl's errors name the option or verb and exit 2", "[cli][trialctl]") {
  Run verb = RunCtl({"--socket=/x", "frobnicate"});
  CHECK(verb.code == ctl::kExitUsage);
  CHECK_THAT(verb.err, Catch::StartsWith("trialctl: unknown verb \"frobnicate\"\n"));
  Run none = RunCtl({"--socket=/x"});
  CHECK(none.code == ctl::kExitUsage);
  CHECK_THAT(none.err, Catch::StartsWith("trialctl: no verb given\n"));
  Run option = RunCtl({"trials", "s", "--bogus"});
  CHECK(option.code == ctl::kExitUsage);
  CHECK_THAT(option.err, Catch::StartsWith("trialctl: ") && Catch::Contains("--bogus"));
  // The usage printed after an error is the verb's.
  CHECK_THAT(option.err, Catch::Contains("usage: trialctl [--socket PATH] trials ..."));
  Run interval = RunCtl({"watch", "s", "--interval=0"});
  CHECK(interval.code == ctl::kExitUsage);
  CHECK_THAT(interval.err, Catch::StartsWith("trialctl: --interval: \"0\": expected seconds "
                                             "between 0.05 and 3600\n"));
  Run format = RunCtl({"export", "s", "--format=xml"});
  CHECK(format.code == ctl::kExitUsage);
  CHECK_THAT(format.err, Catch::StartsWith("trialctl: --format: \"xml\": expected csv, json or "
                                           "optuna\n"));
  Run param = RunCtl({"enqueue", "s", "--param=x"});
  CHECK(param.code == ctl::kExitUsage);
  CHECK_THAT(param.err, Catch::StartsWith("trialctl: --param \"x\": expected NAME=VALUE\n"));
  Run wrong_verb = RunCtl({"status", "s", "--wait"});  // an option of another verb
  CHECK(wrong_verb.code == ctl::kExitUsage);
  CHECK_THAT(wrong_verb.err, Catch::Contains("--wait"));
  Run trial = RunCtl({"logs", "s", "-1"});
  CHECK(trial.code == ctl::kExitUsage);
  // Help wins over whatever else is wrong on the line.
  Run help = RunCtl({"watch", "s", "--interval", "0", "--help"});
  CHECK(help.code == 0);
  CHECK_THAT(help.out, Catch::StartsWith("usage: trialctl [--socket PATH] watch ..."));
  Run extra = RunCtl({"ping", "extra"});
  CHECK(extra.code == ctl::kExitUsage);
  CHECK_THAT(extra.err, Catch::Contains("extra"));
}

TEST_CASE("trialctl refuses a sweep file over the size limit before connecting",
          "[cli][trialctl]") {
  TempDir dir;
  const std::string big = dir.Write("big.toml", std::string(3 * 1024 * 1024, '#'));
  Run r = RunCtl({"--socket", dir.File("none.sock"), "submit", big});
  CHECK(r.code == ctl::kExitError);
  CHECK(r.err ==
        "trialctl: sweep file " + big + " is 3145728 bytes; the limit is 2097152 bytes (2 MiB)\n");
}

TEST_CASE("trialctl refuses a sweep file that is not UTF-8, naming the byte and where",
          "[cli][trialctl]") {
  TempDir dir;
  const std::string latin1 = dir.Write("latin1.toml", "[study]\nname = \"caf\xE9\"\n");
  Run r = RunCtl({"--socket", dir.File("none.sock"), "submit", latin1});
  CHECK(r.code == ctl::kExitError);
  CHECK(r.err == "trialctl: sweep file " + latin1 +
                     " is not UTF-8 text: byte 0xE9 at line 2, column 12 (byte offset 19); save "
                     "it as UTF-8\n");
}

TEST_CASE("trialctl reports a connection closed while sending instead of dying of SIGPIPE",
          "[cli][trialctl][integration]") {
  TempDir dir;
  // A peer that accepts and hangs up without reading: the 2 MiB request cannot fit the socket
  // buffer, so trialctl's write fails with EPIPE.
  const std::string sock = dir.File("hangup.sock");
  common::UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", sock.c_str());
  REQUIRE(::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(::listen(listener.get(), 4) == 0);
  const std::string sweep = dir.Write("s.toml", std::string(2 * 1024 * 1024 - 16, '#'));
  const std::string err_path = dir.File("ctl.err");
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(err, 2);
    std::string exe = BinDir() + "/trialctl";
    ::execl(exe.c_str(), exe.c_str(), "--socket", sock.c_str(), "submit", sweep.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int conn = ::accept(listener.get(), nullptr, nullptr);
  REQUIRE(conn >= 0);
  ::close(conn);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  const std::string err = ReadAll(err_path);
  INFO(err);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == ctl::kExitUnavailable);
  CHECK_THAT(err, Catch::StartsWith("trialctl: sending to triald at " + sock));
}

TEST_CASE("trialctl VERB --help lists the verb's own options from its declarations",
          "[cli][trialctl]") {
  Run enqueue = RunCtl({"enqueue", "--help"});
  CHECK(enqueue.code == 0);
  CHECK_THAT(enqueue.out, Catch::StartsWith("usage: trialctl [--socket PATH] enqueue ...\n\n"
                                            "  enqueue STUDY [--skip-if-exists] [--param "
                                            "NAME=VALUE]... [--json]\n"));
  CHECK_THAT(enqueue.out, Catch::Contains("\n    --param NAME=VALUE      one parameter's value"));
  Run report = RunCtl({"help", "report"});
  CHECK_THAT(report.out, Catch::Contains("\n    -o, --out FILE.html     the HTML file to write"));
  // Every verb has its entry in the full help.
  Run all = RunCtl({"--help"});
  for (const auto& [verb, options] : ctl::CompletionWords()) {
    if (verb.empty()) continue;
    INFO(verb);
    CHECK_THAT(all.out, Catch::Contains("\n  " + verb + " "));
  }
}

TEST_CASE("the bash completion files offer every verb and option", "[cli]") {
  const std::string source = TRIALD_SOURCE_DIR;
  const std::set<std::string> trialctl =
      Words(ReadAll(source + "/daemon/ctl/trialctl.bash-completion"));
  REQUIRE(!trialctl.empty());
  for (const auto& [verb, options] : ctl::CompletionWords()) {
    if (!verb.empty()) {
      INFO("verb " << verb);
      CHECK(trialctl.count(verb) == 1);
    }
    for (const std::string& o : options) {
      INFO("verb " << verb << " option " << o);
      CHECK(trialctl.count(o) == 1);
    }
  }

  // triald's options, as its --help lists them.
  TempDir dir;
  Run help = RunTriald(dir, {"--help"});
  REQUIRE(help.code == 0);
  const std::set<std::string> triald = Words(ReadAll(source + "/daemon/triald.bash-completion"));
  std::regex option(R"((^|[ ,])(--[a-z][a-z-]*))");
  int seen = 0;
  for (auto it = std::sregex_iterator(help.out.begin(), help.out.end(), option);
       it != std::sregex_iterator(); ++it) {
    INFO("triald option " << (*it)[2].str());
    CHECK(triald.count((*it)[2].str()) == 1);
    ++seen;
  }
  CHECK(seen >= 19);  // --help and the 18 options
}

}  // namespace triald::testing
