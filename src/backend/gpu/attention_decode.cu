// Paged decode attention: one new token per sequence, many sequences of different
// lengths. Work split: one block per (split of the key range, kv head, sequence), so each
// K/V byte is read once per step for the whole q-head group; split-K partials (unnormalised
// O, max, sum; fp32) merge in a second kernel. Two kernels do the split: on CUDA a
// tensor-core one (mma.sync over K/V tiles in shared memory) for any batch, elsewhere a
// SIMT one (each key group of kLanesPerKey lanes reads one key's K and V row with 16-byte
// loads, kUnroll keys in flight, and keeps an online softmax for every q head of the group;
// groups and warps merge in shared memory).
// Layout: cache [num_blocks, block_size, n_kv_heads, d] read through the block tables.
// Bound: memory bandwidth on the KV cache (≈ context · n_kv_heads · d · 4 bytes / seq).
#include <cfloat>
#include <cstdlib>

#include "backend/gpu/attention_mma.h"
#include "backend/gpu/common.h"

namespace qwenrt::cuda {
namespace {

// Fixed in threads (the host launches it without knowing the warp width): 4 warps on
// NVIDIA and RDNA, 2 on CDNA, so the key groups and their shared memory stay the same.
constexpr int kThreads = 128;
constexpr int kWarps = kThreads / gpu::kWarpSize;
constexpr int kUnroll = 4;
constexpr int kMaxSplits = 64;  // each warp of the combine holds their (max, sum), several a lane
// A split reads at least this many K elements (8 KiB in bf16: 32 keys at d = 128, 64 at
// d = 64); below it a split's fixed costs and the combine dominate. Measured at a 512-token
// prompt: the 7B (d = 128) 242.0 → 248.1 tok/s going from 64 to 32 keys, 244.1 at 16; the
// 0.5B (d = 64) 1,169 at 64 keys, 1,116 at 32, 1,094 at 16.
constexpr int kMinSplitElements = 4096;

struct DecodeArgs {
  const int32_t* positions;
  const int32_t* seq_starts;
  const int32_t* block_tables;
  // Token rows (launch_attention_decode's token_rows): the grid's "sequences" are the batch's
  // tokens, row r token r of sequence row_seq[r] (the batch's token_seq). Null: one new
  // token per sequence, found through seq_starts.
  const int32_t* row_seq;
  int max_blocks_per_seq;
  int block_size;
  int n_heads;
  int n_kv_heads;
  int group;
  int n_splits;
  int sliding_window;
  int early_keys;  // 0: the keys may be this pass's (BatchView::keys_in_pass), read after the wait
  float scale_log2;
  float* partial_out;  // [n_seqs, n_heads, n_splits, d]   (n_splits > 1)
  float* partial_ml;   // [n_seqs, n_heads, n_splits, 2]   max (log2 domain), sum
};

// The keys [begin, end) that split `split` of sequence `seq` attends to, and its new
// token; false when the sequence has no new token (uniform over the block). A split may
// be empty (end <= begin): it still leaves an empty partial for the combine.
struct SplitRange {
  int token, begin, end, last;  // last: the new token's position
};
__device__ __forceinline__ bool split_range(const DecodeArgs& args, int seq, int split, SplitRange& range) {
  range.token = args.row_seq != nullptr ? seq : args.seq_starts[seq];
  if (args.row_seq == nullptr && args.seq_starts[seq + 1] <= range.token) return false;
  const int pos = args.positions[range.token];
  range.last = pos;
  const int key_lo = args.sliding_window > 0 ? max(0, pos - args.sliding_window + 1) : 0;
  const int per_split = (pos + 1 - key_lo + args.n_splits - 1) / args.n_splits;
  range.begin = key_lo + split * per_split;
  range.end = min(pos + 1, range.begin + per_split);
  return true;
}

// The block table of the grid's sequence `seq` (a token row's sequence's, with row_seq).
__device__ __forceinline__ const int32_t* block_table_of(const DecodeArgs& args, int seq) {
  const int table = args.row_seq != nullptr ? args.row_seq[seq] : seq;
  return args.block_tables + static_cast<int64_t>(table) * args.max_blocks_per_seq;
}

// One (head, dim) of a split's result: the output itself when there is one split, else the
// partial (unnormalised O; with dim 0 the max and sum) for the combine.
template <typename T>
__device__ __forceinline__ void write_split_result(const DecodeArgs& args, int seq, int split, int token, int head,
                                                   int dim, int head_dim, float o, float max, float sum,
                                                   T* __restrict__ out) {
  if (args.n_splits == 1) {
    out[(static_cast<int64_t>(token) * args.n_heads + head) * head_dim + dim] = gpu::from_f32<T>(o / sum);
    return;
  }
  const int64_t part = (static_cast<int64_t>(seq) * args.n_heads + head) * args.n_splits + split;
  args.partial_out[part * head_dim + dim] = o;
  if (dim == 0) {
    args.partial_ml[part * 2] = max;
    args.partial_ml[part * 2 + 1] = sum;
  }
}

template <typename T, int kHeadDim, int kMaxGroup>
__global__ void __launch_bounds__(kThreads)
    attention_decode_kernel(DecodeArgs args, const T* __restrict__ q,
                            const T* __restrict__ k_cache, const T* __restrict__ v_cache,
                            T* __restrict__ out, gpu::NextGrid next) {
  constexpr int kChunk = 16 / sizeof(T);
  constexpr int kLanesPerKey = kHeadDim / kChunk;
  static_assert(kLanesPerKey <= gpu::kWarpSize, "one key must fit in a warp");
  constexpr int kGroupsPerWarp = gpu::kWarpSize / kLanesPerKey;
  constexpr int kGroups = kWarps * kGroupsPerWarp;
  __shared__ float red_max[kGroups][kMaxGroup];
  __shared__ float red_sum[kGroups][kMaxGroup];
  __shared__ float red_acc[kGroups][kMaxGroup][kHeadDim];
  gpu::follow_prior_grid(next);  // nothing to read before: q and the cache come from the kernels before

  const int split = blockIdx.x;
  const int kv_head = blockIdx.y;
  const int seq = blockIdx.z;
  SplitRange range;
  if (!split_range(args, seq, split, range)) return;  // no new token for this sequence
  const int token = range.token, begin = range.begin, end = range.end;

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

  const int32_t* block_table = block_table_of(args, seq);
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
    write_split_result<T>(args, seq, split, token, kv_head * g + h, dim, kHeadDim, o, block_max, sum, out);
  }
}

// Merges the split-K partials: out = Σ_s O_s·2^(m_s − M) / Σ_s l_s·2^(m_s − M). Every
// thread holds four dims of up to kCombinePerThread splits (s = group, group + groups, …)
// and issues those 16-byte loads together with its lane's (max, sum) pairs right after the
// wait, so the merge costs one round trip to memory; each warp finds M and the sum from the
// pairs itself, so no barrier stands between the loads and the weighted sums.
constexpr int kCombineGroups = 16;
constexpr int kCombinePerThread = kMaxSplits / kCombineGroups;

template <int kHeadDim>
constexpr int combine_threads() {
  return kCombineGroups * kHeadDim / 4;
}

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(combine_threads<kHeadDim>())
    attention_combine_kernel(DecodeArgs args, T* __restrict__ out, gpu::NextGrid next) {
  constexpr int kChunks = kHeadDim / 4;  // four dims a thread
  constexpr int kPerLane = kMaxSplits / gpu::kWarpSize;
  __shared__ float4 group_sum_s[kCombineGroups - 1][kChunks];  // groups 1.. of the merge
  gpu::allow_next_grid(next);
  const int head = blockIdx.x;
  const int seq = blockIdx.y;
  // The batch arrays before the wait (no kernel writes them, compat.h); the partials after.
  const int token = args.row_seq != nullptr ? seq : args.seq_starts[seq];
  const bool has_token = args.row_seq != nullptr || args.seq_starts[seq + 1] > token;
  gpu::wait_for_prior_grid(next);
  if (!has_token) return;
  const int n_splits = args.n_splits;
  const int chunk = static_cast<int>(threadIdx.x) % kChunks;
  const int group = static_cast<int>(threadIdx.x) / kChunks;
  const int lane = static_cast<int>(threadIdx.x) % gpu::kWarpSize;
  const int64_t part0 = (static_cast<int64_t>(seq) * args.n_heads + head) * n_splits;
  const auto* ml_in = reinterpret_cast<const float2*>(args.partial_ml) + part0;
  const auto* o_in = reinterpret_cast<const float4*>(args.partial_out) + part0 * kChunks + chunk;
  float2 ml[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int s = lane + j * gpu::kWarpSize;
    ml[j] = s < n_splits ? ml_in[s] : make_float2(-FLT_MAX, 0.f);
  }
  float4 po[kCombinePerThread];
#pragma unroll
  for (int j = 0; j < kCombinePerThread; ++j) {
    const int s = group + j * kCombineGroups;
    po[j] = s < n_splits ? o_in[static_cast<int64_t>(s) * kChunks] : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  float local_max = -FLT_MAX;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) local_max = fmaxf(local_max, ml[j].y > 0.f ? ml[j].x : -FLT_MAX);
  const float global_max = gpu::warp_max(local_max);
  float w[kPerLane];
  float local_sum = 0.f;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    w[j] = ml[j].y > 0.f ? exp2f(ml[j].x - global_max) : 0.f;  // an empty split weighs 0
    local_sum += ml[j].y * w[j];
  }
  const float inv_sum = 1.f / gpu::warp_sum(local_sum);
  float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int j = 0; j < kCombinePerThread; ++j) {
    // Split s's weight is its lane's (s / warp width)-th.
    const int s = group + j * kCombineGroups;
    float ws = 0.f;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const float v = gpu::shfl(w[k], s % gpu::kWarpSize);
      if (s / gpu::kWarpSize == k) ws = v;
    }
    o.x += po[j].x * ws;
    o.y += po[j].y * ws;
    o.z += po[j].z * ws;
    o.w += po[j].w * ws;
  }
  if (group > 0) group_sum_s[group - 1][chunk] = o;
  __syncthreads();
  if (group != 0) return;
#pragma unroll
  for (int g = 0; g < kCombineGroups - 1; ++g) {
    const float4 other = group_sum_s[g][chunk];
    o.x += other.x;
    o.y += other.y;
    o.z += other.z;
    o.w += other.w;
  }
  T* dst = out + (static_cast<int64_t>(token) * args.n_heads + head) * kHeadDim + chunk * 4;
  dst[0] = gpu::from_f32<T>(o.x * inv_sum);
  dst[1] = gpu::from_f32<T>(o.y * inv_sum);
  dst[2] = gpu::from_f32<T>(o.z * inv_sum);
  dst[3] = gpu::from_f32<T>(o.w * inv_sum);
}

// The same split on tensor cores (CUDA sm_80 and later): the block's 16 query rows are the
// q-head group (rows past it are zero and never written); K/V tiles of 16 keys a warp are
// copied into shared memory with cp.async, kStages deep, and each warp takes its 16 keys of
// every tile: S = Q·Kᵀ and O += P·V with mma.m16n8k16 as in attention_prefill_mma.cu. The
// warps' states merge in shared memory at the end. A key costs a few mma per warp
// instead of a shuffle reduction per head, so the kernel stays memory-bound at long
// contexts where the SIMT kernel above is bound by its instruction issue. Three block
// shapes (launch_mma chooses): four warps four or two stages deep, and two warps three deep.
constexpr int kMmaKeys = 64;  // keys a split is cut to at least (a tile of four warps)
constexpr int kMmaRows = 16;  // the largest q-head group it takes
// A few sequences are cut into enough splits for kMmaSplitBlocksPerSm blocks a
// multiprocessor (fewer than the kMmaBlocksPerSm that fit), but no split walks more than
// kMmaFewMaxSplitKeys keys. One block a multiprocessor with four or more tiles each beats
// two with two tiles each: the 7B after an 8,192-token prompt (a step recorded for 16,384
// keys: 33 splits instead of 64) 250.3 -> 255.1 tok/s, after 512 and 32,768 unchanged (16
// and 64 splits either way); 128 splits were slower still (224 vs 238 tok/s at 8,192: a
// split of one tile does not hide its latency). The cap keeps 64 splits at 32,768 keys,
// where 33 cost 1.5% (225.99 -> 222.72 tok/s).
constexpr int kMmaSplitBlocksPerSm = 1;
constexpr int kMmaFewMaxSplitKeys = 512;
constexpr int kMmaMaxSplitKeys = 2048;  // any batch

#if !defined(QWENRT_GPU_HIP)
constexpr int kMmaBlocksPerSm = 3;  // of four warps two stages deep (registers and shared memory)

template <typename T, int kHeadDim, int kMmaWarps, int kStages>
constexpr size_t decode_mma_smem_bytes() {
  // kStages stages of a K and a V tile; the warps' merge reuses the first
  // kMmaWarps x 16 x (d + 2) floats of it.
  constexpr size_t tiles =
      static_cast<size_t>(kStages) * 2 * (kMmaWarps * 16) * mma::smem_stride<kHeadDim>() * sizeof(T);
  constexpr size_t merge = static_cast<size_t>(kMmaWarps) * kMmaRows * (kHeadDim + 2) * sizeof(float);
  return tiles > merge ? tiles : merge;
}

// kBlocksPerSm: the blocks a multiprocessor is to hold (launch_mma_shape sets the shared
// memory carve-out for them), 0 for the driver's choice.
template <typename T, int kHeadDim, int kMmaWarps, int kStages, int kBlocksPerSm>
__global__ void __launch_bounds__(kMmaWarps * 32)
    attention_decode_mma_kernel(DecodeArgs args, const T* __restrict__ q, const T* __restrict__ k_cache,
                                const T* __restrict__ v_cache, T* __restrict__ out, gpu::NextGrid next) {
  constexpr int kBlockThreads = kMmaWarps * 32;
  constexpr int kTileKeys = kMmaWarps * 16;  // 16 keys a warp
  constexpr int kStride = mma::smem_stride<kHeadDim>();
  constexpr int kDimSteps = kHeadDim / 16;
  constexpr int kTileElems = kTileKeys * kStride;
  constexpr int kVecsPerRow = kHeadDim / 8;
  extern __shared__ int4 smem_raw[];
  T* tiles = reinterpret_cast<T*>(smem_raw);
  gpu::allow_next_grid(next);

  const int split = blockIdx.x;
  const int kv_head = blockIdx.y;
  const int seq = blockIdx.z;
  SplitRange range{};
  const bool has_token = split_range(args, seq, split, range);
  const int32_t* block_table = block_table_of(args, seq);
  const int begin = range.begin, end = range.end;
  const int64_t kv_stride = static_cast<int64_t>(args.n_kv_heads) * kHeadDim;
  auto load_tile = [&](int stage, int key0) {
    T* k_dst = tiles + stage * 2 * kTileElems;
    T* v_dst = k_dst + kTileElems;
#pragma unroll
    for (int idx = threadIdx.x; idx < kTileKeys * kVecsPerRow; idx += kBlockThreads) {
      const int j = idx / kVecsPerRow;
      const int c = (idx % kVecsPerRow) * 8;
      const int key = key0 + j;
      const bool valid = key < end;
      const int safe_key = valid ? key : begin;
      const int64_t slot =
          static_cast<int64_t>(block_table[safe_key / args.block_size]) * args.block_size + safe_key % args.block_size;
      const int64_t offset = slot * kv_stride + kv_head * kHeadDim + c;
      mma::copy_async_16(k_dst + j * kStride + c, k_cache + offset, valid);
      mma::copy_async_16(v_dst + j * kStride + c, v_cache + offset, valid);
    }
    mma::copy_async_commit();
  };

  // kStages - 1 tiles in flight ahead of the one computed on; a group is committed for
  // every tile slot, empty past the range, so that the wait count stays fixed.
  const int n_tiles = has_token && end > begin ? (end - begin + kTileKeys - 1) / kTileKeys : 0;
  auto load_first_tiles = [&] {
#pragma unroll
    for (int t = 0; t < kStages - 1; ++t) {
      if (t < n_tiles) {
        load_tile(t, begin + t * kTileKeys);
      } else {
        mma::copy_async_commit();
      }
    }
  };
  // Before the wait, what no kernel writes (compat.h): the split's keys from the batch
  // arrays, the block tables and, in a split that ends before the new token, its keys'
  // K/V (a pass writes only positions at or past each sequence's cached length). Such a
  // split starts its first tiles before the wait; the one holding the new token only
  // brings its first block-table entries into L1, so that after the wait its first loads
  // need no other round trip. q is the kernels' before.
  const bool early = args.early_keys && has_token && end <= range.last;
  if (early) {
    load_first_tiles();
  } else if (has_token && end > begin) {
    const int first_block = begin / args.block_size;
    const int blocks = min((end - 1) / args.block_size + 1 - first_block,
                           ((kStages - 1) * kTileKeys + args.block_size - 1) / args.block_size + 1);
    if (static_cast<int>(threadIdx.x) < blocks) gpu::prefetch_l1(block_table + first_block + threadIdx.x);
  }
  gpu::wait_for_prior_grid(next);
  if (!has_token) return;  // no new token for this sequence
  const int token = range.token;
  if (!early) load_first_tiles();

  const int lane = threadIdx.x % gpu::kWarpSize;
  const int warp = threadIdx.x / gpu::kWarpSize;
  const int quad_row = lane / 4;
  const int quad_col = (lane % 4) * 2;
  const int g = args.group;
  const int q_width = args.n_heads * kHeadDim;

  // Q as A fragments (rows quad_row and quad_row + 8 of the group), zero past the group.
  uint32_t q_frag[kDimSteps][4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = quad_row + h * 8;
    const T* q_row = row < g ? q + static_cast<int64_t>(token) * q_width + (kv_head * g + row) * kHeadDim : nullptr;
#pragma unroll
    for (int kk = 0; kk < kDimSteps; ++kk) {
      const int col = kk * 16 + quad_col;
      q_frag[kk][h] = q_row ? *reinterpret_cast<const uint32_t*>(q_row + col) : 0u;
      q_frag[kk][h + 2] = q_row ? *reinterpret_cast<const uint32_t*>(q_row + col + 8) : 0u;
    }
  }

  float o[kHeadDim / 8][4];
#pragma unroll
  for (int t = 0; t < kHeadDim / 8; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[t][e] = 0.f;
  float row_max[2] = {-FLT_MAX, -FLT_MAX};
  float row_sum[2] = {0.f, 0.f};  // this lane's share; the quad is summed at the end

  for (int tile = 0; tile < n_tiles; ++tile) {
    const int key0 = begin + tile * kTileKeys;
    const int stage = tile % kStages;
    const int ahead = tile + kStages - 1;
    if (ahead < n_tiles) {
      load_tile(ahead % kStages, begin + ahead * kTileKeys);
    } else {
      mma::copy_async_commit();
    }
    mma::copy_async_wait<kStages - 1>();
    __syncthreads();
    const T* k_s = tiles + stage * 2 * kTileElems + warp * 16 * kStride;  // this warp's 16 keys
    const T* v_s = k_s + kTileElems;

    float s[2][4] = {};
#pragma unroll
    for (int kk = 0; kk < kDimSteps; ++kk) {
      uint32_t b[4];
      mma::ldmatrix_x4(b, k_s + ((lane % 8) + (lane / 16) * 8) * kStride + kk * 16 + ((lane / 8) % 2) * 8);
      mma::mma_16816<T>(s[0], q_frag[kk], b[0], b[1]);
      mma::mma_16816<T>(s[1], q_frag[kk], b[2], b[3]);
    }
    float tile_max[2] = {-FLT_MAX, -FLT_MAX};
#pragma unroll
    for (int t = 0; t < 2; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + warp * 16 + t * 8 + quad_col + (e % 2);
        s[t][e] = key < end ? s[t][e] * args.scale_log2 : -FLT_MAX;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], s[t][e]);
      }
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      tile_max[h] = fmaxf(tile_max[h], gpu::shfl_xor(tile_max[h], 1));
      tile_max[h] = fmaxf(tile_max[h], gpu::shfl_xor(tile_max[h], 2));
      const float new_max = fmaxf(row_max[h], tile_max[h]);
      alpha[h] = exp2f(row_max[h] - new_max);  // 1 while no key has been visible
      row_max[h] = new_max;
      row_sum[h] *= alpha[h];
    }
    uint32_t p_frag[4];
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      float p[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        p[e] = s[t][e] > -FLT_MAX ? exp2f(s[t][e] - row_max[e / 2]) : 0.f;
        row_sum[e / 2] += p[e];
      }
      p_frag[t * 2] = mma::pack2<T>(p[0], p[1]);
      p_frag[t * 2 + 1] = mma::pack2<T>(p[2], p[3]);
    }
#pragma unroll
    for (int t = 0; t < kHeadDim / 8; ++t) {
      o[t][0] *= alpha[0];
      o[t][1] *= alpha[0];
      o[t][2] *= alpha[1];
      o[t][3] *= alpha[1];
    }
#pragma unroll
    for (int d2 = 0; d2 < kHeadDim / 16; ++d2) {
      uint32_t b[4];
      mma::ldmatrix_x4_trans(b, v_s + ((lane % 8) + ((lane / 8) % 2) * 8) * kStride + d2 * 16 + (lane / 16) * 8);
      mma::mma_16816<T>(o[2 * d2], p_frag, b[0], b[1]);
      mma::mma_16816<T>(o[2 * d2 + 1], p_frag, b[2], b[3]);
    }
    __syncthreads();  // this stage is refilled by the next iteration's prefetch
  }

  // Merge the warps: each leaves its rows' max, sum and unnormalised O in shared memory.
  mma::copy_async_wait<0>();  // only empty groups are left
  float* merge_o = reinterpret_cast<float*>(smem_raw);            // [warp][row][d]
  float* merge_ml = merge_o + kMmaWarps * kMmaRows * kHeadDim;    // [warp][row][2]
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = row_sum[h];
    sum += gpu::shfl_xor(sum, 1);
    sum += gpu::shfl_xor(sum, 2);
    const int row = quad_row + h * 8;
    float* dst = merge_o + (warp * kMmaRows + row) * kHeadDim;
#pragma unroll
    for (int t = 0; t < kHeadDim / 8; ++t) {
      dst[t * 8 + quad_col] = o[t][2 * h];
      dst[t * 8 + quad_col + 1] = o[t][2 * h + 1];
    }
    if (lane % 4 == 0) {
      merge_ml[(warp * kMmaRows + row) * 2] = row_max[h];
      merge_ml[(warp * kMmaRows + row) * 2 + 1] = sum;
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < g * kHeadDim; idx += kBlockThreads) {
    const int row = idx / kHeadDim;
    const int dim = idx % kHeadDim;
    float block_max = -FLT_MAX;
#pragma unroll
    for (int w = 0; w < kMmaWarps; ++w) block_max = fmaxf(block_max, merge_ml[(w * kMmaRows + row) * 2]);
    float sum = 0.f;
    float acc = 0.f;
#pragma unroll
    for (int w = 0; w < kMmaWarps; ++w) {
      const float l = merge_ml[(w * kMmaRows + row) * 2 + 1];
      const float weight = l > 0.f ? exp2f(merge_ml[(w * kMmaRows + row) * 2] - block_max) : 0.f;
      sum += l * weight;
      acc += merge_o[(w * kMmaRows + row) * kHeadDim + dim] * weight;
    }
    write_split_result<T>(args, seq, split, token, kv_head * g + row, dim, kHeadDim, acc, block_max, sum, out);
  }
}
#endif

template <typename T, int kHeadDim>
void launch_combine(const BatchView& batch, const DecodeArgs& args, Tensor out, Stream stream) {
  if (args.n_splits <= 1) return;
  const dim3 combine_grid(static_cast<unsigned>(args.n_heads), static_cast<unsigned>(batch.n_seqs));
  launch_chained(attention_combine_kernel<T, kHeadDim>, combine_grid, combine_threads<kHeadDim>(), 0, stream, args,
                 out.as<T>(), next_grid_point());
}

dim3 decode_grid(const BatchView& batch, const DecodeArgs& args) {
  return dim3(static_cast<unsigned>(args.n_splits), static_cast<unsigned>(args.n_kv_heads),
              static_cast<unsigned>(batch.n_seqs));
}

template <typename T, int kHeadDim, int kMaxGroup>
void launch_typed(const BatchView& batch, const DecodeArgs& args, const Tensor& q, KvLayer cache,
                  Tensor out, Stream stream) {
  launch_chained(attention_decode_kernel<T, kHeadDim, kMaxGroup>, decode_grid(batch, args), kThreads, 0, stream, args,
                 q.as<const T>(), static_cast<const T*>(cache.k), static_cast<const T*>(cache.v), out.as<T>(),
                 next_grid_point());
  launch_combine<T, kHeadDim>(batch, args, out, stream);
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

#if !defined(QWENRT_GPU_HIP)
// Asks the driver for the shared-memory carve-out (the part of each multiprocessor's L1
// that is shared memory) that holds `blocks` blocks of `block_bytes` (and the 1 KiB a block
// the runtime keeps), in percent of the device's largest.
template <typename Kernel>
void set_decode_carveout(Kernel kernel, int blocks, size_t block_bytes) {
  int device = 0, per_sm = 0;
  QWENRT_CUDA_CALL(cudaGetDevice(&device), "attention", "current device");
  QWENRT_CUDA_CALL(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device), "attention",
                   "shared memory a multiprocessor");
  if (per_sm <= 0) return;
  const size_t need = static_cast<size_t>(blocks) * (block_bytes + 1024);
  const int percent = static_cast<int>(std::min<size_t>(100, (need * 100 + per_sm - 1) / per_sm));
  QWENRT_CUDA_CALL(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, percent), "attention",
                   "tensor-core decode carve-out " + std::to_string(percent) + "%");
}

template <typename T, int kHeadDim, int kMmaWarps, int kStages, int kBlocksPerSm>
void launch_mma_shape(const BatchView& batch, const DecodeArgs& args, const Tensor& q, KvLayer cache, Tensor out,
                      Stream stream) {
  constexpr size_t kSmem = decode_mma_smem_bytes<T, kHeadDim, kMmaWarps, kStages>();
  const auto kernel = attention_decode_mma_kernel<T, kHeadDim, kMmaWarps, kStages, kBlocksPerSm>;
  // Raised once per kernel (above the 48 KiB default); the device's limit is far above.
  static const bool raised = [kernel] {
    QWENRT_CUDA_CALL(gpu::set_max_dynamic_shared_bytes(kernel, static_cast<int>(kSmem)), "attention",
                     "tensor-core decode shared memory " + std::to_string(kSmem) + " B");
    if (kBlocksPerSm > 0) set_decode_carveout(kernel, kBlocksPerSm, kSmem);
    return true;
  }();
  (void)raised;
  launch_chained(kernel, decode_grid(batch, args), kMmaWarps * 32, kSmem, stream, args, q.as<const T>(),
                 static_cast<const T*>(cache.k), static_cast<const T*>(cache.v), out.as<T>(), next_grid_point());
  launch_combine<T, kHeadDim>(batch, args, out, stream);
}

// The block shape by the number of blocks. Up to one a multiprocessor (a few sequences cut
// into splits to fill the device): four warps four stages deep, so that three tiles of a
// split are in flight from its start (three of the four of a 7B step after 8,192 tokens,
// 249 keys a split). Up to three a multiprocessor: four warps two stages deep. Past that,
// blocks of two warps with three stages, which keep more loads in flight a block over
// several waves.
// Measured per 7B layer (bf16, H200): 256 sequences at 192 / 256 tokens 42.9 / 50.8 us ->
// 39.1 / 46.5, 128 at 2,048 170.5 -> 142.1; below a wave the small blocks lose (one
// sequence at 512: 9.5 -> 10.4 us, 64 at 512: 24.9 -> 26.9). The 7B after 8,192 tokens
// (33 splits, 132 blocks) with two / three / four / six stages: 255.7 / 260.2 / 263.2 /
// 256.5 tok/s, after 2,048 266.0 -> 271.0 with four, the 0.5B after 8,192 1,325 -> 1,419.
// More stages where two blocks a multiprocessor run (the 7B after 32,768 tokens: 64 splits,
// 256 blocks) lost: three stages 231.4 -> 227.0 tok/s; so did 33 splits of four stages
// there (231.0). What does pay there is the carve-out: up to one block a multiprocessor
// and up to two, each shape asks for the shared memory its blocks take (the driver's
// 164 KiB step on an H200) instead of the driver's choice, which for two-stage blocks is
// the largest (228 KiB, as it is for six stages): after 32,768 tokens 231.5 -> 235.5
// (229.4 -> 233.3 on another machine); asking for the largest after 8,192 tokens lost
// 2.6% (260.6 -> 253.8). After 512 and 8,192 tokens and for Qwen3-8B no change (four
// stages take that step anyway).
template <typename T, int kHeadDim>
void launch_mma(const BatchView& batch, const DecodeArgs& args, const Tensor& q, KvLayer cache, Tensor out,
                int multiprocessors, size_t max_shared_bytes, Stream stream) {
  const int64_t blocks = static_cast<int64_t>(args.n_splits) * args.n_kv_heads * batch.n_seqs;
  // Four stages need 136 KiB at d = 128: more than GPUs of compute capability 8.6 and 8.9
  // give a block (99 KiB); those keep two.
  const bool deep_fits = decode_mma_smem_bytes<T, kHeadDim, 4, 4>() <= max_shared_bytes;
  if (blocks > int64_t{kMmaBlocksPerSm} * multiprocessors) {
    launch_mma_shape<T, kHeadDim, 2, 3, 0>(batch, args, q, cache, out, stream);
  } else if (blocks > 2 * int64_t{multiprocessors} || !deep_fits) {
    launch_mma_shape<T, kHeadDim, 4, 2, 0>(batch, args, q, cache, out, stream);
  } else if (blocks > multiprocessors) {
    launch_mma_shape<T, kHeadDim, 4, 2, 2>(batch, args, q, cache, out, stream);
  } else {
    launch_mma_shape<T, kHeadDim, 4, 4, 1>(batch, args, q, cache, out, stream);
  }
}
#endif

}  // namespace

bool launch_attention_decode(const BatchView& given, const AttentionParams& attn,
                             const Tensor& q, const KvGeometry& geometry, KvLayer cache,
                             Tensor out, float* workspace, size_t workspace_bytes,
                             int multiprocessors, [[maybe_unused]] size_t max_shared_bytes, Stream stream,
                             bool token_rows) {
  // Token rows: each new token a row of its own over its sequence's keys up to its position;
  // the keys of a chunk's other tokens are this pass's.
  BatchView batch = given;
  if (token_rows) {
    batch.n_seqs = given.n_tokens;
    batch.max_new_tokens = 1;
    batch.keys_in_pass = true;
  }
  const int group = attn.n_heads / attn.n_kv_heads;
  if (batch.max_new_tokens != 1 || (attn.head_dim != 64 && attn.head_dim != 128)) return false;
#if defined(QWENRT_GPU_HIP)
  constexpr bool kTensorCores = false;
#else
  constexpr bool kTensorCores = true;
#endif
  const bool mma = kTensorCores && group <= kMmaRows;
  if (!mma && group > 8) return false;
  if (batch.n_seqs == 0) return true;

  // Enough blocks to fill the device (long contexts need many loads in flight), each split
  // reading at least a minimum of keys. The tensor-core kernel splits no further once a
  // block per (sequence, kv head) fills the device, except that no split walks more than
  // kMmaMaxSplitKeys, or kMmaFewMaxSplitKeys while those blocks leave multiprocessors idle:
  // one block going through a long context alone would set the step's time.
  const int base_blocks = batch.n_seqs * attn.n_kv_heads;
  const int context = batch.max_context_len;
  int n_splits;
  if (mma) {
    n_splits = static_cast<int>(ceil_div(context, kMmaMaxSplitKeys));
    if (base_blocks < multiprocessors) {
      n_splits = std::max({n_splits, static_cast<int>(ceil_div(context, kMmaFewMaxSplitKeys)),
                           std::min(static_cast<int>(ceil_div(kMmaSplitBlocksPerSm * multiprocessors, base_blocks)),
                                    static_cast<int>(ceil_div(context, kMmaKeys)))});
    }
  } else {
    n_splits = static_cast<int>(ceil_div(8 * multiprocessors, base_blocks));
    n_splits = std::min(n_splits, static_cast<int>(ceil_div(context, kMinSplitElements / attn.head_dim)));
  }
  n_splits = std::clamp(n_splits, 1, kMaxSplits);
  const size_t per_split_bytes = static_cast<size_t>(batch.n_seqs) * attn.n_heads *
                                 (attn.head_dim + 2) * sizeof(float);
  n_splits = std::min<int>(n_splits, static_cast<int>(workspace_bytes / per_split_bytes));
  n_splits = std::max(n_splits, 1);

  DecodeArgs args{};
  args.positions = batch.positions;
  args.seq_starts = batch.seq_starts;
  args.block_tables = batch.block_tables;
  args.row_seq = token_rows ? given.token_seq : nullptr;
  args.max_blocks_per_seq = batch.max_blocks_per_seq;
  args.block_size = geometry.block_size;
  args.n_heads = attn.n_heads;
  args.n_kv_heads = attn.n_kv_heads;
  args.group = group;
  args.n_splits = n_splits;
  args.sliding_window = attn.sliding_window;
  args.early_keys = batch.keys_in_pass ? 0 : 1;
  args.scale_log2 = attn.scale * kLog2e;
  args.partial_out = workspace;
  args.partial_ml = workspace + static_cast<size_t>(batch.n_seqs) * attn.n_heads * n_splits *
                                    attn.head_dim;

  dispatch_half(q.dtype, "attention", [&](auto tag) {
    using T = decltype(tag);
#if !defined(QWENRT_GPU_HIP)
    if (mma) {
      if (attn.head_dim == 64) {
        launch_mma<T, 64>(batch, args, q, cache, out, multiprocessors, max_shared_bytes, stream);
      } else {
        launch_mma<T, 128>(batch, args, q, cache, out, multiprocessors, max_shared_bytes, stream);
      }
      return;
    }
#endif
    if (attn.head_dim == 64) {
      dispatch_group<T, 64>(batch, args, q, cache, out, stream);
    } else {
      dispatch_group<T, 128>(batch, args, q, cache, out, stream);
    }
  });
  QWENRT_CUDA_LAUNCHED(mma ? "attention (decode, tensor cores)" : "attention (decode)",
                       std::string(token_rows ? "token rows " : "seqs ") + std::to_string(batch.n_seqs) + ", heads " +
                           std::to_string(attn.n_heads) + "/" + std::to_string(attn.n_kv_heads) +
                           ", head_dim " + std::to_string(attn.head_dim) + ", splits " +
                           std::to_string(n_splits));
  return true;
}

}  // namespace qwenrt::cuda
