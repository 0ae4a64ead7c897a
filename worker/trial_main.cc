#include "worker/trial_main.h"

#include <signal.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <boost/json/serialize.hpp>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "common/status.h"
#include "worker/builtin_objectives.h"
#include "worker/params.h"
#include "worker/reporter.h"
#include "worker/tools.h"

namespace triald::worker {
namespace {

using common::Status;

constexpr int kExitStopped = 128 + SIGTERM;

// Set by the SIGTERM handler and read between steps; lock-free, so async-signal-safe.
std::atomic<bool> g_stop_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free);

void OnSigterm(int) { g_stop_requested.store(true); }

}  // namespace

// No SA_RESTART: a SIGTERM interrupts a blocking sleep so the objective notices it promptly.
void InstallTrialSignalHandlers() {
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = OnSigterm;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  // stdout and stderr go to the daemon's log pipes; if those vanish, writing should fail rather
  // than kill the worker before it can report.
  signal(SIGPIPE, SIG_IGN);
}

namespace {

class WorkerContext : public ObjectiveContext {
 public:
  WorkerContext(Reporter& reporter, const TrialEnv& env)
      : reporter_(reporter), trial_dir_(env.trial_dir), resume_dir_(env.resume_dir) {}

  Status OnStep(int64_t step, double value) override {
    std::printf("step %lld value %.9g\n", static_cast<long long>(step), value);
    return reporter_.Report(step, value);
  }
  Status OnAttr(std::string_view key, const boost::json::value& value) override {
    std::printf("attr %.*s %s\n", static_cast<int>(key.size()), key.data(),
                boost::json::serialize(value).c_str());
    return reporter_.Attr(key, value);
  }
  bool StopRequested() const override { return g_stop_requested.load(); }
  std::string TrialDir() const override { return trial_dir_; }
  std::string ResumeDir() const override { return resume_dir_; }

 private:
  Reporter& reporter_;
  std::string trial_dir_, resume_dir_;
};

// The lines after the options in `trial-worker --help`: the objectives and the tools.
std::string HelpFooter() {
  std::string text = "objectives (default quadratic-sgd):\n";
  char line[256];
  for (const auto& info : Objectives()) {
    std::snprintf(line, sizeof line, "  %-14s %s\n", info.name.c_str(), info.summary.c_str());
    text += line;
  }
  return text +
         "\n"
         "tools for a Hugging Face GPT-2 folder (config.json, model.safetensors, vocab.json,\n"
         "merges.txt); `trial-worker TOOL --help` for a tool's options:\n" +
         ToolsHelp();
}

// Prints `status` to stderr and, when possible, tells the daemon too; returns the exit code.
int Fail(Reporter* reporter, const Status& status) {
  std::fprintf(stderr, "trial-worker: %s\n", status.message().c_str());
  if (reporter != nullptr) {
    Status sent = reporter->Error(status.message());
    if (!sent.ok()) {
      std::fprintf(stderr, "trial-worker: could not report the error: %s\n",
                   sent.message().c_str());
    }
  }
  return 1;
}

int Stopped(Reporter& reporter) {
  std::fprintf(stderr, "trial-worker: stopped by SIGTERM\n");
  // Best effort: the daemon may already have closed its end.
  (void)reporter.Error("stopped by SIGTERM");
  return kExitStopped;
}

}  // namespace

std::variant<TrialCommand, int> ParseTrialCommandLine(const std::vector<std::string>& args) {
  // The command line, declared once with CLI11 (help and errors come from it): `--opt value`
  // and `--opt=value` both work; a bad command line is exit 1, like any other error.
  TrialCommand command;
  CLI::App app(
      "Runs one trial for triald: reads the trial's parameters from TRIALD_PARAMS (a\n"
      "JSON object) and reports over the pipe named by TRIALD_REPORT_FD.",
      "trial-worker");
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--objective", command.objective, "the objective to run (default quadratic-sgd)")
      ->type_name("NAME");
  app.add_option("--config", command.config,
                 "the objective's fixed settings (for lm: the sweep's [objective] as JSON,\n"
                 "which triald passes itself)")
      ->type_name("JSON");
  app.add_flag("--fork-server", command.fork_server,
               "serve triald's fork requests for one study instead of running a trial: LibTorch,\n"
               "the tokenizer, the texts and the mapped checkpoint are loaded once, each trial\n"
               "is a fork (objective lm only; the channel is TRIALD_FORK_SERVER_FD)");
  app.add_flag("--fork-twice", command.fork_twice,
               "with --fork-server: fork each trial through a middle process instead of cloning\n"
               "it as triald's child (the C libraries' pthread_atfork handlers then run in it)");
  app.footer(HelpFooter());
  try {
    // CLI11 takes a vector of arguments in reverse order.
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app.parse(reversed);
  } catch (const CLI::Success&) {  // --help
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "trial-worker: %s\n%s", e.what(), app.help().c_str());
    return 1;
  }
  return command;
}

int RunTrial(const TrialCommand& command, LmInputs* lm_preloaded,
             const std::string& lm_preloaded_config) {
  InstallTrialSignalHandlers();

  auto reporter = Reporter::FromEnv();
  if (!reporter.ok()) return Fail(nullptr, reporter.status());

  auto env = TrialEnvFromEnv();
  if (!env.ok()) return Fail(&*reporter, env.status());

  const bool use_preloaded =
      lm_preloaded != nullptr && command.objective == "lm" && command.config == lm_preloaded_config;
  WorkerContext ctx(*reporter, *env);
  auto result = RunObjectiveValues(command.objective, env->params, command.config, ctx,
                                   use_preloaded ? lm_preloaded : nullptr);
  // The stop wins even over a finished objective: the daemon has already decided this trial's
  // fate (pruned, cancelled, timed out) and a late final would contradict it.
  if (g_stop_requested.load()) return Stopped(*reporter);
  if (!result.ok()) return Fail(&*reporter, result.status());

  for (size_t i = 0; i < result->size(); ++i) {
    std::printf(i == 0 ? "final value %.17g" : " %.17g", (*result)[i]);
  }
  std::printf("\n");
  Status sent = reporter->Final(*result);
  if (!sent.ok()) {
    // Final has already sent an error line for a non-finite value, and a broken pipe takes no
    // more lines, so only stderr is left to tell.
    std::fprintf(stderr, "trial-worker: %s\n", sent.message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace triald::worker
