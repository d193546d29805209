#include "core/crc32c.h"

#include "core/cpu.h"
#include "edgefl/config.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define EDGEFL_CRC32C_X86 1
#include <immintrin.h>
#elif defined(__ARM_FEATURE_CRC32)
#define EDGEFL_CRC32C_ARM 1
#include <arm_acle.h>
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

#if defined(EDGEFL_CRC32C_X86)
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(uint32_t crc, const uint8_t* data, size_t size) {
  uint64_t c = ~crc;
  while (size >= 8) {
    uint64_t word;
    __builtin_memcpy(&word, data, 8);
    c = _mm_crc32_u64(c, word);
    data += 8;
    size -= 8;
  }
  uint32_t c32 = uint32_t(c);
  while (size--) c32 = _mm_crc32_u8(c32, *data++);
  return ~c32;
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

uint32_t crc32c_update(uint32_t crc, const uint8_t* data, size_t size) {
#if defined(EDGEFL_CRC32C_X86)
  if (cpu_features().sse42) return crc32c_sse42(crc, data, size);
#elif defined(EDGEFL_CRC32C_ARM)
  uint32_t c = ~crc;
  while (size >= 8) {
    uint64_t word;
    __builtin_memcpy(&word, data, 8);
    c = __crc32cd(c, word);
    data += 8;
    size -= 8;
  }
  while (size--) c = __crc32cb(c, *data++);
  return ~c;
#endif
  return crc32c_update_ref(crc, data, size);
}

}  // namespace edgefl
