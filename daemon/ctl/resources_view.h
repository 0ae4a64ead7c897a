#pragma once
// Text forms of the resources triald measured for each trial (the "resources" object of a
// trial's JSON, daemon/control/study_json.h): the columns of `trialctl trials --resources`, the
// line of `best` and of `watch`'s closing summary, and the study line of `status`.
//
// A trial without resources (never run, still running, or stored before triald measured them)
// shows "-", never 0; so does a measurement the host could not make (no GPU memory on a trial
// without GPU slots).
//
// Thread-safety: pure functions; a ResourceSummary belongs to one thread.

#include <boost/json.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace triald::ctl {

// Bytes in powers of 1024, as sweep files write sizes: "512B", "1.5K", "212.4M", "7.9G", "1.1T"
// (one decimal from K up).
std::string FormatBytes(uint64_t bytes);

// The trial's "resources" object; nullptr when the trial has none (null or missing).
const boost::json::object* TrialResourcesOf(const boost::json::object& trial);

// Column headers and one trial's cells: PEAK_MEM, PEAK_GPU (FormatBytes), CPU_S, WALL_S
// (seconds, two decimals); "-" for each value not measured.
std::vector<std::string> ResourceHeaders();
std::vector<std::string> ResourceCells(const boost::json::object& trial);

// "resources: peak memory 212.4M (cgroup2 memory.peak), peak GPU memory 3.0G, CPU 12.31s
// (cgroup2 cpu.stat), wall 14.02s" plus ", planned memory 180.0M" when the worker planned it;
// "resources: not measured" when the trial has none. Empty when the trial's JSON has no
// "resources" key at all (a daemon from before resources were measured).
std::string ResourcesLine(const boost::json::object& trial);

// The resources of a study's trials, added a page at a time (`trialctl status` reads the trials
// in pages and keeps only the numbers it summarises).
class ResourceSummary {
 public:
  void Add(const boost::json::object& trial);

  // "resources: peak memory max 812.0M (trial 7), median 212.4M; peak GPU memory max 5.1G
  // (trial 3), median 4.9G; CPU 1234.50s total over 38 finished trials; 38 trials measured
  // (cgroup2 memory.peak)"; "resources: none measured" when no trial has any.
  std::string Line() const;

  int64_t measured() const { return measured_; }
  // Whether any trial added had a "resources" key (null included): false for the trials of a
  // daemon from before resources were measured, whose status shows no resources line.
  bool reported() const { return reported_; }

 private:
  struct Peak {
    std::vector<uint64_t> values;
    uint64_t max = 0;
    int64_t max_trial = -1;
    void Add(uint64_t v, int64_t trial);
    std::string Text(const char* what) const;
  };
  Peak memory_, gpu_;
  double cpu_total_ = 0;
  int64_t cpu_trials_ = 0;
  int64_t measured_ = 0;
  bool reported_ = false;
  std::vector<std::string> sources_;  // memory sources seen, in order of first appearance
};

}  // namespace triald::ctl
