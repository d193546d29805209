// tests/fuzz/entropy_fuzz.cpp: the core's entropy decoders on any bytes. Byte 0 picks the coder
// (even: Huffman, odd: rANS; for rANS, bit 1 the lanes: 32 when set, 4 otherwise) and byte 1 the
// alphabet size (1..256); the rest is a code table
// followed by a stream of up to 4096 symbols. Decoders must reject or decode, never read out of
// bounds; decoded symbols must lie in the alphabet; each bulk decoder must agree with its
// symbol-by-symbol one (Huffman's get(), rANS's get()) on the symbols and on the verdict.
#include <stddef.h>
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
    std::vector<uint32_t> table(edgefl::entropy::huffman_table_entries());
    edgefl::entropy::HuffmanDecoder dec(table.data());
    edgefl::BitReader r(body, body_size);
    if (dec.read_table(&r, symbols) != edgefl::Status::kOk) return 0;
    // The bulk decoder against get(): the same verdict, and when valid the same symbols and end.
    const size_t start = r.bit_position();
    size_t bit = start;
    const bool ok = dec.decode(body, body_size, &bit, out.data(), count) == edgefl::Status::kOk;
    bool ref_ok = true;
    for (size_t i = 0; i < count && ref_ok; ++i) {
      unsigned symbol = 0;
      ref_ok = dec.get(&r, &symbol) && !r.failed() && (!ok || symbol == out[i]);
    }
    ref_ok = ref_ok && !r.failed();
    if (ok != ref_ok) abort();
    if (!ok) return 0;
    if (bit > body_size * 8 || bit != r.bit_position()) abort();
  } else {
    // The table (variable size), then the stream from the next byte.
    // The bulk decoder (in two calls, split at `head`) against the symbol-by-symbol reference:
    // the same symbols and the same verdict, valid stream or not.
    edgefl::entropy::RansDecoder dec, ref;
    edgefl::BitReader r(body, body_size);
    if (dec.read_table(&r, symbols) != edgefl::Status::kOk) return 0;
    edgefl::BitReader r2(body, body_size);
    if (ref.read_table(&r2, symbols) != edgefl::Status::kOk) abort();
    const size_t table_bytes = (r.bit_position() + 7) / 8;
    if (table_bytes > body_size) abort();
    const unsigned lanes = (data[0] & 2) ? edgefl::entropy::kRansWideLanes : edgefl::entropy::kRansLanes;
    if (dec.begin(body + table_bytes, body_size - table_bytes, lanes) != edgefl::Status::kOk) return 0;
    if (ref.begin(body + table_bytes, body_size - table_bytes, lanes) != edgefl::Status::kOk) abort();
    const size_t head = count < 48 ? count : size_t(data[3] >> 4) * 3;
    const bool ok_head = dec.decode(out.data(), head) == edgefl::Status::kOk;
    const bool ok_rest = dec.decode(out.data() + head, count - head) == edgefl::Status::kOk;
    for (size_t i = 0; i < count; ++i) {
      if (out[i] != ref.get()) abort();
    }
    const bool ref_ok = ref.finish() == edgefl::Status::kOk;
    if ((dec.finish() == edgefl::Status::kOk) != ref_ok) abort();
    if (ref_ok && !(ok_head && ok_rest)) abort();
  }
  for (size_t i = 0; i < count; ++i) {
    if (out[i] >= symbols) abort();
  }
  return 0;
}
