#include "entropy/huffman.h"

#include <string.h>

namespace edgefl {
namespace entropy {

namespace {

unsigned reverse_bits(unsigned code, unsigned length) {
  unsigned r = 0;
  for (unsigned i = 0; i < length; ++i) r |= ((code >> i) & 1u) << (length - 1 - i);
  return r;
}

// Canonical codes (MSB-first values) for `lengths`.
void canonical_codes(const uint8_t* lengths, unsigned symbols, uint16_t* codes) {
  unsigned count[kHuffmanMaxBits + 1] = {};
  for (unsigned s = 0; s < symbols; ++s) count[lengths[s]]++;
  count[0] = 0;
  unsigned next[kHuffmanMaxBits + 2] = {};
  unsigned code = 0;
  for (unsigned len = 1; len <= kHuffmanMaxBits; ++len) {
    code = (code + count[len - 1]) << 1;
    next[len] = code;
  }
  for (unsigned s = 0; s < symbols; ++s) {
    codes[s] = lengths[s] ? uint16_t(next[lengths[s]]++) : 0;
  }
}

}  // namespace

void huffman_lengths(const uint32_t* freq, unsigned symbols, uint8_t* lengths) {
  memset(lengths, 0, symbols);
  // Leaves sorted by ascending frequency (insertion sort: at most 256 symbols).
  uint16_t order[kHuffmanMaxSymbols];
  unsigned used = 0;
  for (unsigned s = 0; s < symbols; ++s) {
    if (freq[s] == 0) continue;
    unsigned j = used++;
    while (j > 0 && freq[order[j - 1]] > freq[s]) {
      order[j] = order[j - 1];
      --j;
    }
    order[j] = uint16_t(s);
  }
  if (used == 0) return;
  if (used == 1) {
    lengths[order[0]] = 1;
    return;
  }
  // Two-queue Huffman (van Leeuwen 1976): leaves in ascending order, internal nodes created in
  // ascending order. Node ids: leaves 0..used-1, internal used..2*used-2.
  uint64_t weight[2 * kHuffmanMaxSymbols];
  uint16_t parent[2 * kHuffmanMaxSymbols];
  for (unsigned i = 0; i < used; ++i) weight[i] = freq[order[i]];
  unsigned leaf = 0, internal = used, created = used;
  auto pick = [&]() -> unsigned {
    if (leaf < used && (internal >= created || weight[leaf] <= weight[internal])) return leaf++;
    return internal++;
  };
  while (created < 2 * used - 1) {
    const unsigned a = pick(), b = pick();
    weight[created] = weight[a] + weight[b];
    parent[a] = parent[b] = uint16_t(created);
    ++created;
  }
  // Depths, root first (internal nodes were created in order: parents have larger ids).
  uint8_t depth[2 * kHuffmanMaxSymbols];
  depth[created - 1] = 0;
  for (unsigned i = created - 1; i-- > 0;)
    depth[i] = uint8_t(depth[parent[i]] + 1 > 255 ? 255 : depth[parent[i]] + 1);
  // Length limit: clamp, then lengthen the deepest codes below the limit until the Kraft sum fits
  // (the heuristic of zstd's HUF_setMaxHeight, in its simplest form); least frequent first.
  uint64_t kraft = 0;
  const uint64_t one = uint64_t(1) << kHuffmanMaxBits;
  for (unsigned i = 0; i < used; ++i) {
    unsigned d = depth[i] > kHuffmanMaxBits ? kHuffmanMaxBits : depth[i];
    lengths[order[i]] = uint8_t(d);
    kraft += one >> d;
  }
  while (kraft > one) {
    // The least frequent symbol whose code is shorter than the limit.
    for (unsigned i = 0; i < used; ++i) {
      uint8_t& len = lengths[order[i]];
      if (len < kHuffmanMaxBits) {
        kraft -= (one >> len) - (one >> (len + 1));
        ++len;
        break;
      }
    }
  }
  // Spend any slack left by the clamping on the most frequent symbols.
  for (unsigned i = used; i-- > 0;) {
    uint8_t& len = lengths[order[i]];
    while (len > 1 && kraft + (one >> len) <= one) {
      kraft += one >> len;
      --len;
    }
  }
}

uint64_t huffman_cost_bits(const uint32_t* freq, const uint8_t* lengths, unsigned symbols) {
  uint64_t bits = 0;
  for (unsigned s = 0; s < symbols; ++s) bits += uint64_t(freq[s]) * lengths[s];
  return bits;
}

HuffmanEncoder::HuffmanEncoder(const uint8_t* lengths, unsigned symbols) : symbols_(symbols) {
  memcpy(lengths_, lengths, symbols);
  uint16_t codes[kHuffmanMaxSymbols];
  canonical_codes(lengths_, symbols_, codes);
  for (unsigned s = 0; s < symbols_; ++s) codes_[s] = uint16_t(reverse_bits(codes[s], lengths_[s]));
}

void HuffmanEncoder::write_table(BitWriter* w) const {
  for (unsigned s = 0; s < symbols_; ++s) w->put(lengths_[s], 4);
}

Status HuffmanDecoder::read_table(BitReader* r, unsigned symbols) {
  if (symbols == 0 || symbols > kHuffmanMaxSymbols) return Status::kCorruptPayload;
  uint8_t lengths[kHuffmanMaxSymbols];
  uint64_t kraft = 0;
  const uint64_t one = uint64_t(1) << kHuffmanMaxBits;
  unsigned present = 0;
  for (unsigned s = 0; s < symbols; ++s) {
    lengths[s] = uint8_t(r->get(4));
    if (lengths[s] > kHuffmanMaxBits) return Status::kCorruptPayload;
    if (lengths[s]) {
      kraft += one >> lengths[s];
      ++present;
    }
  }
  if (r->failed() || present == 0 || kraft > one) return Status::kCorruptPayload;
  memset(lengths_, 0, sizeof lengths_);
  memcpy(lengths_, lengths, symbols);
  uint16_t codes[kHuffmanMaxSymbols];
  canonical_codes(lengths, symbols, codes);
  // Single-code entries first: symbol << 8 | 1 << 6 | length.
  const unsigned entries = unsigned(huffman_table_entries());
  memset(table_, 0, huffman_decoder_table_bytes());
  for (unsigned s = 0; s < symbols; ++s) {
    const unsigned len = lengths[s];
    if (len == 0) continue;
    const unsigned rev = reverse_bits(codes[s], len);
    for (unsigned j = rev; j < entries; j += 1u << len) table_[j] = uint32_t(s) << 8 | 1u << 6 | len;
  }
  // Then append the codes that follow within the 11 bits. The bits after a first code of length l
  // are j >> l (zeros above the window): a code of length <= 11 - total found there is decoded
  // from known bits only. Descending j: j >> l < j, so the entries looked up are still
  // single-code ones (index 0, its own successor, is kept aside).
  const uint32_t single0 = table_[0];
  for (unsigned j = entries; j-- > 0;) {
    uint32_t e = table_[j];
    if (e == 0) continue;
    unsigned total = e & 15u, n = 1;
    unsigned rest = j >> total;
    while (n < 3) {
      const uint32_t next = rest == 0 ? single0 : table_[rest];
      const unsigned len = next & 15u;
      if (next == 0 || total + len > kHuffmanMaxBits) break;
      e |= ((next >> 8) & 0xFFu) << (8 + 8 * n);
      total += len;
      rest >>= len;
      ++n;
    }
    table_[j] = (e & ~uint32_t(0xFF)) | n << 6 | total;
  }
  return Status::kOk;
}

Status HuffmanDecoder::decode(const uint8_t* data, size_t size, size_t* bit_position, uint8_t* out,
                              size_t count) const {
  // Five entries per load: the load holds at least 57 valid bits (64 - 7 of the byte offset).
  constexpr unsigned kEntriesPerLoad = 5;
  static_assert(kEntriesPerLoad * kHuffmanMaxBits <= 57, "five entries per 64-bit load");
  // Each entry stores 4 bytes (3 symbols + 1 overwritten later): room for 5 x 3 + 1 symbols.
  constexpr size_t kOutSlack = kEntriesPerLoad * 3 + 1;
  size_t pos = *bit_position;
  size_t i = 0;
  const uint32_t mask = (1u << kHuffmanMaxBits) - 1;
  if (count >= kOutSlack && size >= 8) {
    const size_t last_load = size - 8;  // the fast loop's loads stay within data[0..size)
    while (i <= count - kOutSlack && (pos >> 3) <= last_load) {
      uint64_t word;
      memcpy(&word, data + (pos >> 3), 8);
      word >>= pos & 7;  // little-endian host, as BitReader
      unsigned used = 0;
      for (unsigned j = 0; j < kEntriesPerLoad; ++j) {
        const uint32_t e = table_[word & mask];
        if (e == 0) return Status::kCorruptPayload;
        const uint32_t symbols = e >> 8;  // first symbol in the low byte: out[i] on little-endian
        memcpy(out + i, &symbols, 4);
        i += (e >> 6) & 3u;
        word >>= e & 63u;  // bits 4..5 are zero: the total length
        used += e & 15u;
      }
      pos += used;
    }
  }
  if (i < count) {
    if (pos > size * 8) return Status::kCorruptPayload;
    BitReader r(data + (pos >> 3), size - (pos >> 3));
    r.skip(unsigned(pos & 7));
    const size_t start = pos & ~size_t(7);
    for (; i < count; ++i) {
      unsigned symbol;
      if (!get(&r, &symbol)) return Status::kCorruptPayload;
      out[i] = uint8_t(symbol);
    }
    if (r.failed()) return Status::kCorruptPayload;
    pos = start + r.bit_position();
  }
  if (pos > size * 8) return Status::kCorruptPayload;
  *bit_position = pos;
  return Status::kOk;
}

}  // namespace entropy
}  // namespace edgefl
