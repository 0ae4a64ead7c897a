#pragma once
// The report protocol: what a worker writes to the daemon on TRIALD_REPORT_FD, one JSON object
// per line, at most kMaxReportLineBytes a line (proto/README.md, "Report protocol"):
//   {"type":"report","step":3,"value":0.812}
//   {"type":"final","value":0.4213}       (or "values":[...] for several objectives)
//   {"type":"attr","key":"tokens_seen","value":123456}
//   {"type":"error","message":"CUDA out of memory ..."}
//   {"type":"heartbeat"}
//   {"type":"constraints","values":[-0.5, 1.2]}   (before final; the last one counts)
// and, on the two-way trial channel of define-by-run objectives (proto/README.md, "The two-way
// trial channel"), the requests the daemon answers and the line that ends a pruned trial:
//   {"type":"suggest","name":"lr","distribution":{"type":"float","low":1e-05,"high":0.1,"log":true}}
//   {"type":"should_prune"}
//   {"type":"pruned"}
// The daemon's answers, one line each in request order, are written with EncodeSuggestionAnswer,
// EncodeShouldPruneAnswer and EncodeErrorAnswer, and read back with ParseAnswerLine.
// Parsing is strict: an unknown type, an unknown or missing field, a wrong type or a
// non-finite number is an error, and the daemon ends the trial as FAIL(protocol).
//
// Thread-safety: pure functions.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"

namespace triald::proto {

inline constexpr size_t kMaxReportLineBytes = 64 * 1024;
inline constexpr size_t kMaxAttrKeyBytes = 256;
// A suggested parameter's name: non-empty, at most this many bytes (as an attr key).
inline constexpr size_t kMaxParamNameBytes = 256;
// A "constraints" line holds 1 to this many values.
inline constexpr size_t kMaxConstraints = 64;
// An answer line, without its newline, is at most this long (a client may refuse a longer one):
// an answer carries at most the request's name and one of its choices, and an error message is
// cut to fit kMaxReportLineBytes.
inline constexpr size_t kMaxAnswerLineBytes = kMaxReportLineBytes + 1024;

enum class ReportType {
  kReport,
  kFinal,
  kAttr,
  kError,
  kHeartbeat,
  kSuggest,      // asks for a parameter's value; answered with a suggestion (or an error)
  kShouldPrune,  // asks whether the pruner stopped the trial; answered with should_prune
  kPruned,       // the objective raised TrialPruned: sent instead of final, no answer
  kConstraints,  // the trial's constraint values (feasible when all <= 0), before final
  // asks for the trial's relative sample (Optuna's trial.relative_params); answered with
  // relative_params
  kRelativeParams,
};
const char* ReportTypeName(ReportType type);

// A number of a suggest's distribution, as the worker wrote it.
struct SuggestNumber {
  double value = 0;         // the nearest double (the number itself when written as a float)
  bool is_integer = false;  // written as a JSON integer in the int64 range
  int64_t integer = 0;      // its exact value when is_integer
};

// A categorical choice as the worker wrote it (a JSON string, integer, float or bool).
using SuggestChoice = std::variant<bool, int64_t, double, std::string>;

// The distribution of a suggest request, as written: which of the fixed field names (type, low,
// high, step, log, choices; any other is refused here) were present and their values, checked
// here only for their JSON types (type a string, numbers finite, step a number or null, log a
// bool, choices an array of strings, int64 integers, finite floats and bools). Whether they make a
// distribution (a known type, the fields that type needs and no others, low <= high, ...) is
// decided when it becomes a config::Distribution (config/suggest.h), so that every such error names
// the field in one place.
struct SuggestDistribution {
  std::string type;  // "float", "int", "categorical", or whatever else the worker wrote
  std::optional<SuggestNumber> low;
  std::optional<SuggestNumber> high;
  std::optional<SuggestNumber> step;  // absent, or null (see step_null)
  bool step_null = false;             // "step":null was written (step is then empty)
  std::optional<bool> log;
  std::optional<std::vector<SuggestChoice>> choices;

  // Equal when written alike: an integer differs from the equal float (1 and 1.0), and -0.0
  // from 0.0, so that a round trip through EncodeReportLine can be checked exactly.
  bool operator==(const SuggestDistribution& o) const;
  bool operator!=(const SuggestDistribution& o) const { return !(*this == o); }
};

struct ReportMessage {
  ReportType type = ReportType::kHeartbeat;
  int64_t step = 0;                  // report
  double value = 0;                  // report, final (single objective)
  std::vector<double> values;        // final: every objective (size 1 for "value");
                                     // constraints: the constraint values
  std::string key;                   // attr
  std::string json_value;            // attr: the value as compact JSON text
  std::string message;               // error
  std::string name;                  // suggest: the parameter's name
  SuggestDistribution distribution;  // suggest
};

// Parses one line (without its trailing newline). Errors say what was wrong and quote at most
// the first 200 bytes of the line.
common::Result<ReportMessage> ParseReportLine(std::string_view line);

// Serialises a message as one line, newline included (workers and tests use this).
std::string EncodeReportLine(const ReportMessage& message);

// ---- The daemon's answers on the two-way trial channel ----
// Each returns one line, newline included.

// {"type":"suggestion","name":N,"value":V}. `value_json` is the parameter's external value as
// JSON text (config::ExternalJson), copied as written so that a float stays a float ("1.0") and
// is read back bit for bit. Text that is not one JSON value (a bug of the caller, never the
// worker's doing) gives an error answer saying so instead of a malformed line.
std::string EncodeSuggestionAnswer(std::string_view name, std::string_view value_json);

// {"type":"should_prune","value":B}.
std::string EncodeShouldPruneAnswer(bool prune);

// {"type":"relative_params","params":{NAME: VALUE, ...}}: the trial's relative sample, each
// value its parameter's external value (config::ExternalJson), as `params_json` (a JSON object's
// text) gives them. An answer longer than kMaxAnswerLineBytes, or text that is not a JSON object,
// gives an error answer saying so.
std::string EncodeRelativeParamsAnswer(std::string_view params_json);

// {"type":"error","message":M}: the daemon refuses a request and ends the trial. A message that
// would make the line longer than kMaxReportLineBytes is cut (at a UTF-8 character boundary) and
// ends with " [...]"; invalid UTF-8 is replaced, so the line is always valid JSON.
std::string EncodeErrorAnswer(std::string_view message);

enum class AnswerType { kSuggestion, kShouldPrune, kError, kRelativeParams };
const char* AnswerTypeName(AnswerType type);

struct AnswerMessage {
  AnswerType type = AnswerType::kError;
  std::string name;         // suggestion
  std::string value_json;   // suggestion: the value as compact JSON text
  bool prune = false;       // should_prune
  std::string message;      // error
  std::string params_json;  // relative_params: the object of parameter values, as JSON text
};

// Parses one answer line (without its newline), as strictly as ParseReportLine: for clients
// written in C++ and for tests. Lines over kMaxAnswerLineBytes are refused.
common::Result<AnswerMessage> ParseAnswerLine(std::string_view line);

}  // namespace triald::proto
