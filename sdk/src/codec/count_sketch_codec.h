// Internal: Count Sketch (cs) as the codec uses it: stochastic integer codes of x / step added
// into rows x cols int32 cells (Charikar, Chen, Farach-Colton 2002; sketched SGD as in
// FetchSGD, Rothchild et al. 2020), decoded as the top nnz estimates; sketches of one round share
// their hashes (round/seeds.h) and add cell by cell. Compiled with EDGEFL_WITH_COUNT_SKETCH
// (edgefl/config.h); codec.cpp and add.cpp do not reference it otherwise.
#ifndef EDGEFL_SRC_CODEC_COUNT_SKETCH_CODEC_H_
#define EDGEFL_SRC_CODEC_COUNT_SKETCH_CODEC_H_

#include <stddef.h>
#include <stdint.h>

#include "codec/codec_internal.h"
#include "codec/kernels.h"

namespace edgefl {
namespace codec_internal {

// Columns per row and heavy hitters decoded, at dimension n.
uint32_t cs_columns(const CodecSpec& s, size_t n);
size_t cs_heavy_hitters(const CodecSpec& s, size_t n);
// Bytes of the encoding (header included) and of decode()'s workspace (also encode()'s: the
// error feedback decodes what it sent).
size_t count_sketch_encoded_bound(const CodecSpec& s, size_t n);
size_t count_sketch_decode_workspace(const EncodedInfo& h);
size_t count_sketch_workspace(size_t n);
Status encode_count_sketch(const CodecSpec& spec, const float* x, size_t n, uint64_t seed,
                           const Kernels& kern, uint8_t* payload, EncodedInfo* h);
Status decode_count_sketch(const EncodedInfo& h, const uint8_t* cells, Span<uint8_t> workspace,
                           BatchSink& sink);
// a + b cell by cell into `out` (headers ha, hb already inspected): kIncompatible unless both
// share dimension, shape, step, seed and k; kOverflow past 31 bits; kBufferTooSmall.
Status add_count_sketches(Span<const uint8_t> a, Span<const uint8_t> b, const EncodedInfo& ha,
                          const EncodedInfo& hb, Span<uint8_t> out, size_t* written);

}  // namespace codec_internal
}  // namespace edgefl

#endif  // EDGEFL_SRC_CODEC_COUNT_SKETCH_CODEC_H_
