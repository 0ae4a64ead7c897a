#include "tests/integration/mixed_study.h"

namespace triald::testing {

std::string WriteMixedStudy(TempDir& dir, const std::string& study) {
  std::string worker = R"py(import json, os, sys, time
p = json.loads(os.environ['TRIALD_PARAMS'])
n = int(os.environ['TRIALD_TRIAL'])
out = os.fdopen(int(os.environ['TRIALD_REPORT_FD']), 'w', buffering=1)
def send(m): out.write(json.dumps(m) + '\n')
if n % 4 == 3:
    print('failing on purpose', file=sys.stderr)
    sys.exit(3)
send({'type': 'attr', 'key': 'note', 'value': {'n': n, 'tag': 'a<b>&"c", d'}})
if n % 4 == 2:
    for step in range(STEPS):
        send({'type': 'report', 'step': step, 'value': 1000.0 + step})
        time.sleep(0.1)
    send({'type': 'final', 'value': 1000.0})
    sys.exit(0)
v = (p['lr'] * 100) ** 0.5 + p['layers'] + p['dropout'] + p['batch'] / 100.0
v += p['width'] / 100.0 + (0.5 if p['opt'] == 'sgd' else 0.0)
for step in range(STEPS):
    send({'type': 'report', 'step': step, 'value': 1.0 + (STEPS - step) / 10.0})
send({'type': 'final', 'value': v})
)py";
  for (size_t at; (at = worker.find("STEPS")) != std::string::npos;) {
    worker.replace(at, 5, std::to_string(kMixedSteps));
  }
  dir.Write("mixed_worker.py", worker);
  std::string toml = "[study]\nname = \"" + study +
                     "\"\nn_trials = 8\nparallelism = 2\n\n"
                     "[objective]\nkind = \"exec\"\ncommand = [\"/usr/bin/python3\", "
                     "\"mixed_worker.py\"]\n\n"
                     "[space.lr]\ntype = \"float\"\nlow = 1e-4\nhigh = 1.0\nlog = true\n\n"
                     "[space.dropout]\ntype = \"float\"\nlow = 0.0\nhigh = 0.5\nstep = 0.1\n\n"
                     "[space.layers]\ntype = \"int\"\nlow = 1\nhigh = 8\n\n"
                     "[space.batch]\ntype = \"int\"\nlow = 16\nhigh = 256\nlog = true\n\n"
                     "[space.width]\ntype = \"int\"\nlow = 32\nhigh = 256\nstep = 32\n\n"
                     "[space.opt]\ntype = \"categorical\"\n"
                     "choices = [\"adam\", \"sgd\", 3, 2.5, true]\n\n"
                     "[sampler]\nkind = \"random\"\nseed = 5\n\n"
                     "[pruner]\nkind = \"median\"\nn_startup_trials = 2\nn_warmup_steps = 0\n";
  return dir.Write("mixed.toml", toml);
}

}  // namespace triald::testing
