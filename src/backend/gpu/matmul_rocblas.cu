// Matrix products through rocBLAS (HIP builds that found it; Debian and Ubuntu package it,
// unlike hipBLASLt): out[n, m] = x[n, k] · w[m, k]ᵀ, bf16/fp16 operands, fp32 accumulation
// and scale, output in the activation dtype or fp32 (logits). rocblas_gemm_ex takes every
// one of those type combinations. The same column-major "TN" formulation as the cuBLASLt
// and hipBLASLt paths: outᵀ (m×n, ld m) = Wᵀ · Xᵀ with W stored k×m (ld k, transposed) and
// X stored k×n (ld k). rocBLAS picks its kernel per call from the Tensile library it ships
// for the device's gfx target; a target it has no library for fails on the first call,
// with rocBLAS's status in the message (docs/AMD.md lists the packaged targets).
#include <rocblas/rocblas.h>

#include <climits>

#include "backend/gpu/common.h"

namespace qwenrt::cuda {
namespace {

rocblas_datatype rocblas_type(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return rocblas_datatype_bf16_r;
    case DType::kF16:
      return rocblas_datatype_f16_r;
    case DType::kF32:
      return rocblas_datatype_f32_r;
    default:
      throw Error(ErrorCategory::kUnsupported, "matmul: int32 operands");
  }
}

void check_rocblas(rocblas_status status, const char* call, const std::string& detail) {
  if (status == rocblas_status_success) return;
  throw Error(
      status == rocblas_status_memory_error ? ErrorCategory::kOutOfMemory : ErrorCategory::kDevice,
      std::string("matmul: ") + call + " failed (" + rocblas_status_to_string(status) + ") for " +
          detail);
}

}  // namespace

struct Matmul::Impl {
  rocblas_handle handle = nullptr;
  Stream stream{};
  bool stream_set = false;

  ~Impl() {
    if (handle != nullptr) (void)rocblas_destroy_handle(handle);
  }
};

Matmul::Matmul(void* /*workspace*/, size_t /*workspace_bytes*/, int /*multiprocessors*/) : impl_(std::make_unique<Impl>()) {
  // rocBLAS manages its own workspace; the backend's is for the Lt libraries.
  check_rocblas(rocblas_create_handle(&impl_->handle), "rocblas_create_handle", "handle creation");
}

Matmul::~Matmul() = default;

void Matmul::run(const Tensor& x, const Tensor& w, Tensor out, Stream stream) {
  const int64_t n = x.rows, k = x.cols, m = w.rows;
  if (!check_matmul(x, w, out)) return;
  const auto sizes = [&] { return matmul_sizes(x, w, out); };
  // rocBLAS takes 32-bit sizes and leading dimensions.
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX) {
    throw Error(ErrorCategory::kUnsupported, "matmul: rocBLAS takes sizes below 2^31: " + sizes());
  }
  if (!impl_->stream_set || impl_->stream != stream) {
    check_rocblas(rocblas_set_stream(impl_->handle, stream), "rocblas_set_stream", sizes());
    impl_->stream = stream;
    impl_->stream_set = true;
  }
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  const rocblas_datatype in_type = rocblas_type(x.dtype);
  const rocblas_datatype out_type = rocblas_type(out.dtype);
  const float alpha = 1.f;
  const float beta = 0.f;
  // C and D are the same matrix (beta 0 reads nothing from it).
  check_rocblas(rocblas_gemm_ex(impl_->handle, rocblas_operation_transpose, rocblas_operation_none,
                                mi, ni, ki, &alpha, w.data, in_type, ki, x.data, in_type, ki, &beta,
                                out.data, out_type, mi, out.data, out_type, mi,
                                rocblas_datatype_f32_r, rocblas_gemm_algo_standard,
                                /*solution_index=*/0, /*flags=*/0),
                "rocblas_gemm_ex", sizes());
}

}  // namespace qwenrt::cuda
