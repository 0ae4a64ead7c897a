#include "daemon/launcher/run_as.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "common/fd.h"

namespace triald::launcher {
using common::Result;
using common::Status;

std::string RunAs::Describe() const {
  return name + " (uid " + std::to_string(uid) + ", gid " + std::to_string(gid) + ")";
}

Result<RunAs> LookUpRunAs(const model::Submitter& submitter) {
  const std::string who =
      (submitter.name.empty() ? std::string("uid ") + std::to_string(submitter.uid)
                              : "user \"" + submitter.name + "\" (uid " +
                                    std::to_string(submitter.uid) + " when it submitted)");
  if (!submitter.known()) return common::InvalidArgument("the study's submitter is unknown");
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  int err = 0;
  for (;;) {
    err = submitter.name.empty()
              ? ::getpwuid_r(static_cast<uid_t>(submitter.uid), &pw, buf.data(), buf.size(), &found)
              : ::getpwnam_r(submitter.name.c_str(), &pw, buf.data(), buf.size(), &found);
    if (err != ERANGE || buf.size() > (1 << 20)) break;
    buf.resize(buf.size() * 2);
  }
  if (err != 0 || found == nullptr) {
    return common::NotFound("cannot run the trial as its submitter: " + who +
                            " has no passwd entry on this host" +
                            (err != 0 ? std::string(" (") + std::strerror(err) + ")" : ""));
  }
  RunAs out;
  out.uid = pw.pw_uid;
  out.gid = pw.pw_gid;
  out.name = pw.pw_name;
  out.home = pw.pw_dir != nullptr ? pw.pw_dir : "";
  int n = 64;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  while (::getgrouplist(out.name.c_str(), out.gid, groups.data(), &n) < 0) {
    if (n <= static_cast<int>(groups.size())) n = static_cast<int>(groups.size()) * 2;
    if (n > 65536) {
      return common::Internal("cannot list the groups of " + who + ": more than 65536");
    }
    groups.resize(static_cast<size_t>(n));
  }
  groups.resize(static_cast<size_t>(n));
  out.groups = std::move(groups);
  return out;
}

RunAsCache::RunAsCache(Clock::duration ttl, size_t max_entries, LookUp look_up)
    : ttl_(ttl), max_entries_(max_entries), look_up_(std::move(look_up)) {}

Result<RunAs> RunAsCache::Get(const model::Submitter& submitter, Clock::time_point now) {
  const auto key = std::make_pair(submitter.name, static_cast<int64_t>(submitter.uid));
  auto it = entries_.find(key);
  if (it != entries_.end() && now - it->second.looked_up < ttl_ && now >= it->second.looked_up) {
    return it->second.user;
  }
  Result<RunAs> user = look_up_(submitter);
  if (!user.ok()) {
    if (it != entries_.end()) entries_.erase(it);
    return user;
  }
  if (it == entries_.end() && entries_.size() >= max_entries_) {
    auto oldest = entries_.begin();
    for (auto e = entries_.begin(); e != entries_.end(); ++e) {
      if (e->second.looked_up < oldest->second.looked_up) oldest = e;
    }
    entries_.erase(oldest);
  }
  entries_[key] = Entry{*user, now};
  return user;
}

namespace {

// The longest message a check's answer carries.
constexpr size_t kMaxAnswerMessage = 64 * 1024;

// "<code> <length> <message>" with a known code and exactly `length` bytes of message: the
// Status; anything else (a child cut short, or not the child's writing): nullopt.
std::optional<Status> ParseAnswer(const std::string& answer) {
  const size_t first = answer.find(' ');
  if (first == std::string::npos) return std::nullopt;
  const size_t second = answer.find(' ', first + 1);
  if (second == std::string::npos) return std::nullopt;
  int code = -1;
  size_t length = 0;
  const char* end = answer.data() + first;
  if (std::from_chars(answer.data(), end, code).ptr != end) return std::nullopt;
  end = answer.data() + second;
  if (std::from_chars(answer.data() + first + 1, end, length).ptr != end) return std::nullopt;
  if (code < 0 || code > static_cast<int>(common::Code::kInternal)) return std::nullopt;
  if (answer.size() - second - 1 != length) return std::nullopt;
  return Status(static_cast<common::Code>(code), answer.substr(second + 1));
}

}  // namespace

Status CallAsUser(const RunAs& user, const std::function<Status()>& check, double timeout_s,
                  ChildReaping reaping) {
  if (::geteuid() != 0) {
    return common::PermissionDenied("checking as " + user.Describe() + " needs root");
  }
  Result<common::Pipe> pipe = common::MakePipe(/*nonblocking_read=*/true);
  if (!pipe.ok()) return pipe.status();
  const pid_t pid = ::fork();
  if (pid < 0) return common::ErrnoError("fork to check as " + user.Describe(), errno);
  if (pid == 0) {
    // The child: one thread (fork keeps only the caller's). Raw system calls drop the rights, as
    // the launcher's child does (child_setup.h); the answer is "<code> <length> <message>", the
    // length the message's, so a cut answer is told from a whole one.
    pipe->read.Reset();
    Status st;
    if (::syscall(SYS_setgroups, user.groups.size(), user.groups.data()) != 0 ||
        ::syscall(SYS_setgid, user.gid) != 0 || ::syscall(SYS_setuid, user.uid) != 0) {
      st = common::Internal("cannot become " + user.Describe() + ": " + std::strerror(errno));
    } else {
      st = check();
    }
    // Bounded as the reader keeps it.
    const std::string message = st.message().substr(0, kMaxAnswerMessage);
    const std::string answer = std::to_string(static_cast<int>(st.code())) + " " +
                               std::to_string(message.size()) + " " + message;
    (void)common::WriteAll(pipe->write.get(), answer.data(), answer.size());
    ::_exit(0);
  }
  pipe->write.Reset();
  std::string answer;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  bool timed_out = false;
  for (;;) {
    // Past the deadline the poll only looks (0 ms): what the child wrote, or the end of file
    // once it has gone, is still taken.
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{pipe->read.get(), POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // Nothing to read and no end of file: the child still holds its end of the pipe.
      timed_out = n == 0;
      break;
    }
    char buf[4096];
    const ssize_t got = ::read(pipe->read.get(), buf, sizeof buf);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) break;
    // An answer is a Status message (a path or two): bounded, whatever the child does.
    if (answer.size() < kMaxAnswerMessage + 64) answer.append(buf, static_cast<size_t>(got));
  }
  // Timed out only before the end of file: the child has not exited, so `pid` is still its.
  if (timed_out) ::kill(pid, SIGKILL);
  int wstatus = 0;
  if (reaping == ChildReaping::kWaitHere) {
    while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
  }
  if (timed_out) {
    return common::Unavailable("checking as " + user.Describe() + " took longer than " +
                               std::to_string(static_cast<int>(timeout_s)) +
                               " s (a file system that does not answer?); stopped");
  }
  std::optional<Status> whole = ParseAnswer(answer);
  if (!whole || (reaping == ChildReaping::kWaitHere && !WIFEXITED(wstatus))) {
    return common::Internal("the check as " + user.Describe() + " ended without an answer");
  }
  return *whole;
}

std::vector<std::string> WithUserEnvironment(std::vector<std::string> env, const RunAs& user) {
  std::vector<std::string> out;
  out.reserve(env.size() + 3);
  for (std::string& kv : env) {
    if (kv.rfind("HOME=", 0) == 0 || kv.rfind("USER=", 0) == 0 || kv.rfind("LOGNAME=", 0) == 0) {
      continue;
    }
    out.push_back(std::move(kv));
  }
  out.push_back("HOME=" + user.home);
  out.push_back("USER=" + user.name);
  out.push_back("LOGNAME=" + user.name);
  return out;
}

namespace {

// o+x on the folders from `root` (inclusive) down to `dir`'s parent; nothing when `dir` is not
// below `root`.
Status MakeParentsSearchable(const std::string& root, const std::string& dir) {
  if (root.empty() || dir.size() <= root.size() || dir.compare(0, root.size(), root) != 0 ||
      dir[root.size()] != '/') {
    return Status::Ok();
  }
  std::string path = dir;
  while (path.size() > root.size()) {
    path.erase(path.find_last_of('/'));
    if (path.size() < root.size()) break;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return common::ErrnoError("stat " + path, errno);
    if (!S_ISDIR(st.st_mode)) {
      return common::FailedPrecondition(path + " is not a folder (a trial folder's parent)");
    }
    if ((st.st_mode & S_IXOTH) == 0 && ::chmod(path.c_str(), (st.st_mode & 07777) | S_IXOTH) != 0) {
      return common::ErrnoError("make " + path + " searchable for trial users", errno);
    }
  }
  return Status::Ok();
}

}  // namespace

Status PrepareTrialFolder(const std::string& root, const std::string& dir, const RunAs& user) {
  common::UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return common::ErrnoError("open trial folder " + dir, errno);
  if (::fchown(fd.get(), user.uid, user.gid) != 0) {
    return common::ErrnoError("give trial folder " + dir + " to " + user.Describe(), errno);
  }
  if (::fchmod(fd.get(), 0750) != 0) return common::ErrnoError("chmod trial folder " + dir, errno);
  // The folders above it, up to and including root: searchable, so the user can reach it.
  return MakeParentsSearchable(root, dir);
}

Status ShareLogFolder(const std::string& root, const std::string& dir,
                      const std::vector<std::string>& files, const RunAs& user) {
  common::UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return common::ErrnoError("open log folder " + dir, errno);
  const uid_t keep = static_cast<uid_t>(-1);
  if (::fchown(fd.get(), keep, user.gid) != 0) {
    return common::ErrnoError("give log folder " + dir + " to gid " + std::to_string(user.gid),
                              errno);
  }
  for (const std::string& name : files) {
    if (::fchownat(fd.get(), name.c_str(), keep, user.gid, AT_SYMLINK_NOFOLLOW) != 0) {
      return common::ErrnoError(
          "give log file " + dir + "/" + name + " to gid " + std::to_string(user.gid), errno);
    }
  }
  return MakeParentsSearchable(root, dir);
}

}  // namespace triald::launcher
