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
#include "codec/spec_args.h"
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

// The family's spec grammar (defaults, one argument, the canonical text), validate_codec_spec()
// of its specs and read_header()'s check of the header fields it owns (kBadParameters or kOk):
// inline, so that spec.cpp and format.cpp compile them in place (Cortex-M flash).
#if EDGEFL_WITH_SKC
inline Status validate_skc_spec(const CodecSpec& s) {
  if (s.sparsifier == SparsifierKind::kRandomK || s.index_coding != IndexCoding::kNone || s.bits != 8 ||
      s.skc_bins < 2 || s.skc_bins > 256 || s.skc_groups < 2 || s.skc_groups > 16 || s.sketch_rows < 1 ||
      s.sketch_rows > 4 || !(s.skc_cols > 0.0f && s.skc_cols <= 4.0f) || s.quantile_k < 16 ||
      s.quantile_k > 1024 || s.quantile_k % 2 != 0) {
    return Status::kInvalidSpec;
  }
  return Status::kOk;
}

inline Status check_skc_header(const EncodedInfo& h) {
  const unsigned rows = h.levels & 15u, groups = h.levels >> 4;
  if (h.sparsifier == SparsifierKind::kRandomK || h.bits != 8 || h.block < 2 || h.block > 256 || rows < 1 ||
      rows > 4 || groups < 2 || groups > 16 || !(h.param > 0.0f && h.param <= 4.0f) || h.stochastic ||
      h.contributions != 1) {
    return Status::kBadParameters;
  }
  return Status::kOk;
}

inline bool set_skc_defaults(CodecSpec* s) {
  s->values = ValueCoderKind::kSkCompress;
  s->bits = 8;
  s->block = 0;
  s->sketch_rows = 2;
  return true;
}

inline bool apply_skc_arg(const Arg& a, CodecSpec* s) {
  uint32_t v = 0;
  if (a.key_is("cols")) {
    return parse_float(a.value, a.value_end(), &s->skc_cols);
  }
  if (!parse_uint(a.value, a.value_end(), &v) || v > 65535) return false;
  if (a.key_is("bins")) {
    s->skc_bins = uint16_t(v);
  } else if (a.key_is("groups") && v <= 255) {
    s->skc_groups = uint8_t(v);
  } else if (a.key_is("rows") && v <= 255) {
    s->sketch_rows = uint8_t(v);
  } else if (a.key_is("k")) {
    s->quantile_k = uint16_t(v);
  } else {
    return false;
  }
  return true;
}

inline void format_skc_spec(const CodecSpec& s, text::Appender* a) {
  a->put("skc:bins=");
  a->put_uint(s.skc_bins);
  a->put(",groups=");
  a->put_uint(s.skc_groups);
  a->put(",rows=");
  a->put_uint(s.sketch_rows);
  a->put(",cols=");
  a->put_float(s.skc_cols);
  a->put(",k=");
  a->put_uint(s.quantile_k);
}
#endif  // EDGEFL_WITH_SKC

}  // namespace codec_internal
}  // namespace edgefl

#endif  // EDGEFL_SRC_CODEC_SKC_CODEC_H_
