#pragma once
// The report protocol: what a worker writes to the daemon on TRIALD_REPORT_FD, one JSON object
// per line, at most kMaxReportLineBytes a line (proto/README.md, "Report protocol"):
//   {"type":"report","step":3,"value":0.812}
//   {"type":"final","value":0.4213}       (or "values":[...] for several objectives)
//   {"type":"attr","key":"tokens_seen","value":123456}
//   {"type":"error","message":"CUDA out of memory ..."}
//   {"type":"heartbeat"}
// Parsing is strict: an unknown type, an unknown or missing field, a wrong type or a
// non-finite number is an error, and the daemon ends the trial as FAIL(protocol).
//
// Thread-safety: pure functions.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace triald::proto {

inline constexpr size_t kMaxReportLineBytes = 64 * 1024;
inline constexpr size_t kMaxAttrKeyBytes = 256;

enum class ReportType { kReport, kFinal, kAttr, kError, kHeartbeat };
const char* ReportTypeName(ReportType type);

struct ReportMessage {
  ReportType type = ReportType::kHeartbeat;
  int64_t step = 0;            // report
  double value = 0;            // report, final (single objective)
  std::vector<double> values;  // final: every objective (size 1 for "value")
  std::string key;             // attr
  std::string json_value;      // attr: the value as compact JSON text
  std::string message;         // error
};

// Parses one line (without its trailing newline). Errors say what was wrong and quote at most
// the first 200 bytes of the line.
common::Result<ReportMessage> ParseReportLine(std::string_view line);

// Serialises a message as one line, newline included (workers and tests use this).
std::string EncodeReportLine(const ReportMessage& message);

}  // namespace triald::proto
