// Internal: SipHash-2-4, a keyed pseudorandom function on byte strings (J.-P. Aumasson and
// D. J. Bernstein, "SipHash: a fast short-input PRF", INDOCRYPT 2012, reference parameters c = 2,
// d = 4). Integer arithmetic on explicit widths: the same key and bytes give the same 64 bits on
// every platform. Used where a seed must depend on a name (a device id) without collisions an
// adversary could arrange, e.g. round/seeds.h.
#ifndef EDGEFL_SRC_CORE_SIPHASH_H_
#define EDGEFL_SRC_CORE_SIPHASH_H_

#include <stddef.h>
#include <stdint.h>

namespace edgefl {

struct SipKey {
  uint64_t k0;  // key bytes 0-7, little-endian
  uint64_t k1;  // key bytes 8-15, little-endian
};

namespace sip_detail {
inline uint64_t rotl(uint64_t x, unsigned b) {
  return (x << b) | (x >> (64 - b));
}
inline void sip_round(uint64_t v[4]) {
  v[0] += v[1];
  v[1] = rotl(v[1], 13);
  v[1] ^= v[0];
  v[0] = rotl(v[0], 32);
  v[2] += v[3];
  v[3] = rotl(v[3], 16);
  v[3] ^= v[2];
  v[0] += v[3];
  v[3] = rotl(v[3], 21);
  v[3] ^= v[0];
  v[2] += v[1];
  v[1] = rotl(v[1], 17);
  v[1] ^= v[2];
  v[2] = rotl(v[2], 32);
}
}  // namespace sip_detail

// SipHash-2-4 of `len` bytes at `data` (null only when len == 0) under `key`.
inline uint64_t siphash24(SipKey key, const uint8_t* data, size_t len) {
  uint64_t v[4] = {0x736f6d6570736575ull ^ key.k0, 0x646f72616e646f6dull ^ key.k1,
                   0x6c7967656e657261ull ^ key.k0, 0x7465646279746573ull ^ key.k1};
  const size_t whole = len - len % 8;
  for (size_t i = 0; i < whole; i += 8) {
    uint64_t m = 0;
    for (unsigned b = 0; b < 8; ++b) m |= uint64_t(data[i + b]) << (8 * b);
    v[3] ^= m;
    sip_detail::sip_round(v);
    sip_detail::sip_round(v);
    v[0] ^= m;
  }
  uint64_t last = uint64_t(len & 0xff) << 56;
  for (size_t i = whole; i < len; ++i) last |= uint64_t(data[i]) << (8 * (i - whole));
  v[3] ^= last;
  sip_detail::sip_round(v);
  sip_detail::sip_round(v);
  v[0] ^= last;
  v[2] ^= 0xff;
  for (int r = 0; r < 4; ++r) sip_detail::sip_round(v);
  return v[0] ^ v[1] ^ v[2] ^ v[3];
}

}  // namespace edgefl

#endif  // EDGEFL_SRC_CORE_SIPHASH_H_
