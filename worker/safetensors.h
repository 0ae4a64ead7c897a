#pragma once
// Access to .safetensors checkpoints (https://github.com/huggingface/safetensors):
//
//   [8 bytes: N, little-endian u64][N bytes: JSON header][data]
//
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the start of the data) and may hold a "__metadata__" object of strings. The file
// is memory-mapped read-only (MAP_PRIVATE), so opening a multi-gigabyte checkpoint costs no
// copy: a loader reads each tensor's bytes straight from the page cache into its destination.
//
// Everything is validated at Open, before a caller sees a byte of tensor data: the header length
// against the file size, the header's JSON shape, every dtype, every shape, offsets in bounds and
// not overlapping, and shape product * dtype size == byte count. Errors name the file and the
// tensor. Gaps between tensors are tolerated (the format forbids them, but they cannot make a
// tensor read the wrong bytes, and hand-written files sometimes pad).
//
// WriteSafetensors writes the same format (what `trial-worker train --save` uses).
//
// This header includes no LibTorch header; the views carry raw bytes.
//
// Thread-safety: a SafetensorsFile is immutable after Open; const methods may be called from
// several threads at once. Views stay valid as long as the SafetensorsFile they came from.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace triald::worker {

// Every element type the format defines.
enum class SafetensorsDtype {
  kBool,
  kU8,
  kI8,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
  kF8E4M3,
  kF8E5M2,
};

// The name as the header spells it ("F32", "BF16", "F8_E4M3").
const char* SafetensorsDtypeName(SafetensorsDtype dtype);
size_t SafetensorsDtypeSize(SafetensorsDtype dtype);

// One tensor of an open file. `data` points into the mapping (never written) and is not
// necessarily aligned to the element size: copy before reading elements wider than a byte
// through a typed pointer.
struct TensorView {
  std::string name;
  SafetensorsDtype dtype;
  std::vector<int64_t> shape;  // empty for a scalar
  const void* data;
  size_t bytes;
};

// "[2, 3]"; "[]" for a scalar. Shared by every message that shows a shape.
std::string FormatShape(const std::vector<int64_t>& shape);

class SafetensorsFile {
 public:
  // Maps and validates `path`. Errors start with the path and name the offending tensor.
  static common::Result<SafetensorsFile> Open(const std::string& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();  // unmaps

  const std::string& path() const { return path_; }
  // Every tensor, sorted by name.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  // nullptr when the file has no tensor of that name.
  const TensorView* Find(std::string_view name) const;
  // The optional "__metadata__" object.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  void Unmap();

  std::string path_;
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// One tensor for WriteSafetensors: `bytes` bytes at `data`, little-endian, row-major.
struct TensorToWrite {
  std::string name;
  SafetensorsDtype dtype;
  std::vector<int64_t> shape;
  const void* data;
  size_t bytes;
};

// Writes `tensors` (in name order, no gaps, header padded with spaces to 8 bytes as the
// reference writer does) and `metadata` as a .safetensors file at `path`. The file is written
// as `path`.tmp and renamed into place, so a reader never sees half a checkpoint. Fails, naming
// the tensor, when a name repeats or a byte count does not match its shape and dtype; or naming
// the file on an I/O error.
common::Status WriteSafetensors(const std::string& path, std::vector<TensorToWrite> tensors,
                                const std::map<std::string, std::string>& metadata = {});

}  // namespace triald::worker
