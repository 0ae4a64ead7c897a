#pragma once
// The objective's files `trialctl submit` records with a study (config::CodeFile: path,
// SHA-256, size and, up to 256 KiB of UTF-8, the source), read in trialctl's own process, so
// with the submitter's rights, and what `trialctl status` says of them later:
//   kind = "python"   the function's file and the constraints function's: the PATH.py forms'
//                     files, and the module forms' files as the submit check imported them
//   kind = "exec"     each element of command that names a file (absolute, or relative to the
//                     workdir) that is not a compiled program: the scripts the command runs
//                     ("train.py" of ["python3", "train.py"], "./run.sh"); an interpreter or a
//                     binary found through PATH is not the study's code
//   kind = "lm", "client"   none (the built-in worker; the asking program)
// At most config::kMaxCodeFiles files, and 1 MiB of source in all (a file past it is recorded
// without its source); a file that cannot be read or is over 64 MiB is left out
// (the record is for the user's benefit, never a reason to refuse a sweep).
//
// Thread-safety: functions of their arguments (they read the file system).

#include <boost/json.hpp>
#include <string>
#include <vector>

#include "config/sweep.h"

namespace triald::ctl {

// The paths to record for `spec`; `checked_files` are the files the submit check reported
// (kind = "python").
std::vector<std::string> ObjectiveCodePaths(const config::SweepSpec& spec,
                                            const std::vector<std::string>& checked_files);

// Reads and hashes `paths` (duplicates once), leaving out what cannot be read.
std::vector<config::CodeFile> ReadCodeFiles(const std::vector<std::string>& paths);

// The submit request's "code" array.
boost::json::array CodeFilesJson(const std::vector<config::CodeFile>& files);

// What `status` says of a recorded file (its path and sha256 at submit) now: "unchanged",
// "CHANGED since submit (sha256 now 1a2b3c4d5e6f)", or "missing now (No such file or
// directory)".
std::string CodeFileNow(const std::string& path, const std::string& sha256_at_submit);

}  // namespace triald::ctl
