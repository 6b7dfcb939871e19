// Default implementations of the optional Backend services.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>

#include "backend/backend.h"
#include "core/error.h"

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

void Backend::begin_recording() {
  throw Error(ErrorCategory::kUnsupported, name() + " cannot record ops");
}

std::unique_ptr<RecordedOps> Backend::end_recording() { return nullptr; }

bool Backend::matmul_silu_mul(const Tensor&, const Tensor&, Tensor) { return false; }

void Backend::begin_sample_rows(const Tensor& logits, const SampleRow* rows, const int32_t* history,
                                const int32_t* history_lens, int history_stride, int32_t* out_ids) {
  sample_rows(logits, rows, history, history_lens, history_stride, out_ids);
}

void Backend::finish_sample_rows(const Tensor& logits, const int32_t* out_ids, int32_t* host_ids) {
  copy_to_host(host_ids, out_ids, static_cast<size_t>(logits.rows) * sizeof(int32_t));
}

int Backend::begin_sample(const Tensor& logits, const SamplingParams& params, uint64_t step,
                          const int32_t* history, const int32_t* history_lens, int history_stride,
                          int32_t* out_ids, int32_t* host_ids) {
  const int ticket = next_default_ticket_;
  next_default_ticket_ ^= 1;
  deferred_draw_errors_[ticket] = nullptr;
  try {
    sample(logits, params, step, history, history_lens, history_stride, out_ids, host_ids);
  } catch (...) {
    // Raised by finish_sample, as a draw still in flight would: a dropped draw raises nothing.
    deferred_draw_errors_[ticket] = std::current_exception();
  }
  return ticket;
}

void Backend::finish_sample(int ticket) {
  QWENRT_CHECK(ticket == 0 || ticket == 1, "finish_sample: ticket " + std::to_string(ticket) + " is not in flight");
  std::exception_ptr error = deferred_draw_errors_[ticket];
  deferred_draw_errors_[ticket] = nullptr;
  if (error) std::rethrow_exception(error);
}

void Backend::drop_sample(int ticket) {
  QWENRT_CHECK(ticket == 0 || ticket == 1, "drop_sample: ticket " + std::to_string(ticket) + " is not in flight");
  deferred_draw_errors_[ticket] = nullptr;
}
bool Backend::matmul_qkv_rope_kvwrite(const Tensor&, const Tensor&, const BatchView&, const AttentionParams&,
                                      const QkvEpilogue&, Tensor, const KvGeometry&, KvLayer) {
  return false;
}

bool Backend::fuses_qkv_epilogue() const { return false; }

void Backend::qkv_fused_rope_kvwrite(const BatchView&, const AttentionParams&, const QkvEpilogue&, const Tensor&,
                                     Tensor, const KvGeometry&, KvLayer) {
  throw Error(ErrorCategory::kUnsupported, "qkv_fused_rope_kvwrite: this backend reads q, k and v separately");
}

int64_t matmul_row_bucket(int64_t rows) {
  constexpr int64_t kTileRows = 128;
  if (rows > 2 * kTileRows) return (rows + kTileRows - 1) / kTileRows * kTileRows;
  if (rows > kTileRows) return (rows + kTileRows / 2 - 1) / (kTileRows / 2) * (kTileRows / 2);
  return static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(std::max<int64_t>(rows, 1))));
}

std::unique_ptr<DeviceTimer> Backend::make_timer() { return std::make_unique<HostClockTimer>(*this); }

std::string non_finite_logits_message(const std::string& where, DType activations) {
  return "non-finite logits (NaN or infinity) in " + where +
         (activations == DType::kF16 ? ": fp16 activations overflowed; run this model in bf16"
                                     : ": the model's weights produce NaN/inf activations; check the checkpoint (a "
                                       "damaged or wrongly converted file)");
}

}  // namespace qwenrt
