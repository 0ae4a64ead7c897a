// The views of a study with several objectives or constraints against a real triald: `best`
// (the Pareto front of the feasible COMPLETE trials, or the best feasible trial), `watch`, the
// CSV and Optuna exports (checked with Optuna itself) and the report (rendered by Chromium), for
// exec workers that report values and constraints. Also the text forms of the front, from
// hand-written replies.
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <fstream>
#include <set>
#include <sstream>

#include "common/json.h"
#include "daemon/ctl/best_view.h"
#include "daemon/ctl/format.h"
#include "daemon/ctl/trialctl.h"
#include "daemon/ctl/watch.h"
#include "daemon/export/study_export.h"
#include "tests/integration/harness.h"

namespace triald::testing {
namespace json = boost::json;

namespace {

// A worker of two objectives (x, (1 - x)^2 + y) with the constraint y - LIMIT <= 0 (infeasible
// where y > LIMIT); trial 5 fails. One objective (SINGLE): x + y, same constraint.
std::string WriteStudy(TempDir& dir, const std::string& name, const std::string& directions,
                       double limit, int n_trials) {
  const bool single = directions.find(',') == std::string::npos;
  std::string worker = std::string(R"py(import json, os, sys
p = json.loads(os.environ['TRIALD_PARAMS'])
n = int(os.environ['TRIALD_TRIAL'])
out = os.fdopen(int(os.environ['TRIALD_REPORT_FD']), 'w', buffering=1)
def send(m): out.write(json.dumps(m) + '\n')
if n == 5:
    sys.exit(3)
send({'type': 'constraints', 'values': [p['y'] - LIMIT]})
)py") + (single ? "send({'type': 'final', 'value': p['x'] + p['y']})\n"
                : "send({'type': 'final', 'values': [p['x'], (1 - p['x']) ** 2 + p['y']]})\n");
  worker.replace(worker.find("LIMIT"), 5, std::to_string(limit));
  dir.Write(name + ".py", worker);
  return dir.Write(name + ".toml",
                   "[study]\nname = \"" + name + "\"\n" +
                       (single ? "direction = " + directions : "directions = " + directions) +
                       "\nn_trials = " + std::to_string(n_trials) +
                       "\nparallelism = 4\n\n[objective]\nkind = \"exec\"\n"
                       "command = [\"/usr/bin/python3\", \"" +
                       name +
                       ".py\"]\n\n[space.x]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n\n"
                       "[space.y]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n\n"
                       "[sampler]\nkind = \"random\"\nseed = 3\n");
}

json::value ParseExact(const std::string& text) {
  common::Result<json::value> v = common::ParseJsonExact(text);
  INFO(text);
  REQUIRE(v.ok());
  return *v;
}

std::vector<int> Numbers(const json::array& trials) {
  std::vector<int> out;
  for (const json::value& t : trials) out.push_back(static_cast<int>(t.at("number").as_int64()));
  return out;
}

}  // namespace

TEST_CASE("several objectives through triald: best, watch, CSV, Optuna export and report agree",
          "[best][export][report][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  REQUIRE(Trialctl(d.socket(),
                   {"submit", WriteStudy(dir, "zdt", "[\"minimize\", \"minimize\"]", 0.6, 24)})
              .code == 0);
  d.WaitStudy("zdt", 120);

  Ctl exported = Trialctl(d.socket(), {"export", "zdt", "--format", "json"});
  REQUIRE(exported.code == 0);
  common::Result<exports::StudyData> data = exports::ParseStudyExport(ParseExact(exported.out));
  REQUIRE(data.ok());
  REQUIRE(data->directions == std::vector<std::string>{"minimize", "minimize"});
  std::set<int> infeasible;
  int complete = 0;
  for (const exports::ExportTrial& t : data->trials) {
    if (t.state != "COMPLETE") continue;
    ++complete;
    REQUIRE(t.values.size() == 2);
    REQUIRE(t.constraints.size() == 1);
    if (!t.feasible) infeasible.insert(t.number);
  }
  REQUIRE(complete == 23);
  REQUIRE(!infeasible.empty());  // seed 3 draws y above 0.6 in some trials
  REQUIRE(!data->best.empty());

  // best --json: the front, each trial feasible, and the counts.
  Ctl best = Trialctl(d.socket(), {"best", "zdt", "--json"});
  INFO(best.err);
  REQUIRE(best.code == 0);
  json::value reply = ParseExact(best.out);
  const json::array& front = reply.at("best_trials").as_array();
  CHECK(Numbers(front) == data->best);
  for (const json::value& t : front) {
    CHECK(t.at("feasible").as_bool());
    CHECK(infeasible.count(static_cast<int>(t.at("number").as_int64())) == 0);
  }
  CHECK(reply.at("complete").as_int64() == complete);
  CHECK(reply.at("feasible").as_int64() == complete - static_cast<int64_t>(infeasible.size()));
  CHECK(reply.at("directions") == json::array{"minimize", "minimize"});

  Ctl text = Trialctl(d.socket(), {"best", "zdt"});
  CHECK(text.code == 0);
  CHECK_THAT(text.out, Catch::StartsWith("study zdt: Pareto front of " +
                                         std::to_string(front.size()) + " trial"));
  CHECK_THAT(text.out, Catch::Contains("(feasible)"));

  // watch of the ended study: the front's line, then best's output.
  Ctl watch = Trialctl(d.socket(), {"watch", "zdt"});
  CHECK(watch.code == 0);
  CHECK_THAT(watch.out, Catch::Contains("front " + std::to_string(front.size()) + " trial"));
  CHECK_THAT(watch.out, Catch::Contains("Pareto front of " + std::to_string(front.size())));

  // CSV: values_0, values_1, constraints_0, feasible.
  Ctl csv = Trialctl(d.socket(), {"export", "zdt", "--format", "csv"});
  REQUIRE(csv.code == 0);
  CHECK_THAT(csv.out,
             Catch::StartsWith("number,state,values_0,values_1,constraints_0,feasible,reason,"
                               "params_x,params_y,"));

  // Optuna: directions, values, constraints, and the same front by Optuna's own code.
  const std::string json_file = dir.Write("zdt.json", exported.out);
  const std::string best_file = dir.Write("zdt-best.json", best.out);
  const std::string db = dir.File("zdt.db");
  REQUIRE(Trialctl(d.socket(), {"export", "zdt", "--format", "optuna", "--out", db}).code == 0);
  auto [code, output] =
      Shell("/usr/bin/python3 " + std::string(TRIALD_SOURCE_DIR) +
            "/tests/integration/check_optuna_export.py " + db + " " + json_file + " " + best_file);
  INFO(output);
  CHECK(code == 0);
  CHECK_THAT(output, Catch::Contains("24 trials match"));

  // The report marks the same front and the infeasible trials.
  const std::string html = dir.File("zdt.html");
  REQUIRE(Trialctl(d.socket(), {"report", "zdt", "-o", html}).code == 0);
  std::ifstream in(html);
  std::stringstream page;
  page << in.rdbuf();
  CHECK_THAT(page.str(),
             Catch::Contains("\"triald_best\":" + exports::WriteJson(json::value(json::array(
                                                      data->best.begin(), data->best.end())))));
}

TEST_CASE("several objectives, every trial infeasible: best says the front is empty",
          "[best][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  REQUIRE(Trialctl(d.socket(),
                   {"submit", WriteStudy(dir, "bad", "[\"minimize\", \"maximize\"]", -1.0, 4)})
              .code == 0);
  d.WaitStudy("bad", 120);
  Ctl text = Trialctl(d.socket(), {"best", "bad"});
  CHECK(text.code == ctl::kExitError);
  CHECK(text.out ==
        "study bad: the Pareto front is empty: none of its 4 COMPLETE trials is feasible (each "
        "violates a constraint: a value above 0)\n");
  Ctl j = Trialctl(d.socket(), {"best", "bad", "--json"});
  CHECK(j.code == 0);
  json::value reply = ParseExact(j.out);
  CHECK(reply.at("best_trials").as_array().empty());
  CHECK(reply.at("feasible").as_int64() == 0);
  Ctl watch = Trialctl(d.socket(), {"watch", "bad"});
  CHECK(watch.code == ctl::kExitError);
  CHECK_THAT(watch.err, Catch::Contains("ended with an empty Pareto front"));
}

TEST_CASE("one objective with constraints: best is the best feasible trial, as Optuna finds it",
          "[best][export][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  REQUIRE(Trialctl(d.socket(), {"submit", WriteStudy(dir, "con", "\"minimize\"", 0.3, 16)}).code ==
          0);
  d.WaitStudy("con", 120);
  Ctl exported = Trialctl(d.socket(), {"export", "con", "--format", "json"});
  REQUIRE(exported.code == 0);
  common::Result<exports::StudyData> data = exports::ParseStudyExport(ParseExact(exported.out));
  REQUIRE(data.ok());
  // The lowest x + y overall is infeasible for this seed? Whatever it is, best is the lowest
  // among trials with y <= 0.3.
  const exports::ExportTrial* want = nullptr;
  for (const exports::ExportTrial& t : data->trials) {
    if (t.state == "COMPLETE" && t.feasible && (want == nullptr || *t.value < *want->value)) {
      want = &t;
    }
  }
  REQUIRE(want != nullptr);
  Ctl best = Trialctl(d.socket(), {"best", "con", "--json"});
  REQUIRE(best.code == 0);
  json::value reply = ParseExact(best.out);
  CHECK(reply.at("number").as_int64() == want->number);
  CHECK(data->best == std::vector<int>{want->number});
  // status and the export's summary agree.
  CHECK(d.Call("status", {{"study", "con"}}).at("best").at("number").as_int64() == want->number);

  const std::string db = dir.File("con.db");
  REQUIRE(Trialctl(d.socket(), {"export", "con", "--format", "optuna", "--out", db}).code == 0);
  auto [code, output] =
      Shell("/usr/bin/python3 " + std::string(TRIALD_SOURCE_DIR) +
            "/tests/integration/check_optuna_export.py " + db + " " +
            dir.Write("con.json", exported.out) + " " + dir.Write("con-best.json", best.out));
  INFO(output);
  CHECK(code == 0);
  CHECK_THAT(output, Catch::Contains("16 trials match"));
}

TEST_CASE("watch and best text of a front", "[best][watch]") {
  json::value front = json::parse(R"({"study":"s","directions":["minimize","maximize"],
    "complete":7,"feasible":5,"best_trials":[
    {"number":2,"state":"COMPLETE","value":null,"values":[0.5,3],"constraints":[-1],
     "feasible":true,"params":{"x":1},"duration_s":1.5},
    {"number":4,"state":"COMPLETE","value":null,"values":[1,4],"constraints":[],
     "feasible":true,"params":{"x":2},"duration_s":null}]})");
  std::ostringstream out;
  CHECK(ctl::PrintBest(out, front));
  CHECK(out.str() ==
        "study s: Pareto front of 2 trials (minimize, maximize; 7 complete, 5 feasible)\n"
        "trial 2: values 0.5, 3  constraints -1 (feasible)  (1.50s)\n"
        "  params: x=1\n"
        "trial 4: values 1, 4  (-)\n"
        "  params: x=2\n");
  std::vector<std::string> lines = ctl::FrontLines(front.as_object(), 1);
  CHECK(lines == std::vector<std::string>{
                     "front:  2 trials of 7 complete (5 feasible)",
                     "  trial 2: values 0.5, 3  constraints -1 (feasible)  x=1", "  ... 1 more"});
  json::object status = json::parse(R"({"name":"s","state":"RUNNING","direction":"minimize",
    "directions":["minimize","maximize"],"n_trials":10,"finished":7,"complete":7,"pruned":0,
    "failed":0,"running":1,"waiting":2,"best":null,"mean_duration_s":null})")
                            .as_object();
  ctl::WatchState w;
  w.front = front;
  CHECK(ctl::IsMultiObjective(status));
  CHECK(ctl::WatchLine(status, w) ==
        "s: 7/10 finished (7 complete, 0 pruned, 0 failed), 1 running, 2 waiting; front 2 trials "
        "(5 of 7 complete feasible)");
  std::vector<std::string> view = ctl::WatchLines(status, w, 3);
  REQUIRE(view.size() >= 4);
  CHECK(view[0] == "study s: RUNNING, minimize, maximize   watching 3.0s");
  CHECK(view[2] == "  front:  2 trials of 7 complete (5 feasible)");
  // An empty front says why.
  json::value empty = json::parse(
      R"({"study":"s","directions":["minimize","maximize"],"complete":3,"feasible":0,
          "best_trials":[]})");
  std::ostringstream none;
  CHECK(!ctl::PrintBest(none, empty));
  CHECK(none.str() ==
        "study s: the Pareto front is empty: none of its 3 COMPLETE trials is feasible (each "
        "violates a constraint: a value above 0)\n");
  CHECK(ctl::FrontLines(empty.as_object(), 5)[0] ==
        "front:  0 trials of 3 complete (0 feasible); no COMPLETE trial is feasible yet");

  // Storage refusing writes holds the study: both views say so, with the first refusal.
  status["storage"] = json::object{
      {"held", true}, {"reason", "database or disk is full"}, {"failures", 3}, {"retry_in_s", 4.0}};
  CHECK_THAT(ctl::WatchLine(status, w),
             Catch::EndsWith("; HELD: storage refuses writes: database or disk is full"));
  view = ctl::WatchLines(status, w, 3);
  CHECK(view[2] == "  HELD: storage refuses writes: database or disk is full");
  // `trialctl status`: with the trials' writes kept meanwhile, when there are any.
  CHECK(ctl::StorageHoldText(status) ==
        "HELD: storage refuses writes: database or disk is full (3 refused; trial ends are kept; "
        "next try in 4 s)");
  status["storage"].as_object()["writes_kept"] = 12;
  CHECK(ctl::StorageHoldText(status) ==
        "HELD: storage refuses writes: database or disk is full (3 refused; trial ends are kept, "
        "and 12 of their writes; next try in 4 s)");
  status["storage"] = nullptr;
  CHECK(ctl::StorageHoldText(status).empty());
}

}  // namespace triald::testing
