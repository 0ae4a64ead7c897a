#include "worker/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <cstring>
#include <utility>

namespace triald::worker {
namespace {

using common::InvalidArgument;
using common::Result;
using common::Status;

struct DtypeInfo {
  SafetensorsDtype dtype;
  const char* name;
  size_t size;
};

constexpr std::array<DtypeInfo, 15> kDtypes = {{
    {SafetensorsDtype::kBool, "BOOL", 1},
    {SafetensorsDtype::kU8, "U8", 1},
    {SafetensorsDtype::kI8, "I8", 1},
    {SafetensorsDtype::kI16, "I16", 2},
    {SafetensorsDtype::kU16, "U16", 2},
    {SafetensorsDtype::kF16, "F16", 2},
    {SafetensorsDtype::kBF16, "BF16", 2},
    {SafetensorsDtype::kI32, "I32", 4},
    {SafetensorsDtype::kU32, "U32", 4},
    {SafetensorsDtype::kF32, "F32", 4},
    {SafetensorsDtype::kF64, "F64", 8},
    {SafetensorsDtype::kI64, "I64", 8},
    {SafetensorsDtype::kU64, "U64", 8},
    {SafetensorsDtype::kF8E4M3, "F8_E4M3", 1},
    {SafetensorsDtype::kF8E5M2, "F8_E5M2", 1},
}};

// The reference implementation refuses larger headers; so do we, before allocating for one.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

const DtypeInfo& InfoOf(SafetensorsDtype dtype) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.dtype == dtype) return info;
  }
  return kDtypes[0];  // unreachable: every enumerator is in the table
}

std::string KnownDtypes() {
  std::string names;
  for (const DtypeInfo& info : kDtypes)
    names += (names.empty() ? "" : ", ") + std::string(info.name);
  return names;
}

// A JSON integer >= 0 as uint64, or nothing.
bool AsUnsigned(const boost::json::value& value, uint64_t* out) {
  if (value.is_uint64()) {
    *out = value.get_uint64();
    return true;
  }
  if (value.is_int64() && value.get_int64() >= 0) {
    *out = static_cast<uint64_t>(value.get_int64());
    return true;
  }
  return false;
}

std::string Shorten(const boost::json::value& value) {
  std::string text = boost::json::serialize(value);
  constexpr size_t kMaxShown = 80;
  if (text.size() > kMaxShown) text = text.substr(0, kMaxShown) + "...";
  return text;
}

// Closes a descriptor on every path out of Open.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

}  // namespace

const char* SafetensorsDtypeName(SafetensorsDtype dtype) { return InfoOf(dtype).name; }
size_t SafetensorsDtypeSize(SafetensorsDtype dtype) { return InfoOf(dtype).size; }

std::string FormatShape(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept { *this = std::move(other); }

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    Unmap();
    path_ = std::move(other.path_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_size_ = std::exchange(other.mapping_size_, 0);
    tensors_ = std::move(other.tensors_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { Unmap(); }

void SafetensorsFile::Unmap() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_size_);
  mapping_ = nullptr;
  mapping_size_ = 0;
}

const TensorView* SafetensorsFile::Find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorView& t, std::string_view n) { return t.name < n; });
  if (it == tensors_.end() || it->name != name) return nullptr;
  return &*it;
}

Result<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  auto fail = [&](const std::string& what) -> Status {
    return InvalidArgument(path + ": not a valid safetensors file: " + what);
  };

  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return common::ErrnoError("cannot open safetensors file " + path, errno);
  FdCloser closer(fd);
  struct stat st;
  if (fstat(fd, &st) != 0) return common::ErrnoError("cannot stat " + path, errno);
  if (!S_ISREG(st.st_mode)) return fail("it is not a regular file");
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    return fail("the file is " + std::to_string(file_size) +
                " bytes long, shorter than the 8-byte header length");
  }

  SafetensorsFile file;
  file.path_ = path;
  file.mapping_size_ = static_cast<size_t>(file_size);
  void* mapping = mmap(nullptr, file.mapping_size_, PROT_READ, MAP_PRIVATE, fd, 0);
  if (mapping == MAP_FAILED) {
    file.mapping_ = nullptr;
    return common::ErrnoError("cannot memory-map " + path, errno);
  }
  file.mapping_ = mapping;
  const auto* bytes = static_cast<const unsigned char*>(mapping);

  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | bytes[i];
  if (header_size > file_size - 8) {
    return fail("the header length field says " + std::to_string(header_size) +
                " bytes, but only " + std::to_string(file_size - 8) +
                " bytes follow it (truncated file?)");
  }
  if (header_size > kMaxHeaderBytes) {
    return fail("the header length " + std::to_string(header_size) + " exceeds the limit of " +
                std::to_string(kMaxHeaderBytes) + " bytes");
  }
  std::string_view header_text(reinterpret_cast<const char*>(bytes + 8),
                               static_cast<size_t>(header_size));
  const unsigned char* data = bytes + 8 + header_size;
  const uint64_t data_size = file_size - 8 - header_size;

  boost::json::error_code ec;
  boost::json::value header = boost::json::parse(header_text, ec);
  if (ec) return fail("the header is not valid JSON (" + ec.message() + ")");
  if (!header.is_object()) return fail("the header is not a JSON object");

  struct Extent {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Extent> extents;
  for (const auto& entry : header.get_object()) {
    std::string name(entry.key());
    const boost::json::value& value = entry.value();
    if (name == "__metadata__") {
      if (!value.is_object()) return fail("\"__metadata__\" must be an object of strings");
      for (const auto& meta : value.get_object()) {
        if (!meta.value().is_string()) {
          return fail("\"__metadata__\" entry '" + std::string(meta.key()) +
                      "' must be a string, got " + Shorten(meta.value()));
        }
        file.metadata_[std::string(meta.key())] = std::string(meta.value().get_string());
      }
      continue;
    }
    auto bad = [&](const std::string& what) { return fail("tensor '" + name + "': " + what); };
    if (!value.is_object()) return bad("expected an object with dtype, shape and data_offsets");
    const boost::json::object& spec = value.get_object();
    for (const auto& field : spec) {
      if (field.key() != "dtype" && field.key() != "shape" && field.key() != "data_offsets") {
        return bad("unknown field '" + std::string(field.key()) +
                   "' (expected dtype, shape, data_offsets)");
      }
    }

    const boost::json::value* dtype_value = spec.if_contains("dtype");
    if (dtype_value == nullptr || !dtype_value->is_string()) {
      return bad("missing or non-string \"dtype\"");
    }
    std::string_view dtype_name = dtype_value->get_string();
    const DtypeInfo* dtype = nullptr;
    for (const DtypeInfo& info : kDtypes) {
      if (dtype_name == info.name) dtype = &info;
    }
    if (dtype == nullptr) {
      return bad("unknown dtype \"" + std::string(dtype_name) + "\" (known: " + KnownDtypes() +
                 ")");
    }

    const boost::json::value* shape_value = spec.if_contains("shape");
    if (shape_value == nullptr || !shape_value->is_array()) return bad("missing \"shape\" array");
    TensorView view;
    view.name = name;
    view.dtype = dtype->dtype;
    uint64_t elements = 1;
    bool overflow = false;
    for (const boost::json::value& dim : shape_value->get_array()) {
      uint64_t d = 0;
      if (!AsUnsigned(dim, &d) || d > static_cast<uint64_t>(INT64_MAX)) {
        return bad("shape " + Shorten(*shape_value) + " must hold non-negative integers, got " +
                   Shorten(dim));
      }
      view.shape.push_back(static_cast<int64_t>(d));
      overflow |= __builtin_mul_overflow(elements, d, &elements);
    }
    uint64_t expected_bytes = 0;
    overflow |= __builtin_mul_overflow(elements, dtype->size, &expected_bytes);
    if (overflow) return bad("shape " + FormatShape(view.shape) + " is too large");

    const boost::json::value* offsets_value = spec.if_contains("data_offsets");
    uint64_t begin = 0, end = 0;
    if (offsets_value == nullptr || !offsets_value->is_array() ||
        offsets_value->get_array().size() != 2 ||
        !AsUnsigned(offsets_value->get_array()[0], &begin) ||
        !AsUnsigned(offsets_value->get_array()[1], &end)) {
      return bad("\"data_offsets\" must be [begin, end] with non-negative integers" +
                 (offsets_value ? ", got " + Shorten(*offsets_value) : std::string()));
    }
    if (begin > end) {
      return bad("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                 "] end before they begin");
    }
    if (end > data_size) {
      return bad("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                 "] run past the end of the data section (" + std::to_string(data_size) +
                 " bytes)");
    }
    if (end - begin != expected_bytes) {
      return bad("shape " + FormatShape(view.shape) + " of " + dtype->name + " needs " +
                 std::to_string(expected_bytes) + " bytes, but data_offsets [" +
                 std::to_string(begin) + ", " + std::to_string(end) + "] hold " +
                 std::to_string(end - begin));
    }
    view.data = data + begin;
    view.bytes = static_cast<size_t>(expected_bytes);
    file.tensors_.push_back(std::move(view));
    extents.push_back({begin, end, nullptr});
  }

  // Overlap check on the byte ranges; empty tensors occupy nothing and cannot overlap.
  for (size_t i = 0; i < extents.size(); ++i) extents[i].name = &file.tensors_[i].name;
  std::sort(extents.begin(), extents.end(),
            [](const Extent& a, const Extent& b) { return a.begin < b.begin; });
  const Extent* previous = nullptr;
  for (const Extent& extent : extents) {
    if (extent.begin == extent.end) continue;
    if (previous != nullptr && extent.begin < previous->end) {
      return fail("tensors '" + *previous->name + "' [" + std::to_string(previous->begin) + ", " +
                  std::to_string(previous->end) + ") and '" + *extent.name + "' [" +
                  std::to_string(extent.begin) + ", " + std::to_string(extent.end) + ") overlap");
    }
    previous = &extent;
  }

  std::sort(file.tensors_.begin(), file.tensors_.end(),
            [](const TensorView& a, const TensorView& b) { return a.name < b.name; });
  return file;
}

Status WriteSafetensors(const std::string& path, std::vector<TensorToWrite> tensors,
                        const std::map<std::string, std::string>& metadata) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
                "safetensors data is little-endian; this writer copies host bytes as they are");
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorToWrite& a, const TensorToWrite& b) { return a.name < b.name; });
  boost::json::object header;
  if (!metadata.empty()) {
    boost::json::object meta;
    for (const auto& [key, value] : metadata) meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorToWrite& t = tensors[i];
    if (i > 0 && tensors[i - 1].name == t.name) {
      return InvalidArgument(path + ": tensor '" + t.name + "' given twice");
    }
    if (t.name == "__metadata__") {
      return InvalidArgument(path + ": '__metadata__' is reserved and cannot name a tensor");
    }
    uint64_t count = 1;
    boost::json::array shape;
    for (int64_t d : t.shape) {
      if (d < 0) return InvalidArgument(path + ": tensor '" + t.name + "' has a negative dim");
      count *= static_cast<uint64_t>(d);
      shape.push_back(d);
    }
    if (count * SafetensorsDtypeSize(t.dtype) != t.bytes) {
      return InvalidArgument(path + ": tensor '" + t.name + "' of shape " + FormatShape(t.shape) +
                             " and dtype " + SafetensorsDtypeName(t.dtype) + " needs " +
                             std::to_string(count * SafetensorsDtypeSize(t.dtype)) +
                             " bytes, got " + std::to_string(t.bytes));
    }
    boost::json::object entry;
    entry["dtype"] = SafetensorsDtypeName(t.dtype);
    entry["shape"] = std::move(shape);
    entry["data_offsets"] = boost::json::array{offset, offset + t.bytes};
    header[t.name] = std::move(entry);
    offset += t.bytes;
  }
  std::string text = boost::json::serialize(header);
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(text.size() >> (8 * i));

  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return common::ErrnoError("cannot create " + tmp, errno);
  auto write_all = [fd](const void* data, size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      ssize_t n = ::write(fd, p, size);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      p += n;
      size -= static_cast<size_t>(n);
    }
    return true;
  };
  bool ok = write_all(length, sizeof(length)) && write_all(text.data(), text.size());
  for (size_t i = 0; ok && i < tensors.size(); ++i) {
    ok = write_all(tensors[i].data, tensors[i].bytes);
  }
  const int write_errno = errno;
  if (::close(fd) != 0 && ok) return common::ErrnoError("cannot write " + tmp, errno);
  if (!ok) {
    ::unlink(tmp.c_str());
    return common::ErrnoError("cannot write " + tmp, write_errno);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return common::ErrnoError("cannot rename " + tmp + " to " + path, err);
  }
  return Status::Ok();
}

}  // namespace triald::worker
