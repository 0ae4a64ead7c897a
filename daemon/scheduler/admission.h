#pragma once
// StudyAdmission: whether a sweep may run on this daemon, checked at submit before anything is
// stored, and again whenever a stored study is loaded to run (recovery, a study joined from
// another node, a completed study extended). At submit: the sweep parses, its [objective]
// workdir exists, its objective's files are there (lm, python), command[0] is an executable,
// its gpus_per_trial fits the GPU pool and, when it measures peak_gpu_memory, the pool has a
// probe that reports each process's memory; a study whose trials run as Slurm jobs is checked
// against the cluster instead (partition, GPUs: check_executor). A reload checks what may have
// changed on this node since (the objective's files, the GPUs); the workdir and executable are
// checked when each trial starts. The file-system checks go through the SchedulerEnv.
//
// Errors name `where` (the sweep file's path, "<sweep>" when there is none), the key, the value
// given and what was expected.
//
// Thread-safety: const methods; safe to call from several threads only if the env and the pool
// are (the scheduler calls it from its event-loop thread).

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/sweep.h"
#include "daemon/devices/gpu_pool.h"
#include "daemon/model/records.h"
#include "daemon/scheduler/scheduler_env.h"

namespace triald::daemon {

class StudyAdmission {
 public:
  struct Options {
    SchedulerEnv* env = nullptr;        // not owned
    devices::GpuPool* gpus = nullptr;   // not owned; nullptr: no GPUs
    std::string trial_worker;           // the built-in worker of kind = "lm"
    std::vector<std::string> base_env;  // the environment trials start from (its PATH)
    // A study whose trials run elsewhere ([executor] kind = "slurm"): whether they can run
    // there (daemon/slurm/slurm_cluster.h); its GPUs are that system's, not the pool's. Empty:
    // such a study is refused.
    std::function<common::Status(const config::SweepSpec&, const std::string& where)>
        check_executor;
  };
  explicit StudyAdmission(Options options) : options_(std::move(options)) {}

  // A sweep submitted from `source` by `submitter`: its parsed, prepared spec, or why it cannot
  // run here. The file checks run first with the submitter's rights (SchedulerEnv::AsSubmitter),
  // then with the daemon's.
  common::Result<config::SweepSpec> Admit(const config::SweepSource& source,
                                          const model::Submitter& submitter) const;
  // The study to store for an admitted sweep submitted by `submitter`: its seed is the sweep's,
  // else one drawn from `seed_source` (0 when empty).
  static model::NewStudy NewStudyOf(const config::SweepSpec& spec,
                                    const config::SweepSource& source,
                                    const model::Submitter& submitter,
                                    const std::function<uint64_t()>& seed_source);
  // A stored study, to run again on this node.
  common::Result<config::SweepSpec> Readmit(const model::StudyRecord& study) const;
  // Why a study submitted as `stored` cannot be continued by a submission of `now` (submit
  // --resume, [study] load_if_exists): what differs of its directions, [space] and objective,
  // "" when nothing does.
  static std::string ResumeMismatch(const config::SweepSpec& stored, const config::SweepSpec& now);

 private:
  // The workdir, the objective's files and command[0], with whoever's rights this runs with.
  common::Status CheckFiles(config::SweepSpec& spec, const std::string& where) const;
  // gpus_per_trial against the pool, then CheckGpuMetrics; for a study run elsewhere, the
  // executor's check instead.
  common::Status CheckGpus(const config::SweepSpec& spec, const std::string& where) const;
  // peak_gpu_memory (resource_constraints, objectives) needs a probe with per-process memory.
  common::Status CheckGpuMetrics(const config::SweepSpec& spec, const std::string& where) const;

  Options options_;
};

}  // namespace triald::daemon
