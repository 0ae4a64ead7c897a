#pragma once
// The state directory's permissions: what triald keeps there (the database with every stored
// sweep, `env` secrets included; the trial logs) is for the daemon and, with --socket-group,
// that group; never for every local user, whatever umask triald was started with.
//
// SecureStateDir sets, on every start:
//   - the daemon's umask to at least 022 (nothing it creates is group- or world-writable; trials
//     inherit it),
//   - the state directory and its studies/ folder to 0700, or 0750 and the group `group` when
//     one is given (--socket-group), plus o+x on the state directory alone when `others_traverse`
//     (--socket-read-open with the socket inside it: others may reach the socket, not list),
//     and o+x on both when `trials_as_users` (a root daemon runs trials as their submitters,
//     who must reach their trial folders below studies/; search only, never list or read),
//   - triald.db and its -wal, -shm and -journal files to 0600, creating an empty triald.db 0600
//     when there is none (SQLite gives the WAL and SHM files the database's mode).
// A mode that was looser (or just different) is fixed with a log line naming the path, the old
// mode and the new. Links are never followed.
//
// Thread-safety: changes the process umask; call once at start, before other threads exist.

#include <sys/types.h>

#include <optional>
#include <string>

#include "common/logging.h"
#include "common/status.h"

namespace triald::daemon {

struct StateDirAccess {
  std::optional<gid_t> group;    // --socket-group: the folders are 0750 and this group's
  bool others_traverse = false;  // o+x on the state directory (the socket is inside it)
  bool trials_as_users = false;  // o+x on the state directory and studies/ (run_as.h)
  bool sqlite = true;            // the database is STATE_DIR/triald.db
};

// The state directory's mode for `access` (0700, 0750, 0701 or 0751).
mode_t StateDirMode(const StateDirAccess& access);

common::Status SecureStateDir(const std::string& state_dir, const StateDirAccess& access,
                              const common::Logger& log);

}  // namespace triald::daemon
