// trial-worker: runs one objective for one trial and reports over TRIALD_REPORT_FD
// (worker/trial_main.h), serves a study's forked trials (--fork-server, worker/fork_server.h), or
// runs one of the tools (worker/tools.h).
//
// Exit codes of a trial: 0 after a final line was sent; 1 on any error (also sent as an error
// line when the report pipe is usable, and printed to stderr); 143 (128 + SIGTERM) when asked to
// stop.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <variant>
#include <vector>

#include "worker/fork_server.h"
#include "worker/tools.h"
#include "worker/trial_main.h"

int main(int argc, char** argv) {
  // The daemon tails stdout into a log file; line buffering keeps the log current and loses at
  // most one line if the worker is killed.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  // Tools are not trials: SIGTERM and SIGINT keep their default meaning.
  if (argc >= 2 && triald::worker::IsTool(argv[1])) {
    return triald::worker::RunTool(argv[1], std::vector<std::string>(argv + 2, argv + argc));
  }
  triald::worker::InstallTrialSignalHandlers();

  auto parsed =
      triald::worker::ParseTrialCommandLine(std::vector<std::string>(argv + 1, argv + argc));
  if (const int* exit_code = std::get_if<int>(&parsed)) return *exit_code;
  const auto& command = std::get<triald::worker::TrialCommand>(parsed);
  if (command.fork_server) return triald::worker::RunForkServer(command, argc, argv);
  const int code = triald::worker::RunTrial(command);
  // A trial ends with _exit, as a forked one does (fork_server.cc), not by returning: exit()
  // runs OpenBLAS's exit handler, which joins OpenBLAS's threads, and a thread that could not map
  // its buffer (triald's memory_limit as RLIMIT_AS, where there is no memory controller) retries
  // forever, so the trial would never end after reporting its error. Its reports are written
  // (write(2)); stdout and stderr are flushed here; nothing else is left to run at exit.
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(code);
}
