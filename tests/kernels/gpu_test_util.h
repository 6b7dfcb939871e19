// Helpers for the CUDA op tests: device tensors filled from host data or poisoned with
// NaN, downloads to fp32, random inputs already rounded to the device dtype (so the
// host reference sees exactly the device's inputs) and norm-wise comparisons.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "core/error.h"

namespace qwenrt::test {

inline std::unique_ptr<Backend>& gpu_backend(DType dtype) {
  static std::unique_ptr<Backend> bf16;
  static std::unique_ptr<Backend> fp16;
  auto& slot = dtype == DType::kBF16 ? bf16 : fp16;
  if (!slot) slot = make_gpu_backend(dtype, 0);
  return slot;
}

#define QWENRT_REQUIRE_GPU()                                                   \
  do {                                                                         \
    if (!::qwenrt::gpu_backend_available()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

// A fixture on the shared GPU backend of gpu_dtype() (bf16 unless overridden); skipped
// without a CUDA device.
template <typename Base = ::testing::Test>
class GpuFixture : public Base {
 protected:
  void SetUp() override {
    QWENRT_REQUIRE_GPU();
    backend_ = gpu_backend(gpu_dtype()).get();
  }
  virtual DType gpu_dtype() const { return DType::kBF16; }
  Backend& gpu() { return *backend_; }
  Backend* backend_ = nullptr;
};

// Sets an environment variable for the scope, restoring what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    had_ = std::getenv(name) != nullptr;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

inline float round_to(DType dtype, float x) {
  switch (dtype) {
    case DType::kBF16: return bf16_to_f32(f32_to_bf16(x));
    case DType::kF16: return f16_to_f32(f32_to_f16(x));
    default: return x;
  }
}

inline std::vector<float> random_values(std::mt19937& rng, size_t n, float scale, DType dtype,
                                        float offset = 0.f) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = round_to(dtype, offset + scale * normal(rng));
  return v;
}

// A device tensor that owns its memory.
struct DeviceTensor {
  DeviceBuffer buffer;
  Tensor t;

  DeviceTensor() = default;
  DeviceTensor(Backend& backend, DType dtype, int64_t rows, int64_t cols) {
    t = Tensor{nullptr, dtype, rows, cols};
    buffer = backend.allocate(std::max<size_t>(t.bytes(), 16), "test tensor");
    t.data = buffer.data();
  }
  // From fp32 host values, converted to `dtype`.
  static DeviceTensor from(Backend& backend, DType dtype, int64_t rows, int64_t cols,
                           const std::vector<float>& values) {
    DeviceTensor d(backend, dtype, rows, cols);
    EXPECT_EQ(values.size(), static_cast<size_t>(rows * cols));
    backend.upload_converted(d.t.data, dtype, values.data(), DType::kF32, values.size());
    return d;
  }
  static DeviceTensor poisoned(Backend& backend, DType dtype, int64_t rows, int64_t cols) {
    DeviceTensor d(backend, dtype, rows, cols);
    std::vector<float> nan(static_cast<size_t>(rows * cols), std::numeric_limits<float>::quiet_NaN());
    backend.upload_converted(d.t.data, dtype, nan.data(), DType::kF32, nan.size());
    return d;
  }
};

inline std::vector<float> download(Backend& backend, const void* data, DType dtype, size_t count) {
  std::vector<char> raw(count * dtype_size(dtype));
  backend.copy_to_host(raw.data(), data, raw.size());
  std::vector<float> out(count);
  convert_to_f32(raw.data(), dtype, out.data(), count);
  return out;
}
inline std::vector<float> download(Backend& backend, const Tensor& t) {
  return download(backend, t.data, t.dtype, static_cast<size_t>(t.numel()));
}

template <typename T>
DeviceBuffer upload_ints(Backend& backend, const std::vector<T>& values) {
  DeviceBuffer b = backend.allocate(std::max<size_t>(values.size() * sizeof(T), 16), "test ints");
  backend.copy_to_device(b.data(), values.data(), values.size() * sizeof(T));
  return b;
}

// ‖got − ref‖ / ‖ref‖ ≤ rel and every element finite and within abs_tol + rel_elem·|ref|.
inline void expect_close(const std::vector<float>& got, const std::vector<double>& ref, double rel,
                         double rel_elem, double abs_tol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double diff2 = 0, ref2 = 0;
  size_t bad = 0;
  size_t first_bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) || std::fabs(got[i] - ref[i]) > abs_tol + rel_elem * std::fabs(ref[i])) {
      if (bad++ == 0) first_bad = i;
    }
    diff2 += (got[i] - ref[i]) * (got[i] - ref[i]);
    ref2 += ref[i] * ref[i];
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size()
                     << " elements off, first at " << first_bad << ": got "
                     << (got.empty() ? 0.f : got[first_bad]) << " want "
                     << (ref.empty() ? 0.0 : ref[first_bad]);
  const double relative = std::sqrt(diff2 / std::max(ref2, 1e-30));
  EXPECT_LE(relative, rel) << what << ": relative error " << relative;
}

// Tolerances by dtype of the op's output (DESIGN.md: bf16 ~1e-2 relative).
struct Tolerance {
  double rel_norm;
  double rel_elem;
};
inline Tolerance tolerance_for(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return {1e-2, 2e-2};
    case DType::kF16: return {2e-3, 4e-3};
    default: return {1e-4, 1e-3};
  }
}

}  // namespace qwenrt::test
