// The report protocol: one JSON object per line from a worker. Parsing is strict, and every
// rejection must tell the worker's author what was wrong with which field.

#include "proto/report.h"

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <iomanip>
#include <string>
#include <vector>

#include "common/json.h"

namespace triald::proto {
namespace {

namespace json = boost::json;
using common::Code;
using common::Result;

ReportMessage MustParse(const std::string& line) {
  Result<ReportMessage> r = ParseReportLine(line);
  INFO(line);
  if (!r.ok()) FAIL(r.status().message());
  return *r;
}

// The error message for a line that must be rejected.
std::string ErrorOf(const std::string& line) {
  Result<ReportMessage> r = ParseReportLine(line);
  INFO(line);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
  return r.status().message();
}

// json_value is JSON text; compare it as JSON so number spelling does not matter.
bool SameJson(const std::string& a, const std::string& b) {
  boost::system::error_code ec_a, ec_b;
  json::value va = json::parse(a, ec_a);
  json::value vb = json::parse(b, ec_b);
  return !ec_a && !ec_b && va == vb;
}

// Drops the trailing newline EncodeReportLine adds, checking that it is the only one.
std::string OneLine(const std::string& encoded) {
  REQUIRE_FALSE(encoded.empty());
  REQUIRE(encoded.back() == '\n');
  std::string line = encoded.substr(0, encoded.size() - 1);
  REQUIRE(line.find('\n') == std::string::npos);
  return line;
}

TEST_CASE("report: step and value", "[proto]") {
  ReportMessage m = MustParse(R"({"type":"report","step":3,"value":0.812})");
  CHECK(m.type == ReportType::kReport);
  CHECK(m.step == 3);
  CHECK(m.value == 0.812);
}

TEST_CASE("report: integer values are accepted as numbers", "[proto]") {
  ReportMessage m = MustParse(R"({"type":"report","step":0,"value":2})");
  CHECK(m.step == 0);
  CHECK(m.value == 2.0);

  ReportMessage neg = MustParse(R"({"type":"report","step":1,"value":-7})");
  CHECK(neg.value == -7.0);

  ReportMessage big = MustParse(R"({"type":"report","step":1,"value":18446744073709551615})");
  CHECK(big.value == 18446744073709551615.0);

  ReportMessage fin = MustParse(R"({"type":"final","values":[1,2.5,-3]})");
  CHECK(fin.values == std::vector<double>{1.0, 2.5, -3.0});
}

TEST_CASE("report: fields may come in any order", "[proto]") {
  ReportMessage m = MustParse(R"({"value":1.5,"step":9,"type":"report"})");
  CHECK(m.type == ReportType::kReport);
  CHECK(m.step == 9);
  CHECK(m.value == 1.5);
}

TEST_CASE("final: single value", "[proto]") {
  ReportMessage m = MustParse(R"({"type":"final","value":0.4213})");
  CHECK(m.type == ReportType::kFinal);
  CHECK(m.value == 0.4213);
  CHECK(m.values == std::vector<double>{0.4213});
}

TEST_CASE("final: several objectives", "[proto]") {
  ReportMessage m = MustParse(R"({"type":"final","values":[0.25,12.5,-1e-3]})");
  CHECK(m.type == ReportType::kFinal);
  CHECK(m.values == std::vector<double>{0.25, 12.5, -1e-3});
  CHECK(m.value == 0.25);
}

TEST_CASE("attr: number, string and object values become JSON text", "[proto]") {
  ReportMessage num = MustParse(R"({"type":"attr","key":"tokens_seen","value":123456})");
  CHECK(num.type == ReportType::kAttr);
  CHECK(num.key == "tokens_seen");
  CHECK(num.json_value == "123456");

  ReportMessage str = MustParse(R"({"type":"attr","key":"optimizer","value":"adam"})");
  CHECK(str.key == "optimizer");
  CHECK(str.json_value == "\"adam\"");

  ReportMessage obj =
      MustParse(R"({"type":"attr","key":"arch","value":{"layers":[64, 32],"act":"relu"}})");
  CHECK(obj.key == "arch");
  CHECK(SameJson(obj.json_value, R"({"layers":[64,32],"act":"relu"})"));
  CHECK(obj.json_value.find(' ') == std::string::npos);  // compact

  ReportMessage null_value = MustParse(R"({"type":"attr","key":"note","value":null})");
  CHECK(null_value.json_value == "null");
}

TEST_CASE("error: message", "[proto]") {
  ReportMessage m = MustParse(R"({"type":"error","message":"CUDA out of memory \"x\"\nline 2"})");
  CHECK(m.type == ReportType::kError);
  CHECK(m.message == "CUDA out of memory \"x\"\nline 2");
}

TEST_CASE("heartbeat", "[proto]") {
  ReportMessage m = MustParse(R"({"type":"heartbeat"})");
  CHECK(m.type == ReportType::kHeartbeat);
}

TEST_CASE("ReportTypeName names every type as it appears on the wire", "[proto]") {
  CHECK(std::string(ReportTypeName(ReportType::kReport)) == "report");
  CHECK(std::string(ReportTypeName(ReportType::kFinal)) == "final");
  CHECK(std::string(ReportTypeName(ReportType::kAttr)) == "attr");
  CHECK(std::string(ReportTypeName(ReportType::kError)) == "error");
  CHECK(std::string(ReportTypeName(ReportType::kHeartbeat)) == "heartbeat");
  CHECK(std::string(ReportTypeName(ReportType::kSuggest)) == "suggest");
  CHECK(std::string(ReportTypeName(ReportType::kShouldPrune)) == "should_prune");
  CHECK(std::string(ReportTypeName(ReportType::kPruned)) == "pruned");
  CHECK(std::string(AnswerTypeName(AnswerType::kSuggestion)) == "suggestion");
  CHECK(std::string(AnswerTypeName(AnswerType::kShouldPrune)) == "should_prune");
  CHECK(std::string(AnswerTypeName(AnswerType::kError)) == "error");
}

TEST_CASE("EncodeReportLine round-trips every message type", "[proto]") {
  SECTION("report") {
    ReportMessage in;
    in.type = ReportType::kReport;
    in.step = 1234567890123;
    in.value = 0.812;
    ReportMessage out = MustParse(OneLine(EncodeReportLine(in)));
    CHECK(out.type == ReportType::kReport);
    CHECK(out.step == in.step);
    CHECK(out.value == in.value);
  }
  SECTION("final with one value") {
    ReportMessage in;
    in.type = ReportType::kFinal;
    in.values = {0.4213};
    ReportMessage out = MustParse(OneLine(EncodeReportLine(in)));
    CHECK(out.type == ReportType::kFinal);
    CHECK(out.value == 0.4213);
    CHECK(out.values == std::vector<double>{0.4213});
  }
  SECTION("final with only value set") {
    ReportMessage in;
    in.type = ReportType::kFinal;
    in.value = -3.5;
    ReportMessage out = MustParse(OneLine(EncodeReportLine(in)));
    CHECK(out.values == std::vector<double>{-3.5});
  }
  SECTION("final with two values") {
    ReportMessage in;
    in.type = ReportType::kFinal;
    in.values = {0.5, 7.0};
    ReportMessage out = MustParse(OneLine(EncodeReportLine(in)));
    CHECK(out.values == in.values);
  }
  SECTION("final with several values") {
    ReportMessage in;
    in.type = ReportType::kFinal;
    in.values = {0.25, 12.5, -1.0};
    ReportMessage out = MustParse(OneLine(EncodeReportLine(in)));
    CHECK(out.values == in.values);
    CHECK(out.value == 0.25);
  }
  SECTION("attr") {
    ReportMessage in;
    in.type = ReportType::kAttr;
    in.key = "arch";
    in.json_value = R"({"layers":[64,32],"act":"relu"})";
    ReportMessage out = MustParse(OneLine(EncodeReportLine(in)));
    CHECK(out.type == ReportType::kAttr);
    CHECK(out.key == "arch");
    CHECK(SameJson(out.json_value, in.json_value));
  }
  SECTION("error with quotes, newlines and non-ASCII text") {
    ReportMessage in;
    in.type = ReportType::kError;
    in.message = "Traceback:\n  File \"train.py\", line 3\n\tValueError: \xce\xbb < 0";
    ReportMessage out = MustParse(OneLine(EncodeReportLine(in)));
    CHECK(out.type == ReportType::kError);
    CHECK(out.message == in.message);
  }
  SECTION("heartbeat") {
    ReportMessage in;
    in.type = ReportType::kHeartbeat;
    ReportMessage out = MustParse(OneLine(EncodeReportLine(in)));
    CHECK(out.type == ReportType::kHeartbeat);
  }
}

// BUG (proto/report.cc, ParseReportLine): Boost 1.81's json::parse converts numbers with its
// fast "imprecise" algorithm, which can be off by one ulp. A worker (or EncodeReportLine, whose
// output is the shortest round-trip spelling) that reports 0.11935319286735585 is recorded as
// 0.11935319286735584; about 10% of doubles drawn uniformly from [0,1) are altered this way,
// so the stored objective differs from the one the worker computed.
TEST_CASE("reported values keep every bit of the worker's double", "[proto]") {
  const double worker_value = 0.11935319286735585;
  ReportMessage parsed = MustParse(R"({"type":"report","step":1,"value":0.11935319286735585})");
  INFO(std::setprecision(17) << "parsed " << parsed.value << ", sent " << worker_value);
  CHECK(parsed.value == worker_value);

  ReportMessage in;
  in.type = ReportType::kReport;
  in.step = 1;
  in.value = worker_value;
  ReportMessage out = MustParse(OneLine(EncodeReportLine(in)));
  INFO(std::setprecision(17) << "round trip gave " << out.value);
  CHECK(out.value == worker_value);
}

TEST_CASE("a line that is not JSON is rejected and quoted", "[proto]") {
  std::string msg = ErrorOf("step=3 value=0.8");
  CHECK_THAT(msg, Catch::Contains("not JSON"));
  CHECK_THAT(msg, Catch::Contains("step=3 value=0.8"));

  CHECK_THAT(ErrorOf(""), Catch::Contains("not JSON"));
  CHECK_THAT(ErrorOf(R"({"type":"heartbeat"} {"type":"heartbeat"})"), Catch::Contains("not JSON"));
}

TEST_CASE("a JSON value that is not an object is rejected", "[proto]") {
  CHECK_THAT(ErrorOf("[1,2]"), Catch::Contains("not a JSON object"));
  CHECK_THAT(ErrorOf("0.5"), Catch::Contains("not a JSON object"));
  CHECK_THAT(ErrorOf(R"("report")"), Catch::Contains("not a JSON object"));
}

TEST_CASE("a missing or non-string type is rejected", "[proto]") {
  CHECK_THAT(ErrorOf(R"({"step":1,"value":0.5})"), Catch::Contains("\"type\""));
  CHECK_THAT(ErrorOf(R"({"type":3})"), Catch::Contains("\"type\""));
}

TEST_CASE("an unknown type is rejected, naming it and the known ones", "[proto]") {
  std::string msg = ErrorOf(R"({"type":"reprot","step":1,"value":0.5})");
  CHECK_THAT(msg, Catch::Contains("\"reprot\""));
  CHECK_THAT(msg, Catch::Contains("report"));
  CHECK_THAT(msg, Catch::Contains("heartbeat"));
  CHECK_THAT(msg, Catch::Contains("suggest, should_prune, relative_params or pruned"));
  CHECK_THAT(msg, Catch::Contains("constraints"));
}

TEST_CASE("an unknown field is rejected, naming it", "[proto]") {
  CHECK_THAT(ErrorOf(R"({"type":"report","step":1,"value":0.5,"epoch":2})"),
             Catch::Contains("unknown field \"epoch\""));
  CHECK_THAT(ErrorOf(R"({"type":"heartbeat","t":1})"), Catch::Contains("unknown field \"t\""));
  CHECK_THAT(ErrorOf(R"({"type":"final","value":1,"step":3})"),
             Catch::Contains("unknown field \"step\""));
  CHECK_THAT(ErrorOf(R"({"type":"attr","key":"k","value":1,"unit":"s"})"),
             Catch::Contains("unknown field \"unit\""));
  CHECK_THAT(ErrorOf(R"({"type":"error","message":"m","code":1})"),
             Catch::Contains("unknown field \"code\""));
}

TEST_CASE("report step must be a non-negative integer", "[proto]") {
  std::string negative = ErrorOf(R"({"type":"report","step":-1,"value":0.5})");
  CHECK_THAT(negative, Catch::Contains("\"step\""));
  CHECK_THAT(negative, Catch::Contains(">= 0"));

  std::string fractional = ErrorOf(R"({"type":"report","step":1.5,"value":0.5})");
  CHECK_THAT(fractional, Catch::Contains("\"step\""));
  CHECK_THAT(fractional, Catch::Contains("integer"));

  std::string text = ErrorOf(R"({"type":"report","step":"3","value":0.5})");
  CHECK_THAT(text, Catch::Contains("\"step\""));
  CHECK_THAT(text, Catch::Contains("integer"));

  std::string missing = ErrorOf(R"({"type":"report","value":0.5})");
  CHECK_THAT(missing, Catch::Contains("\"step\""));

  std::string too_big = ErrorOf(R"({"type":"report","step":9223372036854775808,"value":0.5})");
  CHECK_THAT(too_big, Catch::Contains("\"step\""));

  ReportMessage largest = MustParse(R"({"type":"report","step":9223372036854775807,"value":1})");
  CHECK(largest.step == INT64_MAX);
}

TEST_CASE("report value must be a finite number", "[proto]") {
  std::string text = ErrorOf(R"({"type":"report","step":1,"value":"0.5"})");
  CHECK_THAT(text, Catch::Contains("\"value\""));
  CHECK_THAT(text, Catch::Contains("number"));

  std::string missing = ErrorOf(R"({"type":"report","step":1})");
  CHECK_THAT(missing, Catch::Contains("\"value\""));

  CHECK_THAT(ErrorOf(R"({"type":"report","step":1,"value":null})"), Catch::Contains("\"value\""));
  CHECK_THAT(ErrorOf(R"({"type":"report","step":1,"value":true})"), Catch::Contains("\"value\""));

  std::string overflow = ErrorOf(R"({"type":"report","step":1,"value":1e999})");
  CHECK_THAT(overflow, Catch::Contains("\"value\""));
  CHECK_THAT(overflow, Catch::Contains("finite"));

  CHECK_THAT(ErrorOf(R"({"type":"final","value":-1e999})"), Catch::Contains("finite"));
  CHECK_THAT(ErrorOf(R"({"type":"final","values":[1,1e999]})"), Catch::Contains("finite"));
  CHECK_THAT(ErrorOf(R"({"type":"attr","key":"k","value":1e999})"), Catch::Contains("finite"));
  // NaN and Infinity are not JSON.
  CHECK_THAT(ErrorOf(R"({"type":"report","step":1,"value":NaN})"), Catch::Contains("not JSON"));
}

TEST_CASE("final needs exactly one of value and values", "[proto]") {
  CHECK_THAT(ErrorOf(R"({"type":"final","value":1,"values":[1]})"),
             Catch::Contains("exactly one of \"value\" or \"values\""));
  CHECK_THAT(ErrorOf(R"({"type":"final"})"),
             Catch::Contains("exactly one of \"value\" or \"values\""));
}

TEST_CASE("final values must be a non-empty array of numbers", "[proto]") {
  std::string empty = ErrorOf(R"({"type":"final","values":[]})");
  CHECK_THAT(empty, Catch::Contains("\"values\""));
  CHECK_THAT(empty, Catch::Contains("non-empty"));

  CHECK_THAT(ErrorOf(R"({"type":"final","values":0.5})"), Catch::Contains("\"values\""));

  std::string element = ErrorOf(R"({"type":"final","values":[0.5,"x"]})");
  CHECK_THAT(element, Catch::Contains("\"values\""));
  CHECK_THAT(element, Catch::Contains("number"));
}

TEST_CASE("attr needs a non-empty string key of bounded length and a value", "[proto]") {
  CHECK_THAT(ErrorOf(R"({"type":"attr","value":1})"), Catch::Contains("\"key\""));
  CHECK_THAT(ErrorOf(R"({"type":"attr","key":"","value":1})"), Catch::Contains("\"key\""));
  CHECK_THAT(ErrorOf(R"({"type":"attr","key":7,"value":1})"), Catch::Contains("\"key\""));
  CHECK_THAT(ErrorOf(R"({"type":"attr","key":"k"})"), Catch::Contains("\"value\""));

  std::string at_limit(kMaxAttrKeyBytes, 'k');
  ReportMessage ok = MustParse(R"({"type":"attr","key":")" + at_limit + R"(","value":1})");
  CHECK(ok.key == at_limit);

  std::string over(kMaxAttrKeyBytes + 1, 'k');
  std::string msg = ErrorOf(R"({"type":"attr","key":")" + over + R"(","value":1})");
  CHECK_THAT(msg, Catch::Contains("key"));
  CHECK_THAT(msg, Catch::Contains(std::to_string(kMaxAttrKeyBytes)));
}

TEST_CASE("error needs a string message", "[proto]") {
  CHECK_THAT(ErrorOf(R"({"type":"error"})"), Catch::Contains("\"message\""));
  CHECK_THAT(ErrorOf(R"({"type":"error","message":42})"), Catch::Contains("\"message\""));
}

// An error line padded with message text to exactly `size` bytes.
std::string ErrorLineOfSize(size_t size) {
  const std::string prefix = R"({"type":"error","message":")";
  const std::string suffix = R"("})";
  return prefix + std::string(size - prefix.size() - suffix.size(), 'm') + suffix;
}

TEST_CASE("a line at kMaxReportLineBytes is accepted and one byte more is rejected", "[proto]") {
  std::string at_limit = ErrorLineOfSize(kMaxReportLineBytes);
  REQUIRE(at_limit.size() == kMaxReportLineBytes);
  ReportMessage m = MustParse(at_limit);
  CHECK(m.message.size() > kMaxReportLineBytes - 64);

  std::string over = ErrorLineOfSize(kMaxReportLineBytes + 1);
  std::string msg = ErrorOf(over);
  CHECK_THAT(msg, Catch::Contains(std::to_string(kMaxReportLineBytes + 1)));
  CHECK_THAT(msg, Catch::Contains("exceeds the limit of " + std::to_string(kMaxReportLineBytes)));
}

TEST_CASE("deeply nested JSON is rejected", "[proto]") {
  const int depth = 1000;
  std::string nested = std::string(depth, '[') + std::string(depth, ']');
  std::string msg = ErrorOf(R"({"type":"attr","key":"k","value":)" + nested + "}");
  CHECK_THAT(msg, Catch::Contains("not JSON"));
  CHECK_THAT(msg, Catch::Contains("deep"));

  // Ordinary structured attributes are well within the limit.
  ReportMessage ok = MustParse(R"({"type":"attr","key":"k","value":{"a":[[{"b":[1]}]]}})");
  CHECK(SameJson(ok.json_value, R"({"a":[[{"b":[1]}]]})"));
}

TEST_CASE("errors quote a bounded excerpt of the line", "[proto]") {
  std::string garbage;
  for (int i = 0; garbage.size() < 10 * 1024; ++i) garbage += "garbage-" + std::to_string(i) + " ";
  std::string msg = ErrorOf(garbage);
  CHECK(msg.size() < 300);
  CHECK_THAT(msg, Catch::Contains("garbage-0 garbage-1"));  // the start of what was sent

  std::string long_field(5000, 'x');
  std::string field_msg = ErrorOf(R"({"type":"report","step":1,"value":")" + long_field + R"("})");
  CHECK(field_msg.size() < 300);
  CHECK_THAT(field_msg, Catch::Contains("\"value\""));
}

// BUG (proto/report.cc, ParseBody, attr branch): only a top-level non-finite attr value is
// rejected. A nested one such as {"value":[1e999]} is accepted, and json_value becomes
// "[Infinity]", which is not JSON, so anything that later parses the stored attribute fails.
TEST_CASE("attr rejects a non-finite number nested in its value", "[proto]") {
  Result<ReportMessage> r = ParseReportLine(R"({"type":"attr","key":"k","value":[1e999]})");
  if (r.ok()) {
    INFO("json_value = " << r->json_value);
    boost::system::error_code ec;
    json::parse(r->json_value, ec);
    CHECK_FALSE(ec);
  }
  CHECK_FALSE(r.ok());
}

// ---- The two-way trial channel: suggest, should_prune, pruned and the daemon's answers ----

SuggestNumber Int(int64_t i) {
  SuggestNumber n;
  n.is_integer = true;
  n.integer = i;
  n.value = static_cast<double>(i);
  return n;
}

SuggestNumber Float(double d) {
  SuggestNumber n;
  n.value = d;
  return n;
}

// What `python3 -m triald run obj.py:objective --params ...` (proto/client/python) prints for an
// objective that asks one of each kind of suggestion, Optuna's deprecated aliases included, then
// reports, asks should_prune and raises TrialPruned: the exact lines the daemon will read.
TEST_CASE("the lines the Python runner writes parse as it means them", "[proto]") {
  const std::vector<std::string> lines = {
      R"({"type":"suggest","name":"optimizer","distribution":{"type":"categorical","choices":["adam","sgd"]}})",
      R"({"type":"suggest","name":"lr","distribution":{"type":"float","low":1e-05,"high":0.1,"log":true}})",
      R"({"type":"suggest","name":"momentum","distribution":{"type":"float","low":0.0,"high":0.99,"log":false}})",
      R"({"type":"suggest","name":"dropout","distribution":{"type":"float","low":0.0,"high":0.5,"log":false,"step":0.1}})",
      R"({"type":"suggest","name":"layers","distribution":{"type":"int","low":1,"high":8,"step":1,"log":false}})",
      R"({"type":"suggest","name":"batch","distribution":{"type":"int","low":16,"high":256,"step":1,"log":true}})",
      R"({"type":"suggest","name":"width","distribution":{"type":"int","low":32,"high":480,"step":32,"log":false}})",
      R"({"type":"suggest","name":"u","distribution":{"type":"float","low":-1.0,"high":1.0,"log":false}})",
      R"({"type":"suggest","name":"q","distribution":{"type":"float","low":0.0,"high":1.0,"log":false,"step":0.25}})",
      R"({"type":"suggest","name":"mixed","distribution":{"type":"categorical","choices":[true,3,0.5,"x",-2]}})",
      R"({"type":"report","step":0,"value":1.0})",
      R"({"type":"should_prune"})",
      R"({"type":"pruned"})",
  };
  std::vector<ReportMessage> m;
  for (const std::string& line : lines) m.push_back(MustParse(line));

  CHECK(m[0].type == ReportType::kSuggest);
  CHECK(m[0].name == "optimizer");
  CHECK(m[0].distribution.type == "categorical");
  CHECK(m[0].distribution.choices ==
        std::vector<SuggestChoice>{std::string("adam"), std::string("sgd")});
  CHECK_FALSE(m[0].distribution.low);

  const SuggestDistribution& lr = m[1].distribution;
  CHECK(m[1].name == "lr");
  CHECK(lr.type == "float");
  CHECK(lr.low->value == 1e-05);
  CHECK_FALSE(lr.low->is_integer);
  CHECK(lr.high->value == 0.1);
  CHECK(lr.log == std::optional<bool>(true));
  CHECK_FALSE(lr.step);
  CHECK_FALSE(lr.step_null);
  CHECK_FALSE(lr.choices);

  CHECK(m[3].distribution.step->value == 0.1);
  const SuggestDistribution& width = m[6].distribution;
  CHECK(width.type == "int");
  CHECK(width.low->is_integer);
  CHECK(width.low->integer == 32);
  CHECK(width.high->integer == 480);
  CHECK(width.step->integer == 32);
  CHECK(width.log == std::optional<bool>(false));
  CHECK(m[5].distribution.log == std::optional<bool>(true));
  CHECK(m[9].distribution.choices ==
        std::vector<SuggestChoice>{true, int64_t{3}, 0.5, std::string("x"), int64_t{-2}});
  CHECK(m[10].type == ReportType::kReport);
  CHECK(m[11].type == ReportType::kShouldPrune);
  CHECK(m[12].type == ReportType::kPruned);

  // Re-encoded, each line means the same (the fuzz target checks this for any input).
  for (const ReportMessage& msg : m) {
    ReportMessage again = MustParse(OneLine(EncodeReportLine(msg)));
    CHECK(again.type == msg.type);
    CHECK(again.name == msg.name);
    CHECK(again.distribution == msg.distribution);
  }
}

TEST_CASE("suggest round-trips every field of its distribution", "[proto]") {
  ReportMessage in;
  in.type = ReportType::kSuggest;
  in.name = "n\u00e9\"q\"";
  SECTION("float with a null step and a negative zero") {
    in.distribution.type = "float";
    in.distribution.low = Float(-0.0);
    in.distribution.high = Float(0.11935319286735585);
    in.distribution.step_null = true;
    in.distribution.log = false;
  }
  SECTION("int with integers beyond 2^53 and a float step") {
    in.distribution.type = "int";
    in.distribution.low = Int(-9007199254740993);
    in.distribution.high = Int(INT64_MAX);
    in.distribution.step = Float(2.5);
  }
  SECTION("categorical of every kind of choice") {
    in.distribution.type = "categorical";
    in.distribution.choices = std::vector<SuggestChoice>{
        false, int64_t{-7}, 1e300, -0.0, std::string("line\nbreak"), std::string("")};
  }
  SECTION("an unknown type with every field (the conversion refuses it, not the decoder)") {
    in.distribution.type = "normal";
    in.distribution.low = Int(1);
    in.distribution.high = Float(2);
    in.distribution.step = Int(3);
    in.distribution.log = true;
    in.distribution.choices = std::vector<SuggestChoice>{};
  }
  ReportMessage out = MustParse(OneLine(EncodeReportLine(in)));
  CHECK(out.type == ReportType::kSuggest);
  CHECK(out.name == in.name);
  CHECK(out.distribution == in.distribution);
}

TEST_CASE("SuggestDistribution equality tells integers, floats and signed zeros apart", "[proto]") {
  SuggestDistribution a;
  a.type = "float";
  a.low = Int(1);
  SuggestDistribution b = a;
  CHECK(a == b);
  b.low = Float(1.0);  // the same number, written differently
  CHECK(a != b);
  a.low = Float(0.0);
  b.low = Float(-0.0);
  CHECK(a != b);
  b.low = Float(0.0);
  b.step_null = true;
  CHECK(a != b);
  b.step_null = false;
  b.choices = std::vector<SuggestChoice>{int64_t{1}};
  a.choices = std::vector<SuggestChoice>{true};
  CHECK(a != b);
}

TEST_CASE("suggest needs a bounded non-empty name and a distribution object", "[proto]") {
  const std::string d = R"("distribution":{"type":"float","low":0,"high":1})";
  CHECK_THAT(ErrorOf(R"({"type":"suggest",)" + d + "}"), Catch::Contains("\"name\""));
  CHECK_THAT(ErrorOf(R"({"type":"suggest","name":"",)" + d + "}"), Catch::Contains("\"name\""));
  CHECK_THAT(ErrorOf(R"({"type":"suggest","name":7,)" + d + "}"), Catch::Contains("\"name\""));
  std::string at_limit(kMaxParamNameBytes, 'p');
  CHECK(MustParse(R"({"type":"suggest","name":")" + at_limit + R"(",)" + d + "}").name == at_limit);
  std::string over = ErrorOf(R"({"type":"suggest","name":")" + at_limit + R"(p",)" + d + "}");
  CHECK_THAT(over, Catch::Contains("\"name\""));
  CHECK_THAT(over, Catch::Contains(std::to_string(kMaxParamNameBytes)));

  CHECK_THAT(ErrorOf(R"({"type":"suggest","name":"x"})"), Catch::Contains("\"distribution\""));
  CHECK_THAT(ErrorOf(R"({"type":"suggest","name":"x","distribution":"float"})"),
             Catch::Contains("\"distribution\" must be an object"));
  CHECK_THAT(ErrorOf(R"({"type":"suggest","name":"x",)" + d + R"(,"value":1})"),
             Catch::Contains("unknown field \"value\""));
}

TEST_CASE("suggest refuses each malformed distribution field, naming it", "[proto]") {
  auto error_of = [](const std::string& dist) {
    return ErrorOf(R"({"type":"suggest","name":"x","distribution":)" + dist + "}");
  };
  struct Case {
    std::string dist;
    std::string names;
  };
  const std::vector<Case> cases = {
      {R"({"low":0,"high":1})", R"("distribution.type")"},
      {R"({"type":1,"low":0,"high":1})", R"("distribution.type")"},
      {R"({"type":"float","low":0,"high":1,"scale":2})", R"("distribution.scale")"},
      {R"({"type":"float","low":"0","high":1})", R"("distribution.low" must be a number)"},
      {R"({"type":"float","low":0,"high":null})", R"("distribution.high" must be a number)"},
      {R"({"type":"float","low":0,"high":1e999})", R"("distribution.high" must be finite)"},
      {R"({"type":"float","low":-1e999,"high":1})", R"("distribution.low" must be finite)"},
      {R"({"type":"float","low":0,"high":1,"step":"0.1"})", R"("distribution.step")"},
      {R"({"type":"float","low":0,"high":1,"step":1e999})", R"("distribution.step")"},
      {R"({"type":"float","low":1,"high":2,"log":1})",
       R"("distribution.log" must be true or false)"},
      {R"({"type":"float","low":1,"high":2,"log":null})", R"("distribution.log")"},
      {R"({"type":"categorical","choices":"ab"})", R"("distribution.choices" must be an array)"},
      {R"({"type":"categorical","choices":{"a":1}})", R"("distribution.choices")"},
      {R"({"type":"categorical","choices":["a",null]})", R"("distribution.choices[1]")"},
      {R"({"type":"categorical","choices":[["a"]]})", R"("distribution.choices[0]")"},
      {R"({"type":"categorical","choices":[{"a":1}]})", R"("distribution.choices[0]")"},
      {R"({"type":"categorical","choices":[1,2,1e999]})",
       R"("distribution.choices[2]" must be finite)"},
      {R"({"type":"categorical","choices":[18446744073709551615]})",
       R"("distribution.choices[0]")"},
  };
  for (const Case& c : cases) {
    INFO(c.dist);
    CHECK_THAT(error_of(c.dist), Catch::Contains(c.names));
  }
}

TEST_CASE("suggest keeps integers exact and knows a null step from none", "[proto]") {
  auto dist = [](const std::string& d) {
    return MustParse(R"({"type":"suggest","name":"x","distribution":)" + d + "}").distribution;
  };
  SuggestDistribution big =
      dist(R"({"type":"int","low":-9007199254740993,"high":9223372036854775807})");
  CHECK(big.low->is_integer);
  CHECK(big.low->integer == -9007199254740993);
  CHECK(big.high->integer == INT64_MAX);
  // Above INT64_MAX: still a number a float distribution may use, but no integer.
  SuggestDistribution huge = dist(R"({"type":"float","low":0,"high":18446744073709551615})");
  CHECK_FALSE(huge.high->is_integer);
  CHECK(huge.high->value == 18446744073709551615.0);
  SuggestDistribution written_float = dist(R"({"type":"int","low":1.0,"high":2})");
  CHECK_FALSE(written_float.low->is_integer);
  CHECK(written_float.low->value == 1.0);

  SuggestDistribution null_step = dist(R"({"type":"float","low":0,"high":1,"step":null})");
  CHECK(null_step.step_null);
  CHECK_FALSE(null_step.step);
  SuggestDistribution no_step = dist(R"({"type":"float","low":0,"high":1})");
  CHECK_FALSE(no_step.step_null);
  CHECK_FALSE(no_step.log);
}

TEST_CASE("should_prune and pruned carry no fields", "[proto]") {
  CHECK(MustParse(R"({"type":"should_prune"})").type == ReportType::kShouldPrune);
  CHECK(MustParse(R"({"type":"pruned"})").type == ReportType::kPruned);
  CHECK_THAT(ErrorOf(R"({"type":"should_prune","step":3})"), Catch::Contains("\"step\""));
  CHECK_THAT(ErrorOf(R"({"type":"pruned","value":0.5})"), Catch::Contains("\"value\""));
  for (ReportType t : {ReportType::kShouldPrune, ReportType::kPruned}) {
    ReportMessage in;
    in.type = t;
    CHECK(OneLine(EncodeReportLine(in)) == "{\"type\":\"" + std::string(ReportTypeName(t)) + "\"}");
  }
}

AnswerMessage MustParseAnswer(const std::string& line) {
  Result<AnswerMessage> r = ParseAnswerLine(line);
  INFO(line);
  if (!r.ok()) FAIL(r.status().message());
  return *r;
}

std::string AnswerErrorOf(const std::string& line) {
  Result<AnswerMessage> r = ParseAnswerLine(line);
  INFO(line);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
  return r.status().message();
}

TEST_CASE("the daemon's answers are the lines the Python runner expects", "[proto]") {
  // The runner (proto/client/python/triald/_optuna.py) checks type and name, and reads a float
  // as a float: the value's text is copied, not re-serialised (Boost would write 1E0).
  CHECK(EncodeSuggestionAnswer("lr", "0.0031") ==
        "{\"type\":\"suggestion\",\"name\":\"lr\",\"value\":0.0031}\n");
  CHECK(EncodeSuggestionAnswer("momentum", "1.0") ==
        "{\"type\":\"suggestion\",\"name\":\"momentum\",\"value\":1.0}\n");
  CHECK(EncodeSuggestionAnswer("optimizer", "\"sgd\"") ==
        "{\"type\":\"suggestion\",\"name\":\"optimizer\",\"value\":\"sgd\"}\n");
  CHECK(EncodeSuggestionAnswer("flag", "true") ==
        "{\"type\":\"suggestion\",\"name\":\"flag\",\"value\":true}\n");
  CHECK(EncodeShouldPruneAnswer(true) == "{\"type\":\"should_prune\",\"value\":true}\n");
  CHECK(EncodeShouldPruneAnswer(false) == "{\"type\":\"should_prune\",\"value\":false}\n");
  CHECK(EncodeErrorAnswer("suggest \"lr\": bad") ==
        "{\"type\":\"error\",\"message\":\"suggest \\\"lr\\\": bad\"}\n");
}

TEST_CASE("answers round-trip through ParseAnswerLine", "[proto]") {
  SECTION("suggestion: the name escaped, the value bit for bit") {
    std::string name = "we\"ird\n\xce\xbb";
    AnswerMessage a = MustParseAnswer(OneLine(EncodeSuggestionAnswer(name, "0.11935319286735585")));
    CHECK(a.type == AnswerType::kSuggestion);
    CHECK(a.name == name);
    CHECK(SameJson(a.value_json, "0.11935319286735585"));
    Result<json::value> v = common::ParseJsonExact(a.value_json);
    REQUIRE(v.ok());
    CHECK(v->as_double() == 0.11935319286735585);
  }
  SECTION("suggestion of an integer and of a string") {
    CHECK(MustParseAnswer(OneLine(EncodeSuggestionAnswer("n", "-9007199254740992"))).value_json ==
          "-9007199254740992");
    CHECK(MustParseAnswer(OneLine(EncodeSuggestionAnswer("s", "\"a\\u0000b\""))).value_json ==
          json::serialize(json::value(std::string("a\0b", 3))));
  }
  SECTION("should_prune") {
    CHECK(MustParseAnswer(OneLine(EncodeShouldPruneAnswer(true))).prune);
    AnswerMessage no = MustParseAnswer(OneLine(EncodeShouldPruneAnswer(false)));
    CHECK(no.type == AnswerType::kShouldPrune);
    CHECK_FALSE(no.prune);
  }
  SECTION("error with quotes and newlines") {
    std::string text = "suggest \"lr\":\n\tdistribution.low = 0.5";
    AnswerMessage e = MustParseAnswer(OneLine(EncodeErrorAnswer(text)));
    CHECK(e.type == AnswerType::kError);
    CHECK(e.message == text);
  }
}

TEST_CASE("a suggestion value that is not one JSON value becomes an error answer", "[proto]") {
  for (std::string bad : {"", "1 2", "nan", "[1e999]", "{\"a\":", "0.5\n"}) {
    INFO(bad);
    AnswerMessage a = MustParseAnswer(OneLine(EncodeSuggestionAnswer("lr", bad)));
    CHECK(a.type == AnswerType::kError);
    CHECK_THAT(a.message, Catch::Contains("\"lr\""));
  }
}

TEST_CASE("an error answer is cut to the line limit and stays valid UTF-8", "[proto]") {
  // Quotes double in JSON, and a multi-byte character must not be split where the text is cut.
  std::string text;
  while (text.size() < 3 * kMaxReportLineBytes) text += "\"\xce\xbb\xe2\x82\xac ";
  std::string line = OneLine(EncodeErrorAnswer(text));
  CHECK(line.size() <= kMaxReportLineBytes);
  AnswerMessage a = MustParseAnswer(line);
  CHECK(a.message.size() > kMaxReportLineBytes / 8);
  CHECK_THAT(a.message, Catch::EndsWith(" [...]"));
  CHECK(text.compare(0, a.message.size() - 6, a.message, 0, a.message.size() - 6) == 0);

  // Invalid UTF-8 from anywhere becomes U+FFFD rather than a line Python cannot decode.
  AnswerMessage bad = MustParseAnswer(OneLine(EncodeErrorAnswer("bad \xff byte")));
  CHECK(bad.message == "bad \xef\xbf\xbd byte");
  // A message that fits is left whole.
  CHECK(MustParseAnswer(OneLine(EncodeErrorAnswer(std::string(1000, 'm')))).message ==
        std::string(1000, 'm'));
}

TEST_CASE("ParseAnswerLine is strict", "[proto]") {
  CHECK_THAT(AnswerErrorOf(R"({"type":"suggest","name":"x","value":1})"),
             Catch::Contains("\"suggest\""));
  CHECK_THAT(AnswerErrorOf(R"({"type":"suggestion","name":"x"})"), Catch::Contains("\"value\""));
  CHECK_THAT(AnswerErrorOf(R"({"type":"suggestion","value":1})"), Catch::Contains("\"name\""));
  CHECK_THAT(AnswerErrorOf(R"({"type":"suggestion","name":"x","value":null})"),
             Catch::Contains("\"value\""));
  CHECK_THAT(AnswerErrorOf(R"({"type":"suggestion","name":"x","value":[1]})"),
             Catch::Contains("\"value\""));
  CHECK_THAT(AnswerErrorOf(R"({"type":"suggestion","name":"x","value":1e999})"),
             Catch::Contains("finite"));
  CHECK_THAT(AnswerErrorOf(R"({"type":"suggestion","name":"x","value":1,"extra":0})"),
             Catch::Contains("\"extra\""));
  CHECK_THAT(AnswerErrorOf(R"({"type":"should_prune"})"), Catch::Contains("\"value\""));
  CHECK_THAT(AnswerErrorOf(R"({"type":"should_prune","value":1})"), Catch::Contains("\"value\""));
  CHECK_THAT(AnswerErrorOf(R"({"type":"error"})"), Catch::Contains("\"message\""));
  CHECK_THAT(AnswerErrorOf("[1]"), Catch::Contains("not a JSON object"));
  CHECK_THAT(AnswerErrorOf("{"), Catch::Contains("not JSON"));
  std::string over =
      R"({"type":"error","message":")" + std::string(kMaxAnswerLineBytes, 'm') + R"("})";
  CHECK_THAT(AnswerErrorOf(over), Catch::Contains("exceeds the limit"));
}

}  // namespace

TEST_CASE("constraints: values as written", "[proto][objectives]") {
  ReportMessage m = MustParse(R"({"type":"constraints","values":[-0.5,1,0]})");
  CHECK(m.type == ReportType::kConstraints);
  CHECK(m.values == std::vector<double>{-0.5, 1.0, 0.0});
  CHECK(std::string(ReportTypeName(ReportType::kConstraints)) == "constraints");

  ReportMessage in;
  in.type = ReportType::kConstraints;
  in.values = {0.1, -2.25};
  ReportMessage out = MustParse(OneLine(EncodeReportLine(in)));
  CHECK(out.type == ReportType::kConstraints);
  CHECK(out.values == in.values);
}

TEST_CASE("constraints: 1 to kMaxConstraints finite numbers and nothing else",
          "[proto][objectives]") {
  CHECK_THAT(ErrorOf(R"({"type":"constraints"})"),
             Catch::Contains("constraints needs a field \"values\""));
  CHECK_THAT(ErrorOf(R"({"type":"constraints","values":[]})"),
             Catch::Contains("must be an array of 1 to 64 finite numbers") &&
                 Catch::Contains("not 0 values"));
  CHECK_THAT(ErrorOf(R"({"type":"constraints","values":0.5})"),
             Catch::Contains("must be an array of 1 to 64"));
  CHECK_THAT(ErrorOf(R"({"type":"constraints","values":[1,"x"]})"),
             Catch::Contains("\"values\" must be a number"));
  CHECK_THAT(ErrorOf(R"({"type":"constraints","values":[1,1e999]})"), Catch::Contains("finite"));
  CHECK_THAT(ErrorOf(R"({"type":"constraints","values":[1],"value":2})"),
             Catch::Contains("unknown field \"value\""));
  std::string many = "[0";
  for (size_t i = 1; i < kMaxConstraints; ++i) many += ",0";
  CHECK(MustParse(R"({"type":"constraints","values":)" + many + "]}").values.size() ==
        kMaxConstraints);
  CHECK_THAT(ErrorOf(R"({"type":"constraints","values":)" + many + ",1]}"),
             Catch::Contains("not 65 values"));
}

}  // namespace triald::proto

namespace triald::proto {
namespace {

TEST_CASE("relative_params: a request of one field, answered with an object of values",
          "[proto][relative]") {
  Result<ReportMessage> req = ParseReportLine(R"({"type":"relative_params"})");
  REQUIRE(req.ok());
  CHECK(req->type == ReportType::kRelativeParams);
  CHECK(std::string(ReportTypeName(ReportType::kRelativeParams)) == "relative_params");
  CHECK_FALSE(ParseReportLine(R"({"type":"relative_params","name":"x"})").ok());
  CHECK(EncodeReportLine(*req) == "{\"type\":\"relative_params\"}\n");

  const std::string answer = EncodeRelativeParamsAnswer(R"({"lr":1.0,"opt":"adam","n":3})");
  CHECK(answer ==
        "{\"type\":\"relative_params\",\"params\":{\"lr\":1.0,\"opt\":\"adam\",\"n\":3}}\n");
  Result<AnswerMessage> back = ParseAnswerLine(answer.substr(0, answer.size() - 1));
  REQUIRE(back.ok());
  CHECK(back->type == AnswerType::kRelativeParams);
  CHECK(back->params_json.find("\"opt\":\"adam\"") != std::string::npos);
  CHECK_FALSE(ParseAnswerLine(R"({"type":"relative_params","params":[1]})").ok());
  // Not an object, or too long for an answer line: an error answer that says so.
  CHECK(EncodeRelativeParamsAnswer("[1]").rfind("{\"type\":\"error\"", 0) == 0);
  const std::string big = "{\"x\":\"" + std::string(kMaxAnswerLineBytes, 'a') + "\"}";
  const std::string refused = EncodeRelativeParamsAnswer(big);
  CHECK(refused.rfind("{\"type\":\"error\"", 0) == 0);
  CHECK(refused.find("more than an answer line") != std::string::npos);
}

}  // namespace
}  // namespace triald::proto
