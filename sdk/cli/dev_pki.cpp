#include "dev_pki.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <utility>

#include "mbedtls/asn1.h"
#include "mbedtls/ctr_drbg.h"
#include "mbedtls/ecp.h"
#include "mbedtls/entropy.h"
#include "mbedtls/error.h"
#include "mbedtls/oid.h"
#include "mbedtls/pk.h"
#include "mbedtls/platform_util.h"
#include "mbedtls/sha256.h"
#include "mbedtls/x509_crt.h"
#include "tls/tls_credentials.h"
#include "tls/tls_session.h"

namespace edgefl {
namespace cli {
namespace {

constexpr size_t kKeyIdBytes = 20;  // RFC 7093 method 1: SHA-256 truncated to 160 bits
constexpr size_t kSerialBytes = 16;
constexpr size_t kMaxCnBytes = 64;  // X.520 ub-common-name
constexpr uint32_t kMaxDevices = 99999;
constexpr uint32_t kMaxValidDays = 36500;
constexpr int64_t kSkewSeconds = 3600;  // certificates start one hour ago: clocks differ
constexpr size_t kMaxPemBytes = 1u << 20;
const char kOrganization[] = "edgefl";

Status fail(Status s, std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
  return s;
}

// A CTR_DRBG over the OS entropy source.
struct Rng {
  mbedtls_entropy_context entropy;
  mbedtls_ctr_drbg_context drbg;
  Rng() {
    mbedtls_entropy_init(&entropy);
    mbedtls_ctr_drbg_init(&drbg);
  }
  ~Rng() {
    mbedtls_ctr_drbg_free(&drbg);
    mbedtls_entropy_free(&entropy);
  }
  Rng(const Rng&) = delete;
  Rng& operator=(const Rng&) = delete;
  Status seed(std::string* error) {
    static const unsigned char kPersonalization[] = "edgefl certs";
    const int ret = mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &entropy, kPersonalization,
                                          sizeof kPersonalization - 1);
    if (ret != 0)
      return fail(Status::kTlsError, error, "seeding the RNG failed: " + tls::tls_error_text(ret));
    return Status::kOk;
  }
};

struct PkKey {
  mbedtls_pk_context pk;
  PkKey() { mbedtls_pk_init(&pk); }
  ~PkKey() { mbedtls_pk_free(&pk); }
  PkKey(const PkKey&) = delete;
  PkKey& operator=(const PkKey&) = delete;
};

struct Crt {
  mbedtls_x509_crt crt;
  Crt() { mbedtls_x509_crt_init(&crt); }
  ~Crt() { mbedtls_x509_crt_free(&crt); }
  Crt(const Crt&) = delete;
  Crt& operator=(const Crt&) = delete;
};

struct CrtWriter {
  mbedtls_x509write_cert w;
  CrtWriter() { mbedtls_x509write_crt_init(&w); }
  ~CrtWriter() { mbedtls_x509write_crt_free(&w); }
  CrtWriter(const CrtWriter&) = delete;
  CrtWriter& operator=(const CrtWriter&) = delete;
};

// A secret in a std::string, wiped when it goes.
struct SecretText {
  std::string text;
  ~SecretText() {
    if (!text.empty()) mbedtls_platform_zeroize(&text[0], text.size());
  }
};

Status generate_p256_key(mbedtls_pk_context* pk, Rng* rng, std::string* error) {
  int ret = mbedtls_pk_setup(pk, mbedtls_pk_info_from_type(MBEDTLS_PK_ECKEY));
  if (ret == 0) {
    ret = mbedtls_ecp_gen_key(MBEDTLS_ECP_DP_SECP256R1, mbedtls_pk_ec(*pk), mbedtls_ctr_drbg_random,
                              &rng->drbg);
  }
  if (ret != 0)
    return fail(Status::kTlsError, error, "ECDSA P-256 key generation failed: " + tls::tls_error_text(ret));
  return Status::kOk;
}

bool is_p256_key(const mbedtls_pk_context* pk) {
  if (mbedtls_pk_get_type(pk) != MBEDTLS_PK_ECKEY && mbedtls_pk_get_type(pk) != MBEDTLS_PK_ECDSA)
    return false;
  const mbedtls_ecp_keypair* ec = mbedtls_pk_ec(*pk);
  return ec != nullptr && mbedtls_ecp_keypair_get_group_id(ec) == MBEDTLS_ECP_DP_SECP256R1;
}

// RFC 7093 method 1: the leftmost 160 bits of SHA-256 over the subjectPublicKey BIT STRING's bits
// (for EC keys: the uncompressed point).
Status key_identifier(mbedtls_pk_context* pk, unsigned char id[kKeyIdBytes], std::string* error) {
  unsigned char buf[160];
  unsigned char* p = buf + sizeof buf;
  const int len = mbedtls_pk_write_pubkey(&p, buf, pk);
  if (len <= 0)
    return fail(Status::kTlsError, error, "writing the public key failed: " + tls::tls_error_text(len));
  unsigned char digest[32];
  const int ret = mbedtls_sha256(p, static_cast<size_t>(len), digest, 0);
  if (ret != 0) return fail(Status::kTlsError, error, "SHA-256 failed: " + tls::tls_error_text(ret));
  memcpy(id, digest, kKeyIdBytes);
  return Status::kOk;
}

std::string hex(const unsigned char* p, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += kDigits[p[i] >> 4];
    out += kDigits[p[i] & 15];
  }
  return out;
}

// A DER TLV in hex, for mbedtls_x509_string_to_names()'s "TYPE=#hex" form: the value is taken as
// is, with no escaping rules to get wrong.
std::string der_hex(unsigned char tag, const unsigned char* value, size_t len) {
  unsigned char header[4];
  size_t header_len = 0;
  header[header_len++] = tag;
  if (len < 0x80) {
    header[header_len++] = static_cast<unsigned char>(len);
  } else if (len <= 0xff) {
    header[header_len++] = 0x81;
    header[header_len++] = static_cast<unsigned char>(len);
  } else {
    header[header_len++] = 0x82;
    header[header_len++] = static_cast<unsigned char>(len >> 8);
    header[header_len++] = static_cast<unsigned char>(len & 0xff);
  }
  return hex(header, header_len) + hex(value, len);
}

std::string utf8_attribute(const char* type, const std::string& value) {
  return std::string(type) + "=#" +
         der_hex(MBEDTLS_ASN1_UTF8_STRING, reinterpret_cast<const unsigned char*>(value.data()),
                 value.size());
}

// "CN=<cn>,O=edgefl", in a form mbedtls_x509write_crt_set_*_name() takes.
std::string subject_name(const std::string& cn) {
  return utf8_attribute("CN", cn) + "," + utf8_attribute("O", kOrganization);
}

// The issuer name for certificates signed by `ca`: its subject, attribute by attribute with the
// same OIDs, string types and bytes, so that the issuer field equals the CA's subject exactly. (A
// multi-valued RDN would come out as separate RDNs: issue_leaf()'s self-check then fails.)
Status issuer_name_of(const mbedtls_x509_crt* ca, std::string* name, std::string* error) {
  name->clear();
  for (const mbedtls_x509_name* n = &ca->subject; n != nullptr; n = n->next) {
    if (n->oid.p == nullptr) continue;
    char oid[64];
    const int ret = mbedtls_oid_get_numeric_string(oid, sizeof oid, &n->oid);
    if (ret < 0) return fail(Status::kTlsError, error, "the CA's subject has an unreadable attribute type");
    if (!name->empty()) *name += ",";
    *name += std::string(oid) + "=#" + der_hex(static_cast<unsigned char>(n->val.tag), n->val.p, n->val.len);
  }
  if (name->empty()) return fail(Status::kTlsError, error, "the CA's subject is empty");
  return Status::kOk;
}

// "YYYYMMDDhhmmss" (UTC) for mbedtls_x509write_crt_set_validity().
bool x509_time(int64_t unix_seconds, char out[15]) {
  const time_t t = static_cast<time_t>(unix_seconds);
  if (static_cast<int64_t>(t) != unix_seconds) return false;
  struct tm tm_utc;
  if (gmtime_r(&t, &tm_utc) == nullptr) return false;
  const int year = tm_utc.tm_year + 1900;
  if (year < 1950 || year > 9999) return false;
  const int fields[6] = {year,           tm_utc.tm_mon + 1, tm_utc.tm_mday,
                         tm_utc.tm_hour, tm_utc.tm_min,     tm_utc.tm_sec};
  const int widths[6] = {4, 2, 2, 2, 2, 2};
  size_t pos = 0;
  for (int f = 0; f < 6; ++f) {
    int v = fields[f] < 0 ? 0 : fields[f];
    for (int d = widths[f] - 1; d >= 0; --d) {
      out[pos + static_cast<size_t>(d)] = static_cast<char>('0' + v % 10);
      v /= 10;
    }
    pos += static_cast<size_t>(widths[f]);
  }
  out[pos] = '\0';
  return true;
}

bool is_dns_name(const std::string& name) {
  if (name.empty() || name.size() > 253 || name.front() == '.' || name.back() == '.') return false;
  for (const char c : name) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '-' || c == '_' || c == '*';
    if (!ok) return false;
  }
  return true;
}

// A server name as SAN bytes: 4 or 16 address bytes for a literal IP, else the DNS name.
struct SanName {
  int type = MBEDTLS_X509_SAN_DNS_NAME;
  std::string bytes;
};

Status parse_server_name(const std::string& name, SanName* san, std::string* error) {
  unsigned char addr[16];
  if (inet_pton(AF_INET, name.c_str(), addr) == 1) {
    san->type = MBEDTLS_X509_SAN_IP_ADDRESS;
    san->bytes.assign(reinterpret_cast<const char*>(addr), 4);
  } else if (inet_pton(AF_INET6, name.c_str(), addr) == 1) {
    san->type = MBEDTLS_X509_SAN_IP_ADDRESS;
    san->bytes.assign(reinterpret_cast<const char*>(addr), 16);
  } else if (is_dns_name(name)) {
    san->type = MBEDTLS_X509_SAN_DNS_NAME;
    san->bytes = name;
  } else {
    return fail(Status::kInvalidArgument, error,
                "server name '" + name + "' is neither a DNS name nor a literal IPv4/IPv6 address");
  }
  return Status::kOk;
}

enum class CertKind { kCa, kServer, kDevice };

// What one certificate says.
struct CertSpec {
  CertKind kind = CertKind::kDevice;
  std::string subject;  // in the form subject_name() makes
  std::vector<SanName> sans;
  int64_t not_before = 0;
  int64_t not_after = 0;
};

// The signer: its key, its subject (the issuer name) and its key identifier.
struct Signer {
  mbedtls_pk_context* key = nullptr;
  std::string name;
  unsigned char key_id[kKeyIdBytes] = {};
};

// Writes the PEM certificate for `subject_key` described by `spec`, signed by `signer` (for the CA
// itself: its own key and name).
Status write_certificate(const CertSpec& spec, mbedtls_pk_context* subject_key, const Signer& signer,
                         Rng* rng, std::string* pem, std::string* error) {
  char not_before[15], not_after[15];
  if (!x509_time(spec.not_before, not_before) || !x509_time(spec.not_after, not_after)) {
    return fail(Status::kInvalidArgument, error, "certificate validity outside the years 1950..9999");
  }
  if (spec.not_after < spec.not_before) {
    return fail(Status::kInvalidArgument, error, "certificate validity ends before it starts");
  }
  CrtWriter writer;
  mbedtls_x509write_cert* w = &writer.w;
  mbedtls_x509write_crt_set_version(w, MBEDTLS_X509_CRT_VERSION_3);
  mbedtls_x509write_crt_set_md_alg(w, MBEDTLS_MD_SHA256);
  mbedtls_x509write_crt_set_subject_key(w, subject_key);
  mbedtls_x509write_crt_set_issuer_key(w, signer.key);

  unsigned char serial[kSerialBytes];
  int ret = mbedtls_ctr_drbg_random(&rng->drbg, serial, sizeof serial);
  if (ret != 0) return fail(Status::kTlsError, error, "random serial: " + tls::tls_error_text(ret));
  serial[0] = static_cast<unsigned char>((serial[0] & 0x7f) | 0x40);  // positive, minimal DER, 16 bytes

  const bool ca = spec.kind == CertKind::kCa;
  unsigned char subject_id[kKeyIdBytes];
  EDGEFL_RETURN_IF_ERROR(key_identifier(subject_key, subject_id, error));
  unsigned char ski[2 + kKeyIdBytes] = {MBEDTLS_ASN1_OCTET_STRING, kKeyIdBytes};
  memcpy(ski + 2, subject_id, kKeyIdBytes);
  // AuthorityKeyIdentifier ::= SEQUENCE { keyIdentifier [0] IMPLICIT OCTET STRING }
  unsigned char aki[4 + kKeyIdBytes] = {MBEDTLS_ASN1_CONSTRUCTED | MBEDTLS_ASN1_SEQUENCE, 2 + kKeyIdBytes,
                                        MBEDTLS_ASN1_CONTEXT_SPECIFIC | 0, kKeyIdBytes};
  memcpy(aki + 4, signer.key_id, kKeyIdBytes);

  const char* step = "subject name";
  ret = mbedtls_x509write_crt_set_subject_name(w, spec.subject.c_str());
  if (ret == 0) {
    step = "issuer name";
    ret = mbedtls_x509write_crt_set_issuer_name(w, signer.name.c_str());
  }
  if (ret == 0) {
    step = "serial";
    ret = mbedtls_x509write_crt_set_serial_raw(w, serial, sizeof serial);
  }
  if (ret == 0) {
    step = "validity";
    ret = mbedtls_x509write_crt_set_validity(w, not_before, not_after);
  }
  if (ret == 0) {
    step = "basicConstraints";
    ret = mbedtls_x509write_crt_set_basic_constraints(w, ca ? 1 : 0, ca ? 0 : -1);
  }
  if (ret == 0) {
    step = "keyUsage";
    ret = mbedtls_x509write_crt_set_key_usage(
        w, ca ? MBEDTLS_X509_KU_KEY_CERT_SIGN | MBEDTLS_X509_KU_CRL_SIGN : MBEDTLS_X509_KU_DIGITAL_SIGNATURE);
  }
  if (ret == 0) {
    step = "subjectKeyIdentifier";
    ret = mbedtls_x509write_crt_set_extension(w, MBEDTLS_OID_SUBJECT_KEY_IDENTIFIER,
                                              MBEDTLS_OID_SIZE(MBEDTLS_OID_SUBJECT_KEY_IDENTIFIER), 0, ski,
                                              sizeof ski);
  }
  if (ret == 0 && !ca) {
    step = "authorityKeyIdentifier";
    ret = mbedtls_x509write_crt_set_extension(w, MBEDTLS_OID_AUTHORITY_KEY_IDENTIFIER,
                                              MBEDTLS_OID_SIZE(MBEDTLS_OID_AUTHORITY_KEY_IDENTIFIER), 0, aki,
                                              sizeof aki);
  }
  if (ret == 0 && !ca) {
    step = "extendedKeyUsage";
    mbedtls_asn1_sequence eku;
    memset(&eku, 0, sizeof eku);
    eku.buf.tag = MBEDTLS_ASN1_OID;
    if (spec.kind == CertKind::kServer) {
      eku.buf.p = reinterpret_cast<unsigned char*>(const_cast<char*>(MBEDTLS_OID_SERVER_AUTH));
      eku.buf.len = MBEDTLS_OID_SIZE(MBEDTLS_OID_SERVER_AUTH);
    } else {
      eku.buf.p = reinterpret_cast<unsigned char*>(const_cast<char*>(MBEDTLS_OID_CLIENT_AUTH));
      eku.buf.len = MBEDTLS_OID_SIZE(MBEDTLS_OID_CLIENT_AUTH);
    }
    ret = mbedtls_x509write_crt_set_ext_key_usage(w, &eku);
  }
  if (ret == 0 && !spec.sans.empty()) {
    step = "subjectAltName";
    // mbedTLS writes the list back to front: link it in reverse so the names keep their order.
    std::vector<mbedtls_x509_san_list> list(spec.sans.size());
    for (size_t i = 0; i < spec.sans.size(); ++i) {
      memset(&list[i], 0, sizeof list[i]);
      list[i].node.type = spec.sans[i].type;
      list[i].node.san.unstructured_name.p =
          reinterpret_cast<unsigned char*>(const_cast<char*>(spec.sans[i].bytes.data()));
      list[i].node.san.unstructured_name.len = spec.sans[i].bytes.size();
      list[i].next = i > 0 ? &list[i - 1] : nullptr;
    }
    ret = mbedtls_x509write_crt_set_subject_alternative_name(w, &list.back());
  }
  if (ret != 0)
    return fail(Status::kTlsError, error,
                std::string("certificate ") + step + ": " + tls::tls_error_text(ret));

  std::vector<unsigned char> buf(8192);
  ret = mbedtls_x509write_crt_pem(w, buf.data(), buf.size(), mbedtls_ctr_drbg_random, &rng->drbg);
  if (ret != 0)
    return fail(Status::kTlsError, error, "signing the certificate failed: " + tls::tls_error_text(ret));
  pem->assign(reinterpret_cast<const char*>(buf.data()));
  return Status::kOk;
}

Status key_pem_of(mbedtls_pk_context* key, SecretText* pem, std::string* error) {
  std::vector<unsigned char> buf(2048);
  const int ret = mbedtls_pk_write_key_pem(key, buf.data(), buf.size());
  if (ret != 0) {
    mbedtls_platform_zeroize(buf.data(), buf.size());
    return fail(Status::kTlsError, error, "writing the private key failed: " + tls::tls_error_text(ret));
  }
  pem->text.assign(reinterpret_cast<const char*>(buf.data()));
  mbedtls_platform_zeroize(buf.data(), buf.size());
  return Status::kOk;
}

bool path_exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

Status make_dirs(const std::string& dir, std::string* error) {
  std::string partial;
  size_t pos = 0;
  while (pos <= dir.size()) {
    size_t next = dir.find('/', pos);
    if (next == std::string::npos) next = dir.size();
    partial = dir.substr(0, next);
    pos = next + 1;
    if (partial.empty() || partial == "." || partial == "..") continue;
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      const int e = errno;
      return fail(Status::kIoError, error, "cannot create directory '" + partial + "': " + strerror(e));
    }
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return fail(Status::kIoError, error, "'" + dir + "' is not a directory");
  }
  return Status::kOk;
}

// Writes `data` to `path` with `mode`: to a temporary file in the same directory, fsync'd, then
// renamed over `path` (force) or linked to it (no force: fails if `path` appeared meanwhile).
Status write_file(const std::string& path, const std::string& data, mode_t mode, bool force,
                  std::string* error) {
  if (path.empty()) return fail(Status::kInvalidArgument, error, "empty output path");
  if (!force && path_exists(path)) {
    return fail(Status::kIoError, error, "'" + path + "' already exists (use --force to overwrite)");
  }
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = mkstemp(&tmp[0]);  // mode 0600
  if (fd < 0) {
    const int e = errno;
    return fail(Status::kIoError, error, "cannot create '" + tmp + "': " + strerror(e));
  }
  const char* failed = nullptr;
  int e = 0;
  if (fchmod(fd, mode) != 0) {
    failed = "chmod";
    e = errno;
  }
  size_t done = 0;
  while (failed == nullptr && done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      failed = "write";
      e = errno;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (failed == nullptr && fsync(fd) != 0) {
    failed = "fsync";
    e = errno;
  }
  if (close(fd) != 0 && failed == nullptr) {
    failed = "close";
    e = errno;
  }
  if (failed == nullptr) {
    if (force) {
      if (rename(tmp.c_str(), path.c_str()) != 0) {
        failed = "rename";
        e = errno;
      }
    } else {
      if (link(tmp.c_str(), path.c_str()) != 0) {
        failed = "link";
        e = errno;
      }
    }
  }
  if (failed != nullptr || !force) unlink(tmp.c_str());
  if (failed != nullptr) {
    if (e == EEXIST)
      return fail(Status::kIoError, error, "'" + path + "' already exists (use --force to overwrite)");
    return fail(Status::kIoError, error, "cannot write '" + path + "': " + failed + ": " + strerror(e));
  }
  return Status::kOk;
}

Status check_validity_days(uint32_t days, std::string* error) {
  if (days == 0 || days > kMaxValidDays) {
    return fail(
        Status::kInvalidArgument, error,
        "validity must be 1.." + std::to_string(kMaxValidDays) + " days (got " + std::to_string(days) + ")");
  }
  return Status::kOk;
}

// Whether `cert_pem` parses and chains to `ca` (validity dates aside): a self-check of what was
// written before it goes to disk.
Status verify_issued(const std::string& cert_pem, mbedtls_x509_crt* ca, std::string* error) {
  static const mbedtls_x509_crt_profile kP256Sha256 = {
      MBEDTLS_X509_ID_FLAG(MBEDTLS_MD_SHA256),
      MBEDTLS_X509_ID_FLAG(MBEDTLS_PK_ECKEY) | MBEDTLS_X509_ID_FLAG(MBEDTLS_PK_ECDSA),
      MBEDTLS_X509_ID_FLAG(MBEDTLS_ECP_DP_SECP256R1), 2048};
  Crt leaf;
  int ret = mbedtls_x509_crt_parse(&leaf.crt, reinterpret_cast<const unsigned char*>(cert_pem.c_str()),
                                   cert_pem.size() + 1);
  if (ret != 0)
    return fail(Status::kTlsError, error,
                "the issued certificate does not parse: " + tls::tls_error_text(ret));
  uint32_t flags = 0;
  ret = mbedtls_x509_crt_verify_with_profile(&leaf.crt, ca, nullptr, &kP256Sha256, nullptr, &flags, nullptr,
                                             nullptr);
  flags &= ~static_cast<uint32_t>(MBEDTLS_X509_BADCERT_EXPIRED | MBEDTLS_X509_BADCERT_FUTURE);
  if (ret != 0 && flags != 0) {
    return fail(
        Status::kTlsError, error,
        "the issued certificate does not verify against the CA: " + tls::describe_verify_flags(flags));
  }
  return Status::kOk;
}

// Issues a key and a leaf certificate, checks it against `ca`, and writes both (key first, 0600).
Status issue_leaf(const CertSpec& spec, const Signer& signer, mbedtls_x509_crt* ca, Rng* rng,
                  const std::string& cert_path, const std::string& key_path, bool force, std::string* error) {
  PkKey key;
  EDGEFL_RETURN_IF_ERROR(generate_p256_key(&key.pk, rng, error));
  std::string cert_pem;
  EDGEFL_RETURN_IF_ERROR(write_certificate(spec, &key.pk, signer, rng, &cert_pem, error));
  EDGEFL_RETURN_IF_ERROR(verify_issued(cert_pem, ca, error));
  SecretText key_pem;
  EDGEFL_RETURN_IF_ERROR(key_pem_of(&key.pk, &key_pem, error));
  EDGEFL_RETURN_IF_ERROR(write_file(key_path, key_pem.text, 0600, force, error));
  return write_file(cert_path, cert_pem, 0644, force, error);
}

int64_t now_unix() {
  return static_cast<int64_t>(time(nullptr));
}

}  // namespace

std::string dev_pki_device_id(uint32_t n) {
  char id[24];
  snprintf(id, sizeof id, "device-%04u", static_cast<unsigned>(n));
  return id;
}

Status write_dev_pki(const DevPkiOptions& o, std::string* error) {
  if (o.out_dir.empty()) return fail(Status::kInvalidArgument, error, "no output directory");
  if (o.devices > kMaxDevices) {
    return fail(Status::kInvalidArgument, error, "at most " + std::to_string(kMaxDevices) + " devices");
  }
  EDGEFL_RETURN_IF_ERROR(check_validity_days(o.valid_days, error));
  if (o.ca_name.empty() || o.ca_name.size() > kMaxCnBytes || o.ca_name.find('\0') != std::string::npos) {
    return fail(Status::kInvalidArgument, error, "the CA name must be 1-64 bytes");
  }
  if (o.server_names.empty())
    return fail(Status::kInvalidArgument, error, "at least one server name is needed");
  std::vector<SanName> sans;
  for (const std::string& name : o.server_names) {
    SanName san;
    EDGEFL_RETURN_IF_ERROR(parse_server_name(name, &san, error));
    sans.push_back(san);
  }
  if (o.server_names.front().size() > kMaxCnBytes) {
    return fail(Status::kInvalidArgument, error,
                "the first server name (the subject CN) must be at most 64 bytes");
  }

  const std::string dir = o.out_dir;
  const std::string devices_dir = dir + "/devices";
  std::vector<std::string> outputs = {dir + "/ca.key", dir + "/ca.crt", dir + "/server.key",
                                      dir + "/server.crt"};
  for (uint32_t i = 1; i <= o.devices; ++i) {
    outputs.push_back(devices_dir + "/" + dev_pki_device_id(i) + ".key");
    outputs.push_back(devices_dir + "/" + dev_pki_device_id(i) + ".crt");
  }
  if (!o.force) {
    for (const std::string& path : outputs) {
      if (path_exists(path)) {
        return fail(Status::kIoError, error,
                    "'" + path + "' already exists; refusing to overwrite a PKI (use --force to replace it)");
      }
    }
  }
  EDGEFL_RETURN_IF_ERROR(tls::tls_global_init(error));
  EDGEFL_RETURN_IF_ERROR(make_dirs(dir, error));
  if (o.devices > 0) EDGEFL_RETURN_IF_ERROR(make_dirs(devices_dir, error));

  Rng rng;
  EDGEFL_RETURN_IF_ERROR(rng.seed(error));
  const int64_t now = now_unix();
  const int64_t not_before = now - kSkewSeconds;
  const int64_t not_after = now + int64_t{86400} * o.valid_days;

  // The CA: self-signed.
  PkKey ca_key;
  EDGEFL_RETURN_IF_ERROR(generate_p256_key(&ca_key.pk, &rng, error));
  Signer signer;
  signer.key = &ca_key.pk;
  signer.name = subject_name(o.ca_name);
  EDGEFL_RETURN_IF_ERROR(key_identifier(&ca_key.pk, signer.key_id, error));
  CertSpec ca_spec;
  ca_spec.kind = CertKind::kCa;
  ca_spec.subject = signer.name;
  ca_spec.not_before = not_before;
  ca_spec.not_after = not_after;
  std::string ca_pem;
  EDGEFL_RETURN_IF_ERROR(write_certificate(ca_spec, &ca_key.pk, signer, &rng, &ca_pem, error));
  Crt ca;
  int ret = mbedtls_x509_crt_parse(&ca.crt, reinterpret_cast<const unsigned char*>(ca_pem.c_str()),
                                   ca_pem.size() + 1);
  if (ret != 0)
    return fail(Status::kTlsError, error, "the CA certificate does not parse: " + tls::tls_error_text(ret));
  {
    SecretText key_pem;
    EDGEFL_RETURN_IF_ERROR(key_pem_of(&ca_key.pk, &key_pem, error));
    EDGEFL_RETURN_IF_ERROR(write_file(dir + "/ca.key", key_pem.text, 0600, o.force, error));
  }
  EDGEFL_RETURN_IF_ERROR(write_file(dir + "/ca.crt", ca_pem, 0644, o.force, error));

  CertSpec server_spec;
  server_spec.kind = CertKind::kServer;
  server_spec.subject = subject_name(o.server_names.front());
  server_spec.sans = sans;
  server_spec.not_before = not_before;
  server_spec.not_after = not_after;
  EDGEFL_RETURN_IF_ERROR(issue_leaf(server_spec, signer, &ca.crt, &rng, dir + "/server.crt",
                                    dir + "/server.key", o.force, error));

  for (uint32_t i = 1; i <= o.devices; ++i) {
    const std::string id = dev_pki_device_id(i);
    CertSpec device_spec;
    device_spec.kind = CertKind::kDevice;
    device_spec.subject = subject_name(id);
    device_spec.not_before = not_before;
    device_spec.not_after = not_after;
    EDGEFL_RETURN_IF_ERROR(issue_leaf(device_spec, signer, &ca.crt, &rng, devices_dir + "/" + id + ".crt",
                                      devices_dir + "/" + id + ".key", o.force, error));
  }
  return Status::kOk;
}

Status issue_device_cert(const std::string& ca_dir, const std::string& device_id, int64_t not_before_unix,
                         int64_t not_after_unix, const std::string& out_cert, const std::string& out_key,
                         std::string* error, bool force) {
  if (!tls::is_valid_device_id(device_id)) {
    return fail(Status::kInvalidArgument, error,
                "device id '" + device_id + "' is not valid (1-64 characters from [A-Za-z0-9._-])");
  }
  if (out_cert.empty() || out_key.empty()) {
    return fail(Status::kInvalidArgument, error, "output certificate and key paths are required");
  }
  if (out_cert == out_key)
    return fail(Status::kInvalidArgument, error, "certificate and key paths are the same");
  char probe[15];
  if (!x509_time(not_before_unix, probe) || !x509_time(not_after_unix, probe)) {
    return fail(Status::kInvalidArgument, error, "validity outside the years 1950..9999");
  }
  if (not_after_unix < not_before_unix) {
    return fail(Status::kInvalidArgument, error, "not_after is before not_before");
  }
  if (!force) {
    for (const std::string* path : {&out_cert, &out_key}) {
      if (path_exists(*path)) {
        return fail(Status::kIoError, error, "'" + *path + "' already exists (use --force to overwrite)");
      }
    }
  }
  EDGEFL_RETURN_IF_ERROR(tls::tls_global_init(error));
  Rng rng;
  EDGEFL_RETURN_IF_ERROR(rng.seed(error));

  const std::string ca_crt_path = ca_dir + "/ca.crt";
  const std::string ca_key_path = ca_dir + "/ca.key";
  std::string ca_pem;
  EDGEFL_RETURN_IF_ERROR(
      tls::read_credential_file("CA certificate", ca_crt_path, kMaxPemBytes, &ca_pem, error));
  Crt ca;
  int ret = mbedtls_x509_crt_parse(&ca.crt, reinterpret_cast<const unsigned char*>(ca_pem.c_str()),
                                   ca_pem.size() + 1);
  if (ret != 0) {
    return fail(
        Status::kTlsError, error,
        "'" + ca_crt_path + "' is not a PEM certificate" + (ret < 0 ? ": " + tls::tls_error_text(ret) : ""));
  }
  if (mbedtls_x509_crt_get_ca_istrue(&ca.crt) != 1 ||
      mbedtls_x509_crt_check_key_usage(&ca.crt, MBEDTLS_X509_KU_KEY_CERT_SIGN) != 0) {
    return fail(Status::kTlsError, error,
                "'" + ca_crt_path + "' is not a CA certificate that may sign certificates");
  }
  PkKey ca_key;
  {
    SecretText key_pem;
    EDGEFL_RETURN_IF_ERROR(
        tls::read_credential_file("CA key", ca_key_path, kMaxPemBytes, &key_pem.text, error));
    ret = mbedtls_pk_parse_key(&ca_key.pk, reinterpret_cast<const unsigned char*>(key_pem.text.c_str()),
                               key_pem.text.size() + 1, nullptr, 0, mbedtls_ctr_drbg_random, &rng.drbg);
  }
  if (ret != 0) {
    return fail(Status::kTlsError, error,
                "'" + ca_key_path + "' is not a PEM private key: " + tls::tls_error_text(ret));
  }
  if (!is_p256_key(&ca_key.pk)) {
    return fail(Status::kTlsError, error, "'" + ca_key_path + "' is not an ECDSA P-256 key");
  }
  if (mbedtls_pk_check_pair(&ca.crt.pk, &ca_key.pk, mbedtls_ctr_drbg_random, &rng.drbg) != 0) {
    return fail(Status::kTlsError, error, "'" + ca_key_path + "' does not match '" + ca_crt_path + "'");
  }

  Signer signer;
  signer.key = &ca_key.pk;
  EDGEFL_RETURN_IF_ERROR(issuer_name_of(&ca.crt, &signer.name, error));
  EDGEFL_RETURN_IF_ERROR(key_identifier(&ca_key.pk, signer.key_id, error));
  CertSpec spec;
  spec.kind = CertKind::kDevice;
  spec.subject = subject_name(device_id);
  spec.not_before = not_before_unix;
  spec.not_after = not_after_unix;
  return issue_leaf(spec, signer, &ca.crt, &rng, out_cert, out_key, force, error);
}

}  // namespace cli
}  // namespace edgefl
