// DistributionCache: stored distributions are parsed once per text, and the cache stays bounded.
#include "daemon/storage/distribution_cache.h"

#include <catch2/catch.hpp>
#include <string>

namespace triald::storage {
namespace {

std::string CategoricalJson(int n, const std::string& prefix = "c") {
  std::string json = "{\"type\":\"categorical\",\"choices\":[";
  for (int i = 0; i < n; ++i) {
    if (i > 0) json += ",";
    json += "\"" + prefix + std::to_string(i) + "\"";
  }
  return json + "]}";
}

TEST_CASE("a stored distribution is parsed once, however often it is read", "[storage]") {
  DistributionCache cache;
  const std::string json = CategoricalJson(1000);
  auto first = cache.Parse(json);
  REQUIRE(first.ok());
  CHECK((*first)->choices.size() == 1000);
  for (int i = 0; i < 10; ++i) {
    auto again = cache.Parse(json);
    REQUIRE(again.ok());
    CHECK(again->get() == first->get());  // the same parsed value, shared
  }
  CHECK(cache.parses() == 1);
  CHECK(cache.size() == 1);
}

TEST_CASE("a distribution that does not parse is reported and not kept", "[storage]") {
  DistributionCache cache;
  const std::string bad = R"({"type":"categorical","choices":["a","a"]})";
  for (int i = 0; i < 2; ++i) {
    auto r = cache.Parse(bad);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(), Catch::Contains("\"a\" appears more than once"));
  }
  CHECK(cache.size() == 0);
  CHECK(cache.parses() == 2);
}

TEST_CASE("the distribution cache evicts the least recently used past its bounds", "[storage]") {
  DistributionCache cache;
  const std::string keep = CategoricalJson(3, "keep");
  REQUIRE(cache.Parse(keep).ok());
  for (size_t i = 0; i < DistributionCache::kMaxEntries + 10; ++i) {
    REQUIRE(cache.Parse(CategoricalJson(2, "n" + std::to_string(i) + "_")).ok());
    if (i % 100 == 0) REQUIRE(cache.Parse(keep).ok());  // recently used: stays
  }
  CHECK(cache.size() == DistributionCache::kMaxEntries);
  const size_t parses = cache.parses();
  REQUIRE(cache.Parse(keep).ok());
  CHECK(cache.parses() == parses);  // still cached
  REQUIRE(cache.Parse(CategoricalJson(2, "n0_")).ok());
  CHECK(cache.parses() == parses + 1);  // the oldest went
}

}  // namespace
}  // namespace triald::storage
