// sdk/cli/timing.h: the clock and the statistics the CLI's measurements share (bench, sim).
#ifndef EDGEFL_CLI_TIMING_H_
#define EDGEFL_CLI_TIMING_H_

#include <stddef.h>

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

}  // namespace cli
}  // namespace edgefl

#endif  // EDGEFL_CLI_TIMING_H_
