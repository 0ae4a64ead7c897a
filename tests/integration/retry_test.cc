// Retries end to end: an sh worker dies by SIGKILL the first time it runs a configuration with
// x > 0 (a marker file per configuration remembers), and the study, with retries = 2 and
// retry_on = ["signal"], still ends with n_trials COMPLETE configurations; each failed attempt
// is followed by a retry with the same parameters whose retry_of names it.

#include <catch2/catch.hpp>
#include <map>
#include <string>

#include "tests/integration/harness.h"

namespace triald::testing {
namespace json = boost::json;

TEST_CASE("trials killed by a signal are retried until n_trials configurations complete",
          "[integration][retry]") {
  TempDir dir;
  TestDaemon daemon(dir.File("state"));
  daemon.Start();
  dir.Write("flaky.sh",
            "m=\"$MARKS/$(printf %s \"$TRIALD_PARAMS\" | cksum | cut -d' ' -f1)\"\n"
            "case \"$TRIALD_PARAMS\" in *'\"x\":-'*) ;; *)\n"
            "  if [ ! -e \"$m\" ]; then : > \"$m\"; kill -KILL $$; fi ;;\n"
            "esac\n"
            "echo '{\"type\":\"final\",\"value\":2}' >&3\n",
            0755);
  const int n = 8;
  std::string toml = ExecSweep("flaky", "[\"sh\", \"flaky.sh\"]", n, 2, 0, 2, dir.path());
  toml.replace(toml.find("[objective]\n"), 12,
               "retries = 2\nretry_on = [\"signal\"]\n\n[objective]\nenv = { MARKS = \"" +
                   dir.path() + "\" }\n");
  daemon.Submit(toml, dir.Write("flaky.toml", toml));
  json::object status = daemon.WaitStudy("flaky");
  CHECK(status.at("state").as_string() == "COMPLETE");
  CHECK(status.at("finished").as_int64() == n);

  json::array trials = daemon.Trials("flaky");
  std::map<int64_t, const json::object*> by_number;
  for (const json::value& v : trials) by_number[v.at("number").as_int64()] = &v.as_object();
  int positive = 0, retries = 0;
  for (const json::value& v : trials) {
    const json::object& t = v.as_object();
    const double x = t.at("params").at("x").to_number<double>();
    INFO("trial " << t.at("number").as_int64() << " x=" << x << " " << json::serialize(t));
    if (t.at("retry_of").is_null()) {
      positive += x > 0;
      if (x > 0) {
        CHECK(t.at("state").as_string() == "FAIL");
        CHECK(t.at("fail_reason").as_string() == "signal");
      } else {
        CHECK(t.at("state").as_string() == "COMPLETE");
      }
      continue;
    }
    ++retries;
    CHECK(t.at("state").as_string() == "COMPLETE");
    const json::object& first = *by_number.at(t.at("retry_of").as_int64());
    CHECK(first.at("state").as_string() == "FAIL");
    CHECK(first.at("params") == t.at("params"));
  }
  CHECK(positive > 0);  // the seed gives some x > 0, or this test proves nothing
  CHECK(retries == positive);
  CHECK(static_cast<int>(trials.size()) == n + retries);
  CHECK(CountState(trials, "COMPLETE") == n);
  CHECK(WaitNoProcessesOfStudy("flaky").empty());
  CHECK(ZombieChildren(daemon.pid()).empty());
}

}  // namespace triald::testing
