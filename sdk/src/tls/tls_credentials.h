// tls/tls_credentials.h: mutual-TLS credentials and the one mbedTLS configuration per role.
//
// A device (TlsRole::kClient) and edgefl-server (TlsRole::kServer) each load one TlsCredentials at
// start-up: the CA certificate(s) the peer must chain to, their own certificate and ECDSA P-256 key,
// and, on the server, an optional CRL and an optional deny list of device ids. load() builds the
// mbedtls_ssl_config of shared/reference/security.md §4.3 once:
//   - TLS 1.3 preferred, TLS 1.2 as the fallback (nothing older);
//   - suites 0x1301 TLS1-3-AES-128-GCM-SHA256, 0x1303 TLS1-3-CHACHA20-POLY1305-SHA256,
//     0xC02B ECDHE-ECDSA-AES-128-GCM-SHA256, 0xCCA9 ECDHE-ECDSA-CHACHA20-POLY1305-SHA256;
//   - groups X25519 and secp256r1; handshake signatures ecdsa_secp256r1_sha256; certificates:
//     ECDSA P-256 keys signed with SHA-256 or SHA-384 (mbedtls_x509_crt_profile);
//   - MBEDTLS_SSL_VERIFY_REQUIRED on both ends (mutual TLS); the CA chain and the CRL;
//   - no session tickets and no TLS 1.3 resumption: every connection is a full handshake, so the
//     peer certificate (the identity) is always present (security.md §4.3, "3.6 pitfall");
//   - the RNG: a CTR_DRBG seeded from the OS entropy source, locked by MBEDTLS_THREADING_C.
// mbedTLS also enforces key usage: a peer certificate must allow digitalSignature and carry the
// extended key usage of its role (serverAuth for the server, clientAuth for a device) when it has
// an extendedKeyUsage extension (mbedtls_ssl_check_cert_usage, checked by net.credentials).
//
// Threads: a loaded TlsCredentials is immutable except for its deny list; config(), role(),
// server_name(), check_peer() and reload_deny_list() may be called from any thread at once, and
// one config() may back any number of mbedtls_ssl_context on any threads (each context on one
// thread at a time). It must outlive every context set up with its config().
#ifndef EDGEFL_SRC_TLS_TLS_CREDENTIALS_H_
#define EDGEFL_SRC_TLS_TLS_CREDENTIALS_H_

#include <stddef.h>
#include <stdint.h>

#include <memory>
#include <string>
#include <vector>

#include "edgefl/status.h"
#include "mbedtls/ssl.h"

namespace edgefl {
namespace tls {

enum class TlsRole { kClient, kServer };

// Paths of the PEM files a TlsCredentials is loaded from.
struct TlsFiles {
  std::string ca_file;    // PEM: the CA certificate(s) the peer must chain to (required)
  std::string cert_file;  // PEM: own certificate, then any intermediates (required)
  std::string key_file;   // PEM: own private key, ECDSA P-256, unencrypted (required)
  std::string crl_file;   // server, optional: PEM CRL(s) issued by the CA ("" = none)
  // Server: a CRL that is expired (nextUpdate passed), not yet valid, or not signed by a CA in
  // ca_file is an error at load and at reload, unless this is set (then it is a warning).
  bool allow_stale_crl = false;
  // Server, optional: revoked device ids, one per line; '#' starts a comment, blank lines are
  // ignored, every other line must be a valid device id ("" = none).
  std::string deny_file;
  // Client: the name the server certificate must carry (a DNS name matched against its dNSName
  // SANs, or a literal IPv4/IPv6 address matched against its iPAddress SANs), e.g. "localhost".
  // "" SKIPS THE HOSTNAME CHECK, which is unsafe: any server holding any certificate of the CA
  // (another device's included) could then impersonate the server. Tests and special setups only.
  std::string server_name;
};

// Initialises PSA crypto (psa_crypto_init) and checks that the linked mbedTLS is 3.6.6 or newer
// (older 3.6 releases have a TLS 1.3 client-authentication bypass). Call once per process before
// anything TLS; idempotent and thread-safe (load() calls it too). After fork(), the child must call
// psa_crypto_init() itself before using TLS (not done here). Fails: kTlsError, *error says why.
[[nodiscard]] Status tls_global_init(std::string* error);

// Reads the whole file `path` into *out (at most `max_bytes`). Fails: kIoError, with *error naming
// `what` (e.g. "ca_file"), the path and the reason (strerror, or "larger than N bytes").
[[nodiscard]] Status read_credential_file(const char* what, const std::string& path, size_t max_bytes,
                                          std::string* out, std::string* error);

// Whether `id` is a valid device id: 1 to 64 characters from [A-Za-z0-9._-].
bool is_valid_device_id(const std::string& id);

class TlsCredentials {
 public:
  // Loads `files` for `role` and builds the configuration. On success *out holds the credentials
  // and *error is cleared; on failure *out is untouched and *error names the file and the reason.
  // Fails: kInvalidArgument (a required path is empty, or a null pointer); kIoError (a file is
  // missing or unreadable); kTlsError (a file does not parse as PEM of the right kind, the key is
  // not ECDSA P-256 or does not match the certificate, the certificate's key usage does not allow
  // the role, a deny-list line is not a device id, or mbedTLS setup failed).
  // An own certificate that has expired, is not yet valid, or does not chain to ca_file is not an
  // error (the peer will refuse it): load() succeeds and says so in warnings().
  [[nodiscard]] static Status load(TlsRole role, const TlsFiles& files, std::unique_ptr<TlsCredentials>* out,
                                   std::string* error);
  ~TlsCredentials();
  TlsCredentials(const TlsCredentials&) = delete;
  TlsCredentials& operator=(const TlsCredentials&) = delete;

  // The configuration for mbedtls_ssl_setup(); valid as long as this object lives.
  const mbedtls_ssl_config* config() const;
  TlsRole role() const;
  // Client: TlsFiles::server_name. The session code passes it to mbedtls_ssl_set_hostname() before
  // the handshake (or calls apply_server_name()).
  const std::string& server_name() const;
  // Client: calls mbedtls_ssl_set_hostname(ssl, server_name()), or with NULL when server_name() is
  // "" (the explicit, unsafe skip; without either call mbedTLS 3.6 fails every handshake).
  // Fails: kTlsError (name too long, or out of memory).
  [[nodiscard]] Status apply_server_name(mbedtls_ssl_context* ssl) const;
  // Human-readable problems found by load() that do not stop it (e.g. "own certificate ... has
  // expired"); empty when there are none.
  const std::vector<std::string>& warnings() const;

  // Server, after a completed handshake on `ssl` (set up with config()): the device id is the
  // subject CN of the verified peer certificate, which must carry an extendedKeyUsage with
  // clientAuth (mbedTLS itself lets a certificate without the extension pass), have exactly one CN
  // matching [A-Za-z0-9._-]{1,64}, and not be on the deny list. kOk: *device_id is set, *reason cleared.
  // kUnauthorized: *reason says why
  // ("no client certificate", "device id 'x' is revoked (deny list)", "device id is not valid ...",
  // "client certificate not verified ...", "client certificate has no clientAuth ..."), and *device_id holds
  // the CN when there is a valid one (for logs), else "". kInvalidArgument: a null pointer, or these are
  // client credentials.
  [[nodiscard]] Status check_peer(const mbedtls_ssl_context* ssl, std::string* device_id,
                                  std::string* reason) const;

  // Re-reads TlsFiles::deny_file and swaps it in atomically (check_peer() sees the old or the new
  // list, never a mix). On failure the old list stays and *error says why (kIoError, kTlsError).
  // kOk without doing anything when there is no deny file.
  [[nodiscard]] Status reload_deny_list(std::string* error);

  // Server: re-reads crl_file (checked as at load) and deny_file, and puts both in force for the
  // handshakes that start afterwards. On any failure both old lists stay in force and *error
  // says what (unreadable, not a PEM CRL, not signed by the CA, expired, not yet valid, a bad
  // deny-list line). Must not run while another thread is in a handshake with config(): the
  // server calls it from its one io thread. Superseded CRLs are kept until destruction (a
  // handshake step may still hold a pointer), a few kB each.
  [[nodiscard]] Status reload_revocation(std::string* error);

 private:
  struct Impl;
  explicit TlsCredentials(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A one-line reason for a failed handshake or record operation: mbedtls_strerror(mbedtls_ret)
// and, when certificate verification failed on `ssl` (may be null), the verify flags in words,
// e.g. "X509 - Certificate verification failed, e.g. CRL, CA or signature check failed (-0x2700);
// peer certificate: certificate expired". Never empty.
std::string describe_tls_failure(int mbedtls_ret, const mbedtls_ssl_context* ssl);

// The verify flags (MBEDTLS_X509_BADCERT_*, MBEDTLS_X509_BADCRL_*) in words, comma-separated
// ("not trusted by the CA", "certificate expired", ...); "" for 0. Credentials loaded here also
// flag a peer whose own certificate mbedTLS skipped as unreadable (e.g. signed with SHA-1): that
// reason is then the only one given, since the others describe the certificate left in its place.
std::string describe_verify_flags(uint32_t flags);

}  // namespace tls
}  // namespace edgefl

#endif  // EDGEFL_SRC_TLS_TLS_CREDENTIALS_H_
