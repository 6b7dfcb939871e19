// RoPE (rotate-half) and the LogN query scale on one pair (i, i + d/2) of a head, as the
// attention-input epilogue (rope_kv.cu) and the q|k|v product that folds it in
// (matmul_gemv.cu) both apply them: angles in fp32 with accurate cosf/sinf.
#pragma once

#include "backend/gpu/compat.h"

namespace qwenrt::cuda {

// log(p + 1) / log(logn_length) in double, rounded to fp32, as the CPU backend and the
// original Qwen's table; 1 when off (logn_length 0) or not past logn_length.
__device__ __forceinline__ float logn_factor(int logn_length, int position) {
  if (logn_length <= 0 || position + 1 <= logn_length) return 1.f;
  return static_cast<float>(log(static_cast<double>(position) + 1.0) / log(static_cast<double>(logn_length)));
}

// (lo, hi) rotated by position · inv_freq, the cos/sin scaled by `scaling`, the result by `logn`.
__device__ __forceinline__ void rope_pair(float& lo, float& hi, int position, float inv_freq, float scaling,
                                          float logn) {
  const float angle = __fmul_rn(static_cast<float>(position), inv_freq);
  const float c = cosf(angle) * scaling;
  const float s = sinf(angle) * scaling;
  const float x1 = lo;
  const float x2 = hi;
  // Rounded steps spelled out, so every kernel that inlines this gives the same bits
  // whatever the compiler would contract into fused multiply-adds around it.
  lo = __fmul_rn(__fmaf_rn(x1, c, __fmul_rn(-x2, s)), logn);
  hi = __fmul_rn(__fmaf_rn(x2, c, __fmul_rn(x1, s)), logn);
}

}  // namespace qwenrt::cuda
