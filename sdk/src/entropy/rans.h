// Internal: a static range asymmetric numeral system coder (rANS; J. Duda, "Asymmetric numeral
// systems", arXiv:1311.2540, 2013/2014) over alphabets of at most 256 symbols, for skewed
// symbols where Huffman's 1-bit-per-symbol floor wastes bits (e.g. 4-bit codes whose values
// cluster).
//
// Parameters: probabilities quantized to kRansPrecision = 12 bits (frequencies sum to 4096),
// 32-bit states in [2^23, 2^31), byte-wise renormalization, two interleaved states (symbol i uses
// state i & 1) so that a decoder overlaps two dependency chains.
//
// Wire layout of a stream: u32 x0, u32 x1 (little-endian final encoder states), then the
// renormalization bytes in the order the decoder reads them. The frequency table is written
// separately (write_table: 13 bits per symbol of the alphabet, LSB-first).
//
// Integrity: the encoder starts both states at 2^23; a decoder that consumed exactly the stream
// and ends with both states at 2^23 has read what was written (checked by finish()).
// Contracts: no allocation; the encoder writes backwards into caller memory; the decoder's
// slot table (4096 bytes) is caller memory or its own member.
#ifndef EDGEFL_SRC_ENTROPY_RANS_H_
#define EDGEFL_SRC_ENTROPY_RANS_H_

#include <stddef.h>
#include <stdint.h>

#include "core/bitio.h"
#include "edgefl/status.h"

namespace edgefl {
namespace entropy {

constexpr unsigned kRansPrecision = 12;
constexpr uint32_t kRansTotal = 1u << kRansPrecision;
constexpr uint32_t kRansLow = 1u << 23;
constexpr unsigned kRansMaxSymbols = 256;

// Quantizes counts[0..symbols) to frequencies summing to kRansTotal; every symbol with a
// non-zero count keeps a frequency >= 1. At least one count must be non-zero.
void rans_frequencies(const uint32_t* counts, unsigned symbols, uint16_t* freq);

// Bits a stream of these counts costs under `freq` (the ideal code length, rounded up), plus
// the two states.
uint64_t rans_cost_bits(const uint32_t* counts, const uint16_t* freq, unsigned symbols);

inline size_t rans_table_bytes(unsigned symbols) {
  return (size_t(symbols) * 13 + 7) / 8;
}
void rans_write_table(const uint16_t* freq, unsigned symbols, BitWriter* w);

// Encodes symbols[0..count) with `freq` into the end of [out, out + cap) and returns the stream
// size (the stream is then moved to the front of `out`), or 0 if it does not fit in cap bytes.
size_t rans_encode(const uint8_t* symbols, size_t count, const uint16_t* freq, unsigned symbols_in_alphabet,
                   uint8_t* out, size_t cap);

class RansDecoder {
 public:
  // Reads and checks a frequency table (every symbol <= 4096, sum exactly 4096).
  // Fails: kCorruptPayload.
  [[nodiscard]] Status read_table(BitReader* r, unsigned symbols);
  // Starts decoding stream[0..size). Fails: kCorruptPayload if shorter than the two states or a
  // state is out of range.
  [[nodiscard]] Status begin(const uint8_t* stream, size_t size);
  // Symbol i of the stream (call with i = 0, 1, 2, ... in order).
  unsigned get(size_t i) {
    uint32_t& x = state_[i & 1];
    const uint32_t slot = x & (kRansTotal - 1);
    const unsigned s = slot_symbol_[slot];
    x = uint32_t(freq_[s]) * (x >> kRansPrecision) + slot - start_[s];
    while (x < kRansLow) {
      if (pos_ < size_) {
        x = (x << 8) | data_[pos_++];
      } else {
        overrun_ = true;
        x = kRansLow;  // keeps the loop finite; finish() reports the overrun
      }
    }
    return s;
  }
  // After the last symbol: kOk if the stream was consumed exactly and both states are back at
  // their initial value, kCorruptPayload otherwise.
  [[nodiscard]] Status finish() const {
    return !overrun_ && pos_ == size_ && state_[0] == kRansLow && state_[1] == kRansLow
               ? Status::kOk
               : Status::kCorruptPayload;
  }

 private:
  uint16_t freq_[kRansMaxSymbols];
  uint16_t start_[kRansMaxSymbols];
  uint8_t slot_symbol_[kRansTotal];
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t pos_ = 0;
  uint32_t state_[2] = {0, 0};
  bool overrun_ = false;
};

}  // namespace entropy
}  // namespace edgefl

#endif  // EDGEFL_SRC_ENTROPY_RANS_H_
