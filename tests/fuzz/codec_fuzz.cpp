// tests/fuzz/codec_fuzz.cpp: any bytes as an encoded update (edgefl/codec.h). The harness writes
// the correct CRC32C into the header first, so that mutations reach the payload parsers (index
// coders, value regions, rANS, skc's groups/Huffman/keys, cs) instead of stopping at the checksum.
// Properties checked on every input:
//  - inspect/decode/decode_add never read out of bounds (ASan) and never crash;
//  - a rejected encoding leaves the accumulator bit-for-bit unchanged;
//  - an accepted one decodes to finite values, and decode_add into zeros equals decode;
//  - decode with decode_fast_workspace_size() bytes gives the same status and bits.
#include <stdint.h>

#include <stdlib.h>
#include <string.h>
#include <algorithm>

#include <vector>

#include "codec/format.h"
#include "core/bitio.h"
#include "edgefl/codec.h"

namespace {

constexpr size_t kMaxDimension = size_t(1) << 20;         // keeps the decode buffers small
constexpr size_t kMaxDecodeWorkspace = size_t(64) << 20;  // bytes

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  if (bytes.size() >= edgefl::kEncodedHeaderBytes) {
    // Make the checksum match whatever total the header claims (within the input).
    const uint64_t total =
        uint64_t(edgefl::kEncodedHeaderBytes) + edgefl::load_le32(&bytes[40]) + edgefl::load_le32(&bytes[44]);
    if (total <= bytes.size()) {
      edgefl::store_le32(&bytes[edgefl::format::kChecksumOffset], 0);
      edgefl::store_le32(&bytes[edgefl::format::kChecksumOffset],
                         edgefl::format::compute_checksum(bytes.data(), size_t(total)));
    }
  }
  const edgefl::Span<const uint8_t> in(bytes.data(), bytes.size());
  edgefl::EncodedInfo info;
  if (edgefl::inspect(in, &info) != edgefl::Status::kOk) return 0;
  if (info.n > kMaxDimension) return 0;
  const size_t ws_size = edgefl::decode_workspace_size(info);
  if (ws_size > kMaxDecodeWorkspace) return 0;
  std::vector<uint8_t> workspace(ws_size + 1);
  const edgefl::Span<uint8_t> ws(workspace.data(), ws_size);

  std::vector<float> decoded(info.n, 1.5f);
  const edgefl::Status s = edgefl::decode(in, {decoded.data(), decoded.size()}, ws);
  std::vector<float> acc(info.n, 0.25f);
  const std::vector<float> before = acc;
  const edgefl::Status s_add = edgefl::decode_add(in, 1.0f, {acc.data(), acc.size()}, ws);
  if ((s == edgefl::Status::kOk) != (s_add == edgefl::Status::kOk)) abort();  // same verdict
  // With decode_fast_workspace_size() (indices read once): the same status and the same bits.
  const size_t fast_size = edgefl::decode_fast_workspace_size(info);
  if (fast_size <= kMaxDecodeWorkspace) {
    std::vector<uint8_t> fast_workspace(fast_size + 1);
    // Odd start: the decoder aligns its index array itself.
    const edgefl::Span<uint8_t> fast_ws(fast_workspace.data() + 1, fast_size);
    std::vector<float> fast_decoded(info.n, 1.5f);
    if (edgefl::decode(in, {fast_decoded.data(), fast_decoded.size()}, fast_ws) != s) abort();
    if (!decoded.empty() && memcmp(fast_decoded.data(), decoded.data(), decoded.size() * sizeof(float)) != 0)
      abort();
  }
  // The integer codes (secure aggregation): read only from encodings that decode, and written
  // back they decode to the same values.
  // (A Count Sketch's codes are its cells; a cell or summed code of -2^31 has no positive twin and
  // is refused on the way back, kOverflow.)
  std::vector<int32_t> codes(edgefl::integer_code_count(info));
  const edgefl::Status s_codes = edgefl::read_integer_codes(in, {codes.data(), codes.size()});
  const bool has_min = std::find(codes.begin(), codes.end(), INT32_MIN) != codes.end();
  if (s_codes == edgefl::Status::kOk && !has_min) {
    if (s != edgefl::Status::kOk) abort();
    std::vector<uint8_t> again(edgefl::kEncodedHeaderBytes + 4 * codes.size());
    size_t written = 0;
    if (edgefl::write_integer_codes(info, {codes.data(), codes.size()},
                                    info.contributions == 0 ? 1 : info.contributions,
                                    {again.data(), again.size()}, &written) != edgefl::Status::kOk)
      abort();
    std::vector<float> redecoded(info.n, 2.5f);
    if (edgefl::decode({again.data(), written}, {redecoded.data(), redecoded.size()}, ws) !=
        edgefl::Status::kOk)
      abort();
    if (!decoded.empty() && memcmp(redecoded.data(), decoded.data(), decoded.size() * sizeof(float)) != 0)
      abort();
  }
  if (s_add != edgefl::Status::kOk) {
    if (acc != before) abort();  // a rejected encoding changed the accumulator
    for (float v : decoded) {
      if (v != 1.5f) abort();  // decode touched its output on failure
    }
    return 0;
  }
  for (size_t i = 0; i < info.n; ++i) {
    if (!(decoded[i] - decoded[i] == 0.0f)) abort();  // non-finite
    const float expect = 0.25f + decoded[i];
    if (acc[i] != expect) abort();
  }
  return 0;
}
