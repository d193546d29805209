// tests/support/bench_data.h: deterministic test vectors (splitmix64 + Box-Muller).
//
// Every generator is a pure function of its seed, so a failing case can be replayed exactly on
// any platform (no std::normal_distribution: its output is implementation-defined).
#ifndef EDGEFL_TESTS_SUPPORT_BENCH_DATA_H_
#define EDGEFL_TESTS_SUPPORT_BENCH_DATA_H_

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <vector>

namespace edgefl_test {

// splitmix64 (Steele, Lea, Flood 2014): a tiny generator with a 64-bit state.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
  // Uniform integer in [0, bound) (bound > 0; the modulo bias is irrelevant for tests).
  uint64_t below(uint64_t bound) { return next() % bound; }
  // Standard normal (Box-Muller, one value per call; the second is discarded for simplicity).
  double gaussian() {
    double u1 = uniform();
    const double u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
  }

 private:
  uint64_t state_;
};

// n draws of N(0, 1) * scale.
inline std::vector<float> gaussian_vector(size_t n, uint64_t seed, double scale = 1.0) {
  SplitMix64 rng(seed);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(rng.gaussian() * scale);
  return x;
}

// n draws of U(lo, hi).
inline std::vector<float> uniform_vector(size_t n, uint64_t seed, double lo, double hi) {
  SplitMix64 rng(seed);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(lo + (hi - lo) * rng.uniform());
  return x;
}

// "Bench-1M"-like data (reference/compression.md section 4): N(0,1) x a lognormal(0,1) scale per
// 256 coordinates x 1e-3. Heavy tails, locally correlated magnitudes, like real gradients.
inline std::vector<float> bench_vector(size_t n, uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<float> x(n);
  double scale = 0.0;
  for (size_t i = 0; i < n; ++i) {
    if (i % 256 == 0) scale = exp(rng.gaussian()) * 1e-3;
    x[i] = static_cast<float>(rng.gaussian() * scale);
  }
  return x;
}

}  // namespace edgefl_test

#endif  // EDGEFL_TESTS_SUPPORT_BENCH_DATA_H_
