#pragma once
// Small helpers both Storage backends use (sqlite_storage.cc, postgres_storage.cc); not part of
// the Storage interface.
//
// Thread-safety: pure functions.

#include <cstdint>
#include <exception>
#include <string>

#include "common/status.h"
#include "config/sweep.h"

namespace triald::storage::backend {

// The stored name of a direction ("MAXIMIZE", "MINIMIZE"), as trialctl shows it.
inline const char* DirectionText(config::Direction d) {
  return d == config::Direction::kMaximize ? "MAXIMIZE" : "MINIMIZE";
}

// How messages name a trial or study known only by its id: "trial id 7", "study id 3".
inline std::string TrialIdLabel(int64_t trial_id) { return "trial id " + std::to_string(trial_id); }
inline std::string StudyIdLabel(int64_t study_id) { return "study id " + std::to_string(study_id); }

// Runs `body`, turning any exception (bad_alloc, or one thrown by a config helper) into an
// Internal status: Storage is a component boundary that exceptions must not cross. A RAII
// rollback guard inside `body` still runs during unwinding.
template <typename F>
auto Guarded(const char* op, F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const std::exception& e) {
    return common::Internal(std::string(op) + ": unexpected exception: " + e.what());
  } catch (...) {
    return common::Internal(std::string(op) + ": unexpected non-standard exception");
  }
}

}  // namespace triald::storage::backend
