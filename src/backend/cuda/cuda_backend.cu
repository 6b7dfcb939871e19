// Placeholder translation unit; the CUDA backend is being written.
#include "backend/backend.h"
#include "core/error.h"

namespace qwenrt {

bool cuda_backend_available() { return false; }

std::unique_ptr<Backend> make_cuda_backend(DType /*dtype*/, int /*device_index*/) {
  throw Error(ErrorCategory::kUnsupported, "the CUDA backend is not implemented yet");
}

}  // namespace qwenrt
