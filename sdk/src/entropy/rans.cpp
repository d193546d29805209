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
// below 2^31); x - q f < 0 (as a 32-bit signed difference) tells, and q - 1 corrects. Then the
// step x' = (x / f) * 4096 + x % f + start is x + bias + q * (4096 - f).
//
// Per symbol, two 32-bit words (so that the AVX2 rounds gather two): the reciprocal, and
// bias | f << 13 | shift << 26 (bias <= 8190, f <= 4096, shift <= 11; f = 0: not in the table).
// The renormalization bound, 2^20 f - 1, is computed from f (2^32 - 1 for f = 4096, by wrapping).
struct EncoderTable {
  uint32_t reciprocal[kRansMaxSymbols];
  uint32_t packed[kRansMaxSymbols];
};

constexpr uint32_t kField13 = (1u << 13) - 1;

void make_encoder_table(const uint16_t* freq, unsigned symbols, EncoderTable* t) {
  uint32_t start = 0;
  for (unsigned s = 0; s < kRansMaxSymbols; ++s) {
    const uint32_t f = s < symbols ? freq[s] : 0;
    uint32_t reciprocal = 0, shift = 0, bias = start;
    if (f == 1) {
      // q = x - 1 for x >= 1: x + (start + 4095) + (x - 1) * 4095 = x * 4096 + start.
      reciprocal = ~0u;
      bias = start + kRansTotal - 1;
    } else if (f >= 2) {
      unsigned bits = 0;
      while (f > (1u << bits)) ++bits;
      reciprocal = uint32_t(((uint64_t(1) << (bits + 31)) + f - 1) / f);
      shift = bits - 1;
    }
    t->reciprocal[s] = reciprocal;
    t->packed[s] = f == 0 ? 0 : bias | f << 13 | shift << 26;
    start += f;
  }
}

// One encoding step of state *x with symbol s (hosted builds): emits at most one word below *p
// (stored whatever happens, kept only if *p moves down over it: the branch is a coin flip).
// False if s is not in the table or the word does not fit above `out`.
inline bool encode_step(uint32_t* x_io, const EncoderTable& t, unsigned s, uint8_t** p_io, uint8_t* out) {
  const uint32_t packed = t.packed[s];
  const uint32_t f = (packed >> 13) & kField13;
  if (f == 0) return false;
  uint32_t x = *x_io;
  uint8_t* p = *p_io;
  // x in [2^16, 2^32): one 16-bit word brings it below 2^20 f, whence the step lands back in
  // [2^16, 2^32).
  const bool emit = x > (f << 20) - 1;
  if (p - out < 2) {
    if (emit) return false;
  } else {
    store_le16(p - 2, uint16_t(x));
  }
  *p_io = p - (emit ? 2 : 0);
  x = emit ? x >> 16 : x;
  uint32_t q = uint32_t((uint64_t(x) * t.reciprocal[s]) >> 32) >> (packed >> 26);
  q -= int32_t(x - q * f) < 0 ? 1 : 0;
  *x_io = x + (packed & kField13) + q * (kRansTotal - f);
  return true;
}
#endif

#if EDGEFL_RANS_AVX2
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

// The lanes set in an 8-bit mask (the words a round of eight lanes reads or writes).
constexpr unsigned lanes_set(unsigned mask) {
  return kWordPermutations.lane_word[mask][7] + (mask >> 7);
}

// For each 8-bit mask of the lanes that emit a word: the pshufb control that moves those lanes'
// 16-bit words, in lane order, to the top of 16 bytes (the rest zero).
struct EmitShuffles {
  uint8_t control[256][16];
};
constexpr EmitShuffles make_emit_shuffles() {
  EmitShuffles t{};
  for (unsigned m = 0; m < 256; ++m) {
    const unsigned count = lanes_set(m);
    for (unsigned b = 0; b < 16; ++b) t.control[m][b] = 0x80;
    unsigned slot = 8 - count;
    for (unsigned j = 0; j < 8; ++j) {
      if (((m >> j) & 1u) == 0) continue;
      t.control[m][2 * slot] = uint8_t(2 * j);
      t.control[m][2 * slot + 1] = uint8_t(2 * j + 1);
      ++slot;
    }
  }
  return t;
}
constexpr EmitShuffles kEmitShuffles = make_emit_shuffles();

// The table entries of alphabets of at most 16 symbols, in registers.
struct SmallTable {
  __m256i packed_low, packed_high, reciprocal_low, reciprocal_high;
};

// Entry s (< 16) of the table whose entries 0..7 are in `low` and 8..15 in `high`; `bit3` has
// bit 3 of each s in its sign bit.
__attribute__((target("avx2"))) inline __m256i pick16(__m256i low, __m256i high, __m256i s, __m256 bit3) {
  return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(_mm256_permutevar8x32_epi32(low, s)),
                                              _mm256_castsi256_ps(_mm256_permutevar8x32_epi32(high, s)),
                                              bit3));
}

// encode_step for the eight lanes of x with symbols[0..8), their words stored as one 16-byte
// block ending at *p (16 bytes below *p must be writable). The entries are gathered, or for
// alphabets of at most 16 symbols (kSmallAlphabet) picked from `small` by two permutes and a
// blend. False if a symbol is not in the table.
template <bool kSmallAlphabet>
__attribute__((target("avx2"))) inline bool encode_step8(__m256i* x_io, const EncoderTable& t,
                                                         const SmallTable& small, const uint8_t* symbols,
                                                         uint8_t** p_io) {
  uint64_t eight;
  memcpy(&eight, symbols, 8);
  const __m256i s = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(eight)));
  __m256i packed, reciprocal;
  if (kSmallAlphabet) {
    const __m256 high = _mm256_castsi256_ps(_mm256_slli_epi32(s, 28));  // bit 3 to the sign
    // Symbols from 16 on are outside the alphabet: f = 0 below.
    packed = _mm256_andnot_si256(_mm256_cmpgt_epi32(s, _mm256_set1_epi32(15)),
                                 pick16(small.packed_low, small.packed_high, s, high));
    reciprocal = pick16(small.reciprocal_low, small.reciprocal_high, s, high);
  } else {
    packed = _mm256_i32gather_epi32(reinterpret_cast<const int*>(t.packed), s, 4);
    reciprocal = _mm256_i32gather_epi32(reinterpret_cast<const int*>(t.reciprocal), s, 4);
  }
  const __m256i field = _mm256_set1_epi32(int(kField13));
  const __m256i f = _mm256_and_si256(_mm256_srli_epi32(packed, 13), field);
  if (_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(f, _mm256_setzero_si256()))) != 0)
    return false;
  __m256i x = *x_io;
  const __m256i above = _mm256_sub_epi32(_mm256_slli_epi32(f, 20), _mm256_set1_epi32(1));
  // x > above, unsigned: max(x, above) != above.
  const __m256i stays = _mm256_cmpeq_epi32(_mm256_max_epu32(x, above), above);
  const unsigned emit = ~unsigned(_mm256_movemask_ps(_mm256_castsi256_ps(stays))) & 0xFFu;
  const __m256i low_words = _mm256_and_si256(x, _mm256_set1_epi32(0xFFFF));
  const __m128i words =
      _mm_packus_epi32(_mm256_castsi256_si128(low_words), _mm256_extracti128_si256(low_words, 1));
  const __m128i placed =
      _mm_shuffle_epi8(words, _mm_loadu_si128(reinterpret_cast<const __m128i*>(kEmitShuffles.control[emit])));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(*p_io - 16), placed);
  *p_io -= 2 * lanes_set(emit);  // two bytes a word emitted
  x = _mm256_blendv_epi8(_mm256_srli_epi32(x, 16), x, stays);
  // q = hi32(x * reciprocal) >> shift, the even and odd lanes' 64-bit products put together.
  const __m256i even = _mm256_mul_epu32(x, reciprocal);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(x, 32), _mm256_srli_epi64(reciprocal, 32));
  const __m256i high = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
  __m256i q = _mm256_srlv_epi32(high, _mm256_srli_epi32(packed, 26));
  const __m256i remainder = _mm256_sub_epi32(x, _mm256_mullo_epi32(q, f));
  q = _mm256_add_epi32(q, _mm256_srai_epi32(remainder, 31));  // -1 where x - q f < 0
  const __m256i complement = _mm256_sub_epi32(_mm256_set1_epi32(int(kRansTotal)), f);
  *x_io = _mm256_add_epi32(
      x, _mm256_add_epi32(_mm256_and_si256(packed, field), _mm256_mullo_epi32(q, complement)));
  return true;
}

// Rounds of 32 symbols of a 32-lane stream, from round `rounds` - 1 down to 0, while 64 bytes
// above `out` remain below *p: the words of lanes 31..0 in the scalar order. Returns the rounds
// left (their symbols still to encode), or -1 if a symbol is not in the table.
template <bool kSmallAlphabet>
__attribute__((target("avx2"))) long encode_rounds32_avx2(uint32_t* state, const EncoderTable& t,
                                                          const uint8_t* symbols, size_t rounds,
                                                          uint8_t** p_io, uint8_t* out) {
  SmallTable small;
  small.packed_low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.packed));
  small.packed_high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.packed + 8));
  small.reciprocal_low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.reciprocal));
  small.reciprocal_high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.reciprocal + 8));
  __m256i x[4];
  for (unsigned g = 0; g < 4; ++g) x[g] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(state + 8 * g));
  uint8_t* p = *p_io;
  size_t r = rounds;
  bool ok = true;
  while (r > 0 && p - out >= 64 && ok) {
    --r;
    const uint8_t* round = symbols + 32 * r;
    ok = encode_step8<kSmallAlphabet>(&x[3], t, small, round + 24, &p) &&
         encode_step8<kSmallAlphabet>(&x[2], t, small, round + 16, &p) &&
         encode_step8<kSmallAlphabet>(&x[1], t, small, round + 8, &p) &&
         encode_step8<kSmallAlphabet>(&x[0], t, small, round, &p);
  }
  for (unsigned g = 0; g < 4; ++g) _mm256_storeu_si256(reinterpret_cast<__m256i*>(state + 8 * g), x[g]);
  *p_io = p;
  return ok ? long(r) : -1;
}
#endif

}  // namespace

size_t rans_encode(const uint8_t* symbols, size_t count, const uint16_t* freq, unsigned symbols_in_alphabet,
                   unsigned lanes, uint8_t* out, size_t cap) {
  return rans_encode_with(symbols, count, freq, symbols_in_alphabet, lanes, out, cap, true);
}

size_t rans_encode_with(const uint8_t* symbols, size_t count, const uint16_t* freq,
                        unsigned symbols_in_alphabet, unsigned lanes, uint8_t* out, size_t cap, bool simd) {
  (void)simd;
  if (lanes != kRansLanes && lanes != kRansWideLanes) return 0;
  uint8_t* p = out + cap;
  uint32_t state[kRansWideLanes];
  for (unsigned k = 0; k < lanes; ++k) state[k] = kRansLow;
#if defined(__OPTIMIZE_SIZE__)
  uint16_t start[kRansMaxSymbols];
  uint32_t cumulative = 0;
  for (unsigned s = 0; s < symbols_in_alphabet; ++s) {
    start[s] = uint16_t(cumulative);
    cumulative += freq[s];
  }
  for (size_t i = count; i-- > 0;) {
    const unsigned s = symbols[i];
    const uint32_t f = s < symbols_in_alphabet ? freq[s] : 0;
    if (f == 0) return 0;  // not in the table: the caller's counts were wrong
    uint32_t& x = state[i & (lanes - 1)];
    if (x >= (uint64_t(kRansLow >> kRansPrecision) << 16) * f) {
      if (p - out < 2) return 0;
      p -= 2;
      store_le16(p, uint16_t(x));
      x >>= 16;
    }
    x = ((x / f) << kRansPrecision) + (x % f) + start[s];
  }
#else
  EncoderTable table;
  make_encoder_table(freq, symbols_in_alphabet, &table);
  size_t i = count;
#if EDGEFL_RANS_AVX2
  // The symbols past the last whole round first (the stream is written backwards), then whole
  // rounds with AVX2 while there is room, then the rest symbol by symbol.
  if (simd && lanes == kRansWideLanes && cpu_features().avx2) {
    const size_t rounds = count / kRansWideLanes;
    for (; i > rounds * kRansWideLanes; --i) {
      if (!encode_step(&state[(i - 1) & (lanes - 1)], table, symbols[i - 1], &p, out)) return 0;
    }
    const long left = symbols_in_alphabet <= 16
                          ? encode_rounds32_avx2<true>(state, table, symbols, rounds, &p, out)
                          : encode_rounds32_avx2<false>(state, table, symbols, rounds, &p, out);
    if (left < 0) return 0;
    i = size_t(left) * kRansWideLanes;
  }
#endif
  for (; i > 0; --i) {
    if (!encode_step(&state[(i - 1) & (lanes - 1)], table, symbols[i - 1], &p, out)) return 0;
  }
#endif
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
    cumulative += freq_[s];
  }
#if EDGEFL_RANS_SLOT_ENTRIES
  slot_entries_ready_ = false;
#endif
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
#if EDGEFL_RANS_AVX2
  // The AVX2 rounds' packed entries, once per table (short 4-lane streams never pay for them).
  if (lanes == kRansWideLanes && !slot_entries_ready_) {
    for (uint32_t slot = 0; slot < kRansTotal; ++slot) {
      const unsigned s = slot_symbol_[slot];
      slot_entry_[slot] = s | (slot - start_[s]) << 8 | (uint32_t(freq_[s]) - 1) << 20;
    }
    slot_entries_ready_ = true;
  }
#endif
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
  *word += lanes_set(mask);
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
