#pragma once
// Raw control-socket access for the integration suites that test the socket itself (limits,
// permissions, malformed or half-sent requests): a plain connection, whole sends, and line reads
// bounded by a timeout so that a broken daemon fails the test instead of hanging it.

#include <string>

#include "common/fd.h"

namespace triald::testing {

// A connection to the Unix socket at `path`; an invalid fd when connect fails, with errno in
// *err when `err` is given (0 on success).
common::UniqueFd ConnectRaw(const std::string& path, int* err = nullptr);

// Sends all of `data` (no SIGPIPE); false when the peer stopped taking it.
bool SendAll(int fd, const std::string& data);

// Reads one line (without '\n'); "<eof>" when the peer closed first, "<timeout>" after
// `timeout_s` without a full line.
std::string ReadLine(int fd, double timeout_s = 30);

// The reply's error code ("ok" for a success); "<unparsable: ...>" for a line that is not a
// reply.
std::string ReplyCode(const std::string& line);

}  // namespace triald::testing
