// trialctl: the command-line client of triald. See daemon/ctl/trialctl.h.
#include <iostream>
#include <string>
#include <vector>

#include "daemon/ctl/trialctl.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return triald::ctl::RunTrialctl(args, std::cout, std::cerr);
}
