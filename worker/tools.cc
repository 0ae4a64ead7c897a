#include "worker/tools.h"

#include <boost/json.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <sstream>

#include "worker/gpt2.h"
#include "worker/safetensors.h"
#include "worker/tokenizer.h"

namespace triald::worker {
namespace {

int Problem(const std::string& message) {
  std::fprintf(stderr, "trial-worker: %s\n", message.c_str());
  return 1;
}

int Usage(const std::string& message) {
  std::fprintf(stderr,
               "trial-worker: %s\nusage: trial-worker tokenize MODEL_DIR < text\n"
               "       trial-worker inspect MODEL_DIR [--batch-size B] [--seq-len L]\n"
               "       trial-worker check MODEL_DIR\n",
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

bool ParseInt(const std::string& s, int64_t* out) {
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < 1) return false;
  *out = v;
  return true;
}

}  // namespace

bool IsTool(const std::string& name) {
  return name == "tokenize" || name == "inspect" || name == "check";
}

int RunTool(const std::string& tool, const std::vector<std::string>& args) {
  if (args.empty()) return Usage(tool + " needs MODEL_DIR");
  const std::string dir = Dir(args[0]);
  try {
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
  } catch (const std::exception& e) {  // LibTorch reports through exceptions
    return Problem(e.what());
  }
}

}  // namespace triald::worker
