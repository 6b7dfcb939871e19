#include "model/qwen.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace qwenrt {
namespace {

size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

// How the model's kernels are chained (Backend::set_chained_launches), from decode at one
// sequence on an H200, chained against not (docs/PERFORMANCE.md): below hidden 1,024 every
// kernel is short and deep chains pay (the 0.5B +6%, shallow +1.7%); from Qwen3-0.6B to
// the 32B shallow ones (+0.5% to +12%; deep +5% for Qwen3-0.6B, -2% to -9% from the 1.5B
// up). The 7B's shape gains +1.6% since the products ask for their first weights before
// their wait (it lost up to 1.4% before).
ChainedLaunches chained_launches_for(const ModelConfig& config) {
  if (config.hidden_size < 1024) return ChainedLaunches::kDeep;
  return ChainedLaunches::kShallow;
}

// The matrices as one [Σ rows, cols] matrix when each starts where the one before ends.
Tensor concatenated(std::initializer_list<const Tensor*> parts) {
  const Tensor& first = **parts.begin();
  Tensor whole{first.data, first.dtype, 0, first.cols};
  const char* next = static_cast<const char*>(first.data);
  for (const Tensor* part : parts) {
    if (part->data != next || part->dtype != first.dtype || part->cols != first.cols) return Tensor{};
    whole.rows += part->rows;
    next += part->bytes();
  }
  return whole;
}

// int32 elements of the staged batch arrays for the given limits.
size_t batch_ints(const ForwardLimits& limits) {
  return static_cast<size_t>(limits.max_batch_tokens) * 4 +  // ids, positions, slots, seq
         // seq_starts (+1), context_lens, rope_rows, logit rows and the block tables
         static_cast<size_t>(limits.max_seqs) * (3 + limits.max_blocks_per_seq) + 1 +
         static_cast<size_t>(limits.max_logit_rows) +
         // the last layer's tail: sequence starts (+1), positions
         static_cast<size_t>(limits.max_seqs) * 2 + 1;
}

}  // namespace

size_t QwenModel::kv_bytes_per_token(const ModelConfig& config, DType dtype) {
  return 2 * static_cast<size_t>(config.num_layers) * config.kv_dim() * dtype_size(dtype);
}

size_t QwenModel::kv_pool_bytes(const ModelConfig& config, DType dtype, const ForwardLimits& limits) {
  return kv_bytes_per_token(config, dtype) * (limits.num_blocks + 1) * limits.block_size;
}

// One layout serves both sizing (base nullptr: only the end offset counts) and carving.
QwenModel::Workspace QwenModel::lay_out(char* base, const ModelConfig& config, DType dtype,
                                        const ForwardLimits& limits) {
  Workspace ws;
  auto carve = [&](int64_t rows, int64_t cols, DType type) {
    Tensor tensor{base != nullptr ? base + ws.bytes : nullptr, type, rows, cols};
    ws.bytes += aligned(static_cast<size_t>(rows * cols) * dtype_size(type));
    return tensor;
  };
  const int64_t tokens = limits.max_batch_tokens;
  ws.x = carve(tokens, config.hidden_size, dtype);
  ws.h = carve(tokens, config.hidden_size, dtype);
  ws.o = carve(tokens, config.hidden_size, dtype);
  ws.q = carve(tokens, config.q_dim(), dtype);
  ws.attn = carve(tokens, config.q_dim(), dtype);
  ws.k = carve(tokens, config.kv_dim(), dtype);
  ws.v = carve(tokens, config.kv_dim(), dtype);
  ws.gate = carve(tokens, config.intermediate_size, dtype);
  ws.up = carve(tokens, config.intermediate_size, dtype);
  ws.fused = carve(1, std::max<int64_t>(config.q_dim() + 2 * config.kv_dim(), 2 * int64_t{config.intermediate_size}), dtype);
  ws.gathered = carve(limits.max_logit_rows, config.hidden_size, dtype);
  ws.logits = carve(limits.max_logit_rows, config.vocab_size, DType::kF32);
  ws.batch = static_cast<int32_t*>(carve(static_cast<int64_t>(batch_ints(limits)), 1, DType::kI32).data);
  return ws;
}

size_t QwenModel::workspace_bytes(const ModelConfig& config, DType dtype, const ForwardLimits& limits) {
  return lay_out(nullptr, config, dtype, limits).bytes;
}

QwenModel::QwenModel(const ModelConfig& config, Weights weights, Backend& backend,
                     const ForwardLimits& limits)
    : config_(config), weights_(std::move(weights)), backend_(backend), limits_(limits) {
  backend_.set_chained_launches(chained_launches_for(config_));
  const DType dtype = backend_.activation_dtype();
  kv_geometry_ = KvGeometry{limits.num_blocks + 1, limits.block_size, config.num_kv_heads, config.head_dim, dtype};
  scratch_block_ = limits.num_blocks;
  kv_storage_ = backend_.allocate(kv_pool_bytes(config, dtype, limits), "KV cache");
  const size_t layer_bytes = kv_geometry_.layer_pool_bytes();
  char* kv_base = static_cast<char*>(kv_storage_.data());
  for (int layer = 0; layer < config.num_layers; ++layer) {
    kv_layers_.push_back(KvLayer{kv_base + (2 * layer) * layer_bytes, kv_base + (2 * layer + 1) * layer_bytes});
  }

  workspace_ = backend_.allocate(workspace_bytes(config, dtype, limits), "activation workspace");
  ws_ = lay_out(static_cast<char*>(workspace_.data()), config, dtype, limits);
  batch_host_.resize(batch_ints(limits));

  for (const LayerWeights& w : weights_.layers) {
    fused_.push_back({concatenated({&w.q_proj, &w.k_proj, &w.v_proj}), concatenated({&w.gate_proj, &w.up_proj})});
  }

  // Row a: the frequencies under dynamic-NTK alpha index a, up to the planned context's.
  rope_rows_ = ntk_alpha_index(config, limits.max_blocks_per_seq * limits.block_size) + 1;
  std::vector<float> inv_freq;
  for (int row = 0; row < rope_rows_; ++row) {
    RopeTables rope = compute_rope_tables(config, row);
    rope_scaling_ = rope.attention_scaling;
    inv_freq.insert(inv_freq.end(), rope.inv_freq.begin(), rope.inv_freq.end());
  }
  rope_storage_ = backend_.allocate(inv_freq.size() * sizeof(float), "RoPE frequencies");
  backend_.copy_to_device(rope_storage_.data(), inv_freq.data(), inv_freq.size() * sizeof(float));
  backend_.synchronize();
}

BatchView QwenModel::stage_batch(std::span<const SequenceChunk> chunks,
                                 std::span<const int32_t> logit_rows, int pad_seqs, bool ids_fed) {
  const int real_seqs = static_cast<int>(chunks.size());
  const int n_seqs = std::max(real_seqs, pad_seqs);
  int n_tokens = n_seqs - real_seqs;
  for (const auto& chunk : chunks) n_tokens += static_cast<int>(chunk.tokens.size());
  if (n_seqs == 0 || n_tokens == 0) {
    throw Error(ErrorCategory::kInternal, "forward pass called with no tokens");
  }
  const int n_logit_rows = static_cast<int>(logit_rows.size()) + (n_seqs - real_seqs);
  if (n_tokens > limits_.max_batch_tokens || n_seqs > limits_.max_seqs ||
      n_logit_rows > limits_.max_logit_rows) {
    throw Error(ErrorCategory::kInternal,
                "batch of " + std::to_string(n_tokens) + " tokens / " + std::to_string(n_seqs) +
                    " sequences / " + std::to_string(logit_rows.size()) +
                    " logit rows exceeds the planned limits");
  }
  // The block-table width of this batch: enough for its longest context (for a recorded
  // step, the context bucket it is recorded for), not the planned maximum, so that a step
  // fills and uploads n_seqs of those rows instead of max_seqs full-context ones.
  int max_context = 1;
  for (const auto& chunk : chunks) max_context = std::max(max_context, chunk.blocks->length() + static_cast<int>(chunk.tokens.size()));
  const int context_bucket = pad_seqs > 0 ? recorded_context(max_context) : max_context;
  const int stride = std::min(limits_.max_blocks_per_seq,
                              std::max(1, (context_bucket + limits_.block_size - 1) / limits_.block_size));
  // Layout of the staging area (fixed offsets from the limits; the block tables last).
  int32_t* host = batch_host_.data();
  const size_t t_cap = limits_.max_batch_tokens, s_cap = limits_.max_seqs;
  int32_t* ids = host;
  int32_t* positions = ids + t_cap;
  int32_t* slots = positions + t_cap;
  int32_t* token_seq = slots + t_cap;
  int32_t* seq_starts = token_seq + t_cap;
  int32_t* context_lens = seq_starts + s_cap + 1;
  int32_t* rope_rows = context_lens + s_cap;
  int32_t* rows = rope_rows + s_cap;
  int32_t* tail_starts = rows + limits_.max_logit_rows;
  int32_t* tail_positions = tail_starts + s_cap + 1;
  int32_t* block_tables = tail_positions + s_cap;

  BatchView view;
  view.n_tokens = n_tokens;
  view.n_seqs = n_seqs;
  view.max_blocks_per_seq = stride;
  int t = 0;
  for (int s = 0; s < real_seqs; ++s) {
    const SequenceChunk& chunk = chunks[s];
    const int start = chunk.blocks->length();
    const int count = static_cast<int>(chunk.tokens.size());
    if (start + count > chunk.blocks->capacity()) {
      throw Error(ErrorCategory::kInternal, "sequence blocks not reserved for its new tokens");
    }
    const auto& table = chunk.blocks->block_table();
    if (static_cast<int>(table.size()) > limits_.max_blocks_per_seq) {
      throw Error(ErrorCategory::kInternal, "sequence longer than the planned context");
    }
    if (chunk.ntk_alpha_index < 0 || chunk.ntk_alpha_index >= rope_rows_) {
      throw Error(ErrorCategory::kInternal, "dynamic-NTK alpha index outside the RoPE table");
    }
    rope_rows[s] = chunk.ntk_alpha_index;
    seq_starts[s] = t;
    context_lens[s] = start + count;
    // Entries past `stride` hold blocks reserved beyond every position this step reads.
    for (int b = 0; b < stride; ++b) block_tables[s * stride + b] = b < static_cast<int>(table.size()) ? table[b] : 0;
    for (int i = 0; i < count; ++i, ++t) {
      ids[t] = chunk.tokens[i];
      if (!ids_fed && (ids[t] < 0 || ids[t] >= config_.vocab_size)) {
        throw Error(ErrorCategory::kInvalidArgument,
                    "token id " + std::to_string(ids[t]) + " is outside the vocabulary [0, " +
                        std::to_string(config_.vocab_size) + ")");
      }
      positions[t] = start + i;
      slots[t] = chunk.blocks->slot(start + i);
      token_seq[t] = s;
    }
    view.max_new_tokens = std::max(view.max_new_tokens, count);
    view.max_context_len = std::max(view.max_context_len, start + count);
    if (count == 1 && view.leading_decode_seqs == s) {
      view.leading_decode_seqs = s + 1;
      view.leading_decode_max_context = std::max(view.leading_decode_max_context, start + count);
    }
  }
  for (size_t r = 0; r < logit_rows.size(); ++r) {
    QWENRT_CHECK(logit_rows[r] >= 0 && logit_rows[r] < t, "logit row out of range");
    rows[r] = logit_rows[r];
  }
  // Padding: one token each at position 0 of the scratch block, whose K/V nobody reads.
  for (int s = real_seqs; s < n_seqs; ++s, ++t) {
    seq_starts[s] = t;
    context_lens[s] = 1;
    rope_rows[s] = 0;
    for (int b = 0; b < stride; ++b) block_tables[s * stride + b] = scratch_block_;
    ids[t] = 0;
    positions[t] = 0;
    slots[t] = scratch_block_ * limits_.block_size;
    token_seq[t] = s;
    rows[logit_rows.size() + static_cast<size_t>(s - real_seqs)] = t;
    view.max_new_tokens = std::max(view.max_new_tokens, 1);
    view.max_context_len = std::max(view.max_context_len, 1);
    if (view.leading_decode_seqs == s) {
      view.leading_decode_seqs = s + 1;
      view.leading_decode_max_context = std::max(view.leading_decode_max_context, 1);
    }
  }
  seq_starts[n_seqs] = t;
  if (pad_seqs > 0) view.max_context_len = context_bucket;
  // The last layer's tail: worth it when some chunk has more tokens than its last, and
  // taken when logit row r is the last token of sequence r (the scheduler leads with the
  // sequences that sample; a prompt's chunk that ends mid-prompt has no logit row).
  const int n_tail = static_cast<int>(logit_rows.size());
  bool tail = pad_seqs == 0 && n_tokens > n_seqs && n_tail <= n_seqs;
  int tail_context = 1;
  for (int r = 0; tail && r < n_tail; ++r) {
    tail = rows[r] == seq_starts[r + 1] - 1;
    tail_positions[r] = positions[rows[r]];
    tail_starts[r] = r;
    tail_context = std::max(tail_context, context_lens[r]);
  }
  if (tail) tail_starts[n_tail] = n_tail;
  const size_t used = static_cast<size_t>(block_tables - host) + static_cast<size_t>(n_seqs) * stride;
  // Fed ids (one token, no padding) stay as the draw left them: the upload starts after them.
  const size_t skipped = ids_fed ? t_cap : 0;
  backend_.copy_to_device(ws_.batch + skipped, host + skipped, (used - skipped) * sizeof(int32_t));
  const int32_t* device = ws_.batch;
  view.token_ids = device;
  view.positions = device + (positions - host);
  view.slot_mapping = device + (slots - host);
  view.token_seq = device + (token_seq - host);
  view.seq_starts = device + (seq_starts - host);
  view.context_lens = device + (context_lens - host);
  view.block_tables = device + (block_tables - host);
  view.rope_rows = device + (rope_rows - host);
  logit_rows_device_ = device + (rows - host);
  tail_ = {};
  if (tail) {
    // Sequences 0 .. n_tail - 1, one token each: their arrays are the batch's, cut short.
    BatchView& last = tail_.view;
    last = view;
    last.n_seqs = n_tail;
    last.n_tokens = n_tail;
    last.max_new_tokens = 1;
    last.max_context_len = tail_context;
    last.positions = device + (tail_positions - host);
    last.slot_mapping = nullptr;  // the K/V are written by then
    last.token_seq = device + (tail_starts - host);
    last.seq_starts = device + (tail_starts - host);
    last.leading_decode_seqs = n_tail;
    last.leading_decode_max_context = tail_context;
    last.keys_in_pass = true;  // the chunks' keys are this pass's: no early K/V loads
    tail_.active = true;
  }
  return view;
}

int QwenModel::recorded_context(int context) const {
  int bucket = 64;
  while (bucket < context) bucket *= 2;
  return std::min(bucket, limits_.max_blocks_per_seq * limits_.block_size);
}

int QwenModel::decode_bucket(std::span<const SequenceChunk> chunks,
                             std::span<const int32_t> logit_rows) const {
  if (!limits_.record_decode || !backend_.can_record() || chunks.empty()) return 0;
  const int n = static_cast<int>(chunks.size());
  if (static_cast<int>(logit_rows.size()) != n) return 0;
  for (int s = 0; s < n; ++s) {
    if (chunks[s].tokens.size() != 1 || logit_rows[s] != s) return 0;
  }
  const int cap = std::min({limits_.max_seqs, limits_.max_batch_tokens, limits_.max_logit_rows});
  if (n > cap) return 0;
  // The matrix library's own row buckets (powers of two up to 128 rows, then 64 or 128 rows
  // wide), so that a step of 160 sequences runs 192 rows, not 256.
  return static_cast<int>(std::min<int64_t>(matmul_row_bucket(n), cap));
}

Tensor QwenModel::forward(std::span<const SequenceChunk> chunks, std::span<const int32_t> logit_rows) {
  return forward(chunks, logit_rows, false);
}

Tensor QwenModel::forward_hidden(std::span<const SequenceChunk> chunks) {
  return run_layers(stage_batch(chunks, {}, 0), -1);
}

Tensor QwenModel::logits_of(const Tensor& hidden) {
  QWENRT_CHECK(hidden.rows <= limits_.max_logit_rows && hidden.cols == config_.hidden_size,
               "logits_of: rows beyond the logits buffer or not hidden states");
  Tensor logits = ws_.logits.row_slice(0, hidden.rows);
  backend_.matmul(hidden, weights_.lm_head, logits);
  return logits;
}

Tensor QwenModel::forward_fed(const SequenceChunk& chunk) {
  QWENRT_CHECK(chunk.tokens.size() == 1, "a fed step has one token");
  const int32_t row = 0;
  return forward(std::span<const SequenceChunk>(&chunk, 1), std::span<const int32_t>(&row, 1), true);
}

Tensor QwenModel::forward(std::span<const SequenceChunk> chunks, std::span<const int32_t> logit_rows, bool ids_fed) {
  const int bucket = decode_bucket(chunks, logit_rows);
  // One sequence pads to nothing: its id stays the first entry, where the draw put it.
  QWENRT_CHECK(!ids_fed || (chunks.size() == 1 && bucket <= 1), "fed ids need one sequence without padding");
  if (bucket == 0) {
    return run_layers(stage_batch(chunks, logit_rows, 0, ids_fed), static_cast<int64_t>(logit_rows.size()));
  }
  // A decode step: the same launches every time, so they are recorded once per padded
  // sequence count and replayed (the batch arrays live at fixed device addresses).
  const BatchView batch = stage_batch(chunks, logit_rows, bucket, ids_fed);
  std::unique_ptr<RecordedOps>& step = decode_steps_[{bucket, batch.max_context_len}];
  if (!step) {
    backend_.begin_recording();
    try {
      run_layers(batch, bucket);
    } catch (...) {
      backend_.end_recording();
      throw;
    }
    step = backend_.end_recording();
    if (!step) throw Error(ErrorCategory::kDevice, "recording a decode step of " + std::to_string(bucket) + " sequences failed");
  }
  step->replay();
  return ws_.logits.row_slice(0, static_cast<int64_t>(logit_rows.size()));
}

Tensor QwenModel::run_layers(const BatchView& batch, int64_t n_rows) {
  const int64_t n = batch.n_tokens;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  Tensor x = ws_.x.row_slice(0, n), h = ws_.h.row_slice(0, n), o = ws_.o.row_slice(0, n);
  const Tensor q_rows = ws_.q.row_slice(0, n), k_rows = ws_.k.row_slice(0, n), v_rows = ws_.v.row_slice(0, n);
  Tensor attn = ws_.attn.row_slice(0, n), gate = ws_.gate.row_slice(0, n), up = ws_.up.row_slice(0, n);

  AttentionParams attention;
  attention.n_heads = config_.num_heads;
  attention.n_kv_heads = config_.num_kv_heads;
  attention.head_dim = config_.head_dim;
  attention.scale = 1.0f / std::sqrt(static_cast<float>(config_.head_dim));

  // Several rows read q|k|v as one product where the backend's epilogue takes it whole and
  // the gate buffer holds it.
  const bool fuse_qkv_rows = n > 1 && backend_.fuses_qkv_epilogue() &&
                             config_.q_dim() + 2 * config_.kv_dim() <= int64_t{config_.intermediate_size};
  const int last_layer = config_.num_layers - 1;
  const bool tail = n_rows >= 0 && tail_.active && tail_.view.n_tokens == n_rows &&
                    n_rows * config_.q_dim() <= n * int64_t{config_.intermediate_size};
  backend_.embed(batch, weights_.embed_tokens, x);
  for (int layer = 0; layer < config_.num_layers; ++layer) {
    const LayerWeights& w = weights_.layers[layer];
    // h = norm(x) — fused with the previous layer's residual add except on layer 0.
    if (layer == 0) {
      backend_.rmsnorm(x, w.input_norm, eps, h);
    } else {
      backend_.add_rmsnorm(x, o, w.input_norm, eps, h);
    }
    const FusedProjections& fused = fused_[layer];
    QkvEpilogue epilogue{w.q_bias, w.k_bias, w.v_bias, w.q_norm, w.k_norm, eps,
                         static_cast<const float*>(rope_storage_.data()), rope_scaling_,
                         config_.use_logn_attn ? config_.seq_length : 0};
    attention.sliding_window = config_.layer_sliding_window[layer];
    Tensor q = q_rows;  // where attention reads q this layer
    if (fused.qkv.data != nullptr && backend_.matmul_qkv_rope_kvwrite(h, fused.qkv, batch, attention, epilogue, q,
                                                                      kv_geometry_, kv_layers_[layer])) {
      // A few rows: the product and its epilogue in one op.
    } else if (n == 1 && fused.qkv.data != nullptr) {
      // One row: the q|k|v product's row is q, k and v back to back.
      Tensor qkv{ws_.fused.data, ws_.fused.dtype, 1, fused.qkv.rows};
      backend_.matmul(h, fused.qkv, qkv);
      const size_t elem = dtype_size(qkv.dtype);
      char* base = static_cast<char*>(qkv.data);
      q = Tensor{base, qkv.dtype, 1, config_.q_dim()};
      const Tensor k{base + config_.q_dim() * elem, qkv.dtype, 1, config_.kv_dim()};
      const Tensor v{base + (config_.q_dim() + config_.kv_dim()) * elem, qkv.dtype, 1, config_.kv_dim()};
      backend_.qkv_rope_kvwrite(batch, attention, epilogue, q, k, v, kv_geometry_, kv_layers_[layer]);
    } else if (fused.qkv.data != nullptr && fuse_qkv_rows) {
      // Several rows: one q|k|v product into the gate buffer (free until the MLP), whose
      // rows the epilogue reads as they are, writing q apart.
      const Tensor qkv_rows{ws_.gate.data, ws_.gate.dtype, n, fused.qkv.rows};
      backend_.matmul(h, fused.qkv, qkv_rows);
      backend_.qkv_fused_rope_kvwrite(batch, attention, epilogue, qkv_rows, q, kv_geometry_, kv_layers_[layer]);
    } else {
      backend_.matmul(h, w.q_proj, q);
      backend_.matmul(h, w.k_proj, k_rows);
      backend_.matmul(h, w.v_proj, v_rows);
      backend_.qkv_rope_kvwrite(batch, attention, epilogue, q, k_rows, v_rows, kv_geometry_, kv_layers_[layer]);
    }
    const BatchView* view = &batch;
    if (layer == last_layer && tail) {
      // Past the K/V write only the logit rows go on (LastLayerTail): their q as decode rows
      // over their sequences' contexts and their residual rows, gathered in order, so the
      // rest of the layer, the final norm and the lm_head work on those rows alone.
      ++tail_passes_;
      if (n_rows == 0) return ws_.logits.row_slice(0, 0);  // chunks that all end mid-prompt
      const Tensor q_last{ws_.up.data, q.dtype, n_rows, q.cols};  // up is free until the MLP
      const Tensor x_last = ws_.gathered.row_slice(0, n_rows);
      backend_.gather_rows(q, logit_rows_device_, q_last);
      backend_.gather_rows(x, logit_rows_device_, x_last);
      q = q_last;
      x = x_last;
      h = h.row_slice(0, n_rows);
      o = o.row_slice(0, n_rows);
      attn = attn.row_slice(0, n_rows);
      gate = gate.row_slice(0, n_rows);
      up = up.row_slice(0, n_rows);
      view = &tail_.view;
    }
    backend_.attention(*view, attention, q, kv_geometry_, kv_layers_[layer], attn);
    backend_.matmul(attn, w.o_proj, o);
    if (w.o_bias.data != nullptr) backend_.add_bias(o, w.o_bias);
    // x += attention output; h = norm(x)
    backend_.add_rmsnorm(x, o, w.post_attention_norm, eps, h);
    // The gated MLP input as one op where the backend has it for these rows (one row; many
    // rows on some GPUs), else the two products and silu_mul.
    const bool gated = fused.gate_up.data != nullptr && w.gate_bias.data == nullptr && w.up_bias.data == nullptr;
    const bool fused_op = gated && backend_.matmul_silu_mul(h, fused.gate_up, gate);
    if (!fused_op && gated && h.rows == 1) {
      Tensor gate_up{ws_.fused.data, ws_.fused.dtype, 1, fused.gate_up.rows};
      backend_.matmul(h, fused.gate_up, gate_up);
      char* base = static_cast<char*>(gate_up.data);
      const int64_t inter = config_.intermediate_size;
      backend_.silu_mul(Tensor{base, gate_up.dtype, 1, inter},
                        Tensor{base + inter * dtype_size(gate_up.dtype), gate_up.dtype, 1, inter}, gate);
    } else if (!fused_op) {
      backend_.matmul(h, w.gate_proj, gate);
      backend_.matmul(h, w.up_proj, up);
      if (w.gate_bias.data != nullptr) backend_.add_bias(gate, w.gate_bias);
      if (w.up_bias.data != nullptr) backend_.add_bias(up, w.up_bias);
      backend_.silu_mul(gate, up, gate);
    }
    backend_.matmul(gate, w.down_proj, o);
    if (w.down_bias.data != nullptr) backend_.add_bias(o, w.down_bias);
  }
  backend_.add_rmsnorm(x, o, weights_.final_norm, eps, h);
  if (n_rows < 0) return h;
  Tensor logits = ws_.logits.row_slice(0, n_rows);
  if (tail) {  // h holds the logit rows, in order
    backend_.matmul(h, weights_.lm_head, logits);
    return logits;
  }
  Tensor gathered = ws_.gathered.row_slice(0, n_rows);
  backend_.gather_rows(h, logit_rows_device_, gathered);
  backend_.matmul(gathered, weights_.lm_head, logits);
  return logits;
}

}  // namespace qwenrt
