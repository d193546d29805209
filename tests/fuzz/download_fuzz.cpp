// tests/fuzz/download_fuzz.cpp: any bytes as a model download stream (sdk/src/round/downlink.h),
// applied as edgefl::Client applies it: the first encoding's dimension fixes the model; each
// encoding's CRC32C is made to match first, so that mutations reach the decoders.
// Properties checked on every input:
//  - stream_next/apply_patch/apply_whole_model never read out of bounds (ASan) and never crash;
//  - a patch refused before its values are added (header, checksum, structure, dimension)
//    leaves the model bit-for-bit unchanged;
//  - after every accepted patch the model is finite and on the bf16 grid.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "codec/format.h"
#include "core/bitio.h"
#include "core/half.h"
#include "edgefl/codec.h"
#include "round/downlink.h"

namespace {

constexpr size_t kMaxDimension = size_t(1) << 16;
constexpr size_t kMaxDecodeWorkspace = size_t(16) << 20;

void fix_checksum(std::vector<uint8_t>* bytes) {
  if (bytes->size() < edgefl::kEncodedHeaderBytes) return;
  const uint64_t total = uint64_t(edgefl::kEncodedHeaderBytes) + edgefl::load_le32(&(*bytes)[40]) +
                         edgefl::load_le32(&(*bytes)[44]);
  if (total > bytes->size()) return;
  edgefl::store_le32(&(*bytes)[edgefl::format::kChecksumOffset], 0);
  edgefl::store_le32(&(*bytes)[edgefl::format::kChecksumOffset],
                     edgefl::format::compute_checksum(bytes->data(), size_t(total)));
}

bool finite_on_grid(const std::vector<float>& m) {
  for (float v : m) {
    const uint32_t bits = edgefl::float_bits(v);
    if (edgefl::is_nonfinite_bits(bits) || (bits & 0xFFFFu) != 0) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const edgefl::Span<const uint8_t> stream(data, size);
  std::vector<float> model, scratch, before;
  std::vector<uint8_t> workspace;
  size_t offset = 0;
  bool first = true;
  while (offset < stream.size()) {
    edgefl::Span<const uint8_t> piece;
    if (edgefl::stream_next(stream, &offset, &piece) != edgefl::Status::kOk) return 0;
    std::vector<uint8_t> encoding(piece.begin(), piece.end());
    fix_checksum(&encoding);
    edgefl::EncodedInfo info;
    if (edgefl::read_header({encoding.data(), encoding.size()}, &info) != edgefl::Status::kOk) return 0;
    if (first) {
      if (info.n == 0 || info.n > kMaxDimension) return 0;
      model.assign(info.n, 0.0f);
      scratch.assign(info.n, 0.0f);
      first = false;
      // The first encoding may be a whole model (a download from base 0).
      if (edgefl::apply_whole_model({encoding.data(), encoding.size()}, {model.data(), model.size()}) ==
          edgefl::Status::kOk) {
        if (!finite_on_grid(model)) {
          // A whole model is trusted only through the public model digest; nothing to check here
          // but that its decode was bounded.
          model.assign(info.n, 0.0f);
        }
        continue;
      }
    }
    const size_t ws = edgefl::stream_decode_workspace({encoding.data(), encoding.size()});
    if (ws > kMaxDecodeWorkspace) return 0;
    workspace.resize(ws + 1);
    before = model;
    const edgefl::Status s =
        edgefl::apply_patch({encoding.data(), encoding.size()}, {model.data(), model.size()},
                            {scratch.data(), scratch.size()}, {workspace.data(), ws});
    if (s == edgefl::Status::kOk) {
      if (!finite_on_grid(model)) abort();
    } else if (s != edgefl::Status::kNonFiniteInput) {
      if (model != before) abort();
      return 0;
    } else {
      return 0;  // partly applied: the client discards the model (digest)
    }
  }
  return 0;
}
