// A define-by-run study seen through every view of it: trialctl trials, best and watch, the CSV,
// JSON and Optuna exports (read back by Optuna 3.1) and the HTML report (drawn by headless
// Chromium). Each trial has only the parameters of the branch it took; everywhere, a parameter
// a trial lacks is shown as absent (left out, an empty cell, a gap), never as zero.

#include <sys/wait.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cstdio>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "common/json.h"
#include "tests/integration/harness.h"

namespace triald::testing {
namespace {

namespace json = boost::json;

// Branch "a" asks for a_scale, branch "b" for b_count; neither can be 0, so a zero anywhere
// would be a stand-in for an absent parameter.
constexpr char kObjective[] = R"(
def objective(trial):
    kind = trial.suggest_categorical("kind", ["a", "b"])
    x = trial.suggest_float("x", -2.0, 2.0)
    if kind == "a":
        extra = trial.suggest_float("a_scale", 0.5, 1.0)
    else:
        extra = trial.suggest_int("b_count", 1, 4)
    value = x * x + extra
    trial.report(value, 0)
    return value
)";

constexpr char kSweep[] = R"([study]
name = "views"
direction = "minimize"
n_trials = 10
parallelism = 2

[objective]
kind = "python"
python = "/usr/bin/python3"
function = "branches.py:objective"

[sampler]
kind = "random"
seed = 3
)";

constexpr int kTrials = 10;

std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, sep)) out.push_back(part);
  return out;
}

// A CSV row's fields (no quoting in these rows), an empty last field included.
// A CSV row's fields: a quoted field may hold commas and doubled quotes (an attribute's JSON).
std::vector<std::string> Fields(const std::string& row) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < row.size(); ++i) {
    const char c = row[i];
    if (quoted && c == '"' && i + 1 < row.size() && row[i + 1] == '"') {
      out.back() += '"';
      ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

std::string Kind(const json::value& trial) {
  return std::string(trial.at("params").at("kind").as_string());
}

// What each trial's row of `trials` text shows: the number, then name=value pairs.
void CheckParamsText(const std::string& text, const json::object& t) {
  INFO(text);
  const bool a = Kind(t) == "a";
  CHECK_THAT(text, Catch::Contains("kind=" + Kind(t)));
  CHECK_THAT(text, Catch::Contains(" x=") || Catch::StartsWith("x="));
  CHECK((text.find("a_scale=") != std::string::npos) == a);
  CHECK((text.find("b_count=") != std::string::npos) == !a);
}

}  // namespace

TEST_CASE("a define-by-run study: trials, best, watch, exports and report show absent params",
          "[python][export][report][integration]") {
  TempDir dir;
  dir.Write("branches.py", kObjective);
  const std::string sweep = dir.Write("views.toml", kSweep);
  TestDaemon d(dir.File("state"));
  d.Start();
  REQUIRE(Trialctl(d.socket(), {"submit", sweep}).code == 0);
  json::object st = d.WaitStudy("views", 120);
  INFO(d.log());
  REQUIRE(st.at("state").as_string() == "COMPLETE");
  json::array trials = d.Trials("views");
  REQUIRE(trials.size() == kTrials);
  int n_a = 0;
  for (const json::value& t : trials) {
    INFO(json::serialize(t));
    REQUIRE(t.at("state").as_string() == "COMPLETE");
    const json::object& p = t.at("params").as_object();
    const bool a = Kind(t) == "a";
    n_a += a;
    CHECK(p.size() == 3);
    CHECK(p.contains("a_scale") == a);
    CHECK(p.contains("b_count") == !a);
  }
  // The seed gives both branches (a different seed or sampler could change that).
  REQUIRE(n_a > 0);
  REQUIRE(n_a < kTrials);

  SECTION("trialctl trials, best and watch list each trial's own parameters") {
    Ctl list = Trialctl(d.socket(), {"trials", "views"});
    REQUIRE(list.code == 0);
    std::map<int, std::string> rows;
    for (const std::string& line : Split(list.out, '\n')) {
      if (!line.empty() && std::isdigit(static_cast<unsigned char>(line[0]))) {
        rows[std::stoi(line)] = line;
      }
    }
    REQUIRE(rows.size() == kTrials);
    for (const json::value& t : trials) {
      CheckParamsText(rows.at(static_cast<int>(t.at("number").as_int64())), t.as_object());
    }
    const json::object best = d.Call("best", {{"study", "views"}}).as_object();
    Ctl b = Trialctl(d.socket(), {"best", "views"});
    REQUIRE(b.code == 0);
    CheckParamsText(b.out, best);
    Ctl w = Trialctl(d.socket(), {"watch", "views"});
    REQUIRE(w.code == 0);
    // The progress line ("...; best V (trial N: params)") and the best trial at the end.
    const std::string all = w.err + w.out;
    const size_t progress = all.find("; best ");
    REQUIRE(progress != std::string::npos);
    CheckParamsText(all.substr(progress, all.find('\n', progress) - progress), best);
    REQUIRE(w.out.find("params: ") != std::string::npos);
    CheckParamsText(w.out.substr(w.out.find("params: ")), best);
  }

  SECTION("CSV leaves the cell empty, JSON and Optuna's storage leave the parameter out") {
    Ctl csv = Trialctl(d.socket(), {"export", "views", "--format", "csv"});
    REQUIRE(csv.code == 0);
    std::vector<std::string> lines = Split(csv.out, '\n');
    REQUIRE(lines.size() == kTrials + 1);
    const std::vector<std::string> header = Fields(lines[0]);
    REQUIRE(header.size() >= 8);
    CHECK(std::vector<std::string>(header.begin() + 4, header.begin() + 8) ==
          std::vector<std::string>{"params_a_scale", "params_b_count", "params_kind", "params_x"});
    for (size_t i = 0; i < trials.size(); ++i) {
      INFO(lines[i + 1]);
      const std::vector<std::string> row = Fields(lines[i + 1]);
      REQUIRE(row.size() == header.size());
      const bool a = Kind(trials[i]) == "a";
      CHECK(row[4].empty() == !a);
      CHECK(row[5].empty() == a);
      CHECK(row[6] == Kind(trials[i]));
      if (!a) CHECK(std::stoi(row[5]) == trials[i].at("params").at("b_count").as_int64());
    }

    Ctl js = Trialctl(d.socket(), {"export", "views", "--format", "json"});
    REQUIRE(js.code == 0);
    common::Result<json::value> data = common::ParseJsonExact(js.out);
    REQUIRE(data.ok());
    for (const json::value& t : data->at("trials").as_array()) {
      INFO(json::serialize(t));
      const json::object& p = t.at("params").as_object();
      const json::object& dists = t.at("distributions").as_object();
      const json::object& internal = t.at("params_internal").as_object();
      REQUIRE(dists.size() == p.size());
      REQUIRE(internal.size() == p.size());
      for (const auto& kv : p) {
        CHECK(dists.contains(kv.key()));
        CHECK(internal.contains(kv.key()));
      }
    }

    const std::string db = dir.File("views.db");
    const std::string exported = dir.Write("views.json", js.out);
    // Trial by trial, Optuna sees the same parameter names, values and distributions.
    CheckOptunaExport(d.socket(), "views", db, exported, kTrials);
    // And through Optuna's own Trial objects: the branch not taken is in neither params nor
    // distributions.
    auto [df_code, df] = Shell(
        "/usr/bin/python3 -c \"import optuna; optuna.logging.set_verbosity(30); "
        "s = optuna.load_study(study_name='views', storage='sqlite:///" +
        db +
        "'); print(*[sum(k not in t.params and k not in t.distributions for t in s.trials) "
        "for k in ('a_scale', 'b_count')])\"");
    INFO(df);
    REQUIRE(df_code == 0);
    CHECK_THAT(df, Catch::StartsWith(std::to_string(kTrials - n_a) + " " + std::to_string(n_a)));
  }

  SECTION("the HTML report: no slice point, a gap in the parallel line, a dash in the table") {
    if (::access("/usr/bin/chromium", X_OK) != 0) {
      FAIL("chromium is not installed (apt-get install chromium; scripts/install-deps.sh does)");
    }
    const std::string html = dir.File("views.html");
    Ctl r = Trialctl(d.socket(), {"report", "views", "-o", html});
    INFO(r.err);
    REQUIRE(r.code == 0);
    auto [code, dom] = Shell(
        "timeout 120 /usr/bin/chromium --headless --no-sandbox --disable-gpu "
        "--no-first-run --disable-background-networking "
        "--disable-component-update --disable-sync --disable-dev-shm-usage "
        "--user-data-dir=" +
        dir.File("profile") + " --dump-dom file://" + html + " 2>/dev/null");
    REQUIRE(code == 0);
    // Slice plots: one point per COMPLETE trial that has the parameter.
    auto count = [&](const std::string& re) {
      const std::regex r(re);
      return std::distance(std::sregex_iterator(dom.begin(), dom.end(), r), std::sregex_iterator());
    };
    CHECK(count("class=\"slice-point\"[^>]*data-param=\"a_scale\"") == n_a);
    CHECK(count("class=\"slice-point\"[^>]*data-param=\"b_count\"") == kTrials - n_a);
    CHECK(count("class=\"slice-point\"[^>]*data-param=\"x\"") == kTrials);
    // Parallel coordinates (axes: objective, a_scale, b_count, kind, x): each trial's line
    // breaks where it lacks a parameter, into two pieces of two and three points.
    const std::regex line(
        "<path [^>]*d=\"([^\"]*)\"[^>]*class=\"pc-line\"[^>]*data-trial=\"(\\d+)\"");
    int lines = 0;
    for (auto it = std::sregex_iterator(dom.begin(), dom.end(), line); it != std::sregex_iterator();
         ++it, ++lines) {
      const std::string path = (*it)[1].str();
      INFO(path);
      CHECK(std::count(path.begin(), path.end(), 'M') == 2);
      CHECK(std::count(path.begin(), path.end(), 'L') == 2);
    }
    CHECK(lines == kTrials);
    // Branch b's objective point stands between the frame and a gap: a dot, not a line.
    CHECK(count("<circle [^>]*class=\"pc-dot\"") == kTrials - n_a);
    // The table: one dash per trial, in the column of the parameter it does not have.
    CHECK(count("<td class=\"absent num\" title=\"not in this trial\">\u2014</td>") == kTrials);
  }
  CHECK(d.Stop() == 0);
}

}  // namespace triald::testing
