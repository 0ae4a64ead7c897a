// The dashboard page in headless Chromium (tests/http/dashboard_browser.py drives it through
// the DevTools protocol): a running sweep's new trials appear without a reload; the page's
// pause button pauses the study with the token and is refused without it; every page draws.
#include <unistd.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <sstream>

#include "tests/http/dashboard_fixture.h"
#include "tests/http/http_client.h"
#include "tests/integration/harness.h"

namespace triald::testing {
namespace json = boost::json;

namespace {

std::string FindChromium() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "";
}

// Runs dashboard_browser.py with `args` (after the browser and its profile); its JSON line.
json::object Drive(TempDir& dir, const std::string& profile, const std::string& args) {
  const std::string chromium = FindChromium();
  if (chromium.empty()) {
    FAIL(
        "chromium is not installed: the dashboard's browser checks need it (apt-get install "
        "chromium; scripts/install-deps.sh does)");
  }
  auto [code, out] = Shell("timeout 300 /usr/bin/python3 " + std::string(TRIALD_SOURCE_DIR) +
                               "/tests/http/dashboard_browser.py " + chromium + " " +
                               dir.File(profile) + " " + args,
                           /*with_stderr=*/true);
  INFO(args << "\n" << out);
  REQUIRE(code == 0);
  const size_t line = out.rfind("{\"");
  REQUIRE(line != std::string::npos);
  return json::parse(out.substr(line)).as_object();
}

bool Paused(TestDaemon& d, const std::string& study) {
  Ctl c = Trialctl(d.socket(), {"status", study});
  INFO(c.out << c.err);
  REQUIRE(c.code == 0);
  const bool shown = c.out.find("PAUSED") != std::string::npos;
  CHECK(d.Call("status", {{"study", study}}).at("paused").as_bool() == shown);
  return shown;
}

}  // namespace

TEST_CASE("dashboard in a browser: live updates, pause with and without the token, screenshots",
          "[http][browser][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"), 2);
  d.AddArgs({"--http", "127.0.0.1:0", "--socket-read-open"});
  d.Start();
  const int port = DashboardPort(d.log());
  const std::string token = ReadToken(d.state_dir());
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  // Trials of about 3 s, one at a time: one finishes every few seconds for minutes.
  const std::string study = SubmitDashboardSweep(d, dir, "live", 60, 1, 1.0);

  // A trial that finishes while the page is open appears in it, without a reload.
  json::object live = Drive(dir, "p-live", "live '" + base + "/studies/live?poll=500' 90");
  CHECK(live.at("same_page") == true);
  CHECK(live.at("after").as_int64() > live.at("before").as_int64());
  CHECK(live.at("refreshes_after").as_int64() > live.at("refreshes_before").as_int64());

  // Pause without the token: the POST is refused (403) and the study goes on.
  json::object refused = Drive(dir, "p-refused", "click '" + base + "/studies/live' act-pause");
  CHECK(refused.at("class") == "error");
  CHECK_THAT(std::string(refused.at("message").as_string()), Catch::Contains("403"));
  CHECK(refused.at("token_kept") == false);
  CHECK_FALSE(Paused(d, study));

  // With the token typed in once: paused, as trialctl status shows.
  json::object paused =
      Drive(dir, "p-paused", "click '" + base + "/studies/live' act-pause " + token);
  INFO(json::serialize(paused));
  CHECK(paused.at("class") == "ok");
  CHECK(paused.at("token_kept") == true);
  CHECK(Paused(d, study));

  // The summary line names the study's sampler (status's "sampler": random, the default).
  json::object sampler =
      Drive(dir, "p-sampler",
            "eval '" + base +
                "/studies/live' \"document.querySelector('p.summary').textContent"
                ".indexOf('sampler random') >= 0\"");
  CHECK(json::serialize(sampler.at("value")) == "true");

  // Text a trial wrote (an attribute holding an <img onerror=...> tag) is shown as text: no
  // element is made of it and its script never runs.
  json::object shown =
      Drive(dir, "p-text",
            "eval '" + base +
                "/studies/live/trials/0' \"[document.querySelectorAll('#attrs-table "
                "img').length, document.getElementById('attrs-table')"
                ".textContent.indexOf('<img src=x') >= 0, !!window.__pwned]\"");
  CHECK(json::serialize(shown.at("value")) == "[0,true,false]");

  // Trials without a value are drawn too: each FAIL trial is a cross in the band under the
  // history's axis (and none of the live study's, which all have values).
  d.Submit(ExecSweep("failing", "[\"/bin/false\"]", 2, 1), dir.File("failing.toml"));
  d.WaitStudy("failing", 60);
  const std::string no_value = " \"document.querySelectorAll('#history .no-value').length\"";
  json::object failing = Drive(dir, "p-failing", "eval '" + base + "/studies/failing'" + no_value);
  CHECK(json::serialize(failing.at("value")) == "2");
  json::object valued = Drive(dir, "p-valued", "eval '" + base + "/studies/live'" + no_value);
  CHECK(json::serialize(valued.at("value")) == "0");
  // The parallel coordinates label each axis's ends (x and the value: two axes, four labels).
  json::object ends =
      Drive(dir, "p-ends",
            "eval '" + base +
                "/studies/live' \"Array.from(document.querySelectorAll('.pc-low, .pc-high'))"
                ".filter(function (e) { return e.textContent.length > 0; }).length\"");
  CHECK(json::serialize(ends.at("value")) == "4");

  // Every page draws (a blank or unstyled page has a handful of colours).
  for (const auto& [name, path] : {std::pair<std::string, std::string>{"studies", "/"},
                                   {"study", "/studies/live"},
                                   {"trial", "/studies/live/trials/0"}}) {
    const std::string png = dir.File(name + ".png");
    Drive(dir, "p-" + name, "shot '" + base + path + "' " + png);
    auto [code, stats] = Shell("/usr/bin/python3 " + std::string(TRIALD_SOURCE_DIR) +
                               "/tests/integration/png_stats.py " + png);
    INFO(name << ": " << stats);
    REQUIRE(code == 0);
    std::istringstream s(stats);
    int width = 0, height = 0, colours = 0;
    double non_white = 0;
    s >> width >> height >> colours >> non_white;
    CHECK(width == 1280);
    CHECK(colours > 20);
    CHECK(non_white > 0.005);
  }
  d.Call("cancel", {{"study", study}});
  d.WaitStudy(study, 60);
}

}  // namespace triald::testing
