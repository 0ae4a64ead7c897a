#pragma once
// LoopThread: an asio event loop run on a thread of the test, as the daemon runs its loop, and a
// way to hold it as a storage call that does not come back holds the daemon's (the servers'
// own threads must answer around it: tests/daemon/control_server_test.cc,
// tests/http/http_server_test.cc).

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <thread>

namespace triald::testing {

class LoopThread {
 public:
  LoopThread() : work_(io_.get_executor()), thread_([this] { io_.run(); }) {}
  ~LoopThread() { Stop(); }

  boost::asio::io_context& io() { return io_; }

  // Runs `fn` on the loop and waits for it.
  void Run(std::function<void()> fn) {
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> ran = done->get_future();
    boost::asio::post(io_, [fn = std::move(fn), done] {
      fn();
      done->set_value();
    });
    ran.wait();
  }

  // Holds the loop until the returned promise is set; returns once it is held.
  std::shared_ptr<std::promise<void>> Hold() {
    auto release = std::make_shared<std::promise<void>>();
    auto held = std::make_shared<std::promise<void>>();
    std::future<void> is_held = held->get_future();
    boost::asio::post(io_, [release, held] {
      held->set_value();
      release->get_future().wait();
    });
    is_held.wait();
    return release;
  }

  // Tears a server down as the daemon does: it stops on the loop, the loop ends, then the
  // server goes (a request still posted to the loop keeps the server's own context alive).
  template <class Server>
  void StopThenDestroy(std::unique_ptr<Server>& server) {
    Run([&server] { server->Stop(); });
    Stop();
    server.reset();
  }

  // Ends the loop (what is still posted is never run) and joins its thread.
  void Stop() {
    if (!thread_.joinable()) return;
    work_.reset();
    io_.stop();
    thread_.join();
  }

 private:
  boost::asio::io_context io_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::thread thread_;
};

}  // namespace triald::testing
