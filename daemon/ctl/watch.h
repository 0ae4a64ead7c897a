#pragma once
// trialctl watch: a live view of one study, drawn from the daemon's "status" reply (polled every
// `interval`), until the study has ended (no longer RUNNING and none of its trials running).
//
// On a terminal the view is a few lines redrawn in place (ANSI cursor-up and erase-line, lines
// cut to the terminal's width so that none wraps); elsewhere it is one progress line per change
// of the counts or the best trial, never one per poll.
//
// ETA: the mean run time of the study's finished trials (the daemon's mean_duration_s) times
// the trials left (n_trials - finished, at least those running or waiting), divided by the
// trials running at once (the most seen running during this watch, at most the trials left).
// No ETA before a trial has finished.
//
// A study with several objectives (its status lists two or more "directions") has no single
// best: the view shows its Pareto front instead (the `best` reply, asked again only when the
// count of COMPLETE trials changed), with how many COMPLETE trials are feasible; the closing
// summary prints the front, and the exit code is 1 when the front is empty. With `json`, each
// line is the status reply with the front's "best_trials" and "feasible" added.
//
// Thread-safety: one call per thread; shares no state.

#include <boost/json.hpp>
#include <chrono>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "daemon/ctl/client.h"

namespace triald::ctl {

struct WatchOptions {
  std::ostream* view = nullptr;  // where the live view goes
  int tty_fd = -1;               // the view's terminal (redraw in place), or -1: plain lines
  std::chrono::milliseconds interval{500};
  bool json = false;  // each changed status reply as one JSON line, and no closing summary
};

// Watches until the study ends, then writes its final state and best trial to `out` (unless
// `json`). Returns
// trialctl's exit code: 0 when it ended with a COMPLETE trial, 1 when without one (the reason
// on `err`), 3 when the daemon went away.
int WatchStudy(Client& client, const std::string& study, const WatchOptions& options,
               std::ostream& out, std::ostream& err);

// The pieces, exposed for tests.
struct WatchState {
  int max_running = 0;  // most trials seen running at once
  // Several objectives: the latest `best` reply (the front); null otherwise.
  boost::json::value front;
  int64_t front_complete = -1;  // the COMPLETE count when `front` was asked for
};
// True when the status reply is of a study with several objectives.
bool IsMultiObjective(const boost::json::object& status);
// The ETA in seconds per the rule above, or nullopt when there is none yet.
std::optional<double> EstimateSeconds(const boost::json::object& status, const WatchState& s,
                                      std::string* how);
// The live view's lines (terminal mode) and the one-line form (plain mode).
std::vector<std::string> WatchLines(const boost::json::object& status, const WatchState& s,
                                    double elapsed_s);
std::string WatchLine(const boost::json::object& status, const WatchState& s);
// "1.5s", "42s", "3m05s", "2h07m".
std::string FormatSeconds(double s);

}  // namespace triald::ctl
