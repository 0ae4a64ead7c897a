#include "daemon/app/descriptor_limit.h"

#include <cerrno>
#include <cstring>
#include <string>

namespace triald::daemon {

namespace {

std::string LimitText(rlim_t v) {
  return v == RLIM_INFINITY ? std::string("unlimited") : std::to_string(v);
}

}  // namespace

common::Result<DescriptorLimit> RaiseDescriptorLimit(const common::Logger& log) {
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) {
    return common::ErrnoError("getrlimit(RLIMIT_NOFILE)", errno);
  }
  DescriptorLimit out{lim.rlim_cur, lim.rlim_cur, lim.rlim_max};
  if (lim.rlim_cur == lim.rlim_max) {
    log->info("descriptor limit {} (the hard limit already)", LimitText(lim.rlim_cur));
    return out;
  }
  struct rlimit raised = {lim.rlim_max, lim.rlim_max};
  if (::setrlimit(RLIMIT_NOFILE, &raised) != 0) {
    // The hard limit may be "unlimited" where the kernel caps it lower (fs.nr_open).
    const int err = errno;
    log->warn("descriptor limit stays {}: raising it to the hard limit {} failed: {}",
              LimitText(lim.rlim_cur), LimitText(lim.rlim_max), std::strerror(err));
    return out;
  }
  out.after = lim.rlim_max;
  log->info("descriptor limit raised from {} to the hard limit {}", LimitText(lim.rlim_cur),
            LimitText(lim.rlim_max));
  return out;
}

}  // namespace triald::daemon
