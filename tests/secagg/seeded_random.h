// tests/secagg/seeded_random.h: deterministic randomness for the secagg suites (SplitMix64), so
// that a failure reproduces: a RandomSource for shamir_split() and the DP sampler, and the raw
// generator for inputs and dropout choices.
#ifndef EDGEFL_TESTS_SECAGG_SEEDED_RANDOM_H_
#define EDGEFL_TESTS_SECAGG_SEEDED_RANDOM_H_

#include <stddef.h>
#include <stdint.h>

#include "edgefl/status.h"
#include "secagg/shamir.h"

namespace edgefl_test {

inline uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// One output byte per SplitMix64 step.
struct SeededRandom {
  uint64_t state;
  static edgefl::Status fill(void* context, uint8_t* out, size_t size) {
    auto* self = static_cast<SeededRandom*>(context);
    for (size_t i = 0; i < size; ++i) out[i] = uint8_t(splitmix64(&self->state));
    return edgefl::Status::kOk;
  }
  edgefl::secagg::RandomSource source() { return edgefl::secagg::RandomSource{&SeededRandom::fill, this}; }
};

}  // namespace edgefl_test

#endif  // EDGEFL_TESTS_SECAGG_SEEDED_RANDOM_H_
