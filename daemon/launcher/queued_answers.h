#pragma once
// Sending a worker the answers to its requests (suggestions, should_prune, errors) without ever
// blocking the event loop: what its socket does not take now stays queued, and the caller waits
// until the socket is writable before sending again. Shared by the process launcher (a worker's
// trial channel) and the client launcher (an asking program's connection).
//
// Thread-safety: a function of its arguments.

#include <optional>
#include <string>

namespace triald::launcher {

// Appends answer `line` to `queued`, with its newline when it has none.
void QueueAnswer(std::string* queued, const std::string& line);

// When more than kMaxAnswerBacklogBytes (launcher.h) sit unread in `queued`: drops them and
// returns the protocol error that stops the trial, naming `reader` ("the worker") and `where`
// ("the trial channel"); nullopt otherwise.
std::optional<std::string> AnswerBacklogError(std::string* queued, const std::string& reader,
                                              const std::string& where);

enum class SendQueued {
  kAll,      // everything queued was sent
  kBlocked,  // the socket is full: wait until it is writable, then send again
  kGone,     // the reader closed its end: the queue is dropped (nobody reads the answers)
};

// Sends what the stream socket `fd` takes now of `queued`, erasing what was sent; never blocks
// and never raises SIGPIPE.
SendQueued SendQueuedAnswers(int fd, std::string* queued);

}  // namespace triald::launcher
