#include "worker/clone_parent.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

namespace triald::worker {

std::optional<CloneParent> CloneParent::Probe(std::string* why) {
#if !defined(__x86_64__) && !defined(__aarch64__)
  *why = "clone(CLONE_PARENT) is used on x86_64 and aarch64 only";
  return std::nullopt;
#else
  // glibc's description of struct pthread's tid member for libthread_db: {bits, count, offset}.
  const auto* desc = static_cast<const uint32_t*>(::dlsym(RTLD_DEFAULT, "_thread_db_pthread_tid"));
  if (desc == nullptr) {
    *why = "the C library does not describe its thread descriptor (not glibc)";
    return std::nullopt;
  }
  if (desc[0] != 32 || desc[1] != 1 || desc[2] > (1u << 16)) {
    *why = "glibc's description of the thread id is unexpected";
    return std::nullopt;
  }
  auto* self = reinterpret_cast<char*>(::pthread_self());
  void* tid_field = self + desc[2];
  int32_t stored = 0;
  std::memcpy(&stored, tid_field, sizeof stored);
  if (stored != static_cast<int32_t>(::syscall(SYS_gettid))) {
    *why = "glibc's thread descriptor does not hold this thread's id where it says";
    return std::nullopt;
  }
  void* head = nullptr;
  size_t len = 0;
  if (::syscall(SYS_get_robust_list, 0, &head, &len) != 0 || head == nullptr) {
    *why = std::string("get_robust_list failed: ") + std::strerror(errno);
    return std::nullopt;
  }
  return CloneParent(tid_field, head, len);
#endif
}

bool CloneParent::RobustListEmpty() const {
  void* first = nullptr;
  std::memcpy(&first, robust_head_, sizeof first);
  return first == robust_head_;
}

bool CloneParent::Unsupported(int error) {
  return error == EINVAL || error == ENOSYS || error == EPERM;
}

pid_t CloneParent::operator()() const {
  const unsigned long flags = CLONE_PARENT | CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD;
#if defined(__aarch64__)
  // clone(flags, stack, parent_tid, tls, child_tid)
  const long pid = ::syscall(SYS_clone, flags, nullptr, nullptr, nullptr, tid_field_);
#else
  // clone(flags, stack, parent_tid, child_tid, tls)
  const long pid = ::syscall(SYS_clone, flags, nullptr, nullptr, tid_field_, nullptr);
#endif
  if (pid == 0) ::syscall(SYS_set_robust_list, robust_head_, robust_len_);
  return static_cast<pid_t>(pid);
}

size_t CollapseToHugePages() {
  constexpr int kMadvCollapse = 25;  // linux/mman.h, Linux 6.1
  uint64_t huge = 0;
  std::ifstream("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size") >> huge;
  if (huge == 0 || (huge & (huge - 1)) != 0) return 0;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    std::istringstream in(line);
    std::string span, perms, offset, device, inode, path;
    in >> span >> perms >> offset >> device >> inode >> path;
    if (!(path.empty() || path == "[heap]") || perms.size() < 4 || perms.compare(0, 2, "rw") != 0 ||
        perms[3] != 'p') {
      continue;
    }
    const size_t dash = span.find('-');
    if (dash == std::string::npos) continue;
    uint64_t start = std::stoull(span.substr(0, dash), nullptr, 16);
    uint64_t end = std::stoull(span.substr(dash + 1), nullptr, 16);
    start = (start + huge - 1) & ~(huge - 1);
    end &= ~(huge - 1);
    if (end > start) ranges.emplace_back(start, end - start);
  }
  for (const auto& [start, length] : ranges) {
    (void)::madvise(reinterpret_cast<void*>(start), length, kMadvCollapse);
  }
  std::ifstream rollup("/proc/self/smaps_rollup");
  for (std::string line; std::getline(rollup, line);) {
    if (line.rfind("AnonHugePages:", 0) == 0) return std::stoull(line.substr(14)) * 1024;
  }
  return 0;
}

}  // namespace triald::worker
