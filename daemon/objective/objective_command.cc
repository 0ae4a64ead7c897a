#include "daemon/objective/objective_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "common/fd.h"

extern char** environ;

namespace triald::daemon {
namespace fs = std::filesystem;

namespace {

// Why a path is not a regular file: "no such file", or what stopped the check (a folder that may
// not be searched: "Permission denied", the same whether the file is there or not).
std::string NotAFile(const std::error_code& ec) {
  return ec && ec != std::errc::no_such_file_or_directory ? ec.message() : "no such file";
}

common::Status NeedFile(const std::string& where, const std::string& key, const std::string& path,
                        const std::string& what) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return common::Status::Ok();
  return common::InvalidArgument(where + ": [objective] " + key + " = \"" + path +
                                 "\": " + NotAFile(ec) + "; expected " + what);
}

std::string EnvValue(const std::vector<std::string>& env, const std::string& name) {
  for (const std::string& kv : env) {
    if (kv.size() > name.size() && kv.compare(0, name.size(), name) == 0 &&
        kv[name.size()] == '=') {
      return kv.substr(name.size() + 1);
    }
  }
  return "";
}

std::vector<std::string> SplitPath(const std::string& value) {
  std::vector<std::string> out;
  std::string part;
  std::istringstream in(value);
  while (std::getline(in, part, ':')) {
    if (!part.empty()) out.push_back(part);
  }
  return out;
}

// The file a function-valued key (function, constraints) names, checked to exist and to bind
// NAME at module level, without running it. `key` is the key's name, `spec` its value as written,
// `file` / `module` / `name` / `at` as the sweep parser resolved them.
common::Status CheckPythonSpec(const config::ObjectiveConfig& obj, const std::string& key,
                               const std::string& spec, const std::string& spec_file,
                               const std::string& module, const std::string& name,
                               const std::string& at, const std::string& user_pythonpath,
                               const std::string& example) {
  auto refuse = [&](const std::string& problem, const std::string& expected) {
    return common::InvalidArgument(at + ": [objective] " + key + " = \"" + spec + "\": " + problem +
                                   "; expected " + expected);
  };
  std::string file = spec_file;
  if (file.empty()) {
    // package.module -> package/module.py or package/module/__init__.py, where Python would look
    // first: the working folder, then PYTHONPATH.
    std::string rel = module;
    for (char& c : rel) c = c == '.' ? '/' : c;
    std::vector<std::string> roots = {obj.workdir};
    for (const std::string& p : SplitPath(user_pythonpath)) {
      roots.push_back(fs::path(p).is_absolute() ? p : (fs::path(obj.workdir) / p).string());
    }
    std::error_code ec;
    for (const std::string& root : roots) {
      for (const std::string& cand :
           {root + "/" + rel + ".py", root + "/" + rel + "/__init__.py"}) {
        if (fs::is_regular_file(cand, ec)) {
          file = cand;
          break;
        }
      }
      if (!file.empty()) break;
    }
    if (file.empty()) {
      std::string looked;
      for (const std::string& root : roots) looked += (looked.empty() ? "" : ", ") + root;
      return refuse("module \"" + module + "\" not found (as " + rel + ".py or " + rel +
                        "/__init__.py) under " + looked,
                    "a module importable from workdir or PYTHONPATH");
    }
  }
  // A file the checker may not reach (a folder it cannot search) says so, the same whether the
  // file is there or not.
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) {
    return refuse(file + ": " + NotAFile(ec), "a Python file, relative to the sweep file's folder");
  }
  common::Result<std::string> text = common::ReadFile(file);
  if (!text.ok()) return refuse(text.status().message(), "a readable Python file");
  const std::string why = CheckPythonBinding(*text, name);
  if (!why.empty()) {
    return refuse(why + " in " + file,
                  "a function defined at top level, e.g. def " + name + "(" + example + "):");
  }
  return common::Status::Ok();
}

common::Status PreparePython(config::ObjectiveConfig& obj, const std::vector<std::string>& base_env,
                             std::string runner_dir) {
  const std::string user_pythonpath =
      obj.env.count("PYTHONPATH") ? obj.env.at("PYTHONPATH") : EnvValue(base_env, "PYTHONPATH");
  TRIALD_RETURN_IF_ERROR(CheckPythonSpec(obj, "function", obj.function, obj.function_file,
                                         obj.function_module, obj.function_name, obj.function_at,
                                         user_pythonpath, "trial"));
  if (!obj.constraints.empty()) {
    TRIALD_RETURN_IF_ERROR(CheckPythonSpec(
        obj, "constraints", obj.constraints, obj.constraints_file, obj.constraints_module,
        obj.constraints_name, obj.constraints_at, user_pythonpath, "frozen_trial"));
  }
  if (runner_dir.empty()) runner_dir = DefaultPythonRunnerDir();
  if (runner_dir.empty()) {
    return common::FailedPrecondition(
        "kind = \"python\" needs the triald Python runner, but it was found neither in the "
        "install prefix nor in the build's source tree (install triald, or build it from its "
        "source tree)");
  }
  obj.env["PYTHONPATH"] = runner_dir + (user_pythonpath.empty() ? "" : ":" + user_pythonpath);
  const std::string target = obj.function_file.empty() ? obj.function_module : obj.function_file;
  obj.command = {obj.python, "-m", "triald", "run", target + ":" + obj.function_name};
  if (!obj.constraints.empty()) {
    const std::string c_target =
        obj.constraints_file.empty() ? obj.constraints_module : obj.constraints_file;
    obj.command.push_back("--constraints");
    obj.command.push_back(c_target + ":" + obj.constraints_name);
  }
  obj.fork_server_command.clear();
  obj.fork_request_argv.clear();
  if (obj.fork_server) {
    // The server runs with the trial's interpreter, PYTHONPATH and [objective] env; a fork
    // request carries what the exec path runs after `PYTHON -m triald`.
    obj.fork_server_command = {obj.python, "-m", "triald", "fork-server"};
    if (!obj.preload.empty()) {
      std::string mods;
      for (const std::string& m : obj.preload) mods += (mods.empty() ? "" : ",") + m;
      obj.fork_server_command.push_back("--preload");
      obj.fork_server_command.push_back(mods);
    }
    if (obj.preload_objective) {
      // The objective's spec, and its constraints', exactly as `run` gets them:
      // command = PYTHON -m triald run SPEC [--constraints SPEC].
      obj.fork_server_command.push_back("--objective");
      obj.fork_server_command.push_back(obj.command[4]);
      if (!obj.constraints.empty()) {
        obj.fork_server_command.push_back("--constraints");
        obj.fork_server_command.push_back(obj.command[6]);
      }
    }
    if (obj.fork_twice) obj.fork_server_command.push_back("--fork-twice");
    obj.fork_request_argv.assign(obj.command.begin() + 3, obj.command.end());
  }
  return common::Status::Ok();
}

}  // namespace

const std::vector<std::string>& InheritedEnvironment() {
  static const std::vector<std::string> kNames = {
      "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ",
      "TMPDIR", "LD_LIBRARY_PATH", "PYTHONPATH", "CUDA_HOME",
      // Which Slurm cluster srun, squeue and scancel talk to (a Slurm trial's bridge runs them).
      "SLURM_CONF"};
  return kNames;
}

std::vector<std::string> InheritedVariables() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv(*e);
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    for (const std::string& k : InheritedEnvironment()) {
      if (kv.compare(0, eq, k) == 0 && eq == k.size()) env.push_back(kv);
    }
  }
  return env;
}

std::string DefaultPythonRunnerDir() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  const fs::path bin = self.parent_path();
  std::vector<fs::path> candidates = {(bin / ".." / TRIALD_PYTHON_DIR).lexically_normal()};
  // An executable of the build tree (build/bin) runs the source tree's runner.
  if (fs::equivalent(bin, fs::path(TRIALD_BUILD_BIN_DIR), ec)) {
    candidates.push_back(fs::path(TRIALD_SOURCE_PYTHON_DIR));
  }
  for (const fs::path& dir : candidates) {
    if (fs::is_regular_file(dir / "triald" / "__main__.py", ec)) return dir.string();
  }
  return "";
}

common::Status CheckWorkdir(const config::ObjectiveConfig& objective, const std::string& where) {
  const std::string& dir = objective.workdir;
  auto bad = [&](const std::string& why) {
    return common::InvalidArgument(where + ": [objective] workdir = \"" + dir + "\": " + why +
                                   "; expected an existing directory");
  };
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return bad(std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return bad("not a directory");
  if (::access(dir.c_str(), X_OK) != 0) return bad(std::strerror(errno));
  return common::Status::Ok();
}

common::Status PrepareObjective(config::SweepSpec& spec, const std::string& trial_worker,
                                const std::string& where, const std::vector<std::string>& base_env,
                                const std::string& python_runner_dir) {
  config::ObjectiveConfig& obj = spec.objective;
  if (obj.kind == "python") return PreparePython(obj, base_env, python_runner_dir);
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
  obj.fork_server_command.clear();
  obj.fork_request_argv.clear();
  if (obj.fork_server) {
    // The server maps the model and parses the tokenizer once; a fork request carries the
    // trial's own arguments (what the exec path runs after trial-worker).
    obj.fork_server_command = {trial_worker, "--fork-server", "--objective",
                               "lm",         "--config",      obj.command.back()};
    if (obj.fork_twice) obj.fork_server_command.push_back("--fork-twice");
    obj.fork_request_argv.assign(obj.command.begin() + 1, obj.command.end());
  }
  return common::Status::Ok();
}

std::string DefaultTrialWorkerPath() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "trial-worker";
  return (self.parent_path() / "trial-worker").string();
}

}  // namespace triald::daemon
