// Matrix products through cuBLASLt: out[n, m] = x[n, k] · w[m, k]ᵀ, bf16/fp16 operands,
// fp32 accumulation and scale, output in the activation dtype or fp32 (logits).
// Layout: in cuBLASLt's column-major terms outᵀ (m×n, ld m) = Wᵀ · Xᵀ with W stored k×m
// (ld k, transposed: the "TN" case every GPU generation has fast kernels for) and X
// stored k×n (ld k). Descriptors and the heuristic's first algorithm are cached per
// (m, n, k, dtypes, pointer alignments); the workspace is allocated once by the backend.
// Bound: weight bytes at small n (decode GEMV), tensor-core throughput at large n.
#include <cublasLt.h>

#include <map>
#include <tuple>

#include "backend/cuda/common.h"

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
  std::map<Key, Plan> plans;

  ~Impl() {
    for (auto& [key, plan] : plans) {
      cublasLtMatrixLayoutDestroy(plan.a);
      cublasLtMatrixLayoutDestroy(plan.b);
      cublasLtMatrixLayoutDestroy(plan.d);
      cublasLtMatmulDescDestroy(plan.desc);
    }
    if (handle != nullptr) cublasLtDestroy(handle);
  }

  template <typename Sizes>
  const Plan& plan_for(const Key& key, const Sizes& describe) {
    auto it = plans.find(key);
    if (it != plans.end()) return it->second;
    const std::string sizes = describe();
    const auto [m, n, k, in_dtype, out_dtype, align_a, align_b, align_d] = key;
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

    cublasLtMatmulPreference_t preference = nullptr;
    QWENRT_CUBLAS_CALL(cublasLtMatmulPreferenceCreate(&preference), sizes);
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
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        handle, plan.desc, plan.a, plan.b, plan.d, plan.d, preference, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(preference);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
      cublasLtMatrixLayoutDestroy(plan.a);
      cublasLtMatrixLayoutDestroy(plan.b);
      cublasLtMatrixLayoutDestroy(plan.d);
      cublasLtMatmulDescDestroy(plan.desc);
      throw Error(ErrorCategory::kDevice, "matmul: cuBLASLt has no algorithm for " + sizes +
                                              " (" + cublasLtGetStatusString(status) + ")");
    }
    plan.algo = result.algo;
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
  // Built only on the error paths: this runs ~200 times per decoded token.
  const auto sizes = [&] {
    return "x " + shape_string(x) + " · w " + shape_string(w) + "ᵀ -> out " + shape_string(out);
  };
  QWENRT_CHECK(w.cols == k && out.rows == n && out.cols == m && x.dtype == w.dtype &&
                   (out.dtype == x.dtype || out.dtype == DType::kF32),
               "matmul: inconsistent shapes or dtypes: " + sizes());
  if (n == 0 || m == 0) return;
  if (x.dtype != DType::kBF16 && x.dtype != DType::kF16) {
    throw Error(ErrorCategory::kUnsupported, "matmul: the CUDA backend takes bf16/fp16 operands: " + sizes());
  }
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
