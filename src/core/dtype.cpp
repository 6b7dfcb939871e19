#include "core/dtype.h"

#include <cmath>

#include "core/error.h"

namespace qwenrt {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
  }
  return "?";
}

DType parse_dtype(const std::string& name) {
  if (name == "f32" || name == "fp32" || name == "float32") return DType::kF32;
  if (name == "f16" || name == "fp16" || name == "float16") return DType::kF16;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  throw Error(ErrorCategory::kInvalidArgument,
              "unknown dtype '" + name + "' (expected bf16, f16 or f32)");
}

float f16_to_f32(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  uint32_t word;
  if (exponent == 0) {
    if (mantissa == 0) {
      word = sign;
    } else {  // subnormal: renormalise
      int shift = 0;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        ++shift;
      }
      mantissa &= 0x3ffu;
      word = sign | (static_cast<uint32_t>(127 - 15 - shift + 1) << 23) | (mantissa << 13);
    }
  } else if (exponent == 0x1f) {
    word = sign | 0x7f800000u | (mantissa << 13);
  } else {
    word = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &word, 4);
  return value;
}

uint16_t f32_to_f16(float value) {
  uint32_t word;
  std::memcpy(&word, &value, 4);
  uint16_t sign = static_cast<uint16_t>((word >> 16) & 0x8000u);
  uint32_t abs_word = word & 0x7fffffffu;
  if (abs_word >= 0x7f800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (abs_word > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs_word >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow
  if (abs_word < 0x38800000u) {  // result is subnormal or zero
    float abs_value;
    std::memcpy(&abs_value, &abs_word, 4);
    // Subnormal halves are multiples of 2^-24; rint rounds to nearest-even.
    auto units = static_cast<uint32_t>(std::nearbyint(abs_value * 16777216.0f));
    return static_cast<uint16_t>(sign | units);
  }
  uint32_t exponent = ((abs_word >> 23) - 127 + 15);
  uint32_t mantissa = abs_word & 0x7fffffu;
  uint32_t half = (exponent << 10) | (mantissa >> 13);
  uint32_t remainder = mantissa & 0x1fffu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

void convert_to_f32(const void* src, DType src_dtype, float* dst, size_t count) {
  switch (src_dtype) {
    case DType::kF32:
      std::memcpy(dst, src, count * 4);
      return;
    // Sources may be tensors mapped straight from a safetensors file, whose data area need
    // not be 2-byte aligned (the format does not require padding): read through memcpy.
    case DType::kBF16: {
      const auto* in = static_cast<const unsigned char*>(src);
      for (size_t i = 0; i < count; ++i) {
        uint16_t bits;
        std::memcpy(&bits, in + 2 * i, 2);
        dst[i] = bf16_to_f32(bits);
      }
      return;
    }
    case DType::kF16: {
      const auto* in = static_cast<const unsigned char*>(src);
      for (size_t i = 0; i < count; ++i) {
        uint16_t bits;
        std::memcpy(&bits, in + 2 * i, 2);
        dst[i] = f16_to_f32(bits);
      }
      return;
    }
    case DType::kI32:
      break;
  }
  throw Error(ErrorCategory::kInternal, "convert_to_f32: unsupported source dtype");
}

void convert_from_f32(const float* src, void* dst, DType dst_dtype, size_t count) {
  switch (dst_dtype) {
    case DType::kF32:
      std::memcpy(dst, src, count * 4);
      return;
    case DType::kBF16: {
      auto* out = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < count; ++i) out[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::kF16: {
      auto* out = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < count; ++i) out[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::kI32:
      break;
  }
  throw Error(ErrorCategory::kInternal, "convert_from_f32: unsupported destination dtype");
}

}  // namespace qwenrt
