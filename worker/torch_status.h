#pragma once
// The one place worker/ turns LibTorch's exceptions into Status values. LibTorch reports
// failures (shape mismatches, CUDA out of memory, a bad checkpoint) by throwing c10::Error, and
// the standard library it calls throws std::exception; none may leave the worker component, so
// each entry point that runs LibTorch code runs it through TorchCall.
//
// Thread-safety: TorchCall adds no state; it is as thread-safe as `f`.

#include <c10/util/Exception.h>

#include <exception>
#include <string>
#include <string_view>
#include <type_traits>

#include "common/status.h"

namespace triald::worker {

// Runs f(), which returns common::Status or common::Result<T>, and returns what it returns. An
// exception escaping f becomes Internal("<what>: LibTorch error: <message>") for a c10::Error
// (its message without the C++ backtrace LibTorch appends) and Internal("<what>: <e.what()>")
// for any other std::exception. `what` names the operation for the message ("lm", "objective
// echo").
template <class F>
std::invoke_result_t<F&> TorchCall(std::string_view what, F&& f) {
  using R = std::invoke_result_t<F&>;
  static_assert(std::is_constructible_v<R, common::Status>,
                "TorchCall's function returns common::Status or common::Result<T>");
  try {
    return f();
  } catch (const c10::Error& e) {
    return R(
        common::Internal(std::string(what) + ": LibTorch error: " + e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return R(common::Internal(std::string(what) + ": " + e.what()));
  }
}

}  // namespace triald::worker
