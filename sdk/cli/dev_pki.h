// dev_pki.h (edgefl tool): a development PKI for edgefl (`edgefl certs`): a CA, a server certificate and
// device certificates, all ECDSA P-256 with SHA-256 signatures, written as PEM files.
//
// For development, tests and small deployments: the CA key is an unencrypted file on disk. Devices
// of a real fleet should make their keys themselves and send a CSR (security.md §4.1).
//
// What is issued (X.509 v3; serials are 16 random bytes, positive; names are UTF8String):
//   ca.crt      CN=<ca_name>, O=edgefl; basicConstraints CA:TRUE, pathlen 0 (critical); keyUsage
//               keyCertSign, cRLSign (critical); subjectKeyIdentifier
//   server.crt  CN=<first server name>, O=edgefl; CA:FALSE; keyUsage digitalSignature; EKU
//               serverAuth; subjectAltName: a dNSName per name, an iPAddress per literal IPv4/IPv6
//   devices/<id>.crt  CN=<id>, O=edgefl; CA:FALSE; keyUsage digitalSignature; EKU clientAuth
// Every leaf carries subjectKeyIdentifier and authorityKeyIdentifier, computed as RFC 7093
// method 1 (the leftmost 160 bits of SHA-256 of the subjectPublicKey bits), since the SHA-1 of
// mbedtls_x509write_crt_set_subject_key_identifier() is compiled out. Keys (*.key) are SEC1 PEM
// ("EC PRIVATE KEY"), written with mode 0600; certificates with 0644. Files are written to a
// temporary name, flushed and renamed, so a crash leaves no half-written file.
//
// Hosted; thread-safe (no shared state besides PSA, initialised through tls_global_init()).
#ifndef EDGEFL_CLI_DEV_PKI_H_
#define EDGEFL_CLI_DEV_PKI_H_

#include <stdint.h>

#include <string>
#include <vector>

#include "edgefl/status.h"

namespace edgefl {
namespace cli {

struct DevPkiOptions {
  std::string out_dir;   // created (0755) if missing, with out_dir/devices
  uint32_t devices = 0;  // device-0001 .. device-NNNN (zero-padded to 4 digits); at most 9999
  // Names the server certificate carries: DNS names, or literal IPv4/IPv6 addresses (iPAddress
  // SANs; mbedTLS 3.6 writes and matches them). The first one is also the server's subject CN.
  std::vector<std::string> server_names = {"localhost", "127.0.0.1"};
  uint32_t valid_days = 365;  // validity of every certificate, from one hour ago (clock skew)
  std::string ca_name = "edgefl development CA";  // the CA's subject CN (1-64 bytes, UTF-8)
  bool force = false;  // overwrite existing files; otherwise refuse when any output file exists
};

// Writes out_dir/{ca.crt, ca.key, server.crt, server.key, devices/<id>.crt, devices/<id>.key}.
// Fails: kInvalidArgument (bad option: no out_dir, devices > 9999, valid_days 0 or > 36500, no or
// bad server name, bad ca_name), kIoError (an output file exists and force is false; a directory
// or file cannot be written), kTlsError (key generation or signing failed). *error says which.
// On failure some files may have been written (never a partial file).
[[nodiscard]] Status write_dev_pki(const DevPkiOptions& o, std::string* error);

// Issues one device certificate (CN=device_id, EKU clientAuth) and key from the CA in ca_dir
// (ca_dir/ca.crt + ca_dir/ca.key), valid from not_before_unix to not_after_unix (seconds since
// 1970, UTC; any range, e.g. one in the past for an expired certificate in tests). Fails:
// kInvalidArgument (device_id not [A-Za-z0-9._-]{1,64}, not_after < not_before, a time outside
// years 1950..9999, empty output path), kIoError (CA files unreadable; an output file exists and
// force is false; write failed), kTlsError (the CA files do not parse, the CA key does not match
// ca.crt, ca.crt is not a CA that may sign certificates, or signing failed).
[[nodiscard]] Status issue_device_cert(const std::string& ca_dir, const std::string& device_id,
                                       int64_t not_before_unix, int64_t not_after_unix,
                                       const std::string& out_cert, const std::string& out_key,
                                       std::string* error, bool force = false);

// "device-0007" for 7: the id write_dev_pki() gives device number `n` (1-based).
std::string dev_pki_device_id(uint32_t n);

}  // namespace cli
}  // namespace edgefl

#endif  // EDGEFL_CLI_DEV_PKI_H_
