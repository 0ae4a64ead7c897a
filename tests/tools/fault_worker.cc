// triald-fault-worker: a worker that misbehaves on purpose, one way per mode, for the
// fault-injection suite (tests/fault/). Usage: triald-fault-worker MODE
//
//   ok            reports final 0.5 and exits 0 (the "normal trial" after each fault)
//   segfault      writes through a null pointer (SIGSEGV)
//   abort         abort() (SIGABRT)
//   exit137       exits with code 137 (what a shell reports for a SIGKILLed child)
//   alloc         allocates and touches 1 MiB blocks with new[] until that fails; an uncaught
//                 std::bad_alloc then aborts it (under memory.max the kernel kills it first).
//                 Stops at 8 GiB and exits 3 if no limit was hit.
//   hang          sleeps for ever
//   ignore-term   ignores SIGTERM and sleeps for ever (only SIGKILL ends it)
//   escape        double-forks a grandchild that calls setsid(), ignores SIGTERM, keeps the
//                 inherited stdout/stderr/report descriptors and sleeps for ever; it writes its
//                 pid to $TRIALD_TRIAL_DIR/escapee.pid. The main process then reports final 1
//                 and exits 0.
//   close-report  closes the report descriptor, lives on for 0.5 s, exits 0 (no final)
//   garbage       writes 10 MB of pseudo-random bytes to the report descriptor
//   flood-stdout  writes 100 MB to stdout, then reports final 2 and exits 0
//   forkbomb      forks children that sleep for ever until fork fails (at most 4000), reports
//                 final = the number of children it got, exits 0 (its children stay behind)
//
// Plain libc and static, so it starts fast and behaves the same on every host.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

constexpr int kReportFd = 3;

void WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

void Final(double value) {
  char line[96];
  int n = snprintf(line, sizeof(line), "{\"type\":\"final\",\"value\":%.17g}\n", value);
  WriteAll(kReportFd, line, static_cast<size_t>(n));
}

[[noreturn]] void SleepForever() {
  for (;;) pause();
}

int Alloc() {
  std::vector<char*> blocks;
  for (int i = 0; i < 8192; ++i) {
    char* block = new char[1 << 20];
    memset(block, i & 0xff, 1 << 20);  // touch every page: memory.max counts resident memory
    blocks.push_back(block);
  }
  fprintf(stderr, "triald-fault-worker: allocated 8 GiB without hitting a limit\n");
  return 3;
}

int Escape() {
  const char* dir = getenv("TRIALD_TRIAL_DIR");
  if (dir == nullptr) return 2;
  const std::string pid_file = std::string(dir) + "/escapee.pid";
  pid_t child = fork();
  if (child < 0) return 2;
  if (child == 0) {
    setsid();
    pid_t grandchild = fork();
    if (grandchild != 0) _exit(grandchild < 0 ? 2 : 0);
    signal(SIGTERM, SIG_IGN);
    std::string tmp = pid_file + ".tmp";
    FILE* f = fopen(tmp.c_str(), "w");
    if (f != nullptr) {
      fprintf(f, "%d\n", static_cast<int>(getpid()));
      fclose(f);
      rename(tmp.c_str(), pid_file.c_str());
    }
    SleepForever();
  }
  int status = 0;
  waitpid(child, &status, 0);
  for (int i = 0; i < 5000 && access(pid_file.c_str(), F_OK) != 0; ++i) usleep(1000);
  Final(1);
  return 0;
}

int Garbage() {
  uint64_t x = 0x9E3779B97F4A7C15ull;
  char buf[64 * 1024];
  for (size_t written = 0; written < 10u * 1000 * 1000; written += sizeof(buf)) {
    for (size_t i = 0; i < sizeof(buf); ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      buf[i] = static_cast<char>(x);
    }
    if (write(kReportFd, buf, sizeof(buf)) < 0 && errno != EINTR) return 0;
  }
  return 0;
}

int FloodStdout() {
  static char buf[64 * 1024];
  memset(buf, 'x', sizeof(buf));
  for (size_t i = 63; i < sizeof(buf); i += 64) buf[i] = '\n';
  for (size_t written = 0; written < 100u * 1000 * 1000; written += sizeof(buf)) {
    WriteAll(1, buf, sizeof(buf));
  }
  Final(2);
  return 0;
}

int ForkBomb() {
  int children = 0;
  while (children < 4000) {
    pid_t pid = fork();
    if (pid < 0) break;
    if (pid == 0) SleepForever();
    ++children;
  }
  Final(children);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "ok") {
    Final(0.5);
    return 0;
  }
  if (mode == "segfault") {
    volatile int* nowhere = nullptr;
    *nowhere = 1;
    return 0;
  }
  if (mode == "abort") abort();
  if (mode == "exit137") _exit(137);
  if (mode == "alloc") return Alloc();
  if (mode == "hang") SleepForever();
  if (mode == "ignore-term") {
    signal(SIGTERM, SIG_IGN);
    SleepForever();
  }
  if (mode == "escape") return Escape();
  if (mode == "close-report") {
    close(kReportFd);
    usleep(500 * 1000);
    return 0;
  }
  if (mode == "garbage") return Garbage();
  if (mode == "flood-stdout") return FloodStdout();
  if (mode == "forkbomb") return ForkBomb();
  fprintf(stderr, "usage: triald-fault-worker MODE (unknown mode \"%s\")\n", mode.c_str());
  return 2;
}
