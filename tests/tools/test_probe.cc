// triald-test-probe: a worker for the integration tests that reports what it finds about its
// own process: open descriptors, signal mask and dispositions, process group, parent, cwd.
// Plain libc, so that nothing but the launcher's doing shows up in its descriptor table.
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

std::string StatusField(const char* name) {
  FILE* f = std::fopen("/proc/self/status", "re");
  if (f == nullptr) return "";
  char line[512];
  std::string value;
  size_t n = std::strlen(name);
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, name, n) == 0 && line[n] == ':') {
      value = line + n + 1;
      while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.erase(0, 1);
      while (!value.empty() && value.back() == '\n') value.pop_back();
    }
  }
  std::fclose(f);
  return value;
}

}  // namespace

int main() {
  const char* fd_env = std::getenv("TRIALD_REPORT_FD");
  if (fd_env == nullptr) {
    std::fprintf(stderr, "TRIALD_REPORT_FD is not set\n");
    return 1;
  }
  int report = std::atoi(fd_env);
  // List descriptors before opening anything else (the listing's own is excluded).
  std::string fds = "[";
  std::string links = "[";  // what each descriptor points at, for a failing test's message
  DIR* dir = ::opendir("/proc/self/fd");
  int own = dir ? ::dirfd(dir) : -1;
  bool first = true;
  while (dir != nullptr) {
    dirent* ent = ::readdir(dir);
    if (ent == nullptr) break;
    if (ent->d_name[0] == '.' || std::atoi(ent->d_name) == own) continue;
    fds += (first ? "" : ",") + std::string(ent->d_name);
    char link[512] = "";
    std::string proc = std::string("/proc/self/fd/") + ent->d_name;
    ssize_t n = ::readlink(proc.c_str(), link, sizeof(link) - 1);
    links += (first ? "\"" : ",\"") + std::string(ent->d_name) + "=" +
             std::string(link, n > 0 ? static_cast<size_t>(n) : 0) + "\"";
    first = false;
  }
  if (dir != nullptr) ::closedir(dir);
  fds += "]";
  links += "]";
  char cwd[4096] = "";
  if (::getcwd(cwd, sizeof(cwd)) == nullptr) cwd[0] = '\0';

  std::string out;
  auto attr = [&](const char* key, const std::string& json) {
    out += std::string("{\"type\":\"attr\",\"key\":\"") + key + "\",\"value\":" + json + "}\n";
  };
  attr("fds", fds);
  attr("fd_links", links);
  attr("sigblk", "\"" + StatusField("SigBlk") + "\"");
  attr("sigign", "\"" + StatusField("SigIgn") + "\"");
  attr("own_group", ::getpgrp() == ::getpid() ? "true" : "false");
  attr("cwd", "\"" + std::string(cwd) + "\"");
  out += "{\"type\":\"final\",\"value\":1}\n";
  if (::write(report, out.data(), out.size()) != static_cast<ssize_t>(out.size())) return 1;
  std::printf("probe done\n");
  return 0;
}
