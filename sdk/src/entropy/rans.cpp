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
  return (cost + 255) / 256 + 64;
}

void rans_write_table(const uint16_t* freq, unsigned symbols, BitWriter* w) {
  for (unsigned s = 0; s < symbols; ++s) w->put(freq[s], 13);
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
  uint32_t state[2] = {kRansLow, kRansLow};
  for (size_t i = count; i-- > 0;) {
    const unsigned s = symbols[i];
    const uint32_t f = freq[s];
    if (f == 0) return 0;  // not in the table: the caller's counts were wrong
    uint32_t& x = state[i & 1];
    const uint32_t x_max = ((kRansLow >> kRansPrecision) << 8) * f;
    while (x >= x_max) {
      if (p == out) return 0;
      *--p = uint8_t(x);
      x >>= 8;
    }
    x = ((x / f) << kRansPrecision) + (x % f) + start[s];
  }
  // The decoder reads x0 then x1, little-endian: write them last, backwards.
  if (size_t(p - out) < 8) return 0;
  p -= 8;
  store_le32(p, state[0]);
  store_le32(p + 4, state[1]);
  const size_t size = size_t(out + cap - p);
  memmove(out, p, size);
  return size;
}

Status RansDecoder::read_table(BitReader* r, unsigned symbols) {
  if (symbols == 0 || symbols > kRansMaxSymbols) return Status::kCorruptPayload;
  uint32_t cumulative = 0;
  for (unsigned s = 0; s < symbols; ++s) {
    const uint32_t f = uint32_t(r->get(13));
    if (f > kRansTotal || cumulative + f > kRansTotal) return Status::kCorruptPayload;
    freq_[s] = uint16_t(f);
    start_[s] = uint16_t(cumulative);
    for (uint32_t j = 0; j < f; ++j) slot_symbol_[cumulative + j] = uint8_t(s);
    cumulative += f;
  }
  if (r->failed() || cumulative != kRansTotal) return Status::kCorruptPayload;
  return Status::kOk;
}

Status RansDecoder::begin(const uint8_t* stream, size_t size) {
  if (size < 8) return Status::kCorruptPayload;
  state_[0] = load_le32(stream);
  state_[1] = load_le32(stream + 4);
  if (state_[0] < kRansLow || state_[1] < kRansLow || state_[0] >= (kRansLow << 8) ||
      state_[1] >= (kRansLow << 8)) {
    return Status::kCorruptPayload;
  }
  data_ = stream;
  size_ = size;
  pos_ = 8;
  overrun_ = false;
  return Status::kOk;
}

}  // namespace entropy
}  // namespace edgefl
