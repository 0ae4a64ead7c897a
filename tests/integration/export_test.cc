// trialctl export against a real triald: CSV and JSON to stdout, and an Optuna storage that
// Optuna 3.1 itself loads (tests/integration/check_optuna_export.py), for a study with every
// kind of parameter and COMPLETE, PRUNED and FAIL trials.
#include <sys/wait.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "common/json.h"
#include "config/space.h"
#include "daemon/ctl/trialctl.h"
#include "daemon/export/study_export.h"
#include "tests/integration/harness.h"
#include "tests/integration/mixed_study.h"

namespace triald::testing {
namespace json = boost::json;

namespace {

// RFC 4180 records: fields split at commas outside quotes, "" inside quotes is one quote.
std::vector<std::vector<std::string>> ParseCsv(const std::string& text) {
  std::vector<std::vector<std::string>> rows(1, std::vector<std::string>(1));
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    std::string& cell = rows.back().back();
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        cell += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cell += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      rows.back().emplace_back();
    } else if (c == '\n') {
      rows.emplace_back(1);
    } else {
      cell += c;
    }
  }
  if (rows.back().size() == 1 && rows.back()[0].empty()) rows.pop_back();
  return rows;
}

}  // namespace

TEST_CASE("trialctl export: bad command lines exit 2", "[trialctl][export][integration]") {
  CHECK(Trialctl("/x", {"export", "s"}).code == ctl::kExitUsage);
  CHECK(Trialctl("/x", {"export", "s", "--format", "xml"}).code == ctl::kExitUsage);
  Ctl no_out = Trialctl("/x", {"export", "s", "--format", "optuna"});
  CHECK(no_out.code == ctl::kExitUsage);
  CHECK_THAT(no_out.err, Catch::Contains("--out FILE.db"));
  CHECK(Trialctl("/x", {"export", "s", "--format", "csv", "--out", "f"}).code == ctl::kExitUsage);
  CHECK(Trialctl("/x", {"trials", "s", "--format", "csv"}).code == ctl::kExitUsage);
  CHECK(Trialctl("/x", {"export", "--format", "csv"}).code == ctl::kExitUsage);
}

TEST_CASE("export CSV neutralises text cells a spreadsheet would run as formulas",
          "[export][security]") {
  // String parameter values starting with '=', '+', '-', '@' (or a tab) get a leading
  // apostrophe; numbers, negative ones included, stay numbers.
  const char* reply = R"J({"study":{"name":"f","state":"COMPLETE","direction":"minimize",
    "n_trials":5,"best":null},"trials":[
    {"number":0,"state":"COMPLETE","value":-0.5,"fail_reason":null,
     "params":{"s":"=HYPERLINK(\"http://x\")",
  "x" : -0.5
},
    "params_internal" : {"s" : 0, "x" : -0.5},
                        "distributions"
    : {
      "s" : {"type" : "categorical", "choices" : ["=HYPERLINK(\"http://x\")"]},
      "x" : {"type" : "float", "low" : -1.0, "high" : 1.0, "log" : false, "step" : 0.0}
    },
      "intermediate" : [],
                       "attrs" : {},
                                 "created_at" : 1.0,
                                 "started_at" : null,
                                                "finished_at" : null
},
    {"number":1,"state":"COMPLETE","value":1.0,"fail_reason":null,
     "params":{"s":"+1","x":-1e-05},"params_internal":{"s":0,"x":-1e-05},
     "distributions":{"s":{"type":"categorical","choices":["+1"]},
                      "x":{"type":"float","low":-1.0,"high":1.0,"log":false,"step":0.0}},
     "intermediate":[],"attrs":{},"created_at":1.0,"started_at":null,"finished_at":null},
    {"number":2,"state":"COMPLETE","value":1.0,"fail_reason":null,
     "params":{"s":"-2+3","x":0.5},"params_internal":{"s":0,"x":0.5},
     "distributions":{"s":{"type":"categorical","choices":["-2+3"]},
                      "x":{"type":"float","low":-1.0,"high":1.0,"log":false,"step":0.0}},
     "intermediate":[],"attrs":{},"created_at":1.0,"started_at":null,"finished_at":null},
    {"number":3,"state":"COMPLETE","value":1.0,"fail_reason":null,
     "params":{"s":"@SUM(A1)","x":0.5},"params_internal":{"s":0,"x":0.5},
     "distributions":{"s":{"type":"categorical","choices":["@SUM(A1)"]},
                      "x":{"type":"float","low":-1.0,"high":1.0,"log":false,"step":0.0}},
     "intermediate":[],"attrs":{},"created_at":1.0,"started_at":null,"finished_at":null},
    {"number":4,"state":"COMPLETE","value":1.0,"fail_reason":null,
     "params":{"s":"plain","x":0.5},"params_internal":{"s":0,"x":0.5},
     "distributions":{"s":{"type":"categorical","choices":["plain"]},
                      "x":{"type":"float","low":-1.0,"high":1.0,"log":false,"step":0.0}},
     "intermediate":[],"attrs":{},"created_at":1.0,"started_at":null,"finished_at":null}]
})J";
  common::Result<exports::StudyData> data = exports::ParseStudyExport(json::parse(reply));
  REQUIRE(data.ok());
  std::vector<std::vector<std::string>> rows = ParseCsv(exports::ToCsv(*data));
  REQUIRE(rows.size() == 6);
  REQUIRE(rows[0][4] == "params_s");
  REQUIRE(rows[0][5] == "params_x");
  CHECK(rows[1][4] == "'=HYPERLINK(\"http://x\")");
  CHECK(rows[2][4] == "'+1");
  CHECK(rows[3][4] == "'-2+3");
  CHECK(rows[4][4] == "'@SUM(A1)");
  CHECK(rows[5][4] == "plain");
  CHECK(rows[1][2] == "-0.5");  // the value column: a number
  CHECK(rows[1][5] == "-0.5");  // a float parameter: a number
  CHECK(rows[2][5] == "-1e-05");
}

TEST_CASE("export CSV quotes fields and JSON writes numbers as Python does", "[export]") {
  // An export reply as the daemon sends it, with text that needs quoting.
  const char* reply = R"({"study":{"name":"q","state":"COMPLETE","direction":"maximize",
    "n_trials":2,"best":null},"trials":[
    {"number":1,"state":"FAIL","value":null,"fail_reason":"exit","fail_detail":"x",
     "params":{"opt":"a,\"b\"","lr":0.1},"params_internal":{"opt":1,"lr":0.1},
     "distributions":{"opt":{"type":"categorical","choices":["z","a,\"b\""]},
                      "lr":{"type":"float","low":0.0,"high":1.0,"log":false,"step":0.0}},
     "intermediate":[],"attrs":{},"created_at":1.5,"started_at":null,"finished_at":null},
    {"number":0,"state":"COMPLETE","value":"inf","fail_reason":null,
     "params":{"opt":"z","lr":1.0},"params_internal":{"opt":0,"lr":1.0},
     "distributions":{"opt":{"type":"categorical","choices":["z","a,\"b\""]},
                      "lr":{"type":"float","low":0.0,"high":1.0,"log":false,"step":0.0}},
     "intermediate":[[0,"nan"],[1,0.5]],"attrs":{},"created_at":1.0,"started_at":1.0,
     "finished_at":3.25}]})";
  common::Result<exports::StudyData> data = exports::ParseStudyExport(json::parse(reply));
  REQUIRE(data.ok());
  std::vector<std::vector<std::string>> rows = ParseCsv(exports::ToCsv(*data));
  REQUIRE(rows.size() == 3);
  CHECK(rows[0] == std::vector<std::string>{"number", "state", "value", "reason", "params_lr",
                                            "params_opt", "datetime_start", "datetime_complete",
                                            "duration", "peak_memory_bytes",
                                            "peak_gpu_memory_bytes", "cpu_time_s", "wall_s",
                                            "memory_source", "cpu_source"});
  CHECK(rows[1][0] == "0");  // rows by trial number
  CHECK(rows[1][2] == "inf");
  CHECK(rows[1][4] == "1.0");
  CHECK(rows[1][8] == "2.25");
  CHECK(rows[2][3] == "exit");
  CHECK(rows[2][5] == "a,\"b\"");
  CHECK(rows[2][6].empty());
  CHECK_THAT(exports::ToCsv(*data), Catch::Contains(",\"a,\"\"b\"\"\","));
}

TEST_CASE("export CSV has a user_attrs_KEY column per attribute, as trials_dataframe", "[export]") {
  const char* reply = R"({"study":{"name":"u","state":"COMPLETE","direction":"minimize",
    "n_trials":2,"best":null},"trials":[
    {"number":0,"state":"COMPLETE","value":1.0,"fail_reason":null,
     "params":{"x":0.5},"params_internal":{"x":0.5},
     "distributions":{"x":{"type":"float","low":0.0,"high":1.0,"log":false,"step":0.0}},
     "intermediate":[],"attrs":{"epochs":12,"note":"=cmd","tags":["a","b"]},"created_at":1.0,
     "started_at":null,"finished_at":null},
    {"number":1,"state":"COMPLETE","value":2.0,"fail_reason":null,
     "params":{"x":0.25},"params_internal":{"x":0.25},
     "distributions":{"x":{"type":"float","low":0.0,"high":1.0,"log":false,"step":0.0}},
     "intermediate":[],"attrs":{"epochs":3},"created_at":1.0,"started_at":null,
     "finished_at":null}]})";
  common::Result<exports::StudyData> data = exports::ParseStudyExport(json::parse(reply));
  REQUIRE(data.ok());
  std::vector<std::vector<std::string>> rows = ParseCsv(exports::ToCsv(*data));
  REQUIRE(rows.size() == 3);
  CHECK(std::vector<std::string>(rows[0].begin() + 4, rows[0].begin() + 8) ==
        std::vector<std::string>{"params_x", "user_attrs_epochs", "user_attrs_note",
                                 "user_attrs_tags"});
  CHECK(std::vector<std::string>(rows[1].begin() + 5, rows[1].begin() + 8) ==
        std::vector<std::string>{"12", "'=cmd", "[\"a\",\"b\"]"});
  CHECK(std::vector<std::string>(rows[2].begin() + 5, rows[2].begin() + 8) ==
        std::vector<std::string>{"3", "", ""});
  CHECK(exports::WriteJson(json::parse("[1.0, 0.1, 1e-05, 3, \"<\"]"), {.html_safe = true}) ==
        "[1.0,0.1,1e-05,3,\"\\u003c\"]");
  config::Distribution d;
  d.type = config::ParamType::kFloat;
  d.low = 1e-5;
  d.high = 1;
  d.log = true;
  CHECK(exports::OptunaDistributionJson(d) ==
        "{\"name\": \"FloatDistribution\", \"attributes\": {\"step\": null, \"low\": 1e-05, "
        "\"high\": 1.0, \"log\": true}}");
}

TEST_CASE("export of several objectives and constraints: CSV columns and best trials", "[export]") {
  common::Result<exports::StudyData> data =
      exports::ParseStudyExport(json::parse(MultiObjectiveReply(true)));
  INFO(data.status().ToString());
  REQUIRE(data.ok());
  CHECK(data->directions == std::vector<std::string>{"minimize", "maximize"});
  CHECK(data->best == std::vector<int>{0, 2, 4});
  CHECK(!data->trials[1].feasible);
  CHECK(data->trials[4].feasible);
  CHECK(exports::PairwiseFront(*data, 0, 1) == data->best);
  std::vector<std::vector<std::string>> rows = ParseCsv(exports::ToCsv(*data));
  REQUIRE(rows.size() == 8);
  CHECK(rows[0] == std::vector<std::string>{"number", "state", "values_0", "values_1",
                                            "constraints_0", "constraints_1", "feasible", "reason",
                                            "params_s", "params_x", "datetime_start",
                                            "datetime_complete", "duration", "peak_memory_bytes",
                                            "peak_gpu_memory_bytes", "cpu_time_s", "wall_s",
                                            "memory_source", "cpu_source"});
  CHECK(rows[2][2] == "0.0");
  CHECK(rows[2][3] == "9.0");
  CHECK(rows[2][4] == "0.25");
  CHECK(rows[2][5] == "-3.0");
  CHECK(rows[2][6] == "False");
  CHECK(rows[3][5].empty());  // trial 2 reported one constraint
  CHECK(rows[3][6] == "True");
  CHECK(rows[4][4].empty());  // trial 3 none: feasible
  CHECK(rows[4][6] == "True");
  CHECK(rows[5][5] == "-1e-05");
  CHECK(rows[6][2].empty());  // PRUNED: no values
  CHECK(rows[7][7] == "exit");
  CHECK(rows[1][8] == "'=1");  // text cells neutralised as for one objective

  // No constraints at all: no constraint or feasible columns.
  common::Result<exports::StudyData> plain =
      exports::ParseStudyExport(json::parse(MultiObjectiveReply(false)));
  REQUIRE(plain.ok());
  CHECK(plain->best == std::vector<int>{1});  // feasible now, 1 dominates every other trial
  std::vector<std::vector<std::string>> plain_rows = ParseCsv(exports::ToCsv(*plain));
  CHECK(plain_rows[0][4] == "reason");

  // Every trial infeasible: an empty front.
  std::string all_bad = MultiObjectiveReply(true);
  for (size_t at; (at = all_bad.find("\"constraints\":[]")) != std::string::npos;) {
    all_bad.replace(at, 16, "\"constraints\":[7]");
  }
  for (const char* c : {"[-1.0, 0.0]", "[-0.5]", "[-2.0, -1e-05]"}) {
    all_bad.replace(all_bad.find(c), std::strlen(c), "[1.0]");
  }
  common::Result<exports::StudyData> none = exports::ParseStudyExport(json::parse(all_bad));
  REQUIRE(none.ok());
  CHECK(none->best.empty());

  // A reply with constraints that are not numbers names the trial.
  std::string bad = MultiObjectiveReply(true);
  bad.replace(bad.find("[-0.5]"), 6, "[\"x\"]");
  common::Result<exports::StudyData> refused = exports::ParseStudyExport(json::parse(bad));
  REQUIRE(!refused.ok());
  CHECK_THAT(refused.status().message(), Catch::Contains("trial 2: constraints"));
}

TEST_CASE(
    "Optuna export of several objectives and constraints: Optuna reads directions, "
    "values, constraints and the same front",
    "[export][optuna]") {
  TempDir dir;
  for (bool with_constraints : {true, false}) {
    INFO("constraints " << with_constraints);
    const std::string reply = MultiObjectiveReply(with_constraints);
    common::Result<exports::StudyData> data = exports::ParseStudyExport(json::parse(reply));
    REQUIRE(data.ok());
    const std::string db = dir.File(with_constraints ? "c.db" : "p.db");
    REQUIRE(exports::WriteOptunaStorage(*data, db, false).ok());
    // `trialctl best --json` as the daemon would answer, from the export's own rule.
    json::array front;
    for (int n : data->best) {
      front.push_back(json::parse(reply).at("trials").at(static_cast<size_t>(n)));
    }
    int64_t feasible = 0;
    for (const exports::ExportTrial& t : data->trials)
      feasible += t.state == "COMPLETE" && t.feasible;
    const std::string best = dir.Write(
        "best.json", json::serialize(json::object{{"best_trials", front}, {"feasible", feasible}}));
    const std::string exported = dir.Write("mo.json", exports::ToJson(*data));
    auto [code, output] =
        Shell("/usr/bin/python3 " + std::string(TRIALD_SOURCE_DIR) +
              "/tests/integration/check_optuna_export.py " + db + " " + exported + " " + best);
    INFO(output);
    CHECK(code == 0);
    CHECK_THAT(output, Catch::Contains("7 trials match"));
  }
}

TEST_CASE("trialctl export csv, json and an Optuna storage Optuna loads",
          "[trialctl][export][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  const std::string sweep = WriteMixedStudy(dir, "mixed");
  REQUIRE(Trialctl(d.socket(), {"submit", sweep}).code == 0);
  json::object st = d.WaitStudy("mixed", 120);
  REQUIRE(st.at("state").as_string() == "COMPLETE");

  Ctl j = Trialctl(d.socket(), {"export", "mixed", "--format", "json"});
  INFO(j.err);
  REQUIRE(j.code == 0);
  // Exact parsing: boost::json::parse can be one ulp off (common/json.h).
  common::Result<json::value> parsed = common::ParseJsonExact(j.out);
  REQUIRE(parsed.ok());
  json::value data = *parsed;
  const json::array& trials = data.at("trials").as_array();
  REQUIRE(trials.size() == kMixedTrials);
  INFO(j.out);
  CHECK(CountState(trials, "COMPLETE") == 4);
  CHECK(CountState(trials, "PRUNED") == 2);
  CHECK(CountState(trials, "FAIL") == 2);
  // The same trials as `trials --json`, plus internal values and distributions.
  json::array listed = d.Trials("mixed");
  for (size_t i = 0; i < trials.size(); ++i) {
    const json::object& t = trials[i].as_object();
    CHECK(t.at("params") == listed[i].at("params"));
    CHECK(t.at("intermediate") == listed[i].at("intermediate"));
    CHECK(t.at("distributions").as_object().size() == 6);
    CHECK(t.at("params_internal").as_object().size() == 6);
  }
  CHECK(trials[0].at("distributions").at("lr").at("log").as_bool());
  CHECK(data.at("study").at("name").as_string() == "mixed");

  Ctl csv = Trialctl(d.socket(), {"export", "mixed", "--format", "csv"});
  REQUIRE(csv.code == 0);
  std::vector<std::vector<std::string>> rows = ParseCsv(csv.out);
  REQUIRE(rows.size() == kMixedTrials + 1);
  CHECK(rows[0] == std::vector<std::string>{"number",
                                            "state",
                                            "value",
                                            "reason",
                                            "params_batch",
                                            "params_dropout",
                                            "params_layers",
                                            "params_lr",
                                            "params_opt",
                                            "params_width",
                                            "user_attrs_note",
                                            "datetime_start",
                                            "datetime_complete",
                                            "duration",
                                            "peak_memory_bytes",
                                            "peak_gpu_memory_bytes",
                                            "cpu_time_s",
                                            "wall_s",
                                            "memory_source",
                                            "cpu_source"});
  for (size_t i = 0; i < trials.size(); ++i) {
    const json::object& t = trials[i].as_object();
    const std::vector<std::string>& r = rows[i + 1];
    REQUIRE(r.size() == rows[0].size());
    CHECK(r[0] == std::to_string(t.at("number").as_int64()));
    CHECK(r[1] == std::string(t.at("state").as_string()));
    if (t.at("value").is_null()) {
      CHECK(r[2].empty());
    } else {
      CHECK(std::strtod(r[2].c_str(), nullptr) == t.at("value").to_number<double>());
    }
    CHECK(r[3] == (t.at("fail_reason").is_null() ? "" : t.at("fail_reason").as_string().c_str()));
    CHECK(std::strtod(r[7].c_str(), nullptr) == t.at("params").at("lr").to_number<double>());
    CHECK(std::stoll(r[6]) == t.at("params").at("layers").as_int64());
    const json::value& opt = t.at("params").at("opt");
    CHECK(r[8] == (opt.is_string() ? std::string(opt.as_string()) : exports::WriteJson(opt)));
    // The user attribute, as JSON (an object), where the trial set one.
    const json::value* note = t.at("attrs").as_object().if_contains("note");
    CHECK(r[10] == (note != nullptr ? exports::WriteJson(*note) : std::string()));
    CHECK(r[11].size() == 32);  // 2026-01-02T03:04:05.678901+00:00
    CHECK(std::strtod(r[13].c_str(), nullptr) ==
          Approx(t.at("duration_s").to_number<double>()).margin(1e-6));
    // Measured resources: the JSON's numbers; empty cells where not measured, never 0.
    const json::value* res = t.if_contains("resources");
    const json::value* peak = res != nullptr && res->is_object()
                                  ? res->as_object().if_contains("peak_memory_bytes")
                                  : nullptr;
    if (peak != nullptr && peak->is_number()) {
      CHECK(r[14] == std::to_string(peak->to_number<uint64_t>()));
      CHECK(r[18] == std::string(res->at("memory_source").as_string()));
    } else {
      CHECK(r[14].empty());
    }
    // Every COMPLETE trial was measured (the launcher's accounting).
    if (t.at("state").as_string() == "COMPLETE") CHECK(!r[14].empty());
  }

  const std::string db = dir.File("mixed.db");
  const std::string exported = dir.Write("mixed.json", j.out);
  CheckOptunaExport(d.socket(), "mixed", db, exported, 8);

  // An existing file is kept unless --force.
  Ctl again = Trialctl(d.socket(), {"export", "mixed", "--format", "optuna", "--out", db});
  CHECK(again.code == ctl::kExitError);
  CHECK_THAT(again.err, Catch::Contains(db + " already exists"));
  CHECK(Trialctl(d.socket(), {"export", "mixed", "--format", "optuna", "--out", db, "--force"})
            .code == 0);
  Ctl unknown = Trialctl(d.socket(), {"export", "nope", "--format", "csv"});
  CHECK(unknown.code == ctl::kExitError);
  CHECK(unknown.err == "trialctl: no study named \"nope\" (see `trialctl studies`)\n");
}

}  // namespace triald::testing
