#pragma once
// Ask and tell: the studies whose trials run in a client program ([objective] kind = "client").
// Such a study starts a trial only while an `ask` is being served (Scheduler::Ask: the asking
// connection is StudyRuntime::ask for the length of one Pump), and the trial runs in the
// program, on that connection (launcher/client_launcher.h). So an ask either gets a trial at
// once, in the order the other studies' trials would (a retry or an enqueued trial first, then
// a new sample), or is refused, saying why: the program never waits on a daemon that cannot
// answer, and triald holds no connection for a trial that has not begun.
//
// Its trials count toward n_trials and parallelism like any (parallelism: trials asked and not
// yet told), never toward max_workers (no process runs here), and end as the connection says
// (ClientLauncher). A retry ([study] retries, retry_on: by default "lost", a program that went
// away before it told) waits for the next ask.
//
// Thread-safety: pure functions; thread-safe.

#include <string>

#include "common/status.h"
#include "daemon/model/records.h"
#include "daemon/scheduler/study_runtime.h"

namespace triald::daemon {

// Whether trials of `study` run in a client program (and start only when asked).
bool IsClientStudy(const StudyRuntime& study);

// Why an ask on `study` (active, kind "client") got no trial, from what the scheduler's
// CanStart and NextTrial look at. `storage_held`/`storage_reason`: storage refusing writes.
common::Status AskRefused(const StudyRuntime& study, bool shutting_down, bool storage_held,
                          const std::string& storage_reason);

// Why an ask on study `name` cannot be served here: it is not active on this node (`record`:
// the stored study, null when there is none), or its trials are started by triald.
common::Status AskOnInactive(const std::string& name, const model::StudyRecord* record);
common::Status AskOnNonClient(const StudyRuntime& study);

}  // namespace triald::daemon
