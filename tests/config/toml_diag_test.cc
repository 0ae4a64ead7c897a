// The TOML diagnostics both config parsers share: where a value is, how it is quoted and cut,
// and the shapes of value, missing-key and unknown-key errors.

#include "config/toml_diag.h"

#include <catch2/catch.hpp>
#include <string>

#include "config/daemon_config.h"
#include "config/sweep.h"

namespace triald::config {
namespace {

// The table of a document that must parse.
toml::table ParseOk(const TomlDiagnostics& diag) {
  auto root = diag.Parse("invalid TOML: ");
  INFO(root.status().ToString());
  REQUIRE(root.ok());
  return std::move(root).value();
}

TEST_CASE("CutForMessage keeps short text and cuts long text at a character boundary", "[config]") {
  CHECK(CutForMessage("") == "");
  CHECK(CutForMessage(std::string(80, 'a')) == std::string(80, 'a'));
  CHECK(CutForMessage(std::string(81, 'a')) == std::string(80, 'a') + "...");
  // 79 ASCII bytes then "é" (2 bytes, at bytes 79-80): byte 80 is inside the character, so the
  // cut falls before it rather than splitting it.
  const std::string e_acute = "\xC3\xA9";
  CHECK(CutForMessage(std::string(79, 'a') + e_acute + "zz") == std::string(79, 'a') + "...");
  // A 4-byte character across the limit (bytes 78-81).
  const std::string emoji = "\xF0\x9F\x98\x80";
  CHECK(CutForMessage(std::string(78, 'a') + emoji + "z") == std::string(78, 'a') + "...");
  // A character that ends exactly at the limit is kept whole.
  CHECK(CutForMessage(std::string(78, 'a') + e_acute + "z") ==
        std::string(78, 'a') + e_acute + "...");
  // Only multi-byte text: the cut is still a boundary, so the result is whole characters.
  std::string many;
  for (int i = 0; i < 30; ++i) many += "\xE2\x82\xAC";  // 90 bytes of "€"
  CHECK(CutForMessage(many) == many.substr(0, 78) + "...");
}

TEST_CASE("Quoting helpers escape and list as messages need", "[config]") {
  CHECK(Quoted("plain") == "\"plain\"");
  CHECK(Quoted("a\"b\\c") == "\"a\\\"b\\\\c\"");
  CHECK(KeyText("bare_key-1") == "bare_key-1");
  CHECK(KeyText("has space") == "\"has space\"");
  CHECK(KeyText("") == "\"\"");
  CHECK(JoinList({"a", "b", "c"}) == "a, b, c");
  CHECK(JoinList({}) == "");
  CHECK(QuotedAlternatives({"x"}) == "\"x\"");
  CHECK(QuotedAlternatives({"x", "y"}) == "\"x\" or \"y\"");
  CHECK(QuotedAlternatives({"x", "y", "z"}) == "\"x\", \"y\" or \"z\"");
  CHECK(config::Contains({"a", "b"}, "b"));
  CHECK_FALSE(config::Contains({"a", "b"}, "c"));
}

TEST_CASE("TomlDiagnostics locates values and quotes them as written", "[config]") {
  const std::string text =
      "[t]\r\n"
      "rate = 1e-4\n"
      "name = \"caf\xC3\xA9\"  # comment\n"
      "after = \"x\xC3\xA9y\"\n"
      "multi = [\n  1,\n  2,\n]\n";
  TomlDiagnostics diag(text, "f.toml");
  CHECK(diag.path() == "f.toml");
  toml::table root = ParseOk(diag);
  const toml::table& t = *root.get_as<toml::table>("t");
  CHECK(diag.Where(t.get("rate")->source()) == "f.toml:2:8");
  CHECK(diag.Repr(*t.get("rate")) == "1e-4");  // not toml++'s 0.0001
  CHECK(diag.Repr(*t.get("name")) == "\"caf\xC3\xA9\"");
  // Columns count code points: a value after a multi-byte character is still found.
  CHECK(diag.Repr(*t.get("after")) == "\"x\xC3\xA9y\"");
  // Over several lines: toml++'s rendering, on one line.
  CHECK(diag.Repr(*t.get("multi")).find('\n') == std::string::npos);
  CHECK(diag.Repr(*t.get("multi")).find('1') != std::string::npos);
  // A [header] table is no value.
  CHECK(diag.Repr(t) == "<table>");
}

TEST_CASE("TomlDiagnostics cuts a long multi-byte value at a character boundary", "[config]") {
  std::string value;
  for (int i = 0; i < 40; ++i) value += "\xC3\xA9";         // 80 bytes of "é"
  const std::string text = "[t]\nk = \"" + value + "\"\n";  // quoted: 82 bytes
  TomlDiagnostics diag(text, "f.toml");
  toml::table root = ParseOk(diag);
  const toml::node& k = *root.get_as<toml::table>("t")->get("k");
  // The opening quote shifts every "é" by one byte, so byte 80 is inside one: the cut keeps 39.
  CHECK(diag.Repr(k) == "\"" + value.substr(0, 78) + "...");
  auto status = diag.ValueError("[t]", "k", k, "", "a short string");
  CHECK(status.message() ==
        "f.toml:2:5: [t] k = \"" + value.substr(0, 78) + "...: expected a short string");
}

TEST_CASE("TomlDiagnostics words value, missing-key, unknown-key and syntax errors", "[config]") {
  const std::string text = "[t]\nzeta = 1\nalpha = 2\nn = 0\n";
  TomlDiagnostics diag(text, "f.toml");
  toml::table root = ParseOk(diag);
  const toml::table& t = *root.get_as<toml::table>("t");
  CHECK(diag.ValueError("[t]", "n", *t.get("n"), "", "an integer >= 1").message() ==
        "f.toml:4:5: [t] n = 0: expected an integer >= 1");
  CHECK(diag.ValueError("[t]", "n", *t.get("n"), "too small", "an integer >= 1").message() ==
        "f.toml:4:5: [t] n = 0: too small; expected an integer >= 1");
  CHECK(diag.MissingKey("[t]", t, "name", "a name").message() ==
        "f.toml:1:1: [t] missing required key \"name\"; expected a name");
  CHECK(diag.CheckKeys("[t]", t, {"zeta", "alpha", "n"}).ok());
  // The first unknown key in file order (zeta), not in toml++'s sorted order (alpha).
  CHECK(diag.CheckKeys("[t]", t, {"n"}).message() ==
        "f.toml:2:1: [t] unknown key \"zeta\"; expected one of n");
  CHECK(diag.CheckKeys("[t]", t, {"zeta", "n"}, " for kind = \"x\"").message() ==
        "f.toml:3:1: [t] unknown key \"alpha\" for kind = \"x\"; expected one of zeta, n");

  TomlDiagnostics broken("[t]\nk = = 1\n", "b.toml");
  auto parsed = broken.Parse("invalid TOML: ");
  REQUIRE_FALSE(parsed.ok());
  CHECK(parsed.status().message().rfind("b.toml:2:", 0) == 0);
  CHECK(parsed.status().message().find(": invalid TOML: ") != std::string::npos);
}

TEST_CASE("Both config parsers cut long values at a character boundary", "[config]") {
  std::string value;
  for (int i = 0; i < 40; ++i) value += "\xE2\x82\xAC";  // 120 bytes of "€"
  auto daemon = ParseDaemonConfig("[daemon]\nlog_level = [\"x" + value + "\"]\n", "d.toml");
  REQUIRE_FALSE(daemon.ok());
  // `["x` then "€" from byte 3: byte 80 is the last byte of the one at bytes 78-80, so the cut
  // keeps the 25 before it (a cut at byte 80 would split it).
  CHECK(daemon.status().message() == "d.toml:2:13: [daemon] log_level = [\"x" +
                                         value.substr(0, 75) +
                                         "...: expected a level name, e.g. \"info\"");
  SweepSource source;
  source.path = "s.toml";
  source.text = "[study]\nname = \"x" + value + "\"\n";
  auto sweep = ParseSweep(source);
  REQUIRE_FALSE(sweep.ok());
  // `"x` then "€" from byte 2: the one at bytes 80-82 starts at the limit and is left out.
  CHECK(sweep.status().message().rfind(
            "s.toml:2:8: [study] name = \"x" + value.substr(0, 78) + "...: not a valid study name;",
            0) == 0);
}

}  // namespace
}  // namespace triald::config
