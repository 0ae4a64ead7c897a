// What a trial leaves in the file system, and the state directory's own files, against a real
// triald: `trialctl logs` never follows a FIFO, a link or a hard link a trial (or anyone else)
// put at a log path, returns a bounded amount whatever the file's size, and a read-only user
// cannot read a root-only file through it; the state directory, the database and the logs keep
// private modes whatever the umask triald was started with (daemon/README.md, "Security").
//
// The cases that run a client as another user (uid 65534) or give folders to a group need root;
// without it they are skipped (TRIALD_SKIP).
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>

#include "common/fd.h"
#include "proto/control.h"
#include "tests/integration/harness.h"
#include "tests/support/skip.h"

namespace triald::testing {
namespace json = boost::json;
namespace fs = std::filesystem;
using common::UniqueFd;

namespace {

constexpr uid_t kFilesNobody = 65534;
constexpr gid_t kFilesNogroup = 65534;
constexpr gid_t kFilesTestGroup = 42425;

// One request on a fresh connection; the reply line, "<timeout>" when none came within
// `timeout_s` (a hung daemon fails the test instead of hanging it), "<eof>" or "<connect: ...>".
std::string RawRequest(const std::string& socket, const std::string& request,
                       double timeout_s = 15) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, socket.c_str(), socket.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return std::string("<connect: ") + std::strerror(errno) + ">";
  }
  if (!common::WriteAll(fd.get(), request.data(), request.size()).ok()) return "<send failed>";
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
  std::string line;
  size_t searched = 0;  // no newline in line[0, searched): a reply of megabytes is scanned once
  char buf[65536];
  for (;;) {
    size_t nl = line.find('\n', searched);
    if (nl != std::string::npos) return line.substr(0, nl);
    searched = line.size();
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return "<timeout>";
    pollfd p{fd.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return line.empty() ? "<eof>" : "<eof after " + std::to_string(line.size()) + " bytes>";
    line.append(buf, static_cast<size_t>(n));
  }
}

std::string LogsRequest(const std::string& study, int trial, bool stderr_stream = false,
                        bool whole = false) {
  json::object args{{"study", study}, {"trial", trial}};
  if (stderr_stream) args["stream"] = "stderr";
  if (whole) args["whole"] = true;
  return proto::EncodeRequest("logs", std::move(args));
}

// The result of a "logs" reply line; fails the test on a timeout or an error reply.
json::object LogsResult(const std::string& line) {
  INFO(line.substr(0, 300));
  REQUIRE(line != "<timeout>");
  common::Result<proto::Response> r = proto::ParseResponse(line);
  REQUIRE(r.ok());
  REQUIRE(r->ok);
  return r->result.as_object();
}

// Runs `request` as uid 65534 with no groups (a read-only local user); returns the reply line.
std::string AsNobody(const std::string& socket, const std::string& request) {
  common::Result<common::Pipe> pipe = common::MakePipe(false);
  REQUIRE(pipe.ok());
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    pipe->read.Reset();
    if (::setgroups(0, nullptr) != 0 || ::setgid(kFilesNogroup) != 0 ||
        ::setuid(kFilesNobody) != 0) {
      ::_exit(3);
    }
    std::string out = RawRequest(socket, request);
    (void)common::WriteAll(pipe->write.get(), out.data(), out.size());
    ::_exit(0);
  }
  pipe->write.Reset();
  std::string all;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(pipe->read.get(), buf, sizeof buf)) > 0) all.append(buf, n);
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  return all;
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  INFO(path);
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

// Replaces `path` with what `make` creates at it (make gets the path).
template <typename Make>
void ReplaceWith(const std::string& path, Make make) {
  ::unlink(path.c_str());
  make(path);
}

void Fifo(const std::string& p) { REQUIRE(::mkfifo(p.c_str(), 0644) == 0); }

// A one-trial study whose worker prints `hello`, then runs `then` (a shell line) in its folder.
std::string OneTrial(TestDaemon& d, TempDir& dir, const std::string& study,
                     const std::string& then) {
  std::string cmd = "[\"/bin/sh\", \"-c\", 'echo hello; echo oops >&2; " + then +
                    "; echo \"{\\\"type\\\":\\\"final\\\",\\\"value\\\":1}\" >&3']";
  std::string toml = ExecSweep(study, cmd, 1, 1);
  d.Submit(toml, dir.Write(study + ".toml", toml));
  json::object st = d.WaitStudy(study);
  REQUIRE(st.at("state").as_string() == "COMPLETE");
  REQUIRE(CountState(d.Trials(study), "COMPLETE") == 1);
  return d.state_dir() + "/studies/" + study;
}

}  // namespace

TEST_CASE("trialctl logs: a FIFO at a log path does not hang the daemon",
          "[logs][security][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  // The trial replaces the file in its own folder where logs used to be with a FIFO: reading
  // it would wait for a writer for ever.
  const std::string study =
      OneTrial(d, dir, "fifo",
               "rm -f \"$TRIALD_TRIAL_DIR/stdout.log\"; mkfifo \"$TRIALD_TRIAL_DIR/stdout.log\"");
  json::object r = LogsResult(RawRequest(d.socket(), LogsRequest("fifo", 0)));
  CHECK(r.at("exists").as_bool());
  CHECK(r.at("content").as_string() == "hello\n");
  CHECK(r.at("path").as_string() == d.state_dir() + "/studies/fifo/logs/0/stdout.log");

  // Even at the daemon's own log path (something running as triald's user), a FIFO is refused
  // at once, and the daemon goes on serving.
  ReplaceWith(study + "/logs/0/stdout.log", Fifo);
  r = LogsResult(RawRequest(d.socket(), LogsRequest("fifo", 0)));
  CHECK_FALSE(r.at("exists").as_bool());
  CHECK_THAT(std::string(r.at("refused").as_string()), Catch::Contains("not a regular file"));
  Ctl ctl = Trialctl(d.socket(), {"logs", "fifo", "0"});
  CHECK(ctl.code == 1);
  CHECK_THAT(ctl.err, Catch::Contains("log not shown"));
  d.Call("ping");
  // The other stream is untouched.
  CHECK(Trialctl(d.socket(), {"logs", "fifo", "0", "--stderr"}).out == "oops\n");
}

TEST_CASE("trialctl logs: links are refused and a huge log is cut to head and tail",
          "[logs][security][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  const std::string study = OneTrial(d, dir, "big", "true");
  const std::string trial_log = study + "/trials/0/stdout.log";
  const std::string daemon_log = study + "/logs/0/stdout.log";
  // A 24 MiB file (sparse): whoever put it there, a request returns at most head + tail.
  const std::string big = dir.File("big.log");
  {
    UniqueFd f(::open(big.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    REQUIRE(f.valid());
    REQUIRE(::ftruncate(f.get(), 24 << 20) == 0);
    REQUIRE(::pwrite(f.get(), "start\n", 6, 0) == 6);
    REQUIRE(::pwrite(f.get(), "end\n", 4, (24 << 20) - 4) == 4);
  }
  auto link_to = [](const std::string& target) {
    return [target](const std::string& p) { REQUIRE(::symlink(target.c_str(), p.c_str()) == 0); };
  };
  ReplaceWith(trial_log, link_to(big));
  ReplaceWith(daemon_log, link_to(big));
  json::object r = LogsResult(RawRequest(d.socket(), LogsRequest("big", 0)));
  CHECK_FALSE(r.at("exists").as_bool());
  CHECK(r.at("content").as_string().size() < 1024);
  CHECK_THAT(std::string(r.at("refused").as_string()), Catch::Contains("symbolic link"));

  // A link to a device that never ends: refused, not read.
  ReplaceWith(daemon_log, link_to("/dev/zero"));
  r = LogsResult(RawRequest(d.socket(), LogsRequest("big", 0)));
  CHECK_FALSE(r.at("exists").as_bool());

  // The big file itself at the log path: by default its last 256 KiB after a marker; asked
  // whole, its head, a marker and its tail, 8 MiB at most.
  for (const std::string& p : {trial_log, daemon_log}) {
    ::unlink(p.c_str());
    fs::copy_file(big, p);
  }
  r = LogsResult(RawRequest(d.socket(), LogsRequest("big", 0)));
  REQUIRE(r.at("exists").as_bool());
  const std::string tail(r.at("content").as_string());
  CHECK(tail.size() <= (256u << 10) + 100);
  CHECK(tail.rfind("\n[triald: ", 0) == 0);
  CHECK(tail.substr(tail.size() - 4) == "end\n");
  CHECK(r.at("omitted").to_number<int64_t>() == (24 << 20) - (256 << 10));
  Ctl text = Trialctl(d.socket(), {"logs", "big", "0"});
  CHECK(text.code == 0);
  CHECK_THAT(text.err, Catch::Contains("bytes not shown; --all shows the whole log"));
  r = LogsResult(RawRequest(d.socket(), LogsRequest("big", 0, false, /*whole=*/true)));
  REQUIRE(r.at("exists").as_bool());
  const std::string content(r.at("content").as_string());
  CHECK(content.size() <= (8u << 20) + 100);
  CHECK(content.rfind("start\n", 0) == 0);
  CHECK(content.size() >= 4);
  CHECK(content.substr(content.size() - 4) == "end\n");
  CHECK_THAT(content, Catch::Contains("bytes not shown]"));
  CHECK(r.at("size").to_number<int64_t>() == (24 << 20));
  d.Call("ping");
}

TEST_CASE("trialctl logs: a read-only user cannot read a root-only file through a trial's logs",
          "[logs][security][integration]") {
  if (::geteuid() != 0) TRIALD_SKIP("needs root to run a client as uid 65534");
  TempDir dir;
  REQUIRE(::chmod(dir.path().c_str(), 0755) == 0);
  const std::string secret = dir.Write("shadow", "TOPSECRET\n", 0600);
  TestDaemon d(dir.File("state"));
  d.AddArgs({"--socket-read-open"});
  d.Start();
  // The trial links its old log path to the root-only file.
  const std::string study =
      OneTrial(d, dir, "peek", "ln -sf " + secret + " \"$TRIALD_TRIAL_DIR/stdout.log\"");
  std::string line = AsNobody(d.socket(), LogsRequest("peek", 0));
  CHECK(line.find("TOPSECRET") == std::string::npos);
  json::object r = LogsResult(line);
  CHECK(r.at("content").as_string() == "hello\n");

  // At the daemon's own paths: a symbolic link, and a hard link (same file system).
  ReplaceWith(study + "/logs/0/stdout.log",
              [&](const std::string& p) { REQUIRE(::symlink(secret.c_str(), p.c_str()) == 0); });
  ReplaceWith(study + "/logs/0/stderr.log",
              [&](const std::string& p) { REQUIRE(::link(secret.c_str(), p.c_str()) == 0); });
  for (bool err : {false, true}) {
    line = AsNobody(d.socket(), LogsRequest("peek", 0, err));
    INFO(line);
    CHECK(line.find("TOPSECRET") == std::string::npos);
    CHECK_FALSE(LogsResult(line).at("exists").as_bool());
  }
}

TEST_CASE("state directory, database and logs stay private under umask 000",
          "[state][security][integration]") {
  TempDir dir;
  const std::string state = dir.File("state");
  TestDaemon d(state);
  const mode_t old_mask = ::umask(0);
  d.Start();  // triald inherits umask 000
  ::umask(old_mask);
  OneTrial(d, dir, "modes", "true");
  // A root daemon runs trials as their submitters, who must reach their folders: search
  // only, never list (daemon/README.md, "Files and modes").
  const mode_t traverse = ::geteuid() == 0 ? 0001 : 0;
  CHECK(ModeOf(state) == (0700 | traverse));
  CHECK(ModeOf(state + "/studies") == (0700 | traverse));
  CHECK(ModeOf(state + "/triald.db") == 0600);
  for (const char* suffix : {"-wal", "-shm"}) {
    const std::string p = state + "/triald.db" + suffix;
    if (::access(p.c_str(), F_OK) == 0) CHECK(ModeOf(p) == 0600);
  }
  CHECK(ModeOf(state + "/triald.sock") == 0660);
  CHECK(ModeOf(state + "/studies/modes/logs/0") == 0750);
  // Nobody else lists a study's trial numbers; a root daemon adds o+x for the way down.
  for (const char* folder : {"", "/trials", "/logs"}) {
    INFO(folder);
    CHECK((ModeOf(state + "/studies/modes" + folder) & ~mode_t{0001}) == 0750);
  }
  CHECK(ModeOf(state + "/studies/modes/trials/0") == 0750);
  CHECK(ModeOf(state + "/studies/modes/logs/0/stdout.log") == 0640);
  CHECK(ModeOf(state + "/studies/modes/logs/0/stderr.log") == 0640);
  // Nothing triald made is group- or world-writable.
  for (const auto& e : fs::recursive_directory_iterator(state)) {
    if (e.is_symlink() || e.is_socket()) continue;
    INFO(e.path());
    CHECK((ModeOf(e.path().string()) & 022) == 0);
  }
  REQUIRE(d.Stop() == 0);

  // A state directory and database left with loose modes are fixed at the next start.
  REQUIRE(::chmod(state.c_str(), 0777) == 0);
  REQUIRE(::chmod((state + "/triald.db").c_str(), 0644) == 0);
  // So are study folders made 0755 by an earlier version.
  REQUIRE(::chmod((state + "/studies/modes/trials").c_str(), 0755) == 0);
  d.Start();
  CHECK((ModeOf(state + "/studies/modes/trials") & ~mode_t{0001}) == 0750);
  CHECK_THAT(d.log(), Catch::Contains("study folders no longer readable by others"));
  CHECK(ModeOf(state) == (0700 | traverse));
  CHECK(ModeOf(state + "/triald.db") == 0600);
  CHECK_THAT(d.log(),
             Catch::Contains(state + ": mode 0777 fixed to " + (traverse != 0 ? "0701" : "0700")));
  CHECK_THAT(d.log(), Catch::Contains(state + "/triald.db: mode 0644 fixed to 0600"));
}

TEST_CASE("state directory: 0750 and the group's with --socket-group, o+x with read-open",
          "[state][security][integration]") {
  if (::geteuid() != 0) TRIALD_SKIP("needs root to give the folders to any group");
  // triald runs as root here, so trials run as their submitters: o+x on the state directory
  // and studies/ in every case, so they reach their folders (search only, never list).
  TempDir dir;
  {
    TestDaemon d(dir.File("grouped"));
    d.AddArgs({"--socket-group", std::to_string(kFilesTestGroup)});
    d.Start();
    struct stat st {};
    REQUIRE(::stat(d.state_dir().c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0751);
    CHECK(st.st_gid == kFilesTestGroup);
    CHECK(ModeOf(d.state_dir() + "/studies") == 0751);
    CHECK(ModeOf(d.state_dir() + "/triald.db") == 0600);
  }
  {
    // Others may reach the socket (read verbs for anyone) but not list the folder.
    TestDaemon d(dir.File("open"));
    d.AddArgs({"--socket-read-open"});
    d.Start();
    CHECK(ModeOf(d.state_dir()) == 0701);
    CHECK(ModeOf(d.state_dir() + "/studies") == 0701);
  }
}

TEST_CASE("a small disk filled by trial logs: every result is stored, no trial runs twice",
          "[integration][trial_files][reserve]") {
  if (::geteuid() != 0) TRIALD_SKIP("needs root to mount a small tmpfs");
  TempDir dir;
  const std::string disk = dir.File("disk");
  std::filesystem::create_directories(disk);
  REQUIRE(std::system(("mount -t tmpfs -o size=20m triald-test " + disk).c_str()) == 0);
  struct Unmount {
    std::string path;
    ~Unmount() { (void)std::system(("umount -l " + path).c_str()); }
  } unmount{disk};
  // 40 trials each writing 5 MB to stdout and to stderr: 400 MB of output onto a 20 MB state
  // directory. The logs stop at the reserve (8 MiB here, the least automatic one); the database
  // keeps working.
  TestDaemon d(disk + "/state", 2);
  d.Start();
  const std::string script =
      dir.Write("flood.sh",
                "head -c 5000000 /dev/zero | tr '\\0' o\n"
                "head -c 5000000 /dev/zero | tr '\\0' e >&2\n"
                "echo \"started $TRIALD_TRIAL\" >> \"$RUN_LOG\"\n"
                "echo \"{\\\"type\\\":\\\"final\\\",\\\"value\\\":$TRIALD_TRIAL}\" >&3\n",
                0755);
  std::string toml = ExecSweep("flood", "[\"sh\", \"" + script + "\"]", 40, 2);
  toml.replace(toml.find("[objective]\n"), 12,
               "[objective]\nenv = { RUN_LOG = \"" + dir.File("runs.log") + "\" }\n");
  const std::string study = d.Submit(toml, dir.Write("flood.toml", toml));
  boost::json::object status = d.WaitStudy(study, 120);
  INFO(d.log());
  CHECK(status.at("state").as_string() == "COMPLETE");
  boost::json::array trials = d.Trials(study);
  REQUIRE(trials.size() == 40);
  CHECK(CountState(trials, "COMPLETE") == 40);
  // Each trial ran once.
  std::map<std::string, int> runs;
  std::istringstream log(ReadTextFile(dir.File("runs.log")));
  std::string line;
  while (std::getline(log, line)) ++runs[line];
  CHECK(runs.size() == 40);
  for (const auto& [run, n] : runs) CHECK(n == 1);
  // The later logs say why they stop.
  Ctl last = Trialctl(d.socket(), {"logs", study, "39", "--all"});
  CHECK(last.code == 0);
  CHECK_THAT(last.out, Catch::Contains("than the reserve kept for the database"));
  CHECK(d.log().find("database or disk is full") == std::string::npos);
  CHECK(d.Stop() == 0);
}

}  // namespace triald::testing
