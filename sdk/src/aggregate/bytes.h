// Internal to edgefl_aggregate: the few byte helpers the core does not have (doubles, and IEEE
// classification of doubles). Integers go through core/bitio.h, checksums through core/crc32c.h.
#ifndef EDGEFL_SRC_AGGREGATE_BYTES_H_
#define EDGEFL_SRC_AGGREGATE_BYTES_H_

#include <stdint.h>
#include <string.h>

#include "core/bitio.h"
#include "core/crc32c.h"
#include "core/half.h"

namespace edgefl {
namespace aggregate_internal {

using edgefl::load_le16;
using edgefl::load_le32;
using edgefl::load_le64;
using edgefl::store_le16;
using edgefl::store_le32;
using edgefl::store_le64;

inline void store_f64(uint8_t* p, double v) {
  uint64_t bits;
  memcpy(&bits, &v, 8);
  store_le64(p, bits);
}
inline double load_f64(const uint8_t* p) {
  const uint64_t bits = load_le64(p);
  double v;
  memcpy(&v, &bits, 8);
  return v;
}

inline bool is_nonfinite(float x) {
  return is_nonfinite_bits(float_bits(x));
}
inline bool is_nonfinite(double x) {
  uint64_t bits;
  memcpy(&bits, &x, 8);
  return (bits & 0x7FF0000000000000ull) == 0x7FF0000000000000ull;
}

}  // namespace aggregate_internal
}  // namespace edgefl

#endif  // EDGEFL_SRC_AGGREGATE_BYTES_H_
