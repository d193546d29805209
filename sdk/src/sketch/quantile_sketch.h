// Internal: the classic mergeable quantiles sketch (Agarwal, Cormode, Huang, Phillips, Wei, Yi,
// "Mergeable Summaries", PODS 2012; the DataSketches "classic quantiles" layout that SketchML and
// SKCompress use with k = 128): a base buffer of 2k unsorted items, and levels of k sorted items
// where an item of level j stands for 2^(j+1) inputs. A full base buffer is sorted and halved
// (every other item, from a seeded random offset) into a carry that merges up the levels like a
// binary counter. Rank error is O(log(n/k) / k) with high probability.
//
// Memory: caller-owned, quantile_sketch_floats(k, n) floats for at most n updates; no allocation.
#ifndef EDGEFL_SRC_SKETCH_QUANTILE_SKETCH_H_
#define EDGEFL_SRC_SKETCH_QUANTILE_SKETCH_H_

#include <stddef.h>
#include <stdint.h>

#include "core/rng.h"

namespace edgefl {
namespace sketch {

// Levels needed for n updates with parameter k.
inline unsigned quantile_levels(unsigned k, uint64_t n) {
  unsigned levels = 1;
  while ((uint64_t(2) * k << levels) <= n) ++levels;
  return levels;
}

// Floats of memory for a sketch of parameter k that receives at most n updates: the base
// buffer (2k), the levels (k each) and a merge buffer (2k).
inline size_t quantile_sketch_floats(unsigned k, uint64_t n) {
  return size_t(4) * k + size_t(k) * quantile_levels(k, n);
}

// Scratch (in 8-byte units) quantiles() needs for the same k and n.
inline size_t quantile_query_items(unsigned k, uint64_t n) {
  return size_t(2) * k + size_t(k) * quantile_levels(k, n);
}

class QuantileSketch {
 public:
  // `memory` holds quantile_sketch_floats(k, max_n) floats; at most max_n updates.
  QuantileSketch(unsigned k, uint64_t max_n, float* memory, uint64_t seed);

  void update(float v);
  uint64_t count() const { return n_; }
  float min() const { return min_; }
  float max() const { return max_; }

  // Writes the values at normalized ranks 1/parts, 2/parts, ..., (parts-1)/parts into
  // out[0..parts-1) (non-decreasing). `scratch` holds quantile_query_items(k, max_n) 8-byte items.
  // Requires count() > 0.
  void quantiles(unsigned parts, float* out, uint64_t* scratch);

 private:
  void flush_base();
  unsigned k_;
  unsigned max_levels_;
  float* base_;    // 2k
  float* levels_;  // max_levels_ * k
  float* merge_;   // 2k
  uint64_t n_ = 0;
  unsigned base_count_ = 0;
  uint32_t level_bits_ = 0;  // bit j set: level j is full
  float min_ = 0, max_ = 0;
  SplitMix64 rng_;
};

}  // namespace sketch
}  // namespace edgefl

#endif  // EDGEFL_SRC_SKETCH_QUANTILE_SKETCH_H_
