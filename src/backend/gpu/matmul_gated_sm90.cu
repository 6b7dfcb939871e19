// The gated MLP input for many rows on Hopper: out[n, d] = silu(x · gateᵀ) ⊙ (x · upᵀ) in
// one kernel, so the 2d-wide product never goes to memory and no elementwise pass reads it
// back (sm_90a only: wgmma and the bulk tensor copies; other devices and builds take the
// matrix library and silu_mul).
// Work split: persistent blocks, one per multiprocessor, walk output tiles of 128 rows x C
// columns, C = 128, or 64 where 128 would leave more of the last wave empty (tile t: rows
// (t mod row tiles)·128, columns (t div row tiles)·C, so the blocks running together share
// the weight tile through L2). A block is three warpgroups: the first issues the copies (one
// thread: x's 128 x 64 tile and gate's and up's C x 64 tiles stacked as one 2C-row B tile,
// four (C = 128) or six stages deep, each stage on a "full" and an "empty" mbarrier); the
// other two each take 64 of the tile's rows and run wgmma m64 x 2C x 16 over the stage, so a
// thread's C accumulators hold the same output columns of gate (the first C/2) and up (the
// last C/2). The epilogue takes silu(gate)·up in fp32 and stores the 16-bit result.
// Layout: x [n, k], gate_up [2d, k] (gate rows, then up rows), out [n, d], rows contiguous;
// shared tiles in the 128-byte swizzle that the copies write and wgmma reads.
// Bound: tensor-core rate (2 · n · 2d · k flops); memory: gate_up once per 128-row tile band.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "backend/gpu/attention_mma.h"
#include "backend/gpu/common.h"

namespace qwenrt::cuda {
namespace {

// Fewer rows take the small-row kernel for gate and up, then silu_mul.
constexpr int kMinGatedProductRows = kMaxSmallRows + 1;
constexpr int kTileRows = 128;   // output rows of a tile (two consumer warpgroups of 64)
constexpr int kTileK = 64;       // one 128-byte swizzle row of 16-bit values
constexpr int kThreads = 384;    // a copy warpgroup and two math warpgroups
constexpr int kATileBytes = kTileRows * kTileK * 2;
// A tile's output columns (kCols: 128, or 64 where the wider tiles leave more of the last
// wave empty): kCols gate and kCols up rows of w, products of m64 x 2kCols, kCols fp32
// accumulators a thread.
template <int kCols>
struct Tiles {
  static constexpr int kBTileBytes = 2 * kCols * kTileK * 2;
  static constexpr int kStageBytes = kATileBytes + kBTileBytes;
  static constexpr int kStages = kCols == 128 ? 4 : 6;
  static constexpr size_t kSharedBytes =
      static_cast<size_t>(kStages) * kStageBytes + 1024 + 2 * kStages * sizeof(uint64_t);
};

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define QWENRT_WGMMA 1
#endif

#if defined(QWENRT_WGMMA)
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void barrier_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(count));
}
__device__ __forceinline__ void barrier_expect_bytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void barrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(bar)) : "memory");
}
// Waits until the barrier's phase of this parity has completed.
__device__ __forceinline__ void barrier_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(shared_address(bar)), "r"(parity)
        : "memory");
  } while (!done);
}

// A 2-D box of the tensor map at (inner, outer) into shared memory, counted on `bar`.
__device__ __forceinline__ void copy_box(void* dst, const CUtensorMap* map, uint64_t* bar, int inner, int outer) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
          shared_address(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(shared_address(bar)), "r"(inner), "r"(outer)
      : "memory");
}

// A shared-memory matrix descriptor for a K-major tile in the 128-byte swizzle: rows of 128
// bytes, 8-row groups 1,024 bytes apart (the stride offset); the leading offset is unused
// in this mode. Tiles start 1,024-byte aligned, so the base offset is 0; the k-th 16-wide
// slice of the 64-wide row starts 32·k bytes further (the swizzle is applied to the address).
__device__ __forceinline__ uint64_t tile_descriptor(const void* tile) {
  const uint32_t address = shared_address(tile);
  uint64_t desc = (address & 0x3FFFF) >> 4;
  desc |= uint64_t{1} << 16;
  desc |= uint64_t{1024 >> 4} << 32;
  desc |= uint64_t{1} << 62;
  return desc;
}

// One asm operand and a comma: "%i, ".
#define QWENRT_R(i) "%" #i ", "
// d (64 x 256 of fp32, the warpgroup's fragment) (+)= A (64 x 16) · B (256 x 16)ᵀ, both from
// shared memory; accumulate = 0 starts from zero.
#define QWENRT_WGMMA_M64N256K16(TYPE)                                                          \
  asm volatile(                                                                                \
      "{\n"                                                                                    \
      ".reg .pred p;\n"                                                                        \
      "setp.ne.b32 p, %130, 0;\n"                                                              \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE " {"                      \
      QWENRT_R(0) QWENRT_R(1) QWENRT_R(2) QWENRT_R(3) QWENRT_R(4) QWENRT_R(5) QWENRT_R(6) QWENRT_R(7) \
      QWENRT_R(8) QWENRT_R(9) QWENRT_R(10) QWENRT_R(11) QWENRT_R(12) QWENRT_R(13) QWENRT_R(14) QWENRT_R(15) \
      QWENRT_R(16) QWENRT_R(17) QWENRT_R(18) QWENRT_R(19) QWENRT_R(20) QWENRT_R(21) QWENRT_R(22) QWENRT_R(23) \
      QWENRT_R(24) QWENRT_R(25) QWENRT_R(26) QWENRT_R(27) QWENRT_R(28) QWENRT_R(29) QWENRT_R(30) QWENRT_R(31) \
      QWENRT_R(32) QWENRT_R(33) QWENRT_R(34) QWENRT_R(35) QWENRT_R(36) QWENRT_R(37) QWENRT_R(38) QWENRT_R(39) \
      QWENRT_R(40) QWENRT_R(41) QWENRT_R(42) QWENRT_R(43) QWENRT_R(44) QWENRT_R(45) QWENRT_R(46) QWENRT_R(47) \
      QWENRT_R(48) QWENRT_R(49) QWENRT_R(50) QWENRT_R(51) QWENRT_R(52) QWENRT_R(53) QWENRT_R(54) QWENRT_R(55) \
      QWENRT_R(56) QWENRT_R(57) QWENRT_R(58) QWENRT_R(59) QWENRT_R(60) QWENRT_R(61) QWENRT_R(62) QWENRT_R(63) \
      QWENRT_R(64) QWENRT_R(65) QWENRT_R(66) QWENRT_R(67) QWENRT_R(68) QWENRT_R(69) QWENRT_R(70) QWENRT_R(71) \
      QWENRT_R(72) QWENRT_R(73) QWENRT_R(74) QWENRT_R(75) QWENRT_R(76) QWENRT_R(77) QWENRT_R(78) QWENRT_R(79) \
      QWENRT_R(80) QWENRT_R(81) QWENRT_R(82) QWENRT_R(83) QWENRT_R(84) QWENRT_R(85) QWENRT_R(86) QWENRT_R(87) \
      QWENRT_R(88) QWENRT_R(89) QWENRT_R(90) QWENRT_R(91) QWENRT_R(92) QWENRT_R(93) QWENRT_R(94) QWENRT_R(95) \
      QWENRT_R(96) QWENRT_R(97) QWENRT_R(98) QWENRT_R(99) QWENRT_R(100) QWENRT_R(101) QWENRT_R(102) QWENRT_R(103) \
      QWENRT_R(104) QWENRT_R(105) QWENRT_R(106) QWENRT_R(107) QWENRT_R(108) QWENRT_R(109) QWENRT_R(110) QWENRT_R(111) \
      QWENRT_R(112) QWENRT_R(113) QWENRT_R(114) QWENRT_R(115) QWENRT_R(116) QWENRT_R(117) QWENRT_R(118) QWENRT_R(119) \
      QWENRT_R(120) QWENRT_R(121) QWENRT_R(122) QWENRT_R(123) QWENRT_R(124) QWENRT_R(125) QWENRT_R(126) \
      "%127}, %128, %129, p, 1, 1, 0, 0;\n"                                                          \
      "}\n"                                                                                    \
      :                                                                                        \
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]) \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate))

// The same with B 128 x 16 (64 accumulators).
#define QWENRT_WGMMA_M64N128K16(TYPE)                                                          \
  asm volatile(                                                                                \
      "{\n"                                                                                    \
      ".reg .pred p;\n"                                                                        \
      "setp.ne.b32 p, %66, 0;\n"                                                               \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {"                      \
      QWENRT_R(0) QWENRT_R(1) QWENRT_R(2) QWENRT_R(3) QWENRT_R(4) QWENRT_R(5) QWENRT_R(6) QWENRT_R(7) \
      QWENRT_R(8) QWENRT_R(9) QWENRT_R(10) QWENRT_R(11) QWENRT_R(12) QWENRT_R(13) QWENRT_R(14) QWENRT_R(15) \
      QWENRT_R(16) QWENRT_R(17) QWENRT_R(18) QWENRT_R(19) QWENRT_R(20) QWENRT_R(21) QWENRT_R(22) QWENRT_R(23) \
      QWENRT_R(24) QWENRT_R(25) QWENRT_R(26) QWENRT_R(27) QWENRT_R(28) QWENRT_R(29) QWENRT_R(30) QWENRT_R(31) \
      QWENRT_R(32) QWENRT_R(33) QWENRT_R(34) QWENRT_R(35) QWENRT_R(36) QWENRT_R(37) QWENRT_R(38) QWENRT_R(39) \
      QWENRT_R(40) QWENRT_R(41) QWENRT_R(42) QWENRT_R(43) QWENRT_R(44) QWENRT_R(45) QWENRT_R(46) QWENRT_R(47) \
      QWENRT_R(48) QWENRT_R(49) QWENRT_R(50) QWENRT_R(51) QWENRT_R(52) QWENRT_R(53) QWENRT_R(54) QWENRT_R(55) \
      QWENRT_R(56) QWENRT_R(57) QWENRT_R(58) QWENRT_R(59) QWENRT_R(60) QWENRT_R(61) QWENRT_R(62) \
      "%63}, %64, %65, p, 1, 1, 0, 0;\n"                                                       \
      "}\n"                                                                                    \
      :                                                                                        \
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate))

// d (kN/2 accumulators) (+)= A · Bᵀ for B of kN rows.
template <typename T, int kN>
__device__ __forceinline__ void wgmma(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  constexpr bool kBf16 = std::is_same_v<T, gpu::bf16>;
  if constexpr (kN == 256 && kBf16) {
    QWENRT_WGMMA_M64N256K16("bf16");
  } else if constexpr (kN == 256) {
    QWENRT_WGMMA_M64N256K16("f16");
  } else if constexpr (kBf16) {
    QWENRT_WGMMA_M64N128K16("bf16");
  } else {
    QWENRT_WGMMA_M64N128K16("f16");
  }
}
#undef QWENRT_WGMMA_M64N256K16
#undef QWENRT_WGMMA_M64N128K16
#undef QWENRT_R

// Keeps the compiler from moving accesses of the accumulators across the asynchronous
// products (they are registers the tensor cores write behind its back).
template <int kN>
__device__ __forceinline__ void pin_accumulators(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
#endif  // QWENRT_WGMMA

// A math warpgroup keeps one stage's products in flight while it issues the next's, and
// releases a stage once the products after it are issued.
template <typename T, int kCols>
__global__ void __launch_bounds__(kThreads, 1)
    gated_product_kernel(const __grid_constant__ CUtensorMap x_map, const __grid_constant__ CUtensorMap w_map,
                         T* __restrict__ out, int rows, int d, int k) {
#if defined(QWENRT_WGMMA)
  constexpr int kStages = Tiles<kCols>::kStages;
  constexpr int kStageBytes = Tiles<kCols>::kStageBytes;
  extern __shared__ uint8_t shared_raw[];
  // The swizzled tiles want 1,024-byte alignment.
  uint8_t* tiles = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(shared_raw) + 1023) & ~uintptr_t{1023});
  uint64_t* full = reinterpret_cast<uint64_t*>(tiles + kStages * kStageBytes);
  uint64_t* empty = full + kStages;
  const int row_tiles = (rows + kTileRows - 1) / kTileRows;
  const int n_tiles = row_tiles * (d / kCols);
  const int k_steps = k / kTileK;
  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      barrier_init(&full[s], 1);
      barrier_init(&empty[s], 2);  // one arrival from each math warpgroup
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0) {
      int stage = 0;
      uint32_t phase = 0;
      for (int tile = static_cast<int>(blockIdx.x); tile < n_tiles; tile += static_cast<int>(gridDim.x)) {
        const int row0 = (tile % row_tiles) * kTileRows;
        const int col0 = (tile / row_tiles) * kCols;
        for (int step = 0; step < k_steps; ++step) {
          barrier_wait(&empty[stage], phase ^ 1);
          uint8_t* a = tiles + stage * kStageBytes;
          uint8_t* b = a + kATileBytes;
          barrier_expect_bytes(&full[stage], kStageBytes);
          copy_box(a, &x_map, &full[stage], step * kTileK, row0);
          copy_box(b, &w_map, &full[stage], step * kTileK, col0);
          copy_box(b + kCols * kTileK * 2, &w_map, &full[stage], step * kTileK, d + col0);
          if (++stage == kStages) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int half = warpgroup - 1;  // rows half·64 .. half·64 + 63 of each tile
    const int lane = static_cast<int>(threadIdx.x) % gpu::kWarpSize;
    const int warp = (static_cast<int>(threadIdx.x) % 128) / gpu::kWarpSize;
    const bool releases = threadIdx.x % 128 == 0;  // one arrival a warpgroup
    auto release = [&](int s) {
      if (releases) barrier_arrive(&empty[s]);
    };
    int stage = 0;
    uint32_t phase = 0;
    float acc[kCols];
    for (int tile = static_cast<int>(blockIdx.x); tile < n_tiles; tile += static_cast<int>(gridDim.x)) {
      const int row0 = (tile % row_tiles) * kTileRows;
      const int col0 = (tile / row_tiles) * kCols;
      int previous = -1;
      for (int step = 0; step < k_steps; ++step) {
        barrier_wait(&full[stage], phase);
        const uint8_t* a = tiles + stage * kStageBytes + half * 64 * 128;
        const uint8_t* b = tiles + stage * kStageBytes + kATileBytes;
        const uint64_t desc_a = tile_descriptor(a);
        const uint64_t desc_b = tile_descriptor(b);
        pin_accumulators(acc);
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < kTileK / 16; ++kk)
          wgmma<T, 2 * kCols>(acc, desc_a + 2 * kk, desc_b + 2 * kk, step > 0 || kk > 0 ? 1 : 0);
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
        if (previous >= 0) release(previous);
        previous = stage;
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
      asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
      pin_accumulators(acc);
      release(previous);
      // Fragment of m64nNk16: row warp·16 + lane/4 (+8 for the odd pair), columns 8j +
      // 2(lane%4) (+1) in registers 4j .. 4j + 3; gate's column c is register group j = c/8,
      // up's j + kCols/8.
      const int row_base = row0 + half * 64 + warp * 16 + lane / 4;
#pragma unroll
      for (int j = 0; j < kCols / 8; ++j) {
        const int col = col0 + j * 8 + (lane % 4) * 2;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = row_base + h * 8;
          if (row >= rows) continue;
          const float g0 = acc[j * 4 + h * 2], g1 = acc[j * 4 + h * 2 + 1];
          constexpr int kUp = kCols / 8;
          const float u0 = acc[(j + kUp) * 4 + h * 2], u1 = acc[(j + kUp) * 4 + h * 2 + 1];
          const float h0 = g0 / (1.f + expf(-g0)) * u0;
          const float h1 = g1 / (1.f + expf(-g1)) * u1;
          *reinterpret_cast<uint32_t*>(out + static_cast<int64_t>(row) * d + col) = mma::pack2<T>(h0, h1);
        }
      }
    }
  }
#else
  (void)rows, (void)d, (void)k, (void)out;
#endif
}

// ---- host ----

// The driver's tensor-map encoder, through the runtime (no link against the driver library).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
    const cudaError_t status =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found);
#else  // before 12.5 (Debian's 12.4): the entry point of the driver's own version
    const cudaError_t status = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &found);
#endif
    if (status != cudaSuccess || found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      fn = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encoder;
}

// A [rows, cols] row-major 16-bit matrix read in boxes of box_rows x 64 in the 128-byte swizzle.
bool encode_map(CUtensorMap& map, const void* base, DType dtype, int64_t rows, int64_t cols, int box_rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * 2};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kTileK), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUtensorMapDataType type =
      dtype == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  return encode(&map, type, 2, const_cast<void*>(base), dims, strides, box, element_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Whether this device runs the kernel: compute capability 9.0 exactly (sm_90a code runs on
// no other).
struct GatedDevice {
  bool usable = false;
  int multiprocessors = 0;
};
const GatedDevice& gated_device() {
  static const GatedDevice device = [] {
    GatedDevice d;
    int id = 0, major = 0, minor = 0;
    if (cudaGetDevice(&id) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, id) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, id) != cudaSuccess ||
        cudaDeviceGetAttribute(&d.multiprocessors, cudaDevAttrMultiProcessorCount, id) != cudaSuccess) {
      (void)cudaGetLastError();
      return d;
    }
    d.usable = major == 9 && minor == 0 && tensor_map_encoder() != nullptr;
    return d;
  }();
  return device;
}

// Output tiles of 128 rows by `cols` columns.
int tile_count(int rows, int d, int cols) { return (rows + kTileRows - 1) / kTileRows * (d / cols); }

template <typename T, int kCols>
void launch_gated(const CUtensorMap& x_map, const CUtensorMap& w_map, Tensor out, int rows, int d, int k,
                  int multiprocessors, Stream stream) {
  const auto kernel = gated_product_kernel<T, kCols>;
  constexpr size_t kShared = Tiles<kCols>::kSharedBytes;
  static const bool configured = [kernel] {
    QWENRT_CUDA_CALL(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kShared)),
        "matmul_silu_mul", "shared memory");
    return true;
  }();
  (void)configured;
  // A plain launch, not a chained one: placed early, its blocks (a multiprocessor each)
  // waited there, and the 7B's 256-sequence decode step lost the kernel's gain (H100: step
  // 8.98 ms chained, 8.79 plain, 8.94 without the kernel; docs/PERFORMANCE.md).
  const unsigned blocks = static_cast<unsigned>(std::min(tile_count(rows, d, kCols), multiprocessors));
  kernel<<<blocks, kThreads, kShared, stream>>>(x_map, w_map, out.as<T>(), rows, d, k);
}

// The share of the grid's slots that its waves fill.
double wave_fill(int units, int slots) {
  const int waves = (units + slots - 1) / slots;
  return static_cast<double>(units) / (static_cast<double>(waves) * slots);
}

// Where the kernel is used unless QWENRT_GATED_PRODUCT says otherwise: the row counts where
// it measured faster than the two products and silu_mul (the 7B's shape on an H100: 256 rows
// 124 against 141 µs, 384 rows 157 against 173; at 512-2,048 rows 2-17% slower; from 17 to
// 192 rows between 4% faster and 23% slower), for shapes like the measured one (wide MLPs).
bool chosen_shape(int64_t rows, int64_t d, int64_t k) {
  return rows >= 256 && rows <= 384 && d >= 8192 && k >= 2048;
}

// QWENRT_GATED_PRODUCT, read at each call (a recorded step keeps what it was recorded with).
enum class GatedProductMode { kOff, kChosenShapes, kEveryShape };
GatedProductMode gated_product_mode() {
  const char* setting = std::getenv("QWENRT_GATED_PRODUCT");
  if (setting == nullptr) return GatedProductMode::kChosenShapes;
  if (std::strcmp(setting, "off") == 0) return GatedProductMode::kOff;
  if (std::strcmp(setting, "on") == 0) return GatedProductMode::kEveryShape;
  return GatedProductMode::kChosenShapes;
}

}  // namespace

bool launch_gated_product_sm90(const Tensor& x, const Tensor& gate_up, Tensor out, Stream stream) {
  const GatedProductMode mode = gated_product_mode();
  if (mode == GatedProductMode::kOff || x.rows < kMinGatedProductRows) return false;
  const GatedDevice& device = gated_device();
  if (!device.usable) return false;
  const int64_t d = gate_up.rows / 2, k = x.cols;
  if (mode == GatedProductMode::kChosenShapes && !chosen_shape(x.rows, d, k)) return false;
  const auto aligned = [](const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; };
  if ((x.dtype != DType::kBF16 && x.dtype != DType::kF16) || gate_up.dtype != x.dtype || out.dtype != x.dtype ||
      gate_up.cols != k || gate_up.rows != 2 * d || out.rows != x.rows || out.cols != d || d <= 0 || d % 64 != 0 ||
      k % kTileK != 0 || k < kTileK || k > (int64_t{1} << 30) || x.rows > (int64_t{1} << 30) ||
      d > (int64_t{1} << 30) ||
      (x.rows + kTileRows - 1) / kTileRows * (d / 64) >= (int64_t{1} << 31) ||
      !aligned(x.data, 16) || !aligned(gate_up.data, 16) || !aligned(out.data, 4))
    return false;
  // 128 columns a tile unless 64 fill the waves clearly better (the 7B at 256 rows: 296
  // tiles are 2.24 waves of 132, 592 are 4.48; measured 124 against 140 µs on an H100) or d
  // is not a multiple of 128.
  const int rows = static_cast<int>(x.rows), dd = static_cast<int>(d), slots = device.multiprocessors;
  const bool narrow =
      d % 128 != 0 || wave_fill(tile_count(rows, dd, 64), slots) > wave_fill(tile_count(rows, dd, 128), slots) + 0.1;
  CUtensorMap x_map{}, w_map{};
  if (!encode_map(x_map, x.data, x.dtype, x.rows, k, kTileRows) ||
      !encode_map(w_map, gate_up.data, x.dtype, 2 * d, k, narrow ? 64 : 128))
    return false;  // the caller's two products and silu_mul
  const int kk = static_cast<int>(k);
  dispatch_half(x.dtype, "matmul_silu_mul", [&](auto tag) {
    using T = decltype(tag);
    if (narrow) {
      launch_gated<T, 64>(x_map, w_map, out, rows, dd, kk, device.multiprocessors, stream);
    } else {
      launch_gated<T, 128>(x_map, w_map, out, rows, dd, kk, device.multiprocessors, stream);
    }
  });
  QWENRT_CUDA_LAUNCHED("matmul_silu_mul (sm90)", matmul_sizes(x, gate_up, out));
  return true;
}

}  // namespace qwenrt::cuda
