// tests/net/credentials_test.cpp: TlsCredentials (tls/tls_credentials.h) and the development PKI
// (sdk/cli/dev_pki.h). Each test writes a PKI with write_dev_pki() into a fresh temporary directory,
// loads credentials from the files, and runs real mutual-TLS handshakes between two mbedTLS
// contexts over in-memory byte queues (small partial transfers, as over a socket): who is let in,
// who is refused, and what the failure says.
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "dev_pki.h"
#include "mbedtls/asn1.h"
#include "mbedtls/ctr_drbg.h"
#include "mbedtls/ecp.h"
#include "mbedtls/entropy.h"
#include "mbedtls/oid.h"
#include "mbedtls/pk.h"
#include "mbedtls/ssl.h"
#include "mbedtls/x509_crt.h"
#include "psa/crypto.h"
#include "tls/tls_credentials.h"

namespace {

using edgefl::Status;
using edgefl::cli::DevPkiOptions;
using edgefl::tls::TlsCredentials;
using edgefl::tls::TlsFiles;
using edgefl::tls::TlsRole;
namespace fs = std::filesystem;

bool contains(const std::string& s, const char* part) {
  return s.find(part) != std::string::npos;
}

// A fresh directory under the system temporary directory, removed with everything in it.
struct TempDir {
  std::string path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "edgefl_net_test_XXXXXX").string();
    REQUIRE(mkdtemp(&pattern[0]) != nullptr);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  REQUIRE(f.good());
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A PKI written by write_dev_pki() with `devices` devices.
struct DevPki {
  TempDir dir;
  explicit DevPki(uint32_t devices = 2, const char* ca_name = "edgefl development CA") {
    DevPkiOptions o;
    o.out_dir = dir.path;
    o.devices = devices;
    o.ca_name = ca_name;
    std::string error;
    const Status s = edgefl::cli::write_dev_pki(o, &error);
    REQUIRE_MESSAGE(s == Status::kOk, error);
  }
  std::string ca() const { return dir / "ca.crt"; }
  std::string server_cert() const { return dir / "server.crt"; }
  std::string server_key() const { return dir / "server.key"; }
  std::string device_cert(const char* id) const { return dir / (std::string("devices/") + id + ".crt"); }
  std::string device_key(const char* id) const { return dir / (std::string("devices/") + id + ".key"); }

  TlsFiles server_files() const {
    TlsFiles f;
    f.ca_file = ca();
    f.cert_file = server_cert();
    f.key_file = server_key();
    return f;
  }
  TlsFiles device_files(const char* id, const char* server_name = "localhost") const {
    TlsFiles f;
    f.ca_file = ca();
    f.cert_file = device_cert(id);
    f.key_file = device_key(id);
    f.server_name = server_name;
    return f;
  }
};

std::unique_ptr<TlsCredentials> load_ok(TlsRole role, const TlsFiles& files) {
  std::unique_ptr<TlsCredentials> creds;
  std::string error;
  const Status s = TlsCredentials::load(role, files, &creds, &error);
  REQUIRE_MESSAGE(s == Status::kOk, error);
  REQUIRE(creds != nullptr);
  return creds;
}

Status load_error(TlsRole role, const TlsFiles& files, std::string* error) {
  std::unique_ptr<TlsCredentials> creds;
  const Status s = TlsCredentials::load(role, files, &creds, error);
  CHECK(creds == nullptr);
  return s;
}

// --- in-memory connection ----------------------------------------------------------------------

struct ByteQueue {
  std::deque<unsigned char> bytes;
};

struct Wire {
  ByteQueue* out = nullptr;
  ByteQueue* in = nullptr;
};

constexpr size_t kMaxSend = 1500;
constexpr size_t kMaxRecv = 700;

int wire_send(void* ctx, const unsigned char* buf, size_t len) {
  Wire* wire = static_cast<Wire*>(ctx);
  const size_t n = std::min(len, kMaxSend);
  wire->out->bytes.insert(wire->out->bytes.end(), buf, buf + n);
  return static_cast<int>(n);
}

int wire_recv(void* ctx, unsigned char* buf, size_t len) {
  Wire* wire = static_cast<Wire*>(ctx);
  if (wire->in->bytes.empty()) return MBEDTLS_ERR_SSL_WANT_READ;
  const size_t n = std::min({len, kMaxRecv, wire->in->bytes.size()});
  std::copy_n(wire->in->bytes.begin(), n, buf);
  wire->in->bytes.erase(wire->in->bytes.begin(), wire->in->bytes.begin() + static_cast<std::ptrdiff_t>(n));
  return static_cast<int>(n);
}

struct Peer {
  mbedtls_ssl_context ssl;
  Wire wire;
  Peer() { mbedtls_ssl_init(&ssl); }
  ~Peer() { mbedtls_ssl_free(&ssl); }
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;
  void setup(const mbedtls_ssl_config* conf) {
    REQUIRE(mbedtls_ssl_setup(&ssl, conf) == 0);
    mbedtls_ssl_set_bio(&ssl, &wire, wire_send, wire_recv, nullptr);
  }
};

bool in_progress(int ret) {
  return ret == MBEDTLS_ERR_SSL_WANT_READ || ret == MBEDTLS_ERR_SSL_WANT_WRITE;
}

struct Link {
  ByteQueue to_server, to_client;
  Peer client, server;
  int client_ret = MBEDTLS_ERR_SSL_WANT_READ;
  int server_ret = MBEDTLS_ERR_SSL_WANT_READ;
  Link() {
    client.wire.out = &to_server;
    client.wire.in = &to_client;
    server.wire.out = &to_client;
    server.wire.in = &to_server;
  }

  // Steps both handshakes in turn until each has finished or failed, or neither can move.
  void handshake() {
    for (int step = 0; step < 10000 && (in_progress(client_ret) || in_progress(server_ret)); ++step) {
      if (in_progress(client_ret)) client_ret = mbedtls_ssl_handshake(&client.ssl);
      if (in_progress(server_ret)) server_ret = mbedtls_ssl_handshake(&server.ssl);
      if (client_ret == MBEDTLS_ERR_SSL_WANT_READ && server_ret == MBEDTLS_ERR_SSL_WANT_READ &&
          to_client.bytes.empty() && to_server.bytes.empty()) {
        break;
      }
    }
  }

  // After a handshake the client believes complete (TLS 1.3: the client finishes before the server
  // has checked its certificate): whether the client learns it was refused on its next read.
  bool client_sees_refusal() {
    unsigned char buf[256];
    int ret = MBEDTLS_ERR_SSL_WANT_READ;
    for (int i = 0; i < 100 && in_progress(ret); ++i) ret = mbedtls_ssl_read(&client.ssl, buf, sizeof buf);
    return ret < 0 && !in_progress(ret);
  }

  std::string client_failure() const { return edgefl::tls::describe_tls_failure(client_ret, &client.ssl); }
  std::string server_failure() const { return edgefl::tls::describe_tls_failure(server_ret, &server.ssl); }
};

// A connection between `client` and `server` credentials, handshake done.
struct Session {
  Link link;
  Session(const TlsCredentials& client, const TlsCredentials& server) {
    link.client.setup(client.config());
    link.server.setup(server.config());
    REQUIRE(client.apply_server_name(&link.client.ssl) == Status::kOk);
    link.handshake();
  }
};

// A client configured by hand with the same policy, for what TlsCredentials refuses to load (no
// certificate, a server certificate as a client certificate) or does not offer (TLS 1.2 only).
const int kSuites[] = {MBEDTLS_TLS1_3_AES_128_GCM_SHA256, MBEDTLS_TLS1_3_CHACHA20_POLY1305_SHA256,
                       MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
                       MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, 0};
struct RawClient {
  mbedtls_entropy_context entropy;
  mbedtls_ctr_drbg_context drbg;
  mbedtls_x509_crt ca, own;
  mbedtls_pk_context key;
  mbedtls_ssl_config conf;
  RawClient(const std::string& ca_file, const std::string& cert_file, const std::string& key_file,
            mbedtls_ssl_protocol_version max_version = MBEDTLS_SSL_VERSION_TLS1_3) {
    mbedtls_entropy_init(&entropy);
    mbedtls_ctr_drbg_init(&drbg);
    mbedtls_x509_crt_init(&ca);
    mbedtls_x509_crt_init(&own);
    mbedtls_pk_init(&key);
    mbedtls_ssl_config_init(&conf);
    REQUIRE(mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &entropy, nullptr, 0) == 0);
    REQUIRE(mbedtls_x509_crt_parse_file(&ca, ca_file.c_str()) == 0);
    REQUIRE(mbedtls_ssl_config_defaults(&conf, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_TRANSPORT_STREAM,
                                        MBEDTLS_SSL_PRESET_DEFAULT) == 0);
    mbedtls_ssl_conf_min_tls_version(&conf, MBEDTLS_SSL_VERSION_TLS1_2);
    mbedtls_ssl_conf_max_tls_version(&conf, max_version);
    mbedtls_ssl_conf_ciphersuites(&conf, kSuites);
    mbedtls_ssl_conf_authmode(&conf, MBEDTLS_SSL_VERIFY_REQUIRED);
    mbedtls_ssl_conf_rng(&conf, mbedtls_ctr_drbg_random, &drbg);
    mbedtls_ssl_conf_ca_chain(&conf, &ca, nullptr);
    if (!cert_file.empty()) {
      REQUIRE(mbedtls_x509_crt_parse_file(&own, cert_file.c_str()) == 0);
      REQUIRE(mbedtls_pk_parse_keyfile(&key, key_file.c_str(), nullptr, mbedtls_ctr_drbg_random, &drbg) == 0);
      REQUIRE(mbedtls_ssl_conf_own_cert(&conf, &own, &key) == 0);
    }
  }
  ~RawClient() {
    mbedtls_ssl_config_free(&conf);
    mbedtls_pk_free(&key);
    mbedtls_x509_crt_free(&own);
    mbedtls_x509_crt_free(&ca);
    mbedtls_ctr_drbg_free(&drbg);
    mbedtls_entropy_free(&entropy);
  }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;
};

// A handshake of a RawClient (expecting "localhost") with `server`.
void raw_handshake(RawClient* client, const TlsCredentials& server, Link* link) {
  link->client.setup(&client->conf);
  link->server.setup(server.config());
  REQUIRE(mbedtls_ssl_set_hostname(&link->client.ssl, "localhost") == 0);
  link->handshake();
}

struct ParsedCert {
  mbedtls_x509_crt crt;
  explicit ParsedCert(const std::string& path) {
    mbedtls_x509_crt_init(&crt);
    REQUIRE(mbedtls_x509_crt_parse_file(&crt, path.c_str()) == 0);
  }
  ~ParsedCert() { mbedtls_x509_crt_free(&crt); }
  ParsedCert(const ParsedCert&) = delete;
  ParsedCert& operator=(const ParsedCert&) = delete;
  std::string subject() const {
    char dn[256] = "";
    mbedtls_x509_dn_gets(dn, sizeof dn, &crt.subject);
    return dn;
  }
};

// Issues, with the PKI's CA, a client certificate whose subject is `subject` verbatim (mbedTLS's
// string form, e.g. "CN=bad id,O=edgefl"): what issue_device_cert() refuses to make.
void issue_raw_client_cert(const DevPki& pki, const char* subject, const std::string& cert_path,
                           const std::string& key_path, bool client_auth_eku = true, bool is_ca = false) {
  mbedtls_entropy_context entropy;
  mbedtls_ctr_drbg_context drbg;
  mbedtls_pk_context ca_key, key;
  mbedtls_x509write_cert w;
  mbedtls_entropy_init(&entropy);
  mbedtls_ctr_drbg_init(&drbg);
  mbedtls_pk_init(&ca_key);
  mbedtls_pk_init(&key);
  mbedtls_x509write_crt_init(&w);
  REQUIRE(mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &entropy, nullptr, 0) == 0);
  REQUIRE(mbedtls_pk_parse_keyfile(&ca_key, (pki.dir / "ca.key").c_str(), nullptr, mbedtls_ctr_drbg_random,
                                   &drbg) == 0);
  REQUIRE(mbedtls_pk_setup(&key, mbedtls_pk_info_from_type(MBEDTLS_PK_ECKEY)) == 0);
  REQUIRE(mbedtls_ecp_gen_key(MBEDTLS_ECP_DP_SECP256R1, mbedtls_pk_ec(key), mbedtls_ctr_drbg_random, &drbg) ==
          0);
  mbedtls_x509write_crt_set_version(&w, MBEDTLS_X509_CRT_VERSION_3);
  mbedtls_x509write_crt_set_md_alg(&w, MBEDTLS_MD_SHA256);
  mbedtls_x509write_crt_set_subject_key(&w, &key);
  mbedtls_x509write_crt_set_issuer_key(&w, &ca_key);
  unsigned char serial[] = {0x42, 0x01};
  CHECK(mbedtls_x509write_crt_set_subject_name(&w, subject) == 0);
  CHECK(mbedtls_x509write_crt_set_issuer_name(&w, "CN=edgefl development CA,O=edgefl") == 0);
  CHECK(mbedtls_x509write_crt_set_serial_raw(&w, serial, sizeof serial) == 0);
  CHECK(mbedtls_x509write_crt_set_validity(&w, "20200101000000", "20991231235959") == 0);
  CHECK(mbedtls_x509write_crt_set_basic_constraints(&w, is_ca ? 1 : 0, -1) == 0);
  CHECK(mbedtls_x509write_crt_set_key_usage(&w, MBEDTLS_X509_KU_DIGITAL_SIGNATURE) == 0);
  mbedtls_asn1_sequence eku;
  memset(&eku, 0, sizeof eku);
  eku.buf.tag = MBEDTLS_ASN1_OID;
  eku.buf.p = reinterpret_cast<unsigned char*>(const_cast<char*>(MBEDTLS_OID_CLIENT_AUTH));
  eku.buf.len = MBEDTLS_OID_SIZE(MBEDTLS_OID_CLIENT_AUTH);
  if (client_auth_eku) CHECK(mbedtls_x509write_crt_set_ext_key_usage(&w, &eku) == 0);
  std::vector<unsigned char> pem(4096);
  REQUIRE(mbedtls_x509write_crt_pem(&w, pem.data(), pem.size(), mbedtls_ctr_drbg_random, &drbg) == 0);
  write_text(cert_path, reinterpret_cast<const char*>(pem.data()));
  REQUIRE(mbedtls_pk_write_key_pem(&key, pem.data(), pem.size()) == 0);
  write_text(key_path, reinterpret_cast<const char*>(pem.data()));
  mbedtls_x509write_crt_free(&w);
  mbedtls_pk_free(&key);
  mbedtls_pk_free(&ca_key);
  mbedtls_ctr_drbg_free(&drbg);
  mbedtls_entropy_free(&entropy);
}

// A CRL made by OpenSSL's `ca` command (Debian's openssl; mbedTLS has no CRL writer), signed with
// `signer`'s CA key, revoking `revoke` (device certificates of `subjects`), valid from `last` to
// `next` (OpenSSL times, "YYMMDDHHMMSSZ"; "" = now and 30 days on). Written to `out`.
void make_crl(const DevPki& signer, const DevPki& subjects, std::initializer_list<const char*> revoke,
              const std::string& last, const std::string& next, const std::string& out) {
  const std::string db = signer.dir / ("crl-db-" + std::to_string(std::rand()));
  REQUIRE(fs::create_directories(db));
  write_text(db + "/index.txt", "");
  write_text(db + "/crlnumber", "01\n");
  write_text(db + "/ca.cnf", "[ca]\ndefault_ca=e\n[e]\ndatabase=" + db + "/index.txt\ncrlnumber=" + db +
                                 "/crlnumber\ndefault_md=sha256\ndefault_crl_days=30\n");
  const std::string ca =
      " -batch -config " + db + "/ca.cnf -keyfile " + (signer.dir / "ca.key") + " -cert " + signer.ca() + " ";
  for (const char* id : revoke) {
    const std::string cmd = "openssl ca" + ca + "-revoke " + subjects.device_cert(id) + " >/dev/null 2>&1";
    REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, cmd);
  }
  std::string cmd = "openssl ca" + ca + "-gencrl -out " + out;
  if (!last.empty()) cmd += " -crl_lastupdate " + last + " -crl_nextupdate " + next;
  cmd += " >/dev/null 2>&1";
  REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, cmd << " (needs Debian's openssl: platforms/deps/setup.sh)");
}

mode_t file_mode(const std::string& path) {
  struct stat st;
  REQUIRE(stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

int64_t now_unix() {
  return static_cast<int64_t>(time(nullptr));
}

}  // namespace

TEST_SUITE("credentials") {
  TEST_CASE("a device completes mutual TLS 1.3 and the server identifies it as device-0001") {
    DevPki pki;
    auto server = load_ok(TlsRole::kServer, pki.server_files());
    auto device = load_ok(TlsRole::kClient, pki.device_files("device-0001"));
    CHECK(server->role() == TlsRole::kServer);
    CHECK(device->role() == TlsRole::kClient);
    CHECK(device->server_name() == "localhost");
    CHECK(server->warnings().empty());
    CHECK(device->warnings().empty());

    Session session(*device, *server);
    REQUIRE_MESSAGE(session.link.client_ret == 0, session.link.client_failure());
    REQUIRE_MESSAGE(session.link.server_ret == 0, session.link.server_failure());
    CHECK(mbedtls_ssl_get_version_number(&session.link.server.ssl) == MBEDTLS_SSL_VERSION_TLS1_3);
    CHECK(mbedtls_ssl_get_version_number(&session.link.client.ssl) == MBEDTLS_SSL_VERSION_TLS1_3);
    CHECK(std::string(mbedtls_ssl_get_ciphersuite(&session.link.server.ssl)) == "TLS1-3-AES-128-GCM-SHA256");

    std::string id, reason;
    CHECK(server->check_peer(&session.link.server.ssl, &id, &reason) == Status::kOk);
    CHECK(id == "device-0001");
    CHECK(reason.empty());

    // Application bytes flow both ways.
    const std::string hello = "update for round 1";
    REQUIRE(mbedtls_ssl_write(&session.link.client.ssl, reinterpret_cast<const unsigned char*>(hello.data()),
                              hello.size()) == static_cast<int>(hello.size()));
    unsigned char buf[64];
    int ret = MBEDTLS_ERR_SSL_WANT_READ;
    for (int i = 0; i < 100 && in_progress(ret); ++i)
      ret = mbedtls_ssl_read(&session.link.server.ssl, buf, sizeof buf);
    REQUIRE(ret == static_cast<int>(hello.size()));
    CHECK(std::string(reinterpret_cast<char*>(buf), hello.size()) == hello);

    // check_peer is for the server only.
    CHECK(device->check_peer(&session.link.client.ssl, &id, &reason) == Status::kInvalidArgument);
  }

  TEST_CASE("the server name may be a literal IP address (an iPAddress SAN)") {
    DevPki pki;
    auto server = load_ok(TlsRole::kServer, pki.server_files());
    auto device = load_ok(TlsRole::kClient, pki.device_files("device-0002", "127.0.0.1"));
    Session session(*device, *server);
    CHECK_MESSAGE(session.link.client_ret == 0, session.link.client_failure());
    CHECK_MESSAGE(session.link.server_ret == 0, session.link.server_failure());
  }

  TEST_CASE("a device also maps to its id over TLS 1.2 (ECDHE-ECDSA, AEAD)") {
    DevPki pki;
    auto server = load_ok(TlsRole::kServer, pki.server_files());
    RawClient client(pki.ca(), pki.device_cert("device-0002"), pki.device_key("device-0002"),
                     MBEDTLS_SSL_VERSION_TLS1_2);
    Link link;
    raw_handshake(&client, *server, &link);
    REQUIRE_MESSAGE(link.client_ret == 0, link.client_failure());
    REQUIRE_MESSAGE(link.server_ret == 0, link.server_failure());
    CHECK(mbedtls_ssl_get_version_number(&link.server.ssl) == MBEDTLS_SSL_VERSION_TLS1_2);
    CHECK(std::string(mbedtls_ssl_get_ciphersuite(&link.server.ssl)) ==
          "TLS-ECDHE-ECDSA-WITH-AES-128-GCM-SHA256");
    std::string id, reason;
    CHECK(server->check_peer(&link.server.ssl, &id, &reason) == Status::kOk);
    CHECK(id == "device-0002");
  }

  TEST_CASE("a device of another CA fails the handshake: not trusted by the CA") {
    DevPki pki;
    DevPki other(1, "edgefl development CA");  // same CA name, another key
    auto server = load_ok(TlsRole::kServer, pki.server_files());
    TlsFiles files = other.device_files("device-0001");
    files.ca_file = pki.ca();  // it trusts the real server, but its certificate is from the other CA
    std::unique_ptr<TlsCredentials> device = load_ok(TlsRole::kClient, files);
    REQUIRE(device->warnings().size() == 1);  // load() notices the certificate is not from ca_file
    CHECK(contains(device->warnings()[0], "not trusted by the CA"));

    Session session(*device, *server);
    CHECK(session.link.server_ret == MBEDTLS_ERR_X509_CERT_VERIFY_FAILED);
    const std::string why = session.link.server_failure();
    CHECK_MESSAGE(contains(why, "not trusted by the CA"), why);
    CHECK((session.link.client_ret != 0 || session.link.client_sees_refusal()));
    std::string id, reason;
    CHECK(server->check_peer(&session.link.server.ssl, &id, &reason) == Status::kUnauthorized);
    CHECK(id.empty());
  }

  TEST_CASE("an expired device certificate fails the handshake: certificate expired") {
    DevPki pki;
    const std::string cert = pki.dir / "old.crt", key = pki.dir / "old.key";
    std::string error;
    REQUIRE_MESSAGE(edgefl::cli::issue_device_cert(pki.dir.path, "device-old", now_unix() - 10 * 86400,
                                                   now_unix() - 86400, cert, key, &error) == Status::kOk,
                    error);
    auto server = load_ok(TlsRole::kServer, pki.server_files());
    TlsFiles files = pki.device_files("device-0001");
    files.cert_file = cert;
    files.key_file = key;
    auto device = load_ok(TlsRole::kClient, files);  // loads, with a warning
    REQUIRE(device->warnings().size() == 1);
    CHECK_MESSAGE(contains(device->warnings()[0], "expired"), device->warnings()[0]);

    Session session(*device, *server);
    CHECK(session.link.server_ret == MBEDTLS_ERR_X509_CERT_VERIFY_FAILED);
    const std::string why = session.link.server_failure();
    CHECK_MESSAGE(contains(why, "certificate expired"), why);
    CHECK_FALSE(contains(why, "not trusted"));  // it is the CA's, only expired
    CHECK((session.link.client_ret != 0 || session.link.client_sees_refusal()));
  }

  TEST_CASE("a certificate issued for the future is not yet valid") {
    DevPki pki;
    const std::string cert = pki.dir / "future.crt", key = pki.dir / "future.key";
    std::string error;
    REQUIRE(edgefl::cli::issue_device_cert(pki.dir.path, "device-future", now_unix() + 86400,
                                           now_unix() + 2 * 86400, cert, key, &error) == Status::kOk);
    auto server = load_ok(TlsRole::kServer, pki.server_files());
    TlsFiles files = pki.device_files("device-0001");
    files.cert_file = cert;
    files.key_file = key;
    auto device = load_ok(TlsRole::kClient, files);
    Session session(*device, *server);
    CHECK(session.link.server_ret == MBEDTLS_ERR_X509_CERT_VERIFY_FAILED);
    CHECK_MESSAGE(contains(session.link.server_failure(), "not yet valid"), session.link.server_failure());
  }

  TEST_CASE("the server refuses a client without a certificate (VERIFY_REQUIRED)") {
    DevPki pki;
    auto server = load_ok(TlsRole::kServer, pki.server_files());
    RawClient client(pki.ca(), "", "");
    Link link;
    raw_handshake(&client, *server, &link);
    CHECK_MESSAGE(link.server_ret == MBEDTLS_ERR_SSL_NO_CLIENT_CERTIFICATE, link.server_failure());
    CHECK((link.client_ret != 0 || link.client_sees_refusal()));
    CHECK(mbedtls_ssl_get_peer_cert(&link.server.ssl) == nullptr);
    std::string id, reason;
    CHECK(server->check_peer(&link.server.ssl, &id, &reason) == Status::kUnauthorized);
  }

  TEST_CASE("the server certificate used as a client certificate is refused (no clientAuth EKU)") {
    DevPki pki;
    auto server = load_ok(TlsRole::kServer, pki.server_files());
    // TlsCredentials refuses to load it for a client at all ...
    TlsFiles files = pki.device_files("device-0001");
    files.cert_file = pki.server_cert();
    files.key_file = pki.server_key();
    std::string error;
    CHECK(load_error(TlsRole::kClient, files, &error) == Status::kTlsError);
    CHECK_MESSAGE(contains(error, "clientAuth"), error);
    // ... and mbedTLS's server refuses it in the handshake (mbedtls_ssl_check_cert_usage), over
    // TLS 1.3 and TLS 1.2.
    for (const mbedtls_ssl_protocol_version version :
         {MBEDTLS_SSL_VERSION_TLS1_3, MBEDTLS_SSL_VERSION_TLS1_2}) {
      CAPTURE(static_cast<int>(version));
      RawClient client(pki.ca(), pki.server_cert(), pki.server_key(), version);
      Link link;
      raw_handshake(&client, *server, &link);
      // mbedTLS 3.6 reports a usage mismatch as BAD_CERTIFICATE (the chain itself verified).
      CHECK_MESSAGE(link.server_ret == MBEDTLS_ERR_SSL_BAD_CERTIFICATE, link.server_failure());
      CHECK((mbedtls_ssl_get_verify_result(&link.server.ssl) & MBEDTLS_X509_BADCERT_EXT_KEY_USAGE) != 0);
      CHECK_MESSAGE(contains(link.server_failure(), "extended key usage"), link.server_failure());
      CHECK((link.client_ret != 0 || link.client_sees_refusal()));
    }
  }

  TEST_CASE("a client that presents the CA certificate as its own is refused for that, not for key usage") {
    // What mbedTLS leaves of a chain whose own certificate it could not parse (e.g. ECDSA-SHA1,
    // tested end to end with OpenSSL in e2e.rejections): the CA in the end-entity place.
    DevPki pki;
    auto server = load_ok(TlsRole::kServer, pki.server_files());
    for (const mbedtls_ssl_protocol_version version :
         {MBEDTLS_SSL_VERSION_TLS1_3, MBEDTLS_SSL_VERSION_TLS1_2}) {
      CAPTURE(static_cast<int>(version));
      RawClient client(pki.ca(), pki.ca(), pki.dir / "ca.key", version);
      Link link;
      raw_handshake(&client, *server, &link);
      CHECK(link.server_ret == MBEDTLS_ERR_X509_CERT_VERIFY_FAILED);
      const std::string why = link.server_failure();
      CHECK_MESSAGE(contains(why, "own certificate is missing or unreadable"), why);
      CHECK_MESSAGE(!contains(why, "key usage"), why);
      CHECK((link.client_ret != 0 || link.client_sees_refusal()));
    }
    // The flag's words stand alone: the others describe the certificate in the leaf's place.
    const std::string words =
        edgefl::tls::describe_verify_flags(0x01000000u | MBEDTLS_X509_BADCERT_KEY_USAGE);
    CHECK(contains(words, "SHA-1"));
    CHECK(!contains(words, "key usage"));
  }

  TEST_CASE("a device certificate cannot serve as the server certificate") {
    DevPki pki;
    TlsFiles files = pki.server_files();
    files.cert_file = pki.device_cert("device-0001");
    files.key_file = pki.device_key("device-0001");
    std::string error;
    CHECK(load_error(TlsRole::kServer, files, &error) == Status::kTlsError);
    CHECK_MESSAGE(contains(error, "serverAuth"), error);
  }

  TEST_CASE("a client that expects another server name refuses the server") {
    DevPki pki;
    auto server = load_ok(TlsRole::kServer, pki.server_files());
    auto device = load_ok(TlsRole::kClient, pki.device_files("device-0001", "wrong.example"));
    Session session(*device, *server);
    CHECK(session.link.client_ret == MBEDTLS_ERR_X509_CERT_VERIFY_FAILED);
    CHECK_MESSAGE(contains(session.link.client_failure(), "server name mismatch"),
                  session.link.client_failure());
    CHECK(session.link.server_ret != 0);
  }

  TEST_CASE("server_name \"\" skips the hostname check explicitly; no hostname at all fails") {
    DevPki pki;
    auto server = load_ok(TlsRole::kServer, pki.server_files());
    auto device = load_ok(TlsRole::kClient, pki.device_files("device-0001", ""));
    Session session(*device, *server);  // apply_server_name: mbedtls_ssl_set_hostname(NULL)
    CHECK_MESSAGE(session.link.client_ret == 0, session.link.client_failure());
    CHECK_MESSAGE(session.link.server_ret == 0, session.link.server_failure());

    // A session that never sets the hostname fails closed (mbedTLS >= 3.6.3).
    Link link;
    link.client.setup(device->config());
    link.server.setup(server->config());
    link.handshake();
    CHECK(link.client_ret == MBEDTLS_ERR_SSL_CERTIFICATE_VERIFICATION_WITHOUT_HOSTNAME);
  }

  TEST_CASE("a deny-listed device completes the handshake but check_peer refuses it") {
    DevPki pki;
    write_text(pki.dir / "deny.txt", "# lost devices\n\n  device-0002   # stolen 2025-01-01\r\nother-id\n");
    TlsFiles files = pki.server_files();
    files.deny_file = pki.dir / "deny.txt";
    auto server = load_ok(TlsRole::kServer, files);

    auto revoked = load_ok(TlsRole::kClient, pki.device_files("device-0002"));
    Session bad(*revoked, *server);
    REQUIRE_MESSAGE(bad.link.server_ret == 0, bad.link.server_failure());
    std::string id, reason;
    CHECK(server->check_peer(&bad.link.server.ssl, &id, &reason) == Status::kUnauthorized);
    CHECK_MESSAGE(contains(reason, "revoked"), reason);
    CHECK(reason == "device id 'device-0002' is revoked (deny list)");
    CHECK(id == "device-0002");

    auto good = load_ok(TlsRole::kClient, pki.device_files("device-0001"));
    Session ok(*good, *server);
    REQUIRE(ok.link.server_ret == 0);
    CHECK(server->check_peer(&ok.link.server.ssl, &id, &reason) == Status::kOk);
    CHECK(id == "device-0001");
  }

  TEST_CASE("check_peer refuses a verified certificate whose CN is not a valid device id") {
    DevPki pki;
    auto server = load_ok(TlsRole::kServer, pki.server_files());
    struct Case {
      const char* subject;
      const char* reason;
    };
    const Case cases[] = {{"CN=bad id,O=edgefl", "device id is not valid"},
                          {"CN=../../etc/passwd,O=edgefl", "device id is not valid"},
                          {"O=edgefl,OU=no common name", "no CN"}};
    for (const Case& c : cases) {
      CAPTURE(c.subject);
      const std::string cert = pki.dir / "odd.crt", key = pki.dir / "odd.key";
      issue_raw_client_cert(pki, c.subject, cert, key);
      TlsFiles files = pki.device_files("device-0001");
      files.cert_file = cert;
      files.key_file = key;
      auto device = load_ok(TlsRole::kClient, files);
      REQUIRE(device->warnings().size() == 1);  // load() already says the server will refuse it
      CHECK(contains(device->warnings()[0], "not a valid device id"));
      Session session(*device, *server);
      REQUIRE_MESSAGE(session.link.server_ret == 0,
                      session.link.server_failure());  // the CA's, so it verifies
      std::string id = "stale", reason;
      CHECK(server->check_peer(&session.link.server.ssl, &id, &reason) == Status::kUnauthorized);
      CHECK_MESSAGE(contains(reason, c.reason), reason);
      CHECK(id.empty());
    }
  }

  TEST_CASE("check_peer refuses a certificate without an extendedKeyUsage extension") {
    DevPki pki;
    auto server = load_ok(TlsRole::kServer, pki.server_files());
    const std::string cert = pki.dir / "noeku.crt", key = pki.dir / "noeku.key";
    issue_raw_client_cert(pki, "CN=device-0009,O=edgefl", cert, key, /*client_auth_eku=*/false);
    TlsFiles files = pki.device_files("device-0001");
    files.cert_file = cert;
    files.key_file = key;
    auto device =
        load_ok(TlsRole::kClient, files);  // no EKU: mbedtls_x509_crt_check_extended_key_usage passes
    Session session(*device, *server);
    REQUIRE_MESSAGE(session.link.server_ret == 0, session.link.server_failure());  // so does the handshake
    std::string id, reason;
    CHECK(server->check_peer(&session.link.server.ssl, &id, &reason) == Status::kUnauthorized);
    CHECK_MESSAGE(contains(reason, "clientAuth"), reason);
  }

  TEST_CASE("check_peer refuses a device certificate that is a CA certificate (basicConstraints CA:TRUE)") {
    DevPki pki;
    auto server = load_ok(TlsRole::kServer, pki.server_files());
    const std::string cert = pki.dir / "ca-device.crt", key = pki.dir / "ca-device.key";
    issue_raw_client_cert(pki, "CN=device-0007,O=edgefl", cert, key, /*client_auth_eku=*/true,
                          /*is_ca=*/true);
    TlsFiles files = pki.device_files("device-0001");
    files.cert_file = cert;
    files.key_file = key;
    auto device = load_ok(TlsRole::kClient, files);
    Session session(*device, *server);
    REQUIRE_MESSAGE(session.link.server_ret == 0, session.link.server_failure());  // it chains to the CA
    std::string id = "stale", reason;
    CHECK(server->check_peer(&session.link.server.ssl, &id, &reason) == Status::kUnauthorized);
    CHECK_MESSAGE(contains(reason, "CA:TRUE"), reason);
    CHECK(id.empty());
  }

  TEST_CASE("a CRL refuses its devices at the handshake; reload_revocation puts a new one in force") {
    DevPki pki(3);
    make_crl(pki, pki, {"device-0002"}, "", "", pki.dir / "crl.pem");
    TlsFiles files = pki.server_files();
    files.crl_file = pki.dir / "crl.pem";
    auto server = load_ok(TlsRole::kServer, files);
    auto handshake_ok = [&](const char* id) {
      auto device = load_ok(TlsRole::kClient, pki.device_files(id));
      Session session(*device, *server);
      if (session.link.server_ret != 0) {
        CHECK_MESSAGE(contains(session.link.server_failure(), "revoked"), session.link.server_failure());
      }
      return session.link.server_ret == 0;
    };
    CHECK(handshake_ok("device-0001"));
    CHECK_FALSE(handshake_ok("device-0002"));
    // A new CRL on disk changes nothing until it is reloaded.
    make_crl(pki, pki, {"device-0003"}, "", "", pki.dir / "crl.pem");
    CHECK(handshake_ok("device-0003"));
    std::string error;
    REQUIRE_MESSAGE(server->reload_revocation(&error) == Status::kOk, error);
    CHECK_FALSE(handshake_ok("device-0003"));
    CHECK(handshake_ok("device-0002"));  // the new CRL no longer lists it
    CHECK(handshake_ok("device-0001"));
  }

  TEST_CASE(
      "an expired CRL, or one signed by another key under the same CA name, is refused unless allowed") {
    DevPki pki(2);
    DevPki impostor(2);  // the same CA name, another key
    make_crl(pki, pki, {"device-0002"}, "200101000000Z", "200102000000Z", pki.dir / "expired.pem");
    make_crl(impostor, impostor, {"device-0002"}, "", "", pki.dir / "foreign.pem");
    TlsFiles files = pki.server_files();
    std::string error;
    files.crl_file = pki.dir / "expired.pem";
    CHECK(load_error(TlsRole::kServer, files, &error) != Status::kOk);
    CHECK_MESSAGE(contains(error, "expired"), error);
    CHECK(contains(error, "--allow-stale-crl"));
    files.crl_file = pki.dir / "foreign.pem";
    CHECK(load_error(TlsRole::kServer, files, &error) != Status::kOk);
    CHECK_MESSAGE(contains(error, "not signed by a CA in ca_file"), error);
    files.allow_stale_crl = true;  // the operator says otherwise: warnings
    auto server = load_ok(TlsRole::kServer, files);
    REQUIRE(!server->warnings().empty());
    CHECK(contains(server->warnings().back(), "not signed by a CA"));
  }

  TEST_CASE("reload_revocation keeps both old lists when the new CRL or deny list is bad") {
    DevPki pki(3);
    make_crl(pki, pki, {"device-0002"}, "", "", pki.dir / "crl.pem");
    write_text(pki.dir / "deny.txt", "device-0003\n");
    TlsFiles files = pki.server_files();
    files.crl_file = pki.dir / "crl.pem";
    files.deny_file = pki.dir / "deny.txt";
    auto server = load_ok(TlsRole::kServer, files);
    auto still_in_force = [&] {
      auto d2 = load_ok(TlsRole::kClient, pki.device_files("device-0002"));
      Session s2(*d2, *server);
      CHECK(s2.link.server_ret != 0);  // CRL
      auto d3 = load_ok(TlsRole::kClient, pki.device_files("device-0003"));
      Session s3(*d3, *server);
      REQUIRE(s3.link.server_ret == 0);
      std::string id, reason;
      CHECK(server->check_peer(&s3.link.server.ssl, &id, &reason) == Status::kUnauthorized);  // deny list
    };
    std::string error;
    make_crl(pki, pki, {}, "200101000000Z", "200102000000Z", pki.dir / "crl.pem");
    CHECK(server->reload_revocation(&error) != Status::kOk);
    CHECK_MESSAGE(contains(error, "expired"), error);
    still_in_force();
    write_text(pki.dir / "crl.pem", "-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n");
    CHECK(server->reload_revocation(&error) != Status::kOk);
    CHECK_MESSAGE(contains(error, "not a PEM CRL"), error);
    still_in_force();
    make_crl(pki, pki, {}, "", "", pki.dir / "crl.pem");  // a good CRL, but a bad deny list
    write_text(pki.dir / "deny.txt", "not a device id!\n");
    CHECK(server->reload_revocation(&error) != Status::kOk);
    still_in_force();
    fs::remove(pki.dir / "crl.pem");
    CHECK(server->reload_revocation(&error) != Status::kOk);
    still_in_force();
  }

  TEST_CASE("reload_deny_list swaps in the new list, and keeps the old one when the file is bad") {
    DevPki pki;
    const std::string deny = pki.dir / "deny.txt";
    write_text(deny, "# nobody yet\n");
    TlsFiles files = pki.server_files();
    files.deny_file = deny;
    auto server = load_ok(TlsRole::kServer, files);
    auto device = load_ok(TlsRole::kClient, pki.device_files("device-0001"));
    Session session(*device, *server);
    REQUIRE(session.link.server_ret == 0);
    std::string id, reason, error;
    CHECK(server->check_peer(&session.link.server.ssl, &id, &reason) == Status::kOk);

    write_text(deny, "device-0001\n");
    REQUIRE(server->reload_deny_list(&error) == Status::kOk);
    CHECK(server->check_peer(&session.link.server.ssl, &id, &reason) == Status::kUnauthorized);
    CHECK(contains(reason, "revoked"));

    write_text(deny, "device-0003\nnot a device id!\n");
    CHECK(server->reload_deny_list(&error) == Status::kTlsError);
    CHECK_MESSAGE(contains(error, "line 2"), error);
    CHECK(server->check_peer(&session.link.server.ssl, &id, &reason) == Status::kUnauthorized);  // old list

    fs::remove(deny);
    CHECK(server->reload_deny_list(&error) == Status::kIoError);
    CHECK_MESSAGE(contains(error, "No such file"), error);

    write_text(deny, "");
    REQUIRE(server->reload_deny_list(&error) == Status::kOk);
    CHECK(server->check_peer(&session.link.server.ssl, &id, &reason) == Status::kOk);

    // Readers and a reloader at once (meaningful under TSan).
    std::atomic<bool> stop{false};
    std::atomic<int> checks{0}, odd{0};
    std::thread reader([&] {  // no doctest assertions off the main thread: count instead
      std::string tid, treason;
      while (!stop.load()) {
        const Status s = server->check_peer(&session.link.server.ssl, &tid, &treason);
        if (s != Status::kOk && s != Status::kUnauthorized) odd.fetch_add(1);
        checks.fetch_add(1);
      }
    });
    for (int i = 0; i < 50; ++i) {
      write_text(deny, i % 2 == 0 ? "device-0001\n" : "\n");
      CHECK(server->reload_deny_list(&error) == Status::kOk);
    }
    stop.store(true);
    reader.join();
    CHECK(checks.load() > 0);
    CHECK(odd.load() == 0);
  }

  TEST_CASE("one credentials object serves handshakes on several threads at once") {
    DevPki pki(2);
    auto server = load_ok(TlsRole::kServer, pki.server_files());
    auto device1 = load_ok(TlsRole::kClient, pki.device_files("device-0001"));
    auto device2 = load_ok(TlsRole::kClient, pki.device_files("device-0002"));
    std::atomic<int> verified{0};
    auto run = [&](const TlsCredentials* device, const char* expected) {
      for (int i = 0; i < 3; ++i) {
        Link link;
        if (mbedtls_ssl_setup(&link.client.ssl, device->config()) != 0) return;
        if (mbedtls_ssl_setup(&link.server.ssl, server->config()) != 0) return;
        mbedtls_ssl_set_bio(&link.client.ssl, &link.client.wire, wire_send, wire_recv, nullptr);
        mbedtls_ssl_set_bio(&link.server.ssl, &link.server.wire, wire_send, wire_recv, nullptr);
        if (device->apply_server_name(&link.client.ssl) != Status::kOk) return;
        link.handshake();
        std::string id, reason;
        if (link.client_ret == 0 && link.server_ret == 0 &&
            server->check_peer(&link.server.ssl, &id, &reason) == Status::kOk && id == expected) {
          verified.fetch_add(1);
        }
      }
    };
    std::thread a(run, device1.get(), "device-0001");
    std::thread b(run, device2.get(), "device-0002");
    a.join();
    b.join();
    CHECK(verified.load() == 6);
  }

  TEST_CASE("load errors name the file and the reason") {
    DevPki pki;
    std::string error;
    SUBCASE("a key that does not match its certificate") {
      TlsFiles files = pki.device_files("device-0001");
      files.key_file = pki.device_key("device-0002");
      CHECK(load_error(TlsRole::kClient, files, &error) == Status::kTlsError);
      CHECK_MESSAGE(contains(error, "does not match"), error);
      CHECK(contains(error, "device-0002.key"));
    }
    SUBCASE("a missing file") {
      TlsFiles files = pki.server_files();
      files.ca_file = pki.dir / "nope.crt";
      CHECK(load_error(TlsRole::kServer, files, &error) == Status::kIoError);
      CHECK_MESSAGE(contains(error, "ca_file"), error);
      CHECK(contains(error, "nope.crt"));
      CHECK(contains(error, "No such file"));
    }
    SUBCASE("a required path left empty") {
      TlsFiles files = pki.server_files();
      files.key_file.clear();
      CHECK(load_error(TlsRole::kServer, files, &error) == Status::kInvalidArgument);
    }
    SUBCASE("a file that is not PEM") {
      write_text(pki.dir / "junk.pem", "this is not a certificate\n");
      TlsFiles files = pki.server_files();
      files.cert_file = pki.dir / "junk.pem";
      CHECK(load_error(TlsRole::kServer, files, &error) == Status::kTlsError);
      CHECK_MESSAGE(contains(error, "cert_file"), error);
      CHECK(contains(error, "not a PEM"));
    }
    SUBCASE("PEM of the wrong kind: a certificate where the key should be") {
      TlsFiles files = pki.server_files();
      files.key_file = pki.server_cert();
      CHECK(load_error(TlsRole::kServer, files, &error) == Status::kTlsError);
      CHECK_MESSAGE(contains(error, "key_file"), error);
      CHECK(contains(error, "not a PEM private key"));
    }
    SUBCASE("a corrupt PEM certificate") {
      std::string pem = read_text(pki.ca());
      pem[pem.size() / 2] = pem[pem.size() / 2] == 'A' ? 'B' : 'A';
      write_text(pki.dir / "bad_ca.crt", pem);
      TlsFiles files = pki.server_files();
      files.ca_file = pki.dir / "bad_ca.crt";
      CHECK(load_error(TlsRole::kServer, files, &error) == Status::kTlsError);
      CHECK_MESSAGE(contains(error, "ca_file"), error);
    }
    SUBCASE("a leaf certificate where the CA should be") {
      TlsFiles files = pki.server_files();
      files.ca_file = pki.device_cert("device-0001");
      CHECK(load_error(TlsRole::kServer, files, &error) == Status::kTlsError);
      CHECK_MESSAGE(contains(error, "not a CA certificate"), error);
    }
    SUBCASE("a CRL file that does not parse") {
      write_text(pki.dir / "bad.crl", "-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n");
      TlsFiles files = pki.server_files();
      files.crl_file = pki.dir / "bad.crl";
      CHECK(load_error(TlsRole::kServer, files, &error) == Status::kTlsError);
      CHECK_MESSAGE(contains(error, "crl_file"), error);
      CHECK(contains(error, "not a PEM CRL"));
    }
    SUBCASE("a CRL given as a certificate") {
      TlsFiles files = pki.server_files();
      files.crl_file = pki.ca();
      CHECK(load_error(TlsRole::kServer, files, &error) == Status::kTlsError);
      CHECK_MESSAGE(contains(error, "crl_file"), error);
    }
    SUBCASE("a deny list with a bad line") {
      write_text(pki.dir / "deny.txt", "device-0001\ndevice 0002\n");
      TlsFiles files = pki.server_files();
      files.deny_file = pki.dir / "deny.txt";
      CHECK(load_error(TlsRole::kServer, files, &error) == Status::kTlsError);
      CHECK_MESSAGE(contains(error, "line 2"), error);
    }
    SUBCASE("server-only files on a client") {
      TlsFiles files = pki.device_files("device-0001");
      files.crl_file = pki.ca();
      CHECK(load_error(TlsRole::kClient, files, &error) == Status::kInvalidArgument);
    }
  }

  TEST_CASE("describe_tls_failure and describe_verify_flags speak words") {
    CHECK(edgefl::tls::describe_verify_flags(0).empty());
    CHECK(edgefl::tls::describe_verify_flags(MBEDTLS_X509_BADCERT_EXPIRED) == "certificate expired");
    const std::string both =
        edgefl::tls::describe_verify_flags(MBEDTLS_X509_BADCERT_NOT_TRUSTED | MBEDTLS_X509_BADCERT_REVOKED);
    CHECK(contains(both, "not trusted by the CA"));
    CHECK(contains(both, "revoked"));
    const std::string alert = edgefl::tls::describe_tls_failure(MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE, nullptr);
    CHECK_MESSAGE(contains(alert, "-0x7780"), alert);
    CHECK(contains(alert, "peer refused"));
    CHECK(edgefl::tls::describe_tls_failure(0, nullptr) == "no error");
  }

  TEST_CASE("device ids are 1-64 characters from [A-Za-z0-9._-]") {
    using edgefl::tls::is_valid_device_id;
    CHECK(is_valid_device_id("device-0001"));
    CHECK(is_valid_device_id("a.b_c-D9"));
    CHECK(is_valid_device_id(std::string(64, 'x')));
    CHECK_FALSE(is_valid_device_id(""));
    CHECK_FALSE(is_valid_device_id(std::string(65, 'x')));
    CHECK_FALSE(is_valid_device_id("device 1"));
    CHECK_FALSE(is_valid_device_id("device/1"));
    CHECK_FALSE(is_valid_device_id("d\xc3\xa9vice"));
    CHECK(edgefl::cli::dev_pki_device_id(7) == "device-0007");
    CHECK(edgefl::cli::dev_pki_device_id(1234) == "device-1234");
  }

  TEST_CASE("write_dev_pki writes what it promises") {
    DevPki pki(3);
    for (const char* name :
         {"ca.crt", "ca.key", "server.crt", "server.key", "devices/device-0001.crt",
          "devices/device-0001.key", "devices/device-0003.crt", "devices/device-0003.key"}) {
      CHECK_MESSAGE(fs::exists(pki.dir / name), name);
    }
    CHECK_FALSE(fs::exists(pki.dir / "devices/device-0004.crt"));

    // Key files are private; certificates are not.
    CHECK(file_mode(pki.dir / "ca.key") == 0600);
    CHECK(file_mode(pki.server_key()) == 0600);
    CHECK(file_mode(pki.device_key("device-0002")) == 0600);
    CHECK(file_mode(pki.ca()) == 0644);
    CHECK(file_mode(pki.device_cert("device-0002")) == 0644);
    CHECK(contains(read_text(pki.dir / "ca.key"), "-----BEGIN EC PRIVATE KEY-----"));

    ParsedCert ca(pki.ca()), server(pki.server_cert()), device(pki.device_cert("device-0003"));
    CHECK(ca.subject() == "CN=edgefl development CA, O=edgefl");
    CHECK(mbedtls_x509_crt_get_ca_istrue(&ca.crt) == 1);
    CHECK(mbedtls_x509_crt_check_key_usage(&ca.crt,
                                           MBEDTLS_X509_KU_KEY_CERT_SIGN | MBEDTLS_X509_KU_CRL_SIGN) == 0);
    CHECK(mbedtls_x509_crt_check_key_usage(&ca.crt, MBEDTLS_X509_KU_DIGITAL_SIGNATURE) != 0);
    CHECK(ca.crt.subject_key_id.len == 20);

    for (const ParsedCert* leaf : {&server, &device}) {
      CHECK(leaf->crt.version == 3);
      CHECK(MBEDTLS_OID_CMP(MBEDTLS_OID_ECDSA_SHA256, &leaf->crt.sig_oid) == 0);
      CHECK(mbedtls_pk_get_bitlen(&leaf->crt.pk) == 256);
      CHECK(mbedtls_x509_crt_get_ca_istrue(&leaf->crt) == 0);
      CHECK(mbedtls_x509_crt_check_key_usage(&leaf->crt, MBEDTLS_X509_KU_DIGITAL_SIGNATURE) == 0);
      CHECK(mbedtls_x509_crt_check_key_usage(&leaf->crt, MBEDTLS_X509_KU_KEY_CERT_SIGN) != 0);
      // 16-byte positive serial; key identifiers: SKI of its own key, AKI = the CA's SKI.
      REQUIRE(leaf->crt.serial.len == 16);
      CHECK((leaf->crt.serial.p[0] & 0x80) == 0);
      CHECK(leaf->crt.subject_key_id.len == 20);
      REQUIRE(leaf->crt.authority_key_id.keyIdentifier.len == 20);
      CHECK(memcmp(leaf->crt.authority_key_id.keyIdentifier.p, ca.crt.subject_key_id.p, 20) == 0);
      CHECK(leaf->crt.issuer_raw.len == ca.crt.subject_raw.len);
      CHECK(memcmp(leaf->crt.issuer_raw.p, ca.crt.subject_raw.p, ca.crt.subject_raw.len) == 0);
      // Chains to the CA.
      uint32_t flags = 0;
      CHECK(mbedtls_x509_crt_verify(const_cast<mbedtls_x509_crt*>(&leaf->crt),
                                    const_cast<mbedtls_x509_crt*>(&ca.crt), nullptr, nullptr, &flags, nullptr,
                                    nullptr) == 0);
    }
    CHECK(server.subject() == "CN=localhost, O=edgefl");
    CHECK(device.subject() == "CN=device-0003, O=edgefl");
    // EKU: serverAuth only on the server, clientAuth only on devices.
    CHECK(mbedtls_x509_crt_check_extended_key_usage(&server.crt, MBEDTLS_OID_SERVER_AUTH,
                                                    MBEDTLS_OID_SIZE(MBEDTLS_OID_SERVER_AUTH)) == 0);
    CHECK(mbedtls_x509_crt_check_extended_key_usage(&server.crt, MBEDTLS_OID_CLIENT_AUTH,
                                                    MBEDTLS_OID_SIZE(MBEDTLS_OID_CLIENT_AUTH)) != 0);
    CHECK(mbedtls_x509_crt_check_extended_key_usage(&device.crt, MBEDTLS_OID_CLIENT_AUTH,
                                                    MBEDTLS_OID_SIZE(MBEDTLS_OID_CLIENT_AUTH)) == 0);
    CHECK(mbedtls_x509_crt_check_extended_key_usage(&device.crt, MBEDTLS_OID_SERVER_AUTH,
                                                    MBEDTLS_OID_SIZE(MBEDTLS_OID_SERVER_AUTH)) != 0);
    // Server SANs: dNSName localhost and iPAddress 127.0.0.1.
    bool dns = false, ip = false;
    for (const mbedtls_x509_sequence* san = &server.crt.subject_alt_names; san != nullptr; san = san->next) {
      const int type = san->buf.tag & MBEDTLS_ASN1_TAG_VALUE_MASK;
      if (type == MBEDTLS_X509_SAN_DNS_NAME &&
          std::string(reinterpret_cast<char*>(san->buf.p), san->buf.len) == "localhost")
        dns = true;
      const unsigned char loopback[4] = {127, 0, 0, 1};
      if (type == MBEDTLS_X509_SAN_IP_ADDRESS && san->buf.len == 4 && memcmp(san->buf.p, loopback, 4) == 0)
        ip = true;
    }
    CHECK(dns);
    CHECK(ip);
    // Two PKIs never share serials or keys.
    DevPki other(1);
    ParsedCert other_ca(other.ca());
    CHECK(other_ca.crt.subject_key_id.len == 20);
    CHECK(memcmp(other_ca.crt.subject_key_id.p, ca.crt.subject_key_id.p, 20) != 0);
  }

  TEST_CASE("write_dev_pki refuses to overwrite without force, and replaces everything with it") {
    DevPki pki(1);
    const std::string ca_before = read_text(pki.ca());
    DevPkiOptions o;
    o.out_dir = pki.dir.path;
    o.devices = 1;
    std::string error;
    CHECK(edgefl::cli::write_dev_pki(o, &error) == Status::kIoError);
    CHECK_MESSAGE(contains(error, "ca.key"), error);
    CHECK(contains(error, "already exists"));
    CHECK(read_text(pki.ca()) == ca_before);

    o.force = true;
    REQUIRE_MESSAGE(edgefl::cli::write_dev_pki(o, &error) == Status::kOk, error);
    CHECK(read_text(pki.ca()) != ca_before);
    CHECK(file_mode(pki.dir / "ca.key") == 0600);
    // No temporary files are left behind.
    for (const auto& entry : fs::directory_iterator(pki.dir.path)) {
      CHECK_MESSAGE(!contains(entry.path().string(), ".tmp."), entry.path().string());
    }
    // The replaced PKI works.
    auto server = load_ok(TlsRole::kServer, pki.server_files());
    auto device = load_ok(TlsRole::kClient, pki.device_files("device-0001"));
    Session session(*device, *server);
    CHECK(session.link.server_ret == 0);
  }

  TEST_CASE("write_dev_pki and issue_device_cert reject bad options") {
    TempDir dir;
    std::string error;
    DevPkiOptions o;
    o.out_dir = dir / "pki";
    o.devices = 100000;
    CHECK(edgefl::cli::write_dev_pki(o, &error) == Status::kInvalidArgument);
    o.devices = 1;
    o.valid_days = 0;
    CHECK(edgefl::cli::write_dev_pki(o, &error) == Status::kInvalidArgument);
    o.valid_days = 30;
    o.server_names = {"bad name!"};
    CHECK(edgefl::cli::write_dev_pki(o, &error) == Status::kInvalidArgument);
    CHECK_MESSAGE(contains(error, "bad name!"), error);
    o.server_names = {"edge.example.com", "::1", "10.0.0.7"};
    o.ca_name = "ACME, Inc. \"dev\" CA + more=yes";  // characters a DN string would need escaped
    REQUIRE_MESSAGE(edgefl::cli::write_dev_pki(o, &error) == Status::kOk, error);
    ParsedCert ca(dir / "pki/ca.crt");
    CHECK(contains(ca.subject(), "ACME"));

    const int64_t now = now_unix();
    const std::string out_cert = dir / "d.crt", out_key = dir / "d.key";
    CHECK(edgefl::cli::issue_device_cert(dir / "pki", "bad id", now, now + 60, out_cert, out_key, &error) ==
          Status::kInvalidArgument);
    CHECK(edgefl::cli::issue_device_cert(dir / "pki", "dev-9", now, now - 60, out_cert, out_key, &error) ==
          Status::kInvalidArgument);
    CHECK(edgefl::cli::issue_device_cert(dir / "missing", "dev-9", now, now + 60, out_cert, out_key,
                                         &error) == Status::kIoError);
    CHECK_MESSAGE(contains(error, "ca.crt"), error);
    // A CA whose subject needs escaping issues certificates that chain to it, byte for byte.
    REQUIRE_MESSAGE(edgefl::cli::issue_device_cert(dir / "pki", "dev-9", now, now + 60, out_cert, out_key,
                                                   &error) == Status::kOk,
                    error);
    CHECK(file_mode(out_key) == 0600);
    ParsedCert issued(out_cert);
    CHECK(issued.subject() == "CN=dev-9, O=edgefl");
    CHECK(issued.crt.issuer_raw.len == ca.crt.subject_raw.len);
    CHECK(memcmp(issued.crt.issuer_raw.p, ca.crt.subject_raw.p, ca.crt.subject_raw.len) == 0);
    // Not over an existing file without force; with force it is replaced.
    CHECK(edgefl::cli::issue_device_cert(dir / "pki", "dev-9", now, now + 60, out_cert, out_key, &error) ==
          Status::kIoError);
    CHECK(contains(error, "already exists"));
    CHECK(edgefl::cli::issue_device_cert(dir / "pki", "dev-9", now, now + 60, out_cert, out_key, &error,
                                         true) == Status::kOk);

    // The server of this PKI answers to the IPv6 literal and the DNS name.
    TlsFiles server_files;
    server_files.ca_file = dir / "pki/ca.crt";
    server_files.cert_file = dir / "pki/server.crt";
    server_files.key_file = dir / "pki/server.key";
    auto server = load_ok(TlsRole::kServer, server_files);
    for (const char* name : {"::1", "edge.example.com", "10.0.0.7"}) {
      CAPTURE(name);
      TlsFiles files;
      files.ca_file = dir / "pki/ca.crt";
      files.cert_file = dir / "pki/devices/device-0001.crt";
      files.key_file = dir / "pki/devices/device-0001.key";
      files.server_name = name;
      auto device = load_ok(TlsRole::kClient, files);
      Session session(*device, *server);
      CHECK_MESSAGE(session.link.client_ret == 0, session.link.client_failure());
    }
  }
}  // TEST_SUITE("credentials")

// What TLS 1.3 session resumption would save edgefl-server on a returning device, measured:
//   edgefl_net_tests -ts=tls.bench --no-skip
// A full mutual handshake (in memory, each side's CPU timed apart), and the public-key operations
// in it through PSA. Resumption with psk_dhe_ke keeps the ECDHE and drops the certificates: the
// server's signature (CertificateVerify), its check of the device's chain and of the device's
// CertificateVerify (two ECDSA verifications), and the certificates' parsing.
TEST_SUITE("tls.bench" * doctest::skip()) {
  TEST_CASE("a full mutual TLS 1.3 handshake, per side, and the public-key operations in it") {
    using Clock = std::chrono::steady_clock;
    DevPki pki(1);
    auto server = load_ok(TlsRole::kServer, pki.server_files());
    auto device = load_ok(TlsRole::kClient, pki.device_files("device-0001"));
    constexpr int kHandshakes = 200;
    std::vector<double> server_ms, client_ms;
    for (int i = 0; i < kHandshakes; ++i) {
      Link link;
      link.client.setup(device->config());
      link.server.setup(server->config());
      REQUIRE(device->apply_server_name(&link.client.ssl) == Status::kOk);
      double client_s = 0, server_s = 0;
      for (int step = 0; step < 10000 && (in_progress(link.client_ret) || in_progress(link.server_ret));
           ++step) {
        auto t0 = Clock::now();
        if (in_progress(link.client_ret)) link.client_ret = mbedtls_ssl_handshake(&link.client.ssl);
        auto t1 = Clock::now();
        if (in_progress(link.server_ret)) link.server_ret = mbedtls_ssl_handshake(&link.server.ssl);
        auto t2 = Clock::now();
        client_s += std::chrono::duration<double>(t1 - t0).count();
        server_s += std::chrono::duration<double>(t2 - t1).count();
        if (link.client_ret == MBEDTLS_ERR_SSL_WANT_READ && link.server_ret == MBEDTLS_ERR_SSL_WANT_READ &&
            link.to_client.bytes.empty() && link.to_server.bytes.empty())
          break;
      }
      REQUIRE(link.client_ret == 0);
      REQUIRE(link.server_ret == 0);
      client_ms.push_back(client_s * 1e3);
      server_ms.push_back(server_s * 1e3);
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    // The public-key operations, one at a time (median of 200).
    auto time_op = [&](const std::function<void()>& op) {
      std::vector<double> ms;
      for (int i = 0; i < 200; ++i) {
        const auto t0 = Clock::now();
        op();
        ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
      return median(ms);
    };
    psa_key_attributes_t ecdsa = PSA_KEY_ATTRIBUTES_INIT;
    psa_set_key_type(&ecdsa, PSA_KEY_TYPE_ECC_KEY_PAIR(PSA_ECC_FAMILY_SECP_R1));
    psa_set_key_bits(&ecdsa, 256);
    psa_set_key_usage_flags(&ecdsa, PSA_KEY_USAGE_SIGN_HASH | PSA_KEY_USAGE_VERIFY_HASH);
    psa_set_key_algorithm(&ecdsa, PSA_ALG_ECDSA(PSA_ALG_SHA_256));
    psa_key_id_t signer = 0;
    REQUIRE(psa_generate_key(&ecdsa, &signer) == PSA_SUCCESS);
    uint8_t hash[32] = {1, 2, 3};
    uint8_t signature[PSA_SIGNATURE_MAX_SIZE];
    size_t signature_size = 0;
    const double sign_ms = time_op([&] {
      REQUIRE(psa_sign_hash(signer, PSA_ALG_ECDSA(PSA_ALG_SHA_256), hash, sizeof hash, signature,
                            sizeof signature, &signature_size) == PSA_SUCCESS);
    });
    const double verify_ms = time_op([&] {
      REQUIRE(psa_verify_hash(signer, PSA_ALG_ECDSA(PSA_ALG_SHA_256), hash, sizeof hash, signature,
                              signature_size) == PSA_SUCCESS);
    });
    psa_key_attributes_t x25519 = PSA_KEY_ATTRIBUTES_INIT;
    psa_set_key_type(&x25519, PSA_KEY_TYPE_ECC_KEY_PAIR(PSA_ECC_FAMILY_MONTGOMERY));
    psa_set_key_bits(&x25519, 255);
    psa_set_key_usage_flags(&x25519, PSA_KEY_USAGE_DERIVE);
    psa_set_key_algorithm(&x25519, PSA_ALG_ECDH);
    psa_key_id_t peer = 0;
    REQUIRE(psa_generate_key(&x25519, &peer) == PSA_SUCCESS);
    uint8_t peer_public[32];
    size_t peer_public_size = 0;
    REQUIRE(psa_export_public_key(peer, peer_public, sizeof peer_public, &peer_public_size) == PSA_SUCCESS);
    const double ecdhe_ms = time_op([&] {  // an ephemeral key and the shared secret: one side's ECDHE
      psa_key_id_t mine = 0;
      REQUIRE(psa_generate_key(&x25519, &mine) == PSA_SUCCESS);
      uint8_t secret[32];
      size_t secret_size = 0;
      REQUIRE(psa_raw_key_agreement(PSA_ALG_ECDH, mine, peer_public, peer_public_size, secret, sizeof secret,
                                    &secret_size) == PSA_SUCCESS);
      psa_destroy_key(mine);
    });
    psa_destroy_key(signer);
    psa_destroy_key(peer);
    const double server_full = median(server_ms), client_full = median(client_ms);
    const double saved = sign_ms + 2 * verify_ms;  // at least: the parsing of the chain comes on top
    MESSAGE("tls.bench full mutual TLS 1.3 handshake, median of " << kHandshakes << ": server " << server_full
                                                                  << " ms, device " << client_full << " ms");
    MESSAGE("tls.bench ECDSA P-256 sign " << sign_ms << " ms, verify " << verify_ms << " ms; X25519 ECDHE "
                                          << ecdhe_ms << " ms (one side)");
    MESSAGE("tls.bench resumption (psk_dhe_ke) would save the server at least "
            << saved << " ms of " << server_full << " ms (" << 100 * saved / server_full << "%)");
    CHECK(saved < server_full);  // the model holds: the dropped operations are inside the handshake
  }
}
