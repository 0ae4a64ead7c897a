#include "daemon/launcher/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

namespace triald::launcher {
using common::Result;
using common::Status;

namespace {

// Small sysfs reads and writes; cgroup files are tiny and read often (Populated is polled).
bool ReadSmall(const std::string& path, std::string* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out->clear();
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out->append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return true;
}

Status WriteSmall(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return common::ErrnoError("open " + path, errno);
  ssize_t n = ::write(fd, text.data(), text.size());
  int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    return common::ErrnoError("write \"" + text + "\" to " + path, n < 0 ? err : EIO);
  }
  return Status::Ok();
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// mkdir that accepts an existing directory.
Status MakeDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) return Status::Ok();
  return common::ErrnoError("mkdir " + path, errno);
}

std::vector<std::string> Words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

bool HasWord(const std::string& text, const std::string& word) {
  for (const std::string& w : Words(text)) {
    if (w == word) return true;
  }
  return false;
}

// The value of `key` in a flat-keyed file such as cgroup.events ("populated 1\nfrozen 0\n").
bool KeyValue(const std::string& text, const std::string& key, uint64_t* value) {
  std::istringstream in(text);
  std::string k;
  uint64_t v;
  while (in >> k >> v) {
    if (k == key) {
      *value = v;
      return true;
    }
  }
  return false;
}

// A file holding one unsigned number, such as memory.peak ("123456\n").
bool ReadNumber(const std::string& path, uint64_t* value) {
  std::string text;
  if (!ReadSmall(path, &text)) return false;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return false;
  errno = 0;
  *value = std::strtoull(text.c_str(), nullptr, 10);
  return errno == 0;
}

// rmdir of a trial's leaf. It may briefly stay busy while exiting tasks are released; a few
// retries, then the next daemon start removes it. False: it is still there.
bool RemoveLeaf(const std::string& path) {
  if (path.empty()) return true;  // no such leaf
  for (int i = 0; i < 50; ++i) {
    if (::rmdir(path.c_str()) == 0 || errno == ENOENT) return true;
    if (errno != EBUSY) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

std::vector<std::string> ChildDirs(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_type == DT_DIR && e->d_name[0] != '.') out.push_back(dir + "/" + e->d_name);
  }
  ::closedir(d);
  return out;
}

// A leaf's cgroup.procs, write-only, close-on-exec (invalid on failure, errno set).
common::UniqueFd OpenProcs(const std::string& leaf) {
  return common::UniqueFd(::open((leaf + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
}

}  // namespace

// Trial leaves made ahead and removed on a thread of its own (see cgroup.h), so that neither
// the mkdir nor the rmdir of a cgroup, which cost the kernel far more than the trial's other
// cgroup work, nor the open and close of a leaf's cgroup.procs, is on the event loop's path.
// Leaves are named PARENT/PREFIX<n>. The event loop wakes the thread only when the ready leaves
// run low (or it has been idle for a second): a wake-up costs the loop a futex system call, and
// the thread picks up finished trials' leaves by itself every kPoll while there is work.
//
// kRecycleV1Memory (the v1 memory leaves of accounting): a leaf whose trial is over is reused
// when what stays charged to it (page cache its trial left) is at most kMaxLeftoverBytes: its
// watermark is reset (memory.max_usage_in_bytes := usage) and that usage becomes the next
// trial's baseline, subtracted from its peak. Otherwise it is removed (the kernel moves its
// charges to the parent) and a fresh one takes its place.
//
// kRecycleV2 (the v2 leaves where the trials' parent has no memory controller): the first
// process exec'd in a cgroup never used before costs the kernel several hundred microseconds
// more than one in a cgroup used already, all of it while the event loop waits for the vfork
// (scripts/README.md, "Where the event loop's time goes per trial"), so a leaf whose trial is
// over is reused when it is as CreateTrial left it: no process and no child cgroup in it, not
// frozen, no controller enabled below it. Its pids.max goes back to "max" (CreateTrial sets each
// trial's own) and the usage_usec of its cpu.stat becomes the next trial's baseline, subtracted
// from its CPU time. A recycled leaf goes to the front of the ready ones (the next trial takes
// it) and the coldest ready leaf is removed when there are more than kAhead. kRemove (the v2
// leaves where the memory controller is on): every leaf is used once, then removed (memory.peak
// and memory.events cannot be reset, and a leaf keeps its trial's page cache charged).
class LeafMaker {
 public:
  static constexpr size_t kAhead = 4;     // idle leaves kept ready
  static constexpr size_t kLowWater = 2;  // a Take() that leaves fewer ready wakes the thread
  // While there is work, the thread looks for it this often, unasked (finished trials' leaves
  // wait for it, so Return() costs the event loop no wake-up); after kIdlePolls looks that find
  // none it sleeps until woken.
  static constexpr std::chrono::milliseconds kPoll{50};
  static constexpr int kIdlePolls = 20;
  static constexpr uint64_t kMaxLeftoverBytes = 16 << 20;  // reuse bound

  struct Leaf {
    std::string path;
    uint64_t baseline = 0;   // kRecycleV1Memory: bytes charged to it when it was handed out;
                             // kRecycleV2: cpu.stat usage_usec then
    common::UniqueFd procs;  // its cgroup.procs (OpenProcs): by the thread, else by Take()
  };

  enum class Reuse { kRemove, kRecycleV1Memory, kRecycleV2 };

  LeafMaker(std::string parent, std::string prefix, Reuse reuse, common::Logger logger)
      : parent_(std::move(parent)),
        prefix_(std::move(prefix)),
        reuse_(reuse),
        logger_(std::move(logger)) {
    // The thread takes no signal: the daemon's signal_set is served by its event loop.
    sigset_t all, old;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &old);
    thread_ = std::thread([this] { Run(); });
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }

  // Stops the thread, then removes every leaf it holds.
  ~LeafMaker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
    for (Leaf& leaf : returned_) Discard(leaf);
    for (Leaf& leaf : ready_) Discard(leaf);
  }

  // A leaf for a trial, its cgroup.procs open: one made or recycled ahead, else one made now.
  // A leaf whose cgroup.procs cannot be opened goes back to the thread; the error names it.
  Result<Leaf> Take() {
    Leaf leaf;
    bool ready = false;
    bool wake = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      wake = making_stopped_ || idle_;
      making_stopped_ = false;
      if (!ready_.empty()) {
        leaf = std::move(ready_.front());
        ready_.pop_front();
        ready = true;
      } else {
        leaf.path = Path(++made_);
      }
      wake = wake || ready_.size() < kLowWater;
    }
    if (wake) cv_.notify_one();
    if (!ready && ::mkdir(leaf.path.c_str(), 0755) != 0) {
      return common::ErrnoError("mkdir " + leaf.path, errno);
    }
    if (!leaf.procs.valid()) {
      leaf.procs = OpenProcs(leaf.path);
      if (!leaf.procs.valid()) {
        Status failed = common::ErrnoError("open " + leaf.path + "/cgroup.procs", errno);
        Return(std::move(leaf.path), {});
        return failed;
      }
    }
    return leaf;
  }

  // Gives back the leaf of a trial that is over (no process left in it), with its cgroup.procs,
  // to recycle or remove.
  void Return(std::string path, common::UniqueFd procs) {
    bool wake = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Leaf leaf;
      leaf.path = std::move(path);
      leaf.procs = std::move(procs);
      returned_.push_back(std::move(leaf));
      wake = idle_;
    }
    if (wake) cv_.notify_one();
  }

 private:
  std::string Path(uint64_t n) const { return parent_ + "/" + prefix_ + std::to_string(n); }

  void Discard(Leaf& leaf) const {
    leaf.procs.Reset();
    if (!RemoveLeaf(leaf.path) && logger_) {
      logger_->warn("cgroups: cannot remove {} ({}); the next start of triald removes it",
                    leaf.path, std::strerror(errno));
    }
  }

  // Ready for the next trial (kRecycleV1Memory: watermark reset, baseline read; kRecycleV2: see
  // RecycleV2). False: to be removed.
  bool Recycle(const std::string& path, uint64_t* baseline) const {
    switch (reuse_) {
      case Reuse::kRemove:
        return false;
      case Reuse::kRecycleV1Memory:
        return RecycleV1Memory(path, baseline);
      case Reuse::kRecycleV2:
        return RecycleV2(path, baseline);
    }
    return false;
  }

  static bool RecycleV1Memory(const std::string& path, uint64_t* baseline) {
    uint64_t usage = 0;
    if (!ReadNumber(path + "/memory.usage_in_bytes", &usage) || usage > kMaxLeftoverBytes) {
      return false;
    }
    if (!WriteSmall(path + "/memory.max_usage_in_bytes", "0").ok()) return false;
    return ReadNumber(path + "/memory.usage_in_bytes", baseline);
  }

  // A v2 leaf as CreateTrial leaves it, or false: empty (no process, no child cgroup), not
  // frozen, nothing in cgroup.subtree_control; then pids.max := max and the CPU baseline.
  static bool RecycleV2(const std::string& path, uint64_t* cpu_usec) {
    std::string text;
    uint64_t n = 0;
    if (!ReadSmall(path + "/cgroup.events", &text) || !KeyValue(text, "populated", &n) || n != 0) {
      return false;
    }
    if (KeyValue(text, "frozen", &n) && n != 0) return false;
    if (!ChildDirs(path).empty()) return false;
    if (!ReadSmall(path + "/cgroup.subtree_control", &text) || !Words(text).empty()) return false;
    if (Exists(path + "/cgroup.freeze") && (!ReadNumber(path + "/cgroup.freeze", &n) || n != 0)) {
      return false;
    }
    if (Exists(path + "/pids.max") && !WriteSmall(path + "/pids.max", "max").ok()) return false;
    return ReadSmall(path + "/cpu.stat", &text) && KeyValue(text, "usage_usec", cpu_usec);
  }

  bool HasWork() const {
    return stop_ || !returned_.empty() || (ready_.size() < kAhead && !making_stopped_);
  }

  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    int idle_polls = 0;
    for (;;) {
      if (idle_polls >= kIdlePolls) {
        idle_ = true;
        cv_.wait(lock, [this] { return HasWork(); });
        idle_ = false;
      } else if (!cv_.wait_for(lock, kPoll, [this] { return HasWork(); })) {
        ++idle_polls;
        continue;
      }
      if (stop_) return;
      idle_polls = 0;
      while (!returned_.empty() && !stop_) {
        Leaf leaf = std::move(returned_.front());
        returned_.pop_front();
        lock.unlock();
        const bool reuse = Recycle(leaf.path, &leaf.baseline);
        if (!reuse) Discard(leaf);
        lock.lock();
        if (!reuse) continue;
        if (reuse_ != Reuse::kRecycleV2) {
          ready_.push_back(std::move(leaf));
          continue;
        }
        // Used leaves first; past kAhead, the coldest (last) one goes.
        ready_.push_front(std::move(leaf));
        if (ready_.size() > kAhead) {
          Leaf cold = std::move(ready_.back());
          ready_.pop_back();
          lock.unlock();
          Discard(cold);
          lock.lock();
        }
      }
      while (ready_.size() < kAhead && !making_stopped_ && !stop_) {
        Leaf leaf;
        leaf.path = Path(++made_);
        lock.unlock();
        const bool made = ::mkdir(leaf.path.c_str(), 0755) == 0;
        if (made) leaf.procs = OpenProcs(leaf.path);  // or Take() opens it
        lock.lock();
        if (made) {
          ready_.push_back(std::move(leaf));
        } else {
          making_stopped_ = true;  // e.g. no more cgroups: Take() reports its own error
        }
      }
    }
  }

  const std::string parent_, prefix_;
  const Reuse reuse_;
  const common::Logger logger_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Leaf> ready_;       // idle (v1 memory: watermark reset)
  std::deque<Leaf> returned_;    // their trials are over
  uint64_t made_ = 0;            // leaves named so far
  bool making_stopped_ = false;  // mkdir failed; until the next Take()
  bool idle_ = false;            // the thread sleeps until woken (no poll)
  bool stop_ = false;
  std::thread thread_;
};

namespace {

std::vector<pid_t> ListProcs(const std::string& dir) {
  std::string text;
  std::vector<pid_t> out;
  if (!ReadSmall(dir + "/cgroup.procs", &text)) return out;
  for (const std::string& w : Words(text)) out.push_back(static_cast<pid_t>(std::stol(w)));
  return out;
}

void SignalAll(const std::string& dir, int sig) {
  for (pid_t pid : ListProcs(dir)) ::kill(pid, sig);
}

// FNV-1a: a stable name for a state directory across daemon builds and restarts.
std::string StableHash(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// Fields of one mountinfo line: [4] mount point, and after " - ": fstype, source, options.
struct MountLine {
  std::string root, mount_point, fstype, super_options;
};

std::vector<MountLine> ParseMountinfo(const std::string& text) {
  std::vector<MountLine> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f = Words(line);
    size_t dash = 0;
    for (size_t i = 6; i < f.size(); ++i) {
      if (f[i] == "-") {
        dash = i;
        break;
      }
    }
    if (dash == 0 || dash + 1 >= f.size()) continue;  // not a mountinfo line
    MountLine m;
    m.root = f[3];
    m.mount_point = f[4];
    m.fstype = f[dash + 1];
    m.super_options = dash + 3 < f.size() ? f[dash + 3] : "";
    out.push_back(std::move(m));
  }
  return out;
}

bool InCommaList(const std::string& list, const std::string& item) {
  std::istringstream in(list);
  std::string x;
  while (std::getline(in, x, ',')) {
    if (x == item) return true;
  }
  return false;
}

// Joins a mount point and a cgroup path, stripping the mount's own root (bind mounts and
// cgroup namespaces show a root other than "/").
std::string CgroupDir(const std::string& mount, const std::string& mount_root,
                      const std::string& path) {
  std::string rel = path;
  if (mount_root != "/" && rel.rfind(mount_root, 0) == 0) rel = rel.substr(mount_root.size());
  if (rel.empty() || rel == "/") return mount;
  return mount + (rel[0] == '/' ? "" : "/") + rel;
}

}  // namespace

std::string FindCgroup2Mount(const std::string& mountinfo) {
  for (const MountLine& m : ParseMountinfo(mountinfo)) {
    if (m.fstype == "cgroup2") return m.mount_point;
  }
  return "";
}

std::string FindCgroup1Mount(const std::string& mountinfo, const std::string& controller) {
  for (const MountLine& m : ParseMountinfo(mountinfo)) {
    if (m.fstype == "cgroup" && InCommaList(m.super_options, controller)) return m.mount_point;
  }
  return "";
}

std::string OwnCgroupPath(const std::string& proc_cgroup, const std::string& v1_controller) {
  std::istringstream in(proc_cgroup);
  std::string line;
  while (std::getline(in, line)) {
    size_t a = line.find(':');
    size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    std::string id = line.substr(0, a), controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    if (v1_controller.empty() ? (id == "0" && controllers.empty())
                              : InCommaList(controllers, v1_controller)) {
      return path;
    }
  }
  return "";
}

TrialCgroup::~TrialCgroup() = default;

bool TrialCgroup::Populated() const {
  std::string text;
  uint64_t populated = 0;
  if (!ReadSmall(path_ + "/cgroup.events", &text)) return false;
  return KeyValue(text, "populated", &populated) && populated != 0;
}

void TrialCgroup::Signal(int sig) const { SignalAll(path_, sig); }

void TrialCgroup::Kill() const {
  if (!has_kill_ || !WriteSmall(path_ + "/cgroup.kill", "1").ok()) SignalAll(path_, SIGKILL);
  // The v1 pids leaf holds the same processes; nothing more to do for it.
}

uint64_t TrialCgroup::OomKills() const {
  std::string text;
  uint64_t n = 0;
  if (!memory_limited_ || !ReadSmall(path_ + "/memory.events", &text)) return 0;
  return KeyValue(text, "oom_kill", &n) ? n : 0;
}

model::TrialResources ReadLeafResources(const std::string& v2_dir, const std::string& memory_v1_dir,
                                        uint64_t memory_v1_baseline, uint64_t cpu_usec_baseline) {
  model::TrialResources r;
  uint64_t n = 0;
  std::string text;
  if (!v2_dir.empty() && ReadNumber(v2_dir + "/memory.peak", &n)) {
    r.peak_memory_bytes = n;
    r.memory_source = "cgroup2 memory.peak";
  } else if (!memory_v1_dir.empty() &&
             ReadNumber(memory_v1_dir + "/memory.max_usage_in_bytes", &n)) {
    r.peak_memory_bytes = n > memory_v1_baseline ? n - memory_v1_baseline : 0;
    r.memory_source = "cgroup1 memory.max_usage_in_bytes";
  }
  if (!v2_dir.empty() && ReadSmall(v2_dir + "/cpu.stat", &text) &&
      KeyValue(text, "usage_usec", &n)) {
    r.cpu_time_s = static_cast<double>(n > cpu_usec_baseline ? n - cpu_usec_baseline : 0) / 1e6;
    r.cpu_source = "cgroup2 cpu.stat";
  }
  return r;
}

model::TrialResources TrialCgroup::ReadResources() const {
  if (!accounting_ || removed_) return {};
  return ReadLeafResources(path_, memory_v1_path_, memory_v1_baseline_, cpu_usec_baseline_);
}

Status TrialCgroup::Remove() {
  if (removed_) return Status::Ok();
  pids_v1_procs_fd_.Reset();
  if (maker_) {
    maker_->Return(path_, std::move(procs_fd_));  // removed on the maker's thread
  } else {
    procs_fd_.Reset();
    if (::rmdir(path_.c_str()) != 0 && errno != ENOENT) {
      return common::ErrnoError("rmdir " + path_, errno);
    }
  }
  RemoveLeaf(pids_v1_path_);
  if (memory_v1_maker_ && !memory_v1_path_.empty()) {
    memory_v1_maker_->Return(memory_v1_path_, std::move(memory_v1_procs_fd_));
  } else {
    memory_v1_procs_fd_.Reset();
    RemoveLeaf(memory_v1_path_);
  }
  removed_ = true;
  return Status::Ok();
}

Result<std::unique_ptr<CgroupTree>> CgroupTree::Open(const Options& options) {
  std::string mountinfo, self;
  if (!ReadSmall(options.mountinfo_path, &mountinfo)) {
    return common::Unavailable("cannot read " + options.mountinfo_path);
  }
  if (!ReadSmall(options.self_cgroup_path, &self)) {
    return common::Unavailable("cannot read " + options.self_cgroup_path);
  }
  std::string mount, mount_root = "/";
  for (const MountLine& m : ParseMountinfo(mountinfo)) {
    if (m.fstype == "cgroup2") {
      mount = m.mount_point;
      mount_root = m.root;
      break;
    }
  }
  if (mount.empty()) return common::Unavailable("no cgroup2 file system is mounted");
  std::string own = OwnCgroupPath(self);
  if (own.empty()) {
    return common::Unavailable(options.self_cgroup_path + " has no cgroup v2 entry (\"0::/...\")");
  }
  const std::string own_dir = CgroupDir(mount, mount_root, own);
  auto tree = std::unique_ptr<CgroupTree>(new CgroupTree());
  tree->logger_ = options.logger ? options.logger : common::MakeNullLogger();
  tree->prefix_ = "triald-" + StableHash(options.state_dir) + "-";
  std::vector<std::string> chain;  // cgroups whose subtree_control must pass controllers down
  if (own_dir == mount) {
    tree->parent_ = mount;
    chain = {mount};
  } else {
    // A delegated cgroup (systemd Delegate=yes). The daemon leaves it for a leaf of its own,
    // so that the cgroup may enable controllers for its children.
    Status st = MakeDir(own_dir + "/daemon");
    if (!st.ok()) {
      return common::Unavailable("cgroup v2 at " + own_dir + " is not writable: " + st.message());
    }
    st = WriteSmall(own_dir + "/daemon/cgroup.procs", std::to_string(::getpid()));
    if (!st.ok())
      tree->logger_->warn("cgroups: cannot move triald into its leaf: {}", st.message());
    st = MakeDir(own_dir + "/trials");
    if (!st.ok()) {
      return common::Unavailable("cgroup v2 at " + own_dir + " is not writable: " + st.message());
    }
    tree->parent_ = own_dir + "/trials";
    chain = {own_dir, tree->parent_};
  }
  // Writable means a trial cgroup can be made there: try one.
  const std::string probe =
      tree->parent_ + "/" + tree->prefix_ + "probe-" + std::to_string(::getpid());
  if (::mkdir(probe.c_str(), 0755) != 0 && errno != EEXIST) {
    return common::Unavailable("cgroup v2 at " + tree->parent_ + " is not writable: mkdir " +
                               probe + ": " + std::strerror(errno));
  }
  tree->has_kill_ = Exists(probe + "/cgroup.kill");
  ::rmdir(probe.c_str());
  for (const char* controller : {"memory", "pids"}) {
    bool on = true;
    for (const std::string& dir : chain) {
      std::string have, enabled;
      ReadSmall(dir + "/cgroup.controllers", &have);
      ReadSmall(dir + "/cgroup.subtree_control", &enabled);
      if (HasWord(enabled, controller)) continue;
      if (!HasWord(have, controller) ||
          !WriteSmall(dir + "/cgroup.subtree_control", std::string("+") + controller).ok()) {
        on = false;
        break;
      }
    }
    if (std::string(controller) == "memory") tree->has_memory_ = on;
    if (std::string(controller) == "pids") tree->has_pids_ = on;
  }

  // The own v1 cgroup of `controller` when a leaf with `file` can be made there ("" if not).
  auto writable_v1 = [&](const char* controller, const char* file) -> std::string {
    std::string mount1 = FindCgroup1Mount(mountinfo, controller);
    std::string own1 = OwnCgroupPath(self, controller);
    if (mount1.empty() || own1.empty()) return "";
    std::string mount1_root = "/";
    for (const MountLine& m : ParseMountinfo(mountinfo)) {
      if (m.mount_point == mount1) mount1_root = m.root;
    }
    std::string dir = CgroupDir(mount1, mount1_root, own1);
    std::string probe1 = dir + "/" + tree->prefix_ + "probe-" + std::to_string(::getpid());
    if (::mkdir(probe1.c_str(), 0755) != 0 && errno != EEXIST) return "";
    bool ok = Exists(probe1 + "/" + file);
    ::rmdir(probe1.c_str());
    return ok ? dir : "";
  };
  // Hybrid hosts keep pids in v1; a parallel leaf there still bounds a fork bomb.
  if (!tree->has_pids_) tree->pids_v1_parent_ = writable_v1("pids", "pids.max");
  tree->accounting_ = options.resource_accounting;
  // And memory: a parallel leaf there measures the trial's peak (accounting only).
  if (tree->accounting_ && !tree->has_memory_) {
    tree->memory_v1_parent_ = writable_v1("memory", "memory.max_usage_in_bytes");
    if (!tree->memory_v1_parent_.empty()) {
      tree->memory_v1_maker_ = std::make_shared<LeafMaker>(
          tree->memory_v1_parent_, tree->prefix_ + std::to_string(::getpid()) + "-m",
          LeafMaker::Reuse::kRecycleV1Memory, tree->logger_);
    }
  }
  return tree;
}

std::string CgroupTree::Describe() const {
  std::string s = "cgroup v2 at " + parent_ + "/" + prefix_ + "* (controllers:";
  if (has_memory_) s += " memory";
  if (has_pids_) s += " pids";
  if (!has_memory_ && !has_pids_) s += " none";
  s += has_kill_ ? "; cgroup.kill" : "; no cgroup.kill (SIGKILL to each process)";
  if (!pids_v1_parent_.empty()) s += "; pids limit through v1 at " + pids_v1_parent_;
  if (!memory_v1_parent_.empty()) s += "; memory accounting through v1 at " + memory_v1_parent_;
  if (!has_memory_) s += "; leaves reused";
  if (!accounting_) s += "; no resource accounting";
  if (!has_memory_) s += "; memory limits through RLIMIT_AS";
  return s + ")";
}

namespace {

// "triald-<16 hex>-<daemon pid>-<n>": the daemon pid of a trial cgroup's name (0 if none).
pid_t DaemonPidOf(const std::string& name) {
  if (name.rfind("triald-", 0) != 0 || name.size() < 7 + 16 + 2 || name[7 + 16] != '-') return 0;
  size_t end = name.find('-', 7 + 17);
  if (end == std::string::npos) return 0;
  char* stop = nullptr;
  long pid = std::strtol(name.c_str() + 7 + 17, &stop, 10);
  return stop == name.c_str() + end && pid > 0 ? static_cast<pid_t>(pid) : 0;
}

bool Empty(const std::string& dir) {
  std::string text;
  uint64_t populated = 0;
  return !ReadSmall(dir + "/cgroup.events", &text) || !KeyValue(text, "populated", &populated) ||
         populated == 0;
}

}  // namespace

int CgroupTree::CleanLeftovers() {
  int found = 0;
  for (const std::string& dir : ChildDirs(parent_)) {
    const std::string name = dir.substr(dir.rfind('/') + 1);
    if (name.rfind(prefix_, 0) != 0) {
      // Another state directory's trial cgroup whose daemon is gone and which is empty (its
      // daemon was SIGKILLed between trials): nobody else would ever remove it.
      pid_t owner = DaemonPidOf(name);
      if (owner > 0 && ::kill(owner, 0) != 0 && errno == ESRCH && Empty(dir)) ::rmdir(dir.c_str());
      continue;
    }
    ++found;
    if (Exists(dir + "/cgroup.kill")) {
      (void)WriteSmall(dir + "/cgroup.kill", "1");
    } else {
      SignalAll(dir, SIGKILL);
    }
    for (int i = 0; i < 500 && !Empty(dir); ++i) {  // at most 5 s for processes stuck in the kernel
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (::rmdir(dir.c_str()) != 0) {
      logger_->warn("cgroups: cannot remove leftover {}: {}", dir, std::strerror(errno));
    }
  }
  // This daemon's own v1 leaves (the memory leaves made ahead since Open()) are not leftovers.
  const std::string own = prefix_ + std::to_string(::getpid()) + "-";
  for (const std::string& parent1 : {pids_v1_parent_, memory_v1_parent_}) {
    if (parent1.empty()) continue;
    for (const std::string& dir : ChildDirs(parent1)) {
      const std::string name = dir.substr(dir.rfind('/') + 1);
      if (name.rfind(own, 0) == 0) continue;
      pid_t owner = DaemonPidOf(name);
      bool ours = name.rfind(prefix_, 0) == 0;
      if (!ours && !(owner > 0 && ::kill(owner, 0) != 0 && errno == ESRCH)) continue;
      if (ours) SignalAll(dir, SIGKILL);
      for (int i = 0; ours && i < 500 && !ListProcs(dir).empty(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      ::rmdir(dir.c_str());
    }
  }
  return found;
}

Result<std::unique_ptr<TrialCgroup>> CgroupTree::CreateTrial(const CgroupLimits& limits) {
  // Made on the first trial, not at Open(): CleanLeftovers() (before any trial) removes every
  // leaf of this state directory, a predecessor's with this daemon's pid included.
  if (!leaf_maker_) {
    // Reused where nothing of a trial stays in its leaf but counters with a baseline (LeafMaker).
    leaf_maker_ = std::make_shared<LeafMaker>(
        parent_, prefix_ + std::to_string(::getpid()) + "-",
        has_memory_ ? LeafMaker::Reuse::kRemove : LeafMaker::Reuse::kRecycleV2, logger_);
  }
  Result<LeafMaker::Leaf> made = leaf_maker_->Take();
  if (!made.ok()) return made.status();
  auto cg = std::unique_ptr<TrialCgroup>(new TrialCgroup());
  cg->path_ = made->path;
  cg->maker_ = leaf_maker_;
  cg->has_kill_ = has_kill_;
  cg->accounting_ = accounting_;
  const std::string leaf = cg->path_.substr(cg->path_.rfind('/') + 1);
  auto fail = [&cg](Status st) {
    (void)cg->Remove();
    return st;
  };
  cg->procs_fd_ = std::move(made->procs);
  cg->cpu_usec_baseline_ = made->baseline;
  if (limits.memory_max_bytes > 0 && has_memory_) {
    Status st = WriteSmall(cg->path_ + "/memory.max", std::to_string(limits.memory_max_bytes));
    if (!st.ok()) return fail(st);
    // Without this a limited trial swaps instead of dying.
    if (Exists(cg->path_ + "/memory.swap.max")) {
      (void)WriteSmall(cg->path_ + "/memory.swap.max", "0");
    }
    // One OOM kill takes the whole trial: a half-killed process tree is no use to anyone.
    if (Exists(cg->path_ + "/memory.oom.group")) {
      (void)WriteSmall(cg->path_ + "/memory.oom.group", "1");
    }
    cg->memory_limited_ = true;
  }
  if (limits.pids_max > 0 && has_pids_) {
    Status st = WriteSmall(cg->path_ + "/pids.max", std::to_string(limits.pids_max));
    if (!st.ok()) return fail(st);
    cg->pids_limited_ = true;
  } else if (limits.pids_max > 0 && !pids_v1_parent_.empty()) {
    cg->pids_v1_path_ = pids_v1_parent_ + "/" + leaf;
    if (::mkdir(cg->pids_v1_path_.c_str(), 0755) != 0) {
      int err = errno;
      cg->pids_v1_path_.clear();
      return fail(common::ErrnoError("mkdir " + pids_v1_parent_ + "/" + leaf, err));
    }
    Status st = WriteSmall(cg->pids_v1_path_ + "/pids.max", std::to_string(limits.pids_max));
    if (!st.ok()) return fail(st);
    cg->pids_v1_procs_fd_ = OpenProcs(cg->pids_v1_path_);
    if (!cg->pids_v1_procs_fd_.valid()) {
      return fail(common::ErrnoError("open " + cg->pids_v1_path_ + "/cgroup.procs", errno));
    }
    cg->pids_limited_ = true;
  }
  if (memory_v1_maker_) {
    Result<LeafMaker::Leaf> v1 = memory_v1_maker_->Take();
    if (!v1.ok()) return fail(v1.status());
    cg->memory_v1_path_ = v1->path;
    cg->memory_v1_baseline_ = v1->baseline;
    cg->memory_v1_maker_ = memory_v1_maker_;
    cg->memory_v1_procs_fd_ = std::move(v1->procs);
  }
  return cg;
}

}  // namespace triald::launcher
