// Arm Advanced SIMD (NEON) kernels. Each gives the bytes of its twin in kernels_ref.cpp: the same
// float operations in the same order (no FMA: the core is built with -ffp-contract=off), the same
// hash per lane.
//
// AArch64: the whole table. Advanced SIMD is part of the AArch64 base ISA, with IEEE arithmetic
// (subnormals kept unless the program sets FPCR.FZ, which would change the scalar code too).
//
// ARMv7: only the integer kernels (largest |x|, min/max, bf16, threshold count). ARMv7's Advanced
// SIMD always flushes subnormal floats to zero, so its float arithmetic and fp16 conversions can
// differ from the scalar code by one code on rare inputs, and encoded bytes must be the same on
// every platform; those entries call the scalar reference. This file is built with -mfpu=neon on
// ARMv7 and used only when the CPU reports NEON (cpu_features()).
#include <arm_neon.h>
#include <string.h>

#include "codec/kernels.h"
#include "core/cpu.h"
#include "core/half.h"

namespace edgefl {

namespace {

inline uint32_t horizontal_max(uint32x4_t v) {
  uint32_t lanes[4];
  vst1q_u32(lanes, v);
  uint32_t m = lanes[0];
  for (int j = 1; j < 4; ++j) m = lanes[j] > m ? lanes[j] : m;
  return m;
}

inline uint32_t horizontal_sum(uint32x4_t v) {
  uint32_t lanes[4];
  vst1q_u32(lanes, v);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

inline uint32x4_t load_bits(const float* x) {
  return vreinterpretq_u32_f32(vld1q_f32(x));
}

uint32_t max_abs_bits_neon(const float* x, size_t n) {
  const uint32x4_t abs_mask = vdupq_n_u32(0x7FFFFFFFu);
  uint32x4_t m0 = vdupq_n_u32(0), m1 = m0, m2 = m0, m3 = m0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    m0 = vmaxq_u32(m0, vandq_u32(load_bits(x + i), abs_mask));
    m1 = vmaxq_u32(m1, vandq_u32(load_bits(x + i + 4), abs_mask));
    m2 = vmaxq_u32(m2, vandq_u32(load_bits(x + i + 8), abs_mask));
    m3 = vmaxq_u32(m3, vandq_u32(load_bits(x + i + 12), abs_mask));
  }
  uint32_t m = horizontal_max(vmaxq_u32(vmaxq_u32(m0, m1), vmaxq_u32(m2, m3)));
  for (; i < n; ++i) {
    const uint32_t a = float_bits(x[i]) & 0x7FFFFFFFu;
    m = a > m ? a : m;
  }
  return m;
}

// A signed integer that orders finite floats as < does, with -0 just below +0: sign-magnitude
// turned into two's complement. Integer compares are exact on ARMv7 too (no flush to zero).
inline int32x4_t order_keys(uint32x4_t bits) {
  const int32x4_t s = vreinterpretq_s32_u32(bits);
  const int32x4_t negative = vshrq_n_s32(s, 31);  // all ones where the sign bit is set
  return veorq_s32(s, vandq_s32(negative, vdupq_n_s32(0x7FFFFFFF)));
}

inline float key_to_float(int32_t key) {
  const uint32_t negative = key < 0 ? 0x7FFFFFFFu : 0u;
  return bits_float(uint32_t(key) ^ negative);
}

void min_max_neon(const float* x, size_t n, float* lo, float* hi) {
  // The reference keeps the first of equal values; values that compare equal here have the same
  // bits except -0 and +0, and both results are normalised to +0 below.
  float a = x[0], b = x[0];
  size_t i = 0;
  if (n >= 4) {
    int32x4_t vlo = order_keys(load_bits(x)), vhi = vlo;
    for (i = 4; i + 4 <= n; i += 4) {
      const int32x4_t k = order_keys(load_bits(x + i));
      vlo = vminq_s32(vlo, k);
      vhi = vmaxq_s32(vhi, k);
    }
    int32_t l[4], h[4];
    vst1q_s32(l, vlo);
    vst1q_s32(h, vhi);
    int32_t kl = l[0], kh = h[0];
    for (int j = 1; j < 4; ++j) {
      kl = l[j] < kl ? l[j] : kl;
      kh = h[j] > kh ? h[j] : kh;
    }
    a = key_to_float(kl);
    b = key_to_float(kh);
  }
  for (; i < n; ++i) {
    a = x[i] < a ? x[i] : a;
    b = x[i] > b ? x[i] : b;
  }
  *lo = a + 0.0f;
  *hi = b + 0.0f;
}

// (u + 0x7FFF + ((u >> 16) & 1)) >> 16 per lane: float_to_bf16.
inline uint16x4_t bf16_x4(uint32x4_t u) {
  const uint32x4_t rounding = vaddq_u32(vdupq_n_u32(0x7FFFu), vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1)));
  return vshrn_n_u32(vaddq_u32(u, rounding), 16);
}

bool to_bf16_neon(const float* x, size_t n, uint8_t* out) {
  const uint32x4_t abs_mask = vdupq_n_u32(0x7FFFFFFFu);
  uint32x4_t worst = vdupq_n_u32(0);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint32x4_t u0 = load_bits(x + i), u1 = load_bits(x + i + 4);
    worst = vmaxq_u32(worst, vmaxq_u32(vandq_u32(u0, abs_mask), vandq_u32(u1, abs_mask)));
    // Little-endian lanes: the stored uint16 values are the wire's little-endian bytes.
    vst1q_u8(out + 2 * i, vreinterpretq_u8_u16(vcombine_u16(bf16_x4(u0), bf16_x4(u1))));
  }
  bool ok = horizontal_max(worst) < kBf16OverflowBits;
  for (; i < n; ++i) {
    ok &= (float_bits(x[i]) & 0x7FFFFFFFu) < kBf16OverflowBits;
    const uint16_t h = float_to_bf16(x[i]);
    out[2 * i] = uint8_t(h);
    out[2 * i + 1] = uint8_t(h >> 8);
  }
  return ok;
}

size_t count_abs_at_least_neon(const float* x, size_t n, uint32_t key_threshold) {
  const uint32x4_t abs_mask = vdupq_n_u32(0x7FFFFFFFu), t = vdupq_n_u32(key_threshold);
  size_t count = 0;
  size_t i = 0;
  // Lane counters are flushed every 2^30 elements (2^28 per lane, below their 2^32 limit).
  const size_t kBlock = size_t(1) << 30;
  while (i + 4 <= n) {
    uint32x4_t acc = vdupq_n_u32(0);
    const size_t block_end = n - i > kBlock ? i + kBlock : n;
    for (; i + 4 <= block_end; i += 4) {
      acc = vsubq_u32(acc, vcgeq_u32(vandq_u32(load_bits(x + i), abs_mask), t));  // -(all ones) per hit
    }
    count += horizontal_sum(acc);
  }
  for (; i < n; ++i) count += (float_bits(x[i]) & 0x7FFFFFFFu) >= key_threshold ? 1 : 0;
  return count;
}

#if defined(__aarch64__)

inline uint32x4_t hash32_x4(uint32x4_t key, uint32x4_t index) {
  uint32x4_t x = veorq_u32(index, key);
  x = veorq_u32(x, vshrq_n_u32(x, 16));
  x = vmulq_u32(x, vdupq_n_u32(0x7FEB352Du));
  x = veorq_u32(x, vshrq_n_u32(x, 15));
  x = vmulq_u32(x, vdupq_n_u32(0x846CA68Bu));
  x = veorq_u32(x, vshrq_n_u32(x, 16));
  return x;
}

// unit_float(hash32(key, first .. first + 3)).
inline float32x4_t uniforms_x4(uint32x4_t key, uint32_t first) {
  static const uint32_t kLane[4] = {0, 1, 2, 3};
  const uint32x4_t index = vaddq_u32(vdupq_n_u32(first), vld1q_u32(kLane));
  const uint32x4_t h = vshrq_n_u32(hash32_x4(key, index), 8);
  return vmulq_f32(vcvtq_f32_u32(h), vdupq_n_f32(1.0f / 16777216.0f));
}

bool to_fp16_neon(const float* x, size_t n, uint8_t* out) {
  const uint32x4_t abs_mask = vdupq_n_u32(0x7FFFFFFFu);
  uint32x4_t worst = vdupq_n_u32(0);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float32x4_t v0 = vld1q_f32(x + i), v1 = vld1q_f32(x + i + 4);
    worst = vmaxq_u32(worst, vandq_u32(vreinterpretq_u32_f32(v0), abs_mask));
    worst = vmaxq_u32(worst, vandq_u32(vreinterpretq_u32_f32(v1), abs_mask));
    // FCVTN rounds by FPCR.RMode: to nearest even unless the program changed it.
    vst1q_u8(out + 2 * i, vreinterpretq_u8_f16(vcombine_f16(vcvt_f16_f32(v0), vcvt_f16_f32(v1))));
  }
  bool ok = horizontal_max(worst) < kFp16OverflowBits;
  for (; i < n; ++i) {
    ok &= (float_bits(x[i]) & 0x7FFFFFFFu) < kFp16OverflowBits;
    const uint16_t h = float_to_fp16(x[i]);
    out[2 * i] = uint8_t(h);
    out[2 * i + 1] = uint8_t(h >> 8);
  }
  return ok;
}

void from_fp16_neon(const uint8_t* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float16x8_t h = vreinterpretq_f16_u8(vld1q_u8(in + 2 * i));
    vst1q_f32(out + i, vcvt_f32_f16(vget_low_f16(h)));
    vst1q_f32(out + i + 4, vcvt_f32_f16(vget_high_f16(h)));
  }
  for (; i < n; ++i) out[i] = fp16_to_float(uint16_t(in[2 * i] | (in[2 * i + 1] << 8)));
}

// Sixteen uint32 codes (each < 256) -> sixteen bytes in order.
inline uint8x16_t narrow16(const uint32x4_t c[4]) {
  const uint16x8_t lo = vcombine_u16(vmovn_u32(c[0]), vmovn_u32(c[1]));
  const uint16x8_t hi = vcombine_u16(vmovn_u32(c[2]), vmovn_u32(c[3]));
  return vcombine_u8(vmovn_u16(lo), vmovn_u16(hi));
}

// Packs 32 codes (one per byte, in order, each < 2^bits) into 32 * bits / 8 bytes, LSB-first.
inline void pack32(uint8x16_t a, uint8x16_t b, unsigned bits, uint8_t* out) {
  switch (bits) {
    case 8:
      vst1q_u8(out, a);
      vst1q_u8(out + 16, b);
      return;
    case 4: {
      const uint8x16x2_t pairs = vuzpq_u8(a, b);  // even-indexed codes, odd-indexed codes
      vst1q_u8(out, vsliq_n_u8(pairs.val[0], pairs.val[1], 4));
      return;
    }
    case 2: {
      const uint8x16x2_t pairs = vuzpq_u8(a, b);
      const uint8x16_t nibbles = vsliq_n_u8(pairs.val[0], pairs.val[1], 2);  // codes 2j, 2j+1
      const uint8x8x2_t quads = vuzp_u8(vget_low_u8(nibbles), vget_high_u8(nibbles));
      vst1_u8(out, vsli_n_u8(quads.val[0], quads.val[1], 4));
      return;
    }
    default: {  // 1: shift each bit to its place in its byte, then add groups of 8 lanes
      static const int8_t kShift[16] = {0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7};
      const int8x16_t shift = vld1q_s8(kShift);
      uint8x16_t s = vpaddq_u8(vshlq_u8(a, shift), vshlq_u8(b, shift));
      s = vpaddq_u8(s, s);
      s = vpaddq_u8(s, s);
      const uint32_t word = vgetq_lane_u32(vreinterpretq_u32_u8(s), 0);
      memcpy(out, &word, 4);
      return;
    }
  }
}

void quantize_uniform_neon(const float* x, uint32_t n, float lo, float inv, unsigned bits, bool stochastic,
                           uint32_t key, uint32_t first, uint8_t* out) {
  const float32x4_t vlo = vdupq_n_f32(lo), vinv = vdupq_n_f32(inv), half = vdupq_n_f32(0.5f);
  const uint32x4_t vmax = vdupq_n_u32((1u << bits) - 1), vkey = vdupq_n_u32(key);
  uint32_t i = 0;
  for (; i + 32 <= n; i += 32) {
    uint32x4_t c[8];
    for (int j = 0; j < 8; ++j) {
      const float32x4_t u = stochastic ? uniforms_x4(vkey, first + i + 4 * j) : half;
      const float32x4_t t = vaddq_f32(vmulq_f32(vsubq_f32(vld1q_f32(x + i + 4 * j), vlo), vinv), u);
      c[j] = vminq_u32(vcvtq_u32_f32(t), vmax);  // truncation, as uint32_t(t)
    }
    pack32(narrow16(c), narrow16(c + 4), bits, out + i * bits / 8);
  }
  if (i < n)
    kernels_ref().quantize_uniform(x + i, n - i, lo, inv, bits, stochastic, key, first + i,
                                   out + i * bits / 8);
}

void quantize_shared_neon(const float* x, uint32_t n, float inv, int32_t limit, unsigned bits,
                          bool stochastic, uint32_t key, uint32_t first, uint8_t* out) {
  const float32x4_t vinv = vdupq_n_f32(inv), half = vdupq_n_f32(0.5f);
  const float32x4_t flo = vdupq_n_f32(-float(limit)), fhi = vdupq_n_f32(float(limit) + 1.0f);
  const int32x4_t vlim = vdupq_n_s32(limit), vneg = vdupq_n_s32(-limit);
  const uint32x4_t mask = vdupq_n_u32((1u << bits) - 1), vkey = vdupq_n_u32(key);
  uint32_t i = 0;
  for (; i + 32 <= n; i += 32) {
    uint32x4_t c[8];
    for (int j = 0; j < 8; ++j) {
      const float32x4_t u = stochastic ? uniforms_x4(vkey, first + i + 4 * j) : half;
      float32x4_t t = vaddq_f32(vmulq_f32(vld1q_f32(x + i + 4 * j), vinv), u);
      t = vminq_f32(vmaxq_f32(t, flo), fhi);
      int32x4_t q = vcvtq_s32_f32(vrndmq_f32(t));  // floor
      q = vmaxq_s32(vminq_s32(q, vlim), vneg);
      c[j] = vandq_u32(vreinterpretq_u32_s32(q), mask);
    }
    pack32(narrow16(c), narrow16(c + 4), bits, out + i * bits / 8);
  }
  if (i < n)
    kernels_ref().quantize_shared(x + i, n - i, inv, limit, bits, stochastic, key, first + i,
                                  out + i * bits / 8);
}

#if EDGEFL_WITH_HADAMARD
// hq kernels (AArch64): the same float operations, on the same pairs, in the same order as the
// scalar twins (kernels_ref.cpp), so the bytes match; the shape of kernels_avx2.cpp's, four lanes
// wide. The signs are the reference's loop: the compiler vectorises it (4 instructions per
// coordinate, where intrinsics took 5).

// One butterfly of the scalar loop on a vector pair: (a, b) becomes (a + b, a - b).
inline void butterfly(float32x4_t* a, float32x4_t* b) {
  const float32x4_t sum = vaddq_f32(*a, *b);
  *b = vsubq_f32(*a, *b);
  *a = sum;
}

// The stage h = 4 * kSpan on sixteen vectors of four floats: each pair kSpan vectors apart.
// Unrolled whole, so that the vectors stay in registers.
template <int kSpan>
inline void butterflies_across_vectors(float32x4_t r[16]) {
#pragma GCC unroll 16
  for (int k = 0; k < 16; ++k) {
    if ((k & kSpan) == 0) butterfly(&r[k], &r[k + kSpan]);
  }
}

// h = 1 and h = 2 on the eight floats of *x then *y: each stage gathers the pairs' first and
// second elements (uzp: x0 x2 y0 y2 / x1 x3 y1 y3; then the 64-bit halves), adds and subtracts,
// and puts a + b where the scalar loop writes v[j], a - b where it writes v[j + h].
inline void hadamard_in_vectors(float32x4_t* x, float32x4_t* y) {
  float32x4_t first = vuzp1q_f32(*x, *y), second = vuzp2q_f32(*x, *y);
  float32x4_t sum = vaddq_f32(first, second), difference = vsubq_f32(first, second);
  *x = vzip1q_f32(sum, difference);
  *y = vzip2q_f32(sum, difference);
  const float64x2_t x64 = vreinterpretq_f64_f32(*x), y64 = vreinterpretq_f64_f32(*y);
  first = vreinterpretq_f32_f64(vtrn1q_f64(x64, y64));   // x0 x1 y0 y1
  second = vreinterpretq_f32_f64(vtrn2q_f64(x64, y64));  // x2 x3 y2 y3
  sum = vaddq_f32(first, second);
  difference = vsubq_f32(first, second);
  const float64x2_t sum64 = vreinterpretq_f64_f32(sum), difference64 = vreinterpretq_f64_f32(difference);
  *x = vreinterpretq_f32_f64(vtrn1q_f64(sum64, difference64));
  *y = vreinterpretq_f32_f64(vtrn2q_f64(sum64, difference64));
}

// Blocks of 64 floats or more: one pass over each 64 floats in sixteen registers (h = 1 .. 32),
// then two stages per pass (h and 2h on four vectors h apart), the last stage's pass also scaling
// by 1/sqrt(n); blocks of 16 and 32 stage by stage. Only the order in which independent pairs are
// visited differs from the scalar loop.
void hadamard_transform_neon(float* v, uint32_t n) {
  if (n < 16) {
    hadamard_transform_ref(v, n);
    return;
  }
  const float32x4_t norm = vdupq_n_f32(float(1.0 / __builtin_sqrt(double(n))));
  if (n < 64) {
    for (uint32_t i = 0; i < n; i += 8) {
      float32x4_t x = vld1q_f32(v + i), y = vld1q_f32(v + i + 4);
      hadamard_in_vectors(&x, &y);
      vst1q_f32(v + i, x);
      vst1q_f32(v + i + 4, y);
    }
    for (uint32_t h = 4; h < n; h <<= 1) {
      for (uint32_t i = 0; i < n; i += 2 * h) {
        for (uint32_t j = i; j < i + h; j += 4) {
          float32x4_t a = vld1q_f32(v + j), b = vld1q_f32(v + j + h);
          butterfly(&a, &b);
          vst1q_f32(v + j, a);
          vst1q_f32(v + j + h, b);
        }
      }
    }
    for (uint32_t i = 0; i < n; i += 4) vst1q_f32(v + i, vmulq_f32(vld1q_f32(v + i), norm));
    return;
  }
  const bool only_pass = n == 64;
  for (uint32_t i = 0; i < n; i += 64) {
    float32x4_t r[16];
#pragma GCC unroll 8
    for (int k = 0; k < 16; k += 2) {
      r[k] = vld1q_f32(v + i + 4 * k);
      r[k + 1] = vld1q_f32(v + i + 4 * k + 4);
      hadamard_in_vectors(&r[k], &r[k + 1]);
    }
    butterflies_across_vectors<1>(r);  // h = 4
    butterflies_across_vectors<2>(r);  // h = 8
    butterflies_across_vectors<4>(r);  // h = 16
    butterflies_across_vectors<8>(r);  // h = 32
#pragma GCC unroll 16
    for (int k = 0; k < 16; ++k) vst1q_f32(v + i + 4 * k, only_pass ? vmulq_f32(r[k], norm) : r[k]);
  }
  uint32_t h = 64;
  for (; 4 * h <= n; h *= 4) {
    const bool last = 4 * h == n;
    for (uint32_t i = 0; i < n; i += 4 * h) {
      for (uint32_t j = i; j < i + h; j += 4) {
        float32x4_t a = vld1q_f32(v + j), b = vld1q_f32(v + j + h);
        float32x4_t c = vld1q_f32(v + j + 2 * h), d = vld1q_f32(v + j + 3 * h);
        butterfly(&a, &b);  // stage h
        butterfly(&c, &d);
        butterfly(&a, &c);  // stage 2h
        butterfly(&b, &d);
        if (last) {
          a = vmulq_f32(a, norm);
          b = vmulq_f32(b, norm);
          c = vmulq_f32(c, norm);
          d = vmulq_f32(d, norm);
        }
        vst1q_f32(v + j, a);
        vst1q_f32(v + j + h, b);
        vst1q_f32(v + j + 2 * h, c);
        vst1q_f32(v + j + 3 * h, d);
      }
    }
  }
  if (h < n) {  // h == n / 2: one stage left, and the scaling
    for (uint32_t j = 0; j < h; j += 4) {
      float32x4_t a = vld1q_f32(v + j), b = vld1q_f32(v + j + h);
      butterfly(&a, &b);
      vst1q_f32(v + j, vmulq_f32(a, norm));
      vst1q_f32(v + j + h, vmulq_f32(b, norm));
    }
  }
}

// table[code[i]] for four codes (each < the table's floats), by a byte lookup: code * 4 + 0..3
// in each lane's four bytes.
inline uint8x16_t level_byte_indices(uint32x4_t code) {
  return vreinterpretq_u8_u32(vmlaq_u32(vdupq_n_u32(0x03020100u), code, vdupq_n_u32(0x04040404u)));
}

// hadamard_quantize eight values at a time: code_and_level(x, &code, &level) gives four values'
// codes and levels; the products x * level go to dot in the order of dot[i % 4], the codes (< 16)
// to codes[i] as bytes. The last n % 8 values take the reference loop.
template <typename CodeAndLevel>
inline void quantize_by_eights(const float* v, uint32_t n, float inv_rms, const float* thresholds,
                               const float* levels, unsigned bits, uint8_t* codes, float dot[4],
                               CodeAndLevel&& code_and_level) {
  float32x4_t acc = vld1q_f32(dot);
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float32x4_t x0 = vld1q_f32(v + i), x1 = vld1q_f32(v + i + 4);
    uint32x4_t code0, code1;
    float32x4_t level0, level1;
    code_and_level(x0, &code0, &level0);
    code_and_level(x1, &code1, &level1);
    acc = vaddq_f32(acc, vmulq_f32(x0, level0));
    acc = vaddq_f32(acc, vmulq_f32(x1, level1));
    vst1_u8(codes + i, vmovn_u16(vcombine_u16(vmovn_u32(code0), vmovn_u32(code1))));
  }
  vst1q_f32(dot, acc);
  if (i < n) hadamard_quantize_ref(v + i, n - i, inv_rms, thresholds, levels, bits, codes + i, dot);
}

// hadamard_quantize with mirrored tables (hadamard_tables_mirrored): kernels_avx2.cpp's
// hadamard_quantize_mirrored_avx2 says why the codes, levels and products are the binary
// search's. The compares are unsigned, so |z|'s bits + 1 of the largest NaN still count above.
// One instance per code width, so that the compares unroll with their thresholds in registers.
template <unsigned kBits>
void hadamard_quantize_mirrored_neon(const float* v, uint32_t n, float inv_rms, const float* thresholds,
                                     const float* levels, uint8_t* codes, float dot[4]) {
  constexpr unsigned half = 1u << (kBits - 1);
  uint32x4_t upper_bits[half > 1 ? half - 1 : 1];
  for (unsigned k = 1; k < half; ++k) upper_bits[k - 1] = vdupq_n_u32(float_bits(thresholds[half - 1 + k]));
  float upper_levels[8] = {};
  for (unsigned k = 0; k < half; ++k) upper_levels[k] = levels[half + k];
  uint8x16x2_t magnitudes;
  magnitudes.val[0] = vreinterpretq_u8_f32(vld1q_f32(upper_levels));
  magnitudes.val[1] = vreinterpretq_u8_f32(vld1q_f32(upper_levels + 4));
  const float32x4_t scale = vdupq_n_f32(inv_rms);
  const uint32x4_t abs_mask = vdupq_n_u32(0x7FFFFFFFu), one = vdupq_n_u32(1), sign = vdupq_n_u32(0x80000000u);
  const uint32x4_t above_middle = vdupq_n_u32(half), below_middle = vdupq_n_u32(half - 1);
  quantize_by_eights(v, n, inv_rms, thresholds, levels, kBits, codes, dot,
                     [&](float32x4_t x, uint32x4_t* code, float32x4_t* level) {
                       const float32x4_t z = vmulq_f32(x, scale);
                       const uint32x4_t positive = vcgtq_f32(z, vdupq_n_f32(0.0f));
                       // |z|'s bits, plus one where z <= 0 (a compare "greater than" that counts
                       // "at or below").
                       const uint32x4_t key =
                           vaddq_u32(vandq_u32(vreinterpretq_u32_f32(z), abs_mask), vbicq_u32(one, positive));
                       uint32x4_t m = vdupq_n_u32(0);
                       for (unsigned k = 0; k + 1 < half; ++k)
                         m = vsubq_u32(m, vcgtq_u32(key, upper_bits[k]));
                       *code = vbslq_u32(positive, vaddq_u32(above_middle, m), vsubq_u32(below_middle, m));
                       const uint32x4_t magnitude =
                           vreinterpretq_u32_u8(vqtbl2q_u8(magnitudes, level_byte_indices(m)));
                       *level = vreinterpretq_f32_u32(veorq_u32(magnitude, vbicq_u32(sign, positive)));
                     });
}

void hadamard_quantize_neon(const float* v, uint32_t n, float inv_rms, const float* thresholds,
                            const float* levels, unsigned bits, uint8_t* codes, float dot[4]) {
  if (hadamard_tables_mirrored(thresholds, levels, bits)) {
    switch (bits) {
      case 1: hadamard_quantize_mirrored_neon<1>(v, n, inv_rms, thresholds, levels, codes, dot); return;
      case 2: hadamard_quantize_mirrored_neon<2>(v, n, inv_rms, thresholds, levels, codes, dot); return;
      case 3: hadamard_quantize_mirrored_neon<3>(v, n, inv_rms, thresholds, levels, codes, dot); return;
      default: hadamard_quantize_mirrored_neon<4>(v, n, inv_rms, thresholds, levels, codes, dot); return;
    }
  }
  const unsigned level_count = 1u << bits;
  float level_table[16] = {};
  for (unsigned j = 0; j < level_count; ++j) level_table[j] = levels[j];
  uint8x16x4_t table;
  for (int q = 0; q < 4; ++q) table.val[q] = vreinterpretq_u8_f32(vld1q_f32(level_table + 4 * q));
  const float32x4_t scale = vdupq_n_f32(inv_rms);
  quantize_by_eights(v, n, inv_rms, thresholds, levels, bits, codes, dot,
                     [&](float32x4_t x, uint32x4_t* code, float32x4_t* level) {
                       const float32x4_t z = vmulq_f32(x, scale);
                       // The binary search's result with ascending thresholds: how many lie below z.
                       uint32x4_t count = vdupq_n_u32(0);
                       for (unsigned t = 0; t + 1 < level_count; ++t) {
                         count = vsubq_u32(count, vcgtq_f32(z, vdupq_n_f32(thresholds[t])));
                       }
                       *code = count;
                       *level = vreinterpretq_f32_u8(vqtbl4q_u8(table, level_byte_indices(count)));
                     });
}
#endif  // EDGEFL_WITH_HADAMARD

#else  // ARMv7: the float kernels are the scalar reference's (see the top of this file).

bool to_fp16_neon(const float* x, size_t n, uint8_t* out) {
  return kernels_ref().to_fp16(x, n, out);
}
void from_fp16_neon(const uint8_t* in, size_t n, float* out) {
  kernels_ref().from_fp16(in, n, out);
}
void quantize_uniform_neon(const float* x, uint32_t n, float lo, float inv, unsigned bits, bool stochastic,
                           uint32_t key, uint32_t first, uint8_t* out) {
  kernels_ref().quantize_uniform(x, n, lo, inv, bits, stochastic, key, first, out);
}
void quantize_shared_neon(const float* x, uint32_t n, float inv, int32_t limit, unsigned bits,
                          bool stochastic, uint32_t key, uint32_t first, uint8_t* out) {
  kernels_ref().quantize_shared(x, n, inv, limit, bits, stochastic, key, first, out);
}

#endif

constexpr Kernels kNeon = {
#if defined(__aarch64__)
    "neon",
#else
    "neon-v7",
#endif
    max_abs_bits_neon,
    min_max_neon,
    to_fp16_neon,
    to_bf16_neon,
    nullptr,
    nullptr,
    from_fp16_neon,
    quantize_uniform_neon,
    quantize_shared_neon,
    count_abs_at_least_neon,
#if defined(__aarch64__) && EDGEFL_WITH_HADAMARD
    hadamard_signs_ref,
    hadamard_transform_neon,
    hadamard_quantize_neon,
#else
    EDGEFL_HADAMARD_REF_KERNELS,
#endif
    nullptr,
    nullptr,
};

}  // namespace

const Kernels* kernels_neon() {
  return cpu_features().neon ? &kNeon : nullptr;
}

}  // namespace edgefl
