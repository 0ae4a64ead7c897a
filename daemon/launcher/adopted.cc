#include "daemon/launcher/adopted.h"

#include <dirent.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>

namespace triald::launcher {

std::string EnvironValue(pid_t pid, std::string_view key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  if (!in) return "";
  std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t pos = 0; pos < env.size();) {
    size_t end = env.find('\0', pos);
    if (end == std::string::npos) end = env.size();
    const std::string_view entry(env.data() + pos, end - pos);
    if (entry.size() > key.size() && entry.substr(0, key.size()) == key &&
        entry[key.size()] == '=') {
      return std::string(entry.substr(key.size() + 1));
    }
    pos = end + 1;
  }
  return "";
}

std::vector<pid_t> AdoptedProcessesOf(const std::string& trial_dir) {
  std::vector<pid_t> out;
  if (trial_dir.empty()) return out;
  // An orphan is re-parented to one of the subreaper's threads: every thread's list counts.
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) return out;
  while (dirent* ent = ::readdir(tasks)) {
    if (ent->d_name[0] == '.') continue;
    std::ifstream in(std::string("/proc/self/task/") + ent->d_name + "/children");
    long pid = 0;
    while (in >> pid) {
      if (pid > 0 && EnvironValue(static_cast<pid_t>(pid), "TRIALD_TRIAL_DIR") == trial_dir) {
        out.push_back(static_cast<pid_t>(pid));
      }
    }
  }
  ::closedir(tasks);
  return out;
}

}  // namespace triald::launcher
