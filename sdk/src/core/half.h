// Internal: float <-> fp16 / bf16 conversions, round to nearest even, bit-exact and portable.
#ifndef EDGEFL_SRC_CORE_HALF_H_
#define EDGEFL_SRC_CORE_HALF_H_

#include <stdint.h>
#include <string.h>

namespace edgefl {

inline uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// True for NaN and +-Inf.
inline bool is_nonfinite_bits(uint32_t u) {
  return (u & 0x7F800000u) == 0x7F800000u;
}

// bf16, round to nearest even. Input must be finite; values whose rounding overflows give
// +-Inf (callers reject |x| >= kBf16OverflowBits first).
inline uint16_t float_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);
  return uint16_t((u + rounding) >> 16);
}
constexpr uint32_t kBf16OverflowBits = 0x7F7F8000u;  // |x| bits at or above this round to Inf
inline float bf16_to_float(uint16_t h) {
  return bits_float(uint32_t(h) << 16);
}

// IEEE binary16, round to nearest even, subnormals kept. Input must be finite with
// |x| < 65520 (callers reject larger values: they round to Inf).
inline uint16_t float_to_fp16(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7FFFFFFFu;
  if (abs >= 0x38800000u) {  // normal fp16 range (>= 2^-14)
    // Re-bias the exponent, round the 13 dropped mantissa bits to nearest even.
    const uint32_t rounded = abs + 0xFFFu + ((abs >> 13) & 1u);
    return uint16_t(sign | ((rounded - 0x38000000u) >> 13));
  }
  // Subnormal or zero: value / 2^-24, rounded to nearest even.
  const float scaled = bits_float(abs) * 16777216.0f;  // exact: multiplication by 2^24
  uint32_t q = uint32_t(scaled);
  const float frac = scaled - float(q);
  if (frac > 0.5f || (frac == 0.5f && (q & 1u))) ++q;
  return uint16_t(sign | q);
}
constexpr float kFp16MaxFinite = 65504.0f;
constexpr uint32_t kFp16OverflowBits = 0x477FF000u;  // |x| bits at or above this round to Inf

inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    return bits_float(sign | float_bits(float(mant) * (1.0f / 16777216.0f)));
  }
  if (exp == 31) return bits_float(sign | 0x7F800000u | (mant << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace edgefl

#endif  // EDGEFL_SRC_CORE_HALF_H_
