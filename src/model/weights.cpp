#include "model/weights.h"

#include <cmath>
#include <set>

#include "core/error.h"

namespace qwenrt {
namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

using TensorVisitor = std::function<void(const std::string&, std::vector<int64_t>, Tensor*)>;

// The original Qwen's released names. c_attn's rows are q | k | v and its bias likewise: it is
// visited into q_proj/q_bias and then split into views of the one tensor (no copy). w2 is the
// gate (silu is applied to it), w1 the up projection.
void for_each_expected_v1(const ModelConfig& config, Weights* weights, const TensorVisitor& visit) {
  const int64_t hidden = config.hidden_size, inter = config.intermediate_size;
  const int64_t q_dim = config.q_dim(), kv_dim = config.kv_dim();
  LayerWeights scratch;
  auto field = [&](Tensor& tensor) { return weights ? &tensor : nullptr; };
  visit("transformer.wte.weight", {config.vocab_size, hidden}, weights ? &weights->embed_tokens : nullptr);
  for (int i = 0; i < config.num_layers; ++i) {
    LayerWeights& layer = weights ? weights->layers[i] : scratch;
    const std::string prefix = "transformer.h." + std::to_string(i) + ".";
    visit(prefix + "ln_1.weight", {hidden}, field(layer.input_norm));
    visit(prefix + "attn.c_attn.weight", {q_dim + 2 * kv_dim, hidden}, field(layer.q_proj));
    visit(prefix + "attn.c_attn.bias", {q_dim + 2 * kv_dim}, field(layer.q_bias));
    if (weights != nullptr) {
      const Tensor qkv = layer.q_proj, bias = layer.q_bias;
      layer.q_proj = qkv.row_slice(0, q_dim);
      layer.k_proj = qkv.row_slice(q_dim, kv_dim);
      layer.v_proj = qkv.row_slice(q_dim + kv_dim, kv_dim);
      auto bias_part = [&](int64_t first, int64_t count) {
        return Tensor{static_cast<char*>(bias.data) + first * dtype_size(bias.dtype), bias.dtype, 1, count};
      };
      layer.q_bias = bias_part(0, q_dim);
      layer.k_bias = bias_part(q_dim, kv_dim);
      layer.v_bias = bias_part(q_dim + kv_dim, kv_dim);
    }
    visit(prefix + "attn.c_proj.weight", {hidden, q_dim}, field(layer.o_proj));
    visit(prefix + "ln_2.weight", {hidden}, field(layer.post_attention_norm));
    visit(prefix + "mlp.w2.weight", {inter, hidden}, field(layer.gate_proj));
    visit(prefix + "mlp.w1.weight", {inter, hidden}, field(layer.up_proj));
    visit(prefix + "mlp.c_proj.weight", {hidden, inter}, field(layer.down_proj));
    if (config.output_mlp_bias) {
      visit(prefix + "attn.c_proj.bias", {hidden}, field(layer.o_bias));
      visit(prefix + "mlp.w2.bias", {inter}, field(layer.gate_bias));
      visit(prefix + "mlp.w1.bias", {inter}, field(layer.up_bias));
      visit(prefix + "mlp.c_proj.bias", {hidden}, field(layer.down_bias));
    }
  }
  visit("transformer.ln_f.weight", {hidden}, weights ? &weights->final_norm : nullptr);
  if (!config.tie_word_embeddings) {
    visit("lm_head.weight", {config.vocab_size, hidden}, weights ? &weights->lm_head : nullptr);
  }
}

// Visits every tensor the config expects: (name, shape, destination in `weights`).
void for_each_expected(const ModelConfig& config, Weights* weights, const TensorVisitor& visit) {
  if (config.architecture == Architecture::kQwenV1) return for_each_expected_v1(config, weights, visit);
  const int64_t hidden = config.hidden_size;
  const int64_t inter = config.intermediate_size;
  const int64_t q_dim = config.q_dim();
  const int64_t kv_dim = config.kv_dim();
  auto field = [&](Tensor& tensor) { return weights ? &tensor : nullptr; };
  LayerWeights scratch;
  visit("model.embed_tokens.weight", {config.vocab_size, hidden},
        weights ? &weights->embed_tokens : nullptr);
  for (int i = 0; i < config.num_layers; ++i) {
    LayerWeights& layer = weights ? weights->layers[i] : scratch;
    std::string prefix = "model.layers." + std::to_string(i) + ".";
    visit(prefix + "input_layernorm.weight", {hidden}, field(layer.input_norm));
    visit(prefix + "self_attn.q_proj.weight", {q_dim, hidden}, field(layer.q_proj));
    visit(prefix + "self_attn.k_proj.weight", {kv_dim, hidden}, field(layer.k_proj));
    visit(prefix + "self_attn.v_proj.weight", {kv_dim, hidden}, field(layer.v_proj));
    if (config.attention_bias) {
      visit(prefix + "self_attn.q_proj.bias", {q_dim}, field(layer.q_bias));
      visit(prefix + "self_attn.k_proj.bias", {kv_dim}, field(layer.k_bias));
      visit(prefix + "self_attn.v_proj.bias", {kv_dim}, field(layer.v_bias));
    }
    if (config.qk_norm) {
      visit(prefix + "self_attn.q_norm.weight", {config.head_dim}, field(layer.q_norm));
      visit(prefix + "self_attn.k_norm.weight", {config.head_dim}, field(layer.k_norm));
    }
    visit(prefix + "self_attn.o_proj.weight", {hidden, q_dim}, field(layer.o_proj));
    if (config.attention_bias && config.architecture == Architecture::kQwen3) {
      visit(prefix + "self_attn.o_proj.bias", {hidden}, field(layer.o_bias));
    }
    visit(prefix + "post_attention_layernorm.weight", {hidden}, field(layer.post_attention_norm));
    visit(prefix + "mlp.gate_proj.weight", {inter, hidden}, field(layer.gate_proj));
    visit(prefix + "mlp.up_proj.weight", {inter, hidden}, field(layer.up_proj));
    visit(prefix + "mlp.down_proj.weight", {hidden, inter}, field(layer.down_proj));
  }
  visit("model.norm.weight", {hidden}, weights ? &weights->final_norm : nullptr);
  if (!config.tie_word_embeddings) {
    visit("lm_head.weight", {config.vocab_size, hidden}, weights ? &weights->lm_head : nullptr);
  }
}

}  // namespace

void validate_weights(const ModelConfig& config, const ModelFiles& files) {
  std::set<std::string> expected;
  for_each_expected(config, nullptr, [&](const std::string& name, std::vector<int64_t> shape, Tensor*) {
    expected.insert(name);
    const SafetensorsTensor* tensor = files.find(name);
    if (tensor == nullptr) {
      std::string hint;
      if (name == "lm_head.weight") {
        hint = " (config.json says tie_word_embeddings is false, so lm_head.weight is required)";
      }
      throw Error(ErrorCategory::kInvalidModel, files.file_of(name) + ": missing tensor '" + name +
                                                    "' in the model's safetensors files" + hint);
    }
    if (tensor->shape != shape) {
      throw Error(ErrorCategory::kInvalidModel,
                  files.file_of(name) + ": tensor '" + name + "' has shape " +
                      shape_string(tensor->shape) + " but config.json implies " +
                      shape_string(shape));
    }
    if (!tensor->dtype_supported) {
      throw Error(ErrorCategory::kInvalidModel,
                  files.file_of(name) + ": tensor '" + name + "' has dtype " + tensor->dtype_name +
                      "; weights must be BF16, F16 or F32");
    }
  });
  // A tensor the forward pass would silently ignore (a bias the config does not announce, a
  // layer beyond num_hidden_layers) means the checkpoint and config disagree.
  for (const std::string& name : files.names()) {
    if (expected.count(name) != 0) continue;
    bool harmless = name.find("rotary_emb.inv_freq") != std::string::npos ||
                    (name == "lm_head.weight" && config.tie_word_embeddings);
    if (!harmless) {
      throw Error(ErrorCategory::kInvalidModel,
                  files.file_of(name) + ": unexpected tensor '" + name +
                      "' that config.json does not account for (wrong config.json for these weights?)");
    }
  }
}

namespace {

// Storage dtype of a weight on `backend` when it is not used in place.
DType stored_dtype(const Backend& backend, bool is_matrix) {
  return is_matrix && backend.uses_host_memory() ? DType::kBF16 : backend.activation_dtype();
}

size_t stored_bytes(int64_t count, DType dtype) {
  return (static_cast<size_t>(count) * dtype_size(dtype) + 255) / 256 * 256;
}

}  // namespace

size_t planned_weight_bytes(const ModelConfig& config, const Backend& backend, bool matrices_in_place) {
  size_t total = 0;
  for_each_expected(config, nullptr, [&](const std::string&, std::vector<int64_t> shape, Tensor*) {
    bool is_matrix = shape.size() == 2;
    if (is_matrix && matrices_in_place && backend.uses_host_memory()) return;
    int64_t count = 1;
    for (int64_t dim : shape) count *= dim;
    total += stored_bytes(count, matrices_in_place ? backend.activation_dtype() : stored_dtype(backend, is_matrix));
  });
  return total;
}

Weights make_synthetic_weights(const ModelConfig& config, Backend& backend, uint64_t seed) {
  Weights weights;
  weights.layers.resize(config.num_layers);
  weights.storage = backend.allocate(planned_weight_bytes(config, backend, /*matrices_in_place=*/false),
                                     "synthetic weights");
  char* cursor = static_cast<char*>(weights.storage.data());
  uint64_t index = 0;
  for_each_expected(config, &weights, [&](const std::string& name, std::vector<int64_t> shape, Tensor* dest) {
    bool is_matrix = shape.size() == 2;
    DType dtype = stored_dtype(backend, is_matrix);
    int64_t rows = is_matrix ? shape[0] : 1;
    *dest = Tensor{cursor, dtype, rows, shape.back()};
    cursor += stored_bytes(rows * shape.back(), dtype);
    // Unit-variance outputs for unit-variance inputs: uniform(±sqrt(3 / fan_in)).
    // Norms are `*norm*` (Qwen2/3) or `ln_*` (v1); the embedding `embed_tokens` or `wte`.
    if (name.find("norm") != std::string::npos || name.find("ln_") != std::string::npos) {
      backend.fill_random(*dest, seed + index, 0.f, 1.f);
    } else if (name.find("bias") != std::string::npos) {
      backend.fill_random(*dest, seed + index, 0.02f, 0.f);
    } else if (name.find("embed_tokens") != std::string::npos || name.find("wte") != std::string::npos) {
      backend.fill_random(*dest, seed + index, 1.f, 0.f);
    } else {
      backend.fill_random(*dest, seed + index, std::sqrt(3.f / static_cast<float>(shape.back())), 0.f);
    }
    ++index;
  });
  if (config.tie_word_embeddings) weights.lm_head = weights.embed_tokens;
  backend.synchronize();
  return weights;
}

Weights load_weights(const ModelConfig& config, const ModelFiles& files, Backend& backend,
                     const std::function<void(uint64_t, uint64_t)>& progress) {
  validate_weights(config, files);
  Weights weights;
  weights.layers.resize(config.num_layers);
  const DType target = backend.activation_dtype();
  size_t storage_bytes = planned_weight_bytes(config, backend);
  if (storage_bytes > 0) weights.storage = backend.allocate(storage_bytes, "weights");
  char* cursor = static_cast<char*>(weights.storage.data());
  // Progress counts the tensors actually loaded (not rotary buffers or a tied lm_head).
  uint64_t total_bytes = 0;
  for_each_expected(config, nullptr, [&](const std::string& name, std::vector<int64_t>, Tensor*) {
    total_bytes += files.find(name)->byte_size;
  });
  uint64_t done_bytes = 0;
  for_each_expected(config, &weights, [&](const std::string& name, std::vector<int64_t> shape,
                                          Tensor* dest) {
    const SafetensorsTensor* source = files.find(name);
    int64_t rows = shape.size() == 2 ? shape[0] : 1;
    int64_t cols = shape.back();
    bool is_matrix = shape.size() == 2;
    if (is_matrix && backend.uses_host_memory()) {
      *dest = Tensor{const_cast<uint8_t*>(source->data), source->dtype, rows, cols};
    } else {
      *dest = Tensor{cursor, target, rows, cols};
      backend.upload_converted(cursor, target, source->data, source->dtype,
                               static_cast<size_t>(rows * cols));
      cursor += stored_bytes(rows * cols, target);
    }
    done_bytes += source->byte_size;
    if (progress) progress(done_bytes, total_bytes);
  });
  if (config.tie_word_embeddings) weights.lm_head = weights.embed_tokens;
  backend.synchronize();
  return weights;
}

}  // namespace qwenrt
