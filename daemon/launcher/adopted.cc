#include "daemon/launcher/adopted.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace triald::launcher {
namespace {

// The whole of a small /proc file ("" when it cannot be read). Plain read(2): this runs on the
// event loop at every trial's end without cgroups, so it avoids iostreams' overhead.
std::string ReadProcFile(const std::string& path) {
  std::string out;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace

std::string EnvironValue(pid_t pid, std::string_view key) {
  const std::string env = ReadProcFile("/proc/" + std::to_string(pid) + "/environ");
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

std::vector<pid_t> AdoptedProcessesOf(const std::string& trial_dir,
                                      const std::function<bool(pid_t)>& known) {
  std::vector<pid_t> out;
  if (trial_dir.empty()) return out;
  // An orphan is re-parented to one of the subreaper's threads: every thread's list counts.
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) return out;
  while (dirent* ent = ::readdir(tasks)) {
    if (ent->d_name[0] == '.') continue;
    const std::string children =
        ReadProcFile(std::string("/proc/self/task/") + ent->d_name + "/children");
    const char* p = children.c_str();
    while (*p != '\0') {
      char* end = nullptr;
      const long pid = std::strtol(p, &end, 10);
      if (end == p) break;
      p = end;
      if (pid > 0 && !known(static_cast<pid_t>(pid)) &&
          EnvironValue(static_cast<pid_t>(pid), "TRIALD_TRIAL_DIR") == trial_dir) {
        out.push_back(static_cast<pid_t>(pid));
      }
    }
  }
  ::closedir(tasks);
  return out;
}

}  // namespace triald::launcher
