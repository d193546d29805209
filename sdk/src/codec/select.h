// Internal: the sparsifiers. Each decides a set of coordinates and visits it in ascending order.
#ifndef EDGEFL_SRC_CODEC_SELECT_H_
#define EDGEFL_SRC_CODEC_SELECT_H_

#include <stddef.h>
#include <stdint.h>

#include "core/half.h"
#include "core/rng.h"
#include "edgefl/status.h"

namespace edgefl {
namespace select {

// Bits of |x| as an unsigned key: ordering keys orders magnitudes (for finite x).
inline uint32_t abs_key(float x) {
  return float_bits(x) & 0x7FFFFFFFu;
}

constexpr size_t kHistogramBins = 2048;

// Exact top-k by magnitude with a three-level radix select over the key bits (11 + 11 + 9
// bits: three histogram passes, no sort, no copy of the input). On success the selection is
// {i : key_i > *threshold} plus the first *ties indices (by position) with key_i == *threshold,
// exactly k in all. `histogram` holds kHistogramBins counters. 1 <= k <= n.
// Fails: kNonFiniteInput (detected in the first pass).
Status radix_select(const float* x, size_t n, size_t k, uint32_t* histogram, uint32_t* threshold,
                    size_t* ties);

// Selection sampling (Knuth, TAOCP vol. 2, 3.4.2, Algorithm S): exactly k of n indices, every
// k-subset equally likely, generated in ascending order from the shared seed alone, so that a
// server regenerates the indices of a random-k encoding without any index bytes.
class RandomIndexStream {
 public:
  RandomIndexStream(size_t n, size_t k, uint64_t seed)
      : g_(seed ^ 0x52414E444B53454Cull), n_(n), remaining_(k) {}  // "RANDKSEL"
  // The next index; call at most k times.
  uint32_t next() {
    for (; i_ < n_; ++i_) {
      if (g_.below(uint32_t(n_ - i_)) < remaining_) {
        --remaining_;
        return uint32_t(i_++);
      }
    }
    return 0;
  }

 private:
  SplitMix64 g_;
  size_t n_;
  size_t remaining_;
  size_t i_ = 0;
};

// Calls f(i, key) for every i with abs_key(x[i]) >= t, in order. Sparse selections are the
// common case, so blocks of 16 are tested first with a branch-free OR that compilers vectorize.
template <typename F>
inline void for_each_at_least(const float* x, size_t n, uint32_t t, F&& f) {
  constexpr size_t kBlock = 16;
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    uint32_t keys[kBlock];
    uint32_t any = 0;
    for (size_t j = 0; j < kBlock; ++j) {
      keys[j] = abs_key(x[i + j]);
      any |= uint32_t(keys[j] >= t);
    }
    if (any == 0) continue;
    for (size_t j = 0; j < kBlock; ++j) {
      if (keys[j] >= t) f(i + j, keys[j]);
    }
  }
  for (; i < n; ++i) {
    const uint32_t key = abs_key(x[i]);
    if (key >= t) f(i, key);
  }
}

// A set visited in ascending order.
struct Selection {
  enum class Rule { kAll, kAboveWithTies, kAtLeast, kRandom } rule = Rule::kAll;
  uint32_t threshold = 0;
  size_t ties = 0;
  size_t k = 0;       // size of the set
  uint64_t seed = 0;  // kRandom

  template <typename F>
  void for_each(const float* x, size_t n, F&& f) const {
    switch (rule) {
      case Rule::kAll:
        for (size_t i = 0; i < n; ++i) f(uint32_t(i));
        return;
      case Rule::kAboveWithTies: {
        size_t ties_left = ties;
        const uint32_t t = threshold;
        for_each_at_least(x, n, t, [&](size_t i, uint32_t key) {
          if (key > t) {
            f(uint32_t(i));
          } else if (ties_left > 0) {  // key == t
            --ties_left;
            f(uint32_t(i));
          }
        });
        return;
      }
      case Rule::kAtLeast:
        for_each_at_least(x, n, threshold, [&](size_t i, uint32_t) { f(uint32_t(i)); });
        return;
      case Rule::kRandom: for_each_random(n, k, seed, f); return;
    }
  }

  template <typename F>
  static void for_each_random(size_t n, size_t k, uint64_t seed, F&& f);
};

template <typename F>
void Selection::for_each_random(size_t n, size_t k, uint64_t seed, F&& f) {
  RandomIndexStream stream(n, k, seed);
  for (size_t j = 0; j < k; ++j) f(stream.next());
}

}  // namespace select
}  // namespace edgefl

#endif  // EDGEFL_SRC_CODEC_SELECT_H_
