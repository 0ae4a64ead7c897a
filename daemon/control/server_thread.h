#pragma once
// ServerThread: the thread and io_context a server of the daemon serves its sockets on
// (control/server.h, http/server.h), apart from the event loop that answers their requests, and
// the posting from one to the other.
//
// The thread starts once the loop runs (Start posts it there), so until the daemon is up its
// connections wait in the listening socket's backlog, as they did when the loop served them. A
// task posted to the loop keeps the io_context alive until the connection it carries has gone,
// so a request still posted when the loop stops is destroyed safely with the loop, after the
// server (and its thread) are gone.
//
// Thread-safety: Start, running and Join on the event-loop thread; PostToLoop from the server's
// thread.

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <memory>
#include <optional>
#include <thread>

namespace triald::daemon {

// A task a server posts to another thread (the loop, a ReadThread): runs fn(*self), keeping the
// io_context `self` lives on alive until `self` has gone. Members go in reverse order: the
// connection before the io_context it lives on.
template <typename T, typename Fn>
struct ConnectionTask {
  std::shared_ptr<boost::asio::io_context> keep;
  std::shared_ptr<T> self;
  Fn fn;
  void operator()() { fn(*self); }
};

class ServerThread {
 public:
  explicit ServerThread(boost::asio::io_context& loop)
      : loop_(loop), io_(std::make_shared<boost::asio::io_context>(1)) {}
  ~ServerThread() { Join(); }
  ServerThread(const ServerThread&) = delete;
  ServerThread& operator=(const ServerThread&) = delete;

  // Where the server's sockets live.
  boost::asio::io_context& io() { return *io_; }
  // The same, for a task elsewhere to keep it alive (ReadThread::Post).
  const std::shared_ptr<boost::asio::io_context>& shared_io() const { return io_; }
  // The thread runs io() from the moment the loop runs.
  void Start() {
    work_.emplace(io_->get_executor());
    boost::asio::post(loop_, [this] {
      if (!thread_.joinable()) thread_ = std::thread([io = io_] { io->run(); });
    });
  }
  bool running() const { return thread_.joinable(); }
  // Stops the thread and waits for it; what it had not run yet is destroyed with io().
  void Join() {
    if (!thread_.joinable()) return;
    work_.reset();
    io_->stop();
    thread_.join();
  }

  // Runs `fn(*self)` on the loop, keeping io() alive until `self` has gone.
  template <typename T, typename Fn>
  void PostToLoop(std::shared_ptr<T> self, Fn fn) {
    boost::asio::post(loop_, ConnectionTask<T, Fn>{io_, std::move(self), std::move(fn)});
  }

 private:
  boost::asio::io_context& loop_;
  std::shared_ptr<boost::asio::io_context> io_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::thread thread_;
};

}  // namespace triald::daemon
