// The safetensors reader and ModelFiles against hand-written files: every malformation of
// QWEN.md §Loader must be refused with kInvalidModel and a message naming the file and
// the problem; well-formed files must expose the bytes that were written.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/mapped_file.h"
#include "model/safetensors.h"
#include "test_util.h"

namespace qwenrt {
namespace {

using test::expect_error;
using test::json;
using test::safetensors_bytes;
using test::TempDir;
using test::write_file;

constexpr const char* kFile = "bad.safetensors";

// Writes `bytes` as bad.safetensors and expects SafetensorsFile to refuse it.
void expect_rejected(const std::string& bytes, const std::vector<std::string>& keywords) {
  TempDir dir;
  write_file(dir / kFile, bytes);
  std::vector<std::string> needles = keywords;
  needles.push_back(kFile);
  expect_error([&] { SafetensorsFile file(dir / kFile); }, ErrorCategory::kInvalidModel, needles);
}

std::string one_tensor(const json& entry, const std::string& data) {
  return safetensors_bytes(json{{"w", entry}}.dump(), data);
}

TEST(Safetensors, ReadsWellFormedFile) {
  TempDir dir;
  std::vector<float> a = {1.f, 2.f, 3.f, 4.f, 5.f, 6.f};
  std::vector<uint16_t> b = {0x3f80, 0xc000};  // bf16 1.0, -2.0
  std::string data = test::float_bytes(a);
  data.append(reinterpret_cast<const char*>(b.data()), 4);
  json header = {{"__metadata__", {{"format", "pt"}}},
                 {"a", {{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {0, 24}}}},
                 {"b", {{"dtype", "BF16"}, {"shape", {2}}, {"data_offsets", {24, 28}}}},
                 {"s", {{"dtype", "F32"}, {"shape", json::array()}, {"data_offsets", {28, 32}}}},
                 {"e", {{"dtype", "I8"}, {"shape", {0}}, {"data_offsets", {32, 32}}}}};
  data += test::float_bytes({7.f});
  write_file(dir / "ok.safetensors", safetensors_bytes(header.dump(), data));
  SafetensorsFile file(dir / "ok.safetensors");
  EXPECT_EQ(file.tensors().size(), 4u);  // __metadata__ is not a tensor
  const SafetensorsTensor* ta = file.find("a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(ta->dtype_supported);
  EXPECT_EQ(ta->dtype, DType::kF32);
  EXPECT_EQ(ta->byte_size, 24u);
  EXPECT_EQ(std::memcmp(ta->data, a.data(), 24), 0);
  const SafetensorsTensor* tb = file.find("b");
  ASSERT_NE(tb, nullptr);
  EXPECT_EQ(tb->dtype, DType::kBF16);
  EXPECT_EQ(std::memcmp(tb->data, b.data(), 4), 0);
  const SafetensorsTensor* ts = file.find("s");
  ASSERT_NE(ts, nullptr);
  EXPECT_EQ(ts->numel(), 1);  // a scalar has one element
  float scalar;
  std::memcpy(&scalar, ts->data, 4);
  EXPECT_EQ(scalar, 7.f);
  const SafetensorsTensor* te = file.find("e");
  ASSERT_NE(te, nullptr);
  EXPECT_FALSE(te->dtype_supported);  // I8 exists in the format but is no weight dtype
  EXPECT_EQ(te->numel(), 0);
  EXPECT_EQ(file.find("__metadata__"), nullptr);
  EXPECT_EQ(file.find("missing"), nullptr);
}

TEST(Safetensors, AcceptsHeaderFillingTheWholeFile) {
  // Header length == file size - 8 with no tensors is a valid (empty) file, not truncation.
  TempDir dir;
  write_file(dir / "empty.safetensors", safetensors_bytes("{}", ""));
  SafetensorsFile file(dir / "empty.safetensors");
  EXPECT_TRUE(file.tensors().empty());
}

TEST(Safetensors, AcceptsSpacePaddedHeader) {
  // Writers pad the header with spaces so the data area starts 8-byte aligned.
  TempDir dir;
  std::string header =
      json{{"w", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}}}.dump();
  header.append(8 - header.size() % 8, ' ');
  write_file(dir / "padded.safetensors", safetensors_bytes(header, test::float_bytes({2.5f})));
  SafetensorsFile file(dir / "padded.safetensors");
  const SafetensorsTensor* w = file.find("w");
  ASSERT_NE(w, nullptr);
  float value;
  std::memcpy(&value, w->data, 4);
  EXPECT_EQ(value, 2.5f);
}

TEST(Safetensors, RejectsFileShorterThanLengthPrefix) {
  expect_rejected(std::string("\x02\x00\x00", 3), {"truncated"});
  expect_rejected("", {"truncated"});
}

TEST(Safetensors, RejectsDataAreaShorterThanOffsets) {
  // The header promises 16 bytes of data; the file stops after 8 (a cut-off download).
  std::string bytes = one_tensor({{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}},
                                 std::string(8, '\0'));
  expect_rejected(bytes, {"outside the data area"});
}

TEST(Safetensors, RejectsHeaderLengthAtLeastFileSize) {
  std::string header = "{}";
  std::string bytes = safetensors_bytes(header, "");
  bytes[0] = 3;  // claims 3 header bytes, only 2 follow
  expect_rejected(bytes, {"truncated", "header length 3"});
  bytes[0] = static_cast<char>(bytes.size());  // claims the whole file size
  expect_rejected(bytes, {"truncated"});
}

TEST(Safetensors, RejectsAbsurdHeaderLength) {
  std::string bytes = safetensors_bytes("{}", "");
  // 0x10000000 (256 MiB) in little endian, in a 10-byte file.
  bytes[0] = bytes[1] = bytes[2] = 0;
  bytes[3] = 0x10;
  expect_rejected(bytes, {"absurd"});
  // A length near 2^64 must not wrap around into a small one.
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(0xff);
  expect_rejected(bytes, {"absurd"});
}

TEST(Safetensors, RejectsHeaderNotUtf8) {
  // A tensor name with a lone continuation byte and an overlong encoding.
  std::string header = "{\"w\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
  expect_rejected(safetensors_bytes(header, std::string(4, '\0')), {"UTF-8"});
  std::string overlong = "{\"\xc0\xaf\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
  expect_rejected(safetensors_bytes(overlong, std::string(4, '\0')), {"UTF-8"});
}

TEST(Safetensors, RejectsHeaderNotJson) {
  expect_rejected(safetensors_bytes("{\"w\": {\"dtype\": \"F32\",", ""), {"JSON"});
  expect_rejected(safetensors_bytes("not json at all", ""), {"JSON"});
}

TEST(Safetensors, RejectsHeaderNotObject) {
  expect_rejected(safetensors_bytes("[1, 2, 3]", ""), {"not a JSON object"});
  expect_rejected(safetensors_bytes("42", ""), {"not a JSON object"});
}

TEST(Safetensors, RejectsDuplicateTensorNames) {
  // Written by hand: a JSON library would merge the two keys before we could see them.
  std::string header =
      "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
      "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
      "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}";
  expect_rejected(safetensors_bytes(header, std::string(12, '\0')), {"duplicate", "'w'"});
}

TEST(Safetensors, NestedDuplicateKeysAreNotTensorNames) {
  // Only top-level keys are tensor names; a repeated key inside __metadata__ is not one.
  TempDir dir;
  std::string header =
      "{\"__metadata__\":{\"w\":\"a\",\"w\":\"b\"},"
      "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
  write_file(dir / "ok.safetensors", safetensors_bytes(header, std::string(4, '\0')));
  SafetensorsFile file(dir / "ok.safetensors");
  EXPECT_NE(file.find("w"), nullptr);
}

TEST(Safetensors, RejectsUnknownDtype) {
  expect_rejected(one_tensor({{"dtype", "F12"}, {"shape", {2}}, {"data_offsets", {0, 4}}},
                             std::string(4, '\0')),
                  {"unknown dtype", "F12", "'w'"});
}

TEST(Safetensors, RejectsOffsetsEndBeforeStart) {
  expect_rejected(one_tensor({{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {8, 4}}},
                             std::string(8, '\0')),
                  {"'w'", "end 4 < start 8"});
}

TEST(Safetensors, RejectsOffsetsOutsideDataArea) {
  expect_rejected(one_tensor({{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {8, 12}}},
                             std::string(8, '\0')),
                  {"'w'", "outside the data area"});
  // An offset so large that begin + size would wrap around 64 bits.
  uint64_t huge = ~0ull - 1;
  expect_rejected(one_tensor({{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {huge, huge}}},
                             std::string(8, '\0')),
                  {"'w'", "outside the data area"});
  expect_rejected(one_tensor({{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {-4, 0}}},
                             std::string(8, '\0')),
                  {"'w'", "data_offsets"});
}

TEST(Safetensors, RejectsOverlappingTensors) {
  json header = {{"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
                 {"b", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {4, 12}}}}};
  expect_rejected(safetensors_bytes(header.dump(), std::string(12, '\0')),
                  {"overlapping", "'a'", "'b'"});
  // Full containment of one tensor inside another, with a third in between in the sort order.
  json nested = {{"a", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}}},
                 {"b", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {4, 8}}}},
                 {"c", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {16, 20}}}}};
  expect_rejected(safetensors_bytes(nested.dump(), std::string(20, '\0')), {"overlapping"});
}

TEST(Safetensors, RejectsOffsetsThatAreNotBackToBack) {
  // safetensors' own reader refuses these: a gap, bytes before the first tensor, bytes after
  // the last (offsets that no longer describe the file, e.g. a hand-edited header).
  json gap = {{"a", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}},
              {"b", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {6, 10}}}}};
  expect_rejected(safetensors_bytes(gap.dump(), std::string(10, '\0')), {"'b'", "starts at data offset 6", "'a' ends (4)"});
  expect_rejected(one_tensor({{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {2, 6}}}, std::string(6, '\0')),
                  {"'w'", "starts at data offset 2", "begins (0)"});
  expect_rejected(one_tensor({{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}, std::string(7, '\0')),
                  {"3 bytes after the last tensor"});
}

TEST(Safetensors, RejectsByteSizeNotMatchingShape) {
  // [3] F32 is 12 bytes, the offsets span 16.
  expect_rejected(one_tensor({{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {0, 16}}},
                             std::string(16, '\0')),
                  {"'w'", "16 bytes", "12"});
  // Same element count, wrong dtype size: BF16 [4] is 8 bytes, not 16.
  expect_rejected(one_tensor({{"dtype", "BF16"}, {"shape", {4}}, {"data_offsets", {0, 16}}},
                             std::string(16, '\0')),
                  {"'w'", "shape × dtype"});
}

TEST(Safetensors, RejectsShapeProductOverflow) {
  // 2^32 · 2^32 · 4 bytes wraps to 0 in 64 bits; with data_offsets [0, 0] a wrapping
  // multiplication would accept the tensor.
  int64_t big = int64_t{1} << 32;
  expect_rejected(
      one_tensor({{"dtype", "F32"}, {"shape", {big, big}}, {"data_offsets", {0, 0}}}, ""),
      {"'w'", "overflow"});
  // 2^62 · 8 bytes overflows in the dtype factor alone.
  int64_t huge = int64_t{1} << 62;
  expect_rejected(one_tensor({{"dtype", "F64"}, {"shape", {huge}}, {"data_offsets", {0, 0}}}, ""),
                  {"'w'", "overflow"});
}

TEST(Safetensors, RejectsNegativeShapeEntry) {
  expect_rejected(one_tensor({{"dtype", "F32"}, {"shape", {-1}}, {"data_offsets", {0, 0}}}, ""),
                  {"'w'", "non-negative"});
  // Negative entries whose product is positive.
  expect_rejected(one_tensor({{"dtype", "F32"}, {"shape", {-1, -1}}, {"data_offsets", {0, 4}}},
                             std::string(4, '\0')),
                  {"'w'", "non-negative"});
  expect_rejected(one_tensor({{"dtype", "F32"}, {"shape", {1.5}}, {"data_offsets", {0, 4}}},
                             std::string(4, '\0')),
                  {"'w'", "shape"});
}

TEST(Safetensors, RejectsMalformedEntries) {
  expect_rejected(safetensors_bytes(json{{"w", 3}}.dump(), ""), {"'w'", "not an object"});
  expect_rejected(one_tensor({{"shape", {1}}, {"data_offsets", {0, 4}}}, std::string(4, '\0')),
                  {"'w'", "dtype"});
  expect_rejected(one_tensor({{"dtype", "F32"}, {"data_offsets", {0, 4}}}, std::string(4, '\0')),
                  {"'w'", "shape"});
  expect_rejected(
      one_tensor({{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0}}}, std::string(4, '\0')),
      {"'w'", "data_offsets"});
}

TEST(Safetensors, MissingFileIsIoError) {
  TempDir dir;
  expect_error([&] { SafetensorsFile file(dir / "absent.safetensors"); }, ErrorCategory::kIo,
               {"absent.safetensors"});
}

// ---- ModelFiles: single file and shards ----

std::vector<test::TensorSpec> three_tensors() {
  return {{"a", "F32", {2}, test::float_bytes({1.f, 2.f})},
          {"b", "F32", {3}, test::float_bytes({3.f, 4.f, 5.f})},
          {"c", "F32", {1}, test::float_bytes({6.f})}};
}

TEST(ModelFiles, ReadsShardsThroughIndex) {
  TempDir dir;
  auto tensors = three_tensors();
  test::write_model(dir.path(), test::tiny_qwen2_config(), tensors, /*shards=*/2);
  ModelFiles files(dir.path());
  EXPECT_EQ(files.tensor_count(), 3u);
  EXPECT_EQ(files.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(files.total_bytes(), 24u);
  const SafetensorsTensor* b = files.find("b");
  ASSERT_NE(b, nullptr);
  float values[3];
  std::memcpy(values, b->data, 12);
  EXPECT_EQ(values[0], 3.f);
  EXPECT_EQ(values[2], 5.f);
  // Round-robin: a and c in shard 1, b in shard 2.
  EXPECT_NE(files.file_of("b").find("model-00002-of-00002.safetensors"), std::string::npos);
  EXPECT_NE(files.file_of("c").find("model-00001-of-00002.safetensors"), std::string::npos);
  EXPECT_EQ(files.find("d"), nullptr);
}

TEST(ModelFiles, NoWeightsIsIoError) {
  TempDir dir;
  expect_error([&] { ModelFiles files(dir.path()); }, ErrorCategory::kIo, {"model.safetensors"});
}

TEST(ModelFiles, RejectsIndexNamingMissingShard) {
  TempDir dir;
  test::write_model(dir.path(), test::tiny_qwen2_config(), three_tensors(), 2);
  std::filesystem::remove(dir / "model-00002-of-00002.safetensors");
  expect_error([&] { ModelFiles files(dir.path()); }, ErrorCategory::kInvalidModel,
               {"model.safetensors.index.json", "model-00002-of-00002.safetensors", "missing"});
}

// A folder with both a whole model.safetensors and an index (a re-save over a sharded one):
// the whole file, as transformers loads it.
TEST(ModelFiles, AWholeFileBeforeAnIndex) {
  TempDir dir;
  test::write_model(dir.path(), test::tiny_qwen2_config(), three_tensors(), 2);
  write_file(dir / "model.safetensors", test::safetensors_file({{"w", "F32", {1}, test::float_bytes({7.f})}}));
  ModelFiles files(dir.path());
  EXPECT_EQ(files.tensor_count(), 1u);
  EXPECT_NE(files.find("w"), nullptr);
  EXPECT_EQ(files.find("a"), nullptr);
}

TEST(ModelFiles, RejectsIndexPointingToWrongShard) {
  TempDir dir;
  test::write_model(dir.path(), test::tiny_qwen2_config(), three_tensors(), 2);
  json index = json::parse(read_text_file(dir / "model.safetensors.index.json"));
  index["weight_map"]["b"] = "model-00001-of-00002.safetensors";  // b lives in shard 2
  write_file(dir / "model.safetensors.index.json", index.dump());
  expect_error([&] { ModelFiles files(dir.path()); }, ErrorCategory::kInvalidModel,
               {"model.safetensors.index.json", "'b'", "model-00001-of-00002.safetensors"});
}

TEST(ModelFiles, RejectsIndexListingAbsentTensor) {
  TempDir dir;
  test::write_model(dir.path(), test::tiny_qwen2_config(), three_tensors(), 2);
  json index = json::parse(read_text_file(dir / "model.safetensors.index.json"));
  index["weight_map"]["z"] = "model-00001-of-00002.safetensors";
  write_file(dir / "model.safetensors.index.json", index.dump());
  expect_error([&] { ModelFiles files(dir.path()); }, ErrorCategory::kInvalidModel,
               {"model.safetensors.index.json", "'z'"});
}

TEST(ModelFiles, RejectsIndexNotJson) {
  TempDir dir;
  test::write_model(dir.path(), test::tiny_qwen2_config(), three_tensors(), 2);
  write_file(dir / "model.safetensors.index.json", "{\"weight_map\": {\"a\": ");
  expect_error([&] { ModelFiles files(dir.path()); }, ErrorCategory::kInvalidModel,
               {"model.safetensors.index.json", "not valid JSON"});
  write_file(dir / "model.safetensors.index.json", "[]");
  expect_error([&] { ModelFiles files(dir.path()); }, ErrorCategory::kInvalidModel,
               {"model.safetensors.index.json", "weight_map"});
}

TEST(ModelFiles, RejectsShardOutsideFolder) {
  TempDir dir;
  test::write_model(dir.path(), test::tiny_qwen2_config(), three_tensors(), 2);
  json index = json::parse(read_text_file(dir / "model.safetensors.index.json"));
  index["weight_map"]["a"] = "../model-00001-of-00002.safetensors";
  write_file(dir / "model.safetensors.index.json", index.dump());
  expect_error([&] { ModelFiles files(dir.path()); }, ErrorCategory::kInvalidModel,
               {"model.safetensors.index.json", "'a'"});
}

TEST(ModelFiles, RejectsTensorInTwoShards) {
  TempDir dir;
  test::write_model(dir.path(), test::tiny_qwen2_config(), three_tensors(), 2);
  // Shard 2 gets a second copy of "a" (the index still maps "a" to shard 1).
  write_file(dir / "model-00002-of-00002.safetensors",
             test::safetensors_file({three_tensors()[1], three_tensors()[0]}));
  expect_error([&] { ModelFiles files(dir.path()); }, ErrorCategory::kInvalidModel,
               {"'a'", "model-0000"});
}

TEST(ModelFiles, BadShardIsNamed) {
  TempDir dir;
  test::write_model(dir.path(), test::tiny_qwen2_config(), three_tensors(), 2);
  write_file(dir / "model-00002-of-00002.safetensors", "xx");
  expect_error([&] { ModelFiles files(dir.path()); }, ErrorCategory::kInvalidModel,
               {"model-00002-of-00002.safetensors", "truncated"});
}

// The model's text files (config, tokenizer, index) are read whole: a device (a link to
// /dev/zero) or a file past the bound is refused by name, not read until memory runs out.
TEST(TextFiles, DevicesAndOverlongFilesAreRefused) {
  TempDir dir;
  std::filesystem::create_symlink("/dev/zero", dir / "config.json");
  expect_error([&] { read_text_file(dir / "config.json"); }, ErrorCategory::kIo, {"config.json", "a device"});
  write_file(dir / "small.json", std::string(20, ' '));
  EXPECT_EQ(read_text_file(dir / "small.json", 20).size(), 20u);
  expect_error([&] { read_text_file(dir / "small.json", 19); }, ErrorCategory::kIo, {"small.json", "longer than"});
  expect_error([&] { read_text_file(dir.path()); }, ErrorCategory::kIo, {"a folder"});
}

}  // namespace
}  // namespace qwenrt
