// sdk/cli/timing.h: the clock and the statistics the CLI's measurements share (bench, sim).
#ifndef EDGEFL_CLI_TIMING_H_
#define EDGEFL_CLI_TIMING_H_

#include <stddef.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <vector>

namespace edgefl {
namespace cli {

using Clock = std::chrono::steady_clock;

// Seconds since `start`.
inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The median of `v` (the mean of the middle two when even); NaN when empty.
inline double median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const size_t mid = v.size() / 2;
  return v.size() % 2 == 1 ? v[mid] : 0.5 * (v[mid - 1] + v[mid]);
}

// GB/s of n float32 values (4n bytes) handled in `seconds`; NaN unless seconds > 0.
inline double gbps(size_t n, double seconds) {
  if (!(seconds > 0)) return std::numeric_limits<double>::quiet_NaN();
  return static_cast<double>(n) * 4.0 / seconds / 1e9;
}

// Seconds of a memcpy of x[0..n) timed right after an untimed one into the same buffer: the
// baseline in the state that the encode after it is timed in (its input and output warm).
inline double paired_memcpy_seconds(const float* x, size_t n, float* copy) {
  if (n == 0) return 0;
  memcpy(copy, x, n * sizeof(float));
  const Clock::time_point start = Clock::now();
  memcpy(copy, x, n * sizeof(float));
  const double t = seconds_since(start);
  volatile float observed = copy[n / 2];  // keeps the copy
  (void)observed;
  return t;
}

}  // namespace cli
}  // namespace edgefl

#endif  // EDGEFL_CLI_TIMING_H_
