#include "tests/fuzz/targets.h"

#include <cstring>
#include <string>
#include <vector>

#include "config/suggest.h"
#include "config/sweep.h"
#include "proto/control.h"
#include "proto/line_reader.h"
#include "proto/report.h"

namespace triald::fuzz {
using common::Internal;
using common::Result;
using common::Status;

namespace {

bool SameDouble(double a, double b) { return std::memcmp(&a, &b, sizeof(double)) == 0; }

bool SameMessage(const proto::ReportMessage& a, const proto::ReportMessage& b) {
  if (a.type != b.type || a.key != b.key || a.json_value != b.json_value ||
      a.message != b.message || a.values.size() != b.values.size() || a.name != b.name ||
      a.distribution != b.distribution) {
    return false;
  }
  for (size_t i = 0; i < a.values.size(); ++i) {
    if (!SameDouble(a.values[i], b.values[i])) return false;
  }
  switch (a.type) {
    case proto::ReportType::kReport:
      return a.step == b.step && SameDouble(a.value, b.value);
    case proto::ReportType::kFinal:
      return SameDouble(a.value, b.value);
    default:
      return true;
  }
}

// A refusal must be an invalid_argument with a message; anything else is a decoder bug.
Status CheckRefusal(const Status& st, const char* what) {
  if (st.code() != common::Code::kInvalidArgument || st.message().empty()) {
    return Internal(std::string(what) + " refused input with " + st.ToString() +
                    "; expected invalid_argument with a message");
  }
  return Status::Ok();
}

// The daemon's side of a suggest: the requested distribution is refused with a message, or
// becomes a valid distribution that round-trips through its stored JSON, and the answers to it
// (a value, or the refusal) are lines a client reads back.
Status CheckSuggest(const proto::ReportMessage& m) {
  Result<config::Distribution> d = config::DistributionFromSuggest(m.name, m.distribution);
  if (!d.ok()) {
    TRIALD_RETURN_IF_ERROR(CheckRefusal(d.status(), "DistributionFromSuggest"));
    std::string error = proto::EncodeErrorAnswer(d.status().message());
    Result<proto::AnswerMessage> back =
        proto::ParseAnswerLine(std::string_view(error.data(), error.size() - 1));
    if (!back.ok() || back->type != proto::AnswerType::kError || back->message.empty()) {
      return Internal("error answer did not read back: " + error);
    }
    return Status::Ok();
  }
  if (Status valid = d->Validate(); !valid.ok()) {
    return Internal("DistributionFromSuggest accepted " + d->ToJson() + ": " + valid.message());
  }
  Result<config::Distribution> stored = config::DistributionFromJson(d->ToJson());
  if (!stored.ok() || *stored != *d) {
    return Internal("suggested distribution changed in a JSON round trip: " + d->ToJson());
  }
  if (config::DistributionText(*d).empty()) return Internal("empty DistributionText");
  // Every value the distribution can take at its ends (each choice of a categorical).
  std::vector<double> internals = {d->low, d->high};
  if (d->type == config::ParamType::kCategorical) {
    internals.clear();
    for (size_t i = 0; i < d->choices.size(); ++i) internals.push_back(static_cast<double>(i));
  }
  for (double internal : internals) {
    std::string value = config::ExternalJson(*d, internal);
    std::string answer = proto::EncodeSuggestionAnswer(m.name, value);
    Result<proto::AnswerMessage> back =
        proto::ParseAnswerLine(std::string_view(answer.data(), answer.size() - 1));
    if (!back.ok() || back->type != proto::AnswerType::kSuggestion || back->name != m.name) {
      return Internal("suggestion answer did not read back: " + answer);
    }
    if (answer.size() > proto::kMaxAnswerLineBytes) {
      return Internal("suggestion answer over kMaxAnswerLineBytes: " + answer.substr(0, 200));
    }
  }
  return Status::Ok();
}

Status CheckReportLine(std::string_view line) {
  Result<proto::ReportMessage> m = proto::ParseReportLine(line);
  if (!m.ok()) return CheckRefusal(m.status(), "ParseReportLine");
  if (line.size() > proto::kMaxReportLineBytes) {
    return Internal("ParseReportLine accepted a line over the limit");
  }
  std::string encoded = proto::EncodeReportLine(*m);
  if (encoded.empty() || encoded.back() != '\n' || encoded.find('\n') != encoded.size() - 1) {
    return Internal("EncodeReportLine did not give exactly one line: " + encoded);
  }
  std::string_view again_text(encoded.data(), encoded.size() - 1);
  Result<proto::ReportMessage> again = proto::ParseReportLine(again_text);
  if (!again.ok()) {
    return Internal("re-encoded report line refused: " + again.status().message());
  }
  if (!SameMessage(*m, *again)) {
    return Internal("report line changed in a round trip: " + std::string(line) + " -> " + encoded);
  }
  if (m->type == proto::ReportType::kSuggest) return CheckSuggest(*m);
  return Status::Ok();
}

}  // namespace

Status CheckReportStream(std::string_view input) {
  // A small cap so that over-long lines are reached by small inputs; every line is also parsed
  // whole (the daemon's real cap is far above any fuzz input).
  constexpr size_t kCap = 96;
  proto::LineReader reader(kCap);
  Status property;
  size_t delivered = 0;
  auto on_line = [&](std::string_view line) -> Status {
    if (line.size() > kCap) property = Internal("LineReader delivered a line over its cap");
    if (line.find('\n') != std::string_view::npos) {
      property = Internal("LineReader delivered a line containing a newline");
    }
    delivered += line.size() + 1;
    return Status::Ok();
  };
  // Fed in uneven pieces, as reads from a pipe arrive.
  size_t pos = 0, piece = 1;
  Status fed;
  while (pos < input.size() && fed.ok()) {
    size_t n = std::min(piece, input.size() - pos);
    fed = reader.Feed(input.substr(pos, n), on_line);
    pos += n;
    piece = piece * 3 % 17 + 1;
  }
  if (fed.ok()) fed = reader.Finish(on_line);
  if (!property.ok()) return property;
  if (fed.ok() && delivered < input.size()) {
    return Internal("LineReader lost bytes: " + std::to_string(input.size()) + " in, " +
                    std::to_string(delivered) + " delivered");
  }
  size_t start = 0;
  while (start <= input.size()) {
    size_t nl = input.find('\n', start);
    std::string_view line =
        input.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    TRIALD_RETURN_IF_ERROR(CheckReportLine(line));
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  return Status::Ok();
}

Status CheckControlRequest(std::string_view input) {
  // The daemon's side.
  Result<proto::Request> req = proto::ParseRequest(input);
  if (req.ok()) {
    std::string encoded = proto::EncodeRequest(req->verb, req->args);
    if (encoded.empty() || encoded.back() != '\n') {
      return Internal("EncodeRequest did not end with a newline");
    }
    Result<proto::Request> again =
        proto::ParseRequest(std::string_view(encoded.data(), encoded.size() - 1));
    if (!again.ok()) return Internal("re-encoded request refused: " + again.status().message());
    if (again->verb != req->verb || again->args != req->args) {
      return Internal("request changed in a round trip: " + encoded);
    }
    // Typed access never throws, whatever the field holds.
    for (const char* key : {"study", "verb", "sweep", "trial", "stream"}) {
      Result<std::string> s = proto::GetString(req->args, key);
      Result<int64_t> i = proto::GetInt(req->args, key);
      if (s.ok() && i.ok()) return Internal(std::string("field ") + key + " both string and int");
    }
    // The reply carrying these arguments reads back identically (trialctl's side).
    std::string reply = proto::EncodeOk(req->args);
    Result<proto::Response> resp =
        proto::ParseResponse(std::string_view(reply.data(), reply.size() - 1));
    if (!resp.ok() || !resp->ok || resp->result != boost::json::value(req->args)) {
      return Internal("EncodeOk reply did not read back: " + reply);
    }
  } else {
    TRIALD_RETURN_IF_ERROR(CheckRefusal(req.status(), "ParseRequest"));
  }
  // trialctl's side on arbitrary bytes: an error reply always carries a non-OK status.
  Result<proto::Response> resp = proto::ParseResponse(input);
  if (resp.ok() && !resp->ok && resp->error.ok()) {
    return Internal("ParseResponse gave an error reply with an OK status");
  }
  return Status::Ok();
}

Status CheckSweep(std::string_view input) {
  Result<config::SweepSpec> spec =
      config::ParseSweep(config::SweepSource{std::string(input), "/fuzz/sweep.toml"});
  if (!spec.ok()) {
    if (spec.status().message().empty()) return Internal("ParseSweep refused without a message");
    return Status::Ok();
  }
  const config::StudyConfig& s = spec->study;
  if (s.name.empty() || s.n_trials < 1 || s.parallelism < 1 || !(s.trial_timeout >= 0) ||
      !(s.kill_grace >= 0)) {
    return Internal("ParseSweep accepted an invalid [study] (name \"" + s.name + "\")");
  }
  for (const config::ParamSpec& p : spec->space) {
    Status valid = p.dist.Validate();
    if (!valid.ok()) {
      return Internal("ParseSweep accepted [space." + p.name + "]: " + valid.message());
    }
    Result<config::Distribution> back = config::DistributionFromJson(p.dist.ToJson());
    if (!back.ok() || *back != p.dist) {
      return Internal("distribution of " + p.name +
                      " changed in a JSON round trip: " + p.dist.ToJson());
    }
  }
  if (spec->objective.kind == "lm") {
    std::string json = config::LmObjectiveToJson(spec->objective.lm);
    Result<config::LmObjectiveConfig> back = config::LmObjectiveFromJson(json);
    if (!back.ok()) return Internal("LM objective JSON refused: " + back.status().message());
    if (config::LmObjectiveToJson(*back) != json) {
      return Internal("LM objective changed in a JSON round trip: " + json);
    }
  }
  return Status::Ok();
}

}  // namespace triald::fuzz
