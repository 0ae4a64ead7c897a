#include "tests/worker/fixtures.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace triald::worker::testing {
namespace {

namespace fs = std::filesystem;

std::string ReadWholeFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

fs::path SourceDir() { return fs::path(TRIALD_SOURCE_DIR); }

// What the fixtures are made from. When it changes (the script's text set, the corpus), the
// fixtures are stale and are made again.
std::string InputsFingerprint() {
  std::string inputs = ReadWholeFile(SourceDir() / "scripts" / "make_fixtures.py");
  for (const char* name : {"train.txt", "eval.txt"}) {
    inputs += ReadWholeFile(SourceDir() / "tests" / "fixtures" / "tiny-corpus" / name);
  }
  return std::to_string(std::hash<std::string>()(inputs)) + "\n";
}

// Runs `python3 make_fixtures.py DIR --dtype F32 F16 BF16 --trial-worker <bin>/trial-worker`, its
// output going to `log`, and returns its wait status. posix_spawn rather than system(): no shell to
// quote paths for.
int RunMakeFixtures(const fs::path& dir, const fs::path& log) {
  const std::string script = (SourceDir() / "scripts" / "make_fixtures.py").string();
  const std::string out = dir.string();
  const std::string worker = std::string(TRIALD_BIN_DIR) + "/trial-worker";
  std::vector<std::string> args = {"python3", script,           out,   "--dtype", "F32", "F16",
                                   "BF16",    "--trial-worker", worker};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  const int err = posix_spawnp(&pid, "python3", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) {
    throw std::runtime_error("cannot start python3 " + script + ": " + std::strerror(err));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error("waitpid: " + std::string(std::strerror(errno)));
  }
  return status;
}

std::string MakeFixtureDir() {
  if (const char* preset = std::getenv("TRIALD_FIXTURE_DIR"); preset != nullptr && *preset) {
    return preset;
  }
  // TRIALD_BIN_DIR is <build>/bin.
  const fs::path build = fs::path(TRIALD_BIN_DIR).parent_path();
  const fs::path dir = build / "fixtures";
  const fs::path stamp = dir / ".made-from";
  const fs::path log = build / "fixtures.log";
  const fs::path lock_path = build / "fixtures.lock";

  // An exclusive flock for the check-and-make, so that parallel test processes neither race
  // nor make the fixtures twice; the lock goes with the descriptor if the process dies.
  const int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) {
    throw std::runtime_error("cannot open " + lock_path.string() + ": " + std::strerror(errno));
  }
  // Closing the descriptor releases the lock, on every way out of this function.
  struct CloseOnExit {
    int fd;
    ~CloseOnExit() { ::close(fd); }
  } close_on_exit{lock_fd};
  while (::flock(lock_fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      throw std::runtime_error("flock " + lock_path.string() + ": " + std::strerror(errno));
    }
  }
  const std::string fingerprint = InputsFingerprint();
  bool complete = fs::exists(stamp) && ReadWholeFile(stamp) == fingerprint &&
                  fs::exists(dir / "tokenizer-reference.json");
  for (const char* model :
       {"tiny-gpt2", "tiny-gpt2-f16", "tiny-gpt2-bf16", "tiny-gpt2-pretrained"}) {
    complete = complete && fs::exists(dir / model / "model.safetensors");
  }
  for (const char* text : {"pretrain.txt", "train.txt", "eval.txt"}) {
    complete = complete && fs::exists(dir / "licenses" / text);
  }
  if (!complete) {
    std::error_code ec;
    fs::remove(stamp, ec);
    const int status = RunMakeFixtures(dir, log);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      std::ofstream(stamp) << fingerprint;
    } else {
      std::ostringstream message;
      message << "python3 scripts/make_fixtures.py " << dir.string() << " failed ("
              << (WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                    : "signal " + std::to_string(WTERMSIG(status)))
              << "); its output (" << log.string() << "):\n"
              << ReadWholeFile(log);
      throw std::runtime_error(message.str());
    }
  }
  return dir.string();
}

}  // namespace

std::string FixtureDir() {
  // Made once per process; a failure is not remembered, so each test that needs the fixtures
  // reports it.
  static std::mutex mutex;
  static std::string dir;
  std::lock_guard<std::mutex> lock(mutex);
  if (dir.empty()) dir = MakeFixtureDir();
  return dir;
}

std::string TinyCorpusDir() {
  return (SourceDir() / "tests" / "fixtures" / "tiny-corpus").string();
}

std::string TinyLmSweep(const std::string& name, int n_trials, int parallelism) {
  const std::string corpus = TinyCorpusDir();
  return "[study]\nname = \"" + name + "\"\nn_trials = " + std::to_string(n_trials) +
         "\nparallelism = " + std::to_string(parallelism) + "\n\n[objective]\nkind = \"lm\"\n" +
         "model = \"" + FixtureDir() + "/tiny-gpt2\"\ntrain_file = \"" + corpus +
         "/train.txt\"\neval_file = \"" + corpus +
         "/eval.txt\"\nmax_steps = 6\nseq_len = 32\neval_every = 3\ndevice = \"cpu\"\n" +
         "batch_size = 4\n\n[space.learning_rate]\ntype = \"float\"\nlow = 1e-4\nhigh = 1e-2\n" +
         "log = true\n\n[sampler]\nkind = \"random\"\nseed = 3\n";
}

config::LmObjectiveConfig TinyLmConfig() {
  config::LmObjectiveConfig config;
  config.model = FixtureDir() + "/tiny-gpt2";
  config.train_file = TinyCorpusDir() + "/train.txt";
  config.eval_file = TinyCorpusDir() + "/eval.txt";
  config.max_steps = 6;
  config.seq_len = 32;
  config.eval_every = 2;
  config.device = "cpu";
  config.batch_size = 2;
  config.learning_rate = 3e-3;
  config.warmup_steps = 1;
  return config;
}

}  // namespace triald::worker::testing
