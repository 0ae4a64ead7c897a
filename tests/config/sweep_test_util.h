#pragma once
// Helpers shared by the sweep-file tests: a minimal valid sweep and ways to bend it.
//
// Thread-safety: plain functions; Catch2 runs tests on one thread.

#include <catch2/catch.hpp>
#include <string>

#include "config/sweep.h"

namespace triald::config::testing {

// The smallest valid sweep. Tests swap one line for another so the line numbers they assert hold:
// [objective] starts on line 5, [space.x] on line 9, and line 14 is the first after the end.
inline const char* const kMinimal = R"([study]
name = "s"
n_trials = 10

[objective]
kind = "exec"
command = ["true"]

[space.x]
type = "float"
low = 0.0
high = 1.0
)";

// `doc` with the first occurrence of `from` replaced by `to`.
inline std::string With(const std::string& from, const std::string& to,
                        std::string doc = kMinimal) {
  size_t pos = doc.find(from);
  REQUIRE(pos != std::string::npos);
  return doc.replace(pos, from.size(), to);
}

inline common::Result<SweepSpec> Parse(const std::string& text,
                                       const std::string& path = "sweep.toml") {
  return ParseSweep(SweepSource{text, path});
}

// The error message for a document that must not parse.
inline std::string ErrorOf(const std::string& text) {
  common::Result<SweepSpec> r = Parse(text);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == common::Code::kInvalidArgument);
  return r.status().message();
}

// A document that must parse.
inline SweepSpec Parsed(const std::string& text, const std::string& path = "sweep.toml") {
  common::Result<SweepSpec> r = Parse(text, path);
  INFO(r.status().message());
  REQUIRE(r.ok());
  return *r;
}

}  // namespace triald::config::testing
