#pragma once
// The backends every storage contract suite runs on, and the helpers the suites share
// (tests/daemon/storage/*_test.cc).
//
// Each interface of Storage (daemon/storage/storage.h) has its contract suite, a file of
// TEMPLATE_TEST_CASEs over TRIALD_STORAGE_BACKENDS, so every case runs once per backend, named
// after it. A new backend joins every suite by adding a fixture type to TRIALD_STORAGE_BACKENDS:
// a struct with an `Open()` that returns a fresh, empty Storage whose node is kNode.
//
// The PostgreSQL cases (the PostgresBackend instances and the [postgres] tests) need the server
// of CTest's `postgres` fixture (tests/support/postgres.h); tests/daemon/CMakeLists.txt
// registers them apart from the others, with that fixture.

#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "daemon/storage/postgres_storage.h"
#include "daemon/storage/sqlite_storage.h"
#include "daemon/storage/storage.h"
#include "tests/support/postgres.h"
#include "tests/support/temp_dir.h"

namespace triald::storage::contract {

using common::Code;
using config::Distribution;
using config::ParamType;
using namespace triald::model;  // the records the storage keeps

inline constexpr double kInf = std::numeric_limits<double>::infinity();

using triald::testing::TempDir;

// The node name every contract backend is opened with, and where that node runs.
inline constexpr char kNode[] = "node-a";
inline constexpr char kInstance[] = "host-a:/srv/triald";

inline std::unique_ptr<Storage> OpenSqliteOrFail(const std::string& path,
                                                 const std::string& node = kNode,
                                                 const std::string& instance = kInstance) {
  SqliteOptions options;
  options.path = path;
  options.node = node;
  options.instance = instance;
  auto r = OpenSqliteStorage(options);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return std::move(r).value();
}

inline std::unique_ptr<Storage> OpenPostgresOrFail(const std::string& url,
                                                   const std::string& node = kNode,
                                                   const std::string& instance = kInstance) {
  PostgresOptions options;
  options.url = url;
  options.node = node;
  options.instance = instance;
  auto r = OpenPostgresStorage(options);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return std::move(r).value();
}

struct SqliteFileBackend {
  TempDir dir;
  std::unique_ptr<Storage> Open() { return OpenSqliteOrFail(dir.path() + "/triald.db"); }
  // Another daemon's view of the same database.
  std::unique_ptr<Storage> OpenAs(const std::string& node,
                                  const std::string& instance = kInstance) {
    return OpenSqliteOrFail(dir.path() + "/triald.db", node, instance);
  }
};

struct SqliteMemoryBackend {
  std::unique_ptr<Storage> Open() { return OpenSqliteOrFail(":memory:"); }
};

// A fresh database on the test server per test case.
struct PostgresBackend {
  triald::testing::TestDatabase db;
  std::unique_ptr<Storage> Open() { return OpenPostgresOrFail(db.url()); }
  std::unique_ptr<Storage> OpenAs(const std::string& node,
                                  const std::string& instance = kInstance) {
    return OpenPostgresOrFail(db.url(), node, instance);
  }
};

// Every Storage implementation; each contract test case runs once per backend, named after it.
#define TRIALD_STORAGE_BACKENDS SqliteFileBackend, SqliteMemoryBackend, PostgresBackend

#define REQUIRE_OK(expr)                   \
  do {                                     \
    auto _st = (expr);                     \
    INFO(#expr << ": " << _st.ToString()); \
    REQUIRE(_st.ok());                     \
  } while (0)

template <typename T>
T Unwrap(common::Result<T> r) {
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return std::move(r).value();
}

#define REQUIRE_CODE(expr, want_code)              \
  do {                                             \
    const auto& _r = (expr);                       \
    INFO(#expr << ": " << _r.status().ToString()); \
    REQUIRE_FALSE(_r.ok());                        \
    REQUIRE(_r.status().code() == (want_code));    \
  } while (0)

inline NewStudy MakeStudy(const std::string& name) {
  NewStudy s;
  s.name = name;
  s.direction = config::Direction::kMaximize;
  s.n_trials = 25;
  s.spec_toml = "[study]\nname = \"" + name + "\"\n# ünïcödé comment\n";
  s.spec_path = "/sweeps/" + name + ".toml";
  s.seed = std::numeric_limits<uint64_t>::max() - 6;  // above 2^63: must survive the bit-cast
  return s;
}

inline Distribution FloatDist(double low, double high, bool log, double step) {
  Distribution d;
  d.type = ParamType::kFloat;
  d.low = low;
  d.high = high;
  d.log = log;
  d.step = step;
  return d;
}

inline Distribution IntDist(double low, double high, bool log, double step) {
  Distribution d = FloatDist(low, high, log, step);
  d.type = ParamType::kInt;
  return d;
}

inline Distribution CategoricalDist(std::vector<config::Choice> choices) {
  Distribution d;
  d.type = ParamType::kCategorical;
  d.choices = std::move(choices);
  return d;
}

// One parameter of every distribution type and option.
inline ParamMap AllKindsOfParams() {
  ParamMap p;
  p["lr"] = {3e-4, FloatDist(1e-5, 1e-1, true, 0)};
  p["dropout"] = {0.25, FloatDist(0.0, 0.5, false, 0.05)};
  p["warmup"] = {0.125, FloatDist(0.0, 1.0, false, 0)};
  p["layers"] = {4, IntDist(1, 12, false, 1)};
  p["batch"] = {64, IntDist(8, 512, true, 1)};
  p["seq_len"] = {256, IntDist(128, 1024, false, 128)};
  p["optimizer"] = {1, CategoricalDist({std::string("sgd"), std::string("adamw")})};
  p["mixed"] = {3, CategoricalDist({true, int64_t{7}, 0.5, std::string("x")})};
  return p;
}

inline ParamMap OneParam(double x) { return {{"x", {x, FloatDist(-10, 10, false, 0)}}}; }

inline bool SameDouble(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }
inline bool SameOptDouble(const std::optional<double>& a, const std::optional<double>& b) {
  return a.has_value() == b.has_value() && (!a || SameDouble(*a, *b));
}

inline void RequireSameParams(const ParamMap& got, const ParamMap& want) {
  REQUIRE(got.size() == want.size());
  for (const auto& [name, w] : want) {
    INFO("param " << name);
    auto it = got.find(name);
    REQUIRE(it != got.end());
    CHECK(it->second.internal == w.internal);
    CHECK(it->second.dist == w.dist);
  }
}

inline void RequireSameTrial(const TrialRecord& got, const TrialRecord& want) {
  INFO("trial id " << want.id << " number " << want.number);
  CHECK(got.id == want.id);
  CHECK(got.study_id == want.study_id);
  CHECK(got.number == want.number);
  CHECK(TrialStateName(got.state) == std::string(TrialStateName(want.state)));
  CHECK(SameOptDouble(got.value, want.value));
  RequireSameParams(got.params, want.params);
  REQUIRE(got.intermediate.size() == want.intermediate.size());
  for (const auto& [step, v] : want.intermediate) {
    REQUIRE(got.intermediate.count(step) == 1);
    CHECK(SameDouble(got.intermediate.at(step), v));
  }
  CHECK(got.attrs == want.attrs);
  CHECK(got.fail.reason == want.fail.reason);
  CHECK(got.fail.exit_code == want.fail.exit_code);
  CHECK(got.fail.signal == want.fail.signal);
  CHECK(got.fail.core_dumped == want.fail.core_dumped);
  CHECK(got.fail.detail == want.fail.detail);
  CHECK(got.fail.stderr_tail == want.fail.stderr_tail);
  CHECK(got.process.pid == want.process.pid);
  CHECK(got.process.pgid == want.process.pgid);
  CHECK(got.process.start_time == want.process.start_time);
  CHECK(got.created_at == want.created_at);
  CHECK(got.started_at == want.started_at);
  CHECK(got.finished_at == want.finished_at);
  CHECK(got.retry_of == want.retry_of);
  CHECK(got.retry_of_number == want.retry_of_number);
  CHECK(got.node == want.node);
}

inline void RequireSameStudy(const StudyRecord& got, const StudyRecord& want) {
  CHECK(got.id == want.id);
  CHECK(got.name == want.name);
  CHECK(got.direction == want.direction);
  CHECK(got.n_trials == want.n_trials);
  CHECK(got.state == want.state);
  CHECK(got.spec_toml == want.spec_toml);
  CHECK(got.spec_path == want.spec_path);
  CHECK(got.seed == want.seed);
  CHECK(got.created_at == want.created_at);
  CHECK(got.finished_at == want.finished_at);
  CHECK(got.submitter.uid == want.submitter.uid);
  CHECK(got.submitter.name == want.submitter.name);
}

inline TrialOutcome Outcome(TrialState state, std::optional<double> value = {}) {
  TrialOutcome o;
  o.state = state;
  o.value = value;
  return o;
}

// Resources as a trial on a GPU slot measured them, with exact binary fractions and the
// largest byte count a uint64 holds.
inline model::TrialResources MeasuredResources() {
  model::TrialResources r;
  r.peak_memory_bytes = 212'000'768;
  r.memory_source = "cgroup1 memory.max_usage_in_bytes";
  r.peak_gpu_memory_bytes = ~uint64_t{0} - 1;
  r.cpu_time_s = 1.0 / 3.0;
  r.cpu_source = "cgroup2 cpu.stat";
  r.wall_s = 12.125;
  return r;
}

// fd -> symlink target, for every descriptor of this process.
inline std::map<int, std::string> OpenFds() {
  std::map<int, std::string> fds;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    auto target = std::filesystem::read_symlink(entry.path(), ec);
    fds[std::stoi(entry.path().filename().string())] = ec ? "" : target.string();
  }
  return fds;
}

}  // namespace triald::storage::contract
