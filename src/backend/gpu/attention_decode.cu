// Paged decode attention: one new token per sequence, many sequences of different
// lengths. Work split: one block per (split of the key range, kv head, sequence); each
// key group of kLanesPerKey lanes reads one key's K and V row with 16-byte loads
// (kUnroll keys in flight) and keeps an online softmax for every q head of the GQA group,
// so each K/V byte is read once per step. Groups and warps merge in shared memory;
// split-K partials (unnormalised O, max, sum; fp32) merge in a second kernel.
// Layout: cache [num_blocks, block_size, n_kv_heads, d] read through the block tables.
// Bound: memory bandwidth on the KV cache (≈ context · n_kv_heads · d · 4 bytes / seq).
#include <cfloat>

#include "backend/gpu/common.h"

namespace qwenrt::cuda {
namespace {

// Fixed in threads (the host launches it without knowing the warp width): 4 warps on
// NVIDIA and RDNA, 2 on CDNA, so the key groups and their shared memory stay the same.
constexpr int kThreads = 128;
constexpr int kWarps = kThreads / gpu::kWarpSize;
constexpr int kUnroll = 4;
constexpr int kMaxSplits = 64;  // the combine kernel's one warp holds them, several per lane
// A split reads at least this many K elements (8 KiB in bf16: 32 keys at d = 128, 64 at
// d = 64); below it a split's fixed costs and the combine dominate. Measured at a 512-token
// prompt: the 7B (d = 128) 242.0 → 248.1 tok/s going from 64 to 32 keys, 244.1 at 16; the
// 0.5B (d = 64) 1,169 at 64 keys, 1,116 at 32, 1,094 at 16.
constexpr int kMinSplitElements = 4096;
constexpr int kCombineThreads = 512;  // groups of head_dim threads, each merging some splits

struct DecodeArgs {
  const int32_t* positions;
  const int32_t* seq_starts;
  const int32_t* block_tables;
  int max_blocks_per_seq;
  int block_size;
  int n_heads;
  int n_kv_heads;
  int group;
  int n_splits;
  int sliding_window;
  float scale_log2;
  float* partial_out;  // [n_seqs, n_heads, n_splits, d]   (n_splits > 1)
  float* partial_ml;   // [n_seqs, n_heads, n_splits, 2]   max (log2 domain), sum
};

template <typename T, int kHeadDim, int kMaxGroup>
__global__ void __launch_bounds__(kThreads)
    attention_decode_kernel(DecodeArgs args, const T* __restrict__ q,
                            const T* __restrict__ k_cache, const T* __restrict__ v_cache,
                            T* __restrict__ out) {
  constexpr int kChunk = 16 / sizeof(T);
  constexpr int kLanesPerKey = kHeadDim / kChunk;
  static_assert(kLanesPerKey <= gpu::kWarpSize, "one key must fit in a warp");
  constexpr int kGroupsPerWarp = gpu::kWarpSize / kLanesPerKey;
  constexpr int kGroups = kWarps * kGroupsPerWarp;
  __shared__ float red_max[kGroups][kMaxGroup];
  __shared__ float red_sum[kGroups][kMaxGroup];
  __shared__ float red_acc[kGroups][kMaxGroup][kHeadDim];

  const int split = blockIdx.x;
  const int kv_head = blockIdx.y;
  const int seq = blockIdx.z;
  const int token = args.seq_starts[seq];
  if (args.seq_starts[seq + 1] <= token) return;  // no new token for this sequence
  const int pos = args.positions[token];
  const int key_lo = args.sliding_window > 0 ? max(0, pos - args.sliding_window + 1) : 0;
  const int n_keys = pos + 1 - key_lo;
  const int per_split = (n_keys + args.n_splits - 1) / args.n_splits;
  const int begin = key_lo + split * per_split;
  const int end = min(pos + 1, begin + per_split);

  const int lane = threadIdx.x % gpu::kWarpSize;
  const int warp = threadIdx.x / gpu::kWarpSize;
  const int group_id = warp * kGroupsPerWarp + lane / kLanesPerKey;
  const int dim0 = (lane % kLanesPerKey) * kChunk;  // this lane's slice of head_dim
  const int g = args.group;

  float q_reg[kMaxGroup][kChunk];
  float acc[kMaxGroup][kChunk];
  float m[kMaxGroup];
  float l[kMaxGroup];
  const int q_width = args.n_heads * kHeadDim;
#pragma unroll
  for (int h = 0; h < kMaxGroup; ++h) {
    m[h] = -FLT_MAX;
    l[h] = 0.f;
#pragma unroll
    for (int c = 0; c < kChunk; ++c) acc[h][c] = q_reg[h][c] = 0.f;
    if (h < g) {
      const gpu::Vec16<T> raw = *reinterpret_cast<const gpu::Vec16<T>*>(
          q + static_cast<int64_t>(token) * q_width + (kv_head * g + h) * kHeadDim + dim0);
#pragma unroll
      for (int c = 0; c < kChunk; ++c) q_reg[h][c] = gpu::to_f32(raw.v[c]) * args.scale_log2;
    }
  }

  const int32_t* block_table = args.block_tables + static_cast<int64_t>(seq) * args.max_blocks_per_seq;
  const int64_t kv_stride = static_cast<int64_t>(args.n_kv_heads) * kHeadDim;
  // The loop is uniform over each warp (the group reductions shuffle across the whole
  // warp); a group whose keys run past `end` masks them.
  const int group_in_warp = lane / kLanesPerKey;
  for (int base = begin + warp * kGroupsPerWarp * kUnroll; base < end; base += kGroups * kUnroll) {
    const int key0 = base + group_in_warp * kUnroll;
    gpu::Vec16<T> k_raw[kUnroll];
    gpu::Vec16<T> v_raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int key = min(key0 + u, end - 1);  // clamped loads; masked below
      const int64_t slot =
          static_cast<int64_t>(block_table[key / args.block_size]) * args.block_size +
          key % args.block_size;
      const int64_t offset = slot * kv_stride + kv_head * kHeadDim + dim0;
      k_raw[u] = *reinterpret_cast<const gpu::Vec16<T>*>(k_cache + offset);
      v_raw[u] = *reinterpret_cast<const gpu::Vec16<T>*>(v_cache + offset);
    }
    float s[kUnroll][kMaxGroup];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int h = 0; h < kMaxGroup; ++h) {
        float partial = 0.f;
        if (h < g) {
#pragma unroll
          for (int c = 0; c < kChunk; ++c) partial += q_reg[h][c] * gpu::to_f32(k_raw[u].v[c]);
        }
        s[u][h] = gpu::group_sum<kLanesPerKey>(partial);
      }
    }
    if (key0 >= end) continue;  // this group has no key left (after the shuffles)
#pragma unroll
    for (int h = 0; h < kMaxGroup; ++h) {
      if (h >= g) continue;
      float tile_max = s[0][h];  // key0 < end here
#pragma unroll
      for (int u = 1; u < kUnroll; ++u)
        if (key0 + u < end) tile_max = fmaxf(tile_max, s[u][h]);
      const float new_max = fmaxf(m[h], tile_max);
      const float alpha = exp2f(m[h] - new_max);
      m[h] = new_max;
      l[h] *= alpha;
#pragma unroll
      for (int c = 0; c < kChunk; ++c) acc[h][c] *= alpha;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const float p = key0 + u < end ? exp2f(s[u][h] - new_max) : 0.f;
        l[h] += p;
#pragma unroll
        for (int c = 0; c < kChunk; ++c) acc[h][c] += p * gpu::to_f32(v_raw[u].v[c]);
      }
    }
  }

  // Merge the key groups of the block.
#pragma unroll
  for (int h = 0; h < kMaxGroup; ++h) {
    if (h >= g) continue;
    if (lane % kLanesPerKey == 0) {
      red_max[group_id][h] = m[h];
      red_sum[group_id][h] = l[h];
    }
#pragma unroll
    for (int c = 0; c < kChunk; ++c) red_acc[group_id][h][dim0 + c] = acc[h][c];
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < g * kHeadDim; idx += kThreads) {
    const int h = idx / kHeadDim;
    const int dim = idx % kHeadDim;
    float block_max = -FLT_MAX;
    for (int gr = 0; gr < kGroups; ++gr) block_max = fmaxf(block_max, red_max[gr][h]);
    float sum = 0.f;
    float o = 0.f;
    for (int gr = 0; gr < kGroups; ++gr) {
      const float w = red_sum[gr][h] > 0.f ? exp2f(red_max[gr][h] - block_max) : 0.f;
      sum += red_sum[gr][h] * w;
      o += red_acc[gr][h][dim] * w;
    }
    const int head = kv_head * g + h;
    if (args.n_splits == 1) {
      out[static_cast<int64_t>(token) * q_width + head * kHeadDim + dim] = gpu::from_f32<T>(o / sum);
    } else {
      const int64_t part = (static_cast<int64_t>(seq) * args.n_heads + head) * args.n_splits + split;
      args.partial_out[part * kHeadDim + dim] = o;
      if (dim == 0) {
        args.partial_ml[part * 2] = block_max;
        args.partial_ml[part * 2 + 1] = sum;
      }
    }
  }
}

// Merges the split-K partials: out = Σ_s O_s·2^(m_s − M) / Σ_s l_s·2^(m_s − M). The split
// weights are computed once per (sequence, head) in shared memory, so the per-dim loop has
// only independent loads.
template <typename T>
__global__ void attention_combine_kernel(DecodeArgs args, int head_dim, T* __restrict__ out) {
  __shared__ float weight_s[kMaxSplits];
  __shared__ float inv_sum_s;
  __shared__ float group_sum_s[kCombineThreads];  // groups 1.. of the split merge
  const int head = blockIdx.x;
  const int seq = blockIdx.y;
  const int token = args.seq_starts[seq];
  if (args.seq_starts[seq + 1] <= token) return;
  const int64_t part0 = (static_cast<int64_t>(seq) * args.n_heads + head) * args.n_splits;
  if (threadIdx.x < gpu::kWarpSize) {
    // One warp: kMaxSplits partials, kPerLane per lane (two on NVIDIA).
    constexpr int kPerLane = kMaxSplits / gpu::kWarpSize;
    float m[kPerLane], l[kPerLane];
    float local_max = -FLT_MAX;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int s = threadIdx.x + j * gpu::kWarpSize;
      m[j] = -FLT_MAX;
      l[j] = 0.f;
      if (s < args.n_splits) {
        l[j] = args.partial_ml[(part0 + s) * 2 + 1];
        m[j] = l[j] > 0.f ? args.partial_ml[(part0 + s) * 2] : -FLT_MAX;
      }
      local_max = fmaxf(local_max, m[j]);
    }
    const float global_max = gpu::warp_max(local_max);
    float local_sum = 0.f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int s = threadIdx.x + j * gpu::kWarpSize;
      const float w = l[j] > 0.f ? exp2f(m[j] - global_max) : 0.f;  // empty split: 0
      if (s < args.n_splits) weight_s[s] = w;
      local_sum += l[j] * w;
    }
    const float sum = gpu::warp_sum(local_sum);
    if (threadIdx.x == 0) inv_sum_s = 1.f / sum;
  }
  __syncthreads();
  // Thread groups of head_dim threads each merge every groups-th split; group 0 adds theirs.
  const int groups = static_cast<int>(blockDim.x) / head_dim;
  const int group = static_cast<int>(threadIdx.x) / head_dim;
  const int dim = static_cast<int>(threadIdx.x) % head_dim;
  float o = 0.f;
  if (group < groups) {
#pragma unroll 8
    for (int s = group; s < args.n_splits; s += groups) o += args.partial_out[(part0 + s) * head_dim + dim] * weight_s[s];
  }
  if (group > 0 && group < groups) group_sum_s[(group - 1) * head_dim + dim] = o;
  __syncthreads();
  if (group == 0) {
    for (int g = 1; g < groups; ++g) o += group_sum_s[(g - 1) * head_dim + dim];
    out[static_cast<int64_t>(token) * args.n_heads * head_dim + head * head_dim + dim] = gpu::from_f32<T>(o * inv_sum_s);
  }
}

template <typename T, int kHeadDim, int kMaxGroup>
void launch_typed(const BatchView& batch, const DecodeArgs& args, const Tensor& q, KvLayer cache,
                  Tensor out, Stream stream) {
  const dim3 grid(static_cast<unsigned>(args.n_splits), static_cast<unsigned>(args.n_kv_heads),
                  static_cast<unsigned>(batch.n_seqs));
  attention_decode_kernel<T, kHeadDim, kMaxGroup><<<grid, kThreads, 0, stream>>>(
      args, q.as<const T>(), static_cast<const T*>(cache.k), static_cast<const T*>(cache.v),
      out.as<T>());
  if (args.n_splits > 1) {
    const dim3 combine_grid(static_cast<unsigned>(args.n_heads), static_cast<unsigned>(batch.n_seqs));
    attention_combine_kernel<T><<<combine_grid, kCombineThreads, 0, stream>>>(args, kHeadDim, out.as<T>());
  }
}

template <typename T, int kHeadDim>
void dispatch_group(const BatchView& batch, const DecodeArgs& args, const Tensor& q,
                    KvLayer cache, Tensor out, Stream stream) {
  if (args.group <= 1) {
    launch_typed<T, kHeadDim, 1>(batch, args, q, cache, out, stream);
  } else if (args.group <= 2) {
    launch_typed<T, kHeadDim, 2>(batch, args, q, cache, out, stream);
  } else if (args.group <= 4) {
    launch_typed<T, kHeadDim, 4>(batch, args, q, cache, out, stream);
  } else {
    launch_typed<T, kHeadDim, 8>(batch, args, q, cache, out, stream);
  }
}

}  // namespace

bool launch_attention_decode(const BatchView& batch, const AttentionParams& attn,
                             const Tensor& q, const KvGeometry& geometry, KvLayer cache,
                             Tensor out, float* workspace, size_t workspace_bytes,
                             int multiprocessors, Stream stream) {
  const int group = attn.n_heads / attn.n_kv_heads;
  if (batch.max_new_tokens != 1 || group > 8 || (attn.head_dim != 64 && attn.head_dim != 128))
    return false;
  if (batch.n_seqs == 0) return true;

  // Enough blocks for several waves (long contexts need many loads in flight), each split
  // reading at least kMinSplitElements of K.
  const int base_blocks = batch.n_seqs * attn.n_kv_heads;
  int n_splits = static_cast<int>(ceil_div(8 * multiprocessors, base_blocks));
  n_splits = std::min(n_splits, static_cast<int>(ceil_div(batch.max_context_len, kMinSplitElements / attn.head_dim)));
  n_splits = std::clamp(n_splits, 1, kMaxSplits);
  const size_t per_split_bytes = static_cast<size_t>(batch.n_seqs) * attn.n_heads *
                                 (attn.head_dim + 2) * sizeof(float);
  n_splits = std::min<int>(n_splits, static_cast<int>(workspace_bytes / per_split_bytes));
  n_splits = std::max(n_splits, 1);

  DecodeArgs args{};
  args.positions = batch.positions;
  args.seq_starts = batch.seq_starts;
  args.block_tables = batch.block_tables;
  args.max_blocks_per_seq = batch.max_blocks_per_seq;
  args.block_size = geometry.block_size;
  args.n_heads = attn.n_heads;
  args.n_kv_heads = attn.n_kv_heads;
  args.group = group;
  args.n_splits = n_splits;
  args.sliding_window = attn.sliding_window;
  args.scale_log2 = attn.scale * kLog2e;
  args.partial_out = workspace;
  args.partial_ml = workspace + static_cast<size_t>(batch.n_seqs) * attn.n_heads * n_splits *
                                    attn.head_dim;

  dispatch_half(q.dtype, "attention", [&](auto tag) {
    using T = decltype(tag);
    if (attn.head_dim == 64) {
      dispatch_group<T, 64>(batch, args, q, cache, out, stream);
    } else {
      dispatch_group<T, 128>(batch, args, q, cache, out, stream);
    }
  });
  QWENRT_CUDA_LAUNCHED("attention (decode)",
                       "seqs " + std::to_string(batch.n_seqs) + ", heads " +
                           std::to_string(attn.n_heads) + "/" + std::to_string(attn.n_kv_heads) +
                           ", head_dim " + std::to_string(attn.head_dim) + ", splits " +
                           std::to_string(n_splits));
  return true;
}

}  // namespace qwenrt::cuda
