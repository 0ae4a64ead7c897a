// trialctl report against a real triald, rendered by a real browser: headless Chromium (Debian's
// chromium package) loads the file with the network out of reach, its DOM after the page's
// script ran must hold one history point per finished trial (and the other plots' elements),
// and its screenshot must show a drawn page. Chromium is required (scripts/install-deps.sh
// installs it): without it the case fails, naming the package.
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "daemon/ctl/trialctl.h"
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
  std::set<int> finished, complete, pruned, curves;
  for (const json::value& v : trials) {
    const int n = static_cast<int>(v.at("number").as_int64());
    const std::string state(v.at("state").as_string());
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
  // No network, no profile, no background services: the page must draw from the file alone.
  const std::string flags =
      " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
      " --disable-background-networking --disable-component-update --disable-sync"
      " --disable-dev-shm-usage --user-data-dir=";
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

}  // namespace triald::testing
