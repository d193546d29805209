// Internal: a keyed pseudorandom permutation of [0, n) evaluated one index at a time, so a shuffle
// of any number of samples needs no index buffer (the trainer's workspace does not depend on the
// data size).
//
// A balanced Feistel network of 4 rounds over 2h bits, 4^h the smallest power of four >= n (so
// 4^h < 4n), with the keyed integer hash of core/rng.h as round function: 4 rounds of a
// pseudorandom function give a pseudorandom permutation (Luby & Rackoff, SIAM J. Comput. 17(2),
// 1988). Indices that land outside [0, n) are encrypted again until they land inside ("cycle
// walking", Black & Rogaway, "Ciphers with Arbitrary Finite Domains", CT-RSA 2002): a bijection
// of [0, n), at fewer than 4 encryptions per index on average.
#ifndef EDGEFL_SRC_TRAIN_PERMUTATION_H_
#define EDGEFL_SRC_TRAIN_PERMUTATION_H_

#include <stdint.h>

#include "core/rng.h"

namespace edgefl {
namespace train {

class FeistelPermutation {
 public:
  // n >= 1; key selects the permutation.
  FeistelPermutation(uint32_t n, uint32_t key) : n_(n) {
    while ((uint64_t(1) << (2 * half_bits_)) < uint64_t(n)) ++half_bits_;
    mask_ = (uint32_t(1) << half_bits_) - 1;
    for (uint32_t r = 0; r < kRounds; ++r) keys_[r] = hash32(key, r);
  }

  // The image of i (< n), in [0, n).
  uint32_t operator()(uint32_t i) const {
    uint32_t x = i;
    do {
      x = encrypt(x);
    } while (x >= n_);
    return x;
  }

 private:
  static constexpr uint32_t kRounds = 4;

  uint32_t encrypt(uint32_t x) const {
    uint32_t left = x >> half_bits_, right = x & mask_;
    for (uint32_t r = 0; r < kRounds; ++r) {
      const uint32_t next = left ^ (hash32(keys_[r], right) & mask_);
      left = right;
      right = next;
    }
    return (left << half_bits_) | right;
  }

  uint32_t n_;
  uint32_t half_bits_ = 1;  // 1..16
  uint32_t mask_ = 1;
  uint32_t keys_[kRounds] = {};
};

}  // namespace train
}  // namespace edgefl

#endif  // EDGEFL_SRC_TRAIN_PERMUTATION_H_
