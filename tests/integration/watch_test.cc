// trialctl watch against a real triald: plain progress lines when the output is not a terminal
// (one per change), the in-place view under a pseudo-terminal (the trialctl binary run with
// forkpty, its output replayed through a minimal terminal model), and the exit codes.
#include "daemon/ctl/watch.h"

#include <fcntl.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cerrno>
#include <functional>
#include <regex>
#include <sstream>

#include "daemon/ctl/trialctl.h"
#include "tests/integration/harness.h"
#include "tests/integration/mixed_study.h"

namespace triald::testing {
namespace json = boost::json;

namespace {

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// Runs trialctl `args` on a pseudo-terminal of `cols` columns; returns its exit status and
// everything it wrote. `on_output`, when set, is called with all output so far after each read.
std::pair<int, std::string> RunOnPty(
    std::vector<std::string> args, int cols,
    const std::function<void(const std::string&)>& on_output = nullptr) {
  winsize ws{};
  ws.ws_row = 40;
  ws.ws_col = static_cast<unsigned short>(cols);
  int master = -1;
  std::string exe = BinDir() + "/trialctl";
  args.insert(args.begin(), exe);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = ::forkpty(&master, nullptr, nullptr, &ws);
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::setenv("TERM", "xterm", 1);
    ::execv(exe.c_str(), argv.data());
    ::_exit(127);
  }
  std::string output;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(master, buf, sizeof(buf));
    if (n > 0) {
      output.append(buf, static_cast<size_t>(n));
      if (on_output) on_output(output);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;  // EIO once the child has exited and the slave side is closed
    }
  }
  ::close(master);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

// The screen a terminal shows after `output`: \r, \n, ESC[nA (up), ESC[2K (erase line) and ESC[J
// (erase below) are all trialctl uses; any other escape fails the test.
std::vector<std::string> Replay(const std::string& output) {
  std::vector<std::string> screen(1);
  size_t row = 0, col = 0;
  for (size_t i = 0; i < output.size(); ++i) {
    const char c = output[i];
    if (c == '\r') {
      col = 0;
    } else if (c == '\n') {
      if (++row == screen.size()) screen.emplace_back();
    } else if (c == '\x1b') {
      REQUIRE(i + 1 < output.size());
      REQUIRE(output[i + 1] == '[');
      size_t j = i + 2;
      int n = 0;
      while (j < output.size() && std::isdigit(static_cast<unsigned char>(output[j]))) {
        n = n * 10 + (output[j++] - '0');
      }
      REQUIRE(j < output.size());
      const char op = output[j];
      if (op == 'A') {
        row -= std::min<size_t>(row, static_cast<size_t>(n == 0 ? 1 : n));
      } else if (op == 'K' && n == 2) {
        screen[row].clear();
      } else if (op == 'J') {
        screen[row].resize(std::min(screen[row].size(), col));
        screen.resize(row + 1);
      } else {
        FAIL("unexpected escape sequence ESC[" << n << op);
      }
      i = j;
    } else {
      if (screen[row].size() < col + 1) screen[row].resize(col + 1, ' ');
      screen[row][col++] = c;
    }
  }
  while (!screen.empty() && screen.back().empty()) screen.pop_back();
  return screen;
}

}  // namespace

TEST_CASE("watch's ETA: mean finished-trial time x trials left / trials at once", "[watch]") {
  json::object s = json::parse(R"({"name":"s","state":"RUNNING","direction":"minimize",
      "n_trials":20,"finished":8,"complete":8,"pruned":0,"failed":0,"running":4,"waiting":0,
      "mean_duration_s":10.0,"best":null})")
                       .as_object();
  ctl::WatchState w;
  w.max_running = 4;
  std::string how;
  REQUIRE(ctl::EstimateSeconds(s, w, &how).has_value());
  CHECK(*ctl::EstimateSeconds(s, w, &how) == Approx(10.0 * 12 / 4));
  CHECK(how == "mean trial 10s x 12 left / 4 at once");
  // Near the end, fewer trials are left than ran at once.
  s["finished"] = 18;
  s["running"] = 2;
  CHECK(*ctl::EstimateSeconds(s, w, nullptr) == Approx(10.0));
  s["mean_duration_s"] = nullptr;
  CHECK_FALSE(ctl::EstimateSeconds(s, w, nullptr).has_value());
  CHECK(ctl::FormatSeconds(1.54) == "1.5s");
  CHECK(ctl::FormatSeconds(42) == "42s");
  CHECK(ctl::FormatSeconds(185) == "3m05s");
  CHECK(ctl::FormatSeconds(7620) == "2h07m");
}

TEST_CASE("trialctl watch without a terminal: one line per change, then the best trial",
          "[trialctl][watch][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  REQUIRE(Trialctl(d.socket(), {"submit", WriteMixedStudy(dir, "w")}).code == 0);
  // Polled every 50 ms while the study runs for seconds: lines only when something changed.
  Ctl c = Trialctl(d.socket(), {"watch", "w", "--interval", "0.05"});
  INFO(c.out << c.err);
  REQUIRE(c.code == 0);
  std::vector<std::string> lines = Lines(c.out);
  REQUIRE(lines.size() >= 4);
  for (size_t i = 1; i < lines.size(); ++i) CHECK(lines[i] != lines[i - 1]);
  CHECK(lines.size() < 40);
  // The end: the last progress line, the study's state, and the best trial on three lines (its
  // value, its parameters, its resources).
  const std::string& last_progress = lines[lines.size() - 5];
  CHECK_THAT(last_progress,
             Catch::StartsWith("w: 8/8 finished (4 complete, 2 pruned, 2 failed), 0 running"));
  CHECK_THAT(last_progress, Catch::Contains("; best "));
  CHECK_THAT(c.out, Catch::Contains("; ETA ~"));  // once a trial had finished
  CHECK(lines[lines.size() - 4] == "study w COMPLETE");
  CHECK_THAT(lines[lines.size() - 3], Catch::StartsWith("best trial "));
  CHECK_THAT(lines[lines.size() - 1], Catch::StartsWith("  resources: "));
  CHECK(c.out.find('\x1b') == std::string::npos);
  // The same study again: it has ended, so one line and the result.
  Ctl again = Trialctl(d.socket(), {"watch", "w"});
  CHECK(again.code == 0);
  CHECK(Lines(again.out).size() == 5);
  // --json: the status as one JSON line per change, nothing else.
  Ctl js = Trialctl(d.socket(), {"watch", "w", "--json"});
  CHECK(js.code == 0);
  REQUIRE(Lines(js.out).size() == 1);
  json::value st = json::parse(js.out);
  CHECK(st.at("finished").as_int64() == kMixedTrials);
  CHECK(st.at("mean_duration_s").to_number<double>() > 0);
}

TEST_CASE("trialctl VERB --help and help VERB print that verb's usage", "[trialctl][watch]") {
  for (std::vector<std::string> args :
       {std::vector<std::string>{"watch", "--help"}, std::vector<std::string>{"help", "watch"},
        std::vector<std::string>{"watch", "s", "-h"}}) {
    Ctl c = Trialctl("/x", args);
    CHECK(c.code == 0);
    CHECK_THAT(c.out, Catch::StartsWith("usage: trialctl [--socket PATH] watch ...\n\n"
                                        "  watch STUDY [--interval SECONDS] [--json]\n"));
    CHECK_THAT(c.out, Catch::Contains("ETA (mean finished-trial time"));
    CHECK_THAT(c.out, Catch::Contains("exit codes: 0 ok"));
    CHECK(c.out.find("submit FILE") == std::string::npos);
  }
  Ctl ex = Trialctl("/x", {"export", "--help"});
  CHECK_THAT(ex.out, Catch::Contains("export STUDY --format csv|json"));
  CHECK_THAT(ex.out, Catch::Contains("export STUDY --format optuna --out FILE.db"));
  CHECK(ex.out.find("report STUDY") == std::string::npos);
  Ctl all = Trialctl("/x", {"--help"});
  CHECK_THAT(all.out, Catch::Contains("submit FILE") && Catch::Contains("report STUDY -o"));
}

TEST_CASE("trialctl watch on a terminal redraws in place", "[trialctl][watch][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  // Trial 1 waits 2 s first, so trial 3 (the first to fail) cannot start before the pause sent
  // after the submit has landed: no trial has failed when watch draws its first frames, however
  // slowly it starts; resumed once it has redrawn.
  REQUIRE(Trialctl(d.socket(), {"submit", WriteMixedStudy(dir, "tty", 2.0)}).code == 0);
  REQUIRE(Trialctl(d.socket(), {"pause", "tty"}).code == 0);
  bool resumed = false;
  const int cols = 70;
  auto [code, output] = RunOnPty({"--socket", d.socket(), "watch", "tty", "--interval", "0.05"},
                                 cols, [&](const std::string& so_far) {
                                   if (resumed || so_far.find("\x1b[4A") == std::string::npos) {
                                     return;
                                   }
                                   resumed = true;
                                   REQUIRE(Trialctl(d.socket(), {"resume", "tty"}).code == 0);
                                 });
  INFO(output);
  CHECK(code == 0);
  CHECK(resumed);
  // Frames after the first move up over the previous one's 4 lines (5 once trials failed: how
  // they did) and erase each line.
  CHECK_THAT(output, Catch::Contains("\x1b[4A\r\x1b[2K"));
  CHECK_THAT(output, Catch::Contains("\x1b[5A\r\x1b[2K"));
  CHECK_THAT(output, Catch::Contains("\x1b[J"));
  std::vector<std::string> screen = Replay(output);
  INFO("screen:\n"
       << [&] {
            std::string s;
            for (const std::string& l : screen) s += l + "\n";
            return s;
          }());
  // Many frames were drawn, but the screen holds one view and the result below it.
  REQUIRE(screen.size() == 10);
  CHECK_THAT(screen[0], Catch::StartsWith("study tty: COMPLETE, minimize"));
  CHECK_THAT(screen[1], Catch::StartsWith("  trials: 8/8 finished (4 complete, 2 pruned, 2 f"));
  CHECK_THAT(screen[2], Catch::StartsWith("  2 failed; most often (2 of them): "));
  CHECK_THAT(screen[3], Catch::StartsWith("  best:   "));
  CHECK_THAT(screen[5], Catch::StartsWith("trialctl: study \"tty\": 2 failed; most often"));
  CHECK(screen[6] == "study tty COMPLETE");
  CHECK_THAT(screen[7], Catch::StartsWith("best trial "));
  CHECK_THAT(screen[9], Catch::StartsWith("  resources: "));
  // No view line wraps: each is cut to the terminal's width.
  for (size_t i = 0; i < 5; ++i) CHECK(screen[i].size() < static_cast<size_t>(cols));
  const std::regex up("\x1b\\[4A");
  CHECK(std::distance(std::sregex_iterator(output.begin(), output.end(), up),
                      std::sregex_iterator()) >= 2);
}

TEST_CASE("trialctl watch: a study without a COMPLETE trial exits 1, an unknown one 1",
          "[trialctl][watch][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  dir.Write("fail.sh", "exit 4\n", 0755);
  std::string sweep = dir.Write("s.toml", ExecSweep("bad", "[\"sh\", \"fail.sh\"]", 3, 3));
  Ctl submit = Trialctl(d.socket(), {"submit", sweep, "--wait", "--interval", "0.05"});
  CHECK(submit.code == ctl::kExitError);
  CHECK_THAT(submit.err, Catch::Contains("bad: 3/3 finished (0 complete, 0 pruned, 3 failed)"));
  CHECK_THAT(submit.err, Catch::Contains("trialctl: study \"bad\" ended without a COMPLETE trial"));
  CHECK_THAT(submit.err, Catch::Contains("trialctl: study \"bad\": 3 failed; most often (3 of "
                                         "them): exit: exited with code 4"));
  Ctl w = Trialctl(d.socket(), {"watch", "bad"});
  CHECK(w.code == ctl::kExitError);
  CHECK_THAT(w.out, Catch::Contains("study bad COMPLETE"));
  Ctl nope = Trialctl(d.socket(), {"watch", "nope"});
  CHECK(nope.code == ctl::kExitError);
  CHECK(nope.err == "trialctl: no study named \"nope\" (see `trialctl studies`)\n");
  CHECK(Trialctl(d.socket(), {"watch"}).code == ctl::kExitUsage);
  CHECK(Trialctl(d.socket(), {"watch", "bad", "--interval", "0"}).code == ctl::kExitUsage);
}

}  // namespace triald::testing
