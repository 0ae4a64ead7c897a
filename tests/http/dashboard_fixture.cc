#include "tests/http/dashboard_fixture.h"

#include <catch2/catch.hpp>
#include <fstream>

namespace triald::testing {

std::string SubmitDashboardSweep(TestDaemon& d, TempDir& dir, const std::string& name, int n_trials,
                                 int parallelism, double step_s) {
  const std::string script = dir.File("objective.py");
  std::ofstream(script) << R"(import json, os, sys, time
p = json.loads(os.environ["TRIALD_PARAMS"])
x = p["x"]
step_s = float(sys.argv[1])
out = os.fdopen(3, "w")
print("hello from trial", os.environ["TRIALD_TRIAL"], flush=True)
print("a line on stderr", file=sys.stderr, flush=True)
out.write(json.dumps({"type": "attr", "key": "seen", "value": 1}) + "\n")
out.write(json.dumps({"type": "attr", "key": "note", "value": "<img src=x onerror=\"window.__pwned=1\">"}) + "\n")
for step in range(3):
    out.write(json.dumps({"type": "report", "step": step, "value": x * x + 1.0 / (step + 1)}) + "\n")
    out.flush()
    time.sleep(step_s)
out.write(json.dumps({"type": "final", "value": x * x}) + "\n")
)";
  const std::string command =
      "[\"/usr/bin/python3\", \"" + script + "\", \"" + std::to_string(step_s) + "\"]";
  return d.Submit(ExecSweep(name, command, n_trials, parallelism), dir.File(name + ".toml"));
}

std::string ReadToken(const std::string& state_dir) {
  std::ifstream in(state_dir + "/http.token");
  std::string token;
  REQUIRE(std::getline(in, token));
  return token;
}

}  // namespace triald::testing
