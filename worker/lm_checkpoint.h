#pragma once
// Checkpoints of an lm trial (config checkpoint_every): everything TrainLm needs to continue a
// run on exactly the path it was on, so that a retry of a trial that was killed resumes where the
// last checkpoint left it and ends where the uninterrupted run would have.
//
// One file, `checkpoint` in the trial's folder (TRIALD_TRIAL_DIR), replaced atomically: written
// to a temporary file in the same folder, fsync'ed, renamed over the old one, and the folder
// fsync'ed, so a reader (the retry) sees the previous checkpoint or the new one, never half of
// one. Its layout:
//   triald-lm-checkpoint 1\n         the format
//   step N\n                         the optimizer steps taken (1-based count)
//   fingerprint HEX\n                LmCheckpointFingerprint of the run that wrote it
//   \n
//   PAYLOAD                          a LibTorch archive (torch::serialize), below
//   TRAILER                          24 bytes: the payload's length and FNV-1a 64 hash (both
//                                    little-endian uint64), then "TRLDCKPT"
// The archive holds the model's parameters and buffers by name, the AdamW state (moments and
// step counts, torch::optim's own serialization), the data order's generator (the mt19937_64
// that picks the training windows), LibTorch's CPU generator and, on a CUDA device, that
// device's generator (dropout). The learning-rate schedule is a function of the step.
//
// A checkpoint is loaded only when the header, length and hash are intact, its fingerprint is
// this run's (same hyperparameters, settings that shape training, training and evaluation
// tokens, device type), its step is in [1, max_steps), and every parameter is there with the
// model's shape; anything else is refused with the reason, and nothing of the model or the
// optimizer is changed by a refused load.
//
// Thread-safety: none; run one training per process, as TrainLm does.

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/sweep.h"
#include "worker/gpt2.h"
#include "worker/lm_objective.h"

namespace triald::worker {

// The checkpoint's file name in the trial folder.
inline constexpr char kLmCheckpointFile[] = "checkpoint";

// A hash (16 hex digits) of what decides a run's path: the hyperparameters `hp`, the settings of
// `config` that shape training (model, train_file, eval_file, max_steps, seq_len), the token
// streams and the device type.
std::string LmCheckpointFingerprint(const config::LmObjectiveConfig& config,
                                    const LmHyperparams& hp, const std::vector<int32_t>& train,
                                    const std::vector<int32_t>& eval, const c10::Device& device);

// What a checkpoint's header says, read without loading its payload (tests, tools).
struct LmCheckpointHeader {
  int64_t step = 0;
  std::string fingerprint;
};
common::Result<LmCheckpointHeader> ReadLmCheckpointHeader(const std::string& path);

// Writes the checkpoint of `step` steps into `dir` atomically (see the top).
common::Status SaveLmCheckpoint(const std::string& dir, int64_t step,
                                const std::string& fingerprint, Gpt2Model& model,
                                torch::optim::Optimizer& optimizer, const std::mt19937_64& data_rng,
                                const c10::Device& device);

// Loads the checkpoint in `dir` into `model`, `optimizer`, `data_rng` and LibTorch's generators
// and returns its step; refuses (see the top) with the reason and changes nothing.
common::Result<int64_t> LoadLmCheckpoint(const std::string& dir, const std::string& fingerprint,
                                         int64_t max_steps, Gpt2Model& model,
                                         torch::optim::Optimizer& optimizer,
                                         std::mt19937_64* data_rng, const c10::Device& device);

}  // namespace triald::worker
