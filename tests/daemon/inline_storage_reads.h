#pragma once
// StorageReads (daemon/scheduler/storage_reads.h) for tests: a job runs on the test's thread,
// with the storage it was given, when submitted (or, while held, when released: a frozen
// database); what it returns waits until Drain(), as a completion posted to the event loop
// waits for the loop.

#include <cstddef>
#include <deque>
#include <utility>

#include "daemon/scheduler/storage_reads.h"

namespace triald::testing {

class InlineStorageReads final : public daemon::StorageReads {
 public:
  explicit InlineStorageReads(storage::Storage* storage) : storage_(storage) {}

  void Submit(Job job) override {
    if (held_) {
      jobs_.push_back(std::move(job));
      return;
    }
    Run(job);
  }

  // Jobs wait (not run) until Release().
  void Hold() { held_ = true; }
  // Runs the held jobs, in order, and runs the next ones at once again.
  void Release() {
    held_ = false;
    while (!jobs_.empty()) {
      Job job = std::move(jobs_.front());
      jobs_.pop_front();
      Run(job);
    }
  }
  // Runs the completions waiting (and those they queue), in order; how many ran.
  size_t Drain() {
    size_t n = 0;
    while (!done_.empty()) {
      Done done = std::move(done_.front());
      done_.pop_front();
      done();
      ++n;
    }
    return n;
  }
  size_t held() const { return jobs_.size(); }
  size_t completions() const { return done_.size(); }

 private:
  void Run(const Job& job) {
    Done done = job(*storage_);
    if (done) done_.push_back(std::move(done));
  }

  storage::Storage* storage_;
  bool held_ = false;
  std::deque<Job> jobs_;
  std::deque<Done> done_;
};

}  // namespace triald::testing
