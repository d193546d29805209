// Internal: SKCompress (skc), the codec family of sketch/skc.h, as the codec uses it: its
// parameters from a spec, its sizes, its encoder over a selected set and its decoder. Compiled
// with EDGEFL_WITH_SKC (edgefl/config.h); codec.cpp does not reference it otherwise.
// Li et al., "SKCompress: compressing sparse and nonuniform gradient in distributed machine
// learning", VLDB Journal 2020 (shared/seeds).
#ifndef EDGEFL_SRC_CODEC_SKC_CODEC_H_
#define EDGEFL_SRC_CODEC_SKC_CODEC_H_

#include <stddef.h>
#include <stdint.h>

#include "codec/codec_internal.h"
#include "codec/select.h"
#include "sketch/skc.h"

namespace edgefl {
namespace codec_internal {

skc::Params skc_params(const CodecSpec& s);
// Bytes of encode()'s workspace part for the sketches; of the encoding (header included); of
// decode()'s workspace for an encoding with header `h`.
size_t skc_encode_workspace(const CodecSpec& s, size_t n);
size_t skc_encoded_bound(const CodecSpec& s, size_t n);
size_t skc_decode_workspace(const EncodedInfo& h);
// Encodes the non-zeros of `sel` over x[0, n) into `payload` (`capacity` bytes) and fills the
// header fields skc owns. `sketch_memory`: the workspace part of skc_encode_workspace().
Status encode_skc(const CodecSpec& spec, const select::Selection& sel, const float* x, size_t n,
                  uint64_t seed, uint8_t* sketch_memory, uint8_t* payload, size_t capacity, EncodedInfo* h);
// Verifies the region (tables, every key) and feeds sink(index, value) in ascending index order.
Status decode_skc(const EncodedInfo& h, const uint8_t* region, Span<uint8_t> workspace, BatchSink& sink);

}  // namespace codec_internal
}  // namespace edgefl

#endif  // EDGEFL_SRC_CODEC_SKC_CODEC_H_
