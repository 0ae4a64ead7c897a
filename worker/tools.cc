#include "worker/tools.h"

#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>
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
  auto planned = PlanGpt2Memory(*model, batch_size, seq_len);
  if (!planned.ok()) return Problem(planned.status().message());
  const Gpt2MemoryPlan& plan = *planned;
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
              file->path().c_str(), static_cast<long long>(PlanGpt2Memory(*model, 1, 1)->params));
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

// ---- The tools' command lines, declared once with CLI11 ------------------------------------
// The declarations give the parse (`--opt value` and `--opt=value`; an option given twice keeps
// its last value), `trial-worker TOOL --help`, the errors (which name the option) and the
// synopses in `trial-worker --help` (ToolsHelp).

// An integer from 1 to `max`, the whole text ("12x", "" and " 1" are not numbers). A failed check
// reads "--OPTION: \"0\": expected a positive integer (at most 2147483647)".
CLI::Validator PositiveInteger(int64_t max) {
  const std::string expected =
      "expected a positive integer" +
      (max < INT64_MAX ? " (at most " + std::to_string(max) + ")" : std::string());
  return CLI::Validator(
      [max, expected](std::string& text) {
        char* end = nullptr;
        errno = 0;
        const long long n = text.empty() ? 0 : std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || *end != '\0' || errno != 0 || n < 1 || n > max) {
          return "\"" + text + "\": " + expected;
        }
        return std::string();
      },
      "");
}

// What a tool's command line sets.
struct ToolArgs {
  std::string model;       // MODEL_DIR of tokenize, inspect and check
  int64_t batch_size = 8;  // inspect's
  int64_t seq_len = 128;   // inspect's
  TrainArgs train;         // train's, MODEL_DIR included
};

CLI::Option* AddModelDir(CLI::App* app, std::string* dir) {
  return app->add_option("MODEL_DIR", *dir, "the model folder")->type_name("")->required();
}

struct ToolSpec {
  const char* name;
  const char* synopsis_tail;  // after the declared arguments in the synopsis, e.g. "< text"
  const char* summary;        // for `trial-worker --help`, '\n'-separated lines
  const char* description;    // for `trial-worker TOOL --help`
  void (*declare)(CLI::App* app, ToolArgs* a);
  int (*run)(const ToolArgs& a);
};

const std::vector<ToolSpec>& ToolSpecs() {
  static const std::vector<ToolSpec> kTools = {
      {"tokenize", "< text", "token ids of stdin as a JSON array",
       "Reads text on stdin and prints its token ids (the model's GPT-2 tokenizer:\n"
       "vocab.json, merges.txt) as one JSON array.",
       [](CLI::App* app, ToolArgs* a) { AddModelDir(app, &a->model); },
       [](const ToolArgs& a) { return Tokenize(Dir(a.model)); }},
      {"inspect", "", "parameters and planned memory (JSON), without allocating the model",
       "Prints the parameter count and the planned training memory as JSON, from\n"
       "config.json alone: the model is built on the meta device only.",
       [](CLI::App* app, ToolArgs* a) {
         AddModelDir(app, &a->model);
         app->add_option("--batch-size", a->batch_size, "sequences per step (default 8)")
             ->type_name("B")
             ->check(PositiveInteger(INT64_MAX));
         app->add_option("--seq-len", a->seq_len, "tokens per sequence (default 128)")
             ->type_name("L")
             ->check(PositiveInteger(INT64_MAX));
       },
       [](const ToolArgs& a) { return Inspect(Dir(a.model), a.batch_size, a.seq_len); }},
      {"check", "", "load the checkpoint; name every missing, unexpected or mismatched tensor",
       "Loads model.safetensors for real (on the CPU) and reports every missing,\n"
       "unexpected or mismatched tensor by name.",
       [](CLI::App* app, ToolArgs* a) { AddModelDir(app, &a->model); },
       [](const ToolArgs& a) { return Check(Dir(a.model)); }},
      {"train", "",
       "train as a trial would; JSON lines per step;\n"
       "--save writes the trained model folder",
       "Trains exactly as a trial with these [objective] settings and TRIALD_PARAMS =\n"
       "--params would, printing JSON lines: attributes, every step (learning rate,\n"
       "training loss, elapsed time), every evaluation and a summary.",
       [](CLI::App* app, ToolArgs* a) {
         config::LmObjectiveConfig& c = a->train.config;
         AddModelDir(app, &c.model);
         app->add_option("TRAIN_FILE", c.train_file, "the training text")
             ->type_name("")
             ->required();
         app->add_option("EVAL_FILE", c.eval_file, "the evaluation text")
             ->type_name("")
             ->required();
         const CLI::Validator up_to_int32 = PositiveInteger(INT32_MAX);
         app->add_option("--steps", c.max_steps, "training steps ([objective] max_steps)")
             ->type_name("N")
             ->check(up_to_int32);
         app->add_option("--seq-len", c.seq_len, "tokens per sequence ([objective] seq_len)")
             ->type_name("L")
             ->check(up_to_int32);
         app->add_option("--eval-every", c.eval_every,
                         "steps between evaluations ([objective] eval_every)")
             ->type_name("N")
             ->check(up_to_int32);
         app->add_option("--device", c.device, "auto, cpu or cuda ([objective] device)")
             ->type_name("D");
         app->add_option("--params", a->train.params,
                         "the trial's parameters, as TRIALD_PARAMS (default {})")
             ->type_name("JSON");
         app->add_option("--save", a->train.save,
                         "write the trained model as a new Hugging Face folder")
             ->type_name("OUT_DIR");
         app->add_flag("--batches", a->train.batches,
                       "also print each step's token ids, and the evaluation's in the summary");
         app->add_flag_callback(
             "--no-initial-eval", [a] { a->train.initial_eval = false; },
             "skip the evaluation before the first step");
       },
       [](const ToolArgs& a) { return Train(a.train); }},
  };
  return kTools;
}

const ToolSpec* FindTool(const std::string& name) {
  for (const ToolSpec& spec : ToolSpecs()) {
    if (name == spec.name) return &spec;
  }
  return nullptr;
}

// `spec`'s command line; the app writes into `a`.
std::unique_ptr<CLI::App> MakeToolParser(const ToolSpec& spec, ToolArgs* a) {
  auto app = std::make_unique<CLI::App>(
      std::string(spec.description) +
          "\nMODEL_DIR is a Hugging Face GPT-2 folder (config.json, model.safetensors,\n"
          "vocab.json, merges.txt). Exit codes: 0 ok, 1 a problem, 2 a bad command line.\n",
      std::string("trial-worker ") + spec.name);
  app->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  spec.declare(app.get(), a);
  return app;
}

// "trial-worker inspect MODEL_DIR [--batch-size B] [--seq-len L]", from the declarations.
std::vector<std::string> SynopsisWords(const ToolSpec& spec) {
  ToolArgs unused;
  std::unique_ptr<CLI::App> app = MakeToolParser(spec, &unused);
  std::vector<std::string> words = {"trial-worker", spec.name};
  for (const CLI::Option* o : app->get_options()) {
    if (o == app->get_help_ptr()) continue;
    if (!o->nonpositional()) {
      words.push_back(o->get_name());
    } else if (o->get_type_name().empty()) {  // a flag
      words.push_back("[" + o->get_name() + "]");
    } else {
      words.push_back("[" + o->get_name() + " " + o->get_type_name() + "]");
    }
  }
  if (*spec.synopsis_tail != '\0') words.push_back(spec.synopsis_tail);
  return words;
}

}  // namespace

bool IsTool(const std::string& name) { return FindTool(name) != nullptr; }

std::string ToolsHelp() {
  constexpr size_t kWidth = 80;
  std::string text;
  for (const ToolSpec& spec : ToolSpecs()) {
    std::string line = " ";
    for (const std::string& word : SynopsisWords(spec)) {
      if (line.size() + 1 + word.size() > kWidth && line.size() > 6) {
        text += line + "\n";
        line = "     ";
      }
      line += " " + word;
    }
    text += line + "\n";
    std::istringstream summary(spec.summary);
    for (std::string s; std::getline(summary, s);) text += "      " + s + "\n";
  }
  text.pop_back();  // the last '\n'
  return text;
}

int RunTool(const std::string& tool, const std::vector<std::string>& args) {
  const ToolSpec* spec = FindTool(tool);
  if (spec == nullptr) {
    std::fprintf(stderr, "trial-worker: unknown tool \"%s\"\n", tool.c_str());
    return 2;
  }
  ToolArgs parsed;
  std::unique_ptr<CLI::App> app = MakeToolParser(*spec, &parsed);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 pops from the back
  try {
    app->parse(reversed);
  } catch (const CLI::Success&) {  // -h, --help
    std::fputs(app->help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "trial-worker: %s\n%s", e.what(), app->help().c_str());
    return 2;
  }
  Result<int> code = TorchCall(tool, [&]() -> Result<int> { return spec->run(parsed); });
  return code.ok() ? *code : Problem(code.status().message());
}

}  // namespace triald::worker
