#pragma once
// Who may use the control socket, and the socket file itself.
//
// The peer's credentials are read once per connection with SO_PEERCRED (uid, gid) and
// SO_PEERGROUPS (supplementary groups; /proc/PID/status on kernels without it). Two groups
// matter (daemon/README.md, "Security", has the whole table):
//   - the socket group (--socket-group, default triald's primary group) decides who may
//     connect: the socket file is 0660 and owned by it (0666 with read_open);
//   - full access (submit, and change one's own studies) is for root, triald's own uid, members
//     of --trust-group when given, and, on a daemon running as root, members of the socket
//     group: a root daemon runs each trial as its submitter, so submitting grants nothing the
//     submitter did not have. A non-root daemon runs every trial as its own user, so there the
//     socket group gets only the read verbs: full access would let a member run code as
//     triald's user.
// Anyone else who could connect may use the read verbs (VerbKind::kRead in
// daemon/control/verbs.h) only when read_open is set, and nothing otherwise. A mutating verb on
// an existing study is further limited to its submitter, triald's uid and root
// (MayChangeStudy). Denied requests get the reply DenialFor / StudyDenialFor builds.
//
// Thread-safety: pure functions, except that ReadPeerCredentials, ResolveGroup, GroupLabel,
// UserName and ListenControlSocket read the system (sockets, /proc, the user and group
// databases); all are safe to call from any thread.

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/fd.h"
#include "common/status.h"

namespace triald::daemon {

// Who may use the control socket. Mutating verbs need full access.
struct AccessPolicy {
  uid_t daemon_uid = 0;    // the daemon's own (effective) uid
  gid_t allowed_gid = 0;   // the socket's group: members may connect (full access: see above)
  bool read_open = false;  // anyone who can connect may use the read verbs
  // --trust-group: members (primary or supplementary) get full access; on a non-root daemon
  // their trials run as triald's user.
  std::optional<gid_t> trust_gid = {};
  // The daemon runs each trial as its submitter (it is root); socket-group members then get
  // full access.
  bool runs_as_submitter = false;
};

// The peer of a connection, as the kernel recorded it at connect time.
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;              // primary (effective) gid
  std::vector<gid_t> groups;  // supplementary gids
};

enum class Access { kNone, kRead, kFull };
const char* AccessName(Access access);

Access DecideAccess(const AccessPolicy& policy, const PeerCredentials& peer);
// Whether a peer with `access` may use a verb that is a read (`read_verb`) or mutating.
bool Permits(Access access, bool read_verb);
// The permission_denied error for a peer refused `verb`: names the peer's uid and who may.
common::Status DenialFor(const AccessPolicy& policy, const PeerCredentials& peer, Access access,
                         std::string_view verb);

// Whether `peer` may use a mutating verb on a study submitted by uid `submitter_uid` (-1:
// unknown): its submitter, root and triald's own uid may; nobody else, whatever their access.
bool MayChangeStudy(const AccessPolicy& policy, const PeerCredentials& peer, int64_t submitter_uid);
// The permission_denied error for a peer refused `verb` on `study` by MayChangeStudy.
common::Status StudyDenialFor(const AccessPolicy& policy, const PeerCredentials& peer,
                              std::string_view verb, std::string_view study, int64_t submitter_uid,
                              std::string_view submitter_name);

// The passwd name of `uid`, "" when it has none.
std::string UserName(uid_t uid);

// The supplementary groups listed on the "Groups:" line of /proc/PID/status text; empty when
// the line is missing.
std::vector<gid_t> ParseStatusGroups(std::string_view status_text);
// SO_PEERCRED plus the peer's supplementary groups.
common::Result<PeerCredentials> ReadPeerCredentials(int socket_fd);

// A group given by name or number (--socket-group, --trust-group); errors name the group.
common::Result<gid_t> ResolveGroup(const std::string& name_or_gid);
// "name (gid N)" or "gid N" when the group has no name.
std::string GroupLabel(gid_t gid);

// Creates the control socket at `path` and listens on it: the socket is bound in a private
// folder (0700) beside `path`, given to `gid` and set to `mode` there, then renamed onto `path`
// (replacing a stale socket; the state-directory lock is ours). So it is never reachable with
// looser permissions than asked, and its mode and owner are never set through a path that
// someone else could swap for a link. Close-on-exec.
common::Result<common::UniqueFd> ListenControlSocket(const std::string& path, mode_t mode,
                                                     gid_t gid);

}  // namespace triald::daemon
