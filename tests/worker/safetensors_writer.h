#pragma once
// Test helpers that write .safetensors files byte by byte, well-formed or deliberately not, and
// a temporary directory that removes itself. Header-only; no LibTorch.
//
// Thread-safety: plain functions and a value type; TempDir is not shared between threads.

#include <stdlib.h>

#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace triald::worker::testing {

// A directory under $TMPDIR (or /tmp), removed with its contents when the object dies.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base != nullptr && *base != '\0' ? base : "/tmp") +
                          "/triald-worker-test-XXXXXX";
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  REQUIRE(out);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out);
}

// The 8-byte little-endian length, `header` and `data`, as given: for files broken on purpose.
// `declared_length` overrides the length field.
inline std::string RawSafetensors(const std::string& header, const std::string& data,
                                  int64_t declared_length = -1) {
  uint64_t length = declared_length >= 0 ? static_cast<uint64_t>(declared_length) : header.size();
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((length >> (8 * i)) & 0xFF);
  return bytes + header + data;
}

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "F16", ...
  std::vector<int64_t> shape;
  std::string bytes;  // raw little-endian elements
};

// A well-formed file: the tensors stored back to back in the given order.
inline std::string EncodeSafetensors(const std::vector<SafetensorsEntry>& entries,
                                     const std::map<std::string, std::string>& metadata = {}) {
  boost::json::object header;
  if (!metadata.empty()) {
    boost::json::object meta;
    for (const auto& [key, value] : metadata) meta[key] = value;
    header["__metadata__"] = meta;
  }
  std::string data;
  for (const SafetensorsEntry& entry : entries) {
    boost::json::array shape;
    for (int64_t d : entry.shape) shape.push_back(d);
    header[entry.name] = {{"dtype", entry.dtype},
                          {"shape", shape},
                          {"data_offsets", {data.size(), data.size() + entry.bytes.size()}}};
    data += entry.bytes;
  }
  std::string text = boost::json::serialize(header);
  // The reference writer pads the header with spaces to a multiple of 8 bytes.
  while ((text.size() + 8) % 8 != 0) text += ' ';
  return RawSafetensors(text, data);
}

// The bytes of `values` as little-endian F32 (the test machines are little-endian).
inline std::string F32Bytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

}  // namespace triald::worker::testing
