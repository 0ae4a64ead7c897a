// ThreadedStorageReads (daemon/scheduler/storage_reads.h): jobs run in order on a thread of their
// own with the reads' storage, their completions come back through `post` (here a queue the test
// runs, as the event loop would), and none runs once the reads are destroyed.

#include "daemon/scheduler/storage_reads.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon/storage/sqlite_storage.h"

namespace triald::daemon {
namespace {

// The event loop's queue: posted from the reads' thread, run by the test.
class Loop {
 public:
  void Post(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(fn));
    }
    cv_.notify_all();
  }
  // Waits until `n` completions were posted in all (or 10 s), then runs those waiting.
  size_t RunUntil(size_t n) {
    std::deque<std::function<void()>> ready;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::seconds(10), [&] { return posted_ + queue_.size() >= n; });
      posted_ += queue_.size();
      ready.swap(queue_);
    }
    for (auto& fn : ready) fn();
    return ready.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  size_t posted_ = 0;
};

std::shared_ptr<storage::Storage> Memory() {
  auto s = storage::OpenSqliteStorage({":memory:"});
  REQUIRE(s.ok());
  return std::shared_ptr<storage::Storage>(std::move(s).value());
}

TEST_CASE("reads off the loop run in order and come back to the loop through post",
          "[storage_reads]") {
  Loop loop;
  auto storage = Memory();
  model::NewStudy ns;
  ns.name = "read";
  REQUIRE(storage->CreateStudy(ns, 1.0).ok());
  ThreadedStorageReads::Options o;
  o.storage = storage;
  o.post = [&loop](std::function<void()> fn) { loop.Post(std::move(fn)); };
  ThreadedStorageReads reads(o);
  const std::thread::id loop_thread = std::this_thread::get_id();
  std::vector<std::string> done;
  std::vector<std::thread::id> ran_on;
  for (int i = 0; i < 5; ++i) {
    reads.Submit([&, i](storage::Storage& s) {
      ran_on.push_back(std::this_thread::get_id());  // the reads' thread only touches this
      auto studies = s.ListStudies();
      const std::string seen = std::to_string(i) + ":" +
                               (studies.ok() ? (*studies)[0].name : studies.status().message());
      return StorageReads::Done([&done, &loop_thread, seen] {
        CHECK(std::this_thread::get_id() == loop_thread);
        done.push_back(seen);
      });
    });
  }
  size_t ran = 0;
  while (ran < 5) {
    const size_t n = loop.RunUntil(ran + 1);
    REQUIRE(n > 0);
    ran += n;
  }
  CHECK(done == std::vector<std::string>{"0:read", "1:read", "2:read", "3:read", "4:read"});
  // The last job counts until just after its completion is posted.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (reads.pending() > 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(reads.pending() == 0);
  REQUIRE(ran_on.size() == 5);
  for (const std::thread::id& id : ran_on) CHECK(id != loop_thread);
}

TEST_CASE("a completion posted but not run when the reads go never runs", "[storage_reads]") {
  Loop loop;
  bool ran = false;
  {
    ThreadedStorageReads::Options o;
    o.storage = Memory();
    o.post = [&loop](std::function<void()> fn) { loop.Post(std::move(fn)); };
    ThreadedStorageReads reads(o);
    reads.Submit([&ran](storage::Storage&) { return StorageReads::Done([&ran] { ran = true; }); });
    // Its completion is posted (pending() counts a job until then) before the reads go.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (reads.pending() > 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    REQUIRE(reads.pending() == 0);
  }
  CHECK(loop.RunUntil(1) == 1);  // the posted completion runs, and does nothing
  CHECK_FALSE(ran);
}

}  // namespace
}  // namespace triald::daemon
