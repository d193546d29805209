// Internal: the value coders. Values are coded in groups (one block of `block` values for the
// blocked coders; chunks of kFloatChunk values for fp32/fp16/bf16 and shared-scale codes, whose
// concatenation is byte-exact). Byte layouts are in format.h.
#ifndef EDGEFL_SRC_CODEC_VALUES_H_
#define EDGEFL_SRC_CODEC_VALUES_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "codec/kernels.h"
#include "core/bitio.h"
#include "core/half.h"
#include "core/rng.h"
#include "edgefl/codec.h"
#include "edgefl/config.h"
#include "entropy/rans.h"

namespace edgefl {
namespace values {

// Values per group for the unblocked coders (a multiple of 8, so codes stay byte-aligned).
constexpr uint32_t kFloatChunk = 256;  // a multiple of 8: runs start on a code byte
static_assert(kFloatChunk % 8 == 0, "sign runs start on a code byte");
static_assert(kFloatChunk % 2 == 0, "4-bit runs start on a byte boundary");
constexpr uint32_t kMaxHadamardBlock = 1024;
// Largest |scale| a decoder accepts: keeps every decoded value (scale x code, code < 2^31)
// finite and leaves headroom for weighted sums.
constexpr float kMaxScale = 1.0e28f;

struct Params {
  ValueCoderKind kind = ValueCoderKind::kFp32;
  uint8_t bits = 32;
  uint32_t block = 0;   // group size for blocked coders
  uint16_t levels = 0;  // qsgd s
  bool stochastic = true;
  bool shared = false;                       // uniform shared-scale
  float step = 0.0f;                         // shared step
  uint32_t round_key = 0;                    // hash key of stochastic rounding
  uint32_t sign_key = 0;                     // hash key of the Hadamard signs
  bool entropy = false;                      // uniform blocked: codes rANS-coded (entropy region layout)
  uint8_t rans_lanes = entropy::kRansLanes;  // the entropy region's rANS lanes
  bool signmag = false;                      // uniform blocked: sign bit + magnitude levels
};

// True for coders whose groups are blocks with per-block data.
inline bool is_blocked(const Params& p) {
  switch (p.kind) {
    case ValueCoderKind::kUniform: return !p.shared;
    case ValueCoderKind::kQsgd:
    case ValueCoderKind::kTernGrad:
    case ValueCoderKind::kScaledSign:
    case ValueCoderKind::kHadamard: return true;
    default: return false;
  }
}

inline uint32_t group_size(const Params& p) {
  return is_blocked(p) ? p.block : kFloatChunk;
}

inline uint32_t next_pow2(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// Bytes of one group of `count` values (count <= group_size).
inline size_t group_bytes(const Params& p, uint32_t count) {
  const uint64_t c = count;
  switch (p.kind) {
    case ValueCoderKind::kFp32: return size_t(c * 4);
    case ValueCoderKind::kFp16:
    case ValueCoderKind::kBf16: return size_t(c * 2);
    case ValueCoderKind::kUniform:
      return p.shared ? size_t((c * p.bits + 7) / 8) : size_t(8 + (c * p.bits + 7) / 8);
    case ValueCoderKind::kQsgd: return size_t(4 + (c * p.bits + 7) / 8);
    case ValueCoderKind::kTernGrad: return size_t(4 + (c + 4) / 5);
    case ValueCoderKind::kScaledSign: return size_t(4 + (c + 7) / 8);
    case ValueCoderKind::kHadamard:
      return count == 0 ? 0 : size_t(4 + (uint64_t(next_pow2(count)) * p.bits + 7) / 8);
    case ValueCoderKind::kSkCompress:
    case ValueCoderKind::kCountSketch: return 0;  // not value coders of groups (sketch/)
  }
  return 0;
}

// Bytes of the whole value region for `total` values.
inline uint64_t region_bytes(const Params& p, uint64_t total) {
  if (total == 0) return 0;
  if (!is_blocked(p)) return (total * p.bits + 7) / 8;
  const uint64_t full = total / p.block;
  const uint32_t rest = uint32_t(total % p.block);
  return full * group_bytes(p, p.block) + (rest ? group_bytes(p, rest) : 0);
}

// Encodes values v[0..count) occupying positions [first, first + count) of the value sequence
// into `out` (exactly group_bytes(p, count) bytes, or for unblocked coders ceil(count*bits/8)).
// `scratch` holds kMaxHadamardBlock floats (Hadamard only). Inputs must be finite.
// Fails: kValueOutOfRange (fp16/bf16 overflow).
Status encode_group(const Params& p, const float* v, uint32_t count, uint32_t first, uint8_t* out,
                    float* scratch);

// Checks a value region before any value is used: scales finite and bounded, codes valid,
// fp values finite. `data` holds region_bytes(p, total) bytes.
Status validate_region(const Params& p, const uint8_t* data, uint64_t total);

// Value of uniform code `code` in a block with `lo` and `step` (sign-magnitude: the top bit is
// the sign, the rest the level of |x|).
inline float uniform_value(const Params& p, float lo, float step, unsigned code) {
  if (!p.signmag) return lo + float(code) * step;
  const unsigned mag_bits = p.bits - 1u;
  const float mag = lo + float(code & ((1u << mag_bits) - 1)) * step;
  return (code >> mag_bits) ? -mag : mag;
}

// ---- Entropy-coded uniform codes (`q<bits>:ans`, `q<bits>:shared=STEP,ans`) -------------------
// Region: the G = ceil(total / block) blocks' (f32 min, f32 step) pairs (none for shared-scale
// codes: the step is the header's), then the rANS frequency table of the 2^bits codes
// (entropy/rans.h; shared-scale codes as their `bits`-wide two's-complement bit patterns), then
// the rANS stream of the codes in order.
inline uint64_t entropy_scales_bytes(const Params& p, uint64_t total) {
  return p.shared ? 0 : 8 * ((total + p.block - 1) / p.block);
}
// The value of shared-scale code `code` (a `bits`-wide two's-complement pattern).
inline float shared_value(const Params& p, unsigned code) {
  const unsigned shift = 32u - p.bits;
  return float(int32_t(uint32_t(code) << shift) >> shift) * p.step;
}

// Entropy-coded bf16 (`bf16:ans`, lossless): region = the sign-and-mantissa plane (one byte per
// value: sign << 7 | the 7 mantissa bits, raw: close to uniform), then the rANS table of the 256
// exponents, then the rANS stream of the exponents in order (skewed: an update's magnitudes span
// a few binades). A value's bf16 bits: (plane & 0x80) << 8 | exponent << 7 | (plane & 0x7F).
// Exponent 255 (Inf, NaN) is refused.
inline unsigned entropy_symbols(const Params& p) {
  return p.kind == ValueCoderKind::kBf16 ? 256u : 1u << p.bits;
}
// Bytes before the rANS table: the block scales, or bf16's sign-and-mantissa plane.
inline uint64_t entropy_prefix_bytes(const Params& p, uint64_t total) {
  return p.kind == ValueCoderKind::kBf16 ? total : entropy_scales_bytes(p, total);
}

// Re-codes the raw uniform region region[0..raw_bytes) of `total` values in place when rANS
// makes it smaller; returns the new size, or raw_bytes (unchanged) when it would not pay.
// `codes` holds `total` bytes; `stream` holds raw_bytes bytes (scratch).
size_t entropy_recode(const Params& p, uint8_t* region, size_t raw_bytes, uint64_t total, uint8_t* codes,
                      uint8_t* stream);

// Checks an entropy region (scales, table, the whole stream and its final states).
Status validate_entropy_region(const Params& p, const uint8_t* data, size_t bytes, uint64_t total);

// The checks of an entropy region before its stream: coder and sizes, block scales, the table
// (and its padding), the stream's initial states. On kOk, *dec is ready to decode the stream.
Status check_entropy_prefix(const Params& p, const uint8_t* data, size_t bytes, uint64_t total,
                            entropy::RansDecoder* dec);

#if !defined(__OPTIMIZE_SIZE__)
// validate_entropy_region and the decoding of every value in one pass: the `total` values into
// out[0..total) (the caller's memory). Returns validate_entropy_region's status; on failure out
// holds scratch.
Status decode_entropy_region_checked(const Params& p, const uint8_t* data, size_t bytes, uint64_t total,
                                     float* out);
#endif

// Reads the rANS table of an entropy region (after its `scales` bytes) into *dec and returns the
// stream's offset in the region; 0 if the table is corrupt, runs past the region or does not
// end in zero padding.
size_t read_entropy_table(const Params& p, const uint8_t* data, size_t bytes, size_t scales,
                          entropy::RansDecoder* dec);

// The values of a validated rANS-coded region, a chunk at a time (one copy of the decoding for
// every decoder that visits the values).
class EntropyRegionReader {
 public:
  static constexpr uint32_t kChunk = 256;
  // Runs check_entropy_prefix (a region that fails it reads as empty; finish() names the fault).
  EntropyRegionReader(const Params& p, const uint8_t* data, size_t bytes, uint64_t total);
  // The next values (at most kChunk) into out; 0 at the end, or once the stream fails.
  uint32_t next(float* out);
  // After the last value: kOk when the checks before the stream passed, every value decoded and
  // the stream ended exactly (its final states are the initial ones and no byte is left):
  // validate_entropy_region's verdict.
  Status finish() const;

 private:
  Params p_;
  const uint8_t* data_;
  uint64_t total_;  // 0 when the region cannot be read (never, once validated)
  uint64_t position_ = 0;
  uint64_t next_block_ = 0;  // where the next block's (a, b) start (uniform codes)
  const uint8_t* scale_;
  float a_ = 0, b_ = 0;
  entropy::RansDecoder dec_;
  Status status_ = Status::kOk;
};

// Calls sink(position, value) for every value of a validated rANS-coded region, in order.
template <typename Sink>
void decode_entropy_region(const Params& p, const uint8_t* data, size_t bytes, uint64_t total, Sink&& sink) {
  EntropyRegionReader reader(p, data, bytes, total);
  float values[EntropyRegionReader::kChunk];
  uint64_t position = 0;
  for (uint32_t count; (count = reader.next(values)) != 0;) {
    for (uint32_t j = 0; j < count; ++j) sink(position + j, values[j]);
    position += count;
  }
}

// Lloyd-Max reconstruction levels of a unit Gaussian (Max 1960) for 1..4 bits, ascending.
const float* lloyd_max_levels(unsigned bits);

#if EDGEFL_WITH_HADAMARD
// The `count` values of one validated hq block (group `g`, the block's first position `first`)
// into out[0..next_pow2(count)): levels times the block's scale, the transform, the sign flips.
void decode_hadamard_block(const Params& p, const uint8_t* g, uint32_t count, uint32_t first, float* out);
#endif

inline bool is_float_kind(ValueCoderKind kind) {
  return kind == ValueCoderKind::kFp32 || kind == ValueCoderKind::kFp16 || kind == ValueCoderKind::kBf16;
}

// For a validated fp32/fp16/bf16 region: calls runs(first_position, values, count) for
// consecutive chunks of at most kFloatChunk values, in order. The chunks go through an aligned
// stack buffer: no unaligned float loads on any target, and the conversions run in the (SIMD)
// kernels.
template <typename Runs>
void decode_float_runs(const Params& p, const uint8_t* data, uint64_t total, Runs&& runs) {
  float buf[kFloatChunk];
  const Kernels& k = kernels();
  for (uint64_t i = 0; i < total; i += kFloatChunk) {
    const uint32_t count = uint32_t(total - i < kFloatChunk ? total - i : kFloatChunk);
    if (p.kind == ValueCoderKind::kFp32) {
      memcpy(buf, data + 4 * i, size_t(count) * 4);
    } else if (p.kind == ValueCoderKind::kFp16) {
      k.from_fp16(data + 2 * i, count, buf);
    } else {
      for (uint32_t j = 0; j < count; ++j) buf[j] = bf16_to_float(load_le16(data + 2 * (i + j)));
    }
    runs(i, static_cast<const float*>(buf), count);
  }
}

// Whether decode_dense_runs handles this (non-entropy-coded) region: the value decoders whose
// loops vectorise: 16/32-bit floats, signs, trits, hq, and uniform and QSGD codes of 1 to 8 bits.
// Built for size (-Os, __OPTIMIZE_SIZE__), only the float runs: uniform codes take the
// per-value path, which gives the same values in about 500 fewer bytes of code.
inline bool has_dense_runs(const Params& p) {
  if (is_float_kind(p.kind)) return true;
#if defined(__OPTIMIZE_SIZE__)
  return false;
#else
  if (p.kind == ValueCoderKind::kScaledSign || p.kind == ValueCoderKind::kTernGrad) return true;
#if EDGEFL_WITH_HADAMARD
  if (p.kind == ValueCoderKind::kHadamard) return true;
#endif
  // Codes of up to 8 bits: a byte (1, 2, 4, 8 bits) or kBits bytes (8 codes of 3, 5, 6, 7 bits)
  // at a time.
  return (p.kind == ValueCoderKind::kUniform || p.kind == ValueCoderKind::kQsgd) && p.bits >= 1 &&
         p.bits <= 8;
#endif
}

#if !defined(__OPTIMIZE_SIZE__)

// For each sign byte, the eight sign-bit masks its bits flip (bit j of the byte: value j).
struct SignMaskTable {
  uint32_t masks[256][8];
};
constexpr SignMaskTable make_sign_mask_table() {
  SignMaskTable t{};
  for (unsigned byte = 0; byte < 256; ++byte) {
    for (unsigned j = 0; j < 8; ++j) t.masks[byte][j] = ((byte >> j) & 1u) << 31;
  }
  return t;
}
constexpr SignMaskTable kSignMasks = make_sign_mask_table();

// decode_dense_runs for scaled sign (value = a with the sign bit flipped where the code bit is 1:
// exactly decode_region's -a) and TernGrad (digit 0, 1, 2 -> 0, a, -a), a block at a time.
template <typename Runs>
void decode_sign_runs(const Params& p, const uint8_t* data, uint64_t total, Runs&& runs, float* buf) {
  uint64_t pos = 0;
  const uint8_t* g = data;
  while (pos < total) {
    const uint32_t count = uint32_t(total - pos < p.block ? total - pos : p.block);
    float a;
    memcpy(&a, g, 4);
    const uint32_t a_bits = float_bits(a);
    const float values3[3] = {0.0f, a, -a};
    // Runs start on a code byte: 8 signs or 5 trits per byte.
    const uint32_t chunk =
        p.kind == ValueCoderKind::kScaledSign ? kFloatChunk : kFloatChunk - kFloatChunk % 5;
    for (uint32_t done = 0; done < count; done += chunk) {
      const uint32_t m = count - done < chunk ? count - done : chunk;
      if (p.kind == ValueCoderKind::kScaledSign) {
        // Eight values a byte: a's bits with the byte's eight sign masks (a loop that vectorises).
        const uint8_t* bitsp = g + 4 + done / 8;
        uint32_t* out_bits = reinterpret_cast<uint32_t*>(buf);
        uint32_t j = 0;
        for (; j + 8 <= m; j += 8) {
          const uint32_t* masks = kSignMasks.masks[bitsp[j >> 3]];
          for (uint32_t t = 0; t < 8; ++t) out_bits[j + t] = a_bits ^ masks[t];
        }
        for (; j < m; ++j) {
          buf[j] = bits_float(a_bits ^ (uint32_t((bitsp[j >> 3] >> (j & 7)) & 1u) << 31));
        }
      } else {
        // Five values a byte, always: a run's last byte may hold fewer, and the extra values land
        // in buf below `chunk` (a multiple of 5, at most kFloatChunk) and are never passed on.
        const uint8_t* packed = g + 4 + done / 5;
        if (const auto tern_decode = kernels().tern_decode) {
          tern_decode(packed, (m + 4) / 5, a, buf);
          runs(pos + done, static_cast<const float*>(buf), m);
          continue;
        }
        for (uint32_t j = 0; j < m; j += 5) {
          const uint8_t* d = kTritDigits.digits[packed[j / 5]];
          buf[j] = values3[d[0]];
          buf[j + 1] = values3[d[1]];
          buf[j + 2] = values3[d[2]];
          buf[j + 3] = values3[d[3]];
          buf[j + 4] = values3[d[4]];
        }
      }
      runs(pos + done, static_cast<const float*>(buf), m);
    }
    g += group_bytes(p, count);
    pos += count;
  }
}
#endif

#if EDGEFL_WITH_HADAMARD && !defined(__OPTIMIZE_SIZE__)
// decode_dense_runs for hq: a block's levels, the transform and the sign flips through the
// kernels (the same operations as decode_region's loop), then its values in runs.
template <typename Runs>
void decode_hadamard_runs(const Params& p, const uint8_t* data, uint64_t total, Runs&& runs) {
  float buf[kMaxHadamardBlock];
  uint64_t pos = 0;
  const uint8_t* g = data;
  while (pos < total) {
    const uint32_t count = uint32_t(total - pos < p.block ? total - pos : p.block);
    decode_hadamard_block(p, g, count, uint32_t(pos), buf);
    for (uint32_t done = 0; done < count; done += kFloatChunk) {
      runs(pos + done, static_cast<const float*>(buf + done),
           count - done < kFloatChunk ? count - done : kFloatChunk);
    }
    g += group_bytes(p, count);
    pos += count;
  }
}
#endif

#if !defined(__OPTIMIZE_SIZE__)
// A code width of runs (1 to 8 bits), as a type.
template <unsigned B>
struct CodeWidth {
  static constexpr unsigned kBits = B;
};
// f(CodeWidth<bits>{}) for bits 1 to 8 (has_dense_runs' widths; 8 for any other).
template <typename F>
inline void with_code_width(unsigned bits, F&& f) {
  switch (bits) {
    case 1: f(CodeWidth<1>{}); break;
    case 2: f(CodeWidth<2>{}); break;
    case 3: f(CodeWidth<3>{}); break;
    case 4: f(CodeWidth<4>{}); break;
    case 5: f(CodeWidth<5>{}); break;
    case 6: f(CodeWidth<6>{}); break;
    case 7: f(CodeWidth<7>{}); break;
    default: f(CodeWidth<8>{}); break;
  }
}

// visit(j, code j) for the m codes of kBits (1 to 8) bits packed LSB-first from c, reading no
// byte past the m codes' last. 1, 2, 4 and 8 bits: a byte (8 / kBits codes) an iteration;
// 3, 5, 6 and 7 bits: eight codes from kBits bytes an iteration. Then the codes left over.
template <unsigned kBits, typename Visit>
inline void unpack_codes(const uint8_t* c, uint32_t m, Visit&& visit) {
  static_assert(kBits >= 1 && kBits <= 8, "codes of 1 to 8 bits");
  constexpr unsigned kMask = (1u << kBits) - 1;
  uint32_t j = 0;
  if (8 % kBits == 0) {
    constexpr unsigned kPerByte = 8 / kBits;
    const uint32_t whole = m / kPerByte;
    for (uint32_t i = 0; i < whole; ++i) {
      const unsigned byte = c[i];
      for (unsigned t = 0; t < kPerByte; ++t) visit(i * kPerByte + t, (byte >> (t * kBits)) & kMask);
    }
    j = whole * kPerByte;
  } else {
    const uint32_t whole = m / 8;
    for (uint32_t i = 0; i < whole; ++i) {
      const uint8_t* at = c + size_t(i) * kBits;
      uint64_t word = 0;  // kBits bytes, little-endian whatever the host
      for (unsigned t = 0; t < kBits; ++t) word |= uint64_t(at[t]) << (8 * t);
      for (unsigned t = 0; t < 8; ++t) visit(i * 8 + t, unsigned(word >> (t * kBits)) & kMask);
    }
    j = whole * 8;
  }
  for (; j < m; ++j) {
    const uint32_t bit = j * kBits;
    unsigned code = unsigned(c[bit / 8]) >> (bit % 8);
    if (bit % 8 + kBits > 8) code |= unsigned(c[bit / 8 + 1]) << (8 - bit % 8);  // in the code's bytes
    visit(j, code & kMask);
  }
}

// Packs the `count` codes (one a byte, each below 2^kBits) into kBits-wide fields LSB-first at
// out: the (count * kBits + 7) / 8 bytes a BitWriter writes, counted by output byte so that the
// loops vectorise. unpack_codes' inverse.
template <unsigned kBits>
inline void pack_codes_of_width(const uint8_t* codes, uint32_t count, uint8_t* out) {
  uint32_t i = 0;
  if (8 % kBits == 0) {
    constexpr unsigned kPerByte = 8 / kBits;
    for (; i + kPerByte <= count; i += kPerByte) {
      unsigned byte = 0;
      for (unsigned t = 0; t < kPerByte; ++t) byte |= unsigned(codes[i + t]) << (t * kBits);
      *out++ = uint8_t(byte);
    }
  } else {
    for (; i + 8 <= count; i += 8) {  // eight codes, kBits bytes
      uint64_t word = 0;
      for (unsigned t = 0; t < 8; ++t) word |= uint64_t(codes[i + t]) << (t * kBits);
      for (unsigned t = 0; t < kBits; ++t) *out++ = uint8_t(word >> (8 * t));
    }
  }
  uint64_t word = 0;  // fewer than eight codes left: at most 49 bits
  for (uint32_t t = 0; i + t < count; ++t) word |= uint64_t(codes[i + t]) << (t * kBits);
  for (uint32_t t = 0; t < ((count - i) * kBits + 7) / 8; ++t) *out++ = uint8_t(word >> (8 * t));
}

// decode_region's values of m codes of kBits bits from c into buf, the loops branch-free and
// vectorised: shared-scale codes (sign-extended, times the step); QSGD (level * a) and
// sign-magnitude codes (a + level * b) with the negation as a flip of the sign bit (what IEEE
// negation is); plain blocked codes (a + code * b). a, b: the block's data.
template <unsigned kBits>
inline void code_values(const Params& p, const uint8_t* c, uint32_t m, float a, float b, float* buf) {
  constexpr unsigned kTop = kBits - 1, kLow = (1u << kTop) - 1;
  if (p.shared) {
    const float step = p.step;  // a local: buf may alias p
    unpack_codes<kBits>(c, m, [&](uint32_t j, unsigned code) {
      buf[j] = float(int32_t(code << (32 - kBits)) >> (32 - kBits)) * step;
    });
  } else if (p.kind == ValueCoderKind::kQsgd) {
    unpack_codes<kBits>(c, m, [&](uint32_t j, unsigned code) {
      buf[j] = bits_float(float_bits(float(code & kLow) * a) ^ (uint32_t(code >> kTop) << 31));
    });
  } else if (p.signmag) {
    unpack_codes<kBits>(c, m, [&](uint32_t j, unsigned code) {
      buf[j] = bits_float(float_bits(a + float(code & kLow) * b) ^ (uint32_t(code >> kTop) << 31));
    });
  } else {
    unpack_codes<kBits>(c, m, [&](uint32_t j, unsigned code) { buf[j] = a + float(code) * b; });
  }
}

#endif

// For a validated region with has_dense_runs(p): the values of decode_region (same arithmetic,
// same order) as runs(first_position, values, count), count <= kFloatChunk, so that a dense
// decode stores or adds whole runs.
template <typename Runs>
void decode_dense_runs(const Params& p, const uint8_t* data, uint64_t total, Runs&& runs) {
  if (is_float_kind(p.kind)) {
    decode_float_runs(p, data, total, runs);
    return;
  }
#if !defined(__OPTIMIZE_SIZE__)
  float buf[kFloatChunk];
  if (p.kind == ValueCoderKind::kScaledSign || p.kind == ValueCoderKind::kTernGrad) {
    decode_sign_runs(p, data, total, runs, buf);
    return;
  }
#if EDGEFL_WITH_HADAMARD
  if (p.kind == ValueCoderKind::kHadamard) {
    decode_hadamard_runs(p, data, total, runs);
    return;
  }
#endif
  // Uniform and QSGD codes, a run of codes at a time (kFloatChunk is a multiple of 8: a run
  // starts on a code byte whatever the width): shared-scale codes are one block with no data; blocked uniform
  // codes start with (f32 min, f32 step), QSGD buckets with f32 ||bucket|| / s.
  const uint64_t block = p.shared ? total : p.block;
  const size_t block_data = p.shared ? 0 : p.kind == ValueCoderKind::kQsgd ? 4 : 8;
  with_code_width(p.bits, [&](auto width) {
    constexpr unsigned kBits = decltype(width)::kBits;
    uint64_t pos = 0;
    const uint8_t* g = data;
    while (pos < total) {
      const uint32_t count = uint32_t(total - pos < block ? total - pos : block);
      float a = 0.0f, b = 0.0f;
      if (block_data >= 4) memcpy(&a, g, 4);
      if (block_data == 8) memcpy(&b, g + 4, 4);
      const uint8_t* codes = g + block_data;
      for (uint64_t done = 0; done < count; done += kFloatChunk) {
        const uint32_t m = uint32_t(count - done < kFloatChunk ? count - done : kFloatChunk);
        code_values<kBits>(p, codes + done * kBits / 8, m, a, b, buf);
        runs(pos + done, static_cast<const float*>(buf), m);
      }
      g += group_bytes(p, count);
      pos += count;
    }
  });
#endif
}

// Calls sink(position, value) for every value of a validated region, in order.
template <typename Sink>
void decode_region(const Params& p, const uint8_t* data, uint64_t total, Sink&& sink) {
  if (total == 0) return;
  if (is_float_kind(p.kind)) {
    decode_float_runs(p, data, total, [&](uint64_t first, const float* v, uint32_t count) {
      for (uint32_t j = 0; j < count; ++j) sink(first + j, v[j]);
    });
    return;
  }
  if (p.kind == ValueCoderKind::kUniform && p.shared) {
    if (p.bits == 8) {
      for (uint64_t i = 0; i < total; ++i) sink(i, float(int8_t(data[i])) * p.step);
    } else if (p.bits == 4) {
      for (uint64_t i = 0; i < total; ++i) {
        const int32_t code = int32_t(uint32_t(data[i >> 1] >> ((i & 1) * 4)) << 28) >> 28;
        sink(i, float(code) * p.step);
      }
    } else {
      BitReader r(data, size_t((total * p.bits + 7) / 8));
      const unsigned shift = 64 - p.bits;
      for (uint64_t i = 0; i < total; ++i) {
        const int64_t code = int64_t(r.get(p.bits) << shift) >> shift;  // sign-extend
        sink(i, float(code) * p.step);
      }
    }
    return;
  }
  uint64_t pos = 0;
  const uint8_t* g = data;
  while (pos < total) {
    const uint32_t count = uint32_t(total - pos < p.block ? total - pos : p.block);
    float a, b;
    memcpy(&a, g, 4);
    switch (p.kind) {
      case ValueCoderKind::kUniform: {
        memcpy(&b, g + 4, 4);
        const uint8_t* codes = g + 8;
        if (p.signmag) {
          BitReader r(codes, size_t((uint64_t(count) * p.bits + 7) / 8));
          for (uint32_t i = 0; i < count; ++i) sink(pos + i, uniform_value(p, a, b, unsigned(r.get(p.bits))));
        } else if (p.bits == 8) {
          for (uint32_t i = 0; i < count; ++i) sink(pos + i, a + float(codes[i]) * b);
        } else if (p.bits == 4) {
          for (uint32_t i = 0; i < count; ++i)
            sink(pos + i, a + float((codes[i >> 1] >> ((i & 1) * 4)) & 15u) * b);
        } else {
          const unsigned per_byte = 8 / p.bits, mask = (1u << p.bits) - 1;
          for (uint32_t i = 0; i < count; ++i) {
            const unsigned code = (codes[i / per_byte] >> ((i % per_byte) * p.bits)) & mask;
            sink(pos + i, a + float(code) * b);
          }
        }
        break;
      }
      case ValueCoderKind::kQsgd: {
        BitReader r(g + 4, size_t((uint64_t(count) * p.bits + 7) / 8));
        const unsigned level_bits = p.bits - 1u;
        for (uint32_t i = 0; i < count; ++i) {
          const uint64_t code = r.get(p.bits);
          const float mag = float(code & ((1u << level_bits) - 1)) * a;
          sink(pos + i, (code >> level_bits) ? -mag : mag);
        }
        break;
      }
      case ValueCoderKind::kTernGrad: {
        const uint8_t* packed = g + 4;
        for (uint32_t i = 0; i < count; i += 5) {
          unsigned byte = packed[i / 5];
          for (uint32_t j = 0; j < 5 && i + j < count; ++j) {
            const unsigned digit = byte % 3;
            byte /= 3;
            sink(pos + i + j, digit == 0 ? 0.0f : digit == 1 ? a : -a);
          }
        }
        break;
      }
      case ValueCoderKind::kScaledSign: {
        const uint8_t* bitsp = g + 4;
        for (uint32_t i = 0; i < count; ++i) sink(pos + i, ((bitsp[i >> 3] >> (i & 7)) & 1u) ? -a : a);
        break;
      }
      case ValueCoderKind::kHadamard: {
#if EDGEFL_WITH_HADAMARD
        float buf[kMaxHadamardBlock];
        decode_hadamard_block(p, g, count, uint32_t(pos), buf);
        for (uint32_t i = 0; i < count; ++i) sink(pos + i, buf[i]);
#endif
        break;
      }
      default: return;
    }
    g += group_bytes(p, count);
    pos += count;
  }
}

}  // namespace values
}  // namespace edgefl

#endif  // EDGEFL_SRC_CODEC_VALUES_H_
