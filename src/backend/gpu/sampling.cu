// Token sampling on the device, the CPU sampler's semantics (engine/sampler.cpp):
// penalties → greedy argmax, or temperature → top_k → softmax → top_p → min_p → draw.
// Work split: one block per row. Every filter keeps a prefix of the candidates sorted by
// (logit descending, index ascending), so instead of sorting the vocabulary each cut is a
// radix select over the 64-bit key (order-preserving bits of the logit, index) that finds the
// first candidate where a running count or probability mass crosses a target, 8 key
// bits per pass with per-warp shared-memory histograms. Bound: ~7 passes over the fp32
// row (L2-resident) per cut. The argmax (all a greedy draw needs, and the softmax's max)
// comes from a first kernel spread over the whole device. With top_k <= kCompactMax (the usual
// configurations) the kept candidates are sorted in shared memory and finished in the CPU
// sampler's exact double arithmetic. They are found without the count select where they
// can be: that first kernel also counts each row's logits in 4,096
// buckets of their key's top 12 bits; the row's block then gathers every logit in the
// buckets up to the one where the count reaches top_k (a superset of the top_k, ordered by
// the sort), and falls back to the count select when that is more than kGatherMax.
// Draws with no top_k (every id a candidate) take the mass path: a second device-wide kernel
// sums each bucket's probability as fixed-point integers (exact in any order), the row's block
// finds from those sums the buckets where top_p's cut, min_p's cut and the draw fall, and
// gathers and sorts only those (a bucket of more than kGatherMax split by 10 more key bits
// first); the select passes remain for what that cannot place.
// Non-finite logits raise a flag. Each row's parameters and random key come either from one
// set for every row (sample) or from a per-row array in device memory (sample_rows).
#include <algorithm>
#include <cfloat>

#include "backend/gpu/common.h"
#include "core/random_bits.h"

namespace qwenrt::cuda {
namespace {

constexpr int kSampleThreads = 1024;
constexpr int kSampleWarps = kSampleThreads / gpu::kWarpSize;
constexpr int kBuckets = 256;
constexpr int kCacheSlots = 4;
constexpr int kCompactMax = 1024;  // top_k up to this takes the exact sorted path
constexpr int kHistBits = 12;      // key bits the device-wide histogram counts by
constexpr int kHistBuckets = 1 << kHistBits;
constexpr int kHistSlice = 4096;   // logits per histogram block
constexpr int kHistThreads = 256;
constexpr int kGatherMax = 2048;   // candidates the histogram path sorts at most
constexpr int kScoreSliceTop = 32;  // score_rows' top k up to this in slices (score_slices_kernel)
// A histogram row: the buckets, then the row's argmax as one 64-bit key (see key_max), then
// the complement of the smallest key min_p refuses (0: none).
constexpr int kHistRowInts = kHistBuckets + 4;
static_assert(kHistBuckets % 2 == 0 && kHistRowInts % 2 == 0, "the row's keys are 8-byte aligned");
// The mass path (full-vocabulary draws: no top_k): probabilities as fixed-point integers, so
// sums are exact and the same in any order. exp((x − x_max)/T) ≤ 1 is scaled by 2^kMassBits;
// a vocabulary of up to 2^(63 − kMassBits) ids cannot overflow 64 bits.
constexpr int kMassBits = 43;
constexpr int kMassMaxVocab = 1 << (63 - kMassBits);
constexpr int kSubBits = 10;  // key bits below a bucket's that a crowded bucket is split by
constexpr int kSubBuckets = 1 << kSubBits;
static_assert(kSubBuckets == kSampleThreads && kGatherMax == 2 * kSampleThreads,
              "a sub-bucket a thread, two gathered keys a thread");
static_assert(kSubBuckets * (sizeof(uint64_t) + sizeof(int)) <= sizeof(float) * kSampleWarps * kBuckets,
              "the sub-buckets reuse the histogram memory");
static_assert(kHistBuckets == 4 * kSampleThreads, "the bucket scan gives each thread four buckets");
static_assert(kCompactMax * sizeof(double) <= sizeof(float) * kSampleWarps * kBuckets,
              "the probabilities reuse the histogram memory");
static_assert(kGatherMax * sizeof(uint64_t) <= sizeof(float) * kSampleWarps * kBuckets,
              "the gathered keys reuse the histogram memory");
static_assert(sizeof(double) == sizeof(uint64_t), "probabilities and keys share slots");

// Maps a float to 32 bits whose ascending order is the float's descending order.
__device__ __forceinline__ uint32_t descending_bits(float value) {
  if (value == 0.f) value = 0.f;  // -0 and +0 are a tie, ordered by index like any other
  const uint32_t u = __float_as_uint(value);
  const uint32_t ascending = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return ~ascending;
}

// The parameters and random key of `row`: its own entry of `rows`, or else the shared
// `uniform` set with the key (step, row).
__device__ __forceinline__ SampleRow row_key(const SampleRow* rows, const SamplingParams& uniform,
                                             uint64_t step, int row) {
  if (rows != nullptr) return rows[row];
  SampleRow key;
  key.params = uniform;
  key.position = step;
  key.stream = static_cast<uint64_t>(row);
  return key;
}

struct RowView {
  const float* x;
  int vocab;
  float temperature;
  float x_max;       // max logit
  float min_p;       // 0: off
  uint64_t limit;    // candidates have key <= limit
};

struct Candidate {
  uint64_t key;
  float mass;  // exp((x - x_max) / temperature): probability up to the normalisation
  bool kept;
};

// Ordered by the logit itself (temperature > 0 keeps the order; dividing first could
// merge distinct logits into ties).
__device__ __forceinline__ uint64_t candidate_key(float x, int i) {
  return (static_cast<uint64_t>(descending_bits(x)) << 32) | static_cast<uint32_t>(i);
}

// The logit a key was made from (-0 comes back as +0, the same value).
__device__ __forceinline__ float key_logit(uint64_t key) {
  const uint32_t ascending = ~static_cast<uint32_t>(key >> 32);
  const uint32_t bits = (ascending & 0x80000000u) ? (ascending & 0x7fffffffu) : ~ascending;
  return __uint_as_float(bits);
}

// The histogram bucket of a logit: its key's top bits (ascending bucket = descending logit).
__device__ __forceinline__ int hist_bucket(float x) {
  return static_cast<int>(descending_bits(x) >> (32 - kHistBits));
}

// Whether a row's draw can take the histogram path (the same test in both kernels).
__device__ __forceinline__ bool histogram_path(const SamplingParams& params, int vocab) {
  return params.temperature > 0.f && params.top_k > 0 && params.top_k < vocab && params.top_k <= kCompactMax;
}

// Whether a row's draw takes the mass path: every id a candidate (no top_k), so the device-wide
// kernels sum each bucket's probability and the row's block resolves only the buckets where
// its cuts and its draw fall (the same test in every kernel).
__host__ __device__ __forceinline__ bool mass_path(const SamplingParams& params, int vocab) {
  return params.temperature > 0.f && (params.top_k <= 0 || params.top_k >= vocab) && vocab <= kMassMaxVocab;
}

// A candidate's probability up to the normalisation in the CPU sampler's double arithmetic
// (exp(x·(1/T) − x_max·(1/T)), as finish_sorted), in fixed point: scaled by a power of two
// (exact), what is below 2^-kMassBits dropped. Float here would put a flat distribution's
// draws a rounding away from the CPU's (each of 150k candidates holds ~1e-5 of the mass).
__device__ __forceinline__ double candidate_mass(float x, float x_max, float temperature) {
  const double inv_temperature = 1.0 / static_cast<double>(temperature);
  const double top = __dmul_rn(static_cast<double>(x_max), inv_temperature);
  return exp(__dsub_rn(__dmul_rn(static_cast<double>(x), inv_temperature), top));
}
__device__ __forceinline__ unsigned long long to_fixed(double mass) {
  return static_cast<unsigned long long>(mass * static_cast<double>(1ull << kMassBits));
}
__device__ __forceinline__ unsigned long long fixed_mass(float x, float x_max, float temperature) {
  return to_fixed(candidate_mass(x, x_max, temperature));
}

__device__ __forceinline__ Candidate candidate(const RowView& row, int i, bool need_mass = true) {
  const float x = row.x[i];
  Candidate c;
  c.key = candidate_key(x, i);
  c.mass = need_mass ? expf((x - row.x_max) / row.temperature) : 0.f;
  c.kept = c.key <= row.limit && (row.min_p <= 0.f || c.mass >= row.min_p);
  return c;
}

struct SelectSmem {
  float hist[kSampleWarps][kBuckets];
  uint64_t prefix;
  int found;
};

// Finds the first kept candidate (in key order) at which the running total of
// `by_mass ? mass : 1` reaches `target` (>= when !strict, > when strict). Returns false
// when no candidate does. Must be called by the whole block.
__device__ bool select_crossing(const RowView& row, bool by_mass, bool strict, float target,
                                int index_bits, SelectSmem& sm, uint64_t* key_out) {
  const int warp = threadIdx.x / gpu::kWarpSize;
  const int lane = threadIdx.x % gpu::kWarpSize;
  uint64_t prefix = 0;
  uint64_t mask = 0;
  float before = 0.f;  // meaningful in thread 0 only
  __syncthreads();      // every thread has read the previous call's sm.found / sm.prefix
  if (threadIdx.x == 0) sm.found = 1;
  const int index_passes = (index_bits + 7) / 8;
  const int n_passes = 4 + index_passes;
  for (int pass = 0; pass < n_passes; ++pass) {
    const int shift = pass < 4 ? 56 - 8 * pass : 8 * (index_passes - 1 - (pass - 4));
    for (int b = threadIdx.x; b < kSampleWarps * kBuckets; b += blockDim.x)
      (&sm.hist[0][0])[b] = 0.f;
    __syncthreads();
    // Shared-memory float atomics are compare-and-swap loops, so lanes hitting one bucket
    // serialise: counts are combined per warp first (match + popcount), masses in a
    // 4-entry per-thread cache of (bucket, partial sum) flushed on eviction.
    int cached_bucket[kCacheSlots];
    float cached_mass[kCacheSlots];
#pragma unroll
    for (int j = 0; j < kCacheSlots; ++j) {
      cached_bucket[j] = -1;
      cached_mass[j] = 0.f;
    }
    int victim = 0;
    for (int base = 0; base < row.vocab; base += blockDim.x) {  // uniform trip count
      const int i = base + threadIdx.x;
      int bucket = -1;
      float mass = 0.f;
      if (i < row.vocab) {
        const Candidate c = candidate(row, i, by_mass || row.min_p > 0.f);
        if (c.kept && (c.key & mask) == prefix) {
          bucket = static_cast<int>((c.key >> shift) & 0xff);
          mass = c.mass;
        }
      }
      if (!by_mass) {
        // bucket is in [-1, 255]: its low nine bits tell the values apart.
        const gpu::LaneMask peers = gpu::match_any<9>(bucket);
        if (bucket >= 0 && lane == gpu::lowest_lane(peers))
          atomicAdd(&sm.hist[warp][bucket], static_cast<float>(gpu::lane_count(peers)));
        continue;
      }
      if (bucket < 0) continue;
      bool hit = false;
#pragma unroll
      for (int j = 0; j < kCacheSlots; ++j) {
        if (cached_bucket[j] == bucket) {
          cached_mass[j] += mass;
          hit = true;
        }
      }
      if (!hit) {
#pragma unroll
        for (int j = 0; j < kCacheSlots; ++j) {
          if (j == victim) {
            if (cached_bucket[j] >= 0) atomicAdd(&sm.hist[warp][cached_bucket[j]], cached_mass[j]);
            cached_bucket[j] = bucket;
            cached_mass[j] = mass;
          }
        }
        victim = (victim + 1) % kCacheSlots;
      }
    }
#pragma unroll
    for (int j = 0; j < kCacheSlots; ++j)
      if (cached_bucket[j] >= 0) atomicAdd(&sm.hist[warp][cached_bucket[j]], cached_mass[j]);
    __syncthreads();
    for (int b = threadIdx.x; b < kBuckets; b += blockDim.x) {
      float total = 0.f;
      for (int w = 0; w < kSampleWarps; ++w) total += sm.hist[w][b];
      sm.hist[0][b] = total;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int chosen = -1;
      int last_nonempty = -1;
      float before_last = before;
      for (int b = 0; b < kBuckets; ++b) {
        const float w = sm.hist[0][b];
        if (w <= 0.f) continue;
        const float cum = before + w;
        if (strict ? cum > target : cum >= target) {
          chosen = b;
          break;
        }
        last_nonempty = b;
        before_last = before;
        before = cum;
      }
      if (chosen < 0 && pass > 0 && last_nonempty >= 0) {
        // The coarser pass said the crossing is in this bucket; rounding of the finer
        // sums missed it: it is at the bucket's last candidate.
        chosen = last_nonempty;
        before = before_last;
      }
      if (chosen < 0) sm.found = 0;
      sm.prefix = prefix | (static_cast<uint64_t>(chosen < 0 ? 0 : chosen) << shift);
    }
    __syncthreads();
    if (!sm.found) return false;
    prefix = sm.prefix;
    mask |= static_cast<uint64_t>(0xff) << shift;
  }
  *key_out = prefix;
  return true;
}

// Penalties on a copy of the row: repetition (divide positive / multiply negative) once per
// distinct history token; presence and frequency once per distinct generated token (past the
// history's first params.prompt_tokens) with its count. A token's counter holds its generated
// count, and a high bit where the prompt has it.
__global__ void penalty_kernel(const float* __restrict__ logits, float* __restrict__ penalised,
                               int32_t* __restrict__ counts, int vocab,
                               const int32_t* __restrict__ history,
                               const int32_t* __restrict__ history_lens, int history_stride,
                               const SampleRow* __restrict__ rows, SamplingParams uniform) {
  const int row = blockIdx.x;
  const SamplingParams params = row_key(rows, uniform, 0, row).params;
  const float* src = logits + static_cast<int64_t>(row) * vocab;
  float* dst = penalised + static_cast<int64_t>(row) * vocab;
  int32_t* row_counts = counts + static_cast<int64_t>(row) * vocab;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) dst[i] = src[i];
  const bool has_penalties = params.repetition_penalty != 1.f || params.presence_penalty != 0.f ||
                            params.frequency_penalty != 0.f;
  if (history == nullptr || history_lens == nullptr || !has_penalties) return;
  const int n = history_lens[row];
  const int32_t* hist = history + static_cast<int64_t>(row) * history_stride;
  constexpr int32_t kInPrompt = 0x40000000;  // above any generated count (a context < 2^30)
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int t = hist[i];
    if (t < 0 || t >= vocab) continue;
    if (i >= params.prompt_tokens) {
      atomicAdd(&row_counts[t], 1);
    } else {
      atomicOr(&row_counts[t], kInPrompt);
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int t = hist[i];
    if (t < 0 || t >= vocab) continue;
    // The first thread to take the count applies the penalty; counts return to zero.
    const int word = atomicExch(&row_counts[t], 0);
    if (word == 0) continue;
    const int c = word & (kInPrompt - 1);
    // Explicit roundings (no fused multiply-add), as the host computes it.
    float v = dst[t];
    if (params.repetition_penalty != 1.f)
      v = v > 0.f ? __fdiv_rn(v, params.repetition_penalty) : __fmul_rn(v, params.repetition_penalty);
    if (c > 0) {
      v = __fsub_rn(v, __fadd_rn(params.presence_penalty,
                                 __fmul_rn(params.frequency_penalty, static_cast<float>(c))));
    }
    dst[t] = v;
  }
}

// Sorts keys[0, n) ascending (logit descending, index ascending) in shared memory; n is a
// power of two, slots past the candidates hold ~0. Called by the whole block.
__device__ void sort_keys(uint64_t* keys, int n) {
  for (int k = 2; k <= n; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int partner = i ^ j;
        if (partner > i) {
          const uint64_t a = keys[i], b = keys[partner];
          if ((a > b) == ((i & k) == 0)) {
            keys[i] = b;
            keys[partner] = a;
          }
        }
      }
      __syncthreads();
    }
  }
}

// The draw from `keep` sorted candidates (keys[0] the row's largest logit), in the CPU
// sampler's arithmetic: probabilities exp(l·(1/T) − top) in double, normalised, top_p and
// min_p cuts, renormalised, first cumulative > u. `probs` holds `keep` doubles of shared
// memory. Called by the whole block; thread 0 writes out_ids[row].
__device__ void finish_sorted(const uint64_t* keys, int keep, const SamplingParams& params, uint64_t position,
                              uint64_t stream, int row, double* probs, int32_t* out_ids) {
  const double inv_temperature = 1.0 / static_cast<double>(params.temperature);
  const double top = __dmul_rn(static_cast<double>(key_logit(keys[0])), inv_temperature);
  for (int i = threadIdx.x; i < keep; i += blockDim.x)
    probs[i] = exp(__dsub_rn(__dmul_rn(static_cast<double>(key_logit(keys[i])), inv_temperature), top));
  __syncthreads();
  if (threadIdx.x != 0) return;
  double sum = 0;
  for (int i = 0; i < keep; ++i) sum += probs[i];
  for (int i = 0; i < keep; ++i) probs[i] /= sum;
  if (params.top_p < 1.f) {
    double cumulative = 0;
    for (int i = 0; i < keep; ++i) {
      cumulative += probs[i];
      if (cumulative >= params.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (params.min_p > 0.f) {
    const double threshold = __dmul_rn(static_cast<double>(params.min_p), probs[0]);
    int cut = 1;
    while (cut < keep && probs[cut] >= threshold) ++cut;
    keep = cut;
  }
  double kept_sum = 0;
  for (int i = 0; i < keep; ++i) kept_sum += probs[i];
  const double u = unit_float(sample_bits(params.seed, position, stream));
  int pick = keep - 1;
  double cumulative = 0;
  for (int i = 0; i < keep; ++i) {
    cumulative += probs[i] / kept_sum;
    if (cumulative > u) {
      pick = i;
      break;
    }
  }
  out_ids[row] = static_cast<int32_t>(keys[pick] & 0xffffffffu);
}

// The ≤ kCompactMax kept candidates of a top_k draw (key <= view.limit), gathered, sorted
// in shared memory and finished exactly.
// `keys` is the block's kCompactMax slots of shared memory.
__device__ void sample_compact(const RowView& view, int keep, const SamplingParams& params,
                               uint64_t position, uint64_t stream, int row, SelectSmem& sm,
                               uint64_t* keys, int32_t* out_ids) {
  __shared__ int count;
  if (threadIdx.x == 0) count = 0;
  for (int i = threadIdx.x; i < kCompactMax; i += blockDim.x) keys[i] = ~0ull;
  __syncthreads();
  for (int i = threadIdx.x; i < view.vocab; i += blockDim.x) {
    const uint64_t key = candidate_key(view.x[i], i);
    if (key <= view.limit) {
      const int slot = atomicAdd(&count, 1);
      if (slot < kCompactMax) keys[slot] = key;
    }
  }
  __syncthreads();
  sort_keys(keys, kCompactMax);
  keep = min(keep, count);
  // The selection histograms are done with: their memory holds the probabilities.
  finish_sorted(keys, keep, params, position, stream, row, reinterpret_cast<double*>(&sm.hist[0][0]), out_ids);
}

// A row's argmax as one integer maximum: the complement of the smallest candidate key
// (largest logit, lowest index on ties; never 0, so 0 means no finite logit).
__device__ __forceinline__ unsigned long long key_max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }

// The block-wide key_max of every thread's `best`, to every thread; warp_s holds a key a
// warp. It begins with a barrier, so warp_s may still be being read from a call before.
__device__ __forceinline__ unsigned long long block_key_max(unsigned long long best, unsigned long long* warp_s) {
#pragma unroll
  for (int offset = gpu::kWarpSize / 2; offset > 0; offset /= 2) best = key_max(best, gpu::shfl_xor(best, offset));
  const int lane = threadIdx.x % gpu::kWarpSize;
  const int warp = threadIdx.x / gpu::kWarpSize;
  const int warps = (blockDim.x + gpu::kWarpSize - 1) / gpu::kWarpSize;
  __syncthreads();
  if (lane == 0) warp_s[warp] = best;
  __syncthreads();
  best = 0;
  for (int w = 0; w < warps; ++w) best = key_max(best, warp_s[w]);
  return best;
}

// Calls f(value, index) for each logit of x[begin, end) the calling thread takes (the block
// shares them out). Where x + begin is 16-byte aligned the thread takes four neighbours
// with one vector load a step, the steps unrolled so that their loads are in flight
// together: a pass over a row by one block was bound by the latency of one load at a time.
template <typename F>
__device__ __forceinline__ void for_slice(const float* __restrict__ x, int begin, int end, F&& f) {
  int scalar_from = begin;
  if (reinterpret_cast<uintptr_t>(x + begin) % sizeof(float4) == 0) {
    const int quads = (end - begin) / 4;
    const float4* __restrict__ x4 = reinterpret_cast<const float4*>(x + begin);
#pragma unroll 4
    for (int j = threadIdx.x; j < quads; j += blockDim.x) {
      const float4 v = x4[j];
      const int i = begin + 4 * j;
      f(v.x, i);
      f(v.y, i + 1);
      f(v.z, i + 2);
      f(v.w, i + 3);
    }
    scalar_from = begin + 4 * quads;
  }
  for (int i = scalar_from + threadIdx.x; i < end; i += blockDim.x) f(x[i], i);
}

struct SliceArgmax {
  unsigned long long key;  // key_max key of the slice's argmax (0: no finite logit); thread 0 only
  bool bad;                // a logit of the slice is not finite; every thread
};

// The argmax key and non-finite flag of logits x[begin, end), one slice of a row, for the
// kernels that spread a row over several blocks and merge the slices' keys with atomicMax.
// Called by the whole block; the barrier that publishes the warps' keys also combines the
// flag, so a caller needs no second one. `also(value, index)` is called for each logit on
// the way (the same pass counts a histogram).
template <typename F>
__device__ __forceinline__ SliceArgmax slice_argmax(const float* x, int begin, int end, F&& also) {
  __shared__ unsigned long long best_s[kHistThreads / gpu::kWarpSize];
  unsigned long long best = 0;
  bool bad = false;
  for_slice(x, begin, end, [&](float v, int i) {
    if (isfinite(v)) {
      best = key_max(best, ~candidate_key(v, i));
    } else {
      bad = true;
    }
    also(v, i);
  });
#pragma unroll
  for (int offset = gpu::kWarpSize / 2; offset > 0; offset /= 2) best = key_max(best, gpu::shfl_xor(best, offset));
  const int lane = threadIdx.x % gpu::kWarpSize;
  const int warp = threadIdx.x / gpu::kWarpSize;
  const int warps = (blockDim.x + gpu::kWarpSize - 1) / gpu::kWarpSize;
  if (lane == 0) best_s[warp] = best;
  bad = __syncthreads_or(bad);
  if (threadIdx.x == 0)
    for (int w = 1; w < warps; ++w) best = key_max(best, best_s[w]);
  return SliceArgmax{best, bad};
}
__device__ __forceinline__ SliceArgmax slice_argmax(const float* x, int begin, int end) {
  return slice_argmax(x, begin, end, [](float, int) {});
}

// Counts each row's logits per histogram bucket (rows that take the histogram path only).
// Grid: (slices of kHistSlice logits, rows); hist [rows, kHistRowInts], zero on entry. Also
// leaves each row's argmax key after its buckets and flags a non-finite logit in status.
__global__ void __launch_bounds__(kHistThreads)
    key_histogram_kernel(const float* __restrict__ logits, int vocab, const SampleRow* __restrict__ rows,
                         SamplingParams uniform, int32_t* __restrict__ hist, int32_t* __restrict__ status) {
  __shared__ int local[kHistBuckets];
  const int row = blockIdx.y;
  const float* x = logits + static_cast<int64_t>(row) * vocab;
  const int begin = blockIdx.x * kHistSlice;
  const int end = min(vocab, begin + kHistSlice);
  int32_t* out = hist + static_cast<int64_t>(row) * kHistRowInts;
  const SamplingParams params = row_key(rows, uniform, 0, row).params;
  const bool counts = histogram_path(params, vocab) || mass_path(params, vocab);  // uniform over the block
  if (counts) {
    for (int b = threadIdx.x; b < kHistBuckets; b += blockDim.x) local[b] = 0;
    __syncthreads();
  }
  // Every row: the slice's argmax and the non-finite check, merged into the row's key; in
  // the same pass, the bucket counts of the rows that use them (the barrier that ends
  // slice_argmax ends the counting too).
  const SliceArgmax slice = counts ? slice_argmax(x, begin, end, [&](float v, int) { atomicAdd(&local[hist_bucket(v)], 1); })
                                   : slice_argmax(x, begin, end);
  if (threadIdx.x == 0) {
    if (slice.bad) atomicCAS(status, 0, row + 1);
    atomicMax(reinterpret_cast<unsigned long long*>(out + kHistBuckets), slice.key);
  }
  if (!counts) return;
  for (int b = threadIdx.x; b < kHistBuckets; b += blockDim.x)
    if (local[b] != 0) atomicAdd(&out[b], local[b]);
}

// The probability mass of each bucket of the mass path's rows (after key_histogram_kernel,
// which left each row's argmax): grid (slices of kHistSlice logits, rows). Adds the slice's
// fixed-point masses to masses [rows, kHistBuckets] (zero between draws: the sample kernel
// clears what it reads), and with min_p the complement of the smallest key it refuses to
// the histogram row.
__global__ void __launch_bounds__(kHistThreads)
    mass_histogram_kernel(const float* __restrict__ logits, int vocab, const SampleRow* __restrict__ rows,
                          SamplingParams uniform, int32_t* __restrict__ hist,
                          unsigned long long* __restrict__ masses) {
  __shared__ unsigned long long local[kHistBuckets];
  __shared__ unsigned long long warp_s[kHistThreads / gpu::kWarpSize];
  const int row = blockIdx.y;
  const SamplingParams params = row_key(rows, uniform, 0, row).params;
  if (!mass_path(params, vocab)) return;  // uniform over the block
  int32_t* row_hist = hist + static_cast<int64_t>(row) * kHistRowInts;
  const uint64_t inverted = *reinterpret_cast<const uint64_t*>(row_hist + kHistBuckets);
  if (inverted == 0) return;  // no finite logit: flagged, and the draw is an error
  const float* x = logits + static_cast<int64_t>(row) * vocab;
  const float x_max = x[static_cast<uint32_t>(~inverted)];
  for (int b = threadIdx.x; b < kHistBuckets; b += blockDim.x) local[b] = 0;
  __syncthreads();
  const int begin = blockIdx.x * kHistSlice;
  const int end = min(vocab, begin + kHistSlice);
  unsigned long long refused = 0;  // complement of the smallest key min_p refuses
  for_slice(x, begin, end, [&](float v, int i) {
    if (!isfinite(v)) return;
    const double p = candidate_mass(v, x_max, params.temperature);
    const unsigned long long m = to_fixed(p);
    if (m != 0) atomicAdd(&local[hist_bucket(v)], m);
    if (params.min_p > 0.f && p < static_cast<double>(params.min_p))
      refused = key_max(refused, ~candidate_key(v, i));
  });
  if (params.min_p > 0.f) {
    refused = block_key_max(refused, warp_s);
    if (threadIdx.x == 0 && refused != 0)
      atomicMax(reinterpret_cast<unsigned long long*>(row_hist + kHistBuckets + 2), refused);
  }
  __syncthreads();
  unsigned long long* out = masses + static_cast<int64_t>(row) * kHistBuckets;
  for (int b = threadIdx.x; b < kHistBuckets; b += blockDim.x)
    if (local[b] != 0) atomicAdd(&out[b], local[b]);
}

// The histogram path of a top_k draw: the bucket where the row's count reaches top_k, every
// logit in it and the buckets before gathered, sorted, the first top_k finished exactly.
// False (the caller takes the count select) when they are more than kGatherMax. Called by
// the whole block of kSampleThreads; `spare` is the block's kCompactMax slots of shared
// memory (the probabilities).
__device__ bool sample_from_histogram(const RowView& view, const SamplingParams& params, uint64_t position,
                                      uint64_t stream, int row, const int32_t* row_hist, SelectSmem& sm,
                                      uint64_t* spare, int32_t* out_ids) {
  __shared__ int warp_total_s[kSampleWarps];
  __shared__ int crossing_s;
  __shared__ int through_s;  // logits in the buckets up to and including the crossing one
  __shared__ int gathered_s;
  const int lane = threadIdx.x % gpu::kWarpSize;
  const int warp = threadIdx.x / gpu::kWarpSize;
  const int top_k = params.top_k;
  // Each thread's four buckets, their sum, and an inclusive scan of the sums.
  int counts[4];
  int local = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    counts[j] = row_hist[threadIdx.x * 4 + j];
    local += counts[j];
  }
  int inclusive = local;
#pragma unroll
  for (int offset = 1; offset < gpu::kWarpSize; offset *= 2) {
    const int other = gpu::shfl(inclusive, lane >= offset ? lane - offset : lane);
    if (lane >= offset) inclusive += other;
  }
  if (lane == gpu::kWarpSize - 1) warp_total_s[warp] = inclusive;
  if (threadIdx.x == 0) {
    crossing_s = -1;
    gathered_s = 0;
  }
  __syncthreads();
  int warps_before = 0;
  for (int w = 0; w < warp; ++w) warps_before += warp_total_s[w];
  int before = warps_before + inclusive - local;
  if (before < top_k && before + local >= top_k) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (before < top_k && before + counts[j] >= top_k) {
        crossing_s = threadIdx.x * 4 + j;
        through_s = before + counts[j];
      }
      before += counts[j];
    }
  }
  __syncthreads();
  if (crossing_s < 0 || through_s > kGatherMax) return false;  // uniform over the block
  const int crossing = crossing_s;
  const int through = through_s;
  int n_sort = 2;
  while (n_sort < through) n_sort *= 2;
  // The histograms of the count select are not used on this path: their memory holds the
  // gathered keys.
  uint64_t* keys = reinterpret_cast<uint64_t*>(&sm.hist[0][0]);
  double* probs = reinterpret_cast<double*>(spare);
  for (int i = threadIdx.x; i < n_sort; i += blockDim.x) keys[i] = ~0ull;
  __syncthreads();
  for_slice(view.x, 0, view.vocab, [&](float x, int i) {
    if (hist_bucket(x) <= crossing) {
      const int slot = atomicAdd(&gathered_s, 1);
      if (slot < kGatherMax) keys[slot] = candidate_key(x, i);
    }
  });
  __syncthreads();
  sort_keys(keys, n_sort);
  finish_sorted(keys, min(top_k, through), params, position, stream, row, probs, out_ids);
  return true;
}

// The sum of `value` over the threads before this one (block of kSampleThreads), and the
// block's total in *total. warp_s: kSampleWarps slots; it begins with a barrier, so they may
// still be being read from a call before.
__device__ unsigned long long block_exclusive_sum(unsigned long long value, unsigned long long* warp_s,
                                                  unsigned long long* total) {
  const int lane = threadIdx.x % gpu::kWarpSize;
  const int warp = threadIdx.x / gpu::kWarpSize;
  unsigned long long inclusive = value;
#pragma unroll
  for (int offset = 1; offset < gpu::kWarpSize; offset *= 2) {
    const unsigned long long other = gpu::shfl(inclusive, lane >= offset ? lane - offset : lane);
    if (lane >= offset) inclusive += other;
  }
  __syncthreads();
  if (lane == gpu::kWarpSize - 1) warp_s[warp] = inclusive;
  __syncthreads();
  unsigned long long before = 0, sum = 0;
  for (int w = 0; w < kSampleWarps; ++w) {
    const unsigned long long s = warp_s[w];
    if (w < warp) before += s;
    sum += s;
  }
  *total = sum;
  return before + inclusive - value;
}

// Where a running sum crosses a target, found by the one thread that holds the entry.
struct Crossing {
  unsigned long long key;     // the entry: a bucket, a sub-bucket or a candidate key
  unsigned long long before;  // the running sum before it (a candidate: through it)
  int found;
};

// The candidates of one (sub-)bucket of the mass path, in key order, and the running mass
// through them from `start` (the mass of every candidate before them): the first candidate at
// which it reaches `target` (0: none), else the last kept; kept means key < `refused` (the
// smallest key min_p refuses; ~0: none). Gathers the row's candidates whose descending bits
// shifted right by `shift` equal `prefix` (at most kGatherMax: the caller checked the count).
// Returns the candidate's key and the running mass through it (none kept: key ~0, start).
// Called by the whole block; `keys` is kGatherMax slots of shared memory.
__device__ Crossing walk_bucket(const RowView& view, uint32_t prefix, int shift, unsigned long long start,
                                unsigned long long target, unsigned long long refused, uint64_t* keys,
                                unsigned long long* warp_s) {
  __shared__ int count_s;
  __shared__ Crossing result_s;
  if (threadIdx.x == 0) {
    count_s = 0;
    result_s = Crossing{~0ull, start, 0};
  }
  for (int i = threadIdx.x; i < kGatherMax; i += blockDim.x) keys[i] = ~0ull;
  __syncthreads();
  for_slice(view.x, 0, view.vocab, [&](float x, int i) {
    if ((descending_bits(x) >> shift) == prefix) {
      const int slot = atomicAdd(&count_s, 1);
      if (slot < kGatherMax) keys[slot] = candidate_key(x, i);
    }
  });
  __syncthreads();
  int n_sort = 2;
  while (n_sort < count_s && n_sort < kGatherMax) n_sort *= 2;
  sort_keys(keys, n_sort);
  // Two candidates a thread: their masses (0 past the kept ones), then the running sums.
  const int first = 2 * threadIdx.x;
  uint64_t key[2];
  unsigned long long mass[2];
  bool kept[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    key[j] = keys[first + j];
    kept[j] = key[j] < refused && key[j] != ~0ull;
    mass[j] = kept[j] ? fixed_mass(key_logit(key[j]), view.x_max, view.temperature) : 0;
  }
  const bool next_kept = first + 2 < kGatherMax && keys[first + 2] < refused && keys[first + 2] != ~0ull;
  unsigned long long total = 0;
  unsigned long long cum = start + block_exclusive_sum(mass[0] + mass[1], warp_s, &total);
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const unsigned long long through = cum + mass[j];
    if (kept[j] && target != 0 && cum < target && through >= target) {
      result_s = Crossing{key[j], through, 1};
    }
    cum = through;
  }
  __syncthreads();
  if (result_s.found == 0) {
    // No crossing: the last kept candidate (kept ones are a prefix of the sorted keys).
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const bool last = kept[j] && !(j == 0 ? kept[1] : next_kept);
      if (last) result_s = Crossing{key[j], start + total, 0};
    }
  }
  __syncthreads();
  const Crossing result = result_s;
  __syncthreads();  // result_s and keys are free for the next call
  return result;
}

// The candidate of the mass path where the running mass (from `start` before the bucket)
// reaches `target` (0: none, the last kept; kept: key < `refused`) in bucket `bucket` of
// `count` candidates. A bucket of more than kGatherMax is split by the next kSubBits key bits
// first (one more pass over the row); found == -1 if the sub-bucket is still too crowded.
__device__ Crossing resolve_bucket(const RowView& view, int bucket, int count, unsigned long long start,
                                   unsigned long long target, unsigned long long refused, SelectSmem& sm,
                                   unsigned long long* warp_s) {
  uint64_t* keys = reinterpret_cast<uint64_t*>(&sm.hist[0][0]);
  constexpr int kBucketShift = 32 - kHistBits;
  if (count <= kGatherMax) return walk_bucket(view, static_cast<uint32_t>(bucket), kBucketShift, start, target, refused, keys, warp_s);
  // The sub-buckets' kept masses and counts.
  constexpr int kSubShift = kBucketShift - kSubBits;
  auto* sub_mass = reinterpret_cast<unsigned long long*>(&sm.hist[0][0]);
  auto* sub_count = reinterpret_cast<int*>(sub_mass + kSubBuckets);
  __shared__ Crossing sub_s;
  for (int b = threadIdx.x; b < kSubBuckets; b += blockDim.x) {
    sub_mass[b] = 0;
    sub_count[b] = 0;
  }
  if (threadIdx.x == 0) sub_s = Crossing{~0ull, 0, 0};
  __syncthreads();
  for_slice(view.x, 0, view.vocab, [&](float x, int i) {
    const uint32_t bits = descending_bits(x);
    if (static_cast<int>(bits >> kBucketShift) != bucket) return;
    const int sub = static_cast<int>((bits >> kSubShift) & (kSubBuckets - 1));
    atomicAdd(&sub_count[sub], 1);
    if (candidate_key(x, i) < refused) atomicAdd(&sub_mass[sub], fixed_mass(x, view.x_max, view.temperature));
  });
  __syncthreads();
  // The sub-bucket where the target is reached, or the one that holds the refused key,
  // whichever comes first (sub-bucket order is key order); one a thread.
  const int mine = threadIdx.x;
  const unsigned long long m = sub_mass[mine];
  const int c = sub_count[mine];
  unsigned long long total = 0;
  const unsigned long long cum = start + block_exclusive_sum(m, warp_s, &total);
  const auto refused_bits = static_cast<uint32_t>(refused >> 32);
  const bool refused_here = refused != ~0ull && static_cast<int>(refused_bits >> kBucketShift) == bucket &&
                            static_cast<int>((refused_bits >> kSubShift) & (kSubBuckets - 1)) == mine;
  const bool crosses = target != 0 && cum < target && cum + m >= target;
  const int chosen = crosses || refused_here ? mine : kSubBuckets;
  if (chosen < kSubBuckets) atomicMin(&sub_s.key, static_cast<unsigned long long>(chosen));
  __syncthreads();
  if (chosen < kSubBuckets && static_cast<unsigned long long>(chosen) == sub_s.key) {
    sub_s.before = cum;
    sub_s.found = c;
  }
  __syncthreads();
  const Crossing sub = sub_s;
  __syncthreads();
  if (sub.key == ~0ull) return Crossing{~0ull, start + total, 0};  // not asked for: everything kept here
  if (sub.found > kGatherMax) return Crossing{0, 0, -1};
  const uint32_t prefix = (static_cast<uint32_t>(bucket) << kSubBits) | static_cast<uint32_t>(sub.key);
  return walk_bucket(view, prefix, kSubShift, sub.before, target, refused, keys, warp_s);
}

// The mass path of a draw with no top_k: the device-wide kernels left each bucket's count
// (row_hist) and fixed-point probability mass (row_mass, cleared here); the exact running sums
// of those find the buckets where top_p's cut, min_p's cut and the draw fall, and only those
// buckets' candidates are gathered and sorted. Same rule as the select passes: kept is the
// prefix up to the first candidate whose running mass reaches top_p of the total, and before
// min_p's first refusal; the draw is the first kept candidate whose running mass exceeds u of
// the kept mass. False (the caller takes the select passes) when a bucket is too crowded.
__device__ __noinline__ bool sample_from_masses(const RowView& view, const SamplingParams& params, uint64_t position,
                                   uint64_t stream, int row, const int32_t* row_hist,
                                   unsigned long long* row_mass, SelectSmem& sm, int32_t* out_ids) {
  __shared__ unsigned long long warp_s[kSampleWarps];
  __shared__ Crossing bucket_s;
  const int first = 4 * threadIdx.x;
  unsigned long long mass[4];
  int count[4];
  unsigned long long local = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    mass[j] = row_mass[first + j];
    row_mass[first + j] = 0;
    count[j] = row_hist[first + j];
    local += mass[j];
  }
  unsigned long long total = 0;
  const unsigned long long before = block_exclusive_sum(local, warp_s, &total);
  if (total == 0) return false;  // no finite logit (flagged)
  // The bucket where the running mass reaches `target` (1 <= target <= total), or bucket
  // `at` (target 0), with the mass before it and its count.
  auto find_bucket = [&](unsigned long long target, int at) {
    __syncthreads();
    unsigned long long cum = before;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (target != 0 ? (cum < target && cum + mass[j] >= target) : first + j == at)
        bucket_s = Crossing{static_cast<unsigned long long>(first + j), cum, count[j]};
      cum += mass[j];
    }
    __syncthreads();
    return bucket_s;
  };
  const unsigned long long refused_inv = *reinterpret_cast<const unsigned long long*>(row_hist + kHistBuckets + 2);
  const unsigned long long refused = params.min_p > 0.f && refused_inv != 0 ? ~refused_inv : ~0ull;
  const int refused_bucket = refused != ~0ull ? static_cast<int>(refused >> (64 - kHistBits)) : kHistBuckets;
  // The kept mass: through top_p's cut or up to min_p's, whichever bucket comes first.
  unsigned long long kept = total;
  unsigned long long top_p_target = 0;
  Crossing cut{0, 0, 0};
  bool has_cut = false;
  if (params.top_p < 1.f) {
    const double t = ceil(static_cast<double>(params.top_p) * static_cast<double>(total));
    top_p_target = t < 1.0 ? 1ull : (t >= static_cast<double>(total) ? total : static_cast<unsigned long long>(t));
    cut = find_bucket(top_p_target, 0);
    has_cut = true;
  }
  if (refused_bucket < kHistBuckets && (!has_cut || static_cast<int>(cut.key) >= refused_bucket)) {
    if (has_cut && static_cast<int>(cut.key) > refused_bucket) top_p_target = 0;  // min_p cuts first
    cut = find_bucket(0, refused_bucket);
    has_cut = true;
  }
  if (has_cut) {
    const Crossing c = resolve_bucket(view, static_cast<int>(cut.key), cut.found, cut.before, top_p_target, refused, sm, warp_s);
    if (c.found < 0) return false;
    kept = c.before;
  }
  // The draw: the first kept candidate whose running mass exceeds u · kept.
  const double u = unit_float(sample_bits(params.seed, position, stream));
  const double t = floor(u * static_cast<double>(kept)) + 1.0;
  const unsigned long long draw_target = t >= static_cast<double>(kept) ? kept : static_cast<unsigned long long>(t);
  const Crossing at = find_bucket(draw_target, 0);
  const Crossing c = resolve_bucket(view, static_cast<int>(at.key), at.found, at.before, draw_target, refused, sm, warp_s);
  if (c.found < 0 || c.key == ~0ull) return false;
  if (threadIdx.x == 0) out_ids[row] = static_cast<int32_t>(c.key & 0xffffffffu);
  return true;
}

__global__ void __launch_bounds__(kSampleThreads)
    sample_kernel(const float* __restrict__ logits, int vocab, const SampleRow* __restrict__ rows,
                  SamplingParams uniform, uint64_t step, const int32_t* __restrict__ hist,
                  unsigned long long* __restrict__ masses, int32_t* __restrict__ out_ids,
                  int32_t* __restrict__ status) {
  __shared__ SelectSmem sm;
  __shared__ uint64_t spare[kCompactMax];  // sorted candidates, or the histogram path's probabilities
  __shared__ float best_value_s[kSampleWarps];
  __shared__ int best_index_s[kSampleWarps];
  __shared__ float sum_s[kSampleWarps];
  const int row = blockIdx.x;
  const SampleRow key_of_row = row_key(rows, uniform, step, row);
  const SamplingParams& params = key_of_row.params;
  const float* x = logits + static_cast<int64_t>(row) * vocab;
  const int lane = threadIdx.x % gpu::kWarpSize;
  const int warp = threadIdx.x / gpu::kWarpSize;

  // Pass 1: argmax (lowest index on ties) and the non-finite check, unless the histogram
  // kernel did both over the whole device.
  float best = -FLT_MAX;
  int best_index = INT_MAX;
  if (hist != nullptr) {
    const uint64_t inverted =
        *reinterpret_cast<const uint64_t*>(hist + static_cast<int64_t>(row) * kHistRowInts + kHistBuckets);
    if (inverted != 0) {
      best_index = static_cast<int>(static_cast<uint32_t>(~inverted));
      best = x[best_index];
    }
  } else {
    bool bad = false;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float v = x[i];
      if (!isfinite(v)) bad = true;
      if (v > best) {  // i ascends per thread: ties keep the lower index
        best = v;
        best_index = i;
      }
    }
    if (bad) atomicCAS(status, 0, row + 1);
#pragma unroll
    for (int offset = gpu::kWarpSize / 2; offset > 0; offset /= 2) {
      const float other = gpu::shfl_xor(best, offset);
      const int other_index = gpu::shfl_xor(best_index, offset);
      if (other > best || (other == best && other_index < best_index)) {
        best = other;
        best_index = other_index;
      }
    }
    if (lane == 0) {
      best_value_s[warp] = best;
      best_index_s[warp] = best_index;
    }
    __syncthreads();
    best = best_value_s[0];
    best_index = best_index_s[0];
    for (int w = 1; w < kSampleWarps; ++w) {
      if (best_value_s[w] > best || (best_value_s[w] == best && best_index_s[w] < best_index)) {
        best = best_value_s[w];
        best_index = best_index_s[w];
      }
    }
  }
  if (best_index == INT_MAX) best_index = 0;  // all -FLT_MAX or NaN: flagged above
  if (params.temperature <= 0.f) {
    if (threadIdx.x == 0) out_ids[row] = best_index;
    return;
  }

  int index_bits = 1;
  while ((1 << index_bits) < vocab) ++index_bits;
  RowView view{x, vocab, params.temperature, best, 0.f, ~0ull};
  uint64_t key = 0;

  if (hist != nullptr && masses != nullptr && mass_path(params, vocab) &&
      sample_from_masses(view, params, key_of_row.position, key_of_row.stream, row,
                         hist + static_cast<int64_t>(row) * kHistRowInts,
                         masses + static_cast<int64_t>(row) * kHistBuckets, sm, out_ids)) {
    return;
  }
  if (hist != nullptr && histogram_path(params, vocab) &&
      sample_from_histogram(view, params, key_of_row.position, key_of_row.stream, row,
                            hist + static_cast<int64_t>(row) * kHistRowInts, sm, spare, out_ids)) {
    return;
  }
  // top_k: the k-th candidate bounds the kept prefix.
  if (params.top_k > 0 && params.top_k < vocab) {
    if (select_crossing(view, false, false, static_cast<float>(params.top_k), index_bits, sm, &key))
      view.limit = key;
  }
  if (params.top_k > 0 && min(params.top_k, vocab) <= kCompactMax) {
    // Few candidates: gather them, sort them, and finish exactly as the CPU sampler does
    // (double precision, same summation order), so same-seed draws are identical.
    sample_compact(view, min(params.top_k, vocab), params, key_of_row.position, key_of_row.stream,
                   row, sm, spare, out_ids);
    return;
  }
  // top_p: smallest prefix whose probability (over the top_k prefix) reaches top_p.
  if (params.top_p < 1.f) {
    float mass = 0.f;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
      const Candidate c = candidate(view, i);
      if (c.kept) mass += c.mass;
    }
    mass = gpu::block_sum(mass, sum_s);
    if (select_crossing(view, true, false, params.top_p * mass, index_bits, sm, &key))
      view.limit = min(view.limit, key);
  }
  // min_p: p >= min_p · p_max  ⇔  mass >= min_p.
  view.min_p = params.min_p;

  // The draw: first kept candidate whose running mass exceeds u · (kept mass).
  float kept_mass = 0.f;
  float kept_count = 0.f;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    const Candidate c = candidate(view, i);
    if (c.kept) {
      kept_mass += c.mass;
      kept_count += 1.f;
    }
  }
  kept_mass = gpu::block_sum(kept_mass, sum_s);
  kept_count = gpu::block_sum(kept_count, sum_s);
  const float u = unit_float(sample_bits(params.seed, key_of_row.position, key_of_row.stream));
  if (!select_crossing(view, true, true, u * kept_mass, index_bits, sm, &key)) {
    // None exceeded u (rounding): the last kept candidate.
    if (!select_crossing(view, false, false, kept_count, index_bits, sm, &key))
      key = static_cast<uint64_t>(best_index);
  }
  if (threadIdx.x == 0) out_ids[row] = static_cast<int32_t>(key & 0xffffffffu);
}

// Greedy draws in one launch (no memset, no second kernel, no read-back copy): grid
// (slices of kHistSlice logits, rows); each block merges its slice's argmax key and
// non-finite flag into the row's scratch entry, and the grid's last block to arrive (a
// counter) writes every row's id to out_ids and to the host record (status word, then the
// ids), leaving the scratch and the counter zero for the next draw.
__global__ void __launch_bounds__(kHistThreads)
    greedy_draw_kernel(const float* __restrict__ logits, int vocab, int rows, GreedyScratch* __restrict__ scratch,
                       int32_t* __restrict__ out_ids, int32_t* __restrict__ record, gpu::NextGrid next) {
  __shared__ bool last_s;
  __shared__ int first_bad_s;
  gpu::follow_prior_grid(next);  // the logits are the kernel before's
  const int row = blockIdx.y;
  const float* x = logits + static_cast<int64_t>(row) * vocab;
  const int begin = static_cast<int>(blockIdx.x) * kHistSlice;
  const SliceArgmax slice = slice_argmax(x, begin, min(vocab, begin + kHistSlice));
  if (threadIdx.x == 0) {
    GreedyScratch& mine = scratch[row];
    atomicMax(&mine.key, slice.key);
    if (slice.bad) atomicOr(&mine.bad, 1u);
    __threadfence();
    const unsigned int blocks = gridDim.x * gridDim.y;
    last_s = atomicAdd(&scratch[rows].bad, 1u) == blocks - 1;  // the entry past the rows counts arrivals
    first_bad_s = INT_MAX;
  }
  __syncthreads();
  if (!last_s) return;
  __threadfence();
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    const unsigned long long key = atomicExch(&scratch[r].key, 0ull);
    const unsigned int row_bad = atomicExch(&scratch[r].bad, 0u);
    const int32_t id = key != 0 ? static_cast<int32_t>(static_cast<uint32_t>(~key)) : 0;  // no finite logit: 0
    out_ids[r] = id;
    record[1 + r] = id;
    if (row_bad != 0) atomicMin(&first_bad_s, r);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    record[0] = first_bad_s == INT_MAX ? 0 : first_bad_s + 1;
    scratch[rows].bad = 0;
    __threadfence_system();
  }
}


// A score_rows row with a logit that is not finite: NaN log-probabilities (the host reports
// the row) and ids -1.
__device__ __forceinline__ void unscorable_row(float* lp, int32_t* id, int k) {
  for (int r = 0; r <= k; ++r) {
    lp[r] = __int_as_float(0x7fc00000);
    id[r] = -1;
  }
}

// Backend::score_rows, one block of kHistThreads a row: the argmax and the non-finite check
// (slice_argmax), the log of the softmax's sum, the target's log-probability, then the top
// k by rounds: each the smallest candidate key above the last (largest logit first, lowest
// id on ties, as the host's order).
__global__ void score_rows_kernel(const float* __restrict__ logits, int vocab, const int32_t* __restrict__ targets,
                                  const int32_t* __restrict__ target_rows, int k, float* __restrict__ logprobs,
                                  int32_t* __restrict__ ids) {
  __shared__ float scratch[kHistThreads / gpu::kWarpSize];
  __shared__ unsigned long long keys_s[kHistThreads / gpu::kWarpSize];
  __shared__ unsigned long long best_s;
  __shared__ bool bad_s;
  const int row = blockIdx.x;
  const float* x = logits + static_cast<int64_t>(row) * vocab;
  float* lp = logprobs + static_cast<int64_t>(row) * (k + 1);
  int32_t* id = ids + static_cast<int64_t>(row) * (k + 1);
  const SliceArgmax first = slice_argmax(x, 0, vocab);
  if (threadIdx.x == 0) {
    best_s = first.key;
    bad_s = first.bad || first.key == 0;
  }
  __syncthreads();
  if (bad_s) {
    if (threadIdx.x == 0) unscorable_row(lp, id, k);
    return;
  }
  uint64_t last = ~best_s;  // the argmax's own key
  const float top = key_logit(last);
  float sum = 0.f;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) sum += expf(x[i] - top);
  const float log_sum = top + logf(gpu::block_sum(sum, scratch));
  if (threadIdx.x == 0) {
    id[0] = static_cast<int32_t>(last & 0xffffffffu);
    lp[0] = x[targets[target_rows != nullptr ? target_rows[row] : row]] - log_sum;
    if (k > 0) lp[1] = top - log_sum;
    if (k > 0) id[1] = id[0];
  }
  for (int r = 1; r < k; ++r) {
    unsigned long long best = 0;  // the complement of the smallest key above `last`
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
      const uint64_t key = candidate_key(x[i], i);
      if (key > last) best = key_max(best, ~key);
    }
    best = block_key_max(best, keys_s);
    if (best == 0) {  // fewer ids than k
      if (threadIdx.x == 0) {
        for (int q = r; q < k; ++q) {
          id[q + 1] = -1;
          lp[q + 1] = -INFINITY;
        }
      }
      return;
    }
    last = ~best;
    if (threadIdx.x == 0) {
      id[r + 1] = static_cast<int32_t>(last & 0xffffffffu);
      lp[r + 1] = key_logit(last) - log_sum;
    }
  }
}

// Backend::score_rows for top_k <= kScoreSliceTop in two kernels, so that a few rows spread
// over many blocks (a row's rounds in one block were bound by its loads' latency: ≈ 0.1 ms
// a round). First, a block per slice of kHistSlice logits: the slice's keys in shared
// memory, its max and sum of exp(x - max), and its smallest max(top_k, 1) keys by rounds
// over shared memory. Then a block per row merges the slices: the log of the softmax's sum
// and the top k from the slices' keys (a row's top k are among them).
struct ScoreSlice {
  float max;  // the slice's largest logit
  float sum;  // sum of exp(x - max) over the slice
  int bad;    // a logit of the slice is not finite
};

__device__ __forceinline__ int score_slice_keys(int k) { return k > 1 ? k : 1; }

__global__ void __launch_bounds__(kHistThreads)
    score_slices_kernel(const float* __restrict__ logits, int vocab, int k, ScoreSlice* __restrict__ slices,
                        uint64_t* __restrict__ keys) {
  __shared__ uint64_t keys_s[kHistSlice];
  __shared__ unsigned long long warp_s[kHistThreads / gpu::kWarpSize];
  __shared__ float scratch[kHistThreads / gpu::kWarpSize];
  const int row = blockIdx.y;
  const int n_slices = gridDim.x;
  const float* x = logits + static_cast<int64_t>(row) * vocab;
  const int begin = blockIdx.x * kHistSlice;
  const int count = min(vocab, begin + kHistSlice) - begin;
  const int n_keys = score_slice_keys(k);
  ScoreSlice* out = slices + static_cast<int64_t>(row) * n_slices + blockIdx.x;
  uint64_t* out_keys = keys + (static_cast<int64_t>(row) * n_slices + blockIdx.x) * n_keys;
  bool bad = false;
  for (int j = threadIdx.x; j < count; j += blockDim.x) {
    const float v = x[begin + j];
    bad = bad || !isfinite(v);
    keys_s[j] = candidate_key(v, begin + j);
  }
  if (__syncthreads_or(bad)) {
    if (threadIdx.x == 0) out->bad = 1;
    return;
  }
  // Round r: the smallest key above the last (a finite logit's key is never 0); its
  // complement is reduced with key_max, 0 meaning none left.
  uint64_t last = 0;
  float slice_max = 0.f;
  for (int r = 0; r < n_keys; ++r) {
    unsigned long long best = 0;
    for (int j = threadIdx.x; j < count; j += blockDim.x) {
      const uint64_t key = keys_s[j];
      if (key > last) best = key_max(best, ~key);
    }
    best = block_key_max(best, warp_s);
    last = best == 0 ? ~uint64_t{0} : ~best;  // ~0: no key left, what the slice's list ends with
    if (threadIdx.x == 0) out_keys[r] = last;
    if (r == 0) slice_max = key_logit(last);
  }
  float sum = 0.f;
  for (int j = threadIdx.x; j < count; j += blockDim.x) sum += expf(key_logit(keys_s[j]) - slice_max);
  sum = gpu::block_sum(sum, scratch);
  if (threadIdx.x == 0) *out = ScoreSlice{slice_max, sum, 0};
}

__global__ void __launch_bounds__(kHistThreads)
    score_merge_kernel(const float* __restrict__ logits, int vocab, int n_slices, const int32_t* __restrict__ targets,
                       const int32_t* __restrict__ target_rows, int k, const ScoreSlice* __restrict__ slices,
                       const uint64_t* __restrict__ keys, float* __restrict__ logprobs, int32_t* __restrict__ ids) {
  __shared__ unsigned long long warp_s[kHistThreads / gpu::kWarpSize];
  const int row = blockIdx.x;
  const ScoreSlice* slice = slices + static_cast<int64_t>(row) * n_slices;
  const int n_keys = score_slice_keys(k);
  const uint64_t* row_keys = keys + static_cast<int64_t>(row) * n_slices * n_keys;
  float* lp = logprobs + static_cast<int64_t>(row) * (k + 1);
  int32_t* id = ids + static_cast<int64_t>(row) * (k + 1);
  // A few dozen slices: every thread reads them all (the same sums everywhere).
  bool bad = false;
  float top = -INFINITY;
  for (int s = 0; s < n_slices; ++s) {
    bad = bad || slice[s].bad != 0;
    if (!bad) top = fmaxf(top, slice[s].max);
  }
  if (bad) {
    if (threadIdx.x == 0) unscorable_row(lp, id, k);
    return;
  }
  float sum = 0.f;
  for (int s = 0; s < n_slices; ++s) sum += slice[s].sum * expf(slice[s].max - top);
  const float log_sum = top + logf(sum);
  const int n_candidates = n_slices * n_keys;
  uint64_t last = 0;
  for (int r = 0; r < n_keys; ++r) {
    unsigned long long best = 0;
    for (int c = threadIdx.x; c < n_candidates; c += blockDim.x) {
      const uint64_t key = row_keys[c];
      if (key > last && key != ~uint64_t{0}) best = key_max(best, ~key);
    }
    best = block_key_max(best, warp_s);
    if (threadIdx.x == 0) {
      if (best == 0) {  // fewer ids than k
        for (int q = r; q < k; ++q) {
          id[q + 1] = -1;
          lp[q + 1] = -INFINITY;
        }
      } else {
        const uint64_t key = ~best;
        const auto token = static_cast<int32_t>(key & 0xffffffffu);
        if (r == 0) id[0] = token;
        if (r < k) {
          id[r + 1] = token;
          lp[r + 1] = key_logit(key) - log_sum;
        }
      }
    }
    if (best == 0) break;
    last = ~best;
  }
  if (threadIdx.x == 0) {
    const float* x = logits + static_cast<int64_t>(row) * vocab;
    lp[0] = x[targets[target_rows != nullptr ? target_rows[row] : row]] - log_sum;
  }
}

}  // namespace

size_t sampling_histogram_bytes(size_t rows) {
  return rows * (kHistRowInts * sizeof(int32_t) + kHistBuckets * sizeof(unsigned long long));
}

// The score workspace's slice records, then (at this offset, 256-byte aligned) their keys.
static size_t score_slices_bytes(int64_t rows, int64_t slices) {
  return (static_cast<size_t>(rows) * static_cast<size_t>(slices) * sizeof(ScoreSlice) + 255) / 256 * 256;
}

size_t score_workspace_bytes(int64_t rows, int64_t vocab, int top_k) {
  if (top_k > kScoreSliceTop) return 0;
  const auto slices = static_cast<size_t>(ceil_div(vocab, kHistSlice));
  const auto n_keys = static_cast<size_t>(std::max(top_k, 1));
  return score_slices_bytes(rows, static_cast<int64_t>(slices)) + static_cast<size_t>(rows) * slices * n_keys * sizeof(uint64_t);
}

void launch_greedy_draw(const Tensor& logits, int32_t* out_ids, int32_t* record, GreedyScratch* scratch,
                        Stream stream) {
  QWENRT_CHECK(logits.dtype == DType::kF32, "sample: logits must be fp32 (" + shape_string(logits) + ")");
  if (logits.rows == 0) return;
  const int vocab = static_cast<int>(logits.cols);
  const dim3 grid(static_cast<unsigned>(ceil_div(vocab, kHistSlice)), static_cast<unsigned>(logits.rows));
  launch_chained(greedy_draw_kernel, grid, kHistThreads, 0, stream, logits.as<const float>(), vocab,
                 static_cast<int>(logits.rows), scratch, out_ids, record, next_grid_point());
  QWENRT_CUDA_LAUNCHED("sample (greedy)", "logits " + shape_string(logits));
}

namespace {

__global__ void adjust_logits_kernel(float* __restrict__ logits, int64_t rows, int64_t vocab,
                                     const int32_t* __restrict__ entries, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t row = entries[3 * i], id = entries[3 * i + 1];
  if (row < 0 || row >= rows || id < 0 || id >= vocab) return;
  const float bias = __int_as_float(entries[3 * i + 2]);
  float& logit = logits[row * vocab + id];
  logit = isinf(bias) && bias < 0 ? kBannedLogit : logit + bias;
}

// One thread an id, blockIdx.y (striding) a masked row: a mask word covers 32 ids (bits of a
// uint32_t, whatever the warp width), read together by neighbouring lanes; writes are contiguous.
constexpr int64_t kMaskWordBits = 32;
__global__ void mask_logits_kernel(float* __restrict__ logits, int64_t rows, int64_t vocab,
                                   const int32_t* __restrict__ mask_rows, const uint32_t* __restrict__ masks,
                                   int64_t words, int n) {
  const int64_t id = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= vocab) return;
  for (int i = blockIdx.y; i < n; i += gridDim.y) {
    const int64_t row = mask_rows[i];
    if (row < 0 || row >= rows) continue;
    if (((masks[i * words + id / kMaskWordBits] >> (id % kMaskWordBits)) & 1u) == 0) logits[row * vocab + id] = kBannedLogit;
  }
}

// The mass path's buckets: past the histogram rows of the workspace's capacity.
unsigned long long* sampling_masses(const SamplingWorkspace& ws) {
  return reinterpret_cast<unsigned long long*>(ws.histogram + ws.histogram_rows * kHistRowInts);
}

// rows == nullptr: every row uses `uniform` with the key (step, row).
void launch_sample_kernels(const Tensor& logits, const SampleRow* rows, const SamplingParams& uniform,
                           uint64_t step, bool penalise, const int32_t* history,
                           const int32_t* history_lens, int history_stride, int32_t* out_ids,
                           const SamplingWorkspace& ws, Stream stream) {
  const int n_rows = static_cast<int>(logits.rows);
  const int vocab = static_cast<int>(logits.cols);
  // Built only on the error paths: this runs once per generated token.
  const auto sizes = [&] { return "logits " + shape_string(logits); };
  QWENRT_CHECK(logits.dtype == DType::kF32, "sample: logits must be fp32 (" + sizes() + ")");
  if (n_rows == 0) return;
  QWENRT_CUDA_CALL(cudaMemsetAsync(ws.status, 0, sizeof(int32_t), stream), "sample", sizes());
  const float* source = logits.as<const float>();
  if (penalise && history != nullptr && history_lens != nullptr) {
    QWENRT_CHECK(ws.rows >= static_cast<size_t>(n_rows) && ws.vocab >= static_cast<size_t>(vocab),
                 "sample: penalty workspace too small (" + sizes() + ")");
    penalty_kernel<<<static_cast<unsigned>(n_rows), 256, 0, stream>>>(
        source, ws.logits, ws.counts, vocab, history, history_lens, history_stride, rows, uniform);
    QWENRT_CUDA_LAUNCHED("sample (penalties)", sizes());
    source = ws.logits;
  }
  // The histogram kernel counts the logits of the rows that take the top_k histogram path
  // (the others skip that part), and finds every row's argmax and checks for non-finite
  // logits over the whole device (at a 152k vocabulary the row's one block took 68 µs for
  // that, the two kernels now 18 µs; Nsight Compute): so it runs for every draw, greedy too,
  // where its workspace is large enough.
  int32_t* hist = nullptr;
  unsigned long long* masses = nullptr;
  if (ws.histogram != nullptr && ws.histogram_rows >= static_cast<size_t>(n_rows)) {
    hist = ws.histogram;
    QWENRT_CUDA_CALL(cudaMemsetAsync(hist, 0, static_cast<size_t>(n_rows) * kHistRowInts * sizeof(int32_t), stream),
                     "sample", sizes());
    const dim3 grid(static_cast<unsigned>(ceil_div(vocab, kHistSlice)), static_cast<unsigned>(n_rows));
    key_histogram_kernel<<<grid, kHistThreads, 0, stream>>>(source, vocab, rows, uniform, hist, ws.status);
    QWENRT_CUDA_LAUNCHED("sample (histogram)", sizes());
    // Rows with no top_k: each bucket's probability mass, after the argmax it is relative to.
    if (rows != nullptr || mass_path(uniform, vocab)) {
      masses = sampling_masses(ws);
      mass_histogram_kernel<<<grid, kHistThreads, 0, stream>>>(source, vocab, rows, uniform, hist, masses);
      QWENRT_CUDA_LAUNCHED("sample (masses)", sizes());
    }
  }
  sample_kernel<<<static_cast<unsigned>(n_rows), kSampleThreads, 0, stream>>>(
      source, vocab, rows, uniform, step, hist, masses, out_ids, ws.status);
  QWENRT_CUDA_LAUNCHED("sample", sizes());
}

}  // namespace

void launch_sample(const Tensor& logits, const SamplingParams& params, uint64_t step,
                   const int32_t* history, const int32_t* history_lens, int history_stride,
                   int32_t* out_ids, const SamplingWorkspace& ws, Stream stream) {
  launch_sample_kernels(logits, nullptr, params, step, params.has_penalties(), history, history_lens,
                        history_stride, out_ids, ws, stream);
}

void launch_adjust_logits(Tensor logits, const int32_t* entries, int n, Stream stream) {
  QWENRT_CHECK(logits.dtype == DType::kF32, "adjust_logits: logits must be fp32 (" + shape_string(logits) + ")");
  if (n <= 0) return;
  constexpr int kThreads = 128;
  adjust_logits_kernel<<<ceil_div(n, kThreads), kThreads, 0, stream>>>(logits.as<float>(), logits.rows, logits.cols,
                                                                       entries, n);
  QWENRT_CUDA_LAUNCHED("adjust_logits", std::to_string(n) + " entries, logits " + shape_string(logits));
}

void launch_mask_logits(Tensor logits, const int32_t* rows, const uint32_t* masks, int n, Stream stream) {
  QWENRT_CHECK(logits.dtype == DType::kF32, "mask_logits: logits must be fp32 (" + shape_string(logits) + ")");
  if (n <= 0 || logits.cols == 0) return;
  constexpr int kThreads = 256;
  const dim3 grid(ceil_div(logits.cols, kThreads), static_cast<unsigned>(std::min(n, 65535)));
  mask_logits_kernel<<<grid, kThreads, 0, stream>>>(logits.as<float>(), logits.rows, logits.cols, rows, masks,
                                                    token_mask_words(logits.cols), n);
  QWENRT_CUDA_LAUNCHED("mask_logits", std::to_string(n) + " rows, logits " + shape_string(logits));
}

void launch_score_rows(const Tensor& logits, const int32_t* targets, const int32_t* target_rows, int top_k,
                       float* logprobs, int32_t* ids, void* workspace, Stream stream) {
  QWENRT_CHECK(logits.dtype == DType::kF32, "score_rows: logits must be fp32 (" + shape_string(logits) + ")");
  QWENRT_CHECK(top_k >= 0 && top_k <= logits.cols, "score_rows: top_k " + std::to_string(top_k) + " for " +
                                                      std::to_string(logits.cols) + " ids");
  if (logits.rows == 0) return;
  if (top_k <= kScoreSliceTop) {
    QWENRT_CHECK(logits.rows <= 65535, "score_rows: " + std::to_string(logits.rows) + " rows in one call");
    const int vocab = static_cast<int>(logits.cols);
    const int slices = ceil_div(vocab, kHistSlice);
    auto* slice_out = static_cast<ScoreSlice*>(workspace);
    auto* keys = reinterpret_cast<uint64_t*>(static_cast<char*>(workspace) + score_slices_bytes(logits.rows, slices));
    score_slices_kernel<<<dim3(static_cast<unsigned>(slices), static_cast<unsigned>(logits.rows)), kHistThreads, 0,
                          stream>>>(logits.as<const float>(), vocab, top_k, slice_out, keys);
    QWENRT_CUDA_LAUNCHED("score_rows (slices)", "logits " + shape_string(logits));
    score_merge_kernel<<<static_cast<unsigned>(logits.rows), kHistThreads, 0, stream>>>(
        logits.as<const float>(), vocab, slices, targets, target_rows, top_k, slice_out, keys, logprobs, ids);
    QWENRT_CUDA_LAUNCHED("score_rows (merge)", "logits " + shape_string(logits));
    return;
  }
  score_rows_kernel<<<static_cast<unsigned>(logits.rows), kHistThreads, 0, stream>>>(
      logits.as<const float>(), static_cast<int>(logits.cols), targets, target_rows, top_k, logprobs, ids);
  QWENRT_CUDA_LAUNCHED("score_rows", "logits " + shape_string(logits));
}

void launch_sample_rows(const Tensor& logits, const SampleRow* rows, const int32_t* history,
                        const int32_t* history_lens, int history_stride, int32_t* out_ids,
                        const SamplingWorkspace& ws, Stream stream) {
  // Which rows have penalties is known only on the device: a history means some may.
  launch_sample_kernels(logits, rows, SamplingParams{}, 0, history != nullptr, history, history_lens,
                        history_stride, out_ids, ws, stream);
}

}  // namespace qwenrt::cuda
