// Matrix products through cuBLASLt: out[n, m] = x[n, k] · w[m, k]ᵀ, bf16/fp16 operands,
// fp32 accumulation and scale, output in the activation dtype or fp32 (logits).
// Layout: in cuBLASLt's column-major terms outᵀ (m×n, ld m) = Wᵀ · Xᵀ with W stored k×m
// (ld k, transposed: the "TN" case every GPU generation has fast kernels for) and X
// stored k×n (ld k). Descriptors are cached per (m, n, k, dtypes, pointer alignments), the
// heuristic's first algorithm per power-of-two bucket of n; the workspace is allocated once
// by the backend.
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

  // The heuristic costs about a millisecond per shape, and a prompt of a new length has
  // seven shapes: one query per power-of-two bucket of rows (n), reused for every n in it
  // once cuBLASLt confirms the algorithm runs at that n, keeps it off the first token.
  static int64_t bucket(int64_t n) {
    int64_t b = 1;
    while (b < n) b *= 2;
    return b;
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
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    status = cublasLtMatmulAlgoGetHeuristic(handle, plan.desc, plan.a, plan.b, plan.d, plan.d, preference, 1,
                                            &result, &found);
    cublasLtMatmulPreferenceDestroy(preference);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0) return false;
    algo = result.algo;
    return true;
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
    Key bucket_key = key;
    std::get<1>(bucket_key) = bucket(n);
    auto found = algos.find(bucket_key);
    if (found == algos.end()) {
      // The bucket's algorithm, chosen for its largest row count.
      const bool exact = bucket(n) == n;
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

Matmul::Matmul(void* workspace, size_t workspace_bytes)
    : impl_(std::make_unique<Impl>()) {
  impl_->workspace = workspace;
  impl_->workspace_bytes = workspace_bytes;
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
