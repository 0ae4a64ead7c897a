// The control socket's access rules and socket setup (daemon/control/access.h) and the verb
// table (daemon/control/verbs.h), without a daemon: who gets which access, which verbs count as
// reads, the denial message, peer credentials on a socketpair, group lookup and the socket
// file's mode and group.
#include <fcntl.h>
#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "daemon/control/access.h"
#include "daemon/control/requests.h"
#include "daemon/control/verbs.h"
#include "daemon/storage/sqlite_storage.h"
#include "proto/control.h"
#include "tests/support/skip.h"
#include "tests/support/temp_dir.h"

namespace triald::daemon {
namespace {

using testing::TempDir;

PeerCredentials Peer(uid_t uid, gid_t gid, std::vector<gid_t> groups = {}) {
  PeerCredentials p;
  p.pid = 1234;
  p.uid = uid;
  p.gid = gid;
  p.groups = std::move(groups);
  return p;
}

AccessPolicy Policy(uid_t daemon_uid, gid_t allowed_gid, bool read_open) {
  AccessPolicy p;
  p.daemon_uid = daemon_uid;
  p.allowed_gid = allowed_gid;
  p.read_open = read_open;
  return p;
}

}  // namespace

TEST_CASE("DecideAccess: who gets full access, read access or none", "[control][security]") {
  // A non-root daemon (uid 1000): its socket group may only read, since its members' trials
  // would run as uid 1000.
  AccessPolicy closed = Policy(/*daemon_uid=*/1000, /*allowed_gid=*/2000, /*read_open=*/false);
  CHECK(DecideAccess(closed, Peer(0, 5)) == Access::kFull);
  CHECK(DecideAccess(closed, Peer(1000, 5)) == Access::kFull);
  CHECK(DecideAccess(closed, Peer(1001, 2000)) == Access::kRead);             // primary group
  CHECK(DecideAccess(closed, Peer(1001, 5, {7, 2000, 9})) == Access::kRead);  // supplementary
  CHECK(DecideAccess(closed, Peer(1001, 5, {7, 9})) == Access::kNone);
  CHECK(DecideAccess(closed, Peer(65534, 65534)) == Access::kNone);

  AccessPolicy open = closed;
  open.read_open = true;
  CHECK(DecideAccess(open, Peer(65534, 65534)) == Access::kRead);
  CHECK(DecideAccess(open, Peer(65534, 65534, {2000})) == Access::kRead);
  CHECK(DecideAccess(open, Peer(0, 0)) == Access::kFull);

  // --trust-group: its members get full access (primary or supplementary), nobody else does.
  AccessPolicy trusted = closed;
  trusted.trust_gid = 3000;
  CHECK(DecideAccess(trusted, Peer(1001, 3000)) == Access::kFull);
  CHECK(DecideAccess(trusted, Peer(1001, 5, {3000})) == Access::kFull);
  CHECK(DecideAccess(trusted, Peer(1001, 5, {2000})) == Access::kRead);
  CHECK(DecideAccess(trusted, Peer(1001, 5)) == Access::kNone);

  // A root daemon runs trials as their submitters: its socket group may submit.
  AccessPolicy root = Policy(/*daemon_uid=*/0, /*allowed_gid=*/2000, /*read_open=*/true);
  root.runs_as_submitter = true;
  CHECK(DecideAccess(root, Peer(1001, 2000)) == Access::kFull);
  CHECK(DecideAccess(root, Peer(1001, 5, {2000})) == Access::kFull);
  CHECK(DecideAccess(root, Peer(1001, 5)) == Access::kRead);  // read_open only
  root.read_open = false;
  CHECK(DecideAccess(root, Peer(1001, 5)) == Access::kNone);
  CHECK(DecideAccess(root, Peer(0, 0)) == Access::kFull);
}

TEST_CASE("MayChangeStudy: the submitter, root and triald's uid, nobody for others",
          "[control][security]") {
  AccessPolicy policy = Policy(/*daemon_uid=*/1000, /*allowed_gid=*/2000, /*read_open=*/true);
  policy.trust_gid = 2000;
  // Submitted by uid 1001.
  CHECK(MayChangeStudy(policy, Peer(1001, 2000), 1001));
  CHECK(MayChangeStudy(policy, Peer(0, 0), 1001));
  CHECK(MayChangeStudy(policy, Peer(1000, 5), 1001));
  CHECK_FALSE(MayChangeStudy(policy, Peer(1002, 2000), 1001));  // trusted, but not its owner
  CHECK_FALSE(MayChangeStudy(policy, Peer(1002, 1001, {1001}), 1001));  // gid 1001 is not uid
  // Unknown submitter (a study stored before submitters were recorded): root and triald only.
  CHECK(MayChangeStudy(policy, Peer(0, 0), -1));
  CHECK(MayChangeStudy(policy, Peer(1000, 5), -1));
  CHECK_FALSE(MayChangeStudy(policy, Peer(1001, 2000), -1));
  // uid 4294967295 (-1 as a uid_t) is not "unknown".
  CHECK_FALSE(MayChangeStudy(policy, Peer(static_cast<uid_t>(-1), 5), -1));

  CHECK(StudyDenialFor(policy, Peer(1002, 5), "cancel", "s", 1001, "alice").message() ==
        "uid 1002 may not use \"cancel\" on study \"s\": only its submitter (alice, uid 1001), "
        "root and triald's user (uid 1000) may");
  CHECK(StudyDenialFor(policy, Peer(1002, 5), "enqueue", "old", -1, "").message() ==
        "uid 1002 may not use \"enqueue\" on study \"old\": its submitter is unknown (stored "
        "before submitters were recorded), so only root and triald's user (uid 1000) may");
}

TEST_CASE("AuthorizeStudyVerb: mutating verbs need the study's submitter, root or triald",
          "[control][security]") {
  auto opened = storage::OpenSqliteStorage({":memory:"});
  REQUIRE(opened.ok());
  storage::Storage& st = **opened;
  model::NewStudy mine;
  mine.name = "mine";
  mine.n_trials = 1;
  mine.submitter = {1001, "alice"};
  REQUIRE(st.CreateStudy(mine, 1).ok());
  model::NewStudy old = mine;
  old.name = "old";
  old.submitter = {};
  REQUIRE(st.CreateStudy(old, 1).ok());

  AccessPolicy policy = Policy(/*daemon_uid=*/1000, /*allowed_gid=*/2000, /*read_open=*/false);
  namespace json = boost::json;
  auto check = [&](uid_t uid, const std::string& verb, json::object args) {
    return AuthorizeStudyVerb(st, policy, Peer(uid, 5), verb, args).code();
  };
  using common::Code;
  for (const char* verb : {"cancel", "enqueue", "pause", "resume", "extend", "set", "delete"}) {
    INFO(verb);
    CHECK(FindVerb(verb) != nullptr);
    CHECK(check(1001, verb, {{"study", "mine"}}) == Code::kOk);
    CHECK(check(0, verb, {{"study", "mine"}}) == Code::kOk);
    CHECK(check(1000, verb, {{"study", "mine"}}) == Code::kOk);
    CHECK(check(1002, verb, {{"study", "mine"}}) == Code::kPermissionDenied);
    CHECK(check(1001, verb, {{"study", "old"}}) == Code::kPermissionDenied);
    CHECK(check(0, verb, {{"study", "old"}}) == Code::kOk);
    // No such study: the verb itself reports it.
    CHECK(check(1002, verb, {{"study", "none"}}) == Code::kOk);
    // No study named: fails closed for everyone but root and triald.
    CHECK(check(1001, verb, {}) == Code::kPermissionDenied);
    CHECK(check(1001, verb, {{"study", 7}}) == Code::kPermissionDenied);
    CHECK(check(0, verb, {}) == Code::kOk);
  }
  // Reads and submit are not about an existing study; an unknown verb counts as mutating.
  CHECK(check(1002, "status", {{"study", "mine"}}) == Code::kOk);
  CHECK(check(1002, "submit", {}) == Code::kOk);
  CHECK(check(1002, "retry", {{"study", "mine"}}) == Code::kPermissionDenied);
  CHECK(check(1002, "retry", {}) == Code::kPermissionDenied);
  // Every mutating verb of the table is covered by the rule (none is exempt by kind).
  for (const Verb& v : Verbs()) {
    if (v.kind != VerbKind::kMutating) continue;
    INFO(v.name);
    CHECK(check(1002, std::string(v.name), {{"study", "mine"}}) == Code::kPermissionDenied);
  }
}

TEST_CASE("IsReadVerb: only the read verbs, anything else counts as mutating",
          "[control][security]") {
  for (const char* v :
       {"ping", "studies", "status", "trials", "best", "logs", "export", "nodes", "events"}) {
    INFO(v);
    CHECK(IsReadVerb(v));
  }
  for (const char* v : {"submit", "cancel", "enqueue", "", "PING", "ping ", "delete", "retry",
                        "pause", "resume", "extend", "set"}) {
    INFO(v);
    CHECK_FALSE(IsReadVerb(v));
  }
}

TEST_CASE("The verb table: unique names, the read verbs as documented, unknown verbs listed",
          "[control][security]") {
  std::vector<std::string> names, reads;
  for (const Verb& v : Verbs()) {
    // Exactly one way to answer: a whole result, a stream, or a handover of the connection.
    CHECK((v.handler != nullptr) + (v.streamer != nullptr) + (v.handover != nullptr) == 1);
    CHECK(FindVerb(v.name) == &v);
    names.emplace_back(v.name);
    if (v.kind == VerbKind::kRead) reads.emplace_back(v.name);
  }
  CHECK(std::set<std::string>(names.begin(), names.end()).size() == names.size());
  // daemon/README.md, "Control socket and security", lists exactly these as read verbs.
  CHECK(reads == std::vector<std::string>{"ping", "studies", "status", "trials", "best", "logs",
                                          "export", "nodes", "events"});
  // The large replies are the streamed ones.
  CHECK(FindVerb("trials")->streamer != nullptr);
  CHECK(FindVerb("export")->streamer != nullptr);
  CHECK(FindVerb("retry") == nullptr);
  // An unknown verb is refused before any handler runs, so no scheduler or storage is needed.
  common::Result<boost::json::value> unknown = HandleVerb(VerbContext{}, "retry", {});
  CHECK(unknown.status().code() == common::Code::kInvalidArgument);
  CHECK(unknown.status().message() ==
        "unknown verb \"retry\"; expected one of ping, submit, studies, status, trials, best, "
        "cancel, enqueue, ask, code, logs, export, nodes, pause, resume, extend, set, delete, "
        "events");
  // The source kept at submit is its owner's: code has a mutating verb's access.
  CHECK(FindVerb("code")->kind == VerbKind::kMutating);
  // ask takes its connection over: only the control server can serve it, and it is mutating
  // (the study's submitter, root and triald's uid).
  CHECK(FindVerb("ask")->handover != nullptr);
  CHECK(FindVerb("ask")->kind == VerbKind::kMutating);
  common::Result<boost::json::value> ask = HandleVerb(VerbContext{}, "ask", {{"study", "s"}});
  CHECK(ask.status().code() == common::Code::kInvalidArgument);
  CHECK_THAT(ask.status().message(), Catch::Contains("takes over its connection"));
}

TEST_CASE("Request decoding: enqueue params as text, log streams, submit", "[control]") {
  namespace json = boost::json;
  auto params = DecodeEnqueueParams(
      json::parse(R"({"params": {"lr": "0.01", "n": 64, "x": 0.5, "on": true}})").as_object());
  REQUIRE(params.ok());
  CHECK(*params == std::map<std::string, std::string>{
                       {"lr", "0.01"}, {"n", "64"}, {"x", "0.5"}, {"on", "true"}});
  CHECK(DecodeEnqueueParams(json::object{})->empty());
  CHECK(DecodeEnqueueParams(json::parse(R"({"params": null})").as_object())->empty());
  CHECK(DecodeEnqueueParams(json::parse(R"({"params": [1]})").as_object()).status().message() ==
        "field \"params\" must be an object of parameter name to value text");
  CHECK(DecodeEnqueueParams(json::parse(R"({"params": {"a": [1]}})").as_object())
            .status()
            .message() == "params.a must be a string (the value as text)");

  CHECK(*DecodeLogStream(json::object{}) == "stdout");
  CHECK(*DecodeLogStream(json::parse(R"({"stream": "stderr"})").as_object()) == "stderr");
  CHECK(DecodeLogStream(json::parse(R"({"stream": "both"})").as_object()).status().message() ==
        "stream \"both\"; expected stdout or stderr");

  auto submit = DecodeSubmit(json::parse(R"({"sweep": "[study]", "path": "/s.toml"})").as_object());
  REQUIRE(submit.ok());
  CHECK(submit->text == "[study]");
  CHECK(submit->path == "/s.toml");
  CHECK(DecodeSubmit(json::object{}).status().code() == common::Code::kInvalidArgument);
  // A sweep over the size limit is refused before it is parsed, with the limit in the message.
  json::object big{{"sweep", std::string(proto::kMaxSweepBytes + 1, '#')}, {"path", "/big.toml"}};
  auto refused = DecodeSubmit(big);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == common::Code::kInvalidArgument);
  CHECK_THAT(refused.status().message(),
             Catch::StartsWith("sweep /big.toml is 2097153 bytes; expected at most 2097152"));
}

TEST_CASE("Permits and DenialFor: read access reads, full access does anything",
          "[control][security]") {
  CHECK(Permits(Access::kFull, false));
  CHECK(Permits(Access::kFull, true));
  CHECK(Permits(Access::kRead, true));
  CHECK_FALSE(Permits(Access::kRead, false));
  CHECK_FALSE(Permits(Access::kNone, true));
  CHECK_FALSE(Permits(Access::kNone, false));

  AccessPolicy policy = Policy(/*daemon_uid=*/1000, /*allowed_gid=*/0, /*read_open=*/true);
  common::Status read_only = DenialFor(policy, Peer(1001, 5), Access::kRead, "submit");
  CHECK(read_only.code() == common::Code::kPermissionDenied);
  CHECK(read_only.message() ==
        "uid 1001 may not use \"submit\": only root, triald's user (uid 1000) may change "
        "anything (others may only read)");
  CHECK(DenialFor(policy, Peer(1001, 5), Access::kNone, "ping").message() ==
        "uid 1001 may not use \"ping\": only root, triald's user (uid 1000) may");
  // A socket-group member of a non-root daemon is told why it may only read.
  CHECK(DenialFor(policy, Peer(1001, 0), Access::kRead, "submit").message() ==
        "uid 1001 may not use \"submit\": only root, triald's user (uid 1000) may change "
        "anything (others may only read); triald runs as uid 1000, not root, so its socket "
        "group may only read (see --trust-group)");
  policy.trust_gid = 0;
  policy.runs_as_submitter = true;
  CHECK(DenialFor(policy, Peer(1001, 5), Access::kRead, "submit").message() ==
        "uid 1001 may not use \"submit\": only root, triald's user (uid 1000), members of "
        "--trust-group root (gid 0), members of the socket group root (gid 0) may change "
        "anything (others may only read)");
}

TEST_CASE("ParseStatusGroups reads the Groups: line of /proc/PID/status", "[control][security]") {
  CHECK(ParseStatusGroups("Name:\tx\nUid:\t0\t0\t0\t0\nGroups:\t4 24 27 \nNgid:\t0\n") ==
        std::vector<gid_t>{4, 24, 27});
  CHECK(ParseStatusGroups("Groups:\n").empty());
  CHECK(ParseStatusGroups("Name:\tx\n").empty());
  CHECK(ParseStatusGroups("Groups:\t4294967295 x 12\n") == std::vector<gid_t>{4294967295u, 12});
  CHECK(ParseStatusGroups("Groups:\t99999999999 5") == std::vector<gid_t>{5});

  // Against this process's own status: the same set as getgroups().
  std::ifstream in("/proc/self/status");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<gid_t> mine(static_cast<size_t>(::getgroups(0, nullptr)));
  REQUIRE(::getgroups(static_cast<int>(mine.size()), mine.data()) >= 0);
  std::vector<gid_t> parsed = ParseStatusGroups(text);
  std::sort(mine.begin(), mine.end());
  std::sort(parsed.begin(), parsed.end());
  CHECK(parsed == mine);
}

TEST_CASE("ReadPeerCredentials: uid, gid, pid and groups of the other end", "[control][security]") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  common::UniqueFd a(sv[0]), b(sv[1]);
  common::Result<PeerCredentials> peer = ReadPeerCredentials(a.get());
  REQUIRE(peer.ok());
  CHECK(peer->pid == ::getpid());
  CHECK(peer->uid == ::geteuid());
  CHECK(peer->gid == ::getegid());
  std::vector<gid_t> mine(static_cast<size_t>(::getgroups(0, nullptr)));
  REQUIRE(::getgroups(static_cast<int>(mine.size()), mine.data()) >= 0);
  std::vector<gid_t> got = peer->groups;
  std::sort(mine.begin(), mine.end());
  std::sort(got.begin(), got.end());
  CHECK(got == mine);

  common::Result<PeerCredentials> bad = ReadPeerCredentials(-1);
  CHECK(bad.status().code() == common::Code::kIo);
}

TEST_CASE("ResolveGroup: names, numbers, and unknown groups named in the error",
          "[control][security]") {
  common::Result<gid_t> root = ResolveGroup("root");
  REQUIRE(root.ok());
  CHECK(*root == 0);
  CHECK(*ResolveGroup("4242") == 4242u);
  common::Result<gid_t> none = ResolveGroup("triald-no-such-group");
  CHECK(none.status().code() == common::Code::kNotFound);
  CHECK_THAT(none.status().message(), Catch::Contains("\"triald-no-such-group\""));
  CHECK(ResolveGroup("").status().code() == common::Code::kInvalidArgument);
  CHECK(ResolveGroup("12x").status().code() == common::Code::kNotFound);
  CHECK(GroupLabel(0) == "root (gid 0)");
}

TEST_CASE("ListenControlSocket: mode and group as asked, stale sockets replaced",
          "[control][security]") {
  TempDir dir;
  const std::string path = dir.File("ctl.sock");
  {
    common::Result<common::UniqueFd> fd = ListenControlSocket(path, 0660, ::getegid());
    REQUIRE(fd.ok());
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK(S_ISSOCK(st.st_mode));
    CHECK((st.st_mode & 07777) == 0660);
    CHECK(st.st_gid == ::getegid());
    CHECK((::fcntl(fd->get(), F_GETFD) & FD_CLOEXEC) != 0);
  }
  // The file of a previous run is still there; it is replaced, with the new mode.
  common::Result<common::UniqueFd> again = ListenControlSocket(path, 0666, ::getegid());
  REQUIRE(again.ok());
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0666);

  // A regular file in the way is never deleted.
  const std::string file = dir.Write("not-a-socket", "data");
  common::Result<common::UniqueFd> refused = ListenControlSocket(file, 0660, ::getegid());
  CHECK(refused.status().code() == common::Code::kFailedPrecondition);
  CHECK_THAT(refused.status().message(), Catch::Contains("is not a socket"));
  CHECK(::access(file.c_str(), F_OK) == 0);

  common::Result<common::UniqueFd> too_long =
      ListenControlSocket(dir.File(std::string(200, 's')), 0660, ::getegid());
  CHECK(too_long.status().code() == common::Code::kInvalidArgument);

  if (::geteuid() == 0) {  // root may give the socket to any group
    common::Result<common::UniqueFd> grouped = ListenControlSocket(path, 0660, 42424);
    REQUIRE(grouped.ok());
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK(st.st_gid == 42424u);
  }
}

TEST_CASE(
    "ListenControlSocket: a path swapped for a link while the socket is set up is not "
    "followed",
    "[control][security]") {
  // Someone who can write in the socket's folder swaps the new socket for a symlink to a file
  // of theirs the moment it appears, hoping that the mode and group meant for the socket land
  // on that file. The socket must only appear at its path with its final mode, never be set
  // up through the path; a racing attacker may win on some tries, so there are many.
  TempDir dir;
  const std::string path = dir.File("ctl.sock");
  const std::string victim = dir.Write("victim", "secret");
  REQUIRE(::chmod(victim.c_str(), 0600) == 0);
  const std::string link = dir.File("link");
  std::atomic<bool> stop{false};
  std::atomic<int> swapped{0};
  std::thread attacker([&] {
    while (!stop.load()) {
      struct stat st {};
      if (::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
        ::unlink(link.c_str());
        if (::symlink(victim.c_str(), link.c_str()) == 0 &&
            ::rename(link.c_str(), path.c_str()) == 0) {
          swapped.fetch_add(1);
        }
      }
    }
  });
  int listened = 0;
  for (int i = 0; i < 1500; ++i) {
    ::unlink(path.c_str());
    common::Result<common::UniqueFd> fd = ListenControlSocket(path, 0666, ::getegid());
    if (fd.ok()) ++listened;
    struct stat st {};
    REQUIRE(::stat(victim.c_str(), &st) == 0);
    INFO("try " << i);
    REQUIRE((st.st_mode & 07777) == 0600);
  }
  stop = true;
  attacker.join();
  CHECK(listened > 0);
  CHECK(swapped.load() > 0);  // the attacker did act
  // No private folder is left behind.
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    CHECK(e.path().filename().string().rfind(".triald-sock-", 0) == std::string::npos);
  }
}

}  // namespace triald::daemon
