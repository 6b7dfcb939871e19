// Linked into builds without a GPU toolkit: the GPU factory explains what is missing.
#include "backend/backend.h"
#include "core/error.h"

namespace qwenrt {

bool gpu_backend_available() { return false; }

GpuRuntimeInfo query_gpus() {
  GpuRuntimeInfo info;
  info.error = "this build has no GPU backend (configured without nvcc)";
  return info;
}

std::unique_ptr<Backend> make_gpu_backend(DType /*dtype*/, int /*device_index*/) {
  throw Error(ErrorCategory::kUnsupported,
              "this qwenrt build has no CUDA backend (it was configured without nvcc); "
              "rebuild with `cmake --preset cuda` on a machine with the CUDA toolkit, or use "
              "--device cpu");
}

}  // namespace qwenrt
