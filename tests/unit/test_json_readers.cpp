// Finding F1 of the robustness review, against the model-file readers: a JSON number beyond
// a double (1e400) made the JSON library throw its own out-of-range exception, which the
// readers did not catch, so the error lost the file name. Each reader must now say which
// file is at fault, in a qwenrt::Error.
#include <gtest/gtest.h>

#include <filesystem>

#include "model/config.h"
#include "model/safetensors.h"
#include "test_util.h"

namespace qwenrt {
namespace {

using test::expect_error;
using test::safetensors_bytes;
using test::TempDir;
using test::write_file;

TEST(JsonReaders, ConfigWithHugeNumberNamesTheFile) {
  expect_error([] { parse_model_config("3E333", "config.json"); }, ErrorCategory::kInvalidModel,
               {"config.json: ", "number overflow"});
  expect_error([] { parse_model_config("{\"architectures\":[\"Qwen2ForCausalLM\"],\"x\":1e400}", "config.json"); },
               ErrorCategory::kInvalidModel, {"config.json: ", "number overflow"});
  const std::string config =
      "{\"architectures\":[\"Qwen2ForCausalLM\"],\"hidden_size\":8,\"intermediate_size\":8,"
      "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"vocab_size\":8}";
  const std::string generation = "{\"temperature\": 1e400}";
  expect_error([&] { parse_model_config(config, "config.json", &generation); }, ErrorCategory::kInvalidModel,
               {"generation_config.json: ", "number overflow"});
}

TEST(JsonReaders, SafetensorsHeaderAndIndexWithHugeNumberNameTheFile) {
  TempDir dir;
  write_file(dir / "model.safetensors",
             safetensors_bytes("{\"w\":{\"dtype\":\"F32\",\"shape\":[1e400],\"data_offsets\":[0,4]}}", "abcd"));
  expect_error([&] { SafetensorsFile file(dir / "model.safetensors"); }, ErrorCategory::kInvalidModel,
               {"model.safetensors: header: ", "number overflow"});
  std::filesystem::remove(dir / "model.safetensors");  // a whole file would be read before an index
  write_file(dir / "model.safetensors.index.json", "{\"metadata\":{\"total_size\":1e400},\"weight_map\":{}}");
  expect_error([&] { ModelFiles files(dir.path()); }, ErrorCategory::kInvalidModel,
               {"model.safetensors.index.json: ", "number overflow"});
}

}  // namespace
}  // namespace qwenrt
