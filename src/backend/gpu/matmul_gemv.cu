// Skinny matrix products for decode: out[n, m] = x[n, k] · w[m, k]ᵀ with n ≤ kMaxGemvRows.
// A decode step reads every weight once, so the bound is memory bandwidth on w; the
// general GEMM libraries pick split-K + reduce kernels for one row and reach about a third
// of it on the smaller projections. Work split: one block of kThreads per kFeatures rows
// of w (output features); its threads stride over k in 16-byte vectors (kUnroll vectors
// of each feature in flight per thread), keep fp32 sums for every (x row, feature), and
// reduce them across the block. w is read with streaming loads (used once per step); x is
// small and read through the cache by every block. Two variants add an epilogue that needs
// nothing from other blocks: SiLU·up for the MLP input, and the attention-input epilogue
// (bias, RoPE, KV-cache write) for q|k|v.
#include "backend/gpu/common.h"
#include "backend/gpu/rope.h"

namespace qwenrt::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / gpu::kWarpSize;
constexpr int kUnroll = 4;
// Vectors of each feature a thread asks for before its wait (of its first pass's kUnroll):
// half keeps the four-feature one-row kernel at 64 registers (8 blocks a multiprocessor);
// all of them took it to 84–92 (docs/PERFORMANCE.md).
constexpr int kEarly = kUnroll / 2;


template <typename T>
__device__ __forceinline__ void accumulate(float& acc, const int4& a, const int4& b) {
  const T* av = reinterpret_cast<const T*>(&a);
  const T* bv = reinterpret_cast<const T*>(&b);
#pragma unroll
  for (int c = 0; c < 8; ++c) acc += gpu::to_f32(av[c]) * gpu::to_f32(bv[c]);
}

// A pass's weights: vectors at + u·kThreads of every feature's row, for u in [kFrom, kTo).
template <int kFrom, int kTo, int kFeatures>
__device__ __forceinline__ void load_pass(const int4* __restrict__ w4, const int64_t (&w_row)[kFeatures], int at,
                                          int4 (&wv)[kUnroll][kFeatures]) {
#pragma unroll
  for (int u = kFrom; u < kTo; ++u)
#pragma unroll
    for (int f = 0; f < kFeatures; ++f) wv[u][f] = gpu::load_streaming(w4 + w_row[f] + at + u * kThreads);
}

// Adds a pass's dot products: the x rows' vectors at + u·kThreads against its weights.
template <typename T, int kRows, int kFeatures>
__device__ __forceinline__ void add_pass(const int4* __restrict__ x4, int vectors, int n_rows, int at,
                                         const int4 (&wv)[kUnroll][kFeatures], float (&acc)[kRows][kFeatures]) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r < n_rows) {  // uniform; no break, so the loop unrolls on every compiler
        const int4 xv = x4[static_cast<int64_t>(r) * vectors + at + u * kThreads];
#pragma unroll
        for (int f = 0; f < kFeatures; ++f) accumulate<T>(acc[r][f], wv[u][f], xv);
      }
    }
  }
}

// The block's dot products x[r] · w[w_row[f]] for its rows and features: each warp's sums
// land in partial[warp][r][f] (block_sum adds them up once the barrier at the end is passed).
// Asks for its first weights, then waits for the kernel before (wait_for_prior_grid); lets
// the next one start where `next` says.
template <typename T, int kRows, int kFeatures>
__device__ __forceinline__ void block_dots(const T* __restrict__ x, const T* __restrict__ w,
                                           const int64_t (&w_row)[kFeatures], int n_rows, int vectors,
                                           float (&partial)[kWarps][kRows][kFeatures], gpu::NextGrid next) {
  const int4* x4 = reinterpret_cast<const int4*>(x);
  const int4* w4 = reinterpret_cast<const int4*>(w);
  float acc[kRows][kFeatures];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int f = 0; f < kFeatures; ++f) acc[r][f] = 0.f;

  // A chained launch may start while the kernel before it, which writes x, still runs: part
  // of the first pass's weights (no kernel writes them) is asked for before the wait, so its
  // round trip overlaps that kernel's end; x is read after it. (The first pass is peeled so
  // that the loop below keeps its register use.)
  int v = threadIdx.x;
  const int last_full = vectors - (kUnroll - 1) * kThreads;  // a full pass starts below it
  if (v < last_full) {
    int4 wv[kUnroll][kFeatures];
    load_pass<0, kEarly>(w4, w_row, v, wv);
    gpu::wait_for_prior_grid(next);
    load_pass<kEarly, kUnroll>(w4, w_row, v, wv);
    add_pass<T>(x4, vectors, n_rows, v, wv, acc);
    v += kUnroll * kThreads;
  } else {
    gpu::wait_for_prior_grid(next);
  }
  for (; v < last_full; v += kUnroll * kThreads) {
    int4 wv[kUnroll][kFeatures];
    load_pass<0, kUnroll>(w4, w_row, v, wv);
    add_pass<T>(x4, vectors, n_rows, v, wv, acc);
  }
  for (; v < vectors; v += kThreads) {
    int4 wv[kFeatures];
#pragma unroll
    for (int f = 0; f < kFeatures; ++f) wv[f] = gpu::load_streaming(w4 + w_row[f] + v);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r < n_rows) {
        const int4 xv = x4[static_cast<int64_t>(r) * vectors + v];
#pragma unroll
        for (int f = 0; f < kFeatures; ++f) accumulate<T>(acc[r][f], wv[f], xv);
      }
    }
  }

  gpu::allow_next_grid_after_stream(next);
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
}

template <int kRows, int kFeatures>
__device__ __forceinline__ float block_sum(const float (&partial)[kWarps][kRows][kFeatures], int r, int f) {
  float sum = 0.f;
#pragma unroll
  for (int wi = 0; wi < kWarps; ++wi) sum += partial[wi][r][f];
  return sum;
}

// kGated: w is [gate; up] with m rows each; the block computes output features
// feature0 + j (j < kFeatures / 2) from gate row feature0 + j and up row m + feature0 + j as
// silu(gate·x) * (up·x) (the MLP input, one launch).
template <typename T, typename Out, int kRows, int kFeatures, bool kGated = false>
__global__ void __launch_bounds__(kThreads)
    gemv_kernel(const T* __restrict__ x, const T* __restrict__ w, Out* __restrict__ out, int n_rows,
                int k, int m, gpu::NextGrid next) {
  static_assert(!kGated || kFeatures % 2 == 0, "a gated block pairs gate and up rows");
  constexpr int kOutputs = kGated ? kFeatures / 2 : kFeatures;
  __shared__ float partial[kWarps][kRows][kFeatures];
  gpu::allow_next_grid(next);
  const int feature0 = blockIdx.x * kOutputs;
  const int vectors = k / 8;  // 16-byte vectors per row
  // Rows of w past m are clamped to the last one (their sums are dropped at the end).
  int64_t w_row[kFeatures];
#pragma unroll
  for (int f = 0; f < kFeatures; ++f) {
    const int j = f % kOutputs;
    w_row[f] = static_cast<int64_t>((f < kOutputs ? 0 : m) + min(feature0 + j, m - 1)) * vectors;
  }
  block_dots<T, kRows, kFeatures>(x, w, w_row, n_rows, vectors, partial, next);

  if constexpr (kGated) {
    if (threadIdx.x < kRows * kOutputs) {
      const int r = threadIdx.x / kOutputs;
      const int j = threadIdx.x % kOutputs;
      if (r < n_rows && feature0 + j < m) {
        const float gate = block_sum(partial, r, j);
        const float up = block_sum(partial, r, kOutputs + j);
        out[static_cast<int64_t>(r) * m + feature0 + j] = gpu::from_f32<Out>(gate / (1.f + __expf(-gate)) * up);
      }
    }
    return;
  }
  if (threadIdx.x < kRows * kFeatures) {
    const int r = threadIdx.x / kFeatures;
    const int f = threadIdx.x % kFeatures;
    if (r < n_rows && feature0 + f < m) {
      out[static_cast<int64_t>(r) * m + feature0 + f] = gpu::from_f32<Out>(block_sum(partial, r, f));
    }
  }
}

struct QkvRopeArgs {
  const int32_t* positions;
  const int32_t* slot_mapping;
  const int32_t* token_seq;
  const int32_t* rope_rows;  // [n_seqs] row of inv_freq per sequence; null: row 0
  const float* inv_freq;     // [rows, head_dim / 2]
  float rope_scaling;
  int logn_length;
  int n_heads;
  int n_kv_heads;
  int head_dim;
  int64_t q_width;  // q_out's row stride
};

// q|k|v with the attention-input epilogue folded in (models without per-head q/k norms):
// block b computes the RoPE pair (i, i + d/2) of job b / (d/2) (q heads, then k heads, then
// v heads), so its epilogue needs nothing from other blocks. Each sum is rounded to the
// storage type before the bias is added in fp32, as the product and rope_kv.cu's epilogue
// do one after the other; q goes to q_out, k and v into the cache at slot_mapping.
template <typename T, int kRows>
__global__ void __launch_bounds__(kThreads)
    gemv_qkv_rope_kernel(const T* __restrict__ x, const T* __restrict__ w, int n_rows, int k, QkvRopeArgs args,
                         const T* __restrict__ q_bias, const T* __restrict__ k_bias, const T* __restrict__ v_bias,
                         T* __restrict__ q_out, T* __restrict__ k_cache, T* __restrict__ v_cache,
                         gpu::NextGrid next) {
  __shared__ float partial[kWarps][kRows][2];
  gpu::allow_next_grid(next);
  const int d = args.head_dim;
  const int half = d / 2;
  const int job = blockIdx.x / half;
  const int i = blockIdx.x % half;
  const int vectors = k / 8;
  const int64_t f0 = static_cast<int64_t>(job) * d + i;
  const int64_t w_row[2] = {f0 * vectors, (f0 + half) * vectors};
  block_dots<T, kRows, 2>(x, w, w_row, n_rows, vectors, partial, next);
  if (static_cast<int>(threadIdx.x) >= n_rows) return;  // n_rows ≤ kRows ≤ kThreads

  const int r = threadIdx.x;  // the row is the batch's token r
  const int kind = job < args.n_heads ? 0 : job < args.n_heads + args.n_kv_heads ? 1 : 2;
  const int head = kind == 0 ? job : kind == 1 ? job - args.n_heads : job - args.n_heads - args.n_kv_heads;
  const T* bias = kind == 0 ? q_bias : kind == 1 ? k_bias : v_bias;
  float lo = gpu::to_f32(gpu::from_f32<T>(block_sum(partial, r, 0)));
  float hi = gpu::to_f32(gpu::from_f32<T>(block_sum(partial, r, 1)));
  if (bias != nullptr) {
    lo += gpu::to_f32(bias[head * d + i]);
    hi += gpu::to_f32(bias[head * d + i + half]);
  }
  if (kind != 2) {
    const int position = args.positions[r];
    const float* inv_freq = args.inv_freq + (args.rope_rows != nullptr ? args.rope_rows[args.token_seq[r]] : 0) * half;
    rope_pair(lo, hi, position, inv_freq[i], args.rope_scaling,
              kind == 0 ? logn_factor(args.logn_length, position) : 1.f);
  }
  T* dst;
  if (kind == 0) {
    dst = q_out + r * args.q_width + head * d;
  } else {
    const int64_t slot = args.slot_mapping[r];
    if (slot < 0) return;
    dst = (kind == 1 ? k_cache : v_cache) + (slot * args.n_kv_heads + head) * d;
  }
  dst[i] = gpu::from_f32<T>(lo);
  dst[i + half] = gpu::from_f32<T>(hi);
}

// Blocks of kKernel (kThreads each) the device holds at once; asked once, of the device
// current at the first launch (a process drives one device).
template <auto kKernel>
int resident_blocks() {
  static const int blocks = [] {
    int device = 0, multiprocessors = 0, per_multiprocessor = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, kKernel, kThreads, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return multiprocessors * per_multiprocessor;
  }();
  return blocks;
}

template <typename T, typename Out, int kRows>
void launch_rows(const Tensor& x, const Tensor& w, Tensor out, Stream stream) {
  const int m = static_cast<int>(w.rows);
  const int k = static_cast<int>(w.cols);
  const gpu::NextGrid next = next_grid_point_for_product(w.bytes());
  // Two features per block keep more weight bytes in flight per x vector; narrow outputs
  // (k/v projections) take one so that enough blocks fill the chip. One row takes four
  // where its blocks fit in one wave (the 7B's o and down: 896 blocks, 8 a multiprocessor)
  // or make many (lm_head), not where a second wave would be a short tail (the 32B's 1,280
  // blocks). Op bench, one row, cold weights: o 9.35 → 8.93 µs, down 35.3 → 33.7.
  if constexpr (kRows == 1) {
    constexpr int kWide = 4;
    constexpr auto wide = gemv_kernel<T, Out, kRows, kWide>;
    const int blocks = static_cast<int>(ceil_div(m, kWide));
    const int wave = resident_blocks<wide>();
    if (m >= 2048 && wave > 0 && (blocks <= wave || blocks >= 8 * wave)) {
      launch_chained(wide, blocks, kThreads, 0, stream, x.as<const T>(), w.as<const T>(), out.as<Out>(),
                     static_cast<int>(x.rows), k, m, next);
      return;
    }
  }
  if (m >= 2048) {
    constexpr int kFeatures = 2;
    launch_chained(gemv_kernel<T, Out, kRows, kFeatures>, ceil_div(m, kFeatures), kThreads, 0, stream,
                   x.as<const T>(), w.as<const T>(), out.as<Out>(), static_cast<int>(x.rows), k, m, next);
  } else {
    launch_chained(gemv_kernel<T, Out, kRows, 1>, static_cast<unsigned>(m), kThreads, 0, stream, x.as<const T>(),
                   w.as<const T>(), out.as<Out>(), static_cast<int>(x.rows), k, m, next);
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
  const gpu::NextGrid next = next_grid_point_for_product(gate_up.bytes());
  // Two outputs (two gate and two up rows) a block: 0.5B 1,423 → 1,482 tok/s, the 7B
  // within its spread (262.2 / 263.9 → 262.4 / 262.8).
  launch_chained(gemv_kernel<T, T, 1, 4, true>, ceil_div(m, 2), kThreads, 0, stream, x.as<const T>(),
                 gate_up.as<const T>(), out.as<T>(), 1, k, m, next);
}

bool gemv_applies(const Tensor& x, const Tensor& w) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  // x is re-read by every block from the cache: keep it small enough to stay there.
  return x.rows >= 1 && x.rows <= kMaxGemvRows && w.cols % 8 == 0 && aligned(x.data) && aligned(w.data) &&
         w.rows < (int64_t{1} << 31) && static_cast<size_t>(x.bytes()) <= (size_t{64} << 10);
}

}  // namespace

bool launch_gemv_silu_mul(const Tensor& x, const Tensor& gate_up, Tensor out, Stream stream) {
  if (x.rows != 1 || !gemv_applies(x, gate_up) || out.rows != x.rows || gate_up.rows != 2 * out.cols ||
      gate_up.cols != x.cols || out.dtype != x.dtype || gate_up.dtype != x.dtype) {
    return false;
  }
  if (x.rows == 0 || out.cols == 0) return true;
  dispatch_half(x.dtype, "matmul_silu_mul", [&](auto tag) { launch_gated<decltype(tag)>(x, gate_up, out, stream); });
  QWENRT_CUDA_LAUNCHED("matmul_silu_mul (gemv)", matmul_sizes(x, gate_up, out));
  return true;
}

bool launch_gemv_qkv_rope_kvwrite(const Tensor& x, const Tensor& qkv, const BatchView& batch,
                                  const AttentionParams& attn, const QkvEpilogue& epilogue, Tensor q_out,
                                  const KvGeometry& geometry, KvLayer cache, Stream stream) {
  const int d = attn.head_dim;
  const int jobs = attn.n_heads + 2 * attn.n_kv_heads;
  const DType t = x.dtype;
  const auto matches = [t](const Tensor& b) { return b.data == nullptr || b.dtype == t; };
  if (!gemv_applies(x, qkv) || (x.rows > 1 && small_matmul_applies(x, qkv)) || epilogue.q_norm.data != nullptr ||
      epilogue.k_norm.data != nullptr || epilogue.inv_freq == nullptr || d <= 0 || d % 2 != 0 ||
      x.rows != batch.n_tokens ||
      qkv.rows != static_cast<int64_t>(jobs) * d || qkv.cols != x.cols || qkv.dtype != t ||
      q_out.rows != x.rows || q_out.cols != static_cast<int64_t>(attn.n_heads) * d || q_out.dtype != t ||
      geometry.dtype != t || geometry.n_kv_heads != attn.n_kv_heads || geometry.head_dim != d ||
      !matches(epilogue.q_bias) || !matches(epilogue.k_bias) || !matches(epilogue.v_bias)) {
    return false;
  }
  if (x.rows == 0) return true;
  const QkvRopeArgs args{batch.positions,      batch.slot_mapping, batch.token_seq,  batch.rope_rows,
                         epilogue.inv_freq,    epilogue.rope_scaling, epilogue.logn_length, attn.n_heads,
                         attn.n_kv_heads,      d,                  q_out.cols};
  const unsigned blocks = static_cast<unsigned>(jobs) * static_cast<unsigned>(d / 2);
  const int rows = static_cast<int>(x.rows);
  const int k = static_cast<int>(x.cols);
  dispatch_half(t, "matmul_qkv_rope_kvwrite", [&](auto tag) {
    using T = decltype(tag);
    const auto launch = [&](auto kernel) {
      launch_chained(kernel, blocks, kThreads, 0, stream, x.as<const T>(), qkv.as<const T>(), rows, k, args,
                     static_cast<const T*>(epilogue.q_bias.data), static_cast<const T*>(epilogue.k_bias.data),
                     static_cast<const T*>(epilogue.v_bias.data), q_out.as<T>(), static_cast<T*>(cache.k),
                     static_cast<T*>(cache.v), next_grid_point_for_product(qkv.bytes()));
    };
    if (rows == 1) {
      launch(gemv_qkv_rope_kernel<T, 1>);
    } else {
      launch(gemv_qkv_rope_kernel<T, kMaxGemvRows>);
    }
  });
  QWENRT_CUDA_LAUNCHED("matmul_qkv_rope_kvwrite (gemv)", matmul_sizes(x, qkv, q_out));
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
