// Internal: CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the integrity check of every
// encoding. crc32c_update_ref is the portable reference; crc32c_update uses SSE4.2 or the ARMv8
// CRC instructions when the build or the CPU has them, and gives identical results.
#ifndef EDGEFL_SRC_CORE_CRC32C_H_
#define EDGEFL_SRC_CORE_CRC32C_H_

#include <stddef.h>
#include <stdint.h>

namespace edgefl {

// `crc` is the running value: start with 0; crc32c_update(0, "123456789", 9) == 0xE3069283.
uint32_t crc32c_update(uint32_t crc, const uint8_t* data, size_t size);
uint32_t crc32c_update_ref(uint32_t crc, const uint8_t* data, size_t size);

}  // namespace edgefl

#endif  // EDGEFL_SRC_CORE_CRC32C_H_
