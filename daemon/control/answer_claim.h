#pragma once
// AnswerClaim: who answers one request that a server's own thread posted to the event loop
// (control/server.h, http/server.h): the loop, or, while storage holds the loop, the server's
// thread with the loop's last answer to the same request. Exactly one answer goes out:
//   - the loop Takes the request before running it (false: answered already, skip it) and
//     Delivers before sending its answer (false: answered meanwhile, drop the answer, which for
//     the read requests answered from memory changes nothing);
//   - the server's thread AnswersFromMemory (false: the loop delivered first), and looks again
//     only while Open().
//
// Thread-safety: any thread (one atomic).

#include <atomic>

namespace triald::daemon {

class AnswerClaim {
 public:
  bool Takes() { return Move(kPosted, kLoop); }
  bool Delivers() { return Move(kLoop, kDelivered); }
  bool AnswersFromMemory() { return Move(kPosted, kMemory) || Move(kLoop, kMemory); }
  bool Open() const {
    const int s = state_.load();
    return s == kPosted || s == kLoop;
  }

 private:
  enum : int { kPosted, kLoop, kDelivered, kMemory };
  bool Move(int from, int to) { return state_.compare_exchange_strong(from, to); }
  std::atomic<int> state_{kPosted};
};

}  // namespace triald::daemon
