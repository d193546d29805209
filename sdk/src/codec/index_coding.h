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
  unsigned parameter() const {
    unsigned r = 0;
    while ((count_ << r) < sum_ && r < 31) ++r;
    return r > 0 ? r - 1 : 0;
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
