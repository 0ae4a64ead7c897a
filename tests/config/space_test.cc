#include "config/space.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <string>

namespace triald::config {
namespace {

using Catch::Matchers::Contains;
using common::Status;

Distribution Float(double low, double high, bool log = false, double step = 0) {
  Distribution d;
  d.type = ParamType::kFloat;
  d.low = low;
  d.high = high;
  d.log = log;
  d.step = step;
  return d;
}

Distribution Int(double low, double high, bool log = false, double step = 1) {
  Distribution d = Float(low, high, log, step);
  d.type = ParamType::kInt;
  return d;
}

Distribution Categorical(std::vector<Choice> choices) {
  Distribution d;
  d.type = ParamType::kCategorical;
  d.choices = std::move(choices);
  return d;
}

TEST_CASE("ParamTypeName names every type", "[config]") {
  CHECK(std::string(ParamTypeName(ParamType::kFloat)) == "float");
  CHECK(std::string(ParamTypeName(ParamType::kInt)) == "int");
  CHECK(std::string(ParamTypeName(ParamType::kCategorical)) == "categorical");
}

TEST_CASE("Validate accepts well-formed distributions", "[config]") {
  CHECK(Float(-10, 10).Validate().ok());
  CHECK(Float(1e-5, 1e-1, true).Validate().ok());
  CHECK(Float(0, 1, false, 0.1).Validate().ok());
  CHECK(Float(0.1, 0.7, false, 0.2).Validate().ok());  // 0.6 / 0.2 is not exact in binary
  CHECK(Float(3, 3).Validate().ok());
  CHECK(Int(1, 10).Validate().ok());
  CHECK(Int(0, 10, false, 2).Validate().ok());
  CHECK(Int(1, 1024, true).Validate().ok());
  CHECK(Categorical({std::string("a"), int64_t{1}, 1.5, true}).Validate().ok());
  // 1 and 1.0 reach an objective as the same JSON number.
  CHECK_THAT(Categorical({std::string("a"), int64_t{1}, 1.0, true}).Validate().message(),
             Contains("1.0 equals 1 as a number"));
}

TEST_CASE("Validate rejects broken float distributions naming the field", "[config]") {
  Status st = Float(5, 1).Validate();
  REQUIRE_FALSE(st.ok());
  CHECK(st.code() == common::Code::kInvalidArgument);
  CHECK(st.message() == "low = 5.0 is greater than high = 1.0; expected low <= high");

  st = Float(0, 1, true).Validate();
  CHECK_THAT(st.message(), Contains("low = 0.0") && Contains("expected low > 0"));
  st = Float(-1, 1, true).Validate();
  CHECK_THAT(st.message(), Contains("low = -1.0") && Contains("expected low > 0"));

  st = Float(0, 1, false, 0.3).Validate();
  CHECK_THAT(st.message(), Contains("step = 0.3 does not divide") && Contains("expected"));

  st = Float(0.1, 1, true, 0.1).Validate();
  CHECK_THAT(st.message(), Contains("step = 0.1") && Contains("log"));

  st = Float(0, 1, false, -0.5).Validate();
  CHECK_THAT(st.message(), Contains("step = -0.5") && Contains("expected a number > 0"));

  st = Float(0, std::numeric_limits<double>::infinity()).Validate();
  CHECK_THAT(st.message(), Contains("high = inf") && Contains("finite"));
  st = Float(std::nan(""), 1).Validate();
  CHECK_THAT(st.message(), Contains("low = nan"));
}

TEST_CASE("Validate rejects broken int distributions naming the field", "[config]") {
  CHECK_THAT(Int(0.5, 3).Validate().message(),
             Contains("low = 0.5") && Contains("expected an integer"));
  CHECK_THAT(Int(0, 2.5).Validate().message(), Contains("high = 2.5"));
  CHECK(Int(10, 1).Validate().message() ==
        "low = 10 is greater than high = 1; expected low <= high");
  CHECK_THAT(Int(0, 10, false, 0).Validate().message(),
             Contains("step = 0") && Contains("expected an integer >= 1"));
  CHECK_THAT(Int(0, 10, false, 1.5).Validate().message(), Contains("step = 1.5"));
  CHECK_THAT(Int(0, 10, false, 3).Validate().message(),
             Contains("step = 3 does not divide high - low = 10"));
  CHECK_THAT(Int(0, 10, true).Validate().message(),
             Contains("low = 0") && Contains("expected low >= 1"));
  CHECK_THAT(Int(1, 9, true, 2).Validate().message(),
             Contains("step = 2") && Contains("expected step = 1"));
  CHECK_THAT(Int(0, 1e17).Validate().message(), Contains("high = "));
}

TEST_CASE("Validate rejects empty, duplicate and non-finite choices", "[config]") {
  CHECK(Categorical({}).Validate().message() == "choices = []: expected at least one choice");
  Status st =
      Categorical({std::string("adam"), std::string("sgd"), std::string("adam")}).Validate();
  CHECK_THAT(st.message(), Contains("choices = [\"adam\", \"sgd\", \"adam\"]") &&
                               Contains("\"adam\" appears more than once") &&
                               Contains("expected distinct choices"));
  CHECK_FALSE(Categorical({int64_t{3}, int64_t{3}}).Validate().ok());
  // Strings and booleans differ from numbers; numbers compare by value (the protocol, enqueue's
  // --param and Optuna's JSON read 1 and 1.0 as one value).
  CHECK(Categorical({int64_t{1}, std::string("1"), true}).Validate().ok());
  CHECK_FALSE(Categorical({int64_t{1}, 1.0, std::string("1")}).Validate().ok());
  CHECK_THAT(Categorical({std::nan("")}).Validate().message(), Contains("finite"));
}

TEST_CASE("Validate names the first repeated choice in file order", "[config]") {
  // "b" repeats before "a" does: the message names "b", as a reader scanning the list would.
  Status st = Categorical({std::string("a"), std::string("b"), std::string("b"), std::string("a")})
                  .Validate();
  CHECK_THAT(st.message(), Contains("\"b\" appears more than once"));
  CHECK_THAT(Categorical({0.5, int64_t{2}, true, 0.5}).Validate().message(),
             Contains("0.5 appears more than once"));
  CHECK_THAT(Categorical({false, true, false}).Validate().message(),
             Contains("false appears more than once"));
}

TEST_CASE("Validate checks a long list of choices in O(n log n) with a short message", "[config]") {
  // 300,000 choices took 80 s with a pairwise check, on every read of the stored distribution;
  // sorted, well under a second. How long it takes is a benchmark's business, not this case's:
  // here a list that size is checked, and its one repeat found and named.
  std::vector<Choice> choices;
  for (int64_t i = 0; i < 300000; ++i) choices.emplace_back(std::to_string(i));
  Distribution d = Categorical(choices);
  CHECK(d.Validate().ok());
  d.choices.emplace_back(std::string("123456"));
  Status st = d.Validate();
  CHECK_THAT(st.message(), Contains("\"123456\" appears more than once"));
  // The message shows the first choices and the count, not all 300,001.
  CHECK_THAT(st.message(), Contains("\"19\", ... (300001 choices)]"));
  CHECK(st.message().size() < 400);
}

TEST_CASE("Contains follows bounds, grids and indexes", "[config]") {
  Distribution f = Float(-1, 1);
  CHECK(f.Contains(-1));
  CHECK(f.Contains(0.25));
  CHECK(f.Contains(1));
  CHECK_FALSE(f.Contains(1.0000001));
  CHECK_FALSE(f.Contains(std::nan("")));
  CHECK_FALSE(f.Contains(std::numeric_limits<double>::infinity()));

  Distribution stepped = Float(0, 1, false, 0.1);
  CHECK(stepped.Contains(0.3));
  CHECK(stepped.Contains(0.1 * 7));  // 0.7000000000000001
  CHECK_FALSE(stepped.Contains(0.35));

  Distribution i = Int(0, 10, false, 2);
  CHECK(i.Contains(0));
  CHECK(i.Contains(4));
  CHECK(i.Contains(10));
  CHECK_FALSE(i.Contains(3));
  CHECK_FALSE(i.Contains(4.5));
  CHECK_FALSE(i.Contains(12));

  Distribution c = Categorical({std::string("a"), std::string("b")});
  CHECK(c.Contains(0));
  CHECK(c.Contains(1));
  CHECK_FALSE(c.Contains(2));
  CHECK_FALSE(c.Contains(-1));
  CHECK_FALSE(c.Contains(0.5));
}

TEST_CASE("Distribution JSON round-trips every type exactly", "[config]") {
  std::vector<Distribution> all = {
      Float(-10, 10),
      Float(1e-5, 0.1, true),
      Float(0.1, 0.7, false, 0.2),
      Float(0.1123577982447599, 0.8330823803049299),  // digits that need exact parsing
      Int(1, 10),
      Int(-64, 64, false, 8),
      Int(1, 4096, true),
      Categorical({std::string("adam \"w\"\n"), int64_t{-3}, 2.5, 1.0, true, false}),
  };
  for (const Distribution& d : all) {
    INFO(d.ToJson());
    common::Result<Distribution> back = DistributionFromJson(d.ToJson());
    REQUIRE(back.ok());
    CHECK(*back == d);
  }

  // Many random bounds: Boost.JSON 1.81's own double parsing is not exact, ours must be.
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> u(-1e3, 1e3);
  for (int n = 0; n < 2000; ++n) {
    double a = u(rng), b = u(rng);
    Distribution d = Float(std::min(a, b), std::max(a, b));
    common::Result<Distribution> back = DistributionFromJson(d.ToJson());
    REQUIRE(back.ok());
    REQUIRE(*back == d);
  }
}

TEST_CASE("Distribution JSON is readable and rejects bad input", "[config]") {
  CHECK(Float(0.0001, 0.1, true).ToJson() ==
        R"({"type":"float","low":0.0001,"high":0.1,"log":true,"step":0.0})");
  CHECK(Int(1, 8, false, 1).ToJson() == R"({"type":"int","low":1,"high":8,"log":false,"step":1})");
  CHECK(Categorical({std::string("a"), true}).ToJson() ==
        R"({"type":"categorical","choices":["a",true]})");

  CHECK_FALSE(DistributionFromJson("not json").ok());
  CHECK_FALSE(DistributionFromJson("[]").ok());
  CHECK_FALSE(DistributionFromJson(R"({"type":"gaussian","low":0,"high":1})").ok());
  CHECK_FALSE(DistributionFromJson(R"({"type":"float","low":0})").ok());
  CHECK_FALSE(DistributionFromJson(R"({"type":"float","low":"0","high":1})").ok());
  CHECK_FALSE(DistributionFromJson(R"({"type":"categorical","choices":[null]})").ok());
  CHECK_FALSE(DistributionFromJson(R"({"type":"categorical","choices":[[1]]})").ok());
  // Parsed JSON is validated like a sweep file.
  common::Result<Distribution> r = DistributionFromJson(R"({"type":"float","low":2,"high":1})");
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Contains("expected low <= high"));
  // A missing step means the default: continuous float, unit-step int.
  r = DistributionFromJson(R"({"type":"int","low":1,"high":3})");
  REQUIRE(r.ok());
  CHECK(r->step == 1);
}

TEST_CASE("ExternalJson renders what a worker sees", "[config]") {
  Distribution f = Float(0, 1);
  CHECK(ExternalJson(f, 0.01) == "0.01");
  CHECK(ExternalJson(f, 1.0) == "1.0");  // stays a float for json.loads
  CHECK(ExternalJson(f, 1e-7) == "1e-07");
  CHECK(ExternalJson(f, 0.1 + 0.2) == "0.30000000000000004");
  CHECK(ExternalJson(f, std::nan("")) == "null");

  CHECK(ExternalJson(Int(1, 256), 64) == "64");
  CHECK(ExternalJson(Int(-5, 5), -3) == "-3");

  Distribution c =
      Categorical({std::string("adamw"), std::string("say \"hi\""), true, int64_t{8}, 0.5, 2.0});
  CHECK(ExternalJson(c, 0) == "\"adamw\"");
  CHECK(ExternalJson(c, 1) == R"("say \"hi\"")");
  CHECK(ExternalJson(c, 2) == "true");
  CHECK(ExternalJson(c, 3) == "8");
  CHECK(ExternalJson(c, 4) == "0.5");
  CHECK(ExternalJson(c, 5) == "2.0");
  CHECK(ExternalJson(c, 6) == "null");
}

TEST_CASE("ChoiceToString shows choices as a user wrote them", "[config]") {
  CHECK(ChoiceToString(std::string("adamw")) == "adamw");
  CHECK(ChoiceToString(false) == "false");
  CHECK(ChoiceToString(int64_t{-2}) == "-2");
  CHECK(ChoiceToString(0.25) == "0.25");
}

TEST_CASE("InternalFromText parses user values for every type", "[config]") {
  Distribution f = Float(0.0001, 0.1, true);
  common::Result<double> r = InternalFromText(f, "0.01");
  REQUIRE(r.ok());
  CHECK(*r == 0.01);
  CHECK(*InternalFromText(f, "1e-3") == 0.001);
  r = InternalFromText(f, "0.5");
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(),
             Contains("\"0.5\"") && Contains("expected a number in [0.0001, 0.1] (log scale)"));
  CHECK_THAT(InternalFromText(f, "fast").status().message(), Contains("\"fast\""));
  CHECK_FALSE(InternalFromText(f, "").ok());
  CHECK_FALSE(InternalFromText(f, "0.01x").ok());
  CHECK_FALSE(InternalFromText(Float(0, 1, false, 0.25), "0.3").ok());
  CHECK(*InternalFromText(Float(0, 1, false, 0.25), "0.75") == 0.75);

  Distribution i = Int(16, 256, false, 16);
  CHECK(*InternalFromText(i, "64") == 64);
  CHECK(*InternalFromText(i, " 64 ") == 64);
  r = InternalFromText(i, "65");
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Contains("expected an integer in [16, 256]"));
  CHECK_FALSE(InternalFromText(i, "64.5").ok());
  CHECK_FALSE(InternalFromText(i, "512").ok());

  Distribution c = Categorical(
      {std::string("adamw"), std::string("sgd"), true, int64_t{3}, 0.5, std::string("7")});
  CHECK(*InternalFromText(c, "adamw") == 0);
  CHECK(*InternalFromText(c, "sgd") == 1);
  CHECK(*InternalFromText(c, "\"sgd\"") == 1);
  CHECK(*InternalFromText(c, "true") == 2);
  CHECK(*InternalFromText(c, "3") == 3);
  CHECK(*InternalFromText(c, "0.5") == 4);
  CHECK(*InternalFromText(c, "7") == 5);  // a string choice spelled like the text wins
  r = InternalFromText(c, "rmsprop");
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(),
             Contains("\"rmsprop\"") && Contains("expected one of \"adamw\", \"sgd\", true"));
  CHECK_FALSE(InternalFromText(c, "false").ok());
  CHECK_FALSE(InternalFromText(c, "\"true\"").ok());  // quoted: only a string choice matches
}

TEST_CASE("ExternalJson and InternalFromText agree", "[config]") {
  Distribution c = Categorical({std::string("a"), int64_t{2}, 0.5, false});
  for (double idx = 0; idx < 4; ++idx) {
    common::Result<double> back = InternalFromText(c, ExternalJson(c, idx));
    REQUIRE(back.ok());
    CHECK(*back == idx);
  }
  Distribution f = Float(-10, 10);
  for (double x : {-10.0, -0.1, 0.0, 0.01, 3.3333333333333335, 10.0}) {
    CHECK(*InternalFromText(f, ExternalJson(f, x)) == x);
  }
}

TEST_CASE("Distribution equality compares every field", "[config]") {
  CHECK(Float(0, 1) == Float(0, 1));
  CHECK(Float(0, 1) != Float(0, 2));
  CHECK(Float(0.1, 1) != Float(0.1, 1, true));
  CHECK(Float(0, 1) != Float(0, 1, false, 0.5));
  CHECK(Float(1, 2) != Int(1, 2, false, 0));
  CHECK(Categorical({std::string("a")}) != Categorical({std::string("b")}));
  CHECK(Categorical({int64_t{1}}) != Categorical({1.0}));
}

TEST_CASE("DistributionText shows each distribution as a person reads it", "[config]") {
  CHECK(DistributionText(Float(1e-5, 0.1, true)) == "float [1e-05, 0.1] (log)");
  CHECK(DistributionText(Float(0, 1, false, 0.25)) == "float [0.0, 1.0] (step 0.25)");
  CHECK(DistributionText(Float(-1, 1)) == "float [-1.0, 1.0]");
  CHECK(DistributionText(Int(2, 64, false, 2)) == "int [2, 64] (step 2)");
  CHECK(DistributionText(Int(1, 1024, true)) == "int [1, 1024] (log)");
  CHECK(DistributionText(Int(1, 8)) == "int [1, 8]");
  CHECK(DistributionText(Categorical({std::string("adam"), std::string("sgd")})) ==
        R"(categorical ["adam", "sgd"])");
  CHECK(DistributionText(Categorical({true, int64_t{3}, 0.5, 1.0})) ==
        "categorical [true, 3, 0.5, 1.0]");
  // A hand-built distribution that breaks the invariants still shows every field.
  CHECK(DistributionText(Float(1, 2, true, 0.5)) == "float [1.0, 2.0] (log, step 0.5)");
}

TEST_CASE("DistributionText differs wherever distributions differ", "[config]") {
  const std::vector<Distribution> all = {
      Float(0, 1),
      Float(0, 1, true),
      Float(0, 1, false, 0.5),
      Float(0, 2),
      Float(-0.0, 1),
      Float(0.1, 1),
      Float(0.1 + 1e-17, 1),
      Int(0, 1),
      Int(0, 4, false, 2),
      Int(1, 4, true),
      Int(0, 2),
      Categorical({int64_t{1}}),
      Categorical({1.0}),
      Categorical({true}),
      Categorical({std::string("1")}),
      Categorical({std::string("a"), std::string("b")}),
      Categorical({std::string("b"), std::string("a")}),
  };
  for (size_t i = 0; i < all.size(); ++i) {
    for (size_t j = 0; j < all.size(); ++j) {
      if (all[i] == all[j]) continue;
      INFO(DistributionText(all[i]) << " vs " << DistributionText(all[j]));
      CHECK(DistributionText(all[i]) != DistributionText(all[j]));
    }
  }
}

TEST_CASE("MaxExternalJsonBytes is the longest value a parameter can send", "[config]") {
  CHECK(MaxExternalJsonBytes(Float(0, 1)) == 24);
  CHECK(MaxExternalJsonBytes(Int(-5, 100000)) == 6);
  CHECK(MaxExternalJsonBytes(Categorical({std::string("ab"), int64_t{12345}, true})) == 5);
}

}  // namespace
}  // namespace triald::config
