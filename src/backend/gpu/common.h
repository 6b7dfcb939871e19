// Host-side helpers shared by the CUDA backend's translation units: checked runtime
// calls (a failure names the op and the sizes), dtype dispatch to kernel templates, and
// the launch functions each .cu file exports to gpu_backend.cu.
#pragma once

#include <algorithm>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/gpu/compat.h"
#include "core/error.h"

namespace qwenrt::cuda {

using gpu::Stream;

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* op,
                                   const std::string& detail);

// Checks a runtime call. `op` names the backend op, `detail` (built only on failure)
// its sizes.
#define QWENRT_CUDA_CALL(call, op, detail)                                          \
  do {                                                                              \
    cudaError_t qwenrt_status_ = (call);                                            \
    if (qwenrt_status_ != cudaSuccess)                                              \
      ::qwenrt::cuda::throw_cuda_error(qwenrt_status_, #call, (op), (detail));      \
  } while (0)

// Checks the launch of the kernel just issued (configuration errors surface here;
// faults inside the kernel surface at the next synchronizing call).
#define QWENRT_CUDA_LAUNCHED(op, detail) QWENRT_CUDA_CALL(cudaGetLastError(), (op), (detail))

// Whether launch_chained makes chained launches: a device of compute capability 9.0 or
// later, and the backend's setting (set_chained_launches), which QWENRT_CHAINED_LAUNCHES
// (off, deep or shallow) overrides for measurements. One process-wide setting: a process
// drives one device.
bool chained_launches();

// Where the kernel about to be launched lets the next chained one be placed (compat.h's
// NextGrid), from the setting: kDeep: first thing; kShallow: once past its own wait. A
// matrix-vector product streaming `weight_bytes` takes next_grid_point_for_product: under
// kShallow, first thing below 8 MiB of weights (a short product), else once its weights
// are read. Measured on an H200, docs/PERFORMANCE.md.
gpu::NextGrid next_grid_point();
gpu::NextGrid next_grid_point_for_product(size_t weight_bytes);

// kernel<<<grid, block, shared, stream>>>(args...), chained to the kernel before it on the
// stream where chained_launches() (the kernel then follows compat.h's rules for
// wait_for_prior_grid), a plain launch elsewhere. Recorded into graphs as such.
template <typename... Params, typename... Args>
void launch_chained(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, Stream stream,
                    Args&&... args) {
#if !defined(QWENRT_GPU_HIP)
  if (chained_launches()) {
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = shared;
    config.stream = stream;
    cudaLaunchAttribute chained[1];
    chained[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    chained[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = chained;
    config.numAttrs = 1;
    QWENRT_CUDA_CALL(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...), "launch", "chained");
    return;
  }
#endif
  kernel<<<grid, block, shared, stream>>>(static_cast<Params>(args)...);
}

// Calls fn(T{}) with T the storage type of `dtype` (bf16 or fp16).
template <typename Fn>
void dispatch_half(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::kBF16: fn(gpu::bf16{}); return;
    case DType::kF16: fn(gpu::f16{}); return;
    default:
      throw Error(ErrorCategory::kUnsupported,
                  std::string(op) + ": the CUDA backend takes bf16 or fp16 tensors, got " +
                      dtype_name(dtype));
  }
}

// log2(e): the attention kernels take the softmax in base 2 (exp2 of scores scaled by it).
constexpr float kLog2e = 1.4426950408889634f;

inline unsigned ceil_div(long long a, long long b) { return static_cast<unsigned>((a + b - 1) / b); }

std::string shape_string(const Tensor& t);

// The operands of out = x · wᵀ, for error messages.
inline std::string matmul_sizes(const Tensor& x, const Tensor& w, const Tensor& out) {
  return "x " + shape_string(x) + " · w " + shape_string(w) + "ᵀ -> out " + shape_string(out);
}

// Checks out = x · wᵀ for every matrix-product implementation: consistent shapes, bf16/fp16
// operands, out in their type or fp32. False when there is nothing to compute.
inline bool check_matmul(const Tensor& x, const Tensor& w, const Tensor& out) {
  QWENRT_CHECK(w.cols == x.cols && out.rows == x.rows && out.cols == w.rows && x.dtype == w.dtype &&
                   (out.dtype == x.dtype || out.dtype == DType::kF32),
               "matmul: inconsistent shapes or dtypes: " + matmul_sizes(x, w, out));
  if (x.rows == 0 || w.rows == 0) return false;
  if (x.dtype != DType::kBF16 && x.dtype != DType::kF16) {
    throw Error(ErrorCategory::kUnsupported,
                "matmul: the GPU backend takes bf16/fp16 operands: " + matmul_sizes(x, w, out));
  }
  return true;
}

// out[n, m] = x[n, k] · w[m, k]ᵀ, fp32 accumulation. CUDA: cuBLASLt (matmul_cublaslt.cu),
// one descriptor set and heuristic algorithm per (shape, dtypes, alignments), cached. HIP:
// hipBLASLt where the build found it (matmul_hipblaslt.cu), else a portable tiled kernel
// (matmul_tiled.cu). One implementation is compiled into a build.
class Matmul {
 public:
  // multiprocessors: the device's, for implementations that weigh a launch's waves.
  Matmul(void* workspace, size_t workspace_bytes, int multiprocessors);
  ~Matmul();
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;
  void run(const Tensor& x, const Tensor& w, Tensor out, Stream stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- launchers (one group per .cu file) ----
// matmul_gemv.cu: out = x · wᵀ for 1..kMaxGemvRows rows of x (decode), streaming w at
// memory bandwidth. Returns false when the shape or alignment is not one it takes (the
// caller uses Matmul). Past one row the small-row kernel below comes first where it applies.
constexpr int kMaxGemvRows = 4;
bool launch_gemv(const Tensor& x, const Tensor& w, Tensor out, Stream stream);
// matmul_small.cu: the same for kMinSmallRows .. kMaxSmallRows rows on tensor cores (CUDA;
// false elsewhere, or when the shape is not one it takes: k a multiple of 64, w's rows of 16).
// At 2-4 rows it reads w faster than the matrix-vector kernel, whose fp32 dot products grow
// with the rows (H100, 7B: a 4-sequence decode step 6.29 → 5.25 ms); past 16 rows its x
// fragments cost more than it gains (32 rows: 6.13 → 7.22 ms), and the matrix library
// takes them.
constexpr int kMinSmallRows = 2;
constexpr int kMaxSmallRows = 16;
bool small_matmul_applies(const Tensor& x, const Tensor& w);
bool launch_small_matmul(const Tensor& x, const Tensor& w, Tensor out, Stream stream);
// out = silu(x · gateᵀ) * (x · upᵀ) with gate_up = [gate; up] ([2 out.cols, k]) for one row;
// false when the shape is not one it takes.
bool launch_gemv_silu_mul(const Tensor& x, const Tensor& gate_up, Tensor out, Stream stream);

// matmul_gated_sm90.cu: the same op for many rows on a compute capability 9.0 device
// (wgmma, bulk tensor copies), out.cols and k multiples of 64; false elsewhere, in builds
// without sm_90 code, and outside the shapes where it measured faster than the two products
// and silu_mul (256-384 rows of a wide MLP) unless QWENRT_GATED_PRODUCT says otherwise:
// "off" never, "on" every shape it takes from 17 rows (tests, measurements). Read at each
// call; a recorded step keeps what it was recorded with.
bool launch_gated_product_sm90(const Tensor& x, const Tensor& gate_up, Tensor out, Stream stream);
// The q|k|v product with rope_kv.cu's epilogue folded in, for models without per-head q/k
// norms: q to q_out, k and v into the cache; false when it does not apply (the caller runs
// the product and the epilogue), also for 2-4 rows the small-row kernel takes (it and the
// epilogue apart are faster there: a 4-sequence 7B step 5.37 → 5.25 ms on an H100).
bool launch_gemv_qkv_rope_kvwrite(const Tensor& x, const Tensor& qkv, const BatchView& batch,
                                  const AttentionParams& attn, const QkvEpilogue& epilogue, Tensor q_out,
                                  const KvGeometry& geometry, KvLayer cache, Stream stream);

// elementwise.cu
void launch_embed(const BatchView& batch, const Tensor& table, Tensor out, Stream stream);
void launch_silu_mul(const Tensor& gate, const Tensor& up, Tensor out, Stream stream);
void launch_add_bias(Tensor x, const Tensor& bias, Stream stream);
void launch_gather_rows(const Tensor& x, const int32_t* rows, Tensor out, Stream stream);

// norm.cu
void launch_rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor out, Stream stream);
void launch_add_rmsnorm(Tensor residual, const Tensor& delta, const Tensor& weight, float eps,
                        Tensor out, Stream stream);

// rope_kv.cu
void launch_qkv_rope_kvwrite(const BatchView& batch, const AttentionParams& attn,
                             const QkvEpilogue& epilogue, Tensor q, Tensor k, Tensor v,
                             const KvGeometry& geometry, KvLayer cache, Stream stream);
// The same reading q, k and v from one q|k|v product [n_tokens, q_dim + 2 kv_dim]; the
// rotated q goes to q_out [n_tokens, q_dim], k and v to the cache only.
void launch_qkv_fused_rope_kvwrite(const BatchView& batch, const AttentionParams& attn,
                                   const QkvEpilogue& epilogue, const Tensor& qkv, Tensor q_out,
                                   const KvGeometry& geometry, KvLayer cache, Stream stream);

// attention_prefill.cu: any batch (prompt chunks, decode tokens, mixed). Returns false
// when its tiles need more than `max_shared_bytes` of shared memory per block (the caller
// falls back to the generic kernel).
bool launch_attention_prefill(const BatchView& batch, const AttentionParams& attn,
                              const Tensor& q, const KvGeometry& geometry, KvLayer cache,
                              Tensor out, size_t max_shared_bytes, Stream stream);

// attention_prefill_mma.cu: the same on tensor cores (CUDA only; head_dim 64 or 128).
// Returns false where it does not apply (HIP builds, other shapes).
bool launch_attention_prefill_mma(const BatchView& batch, const AttentionParams& attn,
                                  const Tensor& q, const KvGeometry& geometry, KvLayer cache,
                                  Tensor out, Stream stream);

// attention_generic.cu: any head_dim up to 256, any group, no alignment needs.
void launch_attention_generic(const BatchView& batch, const AttentionParams& attn,
                              const Tensor& q, const KvGeometry& geometry, KvLayer cache,
                              Tensor out, Stream stream);
// device_query.cu: the memory's rated bandwidth (memory clock × bus width × 2), bytes/s;
// 0 where the runtime does not say.
double rated_memory_bandwidth(int device);

// Query heads per kv head the tiled kernels (prefill, decode) take.
constexpr int kMaxTiledGroup = 64;

// The most new tokens a batch may hold for its attention to run as token rows (below): on an
// H100, 16 new tokens over a 1,040-token context take 21 µs a layer that way against 46 in the
// prompt kernels, 64 take 37.5 against 46.5, and short contexts lose nothing
// (docs/PERFORMANCE.md).
constexpr int kTokenRowsMaxTokens = 64;

// attention_decode.cu: batches of one new token per sequence. Returns false when the
// shape has no decode kernel (the caller falls back to the prefill kernel).
// `workspace` holds the split-K partial results (`workspace_bytes` of them);
// `max_shared_bytes` is the device's shared memory a block may opt into. With `token_rows`
// any batch: every new token is a row of its own over its sequence's keys up to its
// position, split over those keys as a decode row is (for a few new tokens over long
// contexts, where the prompt kernels walk each context in one block a head).
bool launch_attention_decode(const BatchView& batch, const AttentionParams& attn,
                             const Tensor& q, const KvGeometry& geometry, KvLayer cache,
                             Tensor out, float* workspace, size_t workspace_bytes,
                             int multiprocessors, size_t max_shared_bytes, Stream stream,
                             bool token_rows = false);

// sampling.cu
struct SamplingWorkspace {
  float* logits = nullptr;      // [rows, vocab] penalised copy of the logits
  int32_t* counts = nullptr;    // [rows, vocab] token counts, all zero between calls
  int32_t* status = nullptr;    // [1] device flag: row + 1 of a non-finite logit, else 0
  size_t rows = 0;              // capacity in rows
  size_t vocab = 0;             // capacity in columns
  int32_t* histogram = nullptr;  // [histogram_rows, buckets] counts, then the no-top_k path's masses
  size_t histogram_rows = 0;
};
// Bytes of SamplingWorkspace::histogram for `rows` rows.
size_t sampling_histogram_bytes(size_t rows);
// Samples out_ids[n] from logits [n, vocab]; leaves the non-finite flag in ws.status.
void launch_sample(const Tensor& logits, const SamplingParams& params, uint64_t step,
                   const int32_t* history, const int32_t* history_lens, int history_stride,
                   int32_t* out_ids, const SamplingWorkspace& ws, Stream stream);
// A greedy draw's state between its blocks, one entry a row and one more (its `bad` counts
// the blocks that finished); all zero between draws.
struct GreedyScratch {
  unsigned long long key;  // the row's argmax: the complement of its smallest candidate key
  unsigned int bad;        // a non-finite logit was seen
  unsigned int unused;
};
// Greedy draws of logits [n, vocab] in one launch: out_ids [n] (device memory) and `record`
// (host memory the device writes: the status word as in SamplingWorkspace::status, then
// the n ids). `scratch`: n + 1 entries, zero on entry and on return.
void launch_greedy_draw(const Tensor& logits, int32_t* out_ids, int32_t* record, GreedyScratch* scratch,
                        Stream stream);
// Backend::adjust_logits: (row, id, bias bits) entries [n, 3] in device memory.
void launch_adjust_logits(Tensor logits, const int32_t* entries, int n, Stream stream);
// Backend::mask_logits: rows [n] and masks [n, token_mask_words(logits.cols)] in device memory.
void launch_mask_logits(Tensor logits, const int32_t* rows, const uint32_t* masks, int n, Stream stream);
// Backend::score_rows: targets, target_rows (may be null) [rows], logprobs and ids [rows, top_k + 1] in device memory;
// workspace of score_workspace_bytes(rows, vocab, top_k) bytes (0: none needed).
size_t score_workspace_bytes(int64_t rows, int64_t vocab, int top_k);
void launch_score_rows(const Tensor& logits, const int32_t* targets, const int32_t* target_rows, int top_k,
                       float* logprobs, int32_t* ids, void* workspace,
                       Stream stream);
// The same with per-row parameters and random keys, rows [n] in device memory.
void launch_sample_rows(const Tensor& logits, const SampleRow* rows, const int32_t* history,
                        const int32_t* history_lens, int history_stride, int32_t* out_ids,
                        const SamplingWorkspace& ws, Stream stream);

}  // namespace qwenrt::cuda
