// Internal: the random numbers of the codecs. Everything is integer arithmetic on explicit
// widths, so a seed gives the same stream on every platform and in the SIMD kernels.
#ifndef EDGEFL_SRC_CORE_RNG_H_
#define EDGEFL_SRC_CORE_RNG_H_

#include <stdint.h>

namespace edgefl {

// One step of SplitMix64 (Steele, Lea, Flood, OOPSLA 2014) on a caller-held state.
inline uint64_t splitmix64_next(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) from the top 53 bits of `bits`.
inline double unit_double(uint64_t bits) {
  return double(bits >> 11) * 0x1.0p-53;
}

// SplitMix64: a sequential generator for sampling and keys.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() { return splitmix64_next(&state_); }
  uint32_t next32() { return uint32_t(next() >> 32); }
  // Uniform in [0, bound) by multiply-shift (Lemire 2019); bias < bound / 2^32.
  uint32_t below(uint32_t bound) { return uint32_t((uint64_t(next32()) * bound) >> 32); }

 private:
  uint64_t state_;
};

// A counter-based hash: independent 32-bit uniform per (key, index). lowbias32 (C. Wellons,
// "Hash Prospector"), bijective, good avalanche; the AVX2/NEON kernels compute it per lane.
inline uint32_t hash32(uint32_t key, uint32_t index) {
  uint32_t x = index ^ key;
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}

// Uniform float in [0, 1) with 24 random bits: exact, platform independent.
inline float unit_float(uint32_t bits) {
  return float(bits >> 8) * (1.0f / 16777216.0f);
}

// Key for hash32 derived from a 64-bit seed and a purpose tag, so that different uses of one
// seed are independent.
inline uint32_t derive_key(uint64_t seed, uint32_t purpose) {
  SplitMix64 g(seed ^ (uint64_t(purpose) * 0xD1B54A32D192ED03ull));
  return g.next32();
}

enum RngPurpose : uint32_t {
  kPurposeRounding = 1,
  kPurposeRandomK = 2,
  kPurposeHadamardSigns = 3,
  kPurposeSampling = 4,
};

}  // namespace edgefl

#endif  // EDGEFL_SRC_CORE_RNG_H_
