#include "core/crc32c.h"

#include "core/cpu.h"
#include "edgefl/config.h"

// The CRC instructions, used when the CPU has them (cpu_features(), whatever -march the build
// has): SSE4.2 on x86-64, the ARMv8 CRC32 extension on AArch64 (optional in ARMv8.0).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define EDGEFL_CRC32C_HARDWARE 1
#include <immintrin.h>
#define EDGEFL_TARGET_CRC __attribute__((target("sse4.2")))
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define EDGEFL_CRC32C_HARDWARE 1
#include <arm_acle.h>
#if defined(__clang__)
#define EDGEFL_TARGET_CRC __attribute__((target("crc")))
#else
#define EDGEFL_TARGET_CRC __attribute__((target("+crc")))
#endif
#endif

namespace edgefl {

namespace {

// Slicing-by-8 tables (or the first one only: EDGEFL_CRC32C_TABLES, edgefl/config.h), computed
// at compile time (no static initialisers, no guards).
constexpr int kTableCount = EDGEFL_CRC32C_TABLES;
struct Crc32cTables {
  uint32_t t[kTableCount][256];
};

constexpr Crc32cTables make_tables() {
  Crc32cTables tables{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    tables.t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i) {
    for (int s = 1; s < kTableCount; ++s) {
      const uint32_t prev = tables.t[s - 1][i];
      tables.t[s][i] = (prev >> 8) ^ tables.t[0][prev & 0xFFu];
    }
  }
  return tables;
}

constexpr Crc32cTables kTables = make_tables();

inline uint32_t load_le32(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}

// The CRC instructions take 3 cycles but can start one per cycle, so one stream runs at a third
// of their throughput. Long inputs go in blocks of three lanes of kLaneBytes, each lane its own
// dependency chain, joined with the "append kLaneBytes zero bytes" operator (linear over GF(2) on
// the 32-bit register, so 4 lookups of 256 entries):
//   register(A || B || C) = shift(shift(register(A)) ^ register(B)) ^ register(C)
// where register(B) and register(C) start from 0. (The method of Intel's crc_pcl and of Mark
// Adler's crc32c.c; the tables are ours, computed at compile time.)
constexpr size_t kLaneBytes = kCrc32cLaneBytes;

struct ShiftTables {
  uint32_t t[4][256];
};

constexpr ShiftTables make_shift_tables() {
  uint32_t basis[32] = {};  // the operator applied to each bit of the register
  for (int bit = 0; bit < 32; ++bit) {
    uint32_t r = uint32_t(1) << bit;
    for (size_t i = 0; i < kLaneBytes; ++i) r = (r >> 8) ^ kTables.t[0][r & 0xFFu];
    basis[bit] = r;
  }
  ShiftTables tables{};
  for (int byte = 0; byte < 4; ++byte) {
    for (uint32_t v = 0; v < 256; ++v) {
      uint32_t r = 0;
      for (int j = 0; j < 8; ++j) {
        if (v & (1u << j)) r ^= basis[8 * byte + j];
      }
      tables.t[byte][v] = r;
    }
  }
  return tables;
}

constexpr ShiftTables kShift = make_shift_tables();

inline uint32_t shift_by_lane(uint32_t r) {
  return kShift.t[0][r & 0xFFu] ^ kShift.t[1][(r >> 8) & 0xFFu] ^ kShift.t[2][(r >> 16) & 0xFFu] ^
         kShift.t[3][r >> 24];
}

// Polynomials over GF(2) modulo the CRC polynomial, in the CRC's reflected order: bit 31 is the
// coefficient of x^0, bit 0 that of x^31.
constexpr uint32_t kOne = 0x80000000u;  // x^0

// a * b mod P.
uint32_t multiply_mod_p(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t bit = kOne; bit != 0; bit >>= 1) {
    if (a & bit) product ^= b;
    b = (b & 1u) ? (b >> 1) ^ 0x82F63B78u : b >> 1;  // b * x
  }
  return product;
}

// x^(8 * bytes) mod P by square and multiply.
uint32_t x_pow_8n_mod_p(uint64_t bytes) {
  uint32_t result = kOne;
  uint32_t square = kOne >> 8;  // x^8
  for (; bytes != 0; bytes >>= 1) {
    if (bytes & 1u) result = multiply_mod_p(result, square);
    square = multiply_mod_p(square, square);
  }
  return result;
}

#if defined(EDGEFL_CRC32C_HARDWARE)
inline uint64_t load_u64(const uint8_t* p) {
  uint64_t word;
  __builtin_memcpy(&word, p, 8);  // little-endian targets only (x86-64, Arm)
  return word;
}

// The raw register after 8 bytes (one word) or 1 byte.
EDGEFL_TARGET_CRC inline uint32_t crc_word(uint32_t c, uint64_t word) {
#if defined(__x86_64__)
  return uint32_t(_mm_crc32_u64(c, word));
#else
  return __crc32cd(c, word);
#endif
}
EDGEFL_TARGET_CRC inline uint32_t crc_byte(uint32_t c, uint8_t byte) {
#if defined(__x86_64__)
  return _mm_crc32_u8(c, byte);
#else
  return __crc32cb(c, byte);
#endif
}

bool crc_instructions() {
#if defined(__x86_64__)
  return cpu_features().sse42;
#else
  return cpu_features().crc32;
#endif
}

EDGEFL_TARGET_CRC uint32_t crc32c_hardware(uint32_t crc, const uint8_t* data, size_t size) {
  uint32_t c = ~crc;
  while (size >= 3 * kLaneBytes) {
    uint32_t a = c, b = 0, d = 0;
    for (size_t i = 0; i < kLaneBytes; i += 8) {
      a = crc_word(a, load_u64(data + i));
      b = crc_word(b, load_u64(data + kLaneBytes + i));
      d = crc_word(d, load_u64(data + 2 * kLaneBytes + i));
    }
    c = shift_by_lane(shift_by_lane(a) ^ b) ^ d;
    data += 3 * kLaneBytes;
    size -= 3 * kLaneBytes;
  }
  while (size >= 8) {
    c = crc_word(c, load_u64(data));
    data += 8;
    size -= 8;
  }
  while (size--) c = crc_byte(c, *data++);
  return ~c;
}
#endif

}  // namespace

uint32_t crc32c_update_ref(uint32_t crc, const uint8_t* data, size_t size) {
  uint32_t c = ~crc;
#if EDGEFL_CRC32C_TABLES == 8
  while (size >= 8) {
    const uint32_t lo = load_le32(data) ^ c;
    const uint32_t hi = load_le32(data + 4);
    c = kTables.t[7][lo & 0xFF] ^ kTables.t[6][(lo >> 8) & 0xFF] ^ kTables.t[5][(lo >> 16) & 0xFF] ^
        kTables.t[4][lo >> 24] ^ kTables.t[3][hi & 0xFF] ^ kTables.t[2][(hi >> 8) & 0xFF] ^
        kTables.t[1][(hi >> 16) & 0xFF] ^ kTables.t[0][hi >> 24];
    data += 8;
    size -= 8;
  }
#endif
  while (size--) c = (c >> 8) ^ kTables.t[0][(c ^ *data++) & 0xFF];
  return ~c;
}

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return multiply_mod_p(x_pow_8n_mod_p(len_b), crc_a) ^ crc_b;
}

uint32_t crc32c_shift_lane(uint32_t reg) {
  return shift_by_lane(reg);
}

uint32_t crc32c_update(uint32_t crc, const uint8_t* data, size_t size) {
#if defined(EDGEFL_CRC32C_HARDWARE)
  if (crc_instructions()) return crc32c_hardware(crc, data, size);
#endif
  return crc32c_update_ref(crc, data, size);
}

}  // namespace edgefl
