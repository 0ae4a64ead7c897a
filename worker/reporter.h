#pragma once
// The worker side of the report protocol (proto/README.md, "Report lines"): one JSON object
// per line on the pipe whose write end the daemon passes in TRIALD_REPORT_FD.
//
// Every line is written with a single write() of the whole line (continued only after a partial
// write or EINTR), never through stdio buffering, so lines of at most PIPE_BUF bytes arrive
// atomically and a crash never leaves half a line buffered in the worker.
//
// Thread-safety: all methods may be called from several threads (say, a heartbeat thread beside
// the training loop); a mutex keeps lines longer than PIPE_BUF from interleaving.

#include <boost/json/value.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace triald::worker {

class Reporter {
 public:
  // Longest line, newline included, the daemon accepts.
  static constexpr size_t kMaxLineBytes = 64 * 1024;

  // Writes to `fd`, which stays owned by the caller: the Reporter never closes it.
  explicit Reporter(int fd) : fd_(fd), mutex_(std::make_unique<std::mutex>()) {}

  // The reporter for TRIALD_REPORT_FD. Fails with a message meant for a person who started
  // trial-worker by hand when the variable is missing, and names the value when it is not an
  // open, writable descriptor. Marks the descriptor close-on-exec, so that processes the worker
  // starts cannot hold the pipe open after the worker is gone.
  static common::Result<Reporter> FromEnv();
  // The same for an explicit value of the variable (nullptr = unset); the seam tests use.
  static common::Result<Reporter> FromEnvValue(const char* value);

  // {"type":"report","step":S,"value":V}. A non-finite value is not sent: JSON has no NaN or
  // infinity, and sending null would look like a number to nobody. Instead an error line
  // describing it is sent and an InvalidArgument status returned, so the trial fails visibly.
  common::Status Report(int64_t step, double value);
  // {"type":"final","value":V}, with the same rule for non-finite values.
  common::Status Final(double value);
  // {"type":"final","values":[V1, V2, ...]} for several objectives (one value: as Final(double)),
  // with the same rule for non-finite values.
  common::Status Final(const std::vector<double>& values);
  // {"type":"attr","key":K,"value":V}. V is any JSON value; one holding a non-finite number or
  // a string that is not UTF-8 is refused (InvalidArgument, nothing sent), as is a line over
  // kMaxLineBytes.
  common::Status Attr(std::string_view key, const boost::json::value& value);
  // String values; these overloads let std::string and literals convert without ambiguity.
  common::Status Attr(std::string_view key, std::string_view value);
  common::Status Attr(std::string_view key, const char* value) {
    return Attr(key, std::string_view(value));
  }
  // {"type":"error","message":M}: the worker's own account of a failure. Never refused for its
  // content: a message that is not UTF-8 has the bad bytes replaced, and one too long for a line
  // is shortened, because this is the last thing a failing worker says.
  common::Status Error(std::string_view message);
  // {"type":"heartbeat"}
  common::Status Heartbeat();

  int fd() const { return fd_; }

 private:
  // Serialises `line` (a JSON object), appends '\n' and writes it whole. Fails with
  // InvalidArgument over kMaxLineBytes, and with an I/O status (EPIPE when the daemon is gone)
  // when the write fails; a failed write may have sent part of the line.
  common::Status WriteObject(const boost::json::value& line);
  common::Status WriteAll(std::string_view bytes);
  common::Status SendNonFinite(const char* what, double value);

  int fd_;
  // Behind a pointer so that Reporter stays movable (Result<Reporter>).
  std::unique_ptr<std::mutex> mutex_;
};

}  // namespace triald::worker
