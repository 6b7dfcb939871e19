// Products of a few rows on tensor cores: out[n, m] = x[n, k] · w[m, k]ᵀ for kMinSmallRows ≤ n
// ≤ kMaxSmallRows (decode of a handful of sequences, a short prompt after a cached prefix).
// Like one row's, such a product is bound by reading w once; the matrix library's kernels
// for these shapes read it at ≈ 80% of the rate the matrix-vector kernel reaches for one row,
// and the matrix-vector kernel itself loses past a few rows (its fp32 dot products grow with
// n). Here x's rows are the columns of mma.m16n8k16: w takes the A side (a warp's 16 rows of
// w), x the B side (8 rows of x a fragment), and both come straight from global memory in
// 16-byte loads. That works because a dot product does not see the order of its k terms: in
// a 64-element chunk of k, a lane holds elements 16·(lane % 4) + [0, 16) of its w rows and its
// x row, and takes them as its slots of the chunk's four k16 steps, the same permutation on
// both sides. Work split: a block of kWarps warps a 16-row tile of w; the warps take
// interleaved chunks of k (adjacent warps read adjacent 128-byte pieces of each row), each
// with its next chunk's weights in flight, and their partial sums meet in shared memory.
// CUDA only (mma.sync): the HIP build keeps the matrix library for these rows.
#include "backend/gpu/attention_mma.h"
#include "backend/gpu/common.h"

namespace qwenrt::cuda {

#if !defined(QWENRT_GPU_HIP)
namespace {

constexpr int kThreads = 256;  // fixed in threads (launch geometry); 8 warps of mma.sync's 32 lanes
constexpr int kWarps = kThreads / gpu::kWarpSize;
constexpr int kChunk = 64;      // k elements a warp takes at a time
constexpr int kTileRows = 16;   // rows of w a block computes

// A chunk's weights for this lane: [0], [1] from w row tile + g, [2], [3] from row tile + g + 8.
__device__ __forceinline__ void load_chunk(const int4* __restrict__ w_lo, const int4* __restrict__ w_hi, int chunk,
                                           int4 (&wv)[4]) {
  const int64_t at = static_cast<int64_t>(chunk) * (kChunk / 8);
  wv[0] = gpu::load_streaming(w_lo + at);
  wv[1] = gpu::load_streaming(w_lo + at + 1);
  wv[2] = gpu::load_streaming(w_hi + at);
  wv[3] = gpu::load_streaming(w_hi + at + 1);
}

// Adds a chunk's products: for each fragment of 8 x rows, the lane's 16 elements of its x row
// against its 16 of each w row, as four k16 steps (slots 2c, 2c+1 ← elements 4s, 4s+1;
// slots 2c+8, 2c+9 ← elements 4s+2, 4s+3, with c = lane % 4).
template <typename T, int kTiles>
__device__ __forceinline__ void add_chunk(const T* __restrict__ x, int n_rows, int k, int chunk, int lane,
                                          const int4 (&wv)[4], float (&acc)[kTiles][4]) {
  const int g = lane / 4;
  const int c = lane % 4;
  uint32_t lo[8], hi[8];
  memcpy(lo, &wv[0], 32);
  memcpy(hi, &wv[2], 32);
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    const int r = t * 8 + g;
    int4 xv[2] = {};
    if (r < n_rows) {
      const int4* xp = reinterpret_cast<const int4*>(x + static_cast<int64_t>(r) * k + chunk * kChunk + 16 * c);
      xv[0] = xp[0];
      xv[1] = xp[1];
    }
    uint32_t xw[8];
    memcpy(xw, xv, 32);
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const uint32_t a[4] = {lo[2 * s], hi[2 * s], lo[2 * s + 1], hi[2 * s + 1]};
      mma::mma_16816<T>(acc[t], a, xw[2 * s], xw[2 * s + 1]);
    }
  }
}

template <typename T, typename Out, int kTiles>
__global__ void __launch_bounds__(kThreads)
    small_matmul_kernel(const T* __restrict__ x, const T* __restrict__ w, Out* __restrict__ out, int n_rows, int k,
                        int m, gpu::NextGrid next) {
  constexpr int kCols = kTiles * 8;  // x rows the block's fragments hold
  __shared__ float partial[kWarps][kTileRows][kCols + 1];
  gpu::allow_next_grid(next);
  const int warp = threadIdx.x / gpu::kWarpSize;
  const int lane = threadIdx.x % gpu::kWarpSize;
  const int g = lane / 4;
  const int c = lane % 4;
  const int row0 = blockIdx.x * kTileRows;
  const int chunks = k / kChunk;
  const int4* w_lo = reinterpret_cast<const int4*>(w + static_cast<int64_t>(row0 + g) * k + 16 * c);
  const int4* w_hi = reinterpret_cast<const int4*>(w + static_cast<int64_t>(row0 + g + 8) * k + 16 * c);

  float acc[kTiles][4] = {};
  int4 w0[4], w1[4];
  // Weights are no kernel's output: the first two chunks start before the wait.
  int chunk = warp;
  if (chunk < chunks) load_chunk(w_lo, w_hi, chunk, w0);
  if (chunk + kWarps < chunks) load_chunk(w_lo, w_hi, chunk + kWarps, w1);
  gpu::wait_for_prior_grid(next);
  for (; chunk < chunks; chunk += 2 * kWarps) {
    add_chunk<T, kTiles>(x, n_rows, k, chunk, lane, w0, acc);
    if (chunk + 2 * kWarps < chunks) load_chunk(w_lo, w_hi, chunk + 2 * kWarps, w0);
    if (chunk + kWarps < chunks) {
      add_chunk<T, kTiles>(x, n_rows, k, chunk + kWarps, lane, w1, acc);
      if (chunk + 3 * kWarps < chunks) load_chunk(w_lo, w_hi, chunk + 3 * kWarps, w1);
    }
  }
  gpu::allow_next_grid_after_stream(next);

  // acc[t]: rows g and g + 8 of the tile, x rows t·8 + 2c and + 1.
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    partial[warp][g][t * 8 + 2 * c] = acc[t][0];
    partial[warp][g][t * 8 + 2 * c + 1] = acc[t][1];
    partial[warp][g + 8][t * 8 + 2 * c] = acc[t][2];
    partial[warp][g + 8][t * 8 + 2 * c + 1] = acc[t][3];
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < kTileRows * kCols; idx += kThreads) {
    const int row = idx % kTileRows;  // consecutive threads write consecutive outputs
    const int r = idx / kTileRows;
    if (r >= n_rows) continue;
    float sum = 0.f;
#pragma unroll
    for (int v = 0; v < kWarps; ++v) sum += partial[v][row][r];
    out[static_cast<int64_t>(r) * m + row0 + row] = gpu::from_f32<Out>(sum);
  }
}

template <typename T, typename Out>
void launch_typed(const Tensor& x, const Tensor& w, Tensor out, Stream stream) {
  const int rows = static_cast<int>(x.rows);
  const int k = static_cast<int>(x.cols);
  const int m = static_cast<int>(w.rows);
  const unsigned blocks = static_cast<unsigned>(m / kTileRows);
  const gpu::NextGrid next = next_grid_point_for_product(w.bytes());
  // One fragment of 8 x rows, or two.
  const auto kernel = rows <= 8 ? small_matmul_kernel<T, Out, 1> : small_matmul_kernel<T, Out, 2>;
  launch_chained(kernel, blocks, kThreads, 0, stream, x.as<const T>(), w.as<const T>(), out.as<Out>(), rows, k, m,
                 next);
}

}  // namespace
#endif

bool small_matmul_applies([[maybe_unused]] const Tensor& x, [[maybe_unused]] const Tensor& w) {
#if defined(QWENRT_GPU_HIP)
  return false;
#else
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return x.rows >= kMinSmallRows && x.rows <= kMaxSmallRows && x.cols % kChunk == 0 && w.rows % kTileRows == 0 &&
         w.rows < (int64_t{1} << 31) && x.cols < (int64_t{1} << 31) && aligned(x.data) && aligned(w.data);
#endif
}

bool launch_small_matmul([[maybe_unused]] const Tensor& x, [[maybe_unused]] const Tensor& w,
                         [[maybe_unused]] Tensor out, [[maybe_unused]] Stream stream) {
#if defined(QWENRT_GPU_HIP)
  return false;
#else
  if (!small_matmul_applies(x, w)) return false;
  if (!check_matmul(x, w, out)) return true;
  dispatch_half(x.dtype, "matmul", [&](auto tag) {
    using T = decltype(tag);
    if (out.dtype == DType::kF32) {
      launch_typed<T, float>(x, w, out, stream);
    } else {
      launch_typed<T, T>(x, w, out, stream);
    }
  });
  QWENRT_CUDA_LAUNCHED("matmul (few rows, tensor cores)", matmul_sizes(x, w, out));
  return true;
#endif
}

}  // namespace qwenrt::cuda
