// Counter-based random bits, one definition for the host and the GPU kernels (constexpr
// functions compile for the device: nvcc with --expt-relaxed-constexpr, clang for HIP). The
// device sampler must draw exactly what the host sampler draws.
#pragma once

#include <cstdint>

namespace qwenrt {

// SplitMix64's finaliser over x + golden ratio: a well-mixed 64-bit word.
constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  uint64_t z = x;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The top 24 bits of a 64-bit random word as a float in [0, 1) (exact in fp32).
constexpr float unit_float(uint64_t bits) { return static_cast<float>(bits >> 40) * (1.0f / 16777216.0f); }

// The sampler's random word for (seed, step, row): a pure function, the same on every backend.
constexpr uint64_t sample_bits(uint64_t seed, uint64_t step, uint64_t row) {
  return splitmix64(splitmix64(seed) ^ (step * 0x9E3779B97F4A7C15ull) ^ (row * 0xD1B54A32D192ED03ull));
}

}  // namespace qwenrt
