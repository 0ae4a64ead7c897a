// The one table of lm settings (config/lm_fields.h) drives both sides: every tunable setting
// written in a sweep reaches the worker's hyperparameters with the same value, and a value out
// of range is refused by the sweep parser and by the worker alike.

#include "config/lm_fields.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <string>
#include <type_traits>
#include <variant>

#include "config/space.h"
#include "config/sweep.h"
#include "worker/builtin_objectives.h"
#include "worker/lm_objective.h"
#include "worker/params.h"

namespace triald::worker {
namespace {

using config::LmField;
using config::LmFields;
using config::LmObjectiveConfig;

std::string Number(double x) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.17g", x);
  return buffer;
}

// A value the setting accepts that differs from its default, and one it refuses, as TOML/JSON
// text (the same text in both), and the accepted value as the worker should hold it.
struct Sample {
  std::string good_text;
  std::string bad_text;
  std::variant<double, int64_t, std::string> good;
};

Sample SampleFor(const LmField& f) {
  const LmObjectiveConfig defaults;
  return std::visit(
      [&](auto member) -> Sample {
        const auto& fallback = defaults.*member;
        using T = std::remove_cv_t<std::remove_reference_t<decltype(fallback)>>;
        if constexpr (std::is_same_v<T, std::string>) {
          REQUIRE(f.choices.size() >= 2);
          const std::string good = f.choices[0] == fallback ? f.choices[1] : f.choices[0];
          return {"\"" + good + "\"", "\"no such choice\"", good};
        } else if constexpr (std::is_same_v<T, double>) {
          REQUIRE(std::isfinite(f.number.low));
          const double good = std::isfinite(f.number.high) ? (f.number.low + f.number.high) / 2
                                                           : f.number.low + 0.25;
          REQUIRE(good != fallback);
          const double bad = f.number.low_open ? f.number.low : f.number.low - 1;
          return {Number(good), Number(bad), good};
        } else {
          const int64_t good = f.int_min + 3;
          REQUIRE(good != static_cast<int64_t>(fallback));
          return {std::to_string(good), std::to_string(f.int_min - 1), good};
        }
      },
      f.member);
}

// The worker's value of `f` in `hp`, in Sample's terms (a schedule as its choice's name).
std::variant<double, int64_t, std::string> WorkerValue(const LmField& f, const LmHyperparams& hp) {
  return std::visit(
      [&](auto member) -> std::variant<double, int64_t, std::string> {
        using M = decltype(member);
        if constexpr (std::is_same_v<M, std::monostate>) {
          FAIL("not tunable: " << f.name);
          return 0.0;
        } else {
          const auto& v = hp.*member;
          using T = std::remove_cv_t<std::remove_reference_t<decltype(v)>>;
          if constexpr (std::is_same_v<T, config::LrSchedule>) {
            return std::string(f.choices.at(static_cast<size_t>(v)));
          } else {
            return v;
          }
        }
      },
      f.hyperparam);
}

// The smallest lm sweep, with `objective_line` added to [objective] and `space` as its [space].
std::string LmSweep(const std::string& objective_line, const std::string& space) {
  return "[study]\nname = \"lm\"\nn_trials = 2\n\n[objective]\nkind = \"lm\"\n"
         "model = \"/m\"\ntrain_file = \"/t\"\neval_file = \"/e\"\n" +
         objective_line + "\n\n" + space;
}

const std::string kSomeSpace = "[space.learning_rate]\ntype = \"float\"\nlow = 1e-5\nhigh = 1e-2\n";

common::Result<config::SweepSpec> ParseText(const std::string& text) {
  config::SweepSource source;
  source.text = text;
  source.path = "/s/sweep.toml";
  return config::ParseSweep(source);
}

TEST_CASE("with no TRIALD_PARAMS the worker's hyperparameters are the config's defaults",
          "[worker][lm]") {
  auto hp = LmHyperparamsFrom(LmObjectiveConfig{}, Params{});
  REQUIRE(hp.ok());
  const LmHyperparams defaults;
  for (const LmField& f : LmFields()) {
    if (!f.tunable()) continue;
    CAPTURE(f.name);
    CHECK(WorkerValue(f, *hp) == WorkerValue(f, defaults));
  }
}

TEST_CASE("every tunable lm setting round-trips from the sweep to the worker", "[worker][lm]") {
  int tunable = 0;
  for (const LmField& f : LmFields()) {
    if (!f.tunable()) continue;
    ++tunable;
    CAPTURE(f.name);
    const Sample sample = SampleFor(f);

    // [objective] NAME = value -> the JSON handed to trial-worker -> its hyperparameters.
    auto spec = ParseText(LmSweep(std::string(f.name) + " = " + sample.good_text, kSomeSpace));
    INFO(spec.status().ToString());
    REQUIRE(spec.ok());
    auto config = config::LmObjectiveFromJson(config::LmObjectiveToJson(spec->objective.lm));
    REQUIRE(config.ok());
    auto from_config = LmHyperparamsFrom(*config, Params{});
    REQUIRE(from_config.ok());
    CHECK(WorkerValue(f, *from_config) == sample.good);

    // [space.NAME] -> a sampled value as TRIALD_PARAMS -> the hyperparameters.
    std::string space = "[space." + std::string(f.name) + "]\n";
    if (std::holds_alternative<std::string>(sample.good)) {
      space += "type = \"categorical\"\nchoices = [" + sample.good_text + "]\n";
    } else if (std::holds_alternative<double>(sample.good)) {
      space += "type = \"float\"\nlow = " + sample.good_text +
               "\nhigh = " + Number(std::get<double>(sample.good) * 1.5) + "\n";
    } else {
      space += "type = \"int\"\nlow = " + sample.good_text +
               "\nhigh = " + std::to_string(std::get<int64_t>(sample.good) + 1) + "\n";
    }
    auto tuned = ParseText(LmSweep("", space));
    INFO(tuned.status().ToString());
    REQUIRE(tuned.ok());
    REQUIRE(tuned->space.size() == 1);
    const config::Distribution& dist = tuned->space[0].dist;
    const double internal = dist.type == config::ParamType::kCategorical ? 0 : dist.low;
    auto params = Params::Parse("{\"" + std::string(f.name) +
                                "\": " + config::ExternalJson(dist, internal) + "}");
    REQUIRE(params.ok());
    auto from_params = LmHyperparamsFrom(LmObjectiveConfig{}, *params);
    INFO(from_params.status().ToString());
    REQUIRE(from_params.ok());
    CHECK(WorkerValue(f, *from_params) == sample.good);

    // Out of range: refused on both sides, each naming the setting and the same bound.
    auto refused = ParseText(LmSweep(std::string(f.name) + " = " + sample.bad_text, kSomeSpace));
    REQUIRE_FALSE(refused.ok());
    CHECK_THAT(refused.status().message(),
               Catch::Matchers::Contains(std::string(f.name) + " = " + sample.bad_text) &&
                   Catch::Matchers::EndsWith("expected " + f.expected));
    auto bad_params = Params::Parse("{\"" + std::string(f.name) + "\": " + sample.bad_text + "}");
    REQUIRE(bad_params.ok());
    auto worker_refused = LmHyperparamsFrom(LmObjectiveConfig{}, *bad_params);
    REQUIRE_FALSE(worker_refused.ok());
    CHECK_THAT(worker_refused.status().message(),
               Catch::Matchers::StartsWith("lm: hyperparameter '" + std::string(f.name) +
                                           "' must be " + f.bound + ", got "));
  }
  // The names TRIALD_PARAMS may hold are exactly the tunable settings.
  CHECK(static_cast<int>(LmParamNames().size()) == tunable);
  CHECK(tunable == 10);
}

}  // namespace
}  // namespace triald::worker
