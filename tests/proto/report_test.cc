// The report protocol: one JSON object per line from a worker. Parsing is strict, and every
// rejection must tell the worker's author what was wrong with which field.

#include "proto/report.h"

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <iomanip>
#include <string>
#include <vector>

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

}  // namespace
}  // namespace triald::proto
