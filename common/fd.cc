#include "common/fd.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace triald::common {

void UniqueFd::Reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Result<Pipe> MakePipe(bool nonblocking_read) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return ErrnoError("pipe2", errno);
  Pipe p{UniqueFd(fds[0]), UniqueFd(fds[1])};
  if (nonblocking_read) TRIALD_RETURN_IF_ERROR(SetNonBlocking(p.read.get(), true));
  return p;
}

Status SetNonBlocking(int fd, bool on) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return ErrnoError("fcntl(F_GETFL)", errno);
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (::fcntl(fd, F_SETFL, flags) != 0) return ErrnoError("fcntl(F_SETFL)", errno);
  return Status::Ok();
}

std::vector<int> ListOpenFds() {
  std::vector<int> fds;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return fds;
  int own = ::dirfd(dir);
  while (dirent* ent = ::readdir(dir)) {
    if (ent->d_name[0] == '.') continue;
    int fd = std::atoi(ent->d_name);
    if (fd != own) fds.push_back(fd);
  }
  ::closedir(dir);
  return fds;
}

Status WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write", errno);
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Result<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return IoError("cannot read " + path + ": Is a directory");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoError("cannot read " + path, errno);
  std::string bytes;
  char chunk[1 << 16];
  while (in.read(chunk, sizeof(chunk)) || in.gcount() > 0) {
    bytes.append(chunk, static_cast<size_t>(in.gcount()));
    if (bytes.size() > max_bytes) {
      return InvalidArgument("cannot read " + path + ": larger than " + std::to_string(max_bytes) +
                             " bytes");
    }
  }
  if (in.bad()) return IoError("cannot read " + path + ": read failed");
  return bytes;
}

Status MakeDirs(const std::string& path, unsigned mode) {
  if (path.empty()) return InvalidArgument("MakeDirs: empty path");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return Status::Ok();
    return ErrnoError("create folder " + path, ENOTDIR);
  }
  const size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    TRIALD_RETURN_IF_ERROR(MakeDirs(path.substr(0, slash), mode));
  }
  if (::mkdir(path.c_str(), static_cast<mode_t>(mode)) != 0 && errno != EEXIST) {
    return ErrnoError("create folder " + path, errno);
  }
  return Status::Ok();
}

}  // namespace triald::common
