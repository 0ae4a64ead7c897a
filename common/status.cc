#include "common/status.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace triald::common {

const char* CodeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "ok";
    case Code::kInvalidArgument:
      return "invalid_argument";
    case Code::kNotFound:
      return "not_found";
    case Code::kAlreadyExists:
      return "already_exists";
    case Code::kFailedPrecondition:
      return "failed_precondition";
    case Code::kUnavailable:
      return "unavailable";
    case Code::kIo:
      return "io";
    case Code::kPermissionDenied:
      return "permission_denied";
    case Code::kInternal:
      return "internal";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  return std::string(CodeName(code_)) + ": " + message_;
}

Status Status::WithContext(const std::string& prefix) const {
  if (ok()) return *this;
  return Status(code_, prefix + ": " + message_);
}

Status ErrnoError(const std::string& what, int err) {
  return Status(Code::kIo, what + ": " + std::strerror(err));
}

void DieBadResultAccess(const Status& status) {
  std::fprintf(stderr, "fatal: value() of an error Result: %s\n", status.ToString().c_str());
  std::abort();
}

}  // namespace triald::common
