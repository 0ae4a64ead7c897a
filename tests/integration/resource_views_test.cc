// What users see of the resources triald measures per trial: the text of trialctl's trials
// --resources, status, best and watch (daemon/ctl/resources_view.h), the CSV, JSON and Optuna
// exports, and the report's resource panel, from hand-written replies (trials with and without
// resources, a WAITING trial, a trial stored before resources were measured); then the same
// views against a real triald.
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <set>
#include <sstream>

#include "daemon/ctl/best_view.h"
#include "daemon/ctl/format.h"
#include "daemon/ctl/resources_view.h"
#include "daemon/ctl/trialctl.h"
#include "daemon/export/study_export.h"
#include "tests/integration/harness.h"
#include "tests/integration/mixed_study.h"

namespace triald::testing {
namespace json = boost::json;

namespace {

constexpr uint64_t kMiB = 1024 * 1024;

json::array ReplyTrials() { return json::parse(ResourcesReply()).at("trials").as_array(); }

// Splits a PrintTable line at runs of two or more spaces.
std::vector<std::string> Columns(const std::string& line) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < line.size()) {
    size_t gap = line.find("  ", at);
    if (gap == std::string::npos) gap = line.size();
    out.push_back(line.substr(at, gap - at));
    at = line.find_first_not_of(' ', gap);
    if (at == std::string::npos) break;
  }
  return out;
}

}  // namespace

TEST_CASE("resource sizes read as sweep files write them", "[resources][trialctl]") {
  CHECK(ctl::FormatBytes(0) == "0 B");
  CHECK(ctl::FormatBytes(1023) == "1023 B");
  CHECK(ctl::FormatBytes(1024) == "1.0 KiB");
  CHECK(ctl::FormatBytes(1536) == "1.5 KiB");
  CHECK(ctl::FormatBytes(1024 * 1024 - 1) == "1.0 MiB");  // 1023.999K rounds up a unit
  CHECK(ctl::FormatBytes(static_cast<uint64_t>(212.4 * kMiB)) == "212.4 MiB");
  CHECK(ctl::FormatBytes(8ull << 30) == "8.0 GiB");
  CHECK(ctl::FormatBytes(3ull << 40) == "3.0 TiB");
}

TEST_CASE("trialctl trials --resources cells, best and watch lines: - where not measured",
          "[resources][trialctl]") {
  json::array trials = ReplyTrials();
  CHECK(ctl::ResourceHeaders() ==
        std::vector<std::string>{"PEAK_MEM", "PEAK_GPU", "CPU_S", "WALL_S"});
  CHECK(ctl::ResourceCells(trials[0].as_object()) ==
        std::vector<std::string>{"200.0 MiB", "-", "2.50", "3.00"});
  CHECK(ctl::ResourceCells(trials[1].as_object()) ==
        std::vector<std::string>{"500.0 MiB", "1.0 GiB", "10.00", "4.00"});
  // Stored before resources were measured, and WAITING: nothing, not 0.
  CHECK(ctl::ResourceCells(trials[2].as_object()) == std::vector<std::string>{"-", "-", "-", "-"});
  CHECK(ctl::ResourceCells(trials[5].as_object()) == std::vector<std::string>{"-", "-", "-", "-"});

  CHECK(ctl::ResourcesLine(trials[0].as_object()) ==
        "resources: peak memory 200.0 MiB (cgroup2 memory.peak), peak GPU memory -, CPU 2.50s "
        "(cgroup2 cpu.stat), wall 3.00s");
  CHECK(
      ctl::ResourcesLine(trials[1].as_object()) ==
      "resources: peak memory 500.0 MiB (cgroup2 memory.peak), peak GPU memory 1.0 GiB, CPU 10.00s "
      "(cgroup2 cpu.stat), wall 4.00s, planned memory 384.0 MiB");
  CHECK(ctl::ResourcesLine(trials[5].as_object()) == "resources: not measured");
  json::object old = trials[2].as_object();
  old.erase("resources");  // a daemon from before resources: no line at all
  CHECK(ctl::ResourcesLine(old).empty());

  // best: one objective, then the Pareto front, each trial with its line.
  json::object one = trials[0].as_object();
  one["value"] = 1.0;
  std::ostringstream single;
  CHECK(ctl::PrintBest(single, one));
  CHECK_THAT(single.str(),
             Catch::EndsWith("\n  resources: peak memory 200.0 MiB (cgroup2 memory.peak), peak GPU "
                             "memory -, CPU 2.50s (cgroup2 cpu.stat), wall 3.00s\n"));
  json::object front{{"study", "res"},
                     {"directions", json::array{"minimize", "minimize"}},
                     {"complete", 3},
                     {"feasible", 3},
                     {"best_trials", json::array{trials[1], trials[2]}}};
  std::ostringstream pareto;
  CHECK(ctl::PrintBest(pareto, front));
  CHECK_THAT(pareto.str(),
             Catch::Contains("trial 1: values 0.5, 2  (1.50s)\n  params: x=1.5 s==1\n  "
                             "resources: peak memory 500.0 MiB"));
  CHECK_THAT(pareto.str(), Catch::EndsWith("x=2.5 s==1\n  resources: not measured\n"));
  // watch's closing summary (PrintTrial).
  std::ostringstream watched;
  ctl::PrintTrial(watched, one);
  CHECK_THAT(watched.str(), Catch::EndsWith("\n  resources: peak memory 200.0 MiB (cgroup2 "
                                            "memory.peak), peak GPU memory -, CPU 2.50s (cgroup2 "
                                            "cpu.stat), wall 3.00s\n"));
}

TEST_CASE("trialctl status resources line: max and median peaks, CPU of finished trials",
          "[resources][trialctl]") {
  ctl::ResourceSummary s;
  CHECK(!s.reported());
  CHECK(s.Line() == "resources: none measured");
  for (const json::value& t : ReplyTrials()) s.Add(t.as_object());
  CHECK(s.reported());
  CHECK(s.measured() == 4);
  // Peak memory 100M, 200M, 300M, 500M: median 250M; GPU only trial 1; CPU 2.5 + 10 + 1 + 0.5.
  CHECK(s.Line() ==
        "resources: peak memory max 500.0 MiB (trial 1), median 250.0 MiB; peak GPU memory max 1.0 "
        "GiB "
        "(trial 1), median 1.0 GiB; CPU 14.00s total over 4 finished trials; 4 trials measured "
        "(cgroup2 memory.peak, getrusage ru_maxrss)");

  // An odd count takes the middle value; no GPU part without GPU memory; a RUNNING trial's CPU
  // is not in the total.
  ctl::ResourceSummary odd;
  for (uint64_t mib : {300, 100, 200}) {
    odd.Add(json::object{{"number", static_cast<int64_t>(mib / 100)},
                         {"state", "COMPLETE"},
                         {"resources", json::object{{"peak_memory_bytes", mib * kMiB},
                                                    {"peak_gpu_memory_bytes", nullptr},
                                                    {"cpu_time_s", 1.0},
                                                    {"wall_s", 1.0}}}});
  }
  odd.Add(json::object{
      {"number", 9}, {"state", "RUNNING"}, {"resources", json::object{{"cpu_time_s", 100.0}}}});
  CHECK(odd.Line() ==
        "resources: peak memory max 300.0 MiB (trial 3), median 200.0 MiB; CPU 3.00s total over 3 "
        "finished trials; 3 trials measured");
}

TEST_CASE("exports of measured resources: CSV columns, JSON, and errors naming the field",
          "[resources][export]") {
  common::Result<exports::StudyData> data =
      exports::ParseStudyExport(json::parse(ResourcesReply()));
  INFO(data.status().ToString());
  REQUIRE(data.ok());
  REQUIRE(data->trials[0].resources.has_value());
  CHECK(*data->trials[0].resources->peak_memory_bytes == 200 * kMiB);
  CHECK(!data->trials[0].resources->peak_gpu_memory_bytes);
  CHECK(!data->trials[2].resources);
  CHECK(!data->trials[5].resources);

  std::istringstream csv(exports::ToCsv(*data));
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(csv, line);) {
    std::vector<std::string> cells(1);
    for (char c : line) {
      if (c == ',') {
        cells.emplace_back();
      } else {
        cells.back() += c;
      }
    }
    rows.push_back(cells);
  }
  REQUIRE(rows.size() == 7);
  const std::vector<std::string> tail = {"peak_memory_bytes", "peak_gpu_memory_bytes",
                                         "cpu_time_s",        "wall_s",
                                         "memory_source",     "cpu_source"};
  REQUIRE(rows[0].size() > tail.size());
  CHECK(std::vector<std::string>(rows[0].end() - 6, rows[0].end()) == tail);
  auto last6 = [&](size_t row) {
    REQUIRE(rows[row].size() == rows[0].size());
    return std::vector<std::string>(rows[row].end() - 6, rows[row].end());
  };
  CHECK(last6(1) == std::vector<std::string>{"209715200", "", "2.5", "3.0", "cgroup2 memory.peak",
                                             "cgroup2 cpu.stat"});
  CHECK(last6(2) == std::vector<std::string>{"524288000", "1073741824", "10.0", "4.0",
                                             "cgroup2 memory.peak", "cgroup2 cpu.stat"});
  CHECK(last6(3) == std::vector<std::string>{"", "", "", "", "", ""});  // stored before
  CHECK(last6(5) == std::vector<std::string>{"314572800", "", "0.5", "0.6", "getrusage ru_maxrss",
                                             "getrusage"});
  CHECK(last6(6) == std::vector<std::string>{"", "", "", "", "", ""});  // WAITING

  // JSON: the reply's resources as received, null where not measured.
  json::value exported = json::parse(exports::ToJson(*data));
  CHECK(exported.at("trials").at(1).at("resources").at("planned_memory_bytes").as_int64() ==
        402653184);
  CHECK(exported.at("trials").at(2).at("resources").is_null());
  CHECK(exported.at("trials").at(5).at("resources").is_null());

  // A reply whose resources have the wrong types names the trial and the field.
  for (auto [from, to, what] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"\"peak_memory_bytes\":209715200", "\"peak_memory_bytes\":\"200M\"",
            "trial 0: resources.peak_memory_bytes is not a byte count"},
           {"\"peak_memory_bytes\":209715200", "\"peak_memory_bytes\":-1",
            "trial 0: resources.peak_memory_bytes is not a byte count"},
           {"\"cpu_time_s\":2.5", "\"cpu_time_s\":\"2.5\"",
            "trial 0: resources.cpu_time_s is not a number"},
           {"\"memory_source\":\"getrusage ru_maxrss\"", "\"memory_source\":7",
            "trial 4: resources.memory_source is not a string"}}) {
    std::string bad = ResourcesReply();
    bad.replace(bad.find(from), from.size(), to);
    common::Result<exports::StudyData> refused = exports::ParseStudyExport(json::parse(bad));
    REQUIRE(!refused.ok());
    CHECK_THAT(refused.status().message(), Catch::Contains(what));
  }
  std::string not_object = ResourcesReply();
  const std::string first = "\"resources\":" + MeasuredResources(0);
  not_object.replace(not_object.find(first), first.size(), "\"resources\":5");
  common::Result<exports::StudyData> refused = exports::ParseStudyExport(json::parse(not_object));
  REQUIRE(!refused.ok());
  CHECK_THAT(refused.status().message(),
             Catch::Contains("trial 0: resources are not a JSON object"));
}

TEST_CASE("Optuna export of measured resources: user attributes Optuna loads",
          "[resources][export][optuna]") {
  TempDir dir;
  common::Result<exports::StudyData> data =
      exports::ParseStudyExport(json::parse(ResourcesReply()));
  REQUIRE(data.ok());
  const std::string db = dir.File("res.db");
  REQUIRE(exports::WriteOptunaStorage(*data, db, false).ok());
  const std::string exported = dir.Write("res.json", exports::ToJson(*data));
  auto [code, output] = Shell("/usr/bin/python3 " + std::string(TRIALD_SOURCE_DIR) +
                              "/tests/integration/check_optuna_export.py " + db + " " + exported);
  INFO(output);
  CHECK(code == 0);
  CHECK_THAT(output, Catch::Contains("6 trials match"));
  // The script notices an attribute that is missing, and one written for a value not measured.
  std::string lying = exports::ToJson(*data);
  lying.replace(lying.find("\"wall_s\":3.0"), 12, "\"wall_s\":3.5");
  const std::string lie = "\"resources\":null";
  lying.replace(lying.find(lie), lie.size(), "\"resources\":" + MeasuredResources(3));
  auto [bad_code, bad_output] =
      Shell("/usr/bin/python3 " + std::string(TRIALD_SOURCE_DIR) +
            "/tests/integration/check_optuna_export.py " + db + " " + dir.Write("lie.json", lying));
  INFO(bad_output);
  CHECK(bad_code == 1);
  CHECK_THAT(bad_output, Catch::Contains("trial 0: user attr triald_wall_s = 3.0, expected 3.5"));
  CHECK_THAT(bad_output, Catch::Contains("trial 2: user attr triald_peak_memory_bytes = None"));
}

TEST_CASE("trialctl trials --resources, status, best and export show what triald measured",
          "[resources][trialctl][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  // Each trial touches 64 MiB (bytes written, not just reserved) and burns a little CPU.
  dir.Write("w.py",
            "import os\n"
            "b = b'\\x01' * (64 * 1024 * 1024)\n"
            "n = sum(i * i for i in range(200000))\n"
            "os.write(3, ('{\"type\":\"final\",\"value\":%s}\\n' % os.environ['TRIALD_TRIAL'])"
            ".encode())\n");
  const std::string sweep =
      dir.Write("s.toml", ExecSweep("acct", "[\"/usr/bin/python3\", \"w.py\"]", 4, 2));
  REQUIRE(Trialctl(d.socket(), {"submit", sweep}).code == 0);
  d.WaitStudy("acct", 120);
  json::array trials = d.Trials("acct");
  REQUIRE(trials.size() == 4);
  for (const json::value& v : trials) {
    const json::object& t = v.as_object();
    INFO(json::serialize(t));
    REQUIRE(t.at("state").as_string() == "COMPLETE");
    const json::object* r = ctl::TrialResourcesOf(t);
    REQUIRE(r != nullptr);
    CHECK(r->at("peak_memory_bytes").to_number<double>() >= 64.0 * kMiB);
    CHECK(!r->at("memory_source").as_string().empty());
    CHECK(r->at("cpu_time_s").to_number<double>() > 0);
    CHECK(r->at("wall_s").to_number<double>() > 0);
  }

  // trials --resources: the four columns before PARAMS, each cell as ResourceCells makes it
  // from the trial's JSON.
  Ctl plain = Trialctl(d.socket(), {"trials", "acct"});
  CHECK(plain.out.find("PEAK_MEM") == std::string::npos);  // only on request
  Ctl table = Trialctl(d.socket(), {"trials", "acct", "--resources"});
  INFO(table.out);
  REQUIRE(table.code == 0);
  std::istringstream lines(table.out);
  std::string line;
  std::getline(lines, line);
  CHECK(Columns(line) == std::vector<std::string>{"#", "STATE", "VALUE", "DURATION", "PEAK_MEM",
                                                  "PEAK_GPU", "CPU_S", "WALL_S", "PARAMS",
                                                  "RETRY OF", "REASON"});
  for (const json::value& v : trials) {
    REQUIRE(std::getline(lines, line));
    const std::vector<std::string> cells = Columns(line);
    REQUIRE(cells.size() >= 9);
    CHECK(std::vector<std::string>(cells.begin() + 4, cells.begin() + 8) ==
          ctl::ResourceCells(v.as_object()));
    CHECK(cells[5] == "-");  // no GPU slots: no GPU memory, not 0
    CHECK_THAT(cells[4], Catch::EndsWith(" MiB"));
  }

  Ctl status = Trialctl(d.socket(), {"status", "acct"});
  INFO(status.out);
  REQUIRE(status.code == 0);
  CHECK_THAT(status.out, Catch::Contains("\n  resources: peak memory max "));
  CHECK_THAT(status.out, Catch::Contains(" total over 4 finished trials; 4 trials measured ("));
  CHECK(status.out.find("peak GPU memory") == std::string::npos);

  Ctl best = Trialctl(d.socket(), {"best", "acct"});
  INFO(best.out);
  REQUIRE(best.code == 0);
  CHECK_THAT(best.out, Catch::Contains("\n  resources: peak memory "));
  CHECK_THAT(best.out, Catch::Contains(", peak GPU memory -, CPU "));
  Ctl best_json = Trialctl(d.socket(), {"best", "acct", "--json"});
  CHECK(json::parse(best_json.out).at("resources").is_object());

  Ctl csv = Trialctl(d.socket(), {"export", "acct", "--format", "csv"});
  REQUIRE(csv.code == 0);
  std::istringstream rows(csv.out);
  std::getline(rows, line);
  CHECK_THAT(line, Catch::EndsWith(",duration,peak_memory_bytes,peak_gpu_memory_bytes,cpu_time_s,"
                                   "wall_s,memory_source,cpu_source"));
  for (const json::value& v : trials) {
    REQUIRE(std::getline(rows, line));
    const json::object& r = *ctl::TrialResourcesOf(v.as_object());
    CHECK_THAT(line,
               Catch::Contains(
                   "," + std::to_string(r.at("peak_memory_bytes").to_number<uint64_t>()) + ",,"));
    CHECK_THAT(line, Catch::EndsWith("," + std::string(r.at("memory_source").as_string()) + "," +
                                     std::string(r.at("cpu_source").as_string())));
  }
  const std::string db = dir.File("acct.db");
  Ctl j = Trialctl(d.socket(), {"export", "acct", "--format", "json"});
  REQUIRE(j.code == 0);
  CheckOptunaExport(d.socket(), "acct", db, dir.Write("acct.json", j.out), 4);
}

TEST_CASE("trialctl status reads a study larger than one page for its resources line",
          "[resources][trialctl][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"), 8);
  d.Start();
  // 1001 trials: status reads them in two pages (1000, then 1) and counts every one.
  const std::string sweep =
      dir.Write("s.toml", ExecSweep("big", "[\"" + BinDir() + "/triald-noop-worker\"]", 1001, 8));
  REQUIRE(Trialctl(d.socket(), {"submit", sweep}).code == 0);
  d.WaitStudy("big", 300);
  json::array trials = d.Trials("big");
  REQUIRE(trials.size() == 1001);
  ctl::ResourceSummary all;
  for (const json::value& t : trials) all.Add(t.as_object());
  Ctl status = Trialctl(d.socket(), {"status", "big"});
  INFO(status.out);
  REQUIRE(status.code == 0);
  CHECK(all.measured() == 1001);
  CHECK_THAT(status.out, Catch::EndsWith("  " + all.Line() + "\n"));
  CHECK_THAT(status.out, Catch::Contains(" total over 1001 finished trials; 1001 trials measured"));
}

}  // namespace triald::testing
