// Skinny matrix products for decode: out[n, m] = x[n, k] · w[m, k]ᵀ with n ≤ kMaxGemvRows.
// A decode step reads every weight once, so the bound is memory bandwidth on w; the
// general GEMM libraries pick split-K + reduce kernels for one row and reach about a third
// of it on the smaller projections. Work split: one block of kThreads per kFeatures rows
// of w (output features); its threads stride over k in 16-byte vectors (kUnroll vectors
// of each feature in flight per thread), keep fp32 sums for every (x row, feature), and
// reduce them across the block. w is read with streaming loads (used once per step); x is
// small and read through the cache by every block.
#include "backend/gpu/common.h"

namespace qwenrt::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / gpu::kWarpSize;
constexpr int kUnroll = 4;

// A 16-byte load of data read once (weights): evict-first, so x and the KV cache keep L2.
__device__ __forceinline__ int4 load_streaming(const int4* p) {
#if defined(QWENRT_GPU_HIP)
  return *p;
#else
  return __ldcs(p);
#endif
}

template <typename T>
__device__ __forceinline__ void accumulate(float& acc, const int4& a, const int4& b) {
  const T* av = reinterpret_cast<const T*>(&a);
  const T* bv = reinterpret_cast<const T*>(&b);
#pragma unroll
  for (int c = 0; c < 8; ++c) acc += gpu::to_f32(av[c]) * gpu::to_f32(bv[c]);
}

// kGated: w is [gate; up] with m rows each; the block computes output feature blockIdx.x
// from gate row f and up row m + f as silu(gate·x) * (up·x) (the MLP input, one launch).
template <typename T, typename Out, int kRows, int kFeatures, bool kGated = false>
__global__ void __launch_bounds__(kThreads)
    gemv_kernel(const T* __restrict__ x, const T* __restrict__ w, Out* __restrict__ out, int n_rows,
                int k, int m) {
  static_assert(!kGated || kFeatures == 2, "a gated block pairs one gate and one up row");
  __shared__ float partial[kWarps][kRows][kFeatures];
  const int feature0 = kGated ? blockIdx.x : blockIdx.x * kFeatures;
  const int vectors = k / 8;  // 16-byte vectors per row
  const int4* x4 = reinterpret_cast<const int4*>(x);
  const int4* w4 = reinterpret_cast<const int4*>(w);

  float acc[kRows][kFeatures];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int f = 0; f < kFeatures; ++f) acc[r][f] = 0.f;

  // Rows of w past m are clamped to the last one (their sums are dropped at the end).
  int64_t w_row[kFeatures];
#pragma unroll
  for (int f = 0; f < kFeatures; ++f) {
    w_row[f] = kGated ? static_cast<int64_t>(feature0 + f * m) * vectors
                      : static_cast<int64_t>(min(feature0 + f, m - 1)) * vectors;
  }

  int v = threadIdx.x;
  for (; v + (kUnroll - 1) * kThreads < vectors; v += kUnroll * kThreads) {
    int4 wv[kUnroll][kFeatures];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int f = 0; f < kFeatures; ++f) wv[u][f] = load_streaming(w4 + w_row[f] + v + u * kThreads);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (r < n_rows) {  // uniform; no break, so the loop unrolls on every compiler
          const int4 xv = x4[static_cast<int64_t>(r) * vectors + v + u * kThreads];
#pragma unroll
          for (int f = 0; f < kFeatures; ++f) accumulate<T>(acc[r][f], wv[u][f], xv);
        }
      }
    }
  }
  for (; v < vectors; v += kThreads) {
    int4 wv[kFeatures];
#pragma unroll
    for (int f = 0; f < kFeatures; ++f) wv[f] = load_streaming(w4 + w_row[f] + v);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r < n_rows) {
        const int4 xv = x4[static_cast<int64_t>(r) * vectors + v];
#pragma unroll
        for (int f = 0; f < kFeatures; ++f) accumulate<T>(acc[r][f], wv[f], xv);
      }
    }
  }

  const int lane = threadIdx.x % gpu::kWarpSize;
  const int warp = threadIdx.x / gpu::kWarpSize;
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int f = 0; f < kFeatures; ++f) {
      const float sum = gpu::warp_sum(acc[r][f]);
      if (lane == 0) partial[warp][r][f] = sum;
    }
  __syncthreads();
  if constexpr (kGated) {
    if (threadIdx.x < kRows && static_cast<int>(threadIdx.x) < n_rows) {
      const int r = threadIdx.x;
      float gate = 0.f, up = 0.f;
#pragma unroll
      for (int wi = 0; wi < kWarps; ++wi) {
        gate += partial[wi][r][0];
        up += partial[wi][r][1];
      }
      out[static_cast<int64_t>(r) * m + feature0] = gpu::from_f32<Out>(gate / (1.f + __expf(-gate)) * up);
    }
    return;
  }
  if (threadIdx.x < kRows * kFeatures) {
    const int r = threadIdx.x / kFeatures;
    const int f = threadIdx.x % kFeatures;
    if (r < n_rows && feature0 + f < m) {
      float sum = 0.f;
#pragma unroll
      for (int wi = 0; wi < kWarps; ++wi) sum += partial[wi][r][f];
      out[static_cast<int64_t>(r) * m + feature0 + f] = gpu::from_f32<Out>(sum);
    }
  }
}

template <typename T, typename Out, int kRows>
void launch_rows(const Tensor& x, const Tensor& w, Tensor out, Stream stream) {
  const int m = static_cast<int>(w.rows);
  const int k = static_cast<int>(w.cols);
  // Two features per block keep more weight bytes in flight per x vector; narrow outputs
  // (k/v projections) take one so that enough blocks fill the chip.
  if (m >= 2048) {
    constexpr int kFeatures = 2;
    gemv_kernel<T, Out, kRows, kFeatures><<<ceil_div(m, kFeatures), kThreads, 0, stream>>>(
        x.as<const T>(), w.as<const T>(), out.as<Out>(), static_cast<int>(x.rows), k, m);
  } else {
    gemv_kernel<T, Out, kRows, 1><<<static_cast<unsigned>(m), kThreads, 0, stream>>>(
        x.as<const T>(), w.as<const T>(), out.as<Out>(), static_cast<int>(x.rows), k, m);
  }
}

template <typename T, typename Out>
void launch_typed(const Tensor& x, const Tensor& w, Tensor out, Stream stream) {
  if (x.rows == 1) {
    launch_rows<T, Out, 1>(x, w, out, stream);
  } else if (x.rows == 2) {
    launch_rows<T, Out, 2>(x, w, out, stream);
  } else {
    launch_rows<T, Out, kMaxGemvRows>(x, w, out, stream);
  }
}

template <typename T>
void launch_gated(const Tensor& x, const Tensor& gate_up, Tensor out, Stream stream) {
  const int m = static_cast<int>(out.cols);
  const int k = static_cast<int>(x.cols);
  const int rows = static_cast<int>(x.rows);
  if (rows == 1) {
    gemv_kernel<T, T, 1, 2, true><<<static_cast<unsigned>(m), kThreads, 0, stream>>>(
        x.as<const T>(), gate_up.as<const T>(), out.as<T>(), rows, k, m);
  } else {
    gemv_kernel<T, T, kMaxGemvRows, 2, true><<<static_cast<unsigned>(m), kThreads, 0, stream>>>(
        x.as<const T>(), gate_up.as<const T>(), out.as<T>(), rows, k, m);
  }
}

bool gemv_applies(const Tensor& x, const Tensor& w) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  // x is re-read by every block from the cache: keep it small enough to stay there.
  return x.rows >= 1 && x.rows <= kMaxGemvRows && w.cols % 8 == 0 && aligned(x.data) && aligned(w.data) &&
         w.rows < (int64_t{1} << 31) && static_cast<size_t>(x.bytes()) <= (size_t{64} << 10);
}

}  // namespace

bool launch_gemv_silu_mul(const Tensor& x, const Tensor& gate_up, Tensor out, Stream stream) {
  if (!gemv_applies(x, gate_up) || out.rows != x.rows || gate_up.rows != 2 * out.cols ||
      gate_up.cols != x.cols || out.dtype != x.dtype || gate_up.dtype != x.dtype) {
    return false;
  }
  if (x.rows == 0 || out.cols == 0) return true;
  dispatch_half(x.dtype, "matmul_silu_mul", [&](auto tag) { launch_gated<decltype(tag)>(x, gate_up, out, stream); });
  QWENRT_CUDA_LAUNCHED("matmul_silu_mul (gemv)", matmul_sizes(x, gate_up, out));
  return true;
}

bool launch_gemv(const Tensor& x, const Tensor& w, Tensor out, Stream stream) {
  if (!gemv_applies(x, w)) return false;
  if (!check_matmul(x, w, out)) return true;
  dispatch_half(x.dtype, "matmul", [&](auto tag) {
    using T = decltype(tag);
    if (out.dtype == DType::kF32) {
      launch_typed<T, float>(x, w, out, stream);
    } else {
      launch_typed<T, T>(x, w, out, stream);
    }
  });
  QWENRT_CUDA_LAUNCHED("matmul (gemv)", matmul_sizes(x, w, out));
  return true;
}

}  // namespace qwenrt::cuda
