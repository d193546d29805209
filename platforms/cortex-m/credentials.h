// platforms/cortex-m/credentials.h: the device's TLS credentials partition in flash.
//
// Provisioned separately from the firmware (make_credentials.py writes it; QEMU loads it with
// `-device loader,file=...,addr=<partition>`; a factory writes it once per device), so one
// firmware image serves every device. The certificate, key and CA are read in place: mbedTLS
// parses the certificates without copying them (mbedtls_x509_crt_parse_der_nocopy), so they cost
// no RAM beyond the parsed structures.
//
// Layout, little-endian:
//   magic "EFDC", format version (u32 = 1),
//   four lengths (u32): server name, CA certificate (DER), device certificate (DER),
//   device private key (DER, SEC1 or PKCS#8, P-256),
//   the four fields back to back (the server name without a terminating NUL),
//   CRC32C (u32) of everything before it.
#ifndef EDGEFL_PLATFORMS_CORTEX_M_CREDENTIALS_H_
#define EDGEFL_PLATFORMS_CORTEX_M_CREDENTIALS_H_

#include <stddef.h>
#include <stdint.h>

namespace device {

constexpr size_t kMaxServerNameChars = 253;

struct Credentials {
  char server_name[kMaxServerNameChars + 1];  // NUL-terminated copy (mbedTLS wants a C string)
  const uint8_t* ca_der;
  size_t ca_der_length;
  const uint8_t* cert_der;
  size_t cert_der_length;
  const uint8_t* key_der;
  size_t key_der_length;
};

enum class CredentialsStatus {
  kOk,
  kNoPartition,  // wrong magic: nothing provisioned
  kBadVersion,
  kBadLength,    // a length runs past the partition, or a field is empty
  kBadChecksum,  // CRC32C mismatch: a torn or corrupted write
};

// Reads the partition of `capacity` bytes at `partition`; *out points into it on kOk.
CredentialsStatus read_credentials(const uint8_t* partition, size_t capacity, Credentials* out);
const char* credentials_status_text(CredentialsStatus status);

}  // namespace device

#endif  // EDGEFL_PLATFORMS_CORTEX_M_CREDENTIALS_H_
