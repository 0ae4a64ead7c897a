#pragma once
// Fixtures of the worker's tests: a tiny GPT-2 checkpoint (GPT-2's real vocabulary and merges,
// random weights), the same in F16 and BF16, and tokenizer-reference.json, the ids an
// independent GPT-2 tokenizer (the npm package gpt-3-encoder) gives for a set of texts. See
// scripts/make_fixtures.py for what each file holds.
//
// Thread-safety: FixtureDir() may be called from several threads and from several test
// processes at once (ctest -j): one of them makes the fixtures, the others wait for it.

#include <string>

#include "config/sweep.h"

namespace triald::worker::testing {

// The folder holding tiny-gpt2/, tiny-gpt2-f16/, tiny-gpt2-bf16/, tokenizer-reference.json, the
// license corpus licenses/{pretrain,train,eval}.txt and tiny-gpt2-pretrained/ (tiny-gpt2 trained
// briefly on licenses/pretrain.txt by this build's trial-worker, which must be built first).
// It is <build>/fixtures, made on first use by `python3 scripts/make_fixtures.py` (which needs
// node, npm and, the first time, the npm registry) and made again when that script or the tiny
// corpus changes; a lock file keeps concurrent test processes from making it twice. When
// TRIALD_FIXTURE_DIR is set, that folder is used as it is (say, fixtures made ahead of an
// offline run). Throws std::runtime_error, with the script's output, when the fixtures cannot be
// made: inside a test case, Catch reports that as the test's failure.
std::string FixtureDir();

// tests/fixtures/tiny-corpus in the source tree: train.txt and eval.txt, plain English prose.
std::string TinyCorpusDir();

// The sweep's [objective] for the tiny fixture model on the tiny corpus, as the daemon would pass
// it to trial-worker: 6 CPU steps of batch 2 x 32 tokens, an evaluation every 2.
config::LmObjectiveConfig TinyLmConfig();

// A sweep file's [study] and [objective] (kind = "lm", the tiny fixture model on the tiny corpus:
// 6 CPU steps of batch 4 x 32 tokens, an evaluation every 3) and its [space] (learning_rate)
// and [sampler] (random, seed 3), for the end-to-end lm suites.
std::string TinyLmSweep(const std::string& name, int n_trials, int parallelism);

}  // namespace triald::worker::testing
