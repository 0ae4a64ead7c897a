// libFuzzer driver for one target of tests/fuzz/targets.h, chosen at compile time with
// TRIALD_FUZZ_TARGET (CheckReportStream, CheckControlRequest or CheckSweep). A broken property
// aborts, which libFuzzer records as a crash with the input that caused it.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "tests/fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  triald::common::Status st =
      triald::fuzz::TRIALD_FUZZ_TARGET(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!st.ok()) {
    std::fprintf(stderr, "property violated: %s\n", st.ToString().c_str());
    std::abort();
  }
  return 0;
}
