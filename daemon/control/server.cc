#include "daemon/control/server.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/clock.h"
#include "common/json.h"
#include "common/memory.h"
#include "daemon/control/kept_answers.h"
#include "daemon/control/requests.h"
#include "daemon/scheduler/study_control.h"
#include "daemon/scheduler/study_delete.h"
#include "daemon/scheduler/study_loader.h"
#include "proto/control.h"

namespace triald::daemon {
namespace asio = boost::asio;
namespace json = boost::json;
using common::Result;
using common::Status;
using Socket = asio::local::stream_protocol::socket;

// Replies larger than this are followed by common::ReturnFreedMemory().
constexpr size_t kLargeReplyBytes = 1 << 20;
// A reply is written in pieces of this size, each within request_timeout_s.
constexpr size_t kSendPieceBytes = 1 << 20;

// One client connection: reads request lines into a capped buffer and answers each in order.
// Only one request is handled at a time and nothing more is read until its reply is written,
// so a client cannot make the daemon buffer more than one request and one piece of a reply.
class ControlServer::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(ControlServer* server, Socket socket, PeerCredentials peer)
      : server_(server),
        socket_(std::move(socket)),
        peer_(std::move(peer)),
        access_(DecideAccess(server_->options_.access, peer_)),
        deadline_(socket_.get_executor()),
        memory_check_(socket_.get_executor()) {
    context_ = server_->verbs_;
    context_.caller = &peer_;  // submit records it as the study's submitter
    read_context_ = server_->read_verbs_;
    read_context_.caller = &peer_;
  }

  void Start() {
    slots_ = server_->slots_;
    {
      std::lock_guard<std::mutex> lock(slots_->mu);
      ++slots_->total;
      ++slots_->per_uid[peer_.uid];
    }
    waiting_since_ = Clock::now();
    Pump();
  }
  // On either thread (the last reference may be a request's on the loop).
  ~Connection() {
    if (!slots_) return;
    std::lock_guard<std::mutex> lock(slots_->mu);
    --slots_->total;
    auto it = slots_->per_uid.find(peer_.uid);
    if (it != slots_->per_uid.end() && --it->second <= 0) slots_->per_uid.erase(it);
  }

 private:
  using Clock = std::chrono::steady_clock;

  static Clock::duration Seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }

  // Answers the next complete request, or reads more.
  void Pump() {
    size_t nl = pending_.find('\n', scanned_);
    if (nl != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      scanned_ = 0;
      Answer(line);
      return;
    }
    scanned_ = pending_.size();
    if (pending_.size() > proto::kMaxRequestBytes) {
      Reply(proto::EncodeError(common::InvalidArgument(
                "request larger than " + std::to_string(proto::kMaxRequestBytes) +
                " bytes (the limit; a sweep file travels inside \"submit\")")),
            /*close_after=*/true);
      return;
    }
    if (eof_) {
      if (pending_.empty()) {
        Close();
      } else {
        Reply(proto::EncodeError(
                  common::InvalidArgument("incomplete request: " + std::to_string(pending_.size()) +
                                          " bytes without a newline before the end of the stream")),
              /*close_after=*/true);
      }
      return;
    }
    ReadSome();
  }

  void ReadSome() {
    auto self = shared_from_this();
    const ControlServerOptions& o = server_->options_;
    // One deadline from the moment the daemon waits for a request: an idle connection and a
    // half-sent request are both closed request_timeout_s later.
    Arm(waiting_since_ + Seconds(o.request_timeout_s),
        pending_.empty()
            ? std::string()
            : "request not completed (no newline) within " + FormatSeconds(o.request_timeout_s));
    socket_.async_read_some(asio::buffer(chunk_),
                            [self](const boost::system::error_code& ec, size_t n) {
                              self->Disarm();
                              if (ec == asio::error::eof) {
                                self->eof_ = true;
                              } else if (ec) {
                                self->Close();  // reset, or closed by the deadline
                                return;
                              } else {
                                self->pending_.append(self->chunk_.data(), n);
                              }
                              self->Pump();
                            });
  }

  // Checks one request line (on the server's thread), answers `ping` there and runs
  // any other verb on the event loop; its reply is written piece by piece.
  void Answer(const std::string& line) {
    Result<proto::Request> req = proto::ParseRequest(line);
    if (!req.ok()) return Reply(proto::EncodeError(req.status()), false);
    if (!Permits(access_, IsReadVerb(req->verb))) {
      server_->options_.logger->warn(
          "control socket: denied \"{}\" to uid {} gid {} pid {} (access {})", req->verb, peer_.uid,
          peer_.gid, peer_.pid, AccessName(access_));
      return Reply(
          proto::EncodeError(DenialFor(server_->options_.access, peer_, access_, req->verb)),
          /*close_after=*/access_ == Access::kNone);
    }
    if (req->verb == "ping") {
      return Reply("{\"ok\":true,\"result\":" +
                       json::serialize(server_->options_.ping_board->Answer()) + "}\n",
                   false);
    }
    // A read verb on shared storage reads on the ReadThread (read_thread.h), off the loop, as
    // does a mutating verb that only reads storage (`code`), its ownership checked there.
    const bool off_loop = server_->options_.reads != nullptr && NeedsStorageOnly(req->verb);
    // Who answers: the loop (or the ReadThread), or (`status` while storage holds the one that
    // reads) this thread.
    auto claim = std::make_shared<AnswerClaim>();
    // Off the loop, `status` waits on the ReadThread's storage, then on the loop (which may be
    // inside a storage call of its own): either wait counts.
    const StorageWaits waits =
        RequestWaits(server_->options_.storage_wait, server_->options_.reads, off_loop);
    if (req->verb == "status" && waits.known()) {
      if (std::optional<std::string> study = StudyOf(*req)) {
        AnswerWhileHeld(
            memory_check_, waits, server_->status_replies_, *study, "status as the daemon gave it",
            claim, [self = shared_from_this()](const std::string& result, const std::string& why) {
              json::value v = json::parse(result);
              v.as_object()["from_memory"] = why;
              self->Reply("{\"ok\":true,\"result\":" + json::serialize(v) + "}\n", false);
            });
      }
    }
    if (off_loop) {
      OnReads([req = std::move(*req), claim](Connection& c) { c.RunRead(req, claim); });
      return;
    }
    // A control change on shared storage is stored on the ReadThread too, then followed on the
    // loop (control_change.h); bad arguments are answered on the loop as before.
    if (server_->options_.reads != nullptr) {
      if (Result<std::optional<ControlChange>> change = ControlChangeOf(req->verb, req->args);
          change.ok() && change->has_value()) {
        OnReads([req = std::move(*req), change = std::move(**change), claim](Connection& c) {
          c.StoreChange(req, change, claim);
        });
        return;
      }
    }
    // A delete on shared storage: its ownership checked on the ReadThread, the study held on
    // the loop, the deletion stored on the ReadThread, then followed on the loop
    // (scheduler/study_delete.h); bad arguments are answered here.
    if (server_->options_.reads != nullptr && req->verb == "delete") {
      Result<DeleteArgs> args = DecodeDelete(req->args);
      if (!args.ok()) return Reply(proto::EncodeError(args.status()), false);
      OnReads([req = std::move(*req), args = std::move(*args), claim](Connection& c) {
        c.AuthorizeDelete(req, args, claim);
      });
      return;
    }
    // An enqueue on shared storage: its ownership and the study's record checked on the
    // ReadThread, then decided on the loop and stored by the protocol's reads
    // (Scheduler::EnqueueOffLoop).
    if (server_->options_.reads != nullptr && req->verb == "enqueue") {
      Result<EnqueueArgs> args = DecodeEnqueue(req->args);
      if (!args.ok()) return Reply(proto::EncodeError(args.status()), false);
      OnReads([req = std::move(*req), args = std::move(*args), claim](Connection& c) {
        c.CheckEnqueue(req, args, claim);
      });
      return;
    }
    // A submission's checks run on the admissions thread; the loop stores and starts it.
    if (req->verb == "submit" && server_->options_.admissions != nullptr) {
      server_->options_.admissions->Post(
          server_->front_.shared_io(), shared_from_this(),
          [req = std::move(*req), claim](Connection& c) { c.AdmitSubmit(req, claim); });
      return;
    }
    OnLoop([req = std::move(*req), fd = socket_.native_handle(), more = !pending_.empty(),
            claim](Connection& c) { c.RunVerb(req, fd, more, *claim); });
  }

  // The admissions thread: a `submit` checked (AdmitSubmission, nothing stored); refused here,
  // or stored and started on the loop (SubmitAdmitted).
  void AdmitSubmit(const proto::Request& req, const std::shared_ptr<AnswerClaim>& claim) {
    Result<Submission> admitted = AdmitSubmission(context_, req.args);
    if (!admitted.ok()) {
      if (claim->Takes()) Deliver(*claim, proto::EncodeError(admitted.status()));
      return;
    }
    auto held = std::make_shared<Submission>(std::move(admitted).value());
    OnLoop([req, claim, held](Connection& c) { c.RunSubmit(req, claim, std::move(*held)); });
  }

  // Event loop: an admitted `submit`, stored and started (SubmitAdmitted); on shared storage a
  // new study is built here, stored on the ReadThread, then started here (StoreSubmission).
  void RunSubmit(const proto::Request& req, const std::shared_ptr<AnswerClaim>& claim,
                 Submission admitted) {
    if (!claim->Takes()) return;
    Changed(req);
    if (server_->options_.reads == nullptr ||
        !Scheduler::MakesNewStudy(admitted.source, admitted.spec)) {
      return DeliverResult(req, *claim, SubmitAdmitted(context_, std::move(admitted)));
    }
    Result<PreparedStudy> prepared = context_.scheduler->PrepareSubmitted(
        admitted.source, std::move(admitted.spec), admitted.submitter);
    if (!prepared.ok()) return DeliverResult(req, *claim, prepared.status());
    auto study = std::make_shared<PreparedStudy>(std::move(prepared).value());
    OnReads([req, claim, study](Connection& c) { c.StoreSubmission(req, claim, study); });
  }

  // ReadThread: a new study stored with the thread's storage (StudyLoader::StoreSubmitted);
  // then, on the loop, started (Scheduler::AddSubmitted) or, refused, dropped there.
  void StoreSubmission(const proto::Request& req, const std::shared_ptr<AnswerClaim>& claim,
                       const std::shared_ptr<PreparedStudy>& study) {
    Result<model::StudyRecord> stored =
        StudyLoader::StoreSubmitted(*read_context_.storage, *study,
                                    common::SystemClock().WallSeconds(), server_->options_.logger);
    OnLoop([req, claim, study, stored = std::move(stored)](Connection& c) {
      if (!stored.ok()) return c.DeliverResult(req, *claim, stored.status());
      const model::StudyRecord rec = c.context_.scheduler->AddSubmitted(std::move(*study), *stored);
      c.DeliverResult(req, *claim, SubmittedReply(rec, /*resumed=*/false));
    });
  }

  // ReadThread: a `delete` on shared storage, its study's ownership checked; then held on the
  // loop (Scheduler::HoldForDelete).
  void AuthorizeDelete(const proto::Request& req, const DeleteArgs& args,
                       const std::shared_ptr<AnswerClaim>& claim) {
    if (!claim->Takes()) return;
    Changed(req);
    if (Status owner = Authorize(*read_context_.storage, req); !owner.ok()) {
      return DeliverResult(req, *claim, owner);
    }
    OnLoop([req, args, claim](Connection& c) {
      Result<DeleteHold> hold = c.context_.scheduler->HoldForDelete(args.study);
      if (!hold.ok()) return c.DeliverResult(req, *claim, hold.status());
      c.OnReads([req, args, claim, hold = std::move(hold).value()](Connection& c) {
        c.StoreDeletion(req, args, claim, hold);
      });
    });
  }

  // ReadThread: the deletion decided and stored (StoreDelete); then, on the loop, followed
  // (Scheduler::FollowDelete) or, refused, the hold released.
  void StoreDeletion(const proto::Request& req, const DeleteArgs& args,
                     const std::shared_ptr<AnswerClaim>& claim, const DeleteHold& hold) {
    Result<DeleteStored> stored =
        StoreDelete(*read_context_.storage, hold, args.purge, common::SystemClock().WallSeconds());
    OnLoop([req, args, claim, hold, stored = std::move(stored)](Connection& c) {
      Scheduler& scheduler = *c.context_.scheduler;
      if (!stored.ok()) {
        scheduler.ReleaseDelete(hold);
        return c.DeliverResult(req, *claim, stored.status());
      }
      Result<int64_t> deleted = scheduler.FollowDelete(*stored, args.purge);
      if (!deleted.ok()) return c.DeliverResult(req, *claim, deleted.status());
      c.DeliverResult(req, *claim, DeletedReply(args.study, *deleted, args.purge));
    });
  }

  // ReadThread: an `enqueue` on shared storage, its study's ownership and state checked as the
  // verb checks them; then, on the loop, enqueued off it (or, where the scheduler writes on the
  // loop, as the verb does).
  void CheckEnqueue(const proto::Request& req, const EnqueueArgs& args,
                    const std::shared_ptr<AnswerClaim>& claim) {
    if (!claim->Takes()) return;
    Changed(req);
    if (Status owner = Authorize(*read_context_.storage, req); !owner.ok()) {
      return DeliverResult(req, *claim, owner);
    }
    Result<model::StudyRecord> rec = read_context_.storage->GetStudy(args.study);
    if (!rec.ok() && rec.status().code() == common::Code::kNotFound) {
      return DeliverResult(req, *claim, NoStudyNamed(args.study));
    }
    if (!rec.ok()) return DeliverResult(req, *claim, rec.status());
    if (rec->state != model::StudyState::kRunning) {
      return DeliverResult(req, *claim, StudyControl::NotRunning(args.study, rec->state));
    }
    OnLoop([req, args, claim](Connection& c) {
      const bool taken = c.context_.scheduler->EnqueueOffLoop(
          args.study, args.params, args.skip_if_exists,
          [self = c.shared_from_this(), req, study = args.study, claim](
              Result<model::TrialRecord> trial, bool skipped) {
            if (!trial.ok()) return self->DeliverResult(req, *claim, trial.status());
            self->DeliverResult(req, *claim, EnqueuedReply(study, *trial, skipped));
          });
      if (!taken) c.DeliverResult(req, *claim, HandleVerb(c.context_, req.verb, req.args));
    });
  }

  // The reply of a verb that is not a read: its result or its error.
  void DeliverResult(const proto::Request& req, AnswerClaim& claim, Result<json::value> result) {
    Changed(req);
    Deliver(claim, result.ok() ? "{\"ok\":true,\"result\":" + common::SerializeJson(*result) + "}\n"
                               : proto::EncodeError(result.status()));
  }

  // ReadThread: runs a read verb (or a storage-only one, its ownership checked first) with the
  // thread's storage; `status` is then completed on the loop with what the scheduler's memory
  // holds (FinishStatus). A `status` the storage could not answer goes to the loop as it is (its
  // memory answers for an active study).
  void RunRead(const proto::Request& req, const std::shared_ptr<AnswerClaim>& claim) {
    if (!claim->Takes()) return;
    auto reply = [this, &claim](std::string text) { Deliver(*claim, std::move(text)); };
    if (Status owner = Authorize(*read_context_.storage, req); !owner.ok()) {
      return reply(proto::EncodeError(owner));
    }
    if (req.verb == "status") {
      const uint64_t changes = server_->changes_.load();
      Result<json::value> read = HandleVerb(read_context_, req.verb, req.args);
      if (!read.ok() && (read.status().code() == common::Code::kUnavailable ||
                         read.status().code() == common::Code::kIo)) {
        OnLoop([req, claim](Connection& c) { c.RunVerb(req, -1, false, *claim, /*taken=*/true); });
        return;
      }
      if (!read.ok()) return reply(proto::EncodeError(read.status()));
      OnLoop([req, claim, changes, read = std::move(read).value()](Connection& c) mutable {
        c.FinishStatus(req, std::move(read), changes, *claim);
      });
      return;
    }
    Result<std::unique_ptr<ReplyStream>> stream = StartVerb(read_context_, req.verb, req.args);
    if (!stream.ok()) return reply(proto::EncodeError(stream.status()));
    Result<std::string> first = (*stream)->Next();
    if (!first.ok()) return reply(proto::EncodeError(first.status()));
    DeliverStream(*claim, req.verb, std::move(*stream), std::move(*first), /*on_reads=*/true);
  }

  // ReadThread: a control change (pause, resume, extend, set parallelism, cancel), its
  // study's ownership checked and the change stored with the thread's storage; the scheduler's
  // memory then follows on the loop (FollowChange) before the reply goes out.
  void StoreChange(const proto::Request& req, const ControlChange& change,
                   const std::shared_ptr<AnswerClaim>& claim) {
    if (!claim->Takes()) return;
    Changed(req);
    auto reply = [this, &claim, &req](std::string text) {
      Changed(req);
      Deliver(*claim, std::move(text));
    };
    if (Status owner = Authorize(*read_context_.storage, req); !owner.ok()) {
      return reply(proto::EncodeError(owner));
    }
    Result<ControlStored> stored =
        StoreControl(*read_context_.storage, change, common::SystemClock().WallSeconds());
    if (!stored.ok()) return reply(proto::EncodeError(stored.status()));
    OnLoop([req, change, stored = std::move(stored).value(), claim](Connection& c) {
      c.FollowChange(req, change, stored, *claim);
    });
  }

  // Whether the peer may use `req`'s verb on its study as far as ownership goes
  // (AuthorizeStudyVerb, reading `storage`: the loop's or the ReadThread's); a denial is logged.
  Status Authorize(storage::ReadModel& storage, const proto::Request& req) {
    Status owner = AuthorizeStudyVerb(storage, server_->options_.access, peer_, req.verb, req.args);
    if (!owner.ok()) {
      server_->options_.logger->warn("control socket: denied \"{}\" to uid {} pid {}: {}", req.verb,
                                     peer_.uid, peer_.pid, owner.message());
    }
    return owner;
  }

  // Event loop: the scheduler follows a change StoreChange stored; then its reply.
  void FollowChange(const proto::Request& req, const ControlChange& change,
                    const ControlStored& stored, AnswerClaim& claim) {
    Status followed = context_.scheduler->FollowControl(stored);
    Changed(req);
    if (!followed.ok()) return Deliver(claim, proto::EncodeError(followed));
    Deliver(claim, "{\"ok\":true,\"result\":" +
                       common::SerializeJson(ControlStoredReply(change, stored)) + "}\n");
  }

  // The reply `text` goes back to be written, unless the server's thread answered already.
  void Deliver(AnswerClaim& claim, std::string text) {
    if (!claim.Delivers()) return;
    OnFront([self = shared_from_this(), text = std::move(text)]() mutable {
      self->Reply(std::move(text), false);
    });
  }

  // The same for a reply whose first piece is `first`: the rest comes from `stream`, on the loop
  // (stream_) or, `on_reads`, on the ReadThread (read_stream_).
  void DeliverStream(AnswerClaim& claim, const std::string& verb,
                     std::unique_ptr<ReplyStream> stream, std::string first, bool on_reads) {
    if (!claim.Delivers()) return;
    (on_reads ? read_stream_ : stream_) = std::move(stream);
    verb_ = verb;
    OnFront([self = shared_from_this(), piece = "{\"ok\":true,\"result\":" + std::move(first),
             on_reads] { self->Write(piece, on_reads); });
  }

  // Event loop: a `status` read off the loop (`changes`: changes_ before it was read), completed
  // with the scheduler's memory (no storage), kept for answering while storage holds the reads,
  // and sent.
  void FinishStatus(const proto::Request& req, json::value read, uint64_t changes,
                    AnswerClaim& claim) {
    const std::optional<std::string> study = StudyOf(req);
    if (study && read.is_object()) AddStatusMemory(context_, *study, &read.as_object());
    std::string text = json::serialize(read);
    // Not when a change came while it was read: it may be from before that change.
    if (study && changes == server_->changes_.load()) server_->status_replies_.Keep(*study, text);
    Deliver(claim, "{\"ok\":true,\"result\":" + std::move(text) + "}\n");
  }

  // The request's "study" argument, when it is a string.
  static std::optional<std::string> StudyOf(const proto::Request& req) {
    const json::value* study = req.args.if_contains("study");
    if (study == nullptr || !study->is_string()) return std::nullopt;
    return std::string(study->as_string());
  }

  // Event loop: runs the request's verb; its first piece (or its error) goes back to be written.
  // `fd`: the socket's descriptor; `more`: whether bytes past the request had arrived; `claim`:
  // nothing is done when the server's thread has answered already (AnswerWhileHeld).
  // A change may make the kept `status` replies wrong: none outlives a verb that is not a read
  // (before it runs and again before its reply), so no client is answered from before a change
  // it was told of; and a `status` read off the loop while one ran is not kept (changes_).
  void Changed(const proto::Request& req) {
    if (IsReadVerb(req.verb)) return;
    server_->changes_.fetch_add(1);
    server_->status_replies_.Forget();
  }

  // `taken`: the claim was taken already (a `status` the ReadThread passed on).
  void RunVerb(const proto::Request& req, int fd, bool more, AnswerClaim& claim,
               bool taken = false) {
    if (!taken && !claim.Takes()) return;
    Changed(req);
    auto reply = [this, &claim, &req](std::string text) {
      Changed(req);
      Deliver(claim, std::move(text));
    };
    if (Status owner = Authorize(*server_->options_.storage, req); !owner.ok()) {
      return reply(proto::EncodeError(owner));
    }
    if (const Verb* v = FindVerb(req.verb); v != nullptr && v->handover != nullptr) {
      return HandOver(*v, req.args, fd, more);
    }
    Result<std::unique_ptr<ReplyStream>> stream = StartVerb(context_, req.verb, req.args);
    if (!stream.ok()) return reply(proto::EncodeError(stream.status()));
    // An error before the first piece is still an ordinary error reply.
    Result<std::string> first = (*stream)->Next();
    if (!first.ok()) return reply(proto::EncodeError(first.status()));
    if (req.verb == "status" && server_->options_.storage_wait != nullptr) {
      // The whole result (`status` is not streamed), for answering while storage holds the loop.
      if (std::optional<std::string> study = StudyOf(req)) {
        server_->status_replies_.Keep(*study, *first);
      }
    }
    Changed(req);
    DeliverStream(claim, req.verb, std::move(*stream), std::move(*first), /*on_reads=*/false);
  }

  // Event loop: a verb that takes the connection over (ask): on success the callee has written
  // the reply on its duplicate of the socket (`fd`'s) and owns the connection; this side closes
  // its descriptor without shutting the socket down.
  void HandOver(const Verb& verb, const json::object& args, int fd, bool more) {
    auto reply = [this](std::string text, bool close_after) {
      OnFront([self = shared_from_this(), text = std::move(text), close_after]() mutable {
        self->Reply(std::move(text), close_after);
      });
    };
    if (more) {
      return reply(proto::EncodeError(common::InvalidArgument(
                       "\"" + std::string(verb.name) +
                       "\" takes the connection over: send nothing after it before its reply")),
                   /*close_after=*/true);
    }
    const int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup < 0) {
      return reply(proto::EncodeError(common::Unavailable(
                       std::string("cannot take the connection over: ") + std::strerror(errno))),
                   false);
    }
    auto connection = std::make_shared<common::UniqueFd>(dup);
    Status st = verb.handover(context_, args, connection);
    if (!st.ok()) return reply(proto::EncodeError(st), false);
    OnFront([self = shared_from_this()] {
      boost::system::error_code ignored;
      self->Disarm();
      self->socket_.close(ignored);  // the trial's side holds the socket open
    });
  }

  // Writes one piece of a streamed reply, then asks the event loop (or, `on_reads`, the
  // ReadThread) for the next.
  void Write(std::string piece, bool on_reads) {
    Send(std::move(piece), [this, on_reads] {
      if (on_reads) {
        OnReads([](Connection& c) { c.NextPiece(c.read_stream_, true); });
      } else {
        OnLoop([](Connection& c) { c.NextPiece(c.stream_, false); });
      }
    });
  }

  // Event loop (the ReadThread for read_stream_): the next piece of the reply being streamed,
  // handed back to be written.
  void NextPiece(std::unique_ptr<ReplyStream>& stream, bool on_reads) {
    if (!stream) return;  // closed meanwhile
    Result<std::string> next = stream->Next();
    if (!next.ok()) {
      // Part of the reply is out: the client gets it cut short, never a wrong ending.
      server_->options_.logger->warn("control socket: \"{}\" reply to pid {} cut short: {}", verb_,
                                     peer_.pid, next.status().message());
      stream.reset();
      OnFront([self = shared_from_this()] { self->Close(); });
      return;
    }
    if (next->empty()) {
      stream.reset();
      OnFront([self = shared_from_this()] { self->Reply("}\n", false); });
      return;
    }
    OnFront([self = shared_from_this(), piece = std::move(*next), on_reads]() mutable {
      self->Write(std::move(piece), on_reads);
    });
  }

  // Runs `fn(*this)` on the event loop.
  template <typename Fn>
  void OnLoop(Fn fn) {
    server_->front_.PostToLoop(shared_from_this(), std::move(fn));
  }
  // Runs `fn(*this)` on the ReadThread (options.reads).
  template <typename Fn>
  void OnReads(Fn fn) {
    server_->options_.reads->Post(server_->front_.shared_io(), shared_from_this(), std::move(fn));
  }
  // Runs `fn` on the server's thread.
  template <typename Fn>
  void OnFront(Fn fn) {
    asio::post(socket_.get_executor(), std::move(fn));
  }

  // Writes the end of a reply, then serves the next request (or closes).
  void Reply(std::string text, bool close_after) {
    Send(std::move(text), [this, close_after] {
      if (close_after || server_->stopped_) {
        Close();
        return;
      }
      waiting_since_ = Clock::now();
      Pump();
    });
  }

  // Writes `text`, then runs `then`; closes on an error, or when a piece of kSendPieceBytes is
  // not taken by the client within request_timeout_s (the deadline restarts with each piece
  // written, so a slow client that keeps reading gets a large reply, and a stalled one does not
  // hold it).
  template <typename Then>
  void Send(std::string text, Then then) {
    SendFrom(std::make_shared<std::string>(std::move(text)), 0, std::move(then));
  }

  template <typename Then>
  void SendFrom(std::shared_ptr<std::string> data, size_t offset, Then then) {
    auto self = shared_from_this();
    Arm(Clock::now() + Seconds(server_->options_.request_timeout_s), "");
    const size_t n = std::min(kSendPieceBytes, data->size() - offset);
    asio::async_write(
        socket_, asio::buffer(data->data() + offset, n),
        [self, data, offset, then](const boost::system::error_code& ec, size_t written) {
          self->Disarm();
          if (ec) {
            self->Close();
            return;
          }
          if (offset + written < data->size()) {
            self->SendFrom(data, offset + written, then);
            return;
          }
          // A large reply (and what it was built from) is freed once this handler is done: give
          // the memory back then.
          if (data->size() > kLargeReplyBytes) {
            asio::post(self->socket_.get_executor(), [] { common::ReturnFreedMemory(); });
          }
          then();
        });
  }

  // Closes the connection at `when` unless the pending operation finishes first (and re-arms
  // or cancels); `why`, when given, is sent as a last error reply (best effort, never blocking).
  void Arm(Clock::time_point when, std::string why) {
    const uint64_t generation = ++deadline_generation_;
    deadline_.expires_at(when);
    deadline_.async_wait([self = shared_from_this(), why = std::move(why),
                          generation](const boost::system::error_code& ec) {
      // A later Arm or a cancel supersedes this deadline, even if it had already fired.
      if (ec || generation != self->deadline_generation_) return;
      if (!why.empty()) {
        self->server_->options_.logger->info("control socket: closing connection of pid {}: {}",
                                             self->peer_.pid, why);
        std::string msg = proto::EncodeError(common::InvalidArgument(why + "; closing"));
        (void)::send(self->socket_.native_handle(), msg.data(), msg.size(),
                     MSG_DONTWAIT | MSG_NOSIGNAL);
      }
      self->Close();
    });
  }

  void Disarm() {
    ++deadline_generation_;
    deadline_.cancel();
  }

  static std::string FormatSeconds(double s) {
    std::string t = std::to_string(s);
    t.erase(t.find_last_not_of('0') + 1);
    if (!t.empty() && t.back() == '.') t.pop_back();
    return t + " s";
  }

  void Close() {
    boost::system::error_code ignored;
    Disarm();
    memory_check_.cancel();
    OnLoop([](Connection& c) { c.stream_.reset(); });
    if (server_->options_.reads != nullptr) OnReads([](Connection& c) { c.read_stream_.reset(); });
    socket_.shutdown(Socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  ControlServer* server_;
  Socket socket_;
  PeerCredentials peer_;
  Access access_;
  asio::steady_timer deadline_;
  asio::steady_timer memory_check_;  // AnswerWhileHeld's
  uint64_t deadline_generation_ = 0;
  std::array<char, 64 * 1024> chunk_;
  std::string pending_;  // bytes read but not yet answered; at most one chunk past the cap
  size_t scanned_ = 0;   // pending_[0, scanned_) holds no newline
  Clock::time_point waiting_since_;  // accepted, or the previous reply written
  bool eof_ = false;
  VerbContext context_;                  // the server's, with this peer as the caller
  VerbContext read_context_;             // the same on the ReadThread: its storage, no scheduler
  std::unique_ptr<ReplyStream> stream_;  // the reply being written, if streamed; uses context_
  // The same for a read verb's, on the ReadThread; uses read_context_.
  std::unique_ptr<ReplyStream> read_stream_;
  std::string verb_;  // its verb, for the log
  std::shared_ptr<Slots> slots_;
};

ControlServer::ControlServer(ControlServerOptions options)
    : options_(std::move(options)),
      front_(*options_.io),
      acceptor_(front_.io()),
      accept_retry_(front_.io()),
      slots_(std::make_shared<Slots>()),
      verbs_{options_.scheduler, options_.storage, options_.state_dir, options_.node_timeout_s},
      read_verbs_{nullptr, options_.reads != nullptr ? &options_.reads->storage() : nullptr,
                  options_.state_dir, options_.node_timeout_s} {
  if (!options_.logger) options_.logger = common::MakeNullLogger();
}

ControlServer::~ControlServer() {
  Stop();
  front_.Join();
  // Nothing posts to the ReadThread any more: its tasks for this server's connections are run
  // before the server goes.
  if (options_.reads != nullptr) options_.reads->Drain();
  if (options_.admissions != nullptr) options_.admissions->Drain();
  // Not served any more: close the acceptor here (Stop() posted its close to the thread).
  boost::system::error_code ec;
  acceptor_.close(ec);
}

Status ControlServer::Start() {
  const mode_t mode = options_.access.read_open ? 0666 : 0660;
  TRIALD_ASSIGN_OR_RETURN(common::UniqueFd fd, ListenControlSocket(options_.socket_path, mode,
                                                                   options_.access.allowed_gid));
  return Start(std::move(fd));
}

Status ControlServer::Start(common::UniqueFd listening_fd) {
  if (options_.ping_board == nullptr) {
    return common::InvalidArgument("control socket: no ping board");
  }
  // Whoever created it, no worker may inherit the control socket.
  ::fcntl(listening_fd.get(), F_SETFD, FD_CLOEXEC);
  boost::system::error_code ec;
  acceptor_.assign(asio::local::stream_protocol(), listening_fd.get(), ec);
  if (ec) {
    return common::IoError("control socket " + options_.socket_path + ": " + ec.message());
  }
  listening_fd.Release();
  // Accepting never blocks (ShedWithSpare calls accept4 directly).
  const int flags = ::fcntl(acceptor_.native_handle(), F_GETFL);
  if (flags >= 0) ::fcntl(acceptor_.native_handle(), F_SETFL, flags | O_NONBLOCK);
  spare_fd_ = common::UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  Accept();
  front_.Start();  // serving from the moment the loop runs (server_thread.h)
  return Status::Ok();
}

void ControlServer::Stop() {
  if (stopped_.exchange(true)) return;
  auto close = [this] {
    boost::system::error_code ec;
    acceptor_.close(ec);
    accept_retry_.cancel();
  };
  if (front_.running()) {
    asio::post(front_.io(), close);
  } else {
    close();
  }
}

void ControlServer::Accept() {
  acceptor_.async_accept([this](const boost::system::error_code& ec, Socket socket) {
    if (ec == asio::error::operation_aborted || stopped_) return;
    if (ec) {
      const bool no_fds = ec == asio::error::no_descriptors || ec.value() == ENFILE;
      if (no_fds && !out_of_fds_) {
        options_.logger->warn(
            "control socket: out of file descriptors ({}); refusing new connections until some "
            "close",
            ec.message());
      }
      out_of_fds_ = out_of_fds_ || no_fds;
      // Linux reports EMFILE before it looks at the backlog, so it says nothing about whether
      // a connection waits: the spare tells. Then accept again at once (another may wait), or
      // wait for one to arrive, never retrying accept() on an empty backlog without end.
      const Shed shed = no_fds ? ShedWithSpare() : Shed::kNoSpare;
      if (shed == Shed::kRefusedOne) {
        Accept();
        return;
      }
      if (shed == Shed::kNonePending) {
        acceptor_.async_wait(asio::socket_base::wait_read,
                             [this](const boost::system::error_code& e) {
                               if (!e && !stopped_) Accept();
                             });
        return;
      }
      // No spare, or another failure: the pending connection stays in the backlog; try again
      // after a pause rather than spinning on the event loop.
      if (!no_fds) {
        options_.logger->warn("control socket: accept failed: {}; retrying in 100 ms",
                              ec.message());
      }
      accept_retry_.expires_after(std::chrono::milliseconds(100));
      accept_retry_.async_wait([this](const boost::system::error_code& e) {
        if (!e && !stopped_) Accept();
      });
      return;
    }
    out_of_fds_ = false;
    ::fcntl(socket.native_handle(), F_SETFD, FD_CLOEXEC);
    auto refuse = [&socket](const Status& why) {
      std::string msg = proto::EncodeError(why);
      (void)::send(socket.native_handle(), msg.data(), msg.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      boost::system::error_code ignored;
      socket.close(ignored);
    };
    if (Result<PeerCredentials> peer = ReadPeerCredentials(socket.native_handle()); !peer.ok()) {
      options_.logger->warn("control socket: {}", peer.status().message());
      refuse(peer.status());
    } else if (Status admit = Admit(*peer); !admit.ok()) {
      options_.logger->debug("control socket: refused pid {} uid {}: {}", peer->pid, peer->uid,
                             admit.message());
      refuse(admit);
    } else {
      std::make_shared<Connection>(this, std::move(socket), std::move(*peer))->Start();
    }
    Accept();
  });
}

Status ControlServer::Admit(const PeerCredentials& peer) const {
  const ControlServerOptions& o = options_;
  std::lock_guard<std::mutex> lock(slots_->mu);
  if (slots_->total >= o.max_connections) {
    return common::Unavailable("too many connections (" + std::to_string(o.max_connections) +
                               " open); try again later");
  }
  if (peer.uid == 0 || peer.uid == o.access.daemon_uid) return Status::Ok();
  const int others = o.max_connections - o.reserved_connections;
  if (slots_->total >= others) {
    return common::Unavailable("too many connections (" + std::to_string(others) +
                               " open; the other " + std::to_string(o.reserved_connections) +
                               " are kept for root and triald's user); try again later");
  }
  auto it = slots_->per_uid.find(peer.uid);
  if (it != slots_->per_uid.end() && it->second >= o.max_connections_per_uid) {
    return common::Unavailable("uid " + std::to_string(peer.uid) + " has " +
                               std::to_string(it->second) +
                               " connections open, the most one user may; close one first");
  }
  return Status::Ok();
}

ControlServer::Shed ControlServer::ShedWithSpare() {
  if (!spare_fd_.valid()) return Shed::kNoSpare;
  spare_fd_.Reset();
  const int fd = ::accept4(acceptor_.native_handle(), nullptr, nullptr, SOCK_CLOEXEC);
  const int accept_errno = errno;
  if (fd >= 0) {
    const std::string msg = proto::EncodeError(common::Unavailable(
        "triald is out of file descriptors; try again when other connections or trials end"));
    (void)::send(fd, msg.data(), msg.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    ::close(fd);
  }
  spare_fd_ = common::UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!spare_fd_.valid()) return Shed::kNoSpare;
  if (fd >= 0) return Shed::kRefusedOne;
  if (accept_errno == EAGAIN || accept_errno == EWOULDBLOCK) return Shed::kNonePending;
  return Shed::kNoSpare;  // any other failure: pause
}

}  // namespace triald::daemon
