#include "codec/select.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__OPTIMIZE_SIZE__) && \
    defined(EDGEFL_HAVE_AVX2_KERNELS)
#define EDGEFL_PERMUTE_AVX2 1
#include <immintrin.h>

#include "core/cpu.h"
#endif

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

#if EDGEFL_PERMUTE_AVX2
namespace {

// For each 8-bit mask of kept lanes: the lanes' indices, kept ones first in order.
struct KeepPermutations {
  uint32_t lanes[256][8];
  uint8_t kept[256];  // bits set
};
constexpr KeepPermutations make_keep_permutations() {
  KeepPermutations t{};
  for (unsigned m = 0; m < 256; ++m) {
    unsigned next = 0;
    for (unsigned j = 0; j < 8; ++j) {
      if ((m >> j) & 1u) t.lanes[m][next++] = j;
    }
    t.kept[m] = uint8_t(next);
    for (unsigned j = 0; next < 8; ++j) t.lanes[m][next++] = j;  // the rest: any lanes
  }
  return t;
}
constexpr KeepPermutations kKeep = make_keep_permutations();

}  // namespace

// Counters eight at a time: the three rounds of permute() on eight lanes, the lanes below n
// compacted in order and stored eight wide while eight slots of `out` remain. Returns the
// indices written; counter_ has advanced past every counter used.
__attribute__((target("avx2"))) size_t PermutedIndexStream::next_many_avx2(uint32_t* out, size_t count) {
  const __m256i mask = _mm256_set1_epi32(int(mask_));
  const __m256i n = _mm256_set1_epi32(int(n_));
  const __m128i high = _mm_cvtsi32_si128(int(shift_high_)), low = _mm_cvtsi32_si128(int(shift_low_));
  __m256i key[3], multiplier[3];
  for (int r = 0; r < 3; ++r) {
    key[r] = _mm256_set1_epi32(int(xor_key_[r]));
    multiplier[r] = _mm256_set1_epi32(int(multiplier_[r]));
  }
  __m256i counter =
      _mm256_add_epi32(_mm256_set1_epi32(int(counter_)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256i eight = _mm256_set1_epi32(8);
  size_t filled = 0;
  uint32_t used = 0;
  while (count - filled >= 8) {
    __m256i x = _mm256_and_si256(_mm256_mullo_epi32(_mm256_xor_si256(counter, key[0]), multiplier[0]), mask);
    x = _mm256_xor_si256(x, _mm256_srl_epi32(x, high));
    x = _mm256_and_si256(_mm256_mullo_epi32(_mm256_xor_si256(x, key[1]), multiplier[1]), mask);
    x = _mm256_xor_si256(x, _mm256_srl_epi32(x, low));
    x = _mm256_and_si256(_mm256_mullo_epi32(_mm256_xor_si256(x, key[2]), multiplier[2]), mask);
    x = _mm256_xor_si256(x, _mm256_srl_epi32(x, high));
    // x < n as signed 32-bit integers: both are below 2^31.
    const unsigned keep = unsigned(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(n, x))));
    const __m256i packed = _mm256_permutevar8x32_epi32(
        x, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kKeep.lanes[keep])));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + filled), packed);
    filled += kKeep.kept[keep];
    counter = _mm256_add_epi32(counter, eight);
    used += 8;
  }
  counter_ += used;
  return filled;
}
#endif

void PermutedIndexStream::next_many(uint32_t* out, size_t count) {
  size_t filled = 0;
#if EDGEFL_PERMUTE_AVX2
  if (cpu_features().avx2) filled = next_many_avx2(out, count);
#endif
  for (; filled < count; ++filled) out[filled] = next();
}

}  // namespace select
}  // namespace edgefl
