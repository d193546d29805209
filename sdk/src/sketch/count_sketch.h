// Internal: Count Sketch (Charikar, Chen, Farach-Colton, ICALP 2002) of an update, as FetchSGD
// uses it (Rothchild et al., "FetchSGD: Communication-Efficient Federated Learning with
// Sketching", ICML 2020): `rows` x `cols` integer cells; coordinate i adds s_r(i) * q_i to cell
// (r, h_r(i)) of every row, where q_i = x_i / step rounded stochastically (unbiased, seeded) and
// h_r, s_r come from the shared seed. Cells are integers, so the sketch is linear exactly: the
// cell-by-cell sum of two clients' sketches (same seed, shape and step) is the sketch of the sum
// of their integer codes. Unsketching estimates every coordinate as the median over rows of
// s_r(i) * cell(r, h_r(i)) x step, and keeps the k largest estimates (the heavy hitters).
//
// Value region: rows x cols little-endian int32 cells, row-major.
#ifndef EDGEFL_SRC_SKETCH_COUNT_SKETCH_H_
#define EDGEFL_SRC_SKETCH_COUNT_SKETCH_H_

#include <stddef.h>
#include <stdint.h>

#include "core/bitio.h"
#include "core/rng.h"

namespace edgefl {
namespace count_sketch {

constexpr unsigned kMaxRows = 15;

struct RowHash {
  uint32_t key;
  // Column in [0, cols) and sign (+1 or -1) of coordinate i.
  uint32_t column(uint32_t i, uint32_t cols) const {
    return uint32_t((uint64_t(hash32(key, i) >> 1) * cols) >> 31);
  }
  int32_t sign(uint32_t i) const { return (hash32(key, i) & 1u) ? -1 : 1; }
};

inline RowHash row_hash(uint64_t seed, unsigned row) {
  return RowHash{derive_key(seed, 0x43530000u | row)};  // "CS"
}

// Median of v[0..count) (count <= kMaxRows; mean of the two middle values when count is even).
// Sorts v in place.
inline double median(int64_t* v, unsigned count) {
  for (unsigned i = 1; i < count; ++i) {
    const int64_t t = v[i];
    unsigned j = i;
    while (j > 0 && v[j - 1] > t) {
      v[j] = v[j - 1];
      --j;
    }
    v[j] = t;
  }
  return count % 2 ? double(v[count / 2]) : 0.5 * (double(v[count / 2 - 1]) + double(v[count / 2]));
}

// Estimate of coordinate i from a validated cell region.
inline float estimate(const uint8_t* cells, unsigned rows, uint32_t cols, const RowHash* hashes, uint32_t i,
                      float step) {
  int64_t v[kMaxRows];
  for (unsigned r = 0; r < rows; ++r) {
    const int32_t c = int32_t(load_le32(cells + 4 * (size_t(r) * cols + hashes[r].column(i, cols))));
    v[r] = int64_t(hashes[r].sign(i)) * c;
  }
  return float(median(v, rows) * double(step));
}

}  // namespace count_sketch
}  // namespace edgefl

#endif  // EDGEFL_SRC_SKETCH_COUNT_SKETCH_H_
