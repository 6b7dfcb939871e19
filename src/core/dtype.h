// Element types and host-side conversions between fp32, bf16 and fp16.
// bf16/fp16 values are stored as raw uint16_t on the host; conversions round to
// nearest-even, as PyTorch does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace qwenrt {

enum class DType : uint8_t { kF32, kF16, kBF16, kI32 };

constexpr size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
  }
  return 0;
}

const char* dtype_name(DType dtype);
// Parses "f32"/"float32", "f16"/"fp16"/"float16", "bf16"/"bfloat16"; throws Error otherwise.
DType parse_dtype(const std::string& name);

inline float bf16_to_f32(uint16_t bits) {
  uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &word, 4);
  return value;
}

inline uint16_t f32_to_bf16(float value) {
  uint32_t word;
  std::memcpy(&word, &value, 4);
  if ((word & 0x7f800000u) == 0x7f800000u && (word & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((word >> 16) | 0x40);  // quiet NaN
  }
  uint32_t rounding = 0x7fffu + ((word >> 16) & 1u);
  return static_cast<uint16_t>((word + rounding) >> 16);
}

float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);

// Converts `count` elements of `src_dtype` at `src` to fp32 at `dst`.
void convert_to_f32(const void* src, DType src_dtype, float* dst, size_t count);
// Converts `count` fp32 values to `dst_dtype` (f32, f16 or bf16) at `dst`.
void convert_from_f32(const float* src, void* dst, DType dst_dtype, size_t count);

}  // namespace qwenrt
