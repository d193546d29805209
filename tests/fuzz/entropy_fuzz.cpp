// tests/fuzz/entropy_fuzz.cpp: the core's entropy decoders on any bytes. Byte 0 picks the coder
// (even: Huffman, odd: rANS) and byte 1 the alphabet size (1..256); the rest is a code table
// followed by a stream of up to 4096 symbols. Decoders must reject or decode, never read out of
// bounds; decoded symbols must lie in the alphabet.
#include <stdint.h>
#include <stdlib.h>

#include <vector>

#include "core/bitio.h"
#include "entropy/huffman.h"
#include "entropy/rans.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const bool huffman = (data[0] & 1) == 0;
  const unsigned symbols = unsigned(data[1]) + 1;
  const size_t count = size_t(data[2]) * 16 + (data[3] & 15);
  const uint8_t* body = data + 4;
  const size_t body_size = size - 4;
  std::vector<uint8_t> out(count + 1, 0);
  if (huffman) {
    std::vector<uint16_t> table(edgefl::entropy::huffman_table_entries());
    edgefl::entropy::HuffmanDecoder dec(table.data());
    edgefl::BitReader r(body, body_size);
    if (dec.read_table(&r, symbols) != edgefl::Status::kOk) return 0;
    size_t bit = r.bit_position();
    if (dec.decode(body, body_size, &bit, out.data(), count) != edgefl::Status::kOk) return 0;
    if (bit > body_size * 8) abort();
  } else {
    const size_t table_bytes = edgefl::entropy::rans_table_bytes(symbols);
    if (body_size < table_bytes) return 0;
    edgefl::entropy::RansDecoder dec;
    edgefl::BitReader r(body, table_bytes);
    if (dec.read_table(&r, symbols) != edgefl::Status::kOk) return 0;
    if (dec.begin(body + table_bytes, body_size - table_bytes) != edgefl::Status::kOk) return 0;
    for (size_t i = 0; i < count; ++i) out[i] = uint8_t(dec.get(i));
    (void)dec.finish();
  }
  for (size_t i = 0; i < count; ++i) {
    if (out[i] >= symbols) abort();
  }
  return 0;
}
