// Internal: LSB-first bit streams over caller memory. The writer never writes past its end (the
// caller sized the buffer from a bound; overflow sets a sticky flag instead); the reader never
// reads past its end (reading past it returns zeros and sets a sticky flag the decoder checks).
#ifndef EDGEFL_SRC_CORE_BITIO_H_
#define EDGEFL_SRC_CORE_BITIO_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

// Builds for size (-Os) keep one out-of-line copy of a reader's per-item step instead of one
// inlined copy per decoder that uses it; other builds inline it.
#if defined(__OPTIMIZE_SIZE__)
#define EDGEFL_SIZE_NOINLINE __attribute__((noinline))
#else
#define EDGEFL_SIZE_NOINLINE
#endif

namespace edgefl {

class BitWriter {
 public:
  BitWriter() : BitWriter(nullptr, 0) {}
  BitWriter(uint8_t* data, size_t size) : data_(data), size_(size) {}

  // Appends the low `count` bits of `value` (count <= 57).
  EDGEFL_SIZE_NOINLINE void put(uint64_t value, unsigned count) {
    acc_ |= (count == 64 ? value : (value & ((uint64_t(1) << count) - 1))) << fill_;
    fill_ += count;
    while (fill_ >= 8) {
      emit(uint8_t(acc_));
      acc_ >>= 8;
      fill_ -= 8;
    }
  }
  // Appends `zeros` zero bits then a one bit (unary code of `zeros`).
  EDGEFL_SIZE_NOINLINE void put_unary(uint64_t zeros) {
    while (zeros >= 32) {
      put(0, 32);
      zeros -= 32;
    }
    put(uint64_t(1) << zeros, unsigned(zeros) + 1);
  }
  // Pads with zero bits to a byte boundary and returns the bytes written.
  size_t finish() {
    if (fill_ > 0) {
      emit(uint8_t(acc_));
      acc_ = 0;
      fill_ = 0;
    }
    return pos_;
  }
  // finish(), then zero-fills the rest of the buffer: for regions whose size is fixed in
  // advance, so that no byte of the output depends on what the buffer held before.
  size_t finish_and_fill() {
    const size_t used = finish();
    while (pos_ < size_) data_[pos_++] = 0;
    return used;
  }
  bool overflowed() const { return overflow_; }
  size_t bit_count() const { return pos_ * 8 + fill_; }

 private:
  void emit(uint8_t b) {
    if (pos_ < size_) {
      data_[pos_++] = b;
    } else {
      overflow_ = true;
    }
  }
  uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  uint64_t acc_ = 0;
  unsigned fill_ = 0;
  bool overflow_ = false;
};

class BitReader {
 public:
  BitReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  // Reads `count` bits (count <= 57).
  uint64_t get(unsigned count) {
    refill();
    const uint64_t v = count == 0 ? 0 : (acc_ & (~uint64_t(0) >> (64 - count)));
    consume(count);
    return v;
  }
  // Reads a unary code: the number of zero bits before the next one bit. Fails (sets the
  // sticky flag) after `max_zeros` zeros or at the end of the data.
  uint64_t get_unary(uint64_t max_zeros) {
    uint64_t zeros = 0;
    for (;;) {
      refill();
      if (fill_ == 0) {
        underflow_ = true;
        return zeros;
      }
      const uint64_t window = fill_ >= 64 ? acc_ : (acc_ & ((uint64_t(1) << fill_) - 1));
      if (window != 0) {
        const unsigned tz = unsigned(__builtin_ctzll(window));
        zeros += tz;
        consume(tz + 1);
        if (zeros > max_zeros) underflow_ = true;
        return zeros;
      }
      zeros += fill_;
      consume(fill_);
      if (zeros > max_zeros) {
        underflow_ = true;
        return zeros;
      }
    }
  }
  // The next `count` bits (count <= 56) without consuming them; zeros past the end.
  uint64_t peek(unsigned count) {
    refill();
    return count == 0 ? 0 : (acc_ & (~uint64_t(0) >> (64 - count)));
  }
  // Consumes `count` bits (count <= 56); past the end sets the sticky flag.
  void skip(unsigned count) {
    refill();
    consume(count);
  }
  // Bits left in the data (consumed or not).
  size_t bits_left() const { return size_ * 8 - consumed_; }
  // True once any read went past the end (or a unary run exceeded its limit).
  bool failed() const { return underflow_; }
  // Sets the sticky failure flag (a caller's own check of what was read failed).
  void fail() { underflow_ = true; }
  // Bits consumed so far.
  size_t bit_position() const { return consumed_; }

 private:
  void refill() {
    if (fill_ <= 56 && size_ - pos_ >= 8) {
      // Fast path: one unaligned little-endian load tops the accumulator up to 56..63 bits.
      // Bits above the new fill level are the stream's next bits and are loaded again, equal,
      // by the next refill.
      uint64_t word;
      memcpy(&word, data_ + pos_, 8);
      acc_ |= word << fill_;
      const unsigned bytes = (63 - fill_) >> 3;
      pos_ += bytes;
      fill_ += bytes * 8;
      return;
    }
    while (fill_ <= 56 && pos_ < size_) {
      acc_ |= uint64_t(data_[pos_++]) << fill_;
      fill_ += 8;
    }
  }
  void consume(unsigned count) {
    if (count > fill_) {
      underflow_ = true;
      acc_ = 0;
      consumed_ += fill_;
      fill_ = 0;
      return;
    }
    acc_ = count >= 64 ? 0 : acc_ >> count;
    fill_ -= count;
    consumed_ += count;
  }
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  uint64_t acc_ = 0;
  unsigned fill_ = 0;
  size_t consumed_ = 0;
  bool underflow_ = false;
};

inline void store_le16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}
inline void store_le32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline void store_le64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline uint16_t load_le16(const uint8_t* p) {
  return uint16_t(p[0] | (p[1] << 8));
}
inline uint32_t load_le32(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}
inline uint64_t load_le64(const uint8_t* p) {
  return uint64_t(load_le32(p)) | (uint64_t(load_le32(p + 4)) << 32);
}

inline unsigned floor_log2(uint64_t v) {
  return v == 0 ? 0 : 63u - unsigned(__builtin_clzll(v));
}
inline unsigned ceil_log2(uint64_t v) {
  return v <= 1 ? 0 : floor_log2(v - 1) + 1;
}

}  // namespace edgefl

#endif  // EDGEFL_SRC_CORE_BITIO_H_
