// Flash-attention-style causal GQA attention for prompt chunks (any ragged batch works,
// decode tokens included). Work split: one block per (tile of consecutive new tokens of
// one sequence, kv head); its kRows query rows are those tokens × the kv head's group of
// q heads, so each K/V tile read from the paged cache serves the whole group. Keys are
// processed in tiles of kKeys: S = Q·Kᵀ (lane j ↔ key j), an online softmax in fp32
// (log2 domain), O += P·V (lane ↔ head_dim slice); no score matrix is materialised.
// Layout: q/out [n_tokens, n_heads*d]; cache [num_blocks, block_size, n_kv_heads, d].
// Bound: SIMT fp32 FMA throughput (a tensor-core version is the next step for long
// prompts); K/V traffic is one pass per tile of kRows/group tokens.
#include <cfloat>

#include "backend/gpu/attention_tiles.h"

namespace qwenrt::cuda {
namespace {

// The block shape is fixed in threads and rows, so the host (which serves wave32 and
// wave64 devices from one binary on HIP) knows it; warps and rows per warp follow from the
// warp width (8 and 8 on NVIDIA).
constexpr int kThreads = 256;
constexpr int kRows = 64;  // query rows per block
constexpr int kWarps = kThreads / gpu::kWarpSize;
constexpr int kRowsPerWarp = kRows / kWarps;
constexpr int kKeys = gpu::kWarpSize;  // keys per tile: one per lane in S
static_assert(kRowsPerWarp * kWarps == kRows, "rows split evenly over the warps");
static_assert(kRows >= kMaxTiledGroup, "a block must hold one token's whole q-head group");

// n consecutive floats from 16-byte-aligned shared memory, as wide as possible.
template <int kN>
__device__ __forceinline__ void load_floats(const float* src, float* dst) {
  if constexpr (kN % 4 == 0) {
#pragma unroll
    for (int i = 0; i < kN; i += 4) {
      const float4 f = *reinterpret_cast<const float4*>(src + i);
      dst[i] = f.x;
      dst[i + 1] = f.y;
      dst[i + 2] = f.z;
      dst[i + 3] = f.w;
    }
  } else if constexpr (kN % 2 == 0) {
#pragma unroll
    for (int i = 0; i < kN; i += 2) {
      const float2 f = *reinterpret_cast<const float2*>(src + i);
      dst[i] = f.x;
      dst[i + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kN; ++i) dst[i] = src[i];
  }
}

// Shared memory of a block: Q rows, a K tile (padded), a V tile, P; `keys` is the
// warp width (the device's kKeys; the host passes the current device's width).
constexpr size_t prefill_smem_bytes(int head_dim, int keys) {
  const size_t floats = static_cast<size_t>(kRows) * head_dim +
                        static_cast<size_t>(keys) * (head_dim + 1) +
                        static_cast<size_t>(keys) * head_dim + static_cast<size_t>(kRows) * keys;
  return floats * sizeof(float);
}

template <int kHeadDim>
struct PrefillSmem {
  static constexpr int kKStride = kHeadDim + 1;  // padding: lane j reads row j conflict-free
};

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kThreads)
    attention_prefill_kernel(PrefillArgs args, const T* __restrict__ q,
                             const T* __restrict__ k_cache, const T* __restrict__ v_cache,
                             T* __restrict__ out) {
  constexpr int kDimsPerLane = kHeadDim / gpu::kWarpSize;
  constexpr int kChunk = 16 / sizeof(T);
  using Smem = PrefillSmem<kHeadDim>;
  extern __shared__ float4 smem_vec[];  // float4: 16-byte alignment for the vector reads
  float* smem = reinterpret_cast<float*>(smem_vec);
  float* q_s = smem;                              // [kRows][kHeadDim], scaled by scale·log2e
  float* k_s = q_s + kRows * kHeadDim;            // [kKeys][kKStride]
  float* v_s = k_s + kKeys * Smem::kKStride;      // [kKeys][kHeadDim]
  float* p_s = v_s + kKeys * kHeadDim;            // [kRows][kKeys]
  __shared__ int key_lo_s;
  __shared__ int key_hi_s;

  PrefillTile tile;
  if (!prefill_tile(args, tile)) return;  // uniform over the block
  const int seq = tile.seq;
  const int kv_head = tile.kv_head;
  const int tok_begin = tile.tok_begin;
  const int valid_rows = tile.valid_rows;
  const int q_width = args.n_heads * kHeadDim;
  // Q rows into shared memory as fp32, pre-scaled so that S is in the log2 domain.
  for (int idx = threadIdx.x; idx < kRows * (kHeadDim / kChunk); idx += kThreads) {
    const int r = idx / (kHeadDim / kChunk);
    const int c = (idx % (kHeadDim / kChunk)) * kChunk;
    float* dst = q_s + r * kHeadDim + c;
    if (r < valid_rows) {
      const int token = tok_begin + r / args.group;
      const int head = kv_head * args.group + r % args.group;
      const gpu::Vec16<T> raw =
          *reinterpret_cast<const gpu::Vec16<T>*>(q + static_cast<int64_t>(token) * q_width +
                                                  head * kHeadDim + c);
#pragma unroll
      for (int j = 0; j < kChunk; ++j) dst[j] = gpu::to_f32(raw.v[j]) * args.scale_log2;
    } else {
#pragma unroll
      for (int j = 0; j < kChunk; ++j) dst[j] = 0.f;
    }
  }
  prefill_key_range(args, tile, key_lo_s, key_hi_s);  // its barriers also publish q_s
  const int key_lo = key_lo_s;
  const int key_hi = key_hi_s;

  const int lane = threadIdx.x % gpu::kWarpSize;
  const int warp = threadIdx.x / gpu::kWarpSize;
  // Per-row state: position (for the mask), running max, running sum, output slice.
  int row_pos[kRowsPerWarp];
  float row_max[kRowsPerWarp];
  float row_sum[kRowsPerWarp];
  float acc[kRowsPerWarp][kDimsPerLane];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = warp * kRowsPerWarp + r;
    row_pos[r] = row < valid_rows ? args.positions[tok_begin + row / args.group] : -1;
    row_max[r] = -FLT_MAX;
    row_sum[r] = 0.f;
#pragma unroll
    for (int c = 0; c < kDimsPerLane; ++c) acc[r][c] = 0.f;
  }

  const int32_t* block_table = args.block_tables + static_cast<int64_t>(seq) * args.max_blocks_per_seq;
  const int64_t kv_stride = static_cast<int64_t>(args.n_kv_heads) * kHeadDim;  // per slot

  for (int key0 = key_lo; key0 <= key_hi; key0 += kKeys) {
    // K/V tile from the paged cache (16-byte loads), converted to fp32.
    for (int idx = threadIdx.x; idx < kKeys * (kHeadDim / kChunk); idx += kThreads) {
      const int j = idx / (kHeadDim / kChunk);
      const int c = (idx % (kHeadDim / kChunk)) * kChunk;
      const int key = key0 + j;
      float* k_dst = k_s + j * Smem::kKStride + c;
      float* v_dst = v_s + j * kHeadDim + c;
      if (key <= key_hi) {
        const int64_t slot =
            static_cast<int64_t>(block_table[key / args.block_size]) * args.block_size +
            key % args.block_size;
        const int64_t offset = slot * kv_stride + kv_head * kHeadDim + c;
        const gpu::Vec16<T> kr = *reinterpret_cast<const gpu::Vec16<T>*>(k_cache + offset);
        const gpu::Vec16<T> vr = *reinterpret_cast<const gpu::Vec16<T>*>(v_cache + offset);
#pragma unroll
        for (int e = 0; e < kChunk; ++e) {
          k_dst[e] = gpu::to_f32(kr.v[e]);
          v_dst[e] = gpu::to_f32(vr.v[e]);
        }
      } else {
        // Masked keys get p = 0; zeros keep 0 · V finite.
#pragma unroll
        for (int e = 0; e < kChunk; ++e) k_dst[e] = v_dst[e] = 0.f;
      }
    }
    __syncthreads();

    // S for this warp's rows: lane ↔ key.
    float s[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) s[r] = 0.f;
    const float* k_row = k_s + lane * Smem::kKStride;
#pragma unroll 4
    for (int dim = 0; dim < kHeadDim; dim += 4) {
      const float k0 = k_row[dim], k1 = k_row[dim + 1], k2 = k_row[dim + 2], k3 = k_row[dim + 3];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float4 qv =
            *reinterpret_cast<const float4*>(q_s + (warp * kRowsPerWarp + r) * kHeadDim + dim);
        s[r] += qv.x * k0 + qv.y * k1 + qv.z * k2 + qv.w * k3;
      }
    }
    const int key = key0 + lane;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int pos = row_pos[r];
      const bool visible = key <= pos && (args.sliding_window <= 0 || key > pos - args.sliding_window);
      const float score = visible ? s[r] : -FLT_MAX;
      const float tile_max = gpu::warp_max(score);
      const float new_max = fmaxf(row_max[r], tile_max);
      // Rows that have seen no visible key yet keep max = -FLT_MAX and p = 0.
      const float p = visible ? exp2f(score - new_max) : 0.f;
      const float alpha = exp2f(row_max[r] - new_max);
      row_sum[r] = row_sum[r] * alpha + gpu::warp_sum(p);
      row_max[r] = new_max;
#pragma unroll
      for (int c = 0; c < kDimsPerLane; ++c) acc[r][c] *= alpha;
      p_s[(warp * kRowsPerWarp + r) * kKeys + lane] = p;
    }
    gpu::sync_warp();

    // O += P·V: lane owns dims [lane·kDimsPerLane, +kDimsPerLane).
    const float* v_col = v_s + lane * kDimsPerLane;
#pragma unroll 2
    for (int j = 0; j < kKeys; j += 4) {
      float v[4][kDimsPerLane];
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) load_floats<kDimsPerLane>(v_col + (j + jj) * kHeadDim, v[jj]);
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float4 pv = *reinterpret_cast<const float4*>(p_s + (warp * kRowsPerWarp + r) * kKeys + j);
#pragma unroll
        for (int c = 0; c < kDimsPerLane; ++c)
          acc[r][c] += pv.x * v[0][c] + pv.y * v[1][c] + pv.z * v[2][c] + pv.w * v[3][c];
      }
    }
    __syncthreads();  // k_s/v_s/p_s are refilled next iteration
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = warp * kRowsPerWarp + r;
    if (row >= valid_rows) continue;
    const int token = tok_begin + row / args.group;
    const int head = kv_head * args.group + row % args.group;
    const float inv_sum = 1.f / row_sum[r];
    T* dst = out + static_cast<int64_t>(token) * q_width + head * kHeadDim + lane * kDimsPerLane;
#pragma unroll
    for (int c = 0; c < kDimsPerLane; ++c) dst[c] = gpu::from_f32<T>(acc[r][c] * inv_sum);
  }
}

template <typename T, int kHeadDim>
void launch_typed(const BatchView& batch, const PrefillArgs& args, const Tensor& q,
                  KvLayer cache, Tensor out, size_t smem_bytes, Stream stream) {
  auto kernel = attention_prefill_kernel<T, kHeadDim>;
  QWENRT_CUDA_CALL(gpu::set_max_dynamic_shared_bytes(kernel, static_cast<int>(smem_bytes)),
                   "attention", "prefill kernel shared memory " + std::to_string(smem_bytes) + " B");
  const dim3 grid(static_cast<unsigned>(batch.n_seqs * args.tiles_per_seq),
                  static_cast<unsigned>(args.n_kv_heads));
  kernel<<<grid, kThreads, smem_bytes, stream>>>(args, q.as<const T>(),
                                                 static_cast<const T*>(cache.k),
                                                 static_cast<const T*>(cache.v), out.as<T>());
}

}  // namespace

bool launch_attention_prefill(const BatchView& batch, const AttentionParams& attn,
                              const Tensor& q, const KvGeometry& geometry, KvLayer cache,
                              Tensor out, size_t max_shared_bytes, Stream stream) {
  const int group = attn.n_kv_heads > 0 ? attn.n_heads / attn.n_kv_heads : 0;
  const auto sizes = [&] {
    return "tokens " + std::to_string(batch.n_tokens) + ", seqs " +
                            std::to_string(batch.n_seqs) + ", heads " +
                            std::to_string(attn.n_heads) + "/" + std::to_string(attn.n_kv_heads) +
                            ", head_dim " + std::to_string(attn.head_dim);
  };
  QWENRT_CHECK(group >= 1 && group * attn.n_kv_heads == attn.n_heads,
               "attention: n_heads must be a multiple of n_kv_heads (" + sizes() + ")");
  if (group > kRows) {
    throw Error(ErrorCategory::kUnsupported,
                "attention: more than " + std::to_string(kRows) +
                    " query heads per kv head is not supported (" + sizes() + ")");
  }
  const PrefillArgs args = prefill_args(batch, attn, geometry, kRows);
  // The tiles need more shared memory than some GPUs give a block (64 KiB on AMD, 99 KiB
  // on sm_86/89 for head_dim 256): the caller then takes the generic kernel.
  const size_t smem_bytes = prefill_smem_bytes(attn.head_dim, gpu::launch_warp_size());
  if (smem_bytes > max_shared_bytes) return false;
  if (batch.n_tokens == 0 || batch.n_seqs == 0) return true;

  dispatch_half(q.dtype, "attention", [&](auto tag) {
    using T = decltype(tag);
    switch (attn.head_dim) {
      case 64: launch_typed<T, 64>(batch, args, q, cache, out, smem_bytes, stream); break;
      case 128: launch_typed<T, 128>(batch, args, q, cache, out, smem_bytes, stream); break;
      case 256: launch_typed<T, 256>(batch, args, q, cache, out, smem_bytes, stream); break;
      default:
        throw Error(ErrorCategory::kUnsupported,
                    "attention: head_dim " + std::to_string(attn.head_dim) +
                        " has no CUDA kernel (64, 128, 256 do)");
    }
  });
  QWENRT_CUDA_LAUNCHED("attention (prefill)", sizes());
  return true;
}

}  // namespace qwenrt::cuda
