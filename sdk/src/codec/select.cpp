#include "codec/select.h"

#include <string.h>

namespace edgefl {
namespace select {

namespace {

// Finds the bin holding the `need`-th largest key (need >= 1) scanning from the top bin, and the
// count of keys in bins above it.
void find_bin(const uint32_t* hist, size_t bins, size_t need, uint32_t* bin, size_t* above) {
  size_t acc = 0;
  for (size_t b = bins; b-- > 0;) {
    if (acc + hist[b] >= need) {
      *bin = uint32_t(b);
      *above = acc;
      return;
    }
    acc += hist[b];
  }
  *bin = 0;
  *above = acc;
}

}  // namespace

Status radix_select(const float* x, size_t n, size_t k, uint32_t* hist, uint32_t* threshold, size_t* ties) {
  // Level 1: bits 30..20 (the sign bit is clear).
  memset(hist, 0, kHistogramBins * sizeof(uint32_t));
  for (size_t i = 0; i < n; ++i) ++hist[abs_key(x[i]) >> 20];
  for (size_t b = 0x7F8; b < kHistogramBins; ++b) {  // exponent all ones: Inf or NaN
    if (hist[b] != 0) return Status::kNonFiniteInput;
  }
  uint32_t b1;
  size_t above1;
  find_bin(hist, kHistogramBins, k, &b1, &above1);
  // Level 2: bits 19..9 among keys in bin b1.
  memset(hist, 0, kHistogramBins * sizeof(uint32_t));
  for (size_t i = 0; i < n; ++i) {
    const uint32_t key = abs_key(x[i]);
    if ((key >> 20) == b1) ++hist[(key >> 9) & 0x7FFu];
  }
  uint32_t b2;
  size_t above2;
  find_bin(hist, kHistogramBins, k - above1, &b2, &above2);
  // Level 3: bits 8..0 among keys with the same top 22 bits.
  const uint32_t prefix = (b1 << 11) | b2;
  memset(hist, 0, 512 * sizeof(uint32_t));
  for (size_t i = 0; i < n; ++i) {
    const uint32_t key = abs_key(x[i]);
    if ((key >> 9) == prefix) ++hist[key & 0x1FFu];
  }
  uint32_t b3;
  size_t above3;
  find_bin(hist, 512, k - above1 - above2, &b3, &above3);
  *threshold = (prefix << 9) | b3;
  *ties = k - above1 - above2 - above3;
  return Status::kOk;
}

}  // namespace select
}  // namespace edgefl
