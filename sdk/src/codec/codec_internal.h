// Internal: what the files of the codec share (codec.cpp, the family files *_codec.cpp, add.cpp):
// spec helpers, the value-coder parameters of a spec or a header, and the batch sink every payload
// decoder feeds.
#ifndef EDGEFL_SRC_CODEC_CODEC_INTERNAL_H_
#define EDGEFL_SRC_CODEC_CODEC_INTERNAL_H_

#include <stddef.h>
#include <stdint.h>

#include "codec/values.h"
#include "edgefl/codec.h"
#include "edgefl/config.h"

namespace edgefl {
namespace codec_internal {

// True when this build holds the family of value coder `kind` (edgefl/config.h: EDGEFL_WITH_*).
// A family compiled out is refused by name: parse_codec_spec() and encode() with kInvalidSpec,
// decoders with kUnknownCodec; its code is not linked.
inline bool codec_family_compiled(ValueCoderKind kind) {
  switch (kind) {
    case ValueCoderKind::kSkCompress: return EDGEFL_WITH_SKC != 0;
    case ValueCoderKind::kCountSketch: return EDGEFL_WITH_COUNT_SKETCH != 0;
    case ValueCoderKind::kHadamard: return EDGEFL_WITH_HADAMARD != 0;
    default: return true;
  }
}

inline bool is_sparse(const CodecSpec& s) {
  return s.sparsifier != SparsifierKind::kNone;
}

inline bool is_skc(const CodecSpec& s) {
  return s.values == ValueCoderKind::kSkCompress;
}

inline bool is_count_sketch(const CodecSpec& s) {
  return s.values == ValueCoderKind::kCountSketch;
}

// The k a spec asks for at dimension n: 0 for n = 0, else in [1, n].
inline size_t target_k(const CodecSpec& s, size_t n) {
  if (n == 0) return 0;
  size_t k = s.k != 0 ? s.k : size_t(double(s.density) * double(n) + 0.5);
  if (k < 1) k = 1;
  return k > n ? n : k;
}

// Largest nnz an encoding of n coordinates under `s` can carry.
inline size_t max_nnz(const CodecSpec& s, size_t n) {
  switch (s.sparsifier) {
    case SparsifierKind::kNone:
    case SparsifierKind::kThreshold: return n;
    default: return target_k(s, n);
  }
}

inline uint8_t* align64(uint8_t* p) {
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t(63));
}

// The value coder's parameters for `s` with encode()'s `seed`, and from a verified header.
values::Params value_params(const CodecSpec& s, uint64_t seed);
values::Params params_from_header(const EncodedInfo& h);

// Where a decode's (index, value) pairs go: begin() once after verification, then apply() for
// batches of pairs in ascending index order. decode and both decode_adds are consumers of one
// instantiation of every payload decoder (BatchSink); a template instantiation per accumulator
// type cost about 9 KiB of Cortex-M flash each, and one indirect call per batch costs nothing
// measurable.
struct DecodeConsumer {
  void* context;
  // every_coordinate: the decode will pass a value for each of the n coordinates (a dense
  // encoding), so a consumer that writes need not clear its output first.
  void (*begin)(void* context, bool every_coordinate);
  void (*apply)(void* context, const uint32_t* index, const float* value, uint32_t count);
  // Values of the consecutive indices first .. first + count - 1.
  void (*apply_run)(void* context, size_t first, const float* value, uint32_t count);
};

class BatchSink {
 public:
  explicit BatchSink(const DecodeConsumer& consumer) : consumer_(consumer) {}
  void begin(bool every_coordinate = false) { consumer_.begin(consumer_.context, every_coordinate); }
  void operator()(size_t i, float v) {
    index_[count_] = uint32_t(i);  // i < n <= EDGEFL_MAX_DIMENSION
    value_[count_] = v;
    if (++count_ == kBatch) flush();
  }
  void run(size_t first, const float* v, uint32_t count) {
    flush();
    consumer_.apply_run(consumer_.context, first, v, count);
  }
  // (index[j], v[j]) for j < count, as count calls of operator().
  void pairs(const uint32_t* index, const float* v, uint32_t count) {
    flush();
    consumer_.apply(consumer_.context, index, v, count);
  }
  void flush() {
    if (count_ > 0) consumer_.apply(consumer_.context, index_, value_, count_);
    count_ = 0;
  }

 private:
  static constexpr uint32_t kBatch = 128;  // 1 KiB of stack
  const DecodeConsumer& consumer_;
  uint32_t count_ = 0;
  uint32_t index_[kBatch];
  float value_[kBatch];
};

}  // namespace codec_internal
}  // namespace edgefl

#endif  // EDGEFL_SRC_CODEC_CODEC_INTERNAL_H_
