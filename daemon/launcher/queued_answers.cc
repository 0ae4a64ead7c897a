#include "daemon/launcher/queued_answers.h"

#include <sys/socket.h>

#include <cerrno>

#include "daemon/launcher/launcher.h"

namespace triald::launcher {

void QueueAnswer(std::string* queued, const std::string& line) {
  *queued += line;
  if (line.empty() || line.back() != '\n') *queued += '\n';
}

std::optional<std::string> AnswerBacklogError(std::string* queued, const std::string& reader,
                                              const std::string& where) {
  if (queued->size() <= kMaxAnswerBacklogBytes) return std::nullopt;
  const size_t unread = queued->size();
  queued->clear();
  return reader + " left " + std::to_string(unread) + " bytes of answers unread on " + where +
         " (at most " + std::to_string(kMaxAnswerBacklogBytes) + "); it must read each answer";
}

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
