// Portability layer for the GPU kernels: the runtime API, the 16-bit float types and the
// warp intrinsics the kernels use, so that the same kernel source can later be built
// with HIP. Kernels never write a literal warp width: kWarpSize is 32 on NVIDIA and on
// RDNA, 64 on CDNA (wave64), and every lane-count computation derives from it.
#pragma once

#if defined(__HIP_PLATFORM_AMD__)
#error "the HIP build maps these names to hip*; not wired up yet"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif

#include <cstdint>

namespace qwenrt::gpu {

using Stream = cudaStream_t;
using GpuError = cudaError_t;

constexpr int kWarpSize = 32;
constexpr unsigned kFullWarpMask = 0xffffffffu;

using bf16 = __nv_bfloat16;
using f16 = __half;

// Storage <-> fp32 conversions: kernels are templated on the storage type and do all
// arithmetic in fp32.
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(f16 x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ f16 from_f32<f16>(float x) { return __float2half_rn(x); }

template <typename T>
__device__ __forceinline__ T shfl_xor(T value, int lane_mask) {
  return __shfl_xor_sync(kFullWarpMask, value, lane_mask, kWarpSize);
}
template <typename T>
__device__ __forceinline__ T shfl(T value, int src_lane) {
  return __shfl_sync(kFullWarpMask, value, src_lane, kWarpSize);
}

// Reductions over the whole warp; every lane receives the result.
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) x += shfl_xor(x, offset);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) x = fmaxf(x, shfl_xor(x, offset));
  return x;
}
// Reduction over aligned groups of `kWidth` lanes (kWidth a power of two <= kWarpSize).
template <int kWidth>
__device__ __forceinline__ float group_sum(float x) {
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2) x += shfl_xor(x, offset);
  return x;
}

// Sum over the block; `scratch` holds one float per warp. All threads get the result.
__device__ __forceinline__ float block_sum(float x, float* scratch) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int n_warps = (blockDim.x + kWarpSize - 1) / kWarpSize;
  x = warp_sum(x);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < n_warps; ++w) total += scratch[w];
  return total;
}

// 16-byte vector of storage elements, for coalesced wide loads and stores.
template <typename T>
struct alignas(16) Vec16 {
  static constexpr int kCount = 16 / sizeof(T);
  T v[kCount];
};

}  // namespace qwenrt::gpu
