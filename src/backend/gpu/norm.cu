// RMSNorm and the fused residual add + RMSNorm, as transformers computes them: fp32
// math, var = mean(x²), x · rsqrt(var + eps), then the cast to the activation dtype and
// · weight (Qwen2RMSNorm casts before the weight multiply). Work split: one block per
// row; rows of up to 4 chunks a thread stay in registers, longer ones are re-read from
// L1/L2 in a second pass. Layout: rows of `cols`
// contiguous elements, 16-byte vectors when aligned. Bound: memory (read x (+delta),
// write out (+residual)), latency at batch 1 (one 3.5k-element row).
#include "backend/gpu/common.h"

namespace qwenrt::cuda {
namespace {

using gpu::Vec16;

constexpr int kNormThreads = 256;

// kVec elements per access: Vec16<T>::kCount when rows are 16-byte aligned, else 1.
template <typename T, int kVec>
struct Chunk {
  T v[kVec];
};

template <typename T, int kVec>
__device__ __forceinline__ Chunk<T, kVec> load_chunk(const T* p) {
  if constexpr (kVec == 1) {
    return Chunk<T, kVec>{{p[0]}};
  } else {
    const Vec16<T> raw = *reinterpret_cast<const Vec16<T>*>(p);
    Chunk<T, kVec> c;
#pragma unroll
    for (int j = 0; j < kVec; ++j) c.v[j] = raw.v[j];
    return c;
  }
}

template <typename T, int kVec>
__device__ __forceinline__ void store_chunk(T* p, const Chunk<T, kVec>& c) {
  if constexpr (kVec == 1) {
    p[0] = c.v[0];
  } else {
    Vec16<T> raw;
#pragma unroll
    for (int j = 0; j < kVec; ++j) raw.v[j] = c.v[j];
    *reinterpret_cast<Vec16<T>*>(p) = raw;
  }
}

// One chunk's output: the normalised value rounded to the activation dtype, then · weight.
template <typename T, int kVec>
__device__ __forceinline__ Chunk<T, kVec> normalise(const Chunk<T, kVec>& value, const Chunk<T, kVec>& w,
                                                    float inv_rms) {
  Chunk<T, kVec> result;
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const T normed = gpu::from_f32<T>(gpu::to_f32(value.v[j]) * inv_rms);
    result.v[j] = gpu::from_f32<T>(gpu::to_f32(normed) * gpu::to_f32(w.v[j]));
  }
  return result;
}

// residual (optional) += delta; out = rmsnorm(residual or x) * weight. kCached > 0: every
// thread holds its (at most kCached) chunks and their weights in registers, the weights
// loaded before the reduction so that their latency hides behind it; 0: rows too long for
// that, re-read in a second pass.
template <typename T, int kVec, bool kAdd, int kCached>
__global__ void __launch_bounds__(kNormThreads)
    rmsnorm_kernel(T* __restrict__ x, const T* __restrict__ delta, const T* __restrict__ weight,
                   T* __restrict__ out, int cols, float eps, gpu::NextGrid next) {
  __shared__ float scratch[kNormThreads / gpu::kWarpSize];
  gpu::allow_next_grid(next);
  const int64_t row_offset = static_cast<int64_t>(blockIdx.x) * cols;
  T* row = x + row_offset;
  const int chunks = cols / kVec;

  // The row (after the residual add) and its sum of squares.
  const auto read = [&](int c, float& sum_sq) {
    Chunk<T, kVec> value = load_chunk<T, kVec>(row + c * kVec);
    if constexpr (kAdd) {
      const Chunk<T, kVec> d = load_chunk<T, kVec>(delta + row_offset + c * kVec);
#pragma unroll
      for (int j = 0; j < kVec; ++j)
        value.v[j] = gpu::from_f32<T>(gpu::to_f32(value.v[j]) + gpu::to_f32(d.v[j]));
      store_chunk<T, kVec>(row + c * kVec, value);
    }
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float f = gpu::to_f32(value.v[j]);
      sum_sq += f * f;
    }
    return value;
  };

  float sum_sq = 0.f;
  if constexpr (kCached > 0) {
    Chunk<T, kVec> value[kCached];
    Chunk<T, kVec> w[kCached];
#pragma unroll
    for (int i = 0; i < kCached; ++i) {
      const int c = threadIdx.x + i * kNormThreads;
      if (c < chunks) w[i] = load_chunk<T, kVec>(weight + c * kVec);
    }
    gpu::wait_for_prior_grid(next);  // the weights are on their way; the row is the kernel before's
#pragma unroll
    for (int i = 0; i < kCached; ++i) {
      const int c = threadIdx.x + i * kNormThreads;
      if (c < chunks) value[i] = read(c, sum_sq);
    }
    const float inv_rms = rsqrtf(gpu::block_sum(sum_sq, scratch) / static_cast<float>(cols) + eps);
#pragma unroll
    for (int i = 0; i < kCached; ++i) {
      const int c = threadIdx.x + i * kNormThreads;
      if (c < chunks) store_chunk<T, kVec>(out + row_offset + c * kVec, normalise<T, kVec>(value[i], w[i], inv_rms));
    }
  } else {
    gpu::wait_for_prior_grid(next);
    for (int c = threadIdx.x; c < chunks; c += kNormThreads) read(c, sum_sq);
    const float inv_rms = rsqrtf(gpu::block_sum(sum_sq, scratch) / static_cast<float>(cols) + eps);
    // Each thread re-reads only the chunks it wrote itself, so no barrier is needed.
    for (int c = threadIdx.x; c < chunks; c += kNormThreads) {
      const Chunk<T, kVec> value = load_chunk<T, kVec>(row + c * kVec);
      const Chunk<T, kVec> w = load_chunk<T, kVec>(weight + c * kVec);
      store_chunk<T, kVec>(out + row_offset + c * kVec, normalise<T, kVec>(value, w, inv_rms));
    }
  }
}

template <typename T, int kVec, bool kAdd>
void launch_vec(T* x, const T* delta, const T* weight, T* out, int64_t rows, int64_t cols, float eps,
                Stream stream) {
  const auto grid = static_cast<unsigned>(rows);
  const int64_t per_thread = ceil_div(cols / kVec, kNormThreads);
  const auto go = [&](auto kernel) {
    launch_chained(kernel, grid, kNormThreads, 0, stream, x, delta, weight, out, static_cast<int>(cols), eps,
                   next_grid_point());
  };
  if (per_thread <= 1) {
    go(rmsnorm_kernel<T, kVec, kAdd, 1>);
  } else if (per_thread <= 2) {
    go(rmsnorm_kernel<T, kVec, kAdd, 2>);
  } else if (per_thread <= 4) {
    go(rmsnorm_kernel<T, kVec, kAdd, 4>);
  } else {
    go(rmsnorm_kernel<T, kVec, kAdd, 0>);
  }
}

template <typename T, bool kAdd>
void launch(T* x, const T* delta, const T* weight, T* out, int64_t rows, int64_t cols, float eps,
            Stream stream) {
  constexpr int kPer = Vec16<T>::kCount;
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool vector = cols % kPer == 0 && aligned(x) && aligned(weight) && aligned(out) &&
                      (!kAdd || aligned(delta));
  if (vector) {
    launch_vec<T, kPer, kAdd>(x, delta, weight, out, rows, cols, eps, stream);
  } else {
    launch_vec<T, 1, kAdd>(x, delta, weight, out, rows, cols, eps, stream);
  }
}

void check_norm_shapes(const char* op, const Tensor& x, const Tensor& weight, const Tensor& out) {
  QWENRT_CHECK(weight.numel() == x.cols && out.rows == x.rows && out.cols == x.cols &&
                   weight.dtype == x.dtype && out.dtype == x.dtype,
               std::string(op) + ": x " + shape_string(x) + ", weight " + shape_string(weight) +
                   ", out " + shape_string(out));
}

}  // namespace

void launch_rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor out, Stream stream) {
  check_norm_shapes("rmsnorm", x, weight, out);
  if (x.rows == 0) return;
  dispatch_half(x.dtype, "rmsnorm", [&](auto tag) {
    using T = decltype(tag);
    launch<T, false>(x.as<T>(), nullptr, weight.as<const T>(), out.as<T>(), x.rows, x.cols, eps,
                     stream);
  });
  QWENRT_CUDA_LAUNCHED("rmsnorm", shape_string(x));
}

void launch_add_rmsnorm(Tensor residual, const Tensor& delta, const Tensor& weight, float eps,
                        Tensor out, Stream stream) {
  check_norm_shapes("add_rmsnorm", residual, weight, out);
  QWENRT_CHECK(delta.rows == residual.rows && delta.cols == residual.cols &&
                   delta.dtype == residual.dtype,
               "add_rmsnorm: delta " + shape_string(delta) + " vs residual " +
                   shape_string(residual));
  if (residual.rows == 0) return;
  dispatch_half(residual.dtype, "add_rmsnorm", [&](auto tag) {
    using T = decltype(tag);
    launch<T, true>(residual.as<T>(), delta.as<const T>(), weight.as<const T>(), out.as<T>(),
                    residual.rows, residual.cols, eps, stream);
  });
  QWENRT_CUDA_LAUNCHED("add_rmsnorm", shape_string(residual));
}

}  // namespace qwenrt::cuda
