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
#include "codec/spec_args.h"

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

// The family's spec grammar (defaults, one argument, the canonical text), validate_codec_spec()
// of its specs and read_header()'s check of the header fields it owns (kBadParameters or kOk):
// inline, so that spec.cpp and format.cpp compile them in place (Cortex-M flash).
#if EDGEFL_WITH_COUNT_SKETCH
inline Status validate_count_sketch_spec(const CodecSpec& s) {
  auto finite_positive = [](float v) { return v > 0.0f && v <= 3.0e38f; };
  const bool cells_ok = s.sketch_cols != 0 ? s.sketch_cols <= EDGEFL_MAX_DIMENSION
                                           : (s.sketch_cells > 0.0 && s.sketch_cells <= 4.0);
  const bool top_ok = s.k != 0 || (s.density > 0.0 && s.density <= 1.0);
  if (s.sparsifier != SparsifierKind::kNone || s.index_coding != IndexCoding::kNone || s.bits != 32 ||
      s.sketch_rows < 1 || s.sketch_rows > 15 || !cells_ok || !top_ok || !finite_positive(s.shared_step) ||
      s.shared_step > values::kMaxScale / 2147483648.0f) {
    return Status::kInvalidSpec;
  }
  return Status::kOk;
}

inline Status check_count_sketch_header(const EncodedInfo& h) {
  if (h.sparsifier != SparsifierKind::kNone || h.bits != 32 || h.levels < 1 || h.levels > 15 || h.block < 1 ||
      (h.n > 0 && h.nnz == 0) || h.block > EDGEFL_MAX_DIMENSION ||
      !(h.param > 0.0f && h.param <= values::kMaxScale / 2147483648.0f)) {
    return Status::kBadParameters;
  }
  return Status::kOk;
}

inline bool set_count_sketch_defaults(CodecSpec* s) {
  s->values = ValueCoderKind::kCountSketch;
  s->bits = 32;
  s->block = 0;
  s->sketch_rows = 5;
  s->sketch_cells = 0.1;
  s->density = 0.01;
  s->shared_step = 1.0f / 1048576.0f;
  return true;
}

inline bool apply_count_sketch_arg(const Arg& a, CodecSpec* s) {
  uint32_t v = 0;
  if (a.key_len == 0 || a.key_is("cells")) {
    s->sketch_cols = 0;
    return text::parse_decimal(a.value, a.value_end(), &s->sketch_cells);
  }
  if (a.key_is("top")) {
    s->k = 0;
    return text::parse_decimal(a.value, a.value_end(), &s->density);
  }
  if (a.key_is("step")) return parse_float(a.value, a.value_end(), &s->shared_step);
  if (!parse_uint(a.value, a.value_end(), &v)) return false;
  if (a.key_is("cols")) {
    s->sketch_cols = v;
    s->sketch_cells = 0.0;
  } else if (a.key_is("rows") && v <= 255) {
    s->sketch_rows = uint8_t(v);
  } else if (a.key_is("k")) {
    s->k = v;
    s->density = 0.0;
  } else {
    return false;
  }
  return true;
}

inline void format_count_sketch_spec(const CodecSpec& s, text::Appender* a) {
  if (s.sketch_cols != 0) {
    a->put("cs:cols=");
    a->put_uint(s.sketch_cols);
  } else {
    a->put("cs:cells=");
    a->put_double(s.sketch_cells);
  }
  a->put(",rows=");
  a->put_uint(s.sketch_rows);
  if (s.k != 0) {
    a->put(",k=");
    a->put_uint(s.k);
  } else {
    a->put(",top=");
    a->put_double(s.density);
  }
  a->put(",step=");
  a->put_float(s.shared_step);
}
#endif  // EDGEFL_WITH_COUNT_SKETCH

}  // namespace codec_internal
}  // namespace edgefl

#endif  // EDGEFL_SRC_CODEC_COUNT_SKETCH_CODEC_H_
