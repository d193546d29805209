// Internal: a static range asymmetric numeral system coder (rANS; J. Duda, "Asymmetric numeral
// systems", arXiv:1311.2540, 2013/2014) over alphabets of at most 256 symbols, for skewed
// symbols where Huffman's 1-bit-per-symbol floor wastes bits (e.g. 4-bit codes whose values
// cluster).
//
// Parameters: probabilities quantized to kRansPrecision = 12 bits (frequencies sum to 4096),
// 32-bit states in [2^16, 2^32), renormalization by one 16-bit word at most per symbol (the
// "rans_word" variant of F. Giesen's ryg_rans), L interleaved states ("lanes", F. Giesen,
// "Interleaved entropy coders", arXiv:1402.3392): symbol i uses state i % L, so that a decoder
// overlaps L dependency chains. L is 4 (kRansLanes, the first format) or 32 (kRansWideLanes, for
// long streams: four AVX2 registers of eight lanes, four chains in flight, for 112 more bytes);
// the caller records which.
//
// Wire layout of a stream: u32 x0 .. x(L-1) (little-endian final encoder states), then the
// renormalization words (u16, little-endian) in the order the decoder reads them: after
// decoding symbol i, state i % L reads one word if it fell below 2^16.
//
// The frequency table is written separately (rans_write_table, LSB-first bits): a 4-bit Rice
// parameter k (0..12), the index m of the symbol whose frequency is implied (ceil(log2(symbols))
// bits; the encoder picks the most frequent), then every other symbol's frequency f in order as
// a Rice code (f >> k zeros, a one, the low k bits of f); f[m] = 4096 - the others, at least 1.
// The encoder picks the k of the fewest bits, so a table never exceeds 13 bits per symbol
// (the fixed 13-bit fields of the first format) and is often half that.
//
// Integrity: the encoder starts every state at 2^16; a decoder that consumed exactly the stream
// and ends with every state at 2^16 has read what was written (checked by finish()). States
// stay in [2^16, 2^32) whatever the input bytes, so a corrupted stream decodes to symbols of
// the alphabet and fails finish(), never reads out of bounds.
//
// Contracts: no allocation; the encoder writes backwards into caller memory (hosted builds
// divide by reciprocals from a 2 KiB table on the stack, and encode 32-lane streams eight lanes
// at a time with AVX2 where the CPU has it; -Os builds use the divide instruction: the same
// stream); the decoder's slot tables (4 KiB, and 16 KiB more of packed entries on x86-64) are
// its own members, on the caller's stack.
#ifndef EDGEFL_SRC_ENTROPY_RANS_H_
#define EDGEFL_SRC_ENTROPY_RANS_H_

#include <stddef.h>
#include <stdint.h>

#include "core/bitio.h"
#include "edgefl/status.h"

// x86-64 decoders carry packed slot entries for the AVX2 rounds (rans.cpp), whatever the build
// options of the file that includes this header (the class has one layout on a target).
#if defined(__x86_64__)
#define EDGEFL_RANS_SLOT_ENTRIES 1
#endif

namespace edgefl {
namespace entropy {

constexpr unsigned kRansPrecision = 12;
constexpr uint32_t kRansTotal = 1u << kRansPrecision;
constexpr uint32_t kRansLow = 1u << 16;
constexpr unsigned kRansLanes = 4;
constexpr unsigned kRansWideLanes = 32;
constexpr unsigned kRansMaxSymbols = 256;
// Bytes of a stream before its first renormalization word: the final states (of 4 lanes; the
// least any stream has).
constexpr size_t kRansStateBytes = 4 * kRansLanes;
inline size_t rans_state_bytes(unsigned lanes) {
  return 4 * size_t(lanes);
}
// The lanes an encoder uses for a stream of `symbols` symbols: 32 from kRansWideMinSymbols on
// (112 more bytes of states: under 1% of such a stream at 3 bits a symbol), 4 below.
constexpr uint64_t kRansWideMinSymbols = 32768;
inline unsigned rans_lanes_for(uint64_t symbols) {
  return symbols >= kRansWideMinSymbols ? kRansWideLanes : kRansLanes;
}

// Quantizes counts[0..symbols) to frequencies summing to kRansTotal; every symbol with a
// non-zero count keeps a frequency >= 1. At least one count must be non-zero.
void rans_frequencies(const uint32_t* counts, unsigned symbols, uint16_t* freq);

// Bits a stream of these counts costs under `freq` (the ideal code length, rounded up), plus
// the states of `lanes` lanes.
uint64_t rans_cost_bits(const uint32_t* counts, const uint16_t* freq, unsigned symbols,
                        unsigned lanes = kRansLanes);

// Bytes of the table of `freq` (what rans_write_table writes, padded to a byte).
size_t rans_table_bytes(const uint16_t* freq, unsigned symbols);
// The fewest and the most bytes a table of an alphabet of `symbols` symbols takes.
inline size_t rans_table_min_bytes(unsigned symbols) {
  return (4 + ceil_log2(symbols) + size_t(symbols) - 1 + 7) / 8;
}
inline size_t rans_table_max_bytes(unsigned symbols) {
  return (4 + ceil_log2(symbols) + 13 * (size_t(symbols) - 1) + 7) / 8;
}
// `freq` from rans_frequencies() (sum 4096).
void rans_write_table(const uint16_t* freq, unsigned symbols, BitWriter* w);

// Encodes symbols[0..count) with `freq` in `lanes` lanes (kRansLanes or kRansWideLanes) into
// the end of [out, out + cap) and returns the stream size (the stream is then moved to the front
// of `out`), or 0 if it does not fit in cap bytes, a symbol has frequency 0 or `lanes` is
// neither.
size_t rans_encode(const uint8_t* symbols, size_t count, const uint16_t* freq, unsigned symbols_in_alphabet,
                   unsigned lanes, uint8_t* out, size_t cap);
// rans_encode with (simd true) or without (false) the AVX2 rounds of 32-lane streams, which
// rans_encode uses when the CPU has AVX2: the same bytes either way (tests compare them).
size_t rans_encode_with(const uint8_t* symbols, size_t count, const uint16_t* freq,
                        unsigned symbols_in_alphabet, unsigned lanes, uint8_t* out, size_t cap, bool simd);

class RansDecoder {
 public:
  // Reads and checks a frequency table (Rice parameter <= 12, implied symbol in the alphabet,
  // frequencies summing to 4096 with the implied one at least 1). Fails: kCorruptPayload.
  [[nodiscard]] Status read_table(BitReader* r, unsigned symbols);
  // After read_table: the frequency of symbol s (0: it never decodes).
  unsigned frequency(unsigned s) const { return freq_[s]; }
  // Starts decoding stream[0..size), written with `lanes` lanes, at symbol 0. Fails:
  // kCorruptPayload if `lanes` is not kRansLanes or kRansWideLanes, the stream is shorter than
  // the states or a state is below 2^16.
  [[nodiscard]] Status begin(const uint8_t* stream, size_t size, unsigned lanes = kRansLanes);
  // The next symbol (symbol by symbol; the reference for decode()). Past the end of the stream
  // it keeps returning symbols of the alphabet and finish() fails.
  unsigned get() {
    uint32_t& x = state_[next_++ & (lanes_ - 1)];
    const unsigned s = step(&x);
    if (x < kRansLow) {
      if (size_ - pos_ >= 2) {
        x = (x << 16) | load_le16(data_ + pos_);
        pos_ += 2;
      } else {
        overrun_ = true;
        x = kRansLow;  // keeps the states in range; finish() reports the overrun
      }
    }
    return s;
  }
  // The next `count` symbols into out[0..count), as `count` calls of get(): in hosted builds,
  // one symbol per lane a round with branch-free renormalization while a round's words remain
  // (the bounds are checked once per round), symbol by symbol after. Fails: kCorruptPayload if
  // the stream ran out (the decoder is then spent: finish() fails too).
  [[nodiscard]] Status decode(uint8_t* out, size_t count);
  // After the last symbol: kOk if the stream was consumed exactly and every state is back at
  // its initial value, kCorruptPayload otherwise.
  [[nodiscard]] Status finish() const {
    bool initial = true;
    for (unsigned k = 0; k < lanes_; ++k) initial = initial && state_[k] == kRansLow;
    return !overrun_ && pos_ == size_ && initial ? Status::kOk : Status::kCorruptPayload;
  }

 private:
  template <unsigned kLanes>
  size_t decode_rounds(uint8_t* out, size_t count);
  // One decoding step of state *x (no renormalization); returns the symbol.
  unsigned step(uint32_t* x) const {
    const size_t slot = *x & (kRansTotal - 1);
    const size_t s = slot_symbol_[slot];
    *x = uint32_t(freq_[s]) * (*x >> kRansPrecision) + uint32_t(slot) - start_[s];
    return unsigned(s);
  }

  uint16_t freq_[kRansMaxSymbols];
  uint16_t start_[kRansMaxSymbols];
  uint8_t slot_symbol_[kRansTotal];
#if EDGEFL_RANS_SLOT_ENTRIES
  // Per slot: symbol | (slot - start) << 8 | (frequency - 1) << 20 (16 KiB more; filled by the
  // first begin() of a 32-lane stream after read_table(), when the AVX2 rounds are built).
  uint32_t slot_entry_[kRansTotal];
  bool slot_entries_ready_ = false;
#endif
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t pos_ = 0;
  size_t next_ = 0;  // symbols decoded since begin()
  uint32_t state_[kRansWideLanes] = {};
  unsigned lanes_ = kRansLanes;
  bool overrun_ = false;
};

}  // namespace entropy
}  // namespace edgefl

#endif  // EDGEFL_SRC_ENTROPY_RANS_H_
