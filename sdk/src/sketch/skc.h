// Internal: SKCompress (Jiang, Fu, Yang, Shao, Cui, "SKCompress: compressing sparse and
// nonuniform gradient in distributed machine learning", VLDB Journal 2020; successor of
// SketchML, SIGMOD 2018), as published, for a sparse update (ascending keys, values):
//
//  1. values -> classic mergeable quantile sketch (k = 128) -> `bins` - 1 equi-depth splits,
//     duplicates removed; each bucket is represented by the midpoint of its splits (end buckets:
//     [min, split0] and [split_last, max]). Zero is made a split when values of both signs
//     occur, so that no bucket holds both signs.
//  2. buckets -> `groups` groups (8) of contiguous buckets, zero always a group edge.
//  3. per group, a MinMaxSketch of `rows` (2) rows x ceil(`cols` (0.3) x group keys) columns of
//     bucket ranks (rank = distance from the zero end of the group): insert keeps the cell
//     closer to zero, query returns the furthest of the rows' cells, so a decoded bucket is never
//     further from zero than the true one and a sign never flips. Row hashes are seeded.
//  4. each group's sketch table Huffman-coded (entropy/huffman.h: 4 bits per symbol of table).
//  5. each group's keys delta-coded with the adaptive prefix: deltas split into m in
//     {2, 4, 8, 16} intervals of 32/m bits, the interval count sent as a fixed-width
//     (log2 m bits) or unary flag; the cheapest of the 8 layouts is chosen per group.
//
// Value region layout (little-endian):
//   f32 min, f32 max, u16 S (splits), S x f32 splits (strictly increasing), u16 zero (number of
//   buckets below zero), u8 G, then G x { u16 first bucket, u16 buckets, u32 keys, u32 columns,
//   u8 key layout, u32 key bytes, u32 sketch bytes }, then the G key streams, then the G sketch
//   streams (Huffman table, then rows x columns codes).
//
// Decoding needs caller memory (decode_workspace_bytes()) for the decoded sketch tables.
#ifndef EDGEFL_SRC_SKETCH_SKC_H_
#define EDGEFL_SRC_SKETCH_SKC_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/bitio.h"
#include "core/rng.h"
#include "edgefl/codec.h"
#include "edgefl/status.h"
#include "entropy/huffman.h"
#include "sketch/quantile_sketch.h"

namespace edgefl {
namespace skc {

struct Params {
  uint16_t bins = 256;        // 2..256 buckets
  uint8_t groups = 8;         // 1..16 (2..16 when values of both signs occur)
  uint8_t rows = 2;           // 1..4 MinMaxSketch rows
  float cols = 0.3f;          // columns per key of a group, in (0, 4]
  uint16_t quantile_k = 128;  // 16..1024, even
};

constexpr unsigned kMaxGroups = 16;

// The header fields of an skc encoding (format.h): block = buckets, levels = rows | groups << 4,
// param = columns per key. quantile_k is the encoder's alone and is not sent.
inline uint16_t header_levels(const Params& p) {
  return uint16_t(p.rows | (p.groups << 4));
}
inline Params params_from_header(const EncodedInfo& h) {
  Params p;
  p.bins = uint16_t(h.block);
  p.groups = uint8_t(h.levels >> 4);
  p.rows = uint8_t(h.levels & 15u);
  p.cols = h.param;
  return p;
}
constexpr unsigned kMaxRows = 4;
constexpr size_t kGroupHeaderBytes = 21;

// ceil(ratio * keys), at least 1 for a non-empty group; the same float arithmetic everywhere.
inline uint32_t columns(float ratio, uint32_t keys) {
  if (keys == 0) return 0;
  const double t = double(ratio) * double(keys);
  uint32_t c = uint32_t(t);
  if (double(c) < t) ++c;
  return c < 1 ? 1 : c;
}

// Writes the region of an update with no key (13 bytes) and returns its size.
size_t write_empty_region(uint8_t* out);

// Largest value region for nnz keys.
uint64_t region_bound(const Params& p, uint64_t nnz);
// Encoder workspace (bytes, before alignment slack) for at most nnz keys.
size_t encode_workspace_bytes(const Params& p, uint64_t nnz);
// Decoder workspace (bytes) for an encoding of nnz keys under p (rows, cols, groups).
size_t decode_workspace_bytes(const Params& p, uint64_t nnz);

// Monotone map of a float to an unsigned key (total order of finite floats; -0 maps as +0):
// positive b -> b | 2^31, negative b -> -b (mod 2^32), which sends -0 (0x80000000) onto +0.
// Branch-free: the sign of a gradient value is a coin flip, so a branch on it mispredicts.
inline uint32_t sortable_key(float v) {
  uint32_t b;
  memcpy(&b, &v, 4);
  const uint32_t negative = 0u - (b >> 31);  // all ones for a negative v
  return (b ^ (negative | 0x80000000u)) - negative;
}

// Row hash of a key into `columns` columns.
inline uint32_t column_of(uint32_t row_key, uint32_t key, uint32_t columns) {
  return uint32_t((uint64_t(hash32(row_key, key)) * columns) >> 32);
}
inline uint32_t row_key(uint64_t seed, unsigned group, unsigned row) {
  return derive_key(seed, 0x534B0000u | (group << 4) | row);  // "SK"
}

struct Group {
  uint16_t first = 0;  // first bucket
  uint16_t buckets = 0;
  bool negative = false;
  uint32_t keys = 0;
  uint32_t columns = 0;
  uint8_t layout = 0;
  uint32_t key_bytes = 0;
  uint32_t sketch_bytes = 0;
  uint32_t widths[33] = {};  // histogram of delta bit widths
  int64_t prev_key = -1;
};

// Key layout `id` (0..7): m = 2 << (id >> 1) intervals of 32/m bits; id & 1: unary flag.
inline unsigned layout_intervals(unsigned id) {
  return 2u << (id >> 1);
}
inline unsigned layout_interval_bits(unsigned id) {
  return 32u / layout_intervals(id);
}
inline bool layout_unary(unsigned id) {
  return (id & 1u) != 0;
}
inline uint64_t key_cost_bits(unsigned id, unsigned width) {
  const unsigned m = layout_intervals(id), b = layout_interval_bits(id);
  const unsigned t = (width + b - 1) / b;
  const unsigned flag = layout_unary(id) ? (t - 1) + (t < m ? 1 : 0) : floor_log2(m);
  return flag + uint64_t(t) * b;
}

// The encoder, driven in three passes over the sparse update (ascending keys):
//   observe(v) for every value; plan(); count(key, v) for every pair; layout(out, cap);
//   insert(key, v) for every pair; finish() -> region bytes.
class Encoder {
 public:
  // `workspace` holds encode_workspace_bytes(p, max_nnz) bytes, 8-byte aligned.
  Encoder(const Params& p, uint64_t max_nnz, uint64_t seed, uint8_t* workspace);
  void observe(float v) { quantiles_.update(v); }
  void plan();
  void count(uint32_t key, float v);
  // Fails: kBufferTooSmall if the region would not fit in cap bytes.
  Status layout(uint8_t* out, size_t cap);
  void insert(uint32_t key, float v);
  Status finish(size_t* region_bytes);

  // Bucket of v (0..buckets-1): a 2^16-entry table on the high key bits, then a short fix-up.
  unsigned bucket(float v) const {
    const uint32_t key = sortable_key(v);
    unsigned b = lut_[key >> 16];
    // Branch-free past one split inside the key's 2^16 range (1/128 of a binade; split_keys_ ends
    // with sentinels above every finite key), then a loop for the rare denser ranges.
    b += split_keys_[b] <= key;
    while (split_keys_[b] <= key) ++b;
    return b;
  }
  unsigned bucket_count() const { return split_count_ + 1; }
  float representative(unsigned b) const { return reps_[b]; }
  unsigned zero_buckets() const { return zero_; }

 private:
  unsigned group_of(unsigned b) const { return group_of_bucket_[b]; }
  uint8_t rank_in_group(unsigned b) const {
    const Group& g = groups_[group_of(b)];
    return uint8_t(g.negative ? g.first + g.buckets - 1 - b : b - g.first);
  }

  Params p_;
  uint64_t seed_;
  sketch::QuantileSketch quantiles_;
  uint64_t* quantile_scratch_;
  uint8_t* lut_;    // 65536 entries
  uint8_t* cells_;  // rows x columns per group, concatenated
  float splits_[256];
  uint32_t split_keys_[256 + 4];  // + sentinels 0xFFFFFFFF
  float reps_[256];
  unsigned split_count_ = 0;
  unsigned zero_ = 0;
  float min_ = 0, max_ = 0;
  unsigned group_count_ = 0;
  uint8_t group_of_bucket_[256];
  Group groups_[kMaxGroups];
  uint32_t row_keys_[kMaxGroups][kMaxRows];
  uint8_t* out_ = nullptr;
  size_t cap_ = 0;
  size_t keys_offset_ = 0;
  uint64_t cells_offset_[kMaxGroups];
  BitWriter key_writers_[kMaxGroups];
};

// ---- decoding -----------------------------------------------------------------------------

struct Layout {
  float min = 0, max = 0;
  unsigned split_count = 0;
  const uint8_t* splits = nullptr;  // S x f32
  float reps[256];                  // bucket representatives (midpoints)
  unsigned zero = 0;
  unsigned group_count = 0;
  Group groups[kMaxGroups];
  const uint8_t* key_data[kMaxGroups];
  const uint8_t* sketch_data[kMaxGroups];
};

// Parses and checks the region header of an encoding of n coordinates and nnz keys.
Status parse(const Params& p, uint32_t n, uint32_t nnz, const uint8_t* region, size_t bytes, Layout* out);
// Decodes every group's sketch table into `cells` (decode_workspace_bytes()) and checks the
// codes; `table` holds entropy::huffman_table_entries() entries.
Status decode_sketches(const Params& p, const Layout& l, uint8_t* cells, uint32_t* table);
float bucket_representative(const Layout& l, unsigned b);

class KeyReader {
 public:
  KeyReader() : r_(nullptr, 0) {}
  void init(const uint8_t* data, size_t bytes, unsigned layout, uint32_t keys) {
    r_ = BitReader(data, bytes);
    layout_ = layout;
    left_ = keys;
  }
  bool done() const { return left_ == 0; }
  // Next key; false on a corrupt delta (zero, or past n - 1) or a read past the end.
  bool next(uint32_t n, uint32_t* key) {
    const unsigned m = layout_intervals(layout_), b = layout_interval_bits(layout_);
    unsigned t;
    if (layout_unary(layout_)) {
      t = 1;
      while (t < m && r_.get(1)) ++t;
    } else {
      t = unsigned(r_.get(floor_log2(m))) + 1;
    }
    const uint64_t delta = r_.get(t * b);  // t * b <= 32
    if (r_.failed() || delta == 0) return false;
    const int64_t k = prev_ + int64_t(delta);
    if (k >= int64_t(n)) return false;
    prev_ = k;
    --left_;
    *key = uint32_t(k);
    return true;
  }
  size_t bytes_used() const { return (r_.bit_position() + 7) / 8; }

 private:
  BitReader r_;
  unsigned layout_ = 0;
  uint32_t left_ = 0;
  int64_t prev_ = -1;
};

// Visits every (key, decoded value) in ascending key order, checking that groups are disjoint
// and that every key stream ends in its last byte. With emit = false it only validates.
template <typename Sink>
Status visit(const Params& p, const Layout& l, uint32_t n, uint64_t seed, const uint8_t* cells, bool emit,
             Sink&& sink) {
  KeyReader readers[kMaxGroups];
  uint32_t head[kMaxGroups];
  bool live[kMaxGroups];
  uint32_t row_keys[kMaxGroups][kMaxRows];
  const uint8_t* group_cells[kMaxGroups];
  const uint8_t* c = cells;
  for (unsigned g = 0; g < l.group_count; ++g) {
    const Group& gr = l.groups[g];
    readers[g].init(l.key_data[g], gr.key_bytes, gr.layout, gr.keys);
    live[g] = !readers[g].done();
    if (live[g] && !readers[g].next(n, &head[g])) return Status::kCorruptPayload;
    for (unsigned r = 0; r < p.rows; ++r) row_keys[g][r] = row_key(seed, g, r);
    group_cells[g] = c;
    c += size_t(p.rows) * gr.columns;
  }
  int64_t last = -1;
  for (;;) {
    unsigned best = kMaxGroups;
    for (unsigned g = 0; g < l.group_count; ++g) {
      if (live[g] && (best == kMaxGroups || head[g] < head[best])) best = g;
    }
    if (best == kMaxGroups) break;
    const uint32_t key = head[best];
    if (int64_t(key) <= last) return Status::kIndicesNotSorted;  // a key in two groups
    last = key;
    if (emit) {
      const Group& gr = l.groups[best];
      unsigned rank = 0;
      for (unsigned r = 0; r < p.rows; ++r) {
        const unsigned cell =
            group_cells[best][size_t(r) * gr.columns + column_of(row_keys[best][r], key, gr.columns)];
        rank = cell > rank ? cell : rank;
      }
      const unsigned b = gr.negative ? gr.first + gr.buckets - 1 - rank : gr.first + rank;
      sink(size_t(key), l.reps[b]);
    }
    if (readers[best].done()) {
      live[best] = false;
    } else if (!readers[best].next(n, &head[best])) {
      return Status::kCorruptPayload;
    }
  }
  for (unsigned g = 0; g < l.group_count; ++g) {
    if (readers[g].bytes_used() != l.groups[g].key_bytes) return Status::kSizeMismatch;
  }
  return Status::kOk;
}

}  // namespace skc
}  // namespace edgefl

#endif  // EDGEFL_SRC_SKETCH_SKC_H_
