// Order statistics for reports (bench's medians and percentiles).
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace qwenrt {

// Interpolated between the two nearest ranks (numpy's default): the median of an even count
// is the mean of its middle two. `values` must not be empty.
inline double percentile(std::vector<double> values, double fraction) {
  std::sort(values.begin(), values.end());
  const double position = fraction * static_cast<double>(values.size() - 1);
  const size_t below = static_cast<size_t>(position);
  const size_t above = std::min(values.size() - 1, below + 1);
  return values[below] + (values[above] - values[below]) * (position - static_cast<double>(below));
}

inline double median(std::vector<double> values) { return percentile(std::move(values), 0.5); }

}  // namespace qwenrt
