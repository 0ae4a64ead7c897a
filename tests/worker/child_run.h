#pragma once
// Runs a program the way triald runs a worker: its own environment, a report pipe named by
// TRIALD_REPORT_FD, stdout and stderr captured; optionally sends SIGTERM once some report lines
// have arrived, and measures how long the child takes to go after that. Header-only.
//
// Thread-safety: RunChild forks; call it from one thread at a time.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

namespace triald::worker::testing {

struct ChildResult {
  int exit_code = -1;  // exit status, or -signal when killed by a signal
  std::string report;  // everything written to the report pipe
  std::string out;
  std::string err;
  double seconds_after_sigterm = -1;  // -1 when no SIGTERM was sent
};

// `argv[0]` is a path; `env` is the whole environment. The report pipe is descriptor 3, as the
// daemon places it. With `sigterm_after_reports` > 0, SIGTERM goes to the child once that many
// {"type":"report"} lines have arrived. A child still running after `timeout` is killed and the
// test fails. Without `report_pipe` the child gets neither the pipe nor TRIALD_REPORT_FD, as
// when a person starts trial-worker by hand.
inline ChildResult RunChild(std::vector<std::string> argv, std::vector<std::string> env,
                            int sigterm_after_reports = 0,
                            std::chrono::seconds timeout = std::chrono::seconds(120),
                            bool report_pipe = true) {
  constexpr int kReportFd = 3;
  int report[2], out[2], err[2];
  REQUIRE(pipe2(report, O_CLOEXEC) == 0);
  REQUIRE(pipe2(out, O_CLOEXEC) == 0);
  REQUIRE(pipe2(err, O_CLOEXEC) == 0);
  if (report_pipe) env.push_back("TRIALD_REPORT_FD=" + std::to_string(kReportFd));
  std::vector<char*> c_argv, c_env;
  for (std::string& arg : argv) c_argv.push_back(arg.data());
  c_argv.push_back(nullptr);
  for (std::string& var : env) c_env.push_back(var.data());
  c_env.push_back(nullptr);

  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // Only async-signal-safe calls until exec. dup2 clears close-on-exec on the copies; the
    // report pipe goes through a high descriptor first in case it already sits on 1 or 2.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    int report_fd = fcntl(report[1], F_DUPFD_CLOEXEC, 10);
    if (report_fd < 0 || dup2(out[1], 1) < 0 || dup2(err[1], 2) < 0 ||
        (report_pipe && dup2(report_fd, kReportFd) < 0)) {
      _exit(127);
    }
    execve(c_argv[0], c_argv.data(), c_env.data());
    _exit(127);
  }
  close(report[1]);
  close(out[1]);
  close(err[1]);

  ChildResult result;
  struct Stream {
    int fd;
    std::string* data;
  };
  std::vector<Stream> open = {
      {report[0], &result.report}, {out[0], &result.out}, {err[0], &result.err}};
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::chrono::steady_clock::time_point sigterm_sent;
  bool sigterm_done = false;
  while (!open.empty()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      for (const Stream& s : open) close(s.fd);
      FAIL("child " << argv[0] << " did not finish in time; stderr so far: " << result.err);
    }
    std::vector<pollfd> fds;
    for (const Stream& s : open) fds.push_back({s.fd, POLLIN, 0});
    int ready = poll(fds.data(), fds.size(), 200);
    if (ready < 0 && errno == EINTR) continue;
    REQUIRE(ready >= 0);
    for (size_t i = fds.size(); i-- > 0;) {
      if (fds[i].revents == 0) continue;
      char buffer[4096];
      ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        open[i].data->append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        open.erase(open.begin() + static_cast<long>(i));
      }
    }
    if (sigterm_after_reports > 0 && !sigterm_done) {
      int reports = 0;
      for (size_t p = result.report.find("\"report\""); p != std::string::npos;
           p = result.report.find("\"report\"", p + 1)) {
        ++reports;
      }
      if (reports >= sigterm_after_reports) {
        REQUIRE(kill(pid, SIGTERM) == 0);
        sigterm_sent = std::chrono::steady_clock::now();
        sigterm_done = true;
      }
    }
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  if (sigterm_done) {
    result.seconds_after_sigterm =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - sigterm_sent).count();
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  return result;
}

}  // namespace triald::worker::testing
