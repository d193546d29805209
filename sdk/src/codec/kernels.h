// Internal: the hot loops of the codecs, behind one table of function pointers (the ggml shape).
// kernels_ref() is the portable scalar reference and always built; an ISA table (AVX2 on x86-64,
// NEON on AArch64 and ARMv7) must give bit-identical results, and tests/sdk/kernels_test.cpp
// compares them. kernels() picks the best table once (EDGEFL_KERNELS=ref forces the reference).
#ifndef EDGEFL_SRC_CODEC_KERNELS_H_
#define EDGEFL_SRC_CODEC_KERNELS_H_

#include <stddef.h>
#include <stdint.h>

#include "core/half.h"
#include "edgefl/config.h"

namespace edgefl {

// The 5 base-3 digits of each TernGrad byte 0..242, least significant first, each row padded to
// 8 (for 8-byte loads; bytes above 242 never reach a decoder: validation refuses them). Used by
// the TernGrad decoders of builds not for size.
struct TritDigits {
  uint8_t digits[256][8];
};
constexpr TritDigits make_trit_digits() {
  TritDigits t{};
  for (unsigned byte = 0; byte < 243; ++byte) {
    unsigned v = byte;
    for (unsigned j = 0; j < 5; ++j, v /= 3) t.digits[byte][j] = uint8_t(v % 3);
  }
  return t;
}
constexpr TritDigits kTritDigits = make_trit_digits();

// Where a block Rice index stream (index_coding.h) stands: BlockRiceWordReader's state, shared
// with the kernels that decode whole blocks of it. Parts A (parameter codes and remainders) and B
// (unary quotients) are the caller's bytes.
struct BlockRiceState {
  uint64_t n = 0, k = 0;
  const uint8_t* a = nullptr;
  size_t a_size = 0;
  const uint8_t* b = nullptr;
  size_t b_size = 0;
  uint64_t a_bit = 0;  // next bit of part A
  uint64_t word = 0;   // part B's bits not yet taken, from word_bit on
  uint64_t word_bit = 0;
  size_t next_byte = 0;  // part B's next byte to load
  uint64_t previous_one = ~uint64_t(0);
  uint64_t next_index = 0;  // the previous index + 1
  uint64_t decoded = 0;
  unsigned r = 0;     // the block's Rice parameter
  unsigned left = 0;  // gaps left in the block
  uint64_t mask = 0;  // r low bits
  bool failed = false;
};

struct Kernels {
  const char* name;
  // Largest |x| as IEEE bits (0x7F800000 or above means a NaN or Inf is present).
  uint32_t (*max_abs_bits)(const float* x, size_t n);
  // Smallest and largest value of finite x[0..n), n >= 1; a zero result is +0.
  void (*min_max)(const float* x, size_t n, float* lo, float* hi);
  // x -> fp16 / bf16 little-endian, round to nearest even. Finite input. False (output
  // unspecified) if a value rounds to Inf.
  bool (*to_fp16)(const float* x, size_t n, uint8_t* out);
  bool (*to_bf16)(const float* x, size_t n, uint8_t* out);
  // to_fp16 / to_bf16 that also continue the CRC32C of what they write, in the same pass:
  // *crc = crc32c_update(*crc, out, 2 * n) (core/crc32c.h), *crc updated even when false.
  // Null in tables without a fused loop: callers then convert, then checksum.
  bool (*to_fp16_crc)(const float* x, size_t n, uint8_t* out, uint32_t* crc);
  bool (*to_bf16_crc)(const float* x, size_t n, uint8_t* out, uint32_t* crc);
  // fp16 little-endian -> float (exact).
  void (*from_fp16)(const uint8_t* in, size_t n, float* out);
  // code = min(trunc((x - lo) * inv + u), 2^bits - 1), u = unit_float(hash32(key, first + i))
  // if stochastic, else 0.5; packed LSB-first, ceil(n * bits / 8) bytes. bits in {1, 2, 4, 8}.
  void (*quantize_uniform)(const float* x, uint32_t n, float lo, float inv, unsigned bits, bool stochastic,
                           uint32_t key, uint32_t first, uint8_t* out);
  // code = clamp(floor(x * inv + u), -limit, limit), two's complement, `bits` wide, packed
  // LSB-first. bits in {2, 4, 8}.
  void (*quantize_shared)(const float* x, uint32_t n, float inv, int32_t limit, unsigned bits,
                          bool stochastic, uint32_t key, uint32_t first, uint8_t* out);
  // Number of i with (bits of |x[i]|) >= key_threshold.
  size_t (*count_abs_at_least)(const float* x, size_t n, uint32_t key_threshold);
  // hq (the Hadamard coder). out[i] = x[i] (0 for count <= i < padded) with its sign flipped
  // where hash32(key, first + i) is odd; out may be x.
  void (*hadamard_signs)(const float* x, uint32_t count, uint32_t padded, uint32_t key, uint32_t first,
                         float* out);
  // In place: the butterflies (a + b, a - b) of the fast Walsh-Hadamard transform, stage by
  // stage (h = 1, 2, 4, ...), then v[i] *= float(1 / sqrt(double(n))). n a power of two.
  void (*hadamard_transform)(float* v, uint32_t n);
  // codes[i] = the number of the 2^bits - 1 ascending thresholds below v[i] * inv_rms;
  // dot[i % 4] += v[i] * levels[codes[i]], in the order of i.
  void (*hadamard_quantize)(const float* v, uint32_t n, float inv_rms, const float* thresholds,
                            const float* levels, unsigned bits, uint8_t* codes, float dot[4]);
  // Optional (null: the value coder's own loop). TernGrad: the 5 base-3 digits of each of the
  // `bytes` bytes (each <= 242), least significant first, as 0, a, -a: 5 x bytes floats at out.
  void (*tern_decode)(const uint8_t* packed, uint32_t bytes, float a, float* out);
  // Optional (null: BlockRiceWordReader's own loop). At a block boundary of a block Rice stream
  // (s->left == 0): decodes whole blocks of kBlockRiceGaps (16) indices into out, as long as 16
  // more are wanted (count) and left in the stream, and the next block is one it takes (its
  // parameter in [0, 24]; its parameter code, remainders and quotient words whole in their parts;
  // every quotient at most min(n, 2^26) >> r; the next index below 2^31). Returns the number of
  // indices written, a multiple of 16, and leaves *s exactly as that many calls of
  // BlockRiceWordReader::next() would; a block it does not take is left whole to that loop.
  uint32_t (*block_rice_blocks)(BlockRiceState* s, uint32_t* out, uint32_t count);
#if EDGEFL_WITH_HADAMARD
#define EDGEFL_HADAMARD_REF_KERNELS hadamard_signs_ref, hadamard_transform_ref, hadamard_quantize_ref
#else
#define EDGEFL_HADAMARD_REF_KERNELS nullptr, nullptr, nullptr
#endif
};

// The scalar hq kernels, for tables without their own (null entries without EDGEFL_WITH_HADAMARD).
void hadamard_signs_ref(const float* x, uint32_t count, uint32_t padded, uint32_t key, uint32_t first,
                        float* out);
void hadamard_transform_ref(float* v, uint32_t n);
void hadamard_quantize_ref(const float* v, uint32_t n, float inv_rms, const float* thresholds,
                           const float* levels, unsigned bits, uint8_t* codes, float dot[4]);

#if EDGEFL_WITH_HADAMARD
// Whether hadamard_quantize's 2^bits levels and 2^bits - 1 thresholds mirror about zero bit for
// bit (the Lloyd-Max tables of values.cpp do): the middle threshold is +0, and each negative
// threshold and level is the negation of its positive twin. The ISA tables then compare |z| with
// the positive thresholds only.
inline bool hadamard_tables_mirrored(const float* thresholds, const float* levels, unsigned bits) {
  const unsigned half = 1u << (bits - 1);
  if (float_bits(thresholds[half - 1]) != 0) return false;
  for (unsigned k = 1; k < half; ++k) {
    const uint32_t upper = float_bits(thresholds[half - 1 + k]);
    if (upper == 0 || upper >= 0x7F800000u || float_bits(thresholds[half - 1 - k]) != (upper ^ 0x80000000u)) {
      return false;
    }
  }
  for (unsigned k = 0; k < half; ++k) {
    if (float_bits(levels[half - 1 - k]) != (float_bits(levels[half + k]) ^ 0x80000000u)) return false;
  }
  return true;
}
#endif

const Kernels& kernels_ref();
// The AVX2 table, or nullptr when it was not built or the CPU lacks AVX2 + F16C.
const Kernels* kernels_avx2();
// The NEON table, or nullptr when it was not built or the CPU lacks Advanced SIMD. On ARMv7
// ("neon-v7") only the integer kernels are vector code (kernels_neon.cpp says why).
const Kernels* kernels_neon();
// The table used by the codecs, chosen once from the CPU's features.
const Kernels& kernels();

}  // namespace edgefl

#endif  // EDGEFL_SRC_CODEC_KERNELS_H_
