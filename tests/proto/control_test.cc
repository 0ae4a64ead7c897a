// The control protocol between trialctl and triald: requests, responses and typed arguments.

#include "proto/control.h"

#include <algorithm>
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <string>

namespace triald::proto {
namespace {

namespace json = boost::json;
using common::Code;
using common::Result;
using common::Status;

std::string RequestError(std::string_view line) {
  Result<Request> r = ParseRequest(line);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
  return r.status().message();
}

// A valid request padded with a string argument to exactly `size` bytes.
std::string RequestOfSize(size_t size) {
  const std::string prefix = R"({"verb":"submit","sweep":")";
  const std::string suffix = R"("})";
  return prefix + std::string(size - prefix.size() - suffix.size(), 's') + suffix;
}

TEST_CASE("ParseRequest reads the verb and keeps every argument", "[proto]") {
  Result<Request> r =
      ParseRequest(R"({"verb":"logs","study":"mnist","trial":7,"stream":"stderr"})");
  REQUIRE(r.ok());
  CHECK(r->verb == "logs");
  CHECK(r->args.at("study").as_string() == "mnist");
  CHECK(r->args.at("trial").as_int64() == 7);
  CHECK(r->args.at("stream").as_string() == "stderr");
  CHECK(r->args.at("verb").as_string() == "logs");
}

TEST_CASE("ParseRequest rejects a line that is not JSON", "[proto]") {
  CHECK_THAT(RequestError("status mnist"), Catch::Contains("not JSON"));
  CHECK_THAT(RequestError(R"({"verb":"ping")"), Catch::Contains("not JSON"));
}

TEST_CASE("ParseRequest rejects JSON that is not an object", "[proto]") {
  CHECK_THAT(RequestError(R"(["ping"])"), Catch::Contains("not a JSON object"));
  CHECK_THAT(RequestError(R"("ping")"), Catch::Contains("not a JSON object"));
}

TEST_CASE("ParseRequest needs a string verb", "[proto]") {
  CHECK_THAT(RequestError(R"({"study":"mnist"})"), Catch::Contains("\"verb\""));
  CHECK_THAT(RequestError(R"({"verb":3})"), Catch::Contains("\"verb\""));
}

TEST_CASE("ParseRequest accepts a request at the size limit and rejects one byte more", "[proto]") {
  std::string at_limit = RequestOfSize(kMaxRequestBytes);
  REQUIRE(at_limit.size() == kMaxRequestBytes);
  Result<Request> ok = ParseRequest(at_limit);
  REQUIRE(ok.ok());
  CHECK(ok->verb == "submit");

  std::string msg = RequestError(RequestOfSize(kMaxRequestBytes + 1));
  CHECK_THAT(msg, Catch::Contains(std::to_string(kMaxRequestBytes + 1)));
  CHECK_THAT(msg, Catch::Contains("exceeds the limit of " + std::to_string(kMaxRequestBytes)));
}

TEST_CASE("EncodeRequest produces one line that ParseRequest reads back", "[proto]") {
  json::object args;
  // A sweep file spans many lines; the request must still be a single line on the socket.
  const std::string sweep = "[study]\nname = \"mnist\"\n\n[params]\nlr = { log = [1e-5, 1e-1] }\n";
  args["sweep"] = sweep;
  args["path"] = "/home/u/sweeps/mnist.toml";
  args["trial"] = 12;
  args["nested"] = json::object{{"a", json::array{1, 2, 3}}};

  std::string line = EncodeRequest("submit", args);
  REQUIRE_FALSE(line.empty());
  CHECK(line.back() == '\n');
  CHECK(std::count(line.begin(), line.end(), '\n') == 1);

  Result<Request> r = ParseRequest(line);
  REQUIRE(r.ok());
  CHECK(r->verb == "submit");
  Result<std::string> got_sweep = GetString(r->args, "sweep");
  REQUIRE(got_sweep.ok());
  CHECK(*got_sweep == sweep);
  Result<std::string> got_path = GetString(r->args, "path");
  REQUIRE(got_path.ok());
  CHECK(*got_path == "/home/u/sweeps/mnist.toml");
  Result<int64_t> got_trial = GetInt(r->args, "trial");
  REQUIRE(got_trial.ok());
  CHECK(*got_trial == 12);
  CHECK(r->args.at("nested") == json::value(json::object{{"a", json::array{1, 2, 3}}}));
}

TEST_CASE("EncodeRequest with no arguments carries just the verb", "[proto]") {
  Result<Request> r = ParseRequest(EncodeRequest("ping", {}));
  REQUIRE(r.ok());
  CHECK(r->verb == "ping");
  CHECK(r->args.size() == 1);
}

TEST_CASE("EncodeOk round-trips through ParseResponse", "[proto]") {
  json::value result = json::object{{"studies", json::array{"mnist", "cifar"}}, {"count", 2}};
  std::string line = EncodeOk(result);
  CHECK(line.back() == '\n');
  CHECK(std::count(line.begin(), line.end(), '\n') == 1);

  Result<Response> r = ParseResponse(line);
  REQUIRE(r.ok());
  CHECK(r->ok);
  CHECK(r->result == result);
}

TEST_CASE("EncodeError round-trips the code and message for every error code", "[proto]") {
  for (Code code :
       {Code::kInvalidArgument, Code::kNotFound, Code::kAlreadyExists, Code::kFailedPrecondition,
        Code::kUnavailable, Code::kIo, Code::kPermissionDenied, Code::kInternal}) {
    INFO(common::CodeName(code));
    Status sent(code, "no study \"mnist\"\nsee `trialctl studies`");
    std::string line = EncodeError(sent);
    CHECK(std::count(line.begin(), line.end(), '\n') == 1);
    Result<Response> r = ParseResponse(line);
    REQUIRE(r.ok());
    CHECK_FALSE(r->ok);
    CHECK(r->error.code() == code);
    CHECK(r->error.message() == sent.message());
  }
}

TEST_CASE("ParseResponse never turns a failure reply into success", "[proto]") {
  // An unknown or "ok" code in a failure reply still reads as an error.
  for (const char* line : {R"({"ok":false,"code":"ok","error":"x"})",
                           R"({"ok":false,"code":"weird","error":"x"})", R"({"ok":false})"}) {
    INFO(line);
    Result<Response> r = ParseResponse(line);
    REQUIRE(r.ok());
    CHECK_FALSE(r->ok);
    CHECK_FALSE(r->error.ok());
  }
}

TEST_CASE("ParseResponse rejects a malformed reply", "[proto]") {
  for (const char* line : {"", "garbage", "[true]", R"({"result":1})", R"({"ok":"yes"})"}) {
    INFO(line);
    Result<Response> r = ParseResponse(line);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(), Catch::Contains("malformed reply"));
  }
}

TEST_CASE("GetString names the missing or mistyped argument", "[proto]") {
  json::object args{{"study", "mnist"}, {"trial", 3}};
  Result<std::string> ok = GetString(args, "study");
  REQUIRE(ok.ok());
  CHECK(*ok == "mnist");

  Result<std::string> missing = GetString(args, "stream");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == Code::kInvalidArgument);
  CHECK_THAT(missing.status().message(), Catch::Contains("\"stream\""));

  Result<std::string> wrong = GetString(args, "trial");
  REQUIRE_FALSE(wrong.ok());
  CHECK_THAT(wrong.status().message(), Catch::Contains("\"trial\""));
}

TEST_CASE("GetInt names the missing or mistyped argument", "[proto]") {
  json::object args{{"trial", 3},
                    {"neg", -4},
                    {"big", 9223372036854775807LL},
                    {"huge", 18446744073709551615ULL},
                    {"frac", 2.5},
                    {"text", "3"}};
  Result<int64_t> trial = GetInt(args, "trial");
  REQUIRE(trial.ok());
  CHECK(*trial == 3);
  Result<int64_t> neg = GetInt(args, "neg");
  REQUIRE(neg.ok());
  CHECK(*neg == -4);
  Result<int64_t> big = GetInt(args, "big");
  REQUIRE(big.ok());
  CHECK(*big == INT64_MAX);

  for (const char* key : {"missing", "huge", "frac", "text"}) {
    INFO(key);
    Result<int64_t> r = GetInt(args, key);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains(std::string("\"") + key + "\""));
  }
}

// Found by fuzz_control (tests/fuzz/regressions/control/number-out-of-range): Boost reads a
// number past the double range as infinity, and the request could not be re-encoded as JSON.
TEST_CASE("ParseRequest rejects numbers out of the double range, however deep", "[proto]") {
  for (const char* line : {R"({"verb":"ping","x":1e999})", R"({"verb":"ping","z":[1,5e+323]})",
                           R"({"verb":"ping","o":{"a":[-1e400]}})"}) {
    INFO(line);
    Result<Request> r = ParseRequest(line);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains("out of range"));
  }
  // The largest finite doubles and the smallest subnormal are fine.
  CHECK(ParseRequest(R"({"verb":"ping","x":1.7976931348623157e308,"y":-4.9e-324})").ok());
}

}  // namespace
}  // namespace triald::proto
