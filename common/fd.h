#pragma once
// File-descriptor helpers. Every descriptor the daemon opens is close-on-exec, so nothing but
// what a launcher places on purpose (0/1/2 and the report pipe) reaches a worker.
//
// Thread-safety: UniqueFd is a move-only value; free functions are thread-safe.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace triald::common {

// Owns one descriptor and closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.Release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) Reset(o.Release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() { return std::exchange(fd_, -1); }
  void Reset(int fd = -1);

 private:
  int fd_ = -1;
};

struct Pipe {
  UniqueFd read;
  UniqueFd write;
};

// pipe2(O_CLOEXEC); the read end is made non-blocking when `nonblocking_read`.
Result<Pipe> MakePipe(bool nonblocking_read);

Status SetNonBlocking(int fd, bool on);

// The descriptors open in this process, from /proc/self/fd (excluding the one used to list).
std::vector<int> ListOpenFds();

// Writes all of `data`, retrying on EINTR and short writes.
Status WriteAll(int fd, const char* data, size_t size);

// Reads a whole file, at most `max_bytes` of it (a larger one is kInvalidArgument naming the
// size); errors name the path and the system's reason.
Result<std::string> ReadFile(const std::string& path, size_t max_bytes = SIZE_MAX);

// Creates `path` and its missing parents, each new folder with `mode` (less the umask), unlike
// std::filesystem::create_directories (0777 less the umask). Folders that exist are left as they
// are. Errors name the folder that could not be made.
Status MakeDirs(const std::string& path, unsigned mode);

}  // namespace triald::common
