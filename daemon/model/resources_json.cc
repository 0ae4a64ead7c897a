#include "daemon/model/resources_json.h"

#include <cmath>
#include <limits>

namespace triald::model {
namespace json = boost::json;

namespace {

json::value Bytes(const std::optional<uint64_t>& v) {
  if (!v) return nullptr;
  return *v;
}

json::value Seconds(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v)) return nullptr;
  return *v;
}

}  // namespace

json::object ResourcesToJson(const TrialResources& r) {
  json::object o;
  o["peak_memory_bytes"] = Bytes(r.peak_memory_bytes);
  o["memory_source"] = r.memory_source;
  o["peak_gpu_memory_bytes"] = Bytes(r.peak_gpu_memory_bytes);
  o["cpu_time_s"] = Seconds(r.cpu_time_s);
  o["cpu_source"] = r.cpu_source;
  o["wall_s"] = Seconds(r.wall_s);
  return o;
}

common::Result<TrialResources> ResourcesFromJson(const json::value& v, const std::string& where) {
  if (!v.is_object()) return common::InvalidArgument(where + ": resources are not a JSON object");
  auto bad = [&](const std::string& key, const std::string& want) {
    return common::InvalidArgument(where + ": resources." + key + " is not " + want);
  };
  TrialResources r;
  for (const auto& [key, field] : v.get_object()) {
    if (key == "peak_memory_bytes" || key == "peak_gpu_memory_bytes") {
      std::optional<uint64_t>& out =
          key == "peak_memory_bytes" ? r.peak_memory_bytes : r.peak_gpu_memory_bytes;
      if (field.is_null()) continue;
      if (field.is_uint64()) {
        out = field.get_uint64();
      } else if (field.is_int64() && field.get_int64() >= 0) {
        out = static_cast<uint64_t>(field.get_int64());
      } else if (field.is_double() && field.get_double() >= 0 && field.get_double() < 1.8e19 &&
                 std::floor(field.get_double()) == field.get_double()) {
        out = static_cast<uint64_t>(field.get_double());
      } else {
        return bad(std::string(key), "a byte count (an integer >= 0) or null");
      }
    } else if (key == "cpu_time_s" || key == "wall_s") {
      std::optional<double>& out = key == "cpu_time_s" ? r.cpu_time_s : r.wall_s;
      if (field.is_null()) continue;
      if (!field.is_number()) return bad(std::string(key), "a number of seconds or null");
      out = field.to_number<double>();
      if (!std::isfinite(*out) || *out < 0) {
        return bad(std::string(key), "a finite number of seconds >= 0 or null");
      }
    } else if (key == "memory_source" || key == "cpu_source") {
      if (!field.is_string()) return bad(std::string(key), "a string");
      (key == "memory_source" ? r.memory_source : r.cpu_source) = field.get_string().c_str();
    }
  }
  return r;
}

}  // namespace triald::model
