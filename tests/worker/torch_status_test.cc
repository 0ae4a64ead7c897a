// TorchCall: LibTorch's exceptions become Status values with the operation's name.

#include "worker/torch_status.h"

#include <torch/types.h>

#include <catch2/catch.hpp>
#include <stdexcept>
#include <string>

namespace triald::worker {
namespace {

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

TEST_CASE("TorchCall passes results and errors through", "[worker]") {
  common::Result<int> value = TorchCall("op", [] { return common::Result<int>(7); });
  REQUIRE(value.ok());
  CHECK(*value == 7);
  common::Status ok = TorchCall("op", [] { return common::Status::Ok(); });
  CHECK(ok.ok());
  common::Status error = TorchCall("op", [] { return common::InvalidArgument("bad value"); });
  CHECK(error.code() == common::Code::kInvalidArgument);
  CHECK(error.message() == "bad value");
}

TEST_CASE("TorchCall turns a LibTorch error into Internal without the backtrace", "[worker]") {
  common::Result<double> r = TorchCall("lm", []() -> common::Result<double> {
    // Two tensors whose shapes cannot be multiplied: LibTorch throws c10::Error.
    return torch::matmul(torch::ones({2, 3}), torch::ones({2, 3})).sum().item<double>();
  });
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == common::Code::kInternal);
  CHECK_THAT(r.status().message(), StartsWith("lm: LibTorch error: "));
  CHECK_THAT(r.status().message(), !Contains("Exception raised from"));
  common::Status s = TorchCall("check", []() -> common::Status {
    TORCH_CHECK(false, "the check failed");
    return common::Status::Ok();
  });
  CHECK(s.code() == common::Code::kInternal);
  CHECK_THAT(s.message(), StartsWith("check: LibTorch error: ") && Contains("the check failed"));
}

TEST_CASE("TorchCall turns another std::exception into Internal with its message", "[worker]") {
  common::Result<int> r = TorchCall(
      "objective echo", []() -> common::Result<int> { throw std::runtime_error("out of range"); });
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == common::Code::kInternal);
  CHECK(r.status().message() == "objective echo: out of range");
}

}  // namespace
}  // namespace triald::worker
