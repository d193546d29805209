#include "round/seeds.h"

#include <string.h>

#include "core/rng.h"
#include "core/siphash.h"

namespace edgefl {
namespace {

constexpr size_t kMaxIdBytes = 255;  // longer ids are hashed in full, a tag byte and 255 at a time

SipKey expand_key(uint64_t seed) {
  SplitMix64 g(seed);
  const uint64_t k0 = g.next();
  return SipKey{k0, g.next()};
}

// SipHash of tag || bytes[0, len) under `key`, through a small stack buffer.
uint64_t tagged_hash(SipKey key, char tag, const char* bytes, size_t len) {
  uint8_t buffer[1 + kMaxIdBytes];
  buffer[0] = static_cast<uint8_t>(tag);
  if (len <= kMaxIdBytes) {
    if (len > 0) memcpy(buffer + 1, bytes, len);
    return siphash24(key, buffer, 1 + len);
  }
  // Chained: each block's hash keys the next, so every byte of a long id counts.
  uint64_t h = 0;
  for (size_t off = 0; off < len; off += kMaxIdBytes) {
    const size_t part = len - off < kMaxIdBytes ? len - off : kMaxIdBytes;
    memcpy(buffer + 1, bytes + off, part);
    h = siphash24(SipKey{key.k0 ^ h, key.k1}, buffer, 1 + part);
  }
  return h;
}

}  // namespace

uint64_t round_seed(uint64_t federation_seed, uint64_t round_id) {
  static const char kTag[] = "edgefl-round-seed";
  uint8_t message[sizeof kTag - 1 + 8];
  memcpy(message, kTag, sizeof kTag - 1);
  for (unsigned b = 0; b < 8; ++b) message[sizeof kTag - 1 + b] = uint8_t(round_id >> (8 * b));
  return siphash24(expand_key(federation_seed), message, sizeof message);
}

bool codec_seed_is_shared(const CodecSpec& uplink) {
  return uplink.sparsifier == SparsifierKind::kRandomK || uplink.values == ValueCoderKind::kCountSketch;
}

DeviceSeeds device_seeds(uint64_t seed, const char* device_id, size_t id_len, const CodecSpec& uplink) {
  const SipKey key = expand_key(seed);
  DeviceSeeds out;
  out.training = tagged_hash(key, 'T', device_id, id_len);
  out.codec = codec_seed_is_shared(uplink) ? tagged_hash(key, 'S', nullptr, 0)
                                           : tagged_hash(key, 'C', device_id, id_len);
  return out;
}

uint64_t downlink_seed(uint64_t seed) {
  return tagged_hash(expand_key(seed), 'D', nullptr, 0);
}

}  // namespace edgefl
