#include "daemon/ctl/watch.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <thread>

#include "common/json.h"
#include "daemon/ctl/best_view.h"
#include "daemon/ctl/format.h"
#include "daemon/ctl/trialctl.h"

namespace triald::ctl {
namespace json = boost::json;
using common::Result;

namespace {

int64_t Count(const json::object& s, const char* key) {
  const json::value* v = s.if_contains(key);
  return v != nullptr && v->is_number() ? v->to_number<int64_t>() : 0;
}

// " (2 queued in Slurm)" for a Slurm study with jobs in Slurm's queue; "" otherwise.
std::string SlurmQueued(const json::object& s) {
  const json::value* sl = s.if_contains("slurm");
  if (sl == nullptr || !sl->is_object() || Count(sl->get_object(), "queued") == 0) return "";
  return " (" + std::to_string(Count(sl->get_object(), "queued")) + " queued in Slurm)";
}

std::string Counts(const json::object& s) {
  return std::to_string(Count(s, "finished")) + "/" + std::to_string(Count(s, "n_trials")) +
         " finished (" + std::to_string(Count(s, "complete")) + " complete, " +
         std::to_string(Count(s, "pruned")) + " pruned, " + std::to_string(Count(s, "failed")) +
         " failed), " + std::to_string(Count(s, "running")) + " running" + SlurmQueued(s) + ", " +
         std::to_string(Count(s, "waiting")) + " waiting";
}

std::string Best(const json::object& s) {
  const json::value* best = s.if_contains("best");
  if (best == nullptr || !best->is_object()) return "none yet";
  const json::object& b = best->get_object();
  std::string params = FormatParams(b.at("params"));
  return Str(b, "value") + " (trial " + Str(b, "number") + (params.empty() ? "" : ": ") + params +
         ")";
}

// The plain line's account of the front: "front 3 trials (35 of 40 complete feasible)".
std::string FrontSummary(const json::value& front) {
  if (!front.is_object()) return "front: none yet";
  const json::object& f = front.get_object();
  const json::value* trials = f.if_contains("best_trials");
  const size_t n = trials != nullptr && trials->is_array() ? trials->get_array().size() : 0;
  return "front " + std::to_string(n) + (n == 1 ? " trial" : " trials") + " (" +
         std::to_string(Count(f, "feasible")) + " of " + std::to_string(Count(f, "complete")) +
         " complete feasible)";
}

bool FrontEmpty(const json::value& front) {
  const json::value* trials =
      front.is_object() ? front.get_object().if_contains("best_trials") : nullptr;
  return trials == nullptr || !trials->is_array() || trials->get_array().empty();
}

bool Ended(const json::object& s) {
  // A cancelled study may still be stopping its trials: wait for them too.
  return Str(s, "state") != "RUNNING" && Count(s, "running") == 0;
}

// Cuts `line` to `width` display columns (counting UTF-8 lead bytes), so it never wraps.
std::string Fit(const std::string& line, int width) {
  if (width <= 1) return line;
  int cols = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    if ((static_cast<unsigned char>(line[i]) & 0xC0) != 0x80 && ++cols >= width) {
      return line.substr(0, i);
    }
  }
  return line;
}

int Columns(int fd) {
  winsize ws{};
  if (fd >= 0 && ::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

}  // namespace

bool IsMultiObjective(const json::object& s) {
  const json::value* d = s.if_contains("directions");
  return d != nullptr && d->is_array() && d->get_array().size() > 1;
}

std::string FormatSeconds(double s) {
  if (!(s >= 0) || !std::isfinite(s)) return "?";
  const long t = std::lround(s);
  char buf[32];
  if (s < 9.95) {
    std::snprintf(buf, sizeof(buf), "%.1fs", s);
  } else if (t < 60) {
    std::snprintf(buf, sizeof(buf), "%lds", t);
  } else if (t < 3600) {
    std::snprintf(buf, sizeof(buf), "%ldm%02lds", t / 60, t % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%ldh%02ldm", t / 3600, (t % 3600) / 60);
  }
  return buf;
}

std::optional<double> EstimateSeconds(const json::object& s, const WatchState& w,
                                      std::string* how) {
  const json::value* mean = s.if_contains("mean_duration_s");
  if (mean == nullptr || !mean->is_number()) return std::nullopt;
  const int64_t left = std::max(Count(s, "n_trials") - Count(s, "finished"),
                                Count(s, "running") + Count(s, "waiting"));
  if (left <= 0) return std::nullopt;
  const int64_t parallel =
      std::clamp<int64_t>(std::max<int64_t>(w.max_running, Count(s, "running")), 1, left);
  const double m = mean->to_number<double>();
  if (how != nullptr) {
    *how = "mean trial " + FormatSeconds(m) + " x " + std::to_string(left) + " left / " +
           std::to_string(parallel) + " at once";
  }
  return m * static_cast<double>(left) / static_cast<double>(parallel);
}

// Why nothing starts, when something holds the study: storage refusing writes
// (daemon/scheduler/storage_outage.h), or trials that cannot be started (spawn_backoff.h); ""
// otherwise.
std::string Held(const json::object& s) {
  if (const json::value* so = s.if_contains("storage"); so != nullptr && so->is_object()) {
    return "HELD: storage refuses writes: " + Str(so->get_object(), "reason");
  }
  if (const json::value* sp = s.if_contains("spawn"); sp != nullptr && sp->is_object()) {
    const json::value* held = sp->get_object().if_contains("held");
    if (held != nullptr && held->is_bool() && held->get_bool()) {
      return "HELD: trials cannot start: " + Str(sp->get_object(), "reason");
    }
  }
  return "";
}

std::vector<std::string> WatchLines(const json::object& s, const WatchState& w, double elapsed_s) {
  std::vector<std::string> lines;
  lines.push_back("study " + Str(s, "name") + ": " + Str(s, "state") + ", " + DirectionsText(s) +
                  "   watching " + FormatSeconds(elapsed_s));
  lines.push_back("  trials: " + Counts(s));
  if (std::string held = Held(s); !held.empty()) lines.push_back("  " + held);
  if (std::string failed = FailuresText(s); !failed.empty()) lines.push_back("  " + failed);
  if (IsMultiObjective(s)) {
    if (w.front.is_object()) {
      for (const std::string& l : FrontLines(w.front.get_object(), 5)) lines.push_back("  " + l);
    } else {
      lines.push_back("  front:  none yet");
    }
  } else {
    lines.push_back("  best:   " + Best(s));
  }
  std::string how;
  std::optional<double> eta = EstimateSeconds(s, w, &how);
  lines.push_back("  ETA:    " + (eta ? "~" + FormatSeconds(*eta) + " (" + how + ")"
                                      : std::string(Ended(s) ? "-" : "after the first trial")));
  return lines;
}

std::string WatchLine(const json::object& s, const WatchState& w) {
  std::string line = Str(s, "name") + ": " + Counts(s) + "; " +
                     (IsMultiObjective(s) ? FrontSummary(w.front) : "best " + Best(s));
  std::optional<double> eta = EstimateSeconds(s, w, nullptr);
  if (eta) line += "; ETA ~" + FormatSeconds(*eta);
  if (std::string held = Held(s); !held.empty()) line += "; " + held;
  if (std::string failed = FailuresText(s); !failed.empty()) line += "; " + failed;
  return line;
}

int WatchStudy(Client& client, const std::string& study, const WatchOptions& o, std::ostream& out,
               std::ostream& err) {
  std::ostream& view = o.view != nullptr ? *o.view : err;
  const bool tty = o.tty_fd >= 0;
  const auto start = std::chrono::steady_clock::now();
  WatchState w;
  std::string last;
  size_t drawn = 0;  // lines of the previous frame (terminal mode)
  for (;;) {
    Result<json::value> r = client.Call("status", {{"study", study}});
    if (!r.ok()) {
      if (tty && drawn > 0) view << "\n";
      err << "trialctl: " << EscapeForTerminal(r.status().message(), true) << "\n";
      return r.status().code() == common::Code::kUnavailable ? kExitUnavailable : kExitError;
    }
    const json::object& s = r->get_object();
    w.max_running = std::max<int>(w.max_running, static_cast<int>(Count(s, "running")));
    if (IsMultiObjective(s) && Count(s, "complete") != w.front_complete) {
      // The front changes only when a trial completes: asked again only then.
      Result<json::value> front = client.Call("best", {{"study", study}});
      if (!front.ok()) {
        if (tty && drawn > 0) view << "\n";
        err << "trialctl: " << EscapeForTerminal(front.status().message(), true) << "\n";
        return front.status().code() == common::Code::kUnavailable ? kExitUnavailable : kExitError;
      }
      w.front = std::move(*front);
      w.front_complete = Count(s, "complete");
    }
    if (tty) {
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::vector<std::string> lines = WatchLines(s, w, elapsed);
      const int width = Columns(o.tty_fd);
      std::string frame;
      if (drawn > 0) frame += "\x1b[" + std::to_string(drawn) + "A";
      for (const std::string& l : lines) frame += "\r\x1b[2K" + Fit(l, width) + "\n";
      frame += "\x1b[J";  // erase anything below (a longer earlier frame)
      view << frame << std::flush;
      drawn = lines.size();
    } else {
      std::string line;
      if (o.json && w.front.is_object()) {
        json::object with_front = s;  // several objectives: the front rides along
        with_front["best_trials"] = w.front.at("best_trials");
        with_front["feasible"] = w.front.at("feasible");
        line = common::SerializeJson(with_front);
      } else {
        line = o.json ? common::SerializeJson(s) : WatchLine(s, w);
      }
      if (line != last) {
        view << line << "\n" << std::flush;
        last = std::move(line);
      }
    }
    if (Ended(s)) {
      if (!o.json) {
        // Why it failed, and how its trials did: on err (before the end on out), so that out
        // stays the state and the best trial.
        if (const json::value* f = s.if_contains("failure"); f != nullptr && f->is_string()) {
          err << "trialctl: study \"" << study << "\" FAILED: " << Str(s, "failure") << "\n";
        }
        if (std::string failed = FailuresText(s); !failed.empty()) {
          err << "trialctl: study \"" << study << "\": " << failed << "\n";
        }
        err << std::flush;
        out << "study " << study << " " << Str(s, "state") << "\n";
      }
      if (IsMultiObjective(s)) {
        if (o.json) return FrontEmpty(w.front) ? kExitError : kExitOk;
        if (!PrintBest(out, w.front)) {
          err << "trialctl: study \"" << study << "\" ended with an empty Pareto front\n";
          return kExitError;
        }
        return kExitOk;
      }
      if (!s.at("best").is_object()) {
        if (Count(s, "complete") > 0) {
          err << "trialctl: study \"" << study
              << "\" ended without a feasible COMPLETE trial (every COMPLETE trial violates a "
                 "constraint)\n";
          return kExitError;
        }
        err << "trialctl: study \"" << study << "\" ended without a COMPLETE trial\n";
        return kExitError;
      }
      if (!o.json) {
        out << "best ";
        PrintTrial(out, s.at("best").get_object());
      }
      return kExitOk;
    }
    std::this_thread::sleep_for(o.interval);
  }
}

}  // namespace triald::ctl
