// Internal to edgefl_aggregate: little-endian loads/stores, IEEE classification by bits, and the
// CRC32C of aggregate checkpoints.
//
// CRC32C (Castagnoli, reflected polynomial 0x82F63B78) is the same function as the codec core's
// sdk/src/core/crc32c.h, kept here as a small table-driven twin so that this library uses only
// the core's public headers. Checkpoints are written rarely; 1 byte per table step is enough.
#ifndef EDGEFL_SRC_AGGREGATE_BYTES_H_
#define EDGEFL_SRC_AGGREGATE_BYTES_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

namespace edgefl {
namespace aggregate_internal {

inline void store_u16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}
inline void store_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline void store_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline void store_f64(uint8_t* p, double v) {
  uint64_t bits;
  memcpy(&bits, &v, 8);
  store_u64(p, bits);
}
inline uint16_t load_u16(const uint8_t* p) {
  return uint16_t(p[0] | (uint16_t(p[1]) << 8));
}
inline uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
inline uint64_t load_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
inline double load_f64(const uint8_t* p) {
  const uint64_t bits = load_u64(p);
  double v;
  memcpy(&v, &bits, 8);
  return v;
}

inline bool is_nonfinite(float x) {
  uint32_t bits;
  memcpy(&bits, &x, 4);
  return (bits & 0x7F800000u) == 0x7F800000u;
}
inline bool is_nonfinite(double x) {
  uint64_t bits;
  memcpy(&bits, &x, 8);
  return (bits & 0x7FF0000000000000ull) == 0x7FF0000000000000ull;
}

struct Crc32cTable {
  uint32_t entry[256];
  constexpr Crc32cTable() : entry() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      entry[i] = c;
    }
  }
};
inline constexpr Crc32cTable kCrc32cTable{};

// `crc` is the running value: start with 0; crc32c(0, "123456789", 9) == 0xE3069283.
inline uint32_t crc32c(uint32_t crc, const uint8_t* data, size_t size) {
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = kCrc32cTable.entry[(crc ^ data[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

}  // namespace aggregate_internal
}  // namespace edgefl

#endif  // EDGEFL_SRC_AGGREGATE_BYTES_H_
