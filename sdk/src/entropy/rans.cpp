#include "entropy/rans.h"

#include <string.h>

// The AVX2 rounds of 32-lane streams: hosted x86-64 builds with the AVX2 kernels, chosen at
// run time (cpu_features()); the scalar rounds are their twin.
#if defined(EDGEFL_RANS_SLOT_ENTRIES) && defined(EDGEFL_HAVE_AVX2_KERNELS) && \
    (defined(__GNUC__) || defined(__clang__)) && !defined(__OPTIMIZE_SIZE__)
#define EDGEFL_RANS_AVX2 1
#endif

#if EDGEFL_RANS_AVX2
#include <immintrin.h>

#include "core/cpu.h"
#endif

namespace edgefl {
namespace entropy {

void rans_frequencies(const uint32_t* counts, unsigned symbols, uint16_t* freq) {
  uint64_t total = 0;
  for (unsigned s = 0; s < symbols; ++s) total += counts[s];
  int64_t sum = 0;
  unsigned largest = 0;
  for (unsigned s = 0; s < symbols; ++s) {
    if (counts[s] == 0) {
      freq[s] = 0;
      continue;
    }
    uint64_t f = (uint64_t(counts[s]) * kRansTotal + total / 2) / total;
    freq[s] = uint16_t(f < 1 ? 1 : f > kRansTotal ? kRansTotal : f);
    sum += freq[s];
    if (counts[s] > counts[largest] || counts[largest] == 0) largest = s;
  }
  // Correct the sum: take from (or give to) the symbols with the largest frequencies, never
  // below 1.
  while (sum != int64_t(kRansTotal)) {
    if (sum < int64_t(kRansTotal)) {
      freq[largest] = uint16_t(freq[largest] + (kRansTotal - sum));
      sum = kRansTotal;
    } else {
      unsigned best = symbols;
      for (unsigned s = 0; s < symbols; ++s) {
        if (freq[s] > 1 && (best == symbols || freq[s] > freq[best])) best = s;
      }
      const int64_t excess = sum - int64_t(kRansTotal);
      const int64_t take = excess < int64_t(freq[best]) - 1 ? excess : int64_t(freq[best]) - 1;
      freq[best] = uint16_t(freq[best] - take);
      sum -= take;
    }
  }
}

uint64_t rans_cost_bits(const uint32_t* counts, const uint16_t* freq, unsigned symbols, unsigned lanes) {
  // -log2(f / 4096) in 1/256-bit units from an integer log2 approximation (no libm in the
  // freestanding core): log2(v) = floor + fraction by 8 squarings.
  auto log2_fixed = [](uint32_t v) -> uint64_t {
    const unsigned e = floor_log2(v);
    uint64_t m = (uint64_t(v) << 32) >> e;  // 1.32 fixed point in [1, 2)
    uint64_t frac = 0;
    for (int i = 0; i < 8; ++i) {
      m = (m * m) >> 32;
      frac <<= 1;
      if (m >= (uint64_t(2) << 32)) {
        m >>= 1;
        frac |= 1;
      }
    }
    return uint64_t(e) * 256 + frac;
  };
  uint64_t cost = 0;
  for (unsigned s = 0; s < symbols; ++s) {
    if (counts[s] == 0) continue;
    cost += uint64_t(counts[s]) * (kRansPrecision * 256 - log2_fixed(freq[s]));
  }
  return (cost + 255) / 256 + 8 * rans_state_bytes(lanes);
}

namespace {

constexpr unsigned kMaxRice = 12;

struct TablePlan {
  unsigned rice = 0;
  unsigned implied = 0;
  uint64_t bits = 0;
};

// The table of the fewest bits: the most frequent symbol implied (the first of ties), the best
// Rice parameter for the others.
TablePlan plan_table(const uint16_t* freq, unsigned symbols) {
  TablePlan best;
  for (unsigned s = 1; s < symbols; ++s) {
    if (freq[s] > freq[best.implied]) best.implied = s;
  }
  best.bits = ~uint64_t(0);
  for (unsigned k = 0; k <= kMaxRice; ++k) {
    uint64_t bits = 4 + ceil_log2(symbols);
    for (unsigned s = 0; s < symbols; ++s) {
      if (s != best.implied) bits += (freq[s] >> k) + 1 + k;
    }
    if (bits < best.bits) {
      best.rice = k;
      best.bits = bits;
    }
  }
  return best;
}

}  // namespace

size_t rans_table_bytes(const uint16_t* freq, unsigned symbols) {
  return size_t((plan_table(freq, symbols).bits + 7) / 8);
}

void rans_write_table(const uint16_t* freq, unsigned symbols, BitWriter* w) {
  const TablePlan plan = plan_table(freq, symbols);
  w->put(plan.rice, 4);
  w->put(plan.implied, ceil_log2(symbols));
  for (unsigned s = 0; s < symbols; ++s) {
    if (s == plan.implied) continue;
    w->put_unary(freq[s] >> plan.rice);
    w->put(freq[s], plan.rice);
  }
}

namespace {

#if !defined(__OPTIMIZE_SIZE__)
// Division by a symbol's frequency through a reciprocal (A. Alverson, "Integer division using
// reciprocals", ARITH 1991; the encoder symbol of ryg_rans): q = ((x * rcp) >> 32) >> shift is
// x / f for x < 2^31 and at most one more above (states reach 2^32 here, where ryg_rans's stay
// below 2^31), which one compare corrects; then the step x' = (x / f) * 4096 + x % f + start
// is x + bias + q * (4096 - f).
struct EncoderSymbol {
  uint32_t renormalize_above;  // x > this: emit a word first ((2^20 f) - 1: 2^32 - 1 for f = 4096)
  uint32_t reciprocal;
  uint32_t bias;
  uint16_t complement;  // 4096 - f
  uint16_t shift;
};

void make_encoder_symbol(uint32_t start, uint32_t f, EncoderSymbol* e) {
  e->renormalize_above = uint32_t((uint64_t(kRansLow >> kRansPrecision) << 16) * f - 1);
  e->complement = uint16_t(kRansTotal - f);
  if (f < 2) {
    // q = x - 1 for x >= 1: x + (start + 4095) + (x - 1) * 4095 = x * 4096 + start.
    e->reciprocal = ~0u;
    e->shift = 0;
    e->bias = start + kRansTotal - 1;
  } else {
    unsigned shift = 0;
    while (f > (1u << shift)) ++shift;
    e->reciprocal = uint32_t(((uint64_t(1) << (shift + 31)) + f - 1) / f);
    e->shift = uint16_t(shift - 1);
    e->bias = start;
  }
}
#endif

}  // namespace

size_t rans_encode(const uint8_t* symbols, size_t count, const uint16_t* freq, unsigned symbols_in_alphabet,
                   unsigned lanes, uint8_t* out, size_t cap) {
  if (lanes != kRansLanes && lanes != kRansWideLanes) return 0;
#if defined(__OPTIMIZE_SIZE__)
  uint16_t start[kRansMaxSymbols];
#else
  EncoderSymbol table[kRansMaxSymbols];
#endif
  uint32_t cumulative = 0;
  for (unsigned s = 0; s < symbols_in_alphabet; ++s) {
#if defined(__OPTIMIZE_SIZE__)
    start[s] = uint16_t(cumulative);
#else
    make_encoder_symbol(cumulative, freq[s], &table[s]);
#endif
    cumulative += freq[s];
  }
  uint8_t* p = out + cap;
  uint32_t state[kRansWideLanes];
  for (unsigned k = 0; k < lanes; ++k) state[k] = kRansLow;
  for (size_t i = count; i-- > 0;) {
    const unsigned s = symbols[i];
    const uint32_t f = freq[s];
    if (f == 0) return 0;  // not in the table: the caller's counts were wrong
    uint32_t& x = state[i & (lanes - 1)];
    // x in [2^16, 2^32): one 16-bit word brings it below 2^20 f, whence the step lands back in
    // [2^16, 2^32).
#if defined(__OPTIMIZE_SIZE__)
    if (x >= (uint64_t(kRansLow >> kRansPrecision) << 16) * f) {
      if (p - out < 2) return 0;
      p -= 2;
      store_le16(p, uint16_t(x));
      x >>= 16;
    }
    x = ((x / f) << kRansPrecision) + (x % f) + start[s];
#else
    // Branch-free renormalization (whether a state emits is a coin flip): the word is stored
    // below p whatever happens and kept only if p moves down over it.
    const EncoderSymbol& e = table[s];
    const bool emit = x > e.renormalize_above;
    if (p - out < 2) {
      if (emit) return 0;
    } else {
      store_le16(p - 2, uint16_t(x));
    }
    p -= emit ? 2 : 0;
    x = emit ? x >> 16 : x;
    uint32_t q = uint32_t((uint64_t(x) * e.reciprocal) >> 32) >> e.shift;
    q -= uint64_t(q) * f > x ? 1 : 0;
    x += e.bias + q * e.complement;
#endif
  }
  // The decoder reads x0..x(L-1) first, little-endian: write them last, backwards.
  const size_t state_bytes = rans_state_bytes(lanes);
  if (size_t(p - out) < state_bytes) return 0;
  p -= state_bytes;
  for (unsigned k = 0; k < lanes; ++k) store_le32(p + 4 * k, state[k]);
  const size_t size = size_t(out + cap - p);
  memmove(out, p, size);
  return size;
}

Status RansDecoder::read_table(BitReader* r, unsigned symbols) {
  if (symbols == 0 || symbols > kRansMaxSymbols) return Status::kCorruptPayload;
  const unsigned rice = unsigned(r->get(4));
  const unsigned implied = unsigned(r->get(ceil_log2(symbols)));
  if (r->failed() || rice > kMaxRice || implied >= symbols) return Status::kCorruptPayload;
  uint32_t others = 0;
  for (unsigned s = 0; s < symbols; ++s) {
    if (s == implied) continue;
    const uint64_t high = r->get_unary(kRansTotal >> rice);
    const uint64_t f = high << rice | r->get(rice);
    // The implied frequency must stay at least 1.
    if (r->failed() || f >= kRansTotal - others) return Status::kCorruptPayload;
    freq_[s] = uint16_t(f);
    others += uint32_t(f);
  }
  freq_[implied] = uint16_t(kRansTotal - others);
  uint32_t cumulative = 0;
  for (unsigned s = 0; s < symbols; ++s) {
    start_[s] = uint16_t(cumulative);
    memset(slot_symbol_ + cumulative, int(s), freq_[s]);
#if EDGEFL_RANS_AVX2
    for (uint32_t k = 0; k < freq_[s]; ++k)
      slot_entry_[cumulative + k] = s | k << 8 | (uint32_t(freq_[s]) - 1) << 20;
#endif
    cumulative += freq_[s];
  }
  return Status::kOk;
}

Status RansDecoder::begin(const uint8_t* stream, size_t size, unsigned lanes) {
  if ((lanes != kRansLanes && lanes != kRansWideLanes) || size < rans_state_bytes(lanes))
    return Status::kCorruptPayload;
  lanes_ = lanes;
  for (unsigned k = 0; k < lanes; ++k) {
    state_[k] = load_le32(stream + 4 * k);
    if (state_[k] < kRansLow) return Status::kCorruptPayload;
  }
  data_ = stream;
  size_ = size;
  pos_ = rans_state_bytes(lanes);
  next_ = 0;
  overrun_ = false;
  return Status::kOk;
}

#if !defined(__OPTIMIZE_SIZE__)
namespace {

// Hides v's value from the optimizer, so that it is computed unconditionally and the select
// that uses it compiles to a conditional move instead of a branch (the renormalization of a
// state is a coin flip the predictor cannot learn). The same empty-asm barrier as Mbed TLS's
// mbedtls_ct_compiler_opaque(); without GNU asm, plain code (correct, maybe slower).
inline uint32_t opaque(uint32_t v) {
#if defined(__GNUC__)
  __asm__("" : "+r"(v));
#endif
  return v;
}

// Renormalizes state *x from word *word of `words` (16-bit units; readable), branch-free: the
// candidate state is computed unconditionally and selected by the compare.
inline void renormalize(uint32_t* x, const uint8_t* words, size_t* word) {
  uint16_t w;
  memcpy(&w, words + 2 * *word, 2);  // little-endian host, as BitReader
  const uint32_t shifted = opaque((*x << 16) | w);
  const bool low = *x < kRansLow;
  *word += low;
  *x = low ? shifted : *x;
}

}  // namespace

// Rounds of kLanes symbols, one per lane, while a round's words (at most kLanes) remain; returns
// the symbols decoded. Starts at a round boundary (next_ % kLanes == 0).
#if EDGEFL_RANS_AVX2
namespace {

// For each 8-bit mask of the lanes that renormalize, lane j's word: the number of set bits below
// bit j (the scalar rounds hand words out to lanes 0..7 in order).
struct WordPermutations {
  uint32_t lane_word[256][8];
};
constexpr WordPermutations make_word_permutations() {
  WordPermutations t{};
  for (unsigned m = 0; m < 256; ++m) {
    unsigned below = 0;
    for (unsigned j = 0; j < 8; ++j) {
      t.lane_word[m][j] = below;
      below += (m >> j) & 1u;
    }
  }
  return t;
}
constexpr WordPermutations kWordPermutations = make_word_permutations();

// One step of the eight lanes in x: a gather of the slots' packed entries, then
// x = f * (x >> 12) + (slot - start); the eight symbols to out[0..8).
__attribute__((target("avx2"))) inline __m256i step8(__m256i x, const uint32_t* entries, uint8_t* out) {
  const __m256i slot_mask = _mm256_set1_epi32(int(kRansTotal - 1));
  // Byte 0 of each 32-bit element to bytes 0..3 of its 128-bit half.
  const __m256i first_bytes = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0,
                                               4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i e =
      _mm256_i32gather_epi32(reinterpret_cast<const int*>(entries), _mm256_and_si256(x, slot_mask), 4);
  const __m256i f = _mm256_add_epi32(_mm256_srli_epi32(e, 20), _mm256_set1_epi32(1));
  const __m256i bias = _mm256_and_si256(_mm256_srli_epi32(e, 8), slot_mask);
  const __m256i symbols = _mm256_shuffle_epi8(e, first_bytes);
  const uint32_t low_half = uint32_t(_mm_cvtsi128_si32(_mm256_castsi256_si128(symbols)));
  const uint32_t high_half = uint32_t(_mm_cvtsi128_si32(_mm256_extracti128_si256(symbols, 1)));
  memcpy(out, &low_half, 4);
  memcpy(out + 4, &high_half, 4);
  return _mm256_add_epi32(_mm256_mullo_epi32(f, _mm256_srli_epi32(x, int(kRansPrecision))), bias);
}

// The lanes of x below 2^16 take the next words in lane order (zero-extended, permuted into
// place, blended); *word advances by the words taken. words[*word .. *word + 8) is readable.
__attribute__((target("avx2"))) inline __m256i renormalize8(__m256i x, const uint8_t* words, size_t* word) {
  // x < 2^16 <=> x >> 16 == 0 (an unsigned compare through the shift).
  const __m256i low = _mm256_cmpeq_epi32(_mm256_srli_epi32(x, 16), _mm256_setzero_si256());
  const unsigned mask = unsigned(_mm256_movemask_ps(_mm256_castsi256_ps(low)));
  const __m256i next_words =
      _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(words + 2 * *word)));
  const __m256i placed = _mm256_permutevar8x32_epi32(
      next_words, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kWordPermutations.lane_word[mask])));
  *word += kWordPermutations.lane_word[mask][7] + (mask >> 7);  // the bits set
  return _mm256_blendv_epi8(x, _mm256_or_si256(_mm256_slli_epi32(x, 16), placed), low);
}

// decode_rounds<32> with the 32 states in four registers (four dependency chains): the same
// symbols, states and words as the scalar rounds. Returns the symbols decoded; *word_io
// receives the words read.
__attribute__((target("avx2"))) size_t decode_rounds32_avx2(uint32_t* state, const uint32_t* entries,
                                                            const uint8_t* words, size_t word_count,
                                                            size_t* word_io, uint8_t* out, size_t count) {
  static_assert(kRansWideLanes == 32, "four registers of eight lanes");
  __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(state));
  __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(state + 8));
  __m256i x2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(state + 16));
  __m256i x3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(state + 24));
  size_t word = 0;
  size_t i = 0;
  while (count - i >= 32 && word_count - word >= 32) {
    x0 = step8(x0, entries, out + i);
    x1 = step8(x1, entries, out + i + 8);
    x2 = step8(x2, entries, out + i + 16);
    x3 = step8(x3, entries, out + i + 24);
    x0 = renormalize8(x0, words, &word);
    x1 = renormalize8(x1, words, &word);
    x2 = renormalize8(x2, words, &word);
    x3 = renormalize8(x3, words, &word);
    i += 32;
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(state), x0);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(state + 8), x1);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(state + 16), x2);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(state + 24), x3);
  *word_io = word;
  return i;
}

}  // namespace
#endif

template <unsigned kLanes>
size_t RansDecoder::decode_rounds(uint8_t* out, size_t count) {
  const uint8_t* const words = data_ + pos_;
  const size_t word_count = (size_ - pos_) / 2;
  size_t word = 0;
#if EDGEFL_RANS_AVX2
  if (kLanes == kRansWideLanes && cpu_features().avx2) {
    const size_t decoded = decode_rounds32_avx2(state_, slot_entry_, words, word_count, &word, out, count);
    pos_ += 2 * word;
    next_ += decoded;
    return decoded;
  }
#endif
  uint32_t x[kLanes];
  for (unsigned k = 0; k < kLanes; ++k) x[k] = state_[k];
  size_t i = 0;
  while (count - i >= kLanes && word_count - word >= kLanes) {
    for (unsigned k = 0; k < kLanes; ++k) out[i + k] = uint8_t(step(&x[k]));
    for (unsigned k = 0; k < kLanes; ++k) renormalize(&x[k], words, &word);
    i += kLanes;
  }
  for (unsigned k = 0; k < kLanes; ++k) state_[k] = x[k];
  pos_ += 2 * word;
  next_ += i;
  return i;
}
#endif

Status RansDecoder::decode(uint8_t* out, size_t count) {
  size_t i = 0;
#if !defined(__OPTIMIZE_SIZE__)
  while (i < count && (next_ & (lanes_ - 1)) != 0) out[i++] = uint8_t(get());
  i += lanes_ == kRansWideLanes ? decode_rounds<kRansWideLanes>(out + i, count - i)
                                : decode_rounds<kRansLanes>(out + i, count - i);
#endif
  while (i < count) out[i++] = uint8_t(get());
  return overrun_ ? Status::kCorruptPayload : Status::kOk;
}

}  // namespace entropy
}  // namespace edgefl
