// The rate each of cuBLASLt's candidate algorithms sustains on the Qwen2.5-7B layer's products
// when the card runs at its power cap, and a whole layer's products with the heuristic's
// first choices against the best sustained ones.
//
// A short benchmark ranks algorithms at boost clocks; a server under steady load runs at the
// power cap, where what counts is work per joule. Phase 1 runs every candidate of every
// shape for --seconds back to back (random operands: weights ~ N(0, 0.02) as transformers
// initialises them, activations ~ N(0, 1)), timing 50 ms windows with device events and
// reading the SM clock and power through NVML (the driver's library, opened at run time); the median of the second half is the
// candidate's sustained rate. Phase 2 runs the five products of a layer over --rows rows,
// layer after layer, with the heuristic's first algorithm for each shape, then with phase 1's
// best, alternating, and reports each run's sustained rate.
//
// --search K widens phase 1 past the heuristic's list: every algorithm cuBLASLt lists for bf16
// operands with fp32 accumulation (cublasLtMatmulAlgoGetIds), each tile and stage count it
// lists, checked with cublasLtMatmulAlgoCheck, timed in a short burst, the best 3K of those
// then varied one setting at a time (cluster shape, CTA swizzle, custom option, split-K with
// each reduction scheme); and, since that list leaves out Hopper's warp-specialised
// algorithm, each family of the heuristic's candidates with every tile it lists, 11 cluster
// shapes (automatic, and each of up to 8 blocks whose sides are powers of two) and its first
// 16 custom options (about 10,000 bursts a family: minutes a shape). The K fastest in a
// burst join the heuristic's candidates in phase 1. Every candidate's output is compared
// with the heuristic's first. Each shape's first candidate is preceded by an unscored run
// of it, so that it too is measured at the cap.
//
//   nvcc -std=c++17 -O2 -arch=sm_90 scripts/sustained_algos.cu -lcublasLt -ldl -o /tmp/sa
//   /tmp/sa --rows 256,1024 --seconds 3 --candidates 8 [--search 12]
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CHECK_CUDA(call)                                                                  \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)
#define CHECK_LT(call)                                                                    \
  do {                                                                                    \
    cublasStatus_t s_ = (call);                                                           \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                    \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cublasLtGetStatusString(s_)); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

namespace {

__device__ uint32_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

// Normal values by Box-Muller from a counter hash.
__global__ void fill_normal(__nv_bfloat16* p, size_t count, float std, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const float u1 = (mix(seed * 0x9e3779b97f4a7c15ULL + 2 * i) + 1.0f) * 2.3283064e-10f;
    const float u2 = mix(seed * 0x9e3779b97f4a7c15ULL + 2 * i + 1) * 2.3283064e-10f;
    p[i] = __float2bfloat16(std * sqrtf(-2.f * logf(u1)) * cospif(2.f * u2));
  }
}

struct Shape {
  const char* name;
  int64_t m, k;  // out features, in features
};
const Shape kShapes[] = {{"qkv", 4608, 3584}, {"o", 3584, 3584}, {"gate", 18944, 3584},
                         {"up", 18944, 3584}, {"down", 3584, 18944}};

struct Problem {
  cublasLtMatmulDesc_t desc{};
  cublasLtMatrixLayout_t a{}, b{}, d{};
  std::vector<cublasLtMatmulHeuristicResult_t> candidates;
};

cublasLtHandle_t handle;
void* workspace;
const size_t kWorkspace = 32ull << 20;  // the engine's matmul workspace
// The few NVML calls used, from the driver's libnvidia-ml (no header or stub library needed).
struct Nvml {
  void* device = nullptr;
  int (*clock_info)(void*, int, unsigned*) = nullptr;  // nvmlDeviceGetClockInfo, 1 = SM clock
  int (*power_usage)(void*, unsigned*) = nullptr;      // nvmlDeviceGetPowerUsage, milliwatts
  bool open() {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (lib == nullptr) return false;
    auto init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
    auto by_index = reinterpret_cast<int (*)(unsigned, void**)>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
    clock_info = reinterpret_cast<int (*)(void*, int, unsigned*)>(dlsym(lib, "nvmlDeviceGetClockInfo"));
    power_usage = reinterpret_cast<int (*)(void*, unsigned*)>(dlsym(lib, "nvmlDeviceGetPowerUsage"));
    return init != nullptr && by_index != nullptr && clock_info != nullptr && power_usage != nullptr &&
           init() == 0 && by_index(0, &device) == 0;
  }
} nvml;

Problem make_problem(int64_t m, int64_t n, int64_t k, int want) {
  Problem p;
  CHECK_LT(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t t = CUBLAS_OP_T;
  CHECK_LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
  CHECK_LT(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, k, m, k));
  CHECK_LT(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, k, n, k));
  CHECK_LT(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_16BF, m, n, m));
  cublasLtMatmulPreference_t pref;
  CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspace;
  CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  p.candidates.resize(want);
  int found = 0;
  CHECK_LT(cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.a, p.b, p.d, p.d, pref, want, p.candidates.data(),
                                          &found));
  p.candidates.resize(found);
  cublasLtMatmulPreferenceDestroy(pref);
  return p;
}

std::string describe(const cublasLtMatmulAlgo_t& algo) {
  int id = 0, tile = 0, stages = 0, splitk = 0, swizzle = 0, reduction = 0, custom = 0;
  uint16_t cluster = 0;
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages), &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk), &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swizzle, sizeof(swizzle),
                                       &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof(cluster),
                                       &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &reduction, sizeof(reduction),
                                       &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom, sizeof(custom), &written);
  char buf[200];
  std::snprintf(buf, sizeof(buf), "id %d tile %d stages %d splitk %d swizzle %d cluster %d reduction %d custom %d", id,
                tile, stages, splitk, swizzle, static_cast<int>(cluster), reduction, custom);
  return buf;
}

struct Operands {
  std::vector<__nv_bfloat16*> weights;  // one set per layer copy
  __nv_bfloat16* x = nullptr;           // rows × max k
  __nv_bfloat16* out = nullptr;         // rows × max m
};

struct Reading {
  double tflops, clock_mhz, watts;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Runs `issue` (which launches `flops` worth of products) back to back for `seconds`, in
// windows of about 50 ms; returns the second half's medians.
template <typename Issue>
Reading sustain(Issue issue, double flops, double seconds) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  // Calibrate the window: repeats of `issue` per 50 ms.
  CHECK_CUDA(cudaEventRecord(start));
  for (int i = 0; i < 3; ++i) issue();
  CHECK_CUDA(cudaEventRecord(stop));
  CHECK_CUDA(cudaEventSynchronize(stop));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  const int repeats = std::max(1, static_cast<int>(50.0 / (ms / 3)));
  std::vector<double> rates, clocks, watts;
  double elapsed = 0;
  while (elapsed < seconds * 1000) {
    CHECK_CUDA(cudaEventRecord(start));
    for (int i = 0; i < repeats; ++i) issue();
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    elapsed += ms;
    unsigned clock = 0, milliwatts = 0;
    nvml.clock_info(nvml.device, 1, &clock);
    nvml.power_usage(nvml.device, &milliwatts);
    if (elapsed >= seconds * 500) {
      rates.push_back(flops * repeats / (ms * 1e-3) / 1e12);
      clocks.push_back(clock);
      watts.push_back(milliwatts / 1000.0);
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return {median(rates), median(clocks), median(watts)};
}

void matmul(const Problem& p, const cublasLtMatmulAlgo_t& algo, const __nv_bfloat16* w, const __nv_bfloat16* x,
            __nv_bfloat16* out) {
  const float alpha = 1.f, beta = 0.f;
  CHECK_LT(cublasLtMatmul(handle, p.desc, &alpha, w, p.a, x, p.b, &beta, out, p.d, out, p.d, &algo, workspace,
                          kWorkspace, 0));
}

// The exhaustive search (--search).

template <typename T>
std::vector<T> cap_list(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t attribute) {
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attribute, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS || bytes == 0)
    return {};
  std::vector<T> values(bytes / sizeof(T));
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attribute, values.data(), values.size() * sizeof(T), &bytes) !=
      CUBLAS_STATUS_SUCCESS)
    return {};
  values.resize(bytes / sizeof(T));
  return values;
}

template <typename T>
T cap_value(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t attribute) {
  T value{};
  size_t written = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attribute, &value, sizeof(value), &written) != CUBLAS_STATUS_SUCCESS)
    return T{};
  return value;
}

template <typename T>
bool set_config(cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute, T value) {
  return cublasLtMatmulAlgoConfigSetAttribute(&algo, attribute, &value, sizeof(value)) == CUBLAS_STATUS_SUCCESS;
}

// Whether `algo` runs `p` within the workspace; its workspace size in `bytes`.
bool accepts(const Problem& p, const cublasLtMatmulAlgo_t& algo, size_t& bytes) {
  cublasLtMatmulHeuristicResult_t result{};
  if (cublasLtMatmulAlgoCheck(handle, p.desc, p.a, p.b, p.d, p.d, &algo, &result) != CUBLAS_STATUS_SUCCESS)
    return false;
  bytes = result.workspaceSize;
  return bytes <= kWorkspace;
}

// Mean µs of `iters` runs back to back (rotating the weight copies, so none sits in L2),
// after two unclocked ones; a negative number when it does not launch.
double burst_us(const Problem& p, const cublasLtMatmulAlgo_t& algo, const Operands& ops, int shape_index,
                int nshapes, int copies, int iters) {
  const float alpha = 1.f, beta = 0.f;
  int copy = 0;
  auto run = [&] {
    const cublasStatus_t s =
        cublasLtMatmul(handle, p.desc, &alpha, ops.weights[copy * nshapes + shape_index], p.a, ops.x, p.b, &beta,
                       ops.out, p.d, ops.out, p.d, &algo, workspace, kWorkspace, 0);
    copy = (copy + 1) % copies;
    return s == CUBLAS_STATUS_SUCCESS;
  };
  for (int i = 0; i < 2; ++i)
    if (!run()) return -1;
  static cudaEvent_t start = nullptr, stop = nullptr;
  if (start == nullptr) {
    CHECK_CUDA(cudaEventCreate(&start));
    CHECK_CUDA(cudaEventCreate(&stop));
  }
  CHECK_CUDA(cudaEventRecord(start));
  for (int i = 0; i < iters; ++i) run();
  CHECK_CUDA(cudaEventRecord(stop));
  CHECK_CUDA(cudaEventSynchronize(stop));
  CHECK_CUDA(cudaGetLastError());
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  return ms * 1000.0 / iters;
}

struct Timed {
  cublasLtMatmulAlgo_t algo;
  size_t workspace;
  double us;
};

bool same_config(const cublasLtMatmulAlgo_t& a, const cublasLtMatmulAlgo_t& b) {
  return std::memcmp(a.data, b.data, sizeof(a.data)) == 0;
}

int config_int(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute) {
  int value = 0;
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &value, sizeof(value), &written);
  return value;
}

// The `keep` fastest configurations in a burst of: every algorithm, tile and stage count
// cuBLASLt accepts for `p`; the best 3 `keep` of those varied one setting at a time (cluster
// shape, swizzle, custom option, split-K with each reduction scheme; the best value of each
// setting kept before the next is tried); each family of the heuristic's candidates with
// every tile, 11 cluster shapes and 16 custom options. At most two per algorithm, tile and stage
// count; none the heuristic already lists.
std::vector<cublasLtMatmulHeuristicResult_t> search(const Problem& p, const Operands& ops, int shape_index,
                                                    int nshapes, int copies, int keep) {
  const cudaDataType_t bf = CUDA_R_16BF;
  int ids[1024];
  int count = 0;
  CHECK_LT(cublasLtMatmulAlgoGetIds(handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, bf, bf, bf, bf, 1024, ids, &count));
  const int iters = 10;
  std::vector<Timed> base;
  long checked = 0, timed = 0;
  for (int a = 0; a < count; ++a) {
    cublasLtMatmulAlgo_t algo{};
    if (cublasLtMatmulAlgoInit(handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, bf, bf, bf, bf, ids[a], &algo) !=
        CUBLAS_STATUS_SUCCESS)
      continue;
    std::vector<uint32_t> tiles = cap_list<uint32_t>(algo, CUBLASLT_ALGO_CAP_TILE_IDS);
    std::vector<uint32_t> stages = cap_list<uint32_t>(algo, CUBLASLT_ALGO_CAP_STAGES_IDS);
    if (tiles.empty()) tiles.push_back(CUBLASLT_MATMUL_TILE_UNDEFINED);
    if (stages.empty()) stages.push_back(CUBLASLT_MATMUL_STAGES_UNDEFINED);
    for (uint32_t tile : tiles) {
      for (uint32_t stage : stages) {
        cublasLtMatmulAlgo_t c = algo;
        if (!set_config(c, CUBLASLT_ALGO_CONFIG_TILE_ID, tile) || !set_config(c, CUBLASLT_ALGO_CONFIG_STAGES_ID, stage))
          continue;
        size_t bytes = 0;
        ++checked;
        if (!accepts(p, c, bytes)) continue;
        ++timed;
        const double us = burst_us(p, c, ops, shape_index, nshapes, copies, iters);
        if (us > 0) base.push_back({c, bytes, us});
      }
    }
  }
  auto faster = [](const Timed& a, const Timed& b) { return a.us < b.us; };
  std::sort(base.begin(), base.end(), faster);
  if (base.size() > static_cast<size_t>(3 * keep)) base.resize(3 * keep);
  std::vector<Timed> all = base;
  // Tries `value` of `attribute` (and of a second one when `attribute2` is set) on `best`;
  // keeps it there when faster.
  auto vary = [&](Timed& best, auto attribute, auto value, int attribute2, uint32_t value2) {
    Timed t = best;
    if (!set_config(t.algo, attribute, value)) return;
    if (attribute2 >= 0 &&
        !set_config(t.algo, static_cast<cublasLtMatmulAlgoConfigAttributes_t>(attribute2), value2))
      return;
    if (same_config(t.algo, best.algo) || !accepts(p, t.algo, t.workspace)) return;
    ++timed;
    t.us = burst_us(p, t.algo, ops, shape_index, nshapes, copies, iters);
    if (t.us <= 0) return;
    all.push_back(t);
    if (t.us < best.us) best = t;
  };
  const uint16_t clusters[] = {CUBLASLT_CLUSTER_SHAPE_1x1x1, CUBLASLT_CLUSTER_SHAPE_2x1x1,
                               CUBLASLT_CLUSTER_SHAPE_1x2x1, CUBLASLT_CLUSTER_SHAPE_2x2x1,
                               CUBLASLT_CLUSTER_SHAPE_4x1x1, CUBLASLT_CLUSTER_SHAPE_1x4x1};
  for (const Timed& start : base) {
    Timed best = start;
    for (uint16_t cluster : clusters) vary(best, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, cluster, -1, 0);
    if (cap_value<uint32_t>(start.algo, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT) != 0)
      vary(best, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, uint32_t{1}, -1, 0);
    const int custom_max = std::min(7, cap_value<int32_t>(start.algo, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX));
    for (uint32_t custom = 1; static_cast<int>(custom) <= custom_max; ++custom)
      vary(best, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, custom, -1, 0);
    if (cap_value<int32_t>(start.algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT) != 0) {
      const uint32_t schemes = cap_value<uint32_t>(start.algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
      for (int32_t split : {2, 3, 4, 6})
        for (uint32_t scheme : {CUBLASLT_REDUCTION_SCHEME_INPLACE, CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE,
                                CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE})
          if ((schemes & scheme) != 0)
            vary(best, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, split, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, scheme);
    }
  }
  // cublasLtMatmulAlgoGetIds does not list every algorithm the heuristic returns (on Hopper
  // it leaves out the warp-specialised one), so each family of the heuristic's candidates
  // (algorithm, stages, split-K, reduction, swizzle) is tried with every tile it lists, these
  // cluster shapes and its first 16 custom options.
  const uint16_t all_clusters[] = {CUBLASLT_CLUSTER_SHAPE_AUTO,  CUBLASLT_CLUSTER_SHAPE_1x1x1,
                                   CUBLASLT_CLUSTER_SHAPE_2x1x1, CUBLASLT_CLUSTER_SHAPE_4x1x1,
                                   CUBLASLT_CLUSTER_SHAPE_1x2x1, CUBLASLT_CLUSTER_SHAPE_2x2x1,
                                   CUBLASLT_CLUSTER_SHAPE_4x2x1, CUBLASLT_CLUSTER_SHAPE_1x4x1,
                                   CUBLASLT_CLUSTER_SHAPE_2x4x1, CUBLASLT_CLUSTER_SHAPE_8x1x1,
                                   CUBLASLT_CLUSTER_SHAPE_1x8x1};
  std::vector<std::vector<int>> families;
  long family_timed = 0;
  for (const auto& h : p.candidates) {
    const std::vector<int> family = {config_int(h.algo, CUBLASLT_ALGO_CONFIG_ID),
                                     config_int(h.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                                     config_int(h.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                                     config_int(h.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
                                     config_int(h.algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING)};
    if (std::find(families.begin(), families.end(), family) != families.end()) continue;
    families.push_back(family);
    const std::vector<uint32_t> tiles = cap_list<uint32_t>(h.algo, CUBLASLT_ALGO_CAP_TILE_IDS);
    const int custom_max = std::min(15, cap_value<int32_t>(h.algo, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX));
    for (uint32_t tile : tiles) {
      for (uint16_t cluster : all_clusters) {
        for (uint32_t custom = 0; static_cast<int>(custom) <= custom_max; ++custom) {
          Timed t{h.algo, 0, 0};
          if (!set_config(t.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, tile) ||
              !set_config(t.algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, cluster) ||
              !set_config(t.algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, custom))
            continue;
          ++checked;
          if (!accepts(p, t.algo, t.workspace)) continue;
          ++timed;
          ++family_timed;
          t.us = burst_us(p, t.algo, ops, shape_index, nshapes, copies, iters);
          if (t.us > 0) all.push_back(t);
        }
      }
    }
  }
  std::printf("{\"phase\":0,\"families\":%zu,\"family_configurations\":%ld}\n", families.size(), family_timed);
  std::sort(all.begin(), all.end(), faster);
  std::vector<cublasLtMatmulHeuristicResult_t> chosen;
  for (const Timed& t : all) {
    if (static_cast<int>(chosen.size()) == keep) break;
    bool listed = false;
    int siblings = 0;
    for (const auto& c : p.candidates) listed = listed || same_config(c.algo, t.algo);
    for (const auto& c : chosen) {
      listed = listed || same_config(c.algo, t.algo);
      siblings += config_int(c.algo, CUBLASLT_ALGO_CONFIG_ID) == config_int(t.algo, CUBLASLT_ALGO_CONFIG_ID) &&
                  config_int(c.algo, CUBLASLT_ALGO_CONFIG_TILE_ID) == config_int(t.algo, CUBLASLT_ALGO_CONFIG_TILE_ID) &&
                  config_int(c.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID) ==
                      config_int(t.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID);
    }
    if (listed || siblings >= 2) continue;
    cublasLtMatmulHeuristicResult_t r{};
    r.algo = t.algo;
    r.workspaceSize = t.workspace;
    r.state = CUBLAS_STATUS_SUCCESS;
    chosen.push_back(r);
    std::printf("{\"phase\":0,\"algo\":\"%s\",\"burst_us\":%.2f}\n", describe(t.algo).c_str(), t.us);
  }
  double heuristic_us = p.candidates.empty()
                            ? 0
                            : burst_us(p, p.candidates[0].algo, ops, shape_index, nshapes, copies, iters);
  std::printf("{\"phase\":0,\"algorithms\":%d,\"checked\":%ld,\"timed\":%ld,\"heuristic_first_us\":%.2f,"
              "\"fastest_us\":%.2f}\n",
              count, checked, timed, heuristic_us, all.empty() ? 0.0 : all.front().us);
  std::fflush(stdout);
  return chosen;
}

// Largest |a - b| over the largest |b|, for n values; infinite where a value is not finite.
__global__ void relative_difference(const __nv_bfloat16* a, const __nv_bfloat16* b, size_t n, float* result) {
  float diff = 0, scale = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float x = __bfloat162float(a[i]), y = __bfloat162float(b[i]);
    const float d = fabsf(x - y);
    diff = d <= 3.4e38f ? fmaxf(diff, d) : INFINITY;  // NaN compares false
    scale = fmaxf(scale, fabsf(y));
  }
  // Non-negative floats order as their bit patterns.
  atomicMax(reinterpret_cast<unsigned*>(result), __float_as_uint(diff));
  atomicMax(reinterpret_cast<unsigned*>(result) + 1, __float_as_uint(scale));
}

// Comma-separated positive integers; empty on anything else.
std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> v;
  for (const char* p = s; *p;) {
    char* end = nullptr;
    const long long value = std::strtoll(p, &end, 10);
    if (end == p || value <= 0 || (*end != ',' && *end != '\0')) return {};
    v.push_back(value);
    p = *end == ',' ? end + 1 : end;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> rows = {256, 1024};
  double seconds = 3, layer_seconds = 8;
  int want = 8, copies = 4, rounds = 2, search_keep = 0;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 == argc) {
      std::fprintf(stderr, "%s needs a value\n", argv[i]);
      return 2;
    }
    if (flag == "--rows") rows = parse_list(argv[i + 1]);
    else if (flag == "--seconds") seconds = std::atof(argv[i + 1]);
    else if (flag == "--layer-seconds") layer_seconds = std::atof(argv[i + 1]);
    else if (flag == "--candidates") want = std::atoi(argv[i + 1]);
    else if (flag == "--copies") copies = std::atoi(argv[i + 1]);
    else if (flag == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (flag == "--search") search_keep = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (rows.empty() || seconds <= 0 || layer_seconds <= 0 || want <= 0 || copies <= 0 || rounds <= 0 ||
      search_keep < 0) {
    std::fprintf(stderr, "--rows takes positive integers separated by commas; --seconds, --layer-seconds, "
                         "--candidates, --copies and --rounds positive numbers; --search a count\n");
    return 2;
  }
  if (!nvml.open()) {
    std::fprintf(stderr, "NVML unavailable\n");
    return 1;
  }
  CHECK_LT(cublasLtCreate(&handle));
  CHECK_CUDA(cudaMalloc(&workspace, kWorkspace));
  const int64_t max_rows = *std::max_element(rows.begin(), rows.end());
  Operands ops;
  uint64_t seed = 1;
  for (int c = 0; c < copies; ++c) {
    for (const Shape& s : kShapes) {
      __nv_bfloat16* w;
      CHECK_CUDA(cudaMalloc(&w, s.m * s.k * 2));
      fill_normal<<<1024, 256>>>(w, s.m * s.k, 0.02f, seed++);
      ops.weights.push_back(w);
    }
  }
  CHECK_CUDA(cudaMalloc(&ops.x, max_rows * 18944 * 2));
  CHECK_CUDA(cudaMalloc(&ops.out, max_rows * 18944 * 2));
  __nv_bfloat16* reference = nullptr;  // the heuristic's first's output, for each shape
  float* difference = nullptr;
  CHECK_CUDA(cudaMalloc(&reference, max_rows * 18944 * 2));
  CHECK_CUDA(cudaMalloc(&difference, 2 * sizeof(float)));
  fill_normal<<<1024, 256>>>(ops.x, max_rows * 18944, 1.0f, seed++);
  CHECK_CUDA(cudaDeviceSynchronize());
  const int nshapes = sizeof(kShapes) / sizeof(kShapes[0]);

  for (int64_t n : rows) {
    std::vector<Problem> problems;
    std::vector<int> best(nshapes, 0);
    for (int s = 0; s < nshapes; ++s) {
      const Shape& shape = kShapes[s];
      problems.push_back(make_problem(shape.m, n, shape.k, want));
      if (s == 3) {  // up has gate's shape: same candidates, same pick
        problems[3].candidates = problems[2].candidates;
        best[3] = best[2];
        continue;
      }
      Problem& searched = problems.back();
      if (search_keep > 0) {
        std::printf("{\"phase\":0,\"rows\":%lld,\"shape\":\"%s\"}\n", static_cast<long long>(n), shape.name);
        const auto found = search(searched, ops, s, nshapes, copies, search_keep);
        searched.candidates.insert(searched.candidates.end(), found.begin(), found.end());
      }
      const Problem& p = searched;
      const double flops = 2.0 * n * shape.m * shape.k;
      // `algo` back to back over the weight copies, at the cap.
      auto sustain_algo = [&](const cublasLtMatmulAlgo_t& algo) {
        int copy = 0;
        return sustain(
            [&] {
              matmul(p, algo, ops.weights[copy * nshapes + s], ops.x, ops.out);
              copy = (copy + 1) % copies;
            },
            flops, seconds);
      };
      // The card to its cap first: after the start, or the search's short bursts, it draws
      // less for a while, and the first candidate measured would be flattered.
      sustain_algo(p.candidates[0].algo);
      double best_rate = 0;
      for (size_t c = 0; c < p.candidates.size(); ++c) {
        const cublasLtMatmulAlgo_t& algo = p.candidates[c].algo;
        matmul(p, algo, ops.weights[s], ops.x, c == 0 ? reference : ops.out);
        CHECK_CUDA(cudaMemset(difference, 0, 2 * sizeof(float)));
        relative_difference<<<264, 256>>>(ops.out, reference, size_t(n) * shape.m, difference);
        float diff[2] = {0, 0};
        CHECK_CUDA(cudaMemcpy(diff, difference, sizeof(diff), cudaMemcpyDeviceToHost));
        const Reading r = sustain_algo(algo);
        std::printf("{\"phase\":1,\"rows\":%lld,\"shape\":\"%s\",\"candidate\":%zu,\"algo\":\"%s\",\"tflops\":%.1f,"
                    "\"clock_mhz\":%.0f,\"watts\":%.0f,\"relative_difference\":%.2e}\n",
                    static_cast<long long>(n), shape.name, c, describe(algo).c_str(), r.tflops, r.clock_mhz, r.watts,
                    c == 0 ? 0.0 : diff[0] / std::max(diff[1], 1e-30f));
        std::fflush(stdout);
        if (r.tflops > best_rate) {
          best_rate = r.tflops;
          best[s] = static_cast<int>(c);
        }
      }
    }
    // Phase 2: the layer's five products, layer after layer.
    double layer_flops = 0;
    for (const Shape& s : kShapes) layer_flops += 2.0 * n * s.m * s.k;
    for (int round = 0; round < rounds; ++round) {
      for (int pick = 0; pick < 2; ++pick) {
        int copy = 0;
        const Reading r = sustain(
            [&] {
              for (int s = 0; s < nshapes; ++s) {
                const int c = pick == 0 ? 0 : best[s];
                matmul(problems[s], problems[s].candidates[c].algo, ops.weights[copy * nshapes + s], ops.x,
                       ops.out);
              }
              copy = (copy + 1) % copies;
            },
            layer_flops, layer_seconds);
        std::printf("{\"phase\":2,\"rows\":%lld,\"round\":%d,\"algos\":\"%s\",\"picks\":[%d,%d,%d,%d,%d],"
                    "\"tflops\":%.1f,\"clock_mhz\":%.0f,\"watts\":%.0f}\n",
                    static_cast<long long>(n), round, pick == 0 ? "heuristic" : "sustained-best",
                    pick == 0 ? 0 : best[0], pick == 0 ? 0 : best[1], pick == 0 ? 0 : best[2],
                    pick == 0 ? 0 : best[3], pick == 0 ? 0 : best[4], r.tflops, r.clock_mhz, r.watts);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
