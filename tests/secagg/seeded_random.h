// tests/secagg/seeded_random.h: deterministic randomness for the secagg suites (the core's
// SplitMix64), so that a failure reproduces: a RandomSource for shamir_split() and the DP sampler.
#ifndef EDGEFL_TESTS_SECAGG_SEEDED_RANDOM_H_
#define EDGEFL_TESTS_SECAGG_SEEDED_RANDOM_H_

#include <stddef.h>
#include <stdint.h>

#include "core/rng.h"
#include "edgefl/status.h"
#include "secagg/shamir.h"

namespace edgefl_test {

// One output byte per SplitMix64 step.
struct SeededRandom {
  uint64_t state;
  static edgefl::Status fill(void* context, uint8_t* out, size_t size) {
    auto* self = static_cast<SeededRandom*>(context);
    for (size_t i = 0; i < size; ++i) out[i] = uint8_t(edgefl::splitmix64_next(&self->state));
    return edgefl::Status::kOk;
  }
  edgefl::secagg::RandomSource source() { return edgefl::secagg::RandomSource{&SeededRandom::fill, this}; }
};

}  // namespace edgefl_test

#endif  // EDGEFL_TESTS_SECAGG_SEEDED_RANDOM_H_
