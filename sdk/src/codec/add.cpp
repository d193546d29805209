// codec/add.cpp: the sum of two encodings without decoding to floats where the codes are
// integers (shared-scale codes, fp32 values, Count Sketch cells): add_encoded() and its bounds.
#include <stdint.h>
#include <string.h>

#include "codec/codec_internal.h"
#include "codec/count_sketch_codec.h"
#include "codec/format.h"
#include "core/bitio.h"
#include "edgefl/codec.h"

namespace edgefl {

using namespace codec_internal;

namespace {

// The two's-complement code of `bits` bits at the reader's position.
int64_t read_code(BitReader& r, unsigned bits) {
  const unsigned shift = 64 - bits;
  return int64_t(r.get(bits) << shift) >> shift;
}

// The narrowest code width (2..32) that holds every code of magnitude <= max_abs.
unsigned code_width(int64_t max_abs) {
  unsigned width = 2;
  while (width < 32 && max_abs > (int64_t(1) << (width - 1)) - 1) ++width;
  return width;
}

// Summable encodings whose values are shared-scale integer codes (read_integer_codes()).
bool integer_coded(const EncodedInfo& info) {
  return is_summable(info) && info.values == ValueCoderKind::kUniform && info.shared_scale;
}

}  // namespace

bool is_summable(const EncodedInfo& info) {
  if (info.values == ValueCoderKind::kCountSketch) return true;
  if (info.values == ValueCoderKind::kSkCompress) return false;
  const bool support =
      info.sparsifier == SparsifierKind::kNone || info.sparsifier == SparsifierKind::kRandomK;
  // rANS-coded codes (`ans`) are a stream, not integers in place: decode_add() sums them.
  const bool ints = info.values == ValueCoderKind::kUniform && info.shared_scale && !info.entropy_coded;
  return support && (ints || info.values == ValueCoderKind::kFp32);
}

size_t add_encoded_bound(const EncodedInfo& a, const EncodedInfo& b) {
  (void)b;
  if (a.values == ValueCoderKind::kCountSketch) return a.total_bytes;
  // At most 32-bit codes (or fp32 values) for every carried coordinate.
  return kEncodedHeaderBytes + size_t(a.nnz) * 4;
}

Status add_encoded(Span<const uint8_t> a, Span<const uint8_t> b, Span<uint8_t> out, size_t* written) {
  if (written == nullptr) return Status::kInvalidArgument;
  *written = 0;
  EncodedInfo ha, hb;
  EDGEFL_RETURN_IF_ERROR(inspect(a, &ha));
  EDGEFL_RETURN_IF_ERROR(inspect(b, &hb));
  if (!is_summable(ha) || !is_summable(hb)) return Status::kNotSummable;
  if (ha.values == ValueCoderKind::kCountSketch || hb.values == ValueCoderKind::kCountSketch) {
#if EDGEFL_WITH_COUNT_SKETCH
    return add_count_sketches(a, b, ha, hb, out, written);
#else
    return Status::kUnknownCodec;  // inspect() refuses them first
#endif
  }
  if (ha.n != hb.n || ha.sparsifier != hb.sparsifier || ha.values != hb.values || ha.nnz != hb.nnz ||
      ha.shared_scale != hb.shared_scale || ha.randk_unscaled != hb.randk_unscaled ||
      ha.randk_permuted != hb.randk_permuted) {
    return Status::kIncompatible;
  }
  if (ha.sparsifier == SparsifierKind::kRandomK && ha.seed != hb.seed) return Status::kIncompatible;
  if (ha.shared_scale && memcmp(&ha.param, &hb.param, 4) != 0) return Status::kIncompatible;
  if (uint64_t(ha.contributions) + hb.contributions > 0xFFFFFFFFull) return Status::kOverflow;
  const values::Params pa = params_from_header(ha), pb = params_from_header(hb);
  const uint8_t* va = a.data() + ha.header_bytes;  // no index region for summable encodings
  const uint8_t* vb = b.data() + hb.header_bytes;
  EDGEFL_RETURN_IF_ERROR(values::validate_region(pa, va, ha.nnz));
  EDGEFL_RETURN_IF_ERROR(values::validate_region(pb, vb, hb.nnz));

  EncodedInfo h = ha;
  h.contributions = ha.contributions + hb.contributions;
  h.stochastic = ha.stochastic || hb.stochastic;
  uint8_t* payload = out.data() + kEncodedHeaderBytes;
  if (ha.values == ValueCoderKind::kFp32) {
    h.value_bytes = size_t(ha.nnz) * 4;
    if (out.size() < kEncodedHeaderBytes + h.value_bytes) return Status::kBufferTooSmall;
    for (uint32_t i = 0; i < ha.nnz; ++i) {
      float x, y;
      memcpy(&x, va + 4 * size_t(i), 4);
      memcpy(&y, vb + 4 * size_t(i), 4);
      const float s = x + y;
      if (is_nonfinite_bits(float_bits(s))) return Status::kOverflow;
      memcpy(payload + 4 * size_t(i), &s, 4);
    }
  } else {
    // Integer codes: find the width of the largest |sum|, then write the sums at that width.
    BitReader ra(va, ha.value_bytes), rb(vb, hb.value_bytes);
    int64_t max_abs = 0;
    for (uint32_t i = 0; i < ha.nnz; ++i) {
      const int64_t s = read_code(ra, ha.bits) + read_code(rb, hb.bits);
      const int64_t m = s < 0 ? -s : s;
      max_abs = m > max_abs ? m : max_abs;
    }
    if (max_abs > 2147483647) return Status::kOverflow;
    const unsigned width = code_width(max_abs);
    h.bits = uint8_t(width);
    h.value_bytes = (size_t(ha.nnz) * width + 7) / 8;
    if (out.size() < kEncodedHeaderBytes + h.value_bytes) return Status::kBufferTooSmall;
    BitReader ra2(va, ha.value_bytes), rb2(vb, hb.value_bytes);
    BitWriter w(payload, h.value_bytes);
    for (uint32_t i = 0; i < ha.nnz; ++i) {
      w.put(uint64_t(read_code(ra2, ha.bits) + read_code(rb2, hb.bits)), width);
    }
    w.finish();
  }
  h.index_bytes = 0;
  h.total_bytes = kEncodedHeaderBytes + h.value_bytes;
  format::seal(h, out.data());
  *written = h.total_bytes;
  return Status::kOk;
}

size_t integer_code_count(const EncodedInfo& info) {
  if (info.values == ValueCoderKind::kCountSketch) return size_t(info.levels) * info.block;
  return integer_coded(info) ? info.nnz : 0;
}

Status read_integer_codes(Span<const uint8_t> bytes, Span<int32_t> codes) {
  EncodedInfo h;
  EDGEFL_RETURN_IF_ERROR(inspect(bytes, &h));
  if (h.values == ValueCoderKind::kCountSketch) {  // rows x cols little-endian int32 cells
    const size_t cells = integer_code_count(h);
    if (codes.size() < cells) return Status::kBufferTooSmall;
    if (h.value_bytes != 4 * cells) return Status::kCorruptPayload;
    const uint8_t* v = bytes.data() + h.header_bytes;
    for (size_t i = 0; i < cells; ++i) codes[i] = int32_t(load_le32(v + 4 * i));
    return Status::kOk;
  }
  if (!integer_coded(h)) return Status::kNotSummable;
  if (codes.size() < h.nnz) return Status::kBufferTooSmall;
  const uint8_t* v = bytes.data() + h.header_bytes;
  EDGEFL_RETURN_IF_ERROR(values::validate_region(params_from_header(h), v, h.nnz));
  BitReader r(v, h.value_bytes);
  for (uint32_t i = 0; i < h.nnz; ++i) codes[i] = int32_t(read_code(r, h.bits));
  return Status::kOk;
}

Status write_integer_codes(const EncodedInfo& like, Span<const int32_t> codes, uint32_t contributions,
                           Span<uint8_t> out, size_t* written) {
  if (written == nullptr) return Status::kInvalidArgument;
  *written = 0;
  if (like.values == ValueCoderKind::kCountSketch) {  // the cells of the summed sketch
    const size_t cells = integer_code_count(like);
    if (codes.size() != cells) return Status::kSizeMismatch;
    if (contributions == 0) return Status::kOverflow;
    for (int32_t c : codes) {
      if (c == INT32_MIN) return Status::kOverflow;
    }
    EncodedInfo h = like;
    h.contributions = contributions;
    h.value_bytes = 4 * cells;
    h.index_bytes = 0;
    h.total_bytes = kEncodedHeaderBytes + h.value_bytes;
    if (out.size() < h.total_bytes || out.data() == nullptr) return Status::kBufferTooSmall;
    for (size_t i = 0; i < cells; ++i)
      store_le32(out.data() + kEncodedHeaderBytes + 4 * i, uint32_t(codes[i]));
    format::seal(h, out.data());
    *written = h.total_bytes;
    return Status::kOk;
  }
  if (!integer_coded(like)) return Status::kNotSummable;
  if (codes.size() != like.nnz) return Status::kSizeMismatch;
  if (contributions == 0) return Status::kOverflow;
  int64_t max_abs = 0;
  for (uint32_t i = 0; i < like.nnz; ++i) {
    const int64_t m = codes[i] < 0 ? -int64_t(codes[i]) : int64_t(codes[i]);
    max_abs = m > max_abs ? m : max_abs;
  }
  if (max_abs > 2147483647) return Status::kOverflow;
  const unsigned width = code_width(max_abs);
  EncodedInfo h = like;
  h.bits = uint8_t(width);
  h.contributions = contributions;
  h.value_bytes = (size_t(like.nnz) * width + 7) / 8;
  h.index_bytes = 0;
  h.total_bytes = kEncodedHeaderBytes + h.value_bytes;
  if (out.size() < h.total_bytes) return Status::kBufferTooSmall;
  BitWriter w(out.data() + kEncodedHeaderBytes, h.value_bytes);
  for (uint32_t i = 0; i < like.nnz; ++i) w.put(uint64_t(int64_t(codes[i])), width);
  w.finish();
  format::seal(h, out.data());
  *written = h.total_bytes;
  return Status::kOk;
}

}  // namespace edgefl
