// tests/support/crc32c.h: an independent, bitwise CRC32C (Castagnoli) for crafting encodings.
//
// Reflected polynomial 0x82F63B78, initial value ~0, final xor ~0: crc32c("123456789") ==
// 0xE3069283. Deliberately the slowest correct implementation, so that it shares no code (and no
// table bug) with the SDK's.
#ifndef EDGEFL_TESTS_SUPPORT_CRC32C_H_
#define EDGEFL_TESTS_SUPPORT_CRC32C_H_

#include <stddef.h>
#include <stdint.h>

namespace edgefl_test {

// Continues a CRC32C over `data`: pass the previous return value as `crc` (0 to start).
inline uint32_t crc32c_update(uint32_t crc, const uint8_t* data, size_t size) {
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) {
    crc ^= data[i];
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

inline uint32_t crc32c(const uint8_t* data, size_t size) {
  return crc32c_update(0, data, size);
}

}  // namespace edgefl_test

#endif  // EDGEFL_TESTS_SUPPORT_CRC32C_H_
