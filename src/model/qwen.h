// QwenModel: the one forward pass for every supported Qwen architecture, over a ragged
// batch of sequences with a paged KV cache, written against the Backend op interface.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <utility>
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
  int num_blocks = 0;          // KV pool size (one more block is kept as a scratch block)
  bool record_decode = true;   // replay decode steps as recorded ops where the backend can
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
  // Runs the chunks as forward() does (their K/V into the cache) and returns the final
  // norm's output for every token, [tokens, hidden] (backend memory, valid until the next
  // pass): the rows whose logits logits_of() then takes in slices, where a pass needs more
  // of them than the logits buffer holds (scoring a whole text).
  Tensor forward_hidden(std::span<const SequenceChunk> chunks);
  // fp32 logits [hidden.rows, vocab] (at most max_logit_rows rows, in the buffer forward()
  // returns its logits in) of rows of forward_hidden()'s result.
  Tensor logits_of(const Tensor& hidden);
  // forward() of one sequence's one new token (logits for it) whose id is not on the host:
  // a draw on the backend's stream left it at fed_token() (backend memory), e.g. the draw
  // of the step before, not yet read back. The chunk's token value is not used.
  Tensor forward_fed(const SequenceChunk& chunk);
  // The only slot of the batch arrays a kernel writes: the rest are written by the upload
  // before a pass's first kernel alone, which lets chained kernels read them before they
  // wait on the kernel before (backend/gpu/compat.h).
  int32_t* fed_token() const { return ws_.batch; }

  const ModelConfig& config() const { return config_; }
  const ForwardLimits& limits() const { return limits_; }
  const Weights& weights() const { return weights_; }
  // Passes whose last layer ran for the logit rows alone (LastLayerTail), counted when the
  // pass runs (a recorded decode step never takes the tail).
  uint64_t last_layer_tail_passes() const { return tail_passes_; }

 private:
  // Activation buffers carved from the workspace ([max_batch_tokens, width] unless noted),
  // then the staging area for the batch arrays.
  struct Workspace {
    Tensor x, h, o, q, attn, k, v, gate, up;
    Tensor gathered, logits;  // [max_logit_rows, hidden] and fp32 [max_logit_rows, vocab]
    Tensor fused;             // [1, max(q_dim + 2 kv_dim, 2 intermediate)]: one row of q|k|v or gate|up
    int32_t* batch = nullptr;
    size_t bytes = 0;
  };
  static Workspace lay_out(char* base, const ModelConfig& config, DType dtype, const ForwardLimits& limits);
  // Copies the batch arrays to the device. pad_seqs > chunks.size() appends sequences of one
  // token at position 0 in the scratch block, with a logit row each (a recorded decode step
  // of that many sequences).
  // ids_fed: the token ids are on the device already (forward_fed), only the rest goes up.
  BatchView stage_batch(std::span<const SequenceChunk> chunks, std::span<const int32_t> logit_rows,
                        int pad_seqs, bool ids_fed = false);
  Tensor forward(std::span<const SequenceChunk> chunks, std::span<const int32_t> logit_rows, bool ids_fed);
  // The ops of one forward pass over a staged batch; logits for its first n_rows rows, or
  // (n_rows < 0) no logits: the final norm's output for every token.
  Tensor run_layers(const BatchView& batch, int64_t n_rows);
  // The sequence count a decode batch is recorded at (0: run it without recording).
  int decode_bucket(std::span<const SequenceChunk> chunks, std::span<const int32_t> logit_rows) const;
  // The context a recorded step is made for: a power of two (at least 64) covering
  // `context`, within the planned maximum. A recording keeps the launch configuration the
  // context chose (attention splits, block-table width), so a few cover every length.
  int recorded_context(int context) const;

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
  // The last layer of a pass whose logit row r is the last token of sequence r's chunk
  // (r < logit rows) runs past its K/V write for those rows alone (run_layers): no later
  // token reads the other tokens' attention output, o, MLP or final norm there. `view` is
  // the batch's first logit-row sequences with their last token each, as decode rows.
  struct LastLayerTail {
    bool active = false;
    BatchView view;
  };
  LastLayerTail tail_;
  uint64_t tail_passes_ = 0;
  std::vector<int32_t> batch_host_;
  int scratch_block_ = 0;  // KV block that padding sequences write to
  // Per layer, q|k|v and gate|up as one matrix each where the weights lie back to back in
  // memory (GPU uploads do): a single-token pass then reads each with one launch.
  struct FusedProjections {
    Tensor qkv;      // [q_dim + 2 kv_dim, hidden] or empty
    Tensor gate_up;  // [2 intermediate, hidden] or empty
  };
  std::vector<FusedProjections> fused_;
  // Recorded decode steps by (padded sequence count, context bucket).
  std::map<std::pair<int, int>, std::unique_ptr<RecordedOps>> decode_steps_;
};

}  // namespace qwenrt
