#include "worker/lm_checkpoint.h"

#include <ATen/Context.h>
#include <c10/util/Exception.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <torch/serialize/archive.h>
#include <torch/types.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <utility>

#include "common/fd.h"

namespace triald::worker {
namespace {

using common::Result;
using common::Status;

constexpr char kMagic[] = "triald-lm-checkpoint 1\n";
constexpr char kTrailerMagic[8] = {'T', 'R', 'L', 'D', 'C', 'K', 'P', 'T'};
constexpr size_t kTrailerBytes = 24;
constexpr size_t kMaxHeaderBytes = 4096;
constexpr uint64_t kFnvOffset = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

uint64_t Fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
  return h;
}

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

void PutLe64(unsigned char* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}

uint64_t GetLe64(const unsigned char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(in[i]) << (8 * i);
  return v;
}

Status WriteAll(int fd, const void* data, size_t n, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return common::ErrnoError("write " + path, errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status ReadAt(int fd, uint64_t offset, void* buf, size_t n, const std::string& path) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return common::ErrnoError("read " + path, errno);
    }
    if (r == 0) return common::IoError(path + ": unexpected end of file");
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

// Every named parameter, then every named buffer, of the model.
std::vector<std::pair<std::string, torch::Tensor>> ModelTensors(Gpt2Model& model) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : model.named_parameters()) out.emplace_back(item.key(), item.value());
  for (const auto& item : model.named_buffers()) {
    out.emplace_back("buffer:" + item.key(), item.value());
  }
  return out;
}

std::string JoinNames(const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  std::string names;
  for (const auto& [name, tensor] : tensors) names += name + "\n";
  return names;
}

// The header's fields and where the payload starts.
struct Parsed {
  LmCheckpointHeader header;
  uint64_t payload_offset = 0;
};

Result<Parsed> ParseHeader(int fd, const std::string& path, uint64_t size) {
  std::string head(static_cast<size_t>(std::min<uint64_t>(size, kMaxHeaderBytes)), '\0');
  TRIALD_RETURN_IF_ERROR(ReadAt(fd, 0, head.data(), head.size(), path));
  if (head.rfind(kMagic, 0) != 0) {
    return common::InvalidArgument(path + " is not a triald lm checkpoint (format 1)");
  }
  const size_t end = head.find("\n\n");
  if (end == std::string::npos) return common::InvalidArgument(path + ": header is cut short");
  Parsed p;
  p.payload_offset = end + 2;
  std::istringstream lines(head.substr(sizeof(kMagic) - 1, end + 1 - (sizeof(kMagic) - 1)));
  bool have_step = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("step ", 0) == 0) {
      char* stop = nullptr;
      errno = 0;
      const long long v = std::strtoll(line.c_str() + 5, &stop, 10);
      if (errno != 0 || stop == line.c_str() + 5 || *stop != '\0' || v < 0) {
        return common::InvalidArgument(path + ": bad header line \"" + line + "\"");
      }
      p.header.step = v;
      have_step = true;
    } else if (line.rfind("fingerprint ", 0) == 0) {
      p.header.fingerprint = line.substr(12);
    } else {
      return common::InvalidArgument(path + ": unknown header line \"" + line + "\"");
    }
  }
  if (!have_step || p.header.fingerprint.empty()) {
    return common::InvalidArgument(path + ": header lacks its step or fingerprint");
  }
  return p;
}

// LibTorch's generators a run on `device` draws from, by archive key: the CPU's, and on a CUDA
// device that device's too (dropout there).
std::vector<std::pair<std::string, at::Generator>> GeneratorsOf(const c10::Device& device) {
  std::vector<std::pair<std::string, at::Generator>> out;
  out.emplace_back("torch_rng/cpu", at::globalContext().defaultGenerator(c10::Device(c10::kCPU)));
  if (device.is_cuda()) {
    out.emplace_back("torch_rng/cuda", at::globalContext().defaultGenerator(device));
  }
  return out;
}

}  // namespace

std::string LmCheckpointFingerprint(const config::LmObjectiveConfig& config,
                                    const LmHyperparams& hp, const std::vector<int32_t>& train,
                                    const std::vector<int32_t>& eval, const c10::Device& device) {
  std::ostringstream text;
  text.precision(17);
  text << "model=" << config.model << "\ntrain_file=" << config.train_file
       << "\neval_file=" << config.eval_file << "\nmax_steps=" << config.max_steps
       << "\nseq_len=" << config.seq_len << "\nlearning_rate=" << hp.learning_rate
       << "\nweight_decay=" << hp.weight_decay << "\nwarmup_steps=" << hp.warmup_steps
       << "\nbatch_size=" << hp.batch_size << "\ndropout=" << hp.dropout
       << "\nadam_beta1=" << hp.adam_beta1 << "\nadam_beta2=" << hp.adam_beta2
       << "\ngrad_clip=" << hp.grad_clip << "\nlr_schedule=" << static_cast<int>(hp.lr_schedule)
       << "\nseed=" << hp.seed << "\ndevice=" << (device.is_cuda() ? "cuda" : "cpu") << "\n";
  const std::string s = text.str();
  uint64_t h = Fnv1a(kFnvOffset, s.data(), s.size());
  const uint64_t n_train = train.size(), n_eval = eval.size();
  h = Fnv1a(h, &n_train, sizeof n_train);
  h = Fnv1a(h, train.data(), train.size() * sizeof(int32_t));
  h = Fnv1a(h, &n_eval, sizeof n_eval);
  h = Fnv1a(h, eval.data(), eval.size() * sizeof(int32_t));
  return Hex64(h);
}

Result<LmCheckpointHeader> ReadLmCheckpointHeader(const std::string& path) {
  common::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return common::ErrnoError("open " + path, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return common::ErrnoError("stat " + path, errno);
  TRIALD_ASSIGN_OR_RETURN(Parsed p, ParseHeader(fd.get(), path, static_cast<uint64_t>(st.st_size)));
  return p.header;
}

Status SaveLmCheckpoint(const std::string& dir, int64_t step, const std::string& fingerprint,
                        Gpt2Model& model, torch::optim::Optimizer& optimizer,
                        const std::mt19937_64& data_rng, const c10::Device& device) {
  const std::string final_path = dir + "/" + kLmCheckpointFile;
  std::string tmp_path = dir + "/." + kLmCheckpointFile + ".XXXXXX";
  common::UniqueFd fd(::mkostemp(tmp_path.data(), O_CLOEXEC));
  if (!fd.valid()) return common::ErrnoError("create a temporary checkpoint in " + dir, errno);
  // The temporary file goes unless it became the checkpoint.
  struct Unlink {
    const std::string* path;
    bool keep = false;
    ~Unlink() {
      if (!keep) ::unlink(path->c_str());
    }
  } cleanup{&tmp_path};

  torch::serialize::OutputArchive archive;
  const auto tensors = ModelTensors(model);
  archive.write("names", c10::IValue(JoinNames(tensors)));
  for (size_t i = 0; i < tensors.size(); ++i) {
    archive.write("tensor/" + std::to_string(i), tensors[i].second.detach());
  }
  torch::serialize::OutputArchive optimizer_archive(archive.compilation_unit());
  optimizer.save(optimizer_archive);
  archive.write("optimizer", optimizer_archive);
  std::ostringstream rng_text;
  rng_text << data_rng;
  archive.write("data_rng", c10::IValue(rng_text.str()));
  for (auto& [key, gen] : GeneratorsOf(device)) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    archive.write(key, gen.get_state());
  }

  const std::string header = std::string(kMagic) + "step " + std::to_string(step) +
                             "\nfingerprint " + fingerprint + "\n\n";
  TRIALD_RETURN_IF_ERROR(WriteAll(fd.get(), header.data(), header.size(), tmp_path));
  uint64_t hash = kFnvOffset;
  uint64_t length = 0;
  Status write_status = Status::Ok();
  try {
    archive.save_to([&](const void* data, size_t n) -> size_t {
      if (!write_status.ok()) return 0;
      write_status = WriteAll(fd.get(), data, n, tmp_path);
      if (!write_status.ok()) return 0;
      hash = Fnv1a(hash, data, n);
      length += n;
      return n;
    });
  } catch (const std::exception&) {
    // LibTorch gives up on a short write; the write's own error says why.
    TRIALD_RETURN_IF_ERROR(write_status);
    throw;
  }
  TRIALD_RETURN_IF_ERROR(write_status);
  unsigned char trailer[kTrailerBytes];
  PutLe64(trailer, length);
  PutLe64(trailer + 8, hash);
  std::memcpy(trailer + 16, kTrailerMagic, sizeof kTrailerMagic);
  TRIALD_RETURN_IF_ERROR(WriteAll(fd.get(), trailer, sizeof trailer, tmp_path));
  if (::fsync(fd.get()) != 0) return common::ErrnoError("fsync " + tmp_path, errno);
  if (::rename(tmp_path.c_str(), final_path.c_str()) != 0) {
    return common::ErrnoError("rename " + tmp_path + " to " + final_path, errno);
  }
  cleanup.keep = true;
  // The rename itself survives a crash once the folder is on disk.
  common::UniqueFd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd.valid() || ::fsync(dir_fd.get()) != 0) {
    return common::ErrnoError("fsync the folder " + dir, errno);
  }
  return Status::Ok();
}

namespace {

// LoadLmCheckpoint's work; LibTorch's exceptions (a key missing from the archive) pass through.
Result<int64_t> Load(const std::string& dir, const std::string& fingerprint, int64_t max_steps,
                     Gpt2Model& model, torch::optim::Optimizer& optimizer,
                     std::mt19937_64* data_rng, const c10::Device& device) {
  const std::string path = dir + "/" + kLmCheckpointFile;
  common::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) {
    if (errno == ENOENT) return common::NotFound("no checkpoint in " + dir);
    return common::ErrnoError("open " + path, errno);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return common::ErrnoError("stat " + path, errno);
  if (!S_ISREG(st.st_mode)) return common::InvalidArgument(path + " is not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  TRIALD_ASSIGN_OR_RETURN(Parsed p, ParseHeader(fd.get(), path, size));
  if (p.header.fingerprint != fingerprint) {
    return common::FailedPrecondition(
        path + " was written by a run with other parameters or settings (fingerprint " +
        p.header.fingerprint + ", this run's " + fingerprint + ")");
  }
  if (p.header.step < 1 || p.header.step >= max_steps) {
    return common::InvalidArgument(path + ": step " + std::to_string(p.header.step) +
                                   " is outside [1, max_steps " + std::to_string(max_steps) + ")");
  }
  if (size < p.payload_offset + kTrailerBytes) {
    return common::InvalidArgument(path + " is cut short");
  }
  unsigned char trailer[kTrailerBytes];
  TRIALD_RETURN_IF_ERROR(ReadAt(fd.get(), size - kTrailerBytes, trailer, sizeof trailer, path));
  const uint64_t length = GetLe64(trailer);
  if (std::memcmp(trailer + 16, kTrailerMagic, sizeof kTrailerMagic) != 0 ||
      length != size - kTrailerBytes - p.payload_offset) {
    return common::InvalidArgument(path + " is cut short or damaged (its trailer does not match)");
  }
  // The hash first: a damaged payload is refused before LibTorch parses any of it.
  uint64_t hash = kFnvOffset;
  std::vector<char> chunk(1 << 20);
  for (uint64_t done = 0; done < length;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk.size(), length - done));
    TRIALD_RETURN_IF_ERROR(ReadAt(fd.get(), p.payload_offset + done, chunk.data(), n, path));
    hash = Fnv1a(hash, chunk.data(), n);
    done += n;
  }
  if (hash != GetLe64(trailer + 8)) {
    return common::InvalidArgument(path + " is damaged (its hash does not match its contents)");
  }

  // Everything is read and checked before anything is changed.
  torch::serialize::InputArchive archive;
  const int raw = fd.get();
  const uint64_t offset = p.payload_offset;
  archive.load_from(
      [raw, offset, length](uint64_t pos, void* buf, size_t n) -> size_t {
        if (pos >= length) return 0;
        n = static_cast<size_t>(std::min<uint64_t>(n, length - pos));
        size_t got = 0;
        while (got < n) {
          const ssize_t r = ::pread(raw, static_cast<char*>(buf) + got, n - got,
                                    static_cast<off_t>(offset + pos + got));
          if (r < 0 && errno == EINTR) continue;
          if (r <= 0) break;
          got += static_cast<size_t>(r);
        }
        return got;
      },
      [length]() -> size_t { return static_cast<size_t>(length); }, device);
  const auto tensors = ModelTensors(model);
  c10::IValue names;
  archive.read("names", names);
  if (!names.isString() || names.toStringRef() != JoinNames(tensors)) {
    return common::InvalidArgument(path + " holds the tensors of another model");
  }
  std::vector<torch::Tensor> loaded(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    archive.read("tensor/" + std::to_string(i), loaded[i]);
    const torch::Tensor& want = tensors[i].second;
    if (!loaded[i].defined() || loaded[i].sizes() != want.sizes() ||
        loaded[i].scalar_type() != want.scalar_type()) {
      return common::InvalidArgument(path + ": tensor " + tensors[i].first +
                                     " does not match the model's shape or type");
    }
  }
  c10::IValue rng_text;
  archive.read("data_rng", rng_text);
  std::mt19937_64 rng;
  {
    std::istringstream in(rng_text.isString() ? rng_text.toStringRef() : std::string());
    in >> rng;
    if (in.fail()) return common::InvalidArgument(path + ": the data order's state is damaged");
  }
  auto generators = GeneratorsOf(device);
  std::vector<torch::Tensor> states(generators.size());
  for (size_t i = 0; i < generators.size(); ++i) {
    archive.read(generators[i].first, states[i]);
    states[i] = states[i].to(torch::kCPU);
  }
  torch::serialize::InputArchive optimizer_archive;
  archive.read("optimizer", optimizer_archive);

  // Now the changes, each undone if a later one fails.
  std::vector<torch::Tensor> previous(generators.size());
  auto restore = [&](size_t n) {
    for (size_t i = 0; i < n; ++i) {
      std::lock_guard<std::mutex> lock(generators[i].second.mutex());
      generators[i].second.set_state(previous[i]);
    }
  };
  for (size_t i = 0; i < generators.size(); ++i) {
    at::Generator& gen = generators[i].second;
    std::lock_guard<std::mutex> lock(gen.mutex());
    previous[i] = gen.get_state();
    try {
      gen.set_state(states[i]);
    } catch (const std::exception& e) {
      restore(i);
      return common::InvalidArgument(path + ": LibTorch's generator state does not fit: " +
                                     std::string(e.what()).substr(0, 300));
    }
  }
  try {
    optimizer.load(optimizer_archive);
  } catch (const std::exception& e) {
    optimizer.state().clear();  // a fresh AdamW has no state: as it was
    restore(generators.size());
    return common::InvalidArgument(
        path + ": the optimizer state does not fit: " + std::string(e.what()).substr(0, 300));
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].second.copy_(loaded[i]);
  *data_rng = rng;
  return p.header.step;
}

}  // namespace

Result<int64_t> LoadLmCheckpoint(const std::string& dir, const std::string& fingerprint,
                                 int64_t max_steps, Gpt2Model& model,
                                 torch::optim::Optimizer& optimizer, std::mt19937_64* data_rng,
                                 const c10::Device& device) {
  try {
    return Load(dir, fingerprint, max_steps, model, optimizer, data_rng, device);
  } catch (const c10::Error& e) {
    return common::InvalidArgument(dir + "/" + kLmCheckpointFile +
                                   " cannot be read: " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return common::InvalidArgument(dir + "/" + kLmCheckpointFile + " cannot be read: " + e.what());
  }
}

}  // namespace triald::worker
