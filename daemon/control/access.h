#pragma once
// Who may use the control socket, and the socket file itself.
//
// The peer's credentials are read once per connection with SO_PEERCRED (uid, gid) and
// SO_PEERGROUPS (supplementary groups; /proc/PID/status on kernels without it). Root, the
// daemon's own uid and members of the allowed group get full access (every verb); anyone else
// who could connect (the socket file is 0660, or 0666 with read_open) may use the read verbs
// (VerbKind::kRead in daemon/control/verbs.h) only when read_open is set, and nothing
// otherwise. Denied requests get the reply DenialFor builds.
//
// Thread-safety: pure functions, except that ReadPeerCredentials, ResolveGroup, GroupLabel and
// ListenControlSocket read the system (sockets, /proc, the group database); all are safe to
// call from any thread.

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "common/fd.h"
#include "common/status.h"

namespace triald::daemon {

// Who may use the control socket. Mutating verbs need full access.
struct AccessPolicy {
  uid_t daemon_uid = 0;    // the daemon's own (effective) uid
  gid_t allowed_gid = 0;   // members (primary or supplementary) get full access
  bool read_open = false;  // anyone who can connect may use the read verbs
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

// The supplementary groups listed on the "Groups:" line of /proc/PID/status text; empty when
// the line is missing.
std::vector<gid_t> ParseStatusGroups(std::string_view status_text);
// SO_PEERCRED plus the peer's supplementary groups.
common::Result<PeerCredentials> ReadPeerCredentials(int socket_fd);

// A group given by name or number (--socket-group); errors name the group.
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
