#include "daemon/scheduler/study_fork_servers.h"

#include <utility>

namespace triald::daemon {

StudyForkServers::StudyForkServers(Options options) : options_(std::move(options)) {
  if (options_.launcher != nullptr) {
    options_.launcher->SetForkServerListener(
        [this](const launcher::ForkServerEvent& ev) { OnEvent(ev); });
  }
}

StudyForkServers::~StudyForkServers() {
  if (options_.launcher != nullptr) options_.launcher->SetForkServerListener(nullptr);
}

void StudyForkServers::OnEvent(const launcher::ForkServerEvent& ev) {
  const StudyCache* study = options_.find_study ? options_.find_study(ev.key) : nullptr;
  if (study == nullptr) return;
  const char* kind = launcher::ForkServerEventName(ev.kind);
  if (ev.kind == launcher::ForkServerEvent::Kind::kStarted) {
    options_.logger->info("study {}: fork server ready ({})", ev.key, ev.detail);
  } else {
    options_.logger->warn("study {}: {}: {}", ev.key, kind, ev.detail);
  }
  options_.recorder->Event(study, nullptr, kind, ev.detail);
}

std::optional<launcher::ForkServerStatus> StudyForkServers::Status(
    const StudyRuntime& study) const {
  if (!study.spec.objective.fork_server) return std::nullopt;
  std::optional<launcher::ForkServerStatus> st =
      options_.launcher->fork_server_status(study.record.name);
  if (!st) {
    st.emplace();
    st->state = "not started";  // no trial has been launched since the study became active
  }
  return st;
}

void StudyForkServers::Release(const StudyRuntime& study) {
  if (study.spec.objective.fork_server) options_.launcher->ReleaseForkServer(study.record.name);
}

void StudyForkServers::ReleaseAll() { options_.launcher->ReleaseAllForkServers(); }

}  // namespace triald::daemon
