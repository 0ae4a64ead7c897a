#pragma once
// SHA-256 (FIPS 180-4) of bytes in memory or of a file, as lowercase hex: how trialctl records
// the objective's files at submit and tells, at `status`, whether they changed since
// (daemon/ctl/submit_code.h; files are read with common::ReadFile). Not for secrets: nothing
// here is constant-time.
//
// Thread-safety: Sha256 objects are not shared; the functions are thread-safe.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace triald::common {

class Sha256 {
 public:
  Sha256();
  void Update(std::string_view bytes);
  // The digest as 64 lowercase hex digits; the object is spent afterwards.
  std::string HexDigest();

 private:
  void Block(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t length_ = 0;  // bytes hashed
};

std::string Sha256Hex(std::string_view bytes);

}  // namespace triald::common
