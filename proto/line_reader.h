#pragma once
// LineReader: splits a byte stream into newline-terminated lines with a hard cap on line
// length, so a peer can never make the daemon buffer without bound.
//
// Thread-safety: not thread-safe; one reader per stream.

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace triald::proto {

class LineReader {
 public:
  // Called once per complete line (without '\n'); a non-OK return stops Feed with that status.
  using LineFn = std::function<common::Status(std::string_view line)>;

  explicit LineReader(size_t max_line_bytes) : max_line_bytes_(max_line_bytes) {}

  // Appends bytes; calls `on_line` for every completed line. Returns an error (and stops
  // accepting input) when a line exceeds the cap.
  common::Status Feed(std::string_view bytes, const LineFn& on_line);

  // End of stream: a trailing line without '\n' is delivered as a line.
  common::Status Finish(const LineFn& on_line);

  size_t buffered() const { return partial_.size(); }

 private:
  size_t max_line_bytes_;
  std::string partial_;
  bool failed_ = false;
};

}  // namespace triald::proto
