// ModelConfig: the immutable description of a Qwen checkpoint, read from a Hugging Face
// model folder's config.json (+ generation_config.json). Every field is validated on load;
// runtime choices (device, dtype, context) live in EngineOptions (qwenrt/engine.h), not here.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace qwenrt {

enum class Architecture {
  kQwen2,  // Qwen2ForCausalLM: Qwen1.5, Qwen2, Qwen2.5 (q/k/v bias)
  kQwen3,  // Qwen3ForCausalLM: per-head q/k RMSNorm, explicit head_dim
  kQwenV1, // QWenLMHeadModel: the original Qwen (fused c_attn, dynamic NTK, logn)
};

enum class RopeType { kDefault, kLinear, kYarn };

struct RopeConfig {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;                 // base of the inverse frequencies
  double factor = 1.0;                    // linear / YaRN context-extension factor
  int original_max_position_embeddings = 0;  // YaRN: pre-extension context length
  std::optional<double> attention_factor;    // YaRN: cos/sin multiplier (derived if absent)
  std::optional<double> mscale, mscale_all_dim;
  double beta_fast = 32.0;  // YaRN ramp bounds, in rotations
  double beta_slow = 1.0;
  bool truncate = true;     // YaRN: round the correction range to whole dimensions
};

struct ModelConfig {
  Architecture architecture = Architecture::kQwen2;
  std::string architecture_name;  // config.json "architectures"[0]

  int hidden_size = 0;            // model width
  int intermediate_size = 0;      // MLP width
  int num_layers = 0;
  int num_heads = 0;              // query heads
  int num_kv_heads = 0;           // key/value heads (GQA groups)
  int head_dim = 0;               // per-head width (Qwen3: explicit; else hidden/heads)
  int vocab_size = 0;             // rows of the embedding / lm_head
  double rms_norm_eps = 1e-6;
  int max_position_embeddings = 0;
  bool tie_word_embeddings = false;  // lm_head shares the embedding matrix
  bool attention_bias = false;       // q/k/v projections carry a bias (Qwen2: always)
  bool qk_norm = false;              // per-head RMSNorm on q and k before RoPE (Qwen3)
  bool output_mlp_bias = false;      // the attention output and the MLP's three products carry
                                     // biases (the original Qwen with no_bias false)
  DType dtype = DType::kBF16;        // torch_dtype/dtype of the checkpoint
  RopeConfig rope;
  // Per layer: 0 for full causal attention, else the sliding-window length in tokens.
  std::vector<int> layer_sliding_window;

  int bos_token_id = -1;             // -1: none
  std::vector<int> eos_token_ids;    // generation_config.json, else config.json

  // Recommended sampling defaults from generation_config.json (absent: not given). They apply
  // only when do_sample is true, as in transformers; otherwise decoding is greedy.
  bool default_do_sample = false;
  std::optional<float> default_temperature, default_top_p, default_repetition_penalty, default_min_p;
  std::optional<int> default_top_k;

  // The original Qwen (QWenLMHeadModel) only; off for Qwen2/3.
  int seq_length = 0;            // training length: dynamic NTK and logn act past it
  bool use_dynamic_ntk = false;  // RoPE base × alpha^(d/(d-2)), alpha fixed per sequence
  bool use_logn_attn = false;    // queries at p + 1 > seq_length × log(p+1)/log(seq_length)
  std::string chat_format;       // generation_config.json: "chatml" (Chat models) or "raw"
  // generation_config.json's stop_words_ids: once the context ends with one of these id
  // sequences, the original's generate() forces eos_token_ids[0] next (its
  // StopWordsLogitsProcessor). Entries equal to [eos] are left out, as there.
  std::vector<std::vector<int>> stop_words_ids;

  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }
};

// Reads and validates <dir>/config.json and, when present, <dir>/generation_config.json.
// Throws Error(kInvalidModel / kUnsupported / kIo) naming the file and field.
ModelConfig load_model_config(const std::filesystem::path& model_dir);

// Parses config.json text (and optional generation_config.json text); `source` names the
// file in error messages.
ModelConfig parse_model_config(const std::string& config_json, const std::string& source,
                               const std::string* generation_config_json = nullptr);

// RoPE inverse frequencies [head_dim / 2] in fp32 and the cos/sin multiplier, computed as
// transformers does (fp32 powers; YaRN blend of interpolated and extrapolated frequencies).
struct RopeTables {
  std::vector<float> inv_freq;
  float attention_scaling = 1.f;
};
// `ntk_alpha_index` picks the dynamic-NTK alpha (v1): alpha = 2^(index+1) - 1.
RopeTables compute_rope_tables(const ModelConfig& config, int ntk_alpha_index = 0);

// Dynamic NTK (v1, use_dynamic_ntk): the alpha the original computes for a forward pass over
// a sequence of `length` tokens, max(2^ceil(log2(length / seq_length) + 1) - 1, 1), as the
// index above (0: alpha 1, the base unchanged). Always 0 without dynamic NTK.
int ntk_alpha_index(const ModelConfig& config, int length);

// The original's logn table covers positions below this, so its models' context stops here.
constexpr int kLognMaxContext = 32767;

// The longest context the model defines: max_position_embeddings, and for the original Qwen
// with logn attention no more than its table covers.
inline int model_context_limit(const ModelConfig& config) {
  return config.use_logn_attn && config.max_position_embeddings > kLognMaxContext
             ? kLognMaxContext
             : config.max_position_embeddings;
}

}  // namespace qwenrt
