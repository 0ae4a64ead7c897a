// Tests of the .safetensors reader: a well-formed file reads back exactly, and every kind of
// malformed file is refused with a message naming the file and the tensor.
#include "worker/safetensors.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "tests/worker/safetensors_writer.h"

namespace triald::worker {
namespace {

using testing::EncodeSafetensors;
using testing::F32Bytes;
using testing::RawSafetensors;
using testing::TempDir;
using testing::WriteBytes;

// Opens a file holding `bytes` and returns the error message (the open must fail).
std::string OpenError(const TempDir& dir, const std::string& bytes) {
  std::string path = dir / "bad.safetensors";
  WriteBytes(path, bytes);
  auto file = SafetensorsFile::Open(path);
  REQUIRE(!file.ok());
  const std::string& message = file.status().message();
  // Every message starts with the file it is about.
  CHECK(message.rfind(path + ": ", 0) == 0);
  return message;
}

// A header with one tensor "w" of `dtype` and `shape` at `offsets`, followed by `data_bytes`
// zero bytes.
std::string OneTensor(const std::string& dtype, const std::string& shape,
                      const std::string& offsets, size_t data_bytes) {
  return RawSafetensors(R"({"w":{"dtype":")" + dtype + R"(","shape":)" + shape +
                            R"(,"data_offsets":)" + offsets + "}}",
                        std::string(data_bytes, '\0'));
}

TEST_CASE("safetensors: a well-formed file reads back tensors and metadata",
          "[worker][safetensors]") {
  TempDir dir;
  std::string path = dir / "ok.safetensors";
  std::vector<float> matrix = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, 7.0f};
  uint16_t half_one = 0x3C00;  // 1.0 in IEEE half precision
  std::string half_bytes(reinterpret_cast<const char*>(&half_one), 2);
  WriteBytes(path, EncodeSafetensors(
                       {
                           {"layer.weight", "F32", {2, 3}, F32Bytes(matrix)},
                           {"a_scalar", "F16", {}, half_bytes},
                           {"empty", "I64", {0, 4}, ""},
                           {"flags", "BOOL", {3}, std::string("\x01\x00\x01", 3)},
                       },
                       {{"format", "pt"}}));

  auto file = SafetensorsFile::Open(path);
  REQUIRE(file.ok());
  CHECK(file->path() == path);
  CHECK(file->metadata() == std::map<std::string, std::string>{{"format", "pt"}});
  // Sorted by name, whatever the header's order.
  std::vector<std::string> names;
  for (const TensorView& t : file->tensors()) names.push_back(t.name);
  CHECK(names == std::vector<std::string>{"a_scalar", "empty", "flags", "layer.weight"});

  const TensorView* weight = file->Find("layer.weight");
  REQUIRE(weight != nullptr);
  CHECK(weight->dtype == SafetensorsDtype::kF32);
  CHECK(weight->shape == std::vector<int64_t>{2, 3});
  REQUIRE(weight->bytes == 24);
  std::vector<float> read(6);
  std::memcpy(read.data(), weight->data, 24);
  CHECK(read == matrix);

  const TensorView* scalar = file->Find("a_scalar");
  REQUIRE(scalar != nullptr);
  CHECK(scalar->dtype == SafetensorsDtype::kF16);
  CHECK(scalar->shape.empty());
  CHECK(scalar->bytes == 2);
  CHECK(std::memcmp(scalar->data, &half_one, 2) == 0);

  CHECK(file->Find("empty")->bytes == 0);
  CHECK(file->Find("flags")->dtype == SafetensorsDtype::kBool);
  CHECK(file->Find("missing") == nullptr);
  CHECK(file->Find("layer") == nullptr);

  // Moving keeps the mapping alive for the views.
  SafetensorsFile moved = std::move(*file);
  std::memcpy(read.data(), moved.Find("layer.weight")->data, 24);
  CHECK(read == matrix);
}

TEST_CASE("safetensors: dtype names and sizes", "[worker][safetensors]") {
  CHECK(std::string(SafetensorsDtypeName(SafetensorsDtype::kBF16)) == "BF16");
  CHECK(std::string(SafetensorsDtypeName(SafetensorsDtype::kF8E4M3)) == "F8_E4M3");
  CHECK(SafetensorsDtypeSize(SafetensorsDtype::kBF16) == 2);
  CHECK(SafetensorsDtypeSize(SafetensorsDtype::kF64) == 8);
  CHECK(SafetensorsDtypeSize(SafetensorsDtype::kBool) == 1);
  CHECK(FormatShape({}) == "[]");
  CHECK(FormatShape({2, 3}) == "[2, 3]");
}

TEST_CASE("safetensors: a file that is missing or too short for its header is refused",
          "[worker][safetensors]") {
  TempDir dir;
  auto missing = SafetensorsFile::Open(dir / "nope.safetensors");
  REQUIRE(!missing.ok());
  CHECK(missing.status().message().find(dir / "nope.safetensors") != std::string::npos);
  CHECK(missing.status().message().find("No such file") != std::string::npos);

  CHECK(OpenError(dir, "abc").find("3 bytes long, shorter than the 8-byte header length") !=
        std::string::npos);
  // The length field claims more header than the file holds.
  CHECK(OpenError(dir, RawSafetensors("{}", "", 100))
            .find("says 100 bytes, but only 2 bytes follow it") != std::string::npos);
  CHECK(OpenError(dir, RawSafetensors("{\"w\":", "")).find("not valid JSON") != std::string::npos);
  CHECK(OpenError(dir, RawSafetensors("[1,2]", "")).find("not a JSON object") != std::string::npos);
}

TEST_CASE("safetensors: every malformed tensor entry is named", "[worker][safetensors]") {
  TempDir dir;
  auto error = [&](const std::string& bytes) { return OpenError(dir, bytes); };

  std::string not_object = error(RawSafetensors(R"({"w":[1,2]})", ""));
  CHECK(not_object.find("tensor 'w': expected an object") != std::string::npos);

  std::string unknown_dtype = error(OneTensor("F17", "[2]", "[0,8]", 8));
  CHECK(unknown_dtype.find("tensor 'w': unknown dtype \"F17\" (known: BOOL, U8") !=
        std::string::npos);

  std::string no_dtype =
      error(RawSafetensors(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0')));
  CHECK(no_dtype.find("tensor 'w': missing or non-string \"dtype\"") != std::string::npos);

  std::string negative_dim = error(OneTensor("F32", "[2,-1]", "[0,8]", 8));
  CHECK(negative_dim.find("tensor 'w': shape [2,-1] must hold non-negative integers, got -1") !=
        std::string::npos);

  std::string fractional_dim = error(OneTensor("F32", "[2.5]", "[0,8]", 8));
  CHECK(fractional_dim.find("tensor 'w': shape") != std::string::npos);

  std::string no_shape =
      error(RawSafetensors(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", std::string(4, '\0')));
  CHECK(no_shape.find("tensor 'w': missing \"shape\" array") != std::string::npos);

  std::string bad_offsets = error(OneTensor("F32", "[2]", "[0]", 8));
  CHECK(bad_offsets.find("tensor 'w': \"data_offsets\" must be [begin, end]") != std::string::npos);

  std::string reversed = error(OneTensor("F32", "[0]", "[8,4]", 8));
  CHECK(reversed.find("tensor 'w': data_offsets [8, 4] end before they begin") !=
        std::string::npos);

  std::string out_of_bounds = error(OneTensor("F32", "[4]", "[0,16]", 12));
  CHECK(out_of_bounds.find("tensor 'w': data_offsets [0, 16] run past the end of the data "
                           "section (12 bytes)") != std::string::npos);

  std::string wrong_size = error(OneTensor("F32", "[2,3]", "[0,20]", 20));
  CHECK(wrong_size.find("tensor 'w': shape [2, 3] of F32 needs 24 bytes, but data_offsets [0, "
                        "20] hold 20") != std::string::npos);

  std::string huge = error(OneTensor("F32", "[4294967296,4294967296]", "[0,4]", 4));
  CHECK(huge.find("tensor 'w': shape [4294967296, 4294967296] is too large") != std::string::npos);

  std::string unknown_field =
      error(RawSafetensors(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"stride":[1]}})",
                           std::string(4, '\0')));
  CHECK(unknown_field.find("tensor 'w': unknown field 'stride'") != std::string::npos);

  std::string bad_metadata = error(RawSafetensors(R"({"__metadata__":{"format":1}})", ""));
  CHECK(bad_metadata.find("\"__metadata__\" entry 'format' must be a string, got 1") !=
        std::string::npos);
}

TEST_CASE("safetensors: overlapping tensors are refused, naming both", "[worker][safetensors]") {
  TempDir dir;
  std::string message =
      OpenError(dir, RawSafetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                    std::string(12, '\0')));
  CHECK(message.find("tensors 'a' [0, 8) and 'b' [4, 12) overlap") != std::string::npos);

  // Adjacent is fine, and so is a gap; empty tensors occupy nothing.
  std::string path = dir / "adjacent.safetensors";
  WriteBytes(path, RawSafetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                  R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                                  R"("b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
                                  std::string(16, '\0')));
  auto file = SafetensorsFile::Open(path);
  INFO(file.status().message());
  REQUIRE(file.ok());
  CHECK(file->tensors().size() == 3);
}

TEST_CASE("WriteSafetensors writes what the reader reads back", "[worker][safetensors]") {
  TempDir dir;
  const std::string path = dir / "w.safetensors";
  const std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  const std::vector<int16_t> b = {1, -2, 3};
  REQUIRE(WriteSafetensors(path,
                           {{"z.a", SafetensorsDtype::kF32, {2, 3}, a.data(), 24},
                            {"b", SafetensorsDtype::kI16, {3}, b.data(), 6}},
                           {{"format", "pt"}})
              .ok());
  auto file = SafetensorsFile::Open(path);
  INFO(file.status().message());
  REQUIRE(file.ok());
  REQUIRE(file->tensors().size() == 2);
  const TensorView& first = file->tensors()[0];
  CHECK(first.name == "b");
  CHECK(first.dtype == SafetensorsDtype::kI16);
  CHECK(first.shape == std::vector<int64_t>{3});
  REQUIRE(first.bytes == 6);
  CHECK(std::memcmp(first.data, b.data(), 6) == 0);
  const TensorView* second = file->Find("z.a");
  REQUIRE(second != nullptr);
  CHECK(second->shape == std::vector<int64_t>{2, 3});
  REQUIRE(second->bytes == 24);
  CHECK(std::memcmp(second->data, a.data(), 24) == 0);
  CHECK(file->metadata().at("format") == "pt");
}

TEST_CASE("WriteSafetensors refuses inconsistent tensors by name", "[worker][safetensors]") {
  TempDir dir;
  const std::string path = dir / "w.safetensors";
  const std::vector<float> a = {1, 2, 3, 4};
  auto twice = WriteSafetensors(path, {{"x", SafetensorsDtype::kF32, {4}, a.data(), 16},
                                       {"x", SafetensorsDtype::kF32, {4}, a.data(), 16}});
  REQUIRE(!twice.ok());
  CHECK_THAT(twice.message(), Catch::Contains("'x' given twice"));
  auto short_data = WriteSafetensors(path, {{"y", SafetensorsDtype::kF32, {5}, a.data(), 16}});
  REQUIRE(!short_data.ok());
  CHECK_THAT(short_data.message(), Catch::Contains("'y'"));
  CHECK_THAT(short_data.message(), Catch::Contains("needs 20 bytes, got 16"));
  auto nowhere = WriteSafetensors(dir / "no-such-dir/w.safetensors",
                                  {{"x", SafetensorsDtype::kF32, {4}, a.data(), 16}});
  REQUIRE(!nowhere.ok());
  CHECK_THAT(nowhere.message(), Catch::Contains("no-such-dir/w.safetensors"));
}

}  // namespace
}  // namespace triald::worker
