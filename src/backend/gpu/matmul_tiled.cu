// The portable matrix product for HIP builds without hipBLASLt: out[n, m] = x[n, k] ·
// w[m, k]ᵀ with fp32 accumulation, output in the activation dtype or fp32 (logits).
// Work split: one 16×16 output tile per block, k walked in 16-wide slices staged through
// shared memory. Correct for any shape and alignment, not fast (no matrix cores): it exists
// so that a ROCm install without hipBLASLt still builds and runs; builds that find
// hipBLASLt use matmul_hipblaslt.cu instead, and CUDA builds use cuBLASLt.
#include "backend/gpu/common.h"

namespace qwenrt::cuda {
namespace {

constexpr int kTile = 16;

template <typename T, typename Out>
__global__ void __launch_bounds__(kTile * kTile)
    matmul_tiled_kernel(const T* __restrict__ x, const T* __restrict__ w, Out* __restrict__ out,
                        int64_t n, int64_t m, int64_t k) {
  __shared__ float x_s[kTile][kTile + 1];  // padding: column reads hit distinct banks
  __shared__ float w_s[kTile][kTile + 1];
  const int tx = static_cast<int>(threadIdx.x);
  const int ty = static_cast<int>(threadIdx.y);
  const int64_t row = static_cast<int64_t>(blockIdx.y) * kTile + ty;  // index into n
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kTile + tx;  // index into m
  const int64_t w_row = static_cast<int64_t>(blockIdx.x) * kTile + ty;
  float acc = 0.f;
  for (int64_t k0 = 0; k0 < k; k0 += kTile) {
    const int64_t kk = k0 + tx;
    x_s[ty][tx] = row < n && kk < k ? gpu::to_f32(x[row * k + kk]) : 0.f;
    w_s[ty][tx] = w_row < m && kk < k ? gpu::to_f32(w[w_row * k + kk]) : 0.f;
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kTile; ++j) acc += x_s[ty][j] * w_s[tx][j];
    __syncthreads();
  }
  if (row < n && col < m) out[row * m + col] = gpu::from_f32<Out>(acc);
}

}  // namespace

struct Matmul::Impl {};

Matmul::Matmul(void* /*workspace*/, size_t /*workspace_bytes*/, int /*multiprocessors*/) : impl_(std::make_unique<Impl>()) {}

Matmul::~Matmul() = default;

void Matmul::run(const Tensor& x, const Tensor& w, Tensor out, Stream stream) {
  const int64_t n = x.rows, k = x.cols, m = w.rows;
  if (!check_matmul(x, w, out)) return;
  const auto sizes = [&] { return matmul_sizes(x, w, out); };
  const dim3 block(kTile, kTile);
  const dim3 grid(ceil_div(m, kTile), ceil_div(n, kTile));
  dispatch_half(x.dtype, "matmul", [&](auto tag) {
    using T = decltype(tag);
    if (out.dtype == DType::kF32) {
      matmul_tiled_kernel<T, float><<<grid, block, 0, stream>>>(x.as<const T>(), w.as<const T>(),
                                                                out.as<float>(), n, m, k);
    } else {
      matmul_tiled_kernel<T, T><<<grid, block, 0, stream>>>(x.as<const T>(), w.as<const T>(),
                                                            out.as<T>(), n, m, k);
    }
  });
  QWENRT_CUDA_LAUNCHED("matmul (tiled)", sizes());
}

}  // namespace qwenrt::cuda
