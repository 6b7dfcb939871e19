// Attention for shapes the tiled kernels do not cover (head_dim other than 64/128/256,
// more than 64 q heads per kv head, unaligned tensors): correct for any even head_dim up to
// kMaxHeadDim, built for coverage rather than speed. Work split: one warp per (token,
// q head), keys walked one at a time: lane l holds dims l, l + kWarpSize, ...; the dot
// product is a warp sum and the online softmax state is replicated in every lane.
// Layout: q/out [n_tokens, n_heads*d]; cache [num_blocks, block_size, n_kv_heads, d].
// Bound: latency (one warp reduction per key); used by tiny test models and odd shapes.
#include <cfloat>

#include "backend/gpu/common.h"

namespace qwenrt::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kMaxHeadDim = 256;
constexpr int kMaxDimsPerLane = kMaxHeadDim / gpu::kWarpSize;

struct GenericArgs {
  const int32_t* positions;
  const int32_t* token_seq;
  const int32_t* block_tables;
  int n_tokens;
  int max_blocks_per_seq;
  int block_size;
  int n_heads;
  int n_kv_heads;
  int head_dim;
  int sliding_window;
  float scale;
};

template <typename T>
__global__ void __launch_bounds__(kWarpsPerBlock * gpu::kWarpSize)
    attention_generic_kernel(GenericArgs args, const T* __restrict__ q,
                             const T* __restrict__ k_cache, const T* __restrict__ v_cache,
                             T* __restrict__ out) {
  const int token = blockIdx.x;
  const int head = blockIdx.y * kWarpsPerBlock + threadIdx.x / gpu::kWarpSize;
  const int lane = threadIdx.x % gpu::kWarpSize;
  if (head >= args.n_heads) return;  // whole warp
  const int d = args.head_dim;
  const int kv_head = head / (args.n_heads / args.n_kv_heads);
  const int seq = args.token_seq[token];
  const int pos = args.positions[token];
  const int key_lo = args.sliding_window > 0 ? max(0, pos - args.sliding_window + 1) : 0;
  const T* q_row = q + static_cast<int64_t>(token) * args.n_heads * d + head * d;

  float q_reg[kMaxDimsPerLane];
  float acc[kMaxDimsPerLane];
#pragma unroll
  for (int j = 0; j < kMaxDimsPerLane; ++j) {
    const int i = lane + j * gpu::kWarpSize;
    q_reg[j] = i < d ? gpu::to_f32(q_row[i]) * args.scale : 0.f;
    acc[j] = 0.f;
  }
  float m = -FLT_MAX;
  float l = 0.f;
  const int32_t* block_table = args.block_tables + static_cast<int64_t>(seq) * args.max_blocks_per_seq;
  for (int key = key_lo; key <= pos; ++key) {
    const int64_t slot = static_cast<int64_t>(block_table[key / args.block_size]) * args.block_size +
                         key % args.block_size;
    const int64_t offset = (slot * args.n_kv_heads + kv_head) * d;
    float partial = 0.f;
#pragma unroll
    for (int j = 0; j < kMaxDimsPerLane; ++j) {
      const int i = lane + j * gpu::kWarpSize;
      if (i < d) partial += q_reg[j] * gpu::to_f32(k_cache[offset + i]);
    }
    const float s = gpu::warp_sum(partial);
    const float new_max = fmaxf(m, s);
    const float alpha = expf(m - new_max);
    const float p = expf(s - new_max);
    l = l * alpha + p;
    m = new_max;
#pragma unroll
    for (int j = 0; j < kMaxDimsPerLane; ++j) {
      const int i = lane + j * gpu::kWarpSize;
      if (i < d) acc[j] = acc[j] * alpha + p * gpu::to_f32(v_cache[offset + i]);
    }
  }
  T* out_row = out + static_cast<int64_t>(token) * args.n_heads * d + head * d;
#pragma unroll
  for (int j = 0; j < kMaxDimsPerLane; ++j) {
    const int i = lane + j * gpu::kWarpSize;
    if (i < d) out_row[i] = gpu::from_f32<T>(acc[j] / l);
  }
}

}  // namespace

void launch_attention_generic(const BatchView& batch, const AttentionParams& attn,
                              const Tensor& q, const KvGeometry& geometry, KvLayer cache,
                              Tensor out, Stream stream) {
  const auto sizes = [&] {
    return "tokens " + std::to_string(batch.n_tokens) + ", heads " +
                            std::to_string(attn.n_heads) + "/" + std::to_string(attn.n_kv_heads) +
                            ", head_dim " + std::to_string(attn.head_dim);
  };
  if (attn.head_dim <= 0 || attn.head_dim > kMaxHeadDim) {
    throw Error(ErrorCategory::kUnsupported,
                "attention: head_dim above " + std::to_string(kMaxHeadDim) + " (" + sizes() + ")");
  }
  if (batch.n_tokens == 0) return;
  GenericArgs args{batch.positions, batch.token_seq, batch.block_tables, batch.n_tokens,
                   batch.max_blocks_per_seq, geometry.block_size, attn.n_heads, attn.n_kv_heads,
                   attn.head_dim, attn.sliding_window, attn.scale};
  const dim3 grid(static_cast<unsigned>(batch.n_tokens), ceil_div(attn.n_heads, kWarpsPerBlock));
  dispatch_half(q.dtype, "attention", [&](auto tag) {
    using T = decltype(tag);
    attention_generic_kernel<T><<<grid, kWarpsPerBlock * gpu::launch_warp_size(), 0, stream>>>(
        args, q.as<const T>(), static_cast<const T*>(cache.k), static_cast<const T*>(cache.v),
        out.as<T>());
  });
  QWENRT_CUDA_LAUNCHED("attention (generic)", sizes());
}

}  // namespace qwenrt::cuda
