// The JSON of what a trial consumed: model::ResourcesToJson / ResourcesFromJson (what storage
// keeps) and the "resources" field of a trial in the control replies.
#include "daemon/model/resources_json.h"

#include <catch2/catch.hpp>
#include <string>

#include "common/json.h"
#include "daemon/control/study_json.h"

namespace triald::model {
namespace {

namespace json = boost::json;

TrialResources Full() {
  TrialResources r;
  r.peak_memory_bytes = 209'715'200;
  r.memory_source = "cgroup2 memory.peak";
  r.peak_gpu_memory_bytes = 0;
  r.cpu_time_s = 0.1;
  r.cpu_source = "getrusage";
  r.wall_s = 1.5;
  return r;
}

json::value Parse(const std::string& text) {
  auto v = common::ParseJsonExact(text);
  REQUIRE(v.ok());
  return *v;
}

TEST_CASE("resources JSON: every field, null when unmeasured, read back exactly", "[resources]") {
  json::object full = ResourcesToJson(Full());
  CHECK(full.at("peak_memory_bytes").to_number<uint64_t>() == 209'715'200);
  CHECK(full.at("peak_gpu_memory_bytes").to_number<uint64_t>() == 0);
  CHECK(full.at("cpu_time_s").as_double() == 0.1);
  CHECK(full.at("memory_source").as_string() == "cgroup2 memory.peak");
  auto back = ResourcesFromJson(Parse(json::serialize(full)), "here");
  REQUIRE(back.ok());
  CHECK(*back == Full());

  json::object empty = ResourcesToJson(TrialResources{});
  CHECK(empty.at("peak_memory_bytes").is_null());
  CHECK(empty.at("peak_gpu_memory_bytes").is_null());
  CHECK(empty.at("cpu_time_s").is_null());
  CHECK(empty.at("wall_s").is_null());
  auto none = ResourcesFromJson(Parse(json::serialize(empty)), "here");
  REQUIRE(none.ok());
  CHECK(none->empty());
}

TEST_CASE("resources JSON: missing and unknown keys are unmeasured and skipped, bad values named",
          "[resources]") {
  auto r = ResourcesFromJson(Parse(R"({"wall_s": 2, "planned_memory_bytes": 5})"), "here");
  REQUIRE(r.ok());
  CHECK(r->wall_s == 2.0);
  CHECK_FALSE(r->peak_memory_bytes.has_value());

  for (const char* bad : {R"({"peak_memory_bytes": -1})", R"({"peak_memory_bytes": 1.5})",
                          R"({"peak_gpu_memory_bytes": "1G"})", R"({"cpu_time_s": "x"})",
                          R"({"wall_s": -3})", R"({"memory_source": 3})", "[1]"}) {
    INFO(bad);
    auto e = ResourcesFromJson(Parse(bad), "trial id 7");
    REQUIRE_FALSE(e.ok());
    CHECK_THAT(e.status().message(), Catch::StartsWith("trial id 7: resources"));
  }
}

TEST_CASE("a trial's JSON carries resources, with the LM worker's planned memory beside them",
          "[resources][control]") {
  TrialRecord t;
  t.state = TrialState::kRunning;
  CHECK(daemon::TrialToJson(t).at("resources").is_null());  // nothing measured yet

  t.state = TrialState::kComplete;
  t.resources = Full();
  json::object o = daemon::TrialToJson(t);
  CHECK(o.at("resources").at("peak_memory_bytes").to_number<uint64_t>() == 209'715'200);
  CHECK_FALSE(o.at("resources").as_object().contains("planned_memory_bytes"));

  t.attrs["planned_memory_bytes"] = "123456789";
  o = daemon::TrialToJson(t);
  CHECK(o.at("resources").at("planned_memory_bytes").to_number<int64_t>() == 123456789);
  t.attrs["planned_memory_bytes"] = "\"lots\"";  // not a number: left out
  CHECK_FALSE(daemon::TrialToJson(t).at("resources").as_object().contains("planned_memory_bytes"));
}

}  // namespace
}  // namespace triald::model
