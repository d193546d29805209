#include "secagg/crypto.h"

#include <string.h>

#include <mbedtls/platform_util.h>

#include "core/bitio.h"

namespace edgefl {
namespace secagg {
namespace {

Status from_psa(psa_status_t status) {
  return status == PSA_SUCCESS ? Status::kOk : Status::kCryptoError;
}

// A volatile PSA key, destroyed on scope exit.
class ScopedKey {
 public:
  ScopedKey() = default;
  ~ScopedKey() {
    if (id != 0) psa_destroy_key(id);
  }
  ScopedKey(const ScopedKey&) = delete;
  ScopedKey& operator=(const ScopedKey&) = delete;
  psa_key_id_t id = 0;
};

psa_status_t import_x25519(const Key32& secret, psa_key_usage_t usage, ScopedKey* key) {
  psa_key_attributes_t attributes = PSA_KEY_ATTRIBUTES_INIT;
  psa_set_key_type(&attributes, PSA_KEY_TYPE_ECC_KEY_PAIR(PSA_ECC_FAMILY_MONTGOMERY));
  psa_set_key_bits(&attributes, 255);
  psa_set_key_usage_flags(&attributes, usage);
  psa_set_key_algorithm(&attributes, PSA_ALG_ECDH);
  return psa_import_key(&attributes, secret.data(), secret.size(), &key->id);
}

psa_status_t import_chacha20(const Key32& secret, psa_key_usage_t usage, psa_algorithm_t algorithm,
                             psa_key_id_t* id) {
  psa_key_attributes_t attributes = PSA_KEY_ATTRIBUTES_INIT;
  psa_set_key_type(&attributes, PSA_KEY_TYPE_CHACHA20);
  psa_set_key_bits(&attributes, 256);
  psa_set_key_usage_flags(&attributes, usage);
  psa_set_key_algorithm(&attributes, algorithm);
  return psa_import_key(&attributes, secret.data(), secret.size(), id);
}

Status random_fill(void*, uint8_t* out, size_t size) {
  return crypto_random_bytes(out, size);
}

}  // namespace

Status crypto_init() {
  return from_psa(psa_crypto_init());
}

Status crypto_random_bytes(uint8_t* out, size_t size) {
  return from_psa(psa_generate_random(out, size));
}

RandomSource crypto_random() {
  RandomSource source;
  source.fill = random_fill;
  return source;
}

Status x25519_generate(KeyPair* out) {
  psa_key_attributes_t attributes = PSA_KEY_ATTRIBUTES_INIT;
  psa_set_key_type(&attributes, PSA_KEY_TYPE_ECC_KEY_PAIR(PSA_ECC_FAMILY_MONTGOMERY));
  psa_set_key_bits(&attributes, 255);
  psa_set_key_usage_flags(&attributes, PSA_KEY_USAGE_EXPORT | PSA_KEY_USAGE_DERIVE);
  psa_set_key_algorithm(&attributes, PSA_ALG_ECDH);
  ScopedKey key;
  psa_status_t status = psa_generate_key(&attributes, &key.id);
  size_t length = 0;
  if (status == PSA_SUCCESS) status = psa_export_key(key.id, out->secret.data(), out->secret.size(), &length);
  if (status == PSA_SUCCESS && length != 32) status = PSA_ERROR_GENERIC_ERROR;
  if (status == PSA_SUCCESS) {
    status = psa_export_public_key(key.id, out->public_key.data(), out->public_key.size(), &length);
  }
  if (status == PSA_SUCCESS && length != 32) status = PSA_ERROR_GENERIC_ERROR;
  if (status != PSA_SUCCESS) mbedtls_platform_zeroize(out, sizeof *out);
  return from_psa(status);
}

Status x25519_public_key(const Key32& secret, Key32* public_key) {
  ScopedKey key;
  psa_status_t status = import_x25519(secret, PSA_KEY_USAGE_DERIVE, &key);
  size_t length = 0;
  if (status == PSA_SUCCESS)
    status = psa_export_public_key(key.id, public_key->data(), public_key->size(), &length);
  if (status == PSA_SUCCESS && length != 32) status = PSA_ERROR_GENERIC_ERROR;
  return from_psa(status);
}

Status x25519_agree(const Key32& secret, const Key32& peer_public, Key32* shared) {
  ScopedKey key;
  psa_status_t status = import_x25519(secret, PSA_KEY_USAGE_DERIVE, &key);
  if (status != PSA_SUCCESS) return Status::kCryptoError;
  size_t length = 0;
  status = psa_raw_key_agreement(PSA_ALG_ECDH, key.id, peer_public.data(), peer_public.size(), shared->data(),
                                 shared->size(), &length);
  if (status == PSA_ERROR_INVALID_ARGUMENT) return Status::kInvalidMessage;
  if (status != PSA_SUCCESS || length != 32) return Status::kCryptoError;
  uint8_t any = 0;
  for (uint8_t b : *shared) any = uint8_t(any | b);
  if (any == 0) return Status::kInvalidMessage;  // a low-order point: the secret is not secret
  return Status::kOk;
}

Status sha256_of(std::initializer_list<Span<const uint8_t>> parts, Key32* digest) {
  psa_hash_operation_t op = PSA_HASH_OPERATION_INIT;
  psa_status_t status = psa_hash_setup(&op, PSA_ALG_SHA_256);
  for (const Span<const uint8_t>& part : parts) {
    if (status == PSA_SUCCESS && part.size() != 0) status = psa_hash_update(&op, part.data(), part.size());
  }
  size_t length = 0;
  if (status == PSA_SUCCESS) status = psa_hash_finish(&op, digest->data(), digest->size(), &length);
  if (status != PSA_SUCCESS) psa_hash_abort(&op);
  return from_psa(status == PSA_SUCCESS && length != 32 ? PSA_ERROR_GENERIC_ERROR : status);
}

Status hkdf_sha256(Span<const uint8_t> salt, Span<const uint8_t> secret, Span<const uint8_t> info,
                   uint8_t* out, size_t size) {
  psa_key_derivation_operation_t op = PSA_KEY_DERIVATION_OPERATION_INIT;
  psa_status_t status = psa_key_derivation_setup(&op, PSA_ALG_HKDF(PSA_ALG_SHA_256));
  if (status == PSA_SUCCESS) {
    status = psa_key_derivation_input_bytes(&op, PSA_KEY_DERIVATION_INPUT_SALT, salt.data(), salt.size());
  }
  if (status == PSA_SUCCESS) {
    status =
        psa_key_derivation_input_bytes(&op, PSA_KEY_DERIVATION_INPUT_SECRET, secret.data(), secret.size());
  }
  if (status == PSA_SUCCESS) {
    status = psa_key_derivation_input_bytes(&op, PSA_KEY_DERIVATION_INPUT_INFO, info.data(), info.size());
  }
  if (status == PSA_SUCCESS) status = psa_key_derivation_output_bytes(&op, out, size);
  psa_key_derivation_abort(&op);
  if (status != PSA_SUCCESS) mbedtls_platform_zeroize(out, size);
  return from_psa(status);
}

Status aead_seal(const Key32& key, const uint8_t nonce[kAeadNonceBytes], Span<const uint8_t> aad,
                 Span<const uint8_t> plaintext, Span<uint8_t> sealed) {
  if (sealed.size() != plaintext.size() + kAeadTagBytes) return Status::kInvalidArgument;
  ScopedKey slot;
  psa_status_t status = import_chacha20(key, PSA_KEY_USAGE_ENCRYPT, PSA_ALG_CHACHA20_POLY1305, &slot.id);
  size_t length = 0;
  if (status == PSA_SUCCESS) {
    status =
        psa_aead_encrypt(slot.id, PSA_ALG_CHACHA20_POLY1305, nonce, kAeadNonceBytes, aad.data(), aad.size(),
                         plaintext.data(), plaintext.size(), sealed.data(), sealed.size(), &length);
  }
  if (status == PSA_SUCCESS && length != sealed.size()) status = PSA_ERROR_GENERIC_ERROR;
  return from_psa(status);
}

Status aead_open(const Key32& key, const uint8_t nonce[kAeadNonceBytes], Span<const uint8_t> aad,
                 Span<const uint8_t> sealed, Span<uint8_t> plaintext) {
  if (sealed.size() != plaintext.size() + kAeadTagBytes) return Status::kInvalidArgument;
  ScopedKey slot;
  psa_status_t status = import_chacha20(key, PSA_KEY_USAGE_DECRYPT, PSA_ALG_CHACHA20_POLY1305, &slot.id);
  size_t length = 0;
  if (status == PSA_SUCCESS) {
    status =
        psa_aead_decrypt(slot.id, PSA_ALG_CHACHA20_POLY1305, nonce, kAeadNonceBytes, aad.data(), aad.size(),
                         sealed.data(), sealed.size(), plaintext.data(), plaintext.size(), &length);
  }
  if (status == PSA_ERROR_INVALID_SIGNATURE) {
    mbedtls_platform_zeroize(plaintext.data(), plaintext.size());
    return Status::kAuthenticationFailed;
  }
  if (status == PSA_SUCCESS && length != plaintext.size()) status = PSA_ERROR_GENERIC_ERROR;
  if (status != PSA_SUCCESS) mbedtls_platform_zeroize(plaintext.data(), plaintext.size());
  return from_psa(status);
}

MaskStream::~MaskStream() {
  stop();
}

void MaskStream::stop() {
  if (active_) psa_cipher_abort(&operation_);
  if (key_ != 0) psa_destroy_key(key_);
  key_ = 0;
  active_ = false;
}

Status MaskStream::start(const Key32& seed, const uint8_t nonce[kAeadNonceBytes], uint32_t bits) {
  stop();
  if (bits < 1 || bits > 32) return Status::kInvalidArgument;
  mask_ = bits == 32 ? 0xffffffffu : (1u << bits) - 1;
  operation_ = PSA_CIPHER_OPERATION_INIT;
  psa_status_t status = import_chacha20(seed, PSA_KEY_USAGE_ENCRYPT, PSA_ALG_STREAM_CIPHER, &key_);
  if (status == PSA_SUCCESS) {
    active_ = true;
    status = psa_cipher_encrypt_setup(&operation_, key_, PSA_ALG_STREAM_CIPHER);
  }
  if (status == PSA_SUCCESS) status = psa_cipher_set_iv(&operation_, nonce, kAeadNonceBytes);
  if (status != PSA_SUCCESS) stop();
  return from_psa(status);
}

Status MaskStream::next(uint32_t* words, size_t count) {
  if (!active_) return Status::kInvalidArgument;
  // The keystream is ChaCha20 applied to zeros, written straight into `words`.
  uint8_t* bytes = reinterpret_cast<uint8_t*>(words);
  size_t at = 0;
  static const uint8_t zeros[4096] = {};
  while (at < count * 4) {
    const size_t chunk = count * 4 - at < sizeof zeros ? count * 4 - at : sizeof zeros;
    size_t length = 0;
    const psa_status_t status = psa_cipher_update(&operation_, zeros, chunk, bytes + at, chunk, &length);
    if (status != PSA_SUCCESS || length != chunk) {
      stop();
      return Status::kCryptoError;
    }
    at += chunk;
  }
  for (size_t i = 0; i < count; ++i) {
    words[i] = load_le32(bytes + 4 * i) & mask_;
  }
  return Status::kOk;
}

}  // namespace secagg
}  // namespace edgefl
