#include "codec/values.h"

#include "codec/kernels.h"
#include "core/rng.h"

namespace edgefl {
namespace values {

namespace {

// Lloyd-Max quantizers of N(0, 1) (J. Max, "Quantizing for minimum distortion", IRE Trans.
// Information Theory, 1960), reconstruction levels in ascending order.
constexpr float kLevels1[2] = {-0.7979f, 0.7979f};
constexpr float kLevels2[4] = {-1.5104f, -0.4528f, 0.4528f, 1.5104f};
constexpr float kLevels3[8] = {-2.1520f, -1.3439f, -0.7560f, -0.2451f, 0.2451f, 0.7560f, 1.3439f, 2.1520f};
constexpr float kLevels4[16] = {-2.7326f, -2.0690f, -1.6180f, -1.2562f, -0.9424f, -0.6568f,
                                -0.3881f, -0.1284f, 0.1284f,  0.3881f,  0.6568f,  0.9424f,
                                1.2562f,  1.6180f,  2.0690f,  2.7326f};

inline float sqrt_float(double v) {
  return float(__builtin_sqrt(v));
}

bool scale_ok(float s) {
  return s >= 0.0f && s <= kMaxScale;
}  // false for NaN

// Decision thresholds (midpoints of adjacent levels), padded to 15 entries.
struct Thresholds {
  float t[15];
};
constexpr Thresholds make_thresholds(const float* levels, unsigned count) {
  Thresholds th{};
  for (unsigned j = 0; j + 1 < count; ++j) th.t[j] = 0.5f * (levels[j] + levels[j + 1]);
  return th;
}
constexpr Thresholds kThresholds[4] = {make_thresholds(kLevels1, 2), make_thresholds(kLevels2, 4),
                                       make_thresholds(kLevels3, 8), make_thresholds(kLevels4, 16)};

#if EDGEFL_WITH_HADAMARD
// Packs one code per byte into `bits`-wide fields, LSB-first (pack_codes_of_width, or a BitWriter
// when built for size).
void pack_codes(const uint8_t* codes, uint32_t count, unsigned bits, uint8_t* out) {
#if !defined(__OPTIMIZE_SIZE__)
  with_code_width(bits, [&](auto width) { pack_codes_of_width<decltype(width)::kBits>(codes, count, out); });
#else
  BitWriter w(out, (size_t(count) * bits + 7) / 8);
  for (uint32_t i = 0; i < count; ++i) w.put(codes[i], bits);
  w.finish();
#endif
}

void encode_hadamard(const Params& p, const float* v, uint32_t count, uint32_t first, uint8_t* out,
                     float* buf) {
  const uint32_t padded = next_pow2(count);
  const Kernels& k = kernels();
  k.hadamard_signs(v, count, padded, p.sign_key, first, buf);
  k.hadamard_transform(buf, padded);
  // Sums in float, in a fixed order (four interleaved partial sums: sq[i % 4] in the order of
  // i), so every platform agrees.
  float sq[4] = {0, 0, 0, 0};
  uint32_t i = 0;
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__OPTIMIZE_SIZE__)
  // The four sums as the lanes of one vector (one multiply and one add per four floats; scalar
  // code here shuffled the lanes apart and added them one by one).
  typedef float Lanes4 __attribute__((vector_size(4 * sizeof(float)), aligned(sizeof(float))));
  Lanes4 lanes = {0, 0, 0, 0};
  for (; i + 4 <= padded; i += 4) {
    Lanes4 x;
    memcpy(&x, buf + i, sizeof x);
    lanes += x * x;
  }
  for (unsigned r = 0; r < 4; ++r) sq[r] = lanes[r];
#endif
  for (; i < padded; ++i) sq[i & 3] += buf[i] * buf[i];
  const float sum_sq = (sq[0] + sq[1]) + (sq[2] + sq[3]);
  const float* levels = lloyd_max_levels(p.bits);
  const float* thr = kThresholds[p.bits - 1].t;
  uint8_t codes[kMaxHadamardBlock];
  float alpha = 0.0f;
  if (sum_sq > 0.0f) {
    const float inv_rms = 1.0f / float(__builtin_sqrt(double(sum_sq) / double(padded)));
    float dot[4] = {0, 0, 0, 0};
    k.hadamard_quantize(buf, padded, inv_rms, thr, levels, p.bits, codes, dot);
    const float d = (dot[0] + dot[1]) + (dot[2] + dot[3]);
    // EDEN's unbiasing scale (Vargaftik et al., "EDEN: Communication-Efficient and Robust
    // Distributed Mean Estimation for Federated Learning", ICML 2022): <y, alpha q> = ||y||^2.
    alpha = d > 0.0f ? sum_sq / d : 0.0f;
  } else {
    memset(codes, 0, padded);
  }
  pack_codes(codes, padded, p.bits, out + 4);
  memcpy(out, &alpha, 4);
}
#endif  // EDGEFL_WITH_HADAMARD

}  // namespace

#if EDGEFL_WITH_HADAMARD
void decode_hadamard_block(const Params& p, const uint8_t* g, uint32_t count, uint32_t first, float* out) {
  const uint32_t padded = next_pow2(count);
  const float* levels = lloyd_max_levels(p.bits);
  float a;
  memcpy(&a, g, 4);
  const uint8_t* codes = g + 4;
#if !defined(__OPTIMIZE_SIZE__)
  with_code_width(p.bits, [&](auto width) {  // 1 to 4 bits: a byte of codes an iteration
    unpack_codes<decltype(width)::kBits>(codes, padded,
                                         [&](uint32_t i, unsigned code) { out[i] = a * levels[code]; });
  });
#else
  BitReader r(codes, size_t((uint64_t(padded) * p.bits + 7) / 8));
  for (uint32_t i = 0; i < padded; ++i) out[i] = a * levels[r.get(p.bits)];
#endif
  const Kernels& k = kernels();
  k.hadamard_transform(out, padded);
  k.hadamard_signs(out, count, count, p.sign_key, first, out);
}
#endif

const float* lloyd_max_levels(unsigned bits) {
  switch (bits) {
    case 1: return kLevels1;
    case 2: return kLevels2;
    case 3: return kLevels3;
    default: return kLevels4;
  }
}

namespace {

// Uniform, sign + magnitude: a sign bit and stochastic levels of |x| over [min |x|, max |x|] of
// the group.
Status encode_signmag_group(const Params& p, const float* v, uint32_t count, uint32_t first, uint8_t* out) {
  float lo = 3.0e38f, hi = 0.0f;
  for (uint32_t i = 0; i < count; ++i) {
    const float m = v[i] < 0.0f ? -v[i] : v[i];
    lo = m < lo ? m : lo;
    hi = m > hi ? m : hi;
  }
  const unsigned mag_bits = p.bits - 1u;
  const uint32_t top = (1u << mag_bits) - 1;
  float step = top > 0 ? (hi - lo) / float(top) : 0.0f;
  if (!(step <= kMaxScale) || !(hi <= kMaxScale)) return Status::kValueOutOfRange;
  if (!(step >= 1e-30f)) step = 0.0f;
  memcpy(out, &lo, 4);
  memcpy(out + 4, &step, 4);
  const float inv = step > 0.0f ? 1.0f / step : 0.0f;
  BitWriter w(out + 8, size_t((uint64_t(count) * p.bits + 7) / 8));
  for (uint32_t i = 0; i < count; ++i) {
    const float m = v[i] < 0.0f ? -v[i] : v[i];
    const float t = (m - lo) * inv;
    const float u = p.stochastic ? unit_float(hash32(p.round_key, first + i)) : 0.5f;
    uint32_t level = uint32_t(t + u);
    level = level > top ? top : level;
    w.put(level | (uint32_t(v[i] < 0.0f) << mag_bits), p.bits);
  }
  w.finish();
  return Status::kOk;
}

// Uniform, blocked: the group's min and step, then bits-wide stochastic (or nearest) levels.
Status encode_uniform_group(const Params& p, const Kernels& k, const float* v, uint32_t count, uint32_t first,
                            uint8_t* out) {
  float lo, hi;
  k.min_max(v, count, &lo, &hi);
  const float levels = float((1u << p.bits) - 1);
  float step = (hi - lo) / levels;
  if (!(step <= kMaxScale) || !(lo >= -kMaxScale && lo <= kMaxScale)) return Status::kValueOutOfRange;
  if (!(step >= 1e-30f)) step = 0.0f;  // constant block (or denormal range): every code 0
  memcpy(out, &lo, 4);
  memcpy(out + 4, &step, 4);
  const float inv = step > 0.0f ? 1.0f / step : 0.0f;
  k.quantize_uniform(v, count, lo, inv, p.bits, p.stochastic, p.round_key, first, out + 8);
  return Status::kOk;
}

// QSGD (Alistarh et al. 2017): the group's L2 norm / s, then sign and one of s+1 levels.
Status encode_qsgd_group(const Params& p, const float* v, uint32_t count, uint32_t first, uint8_t* out) {
  double sq = 0.0;
  for (uint32_t i = 0; i < count; ++i) sq += double(v[i]) * double(v[i]);
  const float norm = sqrt_float(sq);
  if (!(norm <= kMaxScale * p.levels)) return Status::kValueOutOfRange;
  const float scale = norm / float(p.levels);
  memcpy(out, &scale, 4);
  BitWriter w(out + 4, size_t((uint64_t(count) * p.bits + 7) / 8));
  const float inv = norm > 0.0f ? float(p.levels) / norm : 0.0f;
  const unsigned level_bits = p.bits - 1u;
  for (uint32_t i = 0; i < count; ++i) {
    const float a = v[i] < 0.0f ? -v[i] : v[i];
    uint32_t level = uint32_t(a * inv + unit_float(hash32(p.round_key, first + i)));
    if (level > p.levels) level = p.levels;
    const uint32_t sign = (v[i] < 0.0f && level != 0) ? 1u : 0u;
    w.put(level | (sign << level_bits), p.bits);
  }
  w.finish();
  return Status::kOk;
}

// TernGrad (Wen et al. 2017): max |x|, then {-1, 0, +1} five to a byte (base 3).
Status encode_terngrad_group(const Params& p, const float* v, uint32_t count, uint32_t first, uint8_t* out) {
  float m = 0.0f;
  for (uint32_t i = 0; i < count; ++i) {
    const float a = v[i] < 0.0f ? -v[i] : v[i];
    m = a > m ? a : m;
  }
  if (!(m <= kMaxScale)) return Status::kValueOutOfRange;
  memcpy(out, &m, 4);
  const float inv = m > 0.0f ? 1.0f / m : 0.0f;
  uint8_t* packed = out + 4;
#if !defined(__OPTIMIZE_SIZE__)
  // The digits of runs of 5 * 16 values first (a branch-free loop), then five to a byte.
  uint32_t i = 0;
  for (; i + 80 <= count; i += 80) {
    uint8_t digit[80];
    for (uint32_t j = 0; j < 80; ++j) {
      const float x = v[i + j];
      const float a = x < 0.0f ? -x : x;
      const bool keep = a * inv + unit_float(hash32(p.round_key, first + i + j)) >= 1.0f;
      digit[j] = uint8_t(keep ? (x < 0.0f ? 2u : 1u) : 0u);
    }
    for (uint32_t b = 0; b < 16; ++b) {
      const uint8_t* d = digit + 5 * b;
      packed[i / 5 + b] = uint8_t(d[0] + 3 * d[1] + 9 * d[2] + 27 * d[3] + 81 * d[4]);
    }
  }
#else
  uint32_t i = 0;
#endif
  for (; i < count; i += 5) {
    unsigned byte = 0, mul = 1;
    for (uint32_t j = 0; j < 5 && i + j < count; ++j) {
      const float x = v[i + j];
      const float a = x < 0.0f ? -x : x;
      const bool keep = a * inv + unit_float(hash32(p.round_key, first + i + j)) >= 1.0f;
      byte += (keep ? (x < 0.0f ? 2u : 1u) : 0u) * mul;
      mul *= 3;
    }
    packed[i / 5] = uint8_t(byte);
  }
  return Status::kOk;
}

// Scaled sign: mean |x|, then one sign bit per value.
Status encode_sign_group(const float* v, uint32_t count, uint8_t* out) {
  // Mean |x| from eight partial sums in a fixed order (the same on every platform).
  float partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  uint8_t* bitsp = out + 4;
  uint32_t i = 0;
  for (; i + 8 <= count; i += 8) {
    unsigned byte = 0;
    for (unsigned j = 0; j < 8; ++j) {
      const uint32_t u = float_bits(v[i + j]);
      partial[j] += bits_float(u & 0x7FFFFFFFu);
      byte |= unsigned(v[i + j] < 0.0f) << j;
    }
    bitsp[i >> 3] = uint8_t(byte);
  }
  if (i < count) {
    unsigned byte = 0;
    for (unsigned j = 0; i + j < count; ++j) {
      partial[j] += bits_float(float_bits(v[i + j]) & 0x7FFFFFFFu);
      byte |= unsigned(v[i + j] < 0.0f) << j;
    }
    bitsp[i >> 3] = uint8_t(byte);
  }
  const float sum = ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
                    ((partial[4] + partial[5]) + (partial[6] + partial[7]));
  const float scale = count ? sum / float(count) : 0.0f;
  if (!(scale <= kMaxScale)) return Status::kValueOutOfRange;
  memcpy(out, &scale, 4);
  return Status::kOk;
}

}  // namespace

Status encode_group(const Params& p, const float* v, uint32_t count, uint32_t first, uint8_t* out,
                    float* scratch) {
  const Kernels& k = kernels();
  switch (p.kind) {
    case ValueCoderKind::kFp32: memcpy(out, v, size_t(count) * 4); return Status::kOk;
    case ValueCoderKind::kFp16: return k.to_fp16(v, count, out) ? Status::kOk : Status::kValueOutOfRange;
    case ValueCoderKind::kBf16: return k.to_bf16(v, count, out) ? Status::kOk : Status::kValueOutOfRange;
    case ValueCoderKind::kUniform:
      if (p.shared) {
        const float inv = 1.0f / p.step;
        const int32_t limit = int32_t((1u << (p.bits - 1)) - 1);
        k.quantize_shared(v, count, inv, limit, p.bits, p.stochastic, p.round_key, first, out);
        return Status::kOk;
      }
      return p.signmag ? encode_signmag_group(p, v, count, first, out)
                       : encode_uniform_group(p, k, v, count, first, out);
    case ValueCoderKind::kQsgd: return encode_qsgd_group(p, v, count, first, out);
    case ValueCoderKind::kTernGrad: return encode_terngrad_group(p, v, count, first, out);
    case ValueCoderKind::kScaledSign: return encode_sign_group(v, count, out);
    case ValueCoderKind::kHadamard: {
#if EDGEFL_WITH_HADAMARD
      // |v| <= 1e18 keeps the sum of squares finite (bits of |v| order the magnitudes; NaN and
      // Inf fail here too). encode() makes no other pass over a dense input: it tells a
      // non-finite value from an overflow itself, on this error only.
      if (k.max_abs_bits(v, count) > float_bits(1e18f)) return Status::kValueOutOfRange;
      encode_hadamard(p, v, count, first, out, scratch);
      return Status::kOk;
#else
      (void)scratch;
      return Status::kInvalidSpec;
#endif
    }
    case ValueCoderKind::kSkCompress:
    case ValueCoderKind::kCountSketch: break;  // coded in sketch/, never in groups
  }
  return Status::kInvalidSpec;
}

Status validate_region(const Params& p, const uint8_t* data, uint64_t total) {
  if (total == 0) return Status::kOk;
  switch (p.kind) {
    case ValueCoderKind::kFp32: {
      float buf[kFloatChunk];
      for (uint64_t i = 0; i < total; i += kFloatChunk) {
        const size_t count = size_t(total - i < kFloatChunk ? total - i : kFloatChunk);
        memcpy(buf, data + 4 * i, count * 4);
        if (kernels().max_abs_bits(buf, count) >= 0x7F800000u) return Status::kCorruptPayload;
      }
      return Status::kOk;
    }
    case ValueCoderKind::kFp16:
    case ValueCoderKind::kBf16: {
      // Exponent all ones (Inf or NaN): 0x7C00 in fp16, 0x7F80 in bf16. Branch-free to vectorize.
      const unsigned mask = p.kind == ValueCoderKind::kFp16 ? 0x7C00u : 0x7F80u;
      unsigned bad = 0;
      for (uint64_t i = 0; i < total; ++i) {
        const unsigned h = unsigned(data[2 * i]) | (unsigned(data[2 * i + 1]) << 8);
        bad |= unsigned((h & mask) == mask);
      }
      return bad ? Status::kCorruptPayload : Status::kOk;
    }
    default: break;
  }
  if (p.kind == ValueCoderKind::kUniform && p.shared) return Status::kOk;  // any code is valid
  uint64_t pos = 0;
  const uint8_t* g = data;
  while (pos < total) {
    const uint32_t count = uint32_t(total - pos < p.block ? total - pos : p.block);
    float a;
    memcpy(&a, g, 4);
    if (p.kind == ValueCoderKind::kUniform) {
      float b;
      memcpy(&b, g + 4, 4);
      if (!(a >= -kMaxScale && a <= kMaxScale) || !scale_ok(b)) return Status::kCorruptPayload;
    } else if (!scale_ok(a)) {
      return Status::kCorruptPayload;
    }
    if (p.kind == ValueCoderKind::kTernGrad) {
      unsigned bad = 0;  // branch-free, so that the loop vectorises
      for (uint32_t i = 0; i < (count + 4) / 5; ++i) bad |= unsigned(g[4 + i] > 242);
      if (bad) return Status::kCorruptPayload;
#if !defined(__OPTIMIZE_SIZE__)
    } else if (p.kind == ValueCoderKind::kQsgd && p.levels >= (1u << (p.bits - 1)) - 1) {
      // Every level the codes can hold is at most s.
    } else if (p.kind == ValueCoderKind::kQsgd && (p.bits == 8 || p.bits == 4)) {
      // The same check a byte at a time, branch-free (the loops vectorise).
      const uint8_t* codes = g + 4;
      const unsigned level_mask = p.bits == 8 ? 0x7Fu : 7u;
      unsigned bad = 0;
      if (p.bits == 8) {
        for (uint32_t i = 0; i < count; ++i) bad |= unsigned((codes[i] & level_mask) > p.levels);
      } else {
        for (uint32_t i = 0; i < count / 2; ++i) {
          bad |= unsigned((codes[i] & level_mask) > p.levels) |
                 unsigned(((codes[i] >> 4) & level_mask) > p.levels);
        }
        if (count % 2 != 0) bad |= unsigned((codes[count / 2] & level_mask) > p.levels);
      }
      if (bad) return Status::kCorruptPayload;
    } else if (p.kind == ValueCoderKind::kQsgd && p.bits <= 8) {
      // 1, 2, 3, 5, 6 and 7 bits: a byte or eight codes at a time, branch-free.
      const uint8_t* codes = g + 4;
      const unsigned levels = p.levels;
      unsigned bad = 0;
      with_code_width(p.bits, [&](auto width) {
        constexpr unsigned kLow = (1u << (decltype(width)::kBits - 1)) - 1;
        unpack_codes<decltype(width)::kBits>(
            codes, count, [&](uint32_t, unsigned code) { bad |= unsigned((code & kLow) > levels); });
      });
      if (bad) return Status::kCorruptPayload;
#endif
    } else if (p.kind == ValueCoderKind::kQsgd) {
      BitReader r(g + 4, size_t((uint64_t(count) * p.bits + 7) / 8));
      const uint64_t level_mask = (uint64_t(1) << (p.bits - 1)) - 1;
      for (uint32_t i = 0; i < count; ++i) {
        if ((r.get(p.bits) & level_mask) > p.levels) return Status::kCorruptPayload;
      }
    }
    g += group_bytes(p, count);
    pos += count;
  }
  return Status::kOk;
}

#if !defined(__OPTIMIZE_SIZE__)
namespace {

// entropy_recode for bf16: the planes split into `exponents` (total bytes) and the front of
// `stream` (total bytes); the rANS stream (of `lanes` lanes) after them.
size_t entropy_recode_bf16(uint8_t* region, size_t raw_bytes, uint64_t total, unsigned lanes,
                           uint8_t* exponents, uint8_t* stream) {
  uint32_t counts[256] = {};
  for (uint64_t i = 0; i < total; ++i) {
    const unsigned bits = load_le16(region + 2 * i);
    const unsigned e = (bits >> 7) & 0xFFu;
    exponents[i] = uint8_t(e);
    stream[i] = uint8_t(((bits >> 8) & 0x80u) | (bits & 0x7Fu));
    counts[e]++;
  }
  const size_t plane = size_t(total);
  if (plane + entropy::rans_table_min_bytes(256) + entropy::rans_state_bytes(lanes) >= raw_bytes)
    return raw_bytes;
  uint16_t freq[256];
  entropy::rans_frequencies(counts, 256, freq);
  const size_t table_bytes = entropy::rans_table_bytes(freq, 256);
  const uint64_t estimate = (entropy::rans_cost_bits(counts, freq, 256, lanes) + 7) / 8;
  if (plane + table_bytes + estimate >= raw_bytes) return raw_bytes;
  const size_t room = raw_bytes - plane - table_bytes;
  const size_t size = entropy::rans_encode(exponents, plane, freq, 256, lanes, stream + plane, room);
  if (size == 0 || plane + table_bytes + size >= raw_bytes) return raw_bytes;
  // Layout: the sign-and-mantissa plane, the table, the stream.
  memcpy(region, stream, plane);
  BitWriter w(region + plane, table_bytes);
  entropy::rans_write_table(freq, 256, &w);
  w.finish_and_fill();
  memmove(region + plane + table_bytes, stream + plane, size);
  return plane + table_bytes + size;
}

}  // namespace
#endif

namespace {

// The `count` codes of `bits` bits packed LSB-first at `packed`, one a byte into codes (builds for
// size: the bit reader only).
void unpack_codes_to_bytes(unsigned bits, const uint8_t* packed, uint64_t count, uint8_t* codes) {
#if !defined(__OPTIMIZE_SIZE__)
  if (bits == 8) {
    memcpy(codes, packed, size_t(count));
    return;
  }
  if (bits < 8 && count <= UINT32_MAX) {  // a byte or eight codes at a time
    with_code_width(bits, [&](auto width) {
      unpack_codes<decltype(width)::kBits>(packed, uint32_t(count),
                                           [&](uint32_t i, unsigned code) { codes[i] = uint8_t(code); });
    });
    return;
  }
#endif
  BitReader r(packed, size_t((count * bits + 7) / 8));
  for (uint64_t i = 0; i < count; ++i) codes[i] = uint8_t(r.get(bits));
}

}  // namespace

size_t entropy_recode(const Params& p, uint8_t* region, size_t raw_bytes, uint64_t total, uint8_t* codes,
                      uint8_t* stream) {
#if !defined(__OPTIMIZE_SIZE__)
  if (total > 0 && p.kind == ValueCoderKind::kBf16)
    return entropy_recode_bf16(region, raw_bytes, total, p.rans_lanes, codes, stream);
#endif
  if (total == 0 || p.kind != ValueCoderKind::kUniform || p.bits > 8) return raw_bytes;
  const unsigned symbols = 1u << p.bits;
  // Unpack the codes (and keep the scales in order at the front of the stream scratch).
  uint32_t counts[256] = {};
  uint64_t pos = 0;
  const uint8_t* g = region;
  uint8_t* scales = stream;
  if (p.shared) {  // one run of codes, no scales
    unpack_codes_to_bytes(p.bits, region, total, codes);
    pos = total;
  }
  while (pos < total) {
    const uint32_t count = uint32_t(total - pos < p.block ? total - pos : p.block);
    memcpy(scales, g, 8);
    scales += 8;
    unpack_codes_to_bytes(p.bits, g + 8, count, codes + pos);
    g += group_bytes(p, count);
    pos += count;
  }
  for (uint64_t i = 0; i < total; ++i) counts[codes[i]]++;
  const size_t scale_bytes = size_t(entropy_scales_bytes(p, total));
  const unsigned lanes = p.rans_lanes;
  if (scale_bytes + entropy::rans_table_min_bytes(symbols) + entropy::rans_state_bytes(lanes) >= raw_bytes)
    return raw_bytes;
  uint16_t freq[256];
  entropy::rans_frequencies(counts, symbols, freq);
  const size_t table_bytes = entropy::rans_table_bytes(freq, symbols);
  if (scale_bytes + table_bytes + entropy::rans_state_bytes(lanes) >= raw_bytes) return raw_bytes;
  // Worth trying only if the estimate beats the raw codes.
  const uint64_t estimate = (entropy::rans_cost_bits(counts, freq, symbols, lanes) + 7) / 8;
  if (scale_bytes + table_bytes + estimate >= raw_bytes) return raw_bytes;
  const size_t room = raw_bytes - scale_bytes - table_bytes;
  const size_t size =
      entropy::rans_encode(codes, size_t(total), freq, symbols, lanes, stream + scale_bytes, room);
  if (size == 0 || scale_bytes + table_bytes + size >= raw_bytes) return raw_bytes;
  // Layout: scales, table, stream.
  memcpy(region, stream, scale_bytes);
  BitWriter w(region + scale_bytes, table_bytes);
  entropy::rans_write_table(freq, symbols, &w);
  w.finish_and_fill();
  memmove(region + scale_bytes + table_bytes, stream + scale_bytes, size);
  return scale_bytes + table_bytes + size;
}

size_t read_entropy_table(const Params& p, const uint8_t* data, size_t bytes, size_t scales,
                          entropy::RansDecoder* dec) {
  if (bytes < scales) return 0;
  BitReader table(data + scales, bytes - scales);
  if (dec->read_table(&table, entropy_symbols(p)) != Status::kOk) return 0;
  // Zero padding to the byte boundary: one encoding per table.
  const size_t bits = table.bit_position();
  if (table.get(unsigned((8 - bits % 8) % 8)) != 0 || table.failed()) return 0;
  return scales + (bits + 7) / 8;
}

EntropyRegionReader::EntropyRegionReader(const Params& p, const uint8_t* data, size_t bytes, uint64_t total)
    : p_(p), data_(data), total_(total), scale_(data) {
  if (p.kind == ValueCoderKind::kBf16 || p.shared) next_block_ = total;  // no block scales
  status_ = check_entropy_prefix(p, data, bytes, total, &dec_);
  if (status_ != Status::kOk) total_ = 0;
}

Status EntropyRegionReader::finish() const {
  return status_ != Status::kOk ? status_ : dec_.finish();
}

uint32_t EntropyRegionReader::next(float* out) {
  if (position_ >= total_) return 0;
  const uint32_t count = uint32_t(total_ - position_ < kChunk ? total_ - position_ : kChunk);
  uint8_t codes[kChunk];
  status_ = dec_.decode(codes, count);
  if (status_ != Status::kOk) {
    total_ = 0;  // spent: finish() reports it
    return 0;
  }
  const bool bf16 = p_.kind == ValueCoderKind::kBf16;
  if (p_.shared) {
    // shared_value()'s arithmetic, its parameters in locals (out may alias p_): the loop vectorises.
    const unsigned shift = 32u - p_.bits;
    const float step = p_.step;
    for (uint32_t j = 0; j < count; ++j) out[j] = float(int32_t(uint32_t(codes[j]) << shift) >> shift) * step;
    position_ += count;
    return count;
  }
  if (bf16) {  // the code is the exponent; the prefix byte holds the sign and the mantissa
    const uint8_t* plane = data_ + position_;
    for (uint32_t j = 0; j < count; ++j) {
      out[j] =
          bf16_to_float(uint16_t(((plane[j] & 0x80u) << 8) | (unsigned(codes[j]) << 7) | (plane[j] & 0x7Fu)));
    }
    position_ += count;
    return count;
  }
  // A block's codes at a time, with its (min, step) hoisted (the loops vectorise).
  for (uint32_t j = 0; j < count;) {
    if (position_ + j == next_block_) {
      memcpy(&a_, scale_, 4);
      memcpy(&b_, scale_ + 4, 4);
      scale_ += 8;
      next_block_ += p_.block;
    }
    const uint64_t block_left = next_block_ - (position_ + j);
    const uint32_t end = block_left < count - j ? j + uint32_t(block_left) : count;
    const float a = a_, b = b_;
#if !defined(__OPTIMIZE_SIZE__)
    if (!p_.signmag) {
      for (; j < end; ++j) out[j] = a + float(codes[j]) * b;  // uniform_value's arithmetic
    } else {
      // uniform_value's sign-magnitude arithmetic, the negation as a flip of the sign bit
      // (what IEEE negation is), so that the loop vectorises.
      const unsigned mag_bits = p_.bits - 1u, mag_mask = (1u << mag_bits) - 1;
      for (; j < end; ++j) {
        const float mag = a + float(codes[j] & mag_mask) * b;
        const uint32_t negative = uint32_t(codes[j] >> mag_bits) << 31;
        out[j] = bits_float(float_bits(mag) ^ negative);
      }
    }
#endif
    for (; j < end; ++j) out[j] = uniform_value(p_, a, b, codes[j]);
  }
  position_ += count;
  return count;
}

Status check_entropy_prefix(const Params& p, const uint8_t* data, size_t bytes, uint64_t total,
                            entropy::RansDecoder* dec) {
  const bool bf16 = p.kind == ValueCoderKind::kBf16;
  if ((!bf16 && (p.kind != ValueCoderKind::kUniform || p.bits > 8)) || total == 0)
    return Status::kCorruptPayload;
  const size_t prefix = size_t(entropy_prefix_bytes(p, total));
  if (bytes <
      prefix + entropy::rans_table_min_bytes(entropy_symbols(p)) + entropy::rans_state_bytes(p.rans_lanes))
    return Status::kSizeMismatch;
  for (size_t g = 0; !bf16 && g < prefix; g += 8) {  // the uniform codes' block scales
    float a, b;
    memcpy(&a, data + g, 4);
    memcpy(&b, data + g + 4, 4);
    if (!(a >= -kMaxScale && a <= kMaxScale) || !scale_ok(b)) return Status::kCorruptPayload;
  }
  const size_t stream = read_entropy_table(p, data, bytes, prefix, dec);
  // bf16: an exponent of 255 (Inf, NaN) must have no slot in the table, so it never decodes.
  if (stream == 0 || (bf16 && dec->frequency(255) != 0)) return Status::kCorruptPayload;
  return dec->begin(data + stream, bytes - stream, p.rans_lanes);
}

Status validate_entropy_region(const Params& p, const uint8_t* data, size_t bytes, uint64_t total) {
  entropy::RansDecoder dec;
  EDGEFL_RETURN_IF_ERROR(check_entropy_prefix(p, data, bytes, total, &dec));
  uint8_t codes[256];
  for (uint64_t i = 0; i < total; i += sizeof codes) {
    const size_t count = size_t(total - i < sizeof codes ? total - i : sizeof codes);
    EDGEFL_RETURN_IF_ERROR(dec.decode(codes, count));
  }
  return dec.finish();
}

#if !defined(__OPTIMIZE_SIZE__)
Status decode_entropy_region_checked(const Params& p, const uint8_t* data, size_t bytes, uint64_t total,
                                     float* out) {
  EntropyRegionReader reader(p, data, bytes, total);  // check_entropy_prefix's status, if it fails
  uint64_t done = 0;
  for (uint32_t got; (got = reader.next(out + done)) != 0;) done += got;
  return reader.finish();
}
#endif

}  // namespace values
}  // namespace edgefl
