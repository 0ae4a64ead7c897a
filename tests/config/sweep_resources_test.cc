// [study] resource_constraints and objectives: measured metrics as constraints and objectives.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "config/sweep.h"
#include "tests/config/sweep_test_util.h"

namespace triald::config {
namespace {

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

using testing::ErrorOf;
using testing::kMinimal;
using testing::Parsed;
using testing::With;

// kMinimal with `lines` added after n_trials (line 4 onwards).
std::string StudyWith(const std::string& lines) {
  return With("n_trials = 10\n", "n_trials = 10\n" + lines);
}

TEST_CASE("resource_constraints parse sizes, seconds and both operators", "[config]") {
  SweepSpec spec =
      Parsed(StudyWith("gpus_per_trial = 1\n"
                       "resource_constraints = [\"peak_memory <= 8G\", \"peak_gpu_memory<=20G\", "
                       "\"cpu_time <= 3600\", \"wall >= 10\", \"  wall   <=  90.5 \", "
                       "\"peak_memory >= 1048576\", \"peak_memory <= 1.5K\"]\n"));
  const std::vector<ResourceConstraint>& c = spec.study.resource_constraints;
  REQUIRE(c.size() == 7);
  CHECK(c[0].metric == "peak_memory");
  CHECK(c[0].at_most);
  CHECK(c[0].limit == 8.0 * (1 << 30));
  CHECK(c[0].text == "peak_memory <= 8G");
  CHECK(c[1].metric == "peak_gpu_memory");
  CHECK(c[1].limit == 20.0 * (1 << 30));
  CHECK(c[2].metric == "cpu_time");
  CHECK(c[2].limit == 3600);
  CHECK(c[3].metric == "wall");
  CHECK_FALSE(c[3].at_most);
  CHECK(c[3].limit == 10);
  CHECK(c[4].metric == "wall");
  CHECK(c[4].at_most);
  CHECK(c[4].limit == 90.5);
  CHECK_FALSE(c[5].at_most);
  CHECK(c[5].limit == 1048576);
  CHECK(c[6].limit == 1536);
  // Absent: none, and the worker's count is the directions'.
  SweepSpec plain = Parsed(kMinimal);
  CHECK(plain.study.resource_constraints.empty());
  CHECK(plain.study.objectives.empty());
  CHECK(plain.study.worker_objectives() == 1);
}

TEST_CASE("a bad resource_constraints entry is refused with its line and column", "[config]") {
  // Line 4; the array's first entry starts at column 25.
  auto error = [](const std::string& entries) {
    return ErrorOf(StudyWith("resource_constraints = [" + entries + "]\n"));
  };
  CHECK_THAT(error("\"peak_rss <= 8G\""),
             StartsWith("sweep.toml:4:25: [study] resource_constraints[0] = \"peak_rss <= 8G\": "
                        "\"peak_rss\" is not a metric triald measures; expected one of "
                        "peak_memory, peak_gpu_memory, cpu_time, wall"));
  CHECK_THAT(error("\"wall <= 10\", \"peak_memory <= 8X\""),
             StartsWith("sweep.toml:4:39: [study] resource_constraints[1] = \"peak_memory <= "
                        "8X\": the limit \"8X\" is not a size; expected a size in bytes >= 1 "
                        "after <=, as a number or with K/M/G/T"));
  CHECK_THAT(error("\"cpu_time <= 1h\""),
             StartsWith("sweep.toml:4:25: [study] resource_constraints[0] = \"cpu_time <= 1h\": "
                        "the limit \"1h\" is not a number of seconds; expected a number of "
                        "seconds from 0 to 31536000 after <="));
  CHECK_THAT(error("\"cpu_time <= -1\""), Contains("the limit \"-1\" is not a number of seconds"));
  CHECK_THAT(error("\"wall <= \""), Contains("the limit \"\" is not a number of seconds"));
  CHECK_THAT(error("\"peak_memory 8G\""),
             StartsWith("sweep.toml:4:25: [study] resource_constraints[0] = \"peak_memory 8G\": "
                        "no operator (<= or >=); expected \"METRIC <= LIMIT\" or \"METRIC >= "
                        "LIMIT\""));
  CHECK_THAT(error("\"peak_memory < 8G\""), Contains("no operator (<= or >=)"));
  CHECK_THAT(error("\"<= 8G\""), Contains("no metric before <="));
  CHECK_THAT(error("\"peak_gpu_memory <= 20G\""),
             StartsWith("sweep.toml:4:25: [study] resource_constraints[0] = \"peak_gpu_memory "
                        "<= 20G\": peak_gpu_memory is measured on GPU slots only and [study] has "
                        "no gpus_per_trial; expected [study] gpus_per_trial >= 1"));
  CHECK_THAT(error("3"), StartsWith("sweep.toml:4:25: [study] resource_constraints[0] = 3: "
                                    "expected \"METRIC <= LIMIT\""));
  CHECK_THAT(ErrorOf(StudyWith("resource_constraints = []\n")),
             StartsWith("sweep.toml:4:24: [study] resource_constraints = []: expected an array of "
                        "constraints"));
  CHECK_THAT(ErrorOf(StudyWith("resource_constraints = \"wall <= 3\"\n")),
             StartsWith("sweep.toml:4:24: [study] resource_constraints = \"wall <= 3\": expected "
                        "an array"));
}

TEST_CASE("objectives put the worker's values first, then measured metrics", "[config]") {
  SweepSpec two =
      Parsed(StudyWith("gpus_per_trial = 1\ndirections = [\"minimize\", \"minimize\"]\n"
                       "objectives = [\"value\", \"peak_gpu_memory\"]\n"));
  CHECK(two.study.objectives == std::vector<std::string>{"value", "peak_gpu_memory"});
  CHECK(two.study.directions.size() == 2);
  CHECK(two.study.worker_objectives() == 1);
  SweepSpec three =
      Parsed(StudyWith("directions = [\"minimize\", \"maximize\", \"minimize\"]\n"
                       "objectives = [\"value\", \"value\", \"cpu_time\"]\n"));
  CHECK(three.study.worker_objectives() == 2);
  // A single direction counts as one: ["value"] is accepted (the same as no objectives).
  SweepSpec one = Parsed(StudyWith("direction = \"maximize\"\nobjectives = [\"value\"]\n"));
  CHECK(one.study.worker_objectives() == 1);
}

TEST_CASE("bad objectives are refused with their line and column", "[config]") {
  const std::string dirs2 = "directions = [\"minimize\", \"minimize\"]\n";
  // objectives on line 5; its first entry at column 16.
  auto error = [&](const std::string& entries) {
    return ErrorOf(StudyWith(dirs2 + "objectives = [" + entries + "]\n"));
  };
  CHECK_THAT(error("\"value\", \"peak_rss\""),
             StartsWith("sweep.toml:5:24: [study] objectives[1] = \"peak_rss\": \"peak_rss\" is "
                        "not a metric triald measures; expected one of peak_memory, "
                        "peak_gpu_memory, cpu_time, wall"));
  CHECK_THAT(error("\"peak_memory\", \"value\""),
             StartsWith("sweep.toml:5:15: [study] objectives[0] = \"peak_memory\": the first "
                        "objective is a measured metric; expected \"value\" first"));
  CHECK_THAT(ErrorOf(StudyWith("directions = [\"minimize\", \"minimize\", \"minimize\"]\n"
                               "objectives = [\"value\", \"wall\", \"value\"]\n")),
             StartsWith("sweep.toml:5:32: [study] objectives[2] = \"value\": \"value\" after the "
                        "measured metric \"wall\"; expected the objective's values first"));
  CHECK_THAT(ErrorOf(StudyWith("directions = [\"minimize\", \"minimize\", \"minimize\"]\n"
                               "objectives = [\"value\", \"wall\", \"wall\"]\n")),
             StartsWith("sweep.toml:5:32: [study] objectives[2] = \"wall\": \"wall\" is already in "
                        "objectives; expected each measured metric once"));
  CHECK_THAT(error("\"value\", \"peak_gpu_memory\""),
             StartsWith("sweep.toml:5:24: [study] objectives[1] = \"peak_gpu_memory\": "
                        "peak_gpu_memory is measured on GPU slots only"));
  CHECK_THAT(error("\"value\""),
             StartsWith("sweep.toml:5:14: [study] objectives = [\"value\"]: names 1 objective "
                        "but [study] has 2 directions; expected one entry per direction"));
  CHECK_THAT(ErrorOf(StudyWith("objectives = [\"value\", \"wall\"]\n")),
             StartsWith("sweep.toml:4:14: [study] objectives = [\"value\", \"wall\"]: names 2 "
                        "objectives but [study] has 1 direction"));
  CHECK_THAT(error("\"value\", 3"),
             StartsWith("sweep.toml:5:24: [study] objectives[1] = 3: expected \"value\" or one "
                        "of peak_memory"));
  CHECK_THAT(ErrorOf(StudyWith(dirs2 + "objectives = []\n")),
             StartsWith("sweep.toml:5:14: [study] objectives = []: expected an array"));
}

TEST_CASE("a study whose measured metric makes it multi-objective is an ordinary one", "[config]") {
  const std::string two =
      "directions = [\"minimize\", \"minimize\"]\nobjectives = [\"value\", \"peak_memory\"]\n";
  // NSGA-II takes it; CMA-ES (single-objective only) refuses it as any two-objective study.
  SweepSpec spec = Parsed(StudyWith(two) + "\n[sampler]\nkind = \"nsga2\"\n");
  CHECK(spec.study.directions.size() == 2);
  CHECK_THAT(ErrorOf(StudyWith(two) + "\n[sampler]\nkind = \"cmaes\"\n"),
             Contains("does not handle several objectives"));
}

TEST_CASE("an lm study with a measured objective sends only its value entries", "[config][lm]") {
  const std::string lm = R"([study]
name = "lm"
n_trials = 4
directions = ["minimize", "minimize"]
objectives = ["value", "peak_memory"]

[objective]
kind = "lm"
model = "/abs/model"
train_file = "/abs/train.txt"
eval_file = "/abs/eval.txt"
)";
  // No [objective] objectives: the worker sends the evaluation loss alone, one value.
  SweepSpec spec = Parsed(lm +
                          "\n[space.learning_rate]\ntype = \"float\"\nlow = 1e-4\n"
                          "high = 1e-2\n");
  CHECK(spec.study.worker_objectives() == 1);
  CHECK_THAT(ErrorOf(lm + "objectives = [\"eval_loss\", \"train_seconds\"]\n"),
             StartsWith("sweep.toml:12:14: [objective] objectives names 2 metrics but [study] has "
                        "1 \"value\" objective in objectives; expected one metric per direction"));
}

}  // namespace
}  // namespace triald::config
