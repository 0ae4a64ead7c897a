#pragma once
// trial-worker's tools for a model that misbehaves, each on a Hugging Face GPT-2 folder:
//   tokenize MODEL_DIR   reads text on stdin, prints its token ids as one JSON array
//   inspect MODEL_DIR [--batch-size B] [--seq-len L]
//                        prints the parameter count and the planned training memory as JSON,
//                        from config.json alone: the model is built on the meta device only
//   check MODEL_DIR      loads model.safetensors for real (on the CPU) and reports every
//                        missing, unexpected or mismatched tensor by name
//   train MODEL_DIR TRAIN_FILE EVAL_FILE [--steps N] [--seq-len L] [--eval-every N]
//         [--device D] [--params JSON] [--save OUT_DIR] [--batches] [--no-initial-eval]
//                        trains exactly as a trial with those [objective] settings and
//                        TRIALD_PARAMS = JSON would (PrepareLm, then TrainLm), printing JSON
//                        lines: attributes, every step (learning rate, training loss, elapsed
//                        time; with --batches the batch's token ids too), every evaluation, and
//                        a summary (with --batches also the evaluation token ids), so another
//                        implementation can replay the run; --save writes the trained model as
//                        a new Hugging Face folder (how the demo's pretrained fixture is made)
// They use exactly the code a trial uses. Each returns the process exit code: 0 success (also
// for `trial-worker TOOL --help`), 1 a problem (printed on stderr), 2 a bad command line.
// Their command lines are declared once with CLI11: an option takes `--opt value` or
// `--opt=value`, an option given twice keeps its last value, and an error names the option
// (e.g. `trial-worker: --steps: "0": expected a positive integer (at most 2147483647)`).
//
// Thread-safety: run from main() only.

#include <string>
#include <vector>

namespace triald::worker {

// args: everything after the tool's name.
int RunTool(const std::string& tool, const std::vector<std::string>& args);

bool IsTool(const std::string& name);

// The tools' synopses (made from their declarations) and summaries for `trial-worker --help`,
// lines joined by '\n': "  trial-worker inspect MODEL_DIR [--batch-size B] [--seq-len L]\n"...
std::string ToolsHelp();

}  // namespace triald::worker
