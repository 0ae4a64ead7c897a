#include "daemon/ctl/submit_code.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "common/fd.h"
#include "common/sha256.h"
#include "common/utf8.h"

namespace triald::ctl {

namespace {

constexpr size_t kMaxHashedBytes = 64u << 20;
constexpr size_t kMaxKeptInAll = 1u << 20;

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// A compiled program (ELF), which is an interpreter or a tool rather than the study's code.
bool IsElf(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, sizeof(magic)) && std::string(magic, 4) ==
                                              "\x7f"
                                              "ELF";
}

}  // namespace

std::vector<std::string> ObjectiveCodePaths(const config::SweepSpec& spec,
                                            const std::vector<std::string>& checked_files) {
  namespace fs = std::filesystem;
  const config::ObjectiveConfig& obj = spec.objective;
  std::vector<std::string> paths;
  if (obj.kind == "python") {
    if (!obj.function_file.empty()) paths.push_back(obj.function_file);
    if (!obj.constraints_file.empty()) paths.push_back(obj.constraints_file);
    for (const std::string& f : checked_files) paths.push_back(f);
  } else if (obj.kind == "exec") {
    for (size_t i = 0; i < obj.command.size(); ++i) {
      const std::string& arg = obj.command[i];
      // command[0] without '/' is looked up in PATH: an interpreter or a tool.
      if (arg.empty() || arg[0] == '-' || (i == 0 && arg.find('/') == std::string::npos)) {
        continue;
      }
      fs::path p(arg);
      if (p.is_relative()) p = fs::path(obj.workdir) / p;
      const std::string abs = p.lexically_normal().string();
      if (IsRegularFile(abs) && !IsElf(abs)) paths.push_back(abs);
    }
  }
  std::vector<std::string> unique;
  for (const std::string& p : paths) {
    if (std::find(unique.begin(), unique.end(), p) == unique.end()) unique.push_back(p);
  }
  if (unique.size() > config::kMaxCodeFiles) unique.resize(config::kMaxCodeFiles);
  return unique;
}

std::vector<config::CodeFile> ReadCodeFiles(const std::vector<std::string>& paths) {
  std::vector<config::CodeFile> files;
  size_t kept = 0;  // source bytes kept so far: the submit request stays well within its limit
  for (const std::string& path : paths) {
    common::Result<std::string> bytes = common::ReadFile(path, kMaxHashedBytes);
    if (!bytes.ok()) continue;
    config::CodeFile f;
    f.path = path;
    f.sha256 = common::Sha256Hex(*bytes);
    f.bytes = bytes->size();
    if (bytes->size() <= config::kMaxKeptSourceBytes && kept + bytes->size() <= kMaxKeptInAll &&
        common::DescribeInvalidUtf8(*bytes).empty()) {
      kept += bytes->size();
      f.source = std::move(*bytes);
    }
    files.push_back(std::move(f));
  }
  return files;
}

boost::json::array CodeFilesJson(const std::vector<config::CodeFile>& files) {
  boost::json::array a;
  for (const config::CodeFile& f : files) {
    a.push_back(boost::json::object{{"path", f.path},
                                    {"sha256", f.sha256},
                                    {"bytes", static_cast<int64_t>(f.bytes)},
                                    {"source", f.source}});
  }
  return a;
}

std::string CodeFileNow(const std::string& path, const std::string& sha256_at_submit) {
  common::Result<std::string> bytes = common::ReadFile(path, kMaxHashedBytes);
  if (!bytes.ok()) {
    const std::string why = bytes.status().message();
    const size_t colon = why.rfind(": ");
    return "missing now (" + (colon == std::string::npos ? why : why.substr(colon + 2)) + ")";
  }
  const std::string now = common::Sha256Hex(*bytes);
  if (now == sha256_at_submit) return "unchanged";
  return "CHANGED since submit (sha256 now " + now.substr(0, 12) + ")";
}

}  // namespace triald::ctl
