// RMSNorm and the fused residual add + RMSNorm, as transformers computes them: fp32
// math, var = mean(x²), x · rsqrt(var + eps), then the cast to the activation dtype and
// · weight (Qwen2RMSNorm casts before the weight multiply). Work split: one block per
// row; the row is re-read from L1/L2 in the second pass. Layout: rows of `cols`
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

// residual (optional) += delta; out = rmsnorm(residual or x) * weight.
template <typename T, int kVec, bool kAdd>
__global__ void __launch_bounds__(kNormThreads)
    rmsnorm_kernel(T* __restrict__ x, const T* __restrict__ delta, const T* __restrict__ weight,
                   T* __restrict__ out, int cols, float eps) {
  __shared__ float scratch[kNormThreads / gpu::kWarpSize];
  const int64_t row_offset = static_cast<int64_t>(blockIdx.x) * cols;
  T* row = x + row_offset;
  const int chunks = cols / kVec;

  float sum_sq = 0.f;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
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
  }
  const float total = gpu::block_sum(sum_sq, scratch);
  const float inv_rms = rsqrtf(total / static_cast<float>(cols) + eps);

  // Each thread re-reads only the chunks it wrote itself, so no barrier is needed.
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    const Chunk<T, kVec> value = load_chunk<T, kVec>(row + c * kVec);
    const Chunk<T, kVec> w = load_chunk<T, kVec>(weight + c * kVec);
    Chunk<T, kVec> result;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const T normed = gpu::from_f32<T>(gpu::to_f32(value.v[j]) * inv_rms);
      result.v[j] = gpu::from_f32<T>(gpu::to_f32(normed) * gpu::to_f32(w.v[j]));
    }
    store_chunk<T, kVec>(out + row_offset + c * kVec, result);
  }
}

template <typename T, bool kAdd>
void launch(T* x, const T* delta, const T* weight, T* out, int64_t rows, int64_t cols, float eps,
            Stream stream) {
  constexpr int kPer = Vec16<T>::kCount;
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool vector = cols % kPer == 0 && aligned(x) && aligned(weight) && aligned(out) &&
                      (!kAdd || aligned(delta));
  const auto grid = static_cast<unsigned>(rows);
  if (vector) {
    rmsnorm_kernel<T, kPer, kAdd><<<grid, kNormThreads, 0, stream>>>(x, delta, weight, out,
                                                                     static_cast<int>(cols), eps);
  } else {
    rmsnorm_kernel<T, 1, kAdd><<<grid, kNormThreads, 0, stream>>>(x, delta, weight, out,
                                                                  static_cast<int>(cols), eps);
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
