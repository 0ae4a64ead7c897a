#pragma once
// Resume folder: what a retry gets as TRIALD_RESUME_DIR, the trial folder of the attempt it
// retries (model::TrialDir), so that a worker that checkpoints into its own folder can continue
// where that attempt stopped. Handed out only when the folder is on this node, is a real folder
// (no component below the state directory is a symbolic link: a trial cannot have the daemon
// point its retry at some other folder through a link it planted) and is readable by the user
// the retry runs as: it must be that user's own (its owner), with read and search permission for
// the owner. Otherwise the variable is absent and `reason` says why, for the retry's event.
//
// Thread-safety: FindResumeFolder reads the file system and is safe to call from any thread.

#include <sys/types.h>

#include <string>

namespace triald::daemon {

struct ResumeFolder {
  std::string dir;  // the folder to hand out; empty: none
  std::string
      reason;  // when `dir` is empty: why ("trial 3's folder ... does not exist on this node")
};

// The folder of trial `number` of study `study` under `state_dir`, checked as above for a
// retry that runs as `uid`.
ResumeFolder FindResumeFolder(const std::string& state_dir, const std::string& study, int number,
                              uid_t uid);

}  // namespace triald::daemon
