// Encode, decode, decode-and-add and add of encoded updates (API in edgefl/codec.h, byte layout
// in format.h).
#include "edgefl/codec.h"

#include <string.h>

#include <new>

#include "codec/codec_internal.h"
#include "codec/count_sketch_codec.h"
#include "codec/format.h"
#include "codec/index_coding.h"
#include "codec/kernels.h"
#include "codec/select.h"
#include "codec/skc_codec.h"
#include "codec/values.h"
#include "core/bitio.h"
#include "core/rng.h"

namespace edgefl {
namespace codec_internal {

values::Params value_params(const CodecSpec& s, uint64_t seed) {
  values::Params p;
  p.kind = s.values;
  p.bits = s.bits;
  p.block = s.block;
  p.stochastic = s.stochastic;
  p.shared = s.values == ValueCoderKind::kUniform && s.shared_step > 0.0f;
  p.step = s.shared_step;
  if (s.values == ValueCoderKind::kQsgd) {
    p.levels = s.levels;
    p.bits = uint8_t(1 + ceil_log2(uint64_t(s.levels) + 1));
  }
  if (p.shared || s.values == ValueCoderKind::kFp32 || s.values == ValueCoderKind::kFp16 ||
      s.values == ValueCoderKind::kBf16) {
    p.block = 0;
  }
  p.round_key = derive_key(seed, kPurposeRounding);
  p.sign_key = derive_key(seed, kPurposeHadamardSigns);
  p.signmag = s.sign_magnitude;
  return p;
}

values::Params params_from_header(const EncodedInfo& h) {
  values::Params p;
  p.kind = h.values;
  p.bits = h.bits;
  p.block = h.block;
  p.levels = h.levels;
  p.stochastic = h.stochastic;
  p.shared = h.shared_scale;
  p.step = h.param;
  p.sign_key = derive_key(h.seed, kPurposeHadamardSigns);
  p.entropy = h.entropy_coded;
  p.rans_lanes = uint8_t(h.rans_wide ? entropy::kRansWideLanes : entropy::kRansLanes);
  p.signmag = h.sign_magnitude;
  return p;
}

}  // namespace codec_internal

using namespace codec_internal;

namespace {

// Sampled top-k (kTopKApprox) finds the same set as the exact select with two passes instead of
// four: a seeded stratified sample brackets the k-th magnitude from below, one pass collects the
// candidates above the bracket, and the exact select runs on the candidates only. When the
// bracket misses (fewer than k or more than the candidate capacity), or when k is too large for
// the capacity, it falls back to the exact radix select: the result is always exactly k.

// Coordinates sampled: about 512 expected hits, at least min(n, 1024), at most n / 40.
size_t sample_count(const CodecSpec& s, size_t n) {
  if (n == 0) return 0;
  const size_t k = target_k(s, n);
  size_t m = s.sample_fraction > 0.0 ? size_t(s.sample_fraction * double(n))
                                     : size_t((512.0 * double(n)) / double(k));
  const size_t most = n / 40 > 1024 ? n / 40 : 1024;
  m = m > most ? most : m;
  m = m < 1024 ? 1024 : m;
  return m > n ? n : m;
}

// Candidate capacity: 2.5k (the bracket aims at 1.5k), within n / 40 (with the sample, the
// workspace stays under 0.1x the update down to about n = 50k).
size_t candidate_capacity(size_t k, size_t n) {
  const size_t want = k * 5 / 2 > 1024 ? k * 5 / 2 : 1024;
  const size_t most = n / 40;
  return want > most ? most : want;
}

// Workspace layout (each part 64-byte aligned inside the caller's bytes).
struct WorkspaceLayout {
  size_t histogram = 0;  // bytes
  size_t sample = 0;
  size_t candidates = 0;
  size_t group = 0;
  size_t hadamard = 0;
  size_t sketch = 0;
  size_t entropy = 0;  // codes (one byte each) and a stream buffer the size of the plain region
  size_t total() const {
    // Each part used starts 64-byte aligned: up to 63 bytes of slack per part.
    const size_t parts[] = {histogram, sample, candidates, group, hadamard, sketch, entropy};
    size_t total = 0;
    for (size_t part : parts) total += part ? part + 64 : 0;
    return total;
  }
};

WorkspaceLayout layout_for(const CodecSpec& s, size_t n) {
  WorkspaceLayout w;
  if (n == 0) return w;
#if EDGEFL_WITH_SKC
  if (is_skc(s)) w.sketch = skc_encode_workspace(s, n);
#endif
  if (s.values == ValueCoderKind::kHadamard) w.hadamard = size_t(s.block) * sizeof(float);
    // cs encodes in place in its output; the workspace is the unsketch scratch that decoding (and
    // so error feedback) needs: the histogram and one float per coordinate.
#if EDGEFL_WITH_COUNT_SKETCH
  if (is_count_sketch(s)) w.sketch = count_sketch_workspace(n);
#endif
  if (s.entropy_coded) {
    const size_t nnz = max_nnz(s, n);
    w.entropy = nnz + size_t(values::region_bytes(value_params(s, 0), nnz));
  }
  if (!is_sparse(s)) return w;
  if (s.sparsifier == SparsifierKind::kTopK || s.sparsifier == SparsifierKind::kTopKApprox) {
    w.histogram = select::kHistogramBins * sizeof(uint32_t);
  }
  if (s.sparsifier == SparsifierKind::kTopKApprox) {
    const size_t k = target_k(s, n);
    if (k <= candidate_capacity(k, n)) {
      w.sample = sample_count(s, n) * sizeof(float);
      w.candidates = (candidate_capacity(k, n) + 1) * sizeof(float);  // + one scratch slot
    }
  }
  if (is_skc(s)) return w;
  const values::Params p = value_params(s, 0);
  const size_t group = values::group_size(p);
  const size_t nnz = max_nnz(s, n);
  w.group = (group < nnz ? group : nnz) * sizeof(float);
  return w;
}

size_t index_bound(const CodecSpec& s, size_t n, size_t nnz) {
  switch (s.index_coding) {
    case IndexCoding::kEliasFano:
    case IndexCoding::kAuto: return size_t(index_coding::ef_bytes(n, nnz));
    case IndexCoding::kRice: return size_t(index_coding::rice_bound_bytes(n, nnz));
    case IndexCoding::kBlockRice: return size_t(index_coding::block_rice_bound_bytes(n, nnz));
    default: return 0;
  }
}

// Streams selected values into groups and encodes each group as it fills.
class GroupSink {
 public:
  // check_sent: refuse (kValueOutOfRange, and encode nothing more) a group whose values, as
  // scaled, are NaN, infinite or beyond 3e38; for inputs not checked before (random-k's).
  GroupSink(const values::Params& p, float* buffer, uint32_t group, uint8_t* out, float* scratch, float scale,
            bool check_sent)
      : p_(p),
        buffer_(buffer),
        group_(group),
        out_(out),
        scratch_(scratch),
        scale_(scale),
        check_sent_(check_sent) {}
  void push(float v) {
    buffer_[fill_++] = v * scale_;
    if (fill_ == group_) flush();
  }
  Status finish() {
    if (fill_ > 0) flush();
    return status_;
  }

 private:
  void flush() {
    if (check_sent_ && status_ == Status::kOk && kernels().max_abs_bits(buffer_, fill_) > float_bits(3.0e38f))
      status_ = Status::kValueOutOfRange;  // no NaN or Inf reaches the value coders
    const Status s =
        status_ == Status::kOk ? values::encode_group(p_, buffer_, fill_, first_, out_, scratch_) : status_;
    if (s != Status::kOk && status_ == Status::kOk) status_ = s;
    out_ += values::is_blocked(p_) ? values::group_bytes(p_, fill_) : (uint64_t(fill_) * p_.bits + 7) / 8;
    first_ += fill_;
    fill_ = 0;
  }
  const values::Params& p_;
  float* buffer_;
  uint32_t group_;
  uint8_t* out_;
  float* scratch_;
  float scale_;
  bool check_sent_;
  uint32_t fill_ = 0;
  uint32_t first_ = 0;
  Status status_ = Status::kOk;
};

Status encode_dense(const values::Params& p, const float* x, size_t n, uint8_t* out, float* scratch) {
  const uint32_t group = values::group_size(p);
  if (!values::is_blocked(p)) {
    // One call: the kernels stream the whole vector.
    return values::encode_group(p, x, uint32_t(n), 0, out, scratch);
  }
  for (size_t first = 0; first < n; first += group) {
    const uint32_t count = uint32_t(n - first < group ? n - first : group);
    EDGEFL_RETURN_IF_ERROR(values::encode_group(p, x + first, count, uint32_t(first), out, scratch));
    out += values::group_bytes(p, count);
  }
  return Status::kOk;
}

// How far ahead of a scatter its destination is prefetched (pairs).
constexpr uint32_t kPrefetchAhead = 16;
// Whether a batch of pairs' indices, first to last, rise by at most a 64-byte line of floats per
// pair (the ascending indices of top-k at about 6% density or more): their stores walk the output
// forward, which the hardware prefetcher follows, so a scatter's own prefetch would only cost a
// load slot. Other batches (random-k's scattered indices, sparser sets) are fetched ahead.
inline bool walks_forward(const uint32_t* index, uint32_t count) {
  constexpr uint64_t kSpanPerPair = 16;
  return count != 0 && index[count - 1] >= index[0] && index[count - 1] - index[0] <= kSpanPerPair * count;
}

// Indices read at a time by the validating and decoding loops (1 KiB of stack).
constexpr uint32_t kIndexChunk = 256;

// Top-k and threshold encodings (not the sketches, which decode through their own tables).
[[maybe_unused]] bool has_coded_indices(const EncodedInfo& h) {
  return h.sparsifier != SparsifierKind::kNone && h.sparsifier != SparsifierKind::kRandomK &&
         h.values != ValueCoderKind::kSkCompress && h.values != ValueCoderKind::kCountSketch &&
         (h.index_coding == IndexCoding::kEliasFano || h.index_coding == IndexCoding::kRice ||
          h.index_coding == IndexCoding::kBlockRice);
}

// The coded index stream of a top-k or threshold encoding, whichever its coding, behind one
// next(): the per-value loops that read indices one at a time (the one-by-one check, the decoders
// of value coders without runs, every decoder of builds for size) exist once, not once per coding.
class IndexStream {
 public:
  IndexStream(const EncodedInfo& h, const uint8_t* data) : coding_(h.index_coding), bytes_(h.index_bytes) {
    if (coding_ == IndexCoding::kEliasFano) {
      new (&ef_) index_coding::EliasFanoReader(h.n, h.nnz, data);
    } else if (coding_ == IndexCoding::kRice) {
      new (&rice_) index_coding::RiceReader(h.n, h.nnz, data, h.index_bytes);
    } else {
      new (&block_) index_coding::BlockRiceReader(h.n, h.nnz, data, h.index_bytes);
    }
  }
  EDGEFL_SIZE_NOINLINE uint64_t next() {
    return coding_ == IndexCoding::kEliasFano ? ef_.next()
           : coding_ == IndexCoding::kRice    ? rice_.next()
                                              : block_.next();
  }
  bool failed() const {
    return coding_ == IndexCoding::kEliasFano ? ef_.failed()
           : coding_ == IndexCoding::kRice    ? rice_.failed()
                                              : block_.failed();
  }
  // After the last index: the stream ends in its region's last byte (Elias-Fano's size is fixed).
  bool finished_exactly() const {
    return coding_ == IndexCoding::kEliasFano ? true
           : coding_ == IndexCoding::kRice    ? (rice_.bit_position() + 7) / 8 == bytes_
                                              : block_.finished_exactly();
  }

 private:
  IndexCoding coding_;
  size_t bytes_;
  union {
    index_coding::EliasFanoReader ef_;
    index_coding::RiceReader rice_;
    index_coding::BlockRiceReader block_;
  };
};

// Checks the index stream of a verified encoding: nnz strictly increasing indices below n,
// and no read past the region; index by index, so that the first fault found names the error.
// With `indices` (room for nnz), the checked indices are kept there.
Status validate_indices_one_by_one(const EncodedInfo& h, const uint8_t* data, uint32_t* indices = nullptr) {
  uint64_t prev = 0;
  bool first = true;
  uint32_t kept = 0;
  auto check = [&](uint64_t idx) -> Status {
    if (idx >= h.n) return Status::kIndexOutOfRange;
    if (!first && idx <= prev) return Status::kIndicesNotSorted;
    first = false;
    prev = idx;
    if (indices != nullptr) indices[kept++] = uint32_t(idx);
    return Status::kOk;
  };
  if (!has_coded_indices(h)) return Status::kOk;
  IndexStream r(h, data);
  for (uint32_t j = 0; j < h.nnz; ++j) {
    const uint64_t idx = r.next();
    if (r.failed()) return Status::kCorruptPayload;
    EDGEFL_RETURN_IF_ERROR(check(idx));
  }
  if (r.failed()) return Status::kCorruptPayload;  // a malformed region with no index
  // The stream must end within its last byte: no trailing bytes to smuggle data in.
  if (!r.finished_exactly()) return Status::kSizeMismatch;
  return Status::kOk;
}

#if defined(__OPTIMIZE_SIZE__)
Status validate_indices(const EncodedInfo& h, const uint8_t* data, uint32_t* indices) {
  (void)indices;  // never given: decode_fast_workspace_size() adds nothing
  return validate_indices_one_by_one(h, data);
}
#else
// validate_indices_one_by_one's answer, a chunk of indices at a time: a reader fault, an index
// out of range or out of order anywhere sends the whole check to the one-by-one path, which
// finds the first fault and names it. With `indices` (room for nnz), they are kept there.
Status validate_indices(const EncodedInfo& h, const uint8_t* data, uint32_t* indices) {
  if (!has_coded_indices(h)) return Status::kOk;
  auto check_all = [&](auto& reader) {
    uint32_t chunk[kIndexChunk];
    uint64_t next_allowed = 0;  // the previous index + 1
    bool bad = false;
    for (uint32_t done = 0; done < h.nnz && !bad; done += kIndexChunk) {
      const uint32_t count = h.nnz - done < kIndexChunk ? h.nnz - done : kIndexChunk;
      uint32_t* const index = indices != nullptr ? indices + done : chunk;
      reader.next_many(index, count);
      bool unordered = index[0] < next_allowed;
      for (uint32_t j = 1; j < count; ++j) unordered |= index[j] <= index[j - 1];
      next_allowed = uint64_t(index[count - 1]) + 1;
      bad = reader.failed() || unordered || next_allowed > h.n;
    }
    return !bad;
  };
  bool ok;
  if (h.index_coding == IndexCoding::kEliasFano) {
    index_coding::EliasFanoReader r(h.n, h.nnz, data);
    ok = check_all(r);
  } else if (h.index_coding == IndexCoding::kBlockRice) {
    index_coding::BlockRiceReader r(h.n, h.nnz, data, h.index_bytes);
    ok = check_all(r) && r.finished_exactly();
  } else {
    index_coding::RiceReader r(h.n, h.nnz, data, h.index_bytes);
    ok = check_all(r) && (r.bit_position() + 7) / 8 == h.index_bytes;
  }
  // The one-by-one path names the fault; should it find none, it also refills `indices`, so that
  // what decoding trusts never depends on the chunked readers agreeing with it.
  return ok ? Status::kOk : validate_indices_one_by_one(h, data, indices);
}
#endif

// Where decode_with may keep an encoding's nnz decoded indices: the 4-byte aligned start of
// `workspace` when it holds them (decode_fast_workspace_size()), else null.
uint32_t* index_workspace(const EncodedInfo& h, Span<uint8_t> workspace) {
#if defined(__OPTIMIZE_SIZE__)
  (void)h;
  (void)workspace;
  return nullptr;
#else
  if (!has_coded_indices(h) || workspace.data() == nullptr) return nullptr;
  const uintptr_t at = reinterpret_cast<uintptr_t>(workspace.data());
  const size_t skip = size_t((4 - at % 4) % 4);
  if (workspace.size() < skip || (workspace.size() - skip) / 4 < h.nnz) return nullptr;
  return reinterpret_cast<uint32_t*>(workspace.data() + skip);
#endif
}

// Where decode_with may keep the nnz decoded values of a rANS-coded value region, after the
// indices in `workspace` (decode_fast_workspace_size()), else null: the stream is then decoded
// once, checked and kept, instead of once to check it and once to apply it.
#if !defined(__OPTIMIZE_SIZE__)
float* entropy_value_workspace(const EncodedInfo& h, Span<uint8_t> workspace, uint32_t* indices) {
  if (indices == nullptr || !h.entropy_coded) return nullptr;
  const size_t used = size_t(reinterpret_cast<uint8_t*>(indices) - workspace.data()) + size_t(h.nnz) * 4;
  if ((workspace.size() - used) / 4 < h.nnz) return nullptr;
  return reinterpret_cast<float*>(indices + h.nnz);
}
#endif

// Verifies everything (header, checksum, indices, values), then calls sink(index, value) for
// every carried coordinate in ascending index order.
// Any dimension (verify()).
constexpr size_t kAnyDimension = ~size_t{0};

template <typename Sink>
Status decode_with(Span<const uint8_t> bytes, size_t expected_n, Span<uint8_t> workspace, Sink&& sink,
                   EncodedInfo* info = nullptr) {
  EncodedInfo h;
  EDGEFL_RETURN_IF_ERROR(inspect(bytes, &h));
  if (expected_n != kAnyDimension && h.n != expected_n) return Status::kDimensionMismatch;
  if (info != nullptr) *info = h;
#if EDGEFL_WITH_SKC
  if (h.values == ValueCoderKind::kSkCompress) {
    return decode_skc(h, bytes.data() + h.header_bytes, workspace, sink);
  }
#endif
#if EDGEFL_WITH_COUNT_SKETCH
  if (h.values == ValueCoderKind::kCountSketch) {
    return decode_count_sketch(h, bytes.data() + h.header_bytes, workspace, sink);
  }
#endif
  const uint8_t* index_data = bytes.data() + h.header_bytes;
  const uint8_t* value_data = index_data + h.index_bytes;
  uint32_t* const decoded_indices = index_workspace(h, workspace);
  EDGEFL_RETURN_IF_ERROR(validate_indices(h, index_data, decoded_indices));
  const values::Params p = params_from_header(h);
  if (p.entropy) {
#if !defined(__OPTIMIZE_SIZE__)
    if (float* const decoded_values = entropy_value_workspace(h, workspace, decoded_indices)) {
      EDGEFL_RETURN_IF_ERROR(
          values::decode_entropy_region_checked(p, value_data, h.value_bytes, h.nnz, decoded_values));
      sink.begin(false);
      sink.pairs(decoded_indices, decoded_values, h.nnz);  // nnz >= 1: a rANS region holds values
      return Status::kOk;
    }
#endif
    EDGEFL_RETURN_IF_ERROR(values::validate_entropy_region(p, value_data, h.value_bytes, h.nnz));
  } else {
    EDGEFL_RETURN_IF_ERROR(values::validate_region(p, value_data, h.nnz));
  }
  // One visit of (position in the value sequence, value) for either region layout.
  auto for_each_value = [&](auto&& f) {
    if (p.entropy) {
      values::decode_entropy_region(p, value_data, h.value_bytes, h.nnz, f);
    } else {
      values::decode_region(p, value_data, h.nnz, f);
    }
  };
  sink.begin(h.sparsifier == SparsifierKind::kNone);  // dense: n values, one per coordinate
  switch (h.sparsifier) {
    case SparsifierKind::kNone:
      if (values::has_dense_runs(p) && !p.entropy) {
        // Whole runs to the sink, no per-value call: these loops vectorise.
        values::decode_dense_runs(p, value_data, h.nnz, [&](uint64_t first, const float* v, uint32_t count) {
          sink.run(size_t(first), v, count);
        });
#if !defined(__OPTIMIZE_SIZE__)
      } else if (p.entropy) {
        // rANS-coded values a chunk at a time, as runs (builds for size: value by value).
        values::EntropyRegionReader reader(p, value_data, h.value_bytes, h.nnz);
        float run[values::EntropyRegionReader::kChunk];
        size_t first = 0;
        for (uint32_t got = reader.next(run); got != 0; got = reader.next(run)) {
          sink.run(first, run, got);
          first += got;
        }
#endif
      } else {
        for_each_value([&](uint64_t pos, float v) { sink(size_t(pos), v); });
      }
      break;
    case SparsifierKind::kRandomK: {
      // Indices come from the seed, in the order the encoder visited them.
      // One visit for both streams (one copy of the value decoders).
      select::PermutedIndexStream permuted(h.n, h.seed);
      select::RandomIndexStream ascending(h.n, h.nnz, h.seed);
      const bool is_permuted = h.randk_permuted;
#if !defined(__OPTIMIZE_SIZE__)
      if (is_permuted && values::has_dense_runs(p) && !p.entropy) {
        // Runs of values (loops that vectorise), then their indices: the same pairs, in order.
        uint32_t index[values::kFloatChunk];
        values::decode_dense_runs(p, value_data, h.nnz, [&](uint64_t, const float* v, uint32_t count) {
          permuted.next_many(index, count);
          sink.pairs(index, v, count);
        });
        break;
      }
#endif
      for_each_value([&](uint64_t, float v) { sink(is_permuted ? permuted.next() : ascending.next(), v); });
      break;
    }
    default: {
#if !defined(__OPTIMIZE_SIZE__)
      // Runs of values, then their indices a chunk at a time: the same pairs, in order.
      // The indices of the value sequence's positions first .. first + count - 1.
      auto decode_pairs = [&](auto&& indices_of) {
        if (p.entropy) {
          values::EntropyRegionReader values_reader(p, value_data, h.value_bytes, h.nnz);
          float run[values::EntropyRegionReader::kChunk];
          size_t first = 0;
          for (uint32_t got = values_reader.next(run); got != 0; got = values_reader.next(run)) {
            sink.pairs(indices_of(first, got), run, got);
            first += got;
          }
        } else {
          values::decode_dense_runs(p, value_data, h.nnz,
                                    [&](uint64_t first, const float* v, uint32_t count) {
                                      sink.pairs(indices_of(size_t(first), count), v, count);
                                    });
        }
      };
      static_assert(kIndexChunk >= values::kFloatChunk && kIndexChunk >= values::EntropyRegionReader::kChunk,
                    "a run's indices fit in a chunk");
      uint32_t index[kIndexChunk];
      auto read_from = [&](auto& reader) {
        return [&](size_t, uint32_t count) -> const uint32_t* {
          reader.next_many(index, count);
          return index;
        };
      };
      if (decoded_indices != nullptr) {
        if (p.entropy || values::has_dense_runs(p)) {
          decode_pairs([&](size_t first, uint32_t) -> const uint32_t* { return decoded_indices + first; });
        } else {
          for_each_value([&](uint64_t position, float v) { sink(size_t(decoded_indices[position]), v); });
        }
        break;
      }
      if (p.entropy || values::has_dense_runs(p)) {
        if (h.index_coding == IndexCoding::kEliasFano) {
          index_coding::EliasFanoReader r(h.n, h.nnz, index_data);
          decode_pairs(read_from(r));
        } else if (h.index_coding == IndexCoding::kBlockRice) {
          index_coding::BlockRiceReader r(h.n, h.nnz, index_data, h.index_bytes);
          decode_pairs(read_from(r));
        } else {
          index_coding::RiceReader r(h.n, h.nnz, index_data, h.index_bytes);
          decode_pairs(read_from(r));
        }
        break;
      }
#endif
      IndexStream r(h, index_data);
      for_each_value([&](uint64_t, float v) { sink(size_t(r.next()), v); });
      break;
    }
  }
  return Status::kOk;
}

Status decode_batched(Span<const uint8_t> bytes, size_t expected_n, Span<uint8_t> workspace,
                      const DecodeConsumer& consumer, EncodedInfo* info = nullptr) {
  BatchSink sink(consumer);
  const Status status = decode_with(bytes, expected_n, workspace, sink, info);
  if (status == Status::kOk) sink.flush();
  return status;
}

// acc[i] += weight * value for every decoded (i, value); T is float or double (values widened
// first, so a double accumulator sums exactly what float values carry).
template <typename T>
Status decode_add_to(Span<const uint8_t> bytes, T weight, Span<T> accumulator, Span<uint8_t> workspace) {
  if (!(weight - weight == T(0))) return Status::kInvalidArgument;  // NaN or Inf
  if (accumulator.size() > 0 && accumulator.data() == nullptr) return Status::kInvalidArgument;
  struct Context {
    T* acc;
    T weight;
  } context{accumulator.data(), weight};
  const DecodeConsumer consumer = {
      &context,
      [](void*, bool) {},
      [](void* c, const uint32_t* index, const float* value, uint32_t count) {
        T* acc = static_cast<Context*>(c)->acc;
        const T w = static_cast<Context*>(c)->weight;
        uint32_t j = 0;
#if !defined(__OPTIMIZE_SIZE__)
        if (!walks_forward(index, count)) {
          for (; j + kPrefetchAhead < count; ++j) {  // as decode()'s scatter
            __builtin_prefetch(acc + index[j + kPrefetchAhead], 1);
            acc[index[j]] += w * T(value[j]);
          }
        }
#endif
        for (; j < count; ++j) acc[index[j]] += w * T(value[j]);
      },
      [](void* c, size_t first, const float* value, uint32_t count) {
        T* acc = static_cast<Context*>(c)->acc + first;
        const T w = static_cast<Context*>(c)->weight;
        for (uint32_t j = 0; j < count; ++j) acc[j] += w * T(value[j]);
      },
  };
  return decode_batched(bytes, accumulator.size(), workspace, consumer);
}

// The parts of an encode() workspace (layout_for), each 64-byte aligned; null when unused.
struct EncodeScratch {
  uint32_t* histogram = nullptr;
  float* sample = nullptr;
  float* candidates = nullptr;
  float* group = nullptr;
  float* hadamard = nullptr;
  uint8_t* sketch = nullptr;
  uint8_t* entropy = nullptr;
};

EncodeScratch carve_workspace(const WorkspaceLayout& layout, uint8_t* workspace) {
  uint8_t* cursor = layout.total() ? align64(workspace) : nullptr;
  auto take = [&](size_t bytes) -> uint8_t* {
    if (bytes == 0) return nullptr;
    uint8_t* p = cursor;
    cursor = align64(cursor + bytes);
    return p;
  };
  EncodeScratch s;
  s.histogram = reinterpret_cast<uint32_t*>(take(layout.histogram));
  s.sample = reinterpret_cast<float*>(take(layout.sample));
  s.candidates = reinterpret_cast<float*>(take(layout.candidates));
  s.group = reinterpret_cast<float*>(take(layout.group));
  s.hadamard = reinterpret_cast<float*>(take(layout.hadamard));
  s.sketch = take(layout.sketch);
  s.entropy = take(layout.entropy);
  return s;
}

// The header fields every encoding of `spec` starts with.
EncodedInfo header_for(const CodecSpec& spec, const values::Params& p, size_t n, uint64_t seed) {
  EncodedInfo h;
  h.version = format::kFormatVersion;
  h.sparsifier = spec.sparsifier;
  h.values = spec.values;
  h.n = uint32_t(n);
  h.bits = p.bits;
  h.block = p.block;
  h.levels = p.levels;
  h.stochastic = spec.values == ValueCoderKind::kQsgd || spec.values == ValueCoderKind::kTernGrad ||
                 (spec.values == ValueCoderKind::kUniform && spec.stochastic);
  h.shared_scale = p.shared;
  h.randk_unscaled = spec.randk_unscaled;
  h.randk_permuted = spec.sparsifier == SparsifierKind::kRandomK;
  h.sign_magnitude = spec.sign_magnitude;
  h.param = p.shared ? p.step : spec.sparsifier == SparsifierKind::kThreshold ? spec.threshold : 0.0f;
  h.seed = seed;
  h.contributions = 1;
  return h;
}

// Shared-scale codes must fit in +-(2^(bits-1)-1) steps: refuse (or, with `clip`, saturate)
// rather than clip silently. Random-k sends values scaled by n / k.
Status check_shared_scale_range(const CodecSpec& spec, const values::Params& p, const float* x, size_t n,
                                const Kernels& kern) {
  const uint32_t max_bits = kern.max_abs_bits(x, n);
  if (max_bits >= 0x7F800000u) return Status::kNonFiniteInput;
  // The same float operations as the encoder: (x * n/k) * (1 / step), then floor(t + u) with
  // u < 1, so t <= limit guarantees |code| <= limit.
  const float scale = spec.sparsifier == SparsifierKind::kRandomK && !spec.randk_unscaled
                          ? float(double(n) / double(target_k(spec, n)))
                          : 1.0f;
  const float limit = float((1u << (p.bits - 1)) - 1);
  if (!spec.clip && (bits_float(max_bits) * scale) * (1.0f / p.step) > limit) return Status::kValueOutOfRange;
  return Status::kOk;
}

// Approximate top-k: the threshold and ties of the k largest magnitudes, found among candidates
// bracketed by a seeded sample. False when the sample's bracket missed (then the caller selects
// over the whole vector).
Status approx_top_k(const CodecSpec& spec, const float* x, size_t n, size_t k, uint64_t seed,
                    const EncodeScratch& ws, select::Selection* sel, bool* bracketed) {
  *bracketed = false;
  if (ws.candidates == nullptr) return Status::kOk;
  // 1. A seeded, stratified sample (one draw per stride) gives a lower bracket: the magnitude
  //    of rank ~1.5k in the sample's scale.
  const size_t m = sample_count(spec, n);
  const size_t stride = n / m;
  SplitMix64 g(seed ^ (uint64_t(kPurposeSampling) << 56));
  for (size_t j = 0; j < m; ++j) ws.sample[j] = x[j * stride + g.below(uint32_t(stride))];
  size_t hits = size_t(double(m) * double(k) / double(n) + 0.5);
  hits = hits < 1 ? 1 : hits;
  const size_t rank = hits * 3 / 2 + 8 < m ? hits * 3 / 2 + 8 : m;
  uint32_t bracket;
  size_t unused_ties;
  EDGEFL_RETURN_IF_ERROR(select::radix_select(ws.sample, m, rank, ws.histogram, &bracket, &unused_ties));
  // 2. One pass collects the magnitudes at or above the bracket, in index order (branch-free:
  //    the store always happens, the count only on a hit).
  const size_t capacity = candidate_capacity(k, n);
  size_t count = 0;
  select::for_each_at_least(x, n, bracket, [&](size_t, uint32_t key) {
    ws.candidates[count < capacity ? count : capacity] = bits_float(key);  // last slot: scratch
    ++count;
  });
  // 3. The exact select among the candidates: every coordinate with |x| >= the k-th magnitude
  //    is a candidate, so threshold and ties are those of the whole vector.
  if (count < k || count > capacity) return Status::kOk;
  EDGEFL_RETURN_IF_ERROR(
      select::radix_select(ws.candidates, count, k, ws.histogram, &sel->threshold, &sel->ties));
  *bracketed = true;
  return Status::kOk;
}

// The set of coordinates a sparsifier keeps (for skc of a dense update: its non-zeros), and the
// scale its values are sent with (n / k for unbiased random-k, else 1). NaN and Inf are refused
// (exact top-k: by radix_select).
Status select_coordinates(const CodecSpec& spec, const float* x, size_t n, uint64_t seed,
                          const EncodeScratch& ws, const Kernels& kern, select::Selection* sel,
                          float* value_scale) {
  const size_t k = target_k(spec, n);
  *value_scale = 1.0f;
  if (n == 0) {
    sel->rule = select::Selection::Rule::kAll;
    sel->k = 0;
    return Status::kOk;
  }
  const bool exact_top_k =
      spec.sparsifier == SparsifierKind::kTopK || (spec.sparsifier == SparsifierKind::kTopKApprox && k == n);
  if (exact_top_k && k < n) {
    sel->rule = select::Selection::Rule::kAboveWithTies;
    sel->k = k;
    return select::radix_select(x, n, k, ws.histogram, &sel->threshold, &sel->ties);
  }
  if (spec.sparsifier == SparsifierKind::kRandomK) {
    // O(k): the coordinates are drawn from the seed; encode_sparse checks the ones it carries.
    sel->rule = select::Selection::Rule::kRandom;
    sel->k = k;
    sel->seed = seed;
    if (!spec.randk_unscaled) *value_scale = float(double(n) / double(k));
    return Status::kOk;
  }
  const uint32_t max_bits = kern.max_abs_bits(x, n);
  if (max_bits >= 0x7F800000u) return Status::kNonFiniteInput;
  if (exact_top_k) {  // k == n
    sel->rule = select::Selection::Rule::kAll;
    sel->k = k;
  } else if (spec.sparsifier == SparsifierKind::kNone) {  // skc of a dense update
    sel->rule = select::Selection::Rule::kAtLeast;
    sel->threshold = 1;  // abs_key(x) >= 1: x != 0
    sel->k = kern.count_abs_at_least(x, n, 1);
  } else if (spec.sparsifier == SparsifierKind::kTopKApprox) {
    sel->rule = select::Selection::Rule::kAboveWithTies;
    sel->k = k;
    bool bracketed = false;
    EDGEFL_RETURN_IF_ERROR(approx_top_k(spec, x, n, k, seed, ws, sel, &bracketed));
    if (!bracketed)
      EDGEFL_RETURN_IF_ERROR(select::radix_select(x, n, k, ws.histogram, &sel->threshold, &sel->ties));
  } else {  // threshold
    sel->rule = select::Selection::Rule::kAtLeast;
    sel->threshold = select::abs_key(spec.threshold);
    sel->k = kern.count_abs_at_least(x, n, sel->threshold);
  }
  return Status::kOk;
}

// The index region (Elias-Fano, Rice, block Rice or none) and the value region of the selected
// coordinates, in one pass through the group buffer. For Rice the values go after the worst-case
// index region first, then move down; block Rice (and `auto`) sizes its region in a pass before.
Status encode_sparse(const CodecSpec& spec, const values::Params& p, const select::Selection& sel,
                     const float* x, size_t n, const EncodeScratch& ws, float value_scale, uint8_t* payload,
                     EncodedInfo* h) {
  IndexCoding coding = spec.sparsifier == SparsifierKind::kRandomK ? IndexCoding::kNone : spec.index_coding;
  size_t index_bytes = 0;
  size_t block_rice_a_bytes = 0;
  if (coding == IndexCoding::kAuto || coding == IndexCoding::kBlockRice) {
    index_coding::BlockRiceWriter cost;  // measuring
    sel.for_each(x, n, [&](uint32_t i) { cost.add(i); });
    block_rice_a_bytes = size_t(cost.a_bytes());
    if (coding == IndexCoding::kAuto) {
      coding =
          cost.bytes() < index_coding::ef_bytes(n, sel.k) ? IndexCoding::kBlockRice : IndexCoding::kEliasFano;
    }
    index_bytes =
        coding == IndexCoding::kBlockRice ? size_t(cost.bytes()) : size_t(index_coding::ef_bytes(n, sel.k));
  } else if (coding == IndexCoding::kEliasFano) {
    index_bytes = size_t(index_coding::ef_bytes(n, sel.k));
  } else if (coding == IndexCoding::kRice) {
    index_bytes = size_t(index_coding::rice_bound_bytes(n, sel.k));  // exact size known at the end
  }
  h->index_coding = coding;
  h->version = format::format_version_for(coding);
  h->value_bytes = size_t(values::region_bytes(p, sel.k));
  uint8_t* index_out = payload;
  uint8_t* value_out = payload + index_bytes;
  GroupSink values_sink(p, ws.group, values::group_size(p), value_out, ws.hadamard, value_scale,
                        spec.sparsifier == SparsifierKind::kRandomK);
  // Indices and values in one pass, into a region whose size is exact.
  auto write_exact = [&](auto& w) -> Status {
    sel.for_each(x, n, [&](uint32_t i) {
      w.add(i);
      values_sink.push(x[i]);
    });
    w.finish();
    if (w.overflowed()) return Status::kBufferTooSmall;  // cannot happen: sizes are exact
    return values_sink.finish();
  };
  if (coding == IndexCoding::kEliasFano) {
    index_coding::EliasFanoWriter w(n, sel.k, index_out);
    EDGEFL_RETURN_IF_ERROR(write_exact(w));
  } else if (coding == IndexCoding::kBlockRice) {
    index_coding::BlockRiceWriter w(index_out, index_bytes, block_rice_a_bytes);
    EDGEFL_RETURN_IF_ERROR(write_exact(w));
  } else if (coding == IndexCoding::kRice) {
    index_coding::RiceWriter w(n, sel.k, index_out, index_bytes);
    sel.for_each(x, n, [&](uint32_t i) {
      w.add(i);
      values_sink.push(x[i]);
    });
    const size_t used = w.finish();
    if (w.overflowed()) return Status::kBufferTooSmall;
    EDGEFL_RETURN_IF_ERROR(values_sink.finish());  // the last group lands before the move
    // The values were written after the worst-case index region: close the gap.
    if (used < index_bytes) memmove(payload + used, value_out, h->value_bytes);
    index_bytes = used;
  } else {
    // Random-k reads only the coordinates it carries: the sink checks each group as sent (see
    // GroupSink). On a refusal, NaN or Inf among the carried inputs is kNonFiniteInput; else a
    // value that n / k took past 3e38 is kValueOutOfRange.
    sel.for_each(x, n, [&](uint32_t i) { values_sink.push(x[i]); });
    const Status sent = values_sink.finish();
    if (sent == Status::kValueOutOfRange) {
      bool nonfinite = false;
      select::Selection::for_each_random(
          n, sel.k, sel.seed, [&](uint32_t i) { nonfinite |= is_nonfinite_bits(float_bits(x[i])); });
      return nonfinite ? Status::kNonFiniteInput : sent;
    }
    EDGEFL_RETURN_IF_ERROR(sent);
  }
  h->index_bytes = index_bytes;
  return Status::kOk;
}

// The arguments of encode(), checked before anything is written; `*layout` is the workspace's.
Status check_encode_arguments(const CodecSpec& spec, Span<const float> update, Span<uint8_t> workspace,
                              Span<uint8_t> out, WorkspaceLayout* layout) {
  EDGEFL_RETURN_IF_ERROR(validate_codec_spec(spec));
  const size_t n = update.size();
  if (n > EDGEFL_MAX_DIMENSION) return Status::kDimensionTooLarge;
  if (n > 0 && update.data() == nullptr) return Status::kInvalidArgument;
  *layout = layout_for(spec, n);
  if (workspace.size() < layout->total() || (layout->total() > 0 && workspace.data() == nullptr)) {
    return Status::kWorkspaceTooSmall;
  }
  if (out.size() < encoded_bound(spec, n) || out.data() == nullptr) return Status::kBufferTooSmall;
  if (spec.values == ValueCoderKind::kUniform && spec.shared_step > values::kMaxScale / 2147483648.0f) {
    return Status::kInvalidSpec;
  }
  return Status::kOk;
}

}  // namespace

size_t workspace_size(const CodecSpec& spec, size_t n) {
  if (validate_codec_spec(spec) != Status::kOk) return 0;
  return layout_for(spec, n).total();
}

size_t encoded_bound(const CodecSpec& spec, size_t n) {
  if (validate_codec_spec(spec) != Status::kOk || n > EDGEFL_MAX_DIMENSION) return 0;
  const size_t nnz = max_nnz(spec, n);
#if EDGEFL_WITH_SKC
  if (is_skc(spec)) return skc_encoded_bound(spec, n);
#endif
#if EDGEFL_WITH_COUNT_SKETCH
  if (is_count_sketch(spec)) return count_sketch_encoded_bound(spec, n);
#endif
  const values::Params p = value_params(spec, 0);
  return kEncodedHeaderBytes + index_bound(spec, n, nnz) + size_t(values::region_bytes(p, nnz));
}

Status encode(const CodecSpec& spec, Span<const float> update, uint64_t seed, Span<uint8_t> workspace,
              Span<uint8_t> out, size_t* written) {
  if (written == nullptr) return Status::kInvalidArgument;
  *written = 0;
  WorkspaceLayout layout;
  EDGEFL_RETURN_IF_ERROR(check_encode_arguments(spec, update, workspace, out, &layout));
  const size_t n = update.size();
  const EncodeScratch ws = carve_workspace(layout, workspace.data());
  const float* x = update.data();
  values::Params p = value_params(spec, seed);
  const Kernels& kern = kernels();
  EncodedInfo h = header_for(spec, p, n, seed);
  uint8_t* payload = out.data() + kEncodedHeaderBytes;
  if (p.shared && n > 0) EDGEFL_RETURN_IF_ERROR(check_shared_scale_range(spec, p, x, n, kern));

  if (is_count_sketch(spec)) {
#if EDGEFL_WITH_COUNT_SKETCH
    EDGEFL_RETURN_IF_ERROR(encode_count_sketch(spec, x, n, seed, kern, payload, &h));
#endif
  } else if (!is_sparse(spec) && !is_skc(spec)) {
    h.index_coding = IndexCoding::kNone;
    h.nnz = uint32_t(n);
    h.value_bytes = size_t(values::region_bytes(p, n));
    // Dense fp16 / bf16: one pass converts, checks the range and checksums (the kernels refuse
    // NaN and Inf with the values that round to Inf; which of the two is looked up after).
    // (Not in builds for size: no table there has fused kernels.)
#if !defined(__OPTIMIZE_SIZE__)
    const auto convert_and_checksum = p.kind == ValueCoderKind::kBf16   ? kern.to_bf16_crc
                                      : p.kind == ValueCoderKind::kFp16 ? kern.to_fp16_crc
                                                                        : nullptr;
    if (convert_and_checksum != nullptr && !spec.entropy_coded && n > 0) {
      uint32_t payload_crc = 0;
      if (!convert_and_checksum(x, n, payload, &payload_crc)) {
        return kern.max_abs_bits(x, n) >= 0x7F800000u ? Status::kNonFiniteInput : Status::kValueOutOfRange;
      }
      h.header_bytes = kEncodedHeaderBytes;
      h.total_bytes = kEncodedHeaderBytes + h.value_bytes;
      format::seal_with_payload_crc(h, out.data(), payload_crc);
      *written = h.total_bytes;
      return Status::kOk;
    }
#endif
    // Hadamard blocks check their own range just before their transform reads them again from
    // cache (values.cpp): no separate pass over x. When one fails, a non-finite value anywhere
    // takes precedence over a finite one out of range, as for every other coder.
    const bool checks_own_blocks = p.kind == ValueCoderKind::kHadamard;
    if (n > 0 && !checks_own_blocks && kern.max_abs_bits(x, n) >= 0x7F800000u) return Status::kNonFiniteInput;
    if (n > 0) {
      const Status status = encode_dense(p, x, n, payload, ws.hadamard);
      if (status == Status::kValueOutOfRange && checks_own_blocks && kern.max_abs_bits(x, n) >= 0x7F800000u) {
        return Status::kNonFiniteInput;
      }
      EDGEFL_RETURN_IF_ERROR(status);
    }
  } else {
    select::Selection sel;
    float value_scale = 1.0f;
    EDGEFL_RETURN_IF_ERROR(select_coordinates(spec, x, n, seed, ws, kern, &sel, &value_scale));
    h.nnz = uint32_t(sel.k);
    if (is_skc(spec)) {
#if EDGEFL_WITH_SKC
      EDGEFL_RETURN_IF_ERROR(
          encode_skc(spec, sel, x, n, seed, ws.sketch, payload, out.size() - kEncodedHeaderBytes, &h));
#endif
    } else {
      EDGEFL_RETURN_IF_ERROR(encode_sparse(spec, p, sel, x, n, ws, value_scale, payload, &h));
    }
  }
  if (spec.entropy_coded && h.nnz > 0 && !is_skc(spec)) {
    const size_t raw = h.value_bytes;
    uint8_t* region = payload + h.index_bytes;
    p.rans_lanes = uint8_t(entropy::rans_lanes_for(h.nnz));
    h.value_bytes = values::entropy_recode(p, region, raw, h.nnz, ws.entropy, ws.entropy + h.nnz);
    h.entropy_coded = h.value_bytes < raw;
    h.rans_wide = h.entropy_coded && p.rans_lanes == entropy::kRansWideLanes;
  }
  h.header_bytes = kEncodedHeaderBytes;
  h.total_bytes = kEncodedHeaderBytes + h.index_bytes + h.value_bytes;
  format::seal(h, out.data());
  *written = h.total_bytes;
  return Status::kOk;
}

Status inspect(Span<const uint8_t> bytes, EncodedInfo* info) {
  if (info == nullptr || (bytes.size() > 0 && bytes.data() == nullptr)) return Status::kInvalidArgument;
  EncodedInfo h;
  EDGEFL_RETURN_IF_ERROR(format::read_header(bytes, &h));
  if (format::compute_checksum(bytes.data(), h.total_bytes) != h.checksum) return Status::kChecksumMismatch;
  *info = h;
  return Status::kOk;
}

size_t decode_fast_workspace_size(const EncodedInfo& info) {
#if defined(__OPTIMIZE_SIZE__)
  return decode_workspace_size(info);
#else
  // The indices (any alignment), then the values of a rANS-coded region; none where size_t
  // cannot count them (32-bit targets past 2^29 kept coordinates).
  const size_t base = decode_workspace_size(info);
  const size_t per_kept = info.entropy_coded ? 8 : 4;
  if (!has_coded_indices(info) || info.nnz > (~size_t(0) - base - 3) / per_kept) return base;
  return base + size_t(info.nnz) * per_kept + 3;
#endif
}

size_t decode_workspace_size(const EncodedInfo& info) {
  (void)info;  // without the sketch families: always 0
#if EDGEFL_WITH_SKC
  if (info.values == ValueCoderKind::kSkCompress) return skc_decode_workspace(info);
#endif
#if EDGEFL_WITH_COUNT_SKETCH
  if (info.values == ValueCoderKind::kCountSketch) return count_sketch_decode_workspace(info);
#endif
  return 0;
}

Status decode(Span<const uint8_t> bytes, Span<float> out) {
  return decode(bytes, out, Span<uint8_t>());
}

Status decode_add(Span<const uint8_t> bytes, float weight, Span<float> accumulator) {
  return decode_add(bytes, weight, accumulator, Span<uint8_t>());
}

Status decode_add(Span<const uint8_t> bytes, double weight, Span<double> accumulator) {
  return decode_add(bytes, weight, accumulator, Span<uint8_t>());
}

Status decode(Span<const uint8_t> bytes, Span<float> out, Span<uint8_t> workspace) {
  if (out.size() > 0 && out.data() == nullptr) return Status::kInvalidArgument;
  const DecodeConsumer consumer = {
      &out,
      [](void* context, bool every_coordinate) {
        const Span<float>& dense = *static_cast<Span<float>*>(context);
        if (!every_coordinate && dense.size() > 0) memset(dense.data(), 0, dense.size() * sizeof(float));
      },
      [](void* context, const uint32_t* index, const float* value, uint32_t count) {
        float* dense = static_cast<Span<float>*>(context)->data();
        uint32_t j = 0;
#if !defined(__OPTIMIZE_SIZE__)
        // Random-k's indices land anywhere: the line of a store kPrefetchAhead pairs on is asked
        // for (to write) now, so that its miss overlaps the stores before it.
        if (!walks_forward(index, count)) {
          for (; j + kPrefetchAhead < count; ++j) {
            __builtin_prefetch(dense + index[j + kPrefetchAhead], 1);
            dense[index[j]] = value[j];
          }
        }
#endif
        for (; j < count; ++j) dense[index[j]] = value[j];
      },
      [](void* context, size_t first, const float* value, uint32_t count) {
        memcpy(static_cast<Span<float>*>(context)->data() + first, value, size_t(count) * sizeof(float));
      },
  };
  return decode_batched(bytes, out.size(), workspace, consumer);
}

Status decode_add(Span<const uint8_t> bytes, float weight, Span<float> accumulator, Span<uint8_t> workspace) {
  return decode_add_to(bytes, weight, accumulator, workspace);
}

Status read_header(Span<const uint8_t> bytes, EncodedInfo* info) {
  if (info == nullptr || (bytes.size() > 0 && bytes.data() == nullptr)) return Status::kInvalidArgument;
  return format::read_header(bytes, info);
}

Status verify(Span<const uint8_t> bytes, Span<uint8_t> workspace, EncodedInfo* info) {
  if (bytes.size() > 0 && bytes.data() == nullptr) return Status::kInvalidArgument;
  // The payload decoders validate as they go; a consumer that keeps nothing turns decode into
  // verify (the same instantiation as decode: no flash for a second copy of the decoders).
  const DecodeConsumer discard = {
      nullptr,
      [](void*, bool) {},
      [](void*, const uint32_t*, const float*, uint32_t) {},
      [](void*, size_t, const float*, uint32_t) {},
  };
  return decode_batched(bytes, kAnyDimension, workspace, discard, info);
}

Status decode_add(Span<const uint8_t> bytes, double weight, Span<double> accumulator,
                  Span<uint8_t> workspace) {
  return decode_add_to(bytes, weight, accumulator, workspace);
}

}  // namespace edgefl
