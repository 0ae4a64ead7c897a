#include "worker/reporter.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <boost/json/serialize.hpp>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "common/utf8.h"

namespace triald::worker {
namespace {

using common::InvalidArgument;
using common::Result;
using common::Status;

constexpr char kMissingFdMessage[] =
    "TRIALD_REPORT_FD is not set; trial-worker is meant to be started by triald";

// Why `value` cannot travel in the protocol ("" when it can): Boost.JSON would write NaN and
// infinity as the non-JSON tokens NaN and Infinity, and pass malformed UTF-8 through.
std::string Unsendable(const boost::json::value& value) {
  switch (value.kind()) {
    case boost::json::kind::double_:
      if (!std::isfinite(value.get_double())) return "a non-finite number";
      return "";
    case boost::json::kind::string:
      if (!common::IsValidUtf8(value.get_string())) return "a string that is not valid UTF-8";
      return "";
    case boost::json::kind::array:
      for (const boost::json::value& element : value.get_array()) {
        std::string why = Unsendable(element);
        if (!why.empty()) return why;
      }
      return "";
    case boost::json::kind::object:
      for (const auto& entry : value.get_object()) {
        if (!common::IsValidUtf8(entry.key())) return "a key that is not valid UTF-8";
        std::string why = Unsendable(entry.value());
        if (!why.empty()) return why;
      }
      return "";
    default:
      return "";
  }
}

std::string FormatDouble(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// Blocks SIGPIPE in the calling thread for its lifetime, so that writing to a pipe whose reader
// (the daemon) is gone fails with EPIPE instead of killing the worker, whatever the process's
// SIGPIPE disposition. A SIGPIPE our own write raised is consumed before the mask is restored;
// one that was already pending belongs to someone else and is left alone.
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigemptyset(&sigpipe_);
    sigaddset(&sigpipe_, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &sigpipe_, &old_mask_);
  }
  ~ScopedSigpipeBlock() {
    if (raised_ && !was_pending_) {
      timespec zero{0, 0};
      while (sigtimedwait(&sigpipe_, nullptr, &zero) == -1 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  }
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

  void NoteEpipe() { raised_ = true; }

 private:
  sigset_t sigpipe_;
  sigset_t old_mask_;
  bool was_pending_ = false;
  bool raised_ = false;
};

}  // namespace

Result<Reporter> Reporter::FromEnv() { return FromEnvValue(std::getenv("TRIALD_REPORT_FD")); }

Result<Reporter> Reporter::FromEnvValue(const char* value) {
  if (value == nullptr || *value == '\0') return Status(InvalidArgument(kMissingFdMessage));
  errno = 0;
  char* end = nullptr;
  long fd = std::strtol(value, &end, 10);
  if (*end != '\0' || errno != 0 || fd < 0 || fd > 1 << 30) {
    return Status(InvalidArgument(std::string("TRIALD_REPORT_FD='") + value +
                                  "' is not a file descriptor number"));
  }
  int flags = fcntl(static_cast<int>(fd), F_GETFL);
  if (flags == -1) {
    return common::ErrnoError(
        std::string("TRIALD_REPORT_FD=") + value + " is not an open file descriptor", errno);
  }
  if ((flags & O_ACCMODE) == O_RDONLY) {
    return Status(InvalidArgument(std::string("TRIALD_REPORT_FD=") + value +
                                  " is open read-only; it must be the write end of the pipe"));
  }
  int fd_flags = fcntl(static_cast<int>(fd), F_GETFD);
  if (fd_flags != -1 && (fd_flags & FD_CLOEXEC) == 0) {
    fcntl(static_cast<int>(fd), F_SETFD, fd_flags | FD_CLOEXEC);
  }
  return Reporter(static_cast<int>(fd));
}

Status Reporter::Report(int64_t step, double value) {
  if (!std::isfinite(value)) {
    return SendNonFinite(("report value for step " + std::to_string(step)).c_str(), value);
  }
  return WriteObject({{"type", "report"}, {"step", step}, {"value", value}});
}

Status Reporter::Final(double value) {
  if (!std::isfinite(value)) return SendNonFinite("final value", value);
  return WriteObject({{"type", "final"}, {"value", value}});
}

Status Reporter::Final(const std::vector<double>& values) {
  if (values.size() == 1) return Final(values.front());
  if (values.empty()) return InvalidArgument("final values: none given; not sent");
  boost::json::array array;
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return SendNonFinite(("final values[" + std::to_string(i) + "]").c_str(), values[i]);
    }
    array.push_back(values[i]);
  }
  return WriteObject({{"type", "final"}, {"values", std::move(array)}});
}

Status Reporter::Attr(std::string_view key, const boost::json::value& value) {
  if (!common::IsValidUtf8(key)) return InvalidArgument("attr key is not valid UTF-8; not sent");
  std::string why = Unsendable(value);
  if (!why.empty()) {
    return InvalidArgument("attr '" + std::string(key) + "' holds " + why +
                           ", which JSON cannot carry; not sent");
  }
  Status status = WriteObject({{"type", "attr"}, {"key", key}, {"value", value}});
  if (!status.ok()) return status.WithContext("attr '" + std::string(key) + "'");
  return status;
}

Status Reporter::Attr(std::string_view key, std::string_view value) {
  return Attr(key, boost::json::value(boost::json::string_view(value.data(), value.size())));
}

Status Reporter::Error(std::string_view message) {
  std::string text = common::SanitizeUtf8(message);
  auto line_for = [](const std::string& m) {
    return boost::json::value{{"type", "error"}, {"message", m}};
  };
  auto fits = [&](const std::string& m) {
    return boost::json::serialize(line_for(m)).size() + 1 <= kMaxLineBytes;
  };
  if (!fits(text)) {
    // Keep the longest prefix that fits with the marker. Escaping makes the serialised length
    // grow by byte class (a control byte takes six), so search rather than compute.
    constexpr std::string_view kSuffix = " [truncated]";
    auto shortened = [&](size_t keep) {
      return text.substr(0, common::Utf8CutPoint(text, keep)) + std::string(kSuffix);
    };
    size_t lo = 0, hi = text.size();  // shortened(lo) fits; shortened(hi) does not
    while (hi - lo > 1) {
      size_t mid = lo + (hi - lo) / 2;
      (fits(shortened(mid)) ? lo : hi) = mid;
    }
    text = shortened(lo);
  }
  return WriteObject(line_for(text));
}

Status Reporter::Heartbeat() { return WriteObject({{"type", "heartbeat"}}); }

Status Reporter::SendNonFinite(const char* what, double value) {
  std::string message = std::string(what) + " is " + FormatDouble(value) +
                        "; the report protocol carries only finite numbers";
  Status sent = Error(message);
  if (!sent.ok()) return sent.WithContext(message);
  return InvalidArgument(message);
}

Status Reporter::WriteObject(const boost::json::value& line) {
  std::string text = boost::json::serialize(line);
  text += '\n';
  if (text.size() > kMaxLineBytes) {
    return InvalidArgument("report line of " + std::to_string(text.size()) +
                           " bytes exceeds the protocol's limit of " +
                           std::to_string(kMaxLineBytes) + "; not sent");
  }
  std::lock_guard<std::mutex> lock(*mutex_);
  return WriteAll(text);
}

Status Reporter::WriteAll(std::string_view bytes) {
  ScopedSigpipeBlock block_sigpipe;
  while (!bytes.empty()) {
    ssize_t n = write(fd_, bytes.data(), bytes.size());
    if (n >= 0) {
      bytes.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      // A non-blocking descriptor with a full pipe: wait until the daemon drains it.
      pollfd pfd{fd_, POLLOUT, 0};
      if (poll(&pfd, 1, -1) == -1 && errno != EINTR) {
        return common::ErrnoError("report pipe: poll", errno);
      }
      continue;
    }
    if (err == EPIPE) block_sigpipe.NoteEpipe();
    return common::ErrnoError(
        "writing to the report pipe (TRIALD_REPORT_FD=" + std::to_string(fd_) + ")", err);
  }
  return Status::Ok();
}

}  // namespace triald::worker
