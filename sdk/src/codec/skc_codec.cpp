#include "codec/skc_codec.h"

#include <new>

#include "codec/format.h"
#include "entropy/huffman.h"

#if EDGEFL_WITH_SKC

namespace edgefl {
namespace codec_internal {

skc::Params skc_params(const CodecSpec& s) {
  skc::Params p;
  p.bins = s.skc_bins;
  p.groups = s.skc_groups;
  p.rows = s.sketch_rows;
  p.cols = s.skc_cols;
  p.quantile_k = s.quantile_k;
  return p;
}

size_t skc_encode_workspace(const CodecSpec& s, size_t n) {
  return skc::encode_workspace_bytes(skc_params(s), max_nnz(s, n));
}

size_t skc_encoded_bound(const CodecSpec& s, size_t n) {
  return kEncodedHeaderBytes + size_t(skc::region_bound(skc_params(s), max_nnz(s, n)));
}

size_t skc_decode_workspace(const EncodedInfo& h) {
  // 64: alignment of the Huffman decoder table; decode_workspace_bytes() holds the table and
  // the cells.
  return 64 + skc::decode_workspace_bytes(skc::params_from_header(h), h.nnz);
}

// SKCompress: three passes over the set (quantiles; group counts and key widths; sketch inserts
// and keys), then the Huffman-coded tables. Zeros the sparsifier kept are not carried.
Status encode_skc(const CodecSpec& spec, const select::Selection& sel, const float* x, size_t n,
                  uint64_t seed, uint8_t* sketch_memory, uint8_t* payload, size_t capacity, EncodedInfo* h) {
  const skc::Params sp = skc_params(spec);
  size_t carried = 0;
  size_t region = 0;
  if (n == 0) {
    region = skc::write_empty_region(payload);
  } else {
    skc::Encoder* enc = new (sketch_memory) skc::Encoder(sp, max_nnz(spec, n), seed, sketch_memory);
    sel.for_each(x, n, [&](uint32_t i) {
      if (x[i] != 0.0f) {
        enc->observe(x[i]);
        ++carried;
      }
    });
    enc->plan();
    sel.for_each(x, n, [&](uint32_t i) {
      if (x[i] != 0.0f) enc->count(i, x[i]);
    });
    EDGEFL_RETURN_IF_ERROR(enc->layout(payload, capacity));
    sel.for_each(x, n, [&](uint32_t i) {
      if (x[i] != 0.0f) enc->insert(i, x[i]);
    });
    EDGEFL_RETURN_IF_ERROR(enc->finish(&region));
  }
  h->nnz = uint32_t(carried);
  h->index_coding = IndexCoding::kNone;
  h->index_bytes = 0;
  h->value_bytes = region;
  h->bits = 8;
  h->block = sp.bins;
  h->levels = skc::header_levels(sp);
  h->param = sp.cols;
  h->stochastic = false;
  h->shared_scale = false;
  return Status::kOk;
}

// skc: parse, decode the sketch tables into the workspace, validate every key, then emit.
Status decode_skc(const EncodedInfo& h, const uint8_t* region, Span<uint8_t> workspace, BatchSink& sink) {
  const skc::Params p = skc::params_from_header(h);
  skc::Layout l;
  EDGEFL_RETURN_IF_ERROR(skc::parse(p, h.n, h.nnz, region, h.value_bytes, &l));
  if (workspace.size() < skc_decode_workspace(h) || workspace.data() == nullptr)
    return Status::kWorkspaceTooSmall;
  uint32_t* table = reinterpret_cast<uint32_t*>(align64(workspace.data()));
  uint8_t* cells = reinterpret_cast<uint8_t*>(table) + entropy::huffman_decoder_table_bytes();
  EDGEFL_RETURN_IF_ERROR(skc::decode_sketches(p, l, cells, table));
  EDGEFL_RETURN_IF_ERROR(skc::visit(p, l, h.n, h.seed, cells, false, [](size_t, float) {}));
  sink.begin();
  return skc::visit(p, l, h.n, h.seed, cells, true, sink);
}

}  // namespace codec_internal
}  // namespace edgefl

#endif  // EDGEFL_WITH_SKC
