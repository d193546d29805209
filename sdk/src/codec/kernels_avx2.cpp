// AVX2 + F16C kernels (and SSE4.2's CRC32, which -mavx2 includes; BMI1). Compiled with -mavx2 -mf16c -mbmi
// for this file only and used only when the CPU has them (kernels()). Each must give the bytes of its twin in
// kernels_ref.cpp: same float operations in the same order (no FMA), same hash per lane.
#include <immintrin.h>
#include <string.h>

#include "codec/kernels.h"
#include "core/bitio.h"
#include "core/cpu.h"
#include "core/crc32c.h"
#include "core/half.h"
#include "core/rng.h"

namespace edgefl {

namespace {

inline __m256i hash32_x8(__m256i key, __m256i index) {
  __m256i x = _mm256_xor_si256(index, key);
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7FEB352D));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(int(0x846CA68Bu)));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  return x;
}

// unit_float(hash32(key, first + i .. first + i + 7)).
inline __m256 uniforms_x8(__m256i key, uint32_t first) {
  const __m256i index =
      _mm256_add_epi32(_mm256_set1_epi32(int(first)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256i h = _mm256_srli_epi32(hash32_x8(key, index), 8);
  return _mm256_mul_ps(_mm256_cvtepi32_ps(h), _mm256_set1_ps(1.0f / 16777216.0f));
}

// No namespace-scope vector constants: their initialisers would run AVX2 code at start-up on
// any CPU. Each kernel builds its constants locally.
inline __m256i abs_mask() {
  return _mm256_set1_epi32(0x7FFFFFFF);
}

// 16 floats -> 16 bf16 (32 bytes at out, also returned), the bits of |x| folded into *worst.
inline __m256i bf16_x16(const float* x, uint8_t* out, __m256i* worst) {
  const __m256i round_base = _mm256_set1_epi32(0x7FFF), one = _mm256_set1_epi32(1);
  __m256i u0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  __m256i u1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 8));
  *worst = _mm256_max_epu32(*worst, _mm256_and_si256(u0, abs_mask()));
  *worst = _mm256_max_epu32(*worst, _mm256_and_si256(u1, abs_mask()));
  u0 = _mm256_srli_epi32(
      _mm256_add_epi32(u0, _mm256_add_epi32(round_base, _mm256_and_si256(_mm256_srli_epi32(u0, 16), one))),
      16);
  u1 = _mm256_srli_epi32(
      _mm256_add_epi32(u1, _mm256_add_epi32(round_base, _mm256_and_si256(_mm256_srli_epi32(u1, 16), one))),
      16);
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(u0, u1), 0xD8);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), packed);
  return packed;
}

// 16 floats -> 16 fp16 (32 bytes at out, also returned), the bits of |x| folded into *worst.
inline __m256i fp16_x16(const float* x, uint8_t* out, __m256i* worst) {
  const __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
  *worst = _mm256_max_epu32(*worst, _mm256_and_si256(_mm256_castps_si256(v0), abs_mask()));
  *worst = _mm256_max_epu32(*worst, _mm256_and_si256(_mm256_castps_si256(v1), abs_mask()));
  const __m256i packed = _mm256_set_m128i(_mm256_cvtps_ph(v1, _MM_FROUND_TO_NEAREST_INT),
                                          _mm256_cvtps_ph(v0, _MM_FROUND_TO_NEAREST_INT));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), packed);
  return packed;
}

inline uint32_t max_lane(__m256i v) {
  uint32_t lanes[8];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes), v);
  uint32_t m = 0;
  for (uint32_t l : lanes) m = l > m ? l : m;
  return m;
}

// Converts and checksums in one pass over blocks of three lanes of kCrc32cLaneBytes of output
// each: while block k is converted, 16 floats per lane at a time, block k - 1 (stored one block
// earlier, so its loads no longer wait on store forwarding) is read back by three CRC chains,
// one per lane (the CRC instruction's latency hidden by the other two and by the conversion),
// joined by crc32c_shift_lane. The tail goes through the caller's converter and crc32c_update.
template <__m256i (*Convert16)(const float*, uint8_t*, __m256i*)>
uint32_t convert_and_crc(const float* x, size_t n, uint8_t* out, uint32_t* crc, size_t* done) {
  constexpr size_t kLaneFloats = kCrc32cLaneBytes / 2, kBlockFloats = 3 * kLaneFloats;
  __m256i worst = _mm256_setzero_si256();
  uint32_t c = ~*crc;
  const size_t blocks = n / kBlockFloats;
  for (size_t k = 0; k <= blocks; ++k) {
    const bool convert = k<blocks, checksum = k> 0;
    const float* xa = x + k * kBlockFloats;
    uint8_t* oa = out + 2 * k * kBlockFloats;
    const uint8_t* previous = checksum ? oa - 2 * kBlockFloats : oa;  // block k - 1's output
    uint64_t a = c, b = 0, d = 0;
    for (size_t j = 0; j < kLaneFloats; j += 16) {
      if (convert) {
        Convert16(xa + j, oa + 2 * j, &worst);
        Convert16(xa + kLaneFloats + j, oa + kCrc32cLaneBytes + 2 * j, &worst);
        Convert16(xa + 2 * kLaneFloats + j, oa + 2 * kCrc32cLaneBytes + 2 * j, &worst);
      }
      if (checksum) {
        for (size_t w = 0; w < 32; w += 8) {
          a = _mm_crc32_u64(a, load_le64(previous + 2 * j + w));
          b = _mm_crc32_u64(b, load_le64(previous + kCrc32cLaneBytes + 2 * j + w));
          d = _mm_crc32_u64(d, load_le64(previous + 2 * kCrc32cLaneBytes + 2 * j + w));
        }
      }
    }
    if (checksum) c = crc32c_shift_lane(crc32c_shift_lane(uint32_t(a)) ^ uint32_t(b)) ^ uint32_t(d);
  }
  *crc = ~c;
  *done = blocks * kBlockFloats;
  return max_lane(worst);
}

uint32_t max_abs_bits_avx2(const float* x, size_t n) {
  __m256i m0 = _mm256_setzero_si256(), m1 = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a =
        _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), abs_mask());
    const __m256i b =
        _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 8)), abs_mask());
    m0 = _mm256_max_epu32(m0, a);
    m1 = _mm256_max_epu32(m1, b);
  }
  m0 = _mm256_max_epu32(m0, m1);
  uint32_t lanes[8];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes), m0);
  uint32_t m = 0;
  for (uint32_t v : lanes) m = v > m ? v : m;
  for (; i < n; ++i) {
    const uint32_t a = float_bits(x[i]) & 0x7FFFFFFFu;
    m = a > m ? a : m;
  }
  return m;
}

void min_max_avx2(const float* x, size_t n, float* lo, float* hi) {
  float a = x[0], b = x[0];
  size_t i = 0;
  if (n >= 8) {
    __m256 vlo = _mm256_loadu_ps(x), vhi = vlo;
    for (i = 8; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_loadu_ps(x + i);
      vlo = _mm256_min_ps(vlo, v);
      vhi = _mm256_max_ps(vhi, v);
    }
    float l[8], h[8];
    _mm256_storeu_ps(l, vlo);
    _mm256_storeu_ps(h, vhi);
    a = l[0];
    b = h[0];
    for (int j = 1; j < 8; ++j) {
      a = l[j] < a ? l[j] : a;
      b = h[j] > b ? h[j] : b;
    }
  }
  for (; i < n; ++i) {
    a = x[i] < a ? x[i] : a;
    b = x[i] > b ? x[i] : b;
  }
  *lo = a + 0.0f;
  *hi = b + 0.0f;
}

bool to_fp16_avx2(const float* x, size_t n, uint8_t* out) {
  __m256i worst = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    worst = _mm256_max_epu32(worst, _mm256_and_si256(_mm256_castps_si256(v), abs_mask()));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  bool ok = max_lane(worst) < kFp16OverflowBits;
  for (; i < n; ++i) {
    ok &= (float_bits(x[i]) & 0x7FFFFFFFu) < kFp16OverflowBits;
    const uint16_t h = float_to_fp16(x[i]);
    memcpy(out + 2 * i, &h, 2);
  }
  return ok;
}

bool to_bf16_avx2(const float* x, size_t n, uint8_t* out) {
  __m256i worst = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) bf16_x16(x + i, out + 2 * i, &worst);
  bool ok = max_lane(worst) < kBf16OverflowBits;
  for (; i < n; ++i) {
    ok &= (float_bits(x[i]) & 0x7FFFFFFFu) < kBf16OverflowBits;
    const uint16_t h = float_to_bf16(x[i]);
    memcpy(out + 2 * i, &h, 2);
  }
  return ok;
}

void from_fp16_avx2(const uint8_t* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i))));
  }
  for (; i < n; ++i) out[i] = fp16_to_float(uint16_t(in[2 * i] | (in[2 * i + 1] << 8)));
}

// Packs 32 codes (one per byte, in order, each < 2^bits) into 32 * bits / 8 bytes, LSB-first.
inline void pack32(__m256i codes, unsigned bits, uint8_t* out) {
  switch (bits) {
    case 8: _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), codes); return;
    case 4: {
      // Pairs (c0 + 16 c1) as 16-bit lanes, then back to bytes.
      const __m256i pairs = _mm256_maddubs_epi16(codes, _mm256_set1_epi16(0x1001));
      const __m256i bytes = _mm256_permute4x64_epi64(_mm256_packus_epi16(pairs, pairs), 0xD8);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(bytes));
      return;
    }
    case 2: {
      const __m256i pairs = _mm256_maddubs_epi16(codes, _mm256_set1_epi16(0x0401));  // c0 + 4 c1
      const __m256i bytes = _mm256_permute4x64_epi64(_mm256_packus_epi16(pairs, pairs), 0xD8);
      const __m256i quads = _mm256_maddubs_epi16(bytes, _mm256_set1_epi16(0x1001));  // + 16 (c2 + 4 c3)
      const __m256i packed = _mm256_packus_epi16(quads, quads);
      uint64_t word = uint64_t(_mm256_extract_epi64(packed, 0));
      memcpy(out, &word, 8);
      return;
    }
    default: {  // 1
      const uint32_t mask = uint32_t(_mm256_movemask_epi8(_mm256_slli_epi16(codes, 7)));
      memcpy(out, &mask, 4);
      return;
    }
  }
}

// Eight epi32 codes x4 -> 32 bytes in order.
inline __m256i narrow32(__m256i c0, __m256i c1, __m256i c2, __m256i c3) {
  const __m256i w01 = _mm256_packus_epi32(c0, c1);  // lanes interleaved by 128-bit halves
  const __m256i w23 = _mm256_packus_epi32(c2, c3);
  const __m256i b = _mm256_packus_epi16(w01, w23);
  return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

void quantize_uniform_avx2(const float* x, uint32_t n, float lo, float inv, unsigned bits, bool stochastic,
                           uint32_t key, uint32_t first, uint8_t* out) {
  const __m256 vlo = _mm256_set1_ps(lo), vinv = _mm256_set1_ps(inv), half = _mm256_set1_ps(0.5f);
  const __m256i vmax = _mm256_set1_epi32(int((1u << bits) - 1));
  const __m256i vkey = _mm256_set1_epi32(int(key));
  uint32_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i c[4];
    for (int j = 0; j < 4; ++j) {
      const __m256 u = stochastic ? uniforms_x8(vkey, first + i + 8 * j) : half;
      const __m256 t =
          _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8 * j), vlo), vinv), u);
      c[j] = _mm256_min_epi32(_mm256_cvttps_epi32(t), vmax);
    }
    pack32(narrow32(c[0], c[1], c[2], c[3]), bits, out + i * bits / 8);
  }
  if (i < n)
    kernels_ref().quantize_uniform(x + i, n - i, lo, inv, bits, stochastic, key, first + i,
                                   out + i * bits / 8);
}

void quantize_shared_avx2(const float* x, uint32_t n, float inv, int32_t limit, unsigned bits,
                          bool stochastic, uint32_t key, uint32_t first, uint8_t* out) {
  const __m256 vinv = _mm256_set1_ps(inv), half = _mm256_set1_ps(0.5f);
  const __m256 flo = _mm256_set1_ps(-float(limit)), fhi = _mm256_set1_ps(float(limit) + 1.0f);
  const __m256i vlim = _mm256_set1_epi32(limit), vneg = _mm256_set1_epi32(-limit);
  const __m256i mask = _mm256_set1_epi32(int((1u << bits) - 1));
  const __m256i vkey = _mm256_set1_epi32(int(key));
  uint32_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i c[4];
    for (int j = 0; j < 4; ++j) {
      const __m256 u = stochastic ? uniforms_x8(vkey, first + i + 8 * j) : half;
      __m256 t = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * j), vinv), u);
      t = _mm256_min_ps(_mm256_max_ps(t, flo), fhi);
      __m256i q = _mm256_cvttps_epi32(_mm256_floor_ps(t));
      q = _mm256_max_epi32(_mm256_min_epi32(q, vlim), vneg);
      c[j] = _mm256_and_si256(q, mask);
    }
    pack32(narrow32(c[0], c[1], c[2], c[3]), bits, out + i * bits / 8);
  }
  if (i < n)
    kernels_ref().quantize_shared(x + i, n - i, inv, limit, bits, stochastic, key, first + i,
                                  out + i * bits / 8);
}

size_t count_abs_at_least_avx2(const float* x, size_t n, uint32_t key_threshold) {
  // key >= T  <=>  key > T - 1 (signed compare is safe: keys and T are below 2^31).
  const __m256i t = _mm256_set1_epi32(int(key_threshold) - 1);
  __m256i acc = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i k =
        _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), abs_mask());
    acc = _mm256_sub_epi32(acc, _mm256_cmpgt_epi32(k, t));  // -(-1) per hit
  }
  uint32_t lanes[8];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes), acc);
  size_t count = 0;
  for (uint32_t v : lanes) count += v;
  for (; i < n; ++i) count += (float_bits(x[i]) & 0x7FFFFFFFu) >= key_threshold ? 1 : 0;
  return count;
}

// Floats to convert first so that the 16-bit outputs after them start on a 32-byte boundary
// (stores that straddle cache lines halve the fused kernels' speed); none if out is odd.
size_t floats_to_align(const uint8_t* out, size_t n) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(out);
  const size_t head = (at & 1) != 0 ? 0 : size_t((32 - (at & 31)) & 31) / 2;
  return head < n ? head : n;
}

// A head up to the store alignment, the three-lane blocks, then the tail; the CRC runs over the
// bytes in order, so it does not depend on where the parts begin.
template <__m256i (*Convert16)(const float*, uint8_t*, __m256i*),
          bool (*Convert)(const float*, size_t, uint8_t*)>
bool convert_and_crc_aligned(const float* x, size_t n, uint8_t* out, uint32_t* crc, uint32_t overflow_bits) {
  const size_t head = floats_to_align(out, n);
  bool ok = Convert(x, head, out);
  *crc = crc32c_update(*crc, out, 2 * head);
  size_t done = 0;
  const uint32_t worst = convert_and_crc<Convert16>(x + head, n - head, out + 2 * head, crc, &done);
  done += head;
  ok &= Convert(x + done, n - done, out + 2 * done);
  *crc = crc32c_update(*crc, out + 2 * done, 2 * (n - done));
  return ok && worst < overflow_bits;
}

bool to_bf16_crc_avx2(const float* x, size_t n, uint8_t* out, uint32_t* crc) {
  return convert_and_crc_aligned<bf16_x16, to_bf16_avx2>(x, n, out, crc, kBf16OverflowBits);
}

bool to_fp16_crc_avx2(const float* x, size_t n, uint8_t* out, uint32_t* crc) {
  return convert_and_crc_aligned<fp16_x16, to_fp16_avx2>(x, n, out, crc, kFp16OverflowBits);
}

#if EDGEFL_WITH_HADAMARD
// hq kernels: the same float operations, on the same pairs, in the same order as the scalar
// twins (kernels_ref.cpp), so the bytes match.
void hadamard_signs_avx2(const float* x, uint32_t count, uint32_t padded, uint32_t key, uint32_t first,
                         float* out) {
  const __m256i vkey = _mm256_set1_epi32(int(key)), lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i one = _mm256_set1_epi32(1);
  uint32_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256i h = hash32_x8(vkey, _mm256_add_epi32(_mm256_set1_epi32(int(first + i)), lane));
    const __m256i flip = _mm256_slli_epi32(_mm256_and_si256(h, one), 31);
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_xor_si256(v, flip));
  }
  hadamard_signs_ref(x + i, count - i, padded - i, key, first + i, out + i);
}

// h = 1, 2, 4 inside one vector of 8: the pairs' first and second elements brought into place by
// shuffles, then a + b where the scalar loop writes v[j], a - b where it writes v[j + h].
inline __m256 hadamard_in_vector(__m256 x) {
  __m256 a = _mm256_moveldup_ps(x), b = _mm256_movehdup_ps(x);
  x = _mm256_blend_ps(_mm256_add_ps(a, b), _mm256_sub_ps(a, b), 0xAA);
  a = _mm256_permute_ps(x, 0x44);  // lanes 0 1 0 1 of each half
  b = _mm256_permute_ps(x, 0xEE);  // lanes 2 3 2 3
  x = _mm256_blend_ps(_mm256_add_ps(a, b), _mm256_sub_ps(a, b), 0xCC);
  a = _mm256_permute2f128_ps(x, x, 0x00);
  b = _mm256_permute2f128_ps(x, x, 0x11);
  return _mm256_blend_ps(_mm256_add_ps(a, b), _mm256_sub_ps(a, b), 0xF0);
}

// One butterfly of the scalar loop on a vector pair: (a, b) becomes (a + b, a - b).
inline void butterfly(__m256* a, __m256* b) {
  const __m256 sum = _mm256_add_ps(*a, *b);
  *b = _mm256_sub_ps(*a, *b);
  *a = sum;
}

// Every stage's butterflies are the scalar loop's, on the same pairs, so the result is the same
// bits; only the order in which independent pairs are visited differs. Blocks of 64 floats or
// more: one pass over each 64 floats in eight registers (h = 1 .. 32), then two stages per pass
// (h and 2h on four vectors h apart), the last stage's pass also scaling by 1/sqrt(n). Three
// passes over a block of 256 where a stage per pass took seven.
void hadamard_transform_avx2(float* v, uint32_t n) {
  if (n < 8) {
    hadamard_transform_ref(v, n);
    return;
  }
  const __m256 norm = _mm256_set1_ps(float(1.0 / __builtin_sqrt(double(n))));
  if (n < 64) {
    for (uint32_t i = 0; i < n; i += 8) _mm256_storeu_ps(v + i, hadamard_in_vector(_mm256_loadu_ps(v + i)));
    for (uint32_t h = 8; h < n; h <<= 1) {
      for (uint32_t i = 0; i < n; i += 2 * h) {
        for (uint32_t j = i; j < i + h; j += 8) {
          const __m256 a = _mm256_loadu_ps(v + j), b = _mm256_loadu_ps(v + j + h);
          _mm256_storeu_ps(v + j, _mm256_add_ps(a, b));
          _mm256_storeu_ps(v + j + h, _mm256_sub_ps(a, b));
        }
      }
    }
    for (uint32_t i = 0; i < n; i += 8) _mm256_storeu_ps(v + i, _mm256_mul_ps(_mm256_loadu_ps(v + i), norm));
    return;
  }
  const bool only_pass = n == 64;
  for (uint32_t i = 0; i < n; i += 64) {
    __m256 r[8];
    for (int k = 0; k < 8; ++k) r[k] = hadamard_in_vector(_mm256_loadu_ps(v + i + 8 * k));
    for (int k = 0; k < 8; k += 2) butterfly(&r[k], &r[k + 1]);  // h = 8
    butterfly(&r[0], &r[2]);                                     // h = 16
    butterfly(&r[1], &r[3]);
    butterfly(&r[4], &r[6]);
    butterfly(&r[5], &r[7]);
    for (int k = 0; k < 4; ++k) butterfly(&r[k], &r[k + 4]);  // h = 32
    for (int k = 0; k < 8; ++k) {
      _mm256_storeu_ps(v + i + 8 * k, only_pass ? _mm256_mul_ps(r[k], norm) : r[k]);
    }
  }
  uint32_t h = 64;
  for (; 4 * h <= n; h *= 4) {
    const bool last = 4 * h == n;
    for (uint32_t i = 0; i < n; i += 4 * h) {
      for (uint32_t j = i; j < i + h; j += 8) {
        __m256 a = _mm256_loadu_ps(v + j), b = _mm256_loadu_ps(v + j + h);
        __m256 c = _mm256_loadu_ps(v + j + 2 * h), d = _mm256_loadu_ps(v + j + 3 * h);
        butterfly(&a, &b);  // stage h
        butterfly(&c, &d);
        butterfly(&a, &c);  // stage 2h
        butterfly(&b, &d);
        if (last) {
          a = _mm256_mul_ps(a, norm);
          b = _mm256_mul_ps(b, norm);
          c = _mm256_mul_ps(c, norm);
          d = _mm256_mul_ps(d, norm);
        }
        _mm256_storeu_ps(v + j, a);
        _mm256_storeu_ps(v + j + h, b);
        _mm256_storeu_ps(v + j + 2 * h, c);
        _mm256_storeu_ps(v + j + 3 * h, d);
      }
    }
  }
  if (h < n) {  // h == n / 2: one stage left, and the scaling
    for (uint32_t j = 0; j < h; j += 8) {
      __m256 a = _mm256_loadu_ps(v + j), b = _mm256_loadu_ps(v + j + h);
      butterfly(&a, &b);
      _mm256_storeu_ps(v + j, _mm256_mul_ps(a, norm));
      _mm256_storeu_ps(v + j + h, _mm256_mul_ps(b, norm));
    }
  }
}

// The end of a quantizer step of eight values: the products x * level added to acc's four lanes
// (i .. i+3, then i+4 .. i+7, the order of dot[i % 4]), and the eight codes (< 16) stored as
// bytes at out[0..8). Returns the new acc.
inline __m128 store_codes_and_add_products(__m256 x, __m256 level, __m256i code, uint8_t* out, __m128 acc) {
  const __m256 product = _mm256_mul_ps(x, level);
  acc = _mm_add_ps(acc, _mm256_castps256_ps128(product));
  acc = _mm_add_ps(acc, _mm256_extractf128_ps(product, 1));
  // The codes narrowed to bytes in each 128-bit half, then stored as two words.
  const __m256i words = _mm256_packus_epi32(code, code);
  const __m256i narrow = _mm256_packus_epi16(words, words);
  const uint32_t low_codes = uint32_t(_mm_cvtsi128_si32(_mm256_castsi256_si128(narrow)));
  const uint32_t high_codes = uint32_t(_mm_cvtsi128_si32(_mm256_extracti128_si256(narrow, 1)));
  memcpy(out, &low_codes, 4);
  memcpy(out + 4, &high_codes, 4);
  return acc;
}

// hadamard_quantize with mirrored tables: half the compares. With z = v[i] * inv_rms and
// m = #(positive thresholds below |z|) the code is half + m for z > 0. For z <= 0 (or NaN) the
// thresholds above z are the negations of the positive ones at or below |z|, so the code is
// half - 1 - #(t <= |z|); t <= |z| is bits(|z|) + 1 > bits(t) for the non-negative floats, whose
// bits order as integers. The level is the positive level of m, negated for z <= 0. Same codes,
// levels and products as the binary search.
void hadamard_quantize_mirrored_avx2(const float* v, uint32_t n, float inv_rms, const float* thresholds,
                                     const float* levels, unsigned bits, uint8_t* codes, float dot[4]) {
  const unsigned half = 1u << (bits - 1);
  int32_t upper_bits[7] = {};
  for (unsigned k = 1; k < half; ++k) upper_bits[k - 1] = int32_t(float_bits(thresholds[half - 1 + k]));
  float upper_levels[8] = {};
  for (unsigned k = 0; k < half; ++k) upper_levels[k] = levels[half + k];
  const __m256 magnitudes = _mm256_loadu_ps(upper_levels);
  const __m256 scale = _mm256_set1_ps(inv_rms);
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF), one = _mm256_set1_epi32(1);
  const __m256i nan_bits = _mm256_set1_epi32(0x7F800001);
  const __m256i above_middle = _mm256_set1_epi32(int(half)), below_middle = _mm256_set1_epi32(int(half) - 1);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m128 acc = _mm_loadu_ps(dot);
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(v + i);
    const __m256 z = _mm256_mul_ps(x, scale);
    const __m256 positive = _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_GT_OQ);
    const __m256i positive_mask = _mm256_castps_si256(positive);
    // |z|'s bits, plus one where z <= 0 (a compare "greater than" that counts "at or below").
    // Every NaN's bits are first made those of one NaN above Inf, so that no key reaches 2^31
    // (the compares are signed) and a NaN takes code 0, as in the binary search.
    const __m256i magnitude = _mm256_min_epu32(_mm256_and_si256(_mm256_castps_si256(z), abs_mask), nan_bits);
    const __m256i key = _mm256_add_epi32(magnitude, _mm256_add_epi32(one, positive_mask));
    __m256i m = _mm256_setzero_si256();
    for (unsigned k = 0; k + 1 < half; ++k) {
      m = _mm256_sub_epi32(m, _mm256_cmpgt_epi32(key, _mm256_set1_epi32(upper_bits[k])));
    }
    const __m256i code = _mm256_blendv_epi8(_mm256_sub_epi32(below_middle, m),
                                            _mm256_add_epi32(above_middle, m), positive_mask);
    const __m256 level =
        _mm256_xor_ps(_mm256_permutevar8x32_ps(magnitudes, m), _mm256_andnot_ps(positive, sign));
    acc = store_codes_and_add_products(x, level, code, codes + i, acc);
  }
  _mm_storeu_ps(dot, acc);
  if (i < n) hadamard_quantize_ref(v + i, n - i, inv_rms, thresholds, levels, bits, codes + i, dot);
}

void hadamard_quantize_avx2(const float* v, uint32_t n, float inv_rms, const float* thresholds,
                            const float* levels, unsigned bits, uint8_t* codes, float dot[4]) {
  if (hadamard_tables_mirrored(thresholds, levels, bits)) {
    hadamard_quantize_mirrored_avx2(v, n, inv_rms, thresholds, levels, bits, codes, dot);
    return;
  }
  const unsigned level_count = 1u << bits;
  float level_table[16] = {};
  for (unsigned j = 0; j < level_count; ++j) level_table[j] = levels[j];
  const __m256 levels_low = _mm256_loadu_ps(level_table), levels_high = _mm256_loadu_ps(level_table + 8);
  const __m256 scale = _mm256_set1_ps(inv_rms);
  __m128 acc = _mm_loadu_ps(dot);
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(v + i);
    const __m256 z = _mm256_mul_ps(x, scale);
    // The binary search's result with ascending thresholds: how many lie below z.
    __m256i code = _mm256_setzero_si256();
    for (unsigned t = 0; t + 1 < level_count; ++t) {
      const __m256 above = _mm256_cmp_ps(z, _mm256_set1_ps(thresholds[t]), _CMP_GT_OQ);
      code = _mm256_sub_epi32(code, _mm256_castps_si256(above));
    }
    __m256 level = _mm256_permutevar8x32_ps(levels_low, code);
    if (level_count > 8) {
      const __m256 high = _mm256_permutevar8x32_ps(levels_high, code);
      const __m256i upper = _mm256_cmpgt_epi32(code, _mm256_set1_epi32(7));
      level = _mm256_blendv_ps(level, high, _mm256_castsi256_ps(upper));
    }
    acc = store_codes_and_add_products(x, level, code, codes + i, acc);
  }
  _mm_storeu_ps(dot, acc);
  if (i < n) hadamard_quantize_ref(v + i, n - i, inv_rms, thresholds, levels, bits, codes + i, dot);
}
#endif

// Each byte's five digits select 0, a or -a from one register (a permute); the eight floats are
// stored at 5 i, the three past the fifth overwritten by the next byte's. The last byte: five
// scalar stores, so nothing is written past 5 x bytes.
void tern_decode_avx2(const uint8_t* packed, uint32_t bytes, float a, float* out) {
  const float values3[3] = {0.0f, a, -a};
  const __m256 values = _mm256_setr_ps(values3[0], values3[1], values3[2], 0.0f, 0.0f, 0.0f, 0.0f, 0.0f);
  uint32_t i = 0;
  for (; i + 1 < bytes; ++i) {
    const __m128i digits = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(kTritDigits.digits[packed[i]]));
    _mm256_storeu_ps(out + 5 * size_t(i), _mm256_permutevar8x32_ps(values, _mm256_cvtepu8_epi32(digits)));
  }
  for (; i < bytes; ++i) {
    for (unsigned j = 0; j < 5; ++j) out[5 * size_t(i) + j] = values3[kTritDigits.digits[packed[i]][j]];
  }
}

// The set bits of each byte value, lowest first, each row padded to 8 (for 8-byte loads), and
// how many there are.
struct BytePositions {
  uint8_t position[256][8];
  uint8_t count[256];
};
constexpr BytePositions make_byte_positions() {
  BytePositions t{};
  for (unsigned byte = 0; byte < 256; ++byte) {
    unsigned c = 0;
    for (unsigned bit = 0; bit < 8; ++bit) {
      if ((byte >> bit & 1) != 0) t.position[byte][c++] = uint8_t(bit);
    }
    t.count[byte] = uint8_t(c);
  }
  return t;
}
constexpr BytePositions kBytePositions = make_byte_positions();

// Block Rice (index_coding.h), whole blocks of 16 gaps, a batch of blocks at a time, in three
// passes: the parameter codes of the batch's blocks (part A, scalar); the positions of the ones
// of part B, a byte at a time from a table (eight positions stored, the byte's count kept: no
// branch per one); then per block and 8 gaps, the remainders by a byte shuffle of 16 bytes (a
// gather for parameters above 15 and at part A's end), the quotients by a lane shift of the ones'
// positions, gap + 1 and a prefix sum. The twin is
// BlockRiceWordReader::next_many's own loop (the kernels test compares them call by call); a block
// outside the limits below is left to it.
uint32_t block_rice_blocks_avx2(BlockRiceState* s, uint32_t* out, uint32_t count) {
  constexpr uint32_t kGaps = 16;  // index_coding::kBlockRiceGaps
  constexpr unsigned kMaxR = 24;  // (offset & 7) + r <= 31: one 32-bit load per remainder
  // Ones within 2^26 bits of the batch's start and gaps below 2^26 + 2^24: from a next index below
  // 2^31, the 16 indices of a block stay below 2^32 (32-bit lanes, no carry lost).
  constexpr uint64_t kOneLimit = uint64_t(1) << 26;
  constexpr uint32_t kBatch = 8;  // blocks per pass
  // The ones' positions: a batch's, and what the last word decoded holds beyond them (64), and
  // the byte stores' overhang (8).
  constexpr uint32_t kOnes = kBatch * kGaps + 64 + 8;
  struct Block {
    uint64_t first_bit;  // the first remainder's bit in part A
    unsigned r;
  };
  if (s->failed || s->left != 0) return 0;
  const uint8_t* const a = s->a;
  const uint8_t* const b = s->b;
  const size_t a_size = s->a_size, b_size = s->b_size;
  BlockRiceState at = *s;  // the stream after the last block committed
  uint32_t done = 0;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i rotate_up = _mm256_setr_epi32(7, 0, 1, 2, 3, 4, 5, 6);
  const __m256i last_lane = _mm256_set1_epi32(7);
  const __m256i one = _mm256_set1_epi32(1);
  // Remainders of at most kShuffleMaxR bits: a half's 8 end within 16 bytes of its first byte
  // (at bit 7 + 8 r - 1 at most), so one 16-byte load and a byte shuffle read them instead of a
  // gather (slow on some cores: AMD Zen 3). A lane's byte past the 16 wraps to garbage above its
  // remainder's bits, which the mask clears.
  constexpr unsigned kShuffleMaxR = 15;
  const __m256i spread_byte0 = _mm256_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12, 0, 0, 0,
                                                0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12);
  const __m256i byte_steps = _mm256_set1_epi32(0x03020100);
  const uint32_t n_limit = uint32_t(at.n < kOneLimit ? at.n : kOneLimit);
  Block batch[kBatch];
  alignas(32) uint32_t ones[kOnes];
  for (;;) {
    uint64_t wanted = (count - done) / kGaps;
    wanted = wanted < (at.k - at.decoded) / kGaps ? wanted : (at.k - at.decoded) / kGaps;
    wanted = wanted < kBatch ? wanted : kBatch;
    // Pass 1, scalar: the parameter codes.
    uint32_t prepared = 0;
    uint64_t a_bit = at.a_bit;
    unsigned r = at.r;
    for (; prepared < wanted; ++prepared) {
      // The parameter code (index_coding.h: 0 same, 10x one step, 11xxxxx absolute), without
      // branches: a parameter out of [0, kMaxR] (a step below 0 wraps) leaves the block.
      if ((a_bit >> 3) + 8 > a_size) break;
      const uint64_t code = load_le64(a + size_t(a_bit >> 3)) >> unsigned(a_bit & 7);
      const bool coded = (code & 1) != 0, absolute = (code & 2) != 0;
      const unsigned stepped = (code & 4) != 0 ? r - 1 : r + 1;
      const unsigned block_r = !coded ? r : absolute ? unsigned(code >> 2) & 31u : stepped;
      const unsigned used = !coded ? 1u : absolute ? 7u : 3u;
      if (block_r > kMaxR) break;
      const uint64_t first_bit = a_bit + used;
      if (size_t(first_bit >> 3) + ((unsigned(first_bit & 7) + (kGaps - 1) * block_r) >> 3) + 4 > a_size)
        break;
      batch[prepared].first_bit = first_bit;
      batch[prepared].r = block_r;
      a_bit = first_bit + uint64_t(kGaps) * block_r;
      r = block_r;
    }
    // Pass 2: the positions of part B's next ones (relative to the previous one + 1), whole
    // 8-byte words (as the loop loads them) while fewer than the prepared blocks need are found.
    const uint64_t base = at.previous_one + 1;
    uint32_t found = 0;
    {
      uint64_t w = at.word, w_bit = at.word_bit;
      size_t nb = at.next_byte;
      const uint32_t need = prepared * kGaps;
      while (found < need) {
        if (w == 0) {
          if (nb + 8 > b_size) break;
          w = load_le64(b + nb);
          w_bit = uint64_t(nb) * 8;
          nb += 8;
          continue;
        }
        // The word's bit 0, relative (modulo 2^64: the first word's may precede base by < 64).
        const uint64_t relative = w_bit - base;
        if (relative + 64 > kOneLimit && relative < ~uint64_t(0) - 64) break;
        for (unsigned byte = 0; byte < 8; ++byte) {
          const unsigned bits = unsigned(w >> (8 * byte)) & 0xFFu;
          const __m256i positions = _mm256_cvtepu8_epi32(
              _mm_loadl_epi64(reinterpret_cast<const __m128i*>(kBytePositions.position[bits])));
          _mm256_storeu_si256(
              reinterpret_cast<__m256i*>(ones + found),
              _mm256_add_epi32(positions, _mm256_set1_epi32(int(uint32_t(relative) + 8 * byte))));
          found += kBytePositions.count[bits];
        }
        w = 0;
      }
    }
    prepared = found / kGaps < prepared ? found / kGaps : prepared;
    // Pass 3, vector: the indices of the prepared blocks, in order, up to the first refused.
    uint32_t decoded = 0;
    for (; decoded < prepared; ++decoded) {
      const Block& blk = batch[decoded];
      if (at.next_index >= (uint64_t(1) << 31)) break;
      const unsigned block_r = blk.r;
      const __m256i max_quotient = _mm256_set1_epi32(int(n_limit >> block_r));
      const __m128i shift = _mm_cvtsi32_si128(int(block_r));
      const __m256i mask = _mm256_set1_epi32(block_r == 0 ? 0 : int((1u << block_r) - 1));
      const __m256i step = _mm256_mullo_epi32(lane, _mm256_set1_epi32(int(block_r)));
      const size_t a_byte = size_t(blk.first_bit >> 3);
      const uint32_t* const end = ones + decoded * kGaps;
      __m256i previous_end = _mm256_set1_epi32(decoded == 0 ? -1 : int(end[-1]));
      __m256i sum_before = _mm256_setzero_si256();  // the gaps + 1 of the half before
      __m256i too_far = _mm256_setzero_si256();
      __m256i sum[2];  // gap + 1, summed from the block's start
      for (unsigned h = 0; h < 2; ++h) {
        const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(end + 8 * h));
        const __m256i before =
            _mm256_blend_epi32(_mm256_permutevar8x32_epi32(e, rotate_up), previous_end, 0x01);
        const __m256i quotient = _mm256_sub_epi32(_mm256_sub_epi32(e, before), one);
        too_far = _mm256_or_si256(too_far, _mm256_cmpgt_epi32(quotient, max_quotient));
        // The 8 remainders' bits, from the first of this half's bytes.
        const unsigned half_bit = unsigned(blk.first_bit & 7) + 8 * h * block_r;
        const size_t half_byte = size_t(half_bit >> 3);
        const __m256i bit = _mm256_add_epi32(step, _mm256_set1_epi32(int(half_bit & 7)));
        __m256i loaded;  // per lane: the 4 bytes from its remainder's first
        if (block_r <= kShuffleMaxR && a_byte + half_byte + 16 <= a_size) {
          // Bytes bit / 8 .. + 3 of the 16 into each lane.
          const __m256i bytes = _mm256_broadcastsi128_si256(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + a_byte + half_byte)));
          const __m256i first = _mm256_shuffle_epi8(_mm256_srli_epi32(bit, 3), spread_byte0);
          loaded = _mm256_shuffle_epi8(bytes, _mm256_add_epi8(first, byte_steps));
        } else {
          loaded = _mm256_i32gather_epi32(reinterpret_cast<const int*>(a + a_byte + half_byte),
                                          _mm256_srli_epi32(bit, 3), 1);
        }
        const __m256i low =
            _mm256_and_si256(_mm256_srlv_epi32(loaded, _mm256_and_si256(bit, _mm256_set1_epi32(7))), mask);
        __m256i x = _mm256_add_epi32(_mm256_or_si256(_mm256_sll_epi32(quotient, shift), low), one);
        x = _mm256_add_epi32(x, _mm256_slli_si256(x, 4));
        x = _mm256_add_epi32(x, _mm256_slli_si256(x, 8));
        const __m256i low_total = _mm256_shuffle_epi32(x, 0xFF);
        x = _mm256_add_epi32(x, _mm256_permute2x128_si256(low_total, low_total, 0x08));
        sum[h] = _mm256_add_epi32(x, sum_before);
        sum_before = _mm256_permutevar8x32_epi32(sum[h], last_lane);
        previous_end = _mm256_permutevar8x32_epi32(e, last_lane);
      }
      if (_mm256_movemask_epi8(too_far) != 0) break;
      // index t = next_index - 1 + (gap + 1 summed to t): from block to block, one add.
      const __m256i carry = _mm256_set1_epi32(int(uint32_t(at.next_index) - 1));
      uint32_t* const to = out + done + decoded * kGaps;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(to), _mm256_add_epi32(sum[0], carry));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + 8), _mm256_add_epi32(sum[1], carry));
      at.next_index += uint32_t(_mm256_extract_epi32(sum[1], 7));
    }
    if (decoded > 0) {
      // The stream after the last decoded block: part A past its remainders; part B's word
      // holding its last one, with the bits up to that one taken.
      const Block& last = batch[decoded - 1];
      at.a_bit = last.first_bit + uint64_t(kGaps) * last.r;
      at.r = last.r;
      const uint64_t last_one = base + ones[decoded * kGaps - 1];
      const uint64_t word_bit = last_one & ~uint64_t(63);
      const unsigned taken = unsigned(last_one & 63) + 1;  // bits 0 .. last one of its word
      // The scalar reader may have loaded that word zero-padded, past the part's end.
      const size_t word_byte = size_t(word_bit >> 3);
      uint64_t word = 0;
      if (word_byte + 8 <= b_size) {
        word = load_le64(b + word_byte);
      } else {
        for (size_t i = 0; word_byte + i < b_size; ++i) word |= uint64_t(b[word_byte + i]) << (8 * i);
      }
      at.word = taken == 64 ? 0 : word >> taken << taken;
      at.word_bit = word_bit;
      at.next_byte = size_t(word_bit >> 3) + 8;
      at.previous_one = last_one;
      at.decoded += uint64_t(decoded) * kGaps;
      done += decoded * kGaps;
    }
    if (decoded < wanted || wanted == 0) break;  // a block refused, or no whole block wanted
  }
  at.mask = at.r == 0 ? 0 : (~uint64_t(0) >> (64 - at.r));
  *s = at;
  return done;
}

constexpr Kernels kAvx2 = {
    "avx2",
    max_abs_bits_avx2,
    min_max_avx2,
    to_fp16_avx2,
    to_bf16_avx2,
    to_fp16_crc_avx2,
    to_bf16_crc_avx2,
    from_fp16_avx2,
    quantize_uniform_avx2,
    quantize_shared_avx2,
    count_abs_at_least_avx2,
#if EDGEFL_WITH_HADAMARD
    hadamard_signs_avx2,
    hadamard_transform_avx2,
    hadamard_quantize_avx2,
#else
    nullptr,
    nullptr,
    nullptr,
#endif
    tern_decode_avx2,
    block_rice_blocks_avx2,
};

}  // namespace

const Kernels* kernels_avx2() {
  // The fused checksums use SSE4.2's CRC32 (every AVX2 CPU has it; checked all the same).
  return cpu_features().avx2 && cpu_features().sse42 ? &kAvx2 : nullptr;
}

}  // namespace edgefl
