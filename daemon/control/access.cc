#include "daemon/control/access.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <charconv>
#include <cstring>

namespace triald::daemon {
using common::Result;

const char* AccessName(Access access) {
  switch (access) {
    case Access::kNone:
      return "none";
    case Access::kRead:
      return "read";
    case Access::kFull:
      return "full";
  }
  return "none";
}

namespace {

bool InGroup(const PeerCredentials& peer, gid_t gid) {
  if (peer.gid == gid) return true;
  for (gid_t g : peer.groups) {
    if (g == gid) return true;
  }
  return false;
}

// Root or triald's own uid: may change every study.
bool IsAdmin(const AccessPolicy& policy, const PeerCredentials& peer) {
  return peer.uid == 0 || peer.uid == policy.daemon_uid;
}

// Who gets full access, for messages.
std::string FullAccessHolders(const AccessPolicy& policy) {
  std::string who = "root, triald's user (uid " + std::to_string(policy.daemon_uid) + ")";
  if (policy.trust_gid) who += ", members of --trust-group " + GroupLabel(*policy.trust_gid);
  if (policy.runs_as_submitter) {
    who += ", members of the socket group " + GroupLabel(policy.allowed_gid);
  }
  return who;
}

}  // namespace

Access DecideAccess(const AccessPolicy& policy, const PeerCredentials& peer) {
  if (IsAdmin(policy, peer)) return Access::kFull;
  if (policy.trust_gid && InGroup(peer, *policy.trust_gid)) return Access::kFull;
  if (InGroup(peer, policy.allowed_gid)) {
    // A non-root daemon would run a member's trials as triald's user: reads only.
    return policy.runs_as_submitter ? Access::kFull : Access::kRead;
  }
  return policy.read_open ? Access::kRead : Access::kNone;
}

bool MayChangeStudy(const AccessPolicy& policy, const PeerCredentials& peer,
                    int64_t submitter_uid) {
  return IsAdmin(policy, peer) ||
         (submitter_uid >= 0 && static_cast<int64_t>(peer.uid) == submitter_uid);
}

common::Status StudyDenialFor(const AccessPolicy& policy, const PeerCredentials& peer,
                              std::string_view verb, std::string_view study, int64_t submitter_uid,
                              std::string_view submitter_name) {
  std::string owner =
      submitter_uid < 0
          ? std::string(
                "its submitter is unknown (stored before submitters were recorded), so "
                "only root and triald's user (uid ") +
                std::to_string(policy.daemon_uid) + ") may"
          : "only its submitter (" +
                (submitter_name.empty() ? std::string() : std::string(submitter_name) + ", ") +
                "uid " + std::to_string(submitter_uid) + "), root and triald's user (uid " +
                std::to_string(policy.daemon_uid) + ") may";
  return common::PermissionDenied("uid " + std::to_string(peer.uid) + " may not use \"" +
                                  std::string(verb) + "\" on study \"" + std::string(study) +
                                  "\": " + owner);
}

std::string UserName(uid_t uid) {
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
    return found->pw_name;
  }
  return "";
}

bool Permits(Access access, bool read_verb) {
  return access == Access::kFull || (access == Access::kRead && read_verb);
}

common::Status DenialFor(const AccessPolicy& policy, const PeerCredentials& peer, Access access,
                         std::string_view verb) {
  std::string msg = "uid " + std::to_string(peer.uid) + " may not use \"" + std::string(verb) +
                    "\": only " + FullAccessHolders(policy) + " may" +
                    (access == Access::kRead ? " change anything (others may only read)" : "");
  if (!policy.runs_as_submitter && !policy.trust_gid && InGroup(peer, policy.allowed_gid)) {
    msg += "; triald runs as uid " + std::to_string(policy.daemon_uid) +
           ", not root, so its socket group may only read (see --trust-group)";
  }
  return common::PermissionDenied(msg);
}

std::vector<gid_t> ParseStatusGroups(std::string_view text) {
  std::vector<gid_t> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.substr(0, 7) != "Groups:") continue;
    line.remove_prefix(7);
    while (!line.empty()) {
      size_t skip = line.find_first_not_of(" \t");
      if (skip == std::string_view::npos) break;
      line.remove_prefix(skip);
      size_t len = line.find_first_of(" \t");
      std::string_view tok = line.substr(0, len);
      unsigned long long g = 0;
      auto [p, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), g);
      if (ec == std::errc() && p == tok.data() + tok.size() && g <= UINT32_MAX) {
        out.push_back(static_cast<gid_t>(g));
      }
      if (len == std::string_view::npos) break;
      line.remove_prefix(len);
    }
    break;
  }
  return out;
}

Result<PeerCredentials> ReadPeerCredentials(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return common::ErrnoError("getsockopt(SO_PEERCRED) on the control socket", errno);
  }
  PeerCredentials peer;
  peer.pid = cred.pid;
  peer.uid = cred.uid;
  peer.gid = cred.gid;
  // SO_PEERGROUPS (Linux 4.13) gives the groups the peer had when it connected, race-free.
  std::vector<gid_t> groups(64);
  for (;;) {
    socklen_t glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) == 0) {
      groups.resize(glen / sizeof(gid_t));
      peer.groups = std::move(groups);
      return peer;
    }
    if (errno == ERANGE && glen > groups.size() * sizeof(gid_t)) {
      groups.resize(glen / sizeof(gid_t));
      continue;
    }
    break;
  }
  // Older kernels: the peer process's current groups (it may have exited: then none).
  Result<std::string> status = common::ReadFile("/proc/" + std::to_string(cred.pid) + "/status");
  if (status.ok()) peer.groups = ParseStatusGroups(*status);
  return peer;
}

Result<gid_t> ResolveGroup(const std::string& name) {
  if (name.empty()) return common::InvalidArgument("empty group name");
  std::vector<char> buf(16384);
  group gr{};
  group* found = nullptr;
  int err = ::getgrnam_r(name.c_str(), &gr, buf.data(), buf.size(), &found);
  if (err == 0 && found != nullptr) return found->gr_gid;
  unsigned long long n = 0;
  auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), n);
  if (ec == std::errc() && p == name.data() + name.size() && n < UINT32_MAX) {
    return static_cast<gid_t>(n);
  }
  return common::NotFound("group \"" + name + "\" does not exist (not in the group database" +
                          (err != 0 ? std::string(": ") + std::strerror(err) : std::string()) +
                          ", not a number)");
}

std::string GroupLabel(gid_t gid) {
  std::vector<char> buf(16384);
  group gr{};
  group* found = nullptr;
  if (::getgrgid_r(gid, &gr, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
    return std::string(found->gr_name) + " (gid " + std::to_string(gid) + ")";
  }
  return "gid " + std::to_string(gid);
}

Result<common::UniqueFd> ListenControlSocket(const std::string& path, mode_t mode, gid_t gid) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return common::InvalidArgument("socket path \"" + path + "\" is longer than " +
                                   std::to_string(sizeof(addr.sun_path) - 1) + " bytes");
  }
  const size_t slash = path.rfind('/');
  const std::string parent =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base.empty()) return common::InvalidArgument("socket path \"" + path + "\" names a folder");
  common::UniqueFd parent_fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!parent_fd.valid()) return common::ErrnoError("open the socket's folder " + parent, errno);
  struct stat st {};
  if (::fstatat(parent_fd.get(), base.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      !S_ISSOCK(st.st_mode)) {
    return common::FailedPrecondition("control socket path " + path +
                                      " exists and is not a socket; refusing to replace it");
  }
  // The socket is bound, given its group and mode inside a private folder (0700, ours) that
  // nobody else can enter, then renamed into place: its owner and mode are never set through a
  // path someone could swap for a link, and it never appears at `path` with other permissions.
  // (A stale socket from a previous run is replaced by the rename; the state-dir lock is ours.)
  std::string private_dir = parent + "/.triald-sock-XXXXXX";
  if (::mkdtemp(private_dir.data()) == nullptr) {
    return common::ErrnoError("create a private folder beside " + path, errno);
  }
  const std::string private_name = private_dir.substr(private_dir.rfind('/') + 1);
  common::UniqueFd private_fd(::openat(parent_fd.get(), private_name.c_str(),
                                       O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  auto cleanup = [&] {
    if (private_fd.valid()) ::unlinkat(private_fd.get(), "s", 0);
    ::unlinkat(parent_fd.get(), private_name.c_str(), AT_REMOVEDIR);
  };
  if (!private_fd.valid()) {
    int e = errno;
    cleanup();
    return common::ErrnoError("open " + private_dir, e);
  }
  // bind() takes a path; /proc/self/fd/N/s reaches the private folder by its descriptor and is
  // short whatever `path` is.
  std::string bind_path = "/proc/self/fd/" + std::to_string(private_fd.get()) + "/s";
  if (::access(bind_path.substr(0, bind_path.size() - 2).c_str(), F_OK) != 0) {
    bind_path = private_dir + "/s";
  }
  if (bind_path.size() >= sizeof(addr.sun_path)) {
    cleanup();
    return common::InvalidArgument("socket path \"" + path + "\": its folder's path is too long");
  }
  std::memcpy(addr.sun_path, bind_path.c_str(), bind_path.size() + 1);
  common::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    int e = errno;
    cleanup();
    return common::ErrnoError("socket for " + path, e);
  }
  mode_t old_mask = ::umask(0177);
  int rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  int bind_errno = errno;
  ::umask(old_mask);
  if (rc != 0) {
    cleanup();
    return common::ErrnoError("bind control socket " + path, bind_errno);
  }
  if (::fchownat(private_fd.get(), "s", static_cast<uid_t>(-1), gid, AT_SYMLINK_NOFOLLOW) != 0) {
    int e = errno;
    cleanup();
    return common::ErrnoError("give control socket " + path + " to group " + GroupLabel(gid) +
                                  " (the daemon must be root or a member of that group)",
                              e);
  }
  if (::fchmodat(private_fd.get(), "s", mode, 0) != 0) {
    int e = errno;
    cleanup();
    return common::ErrnoError("chmod control socket " + path, e);
  }
  if (::listen(fd.get(), SOMAXCONN) != 0) {
    int e = errno;
    cleanup();
    return common::ErrnoError("listen on control socket " + path, e);
  }
  if (::renameat(private_fd.get(), "s", parent_fd.get(), base.c_str()) != 0) {
    int e = errno;
    cleanup();
    return common::ErrnoError("move control socket into place at " + path, e);
  }
  cleanup();
  return fd;
}

}  // namespace triald::daemon
