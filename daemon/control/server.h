#pragma once
// ControlServer: the daemon's unix-socket endpoint for trialctl (protocol in proto/control.h).
//
// Each connection is served asynchronously on the server's own thread (Threads, below).
// Requests are read into a buffer capped at proto::kMaxRequestBytes (4 MiB, enough for any sweep
// file), so an oversized, malformed or half-sent request gets an error reply and/or a closed
// connection and never stalls the daemon or other clients:
//   - a line over the cap: an invalid_argument reply, then the connection is closed;
//   - malformed JSON or an invalid request: an error reply, the connection stays usable;
//   - no complete request (up to its newline) within request_timeout_s of the connection being
//     accepted or of its previous reply: closed, with an error reply (best effort) when part of
//     a request had arrived; so an idle connection holds a slot for seconds, not minutes;
//   - a piece of a reply (1 MiB) the client does not read within request_timeout_s: closed;
//   - end of stream in the middle of a request: an error reply, then close.
// Replies are written as the verb produces them (ReplyStream, daemon/control/verbs.h): a large
// `trials` or `export` reply is read from Storage and written a page at a time.
//
// Connection slots (decided at accept from SO_PEERCRED, before anything is read): at most
// max_connections are open at once; reserved_connections of them are kept for root and the
// daemon's own uid, and any other uid may hold at most max_connections_per_uid. One more gets
// an "unavailable" reply naming the limit and is closed. So no other user can lock the owner
// out by holding connections. When the daemon runs out of descriptors, accept() fails with
// EMFILE: a spare descriptor kept for that moment is released to accept the pending
// connection, tell it "out of file descriptors" and close it, so clients get an answer and the
// event loop does not spin; without the spare, accepting pauses for 100 ms.
//
// Threads: from the moment the event loop runs (so an answer means the daemon is up), the
// socket, its connections, reading requests, the checks that need no storage (size, JSON,
// access) and writing replies run on a thread of the server's own; the verbs
// themselves (storage, the scheduler) run on the event loop, each request posted to it and its
// reply (each piece of a streamed one) posted back. `ping` never goes to the loop: it is
// answered on the server's thread from the PingBoard the loop publishes, so health checks answer
// within milliseconds while the loop waits (on a storage call that has not come back, say).
// `status STUDY` is answered there too when the loop is held by storage: once the storage's
// WaitGauge shows a wait of kMemoryAfter (kept_answers.h) and the loop has not answered (whether it
// is still busy with something else or inside this very request), the last `status` reply the loop
// gave for that study is sent, with "from_memory" saying how old it is (the loop's own answer, when
// it comes, is dropped: control/answer_claim.h). Every verb that is not a read empties those
// replies before its own reply is sent, so none of them predates a change a client was told of.
// With ControlServerOptions::reads (shared storage), the read verbs but `ping` run on the
// ReadThread (read_thread.h) with its own storage connection and no scheduler, so the loop makes
// none of their storage calls; `status` is then completed on the loop with the fields only its
// memory holds (AddStatusMemory: no storage), and is answered from its last reply when the
// ReadThread's storage has kept it waiting; a `status` read while a change ran is not kept.
// The control changes pause, resume, extend, set parallelism and cancel are stored there too,
// their study's ownership checked there (scheduler/control_change.h: StoreControl); the loop
// then follows what was stored without storage (Scheduler::FollowControl) before the reply.
// A `delete` there goes from the ReadThread (its ownership) to the loop (the study held:
// Scheduler::HoldForDelete) to the ReadThread (StoreDelete) and back (FollowDelete, or
// ReleaseDelete when refused): scheduler/study_delete.h.
// With ControlServerOptions::admissions, a `submit`'s checks (AdmitSubmission: the sweep parsed,
// its files checked as the submitter, which on a root daemon is a child process that may take
// up to kSubmitCheckSeconds, and a Slurm study's partition) run on that thread, one submission
// at a time; the loop then stores and starts the admitted study (SubmitAdmitted). Without it,
// on the loop.
//
// Who may use which verb: daemon/control/access.h (decided once per connection from the peer's
// credentials). What each verb does: the verb table in daemon/control/verbs.h. The JSON shapes
// of its replies: daemon/control/study_json.h.
//
// Thread-safety: the public calls on the event-loop thread only.

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json.hpp>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "common/fd.h"
#include "common/logging.h"
#include "common/status.h"
#include "daemon/control/access.h"
#include "daemon/control/kept_answers.h"
#include "daemon/control/ping_board.h"
#include "daemon/control/read_thread.h"
#include "daemon/control/server_thread.h"
#include "daemon/control/study_json.h"
#include "daemon/control/task_thread.h"
#include "daemon/control/verbs.h"
#include "daemon/scheduler.h"
#include "daemon/storage/storage.h"

namespace triald::daemon {

struct ControlServerOptions {
  boost::asio::io_context* io = nullptr;  // the event loop: the verbs run on it
  // What `ping` answers (required; not owned, outlives the server).
  const PingBoard* ping_board = nullptr;
  // Storage's waits (Storage::wait_gauge(); null: never known, and `status` always waits for
  // the loop). Not owned, outlives the server.
  const storage::WaitGauge* storage_wait = nullptr;
  Scheduler* scheduler = nullptr;
  storage::Storage* storage = nullptr;
  common::Logger logger;
  std::string socket_path;
  std::string state_dir;
  AccessPolicy access;
  int max_connections = 512;         // all clients together
  int reserved_connections = 32;     // of those, kept for root and the daemon's own uid (must
                                     // be fewer than max_connections)
  int max_connections_per_uid = 32;  // for any other uid
  // To send a complete request (from connecting, or from the previous reply), or to read a
  // piece of a reply.
  double request_timeout_s = 5;
  double node_timeout_s = 30;  // shared storage: `nodes` calls a node silent longer dead
  // Shared storage: the read verbs but `ping` read there, off the event loop (read_thread.h);
  // `status` is then completed on the loop from the scheduler's memory. Null: on the loop.
  std::shared_ptr<ReadThread> reads;
  // Where a `submit` is admitted, off the event loop (AdmitSubmission calls the scheduler's
  // Admit there, which must be safe to: the daemon's SchedulerEnv). Null: on the loop.
  std::shared_ptr<TaskThread> admissions;
};

class ControlServer {
 public:
  explicit ControlServer(ControlServerOptions options);
  ~ControlServer();

  // Listens on options.socket_path (ListenControlSocket with mode 0660, or 0666 when
  // access.read_open, and group access.allowed_gid) and starts accepting.
  common::Status Start();
  // Starts accepting on a socket that already listens (e.g. one passed by systemd socket
  // activation, whose mode and group the unit sets). Takes ownership.
  common::Status Start(common::UniqueFd listening_fd);
  // Stops accepting; open connections are closed after their next reply. The server's own
  // thread runs on until the server is destroyed (on the event-loop thread, after the loop has
  // stopped), so replies on their way are written.
  void Stop();

 private:
  class Connection;
  // Open connections, all together and per uid (root's and the daemon's uid's included). A
  // connection may end on either thread, hence the mutex.
  struct Slots {
    std::mutex mu;
    int total = 0;
    std::unordered_map<uid_t, int> per_uid;
  };
  void Accept();
  // Why a connection from `peer` may not be opened now (Unavailable), or Ok.
  common::Status Admit(const PeerCredentials& peer) const;
  // accept() failed with EMFILE/ENFILE: sheds one pending connection through the spare
  // descriptor: kRefusedOne (accept again), kNonePending (the backlog was empty: wait until it
  // is not), kNoSpare (no spare, or accept failed otherwise: pause).
  enum class Shed { kRefusedOne, kNonePending, kNoSpare };
  Shed ShedWithSpare();

  ControlServerOptions options_;
  // The server's own thread and io_context (server_thread.h); declared before the acceptor and
  // timer, which are served on it.
  ServerThread front_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  boost::asio::steady_timer accept_retry_;
  std::shared_ptr<Slots> slots_;
  common::UniqueFd spare_fd_;  // /dev/null, released when accept() runs out of descriptors
  bool out_of_fds_ = false;    // logged once per episode
  // The last `status` reply per study (the result's JSON), for answering while the loop waits
  // on storage (kept_answers.h); emptied by every verb that is not a read.
  KeptAnswers<std::string> status_replies_{1024};
  VerbContext verbs_;
  VerbContext read_verbs_;            // the read verbs' on options_.reads: no scheduler
  std::atomic<bool> stopped_{false};  // set on the loop, read on the server's thread
  std::atomic<uint64_t> changes_{0};  // verbs that are not reads, run (Connection::Changed)
};

}  // namespace triald::daemon
