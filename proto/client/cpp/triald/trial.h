#pragma once
// triald's report protocol for C++ objectives: one header, C++17, the standard library and
// POSIX only (no Boost, no link step). The C++ twin of proto/client/python/triald/ (its Trial).
//
// An exec objective is any command a sweep names; triald starts it once per trial, in its own
// process, with the trial's parameters in the environment, and reads scalars back from a pipe
// (proto/README.md, "Report protocol"). With this header a C++ training program is such a
// command:
//
//   #include <triald/trial.h>
//
//   int main() {
//     return triald::Run([](triald::Trial& trial) {
//       const double lr = trial.Param<double>("lr");
//       const int64_t layers = trial.Param<int64_t>("layers", 2);  // default if not in [space]
//       double loss = 0;
//       for (int64_t epoch = 0; epoch < 10; ++epoch) {
//         loss = TrainOneEpoch(lr, layers);
//         trial.Report(epoch, loss);  // intermediate value; throws TrialStopped when stopped
//       }
//       return loss;  // sent as the final value
//     });
//   }
//
// Stopping: triald prunes, cancels and times out a trial with SIGTERM to its process group, then
// SIGKILL after kill_grace. A Trial installs a SIGTERM handler that only sets a flag; the next
// Report() (or CheckStop()) throws TrialStopped, and Run() turns that into exit status 143, so the
// program stops at a step boundary. The daemon has already decided the outcome.
//
// Run by hand (TRIALD_REPORT_FD unset), protocol lines go to stderr and parameters come from
// TRIALD_PARAMS if set, else from the map given to the constructor.
//
// Each line is one write(2) of the whole line (continued only after a partial write or EINTR), so
// a crash never leaves half a line buffered and lines from several threads never interleave.
// What the daemon would reject is refused here with std::invalid_argument naming the problem:
// non-finite numbers, negative steps, over-long lines and attribute keys. Numbers are written
// with 17 significant digits, so the stored value is the program's double, bit for bit.
//
// Several objectives: return a std::vector<double> (one value per [study] directions entry,
// n_objectives() of them) from the objective, or call Final(values). Constraints (feasible when
// every value is <= 0): trial.Constraints({c1, c2}) before the final line.
//
// Thread-safety: Report/Attr/Error/Heartbeat/Constraints/Final may be called from several
// threads.

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace triald {

// The daemon's limits (proto/report.h): a line without its newline, and an attribute key.
inline constexpr size_t kMaxLineBytes = 64 * 1024;
inline constexpr size_t kMaxAttrKeyBytes = 256;
// Exit status of a trial that stopped because triald asked it to (128 + SIGTERM).
inline constexpr int kStoppedExitStatus = 128 + SIGTERM;

// Thrown by Report() / CheckStop() once triald has asked the trial to stop.
class TrialStopped : public std::runtime_error {
 public:
  TrialStopped() : std::runtime_error("triald asked this trial to stop (SIGTERM)") {}
};

// A parameter value as TRIALD_PARAMS carries it: an integer, a float, a string or a bool.
using ParamValue = std::variant<int64_t, double, std::string, bool>;

namespace detail {

inline volatile sig_atomic_t g_stop_requested = 0;
inline void OnSigterm(int) { g_stop_requested = 1; }

// Appends s as a JSON string literal; bytes that are not well-formed UTF-8 become U+FFFD, since
// the daemon rejects a line that is not UTF-8.
inline void AppendJsonString(std::string& out, std::string_view s) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        default:
          if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
          } else {
            out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    // Length and second-byte range of a well-formed sequence (RFC 3629).
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    bool ok = n != 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) {
      const unsigned char b = static_cast<unsigned char>(s[i + k]);
      ok = k == 1 ? (b >= lo && b <= hi) : ((b & 0xC0) == 0x80);
    }
    if (ok) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  out += '"';
}

inline std::string FormatNumber(double v, const char* what) {
  if (!std::isfinite(v)) {
    throw std::invalid_argument(std::string(what) + " must be finite, got " + std::to_string(v));
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// A strict parser for TRIALD_PARAMS: one JSON object whose values are numbers, strings or
// booleans (what triald puts there). Integers without a fraction or exponent that fit in int64
// stay integers; other numbers become doubles.
class ParamsParser {
 public:
  explicit ParamsParser(std::string_view text) : s_(text) {}

  std::map<std::string, ParamValue> Parse() {
    std::map<std::string, ParamValue> out;
    Space();
    Expect('{');
    Space();
    if (Peek() == '}') {
      ++i_;
    } else {
      for (;;) {
        Space();
        std::string key = String();
        Space();
        Expect(':');
        Space();
        out[key] = Value(key);
        Space();
        if (Peek() == ',') {
          ++i_;
          continue;
        }
        Expect('}');
        break;
      }
    }
    Space();
    if (i_ != s_.size()) Fail("trailing characters after the object");
    return out;
  }

 private:
  [[noreturn]] void Fail(const std::string& what) const {
    throw std::invalid_argument("TRIALD_PARAMS: " + what + " at offset " + std::to_string(i_));
  }
  char Peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void Expect(char c) {
    if (Peek() != c) Fail(std::string("expected '") + c + "'");
    ++i_;
  }
  void Space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  unsigned Hex4() {
    if (i_ + 4 > s_.size()) Fail("truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<unsigned>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<unsigned>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= static_cast<unsigned>(c - 'A' + 10);
      } else {
        Fail("bad \\u escape");
      }
    }
    return v;
  }
  static void AppendUtf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  std::string String() {
    Expect('"');
    std::string out;
    for (;;) {
      if (i_ >= s_.size()) Fail("unterminated string");
      const char c = s_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) Fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) Fail("unterminated escape");
      const char e = s_[i_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          unsigned cp = Hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (i_ + 2 > s_.size() || s_[i_] != '\\' || s_[i_ + 1] != 'u') {
              Fail("unpaired surrogate");
            }
            i_ += 2;
            const unsigned low = Hex4();
            if (low < 0xDC00 || low > 0xDFFF) Fail("unpaired surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            Fail("unpaired surrogate");
          }
          AppendUtf8(out, cp);
          break;
        }
        default:
          Fail(std::string("bad escape \\") + e);
      }
    }
  }
  ParamValue Value(const std::string& key) {
    const char c = Peek();
    if (c == '"') return String();
    if (s_.substr(i_, 4) == "true") {
      i_ += 4;
      return true;
    }
    if (s_.substr(i_, 5) == "false") {
      i_ += 5;
      return false;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      const size_t start = i_;
      bool integral = true;
      if (Peek() == '-') ++i_;
      while (i_ < s_.size() && std::strchr("0123456789.eE+-", s_[i_]) != nullptr) {
        if (s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E') integral = false;
        ++i_;
      }
      const std::string text(s_.substr(start, i_ - start));
      char* end = nullptr;
      errno = 0;
      if (integral) {
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (errno == 0 && end == text.c_str() + text.size()) return static_cast<int64_t>(v);
        errno = 0;
      }
      const double d = std::strtod(text.c_str(), &end);
      if (end != text.c_str() + text.size() || !std::isfinite(d)) {
        Fail("parameter \"" + key + "\": bad number " + text);
      }
      return d;
    }
    Fail("parameter \"" + key + "\": expected a number, string or boolean");
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace detail

class Trial {
 public:
  // Reads the trial from the process environment. `defaults` are the parameters used when
  // TRIALD_PARAMS is unset (a program run by hand). Throws std::invalid_argument when
  // TRIALD_PARAMS or TRIALD_REPORT_FD is malformed. handle_sigterm = false keeps the program's
  // own SIGTERM handling (then poll your own flag and call nothing here for stopping).
  explicit Trial(std::map<std::string, ParamValue> defaults = {}, bool handle_sigterm = true)
      : Trial(std::getenv("TRIALD_PARAMS"), std::getenv("TRIALD_REPORT_FD"), std::move(defaults),
              handle_sigterm) {}

  // The same from explicit values of TRIALD_PARAMS and TRIALD_REPORT_FD (nullptr = unset): the
  // seam tests use.
  Trial(const char* params_json, const char* report_fd, std::map<std::string, ParamValue> defaults,
        bool handle_sigterm) {
    params_ =
        params_json != nullptr ? detail::ParamsParser(params_json).Parse() : std::move(defaults);
    if (const char* number = std::getenv("TRIALD_TRIAL")) number_ = std::atoll(number);
    if (const char* study = std::getenv("TRIALD_STUDY")) study_ = study;
    if (const char* dir = std::getenv("TRIALD_TRIAL_DIR")) dir_ = dir;
    if (const char* dir = std::getenv("TRIALD_RESUME_DIR")) resume_dir_ = dir;
    if (const char* n = std::getenv("TRIALD_N_OBJECTIVES")) {
      char* end = nullptr;
      const long v = std::strtol(n, &end, 10);
      if (end == n || *end != '\0' || v < 1 || v > 1000000) {
        throw std::invalid_argument(std::string("TRIALD_N_OBJECTIVES=") + n +
                                    " is not a positive integer");
      }
      n_objectives_ = static_cast<int>(v);
    }
    if (report_fd != nullptr) {
      char* end = nullptr;
      const long fd = std::strtol(report_fd, &end, 10);
      struct stat st {};
      if (end == report_fd || *end != '\0' || fd < 0 || fstat(static_cast<int>(fd), &st) != 0) {
        throw std::invalid_argument(std::string("TRIALD_REPORT_FD=") + report_fd +
                                    " is not an open descriptor");
      }
      fd_ = static_cast<int>(fd);
      // Programs this one starts must not hold the pipe open after it is gone.
      fcntl(fd_, F_SETFD, fcntl(fd_, F_GETFD) | FD_CLOEXEC);
    }
    if (handle_sigterm) {
      struct sigaction sa {};
      sa.sa_handler = detail::OnSigterm;
      sigemptyset(&sa.sa_mask);
      sigaction(SIGTERM, &sa, nullptr);
    }
  }

  Trial(const Trial&) = delete;
  Trial& operator=(const Trial&) = delete;

  const std::map<std::string, ParamValue>& params() const { return params_; }
  bool Has(const std::string& name) const { return params_.count(name) != 0; }
  // -1 / "" when run by hand.
  int64_t number() const { return number_; }
  const std::string& study() const { return study_; }
  // A private folder for the trial's checkpoints and artifacts ("" when run by hand).
  const std::string& dir() const { return dir_; }
  // For a retry, the folder of the failed attempt it replaces, where that attempt left its
  // checkpoints (TRIALD_RESUME_DIR); "" for a first attempt, when that folder is not on this
  // node, or when run by hand.
  const std::string& ResumeDir() const { return resume_dir_; }

  // The parameter `name` as T (int64_t, int, double, std::string or bool). An integer parameter
  // converts to double; a float parameter with an integral value converts to an integer type.
  // Throws std::invalid_argument naming the parameter when it is missing or of another type.
  template <typename T>
  T Param(const std::string& name) const {
    auto it = params_.find(name);
    if (it == params_.end()) {
      std::string known;
      for (const auto& kv : params_) known += (known.empty() ? "" : ", ") + kv.first;
      throw std::invalid_argument(
          "parameter \"" + name + "\" is not in this trial's parameters (it has: " +
          (known.empty() ? "none" : known) + "); add it to the sweep's [space] or give a default");
    }
    return Convert<T>(name, it->second);
  }
  // The same, with `fallback` when the sweep does not define the parameter.
  template <typename T>
  T Param(const std::string& name, T fallback) const {
    auto it = params_.find(name);
    return it == params_.end() ? fallback : Convert<T>(name, it->second);
  }
  std::string Param(const std::string& name, const char* fallback) const {
    return Param<std::string>(name, std::string(fallback));
  }

  bool stop_requested() const { return detail::g_stop_requested != 0; }
  // Throws TrialStopped once triald has asked the trial to stop.
  void CheckStop() const {
    if (stop_requested()) throw TrialStopped();
  }

  // An intermediate value at `step` (>= 0): learning curves and pruning. Throws TrialStopped,
  // before sending, once triald has asked the trial to stop.
  void Report(int64_t step, double value) {
    CheckStop();
    if (step < 0) throw std::invalid_argument("step must be >= 0, got " + std::to_string(step));
    Send("{\"type\":\"report\",\"step\":" + std::to_string(step) +
         ",\"value\":" + detail::FormatNumber(value, "value") + "}");
  }
  // The objective (once): one value, or one per objective of the study (n_objectives(), in
  // the order of [study] directions). One value in a vector is sent as "value".
  void Final(double value) {
    Finish("{\"type\":\"final\",\"value\":" + detail::FormatNumber(value, "value") + "}");
  }
  void Final(const std::vector<double>& values) {
    if (values.empty()) throw std::invalid_argument("values must not be empty");
    if (values.size() == 1) return Final(values.front());
    Finish("{\"type\":\"final\",\"values\":" + NumberArray(values, "values") + "}");
  }
  // The trial's constraint values, before Final(): feasible when every one is <= 0 (Optuna's
  // definition). An empty vector sends nothing (no constraints: feasible). Throws
  // std::invalid_argument for a non-finite value, std::logic_error after Final().
  void Constraints(const std::vector<double>& values) {
    const std::string array = NumberArray(values, "constraint value");
    std::lock_guard<std::mutex> lock(mutex_);
    if (finished_) throw std::logic_error("Constraints() must come before Final()");
    if (!values.empty()) WriteLocked("{\"type\":\"constraints\",\"values\":" + array + "}");
  }
  // The study's number of objectives (TRIALD_N_OBJECTIVES; 1 when unset, as when run by hand).
  int n_objectives() const { return n_objectives_; }
  // A named attribute (a number, a string or a bool).
  void Attr(std::string_view key, double value) {
    SendAttr(key, detail::FormatNumber(value, "attribute value"));
  }
  void Attr(std::string_view key, int64_t value) { SendAttr(key, std::to_string(value)); }
  void Attr(std::string_view key, int value) { Attr(key, static_cast<int64_t>(value)); }
  void Attr(std::string_view key, bool value) { SendAttr(key, value ? "true" : "false"); }
  void Attr(std::string_view key, std::string_view value) {
    std::string v;
    detail::AppendJsonString(v, value);
    SendAttr(key, v);
  }
  void Attr(std::string_view key, const char* value) { Attr(key, std::string_view(value)); }
  // The worker's own account of a failure. Never refused: shortened to fit one line.
  void Error(std::string_view message) {
    std::string_view m = message.substr(0, kMaxLineBytes - 64);
    std::string line = "{\"type\":\"error\",\"message\":";
    detail::AppendJsonString(line, m);
    while (line.size() + 1 > kMaxLineBytes && !m.empty()) {  // escapes can grow the text
      m = m.substr(0, m.size() / 2);
      line = "{\"type\":\"error\",\"message\":";
      detail::AppendJsonString(line, m);
    }
    Send(line + "}");
  }
  void Heartbeat() { Send("{\"type\":\"heartbeat\"}"); }

 private:
  template <typename T>
  static T Convert(const std::string& name, const ParamValue& v) {
    auto wrong = [&](const char* want) -> std::invalid_argument {
      return std::invalid_argument("parameter \"" + name + "\" is not " + want);
    };
    if constexpr (std::is_same_v<T, bool>) {
      if (const bool* b = std::get_if<bool>(&v)) return *b;
      throw wrong("a boolean");
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (const std::string* s = std::get_if<std::string>(&v)) return *s;
      throw wrong("a string");
    } else if constexpr (std::is_integral_v<T>) {
      if (const int64_t* i = std::get_if<int64_t>(&v)) return static_cast<T>(*i);
      if (const double* d = std::get_if<double>(&v)) {
        if (std::floor(*d) == *d && std::fabs(*d) < 9.0e18) return static_cast<T>(*d);
      }
      throw wrong("an integer");
    } else {
      static_assert(std::is_floating_point_v<T>, "Param<T>: T is a number, string or bool");
      if (const double* d = std::get_if<double>(&v)) return static_cast<T>(*d);
      if (const int64_t* i = std::get_if<int64_t>(&v)) return static_cast<T>(*i);
      throw wrong("a number");
    }
  }

  static std::string NumberArray(const std::vector<double>& values, const char* what) {
    std::string out = "[";
    for (size_t i = 0; i < values.size(); ++i) {
      out += (i ? "," : "") + detail::FormatNumber(values[i], what);
    }
    return out + "]";
  }

  void SendAttr(std::string_view key, const std::string& json_value) {
    if (key.empty() || key.size() > kMaxAttrKeyBytes) {
      throw std::invalid_argument("attribute key must be 1 to " + std::to_string(kMaxAttrKeyBytes) +
                                  " bytes");
    }
    std::string line = "{\"type\":\"attr\",\"key\":";
    detail::AppendJsonString(line, key);
    Send(line + ",\"value\":" + json_value + "}");
  }

  void Finish(const std::string& line) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finished_) throw std::logic_error("Final() was already called for this trial");
    WriteLocked(line);
    finished_ = true;
  }

  void Send(const std::string& line) {
    std::lock_guard<std::mutex> lock(mutex_);
    WriteLocked(line);
  }

  void WriteLocked(const std::string& line) {
    if (line.size() > kMaxLineBytes) {
      throw std::invalid_argument("a report line of " + std::to_string(line.size()) +
                                  " bytes exceeds triald's limit of " +
                                  std::to_string(kMaxLineBytes));
    }
    const std::string data = line + "\n";
    const int fd = fd_ >= 0 ? fd_ : STDERR_FILENO;
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw std::runtime_error(std::string("writing to the report pipe: ") +
                                 std::strerror(errno));
      }
      done += static_cast<size_t>(n);
    }
  }

  std::map<std::string, ParamValue> params_;
  int64_t number_ = -1;
  std::string study_;
  std::string dir_;
  std::string resume_dir_;
  int fd_ = -1;  // -1: run by hand, lines go to stderr
  int n_objectives_ = 1;
  bool finished_ = false;
  std::mutex mutex_;
};

namespace detail {

// Throws std::invalid_argument (Optuna 3.1's message) unless `count` values fit the study.
inline void CheckObjectiveCount(size_t count, int n_objectives) {
  if (count != static_cast<size_t>(n_objectives)) {
    throw std::invalid_argument("The number of the values " + std::to_string(count) +
                                " did not match the number of the objectives " +
                                std::to_string(n_objectives) + ".");
  }
}
inline size_t ValueCount(double) { return 1; }
inline size_t ValueCount(const std::vector<double>& values) { return values.size(); }

}  // namespace detail

// Runs objective(trial) as one triald trial and returns the process's exit status, for
// `return triald::Run(...)` in main(): 0 after sending the returned value (a double, or a
// std::vector<double> for several objectives) as final; 143 when triald stopped the trial; 1
// after sending an exception's message as the trial's error (also printed on stderr), or when
// the number of values returned is not the study's number of objectives (n_objectives()).
template <typename Objective>
int Run(Objective&& objective) {
  try {
    Trial trial;
    try {
      auto result = objective(trial);
      detail::CheckObjectiveCount(detail::ValueCount(result), trial.n_objectives());
      trial.Final(result);
      return 0;
    } catch (const TrialStopped&) {
      return kStoppedExitStatus;
    } catch (const std::exception& e) {
      trial.Error(e.what());
      std::cerr << "objective failed: " << e.what() << "\n";
      return 1;
    }
  } catch (const std::exception& e) {  // the environment itself was malformed
    std::cerr << "triald trial: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace triald
