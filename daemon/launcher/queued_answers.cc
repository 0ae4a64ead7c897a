#include "daemon/launcher/queued_answers.h"

#include <sys/socket.h>

#include <cerrno>

namespace triald::launcher {

SendQueued SendQueuedAnswers(int fd, std::string* queued) {
  while (!queued->empty()) {
    const ssize_t n = ::send(fd, queued->data(), queued->size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      queued->erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return SendQueued::kBlocked;
    queued->clear();
    return SendQueued::kGone;
  }
  return SendQueued::kAll;
}

}  // namespace triald::launcher
