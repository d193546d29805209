/* edgefl_mbedtls_check.c: what edgefl needs from an mbedTLS it did not configure itself.
 *
 * Compiled and linked at configure time by platforms/cmake/edgefl_mbedtls.cmake (try_compile)
 * against the chosen mbedTLS, installed (EDGEFL_MBEDTLS=system) or bundled: a failure stops the
 * configuration with the #error below in the log, instead of a confusing build or run-time error.
 * The bundled build also gets mbedTLS's own check_config.h over edgefl_mbedtls_config.h here.
 */
#include "mbedtls/build_info.h"
#include "mbedtls/version.h"

#if !defined(MBEDTLS_VERSION_NUMBER) || MBEDTLS_VERSION_NUMBER < 0x03060000
#error "edgefl: mbedTLS 3.6 or later is required (Debian 12's 2.28 has no TLS 1.3 and is end of life)"
#endif
#if MBEDTLS_VERSION_NUMBER >= 0x04000000
#error "edgefl: mbedTLS 4.x is not supported yet (its crypto API moved to TF-PSA-Crypto): use 3.6 LTS"
#endif
#if !defined(MBEDTLS_SSL_PROTO_TLS1_3)
#error "edgefl: this mbedTLS was built without TLS 1.3 (MBEDTLS_SSL_PROTO_TLS1_3)"
#endif
#if !defined(MBEDTLS_SSL_CLI_C) || !defined(MBEDTLS_SSL_SRV_C)
#error "edgefl: this mbedTLS lacks the TLS client or server (MBEDTLS_SSL_CLI_C, MBEDTLS_SSL_SRV_C)"
#endif
#if !defined(MBEDTLS_SSL_TLS1_3_KEY_EXCHANGE_MODE_EPHEMERAL_ENABLED)
#error \
    "edgefl: this mbedTLS lacks TLS 1.3 certificate authentication (..._KEY_EXCHANGE_MODE_EPHEMERAL_ENABLED)"
#endif
#if !defined(MBEDTLS_PSA_CRYPTO_C)
#error "edgefl: this mbedTLS lacks PSA crypto (MBEDTLS_PSA_CRYPTO_C)"
#endif
#if !defined(MBEDTLS_X509_CRT_PARSE_C) || !defined(MBEDTLS_X509_CRL_PARSE_C)
#error "edgefl: this mbedTLS cannot parse certificates or CRLs"
#endif
#if !defined(MBEDTLS_X509_CRT_WRITE_C) || !defined(MBEDTLS_PK_WRITE_C) || !defined(MBEDTLS_PEM_WRITE_C)
#error "edgefl: this mbedTLS cannot write keys and certificates (edgefl certs)"
#endif
#if !defined(MBEDTLS_ECDSA_C) || !defined(MBEDTLS_ECP_DP_SECP256R1_ENABLED)
#error "edgefl: this mbedTLS lacks ECDSA on P-256"
#endif
#if !defined(MBEDTLS_ECP_DP_CURVE25519_ENABLED)
#error "edgefl: this mbedTLS lacks X25519"
#endif
#if !defined(MBEDTLS_GCM_C) && !defined(MBEDTLS_CHACHAPOLY_C)
#error "edgefl: this mbedTLS has neither AES-GCM nor ChaCha20-Poly1305"
#endif
#if !defined(MBEDTLS_VERSION_C)
#error "edgefl: this mbedTLS lacks MBEDTLS_VERSION_C (the start-up version check needs it)"
#endif

/* Linking this proves that the libraries are there and usable; ctest net.tls_config compares the
 * run-time version (mbedtls_version_get_number) with the headers'. */
int main(void) {
  return (mbedtls_version_get_number() >> 16) == (MBEDTLS_VERSION_NUMBER >> 16) ? 0 : 1;
}
