// Weights against hand-built model folders: a valid Qwen2/Qwen3 folder (single file, sharded,
// tied) loads and its views point at the bytes written for each tensor; tensors that
// disagree with config.json, are missing or are unaccounted for are refused by name.
#include <gtest/gtest.h>

#include "model/weights.h"
#include "test_util.h"

namespace qwenrt {
namespace {

using test::expect_error;
using test::json;
using test::TempDir;
using test::TensorSpec;

struct LoadedModel {
  ModelConfig config;
  std::unique_ptr<ModelFiles> files;
  std::unique_ptr<Backend> backend;
  Weights weights;
};

LoadedModel load(const std::filesystem::path& dir) {
  LoadedModel model;
  model.config = load_model_config(dir);
  model.files = std::make_unique<ModelFiles>(dir);
  model.backend = make_cpu_backend(1);
  model.weights = load_weights(model.config, *model.files, *model.backend);
  return model;
}

// The tensor `name` of `tensors` decoded as f32 (all test tensors are written as F32).
std::vector<float> written(const std::vector<TensorSpec>& tensors, const std::string& name) {
  for (const auto& tensor : tensors) {
    if (tensor.name == name) {
      std::vector<float> values(tensor.bytes.size() / 4);
      std::memcpy(values.data(), tensor.bytes.data(), tensor.bytes.size());
      return values;
    }
  }
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

void expect_view(const Tensor& view, const std::vector<TensorSpec>& tensors,
                 const std::string& name, int64_t rows, int64_t cols) {
  SCOPED_TRACE(name);
  ASSERT_NE(view.data, nullptr);
  EXPECT_EQ(view.dtype, DType::kF32);
  EXPECT_EQ(view.rows, rows);
  EXPECT_EQ(view.cols, cols);
  std::vector<float> expected = written(tensors, name);
  ASSERT_EQ(static_cast<int64_t>(expected.size()), rows * cols);
  EXPECT_EQ(std::memcmp(view.data, expected.data(), expected.size() * 4), 0);
}

void check_qwen2_views(const LoadedModel& model, const std::vector<TensorSpec>& tensors) {
  const Weights& w = model.weights;
  expect_view(w.embed_tokens, tensors, "model.embed_tokens.weight", 16, 8);
  expect_view(w.lm_head, tensors, "lm_head.weight", 16, 8);
  expect_view(w.final_norm, tensors, "model.norm.weight", 1, 8);
  ASSERT_EQ(w.layers.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    const LayerWeights& layer = w.layers[i];
    expect_view(layer.input_norm, tensors, p + "input_layernorm.weight", 1, 8);
    expect_view(layer.q_proj, tensors, p + "self_attn.q_proj.weight", 8, 8);
    expect_view(layer.k_proj, tensors, p + "self_attn.k_proj.weight", 4, 8);
    expect_view(layer.v_proj, tensors, p + "self_attn.v_proj.weight", 4, 8);
    expect_view(layer.q_bias, tensors, p + "self_attn.q_proj.bias", 1, 8);
    expect_view(layer.k_bias, tensors, p + "self_attn.k_proj.bias", 1, 4);
    expect_view(layer.v_bias, tensors, p + "self_attn.v_proj.bias", 1, 4);
    expect_view(layer.o_proj, tensors, p + "self_attn.o_proj.weight", 8, 8);
    expect_view(layer.post_attention_norm, tensors, p + "post_attention_layernorm.weight", 1, 8);
    expect_view(layer.gate_proj, tensors, p + "mlp.gate_proj.weight", 12, 8);
    expect_view(layer.up_proj, tensors, p + "mlp.up_proj.weight", 12, 8);
    expect_view(layer.down_proj, tensors, p + "mlp.down_proj.weight", 8, 12);
    EXPECT_EQ(layer.q_norm.data, nullptr);
    EXPECT_EQ(layer.o_bias.data, nullptr);
  }
}

TEST(Weights, LoadsHandBuiltQwen2Folder) {
  TempDir dir;
  json config = test::tiny_qwen2_config();
  auto tensors = test::qwen_tensors(config);
  test::write_model(dir.path(), config, tensors);
  LoadedModel model = load(dir.path());
  check_qwen2_views(model, tensors);
}

TEST(Weights, LoadsShardedQwen2Folder) {
  TempDir dir;
  json config = test::tiny_qwen2_config();
  auto tensors = test::qwen_tensors(config);
  test::write_model(dir.path(), config, tensors, /*shards=*/3);
  ASSERT_TRUE(std::filesystem::exists(dir / "model-00003-of-00003.safetensors"));
  LoadedModel model = load(dir.path());
  EXPECT_EQ(model.files->tensor_count(), tensors.size());
  check_qwen2_views(model, tensors);
}

TEST(Weights, TiedEmbeddingsShareTheMatrix) {
  TempDir dir;
  json config = test::tiny_qwen2_config();
  config["tie_word_embeddings"] = true;
  auto tensors = test::qwen_tensors(config);  // no lm_head.weight
  test::write_model(dir.path(), config, tensors);
  LoadedModel model = load(dir.path());
  EXPECT_EQ(model.weights.lm_head.data, model.weights.embed_tokens.data);
  expect_view(model.weights.lm_head, tensors, "model.embed_tokens.weight", 16, 8);
}

TEST(Weights, LoadsQwen3FolderWithBf16Matrices) {
  TempDir dir;
  json config = test::tiny_qwen2_config();
  config["architectures"] = {"Qwen3ForCausalLM"};
  config["head_dim"] = 6;
  auto tensors = test::qwen_tensors(config);
  // Store q_proj as BF16: the CPU backend uses matrices in place in their own dtype.
  auto q = test::find_tensor(tensors, "model.layers.1.self_attn.q_proj.weight");
  std::vector<float> q_values = written(tensors, q->name);
  std::string bf16_bytes;
  for (float value : q_values) {
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    uint16_t half = static_cast<uint16_t>(bits >> 16);  // truncation: only the bytes are compared
    bf16_bytes.append(reinterpret_cast<const char*>(&half), 2);
  }
  q->dtype = "BF16";
  q->bytes = bf16_bytes;
  test::write_model(dir.path(), config, tensors);
  LoadedModel model = load(dir.path());
  const LayerWeights& layer = model.weights.layers[1];
  EXPECT_EQ(layer.q_proj.dtype, DType::kBF16);
  EXPECT_EQ(layer.q_proj.rows, 12);
  EXPECT_EQ(std::memcmp(layer.q_proj.data, bf16_bytes.data(), bf16_bytes.size()), 0);
  expect_view(layer.q_norm, tensors, "model.layers.1.self_attn.q_norm.weight", 1, 6);
  expect_view(layer.k_norm, tensors, "model.layers.1.self_attn.k_norm.weight", 1, 6);
  expect_view(layer.o_proj, tensors, "model.layers.1.self_attn.o_proj.weight", 8, 12);
  EXPECT_EQ(layer.q_bias.data, nullptr);
}

TEST(Weights, LoadsQwen3FolderWithAttentionBias) {
  TempDir dir;
  json config = test::tiny_qwen2_config();
  config["architectures"] = {"Qwen3ForCausalLM"};
  config["head_dim"] = 4;
  config["attention_bias"] = true;
  auto tensors = test::qwen_tensors(config);
  test::write_model(dir.path(), config, tensors, 2);
  LoadedModel model = load(dir.path());
  const LayerWeights& layer = model.weights.layers[0];
  expect_view(layer.q_bias, tensors, "model.layers.0.self_attn.q_proj.bias", 1, 8);
  expect_view(layer.k_bias, tensors, "model.layers.0.self_attn.k_proj.bias", 1, 4);
  expect_view(layer.o_bias, tensors, "model.layers.0.self_attn.o_proj.bias", 1, 8);
  expect_view(layer.q_norm, tensors, "model.layers.0.self_attn.q_norm.weight", 1, 4);
}

TEST(Weights, ProgressReachesTotal) {
  TempDir dir;
  json config = test::tiny_qwen2_config();
  auto tensors = test::qwen_tensors(config);
  test::write_model(dir.path(), config, tensors);
  ModelConfig parsed = load_model_config(dir.path());
  ModelFiles files(dir.path());
  auto backend = make_cpu_backend(1);
  uint64_t expected_total = 0;
  for (const auto& tensor : tensors) expected_total += tensor.bytes.size();
  uint64_t last_done = 0, calls = 0;
  load_weights(parsed, files, *backend, [&](uint64_t done, uint64_t total) {
    EXPECT_EQ(total, expected_total);
    EXPECT_GT(done, last_done);  // strictly increasing
    last_done = done;
    ++calls;
  });
  EXPECT_EQ(calls, tensors.size());
  EXPECT_EQ(last_done, expected_total);
}

TEST(Weights, VectorsInNonF32AreConverted) {
  // Norm weights stored as BF16 must come out as f32 values for the CPU ops.
  TempDir dir;
  json config = test::tiny_qwen2_config();
  auto tensors = test::qwen_tensors(config);
  auto norm = test::find_tensor(tensors, "model.norm.weight");
  std::vector<uint16_t> halves = {0x3f80, 0xc000, 0x4040, 0x3f00, 0x0000, 0x8000, 0x4110, 0xbe80};
  std::vector<float> expected = {1.f, -2.f, 3.f, 0.5f, 0.f, -0.f, 9.f, -0.25f};
  norm->dtype = "BF16";
  norm->bytes.assign(reinterpret_cast<const char*>(halves.data()), 16);
  test::write_model(dir.path(), config, tensors);
  LoadedModel model = load(dir.path());
  const Tensor& view = model.weights.final_norm;
  ASSERT_EQ(view.dtype, DType::kF32);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(view.as<float>()[i], expected[i]) << i;
}

// Builds a Qwen2 folder after `mutate` edits the tensor list, and expects loading to fail.
template <typename Mutate>
void expect_weights_rejected(Mutate mutate, const std::vector<std::string>& needles,
                             json config = test::tiny_qwen2_config(), int shards = 1) {
  TempDir dir;
  auto tensors = test::qwen_tensors(config);
  mutate(tensors);
  test::write_model(dir.path(), config, tensors, shards);
  ModelConfig parsed = load_model_config(dir.path());
  ModelFiles files(dir.path());
  expect_error([&] { validate_weights(parsed, files); }, ErrorCategory::kInvalidModel, needles);
}

TEST(Weights, RejectsShapeDisagreeingWithConfig) {
  // q_proj with 6 rows instead of heads · head_dim = 8.
  expect_weights_rejected(
      [](std::vector<TensorSpec>& tensors) {
        auto q = test::find_tensor(tensors, "model.layers.1.self_attn.q_proj.weight");
        q->shape = {6, 8};
        q->bytes.resize(6 * 8 * 4);
      },
      {"model.safetensors", "model.layers.1.self_attn.q_proj.weight", "[6, 8]", "[8, 8]"});
  // Sharded: the shard holding the tensor is named.
  expect_weights_rejected(
      [](std::vector<TensorSpec>& tensors) {
        auto k = test::find_tensor(tensors, "model.layers.0.self_attn.k_proj.weight");
        k->shape = {8, 4};
      },
      {"model-0000", "model.layers.0.self_attn.k_proj.weight", "[8, 4]", "[4, 8]"},
      test::tiny_qwen2_config(), 3);
  // Transposed down_proj: same element count, wrong layout.
  expect_weights_rejected(
      [](std::vector<TensorSpec>& tensors) {
        test::find_tensor(tensors, "model.layers.0.mlp.down_proj.weight")->shape = {12, 8};
      },
      {"model.safetensors", "model.layers.0.mlp.down_proj.weight", "[12, 8]"});
  // A norm weight written as [1, hidden] instead of [hidden].
  expect_weights_rejected(
      [](std::vector<TensorSpec>& tensors) {
        test::find_tensor(tensors, "model.norm.weight")->shape = {1, 8};
      },
      {"model.safetensors", "model.norm.weight", "shape"});
}

TEST(Weights, RejectsNonFloatDtype) {
  expect_weights_rejected(
      [](std::vector<TensorSpec>& tensors) {
        auto k = test::find_tensor(tensors, "model.layers.0.self_attn.k_proj.weight");
        k->dtype = "I8";
        k->bytes.resize(4 * 8);
      },
      {"model.safetensors", "model.layers.0.self_attn.k_proj.weight", "I8"});
}

TEST(Weights, RejectsMissingTensor) {
  expect_weights_rejected(
      [](std::vector<TensorSpec>& tensors) {
        tensors.erase(test::find_tensor(tensors, "model.layers.1.mlp.up_proj.weight"));
      },
      {"model.layers.1.mlp.up_proj.weight", "missing", "model.safetensors"});
  // Sharded: the index, which lists the tensors, is named.
  expect_weights_rejected(
      [](std::vector<TensorSpec>& tensors) {
        tensors.erase(test::find_tensor(tensors, "model.layers.0.self_attn.o_proj.weight"));
      },
      {"model.layers.0.self_attn.o_proj.weight", "missing", "model.safetensors.index.json"},
      test::tiny_qwen2_config(), 3);
  expect_weights_rejected(
      [](std::vector<TensorSpec>& tensors) {
        tensors.erase(test::find_tensor(tensors, "model.layers.0.self_attn.v_proj.bias"));
      },
      {"model.layers.0.self_attn.v_proj.bias", "missing"});
}

TEST(Weights, RejectsMissingLmHeadWhenUntied) {
  expect_weights_rejected(
      [](std::vector<TensorSpec>& tensors) {
        tensors.erase(test::find_tensor(tensors, "lm_head.weight"));
      },
      {"model.safetensors", "lm_head.weight", "missing", "tie_word_embeddings"});
}

TEST(Weights, RejectsUnexpectedExtraTensor) {
  // Qwen2's o_proj has no bias: a checkpoint with one belongs to another model.
  expect_weights_rejected(
      [](std::vector<TensorSpec>& tensors) {
        tensors.push_back({"model.layers.0.self_attn.o_proj.bias",
                           "F32",
                           {8},
                           test::float_bytes(std::vector<float>(8, 1.f))});
      },
      {"model.safetensors", "unexpected tensor", "model.layers.0.self_attn.o_proj.bias"});
  // A layer beyond num_hidden_layers.
  expect_weights_rejected(
      [](std::vector<TensorSpec>& tensors) {
        tensors.push_back({"model.layers.2.input_layernorm.weight",
                           "F32",
                           {8},
                           test::float_bytes(std::vector<float>(8, 1.f))});
      },
      {"model.safetensors", "unexpected tensor", "model.layers.2.input_layernorm.weight"});
  // Qwen3 without attention_bias: q_norm present but a q_proj.bias too.
  json qwen3 = test::tiny_qwen2_config();
  qwen3["architectures"] = {"Qwen3ForCausalLM"};
  qwen3["head_dim"] = 4;
  expect_weights_rejected(
      [](std::vector<TensorSpec>& tensors) {
        tensors.push_back({"model.layers.1.self_attn.q_proj.bias",
                           "F32",
                           {8},
                           test::float_bytes(std::vector<float>(8, 1.f))});
      },
      {"unexpected tensor", "model.layers.1.self_attn.q_proj.bias"}, qwen3);
}

TEST(Weights, IgnoresHarmlessExtras) {
  // Old checkpoints carry rotary inv_freq buffers; tied ones sometimes still ship lm_head.
  TempDir dir;
  json config = test::tiny_qwen2_config();
  config["tie_word_embeddings"] = true;
  auto tensors = test::qwen_tensors(config);
  tensors.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq",
                     "F32",
                     {2},
                     test::float_bytes({1.f, 0.01f})});
  tensors.push_back({"lm_head.weight", "F32", {16, 8}, test::float_bytes(std::vector<float>(128))});
  test::write_model(dir.path(), config, tensors);
  LoadedModel model = load(dir.path());
  EXPECT_EQ(model.weights.lm_head.data, model.weights.embed_tokens.data);
}

}  // namespace
}  // namespace qwenrt
