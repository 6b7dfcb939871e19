// Portability layer for the GPU kernels: the runtime API, the 16-bit float types and the
// warp intrinsics the kernels use, so that one kernel source builds with CUDA (nvcc) and
// with HIP (hipcc/clang, AMD GPUs). Kernels never write a literal warp width: kWarpSize
// is 32 on NVIDIA and on RDNA (wave32), 64 on CDNA (wave64), and every lane-count
// computation derives from it.
//
// HIP compiles the device code once per target (--offload-arch), so kWarpSize is exact in
// device code; the host pass of a HIP build serves every target of the binary at once
// (gfx1100 is wave32, gfx90a wave64), so host code never uses kWarpSize: launch geometry
// that depends on the warp width asks launch_warp_size(), the current device's width
// (on CUDA the same constant 32).
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>

#if defined(__HIP__) || defined(__HIP_PLATFORM_AMD__)
#define QWENRT_GPU_HIP 1
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif

#if defined(QWENRT_GPU_HIP)
// The CUDA runtime spellings the backend uses, mapped one to one onto HIP's. Only names
// whose HIP form has the same signature and meaning are listed; the rest (function
// attributes) go through the helpers below.
#define cudaDevAttrGlobalMemoryBusWidth hipDeviceAttributeMemoryBusWidth
#define cudaDevAttrMaxSharedMemoryPerBlockOptin hipDeviceAttributeSharedMemPerBlockOptin
#define cudaDevAttrMemoryClockRate hipDeviceAttributeMemoryClockRate
#define cudaDevAttrMultiProcessorCount hipDeviceAttributeMultiprocessorCount
#define cudaDeviceGetAttribute hipDeviceGetAttribute
#define cudaDeviceProp hipDeviceProp_t
#define cudaDriverGetVersion hipDriverGetVersion
#define cudaErrorMemoryAllocation hipErrorOutOfMemory
#define cudaError_t hipError_t
#define cudaEventCreate hipEventCreate
#define cudaEventCreateWithFlags hipEventCreateWithFlags
#define cudaEventDisableTiming hipEventDisableTiming
#define cudaEventDestroy hipEventDestroy
#define cudaEventElapsedTime hipEventElapsedTime
#define cudaEventRecord hipEventRecord
#define cudaEventSynchronize hipEventSynchronize
#define cudaEvent_t hipEvent_t
#define cudaFree hipFree
#define cudaFreeHost hipHostFree
#define cudaGetDevice hipGetDevice
#define cudaOccupancyMaxActiveBlocksPerMultiprocessor hipOccupancyMaxActiveBlocksPerMultiprocessor
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaGetDeviceProperties hipGetDeviceProperties
#define cudaGetErrorName hipGetErrorName
#define cudaGetErrorString hipGetErrorString
#define cudaGetLastError hipGetLastError
#define cudaHostAlloc hipHostMalloc
#define cudaHostAllocDefault hipHostMallocDefault
#define cudaHostAllocMapped hipHostMallocMapped
#define cudaHostGetDevicePointer hipHostGetDevicePointer
#define cudaMalloc hipMalloc
#define cudaMemGetInfo hipMemGetInfo
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemsetAsync hipMemsetAsync
#define cudaRuntimeGetVersion hipRuntimeGetVersion
#define cudaSetDevice hipSetDevice
#define cudaStreamCreateWithFlags hipStreamCreateWithFlags
#define cudaStreamDestroy hipStreamDestroy
#define cudaStreamNonBlocking hipStreamNonBlocking
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaStream_t hipStream_t
#define cudaSuccess hipSuccess
#define cudaGraphDestroy hipGraphDestroy
#define cudaGraphExecDestroy hipGraphExecDestroy
#define cudaGraphExec_t hipGraphExec_t
#define cudaGraphLaunch hipGraphLaunch
#define cudaGraph_t hipGraph_t
#define cudaStreamBeginCapture hipStreamBeginCapture
#define cudaStreamCaptureModeThreadLocal hipStreamCaptureModeThreadLocal
#define cudaStreamEndCapture hipStreamEndCapture
#endif

namespace qwenrt::gpu {

using Stream = cudaStream_t;
using GpuError = cudaError_t;

#if defined(QWENRT_GPU_HIP)
#if defined(__HIP_DEVICE_COMPILE__)
// Set by the compiler per --offload-arch: 64 on gfx9 (CDNA), 32 on gfx10+ (RDNA) unless
// -mwavefrontsize64 asks for wave64 there too.
constexpr int kWarpSize = __AMDGCN_WAVEFRONT_SIZE;
#else
// The host pass type-checks the kernel bodies but runs none of them: the widest wave
// keeps their static shapes valid; host code uses launch_warp_size() instead.
constexpr int kWarpSize = 64;
#endif
// Lane masks are as wide as the widest wave.
using LaneMask = unsigned long long;
#else
constexpr int kWarpSize = 32;
using LaneMask = unsigned;
constexpr LaneMask kFullWarpMask = 0xffffffffu;
#endif
static_assert(kWarpSize == 32 || kWarpSize == 64, "the kernels assume a 32- or 64-lane warp");
#if defined(__HIP_DEVICE_COMPILE__) && defined(__GFX9__)
static_assert(kWarpSize == 64, "gfx9 (GCN, CDNA) runs wave64 only");
#endif

// ---- chained launches (programmatic dependent launch: sm_90 and later) ----
// A kernel launched with launch_chained (common.h) may start while the kernel before it on
// the stream still runs: its blocks take the slots that kernel leaves free. It must call
// wait_for_prior_grid(next) before it reads anything a kernel before it wrote and before it
// writes anything; until then it may only read what no kernel writes (weights: RMSNorm
// loads its weights first). Every kernel launched chained waits before its first dependent
// access, so the order of the stream is kept transitively. The batch arrays (positions,
// sequence starts, block tables, slot mapping, token_seq, RoPE rows; not the token ids, which
// a draw may leave) are uploaded before a pass's first kernel and no kernel writes them, nor
// the RoPE frequency table (uploaded at load), so, like weights, they may be read before the
// wait (QwenModel::stage_batch keeps it so). So may the K/V cache at a sequence's positions
// before its new tokens (decode attention, also on a mixed pass's leading one-token
// sequences): a pass writes only positions at or past each sequence's cached length, in
// blocks that sequence alone holds (shared blocks are full and never written again; the
// padding rows write a scratch block no real sequence reads), and the passes that wrote
// the rest ended before its batch upload, a copy on the stream that no launch is chained
// across. Not so in the last layer's tail (BatchView::keys_in_pass): there a chunk's last
// token is a decode row whose earlier keys the same pass wrote, so those loads wait.
//
// The next chained kernel is placed once every block of this one has let it (or ended).
// Where that happens is the launch's NextGrid (common.h's next_grid_point picks it):
//  - kAtStart: first thing, so a chain of short kernels is placed several kernels ahead
//    (what pays where every kernel is short: the 0.5B);
//  - kAfterWait: once the block has passed its own wait, so at most one kernel waits
//    beside the one that runs and none takes the slots of a longer one still to come;
//  - kAfterStream: (matrix-vector products) once the block has read its weights, so the
//    next kernel is placed while the product's sums are reduced and stored.
// The calls are no-ops without a chained launch, before sm_90 and on HIP.
enum class NextGrid : int { kAtStart = 0, kAfterWait = 1, kAfterStream = 2 };

__device__ __forceinline__ void let_next_grid_start() {
#if !defined(QWENRT_GPU_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// First thing in a chained kernel.
__device__ __forceinline__ void allow_next_grid(NextGrid next) {
  if (next == NextGrid::kAtStart) let_next_grid_start();
}
__device__ __forceinline__ void wait_for_prior_grid(NextGrid next) {
#if !defined(QWENRT_GPU_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  if (next == NextGrid::kAfterWait) let_next_grid_start();
}
// A product's blocks, once their weights are read.
__device__ __forceinline__ void allow_next_grid_after_stream(NextGrid next) {
  if (next == NextGrid::kAfterStream) let_next_grid_start();
}
// A hint to bring the line holding p (device memory, whose generic address is its global
// address on NVIDIA GPUs) into the multiprocessor's L1 (a no-op on HIP).
__device__ __forceinline__ void prefetch_l1(const void* p) {
#if !defined(QWENRT_GPU_HIP) && defined(__CUDA_ARCH__)
  asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
#else
  (void)p;
#endif
}
// A 16-byte load of data read once (weights): evict-first, so x and the KV cache keep L2.
__device__ __forceinline__ int4 load_streaming(const int4* p) {
#if defined(QWENRT_GPU_HIP)
  return *p;
#else
  return __ldcs(p);
#endif
}
// Both, for a kernel with nothing to read before the wait.
__device__ __forceinline__ void follow_prior_grid(NextGrid next) {
  allow_next_grid(next);
  wait_for_prior_grid(next);
}

// ---- 16-bit storage types ----
#if defined(QWENRT_GPU_HIP)
// Not every ROCm release ships a device bf16 type (hip_bf16.h arrived after 5.2), so the
// HIP build uses its own: the bf16 bit pattern, converted explicitly.
struct alignas(2) Bf16 {
  uint16_t bits;
};
using bf16 = Bf16;
using f16 = __half;
#else
using bf16 = __nv_bfloat16;
using f16 = __half;
#endif
static_assert(sizeof(bf16) == 2 && sizeof(f16) == 2, "16-bit storage types");

// Storage <-> fp32 conversions: kernels are templated on the storage type and do all
// arithmetic in fp32.
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(f16 x) { return __half2float(x); }
#if defined(QWENRT_GPU_HIP)
__device__ __forceinline__ float to_f32(bf16 x) {
  return __uint_as_float(static_cast<uint32_t>(x.bits) << 16);
}
#else
__device__ __forceinline__ float to_f32(bf16 x) { return __bfloat162float(x); }
#endif

template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ f16 from_f32<f16>(float x) { return __float2half_rn(x); }
#if defined(QWENRT_GPU_HIP)
// Round to nearest even, NaN kept quiet: what __float2bfloat16_rn does on NVIDIA.
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float x) {
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(u >> 16)};
}
#else
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float x) { return __float2bfloat16_rn(x); }
#endif

// ---- warp intrinsics ----
// All lanes of the warp take part (HIP has no participation mask: a wave is converged).
template <typename T>
__device__ __forceinline__ T shfl_xor(T value, int lane_mask) {
#if defined(QWENRT_GPU_HIP)
  return __shfl_xor(value, lane_mask, kWarpSize);
#else
  return __shfl_xor_sync(kFullWarpMask, value, lane_mask, kWarpSize);
#endif
}
template <typename T>
__device__ __forceinline__ T shfl(T value, int src_lane) {
#if defined(QWENRT_GPU_HIP)
  return __shfl(value, src_lane, kWarpSize);
#else
  return __shfl_sync(kFullWarpMask, value, src_lane, kWarpSize);
#endif
}

// Orders the warp's shared-memory writes before its later reads of other lanes' data.
__device__ __forceinline__ void sync_warp() {
#if defined(QWENRT_GPU_HIP)
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
#else
  __syncwarp();
#endif
}

// The lanes of the (converged) warp whose `value` equals this lane's. On HIP, which has
// no match instruction, one ballot per bit: values must differ within their low kBits.
template <int kBits = 32>
__device__ __forceinline__ LaneMask match_any(int value) {
#if defined(QWENRT_GPU_HIP)
  LaneMask peers = __ballot(1);
#pragma unroll
  for (int bit = 0; bit < kBits; ++bit) {
    const bool set = ((value >> bit) & 1) != 0;
    const LaneMask with_bit = __ballot(set);
    peers &= set ? with_bit : ~with_bit;
  }
  return peers;
#else
  return __match_any_sync(kFullWarpMask, value);
#endif
}
// Index of the lowest set lane of a non-empty mask, and the number of lanes in a mask.
__device__ __forceinline__ int lowest_lane(LaneMask mask) {
#if defined(QWENRT_GPU_HIP)
  return static_cast<int>(__ffsll(mask)) - 1;
#else
  return __ffs(mask) - 1;
#endif
}
__device__ __forceinline__ int lane_count(LaneMask mask) {
#if defined(QWENRT_GPU_HIP)
  return static_cast<int>(__popcll(mask));
#else
  return __popc(mask);
#endif
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
  static_assert(kWidth <= kWarpSize && (kWidth & (kWidth - 1)) == 0, "group within a warp");
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

// ---- host side ----
// The warp width of the current device, for launch geometry (threads per block of
// warp-per-item kernels, warp-sized shared-memory tiles).
inline int launch_warp_size() {
#if defined(QWENRT_GPU_HIP)
  thread_local int cached_device = -1;
  thread_local int cached_width = 0;
  int device = 0;
  if (hipGetDevice(&device) != hipSuccess) return 64;
  if (device != cached_device) {
    int width = 0;
    if (hipDeviceGetAttribute(&width, hipDeviceAttributeWarpSize, device) != hipSuccess || width <= 0)
      width = 64;
    cached_device = device;
    cached_width = width;
  }
  return cached_width;
#else
  return kWarpSize;
#endif
}

// Raises a kernel's dynamic shared-memory limit (CUDA's opt-in above 48 KiB).
template <typename Kernel>
GpuError set_max_dynamic_shared_bytes(Kernel kernel, int bytes) {
#if defined(QWENRT_GPU_HIP)
  return hipFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                             hipFuncAttributeMaxDynamicSharedMemorySize, bytes);
#else
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
#endif
}

// Whether this binary carries code for the current device (a launch would fail if not).
template <typename Kernel>
GpuError probe_kernel_image(Kernel kernel) {
#if defined(QWENRT_GPU_HIP)
  hipFuncAttributes attributes{};
  return hipFuncGetAttributes(&attributes, reinterpret_cast<const void*>(kernel));
#else
  cudaFuncAttributes attributes{};
  return cudaFuncGetAttributes(&attributes, kernel);
#endif
}

// Makes a launchable graph of a captured one (the two runtimes spell it differently).
inline GpuError graph_instantiate(cudaGraphExec_t* exec, cudaGraph_t graph) {
#if defined(QWENRT_GPU_HIP)
  return hipGraphInstantiate(exec, graph, nullptr, nullptr, 0);
#else
  return cudaGraphInstantiate(exec, graph, 0);
#endif
}

}  // namespace qwenrt::gpu
