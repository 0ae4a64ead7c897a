#include "daemon/ctl/submit_check.h"

#include <unistd.h>

#include <boost/json.hpp>
#include <cstdlib>
#include <map>
#include <sstream>

#include "common/json.h"
#include "common/process_util.h"
#include "daemon/objective/objective_command.h"

namespace triald::ctl {
namespace json = boost::json;
using common::Result;

namespace {

std::string Getenv(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

// The last line of `text` that is not blank.
std::string LastLine(const std::string& text) {
  std::istringstream in(text);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  }
  return last;
}

// The report line `check --report` ends stdout with (its last line that is a JSON object).
std::optional<json::object> ReportOf(const std::string& out) {
  std::istringstream in(out);
  std::string line;
  std::optional<json::object> report;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '{') continue;
    boost::system::error_code ec;
    json::value v = json::parse(line, ec);
    if (!ec && v.is_object()) report = v.as_object();
  }
  return report;
}

std::string Field(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : std::string();
}

std::string Seconds(double s) {
  std::ostringstream o;
  o << s;
  return o.str();
}

}  // namespace

SubmitterEnvironment SubmitterEnvironment::Current() {
  SubmitterEnvironment env;
  env.virtual_env = Getenv("VIRTUAL_ENV");
  env.conda_prefix = Getenv("CONDA_PREFIX");
  env.path = Getenv("PATH");
  env.inherited = daemon::InheritedVariables();
  return env;
}

Result<std::string> ResolveInterpreter(const std::string& python, const std::string& workdir,
                                       const SubmitterEnvironment& env) {
  if (python.find('/') != std::string::npos) return common::FindExecutable(python, "", workdir);
  std::string search;
  for (const std::string& prefix : {env.virtual_env, env.conda_prefix}) {
    if (!prefix.empty()) search += prefix + "/bin:";
  }
  search += env.path.empty() ? "/usr/local/bin:/usr/bin:/bin" : env.path;
  return common::FindExecutable(python, search, workdir);
}

Result<CheckedInterpreter> CheckPythonSweep(const config::SweepSpec& spec, const std::string& where,
                                            const SubmitterEnvironment& env,
                                            const SubmitCheckOptions& options) {
  const config::ObjectiveConfig& obj = spec.objective;
  Result<std::string> resolved = ResolveInterpreter(obj.python, obj.workdir, env);
  if (!resolved.ok()) {
    return common::FailedPrecondition(
        where + ": [objective] python = \"" + obj.python + "\": " + resolved.status().message() +
        " (trialctl looks in $VIRTUAL_ENV/bin, then $CONDA_PREFIX/bin, then its own PATH: the "
        "trials run the interpreter you would get); expected a Python 3 interpreter");
  }
  // The runner's command, as the daemon makes it (PYTHONPATH with the runner's folder first).
  config::SweepSpec prepared = spec;
  prepared.objective.python = *resolved;
  TRIALD_RETURN_IF_ERROR(
      daemon::PrepareObjective(prepared, "", where, env.inherited, options.runner_dir));
  std::map<std::string, std::string> vars;
  for (const std::string& kv : env.inherited) {
    const size_t eq = kv.find('=');
    vars[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : prepared.objective.env) vars[k] = v;
  vars["PYTHONUNBUFFERED"] = "1";
  vars["PYTHONDONTWRITEBYTECODE"] = "1";  // a check leaves no __pycache__ behind

  common::CapturedRequest request;
  request.inherit_env = false;
  for (const auto& [k, v] : vars) request.env.push_back(k + "=" + v);
  request.workdir = obj.workdir;
  request.timeout_s = options.timeout_s;
  request.capture_stderr = true;
  request.max_bytes = 64 * 1024;
  const std::vector<std::string>& run = prepared.objective.command;  // PY -m triald run SPEC ...
  if (options.import_objective) {
    request.argv = {*resolved, "-m", "triald", "check"};
    request.argv.insert(request.argv.end(), run.begin() + 4, run.end());
    if (!obj.preload.empty()) {
      std::string mods;
      for (const std::string& m : obj.preload) mods += (mods.empty() ? "" : ",") + m;
      request.argv.push_back("--preload");
      request.argv.push_back(mods);
    }
    request.argv.push_back("--report");
  } else {
    request.argv = {*resolved, "-c",
                    "import json, platform, sys; print(json.dumps({'ok': True, 'executable': "
                    "sys.executable, 'version': platform.python_version()}))"};
  }
  const std::string interpreter = "interpreter " + *resolved;
  Result<common::CapturedRun> ran = common::RunCaptured(request);
  if (!ran.ok()) {
    return common::FailedPrecondition(where + ": [objective] python: cannot run " + interpreter +
                                      ": " + ran.status().message());
  }
  if (ran->timed_out) {
    return common::FailedPrecondition(
        where + ": the check of the objective did not finish within " + Seconds(options.timeout_s) +
        " s in " + interpreter +
        " (importing the preload modules and the objective's module); expected a module that "
        "imports quickly, or raise --check-timeout, or submit --no-check");
  }
  std::optional<json::object> report = ReportOf(ran->out);
  if (!report) {
    const std::string said = LastLine(ran->err);
    return common::FailedPrecondition(
        where + ": [objective] python = \"" + obj.python + "\" (" + interpreter + ") " +
        ran->status.Describe() + " without saying which Python it is" +
        (said.empty() ? std::string() : ": " + said) +
        (options.import_objective ? "; expected a Python 3 interpreter (or submit --no-check)"
                                  : "; expected a Python 3 interpreter"));
  }
  CheckedInterpreter checked{Field(*report, "executable"), Field(*report, "version"), {}};
  if (const json::value* files = report->if_contains("files"); files && files->is_array()) {
    for (const json::value& f : files->as_array()) {
      if (f.is_string() && !f.as_string().empty() && f.as_string()[0] == '/') {
        checked.files.emplace_back(f.as_string());
      }
    }
  }
  if (checked.executable.empty() || checked.executable[0] != '/') checked.executable = *resolved;
  const json::value* ok = report->if_contains("ok");
  if (ok != nullptr && ok->is_bool() && ok->as_bool()) return checked;
  const std::string stage = Field(*report, "stage");
  const std::string module = Field(*report, "module");
  std::string what;
  if (stage == "preload") {
    what = "[objective] preload module \"" + module + "\"";
  } else if (stage == "constraints") {
    what = "[objective] constraints = \"" + obj.constraints + "\"";
  } else {
    what = "[objective] function = \"" + obj.function + "\"";
  }
  return common::FailedPrecondition(
      where + ": " + what + " does not import in " + checked.executable + " (Python " +
      checked.version + "): " + Field(*report, "error") +
      "\n  the trials would run this interpreter: [objective] python = \"" + obj.python +
      "\" as found in trialctl's environment ($VIRTUAL_ENV, $CONDA_PREFIX, then PATH); "
      "activate the environment that has what the objective imports, set [objective] python, "
      "or submit --no-check to skip this check");
}

}  // namespace triald::ctl
