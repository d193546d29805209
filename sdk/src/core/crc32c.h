// Internal: CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the integrity check of every
// encoding. crc32c_update_ref is the portable reference; crc32c_update uses SSE4.2 or the ARMv8
// CRC instructions when the CPU has them, and gives identical results.
#ifndef EDGEFL_SRC_CORE_CRC32C_H_
#define EDGEFL_SRC_CORE_CRC32C_H_

#include <stddef.h>
#include <stdint.h>

namespace edgefl {

// `crc` is the running value: start with 0; crc32c_update(0, "123456789", 9) == 0xE3069283.
uint32_t crc32c_update(uint32_t crc, const uint8_t* data, size_t size);
uint32_t crc32c_update_ref(uint32_t crc, const uint8_t* data, size_t size);

// The CRC of A || B from crc_a = CRC(A), crc_b = CRC(B) (each started from 0) and B's length:
// crc32c_update(crc_a, B, len_b) == crc32c_combine(crc_a, crc_b, len_b). O(log len_b), no tables
// (GF(2) arithmetic modulo the polynomial, the method of zlib's crc32_combine).
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

// For kernels that checksum what they write in three interleaved lanes: the raw CRC register
// (not inverted) after kCrc32cLaneBytes zero bytes, given the register before them. A block of
// three lanes A, B, C with registers a (continued from before), b and c (started from 0) leaves
// crc32c_shift_lane(crc32c_shift_lane(a) ^ b) ^ c.
constexpr size_t kCrc32cLaneBytes = 512;
uint32_t crc32c_shift_lane(uint32_t reg);

}  // namespace edgefl

#endif  // EDGEFL_SRC_CORE_CRC32C_H_
