// The descriptor rows of the sweep-file tables (config/sweep/key_table.h): each key listed once,
// every table refusing a key it has no row for by naming the table and its rows in order, and
// the key reference in config/README.md made from the rows.

#include <catch2/catch.hpp>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "config/sweep.h"
#include "config/sweep/tables.h"
#include "tests/config/sweep_test_util.h"

namespace triald::config {
namespace {

using sweep::Key;
using sweep::Kind;
using testing::ErrorOf;
using testing::kMinimal;
using testing::Parsed;
using testing::With;

template <typename C>
void CheckUnique(const std::string& table, const std::vector<Key<C>>& keys) {
  std::set<std::string> seen;
  for (const Key<C>& k : keys) {
    INFO(table << " " << k.name);
    CHECK(seen.insert(k.name).second);
    CHECK_FALSE(k.doc.empty());
  }
}

template <typename C>
void CheckKinds(const std::string& table, const std::vector<Kind<C>>& kinds) {
  std::set<std::string> seen;
  for (const Kind<C>& kind : kinds) {
    INFO(table << " kind " << kind.name);
    CHECK(seen.insert(kind.name).second);
    REQUIRE_FALSE(kind.keys.empty());
    // The key that picks the kind comes first: `kind`, or a parameter's `type`.
    CHECK(std::string(kind.keys.front().name) == (table == "[space.NAME]" ? "type" : "kind"));
    CheckUnique(table + " kind = " + kind.name, kind.keys);
  }
}

TEST_CASE("every table lists each key once, with its reference text", "[config][keys]") {
  CheckUnique("[study]", sweep::StudyKeys());
  CheckKinds("[objective]", sweep::ObjectiveKinds());
  CheckKinds("[space.NAME]", sweep::ParamTypes());
  CheckKinds("[sampler]", sweep::SamplerKinds());
  CheckKinds("[pruner]", sweep::PrunerKinds());
}

template <typename C>
std::string Names(const std::vector<Key<C>>& keys) {
  return JoinList(sweep::KeyNames(keys));
}

TEST_CASE("[study] refuses a key it has no row for, listing its rows", "[config][keys]") {
  CHECK(ErrorOf(With("n_trials = 10\n", "n_trials = 10\nbogus = 1\n")) ==
        "sweep.toml:4:1: [study] unknown key \"bogus\"; expected one of " +
            Names(sweep::StudyKeys()));
}

TEST_CASE("each kind of [sampler] and [pruner] refuses a key no kind has, listing its rows",
          "[config][keys]") {
  for (const auto& kind : sweep::SamplerKinds()) {
    INFO(kind.name);
    CHECK(ErrorOf(std::string(kMinimal) + "[sampler]\nkind = \"" + kind.name + "\"\nbogus = 1\n") ==
          std::string("sweep.toml:15:1: [sampler] unknown key \"bogus\" for kind = \"") +
              kind.name + "\"; expected one of " + Names(kind.keys));
  }
  for (const auto& kind : sweep::PrunerKinds()) {
    INFO(kind.name);
    CHECK(ErrorOf(std::string(kMinimal) + "[pruner]\nkind = \"" + kind.name + "\"\nbogus = 1\n") ==
          std::string("sweep.toml:15:1: [pruner] unknown key \"bogus\" for kind = \"") + kind.name +
              "\"; expected one of " + Names(kind.keys));
  }
}

TEST_CASE("each kind of [objective] refuses a key no kind has, listing its rows",
          "[config][keys]") {
  for (const auto& kind : sweep::ObjectiveKinds()) {
    INFO(kind.name);
    const std::string doc = With("kind = \"exec\"\ncommand = [\"true\"]\n",
                                 "kind = \"" + std::string(kind.name) + "\"\nbogus = 1\n");
    CHECK(ErrorOf(doc) ==
          std::string("sweep.toml:7:1: [objective] unknown key \"bogus\" for kind = \"") +
              kind.name + "\"; expected one of " + Names(kind.keys));
  }
}

TEST_CASE("a [space.NAME] table refuses a key no type has, then one of another type",
          "[config][keys]") {
  std::string all;
  std::set<std::string> seen;
  for (const auto& type : sweep::ParamTypes()) {
    for (const auto& k : type.keys) {
      if (seen.insert(k.name).second) all += (all.empty() ? "" : ", ") + std::string(k.name);
    }
  }
  CHECK(ErrorOf(With("high = 1.0\n", "high = 1.0\nbogus = 1\n")) ==
        "sweep.toml:13:1: [space.x] unknown key \"bogus\"; expected one of " + all);
  CHECK(ErrorOf(With("high = 1.0\n", "high = 1.0\nchoices = [1]\n")) ==
        "sweep.toml:13:1: [space.x] unknown key \"choices\" for a float parameter; expected one "
        "of " +
            Names(sweep::FindKind(sweep::ParamTypes(), "float")->keys));
}

TEST_CASE("every key a row names is accepted by its table", "[config][keys]") {
  // A key of the chosen kind never fails as unknown, whatever its value: the allow-list is the
  // rows. (Its value may be refused: that is the row's own check.)
  for (const auto& kind : sweep::SamplerKinds()) {
    for (const auto& k : kind.keys) {
      if (std::string(k.name) == "kind") continue;
      INFO(kind.name << " " << k.name);
      common::Result<SweepSpec> r = testing::Parse(std::string(kMinimal) + "[sampler]\nkind = \"" +
                                                   kind.name + "\"\n" + k.name + " = \"?\"\n");
      REQUIRE_FALSE(r.ok());
      CHECK(r.status().message().find("unknown key") == std::string::npos);
      CHECK(r.status().message().find(std::string("[sampler] ") + k.name + " = ") !=
            std::string::npos);
    }
  }
  for (const auto& kind : sweep::PrunerKinds()) {
    for (const auto& k : kind.keys) {
      if (std::string(k.name) == "kind") continue;
      INFO(kind.name << " " << k.name);
      common::Result<SweepSpec> r = testing::Parse(std::string(kMinimal) + "[pruner]\nkind = \"" +
                                                   kind.name + "\"\n" + k.name + " = \"?\"\n");
      REQUIRE_FALSE(r.ok());
      CHECK(r.status().message().find("unknown key") == std::string::npos);
    }
  }
  for (const auto& k : sweep::StudyKeys()) {
    INFO(k.name);
    if (std::string(k.name) == "n_trials" || std::string(k.name) == "name") continue;
    common::Result<SweepSpec> r = testing::Parse(
        With("n_trials = 10\n", "n_trials = 10\n" + std::string(k.name) + " = {}\n"));
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().find("unknown key") == std::string::npos);
  }
}

// The "Every key" table of config/README.md is SweepKeyReferenceMarkdown(): a row's text changes
// the reference, and a key documented there has a row.
TEST_CASE("config/README.md's key reference is the rows' text", "[config][keys]") {
  std::ifstream in(std::string(TRIALD_SOURCE_DIR) + "/config/README.md");
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string readme = ss.str();
  const std::string begin = "<!-- sweep-keys begin: made from the rows in config/sweep/*.cc -->\n";
  const std::string end = "<!-- sweep-keys end -->";
  const size_t b = readme.find(begin);
  REQUIRE(b != std::string::npos);
  const size_t e = readme.find(end, b);
  REQUIRE(e != std::string::npos);
  const std::string documented = readme.substr(b + begin.size(), e - b - begin.size());
  const std::string generated = sweep::SweepKeyReferenceMarkdown();
  // On a mismatch Catch prints both: paste the generated table between the markers.
  CHECK(documented == generated);
}

}  // namespace
}  // namespace triald::config
