#include "codec/count_sketch_codec.h"

#include <string.h>

#include "codec/format.h"
#include "codec/select.h"
#include "core/bitio.h"
#include "core/rng.h"
#include "sketch/count_sketch.h"

#if EDGEFL_WITH_COUNT_SKETCH

namespace edgefl {
namespace codec_internal {

// Count Sketch shape at dimension n.
uint32_t cs_columns(const CodecSpec& s, size_t n) {
  if (s.sketch_cols != 0) return s.sketch_cols;
  const double t = s.sketch_cells * double(n) / double(s.sketch_rows);
  uint32_t c = uint32_t(t);
  if (double(c) < t) ++c;
  return c < 1 ? 1 : c;
}
size_t cs_heavy_hitters(const CodecSpec& s, size_t n) {
  if (n == 0) return 0;
  size_t k = s.k != 0 ? s.k : size_t(s.density * double(n) + 0.5);
  k = k < 1 ? 1 : k;
  return k > n ? n : k;
}

size_t count_sketch_encoded_bound(const CodecSpec& s, size_t n) {
  return kEncodedHeaderBytes + size_t(s.sketch_rows) * cs_columns(s, n) * 4;
}

size_t count_sketch_workspace(size_t n) {
  return 128 + select::kHistogramBins * sizeof(uint32_t) + n * sizeof(float);
}

size_t count_sketch_decode_workspace(const EncodedInfo& h) {
  return count_sketch_workspace(h.n);
}

// Count Sketch (cs): stochastic integer codes of x / step added into rows x cols int32 cells,
// written in place in the payload.
Status encode_count_sketch(const CodecSpec& spec, const float* x, size_t n, uint64_t seed,
                           const Kernels& kern, uint8_t* payload, EncodedInfo* h) {
  const uint32_t max_bits = n > 0 ? kern.max_abs_bits(x, n) : 0;
  if (max_bits >= 0x7F800000u) return Status::kNonFiniteInput;
  // Codes must fit in int32 (and so must every cell: checked as they are added).
  if (double(bits_float(max_bits)) / double(spec.shared_step) >= 2147483647.0)
    return Status::kValueOutOfRange;
  const unsigned rows = spec.sketch_rows;
  const uint32_t cols = cs_columns(spec, n);
  h->nnz = uint32_t(cs_heavy_hitters(spec, n));
  h->bits = 32;
  h->block = cols;
  h->levels = rows;
  h->param = spec.shared_step;
  h->stochastic = true;
  h->shared_scale = false;
  h->index_coding = IndexCoding::kNone;
  h->value_bytes = size_t(rows) * cols * 4;
  memset(payload, 0, h->value_bytes);
  count_sketch::RowHash hashes[count_sketch::kMaxRows];
  for (unsigned r = 0; r < rows; ++r) hashes[r] = count_sketch::row_hash(seed, r);
  const uint32_t round_key = derive_key(seed, kPurposeRounding);
  for (size_t i = 0; i < n; ++i) {
    if (x[i] == 0.0f) continue;
    const double t = double(x[i]) / double(spec.shared_step);
    const double floor_t = double(int64_t(t) - (double(int64_t(t)) > t ? 1 : 0));
    const int64_t code =
        int64_t(floor_t) + (double(unit_float(hash32(round_key, uint32_t(i)))) < t - floor_t ? 1 : 0);
    if (code == 0) continue;
    for (unsigned r = 0; r < rows; ++r) {
      uint8_t* cell = payload + 4 * (size_t(r) * cols + hashes[r].column(uint32_t(i), cols));
      const int64_t sum = int64_t(int32_t(load_le32(cell))) + int64_t(hashes[r].sign(uint32_t(i))) * code;
      if (sum > 2147483647 || sum < -2147483647) return Status::kValueOutOfRange;
      store_le32(cell, uint32_t(int32_t(sum)));
    }
  }
  return Status::kOk;
}

// Count Sketch: every coordinate's estimate into the workspace, then the top nnz of them.
Status decode_count_sketch(const EncodedInfo& h, const uint8_t* cells, Span<uint8_t> workspace,
                           BatchSink& sink) {
  if (workspace.size() < count_sketch_decode_workspace(h) || workspace.data() == nullptr)
    return Status::kWorkspaceTooSmall;
  uint8_t* cursor = align64(workspace.data());
  uint32_t* histogram = reinterpret_cast<uint32_t*>(cursor);
  float* estimates = reinterpret_cast<float*>(align64(cursor + select::kHistogramBins * sizeof(uint32_t)));
  const unsigned rows = h.levels;
  count_sketch::RowHash hashes[count_sketch::kMaxRows];
  for (unsigned r = 0; r < rows; ++r) hashes[r] = count_sketch::row_hash(h.seed, r);
  for (uint32_t i = 0; i < h.n; ++i)
    estimates[i] = count_sketch::estimate(cells, rows, h.block, hashes, i, h.param);
  select::Selection sel;
  sel.k = h.nnz;
  if (h.nnz < h.n) {
    sel.rule = select::Selection::Rule::kAboveWithTies;
    EDGEFL_RETURN_IF_ERROR(select::radix_select(estimates, h.n, h.nnz, histogram, &sel.threshold, &sel.ties));
  }
  sink.begin();
  sel.for_each(estimates, h.n, [&](uint32_t i) { sink(size_t(i), estimates[i]); });
  return Status::kOk;
}

Status add_count_sketches(Span<const uint8_t> a, Span<const uint8_t> b, const EncodedInfo& ha,
                          const EncodedInfo& hb, Span<uint8_t> out, size_t* written) {
  // Cell by cell, exactly, when both sketches share dimension, shape, step, seed and k.
  if (ha.values != hb.values || ha.n != hb.n || ha.nnz != hb.nnz || ha.levels != hb.levels ||
      ha.block != hb.block || ha.seed != hb.seed || memcmp(&ha.param, &hb.param, 4) != 0) {
    return Status::kIncompatible;
  }
  if (uint64_t(ha.contributions) + hb.contributions > 0xFFFFFFFFull) return Status::kOverflow;
  if (out.size() < ha.total_bytes || out.data() == nullptr) return Status::kBufferTooSmall;
  const uint8_t* ca = a.data() + ha.header_bytes;
  const uint8_t* cb = b.data() + hb.header_bytes;
  for (size_t i = 0; i < ha.value_bytes; i += 4) {
    const int64_t sum = int64_t(int32_t(load_le32(ca + i))) + int64_t(int32_t(load_le32(cb + i)));
    if (sum > 2147483647 || sum < -2147483647) return Status::kOverflow;
  }
  uint8_t* cells = out.data() + kEncodedHeaderBytes;
  for (size_t i = 0; i < ha.value_bytes; i += 4) {
    store_le32(cells + i, uint32_t(int32_t(load_le32(ca + i)) + int32_t(load_le32(cb + i))));
  }
  EncodedInfo h = ha;
  h.contributions = ha.contributions + hb.contributions;
  format::seal(h, out.data());
  *written = h.total_bytes;
  return Status::kOk;
}

}  // namespace codec_internal
}  // namespace edgefl

#endif  // EDGEFL_WITH_COUNT_SKETCH
