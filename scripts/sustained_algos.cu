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
//   nvcc -std=c++17 -O2 -arch=sm_90 scripts/sustained_algos.cu -lcublasLt -ldl -o /tmp/sa
//   /tmp/sa --rows 256,1024 --seconds 3 --candidates 8
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
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
const size_t kWorkspace = 64ull << 20;
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
  int id = 0, tile = 0, stages = 0, splitk = 0, swizzle = 0, cluster = 0, reduction = 0;
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
  char buf[160];
  std::snprintf(buf, sizeof(buf), "id %d tile %d stages %d splitk %d swizzle %d cluster %d reduction %d", id, tile,
                stages, splitk, swizzle, cluster, reduction);
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
  int want = 8, copies = 4, rounds = 2;
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
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (rows.empty() || seconds <= 0 || layer_seconds <= 0 || want <= 0 || copies <= 0 || rounds <= 0) {
    std::fprintf(stderr, "--rows takes positive integers separated by commas; --seconds, --layer-seconds, "
                         "--candidates, --copies and --rounds positive numbers\n");
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
        best[3] = best[2];
        continue;
      }
      const Problem& p = problems.back();
      const double flops = 2.0 * n * shape.m * shape.k;
      double best_rate = 0;
      for (size_t c = 0; c < p.candidates.size(); ++c) {
        int copy = 0;
        const cublasLtMatmulAlgo_t& algo = p.candidates[c].algo;
        const Reading r = sustain(
            [&] {
              matmul(p, algo, ops.weights[copy * nshapes + s], ops.x, ops.out);
              copy = (copy + 1) % copies;
            },
            flops, seconds);
        std::printf("{\"phase\":1,\"rows\":%lld,\"shape\":\"%s\",\"candidate\":%zu,\"algo\":\"%s\",\"tflops\":%.1f,"
                    "\"clock_mhz\":%.0f,\"watts\":%.0f}\n",
                    static_cast<long long>(n), shape.name, c, describe(algo).c_str(), r.tflops, r.clock_mhz, r.watts);
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
