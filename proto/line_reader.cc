#include "proto/line_reader.h"

namespace triald::proto {

common::Status LineReader::Feed(std::string_view bytes, const LineFn& on_line) {
  if (failed_) return common::FailedPrecondition("line reader stopped after an error");
  while (!bytes.empty()) {
    size_t nl = bytes.find('\n');
    size_t take = nl == std::string_view::npos ? bytes.size() : nl;
    if (partial_.size() + take > max_line_bytes_) {
      failed_ = true;
      partial_.clear();
      return common::InvalidArgument("line longer than " + std::to_string(max_line_bytes_) +
                                     " bytes");
    }
    if (nl == std::string_view::npos) {
      partial_.append(bytes);
      return common::Status::Ok();
    }
    common::Status st;
    if (partial_.empty()) {
      st = on_line(bytes.substr(0, nl));
    } else {
      partial_.append(bytes.substr(0, nl));
      st = on_line(partial_);
      partial_.clear();
    }
    if (!st.ok()) {
      failed_ = true;
      return st;
    }
    bytes.remove_prefix(nl + 1);
  }
  return common::Status::Ok();
}

common::Status LineReader::Finish(const LineFn& on_line) {
  if (failed_ || partial_.empty()) return common::Status::Ok();
  std::string last = std::move(partial_);
  partial_.clear();
  return on_line(last);
}

}  // namespace triald::proto
