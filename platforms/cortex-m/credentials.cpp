// platforms/cortex-m/credentials.cpp: reads the credentials partition (credentials.h).
#include "credentials.h"

#include <string.h>

#include "core/crc32c.h"

namespace device {
namespace {

constexpr uint8_t kMagic[4] = {'E', 'F', 'D', 'C'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kHeaderBytes = 4 + 4 + 4 * 4;

uint32_t load_le32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

}  // namespace

CredentialsStatus read_credentials(const uint8_t* partition, size_t capacity, Credentials* out) {
  if (capacity < kHeaderBytes + 4 || memcmp(partition, kMagic, sizeof kMagic) != 0) {
    return CredentialsStatus::kNoPartition;
  }
  if (load_le32(partition + 4) != kFormatVersion) return CredentialsStatus::kBadVersion;
  uint32_t lengths[4];
  size_t total = kHeaderBytes;
  for (int i = 0; i < 4; ++i) {
    lengths[i] = load_le32(partition + 8 + 4 * i);
    // Each field fits what is left; the sum cannot wrap because each is checked against capacity.
    if (lengths[i] == 0 || lengths[i] > capacity - 4 - total) return CredentialsStatus::kBadLength;
    total += lengths[i];
  }
  if (lengths[0] > kMaxServerNameChars) return CredentialsStatus::kBadLength;
  if (edgefl::crc32c_update(0, partition, total) != load_le32(partition + total)) {
    return CredentialsStatus::kBadChecksum;
  }
  const uint8_t* field = partition + kHeaderBytes;
  memcpy(out->server_name, field, lengths[0]);
  out->server_name[lengths[0]] = '\0';
  if (strlen(out->server_name) != lengths[0]) return CredentialsStatus::kBadLength;  // a NUL inside
  field += lengths[0];
  out->ca_der = field;
  out->ca_der_length = lengths[1];
  field += lengths[1];
  out->cert_der = field;
  out->cert_der_length = lengths[2];
  field += lengths[2];
  out->key_der = field;
  out->key_der_length = lengths[3];
  return CredentialsStatus::kOk;
}

const char* credentials_status_text(CredentialsStatus status) {
  switch (status) {
    case CredentialsStatus::kOk: return "ok";
    case CredentialsStatus::kNoPartition: return "no credentials partition (wrong magic)";
    case CredentialsStatus::kBadVersion: return "credentials partition of an unknown format version";
    case CredentialsStatus::kBadLength: return "credentials partition with a field of a bad length";
    case CredentialsStatus::kBadChecksum: return "credentials partition fails its CRC32C";
  }
  return "unknown";
}

}  // namespace device
