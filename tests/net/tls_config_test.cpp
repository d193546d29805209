// tests/net/tls_config_test.cpp: the mbedTLS that edgefl links (platforms/cmake/edgefl_mbedtls.cmake)
// does what platforms/mbedtls/edgefl_mbedtls_config.h promises: 3.6.x; only AEAD suites with
// ECDHE-ECDSA or TLS 1.3; PSA crypto; ECDSA P-256 keys and certificates written and parsed back;
// and mutually authenticated TLS 1.3 (and 1.2) handshakes between two contexts over in-memory
// byte queues, which fail when the client has no certificate or an untrusted one.
//
// EDGEFL_MBEDTLS_BUNDLED (set by tests/tls.cmake) is 1 when mbedTLS was built with edgefl's config
// header; with an installed mbedTLS (EDGEFL_MBEDTLS=system), the checks of the header's contents
// are skipped and only what edgefl needs from any 3.6 is checked.
#include <string.h>

#include <algorithm>
#include <deque>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "mbedtls/build_info.h"
#include "mbedtls/ctr_drbg.h"
#include "mbedtls/ecp.h"
#include "mbedtls/entropy.h"
#include "mbedtls/error.h"
#include "mbedtls/oid.h"
#include "mbedtls/pk.h"
#include "mbedtls/ssl.h"
#include "mbedtls/ssl_ciphersuites.h"
#include "mbedtls/version.h"
#include "mbedtls/x509_crt.h"
#include "psa/crypto.h"

#ifndef EDGEFL_MBEDTLS_BUNDLED
#error "tests/tls.cmake defines EDGEFL_MBEDTLS_BUNDLED (0 or 1)"
#endif
static_assert((MBEDTLS_VERSION_NUMBER >> 16) == 0x0306, "edgefl needs mbedTLS 3.6 LTS");
#if !defined(MBEDTLS_SSL_PROTO_TLS1_3)
#error "edgefl needs TLS 1.3 (MBEDTLS_SSL_PROTO_TLS1_3)"
#endif

namespace {

// --- the runtime policy of shared/reference/security.md §4.3 ---------------------------------
const int kSuites[] = {MBEDTLS_TLS1_3_AES_128_GCM_SHA256, MBEDTLS_TLS1_3_CHACHA20_POLY1305_SHA256,
                       MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
                       MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, 0};
const uint16_t kGroups[] = {MBEDTLS_SSL_IANA_TLS_GROUP_X25519, MBEDTLS_SSL_IANA_TLS_GROUP_SECP256R1,
                            MBEDTLS_SSL_IANA_TLS_GROUP_NONE};
const uint16_t kSigAlgs[] = {MBEDTLS_TLS1_3_SIG_ECDSA_SECP256R1_SHA256, MBEDTLS_TLS1_3_SIG_NONE};
const mbedtls_x509_crt_profile kP256Only = {
    MBEDTLS_X509_ID_FLAG(MBEDTLS_MD_SHA256) | MBEDTLS_X509_ID_FLAG(MBEDTLS_MD_SHA384),  // signatures
    MBEDTLS_X509_ID_FLAG(MBEDTLS_PK_ECKEY) | MBEDTLS_X509_ID_FLAG(MBEDTLS_PK_ECDSA),    // key types
    MBEDTLS_X509_ID_FLAG(MBEDTLS_ECP_DP_SECP256R1),                                     // curves
    2048};                                                                              // (RSA: none)
const char kServerName[] = "server.edgefl.test";

std::string error_text(int ret) {
  char text[128] = "";
#if defined(MBEDTLS_ERROR_C)
  mbedtls_strerror(ret, text, sizeof text);
#endif
  return std::to_string(ret) + " (" + text + ")";
}

#if EDGEFL_MBEDTLS_BUNDLED
bool contains(const std::string& s, const char* part) {
  return s.find(part) != std::string::npos;
}
#endif
bool starts_with(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

// A CTR_DRBG over the platform entropy source, for key generation, signatures and TLS.
struct Rng {
  mbedtls_entropy_context entropy;
  mbedtls_ctr_drbg_context drbg;
  Rng() {
    mbedtls_entropy_init(&entropy);
    mbedtls_ctr_drbg_init(&drbg);
    static const unsigned char kPersonalization[] = "edgefl tls_config_test";
    seeded = mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &entropy, kPersonalization,
                                   sizeof kPersonalization - 1);
  }
  ~Rng() {
    mbedtls_ctr_drbg_free(&drbg);
    mbedtls_entropy_free(&entropy);
  }
  Rng(const Rng&) = delete;
  Rng& operator=(const Rng&) = delete;
  int seeded = -1;  // 0 once seeded
};

// Generates an ECDSA P-256 key pair through PSA and copies it into `pk` (set up by this call).
void generate_p256_key(mbedtls_pk_context* pk) {
  psa_key_attributes_t attributes = psa_key_attributes_init();
  psa_set_key_type(&attributes, PSA_KEY_TYPE_ECC_KEY_PAIR(PSA_ECC_FAMILY_SECP_R1));
  psa_set_key_bits(&attributes, 256);
  psa_set_key_usage_flags(&attributes, PSA_KEY_USAGE_SIGN_HASH | PSA_KEY_USAGE_EXPORT);
  psa_set_key_algorithm(&attributes, PSA_ALG_ECDSA(PSA_ALG_SHA_256));
  mbedtls_svc_key_id_t id = MBEDTLS_SVC_KEY_ID_INIT;
  REQUIRE(psa_generate_key(&attributes, &id) == PSA_SUCCESS);
  const int ret = mbedtls_pk_copy_from_psa(id, pk);
  CHECK(psa_destroy_key(id) == PSA_SUCCESS);
  REQUIRE_MESSAGE(ret == 0, error_text(ret));
}

// What a certificate says about its subject.
struct CertSpec {
  const char* subject;   // e.g. "CN=device-0001,O=edgefl test"
  const char* issuer;    // the issuer's subject
  bool ca;               // basicConstraints CA:TRUE, keyUsage keyCertSign + cRLSign
  const char* dns_name;  // subjectAltName dNSName, or nullptr
  unsigned char serial;
};

// Writes a PEM certificate for `subject_key` signed with `issuer_key` (ECDSA with SHA-256).
std::string write_certificate(const CertSpec& spec, mbedtls_pk_context* subject_key,
                              mbedtls_pk_context* issuer_key, Rng* rng) {
  mbedtls_x509write_cert writer;
  mbedtls_x509write_crt_init(&writer);
  mbedtls_x509write_crt_set_version(&writer, MBEDTLS_X509_CRT_VERSION_3);
  mbedtls_x509write_crt_set_md_alg(&writer, MBEDTLS_MD_SHA256);
  mbedtls_x509write_crt_set_subject_key(&writer, subject_key);
  mbedtls_x509write_crt_set_issuer_key(&writer, issuer_key);
  unsigned char serial[1] = {spec.serial};
  CHECK(mbedtls_x509write_crt_set_subject_name(&writer, spec.subject) == 0);
  CHECK(mbedtls_x509write_crt_set_issuer_name(&writer, spec.issuer) == 0);
  CHECK(mbedtls_x509write_crt_set_serial_raw(&writer, serial, sizeof serial) == 0);
  CHECK(mbedtls_x509write_crt_set_validity(&writer, "20250101000000", "20491231235959") == 0);
  CHECK(mbedtls_x509write_crt_set_basic_constraints(&writer, spec.ca ? 1 : 0, spec.ca ? 0 : -1) == 0);
  CHECK(mbedtls_x509write_crt_set_key_usage(&writer,
                                            spec.ca ? MBEDTLS_X509_KU_KEY_CERT_SIGN | MBEDTLS_X509_KU_CRL_SIGN
                                                    : MBEDTLS_X509_KU_DIGITAL_SIGNATURE) == 0);
  if (spec.dns_name != nullptr) {
    mbedtls_x509_san_list san;
    memset(&san, 0, sizeof san);
    san.node.type = MBEDTLS_X509_SAN_DNS_NAME;
    san.node.san.unstructured_name.p = reinterpret_cast<unsigned char*>(const_cast<char*>(spec.dns_name));
    san.node.san.unstructured_name.len = strlen(spec.dns_name);
    CHECK(mbedtls_x509write_crt_set_subject_alternative_name(&writer, &san) == 0);
  }
  std::vector<unsigned char> pem(4096);
  const int ret =
      mbedtls_x509write_crt_pem(&writer, pem.data(), pem.size(), mbedtls_ctr_drbg_random, &rng->drbg);
  mbedtls_x509write_crt_free(&writer);
  REQUIRE_MESSAGE(ret == 0, error_text(ret));
  return std::string(reinterpret_cast<const char*>(pem.data()));
}

// A key and its certificate (PEM, and parsed back from the PEM).
struct Identity {
  mbedtls_pk_context key;
  mbedtls_x509_crt crt;
  std::string crt_pem;
  Identity() {
    mbedtls_pk_init(&key);
    mbedtls_x509_crt_init(&crt);
  }
  ~Identity() {
    mbedtls_x509_crt_free(&crt);
    mbedtls_pk_free(&key);
  }
  Identity(const Identity&) = delete;
  Identity& operator=(const Identity&) = delete;

  // Makes a fresh key and a certificate for it, signed by `issuer` (nullptr: self-signed).
  void issue(const CertSpec& spec, Identity* issuer, Rng* rng) {
    generate_p256_key(&key);
    crt_pem = write_certificate(spec, &key, issuer != nullptr ? &issuer->key : &key, rng);
    const int ret = mbedtls_x509_crt_parse(&crt, reinterpret_cast<const unsigned char*>(crt_pem.c_str()),
                                           crt_pem.size() + 1);  // PEM: the length counts the NUL
    REQUIRE_MESSAGE(ret == 0, error_text(ret));
  }
};

// One direction of the in-memory connection.
struct ByteQueue {
  std::deque<unsigned char> bytes;
};

// What one TLS context's BIO callbacks see: where it writes, where it reads, and how much a
// single call may move (small, so that both ends cope with partial transfers).
struct Wire {
  ByteQueue* out = nullptr;
  ByteQueue* in = nullptr;
  size_t max_send = 1500;
  size_t max_recv = 700;
};

int wire_send(void* ctx, const unsigned char* buf, size_t len) {
  Wire* wire = static_cast<Wire*>(ctx);
  const size_t n = std::min(len, wire->max_send);
  wire->out->bytes.insert(wire->out->bytes.end(), buf, buf + n);
  return static_cast<int>(n);
}

int wire_recv(void* ctx, unsigned char* buf, size_t len) {
  Wire* wire = static_cast<Wire*>(ctx);
  if (wire->in->bytes.empty()) return MBEDTLS_ERR_SSL_WANT_READ;
  const size_t n = std::min({len, wire->max_recv, wire->in->bytes.size()});
  std::copy_n(wire->in->bytes.begin(), n, buf);
  wire->in->bytes.erase(wire->in->bytes.begin(), wire->in->bytes.begin() + static_cast<std::ptrdiff_t>(n));
  return static_cast<int>(n);
}

// One end of a connection: configuration, context, wire.
struct Peer {
  mbedtls_ssl_config conf;
  mbedtls_ssl_context ssl;
  Wire wire;
  Peer() {
    mbedtls_ssl_config_init(&conf);
    mbedtls_ssl_init(&ssl);
  }
  ~Peer() {
    mbedtls_ssl_free(&ssl);
    mbedtls_ssl_config_free(&conf);
  }
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  // Configures this end with the project's policy: TLS 1.2..max_version, the policy's suites,
  // groups and signature algorithms, P-256-only certificates, VERIFY_REQUIRED, the CA `ca`, and
  // `own` as its certificate (nullptr: none).
  void setup(int endpoint, mbedtls_ssl_protocol_version max_version, mbedtls_x509_crt* ca, Identity* own,
             Rng* rng) {
    REQUIRE(mbedtls_ssl_config_defaults(&conf, endpoint, MBEDTLS_SSL_TRANSPORT_STREAM,
                                        MBEDTLS_SSL_PRESET_DEFAULT) == 0);
    mbedtls_ssl_conf_min_tls_version(&conf, MBEDTLS_SSL_VERSION_TLS1_2);
    mbedtls_ssl_conf_max_tls_version(&conf, max_version);
    mbedtls_ssl_conf_ciphersuites(&conf, kSuites);
    mbedtls_ssl_conf_groups(&conf, kGroups);
    mbedtls_ssl_conf_sig_algs(&conf, kSigAlgs);
    mbedtls_ssl_conf_cert_profile(&conf, &kP256Only);
    mbedtls_ssl_conf_authmode(&conf, MBEDTLS_SSL_VERIFY_REQUIRED);
    mbedtls_ssl_conf_tls13_key_exchange_modes(&conf, MBEDTLS_SSL_TLS1_3_KEY_EXCHANGE_MODE_EPHEMERAL);
    mbedtls_ssl_conf_rng(&conf, mbedtls_ctr_drbg_random, &rng->drbg);
    mbedtls_ssl_conf_ca_chain(&conf, ca, nullptr);
    if (own != nullptr) REQUIRE(mbedtls_ssl_conf_own_cert(&conf, &own->crt, &own->key) == 0);
    REQUIRE(mbedtls_ssl_setup(&ssl, &conf) == 0);
    mbedtls_ssl_set_bio(&ssl, &wire, wire_send, wire_recv, nullptr);
  }
};

bool in_progress(int ret) {
  return ret == MBEDTLS_ERR_SSL_WANT_READ || ret == MBEDTLS_ERR_SSL_WANT_WRITE;
}

struct HandshakeResult {
  int client = MBEDTLS_ERR_SSL_WANT_READ;
  int server = MBEDTLS_ERR_SSL_WANT_READ;
};

// Steps both handshakes in turn until each has finished or failed, or neither can move.
HandshakeResult run_handshake(Peer* client, Peer* server) {
  HandshakeResult r;
  for (int step = 0; step < 10000 && (in_progress(r.client) || in_progress(r.server)); ++step) {
    if (in_progress(r.client)) r.client = mbedtls_ssl_handshake(&client->ssl);
    if (in_progress(r.server)) r.server = mbedtls_ssl_handshake(&server->ssl);
    // Both waiting for bytes that nobody will send: the handshake is stuck (one side failed).
    if (r.client == MBEDTLS_ERR_SSL_WANT_READ && r.server == MBEDTLS_ERR_SSL_WANT_READ &&
        client->wire.in->bytes.empty() && server->wire.in->bytes.empty()) {
      break;
    }
  }
  return r;
}

// Reads what has arrived at `reader` (at most 1 KiB); returns mbedtls_ssl_read's last result.
int read_message(Peer* reader, std::string* message) {
  unsigned char buf[1024];
  int ret = MBEDTLS_ERR_SSL_WANT_READ;
  for (int attempt = 0; attempt < 100 && in_progress(ret); ++attempt) {
    ret = mbedtls_ssl_read(&reader->ssl, buf, sizeof buf);
  }
  if (ret > 0) message->assign(reinterpret_cast<const char*>(buf), static_cast<size_t>(ret));
  return ret;
}

int write_message(Peer* writer, const std::string& message) {
  return mbedtls_ssl_write(&writer->ssl, reinterpret_cast<const unsigned char*>(message.data()),
                           message.size());
}

// A test PKI: a CA, a server certificate for kServerName and a device (client) certificate.
struct Pki {
  Rng rng;
  Identity ca, server, device;
  Pki() {
    REQUIRE(psa_crypto_init() == PSA_SUCCESS);
    REQUIRE(rng.seeded == 0);
    ca.issue({"CN=edgefl test CA,O=edgefl test", "CN=edgefl test CA,O=edgefl test", true, nullptr, 1},
             nullptr, &rng);
    server.issue(
        {"CN=server.edgefl.test,O=edgefl test", "CN=edgefl test CA,O=edgefl test", false, kServerName, 2},
        &ca, &rng);
    device.issue({"CN=device-0001,O=edgefl test", "CN=edgefl test CA,O=edgefl test", false, nullptr, 3}, &ca,
                 &rng);
  }
};

// A connection between two in-memory peers (not yet configured).
struct Connection {
  ByteQueue to_server, to_client;
  Peer client, server;
  Connection() {
    client.wire.out = &to_server;
    client.wire.in = &to_client;
    server.wire.out = &to_client;
    server.wire.in = &to_server;
  }
};

#if EDGEFL_MBEDTLS_BUNDLED
// Whether a configuration macro is defined: mbedTLS defines its options empty, so the expansion
// differs from the name exactly when the macro is defined.
#define EDGEFL_STRINGIFY(x) #x
#define EDGEFL_EXPAND_STRINGIFY(x) EDGEFL_STRINGIFY(x)
#define EDGEFL_OPTION(x) make_option(#x, EDGEFL_EXPAND_STRINGIFY(x))
struct Option {
  const char* name;
  bool defined;
};
Option make_option(const char* name, const char* expansion) {
  return {name, strcmp(name, expansion) != 0};
}
#endif

}  // namespace

TEST_SUITE("tls_config") {
  TEST_CASE("the library is mbedTLS 3.6.x, the same version as its headers") {
    CHECK((mbedtls_version_get_number() >> 16) == 0x0306u);
    CHECK(mbedtls_version_get_number() == static_cast<unsigned>(MBEDTLS_VERSION_NUMBER));
    char version[18] = "";
    mbedtls_version_get_string(version);
    CHECK(std::string(version) == MBEDTLS_VERSION_STRING);
#if EDGEFL_MBEDTLS_BUNDLED
    CHECK(std::string(version) == EDGEFL_MBEDTLS_EXPECTED_VERSION);  // the version pinned and fetched
#endif
    MESSAGE("mbedTLS ", std::string(version),
            std::string(EDGEFL_MBEDTLS_BUNDLED ? " (bundled)" : " (installed)"));
  }

  TEST_CASE("the configuration leaves out everything legacy") {
#if EDGEFL_MBEDTLS_BUNDLED
    const Option required[] = {EDGEFL_OPTION(MBEDTLS_SSL_PROTO_TLS1_3),
                               EDGEFL_OPTION(MBEDTLS_SSL_PROTO_TLS1_2),
                               EDGEFL_OPTION(MBEDTLS_USE_PSA_CRYPTO),
                               EDGEFL_OPTION(MBEDTLS_PSA_CRYPTO_C),
                               EDGEFL_OPTION(MBEDTLS_SSL_KEEP_PEER_CERTIFICATE),
                               EDGEFL_OPTION(MBEDTLS_SSL_EXTENDED_MASTER_SECRET),
                               EDGEFL_OPTION(MBEDTLS_X509_CRL_PARSE_C),
                               EDGEFL_OPTION(MBEDTLS_X509_CRT_WRITE_C),
                               EDGEFL_OPTION(MBEDTLS_X509_CSR_WRITE_C),
                               EDGEFL_OPTION(MBEDTLS_PK_WRITE_C),
                               EDGEFL_OPTION(MBEDTLS_PEM_WRITE_C),
                               EDGEFL_OPTION(MBEDTLS_THREADING_C)};
    const Option forbidden[] = {
        EDGEFL_OPTION(MBEDTLS_RSA_C),
        EDGEFL_OPTION(MBEDTLS_DHM_C),
        EDGEFL_OPTION(MBEDTLS_CIPHER_MODE_CBC),
        EDGEFL_OPTION(MBEDTLS_CIPHER_NULL_CIPHER),
        EDGEFL_OPTION(MBEDTLS_DES_C),
        EDGEFL_OPTION(MBEDTLS_MD5_C),
        EDGEFL_OPTION(MBEDTLS_SHA1_C),
        EDGEFL_OPTION(MBEDTLS_RIPEMD160_C),
        EDGEFL_OPTION(MBEDTLS_CAMELLIA_C),
        EDGEFL_OPTION(MBEDTLS_ARIA_C),
        EDGEFL_OPTION(MBEDTLS_CCM_C),
        EDGEFL_OPTION(MBEDTLS_SSL_RENEGOTIATION),
        EDGEFL_OPTION(MBEDTLS_SSL_PROTO_DTLS),
        EDGEFL_OPTION(MBEDTLS_SSL_EARLY_DATA),
        EDGEFL_OPTION(MBEDTLS_SSL_ENCRYPT_THEN_MAC),
        EDGEFL_OPTION(MBEDTLS_SSL_CONTEXT_SERIALIZATION),
        EDGEFL_OPTION(MBEDTLS_SSL_TLS1_3_KEY_EXCHANGE_MODE_PSK_ENABLED),
        EDGEFL_OPTION(MBEDTLS_SSL_TLS1_3_KEY_EXCHANGE_MODE_PSK_EPHEMERAL_ENABLED),
        EDGEFL_OPTION(MBEDTLS_KEY_EXCHANGE_RSA_ENABLED),
        EDGEFL_OPTION(MBEDTLS_KEY_EXCHANGE_ECDHE_RSA_ENABLED),
        EDGEFL_OPTION(MBEDTLS_KEY_EXCHANGE_DHE_RSA_ENABLED),
        EDGEFL_OPTION(MBEDTLS_KEY_EXCHANGE_ECDH_ECDSA_ENABLED),
        EDGEFL_OPTION(MBEDTLS_KEY_EXCHANGE_PSK_ENABLED),
        EDGEFL_OPTION(MBEDTLS_KEY_EXCHANGE_ECDHE_PSK_ENABLED),
        EDGEFL_OPTION(MBEDTLS_SSL_CLI_ALLOW_WEAK_CERTIFICATE_VERIFICATION_WITHOUT_HOSTNAME),
        EDGEFL_OPTION(MBEDTLS_PSA_CRYPTO_STORAGE_C),
        EDGEFL_OPTION(MBEDTLS_NET_C)};
    for (const Option& option : required)
      CHECK_MESSAGE(option.defined, std::string(option.name), " must be defined");
    for (const Option& option : forbidden)
      CHECK_MESSAGE(!option.defined, std::string(option.name), " must not be defined");
#else
    MESSAGE(
        "installed mbedTLS: its configuration is its builder's (edgefl_mbedtls_check.c checked the minimum)");
#endif
  }

  TEST_CASE("the compiled-in suites are AEAD with ECDHE-ECDSA (TLS 1.2) or TLS 1.3") {
    std::vector<int> ids;
    std::vector<std::string> names;
    for (const int* id = mbedtls_ssl_list_ciphersuites(); *id != 0; ++id) {
      const mbedtls_ssl_ciphersuite_t* suite = mbedtls_ssl_ciphersuite_from_id(*id);
      REQUIRE(suite != nullptr);
      ids.push_back(*id);
      names.push_back(mbedtls_ssl_ciphersuite_get_name(suite));
    }
    // The runtime policy's suites are there in every case.
    for (const int* id = kSuites; *id != 0; ++id) {
      CHECK_MESSAGE(std::find(ids.begin(), ids.end(), *id) != ids.end(), "policy suite ", *id, " missing");
    }
#if EDGEFL_MBEDTLS_BUNDLED
    for (const std::string& name : names) {
      INFO("suite ", name);
      CHECK((starts_with(name, "TLS1-3-") || starts_with(name, "TLS-ECDHE-ECDSA-WITH-")));
      CHECK((contains(name, "-GCM-") || contains(name, "CHACHA20-POLY1305")));
      for (const char* legacy :
           {"CBC", "RSA", "SHA1", "MD5", "NULL", "PSK", "CCM", "DES", "RC4", "CAMELLIA", "ARIA"}) {
        CHECK_FALSE(contains(name, legacy));
      }
      CHECK_FALSE(name.compare(name.size() - 4, 4, "-SHA") == 0);  // SHA-1 MACs end in "-SHA"
    }
    std::vector<std::string> expected = {"TLS1-3-AES-128-GCM-SHA256",
                                         "TLS1-3-AES-256-GCM-SHA384",
                                         "TLS1-3-CHACHA20-POLY1305-SHA256",
                                         "TLS-ECDHE-ECDSA-WITH-AES-128-GCM-SHA256",
                                         "TLS-ECDHE-ECDSA-WITH-AES-256-GCM-SHA384",
                                         "TLS-ECDHE-ECDSA-WITH-CHACHA20-POLY1305-SHA256"};
    std::sort(expected.begin(), expected.end());
    std::sort(names.begin(), names.end());
    CHECK(names == expected);

    // Exactly two curves: X25519 and P-256.
    std::vector<mbedtls_ecp_group_id> curves;
    for (const mbedtls_ecp_curve_info* c = mbedtls_ecp_curve_list(); c->grp_id != MBEDTLS_ECP_DP_NONE; ++c) {
      curves.push_back(c->grp_id);
    }
    std::sort(curves.begin(), curves.end());
    std::vector<mbedtls_ecp_group_id> expected_curves = {MBEDTLS_ECP_DP_SECP256R1, MBEDTLS_ECP_DP_CURVE25519};
    std::sort(expected_curves.begin(), expected_curves.end());
    CHECK(curves == expected_curves);
#endif
  }

  TEST_CASE("PSA crypto initialises, and refuses what the build leaves out") {
    REQUIRE(psa_crypto_init() == PSA_SUCCESS);
    unsigned char digest[64];
    size_t digest_len = 0;
    const unsigned char abc[] = {'a', 'b', 'c'};
    REQUIRE(psa_hash_compute(PSA_ALG_SHA_256, abc, sizeof abc, digest, sizeof digest, &digest_len) ==
            PSA_SUCCESS);
    const unsigned char sha256_abc[] = {0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea, 0x41, 0x41, 0x40,
                                        0xde, 0x5d, 0xae, 0x22, 0x23, 0xb0, 0x03, 0x61, 0xa3, 0x96, 0x17,
                                        0x7a, 0x9c, 0xb4, 0x10, 0xff, 0x61, 0xf2, 0x00, 0x15, 0xad};
    REQUIRE(digest_len == sizeof sha256_abc);
    CHECK(memcmp(digest, sha256_abc, digest_len) == 0);
#if EDGEFL_MBEDTLS_BUNDLED
    CHECK(psa_hash_compute(PSA_ALG_SHA_1, abc, sizeof abc, digest, sizeof digest, &digest_len) ==
          PSA_ERROR_NOT_SUPPORTED);
    CHECK(psa_hash_compute(PSA_ALG_MD5, abc, sizeof abc, digest, sizeof digest, &digest_len) ==
          PSA_ERROR_NOT_SUPPORTED);
    psa_key_attributes_t attributes = psa_key_attributes_init();
    psa_set_key_type(&attributes, PSA_KEY_TYPE_ECC_KEY_PAIR(PSA_ECC_FAMILY_SECP_R1));
    psa_set_key_bits(&attributes, 384);
    psa_set_key_usage_flags(&attributes, PSA_KEY_USAGE_SIGN_HASH);
    psa_set_key_algorithm(&attributes, PSA_ALG_ECDSA(PSA_ALG_SHA_384));
    mbedtls_svc_key_id_t id = MBEDTLS_SVC_KEY_ID_INIT;
    CHECK(psa_generate_key(&attributes, &id) == PSA_ERROR_NOT_SUPPORTED);  // P-384: not built
    psa_set_key_type(&attributes, PSA_KEY_TYPE_RSA_KEY_PAIR);
    psa_set_key_bits(&attributes, 2048);
    psa_set_key_algorithm(&attributes, PSA_ALG_RSA_PKCS1V15_SIGN(PSA_ALG_SHA_256));
    CHECK(psa_generate_key(&attributes, &id) == PSA_ERROR_NOT_SUPPORTED);  // RSA: not built
#endif
  }

  TEST_CASE("an ECDSA P-256 key and a self-signed certificate round-trip through PEM") {
    REQUIRE(psa_crypto_init() == PSA_SUCCESS);
    Rng rng;
    REQUIRE(rng.seeded == 0);
    Identity ca;
    ca.issue({"CN=edgefl dev CA,O=edgefl test", "CN=edgefl dev CA,O=edgefl test", true, nullptr, 7}, nullptr,
             &rng);
    CHECK(starts_with(ca.crt_pem, "-----BEGIN CERTIFICATE-----\n"));

    // The parsed certificate is what was written.
    CHECK(ca.crt.version == 3);
    CHECK(mbedtls_pk_get_type(&ca.crt.pk) == MBEDTLS_PK_ECKEY);
    CHECK(mbedtls_pk_get_bitlen(&ca.crt.pk) == 256);
    CHECK(MBEDTLS_OID_CMP(MBEDTLS_OID_ECDSA_SHA256, &ca.crt.sig_oid) == 0);
    char dn[256];
    REQUIRE(mbedtls_x509_dn_gets(dn, sizeof dn, &ca.crt.subject) > 0);
    CHECK(std::string(dn) == "CN=edgefl dev CA, O=edgefl test");
    REQUIRE(ca.crt.serial.len == 1);
    CHECK(ca.crt.serial.p[0] == 7);
    // It verifies against itself under the P-256-only profile, and the public key matches the key.
    uint32_t flags = 0xffffffffu;
    CHECK(mbedtls_x509_crt_verify_with_profile(&ca.crt, &ca.crt, nullptr, &kP256Only, nullptr, &flags,
                                               nullptr, nullptr) == 0);
    CHECK(flags == 0);
    CHECK(mbedtls_pk_check_pair(&ca.crt.pk, &ca.key, mbedtls_ctr_drbg_random, &rng.drbg) == 0);

    // The private key round-trips through PEM too (what `edgefl certs` writes to key files).
    std::vector<unsigned char> key_pem(2048);
    REQUIRE(mbedtls_pk_write_key_pem(&ca.key, key_pem.data(), key_pem.size()) == 0);
    const std::string key_text(reinterpret_cast<const char*>(key_pem.data()));
    CHECK(starts_with(key_text, "-----BEGIN EC PRIVATE KEY-----\n"));
    mbedtls_pk_context parsed;
    mbedtls_pk_init(&parsed);
    const int ret = mbedtls_pk_parse_key(&parsed, key_pem.data(), key_text.size() + 1, nullptr, 0,
                                         mbedtls_ctr_drbg_random, &rng.drbg);
    CHECK_MESSAGE(ret == 0, error_text(ret));
    CHECK(mbedtls_pk_check_pair(&ca.crt.pk, &parsed, mbedtls_ctr_drbg_random, &rng.drbg) == 0);
    mbedtls_pk_free(&parsed);
  }

  TEST_CASE("mutually authenticated TLS 1.3 over in-memory queues: handshake and a round trip") {
    Pki pki;
    Connection link;
    link.client.setup(MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_VERSION_TLS1_3, &pki.ca.crt, &pki.device, &pki.rng);
    link.server.setup(MBEDTLS_SSL_IS_SERVER, MBEDTLS_SSL_VERSION_TLS1_3, &pki.ca.crt, &pki.server, &pki.rng);
    REQUIRE(mbedtls_ssl_set_hostname(&link.client.ssl, kServerName) == 0);

    const HandshakeResult r = run_handshake(&link.client, &link.server);
    REQUIRE_MESSAGE(r.client == 0, "client: ", error_text(r.client));
    REQUIRE_MESSAGE(r.server == 0, "server: ", error_text(r.server));
    CHECK(mbedtls_ssl_get_version_number(&link.client.ssl) == MBEDTLS_SSL_VERSION_TLS1_3);
    CHECK(mbedtls_ssl_get_version_number(&link.server.ssl) == MBEDTLS_SSL_VERSION_TLS1_3);
    CHECK(std::string(mbedtls_ssl_get_ciphersuite(&link.client.ssl)) == "TLS1-3-AES-128-GCM-SHA256");
    CHECK(mbedtls_ssl_get_verify_result(&link.client.ssl) == 0);
    CHECK(mbedtls_ssl_get_verify_result(&link.server.ssl) == 0);

    // Each side holds the other's certificate: the server knows which device this is.
    const mbedtls_x509_crt* device = mbedtls_ssl_get_peer_cert(&link.server.ssl);
    REQUIRE(device != nullptr);
    char dn[256];
    REQUIRE(mbedtls_x509_dn_gets(dn, sizeof dn, &device->subject) > 0);
    CHECK(std::string(dn) == "CN=device-0001, O=edgefl test");
    const mbedtls_x509_crt* server = mbedtls_ssl_get_peer_cert(&link.client.ssl);
    REQUIRE(server != nullptr);
    CHECK(server->raw.len == pki.server.crt.raw.len);

    // A message each way, larger than one BIO transfer.
    const std::string update(5000, 'u');
    REQUIRE(write_message(&link.client, update) == static_cast<int>(update.size()));
    std::string received, chunk;
    while (received.size() < update.size()) {
      const int ret = read_message(&link.server, &chunk);
      REQUIRE_MESSAGE(ret > 0, error_text(ret));
      received += chunk;
    }
    CHECK(received == update);
    const std::string ack = "ack round 1";
    REQUIRE(write_message(&link.server, ack) == static_cast<int>(ack.size()));
    std::string reply;
    REQUIRE(read_message(&link.client, &reply) == static_cast<int>(ack.size()));
    CHECK(reply == ack);
  }

  TEST_CASE("mutually authenticated TLS 1.2 (the fallback) negotiates ECDHE-ECDSA with AEAD") {
    Pki pki;
    Connection link;
    link.client.setup(MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_VERSION_TLS1_2, &pki.ca.crt, &pki.device, &pki.rng);
    link.server.setup(MBEDTLS_SSL_IS_SERVER, MBEDTLS_SSL_VERSION_TLS1_3, &pki.ca.crt, &pki.server, &pki.rng);
    REQUIRE(mbedtls_ssl_set_hostname(&link.client.ssl, kServerName) == 0);
    const HandshakeResult r = run_handshake(&link.client, &link.server);
    REQUIRE_MESSAGE(r.client == 0, "client: ", error_text(r.client));
    REQUIRE_MESSAGE(r.server == 0, "server: ", error_text(r.server));
    CHECK(mbedtls_ssl_get_version_number(&link.server.ssl) == MBEDTLS_SSL_VERSION_TLS1_2);
    CHECK(std::string(mbedtls_ssl_get_ciphersuite(&link.server.ssl)) ==
          "TLS-ECDHE-ECDSA-WITH-AES-128-GCM-SHA256");
    REQUIRE(mbedtls_ssl_get_peer_cert(&link.server.ssl) != nullptr);
    const std::string hello = "hello over TLS 1.2";
    REQUIRE(write_message(&link.client, hello) == static_cast<int>(hello.size()));
    std::string received;
    REQUIRE(read_message(&link.server, &received) == static_cast<int>(hello.size()));
    CHECK(received == hello);
  }

  TEST_CASE("the server refuses a client without a certificate (VERIFY_REQUIRED)") {
    Pki pki;
    Connection link;
    link.client.setup(MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_VERSION_TLS1_3, &pki.ca.crt, nullptr, &pki.rng);
    link.server.setup(MBEDTLS_SSL_IS_SERVER, MBEDTLS_SSL_VERSION_TLS1_3, &pki.ca.crt, &pki.server, &pki.rng);
    REQUIRE(mbedtls_ssl_set_hostname(&link.client.ssl, kServerName) == 0);

    const HandshakeResult r = run_handshake(&link.client, &link.server);
    CHECK_MESSAGE(r.server == MBEDTLS_ERR_SSL_NO_CLIENT_CERTIFICATE, "server: ", error_text(r.server));
    CHECK(mbedtls_ssl_get_peer_cert(&link.server.ssl) == nullptr);
    // In TLS 1.3 the client finishes first (its Finished follows its empty Certificate), then the
    // server's alert ends the connection: nothing the client sends is accepted, and its next read
    // fails. (mbedTLS 3.6's server still encrypts that alert with its handshake keys while the
    // client reads with the application keys, so the client sees a bad MAC rather than the alert:
    // it fails closed either way.)
    if (r.client == 0) {
      const std::string update = "an update nobody may accept";
      write_message(&link.client, update);  // may succeed locally: it goes nowhere
      std::string received;
      CHECK(read_message(&link.server, &received) <= 0);
      CHECK(received.empty());
      std::string reply;
      const int ret = read_message(&link.client, &reply);
      CHECK_MESSAGE((ret < 0 && !in_progress(ret)), "client read: ", error_text(ret));
    } else {
      CHECK_MESSAGE(!in_progress(r.client), "client: ", error_text(r.client));
    }
  }

  TEST_CASE("the server refuses a client certificate from another CA") {
    Pki pki;
    Identity rogue_ca, rogue_device;
    rogue_ca.issue({"CN=edgefl test CA,O=edgefl test", "CN=edgefl test CA,O=edgefl test", true, nullptr, 1},
                   nullptr,
                   &pki.rng);  // the same name as the real CA, another key
    rogue_device.issue({"CN=device-0001,O=edgefl test", "CN=edgefl test CA,O=edgefl test", false, nullptr, 3},
                       &rogue_ca, &pki.rng);
    Connection link;
    link.client.setup(MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_VERSION_TLS1_3, &pki.ca.crt, &rogue_device,
                      &pki.rng);
    link.server.setup(MBEDTLS_SSL_IS_SERVER, MBEDTLS_SSL_VERSION_TLS1_3, &pki.ca.crt, &pki.server, &pki.rng);
    REQUIRE(mbedtls_ssl_set_hostname(&link.client.ssl, kServerName) == 0);
    const HandshakeResult r = run_handshake(&link.client, &link.server);
    CHECK_MESSAGE(r.server == MBEDTLS_ERR_X509_CERT_VERIFY_FAILED, "server: ", error_text(r.server));
    CHECK((mbedtls_ssl_get_verify_result(&link.server.ssl) & MBEDTLS_X509_BADCERT_NOT_TRUSTED) != 0);
  }

  TEST_CASE("the client refuses a server whose name does not match") {
    Pki pki;
    Connection link;
    link.client.setup(MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_VERSION_TLS1_3, &pki.ca.crt, &pki.device, &pki.rng);
    link.server.setup(MBEDTLS_SSL_IS_SERVER, MBEDTLS_SSL_VERSION_TLS1_3, &pki.ca.crt, &pki.server, &pki.rng);
    REQUIRE(mbedtls_ssl_set_hostname(&link.client.ssl, "other.edgefl.test") == 0);
    const HandshakeResult r = run_handshake(&link.client, &link.server);
    CHECK_MESSAGE(r.client == MBEDTLS_ERR_X509_CERT_VERIFY_FAILED, "client: ", error_text(r.client));
    CHECK((mbedtls_ssl_get_verify_result(&link.client.ssl) & MBEDTLS_X509_BADCERT_CN_MISMATCH) != 0);
    CHECK(r.server != 0);
  }
}  // TEST_SUITE("tls_config")
