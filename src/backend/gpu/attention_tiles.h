// The work split both prompt-attention kernels share (attention_prefill.cu, portable SIMT;
// attention_prefill_mma.cu, tensor cores): one block per (tile of consecutive new tokens of
// one sequence, kv head), its rows being those tokens × the kv head's q-head group, so each
// K/V tile read from the paged cache serves the whole group.
#pragma once

#include <climits>

#include "backend/gpu/common.h"

namespace qwenrt::cuda {

struct PrefillArgs {
  const int32_t* positions;
  const int32_t* seq_starts;
  const int32_t* block_tables;
  int max_blocks_per_seq;
  int block_size;
  int n_heads;
  int n_kv_heads;
  int group;            // n_heads / n_kv_heads
  int tokens_per_tile;  // rows per block / group
  int tiles_per_seq;
  int sliding_window;
  float scale_log2;  // softmax scale · log2(e)
};

// The arguments for blocks of `rows_per_block` query rows: a tile holds
// rows_per_block / group whole tokens.
inline PrefillArgs prefill_args(const BatchView& batch, const AttentionParams& attn, const KvGeometry& geometry,
                                int rows_per_block) {
  PrefillArgs args{};
  args.positions = batch.positions;
  args.seq_starts = batch.seq_starts;
  args.block_tables = batch.block_tables;
  args.max_blocks_per_seq = batch.max_blocks_per_seq;
  args.block_size = geometry.block_size;
  args.n_heads = attn.n_heads;
  args.n_kv_heads = attn.n_kv_heads;
  args.group = attn.n_heads / attn.n_kv_heads;
  args.tokens_per_tile = rows_per_block / args.group;
  args.tiles_per_seq = static_cast<int>(ceil_div(std::max(batch.max_new_tokens, 1), args.tokens_per_tile));
  args.sliding_window = attn.sliding_window;
  args.scale_log2 = attn.scale * kLog2e;
  return args;
}

// This block's tile: its sequence, its tokens [tok_begin, tok_end) and their rows.
struct PrefillTile {
  int seq;
  int kv_head;
  int tok_begin;
  int tok_end;
  int valid_rows;  // (tok_end - tok_begin) · group
};

// False when the tile is past its sequence's new tokens (uniform over the block).
__device__ __forceinline__ bool prefill_tile(const PrefillArgs& args, PrefillTile& tile) {
  tile.seq = blockIdx.x / args.tiles_per_seq;
  tile.kv_head = blockIdx.y;
  const int seq_end = args.seq_starts[tile.seq + 1];
  tile.tok_begin = args.seq_starts[tile.seq] + static_cast<int>(blockIdx.x % args.tiles_per_seq) * args.tokens_per_tile;
  tile.tok_end = min(seq_end, tile.tok_begin + args.tokens_per_tile);
  tile.valid_rows = (tile.tok_end - tile.tok_begin) * args.group;
  return tile.tok_begin < tile.tok_end;
}

// The key range [lo, hi] the tile's rows need (sliding windows included), in shared memory
// for the whole block; ends with a barrier.
__device__ __forceinline__ void prefill_key_range(const PrefillArgs& args, const PrefillTile& tile, int& key_lo_s,
                                                  int& key_hi_s) {
  if (threadIdx.x == 0) {
    key_lo_s = INT_MAX;
    key_hi_s = -1;
  }
  __syncthreads();
  if (threadIdx.x < static_cast<unsigned>(tile.tok_end - tile.tok_begin)) {
    const int pos = args.positions[tile.tok_begin + threadIdx.x];
    const int lo = args.sliding_window > 0 ? max(0, pos - args.sliding_window + 1) : 0;
    atomicMin(&key_lo_s, lo);
    atomicMax(&key_hi_s, pos);
  }
  __syncthreads();
}

}  // namespace qwenrt::cuda
