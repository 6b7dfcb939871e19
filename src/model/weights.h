// Weights: plain per-layer tensor views, either into the mapped checkpoint (CPU backend,
// used in place) or into one device buffer (GPU backends). Built from ModelFiles after
// every expected tensor's presence, shape and dtype is checked against the config.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace qwenrt {

struct LayerWeights {
  Tensor input_norm;                  // [1, hidden]
  Tensor q_proj, k_proj, v_proj;      // [q_dim, hidden], [kv_dim, hidden] ×2
  Tensor q_bias, k_bias, v_bias;      // [1, q_dim], [1, kv_dim] (Qwen2; else empty)
  Tensor q_norm, k_norm;              // [1, head_dim] (Qwen3; else empty)
  Tensor o_proj;                      // [hidden, q_dim]
  Tensor o_bias;                      // [1, hidden] (Qwen3 with attention_bias; else empty)
  Tensor post_attention_norm;         // [1, hidden]
  Tensor gate_proj, up_proj;          // [intermediate, hidden]
  Tensor down_proj;                   // [hidden, intermediate]
  Tensor gate_bias, up_bias;          // [1, intermediate] (the original Qwen with no_bias false)
  Tensor down_bias;                   // [1, hidden] (same)
};

struct Weights {
  Tensor embed_tokens;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  Tensor final_norm;    // [1, hidden]
  Tensor lm_head;       // [vocab, hidden]; the embedding itself when tied
  DeviceBuffer storage; // owns converted/uploaded tensors (empty when all are in place)

  // Element type of the layer matrices as stored (what a decode step streams).
  DType q_proj_dtype() const { return layers.empty() ? embed_tokens.dtype : layers[0].q_proj.dtype; }
};

// Checks that every tensor the config calls for exists with the right shape and a float
// dtype; throws Error(kInvalidModel) naming the tensor, the file and the mismatch.
void validate_weights(const ModelConfig& config, const ModelFiles& files);

// Bytes the weights take on `backend`; with `matrices_in_place`, host matrices are used
// from the mapped files and cost nothing extra.
size_t planned_weight_bytes(const ModelConfig& config, const Backend& backend,
                            bool matrices_in_place = true);

// Random weights of the config's exact shape, generated on the backend (benchmarking without
// a checkpoint): matrices bf16 on the CPU, the activation dtype elsewhere.
Weights make_synthetic_weights(const ModelConfig& config, Backend& backend, uint64_t seed);

// Makes the weights usable by `backend`: matrices stay in place when the backend uses host
// memory, else are converted to its activation dtype and uploaded; vectors (norms, biases)
// are always converted. `progress(done_bytes, total_bytes)` is called as tensors load.
Weights load_weights(const ModelConfig& config, const ModelFiles& files, Backend& backend,
                     const std::function<void(uint64_t, uint64_t)>& progress = {});

}  // namespace qwenrt
