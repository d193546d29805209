#include "entropy/rans.h"

#include <string.h>

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

uint64_t rans_cost_bits(const uint32_t* counts, const uint16_t* freq, unsigned symbols) {
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
  return (cost + 255) / 256 + 8 * kRansStateBytes;
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

size_t rans_encode(const uint8_t* symbols, size_t count, const uint16_t* freq, unsigned symbols_in_alphabet,
                   uint8_t* out, size_t cap) {
  uint16_t start[kRansMaxSymbols];
  uint32_t cumulative = 0;
  for (unsigned s = 0; s < symbols_in_alphabet; ++s) {
    start[s] = uint16_t(cumulative);
    cumulative += freq[s];
  }
  uint8_t* p = out + cap;
  uint32_t state[kRansStates];
  for (unsigned k = 0; k < kRansStates; ++k) state[k] = kRansLow;
  for (size_t i = count; i-- > 0;) {
    const unsigned s = symbols[i];
    const uint32_t f = freq[s];
    if (f == 0) return 0;  // not in the table: the caller's counts were wrong
    uint32_t& x = state[i % kRansStates];
    // x in [2^16, 2^32): one 16-bit word brings it below 2^20 f, whence the step lands back in
    // [2^16, 2^32). 64-bit bound: 2^20 f is 2^32 for f = 4096.
    const uint64_t x_max = (uint64_t(kRansLow >> kRansPrecision) << 16) * f;
    if (x >= x_max) {
      if (p - out < 2) return 0;
      p -= 2;
      store_le16(p, uint16_t(x));
      x >>= 16;
    }
    x = ((x / f) << kRansPrecision) + (x % f) + start[s];
  }
  // The decoder reads x0..x3 first, little-endian: write them last, backwards.
  if (size_t(p - out) < kRansStateBytes) return 0;
  p -= kRansStateBytes;
  for (unsigned k = 0; k < kRansStates; ++k) store_le32(p + 4 * k, state[k]);
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
  return Status::kOk;
}

Status RansDecoder::begin(const uint8_t* stream, size_t size) {
  if (size < kRansStateBytes) return Status::kCorruptPayload;
  for (unsigned k = 0; k < kRansStates; ++k) {
    state_[k] = load_le32(stream + 4 * k);
    if (state_[k] < kRansLow) return Status::kCorruptPayload;
  }
  data_ = stream;
  size_ = size;
  pos_ = kRansStateBytes;
  next_ = 0;
  overrun_ = false;
  return Status::kOk;
}

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

Status RansDecoder::decode(uint8_t* out, size_t count) {
  static_assert(kRansStates == 4, "the round below is written for four states");
  size_t i = 0;
  while (i < count && next_ % kRansStates != 0) out[i++] = uint8_t(get());
  // Rounds of four symbols, one per state: at most four words (8 bytes) per round.
  uint32_t x0 = state_[0], x1 = state_[1], x2 = state_[2], x3 = state_[3];
  const uint8_t* const words = data_ + pos_;
  const size_t word_count = (size_ - pos_) / 2;
  size_t word = 0;
  const size_t rounds_start = i;
  while (count - i >= kRansStates && word_count - word >= kRansStates) {
    out[i] = uint8_t(step(&x0));
    out[i + 1] = uint8_t(step(&x1));
    out[i + 2] = uint8_t(step(&x2));
    out[i + 3] = uint8_t(step(&x3));
    renormalize(&x0, words, &word);
    renormalize(&x1, words, &word);
    renormalize(&x2, words, &word);
    renormalize(&x3, words, &word);
    i += kRansStates;
  }
  state_[0] = x0;
  state_[1] = x1;
  state_[2] = x2;
  state_[3] = x3;
  pos_ += 2 * word;
  next_ += i - rounds_start;
  while (i < count) out[i++] = uint8_t(get());
  return overrun_ ? Status::kCorruptPayload : Status::kOk;
}

}  // namespace entropy
}  // namespace edgefl
