// --device names: "gpu" and "cuda" (its first name) select the GPU backend on NVIDIA and
// AMD builds alike, with an optional ":N" index; anything else is a one-line error.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "qwenrt/engine.h"
#include "test_util.h"

namespace qwenrt {
namespace {

using test::expect_error;

TEST(DeviceNames, MalformedIndexIsRejected) {
  for (const char* bad : {"gpu:", "gpu:x", "gpu:1x", "gpu:-1", "cuda:", "cuda:two"}) {
    expect_error([&] { (void)make_backend(bad, DType::kBF16, 1); }, ErrorCategory::kInvalidArgument,
                 {bad});
  }
}

TEST(DeviceNames, UnknownNamesAreRejected) {
  for (const char* bad : {"tpu", "gpux", "cudax", "rocm", "GPU"}) {
    expect_error([&] { (void)make_backend(bad, DType::kBF16, 1); }, ErrorCategory::kInvalidArgument,
                 {bad, "gpu:N"});
  }
}

TEST(DeviceNames, GpuAndCudaNameTheGpuBackend) {
  if (gpu_backend_available()) GTEST_SKIP() << "a GPU is usable here: the names would open it";
  // Without a usable GPU both names reach the GPU factory, which says why it cannot open one
  // (no GPU backend in this build, or no device): not a naming error.
  for (const char* name : {"gpu", "gpu:0", "cuda", "cuda:1"}) {
    try {
      (void)make_backend(name, DType::kBF16, 1);
      ADD_FAILURE() << name << " opened a GPU backend without a usable GPU";
    } catch (const Error& error) {
      EXPECT_NE(error.category(), ErrorCategory::kInvalidArgument) << name << ": " << error.what();
    }
  }
}

}  // namespace
}  // namespace qwenrt
