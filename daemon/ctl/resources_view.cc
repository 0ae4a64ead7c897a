#include "daemon/ctl/resources_view.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "daemon/ctl/format.h"

namespace triald::ctl {
namespace json = boost::json;

namespace {

// A non-negative integer field; nothing when null, missing or not one.
std::optional<uint64_t> Bytes(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_uint64()) return v->get_uint64();
  if (v->is_int64() && v->get_int64() >= 0) return static_cast<uint64_t>(v->get_int64());
  if (v->is_double() && v->get_double() >= 0 && std::isfinite(v->get_double())) {
    return static_cast<uint64_t>(v->get_double());
  }
  return std::nullopt;
}

std::optional<double> Seconds(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_number()) return std::nullopt;
  return v->to_number<double>();
}

std::string Source(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? EscapeForTerminal(v->get_string()) : std::string();
}

std::string Fixed2(double x) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f", x);
  return buf;
}

std::string BytesCell(std::optional<uint64_t> b) { return b ? FormatBytes(*b) : "-"; }
std::string SecondsCell(std::optional<double> s) { return s ? Fixed2(*s) : "-"; }

bool Finished(const json::object& t) {
  const json::value* s = t.if_contains("state");
  if (s == nullptr || !s->is_string()) return false;
  return s->get_string() == "COMPLETE" || s->get_string() == "PRUNED" || s->get_string() == "FAIL";
}

}  // namespace

std::string FormatBytes(uint64_t bytes) {
  static const char kUnits[] = "KMGTPE";
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double x = static_cast<double>(bytes) / 1024;
  size_t u = 0;
  // Rounded to one decimal, 1023.96K reads 1024.0K: move up a unit from 1023.95 on.
  while (x >= 1023.95 && u + 1 < sizeof(kUnits) - 1) {
    x /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %ciB", x, kUnits[u]);
  return buf;
}

const json::object* TrialResourcesOf(const json::object& trial) {
  const json::value* r = trial.if_contains("resources");
  return r != nullptr && r->is_object() ? &r->get_object() : nullptr;
}

std::vector<std::string> ResourceHeaders() { return {"PEAK_MEM", "PEAK_GPU", "CPU_S", "WALL_S"}; }

std::vector<std::string> ResourceCells(const json::object& trial) {
  const json::object* r = TrialResourcesOf(trial);
  if (r == nullptr) return {"-", "-", "-", "-"};
  return {BytesCell(Bytes(*r, "peak_memory_bytes")), BytesCell(Bytes(*r, "peak_gpu_memory_bytes")),
          SecondsCell(Seconds(*r, "cpu_time_s")), SecondsCell(Seconds(*r, "wall_s"))};
}

std::string ResourcesLine(const json::object& trial) {
  if (!trial.contains("resources")) return "";
  const json::object* r = TrialResourcesOf(trial);
  if (r == nullptr) return "resources: not measured";
  std::string s = "resources: peak memory " + BytesCell(Bytes(*r, "peak_memory_bytes"));
  if (std::string src = Source(*r, "memory_source");
      !src.empty() && Bytes(*r, "peak_memory_bytes")) {
    s += " (" + src + ")";
  }
  s += ", peak GPU memory " + BytesCell(Bytes(*r, "peak_gpu_memory_bytes"));
  std::optional<double> cpu = Seconds(*r, "cpu_time_s");
  s += ", CPU " + (cpu ? Fixed2(*cpu) + "s" : std::string("-"));
  if (std::string src = Source(*r, "cpu_source"); !src.empty() && cpu) s += " (" + src + ")";
  std::optional<double> wall = Seconds(*r, "wall_s");
  s += ", wall " + (wall ? Fixed2(*wall) + "s" : std::string("-"));
  if (std::optional<uint64_t> planned = Bytes(*r, "planned_memory_bytes")) {
    s += ", planned memory " + FormatBytes(*planned);
  }
  return s;
}

void ResourceSummary::Peak::Add(uint64_t v, int64_t trial) {
  values.push_back(v);
  if (max_trial < 0 || v > max) {
    max = v;
    max_trial = trial;
  }
}

std::string ResourceSummary::Peak::Text(const char* what) const {
  std::vector<uint64_t> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  // The median of an even count: the mean of the two middle values.
  const uint64_t median =
      n % 2 == 1 ? sorted[n / 2] : sorted[n / 2 - 1] + (sorted[n / 2] - sorted[n / 2 - 1]) / 2;
  return std::string(what) + " max " + FormatBytes(max) + " (trial " + std::to_string(max_trial) +
         "), median " + FormatBytes(median);
}

void ResourceSummary::Add(const json::object& trial) {
  reported_ = reported_ || trial.contains("resources");
  const json::object* r = TrialResourcesOf(trial);
  if (r == nullptr) return;
  const json::value* number = trial.if_contains("number");
  const int64_t n = number != nullptr && number->is_int64() ? number->get_int64() : -1;
  bool any = false;
  if (std::optional<uint64_t> b = Bytes(*r, "peak_memory_bytes")) {
    memory_.Add(*b, n);
    any = true;
    std::string src = Source(*r, "memory_source");
    if (!src.empty() && std::find(sources_.begin(), sources_.end(), src) == sources_.end()) {
      sources_.push_back(std::move(src));
    }
  }
  if (std::optional<uint64_t> b = Bytes(*r, "peak_gpu_memory_bytes")) {
    gpu_.Add(*b, n);
    any = true;
  }
  if (std::optional<double> cpu = Seconds(*r, "cpu_time_s"); cpu && Finished(trial)) {
    cpu_total_ += *cpu;
    ++cpu_trials_;
    any = true;
  }
  any = any || Seconds(*r, "wall_s").has_value();
  measured_ += any;
}

std::string ResourceSummary::Line() const {
  if (measured_ == 0) return "resources: none measured";
  std::vector<std::string> parts;
  if (!memory_.values.empty()) parts.push_back(memory_.Text("peak memory"));
  if (!gpu_.values.empty()) parts.push_back(gpu_.Text("peak GPU memory"));
  if (cpu_trials_ > 0) {
    parts.push_back("CPU " + Fixed2(cpu_total_) + "s total over " + std::to_string(cpu_trials_) +
                    (cpu_trials_ == 1 ? " finished trial" : " finished trials"));
  }
  std::string tail =
      std::to_string(measured_) + (measured_ == 1 ? " trial" : " trials") + " measured";
  if (!sources_.empty()) {
    std::string joined;
    for (const std::string& s : sources_) joined += (joined.empty() ? "" : ", ") + s;
    tail += " (" + joined + ")";
  }
  parts.push_back(tail);
  std::string s = "resources: ";
  for (size_t i = 0; i < parts.size(); ++i) s += (i == 0 ? "" : "; ") + parts[i];
  return s;
}

}  // namespace triald::ctl
