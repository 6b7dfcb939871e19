// Row copies and elementwise ops: embedding lookup, row gather, bias add, SiLU(gate)·up.
// Work split: one block per row for the row copies, a grid-stride loop for silu_mul.
// Layout: contiguous rows; 16-byte vector accesses when every row start is 16-byte
// aligned, element accesses otherwise. Bound: memory bandwidth (one read, one write).
#include <cmath>

#include "backend/gpu/common.h"

namespace qwenrt::cuda {
namespace {

using gpu::Vec16;

// out[r, :] = table[ids[r], :] (or x[rows[r], :]). Rows whose index is out of range are
// filled with NaN, so a bad id poisons the logits (caught by sample) instead of reading
// foreign memory.
template <typename T, bool kVector>
__global__ void copy_rows_kernel(const T* __restrict__ src, int64_t src_rows, int64_t cols,
                                 const int32_t* __restrict__ index, T* __restrict__ dst, gpu::NextGrid next) {
  gpu::follow_prior_grid(next);  // the ids (a draw's) and the rows may be the kernel before's
  const int64_t row = blockIdx.x;
  const int64_t src_row = index[row];
  T* out = dst + row * cols;
  if (src_row < 0 || src_row >= src_rows) {
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out[c] = gpu::from_f32<T>(NAN);
    return;
  }
  const T* in = src + src_row * cols;
  if constexpr (kVector) {
    constexpr int kPer = Vec16<T>::kCount;
    const auto* in_vec = reinterpret_cast<const Vec16<T>*>(in);
    auto* out_vec = reinterpret_cast<Vec16<T>*>(out);
    for (int64_t c = threadIdx.x; c < cols / kPer; c += blockDim.x) out_vec[c] = in_vec[c];
  } else {
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out[c] = in[c];
  }
}

template <typename T>
void copy_rows(const Tensor& src, const int32_t* index, Tensor dst, Stream stream,
               const char* op) {
  if (dst.rows == 0) return;
  const size_t row_bytes = static_cast<size_t>(dst.cols) * sizeof(T);
  const bool vector = row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(src.data) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(dst.data) % 16 == 0;
  const int threads = 256;
  if (vector) {
    launch_chained(copy_rows_kernel<T, true>, static_cast<unsigned>(dst.rows), threads, 0, stream, src.as<const T>(),
                   src.rows, dst.cols, index, dst.as<T>(), next_grid_point());
  } else {
    launch_chained(copy_rows_kernel<T, false>, static_cast<unsigned>(dst.rows), threads, 0, stream, src.as<const T>(),
                   src.rows, dst.cols, index, dst.as<T>(), next_grid_point());
  }
  QWENRT_CUDA_LAUNCHED(op, shape_string(src) + " -> " + shape_string(dst));
}

template <typename T>
__global__ void silu_mul_kernel(const T* __restrict__ gate, const T* __restrict__ up,
                                T* __restrict__ out, int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    const float g = gpu::to_f32(gate[i]);
    const float silu = g / (1.f + expf(-g));
    out[i] = gpu::from_f32<T>(silu * gpu::to_f32(up[i]));
  }
}

// 16-byte variant: each thread handles Vec16<T>::kCount consecutive elements.
template <typename T>
__global__ void silu_mul_vec_kernel(const Vec16<T>* __restrict__ gate,
                                    const Vec16<T>* __restrict__ up, Vec16<T>* __restrict__ out,
                                    int64_t vec_count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < vec_count;
       i += stride) {
    const Vec16<T> g = gate[i];
    const Vec16<T> u = up[i];
    Vec16<T> r;
#pragma unroll
    for (int j = 0; j < Vec16<T>::kCount; ++j) {
      const float gf = gpu::to_f32(g.v[j]);
      r.v[j] = gpu::from_f32<T>(gf / (1.f + expf(-gf)) * gpu::to_f32(u.v[j]));
    }
    out[i] = r;
  }
}

// x[r, c] += bias[c]; the one rounding happens on the store.
template <typename T>
__global__ void add_bias_kernel(T* __restrict__ x, const T* __restrict__ bias, int64_t rows,
                                int64_t cols) {
  const int64_t count = rows * cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride)
    x[i] = gpu::from_f32<T>(gpu::to_f32(x[i]) + gpu::to_f32(bias[i % cols]));
}

}  // namespace

std::string shape_string(const Tensor& t) {
  return std::string("[") + std::to_string(t.rows) + ", " + std::to_string(t.cols) + "] " +
         dtype_name(t.dtype);
}

void launch_embed(const BatchView& batch, const Tensor& table, Tensor out, Stream stream) {
  QWENRT_CHECK(out.rows == batch.n_tokens && out.cols == table.cols && out.dtype == table.dtype,
               "embed: out " + shape_string(out) + " does not match table " +
                   shape_string(table) + " for " + std::to_string(batch.n_tokens) + " tokens");
  dispatch_half(table.dtype, "embed", [&](auto tag) {
    using T = decltype(tag);
    copy_rows<T>(table, batch.token_ids, out, stream, "embed");
  });
}

void launch_gather_rows(const Tensor& x, const int32_t* rows, Tensor out, Stream stream) {
  QWENRT_CHECK(out.cols == x.cols && out.dtype == x.dtype,
               "gather_rows: out " + shape_string(out) + " does not match x " + shape_string(x));
  if (x.dtype == DType::kF32) {
    copy_rows<float>(x, rows, out, stream, "gather_rows");
    return;
  }
  dispatch_half(x.dtype, "gather_rows", [&](auto tag) {
    using T = decltype(tag);
    copy_rows<T>(x, rows, out, stream, "gather_rows");
  });
}

void launch_silu_mul(const Tensor& gate, const Tensor& up, Tensor out, Stream stream) {
  QWENRT_CHECK(gate.rows == up.rows && gate.cols == up.cols && out.rows == gate.rows &&
                   out.cols == gate.cols && gate.dtype == up.dtype && out.dtype == gate.dtype,
               "silu_mul: gate " + shape_string(gate) + ", up " + shape_string(up) + ", out " +
                   shape_string(out));
  const int64_t count = gate.numel();
  if (count == 0) return;
  dispatch_half(gate.dtype, "silu_mul", [&](auto tag) {
    using T = decltype(tag);
    constexpr int kPer = Vec16<T>::kCount;
    const bool vector = count % kPer == 0 && reinterpret_cast<uintptr_t>(gate.data) % 16 == 0 &&
                        reinterpret_cast<uintptr_t>(up.data) % 16 == 0 &&
                        reinterpret_cast<uintptr_t>(out.data) % 16 == 0;
    const int threads = 256;
    if (vector) {
      const int64_t vec_count = count / kPer;
      const unsigned blocks = std::min<unsigned>(ceil_div(vec_count, threads), 65535u);
      silu_mul_vec_kernel<T><<<blocks, threads, 0, stream>>>(
          static_cast<const Vec16<T>*>(gate.data), static_cast<const Vec16<T>*>(up.data),
          static_cast<Vec16<T>*>(out.data), vec_count);
    } else {
      const unsigned blocks = std::min<unsigned>(ceil_div(count, threads), 65535u);
      silu_mul_kernel<T><<<blocks, threads, 0, stream>>>(gate.as<const T>(), up.as<const T>(),
                                                         out.as<T>(), count);
    }
  });
  QWENRT_CUDA_LAUNCHED("silu_mul", shape_string(gate));
}

void launch_add_bias(Tensor x, const Tensor& bias, Stream stream) {
  QWENRT_CHECK(bias.numel() == x.cols && bias.dtype == x.dtype,
               "add_bias: x " + shape_string(x) + ", bias " + shape_string(bias));
  if (x.numel() == 0) return;
  dispatch_half(x.dtype, "add_bias", [&](auto tag) {
    using T = decltype(tag);
    const int threads = 256;
    const unsigned blocks = std::min<unsigned>(ceil_div(x.numel(), threads), 65535u);
    add_bias_kernel<T><<<blocks, threads, 0, stream>>>(x.as<T>(), bias.as<const T>(), x.rows, x.cols);
  });
  QWENRT_CUDA_LAUNCHED("add_bias", shape_string(x));
}

}  // namespace qwenrt::cuda
