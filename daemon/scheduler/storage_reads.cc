#include "daemon/scheduler/storage_reads.h"

#include <utility>

namespace triald::daemon {

ThreadedStorageReads::ThreadedStorageReads(Options options) : options_(std::move(options)) {
  if (!options_.logger) options_.logger = common::MakeNullLogger();
  thread_ = std::thread([this, alive = std::weak_ptr<bool>(alive_)] { Run(alive); });
}

ThreadedStorageReads::~ThreadedStorageReads() {
  alive_.reset();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    jobs_.clear();
  }
  wake_.notify_all();
  thread_.join();
}

void ThreadedStorageReads::Submit(Job job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
  }
  wake_.notify_one();
}

size_t ThreadedStorageReads::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.size() + running_;
}

void ThreadedStorageReads::Run(const std::weak_ptr<bool>& alive) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (stop_) return;
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    running_ = 1;
    lock.unlock();
    Done done = job(*options_.storage);
    if (done) {
      options_.post([alive, done = std::move(done)] {
        if (alive.lock()) done();
      });
    }
    lock.lock();
    running_ = 0;
  }
}

}  // namespace triald::daemon
