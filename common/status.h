#pragma once
// Status and Result<T>: how fallible operations report failure across component boundaries.
// Exceptions never cross a component boundary; toml++, SQLite, errno and LibTorch errors are
// converted to a Status at the edge where they arise.
//
// Thread-safety: immutable values; const methods may be called from any thread.

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace triald::common {

enum class Code {
  kOk = 0,
  kInvalidArgument,  // the caller's input is wrong (bad sweep file, bad request)
  kNotFound,         // a named thing (study, trial) does not exist
  kAlreadyExists,    // a name is taken
  kFailedPrecondition,
  kUnavailable,       // a peer (daemon, database) cannot be reached
  kIo,                // the operating system refused (open, write, fork, ...)
  kPermissionDenied,  // the caller may not do this (control-socket peer credentials)
  kInternal,          // a broken invariant or an unexpected library failure
};

const char* CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // "message" for user-facing text; ToString() adds the code for logs.
  std::string ToString() const;

  // Returns a copy whose message is "prefix: message".
  Status WithContext(const std::string& prefix) const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) {
  return Status(Code::kInvalidArgument, std::move(m));
}
inline Status NotFound(std::string m) { return Status(Code::kNotFound, std::move(m)); }
inline Status AlreadyExists(std::string m) { return Status(Code::kAlreadyExists, std::move(m)); }
inline Status FailedPrecondition(std::string m) {
  return Status(Code::kFailedPrecondition, std::move(m));
}
inline Status Unavailable(std::string m) { return Status(Code::kUnavailable, std::move(m)); }
inline Status IoError(std::string m) { return Status(Code::kIo, std::move(m)); }
inline Status PermissionDenied(std::string m) {
  return Status(Code::kPermissionDenied, std::move(m));
}
inline Status Internal(std::string m) { return Status(Code::kInternal, std::move(m)); }

// errno-based I/O error: "what: strerror(err)".
Status ErrnoError(const std::string& what, int err);

// A value or the Status explaining why there is none. Accessing value() of an error Result is
// a broken invariant and aborts.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(runtime/explicit)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(runtime/explicit)
    if (std::get<Status>(v_).ok()) v_ = Status(Code::kInternal, "Result built from OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return Get(); }
  const T& value() const& { return const_cast<Result*>(this)->Get(); }
  T&& value() && { return std::move(Get()); }
  T* operator->() { return &Get(); }
  const T* operator->() const { return &const_cast<Result*>(this)->Get(); }
  T& operator*() & { return Get(); }
  const T& operator*() const& { return const_cast<Result*>(this)->Get(); }

 private:
  T& Get();
  std::variant<T, Status> v_;
};

[[noreturn]] void DieBadResultAccess(const Status& status);

template <typename T>
T& Result<T>::Get() {
  if (!ok()) DieBadResultAccess(std::get<Status>(v_));
  return std::get<T>(v_);
}

}  // namespace triald::common

// Propagates a non-OK Status from an expression returning Status.
#define TRIALD_RETURN_IF_ERROR(expr)       \
  do {                                     \
    ::triald::common::Status _st = (expr); \
    if (!_st.ok()) return _st;             \
  } while (0)

#define TRIALD_CONCAT_INNER(a, b) a##b
#define TRIALD_CONCAT(a, b) TRIALD_CONCAT_INNER(a, b)
// Declares `lhs` from a Result<T> expression or returns its Status.
#define TRIALD_ASSIGN_OR_RETURN(lhs, expr) \
  TRIALD_ASSIGN_OR_RETURN_IMPL(TRIALD_CONCAT(_res_, __LINE__), lhs, expr)
#define TRIALD_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
