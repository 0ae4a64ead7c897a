#include "tests/integration/mixed_study.h"

namespace triald::testing {

std::string WriteMixedStudy(TempDir& dir, const std::string& study, double trial1_wait_s) {
  std::string worker = R"py(import json, os, sys, time
p = json.loads(os.environ['TRIALD_PARAMS'])
n = int(os.environ['TRIALD_TRIAL'])
if n == 1:
    time.sleep(TRIAL1_WAIT)
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
  const size_t wait_at = worker.find("TRIAL1_WAIT");
  worker.replace(wait_at, 11, std::to_string(trial1_wait_s));
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

std::string ExportReply(const std::string& name, const std::string& directions,
                        const std::vector<ReplyTrial>& trials) {
  std::string text;
  for (const ReplyTrial& t : trials) {
    const std::string n = std::to_string(t.number);
    if (!text.empty()) text += ",";
    text +=
        "{\"number\":" + n + ",\"state\":\"" + t.state +
        "\",\"value\":null,\"values\":" + t.values + ",\"constraints\":" + t.constraints +
        ",\"fail_reason\":" + (t.state == "FAIL" ? "\"exit\"" : "null") +
        ",\"params\":{\"x\":" + n + ".5,\"s\":\"=1\"},\"params_internal\":{\"x\":" + n +
        ".5,\"s\":0},\"distributions\":{\"x\":{\"type\":\"float\",\"low\":0.0,"
        "\"high\":100.0,\"log\":false,\"step\":0.0},\"s\":{\"type\":\"categorical\","
        "\"choices\":[\"=1\"]}},\"intermediate\":[],\"attrs\":{},\"created_at\":1.0," +
        (t.state == "WAITING" ? "\"started_at\":null," : "\"started_at\":2.0,") +
        (t.state == "WAITING" || t.state == "RUNNING" ? "\"finished_at\":null,\"duration_s\":null"
                                                      : "\"finished_at\":3.5,\"duration_s\":1.5") +
        ",\"resources\":" + t.resources + "}";
  }
  return "{\"study\":{\"name\":\"" + name +
         "\",\"state\":\"COMPLETE\",\"direction\":\"minimize\",\"directions\":" + directions +
         ",\"n_trials\":" + std::to_string(trials.size()) +
         ",\"seed\":\"1\",\"created_at\":1.0,\"spec_path\":\"/x.toml\",\"best\":null},"
         "\"trials\":[" +
         text + "]}";
}

std::string MultiObjectiveReply(bool with_constraints) {
  auto c = [&](const char* text) { return std::string(with_constraints ? text : "[]"); };
  return ExportReply("mo", "[\"minimize\",\"maximize\"]",
                     {{0, "COMPLETE", "[1.0, 1.0]", c("[-1.0, 0.0]")},
                      {1, "COMPLETE", "[0.0, 9.0]", c("[0.25, -3.0]")},
                      {2, "COMPLETE", "[2.0, 5.0]", c("[-0.5]")},
                      {3, "COMPLETE", "[2.5, 4.0]", "[]"},
                      {4, "COMPLETE", "[2.0, 5.0]", c("[-2.0, -1e-05]")},
                      {5, "PRUNED", "null", "[]"},
                      {6, "FAIL", "null", "[]"}});
}

std::string MeasuredResources(int n) {
  switch (n) {
    case 0:
      return "{\"peak_memory_bytes\":209715200,\"memory_source\":\"cgroup2 memory.peak\","
             "\"peak_gpu_memory_bytes\":null,\"cpu_time_s\":2.5,\"cpu_source\":\"cgroup2 "
             "cpu.stat\",\"wall_s\":3.0}";
    case 1:
      return "{\"peak_memory_bytes\":524288000,\"memory_source\":\"cgroup2 memory.peak\","
             "\"peak_gpu_memory_bytes\":1073741824,\"cpu_time_s\":10.0,\"cpu_source\":\"cgroup2 "
             "cpu.stat\",\"wall_s\":4.0,\"planned_memory_bytes\":402653184}";
    case 3:
      return "{\"peak_memory_bytes\":104857600,\"memory_source\":\"cgroup2 memory.peak\","
             "\"peak_gpu_memory_bytes\":null,\"cpu_time_s\":1.0,\"cpu_source\":\"cgroup2 "
             "cpu.stat\",\"wall_s\":1.0}";
    case 4:
      return "{\"peak_memory_bytes\":314572800,\"memory_source\":\"getrusage ru_maxrss\","
             "\"peak_gpu_memory_bytes\":null,\"cpu_time_s\":0.5,\"cpu_source\":\"getrusage\","
             "\"wall_s\":0.6}";
    default:
      return "null";
  }
}

std::string ResourcesReply() {
  return ExportReply("res", "[\"minimize\",\"minimize\"]",
                     {{0, "COMPLETE", "[1.0, 1.0]", "[]", MeasuredResources(0)},
                      {1, "COMPLETE", "[0.5, 2.0]", "[]", MeasuredResources(1)},
                      {2, "COMPLETE", "[2.0, 0.5]", "[]", MeasuredResources(2)},
                      {3, "PRUNED", "null", "[]", MeasuredResources(3)},
                      {4, "FAIL", "null", "[]", MeasuredResources(4)},
                      {5, "WAITING", "null", "[]", MeasuredResources(5)}});
}

}  // namespace triald::testing
