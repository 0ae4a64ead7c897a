#pragma once
// KeptAnswers and AnswerWhileHeld: a server's last answers, and answering a request with one of
// them while storage holds the event loop (control/server.h: `status`; http/server.h: GETs).
//
// The loop Keeps each answer it gives to a request that may be answered so (keyed by what makes
// two requests the same) and Forgets them all on any change, before its own reply goes out, so
// no client is answered from before a change it was told of. The server's own thread calls
// AnswerWhileHeld for such a request: every kMemoryAfter until the request is answered (its
// AnswerClaim), it looks whether storage has kept the loop waiting that long (the WaitGauge,
// whether the loop is busy before the request or stuck inside it) and, if an answer is kept for
// the key, claims the request and answers with it. A request never answered before waits for
// the loop.
//
// Thread-safety: KeptAnswers from any thread (a mutex); AnswerWhileHeld on the server's thread.

#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "daemon/control/answer_claim.h"
#include "daemon/storage/wait_gauge.h"

namespace triald::daemon {

// How long storage must have kept the loop waiting before a request is answered from a kept
// answer, and how often a waiting request looks.
inline constexpr std::chrono::milliseconds kMemoryAfter{20};

// "0.021 s".
inline std::string SecondsText(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f s", s);
  return buf;
}

template <typename Answer>
class KeptAnswers {
 public:
  struct Kept {
    Answer answer;
    double age_s = 0;  // since the loop gave it
  };

  // At most `max` answers: one more forgets them all first.
  explicit KeptAnswers(size_t max) : max_(max) {}

  void Keep(const std::string& key, Answer answer) {
    std::lock_guard<std::mutex> lock(mu_);
    if (by_key_.size() >= max_ && by_key_.count(key) == 0) by_key_.clear();
    by_key_[key] = {std::move(answer), Clock::now()};
  }
  std::optional<Kept> Find(const std::string& key) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_key_.find(key);
    if (it == by_key_.end()) return std::nullopt;
    return Kept{it->second.first,
                std::chrono::duration<double>(Clock::now() - it->second.second).count()};
  }
  void Forget() {
    std::lock_guard<std::mutex> lock(mu_);
    by_key_.clear();
  }

 private:
  using Clock = std::chrono::steady_clock;
  const size_t max_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::pair<Answer, Clock::time_point>> by_key_;
};

// The storage waits a request may be held by: the loop's storage's, and the ReadThread's when
// it reads off the loop (read_thread.h); either may be null (never known).
struct StorageWaits {
  const storage::WaitGauge* loop = nullptr;
  const storage::WaitGauge* reads = nullptr;
  bool known() const { return loop != nullptr || reads != nullptr; }
  // The longer wait in progress; nullopt when none is.
  std::optional<std::chrono::nanoseconds> Longest() const {
    std::optional<std::chrono::nanoseconds> longest;
    for (const storage::WaitGauge* g : {loop, reads}) {
      if (g == nullptr) continue;
      const std::optional<std::chrono::nanoseconds> w = g->WaitingFor();
      if (w && (!longest || *w > *longest)) longest = w;
    }
    return longest;
  }
};

// Every kMemoryAfter on `timer` until `claim` is answered: once `waits` show a wait of
// kMemoryAfter and `kept` holds an answer for `key`, claims the request and calls
// `answer(kept, why)`, `why` saying how long storage has kept the daemon waiting and how old the
// answer is ("... this is its " + `what` + " " + age + " ago"). `answer` keeps its connection
// (and so `timer`) alive; the gauges and `kept` outlive the server's thread.
template <typename Answer, typename Fn>
void AnswerWhileHeld(boost::asio::steady_timer& timer, StorageWaits waits,
                     const KeptAnswers<Answer>& kept, std::string key, std::string what,
                     std::shared_ptr<AnswerClaim> claim, Fn answer) {
  timer.expires_after(kMemoryAfter);
  timer.async_wait([&timer, waits, &kept, key = std::move(key), what = std::move(what),
                    claim = std::move(claim),
                    answer = std::move(answer)](const boost::system::error_code& ec) mutable {
    if (ec || !claim->Open()) return;
    const std::optional<std::chrono::nanoseconds> waited = waits.Longest();
    if (!waited || *waited < kMemoryAfter) {
      AnswerWhileHeld(timer, waits, kept, std::move(key), std::move(what), std::move(claim),
                      std::move(answer));
      return;
    }
    std::optional<typename KeptAnswers<Answer>::Kept> last = kept.Find(key);
    if (!last || !claim->AnswersFromMemory()) return;  // none: the loop will answer
    answer(last->answer, "storage has kept the daemon waiting for " +
                             SecondsText(std::chrono::duration<double>(*waited).count()) +
                             "; this is its " + what + " " + SecondsText(last->age_s) + " ago");
  });
}

}  // namespace triald::daemon
