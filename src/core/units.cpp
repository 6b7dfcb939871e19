#include "core/units.h"

#include <cstdio>

namespace qwenrt {

namespace {

constexpr double kKiB = 1024.0;
constexpr double kMiB = kKiB * 1024.0;
constexpr double kGiB = kMiB * 1024.0;

}  // namespace

std::string format_gib(double bytes) {
  char text[48];
  std::snprintf(text, sizeof(text), "%.2f GiB", bytes / kGiB);
  return text;
}

std::string format_bytes(double bytes) {
  if (bytes >= kGiB) return format_gib(bytes);
  char text[48];
  if (bytes >= kMiB) {
    std::snprintf(text, sizeof(text), "%.1f MiB", bytes / kMiB);
  } else {
    std::snprintf(text, sizeof(text), "%.1f KiB", bytes / kKiB);
  }
  return text;
}

}  // namespace qwenrt
