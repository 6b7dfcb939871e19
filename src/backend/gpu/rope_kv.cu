// The fused attention-input epilogue: q/k/v bias → per-head q/k RMSNorm (Qwen3) →
// rotate-half RoPE on q and k → k and v written into the paged cache at slot_mapping.
// Work split: one warp per (token, head) job, the jobs being n_heads q heads, then
// n_kv_heads k heads, then n_kv_heads v heads; lane l owns the RoPE pairs (i, i + d/2)
// for i = l, l + kWarpSize, ... Layout: q [n_tokens, n_heads*d], k/v [n_tokens,
// n_kv_heads*d] updated in place, or all three read from one q|k|v product row (row stride
// (n_heads + 2 n_kv_heads)·d) with q written to its own tensor and k/v to the cache only;
// cache [num_blocks, block_size, n_kv_heads, d]. Bound: memory (one read and one or two
// writes of q, k, v); angles in fp32 with accurate cosf/sinf. The original Qwen adds a
// RoPE table row per sequence (its dynamic-NTK alpha) and the logn query scale.
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

template <typename T>
__global__ void __launch_bounds__(kWarpsPerBlock * gpu::kWarpSize)
    qkv_epilogue_kernel(EpilogueArgs args, QkvRows<T> rows, const T* __restrict__ q_bias,
                        const T* __restrict__ k_bias, const T* __restrict__ v_bias,
                        const T* __restrict__ q_norm, const T* __restrict__ k_norm,
                        T* __restrict__ k_cache, T* __restrict__ v_cache) {
  const int token = blockIdx.x;
  const int job = blockIdx.y * kWarpsPerBlock + threadIdx.x / gpu::kWarpSize;
  const int lane = threadIdx.x % gpu::kWarpSize;
  const int d = args.head_dim;
  const int half = d / 2;
  if (job >= args.n_heads + 2 * args.n_kv_heads) return;

  // Which tensor this warp works on, and the head within it.
  int kind;  // 0 q, 1 k, 2 v
  int head;
  if (job < args.n_heads) {
    kind = 0;
    head = job;
  } else if (job < args.n_heads + args.n_kv_heads) {
    kind = 1;
    head = job - args.n_heads;
  } else {
    kind = 2;
    head = job - args.n_heads - args.n_kv_heads;
  }
  const T* in = (kind == 0 ? rows.in[0] : kind == 1 ? rows.in[1] : rows.in[2]) +
                token * (kind == 0 ? rows.in_stride[0] : kind == 1 ? rows.in_stride[1] : rows.in_stride[2]) +
                head * d;
  T* out = kind == 0 ? rows.out[0] : kind == 1 ? rows.out[1] : rows.out[2];
  if (out != nullptr) {
    out += token * (kind == 0 ? rows.out_stride[0] : kind == 1 ? rows.out_stride[1] : rows.out_stride[2]) + head * d;
  }
  const T* bias = kind == 0 ? q_bias : kind == 1 ? k_bias : v_bias;
  const T* norm = kind == 0 ? q_norm : kind == 1 ? k_norm : nullptr;

  float lo[kMaxPairsPerLane];
  float hi[kMaxPairsPerLane];
  float sum_sq = 0.f;
#pragma unroll
  for (int j = 0; j < kMaxPairsPerLane; ++j) {
    const int i = lane + j * gpu::kWarpSize;
    lo[j] = hi[j] = 0.f;
    if (i < half) {
      lo[j] = gpu::to_f32(in[i]);
      hi[j] = gpu::to_f32(in[i + half]);
      if (bias != nullptr) {
        lo[j] += gpu::to_f32(bias[head * d + i]);
        hi[j] += gpu::to_f32(bias[head * d + i + half]);
      }
      sum_sq += lo[j] * lo[j] + hi[j] * hi[j];
    }
  }
  if (norm != nullptr) {
    const float inv_rms = rsqrtf(gpu::warp_sum(sum_sq) / static_cast<float>(d) + args.norm_eps);
#pragma unroll
    for (int j = 0; j < kMaxPairsPerLane; ++j) {
      const int i = lane + j * gpu::kWarpSize;
      if (i < half) {
        lo[j] = lo[j] * inv_rms * gpu::to_f32(norm[i]);
        hi[j] = hi[j] * inv_rms * gpu::to_f32(norm[i + half]);
      }
    }
  }
  if (kind != 2) {
    const int position = args.positions[token];
    const float* inv_freq =
        args.inv_freq + (args.rope_rows != nullptr ? args.rope_rows[args.token_seq[token]] : 0) * half;
    const float logn = kind == 0 ? logn_factor(args.logn_length, position) : 1.f;  // queries only
#pragma unroll
    for (int j = 0; j < kMaxPairsPerLane; ++j) {
      const int i = lane + j * gpu::kWarpSize;
      if (i < half) rope_pair(lo[j], hi[j], position, inv_freq[i], args.rope_scaling, logn);
    }
  }
  const int64_t slot = args.slot_mapping[token];
  T* cache_row = nullptr;
  if (kind != 0 && slot >= 0) {
    cache_row = (kind == 1 ? k_cache : v_cache) + (slot * args.n_kv_heads + head) * d;
  }
#pragma unroll
  for (int j = 0; j < kMaxPairsPerLane; ++j) {
    const int i = lane + j * gpu::kWarpSize;
    if (i < half) {
      const T a = gpu::from_f32<T>(lo[j]);
      const T b = gpu::from_f32<T>(hi[j]);
      if (out != nullptr) {
        out[i] = a;
        out[i + half] = b;
      }
      if (cache_row != nullptr) {
        cache_row[i] = a;
        cache_row[i + half] = b;
      }
    }
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
  const dim3 grid(static_cast<unsigned>(batch.n_tokens), ceil_div(jobs, kWarpsPerBlock));
  qkv_epilogue_kernel<T><<<grid, kWarpsPerBlock * gpu::launch_warp_size(), 0, stream>>>(
      args, rows, static_cast<const T*>(data_or_null(epilogue.q_bias)),
      static_cast<const T*>(data_or_null(epilogue.k_bias)), static_cast<const T*>(data_or_null(epilogue.v_bias)),
      static_cast<const T*>(data_or_null(epilogue.q_norm)), static_cast<const T*>(data_or_null(epilogue.k_norm)),
      static_cast<T*>(cache.k), static_cast<T*>(cache.v));
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
