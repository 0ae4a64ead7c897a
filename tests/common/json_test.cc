// SerializeJson: the JSON text triald and trialctl write, with every double in its shortest
// round-trip form.
#include "common/json.h"

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

namespace triald::common {
namespace {

double FromBits(uint64_t bits) {
  double d = 0;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

uint64_t Bits(double d) {
  uint64_t bits = 0;
  std::memcpy(&bits, &d, sizeof d);
  return bits;
}

// The double SerializeJson's text reads back as, through the exact parser and Boost's own.
void CheckRoundTrip(double d) {
  const std::string text = SerializeJson(boost::json::value(d));
  INFO(text);
  Result<boost::json::value> exact = ParseJsonExact(text);
  REQUIRE(exact.ok());
  REQUIRE(exact->is_double());  // never read back as an integer
  CHECK(Bits(exact->get_double()) == Bits(d));
  boost::json::error_code ec;
  boost::json::value boost_read = boost::json::parse(text, ec);
  REQUIRE(!ec);
  CHECK(boost_read.is_double());
  CHECK(text.find('E') == std::string::npos);
}

}  // namespace

TEST_CASE("SerializeJson writes doubles in their shortest form", "[json]") {
  CHECK(JsonDoubleText(0.005) == "0.005");
  CHECK(JsonDoubleText(1796087059.69) == "1796087059.69");
  CHECK(JsonDoubleText(0.1) == "0.1");
  CHECK(JsonDoubleText(1.0) == "1.0");
  CHECK(JsonDoubleText(-0.0) == "-0.0");
  CHECK(JsonDoubleText(100.0) == "100.0");
  CHECK(JsonDoubleText(0.0001) == "0.0001");
  CHECK(JsonDoubleText(1e-05) == "1e-05");
  CHECK(JsonDoubleText(1e16) == "1e+16");
  CHECK(JsonDoubleText(1e20) == "1e+20");
  CHECK(JsonDoubleText(123456789012345.6) == "123456789012345.6");
  CHECK(JsonDoubleText(5e-324) == "5e-324");
  CHECK(JsonDoubleText(std::numeric_limits<double>::max()) == "1.7976931348623157e+308");
  // JSON has no spelling for these; they never reach it, but if one did it would still parse.
  CHECK(JsonDoubleText(std::nan("")) == "null");
  CHECK(JsonDoubleText(-std::numeric_limits<double>::infinity()) == "null");
}

TEST_CASE("SerializeJson writes everything else as Boost does", "[json]") {
  boost::json::value v = {{"name", "a \"b\"\n\x01"},
                          {"n", 3},
                          {"u", uint64_t{18446744073709551615ull}},
                          {"neg", -7},
                          {"ok", true},
                          {"none", nullptr},
                          {"list", boost::json::array{0.5, 2, "x", boost::json::array{}}},
                          {"empty", boost::json::object{}}};
  boost::json::value no_doubles = v;
  no_doubles.as_object()["list"].as_array()[0] = "half";
  CHECK(SerializeJson(no_doubles) == boost::json::serialize(no_doubles));
  CHECK(SerializeJson(v.as_object()) == SerializeJson(v));
  CHECK(SerializeJson(v.at("list").as_array()) == "[0.5,2,\"x\",[]]");
  Result<boost::json::value> back = ParseJsonExact(SerializeJson(v));
  REQUIRE(back.ok());
  CHECK(*back == v);
}

TEST_CASE("every double SerializeJson writes reads back exactly", "[json]") {
  for (double d : {0.0, -0.0, 0.005, 1796087059.69, 1e-4, 9.999999999999999e-5, 1e15, 1e16,
                   9007199254740993.0, 0.1 + 0.2, std::numeric_limits<double>::min(),
                   std::numeric_limits<double>::denorm_min(), std::numeric_limits<double>::max(),
                   -std::numeric_limits<double>::max(), std::numeric_limits<double>::epsilon()}) {
    CheckRoundTrip(d);
  }
  std::mt19937_64 rng(20261202);
  for (int i = 0; i < 20000; ++i) {
    // Every bit pattern: subnormals, huge and tiny exponents and both signs alike.
    double d = FromBits(rng());
    if (!std::isfinite(d)) continue;
    CheckRoundTrip(d);
  }
  for (int i = 0; i < 5000; ++i) {
    // Subnormals only (exponent bits zero).
    CheckRoundTrip(FromBits(rng() & 0x800FFFFFFFFFFFFFull));
  }
  std::uniform_real_distribution<double> unit(0, 1);
  for (int i = 0; i < 5000; ++i) {
    // Values like metrics and timestamps: positional, never with an exponent.
    const double metric = unit(rng);
    CheckRoundTrip(metric);
    const double stamp = 1.7e9 + unit(rng) * 1e8;
    CheckRoundTrip(stamp);
    CHECK(JsonDoubleText(stamp).find('e') == std::string::npos);
  }
}

}  // namespace triald::common
