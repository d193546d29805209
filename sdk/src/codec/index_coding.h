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
//
// Block Rice: the same gaps in blocks of kBlockRiceGaps, each block Rice-coded with the parameter
// that minimises its bits (chosen by the encoder, which sees the block: partitioned Rice coding as
// in FLAC's residual coding, with partitions of fixed size), and the two halves of every code in
// separate streams as in Elias-Fano: the remainders (r bits each, at positions known once the
// block's r is read) and the quotients (unary, read a 64-bit word at a time). No parameter depends
// on a decoded gap, so decoding is not one serial chain through an adaptive state; and on the
// clustered sets top-k selects (runs of neighbours, then long jumps) a per-block optimum costs
// 0.2 to 2 bits per index less than the adaptive rule.
#ifndef EDGEFL_SRC_CODEC_INDEX_CODING_H_
#define EDGEFL_SRC_CODEC_INDEX_CODING_H_

#include <stddef.h>
#include <stdint.h>

#include "codec/kernels.h"
#include "core/bitio.h"

namespace edgefl {
namespace index_coding {

constexpr unsigned kRiceEscape = 24;

// ---- Elias-Fano -------------------------------------------------------------------------------

// n and k are below 2^32 (n <= EDGEFL_MAX_DIMENSION): the divisions and shifts are 32-bit.
inline unsigned ef_low_bits(uint64_t n, uint64_t k) {
  return k == 0 || n <= k ? 0 : floor_log2(uint32_t(n) / uint32_t(k));
}
inline uint64_t ef_low_bytes(uint64_t n, uint64_t k) {
  return (k * ef_low_bits(n, k) + 7) / 8;
}
inline uint64_t ef_high_bytes(uint64_t n, uint64_t k) {
  return k == 0 ? 0 : (k + (uint32_t(n) >> ef_low_bits(n, k)) + 7) / 8;
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

// The little-endian 64-bit word at data + at, zeros past size.
inline uint64_t load_le64_within(const uint8_t* data, size_t size, size_t at) {
  if (at + 8 <= size) return load_le64(data + at);
  uint64_t word = 0;
  for (size_t i = 0; at + i < size && i < 8; ++i) word |= uint64_t(data[at + i]) << (8 * i);
  return word;
}

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
      low = (load_le64_within(low_, low_size_, byte) >> shift) & low_mask_;  // shift + L <= 37
      if (low_bit_ > uint64_t(low_size_) * 8) failed_ = true;
    }
    while (word_ == 0) {
      if (next_byte_ >= high_size_) {
        failed_ = true;
        return 0;
      }
      word_ = load_le64_within(high_, high_size_, next_byte_);
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

// ---- Block Rice ------------------------------------------------------------------------------
//
// Region layout (index bytes in all; empty when k = 0):
//   a_bytes   LEB128, 1..5 bytes, minimal (no zero final byte unless a_bytes is 0)
//   part A    a_bytes bytes, LSB-first: per block, its parameter code then its gaps' remainders
//             (gap & (2^r - 1), r bits each); zero bits pad the last byte
//   part B    the rest, LSB-first: per gap, unary(gap >> r) (that many zeros, then a one); zero
//             bits pad the last byte, which holds the last one bit
// Parameter code (prev = the previous block's r, 0 before the first): bit 0 = 0: r = prev;
// bits 0..2 = 1,0,s: r = prev + 1 (s = 0) or prev - 1 (s = 1); bits 0..1 = 1,1 then 5 bits: r.
// A decoder refuses r outside [0, kBlockRiceMaxParameter], a gap past n, and any bit of either part
// left over after the k-th index.

constexpr unsigned kBlockRiceGaps = 16;
constexpr unsigned kBlockRiceMaxParameter = 31;

// The least-bits parameter of one block of `count` gaps: the smallest r minimising
// sum(gap >> r) + count * r. That sum is convex in r (each step up saves ceil((gap >> r) / 2) per
// gap, which shrinks as r grows), so a walk from an estimate finds it. `gaps` holds
// kBlockRiceGaps entries, zero past `count` (so that every sum has a fixed length, and vectorises).
// `*quotient_bits`, when given, receives sum(gap >> r) at the chosen r.
inline unsigned block_rice_parameter(const uint32_t* gaps, unsigned count,
                                     uint64_t* quotient_bits = nullptr) {
  uint64_t total = 0;
  for (unsigned j = 0; j < kBlockRiceGaps; ++j) total += gaps[j];
  auto cost = [&](unsigned r) {
    uint64_t bits = 0;
    for (unsigned j = 0; j < kBlockRiceGaps; ++j) bits += gaps[j] >> r;
    return bits + uint64_t(count) * r;
  };
  unsigned r = floor_log2(total / count);
  if (r > kBlockRiceMaxParameter) r = kBlockRiceMaxParameter;
  uint64_t here = cost(r);
  while (r > 0) {
    const uint64_t below = cost(r - 1);
    if (below > here) break;
    here = below;
    --r;
  }
  while (r < kBlockRiceMaxParameter) {
    const uint64_t above = cost(r + 1);
    if (above >= here) break;
    here = above;
    ++r;
  }
  if (quotient_bits != nullptr) *quotient_bits = here - uint64_t(count) * r;
  return r;
}

inline unsigned block_rice_parameter_code_bits(unsigned r, unsigned prev) {
  return r == prev ? 1 : (r == prev + 1 || r + 1 == prev) ? 3 : 7;
}

inline unsigned leb128_bytes(size_t v) {
  unsigned bytes = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++bytes;
  }
  return bytes;
}

// Worst-case block Rice bytes for k indices below n. A block of c gaps summing to G costs at most
// c * (3 + log2(1 + G / c)) bits at the parameter floor(log2(G / c)) (0 when G < c); by
// concavity the blocks together cost at most k * (3 + log2(1 + n / k)), plus 7 bits of parameter
// code per block, the padding of two parts and the length prefix.
EDGEFL_SIZE_NOINLINE inline uint64_t block_rice_bound_bytes(uint64_t n, uint64_t k) {
  if (k == 0) return 0;
  const uint64_t blocks = (k + kBlockRiceGaps - 1) / kBlockRiceGaps;
  const uint32_t ratio = uint32_t(n) / uint32_t(k);  // n, k < 2^32: a 32-bit division
  const uint64_t bits = k * (3 + ceil_log2(uint64_t(ratio) + 2)) + 7 * blocks + 14;
  return (bits + 7) / 8 + 5;
}

// Block Rice coding of a set, index by index, in one of two modes: measuring (the encoder's sizing
// pass: a_bytes() and bytes() once every index was added), or writing the region a measuring
// writer sized for the same indices (`a_bytes` from its a_bytes(), `size` = its bytes()). Indices
// other than the measured ones set overflowed(). Both modes run the same flush(), so the sizes
// agree byte for byte.
class BlockRiceWriter {
 public:
  BlockRiceWriter() = default;  // measuring
  BlockRiceWriter(uint8_t* out, size_t size, size_t a_bytes) : writing_(true) {
    if (size == 0) return;
    size_t prefix = 0;
    size_t v = a_bytes;
    do {
      const uint8_t byte = uint8_t(v & 0x7F);
      v >>= 7;
      if (prefix < size) out[prefix] = uint8_t(byte | (v != 0 ? 0x80 : 0));
      ++prefix;
    } while (v != 0);
    if (prefix > size || a_bytes > size - prefix) {
      overflow_ = true;
      return;
    }
    a_ = BitWriter(out + prefix, a_bytes);
    b_ = BitWriter(out + prefix + a_bytes, size - prefix - a_bytes);
  }
  void add(uint32_t index) {  // index < n <= EDGEFL_MAX_DIMENSION: next_ stays below 2^32
    gaps_[fill_++] = index - next_;
    next_ = index + 1;
    if (fill_ == kBlockRiceGaps) flush();
  }
  // Writing: the last block, then zero padding to each part's end.
  void finish() {
    flush();
    if (writing_) {
      a_.finish_and_fill();
      b_.finish_and_fill();
    }
  }
  // Bytes of part A, and of the whole region (0 for no index), of the indices added so far.
  uint64_t a_bytes() {
    flush();
    return (a_bits_ + 7) / 8;
  }
  uint64_t bytes() {
    flush();
    if (a_bits_ == 0 && b_bits_ == 0) return 0;
    const size_t a = (a_bits_ + 7) / 8;
    return leb128_bytes(a) + a + (b_bits_ + 7) / 8;
  }
  bool overflowed() const { return overflow_ || a_.overflowed() || b_.overflowed(); }

 private:
  void flush() {
    if (fill_ == 0) return;
    for (unsigned j = fill_; j < kBlockRiceGaps; ++j) gaps_[j] = 0;
    uint64_t quotient_bits = 0;
    const unsigned r = block_rice_parameter(gaps_, fill_, &quotient_bits);
    const unsigned code_bits = block_rice_parameter_code_bits(r, prev_);
    a_bits_ += code_bits + fill_ * r;
    b_bits_ += size_t(quotient_bits) + fill_;
    if (writing_) {
      // Bits 0 (the same r); 1,0,0 (one more); 1,0,1 (one less); 1,1 then r in 5 bits.
      const unsigned code = r == prev_ ? 0u : r == prev_ + 1 ? 0x1u : r + 1 == prev_ ? 0x5u : 0x3u | r << 2;
      a_.put(code, code_bits);
      for (unsigned j = 0; j < fill_; ++j) a_.put(gaps_[j], r);
      for (unsigned j = 0; j < fill_; ++j) b_.put_unary(gaps_[j] >> r);
    }
    prev_ = r;
    fill_ = 0;
  }
  bool writing_ = false;
  BitWriter a_;
  BitWriter b_;
  uint32_t gaps_[kBlockRiceGaps];
  unsigned fill_ = 0;
  unsigned prev_ = 0;
  uint32_t next_ = 0;
  // Bits of each part: a region's size fits in size_t (it is in memory), and so its bits do on
  // 64-bit hosts, and on 32-bit targets up to regions of 512 MiB (more than they can hold).
  size_t a_bits_ = 0;
  size_t b_bits_ = 0;
  bool overflow_ = false;
};

// Splits a block Rice region of `size` bytes (k >= 1) into its parts: false (no split) when the
// length prefix is malformed (no final byte within 5, not minimal) or leaves part B no byte.
EDGEFL_SIZE_NOINLINE inline bool block_rice_parts(const uint8_t* data, size_t size, size_t* a_offset,
                                                  size_t* a_bytes) {
  size_t length = 0;
  size_t prefix = 0;
  for (;;) {
    if (prefix == size || prefix == 5) return false;
    const uint8_t byte = data[prefix];
    if (prefix == 4 && byte > 0x0F) return false;  // a length of 2^32 or more: no region is that long
    length |= size_t(byte & 0x7F) << (7 * prefix);
    ++prefix;
    if ((byte & 0x80) == 0) {
      if (byte == 0 && prefix > 1) return false;  // not minimal
      break;
    }
  }
  if (length >= size - prefix) return false;  // part B holds at least one bit
  *a_offset = prefix;
  *a_bytes = length;
  return true;
}

// Reads block Rice indices back bit by bit (BitReader): the reference, and the reader of builds
// for size. Fails (sticky) on a malformed prefix, a parameter out of range, an index past 2^32 or
// a read past either part; a gap past n gives an index >= n (the caller's range check names it);
// finished_exactly() checks that nothing is left over.
class BlockRiceBitReader {
 public:
  // n, k < 2^32 (32-bit state: 64-bit shifts cost builds for size dearly).
  BlockRiceBitReader(uint64_t n, uint64_t k, const uint8_t* data, size_t size)
      : n_(uint32_t(n)), k_(uint32_t(k)) {
    size_t a_offset = 0, a_bytes = 0;
    if (k == 0) {
      failed_ = size != 0;
    } else if (!block_rice_parts(data, size, &a_offset, &a_bytes)) {
      failed_ = true;
    } else {
      a_data_ = data + a_offset;
      b_data_ = a_data_ + a_bytes;
      a_size_ = a_bytes;
      b_size_ = size - a_offset - a_bytes;
      a_ = BitReader(a_data_, a_size_);
      b_ = BitReader(b_data_, b_size_);
    }
  }
  EDGEFL_SIZE_NOINLINE uint64_t next() {
    if (failed() || decoded_ >= k_) {
      failed_ = true;
      return 0;
    }
    if (left_ == 0) {  // the block's parameter code
      unsigned r = r_;
      if (a_.get(1) != 0) {
        if (a_.get(1) == 0) {
          const bool down = a_.get(1) != 0;
          if (down ? r == 0 : r == kBlockRiceMaxParameter) {
            failed_ = true;
            return 0;  // r stays in [0, 31]: every shift below is defined
          }
          r = down ? r - 1 : r + 1;
        } else {
          r = unsigned(a_.get(5));
        }
      }
      r_ = r;
      left_ = k_ - decoded_ < kBlockRiceGaps ? unsigned(k_ - decoded_) : kBlockRiceGaps;
    }
    const uint32_t low = uint32_t(a_.get(r_));
    const uint64_t quotient = b_.get_unary(~uint64_t(0));
    const uint64_t index = next_ + (quotient > (n_ >> r_) ? n_ : ((uint32_t(quotient) << r_) | low));
    if (index >> 32 != 0) failed_ = true;
    next_ = index + 1;
    --left_;
    ++decoded_;
    return failed() ? 0 : index;
  }
  void next_many(uint32_t* out, uint32_t count) {
    for (uint32_t j = 0; j < count; ++j) out[j] = uint32_t(next());
  }
  bool failed() const { return failed_ || a_.failed() || b_.failed(); }
  // After the k-th index: each part ends in its last byte, and the bits after its end are zero.
  bool finished_exactly() const {
    if (k_ == 0 || failed()) return !failed();
    const size_t a_bit = a_.bit_position(), b_bit = b_.bit_position();
    return (a_bit + 7) / 8 == a_size_ && (b_bit + 7) / 8 == b_size_ &&
           (a_data_[a_size_ - 1] >> ((a_bit - 1) % 8 + 1)) == 0 &&
           (b_data_[b_size_ - 1] >> ((b_bit - 1) % 8 + 1)) == 0;
  }

 private:
  uint32_t n_, k_;
  BitReader a_{nullptr, 0};
  BitReader b_{nullptr, 0};
  const uint8_t* a_data_ = nullptr;
  const uint8_t* b_data_ = nullptr;
  size_t a_size_ = 0, b_size_ = 0;
  uint64_t next_ = 0;  // the previous index + 1
  uint32_t decoded_ = 0;
  unsigned r_ = 0;
  unsigned left_ = 0;  // gaps left in the block
  bool failed_ = false;
};

// Reads block Rice indices back a 64-bit word at a time: the same indices and failures as
// BlockRiceBitReader (kernels_test compares them).
class BlockRiceWordReader {
 public:
  BlockRiceWordReader(uint64_t n, uint64_t k, const uint8_t* data, size_t size) {
    s_.n = n;
    s_.k = k;
    size_t a_offset = 0, a_bytes = 0;
    if (k == 0) {
      s_.failed = size != 0;
    } else if (!block_rice_parts(data, size, &a_offset, &a_bytes)) {
      s_.failed = true;
    } else {
      s_.a = data + a_offset;
      s_.a_size = a_bytes;
      s_.b = data + a_offset + a_bytes;
      s_.b_size = size - a_offset - a_bytes;
    }
  }
  EDGEFL_SIZE_NOINLINE uint64_t next() { return step(s_); }
  // The next `count` indices into out (n < 2^32): those `count` calls of next() would give, as long
  // as neither fails; when the stream fails (an index past 2^32 too), failed() is set after the
  // call and what it wrote from the failing block on is meaningless. Inside a block whose
  // remainders and quotient words can be loaded whole, the indices come from a loop without
  // bounds checks.
  // `blocks`: a kernel that decodes whole blocks (Kernels::block_rice_blocks), or null for this
  // loop alone; either gives the same indices, failures and state.
  void next_many(uint32_t* out, uint32_t count, decltype(Kernels::block_rice_blocks) blocks) {
    State s = s_;  // in locals: stores to out may alias the members
    uint32_t j = 0;
    bool bad = false;
    while (j < count && !bad && !s.failed) {
      if (s.left == 0 && blocks != nullptr && count - j >= kBlockRiceGaps) {
        j += blocks(&s, out + j, count - j);
        if (j == count) break;
      }
      if (s.left == 0) {
        // The block's parameter, from one whole load when there is one (else step() reads it).
        if (s.decoded >= s.k || (s.a_bit >> 3) + 8 > s.a_size) {
          out[j++] = uint32_t(step(s));
          continue;
        }
        if (!start_block(s, load_le64(s.a + size_t(s.a_bit >> 3)) >> unsigned(s.a_bit & 7), 7)) {
          bad = true;
          break;
        }
      }
      uint32_t take = count - j < s.left ? count - j : s.left;
      const unsigned r = s.r;
      // Every remainder of the run loads whole: the last one's 8-byte load ends in part A.
      if (((s.a_bit + uint64_t(take - 1) * r) >> 3) + 8 > s.a_size) {
        out[j++] = uint32_t(step(s));
        continue;
      }
      const uint64_t mask = s.mask, max_quotient = s.n >> r, n = s.n;
      const uint8_t* const a = s.a;
      uint64_t a_bit = s.a_bit, word = s.word, word_bit = s.word_bit, previous_one = s.previous_one;
      uint64_t next_index = s.next_index;
      size_t next_byte = s.next_byte;
      uint32_t t = 0;
      for (; t < take; ++t) {
        while (word == 0 && next_byte + 8 <= s.b_size) {
          word = load_le64(s.b + next_byte);
          word_bit = uint64_t(next_byte) * 8;
          next_byte += 8;
        }
        if (word == 0) break;  // the part's last word: step() reads it
        const uint64_t one = word_bit + unsigned(__builtin_ctzll(word));
        word &= word - 1;
        const uint64_t quotient = one - previous_one - 1;
        previous_one = one;
        const uint64_t low = (load_le64(a + size_t(a_bit >> 3)) >> unsigned(a_bit & 7)) & mask;
        a_bit += r;
        const uint64_t index = next_index + (quotient > max_quotient ? n : ((quotient << r) | low));
        next_index = index + 1;
        out[j + t] = uint32_t(index);
      }
      // Indices increase along the run: the last is the largest.
      bad |= t != 0 && (next_index - 1) >> 32 != 0;
      s.a_bit = a_bit;
      s.word = word;
      s.word_bit = word_bit;
      s.previous_one = previous_one;
      s.next_index = next_index;
      s.next_byte = next_byte;
      s.left -= t;
      s.decoded += t;
      j += t;
      if (t < take) out[j++] = uint32_t(step(s));
    }
    if (bad) s.failed = true;
    for (; j < count; ++j) out[j] = uint32_t(step(s));  // after a fault: zeros, and failed
    s_ = s;
  }
  void next_many(uint32_t* out, uint32_t count) { next_many(out, count, kernels().block_rice_blocks); }
  bool failed() const { return s_.failed; }
  // After the k-th index: each part ends in its last byte, and the bits after its end are zero.
  bool finished_exactly() const {
    if (s_.k == 0 || s_.failed) return !s_.failed;
    if ((s_.a_bit + 7) / 8 != s_.a_size || s_.previous_one / 8 + 1 != s_.b_size) return false;
    const unsigned a_used = unsigned(s_.a_bit & 7), b_used = unsigned((s_.previous_one + 1) & 7);
    if (a_used != 0 && (s_.a[s_.a_size - 1] >> a_used) != 0) return false;
    return b_used == 0 || (s_.b[s_.b_size - 1] >> b_used) == 0;
  }

 private:
  using State = BlockRiceState;
  // The next block, from its parameter code: `code` holds the part's next `avail` (<= 7) bits in
  // its low bits. Sets the parameter, its mask and the block's gap count, and moves past the code;
  // false (nothing moved) for a code longer than `avail` or a parameter outside [0, 31].
  static bool start_block(State& s, uint64_t code, unsigned avail) {
    unsigned r = s.r, used = 1;
    if ((code & 1) != 0) {
      if ((code & 2) == 0) {
        used = 3;
        const bool down = (code & 4) != 0;
        if (down ? r == 0 : r == kBlockRiceMaxParameter) return false;
        r = down ? r - 1 : r + 1;
      } else {
        used = 7;
        r = unsigned(code >> 2) & 31u;
      }
    }
    if (used > avail) return false;
    s.a_bit += used;
    s.r = r;
    s.mask = r == 0 ? 0 : (~uint64_t(0) >> (64 - r));
    const uint64_t remaining = s.k - s.decoded;
    s.left = remaining < kBlockRiceGaps ? unsigned(remaining) : kBlockRiceGaps;
    return true;
  }
  // `count` (<= 57) bits of part A from bit `at`; past the end fails.
  static uint64_t bits_of_a(State& s, uint64_t at, unsigned count) {
    if (at + count > uint64_t(s.a_size) * 8) {
      s.failed = true;
      return 0;
    }
    return (load_le64_within(s.a, s.a_size, size_t(at >> 3)) >> unsigned(at & 7)) &
           (~uint64_t(0) >> (64 - count));
  }
  static inline uint64_t step(State& s) {
    if (s.failed || s.decoded >= s.k) {
      s.failed = true;
      return 0;
    }
    if (s.left == 0) {
      const uint64_t a_bits = uint64_t(s.a_size) * 8;
      const unsigned avail = a_bits - s.a_bit < 7 ? unsigned(a_bits - s.a_bit) : 7u;
      if (!start_block(s, avail == 0 ? 0 : bits_of_a(s, s.a_bit, avail), avail)) {
        s.failed = true;
        return 0;
      }
    }
    uint64_t low = 0;
    if (s.r != 0) {
      if (s.a_bit + s.r > uint64_t(s.a_size) * 8) {
        s.failed = true;
        return 0;
      }
      low = (load_le64_within(s.a, s.a_size, size_t(s.a_bit >> 3)) >> unsigned(s.a_bit & 7)) &
            s.mask;  // 7 + 31 bits
      s.a_bit += s.r;
    }
    while (s.word == 0) {
      if (s.next_byte >= s.b_size) {
        s.failed = true;
        return 0;
      }
      s.word = load_le64_within(s.b, s.b_size, s.next_byte);
      s.word_bit = uint64_t(s.next_byte) * 8;
      s.next_byte += 8;
    }
    const uint64_t one = s.word_bit + unsigned(__builtin_ctzll(s.word));
    s.word &= s.word - 1;
    const uint64_t quotient = one - s.previous_one - 1;  // previous_one starts at -1
    s.previous_one = one;
    // A gap is below n: a larger quotient (which could overflow the shift) gives the gap n, an
    // index out of range for the caller's check to name.
    const uint64_t gap = quotient > (s.n >> s.r) ? s.n : ((quotient << s.r) | low);
    const uint64_t index = s.next_index + gap;
    if (index >> 32 != 0) s.failed = true;
    s.next_index = index + 1;
    --s.left;
    ++s.decoded;
    return s.failed ? 0 : index;
  }
  State s_;
};

#if defined(__OPTIMIZE_SIZE__)
using BlockRiceReader = BlockRiceBitReader;
#else
using BlockRiceReader = BlockRiceWordReader;
#endif

// Worst-case Rice bytes for k indices below n.
inline uint64_t rice_bound_bytes(uint64_t n, uint64_t k) {
  const uint64_t per = kRiceEscape + 1 + (raw_gap_bits(n) > 31 ? raw_gap_bits(n) : 31);
  return (k * per + 7) / 8;
}

}  // namespace index_coding
}  // namespace edgefl

#endif  // EDGEFL_SRC_CODEC_INDEX_CODING_H_
