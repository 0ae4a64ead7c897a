// trialctl: the command-line client of triald. See daemon/ctl/trialctl.h.
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "daemon/ctl/trialctl.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  triald::ctl::Terminals terminals;
  // TERM=dumb terminals cannot move the cursor: they get plain lines.
  const char* term = std::getenv("TERM");
  const bool capable = term == nullptr || std::string(term) != "dumb";
  if (capable && ::isatty(STDOUT_FILENO)) terminals.out_fd = STDOUT_FILENO;
  if (capable && ::isatty(STDERR_FILENO)) terminals.err_fd = STDERR_FILENO;
  if (::isatty(STDIN_FILENO)) terminals.in = &std::cin;
  // A closed pipe (triald hung up, or `trialctl trials | head`) is a write error reported
  // below, not a silent death by SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  int code = triald::ctl::RunTrialctl(args, std::cout, std::cerr, terminals);
  std::cout.flush();
  if (!std::cout) {
    const int e = errno;
    std::cerr << "trialctl: writing to standard output: "
              << (e != 0 ? std::strerror(e) : "write failed") << "\n";
    if (code == triald::ctl::kExitOk) code = triald::ctl::kExitError;
  }
  return code;
}
