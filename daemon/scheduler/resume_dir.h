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

#include "daemon/model/records.h"

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

class SchedulerEnv;

// A retry about to start, and where it runs.
struct RetryFolderQuery {
  SchedulerEnv* env = nullptr;  // not owned: looks up the user, checks the folder
  std::string state_dir;
  const model::StudyRecord* study = nullptr;   // the retry's study
  const model::TrialRecord* failed = nullptr;  // the attempt it retries; nullptr: unknown here
  int of = 0;                                  // that attempt's number
  bool shared = false;                         // shared storage: nodes have folders of their own
  std::string node;                            // this node
  bool as_submitter = false;                   // trials run as their studies' submitters
};
// The folder of the attempt a retry retries, or why there is none: that attempt ran on another
// node (shared storage), its user has no passwd entry, or FindResumeFolder refused it.
ResumeFolder ResumeFolderForRetry(const RetryFolderQuery& query);
// The retry's resume_folder event: which folder trial `number` resumes from, or why none.
std::string DescribeResumeFolder(const ResumeFolder& folder, int number, int of);

}  // namespace triald::daemon
