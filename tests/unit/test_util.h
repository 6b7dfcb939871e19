// Helpers for unit tests: a self-deleting temporary folder, a safetensors writer that
// lays out the bytes itself (8-byte little-endian header length, JSON header, data), a
// tiny Qwen model folder builder, and an assertion for qwenrt::Error. Nothing here uses
// the code under test to produce expected values.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"

namespace qwenrt::test {

using nlohmann::json;

// A fresh folder under the system temp directory, removed (with its contents) on destruction.
class TempDir {
 public:
  TempDir() {
    std::random_device device;
    std::mt19937_64 rng(device());
    auto base = std::filesystem::temp_directory_path();
    for (;;) {
      path_ = base / ("qwenrt-test-" + std::to_string(rng()));
      if (std::filesystem::create_directory(path_)) break;
    }
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

// Raw safetensors bytes: little-endian u64 header length, the header text as given, data.
inline std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string bytes(8, '\0');
  uint64_t length = header.size();
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  return bytes + header + data;
}

// One tensor to write: its data is given as raw bytes (already in `dtype`).
struct TensorSpec {
  std::string name;
  std::string dtype;  // safetensors spelling: "F32", "BF16", "F16", "I8", ...
  std::vector<int64_t> shape;
  std::string bytes;
};

inline int64_t numel(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

inline std::string float_bytes(const std::vector<float>& values) {
  std::string bytes(values.size() * 4, '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// The header JSON of `tensors` laid out back to back in order.
inline json safetensors_header(const std::vector<TensorSpec>& tensors) {
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& tensor : tensors) {
    header[tensor.name] = {{"dtype", tensor.dtype},
                           {"shape", tensor.shape},
                           {"data_offsets", {offset, offset + tensor.bytes.size()}}};
    offset += tensor.bytes.size();
  }
  return header;
}

inline std::string safetensors_file(const std::vector<TensorSpec>& tensors) {
  std::string data;
  for (const auto& tensor : tensors) data += tensor.bytes;
  return safetensors_bytes(safetensors_header(tensors).dump(), data);
}

// A tiny Qwen2 config.json: hidden 8, 2 heads of 4, 1 KV head, 2 layers, vocab 16, untied.
inline json tiny_qwen2_config() {
  return json{{"architectures", {"Qwen2ForCausalLM"}},
              {"hidden_size", 8},
              {"intermediate_size", 12},
              {"num_hidden_layers", 2},
              {"num_attention_heads", 2},
              {"num_key_value_heads", 1},
              {"vocab_size", 16},
              {"rms_norm_eps", 1e-6},
              {"max_position_embeddings", 64},
              {"rope_theta", 10000.0},
              {"tie_word_embeddings", false},
              {"hidden_act", "silu"},
              {"torch_dtype", "float32"},
              {"bos_token_id", 14},
              {"eos_token_id", 15}};
}

// Values that identify a tensor: element e of the tensor with seed s is s + e / 1024
// (exact in f32), so a view pointing at the wrong tensor or offset is detectable.
inline std::vector<float> marker_values(int64_t count, float seed) {
  std::vector<float> values(static_cast<size_t>(count));
  for (int64_t e = 0; e < count; ++e) values[e] = seed + static_cast<float>(e) / 1024.f;
  return values;
}

// Every tensor a Qwen2/Qwen3 checkpoint of `config` holds, per QWEN.md §Tensor names,
// as F32 marker values. Written out independently of the loader's own name list.
inline std::vector<TensorSpec> qwen_tensors(const json& config) {
  const bool qwen3 = config["architectures"][0] == "Qwen3ForCausalLM";
  const int64_t hidden = config["hidden_size"], inter = config["intermediate_size"];
  const int64_t heads = config["num_attention_heads"], kv_heads = config["num_key_value_heads"];
  const int64_t vocab = config["vocab_size"];
  const int64_t head_dim =
      config.contains("head_dim") ? config["head_dim"].get<int64_t>() : hidden / heads;
  const int layers = config["num_hidden_layers"];
  std::vector<TensorSpec> tensors;
  float seed = 1.f;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    tensors.push_back({name, "F32", shape, float_bytes(marker_values(numel(shape), seed))});
    seed += 1.f;
  };
  add("model.embed_tokens.weight", {vocab, hidden});
  for (int i = 0; i < layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {hidden});
    add(p + "self_attn.q_proj.weight", {heads * head_dim, hidden});
    add(p + "self_attn.k_proj.weight", {kv_heads * head_dim, hidden});
    add(p + "self_attn.v_proj.weight", {kv_heads * head_dim, hidden});
    if (!qwen3) {
      add(p + "self_attn.q_proj.bias", {heads * head_dim});
      add(p + "self_attn.k_proj.bias", {kv_heads * head_dim});
      add(p + "self_attn.v_proj.bias", {kv_heads * head_dim});
    } else {
      if (config.value("attention_bias", false)) {
        add(p + "self_attn.q_proj.bias", {heads * head_dim});
        add(p + "self_attn.k_proj.bias", {kv_heads * head_dim});
        add(p + "self_attn.v_proj.bias", {kv_heads * head_dim});
        add(p + "self_attn.o_proj.bias", {hidden});  // Qwen3's o_proj follows attention_bias
      }
      add(p + "self_attn.q_norm.weight", {head_dim});
      add(p + "self_attn.k_norm.weight", {head_dim});
    }
    add(p + "self_attn.o_proj.weight", {hidden, heads * head_dim});
    add(p + "post_attention_layernorm.weight", {hidden});
    add(p + "mlp.gate_proj.weight", {inter, hidden});
    add(p + "mlp.up_proj.weight", {inter, hidden});
    add(p + "mlp.down_proj.weight", {hidden, inter});
  }
  add("model.norm.weight", {hidden});
  if (!config.value("tie_word_embeddings", false)) add("lm_head.weight", {vocab, hidden});
  return tensors;
}

inline std::vector<TensorSpec>::iterator find_tensor(std::vector<TensorSpec>& tensors,
                                                     const std::string& name) {
  for (auto it = tensors.begin(); it != tensors.end(); ++it) {
    if (it->name == name) return it;
  }
  ADD_FAILURE() << "no tensor " << name;
  return tensors.end();
}

// Writes config.json and the tensors: one model.safetensors when shards == 1, else
// `shards` files (round-robin) and model.safetensors.index.json.
inline void write_model(const std::filesystem::path& dir, const json& config,
                        const std::vector<TensorSpec>& tensors, int shards = 1) {
  write_file(dir / "config.json", config.dump(2));
  if (shards == 1) {
    write_file(dir / "model.safetensors", safetensors_file(tensors));
    return;
  }
  std::vector<std::vector<TensorSpec>> parts(shards);
  json weight_map = json::object();
  for (size_t i = 0; i < tensors.size(); ++i) {
    int shard = static_cast<int>(i % shards);
    parts[shard].push_back(tensors[i]);
  }
  for (int s = 0; s < shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", s + 1, shards);
    write_file(dir / name, safetensors_file(parts[s]));
    for (const auto& tensor : parts[s]) weight_map[tensor.name] = name;
  }
  json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
  write_file(dir / "model.safetensors.index.json", index.dump(2));
}

// Runs `body`, which must throw qwenrt::Error of `category` whose message contains every
// one of `needles` (file names, tensor names, the keyword describing the problem).
template <typename Body>
void expect_error(Body&& body, ErrorCategory category, const std::vector<std::string>& needles) {
  try {
    body();
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), category)
        << "got " << error_category_name(error.category()) << ": " << error.what();
    std::string message = error.what();
    for (const auto& needle : needles) {
      EXPECT_NE(message.find(needle), std::string::npos)
          << "message does not mention '" << needle << "': " << message;
    }
    return;
  } catch (const std::exception& other) {
    ADD_FAILURE() << "expected qwenrt::Error, got another exception: " << other.what();
    return;
  }
  ADD_FAILURE() << "expected qwenrt::Error mentioning '" << (needles.empty() ? "" : needles[0])
                << "', nothing was thrown";
}

}  // namespace qwenrt::test
