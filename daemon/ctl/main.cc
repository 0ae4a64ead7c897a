// trialctl: the command-line client of triald. See daemon/ctl/trialctl.h.
#include <unistd.h>

#include <cstdlib>
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
  return triald::ctl::RunTrialctl(args, std::cout, std::cerr, terminals);
}
