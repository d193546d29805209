// Internal: canonical, length-limited Huffman codes over small alphabets (at most 256 symbols),
// with a compact code table and a table-driven decoder.
//
// Code table on the wire: one 4-bit code length per symbol of the alphabet (0 = absent), LSB-first,
// so an alphabet of 32 symbols costs 16 bytes (the reference SketchML spends 96 bits per symbol).
// Codes are canonical (Huffman 1952; canonical assignment as in RFC 1951 3.2.2): ordered by
// (length, symbol), written LSB-first bit-reversed so that a decoder indexes a 2^L table with the
// next L bits.
//
// Decode table: 2^11 32-bit entries indexed by the next 11 bits of the stream. An entry holds as
// many codes (1 to 3) as fit whole in those 11 bits, so the bulk decoder resolves several symbols
// per dependent table load (the multi-symbol tables of zstd's HUF_decompress4X2 and of libjpeg-
// turbo, here one table for both the single- and the multi-symbol case):
//
//   bits 0..3   total length of the entry's codes (1..11; bits 4..5 are zero, so that a shift by
//               the entry consumes exactly those bits)
//   bits 6..7   number of codes (1..3)
//   bits 8..31  the symbols, first in bits 8..15
//   0           the first code is unassigned
//
// Contracts: no allocation; the encoder's scratch is on the stack (about 3 KiB); the decoder's
// table is caller memory (huffman_decoder_table_bytes(), 8 KiB). Decoding a corrupted table
// (lengths over the limit, over-subscribed Kraft sum, no symbol) or a stream that hits an
// unassigned code or runs past its end is an error, never an out-of-bounds read.
#ifndef EDGEFL_SRC_ENTROPY_HUFFMAN_H_
#define EDGEFL_SRC_ENTROPY_HUFFMAN_H_

#include <stddef.h>
#include <stdint.h>

#include "core/bitio.h"
#include "edgefl/status.h"

namespace edgefl {
namespace entropy {

constexpr unsigned kHuffmanMaxSymbols = 256;
constexpr unsigned kHuffmanMaxBits = 11;  // longest code: the decode table has 2^11 entries

inline size_t huffman_table_entries() {
  return size_t(1) << kHuffmanMaxBits;
}
// Bytes of the decoder's table (caller memory, 4-byte aligned).
inline size_t huffman_decoder_table_bytes() {
  return huffman_table_entries() * sizeof(uint32_t);
}
// Bytes of the serialized code table for an alphabet of `symbols` symbols.
inline size_t huffman_table_bytes(unsigned symbols) {
  return (size_t(symbols) * 4 + 7) / 8;
}

// Optimal code lengths for freq[0..symbols), limited to kHuffmanMaxBits. Absent symbols (freq 0)
// get length 0; a single present symbol gets length 1. symbols <= kHuffmanMaxSymbols.
void huffman_lengths(const uint32_t* freq, unsigned symbols, uint8_t* lengths);

// Total coded bits of the symbols counted in `freq` under `lengths`.
uint64_t huffman_cost_bits(const uint32_t* freq, const uint8_t* lengths, unsigned symbols);

class HuffmanEncoder {
 public:
  // `lengths` from huffman_lengths(); the encoder copies what it needs.
  HuffmanEncoder(const uint8_t* lengths, unsigned symbols);
  void write_table(BitWriter* w) const;
  // `symbol` must have a non-zero length.
  void put(BitWriter* w, unsigned symbol) const { w->put(codes_[symbol], lengths_[symbol]); }

 private:
  unsigned symbols_;
  uint8_t lengths_[kHuffmanMaxSymbols];
  uint16_t codes_[kHuffmanMaxSymbols];  // bit-reversed canonical codes
};

class HuffmanDecoder {
 public:
  // `table` holds huffman_table_entries() entries; it must outlive the decoder.
  explicit HuffmanDecoder(uint32_t* table) : table_(table) {}
  // Reads the code table of an alphabet of `symbols` symbols and builds the decode table.
  // Fails: kCorruptPayload (bad lengths, Kraft sum over 1, no symbol, truncated).
  [[nodiscard]] Status read_table(BitReader* r, unsigned symbols);
  // Decodes `count` symbols into out[0..count) from the bit stream data[0..size) starting at bit
  // `*bit_position`, which receives the position after the last symbol. While at least 8 bytes
  // of input and 16 symbols of output remain: five table entries (up to 15 symbols) per 64-bit
  // load; then symbol by symbol (get()). Writes nothing past out[count). Fails: kCorruptPayload
  // on an unassigned code or a read past the end.
  [[nodiscard]] Status decode(const uint8_t* data, size_t size, size_t* bit_position, uint8_t* out,
                              size_t count) const;
  // Decodes one symbol; returns false on an unassigned code (the reader's failed() flags a
  // read past the end).
  bool get(BitReader* r, unsigned* symbol) const {
    const uint32_t e = table_[r->peek(kHuffmanMaxBits)];
    if (e == 0) return false;
    const unsigned s = (e >> 8) & 0xFFu;
    r->skip(lengths_[s]);
    *symbol = s;
    return true;
  }

 private:
  uint32_t* table_;                           // see the layout at the top of this file
  uint8_t lengths_[kHuffmanMaxSymbols] = {};  // code length of each symbol (for get())
};

}  // namespace entropy
}  // namespace edgefl

#endif  // EDGEFL_SRC_ENTROPY_HUFFMAN_H_
