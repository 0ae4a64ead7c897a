// trialctl report against a real triald, rendered by a real browser: headless Chromium (Debian's
// chromium package) loads the file with the network out of reach, its DOM after the page's
// script ran must hold one history point per finished trial (and the other plots' elements),
// and its screenshot must show a drawn page. Chromium is required (scripts/install-deps.sh
// installs it): without it the case fails, naming the package.
#include "daemon/ctl/report.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "daemon/ctl/trialctl.h"
#include "daemon/export/study_export.h"
#include "tests/integration/harness.h"
#include "tests/integration/mixed_study.h"

namespace triald::testing {
namespace json = boost::json;

namespace {

std::string FindChromium() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "";
}

// The data-trial numbers of the elements of `cls` in `dom`, one entry per element.
std::multiset<int> TrialsOf(const std::string& dom, const std::string& cls) {
  std::multiset<int> out;
  const std::regex tag("<[a-z]+ [^>]*class=\"" + cls + "\"[^>]*>");
  const std::regex trial("data-trial=\"([0-9]+)\"");
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), tag); it != std::sregex_iterator();
       ++it) {
    const std::string t = it->str();
    std::smatch m;
    REQUIRE(std::regex_search(t, m, trial));
    out.insert(std::stoi(m[1].str()));
  }
  return out;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// No network, no profile, no background services: the page must draw from the file alone.
const char* const kChromiumFlags =
    " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
    " --disable-background-networking --disable-component-update --disable-sync"
    " --disable-dev-shm-usage --user-data-dir=";

// The DOM of `html` after its script ran in headless Chromium.
std::string RenderedDom(TempDir& dir, const std::string& html, const std::string& profile) {
  const std::string chromium = FindChromium();
  if (chromium.empty()) {
    FAIL(
        "chromium is not installed: the browser checks of trialctl report need it (apt-get "
        "install chromium; scripts/install-deps.sh does)");
  }
  auto [code, dom] = Shell(
      "timeout 120 " + chromium + kChromiumFlags + dir.File(profile) + " --dump-dom file://" + html,
      /*with_stderr=*/false);
  REQUIRE(code == 0);
  return dom;
}

// The data-trial numbers of the elements of `cls` inside the element whose aria-label is
// `label` (one plot).
std::multiset<int> TrialsIn(const std::string& dom, const std::string& label,
                            const std::string& cls) {
  const size_t at = dom.find("aria-label=\"" + label + "\"");
  if (at == std::string::npos) return {};
  const size_t end = dom.find("</svg>", at);
  return TrialsOf(dom.substr(at, end - at), cls);
}

// The texts of the table cells (th or td) from `start` in `dom` up to `end`.
std::vector<std::string> CellTexts(const std::string& dom, const std::string& start,
                                   const std::string& end = "</tr>") {
  const size_t from = dom.find(start);
  if (from == std::string::npos) return {};
  const std::string part = dom.substr(from, dom.find(end, from) - from);
  std::vector<std::string> out;
  const std::regex cell("<t[hd][^>]*>([^<]*)</t[hd]>");
  for (auto it = std::sregex_iterator(part.begin(), part.end(), cell); it != std::sregex_iterator();
       ++it) {
    out.push_back((*it)[1].str());
  }
  return out;
}

}  // namespace

TEST_CASE("trialctl report: one self-contained HTML file a browser draws",
          "[trialctl][report][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  REQUIRE(Trialctl(d.socket(), {"submit", WriteMixedStudy(dir, "rep")}).code == 0);
  d.WaitStudy("rep", 120);
  json::array trials = d.Trials("rep");
  REQUIRE(trials.size() == kMixedTrials);
  std::set<int> finished, complete, pruned, curves, measured;
  for (const json::value& v : trials) {
    const int n = static_cast<int>(v.at("number").as_int64());
    const std::string state(v.at("state").as_string());
    const json::value* res = v.as_object().if_contains("resources");
    if (res != nullptr && res->is_object() && res->as_object().contains("peak_memory_bytes") &&
        res->at("peak_memory_bytes").is_number()) {
      measured.insert(n);
    }
    if (state == "COMPLETE" || state == "PRUNED" || state == "FAIL") finished.insert(n);
    if (state == "COMPLETE") complete.insert(n);
    if (state == "PRUNED") pruned.insert(n);
    if (!v.at("intermediate").as_array().empty()) curves.insert(n);
  }
  REQUIRE(complete.size() == 4);
  REQUIRE(pruned.size() == 2);

  CHECK(Trialctl(d.socket(), {"report", "rep"}).code == ctl::kExitUsage);  // no -o
  const std::string html = dir.File("rep.html");
  Ctl r = Trialctl(d.socket(), {"report", "rep", "-o", html});
  INFO(r.err);
  REQUIRE(r.code == 0);
  std::ifstream in(html);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string page = ss.str();
  // Self-contained: no external script, style sheet, font or image; the only URL is the SVG
  // namespace the script creates elements in.
  CHECK(page.find("<script src") == std::string::npos);
  CHECK(page.find("<link") == std::string::npos);
  CHECK(page.find("url(") == std::string::npos);
  CHECK(page.find("@import") == std::string::npos);
  CHECK(Count(page, "http") == Count(page, "http://www.w3.org/2000/svg"));
  // The workers' attribute text "a<b>&\"c\"" travels escaped: it cannot end the data <script>.
  CHECK(page.find("a<b>") == std::string::npos);
  CHECK_THAT(page, Catch::Contains("a\\u003cb\\u003e\\u0026"));
  CHECK(Trialctl(d.socket(), {"report", "nope", "-o", dir.File("x.html")}).code == ctl::kExitError);

  const std::string chromium = FindChromium();
  if (chromium.empty()) {
    FAIL(
        "chromium is not installed: the browser checks of trialctl report need it (apt-get "
        "install chromium; scripts/install-deps.sh does)");
  }
  const std::string flags = kChromiumFlags;
  auto [dom_code, dom] = Shell(
      "timeout 120 " + chromium + flags + dir.File("profile-dom") + " --dump-dom file://" + html,
      /*with_stderr=*/false);
  REQUIRE(dom_code == 0);
  INFO(dom.substr(0, 2000));
  // One history point per finished trial, each trial once.
  std::multiset<int> points = TrialsOf(dom, "hist-point");
  CHECK(points == std::multiset<int>(finished.begin(), finished.end()));
  CHECK(TrialsOf(dom, "curve") == std::multiset<int>(curves.begin(), curves.end()));
  CHECK(TrialsOf(dom, "pruned-mark") == std::multiset<int>(pruned.begin(), pruned.end()));
  CHECK(TrialsOf(dom, "pc-line") == std::multiset<int>(complete.begin(), complete.end()));
  CHECK(TrialsOf(dom, "slice-point").size() == complete.size() * 6);  // 6 parameters
  CHECK(Count(dom, "class=\"best-line\"") == 1);
  // The resource panel: one peak memory point per measured trial, every COMPLETE one among
  // them, and COMPLETE trials against their value.
  CHECK(TrialsOf(dom, "res-mem-point") == std::multiset<int>(measured.begin(), measured.end()));
  CHECK(std::includes(measured.begin(), measured.end(), complete.begin(), complete.end()));
  for (int n : complete) CHECK(TrialsOf(dom, "res-scatter-point").count(n) == 1);
  CHECK(Count(dom, "<tr data-trial=") + Count(dom, "<tr class=\"best\" data-trial=") +
            Count(dom, "<tr class=\"\" data-trial=") ==
        kMixedTrials);
  CHECK_THAT(dom, Catch::Contains("<title>triald report: rep</title>"));

  const std::string png = dir.File("rep.png");
  auto [shot_code, shot_log] =
      Shell("timeout 120 " + chromium + flags + dir.File("profile-shot") + " --screenshot=" + png +
            " --window-size=1280,2000 file://" + html);
  INFO(shot_log);
  REQUIRE(shot_code == 0);
  auto [stats_code, stats] = Shell("/usr/bin/python3 " + std::string(TRIALD_SOURCE_DIR) +
                                   "/tests/integration/png_stats.py " + png);
  INFO(stats);
  REQUIRE(stats_code == 0);
  std::istringstream s(stats);
  int width = 0, height = 0, colours = 0;
  double non_white = 0;
  s >> width >> height >> colours >> non_white;
  CHECK(width == 1280);
  CHECK(height == 2000);
  // A blank or unstyled page has a handful of colours; plots with antialiased lines, colour
  // scales and text have hundreds.
  CHECK(colours > 100);
  CHECK(non_white > 0.03);
}

TEST_CASE("report of several objectives: the Pareto front plot with infeasible trials marked",
          "[report][integration]") {
  TempDir dir;
  common::Result<exports::StudyData> data =
      exports::ParseStudyExport(json::parse(MultiObjectiveReply(true)));
  REQUIRE(data.ok());
  const std::string html = dir.File("mo.html");
  REQUIRE(ctl::WriteReport(*data, html).ok());
  const std::string dom = RenderedDom(dir, html, "profile-mo");
  INFO(dom.substr(0, 3000));
  // One plot of objective 0 against 1: the front highlighted, the infeasible trial a cross, the
  // dominated one plain; PRUNED and FAIL trials have no values to plot.
  CHECK(TrialsIn(dom, "Pareto front 0-1", "pareto-point") == std::multiset<int>{0, 2, 4});
  CHECK(TrialsIn(dom, "Pareto front 0-1", "infeasible-point") == std::multiset<int>{1});
  CHECK(TrialsIn(dom, "Pareto front 0-1", "dominated-point") == std::multiset<int>{3});
  CHECK(Count(dom, "class=\"pareto-line\"") == 1);
  CHECK(Count(dom, "aria-label=\"Pareto front") == 1);
  // History: one plot per objective, every finished trial in each.
  CHECK(TrialsIn(dom, "optimisation history 0", "hist-point") ==
        std::multiset<int>{0, 1, 2, 3, 4, 5, 6});
  CHECK(TrialsIn(dom, "optimisation history 1", "hist-point") ==
        std::multiset<int>{0, 1, 2, 3, 4, 5, 6});
  CHECK(Count(dom, "class=\"best-line\"") == 2);
  // The table marks the front's rows; the summary names the front and the infeasible count.
  CHECK(Count(dom, "<tr class=\"best\" data-trial=") == 3);
  CHECK_THAT(dom, Catch::Contains("Pareto front: 3 trials (#0, #2, #4); 1 of 5 COMPLETE trials "
                                  "infeasible"));
}

TEST_CASE("report of three objectives: one front plot per pair of objectives",
          "[report][integration]") {
  TempDir dir;
  // Minimise all three; trial 3 would beat every trial but is infeasible; 4 is dominated by 0
  // in every pair and overall.
  std::vector<ReplyTrial> trials = {
      {0, "COMPLETE", "[1.0, 1.0, 1.0]"},           {1, "COMPLETE", "[0.0, 5.0, 2.0]"},
      {2, "COMPLETE", "[3.0, 0.5, 0.0]"},           {3, "COMPLETE", "[-1.0, -1.0, -1.0]", "[2.0]"},
      {4, "COMPLETE", "[4.0, 4.0, 4.0]", "[-1.0]"}, {5, "FAIL", "null"}};
  common::Result<exports::StudyData> data = exports::ParseStudyExport(
      json::parse(ExportReply("tri", "[\"minimize\",\"minimize\",\"minimize\"]", trials)));
  REQUIRE(data.ok());
  CHECK(data->best == std::vector<int>{0, 1, 2});
  const std::string html = dir.File("tri.html");
  REQUIRE(ctl::WriteReport(*data, html).ok());
  const std::string dom = RenderedDom(dir, html, "profile-tri");
  INFO(dom.substr(0, 3000));
  CHECK(Count(dom, "aria-label=\"Pareto front") == 3);
  for (auto [a, b] : {std::pair<size_t, size_t>{0, 1}, {0, 2}, {1, 2}}) {
    const std::string label = "Pareto front " + std::to_string(a) + "-" + std::to_string(b);
    INFO(label);
    const std::vector<int> pair = exports::PairwiseFront(*data, a, b);
    CHECK(TrialsIn(dom, label, "pareto-point") == std::multiset<int>(pair.begin(), pair.end()));
    CHECK(TrialsIn(dom, label, "infeasible-point") == std::multiset<int>{3});
  }
  // Hand-computed: in objectives 1 and 2, trial 2 (0.5, 0) beats 0 (1, 1), 1 (5, 2) and 4.
  CHECK(exports::PairwiseFront(*data, 0, 1) == std::vector<int>{0, 1, 2});
  CHECK(exports::PairwiseFront(*data, 0, 2) == std::vector<int>{0, 1, 2});
  CHECK(exports::PairwiseFront(*data, 1, 2) == std::vector<int>{2});
}

TEST_CASE("report resource panel: one point per measured trial, value against peak memory",
          "[resources][report][integration]") {
  TempDir dir;
  common::Result<exports::StudyData> data =
      exports::ParseStudyExport(json::parse(ResourcesReply()));
  REQUIRE(data.ok());
  const std::string html = dir.File("res.html");
  REQUIRE(ctl::WriteReport(*data, html).ok());
  const std::string dom = RenderedDom(dir, html, "profile-res");
  INFO(dom.substr(0, 3000));
  CHECK(TrialsOf(dom, "res-mem-point") == std::multiset<int>{0, 1, 3, 4});
  CHECK(TrialsOf(dom, "res-gpu-point") == std::multiset<int>{1});
  CHECK(TrialsOf(dom, "res-cpu-point") == std::multiset<int>{0, 1, 3, 4});
  // Objective 0 against peak memory: the measured trials with values (COMPLETE here).
  CHECK(TrialsOf(dom, "res-scatter-point") == std::multiset<int>{0, 1});
  CHECK_THAT(dom, Catch::Contains("aria-label=\"objective against peak memory\""));
  CHECK_THAT(
      dom, Catch::Contains("Peak memory max 500.0 MiB (trial 1), median 250.0 MiB; peak GPU "
                           "memory max 1.0 GiB (trial 1), median 1.0 GiB; CPU 14.00s total over 4 "
                           "finished trials; 4 of 6 trials measured"));
  // The table: sizes as trialctl writes them, blank (not 0) where not measured.
  const std::vector<std::string> heads = CellTexts(dom, "<thead>", "</thead>");
  auto column = [&](const std::string& name) {
    return static_cast<size_t>(std::find(heads.begin(), heads.end(), name) - heads.begin());
  };
  const std::vector<std::string> measured = CellTexts(dom, "data-trial=\"4\"><td");
  const std::vector<std::string> old = CellTexts(dom, "data-trial=\"2\"><td");
  const std::vector<std::string> waiting = CellTexts(dom, "data-trial=\"5\"><td");
  REQUIRE(column("wall (s)") < heads.size());
  REQUIRE(measured.size() == heads.size());
  REQUIRE(old.size() == heads.size());
  REQUIRE(waiting.size() == heads.size());
  CHECK(measured[column("peak memory")] == "300.0 MiB");
  CHECK(measured[column("peak GPU memory")].empty());
  CHECK(measured[column("planned memory")].empty());
  CHECK(CellTexts(dom, "data-trial=\"1\"><td")[column("planned memory")] == "384.0 MiB");
  CHECK(measured[column("CPU (s)")] == "0.5");
  CHECK(measured[column("wall (s)")] == "0.6");
  for (const char* name : {"peak memory", "peak GPU memory", "CPU (s)", "wall (s)"}) {
    CHECK(old[column(name)].empty());
    CHECK(waiting[column(name)].empty());
  }

  // No trial measured: the panel says so, with no points.
  common::Result<exports::StudyData> none =
      exports::ParseStudyExport(json::parse(MultiObjectiveReply(false)));
  REQUIRE(none.ok());
  const std::string empty_html = dir.File("none.html");
  REQUIRE(ctl::WriteReport(*none, empty_html).ok());
  const std::string empty_dom = RenderedDom(dir, empty_html, "profile-none");
  CHECK(TrialsOf(empty_dom, "res-mem-point").empty());
  CHECK_THAT(empty_dom, Catch::Contains("No trial has measured resources"));
  CHECK(empty_dom.find(">peak memory</th>") == std::string::npos);
}

}  // namespace triald::testing
