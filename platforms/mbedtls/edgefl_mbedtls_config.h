/* edgefl_mbedtls_config.h: the complete mbedTLS 3.6 configuration of edgefl's hosted builds (the
 * `edgefl` tool, edgefl-server, the SDK's network layer on Linux/Android/iOS).
 *
 * Used as MBEDTLS_CONFIG_FILE by platforms/cmake/edgefl_mbedtls.cmake when mbedTLS is built from
 * the fetched source (EDGEFL_MBEDTLS=bundled, or auto without an installed 3.6). An installed
 * mbedTLS (EDGEFL_MBEDTLS=system) was configured by whoever built it: this file is NOT applied
 * then, and only the version and TLS 1.3 are checked (platforms/mbedtls/edgefl_mbedtls_check.c).
 *
 * The contract, enforced at compile time by mbedTLS's own check_config.h (included by
 * build_info.h after this file) and at run time by tests/net/tls_config_test.cpp (ctest
 * net.tls_config):
 *   - protocols: TLS 1.3 and TLS 1.2 over streams; no SSLv3/TLS 1.0/1.1, no DTLS, no renegotiation;
 *   - key exchange: ECDHE only, on X25519 and secp256r1 (P-256);
 *   - authentication: ECDSA P-256 certificates (SHA-256/384 signatures); no RSA, no PSK;
 *   - record protection: AEAD only, AES-GCM (128/256) and ChaCha20-Poly1305; no CBC, no NULL;
 *   - hashes: SHA-256 and SHA-384 (SHA-512 shares their code and feeds the entropy pool);
 *     no MD5, no SHA-1, no RIPEMD-160;
 *   - X.509: parse certificates, CRLs and CSRs; write certificates and CSRs; ECDSA key generation;
 *     PEM in and out (the `edgefl certs` command: a dev CA, device keys, CSRs, certificates);
 *   - crypto through PSA (MBEDTLS_USE_PSA_CRYPTO): call psa_crypto_init() before any TLS, X.509
 *     or PK operation, and again in a fork()ed child.
 * The resulting suites: TLS1-3-AES-128-GCM-SHA256, TLS1-3-AES-256-GCM-SHA384,
 * TLS1-3-CHACHA20-POLY1305-SHA256, and ECDHE-ECDSA with AES-128-GCM, AES-256-GCM or
 * CHACHA20-POLY1305 for TLS 1.2. The runtime policy (suites, groups, sig_algs, VERIFY_REQUIRED,
 * hostname) must still be set on every mbedtls_ssl_config: see shared/reference/security.md §4.3.
 *
 * Overrides: the knobs marked "#ifndef" can be defined before this file, e.g. on the compiler
 * command line of every target that includes mbedTLS headers (they must agree with the library);
 * anything else goes in an MBEDTLS_USER_CONFIG_FILE (mbedTLS's CMake cache variable), which
 * build_info.h includes right after this file (#undef there to take a feature out).
 * Microcontroller profiles get their own header beside this one.
 */
#ifndef EDGEFL_MBEDTLS_CONFIG_H
#define EDGEFL_MBEDTLS_CONFIG_H

/* --- Platform: a hosted POSIX system (Linux, Android, Apple) ---------------------------------
 * Contract: libc calloc/free, the OS entropy source (getrandom or /dev/urandom), wall-clock time
 * with dates (certificate validity is checked against it), files (loading PEM/DER from paths),
 * and pthreads: PSA's key store is process-wide, and the server and `edgefl sim` use TLS and
 * PSA from several threads (mbedTLS then needs MBEDTLS_THREADING_C for TLS 1.3). Deprecated
 * APIs are compiled out, so new code cannot use mbedtls_ssl_conf_curves() and the like. */
#define MBEDTLS_HAVE_ASM
#define MBEDTLS_HAVE_TIME
#define MBEDTLS_HAVE_TIME_DATE
#define MBEDTLS_PLATFORM_C
#define MBEDTLS_FS_IO
#define MBEDTLS_THREADING_C
#define MBEDTLS_THREADING_PTHREAD
#define MBEDTLS_DEPRECATED_REMOVED
#define MBEDTLS_ERROR_C   /* mbedtls_strerror(): readable reasons for failed handshakes */
#define MBEDTLS_VERSION_C /* mbedtls_version_get_number(): the start-up version check */

/* --- PSA crypto: the crypto API of TLS 1.3 and of new code ------------------------------------
 * Contract: PSA is the only crypto front end (X.509, PK and TLS 1.2 go through it too); volatile
 * keys only (no PSA_CRYPTO_STORAGE_C: nothing is written to disk behind the caller's back). */
#define MBEDTLS_PSA_CRYPTO_C
#define MBEDTLS_USE_PSA_CRYPTO
#define MBEDTLS_PSA_KEY_STORE_DYNAMIC

/* --- Randomness ----------------------------------------------------------------------------
 * Contract: an entropy pool over the OS source, CTR_DRBG (AES-256) for PSA and for callers that
 * still need an f_rng, HMAC_DRBG for deterministic ECDSA (RFC 6979: no nonce-reuse risk from a
 * weak RNG when signing). */
#define MBEDTLS_ENTROPY_C
#define MBEDTLS_CTR_DRBG_C
#define MBEDTLS_HMAC_DRBG_C

/* --- Symmetric ciphers: AEAD only ----------------------------------------------------------
 * Contract: AES (with AES-NI on x86-64 and the Armv8 crypto extension on Arm, both chosen at run
 * time: software AES is table-based and timing-leaky), GCM, ChaCha20-Poly1305 (for CPUs without
 * AES hardware). No cipher modes besides GCM: no CBC, CFB, OFB, XTS, CTR; no DES/3DES, ARC4,
 * Camellia, ARIA, CCM, NULL. (SecAgg's mask PRG can use PSA's ChaCha20 stream cipher; add
 * MBEDTLS_CIPHER_MODE_CTR here if it needs AES-CTR.) */
#define MBEDTLS_AES_C
#define MBEDTLS_AESNI_C
#define MBEDTLS_AESCE_C
#define MBEDTLS_GCM_C
#define MBEDTLS_CHACHA20_C
#define MBEDTLS_POLY1305_C
#define MBEDTLS_CHACHAPOLY_C
#define MBEDTLS_CIPHER_C

/* --- Hashes, MAC, KDF ----------------------------------------------------------------------
 * Contract: SHA-256 and SHA-384 for signatures, the TLS 1.2 PRF and the TLS 1.3 key schedule
 * (HKDF, also for SecAgg seeds). SHA-512 shares its code with SHA-384 and keeps the entropy
 * pool's default hash. No MD5, no SHA-1 (so no SHA-1 signatures anywhere; note that
 * mbedtls_x509write_crt_set_subject_key_identifier() needs SHA-1 and is compiled out: a key
 * identifier can be set as a raw extension, RFC 7093 method 1, SHA-256 truncated to 160 bits). */
#define MBEDTLS_MD_C
#define MBEDTLS_SHA256_C
#define MBEDTLS_SHA384_C
#define MBEDTLS_SHA512_C
#define MBEDTLS_HKDF_C

/* --- Elliptic curves: X25519 for key exchange, P-256 for key exchange and ECDSA ------------
 * Contract: exactly two curves; ECDSA sign/verify/keygen on P-256 (deterministic signatures);
 * ECDH on both curves. Only named curves in uncompressed form are parsed. */
#define MBEDTLS_BIGNUM_C
#define MBEDTLS_ECP_C
#define MBEDTLS_ECP_DP_SECP256R1_ENABLED
#define MBEDTLS_ECP_DP_CURVE25519_ENABLED
#define MBEDTLS_ECP_NIST_OPTIM
#define MBEDTLS_ECDH_C
#define MBEDTLS_ECDSA_C
#define MBEDTLS_ECDSA_DETERMINISTIC

/* --- Keys, ASN.1, PEM ----------------------------------------------------------------------
 * Contract: parse and write EC private and public keys in DER and PEM (unencrypted: no PKCS#5,
 * PKCS#12 or encrypted PEM; keys at rest are protected by the device, not by a password). */
#define MBEDTLS_ASN1_PARSE_C
#define MBEDTLS_ASN1_WRITE_C
#define MBEDTLS_OID_C
#define MBEDTLS_BASE64_C
#define MBEDTLS_PEM_PARSE_C
#define MBEDTLS_PEM_WRITE_C
#define MBEDTLS_PK_C
#define MBEDTLS_PK_PARSE_C
#define MBEDTLS_PK_WRITE_C

/* --- X.509 ---------------------------------------------------------------------------------
 * Contract: parse and verify certificate chains and CRLs (revoked devices), parse CSRs (the CA
 * side of `edgefl certs`; check every field before signing: mbedTLS must not sign untrusted CSRs
 * unchecked), write certificates and CSRs. No RSASSA-PSS. */
#define MBEDTLS_X509_USE_C
#define MBEDTLS_X509_CRT_PARSE_C
#define MBEDTLS_X509_CRL_PARSE_C
#define MBEDTLS_X509_CSR_PARSE_C
#define MBEDTLS_X509_CREATE_C
#define MBEDTLS_X509_CRT_WRITE_C
#define MBEDTLS_X509_CSR_WRITE_C

/* --- TLS: versions and key exchanges ------------------------------------------------------
 * Contract: client and server, TLS 1.3 preferred and TLS 1.2 as the fallback, streams only.
 * TLS 1.2: ECDHE-ECDSA is the only key exchange (no RSA, static ECDH, DHE or PSK), with the
 * extended master secret (RFC 7627). TLS 1.3: the ephemeral (certificate) mode only: no pure PSK
 * (no forward secrecy), no PSK-ephemeral, so no TLS 1.3 resumption and no 0-RTT early data (a
 * 3.6 TLS 1.3 resumption carries no client certificate). Middlebox compatibility mode on (RFC
 * 8446 D.4). No renegotiation, no DTLS, no encrypt-then-MAC (CBC only), no context
 * serialization. MBEDTLS_SSL_CLI_ALLOW_WEAK_CERTIFICATE_VERIFICATION_WITHOUT_HOSTNAME is never
 * defined: a client that forgets mbedtls_ssl_set_hostname() fails its handshake. */
#define MBEDTLS_SSL_TLS_C
#define MBEDTLS_SSL_CLI_C
#define MBEDTLS_SSL_SRV_C
#define MBEDTLS_SSL_PROTO_TLS1_2
#define MBEDTLS_SSL_PROTO_TLS1_3
#define MBEDTLS_KEY_EXCHANGE_ECDHE_ECDSA_ENABLED
#define MBEDTLS_SSL_EXTENDED_MASTER_SECRET
#define MBEDTLS_SSL_TLS1_3_KEY_EXCHANGE_MODE_EPHEMERAL_ENABLED
#define MBEDTLS_SSL_TLS1_3_COMPATIBILITY_MODE

/* --- TLS: extensions and features ---------------------------------------------------------
 * Contract: the peer certificate is kept after the handshake (TLS 1.3 requires it, and the
 * server maps it to a client id); SNI and ALPN; RFC 5705/8446 keying-material export (binding
 * application tokens to the channel); every alert message sent; TLS 1.2 session tickets, issued
 * only by a server that installs a ticket callback (they carry the peer certificate, unlike
 * 3.6's TLS 1.3 tickets, which this build cannot use); max_fragment_length for TLS 1.2 clients
 * with small buffers. */
#define MBEDTLS_SSL_KEEP_PEER_CERTIFICATE
#define MBEDTLS_SSL_SERVER_NAME_INDICATION
#define MBEDTLS_SSL_ALPN
#define MBEDTLS_SSL_KEYING_MATERIAL_EXPORT
#define MBEDTLS_SSL_ALL_ALERT_MESSAGES
#define MBEDTLS_SSL_SESSION_TICKETS
#define MBEDTLS_SSL_TICKET_C
#define MBEDTLS_SSL_MAX_FRAGMENT_LENGTH

/* --- TLS: record buffers (overridable) -----------------------------------------------------
 * Contract: the largest plaintext record, in bytes, each side can receive (IN) and send (OUT);
 * each TLS context allocates about IN + OUT plus ~0.5 KiB of record overhead. 16384 is the
 * protocol maximum and what a server must accept from arbitrary peers.
 * Small devices can use 2048..4096, but only if the peer never sends more than IN:
 *   - TLS 1.2: the client asks for it with mbedtls_ssl_conf_max_frag_len() (max_fragment_length,
 *     RFC 6066; 512..4096 in powers of two), which this config enables;
 *   - TLS 1.3: max_fragment_length does not exist; the record_size_limit extension (RFC 8449)
 *     replaces it: define MBEDTLS_SSL_RECORD_SIZE_LIMIT (in a user config file) on BOTH the
 *     device and the server build. It is off here: in 3.6 its handshake path is marked untested,
 *     so enable it together with an interop test at the chosen size;
 *   - OUT must hold the largest handshake message this side sends (its certificate chain: keep
 *     ECDSA chains short); IN must hold the peer's (the server's chain, on a device).
 * The server keeps IN at 16384. */
#ifndef MBEDTLS_SSL_IN_CONTENT_LEN
#define MBEDTLS_SSL_IN_CONTENT_LEN 16384
#endif
#ifndef MBEDTLS_SSL_OUT_CONTENT_LEN
#define MBEDTLS_SSL_OUT_CONTENT_LEN 16384
#endif

#endif /* EDGEFL_MBEDTLS_CONFIG_H */
