// QwenModel: the one forward pass for every supported Qwen architecture, over a ragged
// batch of sequences with a paged KV cache, written against the Backend op interface.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "engine/kv_cache.h"
#include "model/config.h"
#include "model/weights.h"

namespace qwenrt {

// Sizes fixed at plan time: every buffer below is allocated once from these.
struct ForwardLimits {
  int max_batch_tokens = 512;  // new tokens per forward pass, over all sequences
  int max_seqs = 8;            // sequences per forward pass
  int max_logit_rows = 512;    // rows of logits per forward pass
  int max_blocks_per_seq = 0;  // block-table width: ceil(max_context / block_size)
  int block_size = 16;
  int num_blocks = 0;          // KV pool size
};

// One sequence's part of a forward pass: `tokens` are appended at positions
// blocks.length() ... (the blocks must already be reserved for them).
struct SequenceChunk {
  const SequenceBlocks* blocks = nullptr;
  std::span<const int32_t> tokens;
  // The sequence's dynamic-NTK alpha (the original Qwen): ntk_alpha_index(config, L) of the
  // length L that fixes it (the whole prompt, kept while decoding). 0 for other models.
  int ntk_alpha_index = 0;
};

class QwenModel {
 public:
  QwenModel(const ModelConfig& config, Weights weights, Backend& backend,
            const ForwardLimits& limits);

  // Bytes of one token's keys and values over all layers, of the KV pool and of the
  // activation workspace for these limits.
  static size_t kv_bytes_per_token(const ModelConfig& config, DType dtype);
  static size_t kv_pool_bytes(const ModelConfig& config, DType dtype, const ForwardLimits& limits);
  static size_t workspace_bytes(const ModelConfig& config, DType dtype, const ForwardLimits& limits);

  // Runs the chunks through the model, writing their K/V into the cache, and returns fp32
  // logits [logit_rows.size(), vocab] (backend memory, valid until the next call) for the
  // given flattened token indices (0-based over all chunks' tokens, in order).
  Tensor forward(std::span<const SequenceChunk> chunks, std::span<const int32_t> logit_rows);

  const ModelConfig& config() const { return config_; }
  const ForwardLimits& limits() const { return limits_; }
  const Weights& weights() const { return weights_; }

 private:
  // Activation buffers carved from the workspace ([max_batch_tokens, width] unless noted),
  // then the staging area for the batch arrays.
  struct Workspace {
    Tensor x, h, o, q, attn, k, v, gate, up;
    Tensor gathered, logits;  // [max_logit_rows, hidden] and fp32 [max_logit_rows, vocab]
    int32_t* batch = nullptr;
    size_t bytes = 0;
  };
  static Workspace lay_out(char* base, const ModelConfig& config, DType dtype, const ForwardLimits& limits);
  BatchView stage_batch(std::span<const SequenceChunk> chunks, std::span<const int32_t> logit_rows);

  ModelConfig config_;
  Weights weights_;
  Backend& backend_;
  ForwardLimits limits_;
  KvGeometry kv_geometry_;
  std::vector<KvLayer> kv_layers_;
  DeviceBuffer kv_storage_;
  DeviceBuffer workspace_;
  DeviceBuffer rope_storage_;
  int rope_rows_ = 1;  // rows of the RoPE table: one per dynamic-NTK alpha the context allows
  float rope_scaling_ = 1.f;
  Workspace ws_;
  const int32_t* logit_rows_device_ = nullptr;
  std::vector<int32_t> batch_host_;
};

}  // namespace qwenrt
