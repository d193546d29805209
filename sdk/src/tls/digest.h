// tls/digest.h: SHA-256 of updates and model files (the Commit digest, the TaskOffer's model
// digest), through mbedTLS. Hosted; thread-safe; no state kept between calls.
#ifndef EDGEFL_SRC_TLS_DIGEST_H_
#define EDGEFL_SRC_TLS_DIGEST_H_

#include <stddef.h>
#include <stdint.h>

#include <array>
#include <string>

#include "edgefl/span.h"

namespace edgefl {
namespace tls {

using Sha256Digest = std::array<uint8_t, 32>;

// SHA-256 of `bytes` (FIPS 180-4). Never fails for a valid span.
Sha256Digest sha256(Span<const uint8_t> bytes);

// Incremental SHA-256, for data that arrives in chunks. Not copyable (it owns an mbedTLS context).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(Span<const uint8_t> bytes);
  // The digest of everything given since construction or the last reset(); then resets.
  Sha256Digest finish();
  void reset();

 private:
  alignas(8) unsigned char context_[128];  // mbedtls_sha256_context (checked in digest.cpp)
};

// SHA-256 of `values` as little-endian float32 (the public model's digest, round/downlink.h).
Sha256Digest sha256_of_floats(Span<const float> values);

// Lower-case hex of `bytes` (2 characters per byte).
std::string to_hex(Span<const uint8_t> bytes);

}  // namespace tls
}  // namespace edgefl

#endif  // EDGEFL_SRC_TLS_DIGEST_H_
