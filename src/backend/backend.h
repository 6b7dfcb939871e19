// The backend-neutral op interface. The Qwen forward pass (model/qwen.cpp) is written
// once against it; the CPU backend (reference, fp32 arithmetic) and the CUDA backend
// (bf16/fp16 storage, fp32 accumulation) implement it. Fusions are ops too.
//
// Conventions:
// - All pointers in Tensor, BatchView and KvLayer live in the backend's memory (host
//   memory for the CPU backend, device memory for CUDA). Ops are asynchronous on the
//   backend's stream; synchronize() waits.
// - Activations use activation_dtype(); logits are always fp32.
// - Weights are [out_features, in_features] row-major, as in safetensors.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace qwenrt {

// A contiguous row-major 2-D view: `rows` rows of `cols` elements. Vectors are 1 × n.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;

  int64_t numel() const { return rows * cols; }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  // Rows [first, first + count) of this tensor.
  Tensor row_slice(int64_t first, int64_t count) const {
    return Tensor{static_cast<char*>(data) + static_cast<size_t>(first * cols) * dtype_size(dtype),
                  dtype, count, cols};
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

// Chained kernel launches (Backend::set_chained_launches).
enum class ChainedLaunches { kOff, kDeep, kShallow };

// The setting a QWENRT_CHAINED_LAUNCHES value names (off or 0, deep or 1, shallow); none for
// other values, which the GPU backend ignores.
inline std::optional<ChainedLaunches> parse_chained_launches(std::string_view value) {
  if (value == "0" || value == "off") return ChainedLaunches::kOff;
  if (value == "1" || value == "deep") return ChainedLaunches::kDeep;
  if (value == "shallow") return ChainedLaunches::kShallow;
  return std::nullopt;
}

// A ragged batch: each sequence contributes its new tokens (a prompt chunk or one decode
// token). Arrays are in backend memory; the scalars are known on the host so kernels can
// be configured without reading device memory.
struct BatchView {
  int n_tokens = 0;             // total new tokens over all sequences
  int n_seqs = 0;               // sequences in the batch
  int max_new_tokens = 0;       // max over sequences of new tokens (1 = pure decode)
  int max_context_len = 0;      // max over sequences of context_lens
  int max_blocks_per_seq = 0;   // row stride of block_tables
  const int32_t* token_ids = nullptr;     // [n_tokens]
  const int32_t* positions = nullptr;     // [n_tokens] position in its sequence (0-based)
  const int32_t* slot_mapping = nullptr;  // [n_tokens] KV slot: block * block_size + offset
  const int32_t* token_seq = nullptr;     // [n_tokens] index of the token's sequence
  const int32_t* seq_starts = nullptr;    // [n_seqs + 1] offsets of each sequence's tokens
  const int32_t* context_lens = nullptr;  // [n_seqs] cached tokens after this step (incl. new)
  const int32_t* block_tables = nullptr;  // [n_seqs, max_blocks_per_seq] physical block ids
  // [n_seqs] row of QkvEpilogue::inv_freq each sequence's RoPE uses: its dynamic-NTK alpha
  // (the original Qwen), fixed per sequence. Null: row 0 for all.
  const int32_t* rope_rows = nullptr;
  // The leading sequences with one new token each (a mixed batch's decode rows come first:
  // the scheduler orders them so) and the longest context among them; 0 when the first
  // sequence has more. Lets a backend take those rows through its decode attention.
  int leading_decode_seqs = 0;
  int leading_decode_max_context = 0;
  // The keys before a sequence's new token may have been written earlier in this same pass
  // (QwenModel's last-layer tail: a chunk's last token as a decode row): a kernel must not
  // read them before it waits on the kernels before it (backend/gpu/compat.h).
  bool keys_in_pass = false;
};

// Shape of the paged KV cache. Each layer has a K pool and a V pool of
// [num_blocks, block_size, n_kv_heads, head_dim] elements of `dtype`.
struct KvGeometry {
  int num_blocks = 0;
  int block_size = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  DType dtype = DType::kF32;

  size_t layer_pool_bytes() const {
    return static_cast<size_t>(num_blocks) * block_size * n_kv_heads * head_dim *
           dtype_size(dtype);
  }
};

struct KvLayer {
  void* k = nullptr;
  void* v = nullptr;
};

struct AttentionParams {
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  float scale = 0.f;        // softmax scale, 1/sqrt(head_dim)
  int sliding_window = 0;   // 0: full causal attention; else keys with pos > q_pos - window
};

// Per-layer inputs of the fused q/k/v epilogue. Null tensors (data == nullptr) are absent.
struct QkvEpilogue {
  Tensor q_bias, k_bias, v_bias;  // [1, n_heads*head_dim] / [1, n_kv_heads*head_dim] (Qwen2)
  Tensor q_norm, k_norm;          // [1, head_dim] per-head RMSNorm weights (Qwen3)
  float norm_eps = 1e-6f;
  const float* inv_freq = nullptr;  // [rows, head_dim / 2] RoPE inverse frequencies, fp32
  float rope_scaling = 1.f;         // cos/sin multiplier (YaRN attention factor)
  // LogN attention (the original Qwen): after RoPE, a query at position p with p + 1 >
  // logn_length is multiplied by log(p + 1) / log(logn_length). 0: off.
  int logn_length = 0;
};

// The LogN factor of a query at `position` (1 when off or not past logn_length), computed
// as the original's table: log(p + 1) / log(logn_length) in double, rounded to fp32.
inline float logn_scale(int logn_length, int position) {
  if (logn_length <= 0 || position + 1 <= logn_length) return 1.f;
  return static_cast<float>(std::log(static_cast<double>(position) + 1.0) /
                            std::log(static_cast<double>(logn_length)));
}

// Sampling parameters applied on the device. temperature 0 means greedy.
struct SamplingParams {
  float temperature = 0.f;
  int top_k = 0;        // 0: off
  float top_p = 1.f;    // 1: off
  float min_p = 0.f;    // 0: off
  float repetition_penalty = 1.f;
  float presence_penalty = 0.f;
  float frequency_penalty = 0.f;
  // How many of the penalty history's first ids are the prompt: presence and frequency count
  // only the ids after them, the generated ones (OpenAI's definition, as vLLM); repetition
  // counts them all (as transformers). Set by the engine, not by a request.
  int32_t prompt_tokens = 0;
  uint64_t seed = 0;

  bool has_penalties() const {
    return repetition_penalty != 1.f || presence_penalty != 0.f || frequency_penalty != 0.f;
  }
};

// One row's sampling for Backend::sample_rows: its parameters and the key of its random
// draw, u = sample_uniform(params.seed, position, stream). Keying by the sequence position
// (not by the row's place in the batch) gives a request the same draws alone or batched.
// The logit adjust_logits gives a banned token: finite (the samplers' non-finite check stays a check),
// and far enough below any real logit that its probability is 0 at every temperature.
constexpr float kBannedLogit = -1e30f;

// A logit_bias entry: `bias` (finite) is added to token `id`'s logit before the draw.
struct TokenBias {
  int32_t id = 0;
  float bias = 0;
};
inline constexpr int kMaxLogitBiasPerRow = 300;  // entries a draw takes

// 32-bit words of a token mask over `vocab` ids (Backend::mask_logits): bit j % 32 of word
// j / 32 is id j's.
inline constexpr int token_mask_words(int64_t vocab) { return static_cast<int>((vocab + 31) / 32); }

struct SampleRow {
  SamplingParams params;
  uint64_t position = 0;  // position of the token being sampled in its sequence
  uint64_t stream = 0;    // the request's choice index: n choices draw independently
};

// Owning handle to a backend allocation; frees on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(void* data, size_t bytes, void (*release)(void*))
      : data_(data), bytes_(bytes), release_(release) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      data_ = other.data_;
      bytes_ = other.bytes_;
      release_ = other.release_;
      other.data_ = nullptr;
      other.bytes_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  void reset() {
    if (data_ != nullptr && release_ != nullptr) release_(data_);
    data_ = nullptr;
    bytes_ = 0;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  void (*release_)(void*) = nullptr;
};

struct DeviceMemoryInfo {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};

// What the benchmark compares against. Zero means unknown.
struct DeviceInfo {
  std::string name;
  double peak_bandwidth = 0;      // bytes/s a large device-to-device copy reaches
  double peak_matmul_flops = 0;   // dense matrix throughput in the activation dtype, FLOP/s
  double rated_bandwidth = 0;     // the memory's rated figure (clock × bus width × 2), bytes/s; 0: unknown
  int threads = 0;                // the CPU backend's threads (0 on a GPU)
};

// Measures elapsed time of the work issued between start() and stop() on the backend's
// stream (device events on GPUs).
class DeviceTimer {
 public:
  virtual ~DeviceTimer() = default;
  virtual void start() = 0;
  virtual void stop() = 0;
  // Waits for stop() to complete and returns the seconds between start and stop.
  virtual double seconds() = 0;
};

// Ops recorded once and replayed with the same pointers and sizes (a CUDA/HIP graph):
// a decode step's hundreds of launches become one.
class RecordedOps {
 public:
  virtual ~RecordedOps() = default;
  // Issues the recorded ops on the backend's stream (asynchronous, like the ops).
  virtual void replay() = 0;
};

// The row counts the GPU backend's matrix library (cuBLASLt) chooses one algorithm for: the
// smallest bucket top at or above `rows`. Powers of two up to 128, then multiples of 64 up
// to 256 and of 128 above (a tile's rows); an algorithm chosen for a power of two's top
// fills its waves badly well below it (docs/PERFORMANCE.md). The engine's warm-up runs one
// pass per bucket so that the choice is not paid by a request.
int64_t matmul_row_bucket(int64_t rows);

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;
  // dtype of activations and of weights as the ops consume them.
  virtual DType activation_dtype() const = 0;
  // Whether weights in host memory (e.g. mmapped files) can be used in place.
  virtual bool uses_host_memory() const = 0;
  virtual DeviceMemoryInfo memory_info() const = 0;
  // Device memory the backend holds for itself (fixed workspaces), 0 on the CPU.
  virtual size_t workspace_bytes() const { return 0; }

  // ---- memory: allocate while planning/loading, never per token ----
  virtual DeviceBuffer allocate(size_t bytes, const char* what) = 0;
  // Ordered with the ops; `src` may be reused on return. It need not wait for the device
  // (GPUs stage small copies and go on), so it is cheap enough for every step's inputs.
  virtual void copy_to_device(void* dst, const void* src, size_t bytes) = 0;
  // Waits for the ops issued before it.
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  // Backend memory to backend memory, ordered with the ops; does not wait.
  virtual void copy_on_device(void* dst, const void* src, size_t bytes) = 0;
  // Converts `count` host elements of `src_dtype` into device memory of `dst_dtype`.
  virtual void upload_converted(void* dst, DType dst_dtype, const void* src, DType src_dtype,
                                size_t count) = 0;
  virtual void synchronize() = 0;
  // Device name and the ceilings the benchmark reports fractions of (default: unknown).
  virtual DeviceInfo device_info() const;
  // Default: a host clock around synchronize().
  virtual std::unique_ptr<DeviceTimer> make_timer();
  // Recording (default: not supported). Between begin_recording() and end_recording() the
  // ops are recorded instead of run; nothing may synchronize or copy to the host there.
  // end_recording() must follow every begin_recording(), also when an op threw (the
  // caller then drops what it returns).
  virtual bool can_record() const { return false; }
  virtual void begin_recording();
  virtual std::unique_ptr<RecordedOps> end_recording();
  // Fills a tensor with uniform values in [offset - scale, offset + scale] from `seed`
  // (synthetic benchmark weights).
  virtual void fill_random(Tensor tensor, uint64_t seed, float scale, float offset) = 0;

  // ---- ops ----
  // out[t, :] = table[batch.token_ids[t], :]        table [vocab, hidden]; out [n_tokens, hidden]
  virtual void embed(const BatchView& batch, const Tensor& table, Tensor out) = 0;
  // out = rmsnorm(x) * weight, per row, fp32 math.  x, out [n, d]; weight [1, d]
  virtual void rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor out) = 0;
  // residual += delta; out = rmsnorm(residual) * weight.  (the fused residual + norm)
  virtual void add_rmsnorm(Tensor residual, const Tensor& delta, const Tensor& weight, float eps,
                           Tensor out) = 0;
  // out[n, m] = x[n, k] · w[m, k]^T. out may be fp32 (logits) or activation dtype.
  virtual void matmul(const Tensor& x, const Tensor& w, Tensor out) = 0;
  // Adds biases, applies per-head q/k RMSNorm, RoPE (rotate-half) on q and k at each token's
  // position, writes k and v into the layer's cache at slot_mapping; q is updated in place.
  // q [n_tokens, n_heads*head_dim]; k, v [n_tokens, n_kv_heads*head_dim] (k, v modified).
  virtual void qkv_rope_kvwrite(const BatchView& batch, const AttentionParams& attn,
                                const QkvEpilogue& epilogue, Tensor q, Tensor k, Tensor v,
                                const KvGeometry& geometry, KvLayer cache) = 0;
  // The same reading q, k and v from one q|k|v product (qkv [n_tokens, (n_heads +
  // 2 n_kv_heads)·head_dim], each row q, k and v back to back) and writing the rotated q
  // to q_out [n_tokens, n_heads·head_dim]; k and v go to the cache only. Backends without
  // it say so in fuses_qkv_epilogue(), which callers ask before making the fused product.
  virtual bool fuses_qkv_epilogue() const;
  // Whether and how the kernels launched from now on may each start while the one before
  // it ends (GPUs that can: the next kernel's blocks are placed and wait on the device, so
  // the launch latency between two kernels is hidden). kDeep: each kernel lets the next one
  // be placed first thing, so a chain of short kernels is placed several ahead; kShallow:
  // only once it has passed its own wait (a long product: once it has read its weights),
  // so no kernel takes the slots of a longer one still to come. Which pays depends on the
  // model's shape (docs/PERFORMANCE.md); the model sets it. A recorded step keeps the
  // setting it was recorded with. On the GPU one setting serves the whole process.
  // Default: ignored.
  virtual void set_chained_launches(ChainedLaunches) {}
  virtual void qkv_fused_rope_kvwrite(const BatchView& batch, const AttentionParams& attn,
                                      const QkvEpilogue& epilogue, const Tensor& qkv, Tensor q_out,
                                      const KvGeometry& geometry, KvLayer cache);
  // The product x · qkvᵀ and that epilogue in one op, for a few rows (decode): the same
  // q_out and cache contents as matmul into a q|k|v buffer followed by
  // qkv_fused_rope_kvwrite. False when the backend has no such op or not for these rows or
  // this epilogue (the caller then runs the two).
  virtual bool matmul_qkv_rope_kvwrite(const Tensor& x, const Tensor& qkv, const BatchView& batch,
                                       const AttentionParams& attn, const QkvEpilogue& epilogue, Tensor q_out,
                                       const KvGeometry& geometry, KvLayer cache);
  // Causal grouped-query attention of each new token over its sequence's cached keys
  // (positions 0..its own), reading the paged cache through the block tables.
  // q, out [n_tokens, n_heads*head_dim].
  virtual void attention(const BatchView& batch, const AttentionParams& attn, const Tensor& q,
                         const KvGeometry& geometry, KvLayer cache, Tensor out) = 0;
  // x[r, :] += bias for every row.  x [n, d]; bias [1, d]
  virtual void add_bias(Tensor x, const Tensor& bias) = 0;
  // out = silu(gate) * up, elementwise.  [n, d]
  virtual void silu_mul(const Tensor& gate, const Tensor& up, Tensor out) = 0;
  // The fused MLP input: out[n, d] = silu(x · gateᵀ) * (x · upᵀ) with gate_up = [gate; up]
  // as one [2d, k] matrix, the 2d-wide product never stored. False when the backend has no
  // such op or not for these rows or this shape (the caller then uses matmul and silu_mul).
  virtual bool matmul_silu_mul(const Tensor& x, const Tensor& gate_up, Tensor out);
  // For i < n: adds to logits[entries[3i], entries[3i + 1]] (row, token id) the bias whose
  // float bits are entries[3i + 2] (a request's logit_bias), or gives it kBannedLogit where
  // that bias is -inf, so no draw picks it (the scheduler's min_tokens holds off
  // end-of-sequence and stop ids). Entries in backend memory, no (row, id) twice; entries
  // outside the tensor are skipped.
  virtual void adjust_logits(Tensor logits, const int32_t* entries, int n) = 0;
  // For i < n: gives kBannedLogit to every id j of logits row rows[i] whose bit in that row's
  // mask, masks[i · W + j / 32] >> (j % 32) & 1 with W = token_mask_words(logits.cols), is 0
  // (a grammar's structured output allows only some ids at each draw); the ids whose bit is
  // set keep their logits, and the bits past the vocabulary are not read. rows [n] and masks
  // [n, W] in backend memory (a row given twice keeps the ids both masks allow); rows outside
  // the tensor are skipped.
  virtual void mask_logits(Tensor logits, const int32_t* rows, const uint32_t* masks, int n) = 0;
  // Scoring of fp32 logits [n, vocab] (Engine::score, and the log-probabilities of drawn
  // tokens), row i predicting t = targets[target_rows ? target_rows[i] : i]: logprobs[i, 0]
  // = the log-softmax of logits[i, t], ids[i, 0] = the row's argmax (lowest id on ties); for
  // r < top_k, ids[i, 1 + r] and logprobs[i, 1 + r] the r-th most likely id and its
  // log-softmax (largest logit first, lowest id on ties). A row with a logit that is not
  // finite gets NaN log-probabilities and ids -1. targets, target_rows [n] (target_rows may
  // be null), logprobs and ids [n, top_k + 1] in backend memory; 0 <= top_k <= vocab.
  virtual void score_rows(const Tensor& logits, const int32_t* targets, const int32_t* target_rows, int top_k,
                          float* logprobs, int32_t* ids) = 0;
  // out[i, :] = x[rows[i], :]; rows in backend memory, n_rows = out.rows.
  virtual void gather_rows(const Tensor& x, const int32_t* rows, Tensor out) = 0;
  // Picks one token per row of fp32 logits [n, vocab]. `history`/`history_lens` give each row's
  // previous tokens for penalties (backend memory, may be null when no penalty is set);
  // `step` makes draws of successive tokens independent. Writes out_ids [n] (backend memory)
  // and, when host_ids is not null, the same ids to host memory (one wait for both).
  virtual void sample(const Tensor& logits, const SamplingParams& params, uint64_t step,
                      const int32_t* history, const int32_t* history_lens, int history_stride,
                      int32_t* out_ids, int32_t* host_ids = nullptr) = 0;
  // The same with each row's own parameters and random key: rows [n] in backend memory.
  // `history` may be null when no row has a penalty; a row whose history_lens entry is 0
  // (or that has no penalty set) is not penalised. The logits are left as they are.
  virtual void sample_rows(const Tensor& logits, const SampleRow* rows, const int32_t* history,
                           const int32_t* history_lens, int history_stride, int32_t* out_ids) = 0;
  // sample_rows in two halves, for a caller that works on the host while the device runs:
  // begin_sample_rows issues the draw without waiting for it; finish_sample_rows waits,
  // raises what sample_rows raises (non-finite logits) and copies the logits.rows ids to
  // host memory. Nothing else may run on the backend in between but score_rows, which may
  // read out_ids and the logits (the drawn tokens' log-probabilities). Default: the whole
  // draw in the first half.
  virtual void begin_sample_rows(const Tensor& logits, const SampleRow* rows, const int32_t* history,
                                 const int32_t* history_lens, int history_stride, int32_t* out_ids);
  virtual void finish_sample_rows(const Tensor& logits, const int32_t* out_ids, int32_t* host_ids);
  // sample() for a caller that issues the next step before it reads this draw's ids (the
  // next step takes its token from out_ids on the device): begin_sample issues the draw and
  // returns a ticket; finish_sample(ticket) waits for that draw only, raises what sample
  // raises (non-finite logits) and then holds its logits.rows ids in host_ids (given to
  // begin_sample, kept valid until then). Up to two draws may be in flight; a third waits
  // for the oldest, whose ticket is then spent. Other ops may run in between. drop_sample
  // spends a ticket whose ids are not wanted: it waits for the draw but raises nothing about
  // its logits (a device fault still throws). Default: the whole draw in the first half, its
  // error (if any) kept for finish_sample.
  virtual int begin_sample(const Tensor& logits, const SamplingParams& params, uint64_t step,
                           const int32_t* history, const int32_t* history_lens, int history_stride,
                           int32_t* out_ids, int32_t* host_ids);
  virtual void finish_sample(int ticket);
  virtual void drop_sample(int ticket);

 private:
  // The default begin_sample's draws: what each of the two tickets raised.
  std::exception_ptr deferred_draw_errors_[2];
  int next_default_ticket_ = 0;
};

// What `qwenrt doctor` reports about the GPUs and the build.
struct GpuDeviceInfo {
  int index = 0;
  std::string name;
  int compute_major = 0, compute_minor = 0;
  size_t free_bytes = 0, total_bytes = 0;
  int multiprocessors = 0;
  double memory_bandwidth = 0;      // theoretical: memory clock × bus width × 2, bytes/s
  bool supported_by_build = false;  // this build has kernels that run on it
  std::string arch_name;            // HIP: the runtime's target id, e.g. "gfx90a:sramecc+:xnack-"
  std::string advice;               // what to do when the build does not cover it (HIP)
};
struct GpuRuntimeInfo {
  bool built_with_gpu = false;
  std::string platform;               // "CUDA" or "HIP"
  std::string build_architectures;    // e.g. "90" or "80 86 89 90"; HIP: "gfx1100 gfx942"
  std::string driver_version;         // "" when no driver is installed
  std::string runtime_version;
  std::string build_runtime_version;  // the runtime version the build was compiled against
  std::string matmul_library;         // cuBLASLt, hipBLASLt, rocBLAS or the tiled kernel
  std::string version_advice;         // set when the runtime is older than the build's
  std::string error;                  // why no device is usable, if none is
  std::vector<GpuDeviceInfo> devices;
};
GpuRuntimeInfo query_gpus();

std::unique_ptr<Backend> make_cpu_backend(int n_threads);

// What a non-finite logit at `where` ("row 3 of 8", "position 12") says of its cause: with
// fp16 activations an overflow, else the model itself (NaN or infinite weights, or a config
// that makes them: a damaged or wrongly converted checkpoint).
std::string non_finite_logits_message(const std::string& where, DType activations);
// What host memory the machine could still give (MemAvailable: free memory and the page
// cache it can drop), or 0 where /proc/meminfo does not say.
double available_host_bytes();
// Throws Error(kUnsupported) when the build has no CUDA backend.
std::unique_ptr<Backend> make_gpu_backend(DType dtype, int device_index);
bool gpu_backend_available();

}  // namespace qwenrt
