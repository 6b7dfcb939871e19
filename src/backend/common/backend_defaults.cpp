// Default implementations of the optional Backend services.
#include <chrono>
#include <vector>

#include "backend/backend.h"
#include "engine/sampler.h"

namespace qwenrt {
namespace {

class HostClockTimer final : public DeviceTimer {
 public:
  explicit HostClockTimer(Backend& backend) : backend_(backend) {}
  void start() override {
    backend_.synchronize();
    start_ = std::chrono::steady_clock::now();
  }
  void stop() override {
    backend_.synchronize();
    stop_ = std::chrono::steady_clock::now();
  }
  double seconds() override { return std::chrono::duration<double>(stop_ - start_).count(); }

 private:
  Backend& backend_;
  std::chrono::steady_clock::time_point start_, stop_;
};

}  // namespace

DeviceInfo Backend::device_info() const { return DeviceInfo{name(), 0, 0}; }

std::unique_ptr<DeviceTimer> Backend::make_timer() { return std::make_unique<HostClockTimer>(*this); }

void Backend::fill_random(Tensor tensor, uint64_t seed, float scale, float offset) {
  constexpr size_t kChunk = 1 << 20;
  const size_t total = static_cast<size_t>(tensor.numel());
  std::vector<float> values(std::min(total, kChunk));
  uint64_t state = splitmix64(seed);
  for (size_t begin = 0; begin < total; begin += kChunk) {
    size_t count = std::min(kChunk, total - begin);
    for (size_t i = 0; i < count; ++i) {
      state = splitmix64(state);
      float unit = static_cast<float>(state >> 40) * (1.0f / 16777216.0f);  // [0, 1)
      values[i] = offset + scale * (2.0f * unit - 1.0f);
    }
    char* dst = static_cast<char*>(tensor.data) + begin * dtype_size(tensor.dtype);
    upload_converted(dst, tensor.dtype, values.data(), DType::kF32, count);
  }
  synchronize();
}

}  // namespace qwenrt
