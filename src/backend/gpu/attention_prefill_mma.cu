// Prompt attention on tensor cores (CUDA sm_80 and later; HIP keeps attention_prefill.cu).
// Work split as in attention_prefill.cu: one block per (tile of consecutive new tokens of
// one sequence, kv head), its kRows query rows being those tokens × the kv head's q-head
// group, so each K/V tile serves the whole group. Each of the 4 warps owns 16 rows; per
// key tile of kKeys: S = Q·Kᵀ with mma.m16n8k16 (Q held in registers as A fragments, K
// through ldmatrix), an online softmax on the accumulators (fp32, log2 domain), then
// O += P·V with P re-packed from the S accumulators as A fragments and V through
// ldmatrix.trans. No score matrix leaves registers.
// Layout: q/out [n_tokens, n_heads*d]; cache [num_blocks, block_size, n_kv_heads, d].
// Bound: tensor-core throughput for long contexts; K/V traffic is one pass per tile.
#include <cfloat>
#include <climits>

#include "backend/gpu/attention_mma.h"
#include "backend/gpu/attention_tiles.h"

namespace qwenrt::cuda {

#if !defined(QWENRT_GPU_HIP)
namespace {

using namespace mma;

constexpr int kThreads = 128;
constexpr int kRows = 64;  // query rows per block: 16 per warp
constexpr int kKeys = 64;  // keys per tile

// Two stages of a K and a V tile.
template <typename T, int kHeadDim>
constexpr size_t mma_smem_bytes() {
  return 2 * 2 * static_cast<size_t>(kKeys) * smem_stride<kHeadDim>() * sizeof(T);
}

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kThreads)
    attention_prefill_mma_kernel(PrefillArgs args, const T* __restrict__ q, const T* __restrict__ k_cache,
                                 const T* __restrict__ v_cache, T* __restrict__ out) {
  constexpr int kStride = smem_stride<kHeadDim>();
  constexpr int kDimSteps = kHeadDim / 16;
  constexpr int kKeyTiles = kKeys / 8;
  constexpr int kTileElems = kKeys * kStride;
  // [stage][K tile, V tile]: the next tile's copies run while this one is computed on.
  extern __shared__ int4 smem_raw[];
  T* tiles = reinterpret_cast<T*>(smem_raw);
  __shared__ int key_lo_s;
  __shared__ int key_hi_s;

  PrefillTile tile;
  if (!prefill_tile(args, tile)) return;  // uniform over the block
  const int seq = tile.seq;
  const int kv_head = tile.kv_head;
  const int tok_begin = tile.tok_begin;
  const int valid_rows = tile.valid_rows;
  const int q_width = args.n_heads * kHeadDim;
  prefill_key_range(args, tile, key_lo_s, key_hi_s);

  const int lane = threadIdx.x % gpu::kWarpSize;
  const int warp = threadIdx.x / gpu::kWarpSize;
  const int quad_row = lane / 4;      // row within an 8-row half of the warp's 16
  const int quad_col = (lane % 4) * 2;  // first of the two columns this lane holds
  // This lane's two rows (A/C fragments: rows quad_row and quad_row + 8).
  int row_pos[2];
  const T* q_row[2];
  T* out_row[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = warp * 16 + quad_row + h * 8;
    if (row < valid_rows) {
      const int token = tok_begin + row / args.group;
      const int head = kv_head * args.group + row % args.group;
      row_pos[h] = args.positions[token];
      q_row[h] = q + static_cast<int64_t>(token) * q_width + head * kHeadDim;
      out_row[h] = out + static_cast<int64_t>(token) * q_width + head * kHeadDim;
    } else {
      row_pos[h] = -1;  // sees no key; not written
      q_row[h] = nullptr;
      out_row[h] = nullptr;
    }
  }
  // Q as A fragments, straight from global memory (read once).
  uint32_t q_frag[kDimSteps][4];
#pragma unroll
  for (int kk = 0; kk < kDimSteps; ++kk) {
    const int col = kk * 16 + quad_col;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      q_frag[kk][h] = q_row[h] ? *reinterpret_cast<const uint32_t*>(q_row[h] + col) : 0u;
      q_frag[kk][h + 2] = q_row[h] ? *reinterpret_cast<const uint32_t*>(q_row[h] + col + 8) : 0u;
    }
  }

  float o[kHeadDim / 8][4];
#pragma unroll
  for (int t = 0; t < kHeadDim / 8; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[t][e] = 0.f;
  float row_max[2] = {-FLT_MAX, -FLT_MAX};
  float row_sum[2] = {0.f, 0.f};  // this lane's share; the quad is summed at the end

  const int key_lo = key_lo_s;
  const int key_hi = key_hi_s;
  const int32_t* block_table = args.block_tables + static_cast<int64_t>(seq) * args.max_blocks_per_seq;
  const int64_t kv_stride = static_cast<int64_t>(args.n_kv_heads) * kHeadDim;
  constexpr int kVecsPerRow = kHeadDim / 8;

  // Issues the copies of the K/V tile starting at key0 into `stage` (zeros past the range).
  auto load_tile = [&](int stage, int key0) {
    T* k_dst = tiles + stage * 2 * kTileElems;
    T* v_dst = k_dst + kTileElems;
    for (int idx = threadIdx.x; idx < kKeys * kVecsPerRow; idx += kThreads) {
      const int j = idx / kVecsPerRow;
      const int c = (idx % kVecsPerRow) * 8;
      const int key = key0 + j;
      const bool valid = key <= key_hi;
      const int safe_key = valid ? key : key_lo;
      const int64_t slot =
          static_cast<int64_t>(block_table[safe_key / args.block_size]) * args.block_size + safe_key % args.block_size;
      const int64_t offset = slot * kv_stride + kv_head * kHeadDim + c;
      copy_async_16(k_dst + j * kStride + c, k_cache + offset, valid);
      copy_async_16(v_dst + j * kStride + c, v_cache + offset, valid);
    }
    copy_async_commit();
  };

  load_tile(0, key_lo);
  int stage = 0;
  for (int key0 = key_lo; key0 <= key_hi; key0 += kKeys, stage ^= 1) {
    if (key0 + kKeys <= key_hi) {
      load_tile(stage ^ 1, key0 + kKeys);
      copy_async_wait<1>();  // this tile's group is done, the next may still be in flight
    } else {
      copy_async_wait<0>();
    }
    __syncthreads();
    const T* k_s = tiles + stage * 2 * kTileElems;
    const T* v_s = k_s + kTileElems;

    // S = Q·Kᵀ for this warp's 16 rows × kKeys keys.
    float s[kKeyTiles][4];
#pragma unroll
    for (int t = 0; t < kKeyTiles; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[t][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kDimSteps; ++kk) {
#pragma unroll
      for (int t2 = 0; t2 < kKeyTiles / 2; ++t2) {
        const int key = t2 * 16 + (lane % 8) + (lane / 16) * 8;
        const int col = kk * 16 + ((lane / 8) % 2) * 8;
        uint32_t b[4];
        ldmatrix_x4(b, k_s + key * kStride + col);
        mma_16816<T>(s[2 * t2], q_frag[kk], b[0], b[1]);
        mma_16816<T>(s[2 * t2 + 1], q_frag[kk], b[2], b[3]);
      }
    }

    // Mask, online softmax (log2 domain), P packed as A fragments.
    float tile_max[2] = {-FLT_MAX, -FLT_MAX};
#pragma unroll
    for (int t = 0; t < kKeyTiles; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e / 2;
        const int key = key0 + t * 8 + quad_col + (e % 2);
        const int pos = row_pos[h];
        const bool visible =
            key <= pos && (args.sliding_window <= 0 || key > pos - args.sliding_window);
        s[t][e] = visible ? s[t][e] * args.scale_log2 : -FLT_MAX;
        tile_max[h] = fmaxf(tile_max[h], s[t][e]);
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
    uint32_t p_frag[kKeys / 16][4];
#pragma unroll
    for (int t = 0; t < kKeyTiles; ++t) {
      float p[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e / 2;
        p[e] = s[t][e] > -FLT_MAX ? exp2f(s[t][e] - row_max[h]) : 0.f;
        row_sum[h] += p[e];
      }
      // Key tile t is the lower (even t) or upper (odd t) 8 columns of k-step t / 2.
      p_frag[t / 2][(t % 2) * 2] = pack2<T>(p[0], p[1]);
      p_frag[t / 2][(t % 2) * 2 + 1] = pack2<T>(p[2], p[3]);
    }
#pragma unroll
    for (int t = 0; t < kHeadDim / 8; ++t) {
      o[t][0] *= alpha[0];
      o[t][1] *= alpha[0];
      o[t][2] *= alpha[1];
      o[t][3] *= alpha[1];
    }

    // O += P·V.
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
#pragma unroll
      for (int d2 = 0; d2 < kHeadDim / 16; ++d2) {
        const int key = kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
        const int col = d2 * 16 + (lane / 16) * 8;
        uint32_t b[4];
        ldmatrix_x4_trans(b, v_s + key * kStride + col);
        mma_16816<T>(o[2 * d2], p_frag[kk], b[0], b[1]);
        mma_16816<T>(o[2 * d2 + 1], p_frag[kk], b[2], b[3]);
      }
    }
    __syncthreads();  // this stage is refilled by the next iteration's prefetch
  }

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = row_sum[h];
    sum += gpu::shfl_xor(sum, 1);
    sum += gpu::shfl_xor(sum, 2);
    if (out_row[h] == nullptr) continue;
    const float inv = 1.f / sum;
#pragma unroll
    for (int t = 0; t < kHeadDim / 8; ++t) {
      *reinterpret_cast<uint32_t*>(out_row[h] + t * 8 + quad_col) =
          pack2<T>(o[t][2 * h] * inv, o[t][2 * h + 1] * inv);
    }
  }
}

template <typename T, int kHeadDim>
void launch_typed(const BatchView& batch, const PrefillArgs& args, const Tensor& q, KvLayer cache, Tensor out,
                  Stream stream) {
  constexpr size_t kSmem = mma_smem_bytes<T, kHeadDim>();
  // Raised once per kernel (above the 48 KiB default); the device's limit is far above.
  static const bool raised = [] {
    QWENRT_CUDA_CALL(gpu::set_max_dynamic_shared_bytes(attention_prefill_mma_kernel<T, kHeadDim>, static_cast<int>(kSmem)),
                     "attention", "tensor-core prefill shared memory " + std::to_string(kSmem) + " B");
    return true;
  }();
  (void)raised;
  const dim3 grid(static_cast<unsigned>(batch.n_seqs * args.tiles_per_seq), static_cast<unsigned>(args.n_kv_heads));
  attention_prefill_mma_kernel<T, kHeadDim><<<grid, kThreads, kSmem, stream>>>(
      args, q.as<const T>(), static_cast<const T*>(cache.k), static_cast<const T*>(cache.v), out.as<T>());
}

}  // namespace

bool launch_attention_prefill_mma(const BatchView& batch, const AttentionParams& attn, const Tensor& q,
                                  const KvGeometry& geometry, KvLayer cache, Tensor out, Stream stream) {
  const int group = attn.n_kv_heads > 0 ? attn.n_heads / attn.n_kv_heads : 0;
  if (group < 1 || group > kRows || group * attn.n_kv_heads != attn.n_heads) return false;
  if (attn.head_dim != 64 && attn.head_dim != 128) return false;
  if (batch.n_tokens == 0 || batch.n_seqs == 0) return true;
  const PrefillArgs args = prefill_args(batch, attn, geometry, kRows);
  dispatch_half(q.dtype, "attention", [&](auto tag) {
    using T = decltype(tag);
    if (attn.head_dim == 64) {
      launch_typed<T, 64>(batch, args, q, cache, out, stream);
    } else {
      launch_typed<T, 128>(batch, args, q, cache, out, stream);
    }
  });
  QWENRT_CUDA_LAUNCHED("attention (prefill, tensor cores)",
                       "tokens " + std::to_string(batch.n_tokens) + ", seqs " + std::to_string(batch.n_seqs) +
                           ", heads " + std::to_string(attn.n_heads) + "/" + std::to_string(attn.n_kv_heads) +
                           ", head_dim " + std::to_string(attn.head_dim));
  return true;
}

#else

bool launch_attention_prefill_mma(const BatchView&, const AttentionParams&, const Tensor&, const KvGeometry&,
                                  KvLayer, Tensor, Stream) {
  return false;
}

#endif

}  // namespace qwenrt::cuda
