#pragma once
// trial-worker's tools for a model that misbehaves, each on a Hugging Face GPT-2 folder:
//   tokenize MODEL_DIR   reads text on stdin, prints its token ids as one JSON array
//   inspect MODEL_DIR [--batch-size B] [--seq-len L]
//                        prints the parameter count and the planned training memory as JSON,
//                        from config.json alone: the model is built on the meta device only
//   check MODEL_DIR      loads model.safetensors for real (on the CPU) and reports every
//                        missing, unexpected or mismatched tensor by name
// They use exactly the code a trial uses. Each returns the process exit code: 0 success, 1 a
// problem (printed on stderr), 2 a bad command line.
//
// Thread-safety: run from main() only.

#include <string>
#include <vector>

namespace triald::worker {

// args: everything after the tool's name.
int RunTool(const std::string& tool, const std::vector<std::string>& args);

bool IsTool(const std::string& name);

}  // namespace triald::worker
