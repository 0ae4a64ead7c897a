#pragma once
// Sweep files: the TOML a user submits, parsed and validated into a SweepSpec.
//
// Every error names the file, the line and column, the key, the value given and what was
// expected, e.g.
//   quadratic.toml:7:8: [space.x] low = 5.0 is greater than high = 1.0; expected low <= high
// Parsing is pure (no I/O besides what the caller passes in), so it is safe from any thread.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/space.h"

namespace triald::config {

enum class Direction { kMinimize, kMaximize };
const char* DirectionName(Direction d);

struct StudyConfig {
  std::string name;
  Direction direction = Direction::kMinimize;
  int n_trials = 0;           // >= 1
  int parallelism = 1;        // >= 1: trials of this study running at once
  double trial_timeout = 0;   // seconds; 0 = no timeout
  double kill_grace = 10.0;   // seconds between SIGTERM and SIGKILL
};

struct ObjectiveConfig {
  std::string kind = "exec";
  std::vector<std::string> command;           // argv; command[0] looked up in PATH if no '/'
  std::map<std::string, std::string> env;     // added to the worker's environment
  std::string workdir;                        // absolute after parsing; default: sweep file dir
};

struct SamplerConfig {
  std::string kind = "random";  // "random" | "grid"
  uint64_t seed = 0;
  bool seed_given = false;      // when false the daemon draws a seed and stores it
};

struct PrunerConfig {
  std::string kind = "nop";
};

struct SweepSpec {
  StudyConfig study;
  ObjectiveConfig objective;
  SearchSpace space;
  SamplerConfig sampler;
  PrunerConfig pruner;
};

struct SweepSource {
  std::string text;       // the TOML document
  std::string path;       // shown in messages; its directory anchors relative paths
};

// Parses and validates a sweep file. On error nothing is returned and the Status message is
// the full user-facing text (one line per problem is not required: the first problem suffices).
common::Result<SweepSpec> ParseSweep(const SweepSource& source);

// Reads `path` and parses it.
common::Result<SweepSpec> ParseSweepFile(const std::string& path);

}  // namespace triald::config
