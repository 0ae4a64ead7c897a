#pragma once
// The dashboard's bearer token: what a browser or a script shows to act on studies over HTTP
// (and to read, when reading is not open to everyone; daemon/README.md, "Dashboard").
//
// A new token is drawn at each start: 32 bytes from getrandom(2) (256 bits), written as 64
// hex digits to STATE_DIR/http.token. The file is created under a temporary name with
// O_CREAT|O_EXCL|O_NOFOLLOW and mode 0600 (fchmod'ed to 0600 whatever the umask), written,
// fsync'ed and renamed onto http.token, so it is never readable by anyone but the daemon's
// user, not even for a moment, and a link planted at either name is never followed.
//
// Thread-safety: pure functions of the system; safe from any thread.

#include <string>
#include <string_view>

#include "common/status.h"

namespace triald::daemon::http {

// The token file's name in the state directory.
inline constexpr const char* kTokenFileName = "http.token";

// 64 hex digits from 32 random bytes (getrandom, blocking until the pool is ready).
common::Result<std::string> MakeToken();

// Writes `token` (plus a newline) to `state_dir`/http.token as described above; returns the
// file's path.
common::Result<std::string> WriteTokenFile(const std::string& state_dir, const std::string& token);

// Whether `given` equals `expected`, in time that depends only on their lengths (the expected
// token's length is public: 64).
bool TokensEqual(std::string_view given, std::string_view expected);

// The token of an "Authorization: Bearer TOKEN" header value; "" when it is not one.
std::string_view BearerToken(std::string_view authorization);

}  // namespace triald::daemon::http
