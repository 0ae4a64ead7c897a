#include "config/daemon_config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "config/sweep.h"
#include "config/toml_diag.h"

namespace triald::config {
namespace {

using common::InvalidArgument;
using common::Result;
using common::Status;

// Reads one config document; not thread-safe, one per call.
class DaemonConfigParser {
 public:
  DaemonConfigParser(const std::string& text, const std::string& path)
      : diag_(text, path.empty() ? "<config>" : path) {}

  Result<DaemonConfig> Parse() {
    TRIALD_ASSIGN_OR_RETURN(toml::table root, diag_.Parse(""));
    DaemonConfig out;
    for (auto&& [key, node] : root) {
      const std::string name(key.str());
      if ((name != "daemon" && name != "devices" && name != "slurm") || !node.is_table()) {
        return InvalidArgument(diag_.Where(node.source()) + ": unknown " +
                               (node.is_table() ? "table [" : "key \"") + name +
                               (node.is_table() ? "]" : "\"") +
                               "; expected the tables [daemon], [devices] and [slurm]");
      }
    }
    if (const toml::table* t = root.get_as<toml::table>("daemon")) {
      TRIALD_RETURN_IF_ERROR(
          CheckKeys("[daemon]", *t,
                    {"state_dir", "socket", "log_level", "shutdown_timeout", "storage", "node_name",
                     "heartbeat_interval", "node_timeout", "resource_accounting", "http"}));
      TRIALD_RETURN_IF_ERROR(ReadPath("[daemon]", *t, "state_dir", &out.state_dir));
      TRIALD_RETURN_IF_ERROR(ReadPath("[daemon]", *t, "socket", &out.socket));
      if (const toml::node* n = t->get("log_level")) {
        const auto* v = n->as_string();
        if (v == nullptr) return Bad("[daemon]", "log_level", *n, "a level name, e.g. \"info\"");
        out.log_level = v->get();
      }
      if (const toml::node* n = t->get("shutdown_timeout")) {
        TRIALD_RETURN_IF_ERROR(
            ReadPositive("[daemon]", "shutdown_timeout", *n, &out.shutdown_timeout));
      }
      for (auto [key, field] : {std::pair<const char*, std::string*>{"storage", &out.storage},
                                {"node_name", &out.node_name},
                                {"http", &out.http}}) {
        if (const toml::node* n = t->get(key)) {
          const auto* v = n->as_string();
          if (v == nullptr || v->get().empty()) {
            return Bad("[daemon]", key, *n,
                       std::string(key) == "storage"
                           ? "a URL, e.g. \"postgresql://triald@db.example:5432/triald\""
                       : std::string(key) == "http" ? "HOST:PORT, e.g. \"127.0.0.1:8080\""
                                                    : "a non-empty node name");
          }
          *field = v->get();
        }
      }
      if (const toml::node* n = t->get("heartbeat_interval")) {
        TRIALD_RETURN_IF_ERROR(
            ReadPositive("[daemon]", "heartbeat_interval", *n, &out.heartbeat_interval));
      }
      if (const toml::node* n = t->get("node_timeout")) {
        TRIALD_RETURN_IF_ERROR(ReadPositive("[daemon]", "node_timeout", *n, &out.node_timeout));
      }
      if (const toml::node* n = t->get("resource_accounting")) {
        const auto* v = n->as_boolean();
        if (v == nullptr) return Bad("[daemon]", "resource_accounting", *n, "true or false");
        out.resource_accounting = v->get();
      }
    }
    if (const toml::table* t = root.get_as<toml::table>("devices")) {
      DevicesConfig& d = out.devices;
      TRIALD_RETURN_IF_ERROR(CheckKeys("[devices]", *t,
                                       {"cpu", "gpus", "slots_per_gpu", "nvml_library",
                                        "gpu_release_timeout", "gpu_sample_interval"}));
      if (const toml::node* n = t->get("cpu")) {
        TRIALD_RETURN_IF_ERROR(ReadInt("[devices]", "cpu", *n, 1, 4096, &d.cpu));
      }
      if (const toml::node* n = t->get("slots_per_gpu")) {
        TRIALD_RETURN_IF_ERROR(ReadInt("[devices]", "slots_per_gpu", *n, 1, 64, &d.slots_per_gpu));
      }
      if (const toml::node* n = t->get("gpus")) {
        const std::string expected = "an array of distinct GPU indices >= 0, e.g. [0, 1]";
        const toml::array* arr = n->as_array();
        if (arr == nullptr) return Bad("[devices]", "gpus", *n, expected);
        std::vector<int> gpus;
        for (const toml::node& e : *arr) {
          const auto* i = e.as_integer();
          if (i == nullptr || i->get() < 0 || i->get() > 1023 ||
              std::find(gpus.begin(), gpus.end(), i->get()) != gpus.end()) {
            return Bad("[devices]", "gpus", *n, expected);
          }
          gpus.push_back(static_cast<int>(i->get()));
        }
        d.gpus = std::move(gpus);
      }
      if (const toml::node* n = t->get("nvml_library")) {
        const auto* v = n->as_string();
        if (v == nullptr || v->get().empty()) {
          return Bad("[devices]", "nvml_library", *n, "a library file name or path");
        }
        d.nvml_library = v->get();
      }
      if (const toml::node* n = t->get("gpu_release_timeout")) {
        TRIALD_RETURN_IF_ERROR(
            ReadPositive("[devices]", "gpu_release_timeout", *n, &d.gpu_release_timeout));
      }
      if (const toml::node* n = t->get("gpu_sample_interval")) {
        double x = -1;
        if (const auto* i = n->as_integer()) x = static_cast<double>(i->get());
        if (const auto* f = n->as_floating_point()) x = f->get();
        if (!std::isfinite(x) || x <= 0 || x > kMaxGpuSampleInterval) {
          return Bad("[devices]", "gpu_sample_interval", *n, "a number of seconds > 0 and <= 60");
        }
        d.gpu_sample_interval = x;
      }
    }
    if (const toml::table* t = root.get_as<toml::table>("slurm")) {
      TRIALD_RETURN_IF_ERROR(
          CheckKeys("[slurm]", *t, {"partition", "account", "qos", "constraint"}));
      for (auto [key, field] :
           {std::pair<const char*, std::string*>{"partition", &out.slurm.partition},
            {"account", &out.slurm.account},
            {"qos", &out.slurm.qos},
            {"constraint", &out.slurm.constraint}}) {
        const toml::node* n = t->get(key);
        if (n == nullptr) continue;
        const auto* v = n->as_string();
        const bool list = std::string(key) == "constraint";
        bool ok = v != nullptr && !v->get().empty();
        for (unsigned char c : ok ? v->get() : std::string()) {
          ok = ok && c > ' ' && c < 0x7f && (c != ',' || list);
        }
        if (!ok) return Bad("[slurm]", key, *n, "a Slurm name without spaces, e.g. \"gpu\"");
        *field = v->get();
      }
    }
    return out;
  }

 private:
  Status Bad(const std::string& table, const std::string& key, const toml::node& n,
             const std::string& expected) const {
    return diag_.ValueError(table, key, n, "", expected);
  }
  Status CheckKeys(const std::string& table, const toml::table& t,
                   const std::vector<const char*>& allowed) const {
    return diag_.CheckKeys(table, t, allowed);
  }
  Status ReadInt(const std::string& table, const std::string& key, const toml::node& n, int low,
                 int high, int* out) const {
    const auto* v = n.as_integer();
    if (v == nullptr || v->get() < low || v->get() > high) {
      return Bad(table, key, n,
                 "an integer from " + std::to_string(low) + " to " + std::to_string(high));
    }
    *out = static_cast<int>(v->get());
    return Status::Ok();
  }
  Status ReadPositive(const std::string& table, const std::string& key, const toml::node& n,
                      double* out) const {
    double x = -1;
    if (const auto* i = n.as_integer()) x = static_cast<double>(i->get());
    if (const auto* f = n.as_floating_point()) x = f->get();
    if (!std::isfinite(x) || x <= 0 || x > kMaxSeconds) {
      return Bad(
          table, key, n,
          "a number of seconds > 0 and <= " + std::to_string(kMaxSecondsWhole) + " (365 days)");
    }
    *out = x;
    return Status::Ok();
  }
  // A path; a relative one is taken from the config file's folder.
  Status ReadPath(const std::string& table, const toml::table& t, const char* key,
                  std::string* out) const {
    const toml::node* n = t.get(key);
    if (n == nullptr) return Status::Ok();
    const auto* v = n->as_string();
    if (v == nullptr || v->get().empty()) return Bad(table, key, *n, "a non-empty path");
    std::filesystem::path p(v->get());
    if (p.is_relative() && diag_.path() != "<config>") {
      p = std::filesystem::path(diag_.path()).parent_path() / p;
    }
    *out = p.lexically_normal().string();
    return Status::Ok();
  }

  TomlDiagnostics diag_;
};

}  // namespace

Result<DaemonConfig> ParseDaemonConfig(const std::string& text, const std::string& path) {
  return DaemonConfigParser(text, path).Parse();
}

Result<DaemonConfig> ParseDaemonConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return common::ErrnoError("cannot open config file " + path, errno);
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseDaemonConfig(ss.str(), path);
}

Result<std::vector<int>> ParseGpuList(const std::string& text) {
  std::vector<int> out;
  if (text.empty() || text == "none") return out;
  const std::string expected = "comma-separated distinct GPU indices, e.g. 0,1 (or \"none\")";
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    long v = item.empty() ? -1 : std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v > 1023 ||
        std::find(out.begin(), out.end(), v) != out.end()) {
      return InvalidArgument("--gpus \"" + text + "\": \"" + item +
                             "\" is not a GPU index; expected " + expected);
    }
    out.push_back(static_cast<int>(v));
  }
  if (!text.empty() && text.back() == ',') {
    return InvalidArgument("--gpus \"" + text + "\": trailing comma; expected " + expected);
  }
  return out;
}

}  // namespace triald::config
