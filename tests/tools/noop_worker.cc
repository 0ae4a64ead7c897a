// triald-noop-worker: the cheapest process that speaks the report protocol, used by the
// throughput benchmark to measure the daemon's per-trial overhead rather than any objective.
// It reports final = TRIALD_PARAMS["x"] (0 when absent) and exits 0.
//
// Plain libc only (no Boost, no iostreams, no allocation), so that start-up is dominated by
// exec itself.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmath>

namespace {

// Crude on purpose: finds "x" as a key and reads the number after the colon. Good enough for
// the benchmark's flat {"x": <number>} objects; anything else yields 0.
double ParseX(const char* params) {
  if (params == nullptr) return 0;
  const char* key = strstr(params, "\"x\"");
  if (key == nullptr) return 0;
  const char* p = key + 3;
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') ++p;
  if (*p != ':') return 0;
  char* end = nullptr;
  double value = strtod(p + 1, &end);
  // JSON has no NaN or infinity; "1e999" must not become one.
  if (end == p + 1 || !std::isfinite(value)) return 0;
  return value;
}

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

int main() {
  const char* fd_text = getenv("TRIALD_REPORT_FD");
  char* end = nullptr;
  long fd = fd_text == nullptr ? -1 : strtol(fd_text, &end, 10);
  if (fd_text == nullptr || *fd_text == '\0' || *end != '\0' || fd < 0) {
    static const char kMessage[] =
        "triald-noop-worker: TRIALD_REPORT_FD is not set or not a number\n";
    WriteAll(2, kMessage, sizeof(kMessage) - 1);
    return 1;
  }
  char line[96];
  int length = snprintf(line, sizeof(line), "{\"type\":\"final\",\"value\":%.17g}\n",
                        ParseX(getenv("TRIALD_PARAMS")));
  if (length <= 0 || static_cast<size_t>(length) >= sizeof(line) ||
      !WriteAll(static_cast<int>(fd), line, static_cast<size_t>(length))) {
    static const char kMessage[] = "triald-noop-worker: could not write the final line\n";
    WriteAll(2, kMessage, sizeof(kMessage) - 1);
    return 1;
  }
  return 0;
}
