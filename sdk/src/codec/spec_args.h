// Internal: the pieces of the codec spec grammar (edgefl/codec.h) that the family files share
// with spec.cpp: one argument of a stage and the number parsers (freestanding: no strtod).
#ifndef EDGEFL_SRC_CODEC_SPEC_ARGS_H_
#define EDGEFL_SRC_CODEC_SPEC_ARGS_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/text.h"

namespace edgefl {
namespace codec_internal {

inline bool parse_uint(const char* begin, const char* end, uint32_t* out) {
  if (begin == end) return false;
  uint64_t v = 0;
  for (const char* p = begin; p < end; ++p) {
    if (*p < '0' || *p > '9') return false;
    v = v * 10 + uint64_t(*p - '0');
    if (v > 0xFFFFFFFFull) return false;
  }
  *out = uint32_t(v);
  return true;
}

inline bool parse_float(const char* begin, const char* end, float* out) {
  double v;
  if (!text::parse_decimal(begin, end, &v)) return false;
  if (!(v <= 3.0e38)) return false;
  *out = float(v);
  return true;
}

// One argument of a stage: key=value, a bare flag, or a positional number (key empty).
struct Arg {
  const char* key;
  size_t key_len;
  const char* value;
  size_t value_len;
  bool key_is(const char* k) const { return strlen(k) == key_len && memcmp(key, k, key_len) == 0; }
  const char* value_end() const { return value + value_len; }
};

}  // namespace codec_internal
}  // namespace edgefl

#endif  // EDGEFL_SRC_CODEC_SPEC_ARGS_H_
