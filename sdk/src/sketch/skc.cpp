#include "sketch/skc.h"

namespace edgefl {
namespace skc {

namespace {

constexpr size_t kLutEntries = 65536;

size_t align8(size_t v) {
  return (v + 7) & ~size_t(7);
}

size_t region_header_bytes(unsigned splits, unsigned groups) {
  return 8 + 2 + 4 * size_t(splits) + 2 + 1 + kGroupHeaderBytes * groups;
}

// Bytes of all sketch cells: sum over groups of rows x ceil(cols x keys) <= rows x (cols x nnz + G).
uint64_t cells_bound(const Params& p, uint64_t nnz) {
  return uint64_t(p.rows) * (uint64_t(double(p.cols) * double(nnz)) + 1 + kMaxGroups);
}

float midpoint(float lower, float upper) {
  return 0.5f * lower + 0.5f * upper;
}

}  // namespace

size_t write_empty_region(uint8_t* out) {
  memset(out, 0, 13);  // min 0, max 0, no split, zero 0, no group
  return 13;
}

uint64_t region_bound(const Params& p, uint64_t nnz) {
  // Header with every split; keys at most 33 bits each (the m = 2 fixed layout is always
  // available); per group a full Huffman table; sketch codes at most kHuffmanMaxBits each.
  const uint64_t header = region_header_bytes(p.bins, kMaxGroups);
  const uint64_t keys = (nnz * 33 + 7) / 8 + kMaxGroups;
  const uint64_t tables = kMaxGroups * entropy::huffman_table_bytes(p.bins);
  const uint64_t codes = (cells_bound(p, nnz) * entropy::kHuffmanMaxBits + 7) / 8 + 2 * kMaxGroups;
  return header + keys + tables + codes;
}

size_t encode_workspace_bytes(const Params& p, uint64_t nnz) {
  const uint64_t items = nnz == 0 ? 1 : nnz;
  return align8(sizeof(Encoder)) +
         align8(sketch::quantile_sketch_floats(p.quantile_k, items) * sizeof(float)) +
         sketch::quantile_query_items(p.quantile_k, items) * 8 + kLutEntries + size_t(cells_bound(p, nnz));
}

size_t decode_workspace_bytes(const Params& p, uint64_t nnz) {
  return entropy::huffman_decoder_table_bytes() + size_t(cells_bound(p, nnz));
}

Encoder::Encoder(const Params& p, uint64_t max_nnz, uint64_t seed, uint8_t* workspace)
    : p_(p),
      seed_(seed),
      quantiles_(p.quantile_k, max_nnz == 0 ? 1 : max_nnz,
                 reinterpret_cast<float*>(workspace + align8(sizeof(Encoder))),
                 seed ^ 0x514E54494C455321ull) {
  const uint64_t items = max_nnz == 0 ? 1 : max_nnz;
  uint8_t* cursor = workspace + align8(sizeof(Encoder)) +
                    align8(sketch::quantile_sketch_floats(p.quantile_k, items) * sizeof(float));
  quantile_scratch_ = reinterpret_cast<uint64_t*>(cursor);
  cursor += sketch::quantile_query_items(p.quantile_k, items) * 8;
  lut_ = cursor;
  cells_ = cursor + kLutEntries;
}

void Encoder::plan() {
  split_count_ = 0;
  zero_ = 0;
  group_count_ = 0;
  if (quantiles_.count() == 0) {
    reps_[0] = 0.0f;
    for (unsigned i = 0; i < 4; ++i) split_keys_[i] = 0xFFFFFFFFu;
    memset(lut_, 0, kLutEntries);
    return;
  }
  min_ = quantiles_.min();
  max_ = quantiles_.max();
  const bool both_signs = min_ < 0.0f && max_ > 0.0f;
  // bins - 1 equi-depth splits (bins - 2 when zero must be added), duplicates removed.
  const unsigned parts = both_signs ? p_.bins - 1u : p_.bins;
  float raw[256];
  if (parts >= 2) quantiles_.quantiles(parts, raw, quantile_scratch_);
  for (unsigned i = 0; i + 1 < parts; ++i) {
    float s = raw[i] == 0.0f ? 0.0f : raw[i];  // -0 -> +0
    if (split_count_ > 0 && !(s > splits_[split_count_ - 1])) continue;
    splits_[split_count_++] = s;
  }
  if (both_signs) {
    unsigned pos = 0;
    while (pos < split_count_ && splits_[pos] < 0.0f) ++pos;
    if (pos == split_count_ || splits_[pos] != 0.0f) {
      for (unsigned i = split_count_; i > pos; --i) splits_[i] = splits_[i - 1];
      splits_[pos] = 0.0f;
      ++split_count_;
    }
    zero_ = pos + 1;  // buckets 0..pos lie below zero
  } else {
    zero_ = max_ <= 0.0f && min_ < 0.0f ? split_count_ + 1 : 0;
  }
  for (unsigned i = 0; i < split_count_; ++i) split_keys_[i] = sortable_key(splits_[i]);
  for (unsigned i = split_count_; i < split_count_ + 4; ++i) split_keys_[i] = 0xFFFFFFFFu;
  const unsigned buckets = split_count_ + 1;
  for (unsigned b = 0; b < buckets; ++b) {
    reps_[b] = midpoint(b == 0 ? min_ : splits_[b - 1], b == split_count_ ? max_ : splits_[b]);
  }
  // Lookup table: lut[h] = number of splits whose key is below h << 16.
  unsigned j = 0;
  for (uint32_t h = 0; h < kLutEntries; ++h) {
    while (j < split_count_ && split_keys_[j] < (h << 16)) ++j;
    lut_[h] = uint8_t(j);
  }
  // Groups: the negative buckets [0, zero) and the positive ones [zero, buckets) get groups in
  // proportion to their bucket counts; zero is always a group edge.
  const unsigned neg = zero_, pos = buckets - zero_;
  unsigned g_neg = 0, g_pos = 0;
  if (neg == 0) {
    g_pos = p_.groups;
  } else if (pos == 0) {
    g_neg = p_.groups;
  } else {
    g_neg = unsigned((uint64_t(p_.groups) * neg + buckets / 2) / buckets);
    g_neg = g_neg < 1 ? 1 : g_neg > p_.groups - 1u ? p_.groups - 1u : g_neg;
    g_pos = p_.groups - g_neg;
  }
  g_neg = g_neg > neg ? neg : g_neg;
  g_pos = g_pos > pos ? pos : g_pos;
  auto add_side = [&](unsigned first, unsigned count, unsigned parts_, bool negative) {
    for (unsigned i = 0; i < parts_; ++i) {
      const unsigned lo = first + count * i / parts_, hi = first + count * (i + 1) / parts_;
      Group& g = groups_[group_count_];
      g = Group();
      g.first = uint16_t(lo);
      g.buckets = uint16_t(hi - lo);
      g.negative = negative;
      for (unsigned b = lo; b < hi; ++b) group_of_bucket_[b] = uint8_t(group_count_);
      ++group_count_;
    }
  };
  add_side(0, neg, g_neg, true);
  add_side(zero_, pos, g_pos, false);
}

void Encoder::count(uint32_t key, float v) {
  Group& g = groups_[group_of(bucket(v))];
  const uint64_t delta = uint64_t(int64_t(key) - g.prev_key);
  g.widths[floor_log2(delta) + 1]++;
  g.prev_key = key;
  g.keys++;
}

Status Encoder::layout(uint8_t* out, size_t cap) {
  out_ = out;
  cap_ = cap;
  // Groups that received no key are not sent (an empty end bucket can form a group of its own).
  unsigned kept = 0;
  uint8_t renumber[kMaxGroups];
  for (unsigned gi = 0; gi < group_count_; ++gi) {
    renumber[gi] = uint8_t(kept);
    if (groups_[gi].keys > 0) groups_[kept++] = groups_[gi];
  }
  for (unsigned b = 0; b < split_count_ + 1u && group_count_ > 0; ++b) {
    group_of_bucket_[b] = renumber[group_of_bucket_[b]];
  }
  group_count_ = kept;
  size_t offset = region_header_bytes(split_count_, group_count_);
  keys_offset_ = offset;
  uint64_t cells = 0;
  uint64_t sketch_bound = 0;
  for (unsigned gi = 0; gi < group_count_; ++gi) {
    Group& g = groups_[gi];
    g.columns = columns(p_.cols, g.keys);
    uint64_t best = ~uint64_t(0);
    for (unsigned id = 0; id < 8; ++id) {
      uint64_t bits = 0;
      for (unsigned w = 1; w <= 32; ++w) bits += uint64_t(g.widths[w]) * key_cost_bits(id, w);
      if (bits < best) {
        best = bits;
        g.layout = uint8_t(id);
      }
    }
    g.key_bytes = uint32_t((best + 7) / 8);
    key_writers_[gi] = BitWriter(out + offset, g.key_bytes);
    offset += g.key_bytes;
    cells_offset_[gi] = cells;
    memset(cells_ + cells, g.buckets - 1, size_t(p_.rows) * g.columns);  // furthest from zero
    cells += uint64_t(p_.rows) * g.columns;
    sketch_bound += entropy::huffman_table_bytes(g.buckets) +
                    (uint64_t(p_.rows) * g.columns * entropy::kHuffmanMaxBits + 7) / 8;
    g.prev_key = -1;
  }
  if (offset + sketch_bound > cap) return Status::kBufferTooSmall;
  for (unsigned gi = 0; gi < group_count_; ++gi) {
    for (unsigned r = 0; r < p_.rows; ++r) row_keys_[gi][r] = row_key(seed_, gi, r);
  }
  return Status::kOk;
}

void Encoder::insert(uint32_t key, float v) {
  const unsigned b = bucket(v);
  const unsigned gi = group_of(b);
  Group& g = groups_[gi];
  const uint8_t rank = rank_in_group(b);
  uint8_t* cells = cells_ + cells_offset_[gi];
  for (unsigned r = 0; r < p_.rows; ++r) {
    uint8_t& cell = cells[size_t(r) * g.columns + column_of(row_keys_[gi][r], key, g.columns)];
    cell = rank < cell ? rank : cell;
  }
  const uint64_t delta = uint64_t(int64_t(key) - g.prev_key);
  g.prev_key = key;
  const unsigned m = layout_intervals(g.layout), ib = layout_interval_bits(g.layout);
  const unsigned t = (floor_log2(delta) + 1 + ib - 1) / ib;
  BitWriter& w = key_writers_[gi];
  if (layout_unary(g.layout)) {
    for (unsigned i = 1; i < t; ++i) w.put(1, 1);
    if (t < m) w.put(0, 1);
  } else {
    w.put(t - 1, floor_log2(m));
  }
  w.put(delta, t * ib);
}

Status Encoder::finish(size_t* region_bytes) {
  size_t offset = keys_offset_;
  for (unsigned gi = 0; gi < group_count_; ++gi) {
    const size_t used = key_writers_[gi].finish();
    if (key_writers_[gi].overflowed() || used != groups_[gi].key_bytes) return Status::kBufferTooSmall;
    offset += used;
  }
  // Sketch tables, Huffman-coded per group.
  for (unsigned gi = 0; gi < group_count_; ++gi) {
    Group& g = groups_[gi];
    const uint8_t* cells = cells_ + cells_offset_[gi];
    const size_t count = size_t(p_.rows) * g.columns;
    uint32_t freq[entropy::kHuffmanMaxSymbols] = {};
    for (size_t i = 0; i < count; ++i) freq[cells[i]]++;
    uint8_t lengths[entropy::kHuffmanMaxSymbols];
    entropy::huffman_lengths(freq, g.buckets, lengths);
    if (count == 0) continue;  // an empty group has no sketch (cannot happen: keys >= 1)
    entropy::HuffmanEncoder enc(lengths, g.buckets);
    BitWriter w(out_ + offset, cap_ - offset);
    enc.write_table(&w);
    for (size_t i = 0; i < count; ++i) enc.put(&w, cells[i]);
    const size_t used = w.finish();
    if (w.overflowed()) return Status::kBufferTooSmall;
    g.sketch_bytes = uint32_t(used);
    offset += used;
  }
  // Region header.
  uint8_t* p = out_;
  memcpy(p, &min_, 4);
  memcpy(p + 4, &max_, 4);
  store_le16(p + 8, uint16_t(split_count_));
  p += 10;
  for (unsigned i = 0; i < split_count_; ++i, p += 4) memcpy(p, &splits_[i], 4);
  store_le16(p, uint16_t(zero_));
  p[2] = uint8_t(group_count_);
  p += 3;
  for (unsigned gi = 0; gi < group_count_; ++gi, p += kGroupHeaderBytes) {
    const Group& g = groups_[gi];
    store_le16(p, g.first);
    store_le16(p + 2, g.buckets);
    store_le32(p + 4, g.keys);
    store_le32(p + 8, g.columns);
    p[12] = g.layout;
    store_le32(p + 13, g.key_bytes);
    store_le32(p + 17, g.sketch_bytes);
  }
  *region_bytes = offset;
  return Status::kOk;
}

Status parse(const Params& p, uint32_t n, uint32_t nnz, const uint8_t* region, size_t bytes, Layout* out) {
  Layout l;
  if (bytes < 13) return Status::kCorruptPayload;
  memcpy(&l.min, region, 4);
  memcpy(&l.max, region + 4, 4);
  if (!(l.min - l.min == 0.0f) || !(l.max - l.max == 0.0f) || l.min > l.max) return Status::kCorruptPayload;
  l.split_count = load_le16(region + 8);
  if (l.split_count + 1u > p.bins) return Status::kCorruptPayload;
  size_t header = region_header_bytes(l.split_count, 0);
  if (bytes < header) return Status::kCorruptPayload;
  l.splits = region + 10;
  float prev = l.min;
  for (unsigned i = 0; i < l.split_count; ++i) {
    float s;
    memcpy(&s, l.splits + 4 * i, 4);
    if (!(s - s == 0.0f) || s < prev || (i > 0 && !(s > prev)) || s > l.max) return Status::kCorruptPayload;
    prev = s;
  }
  const uint8_t* q = region + 10 + 4 * size_t(l.split_count);
  l.zero = load_le16(q);
  l.group_count = q[2];
  const unsigned buckets = l.split_count + 1;
  if (l.zero > buckets || l.group_count > p.groups || (nnz > 0) != (l.group_count > 0)) {
    return Status::kCorruptPayload;
  }
  header = region_header_bytes(l.split_count, l.group_count);
  if (bytes < header) return Status::kCorruptPayload;
  q += 3;
  uint64_t keys = 0, key_bytes = 0, sketch_bytes = 0;
  unsigned next_bucket = 0;
  for (unsigned gi = 0; gi < l.group_count; ++gi, q += kGroupHeaderBytes) {
    Group& g = l.groups[gi];
    g.first = load_le16(q);
    g.buckets = load_le16(q + 2);
    g.keys = load_le32(q + 4);
    g.columns = load_le32(q + 8);
    g.layout = q[12];
    g.key_bytes = load_le32(q + 13);
    g.sketch_bytes = load_le32(q + 17);
    g.negative = g.first < l.zero;
    // Groups are in bucket order, disjoint, within range, and never straddle zero.
    if (g.buckets == 0 || g.first < next_bucket || uint32_t(g.first) + g.buckets > buckets ||
        (g.negative && g.first + g.buckets > l.zero) || g.keys == 0 || g.keys > nnz ||
        g.columns != columns(p.cols, g.keys) || g.layout > 7 || g.key_bytes == 0 || g.sketch_bytes == 0) {
      return Status::kCorruptPayload;
    }
    next_bucket = g.first + g.buckets;
    keys += g.keys;
    key_bytes += g.key_bytes;
    sketch_bytes += g.sketch_bytes;
  }
  (void)n;
  if (keys != nnz) return Status::kCorruptPayload;
  for (unsigned b = 0; b < buckets; ++b) l.reps[b] = bucket_representative(l, b);
  if (header + key_bytes + sketch_bytes != bytes) return Status::kSizeMismatch;
  const uint8_t* data = region + header;
  for (unsigned gi = 0; gi < l.group_count; ++gi) {
    l.key_data[gi] = data;
    data += l.groups[gi].key_bytes;
  }
  for (unsigned gi = 0; gi < l.group_count; ++gi) {
    l.sketch_data[gi] = data;
    data += l.groups[gi].sketch_bytes;
  }
  *out = l;
  return Status::kOk;
}

Status decode_sketches(const Params& p, const Layout& l, uint8_t* cells, uint32_t* table) {
  entropy::HuffmanDecoder dec(table);
  for (unsigned gi = 0; gi < l.group_count; ++gi) {
    const Group& g = l.groups[gi];
    BitReader r(l.sketch_data[gi], g.sketch_bytes);
    EDGEFL_RETURN_IF_ERROR(dec.read_table(&r, g.buckets));
    const size_t count = size_t(p.rows) * g.columns;
    if (r.failed()) return Status::kCorruptPayload;
    size_t bit = r.bit_position();
    EDGEFL_RETURN_IF_ERROR(dec.decode(l.sketch_data[gi], g.sketch_bytes, &bit, cells, count));
    if ((bit + 7) / 8 != g.sketch_bytes) return Status::kSizeMismatch;
    cells += count;
  }
  return Status::kOk;
}

float bucket_representative(const Layout& l, unsigned b) {
  float lower = l.min, upper = l.max;
  if (b > 0) memcpy(&lower, l.splits + 4 * size_t(b - 1), 4);
  if (b < l.split_count) memcpy(&upper, l.splits + 4 * size_t(b), 4);
  return midpoint(lower, upper);
}

}  // namespace skc
}  // namespace edgefl
