#include "daemon/control/ping_board.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "common/utf8.h"
#include "daemon/scheduler.h"

namespace triald::daemon {
namespace json = boost::json;

StorageHold StorageHoldOf(const Scheduler& scheduler) {
  StorageHold h;
  const StorageOutage& o = scheduler.storage_outage();
  if (o.held()) {
    h.held = true;
    h.reason = o.reason();
    h.failures = o.failures();
    h.retry_in_s = scheduler.storage_retry_in();
    h.writes_kept = scheduler.pending_writes().size() + scheduler.lazy_writes_queued();
  }
  return h;
}

PingFacts PingFactsOf(const Scheduler& scheduler) {
  PingFacts f;
  f.running = scheduler.running_count();
  f.queued = scheduler.queued_count();
  f.storage = StorageHoldOf(scheduler);
  return f;
}

json::value StorageHoldJson(const StorageHold& hold) {
  if (!hold.held) return nullptr;
  return json::object{{"held", true},
                      {"reason", common::SanitizeUtf8(hold.reason)},
                      {"failures", hold.failures},
                      {"retry_in_s", hold.retry_in_s},
                      {"writes_kept", hold.writes_kept}};
}

json::value PingJson(const PingFacts& facts, const std::string& state_dir, const std::string& node,
                     bool shared) {
  json::object o;
  o["storage"] = StorageHoldJson(facts.storage);
  o["pid"] = ::getpid();
  o["running"] = facts.running;
  o["queued"] = facts.queued;
  o["state_dir"] = state_dir;
  o["node"] = node;
  o["shared"] = shared;
  o["version"] = TRIALD_VERSION;  // the project's version (CMake's PROJECT_VERSION)
  return json::value(std::move(o));
}

PingBoard::PingBoard(std::string state_dir, std::string node, bool shared)
    : state_dir_(std::move(state_dir)), node_(std::move(node)), shared_(shared) {}

void PingBoard::Publish(const Scheduler& scheduler) {
  PingFacts f = PingFactsOf(scheduler);
  const Clock::time_point retry_at =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(f.storage.retry_in_s));
  std::lock_guard<std::mutex> lock(mu_);
  facts_ = std::move(f);
  retry_at_ = retry_at;
}

json::value PingBoard::Answer() const {
  PingFacts f;
  {
    std::lock_guard<std::mutex> lock(mu_);
    f = facts_;
    if (f.storage.held) {
      f.storage.retry_in_s =
          std::max(0.0, std::chrono::duration<double>(retry_at_ - Clock::now()).count());
    }
  }
  return PingJson(f, state_dir_, node_, shared_);
}

}  // namespace triald::daemon
