// The distributions define-by-run objectives request (config/suggest.h): every rule of
// DEFINE-BY-RUN's suggest, each refusal naming the field, and agreement with the sweep parser's
// own checks (Distribution::Validate) on what is accepted.

#include "config/suggest.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "proto/report.h"

namespace triald::config {
namespace {

using Catch::Matchers::Contains;

// The distribution of a suggest line, through the real decoder: what the daemon will convert.
proto::SuggestDistribution Requested(const std::string& dist_json) {
  common::Result<proto::ReportMessage> m =
      proto::ParseReportLine(R"({"type":"suggest","name":"lr","distribution":)" + dist_json + "}");
  INFO(dist_json);
  if (!m.ok()) FAIL(m.status().message());
  return m->distribution;
}

Distribution MustConvert(const std::string& dist_json) {
  common::Result<Distribution> d = DistributionFromSuggest("lr", Requested(dist_json));
  INFO(dist_json);
  if (!d.ok()) FAIL(d.status().message());
  INFO(d->ToJson());
  CHECK(d->Validate().ok());
  return *d;
}

std::string SuggestError(const std::string& dist_json) {
  common::Result<Distribution> d = DistributionFromSuggest("lr", Requested(dist_json));
  INFO(dist_json);
  REQUIRE_FALSE(d.ok());
  CHECK(d.status().code() == common::Code::kInvalidArgument);
  CHECK_THAT(d.status().message(), Catch::StartsWith("suggest \"lr\": "));
  return d.status().message();
}

TEST_CASE("suggest: what the Python runner sends becomes the distribution it means", "[config]") {
  Distribution lr = MustConvert(R"({"type":"float","low":1e-05,"high":0.1,"log":true})");
  CHECK(lr.type == ParamType::kFloat);
  CHECK(lr.low == 1e-05);
  CHECK(lr.high == 0.1);
  CHECK(lr.log);
  CHECK(lr.step == 0);

  Distribution dropout =
      MustConvert(R"({"type":"float","low":0.0,"high":0.5,"log":false,"step":0.1})");
  CHECK(dropout.step == 0.1);
  CHECK_FALSE(dropout.log);

  Distribution width = MustConvert(R"({"type":"int","low":32,"high":480,"step":32,"log":false})");
  CHECK(width.type == ParamType::kInt);
  CHECK(width.low == 32);
  CHECK(width.high == 480);
  CHECK(width.step == 32);

  Distribution batch = MustConvert(R"({"type":"int","low":16,"high":256,"step":1,"log":true})");
  CHECK(batch.log);
  CHECK(batch.step == 1);

  Distribution mixed = MustConvert(R"({"type":"categorical","choices":[true,3,0.5,"x",-2]})");
  CHECK(mixed.type == ParamType::kCategorical);
  CHECK(mixed.choices == std::vector<Choice>{true, int64_t{3}, 0.5, std::string("x"), int64_t{-2}});
}

TEST_CASE("suggest: defaults and the spellings a hand-written client may use", "[config]") {
  Distribution plain = MustConvert(R"({"type":"float","low":0,"high":1})");
  CHECK_FALSE(plain.log);
  CHECK(plain.step == 0);
  CHECK(MustConvert(R"({"type":"float","low":0,"high":1,"step":null})") == plain);
  CHECK(MustConvert(R"({"type":"float","low":0.5,"high":0.5})").low == 0.5);  // one point

  Distribution ints = MustConvert(R"({"type":"int","low":-3,"high":9})");
  CHECK(ints.step == 1);
  CHECK_FALSE(ints.log);
  // The bounds of +-2^53 are the widest an int parameter may have (they are exact doubles).
  Distribution widest =
      MustConvert(R"({"type":"int","low":-9007199254740992,"high":9007199254740992})");
  CHECK(widest.high == 9007199254740992.0);

  // The same distribution as a [space] parameter, so that a [space] name can be suggested.
  Distribution space_lr;
  space_lr.type = ParamType::kFloat;
  space_lr.low = 1e-5;
  space_lr.high = 0.1;
  space_lr.log = true;
  CHECK(MustConvert(R"({"type":"float","low":1e-05,"high":0.1,"log":true})") == space_lr);
}

TEST_CASE("suggest: an unknown type and fields of another type are refused", "[config]") {
  CHECK_THAT(SuggestError(R"({"type":"normal","low":0,"high":1})"),
             Contains(R"(distribution.type = "normal": expected "float", "int" or "categorical")"));
  CHECK_THAT(SuggestError(R"({"type":"Float","low":0,"high":1})"), Contains("\"Float\""));
  CHECK_THAT(SuggestError(R"({"type":"float","low":0,"high":1,"choices":[1]})"),
             Contains("distribution.choices is not a field of float distributions"));
  CHECK_THAT(SuggestError(R"({"type":"int","low":0,"high":1,"choices":[]})"),
             Contains("distribution.choices is not a field of int distributions"));
  for (const char* field : {"low", "high", "step", "log"}) {
    std::string value = std::string(field) == "log" ? "false" : "1";
    std::string dist =
        R"({"type":"categorical","choices":[1],")" + std::string(field) + "\":" + value + "}";
    CHECK_THAT(SuggestError(dist),
               Contains("distribution." + std::string(field) +
                        " is not a field of categorical distributions; expected "
                        "choices"));
  }
  CHECK_THAT(SuggestError(R"({"type":"categorical","choices":[1],"step":null})"),
             Contains("distribution.step is not a field"));
}

TEST_CASE("suggest: missing bounds and choices are refused", "[config]") {
  CHECK_THAT(SuggestError(R"({"type":"float","high":1})"), Contains("distribution.low is missing"));
  CHECK_THAT(SuggestError(R"({"type":"float","low":1})"), Contains("distribution.high is missing"));
  CHECK_THAT(SuggestError(R"({"type":"int","low":1})"), Contains("distribution.high is missing"));
  CHECK_THAT(SuggestError(R"({"type":"categorical"})"),
             Contains("distribution.choices is missing"));
}

TEST_CASE("suggest: float rules", "[config]") {
  CHECK_THAT(SuggestError(R"({"type":"float","low":0.5,"high":0.1})"),
             Contains("distribution.low = 0.5 is greater than distribution.high = 0.1; expected "
                      "low <= high"));
  CHECK_THAT(SuggestError(R"({"type":"float","low":0.0,"high":1.0,"log":true})"),
             Contains("distribution.low = 0.0 with distribution.log = true: a log distribution "
                      "needs low > 0"));
  CHECK_THAT(SuggestError(R"({"type":"float","low":-1,"high":1,"log":true})"),
             Contains("distribution.low = -1.0"));
  CHECK_THAT(SuggestError(R"({"type":"float","low":1,"high":2,"log":true,"step":0.5})"),
             Contains("distribution.step = 0.5 with distribution.log = true: expected either a "
                      "step or log = true, not both"));
  CHECK_THAT(SuggestError(R"({"type":"float","low":0,"high":1,"step":0})"),
             Contains("distribution.step = 0.0: expected a number > 0, or null for none"));
  CHECK_THAT(SuggestError(R"({"type":"float","low":0,"high":1,"step":-0.5})"),
             Contains("distribution.step = -0.5"));
  CHECK_THAT(SuggestError(R"({"type":"float","low":0,"high":1,"step":0.3})"),
             Contains("distribution.step = 0.3 does not divide distribution.high - "
                      "distribution.low = 1.0"));
  // A log range's low may be tiny but not zero; a step grid's high may be low itself.
  CHECK(MustConvert(R"({"type":"float","low":5e-324,"high":1,"log":true})").low == 5e-324);
  CHECK(MustConvert(R"({"type":"float","low":2,"high":2,"step":0.5})").high == 2);
}

TEST_CASE("suggest: int rules", "[config]") {
  CHECK_THAT(SuggestError(R"({"type":"int","low":8,"high":1})"),
             Contains("distribution.low = 8 is greater than distribution.high = 1; expected low "
                      "<= high"));
  CHECK_THAT(SuggestError(R"({"type":"int","low":1.5,"high":4})"),
             Contains("distribution.low = 1.5: expected an integer between -2^53 and 2^53"));
  // Integers are written as JSON integers; 2.0 is a float.
  CHECK_THAT(SuggestError(R"({"type":"int","low":1,"high":2.0})"),
             Contains("distribution.high = 2.0: expected an integer"));
  CHECK_THAT(SuggestError(R"({"type":"int","low":0,"high":9007199254740993})"),
             Contains("distribution.high = 9007199254740993: expected an integer between -2^53 "
                      "and 2^53"));
  CHECK_THAT(SuggestError(R"({"type":"int","low":-9007199254740993,"high":0})"),
             Contains("distribution.low = -9007199254740993"));
  CHECK_THAT(SuggestError(R"({"type":"int","low":0,"high":18446744073709551615})"),
             Contains("distribution.high = 1.8446744073709552e+19: expected an integer"));
  CHECK_THAT(SuggestError(R"({"type":"int","low":0,"high":4,"step":0})"),
             Contains("distribution.step = 0: expected an integer >= 1"));
  CHECK_THAT(SuggestError(R"({"type":"int","low":0,"high":4,"step":-2})"),
             Contains("distribution.step = -2: expected an integer >= 1"));
  CHECK_THAT(SuggestError(R"({"type":"int","low":0,"high":4,"step":0.5})"),
             Contains("distribution.step = 0.5: expected an integer >= 1"));
  CHECK_THAT(SuggestError(R"({"type":"int","low":0,"high":4,"step":null})"),
             Contains("distribution.step = null: expected an integer >= 1"));
  CHECK_THAT(SuggestError(R"({"type":"int","low":0,"high":8,"log":true})"),
             Contains("distribution.low = 0 with distribution.log = true: a log distribution "
                      "needs low >= 1"));
  CHECK_THAT(SuggestError(R"({"type":"int","low":1,"high":9,"step":2,"log":true})"),
             Contains("distribution.step = 2 with distribution.log = true: expected step = 1 "
                      "with log = true"));
  CHECK_THAT(SuggestError(R"({"type":"int","low":32,"high":500,"step":32})"),
             Contains("distribution.step = 32 does not divide distribution.high - "
                      "distribution.low = 468"));
  CHECK(MustConvert(R"({"type":"int","low":-4,"high":4,"step":4})").step == 4);
}

TEST_CASE("suggest: categorical rules", "[config]") {
  CHECK_THAT(SuggestError(R"({"type":"categorical","choices":[]})"),
             Contains("distribution.choices = []: expected at least one choice"));
  CHECK_THAT(
      SuggestError(R"({"type":"categorical","choices":["adam","sgd","adam"]})"),
      Contains(
          R"(distribution.choices[2] = "adam" equals distribution.choices[0] = "adam"; expected distinct choices)"));
  // Numbers compare by value as in Python (1 == 1.0, 0.0 == -0.0) ...
  CHECK_THAT(SuggestError(R"({"type":"categorical","choices":[1,2,1.0]})"),
             Contains("distribution.choices[2] = 1.0 equals distribution.choices[0] = 1"));
  CHECK_THAT(SuggestError(R"({"type":"categorical","choices":[2.0,2]})"),
             Contains("distribution.choices[1] = 2 equals distribution.choices[0] = 2.0"));
  CHECK_THAT(SuggestError(R"({"type":"categorical","choices":[0.0,-0.0]})"),
             Contains("distribution.choices[1] = -0.0 equals distribution.choices[0] = 0.0"));
  CHECK_THAT(SuggestError(R"({"type":"categorical","choices":[true,false,true]})"),
             Contains("distribution.choices[2] = true equals distribution.choices[0] = true"));
  // ... but a bool is not a number and a string not its spelling.
  Distribution distinct =
      MustConvert(R"({"type":"categorical","choices":[true,1,"1","true",1.5,false,0]})");
  CHECK(distinct.choices.size() == 7);
  // Integers near 2^63 and 2^53 + 1 are told apart from the doubles they round to.
  CHECK(MustConvert(R"({"type":"categorical","choices":[9007199254740993,9007199254740992.0]})")
            .choices.size() == 2);
  CHECK(
      MustConvert(R"({"type":"categorical","choices":[9223372036854775807,9.2233720368547758e18]})")
          .choices.size() == 2);
  CHECK_THAT(
      SuggestError(R"({"type":"categorical","choices":[9007199254740992,9007199254740992.0]})"),
      Contains("equals"));
}

TEST_CASE("suggest: many choices are checked quickly and kept in order", "[config]") {
  // A 64 KiB line holds about 12,000 short choices; a pairwise check would take 10^8 steps.
  std::string choices;
  for (int i = 0; i < 12000; ++i) choices += (i ? "," : "") + std::to_string(i);
  Distribution d = MustConvert(R"({"type":"categorical","choices":[)" + choices + "]}");
  REQUIRE(d.choices.size() == 12000);
  CHECK(d.choices[11999] == Choice(int64_t{11999}));
  CHECK_THAT(SuggestError(R"({"type":"categorical","choices":[)" + choices + ",6000.0]}"),
             Contains("distribution.choices[12000] = 6000.0 equals distribution.choices[6000]"));
}

TEST_CASE("suggest: the name is quoted as JSON in every message", "[config]") {
  common::Result<Distribution> d =
      DistributionFromSuggest("we\"ird", Requested(R"({"type":"float","low":1,"high":0})"));
  REQUIRE_FALSE(d.ok());
  CHECK_THAT(d.status().message(), Catch::StartsWith(R"(suggest "we\"ird": distribution.low)"));
}

TEST_CASE("DistributionConflictMessage names the parameter and both distributions", "[config]") {
  Distribution before = MustConvert(R"({"type":"float","low":1e-05,"high":0.1,"log":true})");
  Distribution now = MustConvert(R"({"type":"float","low":0.001,"high":0.1})");
  CHECK(DistributionConflictMessage("lr", before, now) ==
        "suggest \"lr\": distribution float [0.001, 0.1] differs from float [1e-05, 0.1] (log), "
        "the distribution \"lr\" already has in this trial; a parameter keeps one distribution "
        "per trial");
}

}  // namespace
}  // namespace triald::config
