#pragma once
// UTF-8 hygiene for text that comes from workers (stderr tails, error messages, logs) and is
// stored or sent as JSON: invalid sequences become U+FFFD, so a worker writing binary garbage
// cannot make a reply unreadable.
//
// Thread-safety: pure function.

#include <string>
#include <string_view>

namespace triald::common {

std::string SanitizeUtf8(std::string_view text);

}  // namespace triald::common
