#include "model/presets.h"

#include "core/error.h"

namespace qwenrt {
namespace {

struct Shape {
  const char* name;
  Architecture architecture;
  int layers, hidden, heads, kv_heads, head_dim, intermediate, vocab;
  bool tied;
};

// From the models' config.json files.
constexpr Shape kShapes[] = {
    // Qwen-7B (the original Qwen): intermediate is the MLP width, half of config.json's 22016.
    {"qwen-7b", Architecture::kQwenV1, 32, 4096, 32, 32, 128, 11008, 151936, false},
    {"qwen2.5-0.5b", Architecture::kQwen2, 24, 896, 14, 2, 64, 4864, 151936, true},
    {"qwen2.5-1.5b", Architecture::kQwen2, 28, 1536, 12, 2, 128, 8960, 151936, true},
    {"qwen2.5-3b", Architecture::kQwen2, 36, 2048, 16, 2, 128, 11008, 151936, true},
    {"qwen2.5-7b", Architecture::kQwen2, 28, 3584, 28, 4, 128, 18944, 152064, false},
    {"qwen2.5-14b", Architecture::kQwen2, 48, 5120, 40, 8, 128, 13824, 152064, false},
    {"qwen2.5-32b", Architecture::kQwen2, 64, 5120, 40, 8, 128, 27648, 152064, false},
    {"qwen2.5-72b", Architecture::kQwen2, 80, 8192, 64, 8, 128, 29568, 152064, false},
    {"qwen3-0.6b", Architecture::kQwen3, 28, 1024, 16, 8, 128, 3072, 151936, true},
    {"qwen3-1.7b", Architecture::kQwen3, 28, 2048, 16, 8, 128, 6144, 151936, true},
    {"qwen3-4b", Architecture::kQwen3, 36, 2560, 32, 8, 128, 9728, 151936, true},
    {"qwen3-8b", Architecture::kQwen3, 36, 4096, 32, 8, 128, 12288, 151936, false},
    {"qwen3-14b", Architecture::kQwen3, 40, 5120, 40, 8, 128, 17408, 151936, false},
    {"qwen3-32b", Architecture::kQwen3, 64, 5120, 64, 8, 128, 25600, 151936, false},
};

}  // namespace

std::vector<std::string> synthetic_names() {
  std::vector<std::string> names;
  for (const Shape& shape : kShapes) names.emplace_back(shape.name);
  return names;
}

ModelConfig synthetic_config(const std::string& name) {
  for (const Shape& shape : kShapes) {
    if (name != shape.name) continue;
    ModelConfig config;
    config.architecture = shape.architecture;
    config.architecture_name = shape.architecture == Architecture::kQwen2 ? "Qwen2ForCausalLM" : "Qwen3ForCausalLM";
    config.num_layers = shape.layers;
    config.hidden_size = shape.hidden;
    config.num_heads = shape.heads;
    config.num_kv_heads = shape.kv_heads;
    config.head_dim = shape.head_dim;
    config.intermediate_size = shape.intermediate;
    config.vocab_size = shape.vocab;
    config.tie_word_embeddings = shape.tied;
    config.attention_bias = shape.architecture == Architecture::kQwen2;
    config.qk_norm = shape.architecture == Architecture::kQwen3;
    config.rms_norm_eps = 1e-6;
    config.max_position_embeddings = shape.architecture == Architecture::kQwen2 ? 32768 : 40960;
    config.rope.theta = 1000000.0;
    config.layer_sliding_window.assign(shape.layers, 0);
    if (shape.architecture == Architecture::kQwenV1) {
      // Qwen-7B's config.json: fused c_attn with a bias, RoPE base 1e4, NTK and logn past 8192.
      config.architecture_name = "QWenLMHeadModel";
      config.attention_bias = true;
      config.rope.theta = 10000.0;
      config.seq_length = 8192;
      config.use_dynamic_ntk = true;
      config.use_logn_attn = true;
    }
    return config;
  }
  std::string names;
  for (const auto& known : synthetic_names()) names += (names.empty() ? "" : ", ") + known;
  throw Error(ErrorCategory::kInvalidArgument, "unknown synthetic model '" + name + "' (known: " + names + ")");
}

}  // namespace qwenrt
