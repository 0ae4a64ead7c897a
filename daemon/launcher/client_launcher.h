#pragma once
// ClientLauncher: the Launcher of trials that run in a client program ([objective] kind =
// "client", LaunchSpec::client): ask and tell (proto/README.md, "Ask and tell"). The program
// sent the control verb `ask` on a connection, and the control server handed that connection
// over; the trial's "process" is that connection. Every other spec goes to the launcher it
// wraps.
//
// Life of a client's trial, as the Launcher contract has it (launcher.h):
//   Launch()   writes the ask's reply on the connection: {"ok":true,"result":{"study", "trial",
//              "params", "n_objectives", "retry_history"?}}; started() is true at once (no
//              on_started) and identity() is empty (pid 0: no process).
//   lines      the trial channel's lines (proto/report.h) the program sends, read with the same
//              cap, strictness, max_report_bytes and stall_timeout as a worker's; its requests
//              (suggest, should_prune) are answered with Answer() on the same connection.
//   the end    the program closes the connection (shutdown or close): on_exit, with exit code
//              0 after a final or pruned line (the scheduler's ClassifyExit judges them as a
//              worker's), code 1 after an error line without either (tell FAIL: FAIL(exit),
//              "the client told FAIL; worker said: ..."), else FAIL(lost): "the client's
//              connection closed before it told the trial's result" (a crashed notebook or
//              script), which [study] retry_on retries by default. The daemon's side closes
//              only after on_exit has run: a program that reads EOF after telling finds its
//              trial ended (its next ask sees the slot free).
//   Stop()     (trial_timeout, a prune, cancel, shutdown, a protocol error) answers the next
//              request with an error line naming why, ends its write side (the program reads
//              EOF after it), and closes the connection after kill_grace unless the program
//              closes it first; on_exit names the stop reason. StopAfterGrace() leaves the
//              program kill_grace to end by itself (it learns of a prune through should_prune)
//              before Stop().
// Nothing of the host is used: no fork, no folder, no logs, no cgroup; the outcome's resources
// hold the wall time only.
//
// Thread-safety: as Launcher: the event-loop thread only.

#include <boost/asio/io_context.hpp>
#include <memory>
#include <optional>
#include <string>

#include "common/logging.h"
#include "daemon/launcher/launcher.h"

namespace triald::launcher {

class ClientLauncher final : public Launcher {
 public:
  struct Options {
    boost::asio::io_context* io = nullptr;
    Launcher* next = nullptr;  // every trial that is not a client's (not owned)
    common::Logger logger;
  };
  explicit ClientLauncher(Options options) : options_(std::move(options)) {}

  LaunchResult Launch(const LaunchSpec& spec, TrialCallbacks callbacks) override;

  void SetForkServerListener(std::function<void(const ForkServerEvent&)> listener) override {
    options_.next->SetForkServerListener(std::move(listener));
  }
  void ReleaseForkServer(const std::string& key) override { options_.next->ReleaseForkServer(key); }
  void ReleaseAllForkServers() override { options_.next->ReleaseAllForkServers(); }
  std::optional<ForkServerStatus> fork_server_status(const std::string& key) const override {
    return options_.next->fork_server_status(key);
  }

 private:
  Options options_;
};

// The reply to `ask` that Launch() writes for `spec` (one line, newline included), from the
// spec's environment (TRIALD_STUDY, TRIALD_TRIAL, TRIALD_PARAMS, TRIALD_N_OBJECTIVES,
// TRIALD_RETRY_HISTORY) and its trial_timeout.
std::string AskReply(const LaunchSpec& spec);

}  // namespace triald::launcher
