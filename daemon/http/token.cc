#include "daemon/http/token.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>

#include "common/fd.h"

namespace triald::daemon::http {

common::Result<std::string> MakeToken() {
  std::array<unsigned char, 32> bytes{};
  size_t got = 0;
  while (got < bytes.size()) {
    ssize_t n = ::getrandom(bytes.data() + got, bytes.size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return common::ErrnoError("getrandom (the dashboard token)", errno);
    }
    got += static_cast<size_t>(n);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string token;
  token.reserve(2 * bytes.size());
  for (unsigned char b : bytes) {
    token += kHex[b >> 4];
    token += kHex[b & 15];
  }
  bytes.fill(0);
  return token;
}

common::Result<std::string> WriteTokenFile(const std::string& state_dir, const std::string& token) {
  const std::string path = state_dir + "/" + kTokenFileName;
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  (void)::unlink(tmp.c_str());  // a leftover of a crashed start with the same pid
  common::UniqueFd fd(
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid()) return common::ErrnoError("create " + tmp, errno);
  auto fail = [&](const std::string& what, int err) {
    (void)::unlink(tmp.c_str());
    return common::ErrnoError(what + " " + tmp, err);
  };
  if (::fchmod(fd.get(), 0600) != 0) return fail("chmod 0600", errno);
  const std::string text = token + "\n";
  size_t off = 0;
  while (off < text.size()) {
    ssize_t n = ::write(fd.get(), text.data() + off, text.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("write", errno);
    }
    off += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0) return fail("fsync", errno);
  fd.Reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail("rename onto " + path + ":", errno);
  return path;
}

bool TokensEqual(std::string_view given, std::string_view expected) {
  // Every byte of `expected` is compared whatever `given` is; lengths differ: unequal.
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= static_cast<unsigned char>(g ^ static_cast<unsigned char>(expected[i]));
  }
  return diff == 0 && !expected.empty();
}

std::string_view BearerToken(std::string_view authorization) {
  constexpr std::string_view kScheme = "Bearer ";
  if (authorization.size() <= kScheme.size()) return {};
  for (size_t i = 0; i < kScheme.size(); ++i) {
    char c = authorization[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    char k = kScheme[i];
    if (k >= 'A' && k <= 'Z') k = static_cast<char>(k - 'A' + 'a');
    if (c != k) return {};
  }
  std::string_view t = authorization.substr(kScheme.size());
  while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
  while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
  return t;
}

}  // namespace triald::daemon::http
