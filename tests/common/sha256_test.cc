// SHA-256 against FIPS 180-4's examples, in one piece and fed in odd chunks, and files.
#include "common/sha256.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <string>

#include "common/fd.h"

namespace triald::common {
namespace {

TEST_CASE("SHA-256 gives FIPS 180-4's digests, however the bytes are fed", "[sha256]") {
  CHECK(Sha256Hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(Sha256Hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  CHECK(Sha256Hex(two_blocks) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  CHECK(Sha256Hex(million) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  for (size_t chunk : {1u, 7u, 63u, 64u, 65u, 1000u}) {
    Sha256 h;
    for (size_t at = 0; at < million.size(); at += chunk) {
      h.Update(std::string_view(million).substr(at, chunk));
    }
    CHECK(h.HexDigest() == Sha256Hex(million));
  }
  // Lengths around the padding's edge (55, 56 and 64 bytes) differ from each other.
  CHECK(Sha256Hex(std::string(55, 'x')) != Sha256Hex(std::string(56, 'x')));
  CHECK(Sha256Hex(std::string(64, 'x')).size() == 64);
}

TEST_CASE("ReadFile reads a file whole, at most max_bytes, and names what went wrong", "[sha256]") {
  char path[] = "/tmp/triald-sha256-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  std::ofstream(path, std::ios::binary) << std::string("abc");
  Result<std::string> bytes = ReadFile(path, 1024);
  REQUIRE(bytes.ok());
  CHECK(Sha256Hex(*bytes) == Sha256Hex("abc"));
  Result<std::string> small = ReadFile(path, 2);
  CHECK(small.status().code() == Code::kInvalidArgument);
  CHECK_THAT(small.status().message(), Catch::Contains("larger than 2 bytes"));
  std::remove(path);
  Result<std::string> gone = ReadFile(path, 1024);
  CHECK_FALSE(gone.ok());
  CHECK_THAT(gone.status().message(),
             Catch::Contains(path) && Catch::Contains("No such file or directory"));
}

}  // namespace
}  // namespace triald::common
