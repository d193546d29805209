// Internal: coding of strictly increasing index sets {i_0 < i_1 < ... < i_{k-1}} < n.
//
// Elias-Fano (Elias 1974; Fano 1971): L = floor(log2(n / k)) low bits per index, LSB-first, then
// the high parts i >> L as unary gaps; at most 2 + log2(n/k) bits per index, whatever the set.
//
// Adaptive Rice: gap g = i_j - i_{j-1} - 1 (i_{-1} = -1), coded as unary(g >> r) then r bits,
// with r adapted from a running mean of recent gaps (the LOCO-I / JPEG-LS rule, Weinberger,
// Seroussi, Sapiro, IEEE TIP 2000), so that clustered sets cost less than the uniform bound.
// A quotient of kRiceEscape or more is sent as unary(kRiceEscape) then the gap in
// ceil(log2(n)) bits, which bounds every index at kRiceEscape + 1 + max(r, log2 n) bits.
#ifndef EDGEFL_SRC_CODEC_INDEX_CODING_H_
#define EDGEFL_SRC_CODEC_INDEX_CODING_H_

#include <stddef.h>
#include <stdint.h>

#include "core/bitio.h"

namespace edgefl {
namespace index_coding {

constexpr unsigned kRiceEscape = 24;

// ---- Elias-Fano -------------------------------------------------------------------------------

inline unsigned ef_low_bits(uint64_t n, uint64_t k) {
  return k == 0 || n <= k ? 0 : floor_log2(n / k);
}
inline uint64_t ef_low_bytes(uint64_t n, uint64_t k) {
  return (k * ef_low_bits(n, k) + 7) / 8;
}
inline uint64_t ef_high_bytes(uint64_t n, uint64_t k) {
  return k == 0 ? 0 : (k + (n >> ef_low_bits(n, k)) + 7) / 8;
}
inline uint64_t ef_bytes(uint64_t n, uint64_t k) {
  return ef_low_bytes(n, k) + ef_high_bytes(n, k);
}

class EliasFanoWriter {
 public:
  EliasFanoWriter(uint64_t n, uint64_t k, uint8_t* out)
      : low_bits_(ef_low_bits(n, k)),
        low_(out, size_t(ef_low_bytes(n, k))),
        high_(out + ef_low_bytes(n, k), size_t(ef_high_bytes(n, k))) {}
  void add(uint32_t index) {
    low_.put(index, low_bits_);
    const uint64_t high = uint64_t(index) >> low_bits_;
    high_.put_unary(high - prev_high_);
    prev_high_ = high;
  }
  void finish() {
    low_.finish_and_fill();
    high_.finish_and_fill();
  }
  bool overflowed() const { return low_.overflowed() || high_.overflowed(); }

 private:
  unsigned low_bits_;
  BitWriter low_;
  BitWriter high_;
  uint64_t prev_high_ = 0;
};

// Reads the indices back bit by bit (BitReader): the reference, and the reader of builds for
// size (a few hundred bytes smaller).
class EliasFanoBitReader {
 public:
  EliasFanoBitReader(uint64_t n, uint64_t k, const uint8_t* data)
      : n_(n),
        low_bits_(ef_low_bits(n, k)),
        low_(data, size_t(ef_low_bytes(n, k))),
        high_reader_(data + ef_low_bytes(n, k), size_t(ef_high_bytes(n, k))) {}
  // Next index; the caller checks failed() at the end, and range and order as it goes.
  EDGEFL_SIZE_NOINLINE uint64_t next() {
    const uint64_t low = low_.get(low_bits_);
    high_ += high_reader_.get_unary(n_ >> low_bits_);
    return (high_ << low_bits_) | low;
  }
  void next_many(uint32_t* out, uint32_t count) {
    for (uint32_t j = 0; j < count; ++j) out[j] = uint32_t(next());
  }
  bool failed() const { return low_.failed() || high_reader_.failed(); }

 private:
  uint64_t n_;
  unsigned low_bits_;
  BitReader low_;
  BitReader high_reader_;
  uint64_t high_ = 0;
};

// Reads the indices back in order, a word at a time: a low part is one unaligned load at bit
// j * L, a high part the position of the next one bit in the high bitmap (found with a
// count-trailing-zeros over a 64-bit word) minus j. Fails (sticky) where the bit-by-bit reading
// would: a run of more than n >> L zeros, or no one bit left in the high region.
class EliasFanoWordReader {
 public:
  EliasFanoWordReader(uint64_t n, uint64_t k, const uint8_t* data)
      : low_bits_(ef_low_bits(n, k)),
        low_mask_(low_bits_ == 0 ? 0 : (~uint64_t(0) >> (64 - low_bits_))),
        max_zeros_(n >> ef_low_bits(n, k)),
        low_(data),
        low_size_(size_t(ef_low_bytes(n, k))),
        high_(data + ef_low_bytes(n, k)),
        high_size_(size_t(ef_high_bytes(n, k))) {}
  // Next index; the caller checks failed() at the end, and range and order as it goes.
  uint64_t next() {
    uint64_t low = 0;
    if (low_bits_ != 0) {
      const size_t byte = size_t(low_bit_ >> 3);
      const unsigned shift = unsigned(low_bit_ & 7);
      low_bit_ += low_bits_;
      low = (load_at_most_8(low_, low_size_, byte) >> shift) & low_mask_;  // shift + L <= 37
      if (low_bit_ > uint64_t(low_size_) * 8) failed_ = true;
    }
    while (word_ == 0) {
      if (next_byte_ >= high_size_) {
        failed_ = true;
        return 0;
      }
      word_ = load_at_most_8(high_, high_size_, next_byte_);
      word_bit_ = uint64_t(next_byte_) * 8;
      next_byte_ += 8;
    }
    const uint64_t one = word_bit_ + unsigned(__builtin_ctzll(word_));
    word_ &= word_ - 1;
    if (one - previous_one_ - 1 > max_zeros_) failed_ = true;  // previous_one_ starts at -1
    previous_one_ = one;
    const uint64_t high = one - count_++;
    return (high << low_bits_) | low;
  }
  // The next `count` indices into out, as `count` calls of next() would give them (the caller's
  // n is at most EDGEFL_MAX_DIMENSION < 2^32). Where every low part can be loaded whole, the
  // one bits of a high word are taken in a tight loop.
  void next_many(uint32_t* out, uint32_t count) {
    // The state in locals: stores to out may alias the members, which would be reloaded.
    const unsigned low_bits = low_bits_;
    const uint64_t low_mask = low_mask_, max_zeros = max_zeros_;
    const uint8_t* const low_data = low_;
    // The last bit position at which a low part starts within a whole 8-byte load (negative:
    // none does).
    const int64_t low_last_fast_bit = int64_t(low_size_) * 8 - 57;
    uint64_t low_bit = low_bit_, word = word_, word_bit = word_bit_, previous_one = previous_one_;
    uint64_t position = count_;
    size_t next_byte = next_byte_;
    bool bad = false;
    uint32_t j = 0;
    while (j < count) {
      if (word == 0) {
        if (next_byte + 8 > high_size_) break;  // the region's last word: next() reads it
        word = load_le64(high_ + next_byte);
        word_bit = uint64_t(next_byte) * 8;
        next_byte += 8;
        continue;
      }
      // The one bits of this word, as many as are wanted and whose low parts load whole.
      uint64_t take = unsigned(__builtin_popcountll(word));
      if (take > count - j) take = count - j;
      if (low_bits != 0) {
        if (int64_t(low_bit) > low_last_fast_bit) break;
        const uint64_t loadable = uint64_t(low_last_fast_bit - int64_t(low_bit)) / low_bits + 1;
        if (take > loadable) take = loadable;
      }
      // A run of zeros longer than max_zeros ends at this word's first one bit or, when
      // max_zeros < 63, maybe between two of its one bits.
      bad |= word_bit + unsigned(__builtin_ctzll(word)) - previous_one - 1 > max_zeros;
      if (max_zeros < 63) {
        uint64_t w = word, prev = word_bit + unsigned(__builtin_ctzll(word));
        for (uint64_t t = 1; t < take; ++t) {
          w &= w - 1;
          const uint64_t one = word_bit + unsigned(__builtin_ctzll(w));
          bad |= one - prev - 1 > max_zeros;
          prev = one;
        }
      }
      uint32_t* const run = out + j;
      const uint64_t first_high = word_bit - position;  // high part = one bit's position - its rank
      uint64_t one = 0;
      if (low_bits == 0) {
        for (uint64_t t = 0; t < take; ++t) {
          one = unsigned(__builtin_ctzll(word));
          word &= word - 1;
          run[t] = uint32_t(first_high + one - t);
        }
      } else {
        for (uint64_t t = 0; t < take; ++t) {
          const uint64_t low =
              (load_le64(low_data + size_t(low_bit >> 3)) >> unsigned(low_bit & 7)) & low_mask;
          low_bit += low_bits;
          one = unsigned(__builtin_ctzll(word));
          word &= word - 1;
          run[t] = uint32_t(((first_high + one - t) << low_bits) | low);
        }
      }
      // High parts do not decrease along a word: the last one is the largest. An index past
      // 2^32 would be truncated in out; it is a fault (n < 2^32), flagged here.
      bad |= ((first_high + one - (take - 1)) << low_bits) >> 32 != 0;
      previous_one = word_bit + one;
      position += take;
      j += uint32_t(take);
    }
    low_bit_ = low_bit;
    word_ = word;
    word_bit_ = word_bit;
    previous_one_ = previous_one;
    count_ = position;
    next_byte_ = next_byte;
    for (; j < count; ++j) {
      const uint64_t index = next();
      bad |= index >> 32 != 0;
      out[j] = uint32_t(index);
    }
    if (bad) failed_ = true;
  }
  bool failed() const { return failed_; }

 private:
  // The little-endian 64-bit word at data + at, zeros past size.
  static uint64_t load_at_most_8(const uint8_t* data, size_t size, size_t at) {
    if (at + 8 <= size) return load_le64(data + at);
    uint64_t word = 0;
    for (size_t i = 0; at + i < size && i < 8; ++i) word |= uint64_t(data[at + i]) << (8 * i);
    return word;
  }
  unsigned low_bits_;
  uint64_t low_mask_;
  uint64_t max_zeros_;
  const uint8_t* low_;
  size_t low_size_;
  const uint8_t* high_;
  size_t high_size_;
  uint64_t low_bit_ = 0;
  uint64_t word_ = 0;
  uint64_t word_bit_ = 0;
  size_t next_byte_ = 0;
  uint64_t previous_one_ = ~uint64_t(0);
  uint64_t count_ = 0;
  bool failed_ = false;
};

#if defined(__OPTIMIZE_SIZE__)
using EliasFanoReader = EliasFanoBitReader;
#else
using EliasFanoReader = EliasFanoWordReader;
#endif

// ---- Adaptive Rice ----------------------------------------------------------------------------

// The adaptive state shared by the Rice writer, reader and cost estimator.
class RiceState {
 public:
  RiceState(uint64_t n, uint64_t k) {
    // Prime the mean with the uniform expectation n / k.
    const uint64_t mean = k == 0 ? 1 : (n / k);
    sum_ = mean * 4;
    count_ = 4;
  }
  // One less than the least r <= 31 with count << r >= sum (0 if that r is 0).
  unsigned parameter() const {
#if defined(__OPTIMIZE_SIZE__)
    unsigned r = 0;  // the search (fewer bytes of code)
    while ((count_ << r) < sum_ && r < 31) ++r;
    return r > 0 ? r - 1 : 0;
#else
    if (count_ >= sum_) return 0;
    // count << r has sum's bit length; one more doubling if it is still short.
    unsigned r = floor_log2(sum_) - floor_log2(count_);
    r += (count_ << r) < sum_ ? 1 : 0;
    return r > 31 ? 30 : r - 1;
#endif
  }
  void update(uint64_t gap) {
    sum_ += gap + 1;
    if (++count_ >= 32) {
      sum_ >>= 1;
      count_ >>= 1;
    }
  }

 private:
  uint64_t sum_;
  uint64_t count_;
};

inline unsigned raw_gap_bits(uint64_t n) {
  return n <= 1 ? 1 : ceil_log2(n);
}

// Bits the adaptive Rice code spends on one gap.
inline uint64_t rice_gap_cost(uint64_t gap, unsigned r, unsigned raw_bits) {
  const uint64_t q = gap >> r;
  return q < kRiceEscape ? q + 1 + r : kRiceEscape + 1 + raw_bits;
}

class RiceWriter {
 public:
  RiceWriter(uint64_t n, uint64_t k, uint8_t* out, size_t size)
      : state_(n, k), raw_bits_(raw_gap_bits(n)), w_(out, size) {}
  void add(uint32_t index) {
    const uint64_t gap = uint64_t(index) - next_;  // next_ = previous index + 1
    next_ = uint64_t(index) + 1;
    const unsigned r = state_.parameter();
    const uint64_t q = gap >> r;
    if (q < kRiceEscape) {
      w_.put_unary(q);
      w_.put(gap, r);
    } else {
      w_.put_unary(kRiceEscape);
      w_.put(gap, raw_bits_);
    }
    state_.update(gap);
  }
  size_t finish() { return w_.finish(); }
  bool overflowed() const { return w_.overflowed(); }

 private:
  RiceState state_;
  unsigned raw_bits_;
  BitWriter w_;
  uint64_t next_ = 0;
};

class RiceReader {
 public:
  RiceReader(uint64_t n, uint64_t k, const uint8_t* data, size_t size)
      : state_(n, k), raw_bits_(raw_gap_bits(n)), r_(data, size) {}
  EDGEFL_SIZE_NOINLINE uint64_t next() {
    const unsigned r = state_.parameter();
    const uint64_t q = r_.get_unary(kRiceEscape);
    const uint64_t gap = q < kRiceEscape ? (q << r) | r_.get(r) : r_.get(raw_bits_);
    state_.update(gap);
    const uint64_t index = next_ + gap;
    next_ = index + 1;
    return index;
  }
  // The next `count` indices into out (n < 2^32), as `count` calls of next(). An index past
  // 2^32 (only from a corrupt stream) fails the reader.
  void next_many(uint32_t* out, uint32_t count) {
    // The state in locals: stores to out may alias the members, which would be reloaded.
    RiceState state = state_;
    BitReader r = r_;
    uint64_t next_index = next_;
    const unsigned raw_bits = raw_bits_;
    bool wide = false;
    for (uint32_t j = 0; j < count; ++j) {
      const unsigned rice = state.parameter();
      // Quotient and remainder from one 56-bit window when the quotient is short (always but
      // for escapes: rice <= 30, so q + 1 + rice <= 55); else bit by bit.
      const uint64_t window = r.peek(56);
      const unsigned q_short = window == 0 ? 64u : unsigned(__builtin_ctzll(window));
      uint64_t gap;
      if (q_short < kRiceEscape) {
        gap = (uint64_t(q_short) << rice) | ((window >> (q_short + 1)) & ((uint64_t(1) << rice) - 1));
        r.skip(q_short + 1 + rice);
      } else {
        const uint64_t q = r.get_unary(kRiceEscape);
        gap = q < kRiceEscape ? (q << rice) | r.get(rice) : r.get(raw_bits);
      }
      state.update(gap);
      const uint64_t index = next_index + gap;
      next_index = index + 1;
      wide |= index >> 32 != 0;
      out[j] = uint32_t(index);
    }
    state_ = state;
    r_ = r;
    next_ = next_index;
    if (wide) r_.fail();
  }
  bool failed() const { return r_.failed(); }
  size_t bit_position() const { return r_.bit_position(); }

 private:
  RiceState state_;
  unsigned raw_bits_;
  BitReader r_;
  uint64_t next_ = 0;
};

class RiceCost {
 public:
  RiceCost(uint64_t n, uint64_t k) : state_(n, k), raw_bits_(raw_gap_bits(n)) {}
  void add(uint32_t index) {
    const uint64_t gap = uint64_t(index) - next_;
    next_ = uint64_t(index) + 1;
    bits_ += rice_gap_cost(gap, state_.parameter(), raw_bits_);
    state_.update(gap);
  }
  uint64_t bytes() const { return (bits_ + 7) / 8; }

 private:
  RiceState state_;
  unsigned raw_bits_;
  uint64_t next_ = 0;
  uint64_t bits_ = 0;
};

// Worst-case Rice bytes for k indices below n.
inline uint64_t rice_bound_bytes(uint64_t n, uint64_t k) {
  const uint64_t per = kRiceEscape + 1 + (raw_gap_bits(n) > 31 ? raw_gap_bits(n) : 31);
  return (k * per + 7) / 8;
}

}  // namespace index_coding
}  // namespace edgefl

#endif  // EDGEFL_SRC_CODEC_INDEX_CODING_H_
