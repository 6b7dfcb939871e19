// Matrix products through hipBLASLt (HIP builds that found it; ROCm 6.0 or newer):
// out[n, m] = x[n, k] · w[m, k]ᵀ, bf16/fp16 operands, fp32 accumulation and scale, output
// in the activation dtype or fp32 (logits). The same column-major "TN" formulation as the
// cuBLASLt path (matmul_cublaslt.cu): outᵀ (m×n, ld m) = Wᵀ · Xᵀ with W stored k×m (ld k,
// transposed) and X stored k×n (ld k). Descriptors and the heuristic's first algorithm are
// cached per (m, n, k, dtypes); the workspace is allocated once by the backend.
// Compiled only when CMake finds hipBLASLt: no machine this was written on had it, so it
// has been neither compiled nor run (docs/AMD.md).
#include <hipblaslt/hipblaslt.h>

#include <map>
#include <tuple>

#include "backend/gpu/common.h"

namespace qwenrt::cuda {
namespace {

hipDataType hip_type(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return HIP_R_16BF;
    case DType::kF16: return HIP_R_16F;
    case DType::kF32: return HIP_R_32F;
    default: throw Error(ErrorCategory::kUnsupported, "matmul: int32 operands");
  }
}

}  // namespace

#define QWENRT_HIPBLAS_CALL(call, detail)                                                   \
  do {                                                                                      \
    const hipblasStatus_t qwenrt_status_ = (call);                                          \
    if (qwenrt_status_ != HIPBLAS_STATUS_SUCCESS)                                           \
      throw Error(ErrorCategory::kDevice, std::string("matmul: ") + #call + " failed (status " + \
                                              std::to_string(static_cast<int>(qwenrt_status_)) + \
                                              ") for " + (detail));                         \
  } while (0)

struct Matmul::Impl {
  using Key = std::tuple<int64_t, int64_t, int64_t, DType, DType>;
  struct Plan {
    hipblasLtMatmulDesc_t desc = nullptr;
    hipblasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    hipblasLtMatmulAlgo_t algo{};
  };

  hipblasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::map<Key, Plan> plans;

  static void destroy(Plan& plan) {
    if (plan.a != nullptr) (void)hipblasLtMatrixLayoutDestroy(plan.a);
    if (plan.b != nullptr) (void)hipblasLtMatrixLayoutDestroy(plan.b);
    if (plan.d != nullptr) (void)hipblasLtMatrixLayoutDestroy(plan.d);
    if (plan.desc != nullptr) (void)hipblasLtMatmulDescDestroy(plan.desc);
  }

  ~Impl() {
    for (auto& [key, plan] : plans) destroy(plan);
    if (handle != nullptr) (void)hipblasLtDestroy(handle);
  }

  template <typename Sizes>
  const Plan& plan_for(const Key& key, const Sizes& describe) {
    auto it = plans.find(key);
    if (it != plans.end()) return it->second;
    const std::string sizes = describe();
    const auto [m, n, k, in_dtype, out_dtype] = key;
    Plan plan;
    try {
      QWENRT_HIPBLAS_CALL(hipblasLtMatmulDescCreate(&plan.desc, HIPBLAS_COMPUTE_32F, HIP_R_32F), sizes);
      const hipblasOperation_t transpose = HIPBLAS_OP_T;
      QWENRT_HIPBLAS_CALL(hipblasLtMatmulDescSetAttribute(plan.desc, HIPBLASLT_MATMUL_DESC_TRANSA,
                                                          &transpose, sizeof(transpose)),
                          sizes);
      const hipDataType in_type = hip_type(in_dtype);
      QWENRT_HIPBLAS_CALL(hipblasLtMatrixLayoutCreate(&plan.a, in_type, k, m, k), sizes);
      QWENRT_HIPBLAS_CALL(hipblasLtMatrixLayoutCreate(&plan.b, in_type, k, n, k), sizes);
      QWENRT_HIPBLAS_CALL(hipblasLtMatrixLayoutCreate(&plan.d, hip_type(out_dtype), m, n, m), sizes);

      hipblasLtMatmulPreference_t preference = nullptr;
      QWENRT_HIPBLAS_CALL(hipblasLtMatmulPreferenceCreate(&preference), sizes);
      const uint64_t max_workspace = workspace_bytes;
      (void)hipblasLtMatmulPreferenceSetAttribute(
          preference, HIPBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace, sizeof(max_workspace));
      hipblasLtMatmulHeuristicResult_t result{};
      int found = 0;
      const hipblasStatus_t status = hipblasLtMatmulAlgoGetHeuristic(
          handle, plan.desc, plan.a, plan.b, plan.d, plan.d, preference, 1, &result, &found);
      (void)hipblasLtMatmulPreferenceDestroy(preference);
      if (status != HIPBLAS_STATUS_SUCCESS || found == 0) {
        throw Error(ErrorCategory::kDevice, "matmul: hipBLASLt has no algorithm for " + sizes +
                                                " (status " + std::to_string(static_cast<int>(status)) + ")");
      }
      plan.algo = result.algo;
    } catch (...) {
      destroy(plan);
      throw;
    }
    return plans.emplace(key, plan).first->second;
  }
};

Matmul::Matmul(void* workspace, size_t workspace_bytes, int /*multiprocessors*/) : impl_(std::make_unique<Impl>()) {
  impl_->workspace = workspace;
  impl_->workspace_bytes = workspace_bytes;
  QWENRT_HIPBLAS_CALL(hipblasLtCreate(&impl_->handle), std::string("handle creation"));
}

Matmul::~Matmul() = default;

void Matmul::run(const Tensor& x, const Tensor& w, Tensor out, Stream stream) {
  const int64_t n = x.rows, k = x.cols, m = w.rows;
  if (!check_matmul(x, w, out)) return;
  const auto sizes = [&] { return matmul_sizes(x, w, out); };
  const Impl::Key key{m, n, k, x.dtype, out.dtype};
  const Impl::Plan& plan = impl_->plan_for(key, sizes);
  const float alpha = 1.f;
  const float beta = 0.f;
  QWENRT_HIPBLAS_CALL(hipblasLtMatmul(impl_->handle, plan.desc, &alpha, w.data, plan.a, x.data,
                                      plan.b, &beta, out.data, plan.d, out.data, plan.d, &plan.algo,
                                      impl_->workspace, impl_->workspace_bytes, stream),
                      sizes());
}

}  // namespace qwenrt::cuda
