// LineReader: turns a byte stream into lines however the bytes are chunked, with a hard cap on
// how much a peer that never sends a newline can make the daemon buffer.

#include "proto/line_reader.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <vector>

namespace triald::proto {
namespace {

using common::Code;
using common::Status;

// Collects every line delivered to it.
struct Collector {
  std::vector<std::string> lines;
  LineReader::LineFn Fn() {
    return [this](std::string_view line) {
      lines.emplace_back(line);
      return Status::Ok();
    };
  }
};

const std::string kStream =
    "{\"type\":\"report\",\"step\":1,\"value\":0.5}\n"
    "\n"
    "second line\n"
    "a somewhat longer third line with spaces and \xce\xbb\n"
    "\n"
    "\n"
    "trailing partial";

const std::vector<std::string> kStreamLines = {
    "{\"type\":\"report\",\"step\":1,\"value\":0.5}",
    "",
    "second line",
    "a somewhat longer third line with spaces and \xce\xbb",
    "",
    "",
    "trailing partial",
};

TEST_CASE("feeding everything at once delivers each line without its newline", "[proto]") {
  LineReader reader(1024);
  Collector c;
  REQUIRE(reader.Feed(kStream, c.Fn()).ok());
  CHECK(reader.buffered() == std::string("trailing partial").size());
  REQUIRE(reader.Finish(c.Fn()).ok());
  CHECK(c.lines == kStreamLines);
}

TEST_CASE("feeding byte by byte delivers the same lines", "[proto]") {
  LineReader reader(1024);
  Collector c;
  for (char ch : kStream) REQUIRE(reader.Feed(std::string_view(&ch, 1), c.Fn()).ok());
  REQUIRE(reader.Finish(c.Fn()).ok());
  CHECK(c.lines == kStreamLines);
}

TEST_CASE("feeding in chunks of arbitrary sizes delivers the same lines", "[proto]") {
  std::mt19937 rng(20240601);  // fixed seed: the same chunkings every run
  for (int round = 0; round < 200; ++round) {
    LineReader reader(1024);
    Collector c;
    std::string_view rest(kStream);
    std::vector<size_t> sizes;
    while (!rest.empty()) {
      size_t n = std::min<size_t>(rest.size(), std::uniform_int_distribution<size_t>(0, 40)(rng));
      sizes.push_back(n);
      REQUIRE(reader.Feed(rest.substr(0, n), c.Fn()).ok());
      rest.remove_prefix(n);
    }
    REQUIRE(reader.Finish(c.Fn()).ok());
    INFO("round " << round << ", " << sizes.size() << " chunks");
    REQUIRE(c.lines == kStreamLines);
  }
}

TEST_CASE("a line is delivered as soon as its newline arrives", "[proto]") {
  LineReader reader(1024);
  Collector c;
  REQUIRE(reader.Feed("heart", c.Fn()).ok());
  CHECK(c.lines.empty());
  CHECK(reader.buffered() == 5);
  REQUIRE(reader.Feed("beat\nnext", c.Fn()).ok());
  CHECK(c.lines == std::vector<std::string>{"heartbeat"});
  CHECK(reader.buffered() == 4);
}

TEST_CASE("blank lines are delivered as empty lines", "[proto]") {
  LineReader reader(16);
  Collector c;
  REQUIRE(reader.Feed("\n\nabc\n\n", c.Fn()).ok());
  REQUIRE(reader.Finish(c.Fn()).ok());
  CHECK(c.lines == std::vector<std::string>{"", "", "abc", ""});
}

TEST_CASE("Finish delivers a trailing partial line once, and nothing when none", "[proto]") {
  LineReader reader(64);
  Collector c;
  REQUIRE(reader.Feed("done\nfinal-no-newline", c.Fn()).ok());
  REQUIRE(reader.Finish(c.Fn()).ok());
  CHECK(c.lines == std::vector<std::string>{"done", "final-no-newline"});
  CHECK(reader.buffered() == 0);
  REQUIRE(reader.Finish(c.Fn()).ok());
  CHECK(c.lines.size() == 2);

  LineReader clean(64);
  Collector c2;
  REQUIRE(clean.Feed("a\nb\n", c2.Fn()).ok());
  REQUIRE(clean.Finish(c2.Fn()).ok());
  CHECK(c2.lines == std::vector<std::string>{"a", "b"});
}

TEST_CASE("Finish returns the callback's error for the trailing line", "[proto]") {
  LineReader reader(64);
  REQUIRE(reader.Feed("partial", [](std::string_view) { return Status::Ok(); }).ok());
  Status st = reader.Finish([](std::string_view) { return common::InvalidArgument("bad tail"); });
  CHECK(st.code() == Code::kInvalidArgument);
  CHECK(st.message() == "bad tail");
}

TEST_CASE("a line exactly at the cap is accepted", "[proto]") {
  const size_t cap = 8;
  SECTION("in one piece") {
    LineReader reader(cap);
    Collector c;
    REQUIRE(reader.Feed("12345678\n", c.Fn()).ok());
    CHECK(c.lines == std::vector<std::string>{"12345678"});
  }
  SECTION("split across feeds") {
    LineReader reader(cap);
    Collector c;
    REQUIRE(reader.Feed("1234", c.Fn()).ok());
    REQUIRE(reader.Feed("5678", c.Fn()).ok());
    CHECK(reader.buffered() == cap);
    REQUIRE(reader.Feed("\nab\n", c.Fn()).ok());
    CHECK(c.lines == std::vector<std::string>{"12345678", "ab"});
  }
  SECTION("as the unterminated last line") {
    LineReader reader(cap);
    Collector c;
    REQUIRE(reader.Feed("12345678", c.Fn()).ok());
    REQUIRE(reader.Finish(c.Fn()).ok());
    CHECK(c.lines == std::vector<std::string>{"12345678"});
  }
}

TEST_CASE("a line one byte over the cap is rejected", "[proto]") {
  const size_t cap = 8;
  SECTION("in one piece") {
    LineReader reader(cap);
    Collector c;
    Status st = reader.Feed("ok\n123456789\nafter\n", c.Fn());
    CHECK(st.code() == Code::kInvalidArgument);
    CHECK_THAT(st.message(), Catch::Contains("longer than 8 bytes"));
    CHECK(c.lines == std::vector<std::string>{"ok"});  // nothing of or after the long line
  }
  SECTION("split across feeds, before its newline arrives") {
    LineReader reader(cap);
    Collector c;
    REQUIRE(reader.Feed("12345", c.Fn()).ok());
    Status st = reader.Feed("6789", c.Fn());
    CHECK(st.code() == Code::kInvalidArgument);
    CHECK(c.lines.empty());
    CHECK(reader.buffered() <= cap);
  }
}

TEST_CASE("after a rejected line, Feed keeps failing and delivers nothing", "[proto]") {
  LineReader reader(4);
  Collector c;
  REQUIRE_FALSE(reader.Feed("toolong\n", c.Fn()).ok());
  Status again = reader.Feed("ok\n", c.Fn());
  CHECK_FALSE(again.ok());
  CHECK(again.code() == Code::kFailedPrecondition);
  REQUIRE(reader.Finish(c.Fn()).ok());
  CHECK(c.lines.empty());  // no fragment of the rejected line, nor anything after it
}

TEST_CASE("an error from the callback stops Feed and is returned", "[proto]") {
  LineReader reader(64);
  std::vector<std::string> seen;
  auto fn = [&seen](std::string_view line) {
    seen.emplace_back(line);
    if (line == "bad") return common::InvalidArgument("protocol error on \"bad\"");
    return Status::Ok();
  };
  Status st = reader.Feed("good\nbad\nnever\n", fn);
  CHECK(st.code() == Code::kInvalidArgument);
  CHECK(st.message() == "protocol error on \"bad\"");
  CHECK(seen == std::vector<std::string>{"good", "bad"});

  CHECK_FALSE(reader.Feed("later\n", fn).ok());
  CHECK(seen.size() == 2);
}

TEST_CASE("an error from the callback on a line assembled from pieces stops Feed", "[proto]") {
  LineReader reader(64);
  std::vector<std::string> seen;
  auto fn = [&seen](std::string_view line) {
    seen.emplace_back(line);
    return common::Internal("stop");
  };
  REQUIRE(reader.Feed("ba", fn).ok());
  Status st = reader.Feed("d\nnext\n", fn);
  CHECK(st.code() == Code::kInternal);
  CHECK(seen == std::vector<std::string>{"bad"});
  CHECK_FALSE(reader.Feed("x\n", fn).ok());
  CHECK(seen.size() == 1);
}

TEST_CASE("10 MB without a newline fails within the first chunks and buffers at most the cap",
          "[proto]") {
  const size_t cap = 64 * 1024;
  const size_t chunk = 64 * 1024;
  const size_t total = 10 * 1024 * 1024;
  const std::string garbage(chunk, 'g');
  LineReader reader(cap);
  Collector c;
  size_t fed = 0;
  size_t feeds_until_error = 0;
  Status first_error;
  while (fed < total) {
    Status st = reader.Feed(garbage, c.Fn());
    fed += chunk;
    CHECK(reader.buffered() <= cap);
    if (!st.ok()) {
      if (first_error.ok()) {
        first_error = st;
        feeds_until_error = fed / chunk;
      }
    }
  }
  CHECK(first_error.code() == Code::kInvalidArgument);
  // The cap is one chunk, so the second chunk must already be refused.
  CHECK(feeds_until_error == 2);
  CHECK(reader.buffered() <= cap);
  CHECK(c.lines.empty());
}

}  // namespace
}  // namespace triald::proto
