#include "daemon/objective_command.h"

#include <unistd.h>

#include <filesystem>

namespace triald::daemon {
namespace fs = std::filesystem;

namespace {

common::Status NeedFile(const std::string& where, const std::string& key, const std::string& path,
                        const std::string& what) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return common::Status::Ok();
  return common::InvalidArgument(where + ": [objective] " + key + " = \"" + path +
                                 "\": no such file; expected " + what);
}

}  // namespace

common::Status PrepareObjective(config::SweepSpec& spec, const std::string& trial_worker,
                                const std::string& where) {
  config::ObjectiveConfig& obj = spec.objective;
  if (obj.kind != "lm") return common::Status::Ok();
  const config::LmObjectiveConfig& lm = obj.lm;
  std::error_code ec;
  if (!fs::is_directory(lm.model, ec)) {
    return common::InvalidArgument(where + ": [objective] model = \"" + lm.model +
                                   "\": not a folder; expected a Hugging Face GPT-2 folder "
                                   "(config.json, model.safetensors, vocab.json, merges.txt)");
  }
  for (const char* f : {"config.json", "model.safetensors", "vocab.json", "merges.txt"}) {
    TRIALD_RETURN_IF_ERROR(
        NeedFile(where, "model", lm.model + "/" + f, std::string("the model folder to hold ") + f));
  }
  TRIALD_RETURN_IF_ERROR(NeedFile(where, "train_file", lm.train_file, "a plain-text file"));
  TRIALD_RETURN_IF_ERROR(NeedFile(where, "eval_file", lm.eval_file, "a plain-text file"));
  if (::access(trial_worker.c_str(), X_OK) != 0) {
    return common::FailedPrecondition("kind = \"lm\" needs the built-in worker, but " +
                                      trial_worker + " is not an executable (build trial-worker)");
  }
  obj.command = {trial_worker, "--objective", "lm", "--config", config::LmObjectiveToJson(lm)};
  return common::Status::Ok();
}

std::string DefaultTrialWorkerPath() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "trial-worker";
  return (self.parent_path() / "trial-worker").string();
}

}  // namespace triald::daemon
