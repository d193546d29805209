/* edgefl_mbedtls_device_config.h: the mbedTLS 3.6 configuration of a bare-metal device (Cortex-M,
 * no OS, no heap, no clock): a TLS 1.3 client with a certificate, and nothing else.
 *
 * Used as MBEDTLS_CONFIG_FILE by platforms/cortex-m/CMakeLists.txt, which builds mbedTLS from the
 * fetched source (platforms/deps/fetch-mbedtls.sh) for the device. The hosted profile is
 * edgefl_mbedtls_config.h beside this file; the server keeps that one, unchanged.
 *
 * The contract (checked at compile time by mbedTLS's check_config.h, at link time by the
 * --wrap'ed allocator and stdio of platforms/cortex-m, and against a real edgefl-server by ctest
 * cortex_m.device_client):
 *   - protocol: TLS 1.3 only, client only, streams only; ephemeral (certificate) key exchange,
 *     mutual authentication; no PSK, no resumption, no early data, no TLS 1.2;
 *   - key exchange: ECDHE on X25519 and secp256r1 (P-256);
 *   - authentication: ECDSA P-256 with SHA-256, deterministic signatures (RFC 6979);
 *   - record protection: TLS_AES_128_GCM_SHA256 only (the server offers it first);
 *   - X.509: DER certificates and keys only (no PEM, no Base64: credentials sit in flash as DER);
 *     no CRLs (the server checks the device's revocation, not the device the server's);
 *     certificate validity dates are NOT checked: the device has no calendar (MBEDTLS_HAVE_TIME
 *     is off). A board with a battery-backed RTC should define MBEDTLS_HAVE_TIME and
 *     MBEDTLS_HAVE_TIME_DATE and provide mbedtls_platform_gmtime_r().
 *   - memory: every allocation comes from one caller-owned arena through
 *     mbedtls_memory_buffer_alloc_init() (MBEDTLS_MEMORY_BUFFER_ALLOC_C); libc's calloc/free are
 *     never referenced (MBEDTLS_PLATFORM_NO_STD_FUNCTIONS);
 *   - randomness: CTR_DRBG (AES) seeded from mbedtls_hardware_poll(), which the device provides:
 *     a real board reads its TRNG there (e.g. the RNG peripheral of an STM32 or the TRNG of an
 *     NXP part); the QEMU programs read the host's /dev/urandom through semihosting, which is
 *     acceptable for emulation only.
 *
 * Record buffers: IN 4096 and OUT 2048 bytes. The device reads records of at most IN bytes, so
 * every record the server sends must fit: its handshake messages do (an ECDSA P-256 chain of two
 * certificates is about 1 KiB), and after the handshake the device asks for ModelChunks of at
 * most kDownloadChunkBytes (3 KiB, device_client.cpp), which the server answers one frame per
 * write. OUT holds the device's own Certificate message; larger frames (3 KiB UploadChunks) go out
 * as several records.
 */
#ifndef EDGEFL_MBEDTLS_DEVICE_CONFIG_H
#define EDGEFL_MBEDTLS_DEVICE_CONFIG_H

/* --- Platform: bare metal ----------------------------------------------------------------- */
#define MBEDTLS_PLATFORM_C
#define MBEDTLS_PLATFORM_MEMORY
#define MBEDTLS_PLATFORM_NO_STD_FUNCTIONS
#define MBEDTLS_MEMORY_BUFFER_ALLOC_C
#define MBEDTLS_MEMORY_ALIGN_MULTIPLE 8
/* The arena allocator stops the program when it finds its own block list corrupted: the device
 * provides this function (it never returns), there being no exit() on bare metal. */
#define MBEDTLS_PLATFORM_EXIT_MACRO edgefl_mbedtls_device_exit
#if !defined(__ASSEMBLER__)
#ifdef __cplusplus
extern "C" {
#endif
void edgefl_mbedtls_device_exit(int status);
#ifdef __cplusplus
}
#endif
#endif
#define MBEDTLS_DEPRECATED_REMOVED
#define MBEDTLS_HAVE_ASM /* the bignum multiply-accumulate in Thumb-2 assembly (bn_mul.h) */

/* --- PSA crypto (TLS 1.3 runs on it) ------------------------------------------------------ */
#define MBEDTLS_PSA_CRYPTO_C
#define MBEDTLS_USE_PSA_CRYPTO
#define MBEDTLS_PSA_KEY_STORE_DYNAMIC
/* PSA copies every caller buffer (inputs and outputs) into fresh allocations unless told that no
 * one else can touch them while a call runs: true on a single-threaded device with no shared
 * memory, and without it hashing a 25 KB model would need 25 KB more of the TLS arena. */
#define MBEDTLS_PSA_ASSUME_EXCLUSIVE_BUFFERS

/* --- Randomness: the board's entropy source through mbedtls_hardware_poll() --------------- */
#define MBEDTLS_ENTROPY_C
#define MBEDTLS_NO_PLATFORM_ENTROPY
#define MBEDTLS_ENTROPY_HARDWARE_ALT
#define MBEDTLS_ENTROPY_FORCE_SHA256
#define MBEDTLS_CTR_DRBG_C
#define MBEDTLS_HMAC_DRBG_C /* deterministic ECDSA */

/* --- Symmetric: AES-128-GCM, tables in flash ---------------------------------------------- */
#define MBEDTLS_AES_C
#define MBEDTLS_AES_ROM_TABLES
#define MBEDTLS_AES_FEWER_TABLES
#define MBEDTLS_GCM_C
#define MBEDTLS_CIPHER_C

/* --- Hashes and KDF: SHA-256 only --------------------------------------------------------- */
#define MBEDTLS_MD_C
#define MBEDTLS_SHA256_C
#define MBEDTLS_SHA256_SMALLER
#define MBEDTLS_HKDF_C

/* --- Elliptic curves ---------------------------------------------------------------------- */
#define MBEDTLS_BIGNUM_C
#define MBEDTLS_ECP_C
#define MBEDTLS_ECP_DP_SECP256R1_ENABLED
#define MBEDTLS_ECP_DP_CURVE25519_ENABLED
#define MBEDTLS_ECP_NIST_OPTIM
#define MBEDTLS_ECDH_C
#define MBEDTLS_ECDSA_C
#define MBEDTLS_ECDSA_DETERMINISTIC
/* RAM over speed: windows of 2 (mbedTLS's defaults are 6 and 2 for MPI, 4 for ECP). */
#define MBEDTLS_MPI_WINDOW_SIZE 2
#define MBEDTLS_ECP_WINDOW_SIZE 2
#define MBEDTLS_ECP_FIXED_POINT_OPTIM 0

/* --- Keys and certificates, DER only ------------------------------------------------------ */
#define MBEDTLS_ASN1_PARSE_C
#define MBEDTLS_ASN1_WRITE_C /* ECDSA signatures are DER-encoded */
#define MBEDTLS_OID_C
#define MBEDTLS_PK_C
#define MBEDTLS_PK_PARSE_C
#define MBEDTLS_X509_USE_C
#define MBEDTLS_X509_CRT_PARSE_C

/* --- TLS 1.3 client ----------------------------------------------------------------------- */
#define MBEDTLS_SSL_TLS_C
#define MBEDTLS_SSL_CLI_C
#define MBEDTLS_SSL_PROTO_TLS1_3
#define MBEDTLS_SSL_TLS1_3_KEY_EXCHANGE_MODE_EPHEMERAL_ENABLED
#define MBEDTLS_SSL_TLS1_3_COMPATIBILITY_MODE
#define MBEDTLS_SSL_KEEP_PEER_CERTIFICATE
#define MBEDTLS_SSL_SERVER_NAME_INDICATION

#define MBEDTLS_SSL_IN_CONTENT_LEN 4096
#define MBEDTLS_SSL_OUT_CONTENT_LEN 2048
/* One resumption ticket would need time; none is kept. */
#define MBEDTLS_SSL_MAX_EARLY_DATA_SIZE 0

#endif /* EDGEFL_MBEDTLS_DEVICE_CONFIG_H */
