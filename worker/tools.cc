#include "worker/tools.h"

#include <boost/json.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <sstream>

#include "config/sweep.h"
#include "worker/builtin_objectives.h"
#include "worker/gpt2.h"
#include "worker/lm_objective.h"
#include "worker/params.h"
#include "worker/safetensors.h"
#include "worker/tokenizer.h"
#include "worker/torch_status.h"

namespace triald::worker {
namespace {

using common::Result;

int Problem(const std::string& message) {
  std::fprintf(stderr, "trial-worker: %s\n", message.c_str());
  return 1;
}

int Usage(const std::string& message) {
  std::fprintf(
      stderr,
      "trial-worker: %s\nusage: trial-worker tokenize MODEL_DIR < text\n"
      "       trial-worker inspect MODEL_DIR [--batch-size B] [--seq-len L]\n"
      "       trial-worker check MODEL_DIR\n"
      "       trial-worker train MODEL_DIR TRAIN_FILE EVAL_FILE [--steps N] [--seq-len L]\n"
      "           [--eval-every N] [--device D] [--params JSON] [--save OUT_DIR]\n"
      "           [--batches] [--no-initial-eval]\n",
      message.c_str());
  return 2;
}

std::string Dir(const std::string& d) { return d.empty() || d.back() == '/' ? d : d + "/"; }

int Tokenize(const std::string& dir) {
  auto tok = Gpt2Tokenizer::Load(dir + "vocab.json", dir + "merges.txt");
  if (!tok.ok()) return Problem(tok.status().message());
  std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  boost::json::array ids;
  for (int32_t id : tok->Encode(text)) ids.push_back(id);
  std::printf("%s\n", boost::json::serialize(ids).c_str());
  return 0;
}

int Inspect(const std::string& dir, int64_t batch_size, int64_t seq_len) {
  auto config = LoadGpt2Config(dir + "config.json");
  if (!config.ok()) return Problem(config.status().message());
  if (seq_len > config->n_positions) {
    return Problem("--seq-len " + std::to_string(seq_len) + " exceeds the model's n_positions " +
                   std::to_string(config->n_positions));
  }
  std::shared_ptr<Gpt2Model> model = BuildGpt2Skeleton(*config, 0.0);  // meta: nothing allocated
  Gpt2MemoryPlan plan = PlanGpt2Memory(*model, batch_size, seq_len);
  boost::json::object o;
  o["params"] = plan.params;
  o["batch_size"] = batch_size;
  o["seq_len"] = seq_len;
  o["parameter_bytes"] = plan.parameter_bytes;
  o["gradient_bytes"] = plan.gradient_bytes;
  o["optimizer_bytes"] = plan.optimizer_bytes;
  o["activation_bytes"] = plan.activation_bytes;
  o["planned_memory_bytes"] = plan.total_bytes;
  o["meta_tensors"] = static_cast<int64_t>(MetaTensorNames(*model).size());
  std::printf("%s\n", boost::json::serialize(o).c_str());
  return 0;
}

int Check(const std::string& dir) {
  auto config = LoadGpt2Config(dir + "config.json");
  if (!config.ok()) return Problem(config.status().message());
  auto file = SafetensorsFile::Open(dir + "model.safetensors");
  if (!file.ok()) return Problem(file.status().message());
  std::shared_ptr<Gpt2Model> model = BuildGpt2Skeleton(*config, 0.0);
  common::Status st = LoadGpt2Weights(*model, *file, torch::Device(torch::kCPU));
  if (st.ok()) st = CheckNoMetaTensors(*model, file->path());
  if (!st.ok()) return Problem(st.message());
  std::printf("ok: %zu tensors in %s match the model (%lld parameters)\n", file->tensors().size(),
              file->path().c_str(), static_cast<long long>(PlanGpt2Memory(*model, 1, 1).params));
  return 0;
}

// Prints what a trial would report as JSON lines on stdout.
class PrintingContext : public ObjectiveContext {
 public:
  common::Status OnStep(int64_t step, double value) override {
    Print({{"type", "eval"}, {"step", step}, {"loss", value}});
    return common::Status::Ok();
  }
  common::Status OnAttr(std::string_view key, const boost::json::value& value) override {
    Print({{"type", "attr"}, {"key", key}, {"value", value}});
    return common::Status::Ok();
  }
  bool StopRequested() const override { return false; }

  static void Print(const boost::json::object& line) {
    std::printf("%s\n", boost::json::serialize(line).c_str());
    std::fflush(stdout);
  }
};

boost::json::array ToJson(const std::vector<int32_t>& ids) {
  boost::json::array out;
  out.reserve(ids.size());
  for (int32_t id : ids) out.push_back(id);
  return out;
}

const char* ScheduleName(LrSchedule schedule) {
  switch (schedule) {
    case LrSchedule::kConstant:
      return "constant";
    case LrSchedule::kLinear:
      return "linear";
    case LrSchedule::kCosine:
      return "cosine";
  }
  return "?";
}

struct TrainArgs {
  config::LmObjectiveConfig config;
  std::string params = "{}";
  std::string save;
  bool batches = false;
  bool initial_eval = true;
};

// Trains as a trial of `args.config` would (PrepareLm, then TrainLm with the same options), and
// prints every step; optionally saves the trained weights as a new model folder.
int Train(const TrainArgs& args) {
  namespace fs = std::filesystem;
  const config::LmObjectiveConfig& config = args.config;
  auto params = Params::Parse(args.params);
  if (!params.ok()) return Problem("--params: " + params.status().message());
  if (!args.save.empty()) {
    std::error_code ec;
    if (fs::equivalent(args.save, config.model, ec)) {
      return Problem("--save " + args.save + " is the model folder itself; give a new folder");
    }
  }
  PrintingContext ctx;
  auto prepared = PrepareLm(config, *params, ctx);
  if (!prepared.ok()) return Problem(prepared.status().message());
  LmTrainOptions options = LmTrainOptionsFor(config, prepared->hyperparams);
  options.eval_before_training = args.initial_eval;
  options.on_train_step = [&](const LmStepRecord& r) {
    boost::json::object line{{"type", "step"},
                             {"step", r.step},
                             {"lr", r.learning_rate},
                             {"loss", r.loss},
                             {"elapsed_s", r.elapsed_seconds}};
    if (args.batches) {
      boost::json::array rows;
      const int64_t width = r.windows.size(1);
      const int64_t* data = r.windows.data_ptr<int64_t>();
      for (int64_t row = 0; row < r.windows.size(0); ++row) {
        boost::json::array ids;
        for (int64_t i = 0; i < width; ++i) ids.push_back(data[row * width + i]);
        rows.push_back(std::move(ids));
      }
      line["windows"] = std::move(rows);
    }
    PrintingContext::Print(line);
    return common::Status::Ok();
  };
  auto result =
      TrainLm(*prepared->model, prepared->train, prepared->eval, options, prepared->device, ctx);
  if (!result.ok()) return Problem(result.status().message());

  const LmHyperparams& hp = prepared->hyperparams;
  boost::json::object summary{{"type", "summary"},
                              {"steps", result->steps},
                              {"seq_len", config.seq_len},
                              {"eval_loss", result->eval_loss},
                              {"tokens_seen", result->tokens_seen},
                              {"train_seconds", result->train_seconds},
                              {"hyperparams",
                               {{"learning_rate", hp.learning_rate},
                                {"weight_decay", hp.weight_decay},
                                {"warmup_steps", hp.warmup_steps},
                                {"batch_size", hp.batch_size},
                                {"dropout", hp.dropout},
                                {"adam_beta1", hp.adam_beta1},
                                {"adam_beta2", hp.adam_beta2},
                                {"grad_clip", hp.grad_clip},
                                {"lr_schedule", ScheduleName(hp.lr_schedule)},
                                {"seed", hp.seed}}}};
  if (args.initial_eval) summary["initial_eval_loss"] = result->initial_eval_loss;
  if (args.batches) summary["eval_tokens"] = ToJson(prepared->eval);

  if (!args.save.empty()) {
    std::error_code ec;
    fs::create_directories(args.save, ec);
    if (ec) return Problem("cannot create " + args.save + ": " + ec.message());
    const std::string out = Dir(args.save);
    const std::string in = Dir(config.model);
    for (const char* name : {"config.json", "vocab.json", "merges.txt"}) {
      fs::copy_file(in + name, out + name, fs::copy_options::overwrite_existing, ec);
      if (ec) return Problem("cannot copy " + in + name + " to " + out + ": " + ec.message());
    }
    common::Status saved = SaveGpt2Weights(*prepared->model, out + "model.safetensors");
    if (!saved.ok()) return Problem(saved.message());
    summary["saved"] = out;
  }
  PrintingContext::Print(summary);
  return 0;
}

bool ParseInt(const std::string& s, int64_t* out) {
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < 1) return false;
  *out = v;
  return true;
}

// `trial-worker train`'s command line.
int RunTrain(const std::vector<std::string>& args) {
  if (args.size() < 3) return Usage("train needs MODEL_DIR TRAIN_FILE EVAL_FILE");
  TrainArgs train;
  train.config.model = args[0];
  train.config.train_file = args[1];
  train.config.eval_file = args[2];
  for (size_t i = 3; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag == "--batches") {
      train.batches = true;
      continue;
    }
    if (flag == "--no-initial-eval") {
      train.initial_eval = false;
      continue;
    }
    if (i + 1 >= args.size()) return Usage(flag + " needs a value");
    const std::string& value = args[++i];
    int64_t number = 0;
    if (flag == "--steps" || flag == "--seq-len" || flag == "--eval-every") {
      if (!ParseInt(value, &number) || number > INT32_MAX) {
        return Usage(flag + " needs a positive integer, got '" + value + "'");
      }
      int& target = flag == "--steps"     ? train.config.max_steps
                    : flag == "--seq-len" ? train.config.seq_len
                                          : train.config.eval_every;
      target = static_cast<int>(number);
    } else if (flag == "--device") {
      train.config.device = value;
    } else if (flag == "--params") {
      train.params = value;
    } else if (flag == "--save") {
      train.save = value;
    } else {
      return Usage("unexpected argument '" + flag + "'");
    }
  }
  return Train(train);
}

}  // namespace

bool IsTool(const std::string& name) {
  return name == "tokenize" || name == "inspect" || name == "check" || name == "train";
}

int RunTool(const std::string& tool, const std::vector<std::string>& args) {
  if (args.empty()) return Usage(tool + " needs MODEL_DIR");
  const std::string dir = Dir(args[0]);
  Result<int> code = TorchCall(tool, [&]() -> Result<int> {
    if (tool == "train") return RunTrain(args);
    if (tool == "tokenize" || tool == "check") {
      if (args.size() != 1) return Usage("unexpected argument '" + args[1] + "'");
      return tool == "tokenize" ? Tokenize(dir) : Check(dir);
    }
    int64_t batch_size = 8, seq_len = 128;
    for (size_t i = 1; i < args.size(); ++i) {
      int64_t* target = args[i] == "--batch-size" ? &batch_size
                        : args[i] == "--seq-len"  ? &seq_len
                                                  : nullptr;
      if (target == nullptr) return Usage("unexpected argument '" + args[i] + "'");
      if (i + 1 >= args.size() || !ParseInt(args[i + 1], target)) {
        return Usage(args[i] + " needs a positive integer");
      }
      ++i;
    }
    return Inspect(dir, batch_size, seq_len);
  });
  return code.ok() ? *code : Problem(code.status().message());
}

}  // namespace triald::worker
