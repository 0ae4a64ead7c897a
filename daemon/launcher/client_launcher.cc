#include "daemon/launcher/client_launcher.h"

#include <sys/socket.h>

#include <array>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <cstdlib>
#include <utility>

#include "common/json.h"
#include "daemon/launcher/queued_answers.h"
#include "proto/line_reader.h"

namespace triald::launcher {

namespace asio = boost::asio;
namespace json = boost::json;
using common::Status;

namespace {

std::string EnvValue(const LaunchSpec& spec, const std::string& name) {
  const std::string prefix = name + "=";
  for (const std::string& kv : spec.env) {
    if (kv.rfind(prefix, 0) == 0) return kv.substr(prefix.size());
  }
  return "";
}

// What the program reads when triald stops its trial.
std::string StopText(StopReason reason) {
  switch (reason) {
    case StopReason::kTimeout:
      return "the trial ran past its trial_timeout";
    case StopReason::kPrune:
      return "the trial was pruned";
    case StopReason::kCancel:
      return "the study was cancelled";
    case StopReason::kShutdown:
      return "triald is stopping (the trial is put back or retried as the study says)";
    case StopReason::kProtocol:
      return "the trial sent something invalid";
    case StopReason::kStall:
      return "the trial sent no line for its stall_timeout";
    case StopReason::kNone:
      break;
  }
  return "stopped";
}

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(asio::io_context& io, common::Logger logger, LaunchSpec spec, TrialCallbacks callbacks,
          int fd)
      : logger_(std::move(logger)),
        spec_(std::move(spec)),
        callbacks_(std::move(callbacks)),
        sd_(io, fd),
        timeout_timer_(io),
        grace_timer_(io),
        stall_timer_(io),
        lines_(proto::kMaxReportLineBytes) {}

  void Start() {
    started_at_ = std::chrono::steady_clock::now();
    last_line_ = started_at_;
    outcome_.exit.code = 0;
    Answer(AskReply(spec_));
    Read();
    auto weak = weak_from_this();
    if (spec_.timeout_s > 0) {
      timeout_timer_.expires_after(Seconds(spec_.timeout_s));
      timeout_timer_.async_wait([weak](const boost::system::error_code& ec) {
        if (auto self = weak.lock(); self && !ec) self->Stop(StopReason::kTimeout);
      });
    }
    if (spec_.stall_timeout_s > 0) ArmStallTimer();
  }

  void Stop(StopReason reason) {
    if (finished_ || stopping_) return;
    stopping_ = true;
    if (outcome_.stop_reason == StopReason::kNone) outcome_.stop_reason = reason;
    grace_timer_.cancel();
    // The program reads why at its next request, then EOF; it has kill_grace to close.
    std::string why = StopText(reason);
    if (reason == StopReason::kProtocol && !outcome_.protocol_error.empty()) {
      why += ": " + outcome_.protocol_error;
    }
    Answer(proto::EncodeErrorAnswer("trial " + EnvValue(spec_, "TRIALD_TRIAL") + " of study " +
                                    EnvValue(spec_, "TRIALD_STUDY") + " stopped: " + why));
    write_closed_after_answers_ = true;
    MaybeShutdownWrite();
    auto weak = weak_from_this();
    grace_timer_.expires_after(Seconds(spec_.kill_grace_s));
    grace_timer_.async_wait([weak](const boost::system::error_code& ec) {
      if (auto self = weak.lock(); self && !ec) self->Finish();
    });
  }

  void StopAfterGrace(StopReason reason) {
    if (finished_ || stopping_ || cooperative_) return;
    cooperative_ = true;
    auto weak = weak_from_this();
    grace_timer_.expires_after(Seconds(spec_.kill_grace_s));
    grace_timer_.async_wait([weak, reason](const boost::system::error_code& ec) {
      if (auto self = weak.lock(); self && !ec) self->Stop(reason);
    });
  }

  void Answer(const std::string& line) {
    if (finished_ || write_closed_) return;
    QueueAnswer(&answers_, line);
    Flush();
    if (auto over = AnswerBacklogError(&answers_, "the client", "the trial's connection")) {
      FailProtocol(*over);
    }
  }

  void FailProtocol(const std::string& message) {
    if (finished_) return;
    if (outcome_.protocol_error.empty()) outcome_.protocol_error = message;
    Stop(StopReason::kProtocol);
  }

  // The TrialProcess was destroyed: close at once and report nothing.
  void Abandon() {
    abandoned_ = true;
    if (!finished_) {
      finished_ = true;
      CloseAll();
    }
  }

  const model::ProcessIdentity& identity() const { return identity_; }

 private:
  static std::chrono::steady_clock::duration Seconds(double s) {
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(s));
  }

  void Read() {
    auto self = shared_from_this();
    sd_.async_read_some(asio::buffer(buffer_),
                        [self](const boost::system::error_code& ec, size_t n) {
                          if (self->finished_) return;
                          if (n > 0) self->Consume(std::string_view(self->buffer_.data(), n));
                          if (ec || self->finished_) {
                            self->EndOfStream();
                            return;
                          }
                          self->Read();
                        });
  }

  void Consume(std::string_view data) {
    if (!outcome_.protocol_error.empty()) return;  // already failed; discard the rest
    report_bytes_ += data.size();
    if (spec_.max_report_bytes > 0 && report_bytes_ > spec_.max_report_bytes) {
      FailProtocol("the trial sent more than " + std::to_string(spec_.max_report_bytes) +
                   " bytes on the trial channel ([study] max_report_bytes = " +
                   std::to_string(spec_.max_report_bytes) + ")");
      return;
    }
    Status st = lines_.Feed(data, [this](std::string_view l) { return OnLine(l); });
    if (!st.ok()) FailProtocol("trial channel: " + st.message());
  }

  Status OnLine(std::string_view line) {
    if (line.empty()) return Status::Ok();
    common::Result<proto::ReportMessage> msg = proto::ParseReportLine(line);
    if (!msg.ok()) return msg.status();
    last_line_ = std::chrono::steady_clock::now();
    switch (msg->type) {
      case proto::ReportType::kFinal:
      case proto::ReportType::kPruned:
        told_ = true;
        break;
      case proto::ReportType::kError:
        told_fail_ = true;
        break;
      default:
        break;
    }
    if (callbacks_.on_message && !abandoned_) callbacks_.on_message(*msg);
    return Status::Ok();
  }

  void EndOfStream() {
    if (outcome_.protocol_error.empty()) {
      Status st = lines_.Finish([this](std::string_view l) { return OnLine(l); });
      if (!st.ok() && outcome_.protocol_error.empty()) {
        outcome_.protocol_error = "trial channel: " + st.message();
        if (outcome_.stop_reason == StopReason::kNone) outcome_.stop_reason = StopReason::kProtocol;
      }
    }
    Finish();
  }

  void ArmStallTimer() {
    auto weak = weak_from_this();
    stall_timer_.expires_at(last_line_ + Seconds(spec_.stall_timeout_s));
    stall_timer_.async_wait([weak](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (!self || ec || self->finished_ || self->stopping_) return;
      if (std::chrono::steady_clock::now() - self->last_line_ >=
          Seconds(self->spec_.stall_timeout_s)) {
        self->Stop(StopReason::kStall);
      } else {
        self->ArmStallTimer();
      }
    });
  }

  void Flush() {
    if (!sd_.is_open()) return;
    if (SendQueuedAnswers(sd_.native_handle(), &answers_) != SendQueued::kBlocked || write_wait_) {
      return;
    }
    write_wait_ = true;
    auto self = shared_from_this();
    sd_.async_wait(asio::posix::stream_descriptor::wait_write,
                   [self](const boost::system::error_code& ec) {
                     self->write_wait_ = false;
                     if (ec || self->finished_) return;
                     self->Flush();
                     self->MaybeShutdownWrite();
                   });
  }

  // After a stop: once the last answer (why) is out, the program reads EOF.
  void MaybeShutdownWrite() {
    if (!write_closed_after_answers_ || !answers_.empty() || write_closed_ || !sd_.is_open()) {
      return;
    }
    write_closed_ = true;
    ::shutdown(sd_.native_handle(), SHUT_WR);
  }

  void CancelTimers() {
    timeout_timer_.cancel();
    grace_timer_.cancel();
    stall_timer_.cancel();
  }

  void CloseAll() {
    boost::system::error_code ignored;
    CancelTimers();
    sd_.close(ignored);
  }

  void Finish() {
    if (finished_) return;
    finished_ = true;
    outcome_.resources.wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started_at_).count();
    if (!told_) {
      if (told_fail_) {
        outcome_.exit.code = 1;
        outcome_.ended_by = "the client told FAIL";
      } else if (outcome_.stop_reason == StopReason::kNone) {
        outcome_.executor_failure = "lost";
        outcome_.ended_by = "the client's connection closed before it told the trial's result";
      } else {
        outcome_.exit.code = 1;
        outcome_.ended_by = "the client had not told a result";
      }
    }
    if (outcome_.ended_by.empty()) outcome_.ended_by = "told by the client";
    if (abandoned_) {
      CloseAll();
      return;
    }
    CancelTimers();
    // Never from inside a call of the scheduler's: on_exit comes from the event loop. The
    // connection closes only after it: a program that reads EOF after telling has its trial
    // ended in the scheduler, so its next ask finds the slot free (a request from the control
    // server's thread may otherwise reach the loop between the close and on_exit).
    auto self = shared_from_this();
    asio::post(sd_.get_executor(), [self] {
      if (!self->abandoned_ && self->callbacks_.on_exit) self->callbacks_.on_exit(self->outcome_);
      self->CloseAll();
    });
  }

  common::Logger logger_;
  LaunchSpec spec_;
  TrialCallbacks callbacks_;
  asio::posix::stream_descriptor sd_;
  asio::steady_timer timeout_timer_, grace_timer_, stall_timer_;
  proto::LineReader lines_;
  std::array<char, 16 * 1024> buffer_{};
  model::ProcessIdentity identity_;
  ProcessOutcome outcome_;
  std::chrono::steady_clock::time_point started_at_, last_line_;
  uint64_t report_bytes_ = 0;
  std::string answers_;
  bool write_wait_ = false;
  bool write_closed_after_answers_ = false;
  bool write_closed_ = false;
  bool told_ = false;       // a final or pruned line came
  bool told_fail_ = false;  // an error line came
  bool stopping_ = false;
  bool cooperative_ = false;
  bool finished_ = false;
  bool abandoned_ = false;
};

class Handle final : public TrialProcess {
 public:
  explicit Handle(std::shared_ptr<Session> s) : session_(std::move(s)) {}
  ~Handle() override { session_->Abandon(); }
  const model::ProcessIdentity& identity() const override { return session_->identity(); }
  bool started() const override { return true; }
  void Stop(StopReason reason) override { session_->Stop(reason); }
  void StopAfterGrace(StopReason reason) override { session_->StopAfterGrace(reason); }
  void Answer(const std::string& line) override { session_->Answer(line); }
  void FailProtocol(const std::string& message) override { session_->FailProtocol(message); }

 private:
  std::shared_ptr<Session> session_;
};

}  // namespace

std::string AskReply(const LaunchSpec& spec) {
  json::object result;
  result["study"] = EnvValue(spec, "TRIALD_STUDY");
  result["trial"] = std::strtoll(EnvValue(spec, "TRIALD_TRIAL").c_str(), nullptr, 10);
  common::Result<json::value> params = common::ParseJsonExact(EnvValue(spec, "TRIALD_PARAMS"));
  result["params"] = params.ok() ? std::move(*params) : json::value(json::object());
  result["n_objectives"] = std::strtoll(EnvValue(spec, "TRIALD_N_OBJECTIVES").c_str(), nullptr, 10);
  if (const std::string history = EnvValue(spec, "TRIALD_RETRY_HISTORY"); !history.empty()) {
    json::array numbers;
    size_t at = 0;
    while (at <= history.size()) {
      size_t comma = history.find(',', at);
      if (comma == std::string::npos) comma = history.size();
      numbers.push_back(std::strtoll(history.substr(at, comma - at).c_str(), nullptr, 10));
      at = comma + 1;
    }
    result["retry_history"] = std::move(numbers);
  }
  result["trial_timeout"] = spec.timeout_s > 0 ? json::value(spec.timeout_s) : json::value(nullptr);
  json::object reply;
  reply["ok"] = true;
  reply["result"] = std::move(result);
  return common::SerializeJson(reply) + "\n";
}

LaunchResult ClientLauncher::Launch(const LaunchSpec& spec, TrialCallbacks callbacks) {
  if (!spec.client) return options_.next->Launch(spec, std::move(callbacks));
  if (spec.client->get() < 0) {
    return common::FailedPrecondition("the asking client's connection is gone");
  }
  // Taken from the ask only once nothing can fail: until then the ask is still answerable.
  if (Status st = common::SetNonBlocking(spec.client->get(), true); !st.ok()) return st;
  common::UniqueFd fd(std::move(*spec.client));
  LaunchSpec own = spec;
  own.client.reset();
  auto session = std::make_shared<Session>(*options_.io, options_.logger, std::move(own),
                                           std::move(callbacks), fd.Release());
  session->Start();
  return std::unique_ptr<TrialProcess>(std::make_unique<Handle>(std::move(session)));
}

}  // namespace triald::launcher
