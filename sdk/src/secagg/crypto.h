// The cryptographic primitives of secure aggregation, on PSA crypto (mbedTLS 3.6; the project's
// configuration platforms/mbedtls/edgefl_mbedtls_config.h has all of them; an installed mbedTLS
// without one fails with kCryptoError):
//
//   key agreement   X25519 (RFC 7748), raw shared secrets
//   key derivation  HKDF-SHA256 (RFC 5869) with a domain label, the round's nonce as salt
//   mask PRG        the ChaCha20 keystream (RFC 8439) of a 32-byte seed: the low m bits of each
//                   little-endian 32-bit word, identical on every platform
//   share AEAD      ChaCha20-Poly1305 (RFC 8439): software AES is table-based and timing-leaky on
//                   devices without AES hardware (shared/reference/security.md §1.3)
//
// Contract: every function is thread-safe once crypto_init() succeeded; keys live in volatile
// PSA slots only for the duration of one call and secrets on the stack are wiped.
#ifndef EDGEFL_SRC_SECAGG_CRYPTO_H_
#define EDGEFL_SRC_SECAGG_CRYPTO_H_

#include <stddef.h>
#include <stdint.h>

#include <array>
#include <initializer_list>

#include <psa/crypto.h>

#include "edgefl/span.h"
#include "edgefl/status.h"
#include "secagg/shamir.h"

namespace edgefl {
namespace secagg {

using Key32 = std::array<uint8_t, 32>;
constexpr size_t kAeadNonceBytes = 12;
constexpr size_t kAeadTagBytes = 16;

// psa_crypto_init(), once per process. kCryptoError if PSA cannot start.
[[nodiscard]] Status crypto_init();

// Bytes from PSA's CSPRNG, as a RandomSource for shamir_split().
[[nodiscard]] Status crypto_random_bytes(uint8_t* out, size_t size);
RandomSource crypto_random();

// An X25519 key pair: the secret scalar as PSA exports it, and the public u-coordinate.
struct KeyPair {
  Key32 secret{};
  Key32 public_key{};
};
[[nodiscard]] Status x25519_generate(KeyPair* out);
// The public key of `secret` (checks a reconstructed secret against an advertised key).
[[nodiscard]] Status x25519_public_key(const Key32& secret, Key32* public_key);
// The raw shared secret. kInvalidMessage if the peer's key is a low-order point (all-zero
// result) or malformed.
[[nodiscard]] Status x25519_agree(const Key32& secret, const Key32& peer_public, Key32* shared);

// SHA-256 of the concatenation of `parts`.
[[nodiscard]] Status sha256_of(std::initializer_list<Span<const uint8_t>> parts, Key32* digest);

// HKDF-SHA256 (extract with `salt`, expand with `info`) into out[0..size), size <= 255 * 32.
[[nodiscard]] Status hkdf_sha256(Span<const uint8_t> salt, Span<const uint8_t> secret,
                                 Span<const uint8_t> info, uint8_t* out, size_t size);

// ChaCha20-Poly1305: `sealed` holds plaintext.size() + kAeadTagBytes bytes. open() fails with
// kAuthenticationFailed when the tag does not verify (a changed byte, another key, nonce or aad)
// and then leaves `plaintext` zeroed.
[[nodiscard]] Status aead_seal(const Key32& key, const uint8_t nonce[kAeadNonceBytes],
                               Span<const uint8_t> aad, Span<const uint8_t> plaintext, Span<uint8_t> sealed);
[[nodiscard]] Status aead_open(const Key32& key, const uint8_t nonce[kAeadNonceBytes],
                               Span<const uint8_t> aad, Span<const uint8_t> sealed, Span<uint8_t> plaintext);

// The mask generator: the ChaCha20 keystream of (seed, nonce) from block 0, as 32-bit words
// truncated to `bits` (1..32). next() continues where the previous call stopped. One object per
// stream; not copyable (it owns a PSA key and operation).
class MaskStream {
 public:
  MaskStream() = default;
  ~MaskStream();
  MaskStream(const MaskStream&) = delete;
  MaskStream& operator=(const MaskStream&) = delete;

  [[nodiscard]] Status start(const Key32& seed, const uint8_t nonce[kAeadNonceBytes], uint32_t bits);
  [[nodiscard]] Status next(uint32_t* words, size_t count);

 private:
  void stop();
  psa_key_id_t key_ = 0;
  psa_cipher_operation_t operation_ = PSA_CIPHER_OPERATION_INIT;
  bool active_ = false;
  uint32_t mask_ = 0;
};

}  // namespace secagg
}  // namespace edgefl

#endif  // EDGEFL_SRC_SECAGG_CRYPTO_H_
