#pragma once
// TaskThread: a thread of its own that runs the tasks posted to it one at a time, in the order
// posted, for work a server hands off the event loop (ReadThread's storage reads, read_thread.h;
// the submit-time checks of a sweep, control/server.h). A task keeps its server's io_context
// alive until the connection it carries has gone (as ServerThread's tasks to the loop do), so
// one still queued when the thread stops is destroyed safely.
//
// Thread-safety: Post and Drain from any thread but the TaskThread's own.

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <future>
#include <memory>
#include <optional>
#include <thread>

#include "daemon/control/server_thread.h"

namespace triald::daemon {

class TaskThread {
 public:
  // Starts the thread.
  TaskThread() : io_(std::make_shared<boost::asio::io_context>(1)) {
    work_.emplace(io_->get_executor());
    thread_ = std::thread([io = io_] { io->run(); });
  }
  // Waits for the task in progress; the tasks not run are destroyed.
  ~TaskThread() {
    work_.reset();
    io_->stop();
    thread_.join();
    io_.reset();
  }
  TaskThread(const TaskThread&) = delete;
  TaskThread& operator=(const TaskThread&) = delete;

  // Returns once every task posted before has run: a server that posts no more (its own thread
  // stopped) calls it before it goes, so no task of its runs on after it.
  void Drain() {
    std::promise<void> done;
    std::future<void> ran = done.get_future();
    boost::asio::post(*io_, [&done] { done.set_value(); });
    ran.wait();
  }

  // Runs `fn(*self)` on the thread, keeping `keep` (the io_context `self` lives on) alive until
  // `self` has gone.
  template <typename T, typename Fn>
  void Post(std::shared_ptr<boost::asio::io_context> keep, std::shared_ptr<T> self, Fn fn) {
    boost::asio::post(*io_, ConnectionTask<T, Fn>{std::move(keep), std::move(self), std::move(fn)});
  }

 private:
  std::shared_ptr<boost::asio::io_context> io_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::thread thread_;
};

}  // namespace triald::daemon
