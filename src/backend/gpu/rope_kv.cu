// The fused attention-input epilogue: q/k/v bias → per-head q/k RMSNorm (Qwen3) →
// rotate-half RoPE on q and k → k and v written into the paged cache at slot_mapping.
// Work split: the jobs are (token, head), n_heads q heads, then n_kv_heads k heads, then
// n_kv_heads v heads. Head sizes 64, 128 and 256 (aligned rows): a group of d/8 threads
// per job, each owning 4 consecutive RoPE pairs (i, i + d/2) read and written as 8-byte
// vectors; other sizes: one warp per job, lane l owning the pairs i = l, l + kWarpSize, ...
// (a quarter of the threads for the same rows: up to ≈ 420 rows of a 7B layer fit the card
// in one wave, against ≈ 230). Layout: q [n_tokens, n_heads*d], k/v [n_tokens,
// n_kv_heads*d] updated in place, or all three read from one q|k|v product row (row stride
// (n_heads + 2 n_kv_heads)·d) with q written to its own tensor and k/v to the cache only;
// cache [num_blocks, block_size, n_kv_heads, d]. Bound: memory (one read and one or two
// writes of q, k, v); angles in fp32 with accurate cosf/sinf. The original Qwen adds a
// RoPE table row per sequence (its dynamic-NTK alpha) and the logn query scale.
#include <type_traits>

#include "backend/gpu/common.h"
#include "backend/gpu/rope.h"

namespace qwenrt::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kMaxHeadDim = 512;
constexpr int kMaxPairsPerLane = kMaxHeadDim / 2 / gpu::kWarpSize;

struct EpilogueArgs {
  const int32_t* positions;
  const int32_t* slot_mapping;
  const int32_t* token_seq;
  const int32_t* rope_rows;  // [n_seqs] row of inv_freq per sequence; null: row 0
  const float* inv_freq;     // [rows, head_dim / 2]
  float rope_scaling;
  float norm_eps;
  int logn_length;  // 0: off
  int n_tokens;
  int n_heads;
  int n_kv_heads;
  int head_dim;
};

// Where q, k and v are read and written: element (token, head, i) of kind c (0 q, 1 k,
// 2 v) is in[c][token * in_stride[c] + head * d + i]; out[c] null: not written back.
template <typename T>
struct QkvRows {
  const T* in[3];
  int64_t in_stride[3];
  T* out[3];
  int64_t out_stride[3];
};

// Job `job` of the epilogue (q heads, then k heads, then v heads) for one token: where it
// reads and writes, its bias and norm weights, and its cache row (null: none to write).
template <typename T>
struct Job {
  int kind;  // 0 q, 1 k, 2 v
  int head;
  const T* in;
  T* out;  // null: not written back
  const T* bias;
  const T* norm;
  T* cache_row;
};

template <typename T>
__device__ __forceinline__ Job<T> resolve_job(const EpilogueArgs& args, const QkvRows<T>& rows, int token, int job,
                                              const T* q_bias, const T* k_bias, const T* v_bias, const T* q_norm,
                                              const T* k_norm, T* k_cache, T* v_cache) {
  Job<T> j;
  if (job < args.n_heads) {
    j.kind = 0;
    j.head = job;
  } else if (job < args.n_heads + args.n_kv_heads) {
    j.kind = 1;
    j.head = job - args.n_heads;
  } else {
    j.kind = 2;
    j.head = job - args.n_heads - args.n_kv_heads;
  }
  const int d = args.head_dim;
  const int c = j.kind;
  j.in = (c == 0 ? rows.in[0] : c == 1 ? rows.in[1] : rows.in[2]) +
         token * (c == 0 ? rows.in_stride[0] : c == 1 ? rows.in_stride[1] : rows.in_stride[2]) + j.head * d;
  j.out = c == 0 ? rows.out[0] : c == 1 ? rows.out[1] : rows.out[2];
  if (j.out != nullptr) {
    j.out += token * (c == 0 ? rows.out_stride[0] : c == 1 ? rows.out_stride[1] : rows.out_stride[2]) + j.head * d;
  }
  j.bias = c == 0 ? q_bias : c == 1 ? k_bias : v_bias;
  if (j.bias != nullptr) j.bias += j.head * d;
  j.norm = c == 0 ? q_norm : c == 1 ? k_norm : nullptr;
  const int64_t slot = args.slot_mapping[token];
  j.cache_row = c != 0 && slot >= 0 ? (c == 1 ? k_cache : v_cache) + (slot * args.n_kv_heads + j.head) * d : nullptr;
  return j;
}

// The token's RoPE inputs: its position, its inv_freq row and (queries only) the LogN scale.
struct RopeInputs {
  int position;
  const float* inv_freq;
  float logn;
};

__device__ __forceinline__ RopeInputs rope_inputs(const EpilogueArgs& args, int token, int kind) {
  const int position = args.positions[token];
  const float* inv_freq =
      args.inv_freq + (args.rope_rows != nullptr ? args.rope_rows[args.token_seq[token]] : 0) * (args.head_dim / 2);
  return {position, inv_freq, kind == 0 ? logn_factor(args.logn_length, position) : 1.f};
}

template <typename T>
__global__ void __launch_bounds__(kWarpsPerBlock * gpu::kWarpSize)
    qkv_epilogue_kernel(EpilogueArgs args, QkvRows<T> rows, const T* __restrict__ q_bias,
                        const T* __restrict__ k_bias, const T* __restrict__ v_bias,
                        const T* __restrict__ q_norm, const T* __restrict__ k_norm,
                        T* __restrict__ k_cache, T* __restrict__ v_cache, gpu::NextGrid next) {
  gpu::follow_prior_grid(next);
  const int token = blockIdx.x;
  const int job = blockIdx.y * kWarpsPerBlock + threadIdx.x / gpu::kWarpSize;
  const int lane = threadIdx.x % gpu::kWarpSize;
  const int d = args.head_dim;
  const int half = d / 2;
  if (job >= args.n_heads + 2 * args.n_kv_heads) return;
  const Job<T> j = resolve_job(args, rows, token, job, q_bias, k_bias, v_bias, q_norm, k_norm, k_cache, v_cache);

  float lo[kMaxPairsPerLane];
  float hi[kMaxPairsPerLane];
  float sum_sq = 0.f;
#pragma unroll
  for (int p = 0; p < kMaxPairsPerLane; ++p) {
    const int i = lane + p * gpu::kWarpSize;
    lo[p] = hi[p] = 0.f;
    if (i < half) {
      lo[p] = gpu::to_f32(j.in[i]);
      hi[p] = gpu::to_f32(j.in[i + half]);
      if (j.bias != nullptr) {
        lo[p] += gpu::to_f32(j.bias[i]);
        hi[p] += gpu::to_f32(j.bias[i + half]);
      }
      sum_sq += lo[p] * lo[p] + hi[p] * hi[p];
    }
  }
  if (j.norm != nullptr) {
    const float inv_rms = rsqrtf(gpu::warp_sum(sum_sq) / static_cast<float>(d) + args.norm_eps);
#pragma unroll
    for (int p = 0; p < kMaxPairsPerLane; ++p) {
      const int i = lane + p * gpu::kWarpSize;
      if (i < half) {
        lo[p] = lo[p] * inv_rms * gpu::to_f32(j.norm[i]);
        hi[p] = hi[p] * inv_rms * gpu::to_f32(j.norm[i + half]);
      }
    }
  }
  if (j.kind != 2) {
    const RopeInputs rope = rope_inputs(args, token, j.kind);
#pragma unroll
    for (int p = 0; p < kMaxPairsPerLane; ++p) {
      const int i = lane + p * gpu::kWarpSize;
      if (i < half) rope_pair(lo[p], hi[p], rope.position, rope.inv_freq[i], args.rope_scaling, rope.logn);
    }
  }
#pragma unroll
  for (int p = 0; p < kMaxPairsPerLane; ++p) {
    const int i = lane + p * gpu::kWarpSize;
    if (i < half) {
      const T a = gpu::from_f32<T>(lo[p]);
      const T b = gpu::from_f32<T>(hi[p]);
      if (j.out != nullptr) {
        j.out[i] = a;
        j.out[i + half] = b;
      }
      if (j.cache_row != nullptr) {
        j.cache_row[i] = a;
        j.cache_row[i + half] = b;
      }
    }
  }
}

// kVecPairs consecutive pairs of a head per thread, read and written as 8-byte vectors:
// kGroup = (d/2) / kVecPairs threads a head, kVecThreads / kGroup heads a block. The same
// per-element steps as qkv_epilogue_kernel (only the q/k norm's sum is added up in another
// order); a fraction of its threads, so many rows' jobs fit the card at once.
constexpr int kVecPairs = 4;
constexpr int kVecThreads = 128;

template <typename T>
struct alignas(8) Vec4 {
  T v[kVecPairs];
};

// The kVecPairs elements at p + i0 (lo) and p + i0 + half (hi) of a head, as floats.
template <typename T>
__device__ __forceinline__ void load_halves(const T* p, int i0, int half, float (&lo)[kVecPairs],
                                            float (&hi)[kVecPairs]) {
  const Vec4<T> a = *reinterpret_cast<const Vec4<T>*>(p + i0);
  const Vec4<T> b = *reinterpret_cast<const Vec4<T>*>(p + i0 + half);
#pragma unroll
  for (int q = 0; q < kVecPairs; ++q) {
    lo[q] = gpu::to_f32(a.v[q]);
    hi[q] = gpu::to_f32(b.v[q]);
  }
}

template <typename T, int kGroup>
__global__ void __launch_bounds__(kVecThreads)
    qkv_epilogue_vec_kernel(EpilogueArgs args, QkvRows<T> rows, const T* __restrict__ q_bias,
                            const T* __restrict__ k_bias, const T* __restrict__ v_bias,
                            const T* __restrict__ q_norm, const T* __restrict__ k_norm,
                            T* __restrict__ k_cache, T* __restrict__ v_cache, gpu::NextGrid next) {
  constexpr int kHalf = kGroup * kVecPairs;
  gpu::allow_next_grid(next);
  const int token = blockIdx.x;
  const int job = blockIdx.y * (kVecThreads / kGroup) + threadIdx.x / kGroup;
  const int i0 = (threadIdx.x % kGroup) * kVecPairs;
  // No early exit: every lane of the warp takes part in the norm's shuffles.
  const bool active = job < args.n_heads + 2 * args.n_kv_heads;
  // Before the wait, what no kernel writes (compat.h): the job's place from the batch
  // arrays, its bias, norm weights and RoPE inputs, so that after the wait only the
  // product's row is read.
  const Job<T> j = resolve_job(args, rows, token, active ? job : 0, q_bias, k_bias, v_bias, q_norm, k_norm, k_cache,
                               v_cache);
  float bias_lo[kVecPairs] = {}, bias_hi[kVecPairs] = {};
  float norm_lo[kVecPairs] = {}, norm_hi[kVecPairs] = {};
  float freq[kVecPairs] = {};
  RopeInputs rope{0, nullptr, 1.f};
  if (active) {
    if (j.bias != nullptr) load_halves(j.bias, i0, kHalf, bias_lo, bias_hi);
    if (j.norm != nullptr) load_halves(j.norm, i0, kHalf, norm_lo, norm_hi);
    if (j.kind != 2) {
      rope = rope_inputs(args, token, j.kind);
#pragma unroll
      for (int p = 0; p < kVecPairs; ++p) freq[p] = rope.inv_freq[i0 + p];
    }
  }
  gpu::wait_for_prior_grid(next);  // the product's row is the kernel before's
  float lo[kVecPairs] = {};
  float hi[kVecPairs] = {};
  float sum_sq = 0.f;
  if (active) {
    load_halves(j.in, i0, kHalf, lo, hi);
    if (j.bias != nullptr) {
#pragma unroll
      for (int p = 0; p < kVecPairs; ++p) {
        lo[p] += bias_lo[p];
        hi[p] += bias_hi[p];
      }
    }
#pragma unroll
    for (int p = 0; p < kVecPairs; ++p) sum_sq += lo[p] * lo[p] + hi[p] * hi[p];
  }
  const float head_sum_sq = gpu::group_sum<kGroup>(sum_sq);
  if (!active) return;
  if (j.norm != nullptr) {
    const float inv_rms = rsqrtf(head_sum_sq / static_cast<float>(2 * kHalf) + args.norm_eps);
#pragma unroll
    for (int p = 0; p < kVecPairs; ++p) {
      lo[p] = lo[p] * inv_rms * norm_lo[p];
      hi[p] = hi[p] * inv_rms * norm_hi[p];
    }
  }
  if (j.kind != 2) {
#pragma unroll
    for (int p = 0; p < kVecPairs; ++p) rope_pair(lo[p], hi[p], rope.position, freq[p], args.rope_scaling, rope.logn);
  }
  Vec4<T> a, b;
#pragma unroll
  for (int p = 0; p < kVecPairs; ++p) {
    a.v[p] = gpu::from_f32<T>(lo[p]);
    b.v[p] = gpu::from_f32<T>(hi[p]);
  }
  if (j.out != nullptr) {
    *reinterpret_cast<Vec4<T>*>(j.out + i0) = a;
    *reinterpret_cast<Vec4<T>*>(j.out + i0 + kHalf) = b;
  }
  if (j.cache_row != nullptr) {
    *reinterpret_cast<Vec4<T>*>(j.cache_row + i0) = a;
    *reinterpret_cast<Vec4<T>*>(j.cache_row + i0 + kHalf) = b;
  }
}

const void* data_or_null(const Tensor& t) { return t.data; }

template <typename T>
void launch_rows(const BatchView& batch, const AttentionParams& attn, const QkvEpilogue& epilogue,
                 const QkvRows<T>& rows, KvLayer cache, Stream stream) {
  EpilogueArgs args{batch.positions,   batch.slot_mapping,    batch.token_seq,
                    batch.rope_rows,   epilogue.inv_freq,     epilogue.rope_scaling,
                    epilogue.norm_eps, epilogue.logn_length,  batch.n_tokens,
                    attn.n_heads,      attn.n_kv_heads,       attn.head_dim};
  const int jobs = attn.n_heads + 2 * attn.n_kv_heads;
  const auto* q_bias = static_cast<const T*>(data_or_null(epilogue.q_bias));
  const auto* k_bias = static_cast<const T*>(data_or_null(epilogue.k_bias));
  const auto* v_bias = static_cast<const T*>(data_or_null(epilogue.v_bias));
  const auto* q_norm = static_cast<const T*>(data_or_null(epilogue.q_norm));
  const auto* k_norm = static_cast<const T*>(data_or_null(epilogue.k_norm));
  auto* k_cache = static_cast<T*>(cache.k);
  auto* v_cache = static_cast<T*>(cache.v);
  // The vector kernel: head sizes whose half is 4 pairs × a power-of-two group within a
  // warp, every row start and weight 8-byte aligned.
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 8 == 0; };
  bool vector = true;
  for (int c = 0; c < 3; ++c) {
    vector = vector && aligned(rows.in[c]) && rows.in_stride[c] % kVecPairs == 0 && aligned(rows.out[c]) &&
             rows.out_stride[c] % kVecPairs == 0;
  }
  for (const void* p : {static_cast<const void*>(q_bias), static_cast<const void*>(k_bias),
                        static_cast<const void*>(v_bias), static_cast<const void*>(q_norm),
                        static_cast<const void*>(k_norm), static_cast<const void*>(k_cache),
                        static_cast<const void*>(v_cache)}) {
    vector = vector && aligned(p);
  }
  const auto launch_vec = [&](auto group) {
    constexpr int kGroup = decltype(group)::value;
    const dim3 grid(static_cast<unsigned>(batch.n_tokens), ceil_div(jobs, kVecThreads / kGroup));
    launch_chained(qkv_epilogue_vec_kernel<T, kGroup>, grid, kVecThreads, 0, stream, args, rows, q_bias, k_bias,
                   v_bias, q_norm, k_norm, k_cache, v_cache, next_grid_point());
  };
  const int d = attn.head_dim;
  if (vector && d == 2 * kVecPairs * 16) {
    launch_vec(std::integral_constant<int, 16>{});
  } else if (vector && d == 2 * kVecPairs * 8) {
    launch_vec(std::integral_constant<int, 8>{});
  } else if (vector && d == 2 * kVecPairs * 32) {
    launch_vec(std::integral_constant<int, 32>{});
  } else {
    const dim3 grid(static_cast<unsigned>(batch.n_tokens), ceil_div(jobs, kWarpsPerBlock));
    launch_chained(qkv_epilogue_kernel<T>, grid, kWarpsPerBlock * gpu::launch_warp_size(), 0, stream, args, rows,
                   q_bias, k_bias, v_bias, q_norm, k_norm, k_cache, v_cache, next_grid_point());
  }
}

// `sizes` builds the shapes for a message, only when a check fails.
template <typename Sizes>
void check_epilogue(const AttentionParams& attn, const QkvEpilogue& epilogue, DType dtype,
                    const KvGeometry& geometry, const Sizes& sizes) {
  const int d = attn.head_dim;
  QWENRT_CHECK(d > 0 && d % 2 == 0 && d <= kMaxHeadDim, "qkv_rope_kvwrite: unsupported head_dim (" + sizes() + ")");
  QWENRT_CHECK(geometry.dtype == dtype && geometry.n_kv_heads == attn.n_kv_heads && geometry.head_dim == d,
               "qkv_rope_kvwrite: the cache does not match the heads (" + sizes() + ")");
  QWENRT_CHECK(epilogue.inv_freq != nullptr, "qkv_rope_kvwrite: inv_freq is null");
  for (const Tensor* t : {&epilogue.q_bias, &epilogue.k_bias, &epilogue.v_bias, &epilogue.q_norm, &epilogue.k_norm}) {
    QWENRT_CHECK(t->data == nullptr || t->dtype == dtype,
                 "qkv_rope_kvwrite: bias/norm weights must be in the activation dtype");
  }
}

}  // namespace

void launch_qkv_rope_kvwrite(const BatchView& batch, const AttentionParams& attn,
                             const QkvEpilogue& epilogue, Tensor q, Tensor k, Tensor v,
                             const KvGeometry& geometry, KvLayer cache, Stream stream) {
  const int d = attn.head_dim;
  const auto sizes = [&] {
    return "q " + shape_string(q) + ", k " + shape_string(k) + ", heads " +
           std::to_string(attn.n_heads) + "/" + std::to_string(attn.n_kv_heads) + ", head_dim " +
           std::to_string(d);
  };
  check_epilogue(attn, epilogue, q.dtype, geometry, sizes);
  QWENRT_CHECK(q.rows == batch.n_tokens && k.rows == batch.n_tokens && v.rows == batch.n_tokens &&
                   q.cols == static_cast<int64_t>(attn.n_heads) * d &&
                   k.cols == static_cast<int64_t>(attn.n_kv_heads) * d && v.cols == k.cols &&
                   q.dtype == k.dtype && v.dtype == k.dtype,
               "qkv_rope_kvwrite: inconsistent shapes (" + sizes() + ")");
  if (batch.n_tokens == 0) return;
  dispatch_half(q.dtype, "qkv_rope_kvwrite", [&](auto tag) {
    using T = decltype(tag);
    const QkvRows<T> rows{{q.as<T>(), k.as<T>(), v.as<T>()},
                          {q.cols, k.cols, v.cols},
                          {q.as<T>(), k.as<T>(), v.as<T>()},
                          {q.cols, k.cols, v.cols}};
    launch_rows<T>(batch, attn, epilogue, rows, cache, stream);
  });
  QWENRT_CUDA_LAUNCHED("qkv_rope_kvwrite", sizes());
}

void launch_qkv_fused_rope_kvwrite(const BatchView& batch, const AttentionParams& attn,
                                   const QkvEpilogue& epilogue, const Tensor& qkv, Tensor q_out,
                                   const KvGeometry& geometry, KvLayer cache, Stream stream) {
  const int d = attn.head_dim;
  const int64_t q_dim = static_cast<int64_t>(attn.n_heads) * d;
  const int64_t kv_dim = static_cast<int64_t>(attn.n_kv_heads) * d;
  const auto sizes = [&] {
    return "q|k|v " + shape_string(qkv) + ", q " + shape_string(q_out) + ", heads " +
           std::to_string(attn.n_heads) + "/" + std::to_string(attn.n_kv_heads) + ", head_dim " +
           std::to_string(d);
  };
  check_epilogue(attn, epilogue, qkv.dtype, geometry, sizes);
  QWENRT_CHECK(qkv.rows == batch.n_tokens && q_out.rows == batch.n_tokens && qkv.cols == q_dim + 2 * kv_dim &&
                   q_out.cols == q_dim && q_out.dtype == qkv.dtype,
               "qkv_rope_kvwrite: inconsistent shapes (" + sizes() + ")");
  if (batch.n_tokens == 0) return;
  dispatch_half(qkv.dtype, "qkv_rope_kvwrite", [&](auto tag) {
    using T = decltype(tag);
    const T* base = qkv.as<const T>();
    const QkvRows<T> rows{{base, base + q_dim, base + q_dim + kv_dim},
                          {qkv.cols, qkv.cols, qkv.cols},
                          {q_out.as<T>(), nullptr, nullptr},
                          {q_dim, 0, 0}};
    launch_rows<T>(batch, attn, epilogue, rows, cache, stream);
  });
  QWENRT_CUDA_LAUNCHED("qkv_rope_kvwrite (fused q|k|v)", sizes());
}

}  // namespace qwenrt::cuda
