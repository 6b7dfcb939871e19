// Matrix products through cuBLASLt: out[n, m] = x[n, k] · w[m, k]ᵀ, bf16/fp16 operands,
// fp32 accumulation and scale, output in the activation dtype or fp32 (logits).
// Layout: in cuBLASLt's column-major terms outᵀ (m×n, ld m) = Wᵀ · Xᵀ with W stored k×m
// (ld k, transposed: the "TN" case every GPU generation has fast kernels for) and X
// stored k×n (ld k). Descriptors are cached per (m, n, k, dtypes, pointer alignments), one
// of the heuristic's candidates (`pick`: its first but for one measured case) per bucket of
// n (powers of two to 128, then multiples of 64 to 256 and of 128 above); the workspace is
// allocated once by the backend.
// Bound: weight bytes at small n (decode GEMV), tensor-core throughput at large n.
#include <cublasLt.h>

#include <map>
#include <tuple>

#include "backend/gpu/common.h"

namespace qwenrt::cuda {
namespace {

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    case DType::kF32: return CUDA_R_32F;
    default: throw Error(ErrorCategory::kUnsupported, "matmul: int32 operands");
  }
}

uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

}  // namespace

#define QWENRT_CUBLAS_CALL(call, detail)                                                 \
  do {                                                                                   \
    cublasStatus_t qwenrt_status_ = (call);                                              \
    if (qwenrt_status_ != CUBLAS_STATUS_SUCCESS)                                         \
      throw Error(ErrorCategory::kDevice, std::string("matmul: ") + #call + " failed (" + \
                                              cublasLtGetStatusString(qwenrt_status_) +  \
                                              ") for " + (detail));                      \
  } while (0)

struct Matmul::Impl {
  using Key = std::tuple<int64_t, int64_t, int64_t, DType, DType, uint32_t, uint32_t, uint32_t>;
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };

  cublasLtHandle_t handle = nullptr;
  int sms = 0;  // the device's multiprocessors (0: unknown, the heuristic's first candidate everywhere)
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::map<Key, Plan> plans;                   // per exact shape: descriptors and algorithm
  std::map<Key, cublasLtMatmulAlgo_t> algos;   // per row-count bucket: the heuristic's pick

  ~Impl() {
    for (auto& [key, plan] : plans) destroy(plan);
    if (handle != nullptr) cublasLtDestroy(handle);
  }

  static void destroy(Plan& plan) {
    cublasLtMatrixLayoutDestroy(plan.a);
    cublasLtMatrixLayoutDestroy(plan.b);
    cublasLtMatrixLayoutDestroy(plan.d);
    cublasLtMatmulDescDestroy(plan.desc);
  }

  // Descriptors for the shape `key` names.
  Plan describe(const Key& key, const std::string& sizes) {
    const int64_t m = std::get<0>(key), n = std::get<1>(key), k = std::get<2>(key);
    const DType in_dtype = std::get<3>(key), out_dtype = std::get<4>(key);
    Plan plan;
    QWENRT_CUBLAS_CALL(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), sizes);
    const cublasOperation_t transpose = CUBLAS_OP_T;
    QWENRT_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                      &transpose, sizeof(transpose)),
                       sizes);
    const cudaDataType_t in_type = cuda_type(in_dtype);
    QWENRT_CUBLAS_CALL(cublasLtMatrixLayoutCreate(&plan.a, in_type, k, m, k), sizes);
    QWENRT_CUBLAS_CALL(cublasLtMatrixLayoutCreate(&plan.b, in_type, k, n, k), sizes);
    QWENRT_CUBLAS_CALL(cublasLtMatrixLayoutCreate(&plan.d, cuda_type(out_dtype), m, n, m), sizes);
    return plan;
  }

  // The heuristic's first algorithm for `plan`'s shape; false when it has none.
  bool heuristic(const Key& key, const Plan& plan, cublasLtMatmulAlgo_t& algo, cublasStatus_t& status) {
    const uint32_t align_a = std::get<5>(key), align_b = std::get<6>(key), align_d = std::get<7>(key);
    cublasLtMatmulPreference_t preference = nullptr;
    status = cublasLtMatmulPreferenceCreate(&preference);
    if (status != CUBLAS_STATUS_SUCCESS) return false;
    const uint64_t max_workspace = workspace_bytes;
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                         &max_workspace, sizeof(max_workspace));
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                         &align_a, sizeof(align_a));
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                         &align_b, sizeof(align_b));
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                         &align_d, sizeof(align_d));
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                         &align_d, sizeof(align_d));
    cublasLtMatmulHeuristicResult_t results[kCandidates]{};
    int found = 0;
    status = cublasLtMatmulAlgoGetHeuristic(handle, plan.desc, plan.a, plan.b, plan.d, plan.d, preference,
                                            kCandidates, results, &found);
    cublasLtMatmulPreferenceDestroy(preference);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0) return false;
    algo = results[pick(results, found, std::get<0>(key), std::get<1>(key))].algo;
    return true;
  }

  static constexpr int kCandidates = 8;
  // A tile: its cublasLtMatmulTile_t value (fixed by the library's ABI; CUDA 12.4's header
  // has no name for 144x128) and its extent in output features (m) and rows (n).
  struct Tile {
    int id, m, n;
  };
  static constexpr Tile kTile192x128{31, 192, 128};   // CUBLASLT_MATMUL_TILE_192x128
  static constexpr Tile kTile144x128{184, 144, 128};  // CUBLASLT_MATMUL_TILE_144x128

  static int config_of(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute) {
    int value = 0;
    size_t written = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &value, sizeof(value), &written);
    return value;
  }

  // The share of its waves' slots a launch of m/tile.m x n/tile.n blocks fills on `sms`
  // multiprocessors (one block each); 0 below one wave.
  static double wave_fill(int64_t m, int64_t n, const Tile& tile, int sms) {
    const int64_t blocks = ((m + tile.m - 1) / tile.m) * ((n + tile.n - 1) / tile.n);
    if (sms <= 0 || blocks < sms) return 0;
    return static_cast<double>(blocks) / static_cast<double>((blocks + sms - 1) / sms * sms);
  }

  // Which of the heuristic's candidates to take for outputs of m features by n rows. A
  // server under steady load runs the card at its power cap, where a product's rate follows
  // its work per joule rather than its burst speed. There the heuristic's first choice for
  // the 7B's gate and up products at 512 and 1,024 rows, a 192x128 tile, is the slower:
  // 598 -> 632 and 638 -> 671 TFLOP/s with a 144x128 tile it also lists (both fill whole
  // waves), 256 streams through the server +1.3 to +3.2%, 512-token prompts +1.2%
  // (scripts/sustained_algos.cu and docs/PERFORMANCE.md, H200). Where 144x128 fills its
  // waves less well (Qwen3-8B's 12,288 features: 2.6 waves against 1.94) it lost 4% on
  // prompts, so it is taken only at a wave fill no worse than the first's and both without
  // split-K; otherwise the first.
  int pick(const cublasLtMatmulHeuristicResult_t* results, int found, int64_t m, int64_t n) const {
    const cublasLtMatmulAlgo_t& first = results[0].algo;
    if (config_of(first, CUBLASLT_ALGO_CONFIG_TILE_ID) != kTile192x128.id ||
        config_of(first, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) > 1)
      return 0;
    const double first_fill = wave_fill(m, n, kTile192x128, sms);
    for (int i = 1; i < found; ++i) {
      const cublasLtMatmulAlgo_t& algo = results[i].algo;
      if (config_of(algo, CUBLASLT_ALGO_CONFIG_TILE_ID) == kTile144x128.id &&
          config_of(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) <= 1)
        return first_fill > 0 && wave_fill(m, n, kTile144x128, sms) >= first_fill ? i : 0;
    }
    return 0;
  }

  bool runs(const Plan& plan, const cublasLtMatmulAlgo_t& algo) {
    cublasLtMatmulHeuristicResult_t result{};
    return cublasLtMatmulAlgoCheck(handle, plan.desc, plan.a, plan.b, plan.d, plan.d, &algo, &result) ==
               CUBLAS_STATUS_SUCCESS &&
           result.workspaceSize <= workspace_bytes;
  }

  template <typename Sizes>
  const Plan& plan_for(const Key& key, const Sizes& describe_sizes) {
    auto it = plans.find(key);
    if (it != plans.end()) return it->second;
    const std::string sizes = describe_sizes();
    const int64_t n = std::get<1>(key);
    Plan plan = describe(key, sizes);
    // The heuristic costs about a millisecond per shape, and a prompt of a new length has
    // seven shapes: one query per bucket of rows (matmul_row_bucket: 64 or 128 rows wide
    // above 128), reused for every n in it once cuBLASLt confirms the algorithm runs at that
    // n, keeps it off the first token.
    Key bucket_key = key;
    std::get<1>(bucket_key) = matmul_row_bucket(n);
    auto found = algos.find(bucket_key);
    if (found == algos.end()) {
      // The bucket's algorithm, chosen for its largest row count.
      const bool exact = std::get<1>(bucket_key) == n;
      Plan largest = exact ? plan : describe(bucket_key, sizes);
      cublasLtMatmulAlgo_t algo{};
      cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
      const bool ok = heuristic(bucket_key, largest, algo, status);
      if (!exact) destroy(largest);
      if (ok) found = algos.emplace(bucket_key, algo).first;
    }
    if (found != algos.end() && runs(plan, found->second)) {
      plan.algo = found->second;
    } else {
      cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
      if (!heuristic(key, plan, plan.algo, status)) {
        destroy(plan);
        throw Error(ErrorCategory::kDevice, "matmul: cuBLASLt has no algorithm for " + sizes + " (" +
                                                (status == CUBLAS_STATUS_SUCCESS
                                                     ? std::string("no candidate")
                                                     : std::string(cublasLtGetStatusString(status))) +
                                                ")");
      }
    }
    return plans.emplace(key, plan).first->second;
  }
};

Matmul::Matmul(void* workspace, size_t workspace_bytes, int multiprocessors)
    : impl_(std::make_unique<Impl>()) {
  impl_->workspace = workspace;
  impl_->workspace_bytes = workspace_bytes;
  impl_->sms = multiprocessors;
  QWENRT_CUBLAS_CALL(cublasLtCreate(&impl_->handle), std::string("handle creation"));
}

Matmul::~Matmul() = default;

void Matmul::run(const Tensor& x, const Tensor& w, Tensor out, Stream stream) {
  const int64_t n = x.rows, k = x.cols, m = w.rows;
  if (!check_matmul(x, w, out)) return;
  // Built only on the error paths: this runs ~200 times per decoded token.
  const auto sizes = [&] { return matmul_sizes(x, w, out); };
  const Impl::Key key{m, n, k, x.dtype, out.dtype, alignment_of(w.data), alignment_of(x.data),
                      alignment_of(out.data)};
  const Impl::Plan& plan = impl_->plan_for(key, sizes);
  const float alpha = 1.f;
  const float beta = 0.f;
  QWENRT_CUBLAS_CALL(cublasLtMatmul(impl_->handle, plan.desc, &alpha, w.data, plan.a, x.data,
                                    plan.b, &beta, out.data, plan.d, out.data, plan.d, &plan.algo,
                                    impl_->workspace, impl_->workspace_bytes, stream),
                     sizes());
}

}  // namespace qwenrt::cuda
