// [objective] kind = "lm": its keys, defaults and mistakes, what [space] may tune with it, and the
// JSON form the daemon hands to trial-worker.

#include <catch2/catch.hpp>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "config/sweep.h"
#include "tests/config/sweep_test_util.h"

namespace triald::config {
namespace {

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using testing::ErrorOf;
using testing::Parse;
using testing::Parsed;
using testing::With;

// The smallest valid lm sweep. Line 10 is free for one more [objective] key; [space.learning_rate]
// is on line 11.
const char* const kLm = R"([study]
name = "lm"
n_trials = 4

[objective]
kind = "lm"
model = "models/tiny"
train_file = "data/train.txt"
eval_file = "/abs/eval.txt"

[space.learning_rate]
type = "float"
low = 1e-4
high = 1e-2
log = true
)";

// kLm with `line` as an [objective] key on line 10.
std::string LmWith(const std::string& line) {
  return With("eval_file = \"/abs/eval.txt\"\n", "eval_file = \"/abs/eval.txt\"\n" + line, kLm);
}

// kLm with [space.learning_rate] replaced by `space` (starting on line 11).
std::string LmSpace(const std::string& space) {
  return With("[space.learning_rate]\ntype = \"float\"\nlow = 1e-4\nhigh = 1e-2\nlog = true\n",
              space, kLm);
}

TEST_CASE("an lm objective parses with every key", "[config][lm]") {
  // device = "cuda" needs a GPU per trial (see below).
  const SweepSpec s =
      Parsed(With("n_trials = 4\n", "n_trials = 4\ngpus_per_trial = 1\n", LmWith(R"(max_steps = 500
seq_len = 64
eval_every = 50
checkpoint_every = 100
device = "cuda"
memory_budget_gb = 12.5
gpu_memory_fraction = 0.45
learning_rate = 3e-4
weight_decay = 0.01
warmup_steps = 20
batch_size = 16
dropout = 0.1
adam_beta1 = 0.85
adam_beta2 = 0.99
grad_clip = 0.5
lr_schedule = "cosine"
seed = 1234
env = { HF_HUB_OFFLINE = "1" }
workdir = "runs"
)")),
             "/srv/sweeps/lm.toml");
  CHECK(s.study.gpus_per_trial == 1);
  CHECK(s.objective.kind == "lm");
  CHECK(s.objective.command.empty());  // the daemon fills in trial-worker
  CHECK(s.objective.env == std::map<std::string, std::string>{{"HF_HUB_OFFLINE", "1"}});
  CHECK(s.objective.workdir == "/srv/sweeps/runs");
  const LmObjectiveConfig& lm = s.objective.lm;
  CHECK(lm.model == "/srv/sweeps/models/tiny");
  CHECK(lm.train_file == "/srv/sweeps/data/train.txt");
  CHECK(lm.eval_file == "/abs/eval.txt");
  CHECK(lm.max_steps == 500);
  CHECK(lm.seq_len == 64);
  CHECK(lm.eval_every == 50);
  CHECK(lm.checkpoint_every == 100);
  CHECK(lm.device == "cuda");
  CHECK(lm.memory_budget_gb == 12.5);
  CHECK(lm.gpu_memory_fraction == 0.45);
  CHECK(lm.learning_rate == 3e-4);
  CHECK(lm.weight_decay == 0.01);
  CHECK(lm.warmup_steps == 20);
  CHECK(lm.batch_size == 16);
  CHECK(lm.dropout == 0.1);
  CHECK(lm.adam_beta1 == 0.85);
  CHECK(lm.adam_beta2 == 0.99);
  CHECK(lm.grad_clip == 0.5);
  CHECK(lm.lr_schedule == "cosine");
  CHECK(lm.seed == 1234);
}

TEST_CASE("an lm objective on cuda without a GPU per trial is refused at the device key",
          "[config][lm]") {
  CHECK(ErrorOf(LmWith("device = \"cuda\"\n")) ==
        "sweep.toml:10:10: [objective] device = \"cuda\" needs [study] gpus_per_trial >= 1: each "
        "trial sees only the GPUs triald gives it (CUDA_VISIBLE_DEVICES); use device = \"auto\" to "
        "fall back to the CPU");
  CHECK(Parsed(LmWith("device = \"auto\"\n"), "/srv/s.toml").objective.lm.device == "auto");
}

TEST_CASE("lm settings left out take the product's defaults", "[config][lm]") {
  const SweepSpec s = Parsed(kLm, "/srv/sweeps/lm.toml");
  const LmObjectiveConfig& lm = s.objective.lm;
  CHECK(s.objective.workdir == "/srv/sweeps");
  CHECK(lm.max_steps == 100);
  CHECK(lm.seq_len == 128);
  CHECK(lm.eval_every == 0);
  CHECK(lm.checkpoint_every == 0);
  CHECK(lm.device == "auto");
  CHECK(lm.memory_budget_gb == 0);
  CHECK(lm.gpu_memory_fraction == 0);
  CHECK(lm.learning_rate == 5e-4);
  CHECK(lm.weight_decay == 0);
  CHECK(lm.warmup_steps == 0);
  CHECK(lm.batch_size == 8);
  CHECK(lm.dropout == 0);
  CHECK(lm.adam_beta1 == 0.9);
  CHECK(lm.adam_beta2 == 0.999);
  CHECK(lm.grad_clip == 1.0);
  CHECK(lm.lr_schedule == "linear");
  CHECK(lm.seed == 0);
}

TEST_CASE("lm paths are anchored at the sweep file, like workdir", "[config][lm]") {
  const std::string doc = With("model = \"models/tiny\"", "model = \"../models/./tiny/\"", kLm);
  CHECK(Parsed(doc, "/srv/sweeps/lm.toml").objective.lm.model == "/srv/models/tiny");
  CHECK(Parsed(doc, "/srv/sweeps/lm.toml").objective.lm.train_file == "/srv/sweeps/data/train.txt");
  const std::string cwd = std::filesystem::current_path().string();
  CHECK(Parsed(kLm, "lm.toml").objective.lm.train_file == cwd + "/data/train.txt");
  CHECK(Parsed(kLm, "sub/lm.toml").objective.lm.model == cwd + "/sub/models/tiny");
  // Nothing is looked up on disk: the files may appear before the first trial runs.
  CHECK_FALSE(std::filesystem::exists(Parsed(kLm, "/nonexistent/lm.toml").objective.lm.model));
}

TEST_CASE("an lm objective needs its model and data files", "[config][lm]") {
  CHECK(ErrorOf(With("model = \"models/tiny\"\n", "", kLm)) ==
        "sweep.toml:5:1: [objective] missing required key \"model\"; expected a path to a GPT-2 "
        "model folder (config.json, model.safetensors, vocab.json, merges.txt)");
  CHECK(ErrorOf(With("train_file = \"data/train.txt\"\n", "", kLm)) ==
        "sweep.toml:5:1: [objective] missing required key \"train_file\"; expected a path to a "
        "plain-text training file");
  CHECK(ErrorOf(With("eval_file = \"/abs/eval.txt\"\n", "", kLm)) ==
        "sweep.toml:5:1: [objective] missing required key \"eval_file\"; expected a path to a "
        "plain-text evaluation file");
  CHECK(ErrorOf(With("model = \"models/tiny\"", "model = \"\"", kLm)) ==
        "sweep.toml:7:9: [objective] model = \"\": empty path; expected a path to a GPT-2 model "
        "folder (config.json, model.safetensors, vocab.json, merges.txt)");
  CHECK_THAT(ErrorOf(With("model = \"models/tiny\"", "model = [\"a\"]", kLm)),
             StartsWith("sweep.toml:7:9: [objective] model = [\"a\"]: expected a path to a GPT-2"));
  CHECK_THAT(ErrorOf(With("train_file = \"data/train.txt\"", "train_file = \"a\\u0000b\"", kLm)),
             StartsWith("sweep.toml:8:14: [objective] train_file = \"a\\u0000b\": contains a NUL "
                        "character; expected a path to a plain-text training file"));
}

TEST_CASE("lm setting values are checked", "[config][lm]") {
  struct Case {
    const char* line;
    const char* error;
  };
  const Case cases[] = {
      {"max_steps = 0", "sweep.toml:10:13: [objective] max_steps = 0: expected an integer >= 1"},
      {"max_steps = 2.5",
       "sweep.toml:10:13: [objective] max_steps = 2.5: expected an integer >= 1"},
      {"max_steps = 4294967296",
       "sweep.toml:10:13: [objective] max_steps = 4294967296: too "
       "large; expected an integer >= 1 and <= 2147483647"},
      {"seq_len = 7", "sweep.toml:10:11: [objective] seq_len = 7: expected an integer >= 8"},
      {"eval_every = -1",
       "sweep.toml:10:14: [objective] eval_every = -1: expected an integer >= "
       "0 (0 = evaluate only at the end)"},
      {"checkpoint_every = -2",
       "sweep.toml:10:20: [objective] checkpoint_every = -2: expected an integer >= "
       "0 (0 = no checkpoints)"},
      {"checkpoint_every = 1.5",
       "sweep.toml:10:20: [objective] checkpoint_every = 1.5: expected an integer >= "
       "0 (0 = no checkpoints)"},
      {"device = \"gpu\"",
       "sweep.toml:10:10: [objective] device = \"gpu\": expected \"auto\", \"cpu\" or \"cuda\""},
      {"device = \"CUDA\"",
       "sweep.toml:10:10: [objective] device = \"CUDA\": expected \"auto\", \"cpu\" or \"cuda\""},
      {"memory_budget_gb = -1",
       "sweep.toml:10:20: [objective] memory_budget_gb = -1: expected a "
       "number >= 0 (0 = no budget)"},
      {"memory_budget_gb = \"8G\"",
       "sweep.toml:10:20: [objective] memory_budget_gb = \"8G\": "
       "expected a number >= 0 (0 = no budget)"},
      {"gpu_memory_fraction = 1.5",
       "sweep.toml:10:23: [objective] gpu_memory_fraction = 1.5: "
       "expected a number in [0, 1] (0 = unlimited)"},
      {"learning_rate = 0",
       "sweep.toml:10:17: [objective] learning_rate = 0: expected a number > 0"},
      {"learning_rate = inf",
       "sweep.toml:10:17: [objective] learning_rate = inf: expected a number > 0"},
      {"learning_rate = \"1e-3\"",
       "sweep.toml:10:17: [objective] learning_rate = \"1e-3\": expected a number > 0"},
      {"weight_decay = -0.1",
       "sweep.toml:10:16: [objective] weight_decay = -0.1: expected a number >= 0"},
      {"warmup_steps = -1",
       "sweep.toml:10:16: [objective] warmup_steps = -1: expected an integer >= 0"},
      {"batch_size = 0", "sweep.toml:10:14: [objective] batch_size = 0: expected an integer >= 1"},
      {"dropout = 1.0", "sweep.toml:10:11: [objective] dropout = 1.0: expected a number in [0, 1)"},
      {"adam_beta1 = 1",
       "sweep.toml:10:14: [objective] adam_beta1 = 1: expected a number in [0, 1)"},
      {"adam_beta2 = -0.5",
       "sweep.toml:10:14: [objective] adam_beta2 = -0.5: expected a number in [0, 1)"},
      {"grad_clip = -1",
       "sweep.toml:10:13: [objective] grad_clip = -1: expected a number >= 0 (0 "
       "= no clipping)"},
      {"lr_schedule = \"step\"",
       "sweep.toml:10:15: [objective] lr_schedule = \"step\": expected "
       "\"constant\", \"linear\" or \"cosine\""},
      {"lr_schedule = 1",
       "sweep.toml:10:15: [objective] lr_schedule = 1: expected \"constant\", "
       "\"linear\" or \"cosine\""},
      {"seed = -1", "sweep.toml:10:8: [objective] seed = -1: expected an integer >= 0"},
  };
  for (const Case& c : cases) {
    INFO(c.line);
    CHECK(ErrorOf(LmWith(std::string(c.line) + "\n")) == c.error);
  }
  // The edges that are allowed.
  const LmObjectiveConfig lm = Parsed(LmWith(R"(seq_len = 8
eval_every = 0
checkpoint_every = 0
gpu_memory_fraction = 1
dropout = 0.999
learning_rate = 1e-300
seed = 9223372036854775807
)"))
                                   .objective.lm;
  CHECK(lm.seq_len == 8);
  CHECK(lm.gpu_memory_fraction == 1.0);
  CHECK(lm.dropout == 0.999);
  CHECK(lm.learning_rate == 1e-300);
  CHECK(lm.seed == std::numeric_limits<int64_t>::max());
}

TEST_CASE("kind = \"lm\" takes no command, and kind = \"exec\" no lm setting", "[config][lm]") {
  CHECK(ErrorOf(LmWith("command = [\"python3\", \"train.py\"]\n")) ==
        "sweep.toml:10:11: [objective] command = [\"python3\", \"train.py\"]: kind = \"lm\" runs "
        "the daemon's built-in trial-worker, which needs no command; expected no command with "
        "kind = \"lm\" (or kind = \"exec\" to run your own)");
  const std::string exec = With("command = [\"true\"]", "command = [\"true\"]\nmodel = \"gpt2\"");
  CHECK(ErrorOf(exec) ==
        "sweep.toml:8:1: [objective] model = \"gpt2\": an option of kind = \"lm\", not of kind = "
        "\"exec\"; expected kind = \"lm\" to use it, or only kind, command, env, workdir with "
        "kind = \"exec\"");
  CHECK_THAT(ErrorOf(With("command = [\"true\"]", "command = [\"true\"]\nlearning_rate = 0.1")),
             StartsWith("sweep.toml:8:1: [objective] learning_rate = 0.1: an option of kind = "
                        "\"lm\", not of kind = \"exec\""));
  CHECK(ErrorOf(LmWith("max_step = 3\n")) ==
        "sweep.toml:10:1: [objective] unknown key \"max_step\" for kind = \"lm\"; expected one of "
        "kind, model, train_file, eval_file, max_steps, seq_len, eval_every, checkpoint_every, "
        "device, "
        "memory_budget_gb, gpu_memory_fraction, learning_rate, weight_decay, warmup_steps, "
        "batch_size, dropout, adam_beta1, adam_beta2, grad_clip, lr_schedule, seed, env, workdir, "
        "objectives, fork_server, fork_twice");
  CHECK(ErrorOf(With("kind = \"lm\"", "kind = \"llm\"", kLm)) ==
        "sweep.toml:6:8: [objective] kind = \"llm\": unknown objective kind; expected \"exec\", "
        "\"lm\", \"python\" or \"client\"");
  // Without kind, a misspelt key is reported first (it may be the kind), then the missing kind.
  CHECK_THAT(ErrorOf(With("kind = \"lm\"", "knd = \"lm\"", kLm)),
             StartsWith("sweep.toml:6:1: [objective] unknown key \"knd\"; expected one of kind,"));
  CHECK_THAT(ErrorOf(With("kind = \"lm\"\n", "", kLm)),
             StartsWith("sweep.toml:5:1: [objective] missing required key \"kind\"; expected kind "
                        "= \"exec\" (run a command), kind = \"lm\""));
}

TEST_CASE("with kind = \"lm\", [space] tunes the worker's hyperparameters", "[config][lm]") {
  const SweepSpec s = Parsed(LmSpace(R"([space.learning_rate]
type = "float"
low = 1e-5
high = 1e-2
log = true

[space.weight_decay]
type = "float"
low = 0
high = 0.1

[space.warmup_steps]
type = "int"
low = 0
high = 100
step = 10

[space.batch_size]
type = "int"
low = 1
high = 64
log = true

[space.dropout]
type = "float"
low = 0.0
high = 0.5
step = 0.1

[space.adam_beta1]
type = "float"
low = 0.8
high = 0.95

[space.adam_beta2]
type = "float"
low = 0.9
high = 0.9999

[space.grad_clip]
type = "float"
low = 0.0
high = 5.0

[space.lr_schedule]
type = "categorical"
choices = ["cosine", "constant"]

[space.seed]
type = "int"
low = 0
high = 3
)"));
  REQUIRE(s.space.size() == 10);
  CHECK(s.space[8].name == "lr_schedule");
  CHECK(s.space[8].dist.choices ==
        std::vector<Choice>{std::string("cosine"), std::string("constant")});
  // An exec objective tunes whatever its script reads.
  CHECK(Parsed(With("[space.x]", "[space.hidden_size]")).space[0].name == "hidden_size");
}

TEST_CASE("with kind = \"lm\", a numeric hyperparameter may be tuned over a list of values",
          "[config][lm]") {
  const SweepSpec s = Parsed(LmSpace(R"([space.learning_rate]
type = "categorical"
choices = [1e-5, 3e-4, 3e-3]

[space.batch_size]
type = "categorical"
choices = [8, 16, 32]

[space.grad_clip]
type = "categorical"
choices = [0, 0.5, 1]
)"));
  REQUIRE(s.space.size() == 3);
  CHECK(s.space[0].dist.type == ParamType::kCategorical);
  CHECK(s.space[0].dist.choices == std::vector<Choice>{1e-5, 3e-4, 3e-3});
  CHECK(s.space[1].dist.choices == std::vector<Choice>{int64_t{8}, int64_t{16}, int64_t{32}});
  CHECK(s.space[2].dist.choices == std::vector<Choice>{int64_t{0}, 0.5, int64_t{1}});
  // What the worker is given: the choice as a JSON number, which it reads as the setting.
  CHECK(ExternalJson(s.space[0].dist, 1) == "0.0003");
  CHECK(ExternalJson(s.space[1].dist, 2) == "32");
}

TEST_CASE("with kind = \"lm\", a [space] parameter must fit its setting", "[config][lm]") {
  CHECK(ErrorOf(LmSpace("[space.hidden_size]\ntype = \"int\"\nlow = 64\nhigh = 256\n")) ==
        "sweep.toml:11:8: [space.hidden_size] kind = \"lm\" tunes only: learning_rate, "
        "weight_decay, warmup_steps, batch_size, dropout, adam_beta1, adam_beta2, grad_clip, "
        "lr_schedule, seed; expected one of those names");
  CHECK(ErrorOf(LmSpace("[space.max_steps]\ntype = \"int\"\nlow = 10\nhigh = 20\n")) ==
        "sweep.toml:11:8: [space.max_steps] kind = \"lm\" tunes only: learning_rate, "
        "weight_decay, warmup_steps, batch_size, dropout, adam_beta1, adam_beta2, grad_clip, "
        "lr_schedule, seed; expected one of those names (max_steps is fixed for the whole "
        "study: set it in [objective])");
  // The second parameter is the one at fault: the error points at its own line.
  CHECK_THAT(ErrorOf(kLm + std::string("\n[space.x]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n")),
             StartsWith("sweep.toml:17:8: [space.x] kind = \"lm\" tunes only:"));

  struct Case {
    const char* space;
    const char* error;
  };
  const Case cases[] = {
      {"[space.batch_size]\ntype = \"float\"\nlow = 1.0\nhigh = 8.0\n",
       "sweep.toml:12:8: [space.batch_size] type = \"float\": batch_size takes integers with kind "
       "= \"lm\"; expected type = \"int\", or \"categorical\" with integers as choices"},
      {"[space.learning_rate]\ntype = \"int\"\nlow = 1\nhigh = 8\n",
       "sweep.toml:12:8: [space.learning_rate] type = \"int\": learning_rate takes numbers with "
       "kind = \"lm\"; expected type = \"float\", or \"categorical\" with numbers as choices"},
      {"[space.dropout]\ntype = \"categorical\"\nchoices = [0.0, 1.5]\n",
       "sweep.toml:13:11: [space.dropout] choices = [0.0, 1.5]: 1.5 is not a value of dropout; "
       "expected choices that are each a number in [0, 1)"},
      {"[space.dropout]\ntype = \"categorical\"\nchoices = [0.0, \"high\"]\n",
       "sweep.toml:13:11: [space.dropout] choices = [0.0, \"high\"]: \"high\" is not a value of "
       "dropout; expected choices that are each a number in [0, 1)"},
      {"[space.seed]\ntype = \"categorical\"\nchoices = [1, 2.5]\n",
       "sweep.toml:13:11: [space.seed] choices = [1, 2.5]: 2.5 is not a value of seed; expected "
       "choices that are each an integer >= 0"},
      {"[space.batch_size]\ntype = \"categorical\"\nchoices = [8, true]\n",
       "sweep.toml:13:11: [space.batch_size] choices = [8, true]: true is not a value of "
       "batch_size; expected choices that are each an integer >= 1"},
      {"[space.lr_schedule]\ntype = \"int\"\nlow = 0\nhigh = 2\n",
       "sweep.toml:12:8: [space.lr_schedule] type = \"int\": lr_schedule takes one of "
       "\"constant\", \"linear\" or \"cosine\" with kind = \"lm\"; expected type = \"categorical\" "
       "with choices among \"constant\", \"linear\" or \"cosine\""},
      {"[space.lr_schedule]\ntype = \"categorical\"\nchoices = [\"linear\", \"step\"]\n",
       "sweep.toml:13:11: [space.lr_schedule] choices = [\"linear\", \"step\"]: \"step\" is not a "
       "value of lr_schedule; expected choices among \"constant\", \"linear\" or \"cosine\""},
      {"[space.lr_schedule]\ntype = \"categorical\"\nchoices = [\"linear\", 2]\n",
       "sweep.toml:13:11: [space.lr_schedule] choices = [\"linear\", 2]: 2 is not a value of "
       "lr_schedule; expected choices among \"constant\", \"linear\" or \"cosine\""},
      {"[space.dropout]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n",
       "sweep.toml:14:8: [space.dropout] high = 1.0: outside the values dropout accepts; expected "
       "a number in [0, 1)"},
      {"[space.adam_beta2]\ntype = \"float\"\nlow = -0.1\nhigh = 0.5\n",
       "sweep.toml:13:7: [space.adam_beta2] low = -0.1: outside the values adam_beta2 accepts; "
       "expected a number in [0, 1)"},
      {"[space.learning_rate]\ntype = \"float\"\nlow = 0.0\nhigh = 0.1\n",
       "sweep.toml:13:7: [space.learning_rate] low = 0.0: outside the values learning_rate "
       "accepts; expected a number > 0"},
      {"[space.weight_decay]\ntype = \"float\"\nlow = -1\nhigh = 1\n",
       "sweep.toml:13:7: [space.weight_decay] low = -1: outside the values weight_decay accepts; "
       "expected a number >= 0"},
      {"[space.batch_size]\ntype = \"int\"\nlow = 0\nhigh = 8\n",
       "sweep.toml:13:7: [space.batch_size] low = 0: outside the values batch_size accepts; "
       "expected an integer >= 1"},
      {"[space.warmup_steps]\ntype = \"int\"\nlow = -10\nhigh = 10\n",
       "sweep.toml:13:7: [space.warmup_steps] low = -10: outside the values warmup_steps "
       "accepts; expected an integer >= 0"},
      {"[space.batch_size]\ntype = \"int\"\nlow = 1\nhigh = 4294967296\n",
       "sweep.toml:14:8: [space.batch_size] high = 4294967296: outside the values batch_size "
       "accepts; expected an integer >= 1 and <= 2147483647"},
  };
  for (const Case& c : cases) {
    INFO(c.space);
    CHECK(ErrorOf(LmSpace(c.space)) == c.error);
  }
}

// Bit-for-bit equality, so that -0.0 and 0.0 differ.
bool SameDouble(double a, double b) { return std::memcmp(&a, &b, sizeof(double)) == 0; }

void CheckSame(const LmObjectiveConfig& a, const LmObjectiveConfig& b) {
  CHECK(a.model == b.model);
  CHECK(a.train_file == b.train_file);
  CHECK(a.eval_file == b.eval_file);
  CHECK(a.max_steps == b.max_steps);
  CHECK(a.seq_len == b.seq_len);
  CHECK(a.eval_every == b.eval_every);
  CHECK(a.checkpoint_every == b.checkpoint_every);
  CHECK(a.device == b.device);
  CHECK(SameDouble(a.memory_budget_gb, b.memory_budget_gb));
  CHECK(SameDouble(a.gpu_memory_fraction, b.gpu_memory_fraction));
  CHECK(SameDouble(a.learning_rate, b.learning_rate));
  CHECK(SameDouble(a.weight_decay, b.weight_decay));
  CHECK(a.warmup_steps == b.warmup_steps);
  CHECK(a.batch_size == b.batch_size);
  CHECK(SameDouble(a.dropout, b.dropout));
  CHECK(SameDouble(a.adam_beta1, b.adam_beta1));
  CHECK(SameDouble(a.adam_beta2, b.adam_beta2));
  CHECK(SameDouble(a.grad_clip, b.grad_clip));
  CHECK(a.lr_schedule == b.lr_schedule);
  CHECK(a.seed == b.seed);
  CHECK(a.objectives == b.objectives);
}

LmObjectiveConfig RoundTrip(const LmObjectiveConfig& c) {
  const std::string json = LmObjectiveToJson(c);
  common::Result<LmObjectiveConfig> back = LmObjectiveFromJson(json);
  INFO(json);
  INFO(back.status().message());
  REQUIRE(back.ok());
  CHECK(LmObjectiveToJson(*back) == json);
  return *back;
}

TEST_CASE("the LM objective's JSON names every field and reads back", "[config][lm]") {
  LmObjectiveConfig c;
  c.model = "/m";
  c.train_file = "/t";
  c.eval_file = "/e";
  CHECK(
      LmObjectiveToJson(c) ==
      R"({"model":"/m","train_file":"/t","eval_file":"/e","max_steps":100,"seq_len":128,)"
      R"("eval_every":0,"checkpoint_every":0,"device":"auto","memory_budget_gb":0.0,"gpu_memory_fraction":0.0,)"
      R"("learning_rate":0.0005,"weight_decay":0.0,"warmup_steps":0,"batch_size":8,)"
      R"("dropout":0.0,"adam_beta1":0.9,"adam_beta2":0.999,"grad_clip":1.0,)"
      R"("lr_schedule":"linear","seed":0})");
  CheckSame(RoundTrip(c), c);

  // What the parser produced is what the worker gets.
  const LmObjectiveConfig parsed = Parsed(kLm, "/srv/lm.toml").objective.lm;
  CheckSame(RoundTrip(parsed), parsed);
}

TEST_CASE("the LM objective's JSON keeps extreme values exactly", "[config][lm]") {
  LmObjectiveConfig c;
  c.model = "/päth/with \"quotes\", a \\ backslash,\ta tab and \x01 a control character";
  c.train_file = "relative/train.txt";
  c.eval_file = "";
  c.max_steps = INT_MAX;
  c.seq_len = 8;
  c.eval_every = INT_MAX;
  c.checkpoint_every = INT_MAX;
  c.device = "cuda";
  c.memory_budget_gb = std::numeric_limits<double>::max();
  c.gpu_memory_fraction = std::nextafter(1.0, 0.0);
  c.learning_rate = std::numeric_limits<double>::denorm_min();
  c.weight_decay = 0.1 + 0.2;
  c.warmup_steps = INT_MAX;
  c.batch_size = 1;
  c.dropout = std::nextafter(1.0, 0.0);
  c.adam_beta1 = -0.0;
  c.adam_beta2 = std::numeric_limits<double>::min();
  c.grad_clip = 123456789012345678.0;
  c.lr_schedule = "constant";
  c.seed = std::numeric_limits<int64_t>::max();
  const LmObjectiveConfig back = RoundTrip(c);
  CheckSame(back, c);
  CHECK(std::signbit(back.adam_beta1));

  // Readable as well as exact: as Python's repr() writes them.
  CHECK(DoubleRepr(0.0005) == "0.0005");
  CHECK(DoubleRepr(1e-5) == "1e-05");
  CHECK(DoubleRepr(2.0) == "2.0");
  CHECK(DoubleRepr(-0.0) == "-0.0");
  CHECK(DoubleRepr(1e16) == "1e+16");
  CHECK_THAT(LmObjectiveToJson(c), Contains("\"adam_beta1\":-0.0,") &&
                                       Contains("\"learning_rate\":5e-324,") &&
                                       Contains("\"seed\":9223372036854775807}"));

  for (double lr : {1e-300, 2.2250738585072014e-308, 0.1, 1.0 / 3, 1e22, 9007199254740993.0, 5e-324,
                    1.7976931348623157e308}) {
    INFO(lr);
    c.learning_rate = lr;
    CHECK(SameDouble(RoundTrip(c).learning_rate, lr));
  }
}

TEST_CASE("LmObjectiveFromJson names the field at fault", "[config][lm]") {
  LmObjectiveConfig c;
  c.model = "/m";
  c.train_file = "/t";
  c.eval_file = "/e";
  const std::string good = LmObjectiveToJson(c);
  // `good` with the value of `field` replaced by `value`.
  auto with = [&good](const std::string& field, const std::string& value) {
    std::string key = "\"" + field + "\":";
    size_t begin = good.find(key);
    REQUIRE(begin != std::string::npos);
    begin += key.size();
    size_t end = good.find_first_of(",}", good[begin] == '"' ? good.find('"', begin + 1) : begin);
    return good.substr(0, begin) + value + good.substr(end);
  };
  auto error = [](const std::string& json) {
    common::Result<LmObjectiveConfig> r = LmObjectiveFromJson(json);
    INFO(json);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == common::Code::kInvalidArgument);
    return r.status().message();
  };

  // Accepted forms: a whole number for a double field.
  common::Result<LmObjectiveConfig> whole = LmObjectiveFromJson(with("grad_clip", "2"));
  INFO(whole.status().message());
  REQUIRE(whole.ok());
  CHECK(whole->grad_clip == 2.0);

  CHECK(error(with("dropout", "1.5")) ==
        "invalid LM objective JSON: \"dropout\" = 1.5: expected a number in [0, 1)");
  CHECK(error(with("max_steps", "0")) ==
        "invalid LM objective JSON: \"max_steps\" = 0: expected an integer >= 1 and <= "
        "2147483647");
  CHECK(error(with("max_steps", "2147483648")) ==
        "invalid LM objective JSON: \"max_steps\" = 2147483648: expected an integer >= 1 and <= "
        "2147483647");
  CHECK(error(with("batch_size", "8.0")) ==
        "invalid LM objective JSON: \"batch_size\" = 8.0: expected an integer >= 1 and <= "
        "2147483647");
  CHECK(error(with("seed", "9223372036854775808")) ==
        "invalid LM objective JSON: \"seed\" = 9223372036854775808: expected an integer >= 0 and "
        "<= 9223372036854775807");
  CHECK(error(with("device", "\"gpu\"")) ==
        "invalid LM objective JSON: \"device\" = \"gpu\": expected \"auto\", \"cpu\" or \"cuda\"");
  CHECK(error(with("lr_schedule", "null")) ==
        "invalid LM objective JSON: \"lr_schedule\" = null: expected \"constant\", \"linear\" or "
        "\"cosine\"");
  CHECK(error(with("learning_rate", "null")) ==
        "invalid LM objective JSON: \"learning_rate\" = null: expected a number > 0");
  CHECK(error(with("learning_rate", "\"0.1\"")) ==
        "invalid LM objective JSON: \"learning_rate\" = \"0.1\": expected a number > 0");
  CHECK(error(with("model", "7")) ==
        "invalid LM objective JSON: \"model\" = 7: expected a path to a GPT-2 model folder "
        "(config.json, model.safetensors, vocab.json, merges.txt)");
  CHECK(error(with("eval_file", "\"a\\u0000b\"")) ==
        "invalid LM objective JSON: \"eval_file\" = \"a\\u0000b\": contains a NUL character; "
        "expected a path to a plain-text evaluation file");
  CHECK_THAT(error(with("seq_len", "128,\"n_layer\":2")),
             Contains("unknown field \"n_layer\"; expected one of model, train_file, eval_file, "
                      "max_steps,"));
  CHECK(error(with("seq_len", "128,\"n_layer\":2")).rfind("invalid LM objective JSON: ", 0) == 0);

  std::string missing = good;
  missing.erase(missing.find(",\"seed\":0"), std::string(",\"seed\":0").size());
  CHECK(error(missing) ==
        "invalid LM objective JSON: missing field \"seed\"; expected an integer "
        ">= 0");
  CHECK_THAT(error("[1, 2]"), StartsWith("invalid LM objective JSON: [1,2]: expected an object "
                                         "with the fields model, train_file"));
  CHECK_THAT(error(good + "x"), StartsWith("invalid LM objective JSON: "));
  CHECK_THAT(error(""), StartsWith("invalid LM objective JSON: "));
  CHECK_THAT(error("{\"model\":"), StartsWith("invalid LM objective JSON: "));
}

TEST_CASE("a non-finite double is written as null and refused on reading", "[config][lm]") {
  LmObjectiveConfig c;
  c.grad_clip = std::numeric_limits<double>::quiet_NaN();
  c.memory_budget_gb = std::numeric_limits<double>::infinity();
  const std::string json = LmObjectiveToJson(c);
  CHECK_THAT(json, Contains("\"memory_budget_gb\":null") && Contains("\"grad_clip\":null"));
  common::Result<LmObjectiveConfig> r = LmObjectiveFromJson(json);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Contains("\"memory_budget_gb\" = null"));
}

TEST_CASE("lm objectives name measured metrics, one per direction", "[config][lm]") {
  CHECK(Parsed(kLm).objective.lm.objectives.empty());
  // One direction (the default): one metric.
  CHECK(Parsed(LmWith("objectives = [\"planned_memory_bytes\"]\n")).objective.lm.objectives ==
        std::vector<std::string>{"planned_memory_bytes"});
  CHECK_THAT(ErrorOf(LmWith("objectives = [\"eval_loss\", \"nope\"]\n")),
             StartsWith("sweep.toml:10:28: [objective] objectives[1] = \"nope\": not a metric the "
                        "lm worker measures; expected one of eval_loss, perplexity, "
                        "planned_memory_bytes, train_seconds, tokens_per_second"));
  CHECK_THAT(ErrorOf(LmWith("objectives = [\"eval_loss\", \"eval_loss\"]\n")),
             StartsWith("sweep.toml:10:28: [objective] objectives[1] = \"eval_loss\": "
                        "\"eval_loss\" is already in objectives"));
  CHECK_THAT(ErrorOf(LmWith("objectives = []\n")),
             StartsWith("sweep.toml:10:14: [objective] objectives = []"));
  CHECK_THAT(ErrorOf(LmWith("objectives = \"eval_loss\"\n")),
             StartsWith("sweep.toml:10:14: [objective] objectives = \"eval_loss\""));
  CHECK_THAT(ErrorOf(LmWith("objectives = [\"eval_loss\", \"train_seconds\"]\n")),
             StartsWith("sweep.toml:10:14: [objective] objectives names 2 metrics but [study] has "
                        "1 direction; expected one metric per direction, in the same order"));
}

TEST_CASE("a multi-objective lm study needs one metric per direction", "[config][lm]") {
  const std::string two =
      With("n_trials = 4\n", "n_trials = 4\ndirections = [\"minimize\", \"minimize\"]\n", kLm);
  // [objective] moves one line down: the free line is 11.
  auto two_with = [&](const std::string& line) {
    return With("eval_file = \"/abs/eval.txt\"\n", "eval_file = \"/abs/eval.txt\"\n" + line, two);
  };
  CHECK(Parsed(two_with("objectives = [\"eval_loss\", \"planned_memory_bytes\"]\n"))
            .objective.lm.objectives ==
        std::vector<std::string>{"eval_loss", "planned_memory_bytes"});
  CHECK_THAT(ErrorOf(two_with("objectives = [\"eval_loss\"]\n")),
             StartsWith("sweep.toml:11:14: [objective] objectives names 1 metric but [study] has "
                        "2 directions"));
  CHECK_THAT(ErrorOf(two), Contains("missing required key \"objectives\""));
  CHECK_THAT(ErrorOf(two), Contains("one metric per [study] directions entry (2)"));
}

TEST_CASE("the LM objective's JSON carries objectives when there are some", "[config][lm]") {
  LmObjectiveConfig c;
  c.model = "/m";
  c.train_file = "/t";
  c.eval_file = "/e";
  c.objectives = {"eval_loss", "tokens_per_second"};
  const std::string json = LmObjectiveToJson(c);
  CHECK_THAT(json, Contains(R"("seed":0,"objectives":["eval_loss","tokens_per_second"]})"));
  common::Result<LmObjectiveConfig> back = LmObjectiveFromJson(json);
  REQUIRE(back.ok());
  CHECK(back->objectives == c.objectives);
  CheckSame(*back, c);
  std::string bad = json;
  bad.replace(bad.find("tokens_per_second"), 17, "gpu_hours");
  CHECK(LmObjectiveFromJson(bad).status().message() ==
        "invalid LM objective JSON: \"objectives\" holds \"gpu_hours\": expected a non-empty array "
        "of eval_loss, perplexity, planned_memory_bytes, train_seconds, tokens_per_second");
}

TEST_CASE("kind = lm: fork_server is off unless asked for, preload is python's",
          "[config][lm][fork_server]") {
  CHECK_FALSE(Parsed(kLm).objective.fork_server);
  CHECK(Parsed(LmWith("fork_server = true\n")).objective.fork_server);
  CHECK(Parsed(LmWith("fork_server = true\nfork_twice = true\n")).objective.fork_twice);
  CHECK_THAT(ErrorOf(LmWith("fork_twice = true\n")), Contains("true without a fork server"));
  CHECK_THAT(ErrorOf(LmWith("fork_server = 1\n")),
             StartsWith("sweep.toml:10:15: [objective] fork_server = 1"));
  CHECK_THAT(ErrorOf(LmWith("preload = [\"torch\"]\n")),
             Contains("an option of kind = \"python\", not of kind = \"lm\""));
}

}  // namespace
}  // namespace triald::config
