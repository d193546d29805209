// Scalar reference kernels: the oracle every ISA table is tested against.
#include <string.h>

#include "codec/kernels.h"
#include "core/cpu.h"
#include "core/half.h"
#include "core/rng.h"

namespace edgefl {

namespace {

uint32_t max_abs_bits_ref(const float* x, size_t n) {
  uint32_t m = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t a = float_bits(x[i]) & 0x7FFFFFFFu;
    m = a > m ? a : m;
  }
  return m;
}

void min_max_ref(const float* x, size_t n, float* lo, float* hi) {
  float a = x[0], b = x[0];
  for (size_t i = 1; i < n; ++i) {
    a = x[i] < a ? x[i] : a;
    b = x[i] > b ? x[i] : b;
  }
  *lo = a + 0.0f;  // -0 -> +0, as in every table
  *hi = b + 0.0f;
}

bool to_fp16_ref(const float* x, size_t n, uint8_t* out) {
  bool ok = true;
  for (size_t i = 0; i < n; ++i) {
    ok &= (float_bits(x[i]) & 0x7FFFFFFFu) < kFp16OverflowBits;
    const uint16_t h = float_to_fp16(x[i]);
    out[2 * i] = uint8_t(h);
    out[2 * i + 1] = uint8_t(h >> 8);
  }
  return ok;
}

bool to_bf16_ref(const float* x, size_t n, uint8_t* out) {
  bool ok = true;
  for (size_t i = 0; i < n; ++i) {
    ok &= (float_bits(x[i]) & 0x7FFFFFFFu) < kBf16OverflowBits;
    const uint16_t h = float_to_bf16(x[i]);
    out[2 * i] = uint8_t(h);
    out[2 * i + 1] = uint8_t(h >> 8);
  }
  return ok;
}

void from_fp16_ref(const uint8_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = fp16_to_float(uint16_t(in[2 * i] | (in[2 * i + 1] << 8)));
}

void quantize_uniform_ref(const float* x, uint32_t n, float lo, float inv, unsigned bits, bool stochastic,
                          uint32_t key, uint32_t first, uint8_t* out) {
  const uint32_t max_code = (1u << bits) - 1;
  const unsigned per_byte = 8 / bits;
  memset(out, 0, (size_t(n) * bits + 7) / 8);
  for (uint32_t i = 0; i < n; ++i) {
    const float u = stochastic ? unit_float(hash32(key, first + i)) : 0.5f;
    const float t = (x[i] - lo) * inv + u;
    uint32_t c = uint32_t(t);
    c = c > max_code ? max_code : c;
    out[i / per_byte] = uint8_t(out[i / per_byte] | (c << ((i % per_byte) * bits)));
  }
}

void quantize_shared_ref(const float* x, uint32_t n, float inv, int32_t limit, unsigned bits, bool stochastic,
                         uint32_t key, uint32_t first, uint8_t* out) {
  const unsigned per_byte = 8 / bits;
  const uint32_t mask = (1u << bits) - 1;
  memset(out, 0, (size_t(n) * bits + 7) / 8);
  const float flimit = float(limit);
  for (uint32_t i = 0; i < n; ++i) {
    const float u = stochastic ? unit_float(hash32(key, first + i)) : 0.5f;
    float t = x[i] * inv + u;
    // Clamp in float first (no overflow in the conversion), then floor.
    t = t < -flimit ? -flimit : t;
    t = t > flimit + 1.0f ? flimit + 1.0f : t;
    int32_t c = int32_t(t);
    if (float(c) > t) --c;  // floor
    c = c > limit ? limit : c;
    c = c < -limit ? -limit : c;
    out[i / per_byte] = uint8_t(out[i / per_byte] | ((uint32_t(c) & mask) << ((i % per_byte) * bits)));
  }
}

size_t count_abs_at_least_ref(const float* x, size_t n, uint32_t key_threshold) {
  size_t count = 0;
  for (size_t i = 0; i < n; ++i) count += (float_bits(x[i]) & 0x7FFFFFFFu) >= key_threshold ? 1 : 0;
  return count;
}

}  // namespace

#if EDGEFL_WITH_HADAMARD
void hadamard_signs_ref(const float* x, uint32_t count, uint32_t padded, uint32_t key, uint32_t first,
                        float* out) {
  for (uint32_t i = 0; i < padded; ++i) {
    const float v = i < count ? x[i] : 0.0f;
    const uint32_t flip = (hash32(key, first + i) & 1u) << 31;
    out[i] = bits_float(float_bits(v) ^ flip);
  }
}

void hadamard_transform_ref(float* v, uint32_t n) {
  for (uint32_t h = 1; h < n; h <<= 1) {
    for (uint32_t i = 0; i < n; i += 2 * h) {
      for (uint32_t j = i; j < i + h; ++j) {
        const float a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
    }
  }
  const float norm = float(1.0 / __builtin_sqrt(double(n)));
  for (uint32_t i = 0; i < n; ++i) v[i] *= norm;
}

void hadamard_quantize_ref(const float* v, uint32_t n, float inv_rms, const float* thresholds,
                           const float* levels, unsigned bits, uint8_t* codes, float dot[4]) {
  const unsigned half = 1u << (bits - 1);
  for (uint32_t i = 0; i < n; ++i) {
    const float z = v[i] * inv_rms;
    unsigned code = 0;  // branchless binary search over the ascending thresholds
    for (unsigned step = half; step >= 1; step >>= 1) code += z > thresholds[code + step - 1] ? step : 0u;
    codes[i] = uint8_t(code);
    dot[i & 3] += v[i] * levels[code];
  }
}
#endif

namespace {

constexpr Kernels kRef = {
    "ref",
    max_abs_bits_ref,
    min_max_ref,
    to_fp16_ref,
    to_bf16_ref,
    nullptr,
    nullptr,
    from_fp16_ref,
    quantize_uniform_ref,
    quantize_shared_ref,
    count_abs_at_least_ref,
    EDGEFL_HADAMARD_REF_KERNELS,
    nullptr,
    nullptr,
};

}  // namespace

const Kernels& kernels_ref() {
  return kRef;
}

#if !defined(EDGEFL_HAVE_AVX2_KERNELS)
const Kernels* kernels_avx2() {
  return nullptr;
}
#endif
#if !defined(EDGEFL_HAVE_NEON_KERNELS)
const Kernels* kernels_neon() {
  return nullptr;
}
#endif

const Kernels& kernels() {
#if !defined(EDGEFL_KERNELS_REF)
  if (const Kernels* avx2 = kernels_avx2()) return *avx2;
  if (const Kernels* neon = kernels_neon()) return *neon;
#endif
  return kRef;
}

}  // namespace edgefl
