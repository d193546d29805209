#include "tls/digest.h"

#include <mbedtls/sha256.h>

#include <algorithm>
#include <cstring>
#include <new>

namespace edgefl {
namespace tls {
namespace {
static_assert(sizeof(mbedtls_sha256_context) <= 128, "Sha256::context_ is too small");
static_assert(alignof(mbedtls_sha256_context) <= 8, "Sha256::context_ is under-aligned");
mbedtls_sha256_context* as_context(unsigned char* storage) {
  return std::launder(reinterpret_cast<mbedtls_sha256_context*>(storage));
}
}  // namespace

Sha256Digest sha256(Span<const uint8_t> bytes) {
  Sha256 hash;
  hash.update(bytes);
  return hash.finish();
}

Sha256Digest sha256_of_floats(Span<const float> values) {
  Sha256 hash;
  uint8_t block[4 * 1024];
  for (size_t at = 0; at < values.size();) {
    const size_t count = std::min<size_t>(1024, values.size() - at);
    for (size_t i = 0; i < count; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &values[at + i], 4);
      for (size_t k = 0; k < 4; ++k) block[4 * i + k] = uint8_t(bits >> (8 * k));
    }
    hash.update({block, 4 * count});
    at += count;
  }
  return hash.finish();
}

Sha256::Sha256() {
  new (context_) mbedtls_sha256_context;
  mbedtls_sha256_init(as_context(context_));
  mbedtls_sha256_starts(as_context(context_), /*is224=*/0);
}

Sha256::~Sha256() {
  mbedtls_sha256_free(as_context(context_));
}

void Sha256::update(Span<const uint8_t> bytes) {
  if (bytes.size() != 0) mbedtls_sha256_update(as_context(context_), bytes.data(), bytes.size());
}

Sha256Digest Sha256::finish() {
  Sha256Digest digest{};
  mbedtls_sha256_finish(as_context(context_), digest.data());
  reset();
  return digest;
}

void Sha256::reset() {
  mbedtls_sha256_free(as_context(context_));
  mbedtls_sha256_init(as_context(context_));
  mbedtls_sha256_starts(as_context(context_), 0);
}

std::string to_hex(Span<const uint8_t> bytes) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (size_t i = 0; i < bytes.size(); ++i) {
    out.push_back(kHex[bytes[i] >> 4]);
    out.push_back(kHex[bytes[i] & 15]);
  }
  return out;
}

}  // namespace tls
}  // namespace edgefl
