#include "tls/tls_credentials.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <utility>

#include "mbedtls/ctr_drbg.h"
#include "mbedtls/ecp.h"
#include "mbedtls/entropy.h"
#include "mbedtls/error.h"
#include "mbedtls/md.h"
#include "mbedtls/oid.h"
#include "mbedtls/pk.h"
#include "mbedtls/platform_util.h"
#include "mbedtls/version.h"
#include "mbedtls/x509_crl.h"
#include "mbedtls/x509_crt.h"
#include "psa/crypto.h"
#include "tls/tls_session.h"

namespace edgefl {
namespace tls {
namespace {

// --- the runtime policy (shared/reference/security.md §4.3); static: mbedTLS keeps the pointers --
const int kSuites[] = {MBEDTLS_TLS1_3_AES_128_GCM_SHA256,                      // 0x1301
                       MBEDTLS_TLS1_3_CHACHA20_POLY1305_SHA256,                // 0x1303 (no AES hardware)
                       MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,        // 0xC02B
                       MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,  // 0xCCA9
                       0};
const uint16_t kGroups[] = {MBEDTLS_SSL_IANA_TLS_GROUP_X25519, MBEDTLS_SSL_IANA_TLS_GROUP_SECP256R1,
                            MBEDTLS_SSL_IANA_TLS_GROUP_NONE};
const uint16_t kSigAlgs[] = {MBEDTLS_TLS1_3_SIG_ECDSA_SECP256R1_SHA256, MBEDTLS_TLS1_3_SIG_NONE};
// Certificates: ECDSA P-256 keys, signatures with SHA-256 or SHA-384.
const mbedtls_x509_crt_profile kP256Only = {
    MBEDTLS_X509_ID_FLAG(MBEDTLS_MD_SHA256) | MBEDTLS_X509_ID_FLAG(MBEDTLS_MD_SHA384),  // allowed_mds
    MBEDTLS_X509_ID_FLAG(MBEDTLS_PK_ECKEY) | MBEDTLS_X509_ID_FLAG(MBEDTLS_PK_ECDSA),    // allowed_pks
    MBEDTLS_X509_ID_FLAG(MBEDTLS_ECP_DP_SECP256R1),                                     // allowed_curves
    2048};  // rsa_min_bitlen (no RSA)

constexpr size_t kMaxPemFileBytes = size_t{1} << 20;    // certificates, keys, CRLs
constexpr size_t kMaxDenyFileBytes = size_t{16} << 20;  // ~250k ids
constexpr size_t kMaxDeviceIdLength = 64;

Status fail(Status s, std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
  return s;
}

// Printable form of untrusted bytes for messages: ASCII graphic characters as is, others \xNN,
// at most 64 bytes shown.
std::string printable(const unsigned char* p, size_t len) {
  std::string out;
  const size_t shown = len < 64 ? len : 64;
  for (size_t i = 0; i < shown; ++i) {
    const unsigned char c = p[i];
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  if (shown < len) out += "...";
  return out;
}

std::string time_text(const mbedtls_x509_time& t) {
  char text[40];
  snprintf(text, sizeof text, "%04d-%02d-%02d %02d:%02d:%02d UTC", t.year, t.mon, t.day, t.hour, t.min,
           t.sec);
  return text;
}

bool is_p256_key(const mbedtls_pk_context* pk) {
  if (mbedtls_pk_get_type(pk) != MBEDTLS_PK_ECKEY && mbedtls_pk_get_type(pk) != MBEDTLS_PK_ECDSA)
    return false;
  const mbedtls_ecp_keypair* ec = mbedtls_pk_ec(*pk);
  return ec != nullptr && mbedtls_ecp_keypair_get_group_id(ec) == MBEDTLS_ECP_DP_SECP256R1;
}

// Parses a deny list: one device id per line, '#' comments, blank lines ignored.
Status parse_deny_list(const std::string& path, const std::string& text, std::set<std::string>* ids,
                       std::string* error) {
  size_t line_start = 0;
  size_t line_number = 0;
  while (line_start < text.size()) {
    size_t line_end = text.find('\n', line_start);
    if (line_end == std::string::npos) line_end = text.size();
    ++line_number;
    std::string line = text.substr(line_start, line_end - line_start);
    line_start = line_end + 1;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    const size_t last = line.find_last_not_of(" \t\r");
    const std::string id = line.substr(first, last - first + 1);
    if (!is_valid_device_id(id)) {
      return fail(Status::kTlsError, error,
                  "deny_file '" + path + "' line " + std::to_string(line_number) + ": '" +
                      printable(reinterpret_cast<const unsigned char*>(id.data()), id.size()) +
                      "' is not a valid device id (1-64 characters from [A-Za-z0-9._-])");
    }
    ids->insert(id);
  }
  return Status::kOk;
}

Status load_deny_file(const std::string& path, std::set<std::string>* ids, std::string* error) {
  std::string text;
  EDGEFL_RETURN_IF_ERROR(read_credential_file("deny_file", path, kMaxDenyFileBytes, &text, error));
  return parse_deny_list(path, text, ids, error);
}

// A verify flag of edgefl's own, above mbedTLS's (MBEDTLS_X509_BADCRL_BAD_KEY = 0x80000 is the
// highest): the peer's own certificate is missing from the place mbedTLS verifies. mbedTLS skips a
// certificate whose signature algorithm it cannot parse (ssl_tls13_generic.c and ssl_tls.c
// ignore MBEDTLS_ERR_X509_UNKNOWN_SIG_ALG: "maybe a prior certificate was already trusted"), so a
// device certificate signed with ECDSA-SHA1 leaves an empty entry, or the CA certificate that
// followed it in the chain, in the end-entity place; mbedTLS's own flags then describe the CA
// ("key usage") or nothing real.
constexpr uint32_t kBadCertUnusableLeaf = 0x01000000u;
constexpr const char* kUnusableLeafWords =
    "the peer's own certificate is missing or unreadable, and what is in its place is the CA certificate "
    "itself or nothing: a certificate whose signature algorithm is not supported (only ECDSA with SHA-256 "
    "or SHA-384; SHA-1, RSA, Ed25519 and others are refused) is skipped";

// mbedtls_ssl_conf_verify() callback, `trusted` = the mbedtls_x509_crt chain of ca_file: called
// for each certificate of the verified chain, depth 0 being the peer's own. Flags the unusable
// leaf described above; never fails the call itself.
int flag_unusable_leaf(void* trusted, mbedtls_x509_crt* crt, int depth, uint32_t* flags) {
  if (depth != 0) return 0;
  bool unusable = crt->raw.len == 0;
  for (const mbedtls_x509_crt* ca = static_cast<const mbedtls_x509_crt*>(trusted); !unusable && ca != nullptr;
       ca = ca->next) {
    unusable =
        ca->raw.len == crt->raw.len && ca->raw.len != 0 && memcmp(ca->raw.p, crt->raw.p, ca->raw.len) == 0;
  }
  if (unusable) *flags |= kBadCertUnusableLeaf;
  return 0;
}

struct VerifyFlagName {
  uint32_t flag;
  const char* words;
};
const VerifyFlagName kVerifyFlagNames[] = {
    {MBEDTLS_X509_BADCERT_NOT_TRUSTED,
     "not trusted by the CA (not issued by a CA in ca_file, or bad signature)"},
    {MBEDTLS_X509_BADCERT_EXPIRED, "certificate expired"},
    {MBEDTLS_X509_BADCERT_FUTURE, "certificate not yet valid"},
    {MBEDTLS_X509_BADCERT_REVOKED, "certificate revoked (on the CA's CRL)"},
    {MBEDTLS_X509_BADCERT_CN_MISMATCH,
     "server name mismatch (the certificate does not carry the expected name)"},
    {MBEDTLS_X509_BADCERT_MISSING, "certificate missing"},
    {MBEDTLS_X509_BADCERT_SKIP_VERIFY, "verification skipped"},
    {MBEDTLS_X509_BADCERT_OTHER, "rejected by the verify callback"},
    {MBEDTLS_X509_BADCERT_KEY_USAGE, "key usage does not allow this use (digitalSignature missing)"},
    {MBEDTLS_X509_BADCERT_EXT_KEY_USAGE,
     "extended key usage does not allow this role (a device needs clientAuth, the server serverAuth)"},
    {MBEDTLS_X509_BADCERT_NS_CERT_TYPE, "Netscape certificate type does not allow this role"},
    {MBEDTLS_X509_BADCERT_BAD_MD, "signature hash not allowed (SHA-256 or SHA-384 only)"},
    {MBEDTLS_X509_BADCERT_BAD_PK, "key or signature algorithm not allowed (ECDSA only)"},
    {MBEDTLS_X509_BADCERT_BAD_KEY, "key not allowed (ECDSA P-256 only)"},
    {MBEDTLS_X509_BADCRL_NOT_TRUSTED, "CRL not trusted by the CA"},
    {MBEDTLS_X509_BADCRL_EXPIRED, "CRL expired (the CA must issue a new one)"},
    {MBEDTLS_X509_BADCRL_FUTURE, "CRL not yet valid"},
    {MBEDTLS_X509_BADCRL_BAD_MD, "CRL signature hash not allowed"},
    {MBEDTLS_X509_BADCRL_BAD_PK, "CRL signature algorithm not allowed"},
    {MBEDTLS_X509_BADCRL_BAD_KEY, "CRL signing key not allowed"},
};

}  // namespace

Status read_credential_file(const char* what, const std::string& path, size_t max_bytes, std::string* out,
                            std::string* error) {
  if (out == nullptr) return fail(Status::kInvalidArgument, error, "read_credential_file: null output");
  if (path.empty()) return fail(Status::kInvalidArgument, error, std::string(what) + ": no path given");
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int e = errno;
    return fail(Status::kIoError, error, std::string(what) + " '" + path + "': cannot open: " + strerror(e));
  }
  std::string data;
  char buf[8192];
  Status s = Status::kOk;
  std::string message;
  for (;;) {
    const size_t n = fread(buf, 1, sizeof buf, f);
    if (n > 0) {
      if (data.size() + n > max_bytes) {
        s = Status::kIoError;
        message = std::string(what) + " '" + path + "': larger than " + std::to_string(max_bytes) + " bytes";
        break;
      }
      data.append(buf, n);
    }
    if (n < sizeof buf) {
      if (ferror(f)) {
        const int e = errno;
        s = Status::kIoError;
        message = std::string(what) + " '" + path + "': read failed: " + strerror(e);
      }
      break;
    }
  }
  fclose(f);
  mbedtls_platform_zeroize(buf, sizeof buf);
  if (s != Status::kOk) {
    mbedtls_platform_zeroize(&data[0], data.size());
    return fail(s, error, message);
  }
  out->swap(data);
  return Status::kOk;
}

bool is_valid_device_id(const std::string& id) {
  if (id.empty() || id.size() > kMaxDeviceIdLength) return false;
  for (const char c : id) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Status tls_global_init(std::string* error) {
  static std::mutex mutex;
  static bool done = false;
  std::lock_guard<std::mutex> lock(mutex);
  if (done) return Status::kOk;
#if defined(MBEDTLS_VERSION_C)
  const unsigned version = mbedtls_version_get_number();
#else
  const unsigned version = MBEDTLS_VERSION_NUMBER;
#endif
  if ((version >> 16) != 0x0306u || version < 0x03060600u) {
    char text[96];
    snprintf(text, sizeof text, "mbedTLS %u.%u.%u is linked; edgefl needs 3.6.6 or a later 3.6.x",
             version >> 24, (version >> 16) & 0xffu, (version >> 8) & 0xffu);
    return fail(Status::kTlsError, error, text);
  }
  const psa_status_t ps = psa_crypto_init();
  if (ps != PSA_SUCCESS) {
    return fail(Status::kTlsError, error,
                "psa_crypto_init failed (" + std::to_string(static_cast<int>(ps)) + ")");
  }
  done = true;
  return Status::kOk;
}

// ------------------------------------------------------------------------------------------------

struct TlsCredentials::Impl {
  TlsRole role = TlsRole::kClient;
  TlsFiles files;
  mbedtls_entropy_context entropy;
  mbedtls_ctr_drbg_context drbg;
  mbedtls_x509_crt ca;
  mbedtls_x509_crl crl;
  bool has_crl = false;
  std::vector<std::unique_ptr<mbedtls_x509_crl, void (*)(mbedtls_x509_crl*)>> crls;  // reloads, newest last
  mbedtls_x509_crt own;
  mbedtls_pk_context key;
  mbedtls_ssl_config conf;
  std::vector<std::string> warnings;
  mutable std::shared_mutex deny_mutex;
  std::set<std::string> deny;  // guarded by deny_mutex

  Impl() {
    mbedtls_entropy_init(&entropy);
    mbedtls_ctr_drbg_init(&drbg);
    mbedtls_x509_crt_init(&ca);
    mbedtls_x509_crl_init(&crl);
    mbedtls_x509_crt_init(&own);
    mbedtls_pk_init(&key);
    mbedtls_ssl_config_init(&conf);
  }
  ~Impl() {
    mbedtls_ssl_config_free(&conf);
    mbedtls_pk_free(&key);
    mbedtls_x509_crt_free(&own);
    mbedtls_x509_crl_free(&crl);
    mbedtls_x509_crt_free(&ca);
    mbedtls_ctr_drbg_free(&drbg);
    mbedtls_entropy_free(&entropy);
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  Status load(std::string* error);
  Status load_pem(const char* what, const std::string& path, std::string* pem, std::string* error);
  Status check_own_certificate(std::string* error);
  Status configure(std::string* error);
  // Parses crl_file into *out and checks every CRL in it (issuer and signature against ca, this
  // and next update): problems are errors, or warnings with allow_stale_crl.
  Status read_crl(mbedtls_x509_crl* out, std::vector<std::string>* warnings_out, std::string* error);
};

namespace {

// kOk if `crl` is signed by `ca`'s key (the issuer names match and the signature verifies).
bool crl_signed_by(const mbedtls_x509_crl& crl, const mbedtls_x509_crt& ca) {
  if (ca.subject_raw.len != crl.issuer_raw.len ||
      memcmp(ca.subject_raw.p, crl.issuer_raw.p, crl.issuer_raw.len) != 0) {
    return false;
  }
  const mbedtls_md_info_t* md = mbedtls_md_info_from_type(crl.MBEDTLS_PRIVATE(sig_md));
  if (md == nullptr) return false;
  unsigned char hash[MBEDTLS_MD_MAX_SIZE];
  if (mbedtls_md(md, crl.tbs.p, crl.tbs.len, hash) != 0) return false;
  return mbedtls_pk_verify_ext(crl.MBEDTLS_PRIVATE(sig_pk), crl.MBEDTLS_PRIVATE(sig_opts),
                               const_cast<mbedtls_pk_context*>(&ca.pk), crl.MBEDTLS_PRIVATE(sig_md), hash,
                               mbedtls_md_get_size(md), crl.MBEDTLS_PRIVATE(sig).p,
                               crl.MBEDTLS_PRIVATE(sig).len) == 0;
}

}  // namespace

Status TlsCredentials::Impl::read_crl(mbedtls_x509_crl* out, std::vector<std::string>* warnings_out,
                                      std::string* error) {
  std::string pem;
  EDGEFL_RETURN_IF_ERROR(load_pem("crl_file", files.crl_file, &pem, error));
  const int ret =
      mbedtls_x509_crl_parse(out, reinterpret_cast<const unsigned char*>(pem.c_str()), pem.size() + 1);
  if (ret != 0) {
    return fail(Status::kTlsError, error,
                "crl_file '" + files.crl_file + "': not a PEM CRL: " + tls_error_text(ret));
  }
  std::vector<std::string> problems;
  for (const mbedtls_x509_crl* c = out; c != nullptr; c = c->next) {
    bool from_ca = false;
    for (const mbedtls_x509_crt* a = &ca; a != nullptr && !from_ca; a = a->next)
      from_ca = crl_signed_by(*c, *a);
    if (!from_ca)
      problems.push_back("crl_file '" + files.crl_file + "' holds a CRL not signed by a CA in ca_file");
    if (mbedtls_x509_time_is_past(&c->next_update)) {
      problems.push_back("crl_file '" + files.crl_file + "': a CRL expired (nextUpdate " +
                         time_text(c->next_update) +
                         "); every handshake of a device of its CA would fail until it is renewed");
    }
    if (mbedtls_x509_time_is_future(&c->this_update)) {
      problems.push_back("crl_file '" + files.crl_file + "': a CRL is not valid yet (thisUpdate " +
                         time_text(c->this_update) + ")");
    }
  }
  if (problems.empty()) return Status::kOk;
  if (!files.allow_stale_crl) {
    std::string text = problems[0];
    for (size_t i = 1; i < problems.size(); ++i) text += "; " + problems[i];
    return fail(Status::kInvalidArgument, error, text + " (allow_stale_crl / --allow-stale-crl accepts it)");
  }
  warnings_out->insert(warnings_out->end(), problems.begin(), problems.end());
  return Status::kOk;
}

Status TlsCredentials::Impl::load_pem(const char* what, const std::string& path, std::string* pem,
                                      std::string* error) {
  EDGEFL_RETURN_IF_ERROR(read_credential_file(what, path, kMaxPemFileBytes, pem, error));
  if (pem->find("-----BEGIN ") == std::string::npos) {
    return fail(Status::kTlsError, error,
                std::string(what) + " '" + path + "': not a PEM file (no -----BEGIN line)");
  }
  return Status::kOk;
}

Status TlsCredentials::Impl::load(std::string* error) {
  const bool server = role == TlsRole::kServer;
  if (files.ca_file.empty() || files.cert_file.empty() || files.key_file.empty()) {
    return fail(Status::kInvalidArgument, error,
                "TLS credentials need ca_file, cert_file and key_file (mutual TLS)");
  }
  if (!server && (!files.crl_file.empty() || !files.deny_file.empty())) {
    return fail(Status::kInvalidArgument, error, "crl_file and deny_file are server settings");
  }

  static const unsigned char kPersonalization[] = "edgefl tls credentials";
  int ret = mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &entropy, kPersonalization,
                                  sizeof kPersonalization - 1);
  if (ret != 0) return fail(Status::kTlsError, error, "seeding the TLS RNG failed: " + tls_error_text(ret));

  // The CA certificate(s). mbedTLS wants PEM buffers with their terminating NUL counted.
  std::string pem;
  EDGEFL_RETURN_IF_ERROR(load_pem("ca_file", files.ca_file, &pem, error));
  ret = mbedtls_x509_crt_parse(&ca, reinterpret_cast<const unsigned char*>(pem.c_str()), pem.size() + 1);
  if (ret != 0) {
    return fail(Status::kTlsError, error,
                "ca_file '" + files.ca_file + "': " +
                    (ret > 0 ? std::to_string(ret) + " certificate(s) do not parse"
                             : "not a PEM certificate: " + tls_error_text(ret)));
  }
  for (const mbedtls_x509_crt* c = &ca; c != nullptr; c = c->next) {
    if (mbedtls_x509_crt_get_ca_istrue(c) != 1) {
      char dn[256] = "";
      mbedtls_x509_dn_gets(dn, sizeof dn, &c->subject);
      return fail(Status::kTlsError, error,
                  "ca_file '" + files.ca_file + "': '" + dn +
                      "' is not a CA certificate (basicConstraints CA:FALSE)");
    }
  }

  // The CRL(s), server only.
  if (!files.crl_file.empty()) {
    EDGEFL_RETURN_IF_ERROR(read_crl(&crl, &warnings, error));
    has_crl = true;
  }

  // Own certificate (chain) and key.
  EDGEFL_RETURN_IF_ERROR(load_pem("cert_file", files.cert_file, &pem, error));
  ret = mbedtls_x509_crt_parse(&own, reinterpret_cast<const unsigned char*>(pem.c_str()), pem.size() + 1);
  if (ret != 0) {
    return fail(Status::kTlsError, error,
                "cert_file '" + files.cert_file + "': " +
                    (ret > 0 ? std::to_string(ret) + " certificate(s) do not parse"
                             : "not a PEM certificate: " + tls_error_text(ret)));
  }
  std::string key_pem;
  const Status key_status = load_pem("key_file", files.key_file, &key_pem, error);
  if (key_status != Status::kOk) {
    if (!key_pem.empty()) mbedtls_platform_zeroize(&key_pem[0], key_pem.size());
    return key_status;
  }
  ret = mbedtls_pk_parse_key(&key, reinterpret_cast<const unsigned char*>(key_pem.c_str()),
                             key_pem.size() + 1, nullptr, 0, mbedtls_ctr_drbg_random, &drbg);
  mbedtls_platform_zeroize(&key_pem[0], key_pem.size());
  if (ret != 0) {
    return fail(Status::kTlsError, error,
                "key_file '" + files.key_file + "': not a PEM private key: " + tls_error_text(ret));
  }
  EDGEFL_RETURN_IF_ERROR(check_own_certificate(error));

  if (server && !files.deny_file.empty()) {
    std::set<std::string> ids;
    EDGEFL_RETURN_IF_ERROR(load_deny_file(files.deny_file, &ids, error));
    deny.swap(ids);
  }
  return configure(error);
}

Status TlsCredentials::Impl::check_own_certificate(std::string* error) {
  const bool server = role == TlsRole::kServer;
  if (!is_p256_key(&key)) {
    return fail(Status::kTlsError, error,
                "key_file '" + files.key_file + "': not an ECDSA P-256 private key");
  }
  if (!is_p256_key(&own.pk)) {
    return fail(Status::kTlsError, error,
                "cert_file '" + files.cert_file + "': the certificate's key is not ECDSA P-256");
  }
  int ret = mbedtls_pk_check_pair(&own.pk, &key, mbedtls_ctr_drbg_random, &drbg);
  if (ret != 0) {
    return fail(Status::kTlsError, error,
                "key_file '" + files.key_file + "' does not match cert_file '" + files.cert_file +
                    "' (the private key is not the one the certificate certifies)");
  }
  if (mbedtls_x509_crt_check_key_usage(&own, MBEDTLS_X509_KU_DIGITAL_SIGNATURE) != 0) {
    return fail(Status::kTlsError, error,
                "cert_file '" + files.cert_file + "': its keyUsage does not include digitalSignature");
  }
  const char* eku_oid = server ? MBEDTLS_OID_SERVER_AUTH : MBEDTLS_OID_CLIENT_AUTH;
  const size_t eku_len =
      server ? MBEDTLS_OID_SIZE(MBEDTLS_OID_SERVER_AUTH) : MBEDTLS_OID_SIZE(MBEDTLS_OID_CLIENT_AUTH);
  if (mbedtls_x509_crt_check_extended_key_usage(&own, eku_oid, eku_len) != 0) {
    return fail(Status::kTlsError, error,
                "cert_file '" + files.cert_file + "': its extendedKeyUsage lacks " +
                    (server ? "serverAuth: it is not a server certificate"
                            : "clientAuth: it is not a device certificate"));
  }

  // What the peer will check, reported without failing: validity, and the chain to our own CA.
  if (mbedtls_x509_time_is_past(&own.valid_to)) {
    warnings.push_back("own certificate '" + files.cert_file + "' expired on " + time_text(own.valid_to) +
                       "; peers will refuse it");
  }
  if (mbedtls_x509_time_is_future(&own.valid_from)) {
    warnings.push_back("own certificate '" + files.cert_file + "' is not valid before " +
                       time_text(own.valid_from) + "; peers will refuse it until then");
  }
  uint32_t flags = 0;
  ret =
      mbedtls_x509_crt_verify_with_profile(&own, &ca, nullptr, &kP256Only, nullptr, &flags, nullptr, nullptr);
  flags &= ~static_cast<uint32_t>(MBEDTLS_X509_BADCERT_EXPIRED | MBEDTLS_X509_BADCERT_FUTURE);
  if (ret != 0 && flags != 0) {
    warnings.push_back("own certificate '" + files.cert_file + "' does not verify against ca_file '" +
                       files.ca_file + "': " + describe_verify_flags(flags));
  }
  if (!server) {
    std::string cn;
    for (const mbedtls_x509_name* n = &own.subject; n != nullptr; n = n->next) {
      if (n->oid.p != nullptr && MBEDTLS_OID_CMP(MBEDTLS_OID_AT_CN, &n->oid) == 0) {
        cn.assign(reinterpret_cast<const char*>(n->val.p), n->val.len);
      }
    }
    if (!is_valid_device_id(cn)) {
      warnings.push_back("own certificate '" + files.cert_file +
                         "': its subject CN is not a valid device id; the server will refuse it");
    }
  }
  return Status::kOk;
}

Status TlsCredentials::Impl::configure(std::string* error) {
  const bool server = role == TlsRole::kServer;
  int ret = mbedtls_ssl_config_defaults(&conf, server ? MBEDTLS_SSL_IS_SERVER : MBEDTLS_SSL_IS_CLIENT,
                                        MBEDTLS_SSL_TRANSPORT_STREAM, MBEDTLS_SSL_PRESET_DEFAULT);
  if (ret != 0) return fail(Status::kTlsError, error, "mbedtls_ssl_config_defaults: " + tls_error_text(ret));
  mbedtls_ssl_conf_min_tls_version(&conf, MBEDTLS_SSL_VERSION_TLS1_2);
  mbedtls_ssl_conf_max_tls_version(&conf, MBEDTLS_SSL_VERSION_TLS1_3);
  mbedtls_ssl_conf_ciphersuites(&conf, kSuites);
  mbedtls_ssl_conf_groups(&conf, kGroups);
  mbedtls_ssl_conf_sig_algs(&conf, kSigAlgs);
  mbedtls_ssl_conf_cert_profile(&conf, &kP256Only);
  mbedtls_ssl_conf_authmode(&conf, MBEDTLS_SSL_VERIFY_REQUIRED);
  mbedtls_ssl_conf_verify(&conf, flag_unusable_leaf, &ca);
  mbedtls_ssl_conf_tls13_key_exchange_modes(&conf, MBEDTLS_SSL_TLS1_3_KEY_EXCHANGE_MODE_EPHEMERAL);
  mbedtls_ssl_conf_rng(&conf, mbedtls_ctr_drbg_random, &drbg);
  mbedtls_ssl_conf_ca_chain(&conf, &ca, has_crl ? &crl : nullptr);
  ret = mbedtls_ssl_conf_own_cert(&conf, &own, &key);
  if (ret != 0) return fail(Status::kTlsError, error, "mbedtls_ssl_conf_own_cert: " + tls_error_text(ret));
#if defined(MBEDTLS_SSL_SESSION_TICKETS)
  // No resumption: a resumed TLS 1.3 session carries no client certificate (security.md §4.3).
  if (!server) mbedtls_ssl_conf_session_tickets(&conf, MBEDTLS_SSL_SESSION_TICKETS_DISABLED);
#if defined(MBEDTLS_SSL_SRV_C) && defined(MBEDTLS_SSL_PROTO_TLS1_3)
  if (server) mbedtls_ssl_conf_new_session_tickets(&conf, 0);
#endif
#endif
#if defined(MBEDTLS_SSL_RENEGOTIATION)
  mbedtls_ssl_conf_renegotiation(&conf, MBEDTLS_SSL_RENEGOTIATION_DISABLED);
#endif
#if defined(MBEDTLS_SSL_EARLY_DATA)
  mbedtls_ssl_conf_early_data(&conf, MBEDTLS_SSL_EARLY_DATA_DISABLED);
#endif
  return Status::kOk;
}

TlsCredentials::TlsCredentials(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

TlsCredentials::~TlsCredentials() = default;

Status TlsCredentials::load(TlsRole role, const TlsFiles& files, std::unique_ptr<TlsCredentials>* out,
                            std::string* error) {
  if (out == nullptr) return fail(Status::kInvalidArgument, error, "TlsCredentials::load: null output");
  EDGEFL_RETURN_IF_ERROR(tls_global_init(error));
  std::unique_ptr<Impl> impl(new Impl());
  impl->role = role;
  impl->files = files;
  EDGEFL_RETURN_IF_ERROR(impl->load(error));
  out->reset(new TlsCredentials(std::move(impl)));
  if (error != nullptr) error->clear();
  return Status::kOk;
}

const mbedtls_ssl_config* TlsCredentials::config() const {
  return &impl_->conf;
}

TlsRole TlsCredentials::role() const {
  return impl_->role;
}

const std::string& TlsCredentials::server_name() const {
  return impl_->files.server_name;
}

Status TlsCredentials::apply_server_name(mbedtls_ssl_context* ssl) const {
  if (ssl == nullptr) return Status::kInvalidArgument;
  const std::string& name = impl_->files.server_name;
  return mbedtls_ssl_set_hostname(ssl, name.empty() ? nullptr : name.c_str()) == 0 ? Status::kOk
                                                                                   : Status::kTlsError;
}

const std::vector<std::string>& TlsCredentials::warnings() const {
  return impl_->warnings;
}

Status TlsCredentials::check_peer(const mbedtls_ssl_context* ssl, std::string* device_id,
                                  std::string* reason) const {
  if (ssl == nullptr || device_id == nullptr || reason == nullptr) return Status::kInvalidArgument;
  device_id->clear();
  if (impl_->role != TlsRole::kServer) {
    *reason = "check_peer is for server credentials";
    return Status::kInvalidArgument;
  }
  // mbedtls_ssl_is_handshake_over() only reads the state, but takes a non-const pointer.
  if (!mbedtls_ssl_is_handshake_over(const_cast<mbedtls_ssl_context*>(ssl))) {
    *reason = "the handshake is not complete";
    return Status::kUnauthorized;
  }
  const mbedtls_x509_crt* peer = mbedtls_ssl_get_peer_cert(ssl);
  if (peer == nullptr) {
    *reason = "no client certificate";
    return Status::kUnauthorized;
  }
  const uint32_t flags = mbedtls_ssl_get_verify_result(ssl);
  if (flags != 0) {
    *reason = "client certificate not verified: " + describe_verify_flags(flags);
    return Status::kUnauthorized;
  }
  // mbedTLS accepts a certificate without an extendedKeyUsage extension for any role; a device
  // certificate must say clientAuth explicitly.
  bool client_auth = false;
  for (const mbedtls_x509_sequence* eku = &peer->ext_key_usage; eku != nullptr; eku = eku->next) {
    if (eku->buf.p != nullptr && MBEDTLS_OID_CMP(MBEDTLS_OID_CLIENT_AUTH, &eku->buf) == 0) client_auth = true;
  }
  if (!client_auth) {
    *reason = "client certificate has no clientAuth extended key usage";
    return Status::kUnauthorized;
  }
  // A CA the device CA signed could issue "devices" of its own: a device is a leaf.
  if (mbedtls_x509_crt_get_ca_istrue(peer) == 1) {
    *reason = "the client certificate is a CA certificate (basicConstraints CA:TRUE), not a device";
    return Status::kUnauthorized;
  }
  const mbedtls_x509_name* cn = nullptr;
  for (const mbedtls_x509_name* n = &peer->subject; n != nullptr; n = n->next) {
    if (n->oid.p == nullptr || MBEDTLS_OID_CMP(MBEDTLS_OID_AT_CN, &n->oid) != 0) continue;
    if (cn != nullptr) {
      *reason = "device id is not valid (the certificate subject has more than one CN)";
      return Status::kUnauthorized;
    }
    cn = n;
  }
  if (cn == nullptr) {
    *reason = "device id is not valid (the certificate subject has no CN)";
    return Status::kUnauthorized;
  }
  const int tag = cn->val.tag;
  const std::string id(reinterpret_cast<const char*>(cn->val.p), cn->val.len);
  if ((tag != MBEDTLS_ASN1_UTF8_STRING && tag != MBEDTLS_ASN1_PRINTABLE_STRING &&
       tag != MBEDTLS_ASN1_IA5_STRING) ||
      !is_valid_device_id(id)) {
    *reason = "device id is not valid: the subject CN '" + printable(cn->val.p, cn->val.len) +
              "' is not 1-64 characters from [A-Za-z0-9._-]";
    return Status::kUnauthorized;
  }
  {
    std::shared_lock<std::shared_mutex> lock(impl_->deny_mutex);
    if (impl_->deny.count(id) != 0) {
      *device_id = id;
      *reason = "device id '" + id + "' is revoked (deny list)";
      return Status::kUnauthorized;
    }
  }
  *device_id = id;
  reason->clear();
  return Status::kOk;
}

Status TlsCredentials::reload_revocation(std::string* error) {
  if (impl_->role != TlsRole::kServer) return fail(Status::kInvalidArgument, error, "a server setting");
  std::unique_ptr<mbedtls_x509_crl, void (*)(mbedtls_x509_crl*)> crl(nullptr, [](mbedtls_x509_crl* c) {
    mbedtls_x509_crl_free(c);
    delete c;
  });
  std::vector<std::string> warnings;
  if (!impl_->files.crl_file.empty()) {
    crl.reset(new mbedtls_x509_crl);
    mbedtls_x509_crl_init(crl.get());
    EDGEFL_RETURN_IF_ERROR(impl_->read_crl(crl.get(), &warnings, error));
  }
  std::set<std::string> ids;
  if (!impl_->files.deny_file.empty())
    EDGEFL_RETURN_IF_ERROR(load_deny_file(impl_->files.deny_file, &ids, error));
  // Everything read and checked: put both in force.
  if (crl) {
    mbedtls_ssl_conf_ca_chain(&impl_->conf, &impl_->ca, crl.get());
    impl_->crls.push_back(std::move(crl));
  }
  {
    std::unique_lock<std::shared_mutex> lock(impl_->deny_mutex);
    impl_->deny.swap(ids);
  }
  impl_->warnings.insert(impl_->warnings.end(), warnings.begin(), warnings.end());
  return Status::kOk;
}

Status TlsCredentials::reload_deny_list(std::string* error) {
  if (impl_->files.deny_file.empty()) return Status::kOk;
  std::set<std::string> ids;
  EDGEFL_RETURN_IF_ERROR(load_deny_file(impl_->files.deny_file, &ids, error));
  {
    std::unique_lock<std::shared_mutex> lock(impl_->deny_mutex);
    impl_->deny.swap(ids);
  }
  return Status::kOk;  // the old list is destroyed outside the lock
}

std::string describe_verify_flags(uint32_t flags) {
  // The other flags of an unusable leaf describe whatever took its place: leave them out.
  if ((flags & kBadCertUnusableLeaf) != 0 && flags != 0xffffffffu) return kUnusableLeafWords;
  std::string text;
  uint32_t known = kBadCertUnusableLeaf;
  for (const VerifyFlagName& f : kVerifyFlagNames) {
    known |= f.flag;
    if ((flags & f.flag) == 0) continue;
    if (!text.empty()) text += ", ";
    text += f.words;
  }
  if ((flags & ~known) != 0) {
    char other[48];
    snprintf(other, sizeof other, "other verify flags 0x%x", static_cast<unsigned>(flags & ~known));
    if (!text.empty()) text += ", ";
    text += other;
  }
  return text;
}

std::string describe_tls_failure(int mbedtls_ret, const mbedtls_ssl_context* ssl) {
  std::string text = mbedtls_ret == 0 ? std::string("no error") : tls_error_text(mbedtls_ret);
  if (mbedtls_ret == MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE) {
    text += "; the peer refused the handshake (its log says why)";
  }
  if (mbedtls_ret == MBEDTLS_ERR_X509_UNKNOWN_SIG_ALG + MBEDTLS_ERR_OID_NOT_FOUND) {
    text +=
        "; the peer's certificate has a signature algorithm this build does not support (only ECDSA "
        "with SHA-256 or SHA-384; SHA-1, RSA, Ed25519 and others are refused)";
  }
  if (ssl != nullptr) {
    const uint32_t flags = mbedtls_ssl_get_verify_result(ssl);
    if (flags != 0 && flags != 0xffffffffu) text += "; peer certificate: " + describe_verify_flags(flags);
  }
  return text;
}

}  // namespace tls
}  // namespace edgefl
