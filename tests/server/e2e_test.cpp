// tests/server/e2e_test.cpp: edgefl-server end to end, as a separate process over loopback.
//
// Every test starts the real edgefl-server binary (EDGEFL_SERVER_BINARY) in a fresh temporary
// directory with a development PKI, waits for its port file and talks to it as devices do:
// through net::Connection (mutual TLS, whole wire messages), through edgefl::Client, or through a
// raw socket for bytes no well-behaved client sends. Updates are synthetic, so every committed
// model is checked against model_v + sum_i w_i decode(u_i) / sum_i w_i computed here (FedAvg with
// server learning rate 1, w_i = the Commit's sample_count). The server's stderr (logfmt) goes to
// one file per start; the assertions name the event (and reason) lines they expect.
//
// Suites (one ctest entry each: server.e2e.<suite>):
//   e2e.rounds      3 devices x 2 rounds, concurrently: acks, served models, FedAvg results
//   e2e.rejections  bad frames, bad or missing certificates, a revoked device, replays, late
//                   commits: each refused with its specific error while the rounds go on
//   e2e.resume      interrupted uploads resume at the offset the server holds
//   e2e.restart     SIGKILL mid-round (also right after an ack), restart: every acked update
//                   counted exactly once
//   e2e.ops         the state-directory lock, /metrics, /healthz, SIGTERM, a spec mismatch
//
// With EDGEFL_TEST_POSTGRES_DIR set (ctest server.e2e.postgresql: a private cluster,
// tests/support/postgres_cluster.sh), every server keeps its rounds and ledger in a PostgreSQL
// database of its own (--state postgresql://...), and the tests read the ledger there.
//
// EDGEFL_E2E_KEEP=1 keeps the temporary directories (server logs, state) for a look afterwards;
// EDGEFL_E2E_WRAPPER="valgrind -q" runs every server under a tool (its output lands in the log).
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dev_pki.h"
#include "edgefl/client.h"
#include "edgefl/codec.h"
#include "edgefl/model.h"
#include "edgefl/wire.h"
#include "net/tls_stream.h"
#include "postgres_storage.h"
#include "round/downlink.h"
#include "safetensors.h"
#include "secagg/crypto.h"
#include "secagg/protocol.h"
#include "secagg/wire_form.h"
#include "sqlite_storage.h"
#if EDGEFL_HAVE_POSTGRESQL
#include "support/postgres_test.h"
#endif
#include "tls/digest.h"
#include "tls/tls_credentials.h"
#include "tls/tls_session.h"

#ifndef EDGEFL_SERVER_BINARY
#error "EDGEFL_SERVER_BINARY must name the edgefl-server executable"
#endif

namespace {

using namespace edgefl;
using Clock = std::chrono::steady_clock;
using wire::UpdateDisposition;

constexpr char kModelSpec[] = "mlp:784-16-10";
constexpr uint32_t kIoMs = 10000;  // any single exchange with the server

void sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// The test process writes to sockets the server may have closed: EPIPE, never SIGPIPE.
const bool kSigpipeIgnored = [] {
  ::signal(SIGPIPE, SIG_IGN);
  return true;
}();

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// The log lines that contain every one of `needles`.
std::vector<std::string> lines_with(const std::string& text, std::initializer_list<std::string> needles) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    bool all = true;
    for (const std::string& n : needles) all = all && line.find(n) != std::string::npos;
    if (all) out.push_back(line);
  }
  return out;
}

std::string describe(const wire::Message& m) {
  std::string out = wire::message_type_name(wire::message_type(m));
  if (const auto* e = std::get_if<wire::Error>(&m)) {
    out += " code=" + std::to_string(unsigned(e->code)) + " message='" + e->message + "'";
  } else if (const auto* a = std::get_if<wire::Ack>(&m)) {
    out +=
        " disposition=" + std::to_string(unsigned(a->disposition)) + " round=" + std::to_string(a->round_id);
  } else if (const auto* r = std::get_if<wire::RetryLater>(&m)) {
    out += " reason=" + std::to_string(unsigned(r->reason)) + " after=" + std::to_string(r->retry_after_ms);
  }
  return out;
}

// --- A temporary directory, removed with its contents ---------------------------------------------

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern =
        std::string(base != nullptr && base[0] != '\0' ? base : "/tmp") + "/edgefl-e2e-XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (::mkdtemp(buffer.data()) == nullptr) FAIL("mkdtemp(" << pattern << "): " << std::strerror(errno));
    path_ = buffer.data();
  }
  ~TempDir() {
    if (path_.empty() || std::getenv("EDGEFL_E2E_KEEP") != nullptr) return;
    ::nftw(path_.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  static int remove_entry(const char* path, const struct stat*, int, struct FTW*) {
    ::remove(path);
    return 0;
  }
  std::string path_;
};

// --- The development PKI ----------------------------------------------------------------------------

struct Pki {
  std::string dir;
  std::string ca() const { return dir + "/ca.crt"; }
  std::string server_cert() const { return dir + "/server.crt"; }
  std::string server_key() const { return dir + "/server.key"; }
  std::string cert(const std::string& id) const { return dir + "/devices/" + id + ".crt"; }
  std::string key(const std::string& id) const { return dir + "/devices/" + id + ".key"; }
};

Pki make_pki(const std::string& dir, uint32_t devices, const std::string& ca_name = "edgefl e2e CA") {
  cli::DevPkiOptions o;
  o.out_dir = dir;
  o.devices = devices;
  o.ca_name = ca_name;
  std::string error;
  REQUIRE_MESSAGE(cli::write_dev_pki(o, &error) == Status::kOk, error);
  return Pki{dir};
}

std::unique_ptr<tls::TlsCredentials> client_credentials(const std::string& ca, const std::string& cert,
                                                        const std::string& key) {
  std::string error;
  REQUIRE_MESSAGE(tls::tls_global_init(&error) == Status::kOk, error);
  tls::TlsFiles files;
  files.ca_file = ca;
  files.cert_file = cert;
  files.key_file = key;
  files.server_name = "localhost";
  std::unique_ptr<tls::TlsCredentials> out;
  REQUIRE_MESSAGE(tls::TlsCredentials::load(tls::TlsRole::kClient, files, &out, &error) == Status::kOk,
                  error);
  return out;
}

std::unique_ptr<tls::TlsCredentials> device_credentials(const Pki& pki, const std::string& id) {
  return client_credentials(pki.ca(), pki.cert(id), pki.key(id));
}

// A client configuration with the CA but no certificate of its own (TlsCredentials requires one).
class NoCertificateConfig {
 public:
  explicit NoCertificateConfig(const std::string& ca_file) {
    mbedtls_ssl_config_init(&conf_);
    mbedtls_x509_crt_init(&ca_);
    mbedtls_entropy_init(&entropy_);
    mbedtls_ctr_drbg_init(&drbg_);
    std::string error;
    REQUIRE_MESSAGE(tls::tls_global_init(&error) == Status::kOk, error);
    REQUIRE(mbedtls_ctr_drbg_seed(&drbg_, mbedtls_entropy_func, &entropy_, nullptr, 0) == 0);
    const std::string pem = read_text(ca_file);
    REQUIRE(mbedtls_x509_crt_parse(&ca_, reinterpret_cast<const unsigned char*>(pem.c_str()),
                                   pem.size() + 1) == 0);
    REQUIRE(mbedtls_ssl_config_defaults(&conf_, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_TRANSPORT_STREAM,
                                        MBEDTLS_SSL_PRESET_DEFAULT) == 0);
    mbedtls_ssl_conf_authmode(&conf_, MBEDTLS_SSL_VERIFY_REQUIRED);
    mbedtls_ssl_conf_ca_chain(&conf_, &ca_, nullptr);
    mbedtls_ssl_conf_rng(&conf_, mbedtls_ctr_drbg_random, &drbg_);
  }
  ~NoCertificateConfig() {
    mbedtls_ssl_config_free(&conf_);
    mbedtls_ctr_drbg_free(&drbg_);
    mbedtls_entropy_free(&entropy_);
    mbedtls_x509_crt_free(&ca_);
  }
  NoCertificateConfig(const NoCertificateConfig&) = delete;
  NoCertificateConfig& operator=(const NoCertificateConfig&) = delete;
  const mbedtls_ssl_config* config() const { return &conf_; }

 private:
  mbedtls_ssl_config conf_;
  mbedtls_x509_crt ca_;
  mbedtls_entropy_context entropy_;
  mbedtls_ctr_drbg_context drbg_;
};

// --- The server process -----------------------------------------------------------------------------

// edgefl-server as a child process: its stderr to <dir>/<name>-<n>.log per start; SIGKILLed and
// reaped when this object goes away (and by the kernel if the test process dies: PDEATHSIG).
class ServerProcess {
 public:
  // Logs and port files go to <dir>/<name>-<n>.log, <dir>/<name>-<n>.port.
  explicit ServerProcess(const TempDir& dir, std::string name = "server")
      : dir_(dir.path()), name_(std::move(name)) {}
  ~ServerProcess() { kill_now(); }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Starts the server with `args` plus --port-file, then waits until it listens. False, with the
  // exit status and the log in *error, if it exits first or does not listen within 30 s.
  bool start(const std::vector<std::string>& args, std::string* error) {
    kill_now();
    ++starts_;
    log_path_ = file(".log");
    const std::string port_file = file(".port");
    std::vector<std::string> all = args;
    all.push_back("--port-file");
    all.push_back(port_file);
    spawn(all);
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        *error = "edgefl-server exited (" + status_text(status) + "):\n" + log();
        return false;
      }
      unsigned port = 0, metrics = 0;
      if (std::sscanf(read_text(port_file).c_str(), "%u %u", &port, &metrics) == 2 && port != 0) {
        port_ = static_cast<uint16_t>(port);
        metrics_port_ = static_cast<uint16_t>(metrics);
        return true;
      }
      sleep_ms(10);
    }
    *error = "edgefl-server did not listen within 30 s:\n" + log();
    kill_now();
    return false;
  }

  // Starts the server with `args` and waits for it to exit; its exit code (-1: still running
  // after timeout_ms, then killed; 128 + n: killed by signal n).
  int run_to_exit(const std::vector<std::string>& args, int timeout_ms) {
    kill_now();
    ++starts_;
    log_path_ = file(".log");
    spawn(args);
    return wait_exit(timeout_ms);
  }

  int wait_exit(int timeout_ms) {
    if (pid_ < 0) return last_exit_;
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (Clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        last_exit_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return last_exit_;
      }
      sleep_ms(10);
    }
    kill_now();
    return -1;
  }

  void signal(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
  }

  // SIGKILL (a crash: no chance to flush or clean up), then reap.
  void kill_now() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    last_exit_ = 128 + SIGKILL;
  }

  bool running() const { return pid_ > 0; }
  uint16_t port() const { return port_; }
  uint16_t metrics_port() const { return metrics_port_; }
  // The log of the latest start, and of every start so far.
  std::string log() const { return read_text(log_path_); }
  std::string all_logs() const {
    std::string out;
    for (int i = 1; i <= starts_; ++i)
      out += read_text(dir_ + "/" + name_ + "-" + std::to_string(i) + ".log");
    return out;
  }

  // Waits until the latest log holds at least `count` lines with every one of `needles`.
  bool wait_for_log(std::initializer_list<std::string> needles, size_t count = 1,
                    int timeout_ms = 5000) const {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      if (lines_with(log(), needles).size() >= count) return true;
      if (Clock::now() >= deadline) return false;
      sleep_ms(10);
    }
  }

 private:
  std::string file(const char* suffix) const {
    return dir_ + "/" + name_ + "-" + std::to_string(starts_) + suffix;
  }

  static std::string status_text(int status) {
    if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
    return "status " + std::to_string(status);
  }

  void spawn(const std::vector<std::string>& args) {
    std::vector<std::string> strings;
    // EDGEFL_E2E_WRAPPER="valgrind -q --error-exitcode=99" runs the server under a tool.
    if (const char* wrapper = std::getenv("EDGEFL_E2E_WRAPPER")) {
      std::istringstream words(wrapper);
      for (std::string word; words >> word;) strings.push_back(word);
    }
    strings.push_back(EDGEFL_SERVER_BINARY);
    strings.insert(strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& s : strings) argv.push_back(s.data());
    argv.push_back(nullptr);
    const std::string log_path = log_path_;
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    REQUIRE_MESSAGE(pid >= 0, "fork: " << std::strerror(errno));
    if (pid == 0) {
      // The child: only async-signal-safe calls until exec.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      ::signal(SIGPIPE, SIG_DFL);
      const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      const int null = ::open("/dev/null", O_RDWR);
      if (log < 0 || null < 0) ::_exit(127);
      ::dup2(null, 0);
      ::dup2(null, 1);
      ::dup2(log, 2);
      ::execvp(argv[0], argv.data());
      ::_exit(127);
    }
    pid_ = pid;
  }

  std::string dir_;
  std::string name_;
  pid_t pid_ = -1;
  int last_exit_ = -1;
  int starts_ = 0;
  std::string log_path_;
  uint16_t port_ = 0;
  uint16_t metrics_port_ = 0;
};

// The options every test starts from: loopback, the test model, FedAvg, quick pace steering, a
// deadline far away (tests that need one passing set their own).
std::vector<std::string> server_args(const Pki& pki, const std::string& state_dir, const std::string& codec,
                                     std::initializer_list<std::string> more) {
  std::vector<std::string> args = {"--state-dir",    state_dir,
                                   "--ca",           pki.ca(),
                                   "--cert",         pki.server_cert(),
                                   "--key",          pki.server_key(),
                                   "--listen",       "127.0.0.1:0",
                                   "--metrics",      "127.0.0.1:0",
                                   "--model",        kModelSpec,
                                   "--codec",        codec,
                                   "--optimizer",    "fedavg",
                                   "--retry-after",  "50",
                                   "--retry-window", "50",
                                   "--drain",        "200",
                                   "--deadline",     "300"};
  args.insert(args.end(), more);
#if EDGEFL_HAVE_POSTGRESQL
  if (!testing::postgres_dir().empty()) {
    args.push_back("--state");
    args.push_back(testing::postgres_url_for(state_dir));
  }
#endif
  return args;
}

// The state a server with `server_args(..., state_dir, ...)` keeps: SQLite in state_dir, or its
// PostgreSQL database in a PostgreSQL run.
std::unique_ptr<server::Storage> open_state(const std::string& state_dir) {
  std::unique_ptr<server::Storage> storage;
  std::string error;
#if EDGEFL_HAVE_POSTGRESQL
  if (!testing::postgres_dir().empty()) {
    const std::string conninfo = testing::postgres_conninfo(testing::postgres_db_for(state_dir));
    REQUIRE_MESSAGE(server::open_postgres_storage(conninfo, &storage, &error) == Status::kOk, error);
    return storage;
  }
#endif
  REQUIRE_MESSAGE(server::open_sqlite_storage(state_dir + "/state.db", &storage, &error) == Status::kOk,
                  error);
  return storage;
}

#define START_SERVER(server, args)                                        \
  do {                                                                    \
    std::string start_error_;                                             \
    REQUIRE_MESSAGE((server).start((args), &start_error_), start_error_); \
  } while (0)

// --- Models and synthetic updates -----------------------------------------------------------------

ModelSpec model_spec() {
  ModelSpec spec{};
  REQUIRE(parse_model_spec(kModelSpec, &spec) == Status::kOk);
  return spec;
}

std::string model_path(const std::string& state_dir, uint64_t version) {
  char name[64];
  std::snprintf(name, sizeof name, "/model-v%06llu.safetensors", static_cast<unsigned long long>(version));
  return state_dir + name;
}

std::vector<float> read_model(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "no model file " << path);
  const std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> params;
  std::string error;
  REQUIRE_MESSAGE(server::decode_safetensors({file.data(), file.size()}, model_spec(), &params, nullptr,
                                             &error) == Status::kOk,
                  path << ": " << error);
  return params;
}

// A deterministic update for `tag`: smooth, of both signs, about 1e-2.
std::vector<float> synthetic_delta(size_t n, uint32_t tag) {
  std::vector<float> delta(n);
  for (size_t j = 0; j < n; ++j) {
    delta[j] = 0.01f * static_cast<float>(std::sin(0.013 * double(j) * (tag % 7 + 1) + 0.7 * tag)) +
               0.001f * static_cast<float>(tag % 5);
  }
  return delta;
}

// One update as uploaded: its encoding and what the server adds for it (decode of the encoding).
struct Update {
  std::string device;
  uint64_t round_id = 0;
  std::vector<uint8_t> nonce;
  wire::UploadId upload_id{};
  std::vector<uint8_t> bytes;
  std::vector<float> decoded;
  uint32_t samples = 0;
  wire::Digest digest{};
};

// Encodes a synthetic update for `offer` with the offer's codec and seed. No doctest assertions:
// device threads call it.
Status make_update(const wire::TaskOffer& offer, const std::string& device, uint32_t tag, uint32_t samples,
                   Update* u, std::string* error) {
  const size_t n = offer.parameter_count;
  CodecSpec spec{};
  Status s = parse_codec_spec(offer.uplink_codec.c_str(), &spec);
  if (s != Status::kOk) {
    *error = "codec '" + offer.uplink_codec + "' does not parse";
    return s;
  }
  const std::vector<float> delta = synthetic_delta(n, tag);
  std::vector<uint8_t> workspace(workspace_size(spec, n));
  u->bytes.assign(encoded_bound(spec, n), 0);
  size_t written = 0;
  s = encode(spec, {delta.data(), n}, offer.codec_seed, {workspace.data(), workspace.size()},
             {u->bytes.data(), u->bytes.size()}, &written);
  if (s != Status::kOk) {
    *error = std::string("encode: ") + status_name(s);
    return s;
  }
  u->bytes.resize(written);
  EncodedInfo info;
  s = inspect({u->bytes.data(), u->bytes.size()}, &info);
  std::vector<uint8_t> decode_ws(s == Status::kOk ? decode_workspace_size(info) : 0);
  u->decoded.assign(n, 0.0f);
  if (s == Status::kOk) {
    s = decode({u->bytes.data(), u->bytes.size()}, {u->decoded.data(), n},
               {decode_ws.data(), decode_ws.size()});
  }
  if (s != Status::kOk) {
    *error = std::string("decode: ") + status_name(s);
    return s;
  }
  u->device = device;
  u->round_id = offer.round_id;
  u->nonce = offer.round_nonce;
  for (size_t i = 0; i < u->upload_id.size(); ++i) u->upload_id[i] = static_cast<uint8_t>(tag * 31u + i + 1u);
  u->samples = samples;
  const tls::Sha256Digest d = tls::sha256({u->bytes.data(), u->bytes.size()});
  std::memcpy(u->digest.data(), d.data(), d.size());
  return Status::kOk;
}

// Checks after == before + sum_i w_i u_i / sum_i w_i, each update once, within float rounding
// (1e-6 relative).
void check_fedavg(const std::vector<float>& before, const std::vector<const Update*>& updates,
                  const std::vector<float>& after) {
  REQUIRE(after.size() == before.size());
  REQUIRE(!updates.empty());
  double weights = 0;
  for (const Update* u : updates) {
    REQUIRE(u->decoded.size() == before.size());
    weights += u->samples;
  }
  size_t bad = 0, changed = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t j = 0; j < before.size(); ++j) {
    double mean = 0;
    for (const Update* u : updates) mean += double(u->samples) * double(u->decoded[j]);
    mean /= weights;
    const double expected = double(before[j]) + mean;
    const double tolerance =
        1e-6 * std::max({std::fabs(expected), std::fabs(double(before[j])), std::fabs(mean)}) + 1e-12;
    const double ratio = std::fabs(double(after[j]) - expected) / tolerance;
    if (ratio > 1) ++bad;
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = j;
    }
    if (after[j] != before[j]) ++changed;
  }
  INFO("worst coordinate " << worst << ": " << after[worst] << " (error / tolerance " << worst_ratio << ")");
  CHECK(bad == 0);
  CHECK(changed > before.size() / 2);
}

// --- Devices over net::Connection -------------------------------------------------------------------

struct Link {
  net::Connection conn;
  std::string error;
  Status connect(uint16_t port, const tls::TlsCredentials* creds) {
    return conn.connect("127.0.0.1", port, creds, kIoMs, &error);
  }
  Status send(const wire::Message& m) { return conn.send(m, kIoMs, &error); }
  Status receive(wire::Message* m, uint32_t timeout_ms = kIoMs) {
    return conn.receive(m, timeout_ms, &error);
  }
  Status exchange(const wire::Message& out, wire::Message* in) {
    const Status s = send(out);
    return s == Status::kOk ? receive(in) : s;
  }
};

wire::Hello make_hello(uint64_t held_model_version = 0, uint32_t capability_flags = 0) {
  wire::Hello h;
  h.model_version = held_model_version;
  h.capability_flags = capability_flags;
  h.sdk_version = "edgefl e2e";
  h.supported_sparsifiers = wire::kKnownSparsifierBits;
  h.supported_value_coders = wire::kKnownValueCoderBits;
  h.supported_index_codings = wire::kKnownIndexCodingBits;
  h.memory_budget_bytes = 64u << 20;
  return h;
}

// Says Hello until the server offers a task, waiting as RetryLater says (30 s at most in all).
Status await_offer(Link& link, wire::TaskOffer* offer, std::string* what, uint64_t held_model_version = 0,
                   uint32_t capability_flags = 0) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  for (;;) {
    wire::Message reply;
    const Status s = link.exchange(wire::Message{make_hello(held_model_version, capability_flags)}, &reply);
    if (s != Status::kOk) {
      *what = "hello: " + link.error;
      return s;
    }
    if (const auto* o = std::get_if<wire::TaskOffer>(&reply)) {
      *offer = *o;
      return Status::kOk;
    }
    const auto* retry = std::get_if<wire::RetryLater>(&reply);
    if (retry == nullptr) {
      *what = "hello answered with " + describe(reply);
      return Status::kProtocolError;
    }
    if (Clock::now() > deadline) {
      *what = "no task offered within 30 s";
      return Status::kTimeout;
    }
    sleep_ms(static_cast<int>(std::min<uint32_t>(retry->retry_after_ms, 200)));
  }
}

// Downloads the offered model (chunks of `chunk` bytes) and checks it against the offer's digest.
Status download_model(Link& link, const wire::TaskOffer& offer, uint32_t chunk, std::vector<uint8_t>* bytes,
                      std::string* what) {
  bytes->clear();
  while (bytes->size() < offer.model_bytes) {
    wire::ModelRequest request;
    request.round_id = offer.round_id;
    request.model_version = offer.model_version;
    request.base_model_version = offer.base_model_version;
    request.offset = bytes->size();
    request.max_length = chunk;
    wire::Message reply;
    const Status s = link.exchange(wire::Message{request}, &reply);
    if (s != Status::kOk) {
      *what = "model request: " + link.error;
      return s;
    }
    const auto* c = std::get_if<wire::ModelChunk>(&reply);
    if (c == nullptr || c->offset != bytes->size() || c->total_bytes != offer.model_bytes) {
      *what = "model request answered with " + describe(reply);
      return Status::kProtocolError;
    }
    bytes->insert(bytes->end(), c->data.begin(), c->data.end());
  }
  const tls::Sha256Digest d = tls::sha256({bytes->data(), bytes->size()});
  if (std::memcmp(d.data(), offer.model_digest.data(), d.size()) != 0) {
    *what = "the model does not match the offer's digest";
    return Status::kChecksumMismatch;
  }
  return Status::kOk;
}

// The public model after the download `stream` of `offer` (round/downlink.h), as a device
// computes it: *model holds the device's model of version `held` (or nothing) and receives the
// new one, which must match the offer's public model digest.
Status apply_download(const wire::TaskOffer& offer, uint64_t held, const std::vector<uint8_t>& stream,
                      std::vector<float>* model, std::string* what) {
  const size_t n = offer.parameter_count;
  std::vector<float> scratch(n);
  if (offer.base_model_version == 1 && held == 0) {  // the seeded initial model
    ModelSpec spec;
    REQUIRE(parse_model_spec(offer.model_spec.c_str(), &spec) == Status::kOk);
    model->assign(n, 0.0f);
    init_parameters(spec, offer.initial_model_seed, {model->data(), n});
    REQUIRE(round_to_bf16_grid({model->data(), n}) == Status::kOk);
  } else if (offer.base_model_version != 0 && offer.base_model_version != held) {
    *what = "the offer patches version " + std::to_string(offer.base_model_version);
    return Status::kProtocolError;
  }
  if (offer.base_model_version == 0) model->assign(n, 0.0f);
  std::vector<uint8_t> workspace(edgefl::download_decode_workspace({stream.data(), stream.size()}));
  uint64_t patches = 0;
  const Status s = edgefl::apply_download({stream.data(), stream.size()}, offer.base_model_version == 0,
                                          {model->data(), n}, {scratch.data(), n},
                                          {workspace.data(), workspace.size()}, &patches);
  if (s != Status::kOk) {
    *what = std::string("the download does not apply: ") + status_name(s);
    return s;
  }
  const tls::Sha256Digest d = tls::sha256_of_floats({model->data(), model->size()});
  if (std::memcmp(d.data(), offer.public_model_digest.data(), d.size()) != 0) {
    *what = "the public model does not match the offer's digest";
    return Status::kChecksumMismatch;
  }
  return Status::kOk;
}

// The public model of `version` as the server stored it (public_model.h).
std::vector<float> read_public_model(const std::string& state, uint64_t version) {
  char name[48];
  std::snprintf(name, sizeof name, "/public-v%06llu.bin", static_cast<unsigned long long>(version));
  std::ifstream in(state + name, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "no public model file " << state << name);
  const std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EncodedInfo info;
  REQUIRE(read_header({file.data(), file.size()}, &info) == Status::kOk);
  std::vector<float> model(info.n);
  REQUIRE(apply_whole_model({file.data(), file.size()}, {model.data(), model.size()}) == Status::kOk);
  return model;
}

// UploadStart, then UploadChunks of `chunk` bytes from the offset the server reports, stopping
// after `max_chunks` chunks (0: to the end). *server_offset: the UploadStatus offset; *sent: the
// update bytes sent.
Status send_upload(Link& link, const Update& u, uint32_t chunk, uint32_t max_chunks, uint64_t* server_offset,
                   uint64_t* sent, std::string* what) {
  wire::UploadStart start;
  start.round_id = u.round_id;
  start.round_nonce = u.nonce;
  start.upload_id = u.upload_id;
  start.total_bytes = u.bytes.size();
  wire::Message reply;
  Status s = link.exchange(wire::Message{start}, &reply);
  if (s != Status::kOk) {
    *what = "upload start: " + link.error;
    return s;
  }
  const auto* status = std::get_if<wire::UploadStatus>(&reply);
  if (status == nullptr || status->upload_id != u.upload_id || status->total_bytes != u.bytes.size() ||
      status->offset > u.bytes.size()) {
    *what = "upload start answered with " + describe(reply);
    return Status::kProtocolError;
  }
  uint64_t offset = status->offset;
  if (server_offset != nullptr) *server_offset = offset;
  uint32_t chunks = 0;
  while (offset < u.bytes.size() && (max_chunks == 0 || chunks < max_chunks)) {
    wire::UploadChunk c;
    c.round_id = u.round_id;
    c.upload_id = u.upload_id;
    c.offset = offset;
    c.total_bytes = u.bytes.size();
    const size_t len = static_cast<size_t>(std::min<uint64_t>(chunk, u.bytes.size() - offset));
    c.data.assign(u.bytes.begin() + static_cast<ptrdiff_t>(offset),
                  u.bytes.begin() + static_cast<ptrdiff_t>(offset + len));
    s = link.send(wire::Message{std::move(c)});
    if (s != Status::kOk) {
      *what = "upload chunk: " + link.error;
      return s;
    }
    offset += len;
    if (sent != nullptr) *sent += len;
    ++chunks;
  }
  return Status::kOk;
}

wire::Commit make_commit(const Update& u) {
  wire::Commit c;
  c.round_id = u.round_id;
  c.round_nonce = u.nonce;
  c.upload_id = u.upload_id;
  c.total_bytes = u.bytes.size();
  c.sample_count = u.samples;
  c.metrics.push_back(wire::Metric{"train_loss", 0.5});
  c.digest = u.digest;
  return c;
}

// The reply to a Commit of `u`, checked to be an Ack for it; its disposition.
UpdateDisposition commit_and_ack(Link& link, const Update& u) {
  wire::Message reply;
  REQUIRE_MESSAGE(link.exchange(wire::Message{make_commit(u)}, &reply) == Status::kOk, link.error);
  const auto* ack = std::get_if<wire::Ack>(&reply);
  REQUIRE_MESSAGE(ack != nullptr, describe(reply));
  CHECK(ack->round_id == u.round_id);
  CHECK(ack->upload_id == u.upload_id);
  return ack->disposition;
}

// Sends `m` and returns the Error the server answers with (REQUIREd to be one).
wire::Error expect_error(Link& link, const wire::Message& m) {
  wire::Message reply;
  REQUIRE_MESSAGE(link.exchange(m, &reply) == Status::kOk, link.error);
  const auto* e = std::get_if<wire::Error>(&reply);
  REQUIRE_MESSAGE(e != nullptr, describe(reply));
  return *e;
}

// One whole contribution: Hello until offered, upload, commit. REQUIREs the Ack `expected`.
Update contribute(uint16_t port, const tls::TlsCredentials& creds, const std::string& device, uint32_t tag,
                  uint32_t samples, UpdateDisposition expected = UpdateDisposition::kAccepted) {
  Link link;
  REQUIRE_MESSAGE(link.connect(port, &creds) == Status::kOk, link.error);
  wire::TaskOffer offer;
  std::string what;
  REQUIRE_MESSAGE(await_offer(link, &offer, &what) == Status::kOk, what);
  Update u;
  REQUIRE_MESSAGE(make_update(offer, device, tag, samples, &u, &what) == Status::kOk, what);
  REQUIRE_MESSAGE(send_upload(link, u, 16384, 0, nullptr, nullptr, &what) == Status::kOk, what);
  REQUIRE(commit_and_ack(link, u) == expected);
  link.conn.close();
  return u;
}

// --- A raw client: bytes no well-behaved client sends -----------------------------------------------

// A blocking TCP socket, optionally with a TlsSession on top, that writes any bytes it is given.
class RawLink {
 public:
  static constexpr int kPeerClosed = -1;
  RawLink() = default;
  ~RawLink() { close(); }
  RawLink(const RawLink&) = delete;
  RawLink& operator=(const RawLink&) = delete;

  bool connect(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return false;
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    return ::connect(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
  }

  // The TLS handshake: 0, an mbedTLS error (< 0, *error says which), or kPeerClosed.
  int handshake(const mbedtls_ssl_config* config, std::string* error) {
    tls_ = std::make_unique<tls::TlsSession>();
    if (tls_->init(config, "localhost", error) != Status::kOk) return -2;
    for (;;) {
      const int ret = tls_->handshake();
      if (!flush()) {
        *error = "the server closed the connection during the handshake";
        return kPeerClosed;
      }
      if (ret == 0) return 0;
      if (ret != tls::TlsSession::kWantRead) {
        *error = tls::describe_tls_failure(ret, tls_->ssl());
        return ret;
      }
      std::vector<uint8_t> in;
      if (!recv_raw(&in, kIoMs)) {
        *error = "the server closed the connection during the handshake";
        return kPeerClosed;
      }
      tls_->feed({in.data(), in.size()});
    }
  }

  // Sends `bytes` as they are: through TLS after a handshake, raw before.
  bool write(const std::vector<uint8_t>& bytes) {
    if (!tls_) return write_raw(bytes.data(), bytes.size());
    if (tls_->write({bytes.data(), bytes.size()}) < 0) return false;
    return flush();
  }

  bool send(const wire::Message& m) {
    std::vector<uint8_t> frame;
    if (wire::encode(m, &frame) != Status::kOk) return false;
    return write(frame);
  }

  // One message: kOk, kConnectionFailed (closed, reset, TLS alert), kTimeout, or the status of a
  // frame that does not decode.
  Status receive(wire::Message* m, int timeout_ms = static_cast<int>(kIoMs)) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    uint8_t head[wire::kFrameHeaderBytes];
    Status s = read_plain(head, sizeof head, deadline);
    if (s != Status::kOk) return s;
    wire::FrameHeader header;
    s = wire::read_frame_header({head, sizeof head}, &header);
    if (s != Status::kOk) return s;
    std::vector<uint8_t> payload(header.payload_length);
    s = read_plain(payload.data(), payload.size(), deadline);
    if (s != Status::kOk) return s;
    return wire::decode(header, {payload.data(), payload.size()}, m);
  }

  // True if the server closes the connection within timeout_ms (what it sends first is dropped).
  bool wait_closed(int timeout_ms) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      std::vector<uint8_t> in;
      if (!recv_raw(&in, static_cast<int>(left))) return !timed_out_;
    }
  }

  // Reads raw bytes until the server closes the connection; false on a timeout.
  bool read_to_end(std::string* out, int timeout_ms) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      std::vector<uint8_t> in;
      if (!recv_raw(&in, static_cast<int>(left))) return !timed_out_;
      out->append(in.begin(), in.end());
    }
  }

  // Closes with a TCP reset (SO_LINGER 0), as a device that loses power or network.
  void reset() {
    if (fd_ < 0) return;
    linger l{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close();
  }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  bool write_raw(const uint8_t* data, size_t size) {
    while (size > 0) {
      const ssize_t n = ::send(fd_, data, size, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      data += n;
      size -= static_cast<size_t>(n);
    }
    return true;
  }

  bool flush() {
    const Span<const uint8_t> out = tls_->outgoing();
    if (out.size() == 0) return true;
    if (!write_raw(out.data(), out.size())) return false;
    tls_->consume_outgoing(out.size());
    return true;
  }

  // False on end of stream, an error or the timeout (timed_out_ says which).
  bool recv_raw(std::vector<uint8_t>* out, int timeout_ms) {
    timed_out_ = false;
    pollfd p{fd_, POLLIN, 0};
    const int ready = ::poll(&p, 1, std::max(timeout_ms, 0));
    if (ready == 0) {
      timed_out_ = true;
      return false;
    }
    if (ready < 0) return false;
    uint8_t buffer[16384];
    const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
    if (n <= 0) return false;
    out->assign(buffer, buffer + n);
    return true;
  }

  Status read_plain(uint8_t* out, size_t size, Clock::time_point deadline) {
    while (plain_.size() < size) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return Status::kTimeout;
      if (tls_) {
        uint8_t buffer[16384];
        const int ret = tls_->read({buffer, sizeof buffer});
        if (!flush()) return Status::kConnectionFailed;
        if (ret > 0) {
          plain_.insert(plain_.end(), buffer, buffer + ret);
          continue;
        }
        if (ret != tls::TlsSession::kWantRead) return Status::kConnectionFailed;  // close_notify or an alert
      }
      std::vector<uint8_t> in;
      if (!recv_raw(&in, static_cast<int>(left)))
        return timed_out_ ? Status::kTimeout : Status::kConnectionFailed;
      if (tls_) {
        tls_->feed({in.data(), in.size()});
      } else {
        plain_.insert(plain_.end(), in.begin(), in.end());
      }
    }
    std::memcpy(out, plain_.data(), size);
    plain_.erase(plain_.begin(), plain_.begin() + static_cast<ptrdiff_t>(size));
    return Status::kOk;
  }

  int fd_ = -1;
  std::unique_ptr<tls::TlsSession> tls_;
  std::vector<uint8_t> plain_;
  bool timed_out_ = false;
};

// A valid Hello frame, to start bad frames from.
std::vector<uint8_t> hello_frame() {
  std::vector<uint8_t> frame;
  REQUIRE(wire::encode(wire::Message{make_hello()}, &frame) == Status::kOk);
  return frame;
}

void put_le32(std::vector<uint8_t>* frame, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) (*frame)[at + static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
}

// The frame header of `type` announcing `length` payload bytes (no payload).
std::vector<uint8_t> frame_header(wire::MessageType type, uint32_t length) {
  std::vector<uint8_t> frame = hello_frame();
  frame.resize(wire::kFrameHeaderBytes);
  frame[3] = static_cast<uint8_t>(type);
  put_le32(&frame, 4, length);
  return frame;
}

// --- HTTP ------------------------------------------------------------------------------------------

std::string http_get(uint16_t port, const std::string& path) {
  RawLink link;
  REQUIRE(link.connect(port));
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  REQUIRE(link.write(std::vector<uint8_t>(request.begin(), request.end())));
  std::string response;
  REQUIRE(link.read_to_end(&response, 5000));  // the server answers, then closes
  return response;
}

// A LocalTrainer whose "training" returns synthetic_delta(tag): the update is known exactly.
class FixedTrainer final : public LocalTrainer {
 public:
  FixedTrainer(uint32_t tag, uint32_t samples) : tag_(tag), samples_(samples) {}
  size_t memory_bytes(const RoundTask&) const override { return 0; }
  Status prepare(const RoundTask&) override { return Status::kOk; }
  Status fit(Span<const float> global, Span<float> delta, uint32_t* samples, float* loss) override {
    if (global.size() != delta.size()) return Status::kInvalidArgument;
    const std::vector<float> d = synthetic_delta(delta.size(), tag_);
    std::copy(d.begin(), d.end(), delta.data());
    *samples = samples_;
    *loss = 0.25f;
    return Status::kOk;
  }

 private:
  uint32_t tag_;
  uint32_t samples_;
};

}  // namespace

// === e2e.rounds ==================================================================================

TEST_SUITE("e2e.rounds") {
  TEST_CASE("three devices, two rounds over mutual TLS: every update accepted, the models are exact FedAvg") {
    TempDir tmp;
    const Pki pki = make_pki(tmp / "pki", 3);
    const std::string state = tmp / "state";
    ServerProcess server(tmp);
    START_SERVER(server, server_args(pki, state, "fp32",
                                     {"--cohort", "3", "--rounds", "2", "--over-selection", "1",
                                      "--downlink-codec", "q8"}));
    INFO("server log:\n" << server.all_logs());

    // One thread per device, each a plain protocol client for two rounds.
    struct DeviceRun {
      std::string id;
      uint32_t samples = 0;
      std::unique_ptr<tls::TlsCredentials> creds;
      std::vector<Update> updates;             // per round
      std::vector<std::vector<float>> models;  // the public model of each round, as the device built it
      std::vector<uint64_t> download_bases;    // TaskOffer.base_model_version of each round
      std::vector<uint64_t> model_versions;
      std::vector<UpdateDisposition> dispositions;
      std::string failure;
    };
    std::vector<DeviceRun> runs(3);
    const uint32_t samples[3] = {10, 30, 60};  // unequal weights
    for (size_t d = 0; d < runs.size(); ++d) {
      runs[d].id = cli::dev_pki_device_id(static_cast<uint32_t>(d + 1));
      runs[d].samples = samples[d];
      runs[d].creds = device_credentials(pki, runs[d].id);
    }
    const uint16_t port = server.port();
    auto device = [port](DeviceRun* run, uint32_t index) {
      std::vector<float> public_model;
      uint64_t held = 0;
      for (uint64_t round = 1; round <= 2; ++round) {
        Link link;
        if (link.connect(port, run->creds.get()) != Status::kOk) {
          run->failure = "connect: " + link.error;
          return;
        }
        wire::TaskOffer offer;
        std::vector<uint8_t> stream;
        Update u;
        std::string what;
        if (await_offer(link, &offer, &what, held) != Status::kOk ||
            download_model(link, offer, 16384, &stream, &what) != Status::kOk ||
            apply_download(offer, held, stream, &public_model, &what) != Status::kOk ||
            make_update(offer, run->id, index * 10 + static_cast<uint32_t>(round), run->samples, &u, &what) !=
                Status::kOk ||
            send_upload(link, u, 8192, 0, nullptr, nullptr, &what) != Status::kOk) {
          run->failure = "round " + std::to_string(round) + ": " + what;
          return;
        }
        if (offer.round_id != round) {
          run->failure =
              "offered round " + std::to_string(offer.round_id) + ", expected " + std::to_string(round);
          return;
        }
        wire::Message reply;
        if (link.exchange(wire::Message{make_commit(u)}, &reply) != Status::kOk) {
          run->failure = "commit: " + link.error;
          return;
        }
        const auto* ack = std::get_if<wire::Ack>(&reply);
        if (ack == nullptr || ack->upload_id != u.upload_id || ack->round_id != round) {
          run->failure = "commit answered with " + describe(reply);
          return;
        }
        run->dispositions.push_back(ack->disposition);
        run->models.push_back(public_model);
        run->download_bases.push_back(offer.base_model_version);
        held = offer.model_version;
        run->model_versions.push_back(offer.model_version);
        run->updates.push_back(std::move(u));
        link.conn.close();
      }
    };
    std::vector<std::thread> threads;
    for (size_t d = 0; d < runs.size(); ++d)
      threads.emplace_back(device, &runs[d], static_cast<uint32_t>(d + 1));
    for (std::thread& t : threads) t.join();

    for (const DeviceRun& run : runs) {
      CAPTURE(run.id);
      REQUIRE(run.failure == "");
      REQUIRE(run.dispositions.size() == 2);
      CHECK(run.dispositions[0] == UpdateDisposition::kAccepted);
      CHECK(run.dispositions[1] == UpdateDisposition::kAccepted);
      CHECK(run.model_versions == std::vector<uint64_t>{1, 2});
    }
    // --rounds 2: the server drains, then exits by itself.
    REQUIRE(server.wait_exit(20000) == 0);

    const std::vector<float> v1 = read_model(model_path(state, 1));
    const std::vector<float> v2 = read_model(model_path(state, 2));
    const std::vector<float> v3 = read_model(model_path(state, 3));
    CHECK(read_model(state + "/global.safetensors") == v3);
    // What the devices built is the server's public model of that version, bit for bit: version
    // 1 from the seed (nothing downloaded), version 2 from version 1 and one patch.
    const std::vector<float> p1 = read_public_model(state, 1), p2 = read_public_model(state, 2);
    std::vector<float> v1_bf16 = v1;
    REQUIRE(round_to_bf16_grid({v1_bf16.data(), v1_bf16.size()}) == Status::kOk);
    CHECK(p1 == v1_bf16);
    for (const DeviceRun& run : runs) {
      CHECK(run.models[0] == p1);
      CHECK(run.models[1] == p2);
      CHECK(run.download_bases == std::vector<uint64_t>{1, 1});
    }
    // The q8 patch moved the public model most of the way to the server model (the rest stays in
    // the server's residual, v2 - p2, for the next patch).
    double before = 0, after = 0;
    for (size_t i = 0; i < v2.size(); ++i) {
      before += (double(v2[i]) - p1[i]) * (double(v2[i]) - p1[i]);
      after += (double(v2[i]) - p2[i]) * (double(v2[i]) - p2[i]);
    }
    CHECK(before > 0);
    CHECK(after < 0.05 * before);
    for (size_t round = 0; round < 2; ++round) {
      CAPTURE(round + 1);
      std::vector<const Update*> updates;
      for (const DeviceRun& run : runs) updates.push_back(&run.updates[round]);
      check_fedavg(round == 0 ? v1 : v2, updates, round == 0 ? v2 : v3);
    }

    const std::string log = server.log();
    CHECK(lines_with(log, {"event=update_accepted"}).size() == 6);
    CHECK(lines_with(log, {"event=round_committed", "updates=3"}).size() == 2);
    CHECK(lines_with(log, {"event=rounds_finished", "rounds=2", "model_version=3"}).size() == 1);
    CHECK(lines_with(log, {"event=device_connected", "device=device-0002"}).size() >= 2);
    CHECK(lines_with(log, {"event=stopped", "rounds_committed=2", "updates_accepted=6"}).size() == 1);
    CHECK(lines_with(log, {"level=error"}).empty());
  }

}  // TEST_SUITE("e2e.rounds")

// === e2e.rejections ==============================================================================

TEST_SUITE("e2e.rejections") {
  TEST_CASE("bad frames and bad credentials are refused with their specific error; the rounds go on") {
    TempDir tmp;
    const Pki pki = make_pki(tmp / "pki", 3);
    const Pki other = make_pki(tmp / "other-pki", 1, "another CA");
    const std::string deny = tmp / "deny.txt";
    write_text(deny, "# revoked devices\ndevice-0003\n");
    ServerProcess server(tmp);
    START_SERVER(server, server_args(pki, tmp / "state", "fp32",
                                     {"--cohort", "1", "--over-selection", "3", "--deny", deny}));
    INFO("server log:\n" << server.all_logs());
    const uint16_t port = server.port();
    const auto good = device_credentials(pki, "device-0001");
    const auto second = device_credentials(pki, "device-0002");

    // After each refused connection, a good device completes the next round (cohort 1).
    uint64_t round = 1;
    auto good_round = [&](const std::string& after) {
      CAPTURE(after);
      const Update u = contribute(port, *good, "device-0001", static_cast<uint32_t>(round), 5);
      CHECK(u.round_id == round);
      CHECK(server.wait_for_log({"event=round_committed", "round=" + std::to_string(round) + " "}));
      ++round;
    };
    auto handshakes_failed = [&] { return lines_with(server.log(), {"event=tls_handshake_failed"}).size(); };

    SUBCASE("frames") {
      {  // A valid header, then a payload that is not a FlatBuffer: kBadMessage, then the server closes.
        RawLink raw;
        REQUIRE(raw.connect(port));
        std::string error;
        REQUIRE_MESSAGE(raw.handshake(second->config(), &error) == 0, error);
        std::vector<uint8_t> frame = hello_frame();
        for (size_t i = wire::kFrameHeaderBytes; i < frame.size(); ++i)
          frame[i] = static_cast<uint8_t>(0xA5 ^ i);
        REQUIRE(raw.write(frame));
        wire::Message reply;
        REQUIRE(raw.receive(&reply) == Status::kOk);
        const auto* e = std::get_if<wire::Error>(&reply);
        REQUIRE_MESSAGE(e != nullptr, describe(reply));
        CHECK(e->code == wire::ErrorCode::kBadMessage);
        CHECK(e->message.find("bad hello") != std::string::npos);
        CHECK(raw.wait_closed(5000));
        CHECK(server.wait_for_log({"event=connection_refused", "device=device-0002", "code=1", "bad hello"}));
      }
      good_round("a malformed frame");

      {  // A device of another protocol version (the frame header's version byte): kVersionMismatch,
         // naming the version this server speaks, and the server closes. (The frame header and the
         // Error message keep their layout in every version, so such a device can read the answer.)
        RawLink raw;
        REQUIRE(raw.connect(port));
        std::string error;
        REQUIRE_MESSAGE(raw.handshake(second->config(), &error) == 0, error);
        std::vector<uint8_t> frame = hello_frame();
        const uint32_t newer = wire::kProtocolVersion + 1;
        frame[2] = static_cast<uint8_t>(newer);
        REQUIRE(raw.write(frame));
        wire::Message reply;
        REQUIRE(raw.receive(&reply) == Status::kOk);
        const auto* e = std::get_if<wire::Error>(&reply);
        REQUIRE_MESSAGE(e != nullptr, describe(reply));
        CHECK(e->code == wire::ErrorCode::kVersionMismatch);
        CHECK(e->message == "protocol version " + std::to_string(newer) +
                                " is not spoken here: this server speaks version " +
                                std::to_string(wire::kProtocolVersion));
        CHECK(raw.wait_closed(5000));
        CHECK(server.wait_for_log({"event=connection_refused", "device=device-0002", "code=3",
                                   "protocol version " + std::to_string(newer) + " is not spoken here"}));
      }
      good_round("a frame of another protocol version");

      {  // A header announcing more than the type's cap: kTooLarge at once, the payload never read.
        RawLink raw;
        REQUIRE(raw.connect(port));
        std::string error;
        REQUIRE_MESSAGE(raw.handshake(second->config(), &error) == 0, error);
        const uint32_t cap = static_cast<uint32_t>(wire::max_payload_bytes(wire::MessageType::kHello));
        REQUIRE(raw.write(frame_header(wire::MessageType::kHello, cap + 1)));
        wire::Message reply;
        const auto t0 = Clock::now();
        REQUIRE(raw.receive(&reply, 5000) ==
                Status::kOk);  // no payload was sent: the server did not wait for it
        CHECK(Clock::now() - t0 < std::chrono::seconds(2));
        const auto* e = std::get_if<wire::Error>(&reply);
        REQUIRE_MESSAGE(e != nullptr, describe(reply));
        CHECK(e->code == wire::ErrorCode::kTooLarge);
        CHECK(raw.wait_closed(5000));
      }
      {  // The same for the largest type (UploadChunk), before Hello.
        RawLink raw;
        REQUIRE(raw.connect(port));
        std::string error;
        REQUIRE_MESSAGE(raw.handshake(second->config(), &error) == 0, error);
        REQUIRE(raw.write(frame_header(wire::MessageType::kUploadChunk,
                                       static_cast<uint32_t>(wire::kMaxPayloadBytes + 1))));
        wire::Message reply;
        REQUIRE(raw.receive(&reply, 5000) == Status::kOk);
        const auto* e = std::get_if<wire::Error>(&reply);
        REQUIRE_MESSAGE(e != nullptr, describe(reply));
        CHECK(e->code == wire::ErrorCode::kTooLarge);
        CHECK(raw.wait_closed(5000));
        CHECK(server.wait_for_log({"event=connection_refused", "code=9"}, 2));
      }
      good_round("oversize frame headers");

      {  // A server-to-client message, and a request before Hello: kUnexpectedMessage.
        Link link;
        REQUIRE_MESSAGE(link.connect(port, second.get()) == Status::kOk, link.error);
        wire::Ack ack;
        ack.round_id = 1;
        ack.upload_id[0] = 1;
        CHECK(expect_error(link, wire::Message{ack}).code == wire::ErrorCode::kUnexpectedMessage);
        Link early;
        REQUIRE_MESSAGE(early.connect(port, second.get()) == Status::kOk, early.error);
        wire::ModelRequest request;
        request.round_id = round;
        request.model_version = 1;
        request.max_length = 1024;
        const wire::Error e = expect_error(early, wire::Message{request});
        CHECK(e.code == wire::ErrorCode::kUnexpectedMessage);
        CHECK(e.message.find("Hello first") != std::string::npos);
      }
      good_round("unexpected messages");
    }

    SUBCASE("credentials") {
      {  // Bytes that are not TLS: the server closes the connection and logs the failed handshake.
        const size_t before = handshakes_failed();
        RawLink raw;
        REQUIRE(raw.connect(port));
        const std::string junk = "GET / HTTP/1.1\r\nHost: not-tls\r\n\r\n" + std::string(64, 'x');
        REQUIRE(raw.write(std::vector<uint8_t>(junk.begin(), junk.end())));
        CHECK(raw.wait_closed(5000));
        CHECK(server.wait_for_log({"event=tls_handshake_failed"}, before + 1));
        CHECK(lines_with(server.log(), {"event=tls_handshake_failed"}).back().find("invalid SSL record") !=
              std::string::npos);
      }
      good_round("garbage before the TLS handshake");

      {  // No client certificate: the server fails the handshake; the client never gets a task.
        const size_t before = handshakes_failed();
        NoCertificateConfig config(pki.ca());
        RawLink raw;
        REQUIRE(raw.connect(port));
        std::string error;
        const int ret = raw.handshake(config.config(), &error);
        if (ret == 0) {
          // TLS 1.3: the client's side completes before the server checks its (empty) certificate.
          REQUIRE(raw.send(wire::Message{make_hello()}));
          wire::Message reply;
          CHECK(raw.receive(&reply, 5000) == Status::kConnectionFailed);
        }
        CHECK(raw.wait_closed(5000));
        CHECK(server.wait_for_log({"event=tls_handshake_failed"}, before + 1));
        CHECK(lines_with(server.log(), {"event=tls_handshake_failed"}).back().find("certificate missing") !=
              std::string::npos);
      }
      good_round("a client without a certificate");

      {  // A certificate of another CA.
        const size_t before = handshakes_failed();
        const auto foreign =
            client_credentials(pki.ca(), other.cert("device-0001"), other.key("device-0001"));
        Link link;
        const Status s = link.connect(port, foreign.get());
        // TLS 1.3: the client's side of the handshake completes before the server checks the
        // client's certificate, so the refusal shows at the first exchange; TLS 1.2: at connect().
        if (s == Status::kOk) {
          wire::Message reply;
          const Status r = link.exchange(wire::Message{make_hello()}, &reply);
          CHECK(r != Status::kOk);
        } else {
          CHECK(s == Status::kTlsHandshakeFailed);
        }
        CHECK(server.wait_for_log({"event=tls_handshake_failed"}, before + 1));
        CHECK(lines_with(server.log(), {"event=tls_handshake_failed"}).back().find("not trusted by the CA") !=
              std::string::npos);
      }
      good_round("a certificate from another CA");

      {  // An expired device certificate.
        const size_t before = handshakes_failed();
        const int64_t now = static_cast<int64_t>(std::time(nullptr));
        std::string error;
        REQUIRE_MESSAGE(
            cli::issue_device_cert(pki.dir, "device-expired", now - 10 * 86400, now - 86400,
                                   tmp / "expired.crt", tmp / "expired.key", &error) == Status::kOk,
            error);
        const auto expired = client_credentials(pki.ca(), tmp / "expired.crt", tmp / "expired.key");
        Link link;
        const Status s = link.connect(port, expired.get());
        if (s == Status::kOk) {
          wire::Message reply;
          CHECK(link.exchange(wire::Message{make_hello()}, &reply) != Status::kOk);
        } else {
          CHECK(s == Status::kTlsHandshakeFailed);
        }
        CHECK(server.wait_for_log({"event=tls_handshake_failed"}, before + 1));
        CHECK(lines_with(server.log(), {"event=tls_handshake_failed"}).back().find("expired") !=
              std::string::npos);
      }
      good_round("an expired certificate");

      {  // A device certificate signed with ECDSA-SHA1 (made by Debian's openssl; mbedTLS cannot
         // parse it and skips it): refused with a reason that names its signature algorithm, over
         // TLS 1.3 and 1.2, whether the device sends the CA after it (OpenSSL's automatic chain)
         // or only its own certificate.
        const std::string ext = tmp / "sha1.ext", key = tmp / "sha1.key", csr = tmp / "sha1.csr",
                          crt = tmp / "sha1.crt";
        write_text(ext,
                   "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n");
        const std::string make = "openssl ecparam -name prime256v1 -genkey -noout -out " + key +
                                 " && openssl req -new -key " + key + " -subj /CN=device-sha1 -out " + csr +
                                 " && openssl x509 -req -in " + csr + " -CA " + pki.ca() + " -CAkey " +
                                 pki.dir + "/ca.key -CAcreateserial -days 30 -sha1 -extfile " + ext +
                                 " -out " + crt + " >/dev/null 2>&1";
        REQUIRE_MESSAGE(std::system(make.c_str()) == 0, make << " (needs Debian's openssl)");
        for (const char* version : {"-tls1_3", "-tls1_2"}) {
          for (const bool with_chain : {true, false}) {
            CAPTURE(version);
            CAPTURE(with_chain);
            const size_t before = handshakes_failed();
            const std::string connect =
                "echo | timeout 10 openssl s_client -connect 127.0.0.1:" + std::to_string(port) + " " +
                version + " -cert " + crt + " -key " + key +
                (with_chain ? " -CAfile " + pki.ca() : std::string()) +
                " -servername localhost -cipher DEFAULT:@SECLEVEL=0 >/dev/null 2>&1";
            (void)std::system(connect.c_str());  // s_client's exit status depends on its version
            REQUIRE(server.wait_for_log({"event=tls_handshake_failed"}, before + 1));
            const std::string why = lines_with(server.log(), {"event=tls_handshake_failed"}).back();
            CHECK_MESSAGE(why.find("signature algorithm") != std::string::npos, why);
            CHECK_MESSAGE(why.find("SHA-1") != std::string::npos, why);
            CHECK_MESSAGE(why.find("key usage") == std::string::npos, why);  // the old, wrong reason
          }
        }
      }
      good_round("an ECDSA-SHA1 certificate");

      {  // A revoked device (deny list): the handshake completes, then Error kUnauthorized.
        const auto revoked = device_credentials(pki, "device-0003");
        Link link;
        REQUIRE_MESSAGE(link.connect(port, revoked.get()) == Status::kOk, link.error);
        wire::Message reply;
        REQUIRE_MESSAGE(link.receive(&reply, 5000) == Status::kOk, link.error);
        const auto* e = std::get_if<wire::Error>(&reply);
        REQUIRE_MESSAGE(e != nullptr, describe(reply));
        CHECK(e->code == wire::ErrorCode::kUnauthorized);
        CHECK(e->message.find("revoked") != std::string::npos);
        CHECK(link.receive(&reply, 5000) == Status::kConnectionFailed);  // and closed
        CHECK(server.wait_for_log({"event=device_refused", "device=device-0003", "revoked"}));
      }
      good_round("a revoked device");
    }
    CHECK(round >= 4);
    CHECK(lines_with(server.log(), {"event=storage_failure"}).empty());
  }

  // edgefl::Client against a server that refuses its certificate. A revoked device completes the
  // handshake and gets Error kUnauthorized: run_round() returns kUnauthorized at once. A certificate
  // that fails verification (here: expired) is refused by the server inside the handshake; under
  // TLS 1.3 the client's side of the handshake has already completed by then, so the failure shows
  // up at the first exchange (kConnectionFailed: EPIPE, or kTlsError: the server's alert, sent under
  // handshake keys, fails the client's MAC check); run_round() reports kTlsHandshakeFailed after three.
  struct RefusedClient {
    Status status = Status::kOk;
    std::string error;
    RoundResult result;
    double seconds = 0;
  };

  RefusedClient run_refused_client(uint16_t port, const std::string& ca, const std::string& cert,
                                   const std::string& key) {
    ClientOptions o;
    o.host = "127.0.0.1";
    o.port = port;
    o.ca_file = ca;
    o.cert_file = cert;
    o.key_file = key;
    o.max_attempts = 3;
    o.backoff_initial_ms = 20;
    o.backoff_max_ms = 50;
    o.seed = 5;
    Client client(o);
    RefusedClient out;
    REQUIRE_MESSAGE(client.init(&out.error) == Status::kOk, out.error);
    FixedTrainer trainer(1, 1);
    const auto t0 = Clock::now();
    out.status = client.run_round(trainer, &out.result, &out.error);
    out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return out;
  }

  struct RefusedServer {
    TempDir tmp;
    Pki pki;
    ServerProcess server{tmp};
    RefusedServer() {
      pki = make_pki(tmp / "pki", 3);
      write_text(tmp / "deny.txt", "device-0003\n");
      const int64_t now = static_cast<int64_t>(std::time(nullptr));
      std::string error;
      REQUIRE_MESSAGE(cli::issue_device_cert(pki.dir, "device-expired", now - 10 * 86400, now - 86400,
                                             tmp / "expired.crt", tmp / "expired.key", &error) == Status::kOk,
                      error);
      START_SERVER(server,
                   server_args(pki, tmp / "state", "fp32", {"--cohort", "1", "--deny", tmp / "deny.txt"}));
    }
  };

  TEST_CASE("edgefl::Client: a revoked device gets kUnauthorized, an expired certificate never gets a task") {
    RefusedServer s;
    INFO("server log:\n" << s.server.all_logs());
    const RefusedClient revoked =
        run_refused_client(s.server.port(), s.pki.ca(), s.pki.cert("device-0003"), s.pki.key("device-0003"));
    CHECK(revoked.status == Status::kUnauthorized);
    CHECK(revoked.error.find("revoked") != std::string::npos);
    CHECK(lines_with(s.server.log(), {"event=device_refused", "device=device-0003"}).size() ==
          1);  // not retried

    const RefusedClient expired =
        run_refused_client(s.server.port(), s.pki.ca(), s.tmp / "expired.crt", s.tmp / "expired.key");
    INFO("expired: " << std::string(status_name(expired.status)) << ": " << expired.error);
    CHECK(expired.status != Status::kOk);
    const size_t refusals =
        lines_with(s.server.log(), {"event=tls_handshake_failed", "certificate expired"}).size();
    CHECK(refusals >= 1);
    CHECK(refusals <= 3);  // max_attempts
    CHECK(lines_with(s.server.log(), {"event=task_offer"}).empty());
  }

  // The contract of edgefl/client.h: an untrusted or expired certificate ends in
  // kTlsHandshakeFailed. Under TLS 1.3 the client's side of the handshake completes before the
  // server refuses the certificate, so the client tells it apart from a dropped connection by
  // three fresh connections in a row closed before Hello is answered (then it stops retrying).
  TEST_CASE("edgefl::Client with an expired certificate ends in kTlsHandshakeFailed after three refusals") {
    RefusedServer s;
    const RefusedClient expired =
        run_refused_client(s.server.port(), s.pki.ca(), s.tmp / "expired.crt", s.tmp / "expired.key");
    INFO(std::string(status_name(expired.status)) << ": " << expired.error);
    CHECK(expired.status == Status::kTlsHandshakeFailed);
    CHECK(expired.error.find("refuses this device's certificate") != std::string::npos);
    // The server may log its third refusal just after the client has seen the connection close.
    size_t refusals = 0;
    for (int i = 0; i < 100; ++i) {
      refusals = lines_with(s.server.log(), {"event=tls_handshake_failed", "certificate expired"}).size();
      if (refusals >= 3) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    CHECK(refusals == 3);
  }

  TEST_CASE("replays, stale nonces, unknown and closed rounds get the server's dispositions") {
    TempDir tmp;
    const Pki pki = make_pki(tmp / "pki", 2);
    const std::string state = tmp / "state";
    ServerProcess server(tmp);
    START_SERVER(server, server_args(pki, state, "fp32", {"--cohort", "1", "--over-selection", "3"}));
    INFO("server log:\n" << server.all_logs());
    const uint16_t port = server.port();
    const auto d1 = device_credentials(pki, "device-0001");
    const auto d2 = device_credentials(pki, "device-0002");

    // Round 1: device-0001's update is accepted, which commits round 1 (cohort 1) and opens round 2.
    const Update u1 = contribute(port, *d1, "device-0001", 1, 7);
    REQUIRE(u1.round_id == 1);

    Link a;
    REQUIRE_MESSAGE(a.connect(port, d1.get()) == Status::kOk, a.error);
    wire::TaskOffer offer2;
    std::string what;
    REQUIRE_MESSAGE(await_offer(a, &offer2, &what) == Status::kOk, what);
    REQUIRE(offer2.round_id == 2);
    REQUIRE(offer2.round_nonce != u1.nonce);

    // The accepted upload again: resuming it reports it complete, and its Commit is a duplicate.
    {
      wire::UploadStart start{u1.round_id, u1.nonce, u1.upload_id, u1.bytes.size()};
      wire::Message reply;
      REQUIRE(a.exchange(wire::Message{start}, &reply) == Status::kOk);
      const auto* status = std::get_if<wire::UploadStatus>(&reply);
      REQUIRE_MESSAGE(status != nullptr, describe(reply));
      CHECK(status->offset == u1.bytes.size());
      CHECK(a.exchange(wire::Message{make_commit(u1)}, &reply) == Status::kOk);
      const auto* ack = std::get_if<wire::Ack>(&reply);
      REQUIRE_MESSAGE(ack != nullptr, describe(reply));
      CHECK(ack->disposition == UpdateDisposition::kDuplicate);
      CHECK(server.wait_for_log({"event=update_duplicate", "round=1", "device=device-0001"}));
    }
    // Round 2 with round 1's nonce: kNonceMismatch for both UploadStart and Commit.
    Update u2;
    REQUIRE_MESSAGE(make_update(offer2, "device-0001", 2, 3, &u2, &what) == Status::kOk, what);
    {
      Update stale = u2;
      stale.nonce = u1.nonce;
      CHECK(expect_error(a, wire::Message{wire::UploadStart{stale.round_id, stale.nonce, stale.upload_id,
                                                            stale.bytes.size()}})
                .code == wire::ErrorCode::kNonceMismatch);
      CHECK(expect_error(a, wire::Message{make_commit(stale)}).code == wire::ErrorCode::kNonceMismatch);
    }
    // A Commit before the upload is complete: kOffsetMismatch; with a wrong digest: Ack kRejected.
    {
      uint64_t sent = 0;
      REQUIRE_MESSAGE(send_upload(a, u2, 4096, 2, nullptr, &sent, &what) == Status::kOk, what);
      const wire::Error e = expect_error(a, wire::Message{make_commit(u2)});
      CHECK(e.code == wire::ErrorCode::kOffsetMismatch);
      CHECK(e.message.find("incomplete") != std::string::npos);
      REQUIRE_MESSAGE(send_upload(a, u2, 4096, 0, nullptr, &sent, &what) == Status::kOk, what);  // resumes
      Update forged = u2;
      forged.digest[0] ^= 1;
      CHECK(commit_and_ack(a, forged) == UpdateDisposition::kRejected);
      CHECK(server.wait_for_log({"event=update_rejected", "device=device-0001", "reason=digest_mismatch"}));
    }
    // The rejected upload is gone; uploaded again it is accepted (round 2 commits, round 3 opens).
    {
      uint64_t offset = 99;
      REQUIRE_MESSAGE(send_upload(a, u2, 4096, 0, &offset, nullptr, &what) == Status::kOk, what);
      CHECK(offset == 0);
      CHECK(commit_and_ack(a, u2) == UpdateDisposition::kAccepted);
      // and its replay is a duplicate, in the next round as well
      CHECK(commit_and_ack(a, u2) == UpdateDisposition::kDuplicate);
      // Another update of device-0001 for round 2 (another upload id and other bytes: a device that
      // lost its state and trained again) is not taken for the counted one.
      Update other = u2;
      other.upload_id[0] ^= 0xFF;
      other.digest[0] ^= 0xFF;
      wire::Message reply;
      REQUIRE(a.exchange(wire::Message{make_commit(other)}, &reply) == Status::kOk);
      const auto* ack = std::get_if<wire::Ack>(&reply);
      REQUIRE_MESSAGE(ack != nullptr, describe(reply));
      CHECK(ack->disposition == UpdateDisposition::kRejected);
      CHECK(ack->reason == wire::RejectReason::kAlreadyCounted);
      CHECK(server.wait_for_log(
          {"event=update_rejected", "round=2", "device=device-0001", "reason=already_counted"}));
    }
    a.conn.close();

    // device-0002, which took part in neither round.
    Link b;
    REQUIRE_MESSAGE(b.connect(port, d2.get()) == Status::kOk, b.error);
    wire::TaskOffer offer3;
    REQUIRE_MESSAGE(await_offer(b, &offer3, &what) == Status::kOk, what);
    CHECK(offer3.round_id == 3);
    {
      // An upload for a closed round: kUnknownRound ("closed"); for a round that never was: "unknown".
      Update late;
      REQUIRE_MESSAGE(make_update(offer2, "device-0002", 9, 4, &late, &what) == Status::kOk, what);
      wire::Error e = expect_error(
          b, wire::Message{wire::UploadStart{2, offer2.round_nonce, late.upload_id, late.bytes.size()}});
      CHECK(e.code == wire::ErrorCode::kUnknownRound);
      CHECK(e.message.find("closed") != std::string::npos);
      e = expect_error(
          b, wire::Message{wire::UploadStart{99, offer2.round_nonce, late.upload_id, late.bytes.size()}});
      CHECK(e.code == wire::ErrorCode::kUnknownRound);
      CHECK(e.message.find("unknown") != std::string::npos);
      // A Commit for the round that closed with its quorum, before its deadline: a straggler.
      CHECK(commit_and_ack(b, late) == UpdateDisposition::kStraggler);
      CHECK(server.wait_for_log({"event=update_straggler", "round=2", "device=device-0002"}));
      // For a round that never was: kUnknownRound.
      Update unknown = late;
      unknown.round_id = 99;
      CHECK(expect_error(b, wire::Message{make_commit(unknown)}).code == wire::ErrorCode::kUnknownRound);
    }
    // The rounds went on: round 3 with device-0002.
    {
      Update u3;
      REQUIRE_MESSAGE(make_update(offer3, "device-0002", 3, 11, &u3, &what) == Status::kOk, what);
      REQUIRE_MESSAGE(send_upload(b, u3, 16384, 0, nullptr, nullptr, &what) == Status::kOk, what);
      CHECK(commit_and_ack(b, u3) == UpdateDisposition::kAccepted);
      b.conn.close();
      // Each accepted update counted once: with cohort 1 every new model is the last one plus it.
      const std::vector<float> v1 = read_model(model_path(state, 1));
      const std::vector<float> v2 = read_model(model_path(state, 2));
      const std::vector<float> v3 = read_model(model_path(state, 3));
      const std::vector<float> v4 = read_model(model_path(state, 4));
      check_fedavg(v1, {&u1}, v2);
      check_fedavg(v2, {&u2}, v3);
      check_fedavg(v3, {&u3}, v4);
    }
    const std::string log = server.log();
    CHECK(lines_with(log, {"event=update_accepted"}).size() == 3);
    CHECK(lines_with(log, {"event=update_duplicate"}).size() == 2);
    CHECK(lines_with(log, {"event=request_refused", "code=6"}).size() == 2);  // the nonce mismatches
  }

  TEST_CASE("a commit after the deadline is late, whether the round committed or was abandoned") {
    TempDir tmp;
    const Pki pki = make_pki(tmp / "pki", 3);
    ServerProcess server(tmp);
    std::vector<std::string> args = server_args(
        pki, tmp / "state", "fp32", {"--cohort", "2", "--min-quorum", "1", "--over-selection", "2"});
    args.push_back("--deadline");  // (a later --deadline wins)
    args.push_back("1");
    START_SERVER(server, args);
    INFO("server log:\n" << server.all_logs());
    const uint16_t port = server.port();
    const auto d1 = device_credentials(pki, "device-0001");
    const auto d2 = device_credentials(pki, "device-0002");
    std::string what;

    const Update u1 = contribute(port, *d1, "device-0001", 1, 2);  // 1 of 2: the round stays open
    Link b;
    REQUIRE_MESSAGE(b.connect(port, d2.get()) == Status::kOk, b.error);
    wire::TaskOffer offer;
    REQUIRE_MESSAGE(await_offer(b, &offer, &what) == Status::kOk, what);
    REQUIRE(offer.round_id == 1);
    Update u2;
    REQUIRE_MESSAGE(make_update(offer, "device-0002", 2, 2, &u2, &what) == Status::kOk, what);
    REQUIRE_MESSAGE(send_upload(b, u2, 16384, 0, nullptr, nullptr, &what) == Status::kOk, what);
    // The deadline passes: round 1 commits with its quorum of 1; round 2 gets nothing and is abandoned.
    REQUIRE(server.wait_for_log({"event=round_committed", "round=1 ", "updates=1"}, 1, 10000));
    CHECK(commit_and_ack(b, u2) == UpdateDisposition::kLate);
    CHECK(server.wait_for_log({"event=update_late", "round=1", "device=device-0002"}));
    REQUIRE(server.wait_for_log({"event=round_abandoned", "round=2 "}, 1, 10000));
    Update u3 = u2;
    u3.round_id = 2;
    CHECK(commit_and_ack(b, u3) == UpdateDisposition::kLate);
    check_fedavg(read_model(model_path(tmp / "state", 1)), {&u1}, read_model(model_path(tmp / "state", 2)));
  }

  TEST_CASE(
      "an update acknowledged in a round abandoned below its quorum is in the next model; its device takes "
      "part again once the model moves") {
    TempDir tmp;
    const Pki pki = make_pki(tmp / "pki", 3);
    ServerProcess server(tmp);
    std::vector<std::string> args = server_args(pki, tmp / "state", "fp32", {"--cohort", "2"});
    args.push_back("--deadline");  // (a later --deadline wins)
    args.push_back("2");
    START_SERVER(server, args);
    INFO("server log:\n" << server.all_logs());
    const uint16_t port = server.port();
    const auto d1 = device_credentials(pki, "device-0001");
    const auto d2 = device_credentials(pki, "device-0002");
    const Update u1 = contribute(port, *d1, "device-0001", 1, 2);  // acked; 1 of 2 by the deadline
    REQUIRE(server.wait_for_log({"event=round_abandoned", "round=1 ", "updates=1 "}, 1, 10000));
    REQUIRE(server.wait_for_log({"event=round_open", "round=2 ", "carried=1"}, 1, 10000));
    Link a;
    REQUIRE_MESSAGE(a.connect(port, d1.get()) == Status::kOk, a.error);
    wire::Message reply;
    REQUIRE_MESSAGE(a.exchange(wire::Message{make_hello(1)}, &reply) == Status::kOk, a.error);
    const auto* retry = std::get_if<wire::RetryLater>(&reply);
    REQUIRE_MESSAGE(retry != nullptr, describe(reply));
    CHECK(retry->reason == wire::RetryReason::kRoundFull);
    // With the carried update, one more makes the cohort: round 2 commits both.
    const Update u2 = contribute(port, *d2, "device-0002", 2, 3);
    REQUIRE(server.wait_for_log({"event=round_committed", "round=2 ", "updates=2 ", "carried=1"}, 1, 10000));
    check_fedavg(read_model(model_path(tmp / "state", 1)), {&u1, &u2},
                 read_model(model_path(tmp / "state", 2)));
    wire::TaskOffer offer;
    std::string what;
    REQUIRE_MESSAGE(await_offer(a, &offer, &what, 2) == Status::kOk, what);
    CHECK(offer.round_id == 3);
  }

}  // TEST_SUITE("e2e.rejections")

// === e2e.resume ==================================================================================

TEST_SUITE("e2e.resume") {
  TEST_CASE("an interrupted upload resumes at the offset the server holds") {
    TempDir tmp;
    const Pki pki = make_pki(tmp / "pki", 2);
    const std::string state = tmp / "state";
    ServerProcess server(tmp);
    START_SERVER(server, server_args(pki, state, "fp32", {"--cohort", "1", "--over-selection", "2"}));
    INFO("server log:\n" << server.all_logs());
    const uint16_t port = server.port();
    const auto d1 = device_credentials(pki, "device-0001");
    const auto d2 = device_credentials(pki, "device-0002");
    constexpr uint32_t kChunk = 4096;
    std::string what;

    // Round 1: the device closes the connection after 5 chunks, then resumes on a new one.
    Update u1;
    {
      Link first;
      REQUIRE_MESSAGE(first.connect(port, d1.get()) == Status::kOk, first.error);
      wire::TaskOffer offer;
      REQUIRE_MESSAGE(await_offer(first, &offer, &what) == Status::kOk, what);
      REQUIRE_MESSAGE(make_update(offer, "device-0001", 1, 4, &u1, &what) == Status::kOk, what);
      REQUIRE(u1.bytes.size() > 10 * kChunk);
      uint64_t offset = 99, sent = 0;
      REQUIRE_MESSAGE(send_upload(first, u1, kChunk, 5, &offset, &sent, &what) == Status::kOk, what);
      CHECK(offset == 0);
      first.conn.close();

      Link second;
      REQUIRE_MESSAGE(second.connect(port, d1.get()) == Status::kOk, second.error);
      wire::TaskOffer again;
      REQUIRE_MESSAGE(await_offer(second, &again, &what) == Status::kOk, what);
      CHECK(again.round_id == offer.round_id);
      CHECK(again.round_nonce == offer.round_nonce);
      REQUIRE_MESSAGE(send_upload(second, u1, kChunk, 0, &offset, &sent, &what) == Status::kOk, what);
      CHECK(offset == 5 * kChunk);     // every byte sent before the close
      CHECK(sent == u1.bytes.size());  // so nothing was sent twice
      CHECK(sent <= u1.bytes.size() + kChunk);
      CHECK(commit_and_ack(second, u1) == UpdateDisposition::kAccepted);
      CHECK(lines_with(server.log(), {"event=task_offer", "device=device-0001", "again=1"}).size() == 1);
    }

    // Round 2: the connection dies with a TCP reset after 7 chunks; bytes in flight may be lost, so
    // the server holds a whole number of chunks, at most 7.
    Update u2;
    {
      RawLink raw;
      REQUIRE(raw.connect(port));
      REQUIRE_MESSAGE(raw.handshake(d2->config(), &what) == 0, what);
      REQUIRE(raw.send(wire::Message{make_hello()}));
      wire::Message reply;
      REQUIRE(raw.receive(&reply) == Status::kOk);
      const auto* offer = std::get_if<wire::TaskOffer>(&reply);
      REQUIRE_MESSAGE(offer != nullptr, describe(reply));
      REQUIRE(offer->round_id == 2);
      REQUIRE_MESSAGE(make_update(*offer, "device-0002", 2, 6, &u2, &what) == Status::kOk, what);
      REQUIRE(
          raw.send(wire::Message{wire::UploadStart{u2.round_id, u2.nonce, u2.upload_id, u2.bytes.size()}}));
      REQUIRE(raw.receive(&reply) == Status::kOk);
      REQUIRE(std::get_if<wire::UploadStatus>(&reply) != nullptr);
      for (uint64_t offset = 0; offset < 7 * kChunk; offset += kChunk) {
        wire::UploadChunk c;
        c.round_id = u2.round_id;
        c.upload_id = u2.upload_id;
        c.offset = offset;
        c.total_bytes = u2.bytes.size();
        c.data.assign(u2.bytes.begin() + static_cast<ptrdiff_t>(offset),
                      u2.bytes.begin() + static_cast<ptrdiff_t>(offset + kChunk));
        REQUIRE(raw.send(wire::Message{std::move(c)}));
      }
      raw.reset();
      // Let the server finish with the dead connection first: it serves every connection on one
      // thread, and a chunk of the old one processed after the resume's UploadStatus would make the
      // offsets disagree (the kernel drops the unread bytes on a reset, so this is a safety margin).
      sleep_ms(100);

      Link b;
      REQUIRE_MESSAGE(b.connect(port, d2.get()) == Status::kOk, b.error);
      wire::TaskOffer again;
      REQUIRE_MESSAGE(await_offer(b, &again, &what) == Status::kOk, what);
      CHECK(again.round_id == 2);
      uint64_t offset = 99, sent = 0;
      REQUIRE_MESSAGE(send_upload(b, u2, kChunk, 0, &offset, &sent, &what) == Status::kOk, what);
      MESSAGE("after a reset at 7 chunks the server held " << offset << " bytes");
      CHECK(offset % kChunk == 0);
      CHECK(offset <= 7 * kChunk);
      CHECK(offset + sent == u2.bytes.size());
      CHECK(commit_and_ack(b, u2) == UpdateDisposition::kAccepted);
    }

    // Round 3: edgefl::Client, whose test hooks drop the connection after 2 model chunks (it holds
    // no model: the patches since the seeded version 1, 256 bytes a chunk) and after 3 upload chunks.
    {
      ClientOptions o;
      o.host = "127.0.0.1";
      o.port = port;
      o.server_name = "localhost";
      o.ca_file = pki.ca();
      o.cert_file = pki.cert("device-0001");
      o.key_file = pki.key("device-0001");
      o.upload_chunk_bytes = kChunk;
      o.test_disconnect_after_chunks = 3;
      o.download_chunk_bytes = 256;
      o.test_disconnect_after_model_chunks = 2;
      o.seed = 42;
      o.backoff_initial_ms = 20;
      o.backoff_max_ms = 200;
      o.connect_timeout_ms = kIoMs;
      o.io_timeout_ms = kIoMs;
      Client client(o);
      REQUIRE_MESSAGE(client.init(&what) == Status::kOk, what);
      FixedTrainer trainer(3, 9);
      RoundResult r;
      REQUIRE_MESSAGE(client.run_round(trainer, &r, &what) == Status::kOk, what);
      CHECK(r.outcome == RoundOutcome::kAccepted);
      CHECK(r.round_id == 3);
      CHECK(r.resumed_at == 3 * kChunk);
      CHECK(r.uploaded_bytes >= r.update_bytes);
      CHECK(r.uploaded_bytes <= r.update_bytes + kChunk);
      CHECK(r.download_base == 1);          // built version 1 from the seed, then two patches
      CHECK(r.download_resumed_at == 512);  // the download resumed after its second chunk
      CHECK(r.model_bytes > 512);           // every byte downloaded once (the digests matched)
      CHECK(r.model_bytes < 2 * read_model(model_path(state, 3)).size());

      Update expected;
      expected.decoded = synthetic_delta(read_model(model_path(state, 3)).size(), 3);  // fp32: exact
      expected.samples = 9;
      check_fedavg(read_model(model_path(state, 3)), {&expected}, read_model(model_path(state, 4)));
    }
    check_fedavg(read_model(model_path(state, 1)), {&u1}, read_model(model_path(state, 2)));
    check_fedavg(read_model(model_path(state, 2)), {&u2}, read_model(model_path(state, 3)));
    CHECK(lines_with(server.log(), {"event=update_accepted"}).size() == 3);
    CHECK(lines_with(server.log(), {"event=request_refused"}).empty());
  }

}  // TEST_SUITE("e2e.resume")

// === e2e.restart =================================================================================

TEST_SUITE("e2e.restart") {
  TEST_CASE("SIGKILL mid-round and right after an ack: after restarts each acked update counts once") {
    TempDir tmp;
    const Pki pki = make_pki(tmp / "pki", 5);
    const std::string state = tmp / "state";
    const std::vector<std::string> args =
        server_args(pki, state, "bf16", {"--cohort", "4", "--over-selection", "1.5"});
    ServerProcess server(tmp);
    START_SERVER(server, args);
    INFO("server logs:\n" << server.all_logs());
    std::vector<std::unique_ptr<tls::TlsCredentials>> creds;
    for (uint32_t d = 1; d <= 5; ++d) creds.push_back(device_credentials(pki, cli::dev_pki_device_id(d)));
    auto cred = [&](uint32_t d) -> const tls::TlsCredentials& { return *creds[d - 1]; };
    std::string what;
    std::vector<Update> acked;

    // First life: devices 1 and 2 are acked; device 5 is part-way through its upload.
    acked.push_back(contribute(server.port(), cred(1), "device-0001", 1, 10));
    acked.push_back(contribute(server.port(), cred(2), "device-0002", 2, 20));
    Update u5;
    wire::TaskOffer offer5;
    {
      Link l;
      REQUIRE_MESSAGE(l.connect(server.port(), &cred(5)) == Status::kOk, l.error);
      REQUIRE_MESSAGE(await_offer(l, &offer5, &what) == Status::kOk, what);
      REQUIRE_MESSAGE(make_update(offer5, "device-0005", 5, 50, &u5, &what) == Status::kOk, what);
      REQUIRE_MESSAGE(send_upload(l, u5, 4096, 3, nullptr, nullptr, &what) == Status::kOk, what);
      server.kill_now();  // mid-round, mid-upload
    }
    CHECK(lines_with(server.log(), {"event=update_accepted"}).size() == 2);

    // Second life: the round is rebuilt from the two acked updates.
    START_SERVER(server, args);
    CHECK(server.wait_for_log({"event=round_recovered", "round=1", "updates=2"}));
    {
      // Device 1 again: no new task this round; its acked upload is complete and a duplicate.
      Link l;
      REQUIRE_MESSAGE(l.connect(server.port(), &cred(1)) == Status::kOk, l.error);
      wire::Message reply;
      REQUIRE(l.exchange(wire::Message{make_hello()}, &reply) == Status::kOk);
      const auto* retry = std::get_if<wire::RetryLater>(&reply);
      REQUIRE_MESSAGE(retry != nullptr, describe(reply));
      CHECK(retry->reason == wire::RetryReason::kRoundFull);
      const Update& u1 = acked[0];
      REQUIRE(
          l.exchange(wire::Message{wire::UploadStart{u1.round_id, u1.nonce, u1.upload_id, u1.bytes.size()}},
                     &reply) == Status::kOk);
      const auto* status = std::get_if<wire::UploadStatus>(&reply);
      REQUIRE_MESSAGE(status != nullptr, describe(reply));
      CHECK(status->offset == u1.bytes.size());
      CHECK(commit_and_ack(l, u1) == UpdateDisposition::kDuplicate);
    }
    {
      // Device 3 is acked, and the server dies the moment the ack arrives.
      Link l;
      REQUIRE_MESSAGE(l.connect(server.port(), &cred(3)) == Status::kOk, l.error);
      wire::TaskOffer offer3;
      REQUIRE_MESSAGE(await_offer(l, &offer3, &what) == Status::kOk, what);
      CHECK(offer3.round_id == 1);
      CHECK(offer3.round_nonce == offer5.round_nonce);  // the same round, recovered
      Update u3;
      REQUIRE_MESSAGE(make_update(offer3, "device-0003", 3, 30, &u3, &what) == Status::kOk, what);
      REQUIRE_MESSAGE(send_upload(l, u3, 8192, 0, nullptr, nullptr, &what) == Status::kOk, what);
      wire::Message reply;
      REQUIRE_MESSAGE(l.exchange(wire::Message{make_commit(u3)}, &reply) == Status::kOk, l.error);
      server.kill_now();
      const auto* ack = std::get_if<wire::Ack>(&reply);
      REQUIRE_MESSAGE(ack != nullptr, describe(reply));
      REQUIRE(ack->disposition == UpdateDisposition::kAccepted);
      acked.push_back(u3);
    }

    // Third life: three acked updates.
    START_SERVER(server, args);
    CHECK(server.wait_for_log({"event=round_recovered", "round=1", "updates=3"}));
    {
      Link l;
      REQUIRE_MESSAGE(l.connect(server.port(), &cred(2)) == Status::kOk, l.error);
      wire::Message reply;
      REQUIRE(l.exchange(wire::Message{make_hello()}, &reply) == Status::kOk);
      CHECK(commit_and_ack(l, acked[1]) == UpdateDisposition::kDuplicate);
      Link l3;
      REQUIRE_MESSAGE(l3.connect(server.port(), &cred(3)) == Status::kOk, l3.error);
      REQUIRE(l3.exchange(wire::Message{make_hello()}, &reply) == Status::kOk);
      CHECK(commit_and_ack(l3, acked[2]) == UpdateDisposition::kDuplicate);
    }
    {
      // Device 5's partial upload died with the first server (uploads in progress are not
      // durable): it starts over at 0, in the same round, and completes the cohort.
      Link l;
      REQUIRE_MESSAGE(l.connect(server.port(), &cred(5)) == Status::kOk, l.error);
      wire::TaskOffer again;
      REQUIRE_MESSAGE(await_offer(l, &again, &what) == Status::kOk, what);
      CHECK(again.round_id == 1);
      CHECK(again.round_nonce == offer5.round_nonce);
      uint64_t offset = 99;
      REQUIRE_MESSAGE(send_upload(l, u5, 4096, 0, &offset, nullptr, &what) == Status::kOk, what);
      CHECK(offset == 0);
      CHECK(commit_and_ack(l, u5) == UpdateDisposition::kAccepted);
      acked.push_back(u5);
    }
    REQUIRE(server.wait_for_log({"event=round_committed", "round=1 ", "updates=4"}));
    std::vector<const Update*> counted;
    for (const Update& u : acked) counted.push_back(&u);
    check_fedavg(read_model(model_path(state, 1)), counted, read_model(model_path(state, 2)));
    CHECK(read_model(state + "/global.safetensors") == read_model(model_path(state, 2)));

    const std::string logs = server.all_logs();
    CHECK(lines_with(logs, {"event=update_accepted"}).size() == 4);
    CHECK(lines_with(logs, {"event=update_duplicate"}).size() == 3);
    CHECK(lines_with(logs, {"event=round_committed"}).size() == 1);
    CHECK(lines_with(logs, {"event=storage_failure"}).empty());
  }

}  // TEST_SUITE("e2e.restart")

// === e2e.ops =====================================================================================

TEST_SUITE("e2e.ops") {
  TEST_CASE("one server per state directory; /metrics and /healthz; SIGTERM stops it cleanly") {
    TempDir tmp;
    const Pki pki = make_pki(tmp / "pki", 2);
    const std::string state = tmp / "state";
    const std::vector<std::string> args =
        server_args(pki, state, "fp32", {"--cohort", "2", "--over-selection", "1"});
    ServerProcess server(tmp);
    ServerProcess second(tmp, "second");
    START_SERVER(server, args);
    INFO("server log:\n" << server.all_logs() << "\nsecond server's log:\n" << second.all_logs());
    const auto d1 = device_credentials(pki, "device-0001");
    const auto d2 = device_credentials(pki, "device-0002");
    contribute(server.port(), *d1, "device-0001", 1, 3);

    // A second server on the same state directory refuses to start.
    CHECK(second.run_to_exit(args, 15000) == 2);
    CHECK(lines_with(second.log(), {"event=state_dir_locked"}).size() == 1);

    std::string metrics = http_get(server.metrics_port(), "/metrics");
    CHECK(metrics.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
    CHECK(metrics.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
    CHECK(metrics.find("# TYPE edgefl_updates_accepted_total counter\n") != std::string::npos);
    CHECK(metrics.find("\nedgefl_updates_accepted_total 1\n") != std::string::npos);
    CHECK(metrics.find("\nedgefl_round_id 1\n") != std::string::npos);
    CHECK(metrics.find("\nedgefl_tls_handshakes_total 1\n") != std::string::npos);
    const std::string health = http_get(server.metrics_port(), "/healthz");
    CHECK(health.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
    CHECK(health.find("\r\n\r\nok round=1 model_version=1\n") != std::string::npos);
    CHECK(http_get(server.metrics_port(), "/nothing").rfind("HTTP/1.1 404", 0) == 0);

    // The first server was not disturbed: the round completes.
    contribute(server.port(), *d2, "device-0002", 2, 5);
    REQUIRE(server.wait_for_log({"event=round_committed", "round=1 "}));
    metrics = http_get(server.metrics_port(), "/metrics");
    CHECK(metrics.find("\nedgefl_updates_accepted_total 2\n") != std::string::npos);
    CHECK(metrics.find("\nedgefl_rounds_committed_total 1\n") != std::string::npos);
    CHECK(metrics.find("\nedgefl_model_version 2\n") != std::string::npos);

    server.signal(SIGTERM);
    CHECK(server.wait_exit(10000) == 0);
    CHECK(lines_with(server.log(), {"event=stopped", "updates_accepted=2"}).size() == 1);

    // Another model on this state directory is refused; the same one resumes at model version 2.
    std::vector<std::string> other_model = args;
    other_model.push_back("--model");
    other_model.push_back("mlp:784-32-10");
    CHECK(second.run_to_exit(other_model, 15000) == 2);
    CHECK(lines_with(second.log(), {"event=start_failed", "another --state-dir"}).size() == 1);
    START_SERVER(second, args);
    CHECK(http_get(second.metrics_port(), "/healthz").find("ok round=2 model_version=2\n") !=
          std::string::npos);
  }

}  // TEST_SUITE("e2e.ops")

// === e2e.rounds (the memory budget) ==============================================================

TEST_SUITE("e2e.rounds") {
  TEST_CASE("edgefl::Client refuses a round that does not fit its memory budget, before training") {
    TempDir tmp;
    const Pki pki = make_pki(tmp / "pki", 1);
    ServerProcess server(tmp);
    START_SERVER(server, server_args(pki, tmp / "state", "fp32", {"--cohort", "1"}));
    INFO("server log:\n" << server.all_logs());
    ClientOptions o;
    o.host = "127.0.0.1";
    o.port = server.port();
    o.ca_file = pki.ca();
    o.cert_file = pki.cert("device-0001");
    o.key_file = pki.dir + "/devices/device-0001.key";
    o.error_feedback = false;
    // mlp:784-16-10 has 12730 parameters: model, delta and an fp32 update take 3 x 50.9 kB.
    o.memory_budget_bytes = 100 * 1000;
    std::string error;
    {
      Client client(o);
      REQUIRE_MESSAGE(client.init(&error) == Status::kOk, error);
      FixedTrainer trainer(1, 10);
      RoundResult result;
      CHECK(client.run_round(trainer, &result, &error) == Status::kMemoryBudgetExceeded);
      CHECK(error.find("above the memory budget") != std::string::npos);
      CHECK(error.find("model 50.9 kB + download ") != std::string::npos);
      CHECK(error.find(" + delta 50.9 kB") != std::string::npos);
      CHECK(result.memory.total() > o.memory_budget_bytes);
      CHECK(result.model_bytes == 0);  // refused before the download
    }
    CHECK(lines_with(server.log(), {"event=update_accepted"}).empty());
    // With room for the plan, the same device completes the round.
    o.memory_budget_bytes = 400 * 1000;
    Client client(o);
    REQUIRE_MESSAGE(client.init(&error) == Status::kOk, error);
    FixedTrainer trainer(1, 10);
    RoundResult result;
    REQUIRE_MESSAGE(client.run_round(trainer, &result, &error) == Status::kOk, error);
    CHECK(result.outcome == RoundOutcome::kAccepted);
    CHECK(result.memory.total() <= o.memory_budget_bytes);
  }
}  // TEST_SUITE("e2e.rounds")

// === e2e.faults ==================================================================================
// Overload and transient conditions must cost nothing but themselves: devices at the cap are
// told when to come back, no device gives up on a transient condition, and memory stays bounded.

namespace {

// A free loopback port (bound, then released): for servers that must come back on the same port.
uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
  socklen_t size = sizeof address;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) == 0);
  ::close(fd);
  return ntohs(address.sin_port);
}

// Server arguments (server_args) that listen on `port` instead of an ephemeral one.
void listen_on(std::vector<std::string>* args, uint16_t port) {
  for (size_t i = 0; i + 1 < args->size(); ++i) {
    if ((*args)[i] == "--listen") (*args)[i + 1] = "127.0.0.1:" + std::to_string(port);
  }
}

ClientOptions persistent_client(const Pki& pki, const std::string& id, uint16_t port, uint64_t seed) {
  ClientOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.ca_file = pki.ca();
  o.cert_file = pki.cert(id);
  o.key_file = pki.key(id);
  o.backoff_initial_ms = 20;
  o.backoff_max_ms = 300;
  o.max_attempts = 5;
  o.io_timeout_ms = 5000;
  o.connect_timeout_ms = 2000;
  o.give_up_after_ms = 60000;  // the test's own bound
  o.seed = seed;
  return o;
}

// A LocalTrainer that takes its time (the first `slow_fits` fits; all when negative): a device
// still training when the round moves on.
class SlowTrainer final : public LocalTrainer {
 public:
  SlowTrainer(uint32_t tag, int ms, int slow_fits = -1) : inner_(tag, 10), ms_(ms), slow_fits_(slow_fits) {}
  size_t memory_bytes(const RoundTask& t) const override { return inner_.memory_bytes(t); }
  Status prepare(const RoundTask& t) override { return inner_.prepare(t); }
  Status fit(Span<const float> global, Span<float> delta, uint32_t* samples, float* loss) override {
    if (slow_fits_ != 0) sleep_ms(ms_);
    if (slow_fits_ > 0) --slow_fits_;
    return inner_.fit(global, delta, samples, loss);
  }

 private:
  FixedTrainer inner_;
  int ms_;
  int slow_fits_;
};

uint64_t ledger_rows(const std::string& state) {
  std::unique_ptr<server::Storage> storage = open_state(state);
  std::string error;
  uint64_t last = 0, rows = 0;
  REQUIRE(storage->last_round_id(&last, &error) == Status::kOk);
  for (uint64_t r = 1; r <= last; ++r) {
    uint64_t n = 0;
    REQUIRE(storage->count_updates(r, &n, &error) == Status::kOk);
    rows += n;
  }
  return rows;
}

// Devices running edgefl::Client::participate() until stop(); device d (ids device-0001...)
// talks to port_of(d), trains with a SlowTrainer, and sends its exact synthetic update (fp32).
struct Participants {
  std::atomic<uint64_t> acked{0};  // accepted, or duplicate after a lost ack
  std::vector<Status> statuses;
  std::vector<std::string> errors;
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::thread> threads;

  Participants(const Pki& pki, int devices, const std::function<uint16_t(int)>& port_of)
      : statuses(size_t(devices), Status::kOk), errors(size_t(devices)) {
    for (int d = 0; d < devices; ++d) {
      ClientOptions o = persistent_client(pki, cli::dev_pki_device_id(uint32_t(d + 1)), port_of(d), 100 + d);
      o.give_up_after_ms = 0;    // only cancel() ends them
      o.error_feedback = false;  // fp32 is exact: each update is synthetic_delta(device) itself
      clients.push_back(std::make_unique<Client>(o));
      std::string error;
      REQUIRE_MESSAGE(clients.back()->init(&error) == Status::kOk, error);
    }
    for (int d = 0; d < devices; ++d) {
      threads.emplace_back([this, d] {
        SlowTrainer trainer(uint32_t(d + 1), 50 + 30 * d);
        statuses[size_t(d)] = clients[size_t(d)]->participate(
            trainer, 0,
            [this](const RoundResult& r) {
              if (r.outcome == RoundOutcome::kAccepted || r.outcome == RoundOutcome::kDuplicate) ++acked;
            },
            &errors[size_t(d)]);
      });
    }
  }
  ~Participants() { stop(); }
  Participants(const Participants&) = delete;
  Participants& operator=(const Participants&) = delete;

  // Cancels every device and waits for it.
  void stop() {
    for (auto& c : clients) c->cancel();
    for (auto& t : threads) {
      if (t.joinable()) t.join();
    }
  }
  // After stop(): no device ended on its own.
  void check_none_gave_up() const {
    for (size_t d = 0; d < statuses.size(); ++d) {
      CAPTURE(d);
      CHECK_MESSAGE(statuses[d] == Status::kCancelled, errors[d]);
    }
  }
};

// Checks each committed round of the state `state`: model_of(its version) is model_of(the
// version before) plus the FedAvg of the round's ledger and of the ledgers of the rounds
// abandoned since the last commit (the Participants' synthetic updates). Returns the number of
// committed rounds checked.
uint64_t check_models_against_ledgers(const std::string& state,
                                      const std::function<std::vector<float>(uint64_t)>& model_of) {
  std::unique_ptr<server::Storage> storage = open_state(state);
  std::string error;
  uint64_t last = 0, committed = 0;
  REQUIRE(storage->last_round_id(&last, &error) == Status::kOk);
  const size_t n = parameter_count(model_spec());
  std::vector<Update> carried;  // the ledgers of the rounds abandoned since the last commit
  for (uint64_t r = 1; r <= last; ++r) {
    std::optional<server::RoundRecord> round;
    REQUIRE(storage->get_round(r, &round, &error) == Status::kOk);
    if (!round || round->state == server::RoundState::kOpen) continue;
    CAPTURE(r);
    std::vector<Update> updates;
    REQUIRE(storage->for_each_update(
                r,
                [&](const server::UpdateRecord& u) {
                  Update x;
                  x.device = u.device_id;
                  x.samples = u.sample_count;
                  x.decoded = synthetic_delta(n, uint32_t(std::stoul(u.device_id.substr(7))));
                  updates.push_back(std::move(x));
                  return Status::kOk;
                },
                &error) == Status::kOk);
    if (round->state == server::RoundState::kAbandoned) {
      carried.insert(carried.end(), updates.begin(), updates.end());
      continue;
    }
    if (!carried.empty())
      MESSAGE("round " << r << " counts " << carried.size() << " updates of abandoned rounds");
    updates.insert(updates.begin(), carried.begin(), carried.end());
    carried.clear();
    REQUIRE(!updates.empty());
    std::vector<const Update*> counted;
    for (const Update& u : updates) counted.push_back(&u);
    check_fedavg(model_of(round->result_model_version - 1), counted, model_of(round->result_model_version));
    ++committed;
  }
  return committed;
}

// The crash test, extended: devices run edgefl::Client::participate() while something crashes at
// random moments: the server (kServer: SIGKILL, restarted on the same port) or, in a PostgreSQL
// run, the database server (kDatabase: an immediate shutdown, started again while edgefl-server
// keeps running). No device may give up, every acknowledged update is in the ledger exactly once,
// and each committed model is the FedAvg of its round's ledger (checked by the rebuilt aggregate
// on restart and by the server's own start-up consistency checks). EDGEFL_CRASH_SECONDS sets the
// length (default 20 s in CI; tests/server/crash_soak.sh runs it longer for releases).
enum class Crash { kServer, kDatabase };

void crash_test(Crash what) {
  const char* env = std::getenv("EDGEFL_CRASH_SECONDS");
  const int seconds = env ? std::max(5, std::atoi(env)) : 20;
  constexpr int kDevices = 6;
  TempDir tmp;
  const Pki pki = make_pki(tmp / "pki", kDevices);
  const std::string state = tmp / "state";
  const uint16_t port = free_port();
  std::vector<std::string> args = server_args(pki, state, "fp32",
                                              {"--cohort", "3", "--over-selection", "1.4", "--deadline", "4",
                                               "--min-quorum", "2", "--max-connections", "4"});
  listen_on(&args, port);
  ServerProcess server(tmp);
  START_SERVER(server, args);
  INFO("server logs:\n" << server.all_logs());
  Participants devices(pki, kDevices, [&](int) { return port; });
  uint64_t seed = 0x5EEDull;
  int kills = 0;
  const auto end = Clock::now() + std::chrono::seconds(seconds);
  while (Clock::now() < end) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    sleep_ms(int(300 + (seed >> 33) % 1500));
    ++kills;
    if (what == Crash::kServer) {
      server.kill_now();
      sleep_ms(int((seed >> 20) % 300));
      START_SERVER(server, args);
    } else {
#if EDGEFL_HAVE_POSTGRESQL
      testing::postgres_cluster("kill");  // immediate: no checkpoint, connections cut
      sleep_ms(int((seed >> 20) % 1500));
      testing::postgres_cluster("resume");
#endif
    }
  }
  // A last life long enough for the devices to finish what they had acked in flight.
  sleep_ms(2000);
  devices.stop();
  server.signal(SIGTERM);
  CHECK(server.wait_exit(10000) == 0);
  devices.check_none_gave_up();
  const uint64_t acked = devices.acked;
  const std::string logs = server.all_logs();
  MESSAGE(kills << " kills; " << acked << " acks seen by devices; "
                << lines_with(logs, {"event=round_committed"}).size() << " rounds committed");
  CHECK(kills >= 3);
  CHECK(acked > 0);
  // Acks a device saw (accepted, or duplicate after a lost ack) = rows in the ledger: exactly
  // once each. A device may have had an ack in flight when it was cancelled (counted in the
  // ledger, never seen): at most one per device.
  const uint64_t rows = ledger_rows(state);
  CHECK(rows >= acked);
  CHECK(rows <= acked + kDevices);
  CHECK(lines_with(logs, {"event=start_failed"}).empty());
  if (what == Crash::kServer) {
    CHECK(lines_with(logs, {"event=storage_failure"}).empty());
    // Every restart found its models intact (digests checked at start).
    CHECK(lines_with(logs, {"event=model_loaded"}).size() >= size_t(kills));
  } else {
    // The server lived through every outage: one start, storage failures answered as retryable.
    CHECK(lines_with(logs, {"event=listening"}).size() == 1);
    MESSAGE(lines_with(logs, {"event=storage_failure"}).size()
            << " storage failures logged; " << lines_with(logs, {"event=round_close_failed"}).size()
            << " closes retried");
  }
  // Each committed model is its predecessor plus the FedAvg of its round's ledger and of the
  // ledgers of the rounds abandoned since the last commit, once.
  const uint64_t committed =
      check_models_against_ledgers(state, [&](uint64_t v) { return read_model(model_path(state, v)); });
  MESSAGE(committed << " committed models checked against their ledgers");
  CHECK(committed >= 2);
}

}  // namespace

TEST_SUITE("e2e.faults") {
  // A phone waiting out a backoff or a silent server must not wake its CPU every few milliseconds:
  // the device's thread sleeps through the wait (counted by the kernel's voluntary context
  // switches), and cancel() still ends it at once.
  TEST_CASE("a long backoff and a read the server never answers sleep without polling; cancel() ends them") {
    TempDir tmp;
    const Pki pki = make_pki(tmp / "pki", 1);
    // A listener that never accepts: the kernel completes the TCP handshake from its backlog, and
    // the device's TLS ClientHello is never answered.
    const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(listener >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(listener, 4) == 0);
    socklen_t len = sizeof addr;
    REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    const uint16_t silent_port = ntohs(addr.sin_port);
    // A port nobody listens on: every connection is refused and the device backs off.
    const int closed = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in closed_addr{};
    closed_addr.sin_family = AF_INET;
    closed_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(closed, reinterpret_cast<sockaddr*>(&closed_addr), sizeof closed_addr) == 0);
    len = sizeof closed_addr;
    REQUIRE(::getsockname(closed, reinterpret_cast<sockaddr*>(&closed_addr), &len) == 0);
    const uint16_t refusing_port = ntohs(closed_addr.sin_port);

    for (const uint16_t port : {silent_port, refusing_port}) {
      CAPTURE(port == silent_port ? "a read the server never answers" : "a backoff after refusals");
      ClientOptions o = persistent_client(pki, "device-0001", port, 7);
      o.io_timeout_ms = 600000;  // the waits would last minutes: only cancel() can end them soon
      o.connect_timeout_ms = 600000;
      o.backoff_initial_ms = 600000;
      o.backoff_max_ms = 600000;
      o.give_up_after_ms = 0;
      Client client(o);
      std::string error;
      REQUIRE_MESSAGE(client.init(&error) == Status::kOk, error);
      std::atomic<bool> ended{false};
      std::atomic<long> tid{0};
      Status status = Status::kOk;
      std::thread device([&] {
        tid = static_cast<long>(::gettid());
        FixedTrainer trainer(1, 10);
        status = client.participate(
            trainer, 1, [](const RoundResult&) {}, &error);
        ended = true;
      });
      // The thread's voluntary context switches so far (each wake-up from a wait is one).
      auto switches = [&] {
        std::ifstream in("/proc/self/task/" + std::to_string(tid.load()) + "/status");
        std::string line;
        while (std::getline(in, line)) {
          if (line.rfind("voluntary_ctxt_switches:", 0) == 0) return std::stol(line.substr(24));
        }
        return -1L;
      };
      for (int i = 0; i < 500 && tid.load() == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // into the wait
      const long before = switches();
      std::this_thread::sleep_for(std::chrono::milliseconds(1000));
      const long after = switches();
      REQUIRE(before >= 0);
      CHECK_FALSE(ended.load());
      const long wakeups = after - before;
      CHECK_MESSAGE(wakeups <= 2, wakeups, " wake-ups in one second of waiting");
      const auto cancelled_at = std::chrono::steady_clock::now();
      client.cancel();
      device.join();
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - cancelled_at).count();
      CHECK_MESSAGE(status == Status::kCancelled, status_name(status), ": ", error);
      CHECK_MESSAGE(ms < 1000, "cancel took ", ms, " ms");
    }
    ::close(listener);
    ::close(closed);
  }

  TEST_CASE("at the connection cap a device is answered RetryLater(ServerBusy) in protocol, then gets in") {
    TempDir tmp;
    const Pki pki = make_pki(tmp / "pki", 3);
    ServerProcess server(tmp);
    START_SERVER(server,
                 server_args(pki, tmp / "state", "fp32", {"--cohort", "1", "--max-connections", "2"}));
    INFO("server log:\n" << server.all_logs());
    auto c1 = device_credentials(pki, "device-0001");
    auto c2 = device_credentials(pki, "device-0002");
    auto c3 = device_credentials(pki, "device-0003");
    Link a, b;
    REQUIRE_MESSAGE(a.connect(server.port(), c1.get()) == Status::kOk, a.error);
    REQUIRE_MESSAGE(b.connect(server.port(), c2.get()) == Status::kOk, b.error);
    {
      Link c;  // the third: handshake, then the answer, unasked
      REQUIRE_MESSAGE(c.connect(server.port(), c3.get()) == Status::kOk, c.error);
      wire::Message reply;
      REQUIRE_MESSAGE(c.exchange(wire::Message{make_hello()}, &reply) == Status::kOk, c.error);
      const auto* retry = std::get_if<wire::RetryLater>(&reply);
      REQUIRE_MESSAGE(retry != nullptr, describe(reply));
      CHECK(retry->reason == wire::RetryReason::kServerBusy);
      CHECK(retry->retry_after_ms + retry->retry_window_ms > 0);
    }
    CHECK(server.wait_for_log({"event=connection_limit"}, 1, 200) == false);  // nothing was reset
    // edgefl::Client at the cap: told to come back, and it does, once a slot frees up.
    std::thread release([&] {
      sleep_ms(1500);
      a.conn.close();
    });
    ClientOptions o = persistent_client(pki, "device-0003", server.port(), 3);
    Client client(o);
    std::string error;
    REQUIRE_MESSAGE(client.init(&error) == Status::kOk, error);
    FixedTrainer trainer(3, 10);
    const Status s = client.participate(trainer, 1, nullptr, &error);
    release.join();
    CHECK_MESSAGE(s == Status::kOk, error);
    CHECK(lines_with(server.log(), {"event=update_accepted", "device=device-0003"}).size() == 1);
    const std::string metrics = http_get(server.metrics_port(), "/metrics");
    CHECK(metrics.find("edgefl_server_busy_total 0") == std::string::npos);
  }

  TEST_CASE("at the handshake limit new connections wait in the backlog until a handshake ends") {
    TempDir tmp;
    const Pki pki = make_pki(tmp / "pki", 1);
    ServerProcess server(tmp);
    START_SERVER(server, server_args(pki, tmp / "state", "fp32",
                                     {"--cohort", "1", "--max-handshakes", "1", "--handshake-timeout", "2"}));
    INFO("server log:\n" << server.all_logs());
    RawLink stalled;  // connects and never sends a ClientHello: holds the one handshake slot
    REQUIRE(stalled.connect(server.port()));
    sleep_ms(200);
    // Five devices give up while they wait in the backlog (they send the start of a ClientHello,
    // then close): the server drops them without a handshake.
    for (int i = 0; i < 5; ++i) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      REQUIRE(fd >= 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(server.port());
      REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
      const uint8_t hello_start[5] = {0x16, 0x03, 0x01, 0x00, 0x80};
      REQUIRE(::send(fd, hello_start, sizeof hello_start, MSG_NOSIGNAL) == 5);
      ::close(fd);
    }
    sleep_ms(100);
    const auto device = device_credentials(pki, "device-0001");
    const auto start = Clock::now();
    contribute(server.port(), *device, "device-0001", 1, 3);  // waits for the slot, then succeeds
    const double waited_s = std::chrono::duration<double>(Clock::now() - start).count();
    CAPTURE(waited_s);
    CHECK(waited_s > 1.0);  // held back until the stalled handshake timed out (2 s after its accept)
    const std::string log = server.log();
    const size_t timed_out = log.find("reason=\"handshake timed out\"");
    const size_t connected = log.find("event=device_connected");
    REQUIRE(timed_out != std::string::npos);
    REQUIRE(connected != std::string::npos);
    CHECK(timed_out < connected);
    REQUIRE(server.wait_for_log({"event=round_committed", "round=1 "}));
    const std::string metrics = http_get(server.metrics_port(), "/metrics");
    CHECK_MESSAGE(metrics.find("edgefl_connections_abandoned_total 5\n") != std::string::npos, metrics);
    size_t failed = 0;
    for (size_t at = log.find("event=tls_handshake_failed"); at != std::string::npos;
         at = log.find("event=tls_handshake_failed", at + 1))
      ++failed;
    CHECK(failed == 1);  // the stalled one's timeout only
  }

  TEST_CASE(
      "the idle timeout closes a device that goes quiet and one that sends a message too slowly (a "
      "deadline for the whole message), logs and counts both, and other devices' rounds go on") {
    TempDir tmp;
    const Pki pki = make_pki(tmp / "pki", 3);
    ServerProcess server(tmp);
    START_SERVER(server, server_args(pki, tmp / "state", "fp32", {"--cohort", "1", "--idle-timeout", "1"}));
    INFO("server log:\n" << server.all_logs());
    const auto quiet_device = device_credentials(pki, "device-0001");
    const auto slow_device = device_credentials(pki, "device-0002");
    std::string error;
    RawLink quiet, slow;
    REQUIRE(quiet.connect(server.port()));
    REQUIRE_MESSAGE(quiet.handshake(quiet_device->config(), &error) == 0, error);
    REQUIRE(slow.connect(server.port()));
    REQUIRE_MESSAGE(slow.handshake(slow_device->config(), &error) == 0, error);
    // The slow device sends a Hello a byte every 100 ms (a record each): the whole frame would
    // take well over 5 s, and the server hears a byte at least every 100 ms all along.
    std::vector<uint8_t> frame;
    REQUIRE(wire::encode(wire::Message{make_hello()}, &frame) == Status::kOk);
    REQUIRE(frame.size() > 50);
    const auto start = Clock::now();
    double refused_after_s = -1;
    std::thread trickle([&] {
      for (const uint8_t byte : frame) {
        if (!slow.write({byte})) {
          refused_after_s = std::chrono::duration<double>(Clock::now() - start).count();
          return;
        }
        sleep_ms(100);
      }
    });
    // Meanwhile, a device that behaves completes the round.
    const auto good = device_credentials(pki, "device-0003");
    contribute(server.port(), *good, "device-0003", 1, 3);
    REQUIRE(server.wait_for_log({"event=round_committed", "round=1 "}));
    CHECK(quiet.wait_closed(5000));  // said nothing after its handshake: closed at the 1 s timeout
    trickle.join();
    CAPTURE(refused_after_s);
    CHECK(refused_after_s > 0.9);  // the server closed it before the frame was whole...
    CHECK(refused_after_s < 3.0);  // ...at the timeout for the whole message, not per byte
    CHECK(lines_with(server.log(), {"event=connection_timed_out", "device=device-0001",
                                    "idle_timeout_ms=1000", "waiting_for=\"a message\""})
              .size() == 1);
    CHECK(lines_with(server.log(), {"event=connection_timed_out", "device=device-0002",
                                    "waiting_for=\"the rest of a message\""})
              .size() == 1);
    const std::string metrics = http_get(server.metrics_port(), "/metrics");
    CHECK_MESSAGE(metrics.find("edgefl_connections_timed_out_total 2\n") != std::string::npos, metrics);
  }

  TEST_CASE("a device gets at most N connections at once; more are answered RateLimited") {
    TempDir tmp;
    const Pki pki = make_pki(tmp / "pki", 1);
    ServerProcess server(tmp);
    START_SERVER(server, server_args(pki, tmp / "state", "fp32", {"--max-connections-per-device", "2"}));
    INFO("server log:\n" << server.all_logs());
    auto creds = device_credentials(pki, "device-0001");
    Link a, b, c;
    REQUIRE(a.connect(server.port(), creds.get()) == Status::kOk);
    REQUIRE(b.connect(server.port(), creds.get()) == Status::kOk);
    REQUIRE(c.connect(server.port(), creds.get()) == Status::kOk);
    wire::Message reply;
    REQUIRE_MESSAGE(c.exchange(wire::Message{make_hello()}, &reply) == Status::kOk, c.error);
    const auto* e = std::get_if<wire::Error>(&reply);
    REQUIRE_MESSAGE(e != nullptr, describe(reply));
    CHECK(e->code == wire::ErrorCode::kRateLimited);
    // The first two still work.
    REQUIRE(a.exchange(wire::Message{make_hello()}, &reply) == Status::kOk);
    CHECK(std::holds_alternative<wire::TaskOffer>(reply));
  }

  TEST_CASE(
      "an UploadChunk frame above the offered chunk size is refused from its header; buffers do not grow") {
    TempDir tmp;
    const Pki pki = make_pki(tmp / "pki", 1);
    ServerProcess server(tmp);
    START_SERVER(server, server_args(pki, tmp / "state", "fp32", {"--chunk", "16384"}));
    INFO("server log:\n" << server.all_logs());
    auto creds = device_credentials(pki, "device-0001");
    // 40 connections each announce a 1 MiB UploadChunk (the frame cap) and send nothing more.
    std::vector<std::unique_ptr<RawLink>> links;
    for (int i = 0; i < 40; ++i) {
      auto link = std::make_unique<RawLink>();
      REQUIRE(link->connect(server.port()));
      std::string error;
      REQUIRE_MESSAGE(link->handshake(creds->config(), &error) == 0, error);
      REQUIRE(link->write(hello_frame()));
      wire::Message reply;
      REQUIRE(link->receive(&reply) == Status::kOk);
      REQUIRE(link->write(frame_header(wire::MessageType::kUploadChunk, 1u << 20)));
      REQUIRE(link->receive(&reply) == Status::kOk);
      const auto* e = std::get_if<wire::Error>(&reply);
      REQUIRE_MESSAGE(e != nullptr, describe(reply));
      CHECK(e->code == wire::ErrorCode::kTooLarge);
      links.push_back(std::move(link));
    }
    CHECK(lines_with(server.log(), {"event=connection_refused", "above this server's limit"}).size() == 40);
  }

  TEST_CASE("a device still training when its round closes says Hello again and contributes to the next") {
    TempDir tmp;
    const Pki pki = make_pki(tmp / "pki", 2);
    ServerProcess server(tmp);
    START_SERVER(server, server_args(pki, tmp / "state", "fp32",
                                     {"--cohort", "2", "--min-quorum", "1", "--deadline", "1.5"}));
    INFO("server log:\n" << server.all_logs());
    std::string error_fast, error_slow;
    Status fast_status = Status::kOk, slow_status = Status::kOk;
    std::thread fast([&] {
      Client client(persistent_client(pki, "device-0001", server.port(), 1));
      REQUIRE(client.init(&error_fast) == Status::kOk);
      FixedTrainer trainer(1, 10);
      fast_status = client.participate(trainer, 1, nullptr, &error_fast);
    });
    Client slow_client(persistent_client(pki, "device-0002", server.port(), 2));
    REQUIRE(slow_client.init(&error_slow) == Status::kOk);
    SlowTrainer slow(2, 2500, 1);  // round 1 ends at 1.5 s with the fast device alone
    std::vector<RoundResult> results;
    slow_status = slow_client.participate(
        slow, 1, [&](const RoundResult& r) { results.push_back(r); }, &error_slow);
    fast.join();
    CHECK_MESSAGE(fast_status == Status::kOk, error_fast);
    CHECK_MESSAGE(slow_status == Status::kOk, error_slow);
    REQUIRE(!results.empty());
    CHECK(results.back().outcome == RoundOutcome::kAccepted);
    CHECK(results.back().round_id >= 2);
    CHECK(lines_with(server.log(), {"event=round_committed", "round=1 ", "updates=1"}).size() == 1);
    CHECK(lines_with(server.log(), {"event=update_accepted", "device=device-0002"}).size() == 1);
  }

  TEST_CASE(
      "an ack lost after the commit, and the round over when the device returns: it asks, and hears "
      "kDuplicate") {
    TempDir tmp;
    const Pki pki = make_pki(tmp / "pki", 1);
    const std::string state = tmp / "state";
    ServerProcess server(tmp);
    // Cohort 1: the update that is acknowledged also completes round 1, and round 2 opens.
    START_SERVER(server, server_args(pki, state, "fp32", {"--cohort", "1", "--min-quorum", "1"}));
    INFO("server log:\n" << server.all_logs());
    ClientOptions o = persistent_client(pki, "device-0001", server.port(), 7);
    o.test_disconnect_before_ack = true;
    Client client(o);
    std::string error;
    REQUIRE_MESSAGE(client.init(&error) == Status::kOk, error);
    FixedTrainer trainer(1, 10);
    RoundResult r;
    REQUIRE_MESSAGE(client.run_round(trainer, &r, &error) == Status::kOk, error);
    // Counted by the server, and known to be by the device: not a straggler of round 1.
    CHECK(r.outcome == RoundOutcome::kDuplicate);
    CHECK(r.round_id == 1);
    REQUIRE(server.wait_for_log({"event=update_duplicate", "round=1", "device=device-0001"}));
    const std::string log = server.log();
    CHECK(log.find("event=task_offer round=2 device=device-0001") < log.find("event=update_duplicate"));
    CHECK(lines_with(log, {"event=update_accepted", "round=1"}).size() == 1);
    // The next round (a device without the hook): a new update, counted once.
    Client next(persistent_client(pki, "device-0001", server.port(), 8));
    REQUIRE_MESSAGE(next.init(&error) == Status::kOk, error);
    REQUIRE_MESSAGE(next.run_round(trainer, &r, &error) == Status::kOk, error);
    CHECK(r.outcome == RoundOutcome::kAccepted);
    CHECK(r.round_id == 2);
    server.signal(SIGTERM);
    CHECK(server.wait_exit(10000) == 0);
    CHECK(ledger_rows(state) == 2);
  }

  TEST_CASE(
      "an ack lost, and the server back before the device: with another codec it hears kDuplicate and "
      "its result names its update's codec; with its state wiped (a new nonce) the update is discarded") {
    TempDir tmp;
    const Pki pki = make_pki(tmp / "pki", 1);
    const uint16_t port = free_port();
    auto args_with = [&](const std::string& state, const std::string& codec) {
      std::vector<std::string> args = server_args(pki, state, codec, {"--cohort", "1", "--min-quorum", "1"});
      listen_on(&args, port);
      return args;
    };
    bool wiped = false;
    SUBCASE("the same state, another codec") {
      wiped = false;
    }
    SUBCASE("the state wiped: round 1 again, under a new nonce") {
      wiped = true;
    }
    ServerProcess server(tmp);
    START_SERVER(server, args_with(tmp / "state", "fp32"));
    INFO("server logs:\n" << server.all_logs());
    ClientOptions o = persistent_client(pki, "device-0001", port, 7);
    o.test_disconnect_before_ack = true;
    // Away long enough for the server to stop and come back (about a second; the jitter keeps a
    // backoff above half of it).
    o.backoff_initial_ms = 6000;
    o.backoff_max_ms = 8000;
    Client client(o);
    std::string error;
    REQUIRE_MESSAGE(client.init(&error) == Status::kOk, error);
    FixedTrainer trainer(1, 10);
    RoundResult r;
    Status status = Status::kCancelled;
    std::thread device([&] { status = client.run_round(trainer, &r, &error); });
    const bool acked = server.wait_for_log({"event=update_accepted", "round=1", "device=device-0001"});
    server.signal(SIGTERM);
    const int first_exit = server.wait_exit(10000);
    std::string restart_error;
    const bool restarted =
        server.start(args_with(tmp / (wiped ? "state2" : "state"), "bf16"), &restart_error);
    device.join();
    REQUIRE(acked);
    CHECK(first_exit == 0);
    REQUIRE_MESSAGE(restarted, restart_error);
    REQUIRE_MESSAGE(status == Status::kOk, error);
    CHECK(r.round_id == 1);
    CHECK(r.codec == "fp32");  // what its update was encoded with; the new offer is bf16
    if (!wiped) {
      CHECK(r.outcome == RoundOutcome::kDuplicate);
      // The second life answered from its ledger, and offered round 2 in bf16.
      CHECK(server.wait_for_log({"event=update_duplicate", "round=1", "device=device-0001"}));
    } else {
      // This server's round 1 is another round (its nonce): the update cannot be in it, and is
      // discarded at once (it was retried as a transient refusal until the device gave up).
      CHECK((r.outcome == RoundOutcome::kLate || r.outcome == RoundOutcome::kStraggler));
      CHECK(lines_with(server.log(), {"event=update_duplicate"}).empty());
      CHECK(lines_with(server.log(), {"event=update_accepted"}).empty());
    }
    Client next(persistent_client(pki, "device-0001", port, 8));
    REQUIRE_MESSAGE(next.init(&error) == Status::kOk, error);
    REQUIRE_MESSAGE(next.run_round(trainer, &r, &error) == Status::kOk, error);
    CHECK(r.outcome == RoundOutcome::kAccepted);
    CHECK(r.round_id == (wiped ? 1u : 2u));
    CHECK(r.codec == "bf16");
  }

  TEST_CASE(
      "random kill -9 of the server while devices participate: nobody gives up, every ack counts once") {
    crash_test(Crash::kServer);
  }
  TEST_CASE("the deny list is live: a file change or SIGHUP revokes a device without a restart") {
    TempDir tmp;
    const Pki pki = make_pki(tmp / "pki", 3);
    write_text(tmp / "deny.txt", "# nobody yet\n");
    ServerProcess server(tmp);
    START_SERVER(server,
                 server_args(pki, tmp / "state", "fp32", {"--cohort", "3", "--deny", tmp / "deny.txt"}));
    INFO("server log:\n" << server.all_logs());
    auto hello_as = [&](const std::string& id) {
      auto creds = device_credentials(pki, id);
      Link link;
      REQUIRE_MESSAGE(link.connect(server.port(), creds.get()) == Status::kOk, link.error);
      wire::Message reply;
      REQUIRE_MESSAGE(link.exchange(wire::Message{make_hello()}, &reply) == Status::kOk, link.error);
      return reply;
    };
    CHECK(std::holds_alternative<wire::TaskOffer>(hello_as("device-0001")));
    CHECK(std::holds_alternative<wire::TaskOffer>(hello_as("device-0002")));
    // The file changes: picked up within about a second.
    write_text(tmp / "deny.txt", "device-0001\n");
    REQUIRE(server.wait_for_log({"event=revocation_reloaded", "trigger=file_changed"}, 1, 5000));
    const wire::Message refused = hello_as("device-0001");
    const auto* e = std::get_if<wire::Error>(&refused);
    REQUIRE_MESSAGE(e != nullptr, describe(refused));
    CHECK(e->code == wire::ErrorCode::kUnauthorized);
    CHECK(e->message.find("revoked (deny list)") != std::string::npos);
    // A bad file keeps the list in force.
    write_text(tmp / "deny.txt", "device 0002 has a space\n");
    REQUIRE(server.wait_for_log({"event=revocation_reload_failed"}, 1, 5000));
    CHECK(std::holds_alternative<wire::Error>(hello_as("device-0001")));
    CHECK(std::holds_alternative<wire::TaskOffer>(hello_as("device-0002")));
    // SIGHUP reads it again at once.
    write_text(tmp / "deny.txt", "device-0002\n");
    server.signal(SIGHUP);
    REQUIRE(server.wait_for_log({"event=revocation_reloaded", "trigger=SIGHUP"}, 1, 5000));
    CHECK(std::holds_alternative<wire::Error>(hello_as("device-0002")));
    CHECK(std::holds_alternative<wire::TaskOffer>(hello_as("device-0001")));  // no longer denied
    CHECK(server.running());
  }

  TEST_CASE("the CRL is live: a new CRL revokes a device without a restart; a stale one is refused") {
    TempDir tmp;
    const Pki pki = make_pki(tmp / "pki", 3);
    // CRLs made by Debian's openssl `ca` (mbedTLS has no CRL writer), signed with the e2e CA's key.
    write_text(tmp / "index.txt", "");
    write_text(tmp / "crlnumber", "01\n");
    write_text(tmp / "ca.cnf", "[ca]\ndefault_ca=e\n[e]\ndatabase=" + tmp / "index.txt" + "\ncrlnumber=" +
                                   tmp / "crlnumber" + "\ndefault_md=sha256\ndefault_crl_days=30\n");
    const std::string ca = "openssl ca -batch -config " + tmp / "ca.cnf" + " -keyfile " + pki.dir +
                           "/ca.key -cert " + pki.ca() + " ";
    auto run = [](const std::string& cmd) {
      REQUIRE_MESSAGE(std::system((cmd + " >/dev/null 2>&1").c_str()) == 0,
                      cmd << " (needs Debian's openssl)");
    };
    // Written beside the live file and renamed over it, as an operator's tooling would.
    auto publish_crl = [&](const std::string& extra) {
      run(ca + "-gencrl -out " + tmp / "next.pem" + extra);
      REQUIRE(std::rename((tmp / "next.pem").c_str(), (tmp / "crl.pem").c_str()) == 0);
    };
    publish_crl("");  // revokes nobody
    ServerProcess server(tmp);
    START_SERVER(server,
                 server_args(pki, tmp / "state", "fp32", {"--cohort", "3", "--crl", tmp / "crl.pem"}));
    INFO("server log:\n" << server.all_logs());
    // True when the device completes the handshake and gets an answer to its Hello.
    auto admitted = [&](const std::string& id) {
      auto creds = device_credentials(pki, id);
      Link link;
      if (link.connect(server.port(), creds.get()) != Status::kOk) return false;
      wire::Message reply;
      if (link.exchange(wire::Message{make_hello()}, &reply) != Status::kOk) return false;
      return std::holds_alternative<wire::TaskOffer>(reply);
    };
    CHECK(admitted("device-0001"));
    CHECK(admitted("device-0002"));
    // A new CRL revoking device-0002: picked up within about a second of the file change.
    run(ca + "-revoke " + pki.cert("device-0002"));
    const size_t refused_before = lines_with(server.log(), {"event=tls_handshake_failed"}).size();
    publish_crl("");
    REQUIRE(server.wait_for_log({"event=revocation_reloaded", "trigger=file_changed"}, 1, 5000));
    CHECK_FALSE(admitted("device-0002"));
    REQUIRE(server.wait_for_log({"event=tls_handshake_failed"}, refused_before + 1));
    const std::string why = lines_with(server.log(), {"event=tls_handshake_failed"}).back();
    CHECK_MESSAGE(why.find("revoked") != std::string::npos, why);
    CHECK(admitted("device-0001"));
    // An expired CRL is refused at reload with its reason; the CRL in force stays in force.
    publish_crl(" -crl_lastupdate 200101000000Z -crl_nextupdate 200102000000Z");
    REQUIRE(server.wait_for_log({"event=revocation_reload_failed"}, 1, 5000));
    CHECK(lines_with(server.log(), {"event=revocation_reload_failed"}).back().find("expired") !=
          std::string::npos);
    CHECK_FALSE(admitted("device-0002"));
    CHECK(admitted("device-0003"));
    CHECK(server.running());
  }
}  // TEST_SUITE("e2e.faults")

// --- PostgreSQL state (ctest server.e2e.postgresql*, on the edgefl_postgres fixture's cluster) ----

TEST_SUITE("e2e.postgresql") {
  TEST_CASE("the database server crashes again and again while devices participate: every ack counts once") {
    REQUIRE_MESSAGE(std::getenv("EDGEFL_TEST_POSTGRES_DIR") != nullptr,
                    "a PostgreSQL run only (ctest server.e2e.postgresql.kill sets EDGEFL_TEST_POSTGRES_DIR)");
    crash_test(Crash::kDatabase);
  }

  TEST_CASE("/healthz says 503 while the database is down and ok again when it is back") {
    REQUIRE(std::getenv("EDGEFL_TEST_POSTGRES_DIR") != nullptr);
    TempDir tmp;
    const Pki pki = make_pki(tmp / "pki", 1);
    ServerProcess server(tmp);
    START_SERVER(server, server_args(pki, tmp / "state", "fp32", {"--cohort", "1"}));
    INFO("server log:\n" << server.all_logs());
    std::string health = http_get(server.metrics_port(), "/healthz");
    CHECK(health.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
    testing::postgres_cluster("kill");
    health = http_get(server.metrics_port(), "/healthz");
    testing::postgres_cluster("resume");
    CHECK(health.rfind("HTTP/1.1 503 Service Unavailable\r\n", 0) == 0);
    CHECK(health.find("\r\n\r\nstate store unavailable: postgresql: connection lost") != std::string::npos);
    health = http_get(server.metrics_port(), "/healthz");
    CHECK(health.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
    CHECK(health.find("\r\n\r\nok round=1 model_version=1\n") != std::string::npos);
    // And the round goes on: a device contributes after the outage.
    const auto device = device_credentials(pki, "device-0001");
    contribute(server.port(), *device, "device-0001", 1, 3);
    REQUIRE(server.wait_for_log({"event=round_committed", "round=1 "}));
  }
}

// === e2e.aggregators: several edgefl-server processes, one round, one PostgreSQL database =========

TEST_SUITE("e2e.aggregators") {
  // Three aggregators share the database and the state directory; each device talks to one of
  // them. The coordinator is killed (-9) again and again and restarted as a follower: another
  // aggregator takes the lease, finishes the open round from the shared ledger, and the devices
  // never give up. Every ack counts once, and each committed model is its predecessor plus the
  // FedAvg of its round's ledger, whichever aggregator acknowledged the updates.
  TEST_CASE(
      "three aggregators, the coordinator killed again and again: every ack counts once, models are exact") {
#if EDGEFL_HAVE_POSTGRESQL
    REQUIRE_MESSAGE(std::getenv("EDGEFL_TEST_POSTGRES_DIR") != nullptr,
                    "a PostgreSQL run only (ctest server.e2e.aggregators sets EDGEFL_TEST_POSTGRES_DIR)");
    const char* env = std::getenv("EDGEFL_CRASH_SECONDS");
    const int seconds = env ? std::max(5, std::atoi(env)) : 20;
    constexpr int kAggregators = 3, kDevices = 6;
    TempDir tmp;
    const Pki pki = make_pki(tmp / "pki", kDevices);
    const std::string state = tmp / "state";
    std::vector<uint16_t> ports;
    std::vector<std::vector<std::string>> args;
    std::vector<std::unique_ptr<ServerProcess>> servers;
    for (int a = 0; a < kAggregators; ++a) {
      ports.push_back(free_port());
      const std::string id = std::string(1, char('a' + a));
      args.push_back(server_args(pki, state, "fp32",
                                 {"--cohort", "4", "--over-selection", "1.5", "--deadline", "5",
                                  "--min-quorum", "2", "--aggregator-id", id, "--coordinator-lease", "1"}));
      listen_on(&args[a], ports[a]);
      servers.push_back(std::make_unique<ServerProcess>(tmp, "aggregator-" + id));
      START_SERVER(*servers[a], args[a]);
    }
    auto all_logs = [&] {
      std::string out;
      for (auto& server : servers) out += server->all_logs();
      return out;
    };
    INFO("aggregator logs:\n" << all_logs());
    // The coordinator now: the aggregator whose latest life was elected last and not deposed since.
    auto coordinator = [&]() -> int {
      for (int attempt = 0; attempt < 500; ++attempt) {
        for (int a = 0; a < kAggregators; ++a) {
          const std::string log = servers[a]->log();
          const size_t elected = log.rfind("event=coordinator_elected");
          if (elected != std::string::npos &&
              log.find("event=coordinator_lease_lost", elected) == std::string::npos)
            return a;
        }
        sleep_ms(10);
      }
      return -1;
    };
    Participants devices(pki, kDevices, [&](int d) { return ports[size_t(d) % kAggregators]; });
    uint64_t seed = 0xA66Eull;
    int kills = 0;
    const auto end = Clock::now() + std::chrono::seconds(seconds);
    while (Clock::now() < end) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      sleep_ms(int(1500 + (seed >> 33) % 2000));
      const int victim = coordinator();
      REQUIRE(victim >= 0);
      ++kills;
      servers[victim]->kill_now();
      sleep_ms(int(300 + (seed >> 20) % 700));
      START_SERVER(*servers[victim], args[victim]);  // back as a follower (or coordinator again)
    }
    sleep_ms(3000);  // a last stretch: the devices finish what they had in flight
    devices.stop();
    for (auto& server : servers) {
      server->signal(SIGTERM);
      CHECK(server->wait_exit(15000) == 0);
    }
    devices.check_none_gave_up();
    const uint64_t acked = devices.acked;
    const std::string logs = all_logs();
    const size_t elections = lines_with(logs, {"event=coordinator_elected"}).size();
    // Closes that merged a follower's flushed partial sum (the others decoded the updates of a
    // killed aggregator from the ledger).
    const size_t merges = lines_with(logs, {"event=aggregate_merged"}).size();
    const size_t with_sums = merges - lines_with(logs, {"event=aggregate_merged", "partial_sums=0 "}).size();
    MESSAGE(kills << " coordinators killed; " << elections << " elections; " << acked
                  << " acks seen by devices; " << lines_with(logs, {"event=round_committed"}).size()
                  << " rounds committed; " << merges << " closes merged the sealed ledger, " << with_sums
                  << " of them with partial sums flushed by other aggregators");
    CHECK(with_sums > 0);
    CHECK(kills >= 3);
    CHECK(elections >= size_t(kills) + 1);
    CHECK(acked > 0);
    CHECK(lines_with(logs, {"event=start_failed"}).empty());
    CHECK(lines_with(logs, {"event=storage_failure"}).empty());
    const uint64_t rows = ledger_rows(state);
    CHECK(rows >= acked);
    CHECK(rows <= acked + kDevices);
    // Each committed model, at the path its record names (the directory of the coordinator that
    // wrote it), is its predecessor plus the FedAvg of its round's ledger.
    const std::string db = testing::postgres_db_for(state);
    auto recorded = [&](uint64_t version) {
      const std::string path =
          testing::pg_query(db, "SELECT path FROM models WHERE version = " + std::to_string(version));
      REQUIRE_MESSAGE(!path.empty(), "no model version " << version);
      return read_model(state + "/" + path);
    };
    const uint64_t committed = check_models_against_ledgers(state, recorded);
    MESSAGE(committed << " committed models checked against their ledgers");
    CHECK(committed >= 3);
#else
    FAIL("this build has no PostgreSQL storage");
#endif
  }
}

// === e2e.secure ==================================================================================

namespace {

constexpr const char* kSecureCodec = "q8:shared=0.0002,det";  // nearest rounding: codes are exact

// The update FixedTrainer(tag) makes, as the server decodes it (unweighted: one sample each).
Update secure_update(size_t n, uint32_t tag) {
  wire::TaskOffer offer;
  offer.parameter_count = static_cast<uint32_t>(n);
  offer.uplink_codec = kSecureCodec;
  offer.codec_seed = 1;
  Update u;
  std::string what;
  REQUIRE_MESSAGE(make_update(offer, "x", tag, 1, &u, &what) == Status::kOk, what);
  return u;
}

// A device of a secure round that advertises its keys and shares them (the real SecAgg+ steps),
// then disappears before masking: the server must remove its pair masks in the unmask phase.
std::string share_then_drop(uint16_t port, const tls::TlsCredentials& creds) {
  Link link;
  if (link.connect(port, &creds) != Status::kOk) return "connect: " + link.error;
  wire::TaskOffer offer;
  std::string what;
  if (await_offer(link, &offer, &what, 0, wire::kCapabilitySecureAggregation) != Status::kOk) return what;
  if (!offer.secure_aggregation) return "the offer is not a secure round";
  const wire::SecAggConfig& c = *offer.secure_aggregation;
  const secagg::RoundParameters p = secagg::round_parameters_of(offer);
  secagg::SecAggClient client;
  secagg::AdvertisedKeys keys;
  if (secagg::crypto_init() != Status::kOk || client.start(p, c.device_index, &keys) != Status::kOk)
    return "SecAggClient.start";
  wire::SecAggAdvertise advertise;
  advertise.round_id = offer.round_id;
  advertise.round_nonce = offer.round_nonce;
  advertise.keys = secagg::to_wire(keys);
  // A device cannot advertise under another index.
  wire::SecAggAdvertise forged = advertise;
  forged.keys.device = (c.device_index + 1) % c.cohort;
  wire::Message reply;
  if (link.exchange(wire::Message{forged}, &reply) != Status::kOk) return "forged advertise: " + link.error;
  const auto* refused = std::get_if<wire::Error>(&reply);
  if (refused == nullptr || refused->code != wire::ErrorCode::kBadMessage)
    return "a forged index was answered with " + describe(reply);
  wire::Message out{advertise};
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  for (;;) {
    if (link.exchange(out, &reply) != Status::kOk) return "advertise: " + link.error;
    if (std::holds_alternative<wire::SecAggKeys>(reply)) break;
    if (!std::holds_alternative<wire::SecAggStatus>(reply))
      return "advertise answered with " + describe(reply);
    if (Clock::now() > deadline) return "the keys phase did not end";
    sleep_ms(20);
    wire::SecAggPoll poll;
    poll.round_id = offer.round_id;
    poll.round_nonce = offer.round_nonce;
    poll.phase = wire::SecAggPhase::kKeys;
    out = wire::Message{poll};
  }
  const std::vector<secagg::AdvertisedKeys> neighbours =
      secagg::from_wire_all(std::get<wire::SecAggKeys>(reply).keys);
  std::vector<secagg::SealedShares> sealed;
  secagg::Key32 commitment;
  if (client.share({neighbours.data(), neighbours.size()}, &sealed, &commitment) != Status::kOk)
    return "share";
  wire::SecAggShares shares;
  shares.round_id = offer.round_id;
  shares.round_nonce = offer.round_nonce;
  shares.seed_commitment = commitment;
  shares.shares = secagg::to_wire_all(sealed);
  if (link.exchange(wire::Message{shares}, &reply) != Status::kOk) return "shares: " + link.error;
  if (!std::holds_alternative<wire::SecAggStatus>(reply) && !std::holds_alternative<wire::SecAggInbox>(reply))
    return "shares answered with " + describe(reply);
  // A second, different set of shares is refused; the first one stands.
  shares.shares[0].sealed[0] ^= 1;
  if (link.exchange(wire::Message{shares}, &reply) != Status::kOk) return "second shares: " + link.error;
  refused = std::get_if<wire::Error>(&reply);
  if (refused == nullptr || refused->code != wire::ErrorCode::kUnexpectedMessage)
    return "second shares answered with " + describe(reply);
  return "";  // and gone
}

// Devices device-0001.. running edgefl::Client::participate() for one round, FixedTrainer(index
// + 1) each, on threads of their own; join() waits for them.
struct SecureDevices {
  std::vector<std::thread> threads;
  std::vector<Status> statuses;
  std::vector<std::string> errors;
  std::vector<uint32_t> rounds;        // progress() calls
  std::vector<RoundOutcome> outcomes;  // the last round's

  SecureDevices(const Pki& pki, uint16_t port, uint32_t count, uint64_t seed)
      : statuses(count, Status::kOk),
        errors(count),
        rounds(count, 0),
        outcomes(count, RoundOutcome::kRejected) {
    for (uint32_t d = 0; d < count; ++d) {
      threads.emplace_back([this, &pki, port, seed, d] {
        Client client(persistent_client(pki, cli::dev_pki_device_id(d + 1), port, seed + d));
        if (client.init(&errors[d]) != Status::kOk) {
          statuses[d] = Status::kInvalidArgument;
          return;
        }
        FixedTrainer trainer(d + 1, 1);
        statuses[d] = client.participate(
            trainer, 1,
            [this, d](const RoundResult& r) {
              ++rounds[d];
              outcomes[d] = r.outcome;
            },
            &errors[d]);
      });
    }
  }
  ~SecureDevices() { join(); }
  void join() {
    for (std::thread& t : threads) {
      if (t.joinable()) t.join();
    }
  }
};

// A plaintext Transport (a blocking TCP socket, each wait bounded by poll()) that passes every
// message from the server through `rewrite` (which returns whether it changed it) before the
// client reads it: a server that says other things than edgefl-server would.
struct RewritingTransport {
  int fd = -1;
  std::vector<uint8_t> in;   // bytes from the server, not yet a whole frame
  std::vector<uint8_t> out;  // frames for the client, rewritten
  size_t out_at = 0;
  std::function<bool(wire::Message*)> rewrite;
  int rewritten = 0;  // messages changed

  Transport transport() {
    Transport t;
    t.user = this;
    t.connect = [](void* u, const char* host, uint16_t port, uint32_t) -> Status {
      auto* self = static_cast<RewritingTransport*>(u);
      const int socket_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (socket_fd < 0) return Status::kConnectionFailed;
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_port = htons(port);
      if (::inet_pton(AF_INET, host, &address.sin_addr) != 1 ||
          ::connect(socket_fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
        ::close(socket_fd);
        return Status::kConnectionFailed;
      }
      self->fd = socket_fd;
      return Status::kOk;
    };
    t.send = [](void* u, const uint8_t* data, size_t size, size_t* sent, uint32_t) -> Status {
      auto* self = static_cast<RewritingTransport*>(u);
      const ssize_t n = ::send(self->fd, data, size, MSG_NOSIGNAL);
      if (n <= 0) return Status::kConnectionFailed;
      *sent = size_t(n);
      return Status::kOk;
    };
    t.recv = [](void* u, uint8_t* data, size_t capacity, size_t* received, uint32_t timeout_ms) -> Status {
      auto* self = static_cast<RewritingTransport*>(u);
      *received = 0;
      while (self->out_at == self->out.size()) {
        self->out.clear();
        self->out_at = 0;
        // Whole frames first; then more bytes from the server.
        wire::FrameHeader h;
        if (self->in.size() >= wire::kFrameHeaderBytes &&
            wire::read_frame_header({self->in.data(), self->in.size()}, &h) == Status::kOk &&
            self->in.size() >= wire::kFrameHeaderBytes + h.payload_length) {
          const size_t length = wire::kFrameHeaderBytes + h.payload_length;
          std::vector<uint8_t> frame(self->in.begin(), self->in.begin() + ptrdiff_t(length));
          self->in.erase(self->in.begin(), self->in.begin() + ptrdiff_t(length));
          wire::Message m;
          if (wire::decode_frame({frame.data(), frame.size()}, &m) == Status::kOk && self->rewrite &&
              self->rewrite(&m)) {
            ++self->rewritten;
            if (wire::encode(m, &frame) != Status::kOk) return Status::kConnectionFailed;
          }
          self->out = std::move(frame);
          continue;
        }
        pollfd p{self->fd, POLLIN, 0};
        const int ready = ::poll(&p, 1, int(std::min<uint32_t>(timeout_ms, 1u << 30)));
        if (ready == 0) return Status::kTimeout;
        uint8_t buffer[16384];
        const ssize_t n = ready < 0 ? -1 : ::recv(self->fd, buffer, sizeof buffer, 0);
        if (n <= 0) return Status::kConnectionFailed;
        self->in.insert(self->in.end(), buffer, buffer + n);
      }
      const size_t n = std::min(capacity, self->out.size() - self->out_at);
      std::memcpy(data, self->out.data() + self->out_at, n);
      self->out_at += n;
      *received = n;
      return Status::kOk;
    };
    t.close = [](void* u) {
      auto* self = static_cast<RewritingTransport*>(u);
      if (self->fd >= 0) ::close(self->fd);
      self->fd = -1;
      self->in.clear();
      self->out.clear();
      self->out_at = 0;
    };
    return t;
  }
};

// One secure round (cohort 4, --rounds 1) on a plaintext server, four devices each through its
// RewritingTransport (set their rewrite before run()).
struct PlaintextSecureRound {
  explicit PlaintextSecureRound(TempDir& tmp) : state(tmp / "state"), server(tmp) {
    const Pki pki = make_pki(tmp / "pki", 1);
    std::vector<std::string> args =
        server_args(pki, state, kSecureCodec,
                    {"--cohort", "4", "--over-selection", "1", "--rounds", "1", "--secure-aggregation", "on",
                     "--secagg-phase", "2", "--deadline", "30", "--insecure-plaintext-for-tests"});
    for (const char* flag : {"--ca", "--cert", "--key"}) {
      const auto at = std::find(args.begin(), args.end(), std::string(flag));
      REQUIRE(at != args.end());
      args.erase(at, at + 2);
    }
    START_SERVER(server, args);
  }
  // Device d (1..4) is insecure-<prefix>d with seed seed0 + d - 1 and FixedTrainer(d, 1).
  void run(const std::string& prefix, uint64_t seed0) {
    std::vector<std::thread> threads;
    for (uint32_t d = 0; d < 4; ++d) {
      threads.emplace_back([&, d] {
        ClientOptions o;
        o.port = server.port();
        o.insecure_plaintext_for_tests = true;
        o.sdk_version = prefix + std::to_string(d + 1);  // the device id: insecure-<this>
        o.transport = transports[d].transport();
        o.backoff_initial_ms = 20;
        o.backoff_max_ms = 300;
        o.give_up_after_ms = 60000;
        o.seed = seed0 + d;
        Client client(o);
        if ((statuses[d] = client.init(&errors[d])) != Status::kOk) return;
        FixedTrainer trainer(d + 1, 1);
        statuses[d] = client.run_round(trainer, &results[d], &errors[d]);
      });
    }
    for (std::thread& t : threads) t.join();
  }
  // The committed model moved by the exact mean of the four devices' updates.
  void check_exact_mean() const {
    const std::vector<float> v1 = read_model(model_path(state, 1));
    const std::vector<float> v2 = read_model(model_path(state, 2));
    std::vector<Update> all;
    for (uint32_t d = 1; d <= 4; ++d) all.push_back(secure_update(v1.size(), d));
    std::vector<const Update*> updates;
    for (const Update& u : all) updates.push_back(&u);
    check_fedavg(v1, updates, v2);
  }

  const std::string state;
  ServerProcess server;
  std::vector<RewritingTransport> transports = std::vector<RewritingTransport>(4);
  std::vector<RoundResult> results = std::vector<RoundResult>(4);
  std::vector<Status> statuses = std::vector<Status>(4, Status::kOk);
  std::vector<std::string> errors = std::vector<std::string>(4);
};

}  // namespace

TEST_SUITE("e2e.secure") {
  TEST_CASE(
      "secure aggregation: four devices and one that drops after sharing; the model moves by the exact "
      "mean of the survivors' codes") {
    TempDir tmp;
    const Pki pki = make_pki(tmp / "pki", 5);
    const std::string state = tmp / "state";
    ServerProcess server(tmp);
    START_SERVER(server,
                 server_args(pki, state, kSecureCodec,
                             {"--cohort", "4", "--over-selection", "1.25", "--rounds", "1",
                              "--secure-aggregation", "on", "--secagg-phase", "2", "--deadline", "30"}));
    INFO("server log:\n" << server.all_logs());
    SecureDevices devices(pki, server.port(), 4, 10);
    const std::unique_ptr<tls::TlsCredentials> creds5 = device_credentials(pki, cli::dev_pki_device_id(5));
    const std::string dropped = share_then_drop(server.port(), *creds5);
    devices.join();
    CHECK_MESSAGE(dropped.empty(), dropped);
    for (uint32_t d = 0; d < 4; ++d) {
      CAPTURE(d);
      CHECK_MESSAGE(devices.statuses[d] == Status::kOk, devices.errors[d]);
      REQUIRE(devices.rounds[d] > 0);
      CHECK(devices.outcomes[d] == RoundOutcome::kAccepted);
    }
    REQUIRE(server.wait_exit(20000) == 0);
    const std::vector<float> v1 = read_model(model_path(state, 1));
    const std::vector<float> v2 = read_model(model_path(state, 2));
    std::vector<Update> survivors;
    for (uint32_t d = 1; d <= 4; ++d) survivors.push_back(secure_update(v1.size(), d));
    std::vector<const Update*> updates;
    for (const Update& u : survivors) updates.push_back(&u);
    check_fedavg(v1, updates, v2);
    // Not the mean with the dropped device's update in it.
    Update five = secure_update(v1.size(), 5);
    updates.push_back(&five);
    double off = 0;
    for (size_t j = 0; j < v1.size(); ++j) {
      double mean = 0;
      for (const Update* u : updates) mean += u->decoded[j];
      off = std::max(off, std::fabs(double(v1[j]) + mean / 5 - v2[j]));
    }
    CHECK(off > 1e-4);

    const std::string log = server.log();
    CHECK(lines_with(log, {"event=masked_vector_accepted"}).size() == 4);
    CHECK(lines_with(log, {"event=secagg_phase_end", "phase=unmask", "next=done", "masked=4"}).size() == 1);
    CHECK(lines_with(log, {"event=round_committed", "round=1", "updates=4"}).size() == 1);
    // Each device heard its vector counted before the server (--rounds 1) drained and left.
    CHECK(lines_with(log, {"event=secagg_outcome", "round=1", "outcome=counted"}).size() == 4);
    CHECK(lines_with(log, {"event=update_accepted"}).empty());  // no update in the clear
    CHECK(lines_with(log, {"level=error"}).empty());
  }
  TEST_CASE(
      "secure aggregation: a masked vector whose ack was lost, and the round over when its device "
      "returns: it asks the ledger, hears kDuplicate, and keeps it as counted") {
    TempDir tmp;
    const Pki pki = make_pki(tmp / "pki", 4);
    const std::string state = tmp / "state";
    ServerProcess server(tmp);
    // Each phase after the keys lasts at most 1.5 s: with device 4 away, the unmask phase ends on
    // the three others' answers (the graph tolerates 30% dropout) and round 2 opens.
    START_SERVER(server,
                 server_args(pki, state, kSecureCodec,
                             {"--cohort", "4", "--over-selection", "1", "--rounds", "2",
                              "--secure-aggregation", "on", "--secagg-phase", "1.5", "--deadline", "30"}));
    INFO("server log:\n" << server.all_logs());
    SecureDevices others(pki, server.port(), 3, 40);
    ClientOptions o = persistent_client(pki, cli::dev_pki_device_id(4), server.port(), 43);
    o.test_disconnect_before_ack = true;  // the masked vector's ack never arrives
    // and the device is away 10-20 s: round 1 ends meanwhile (its masked and unmask phases take at
    // most 3 s and the close little more, also under AddressSanitizer on a loaded machine).
    o.backoff_initial_ms = 10000;
    o.backoff_max_ms = 20000;
    Client client(o);
    std::string error;
    REQUIRE_MESSAGE(client.init(&error) == Status::kOk, error);
    FixedTrainer trainer(4, 1);
    std::vector<RoundResult> results;
    const Status s = client.participate(
        trainer, 1, [&](const RoundResult& r) { results.push_back(r); }, &error);
    others.join();
    CHECK_MESSAGE(s == Status::kOk, error);
    for (uint32_t d = 0; d < 3; ++d) {
      CAPTURE(d);
      CHECK_MESSAGE(others.statuses[d] == Status::kOk, others.errors[d]);
      CHECK(others.outcomes[d] == RoundOutcome::kAccepted);
    }
    REQUIRE(results.size() == 1);
    // Counted in round 1, and known to be by the device: not a straggler or a late update.
    CHECK(results[0].round_id == 1);
    CHECK(results[0].outcome == RoundOutcome::kDuplicate);
    const std::string log = server.log();
    CHECK(lines_with(log, {"event=masked_vector_accepted"}).size() == 4);
    CHECK(lines_with(log, {"event=round_committed", "round=1", "updates=4"}).size() == 1);
    // The device came back after the round (the ledger answered), not while it was open.
    const size_t committed = log.find("event=round_committed round=1");
    const size_t duplicate = log.find("event=update_duplicate round=1 device=" + cli::dev_pki_device_id(4));
    REQUIRE(committed != std::string::npos);
    REQUIRE(duplicate != std::string::npos);
    CHECK(committed < duplicate);
    server.signal(SIGTERM);
    CHECK(server.wait_exit(10000) == 0);
  }
  TEST_CASE(
      "secure aggregation: a round abandoned after its devices masked (below its quorum) tells each "
      "device its acked vector was not counted; each says kAbandoned, keeps the update in its "
      "error-feedback residual, and the next round's model holds both rounds' updates") {
    TempDir tmp;
    const Pki pki = make_pki(tmp / "pki", 5);
    const std::string state = tmp / "state";
    ServerProcess server(tmp);
    // Five devices are chosen and five updates needed; the fifth shares its keys and vanishes, so
    // the round holds four masked vectors when its masked phase ends and is abandoned.
    START_SERVER(server,
                 server_args(pki, state, kSecureCodec,
                             {"--cohort", "5", "--over-selection", "1", "--min-quorum", "5", "--rounds", "2",
                              "--secure-aggregation", "on", "--secagg-phase", "2", "--deadline", "30"}));
    INFO("server log:\n" << server.all_logs());
    // Devices 1-4 (trainer tags 5, 10, 15, 20: twice their update stays within q8's codes) take
    // part in both rounds with one Client each; device 5 joins round 2 as a Client.
    struct Device {
      std::thread thread;
      Status status = Status::kOk;
      std::string error, notes;
      std::vector<RoundResult> results;
    };
    std::vector<Device> devices(5);
    std::mutex notes_mutex;
    const auto run = [&](uint32_t d, uint32_t rounds) {
      Device& me = devices[d];
      ClientOptions o = persistent_client(pki, cli::dev_pki_device_id(d + 1), server.port(), 70 + d);
      o.log = [&](LogLevel, const std::string& line) {
        std::lock_guard<std::mutex> lock(notes_mutex);
        me.notes += line + "\n";
      };
      Client client(o);
      if (client.init(&me.error) != Status::kOk) {
        me.status = Status::kInvalidArgument;
        return;
      }
      FixedTrainer trainer(5 * (d + 1), 1);
      for (uint32_t r = 0; r < rounds && me.status == Status::kOk; ++r) {
        me.results.emplace_back();
        me.status = client.run_round(trainer, &me.results.back(), &me.error);
      }
    };
    for (uint32_t d = 0; d < 4; ++d) devices[d].thread = std::thread(run, d, 2);
    const std::unique_ptr<tls::TlsCredentials> creds5 = device_credentials(pki, cli::dev_pki_device_id(5));
    const std::string dropped = share_then_drop(server.port(), *creds5);
    // Device 5's keys are gone with its helper: as a Client it can only join the next round.
    CHECK(server.wait_for_log({"event=round_abandoned", "round=1"}, 1, 30000));
    devices[4].thread = std::thread(run, 4, 1);
    for (Device& d : devices) d.thread.join();
    CHECK_MESSAGE(dropped.empty(), dropped);
    for (uint32_t d = 0; d < 5; ++d) {
      CAPTURE(d);
      INFO("device notes:\n" << devices[d].notes);
      CHECK_MESSAGE(devices[d].status == Status::kOk, devices[d].error);
      REQUIRE(devices[d].results.size() == (d < 4 ? 2u : 1u));
      if (d < 4) {
        CHECK(devices[d].results[0].round_id == 1);
        CHECK(devices[d].results[0].outcome == RoundOutcome::kAbandoned);
        CHECK(devices[d].notes.find("went back into the error-feedback residual") != std::string::npos);
        // The plan counts the SecAgg+ state: codes and masked words, and the kept encoding.
        const RoundResult& first = devices[d].results[0];
        CHECK(first.memory.secure_aggregation >= 8 * size_t(12730) + first.memory.encoded);
      }
      CHECK(devices[d].results.back().round_id == 2);
      CHECK(devices[d].results.back().outcome == RoundOutcome::kAccepted);
    }
    REQUIRE(server.wait_exit(20000) == 0);
    const std::string log = server.log();
    CHECK(lines_with(log, {"event=masked_vector_accepted", "round=1"}).size() == 4);
    CHECK(lines_with(log, {"event=round_abandoned", "round=1"}).size() == 1);
    CHECK(lines_with(log, {"event=secagg_outcome", "round=1", "outcome=not_counted"}).size() == 4);
    CHECK(lines_with(log, {"event=secagg_outcome", "round=1", "outcome=counted"}).empty());
    CHECK(lines_with(log, {"event=round_committed", "round=2", "updates=5"}).size() == 1);
    // Round 2's model (version 2: round 1 made none) moved by the mean of devices 1-4's two
    // updates each (the restored one and the new one, within the codec's step) and device 5's one.
    const std::vector<float> v1 = read_model(model_path(state, 1));
    const std::vector<float> v2 = read_model(model_path(state, 2));
    const size_t n = v1.size();
    std::vector<std::vector<float>> deltas;
    for (uint32_t d = 0; d < 5; ++d) deltas.push_back(synthetic_delta(n, 5 * (d + 1)));
    double with_restore = 0, without = 0;
    for (size_t j = 0; j < n; ++j) {
      double both = 0, once = 0;
      for (uint32_t d = 0; d < 5; ++d) {
        const double delta = deltas[d][j];
        both += d < 4 ? 2 * delta : delta;
        once += delta;
      }
      const double moved = double(v2[j]) - double(v1[j]);
      with_restore = std::max(with_restore, std::fabs(moved - both / 5));
      without = std::max(without, std::fabs(moved - once / 5));
    }
    MESSAGE("round 2 moved the model within " << with_restore << " of both rounds' mean (" << without
                                              << " of round 2's alone)");
    CHECK(with_restore <= 1.5e-4);  // q8:shared=0.0002: each code within half a step
    CHECK(without > 1e-3);
  }
  TEST_CASE(
      "secure aggregation: a device whose unmask step fails (an unmask request naming a stranger) asks "
      "the server whether its masked vector counted, and hears it did; the model moves by the exact "
      "mean") {
    TempDir tmp;
    PlaintextSecureRound round(tmp);
    INFO("server log:\n" << round.server.all_logs());
    // Device 1's unmask request names a survivor that is none of its neighbours: it refuses to
    // answer (kSecAggRefused), after its masked vector was acked.
    round.transports[0].rewrite = [](wire::Message* m) {
      auto* request = std::get_if<wire::SecAggUnmaskRequest>(m);
      if (request == nullptr) return false;
      request->survivors.push_back(999);
      return true;
    };
    round.run("bad-unmask-", 190);
    // The request came again to each of its polls while the unmask phase ran (rewritten each time).
    CHECK(round.transports[0].rewritten >= 1);
    for (uint32_t d = 0; d < 4; ++d) {
      CAPTURE(d);
      CHECK_MESSAGE(round.statuses[d] == Status::kOk, round.errors[d]);
      CHECK(round.results[d].outcome == RoundOutcome::kAccepted);  // device 1 heard it from the server
    }
    REQUIRE(round.server.wait_exit(20000) == 0);
    const std::string log = round.server.log();
    // Three answers came in; the round's record answered device 1's poll.
    CHECK(lines_with(log, {"event=round_committed", "round=1", "updates=4"}).size() == 1);
    CHECK(lines_with(log, {"event=secagg_outcome", "round=1", "outcome=counted"}).size() == 4);
    round.check_exact_mean();
  }
  TEST_CASE(
      "secure aggregation against a server older than the outcome field: devices take Done as counted, "
      "as before, and the round commits with the exact mean") {
    TempDir tmp;
    PlaintextSecureRound round(tmp);
    INFO("server log:\n" << round.server.all_logs());
    // A server without the field: every SecAggStatus loses its outcome.
    for (RewritingTransport& t : round.transports) {
      t.rewrite = [](wire::Message* m) {
        auto* status = std::get_if<wire::SecAggStatus>(m);
        if (status == nullptr || status->outcome == wire::SecAggOutcome::kUnspecified) return false;
        status->outcome = wire::SecAggOutcome::kUnspecified;
        return true;
      };
    }
    round.run("old-server-", 90);
    for (uint32_t d = 0; d < 4; ++d) {
      CAPTURE(d);
      CHECK_MESSAGE(round.statuses[d] == Status::kOk, round.errors[d]);
      CHECK(round.results[d].outcome == RoundOutcome::kAccepted);
      CHECK(round.transports[d].rewritten > 0);  // it heard Done without an outcome
    }
    // The server waits up to 10 s for devices to ask for their outcome, which these never do.
    round.server.signal(SIGTERM);
    REQUIRE(round.server.wait_exit(20000) == 0);
    round.check_exact_mean();
  }
  TEST_CASE(
      "secure aggregation keeps its promises across kill -9 in each phase: the round commits with the "
      "exact mean of the survivors' codes") {
    // Four devices run edgefl::Client; a fifth advertises and shares, then vanishes, so the masked
    // phase waits for it until its deadline. The server dies after the keys phase, in the masked
    // phase with four vectors acked, and in the unmask phase; each time it restarts on the same
    // port and replays its log and ledger.
    const std::vector<std::vector<std::string>> kill_points = {
        {"event=secagg_phase_end", "phase=keys"},
        {"event=masked_vector_accepted", "masked=4"},
        {"event=secagg_phase_end", "phase=masked"},
    };
    for (const std::vector<std::string>& kill_at : kill_points) {
      CAPTURE(kill_at[1]);
      TempDir tmp;
      const Pki pki = make_pki(tmp / "pki", 5);
      const std::string state = tmp / "state";
      const uint16_t port = free_port();
      std::vector<std::string> args =
          server_args(pki, state, kSecureCodec,
                      {"--cohort", "5", "--over-selection", "1", "--min-quorum", "4", "--rounds", "1",
                       "--secure-aggregation", "on", "--secagg-phase", "3", "--deadline", "60",
                       // A device cut off by the kill backs off up to 300 ms (persistent_client)
                       // between attempts; the second life drains longer than that, so a device
                       // whose round it completes at once still reaches it to hear its outcome.
                       "--drain", "1500"});
      listen_on(&args, port);
      ServerProcess server(tmp);
      START_SERVER(server, args);
      INFO("server logs:\n" << server.all_logs());
      SecureDevices devices(pki, port, 4, 20);
      // The fifth: whether the kill cuts it off before or after it shares, it never sends a
      // masked vector, and the round's sum is the four others'.
      const std::unique_ptr<tls::TlsCredentials> creds5 = device_credentials(pki, cli::dev_pki_device_id(5));
      std::thread fifth([&] { (void)share_then_drop(port, *creds5); });
      const bool reached = server.wait_for_log({kill_at[0], kill_at[1]}, 1, 30000);
      CHECK_MESSAGE(reached, "the kill point was not reached");
      server.kill_now();
      START_SERVER(server, args);
      // The second life recovers the open round, or, when the kill came between the new model's
      // record and the round's close, completes that commit.
      const auto restart_deadline = Clock::now() + std::chrono::seconds(10);
      while (lines_with(server.log(), {"event=round_recovered", "round=1"}).empty() &&
             lines_with(server.log(), {"event=round_commit_completed", "round=1"}).empty() &&
             Clock::now() < restart_deadline) {
        sleep_ms(20);
      }
      fifth.join();
      devices.join();
      for (uint32_t d = 0; d < 4; ++d) {
        CAPTURE(d);
        CHECK_MESSAGE(devices.statuses[d] == Status::kOk, devices.errors[d]);
        CHECK((devices.outcomes[d] == RoundOutcome::kAccepted ||
               devices.outcomes[d] == RoundOutcome::kDuplicate));
      }
      REQUIRE(server.wait_exit(30000) == 0);
      const std::vector<float> v1 = read_model(model_path(state, 1));
      const std::vector<float> v2 = read_model(model_path(state, 2));
      std::vector<Update> survivors;
      for (uint32_t d = 1; d <= 4; ++d) survivors.push_back(secure_update(v1.size(), d));
      std::vector<const Update*> updates;
      for (const Update& u : survivors) updates.push_back(&u);
      check_fedavg(v1, updates, v2);
      // Both lives (model version 2 above is the commit): the round's commit is logged at most
      // once (in the first life's close, finished by the second, or in the second; a kill between
      // the durable close and its log line leaves none); its unmask phase ended live at most once,
      // and ended (live, or replayed from the log by the second life, which then recovers the
      // round as done).
      const std::string log = server.all_logs();
      CHECK(lines_with(log, {"event=round_committed", "round=1", "updates=4"}).size() +
                lines_with(log, {"event=round_commit_completed", "round=1", "version=2"}).size() <=
            1);
      const size_t ended_live =
          lines_with(log, {"event=secagg_phase_end", "phase=unmask", "next=done", "masked=4", "answered=4"})
              .size();
      CHECK(ended_live <= 1);
      CHECK(ended_live + lines_with(log, {"event=round_recovered", "secure_phase=done", "masked=4"}).size() >=
            1);
      if (kill_at[1] == "masked=4") {  // the ledger's vectors went back into the masked phase's sum
        CHECK(lines_with(log, {"event=round_recovered", "secure_phase=masked", "masked=4"}).size() == 1);
      }
    }
  }
  TEST_CASE(
      "secure aggregation with distributed DP: each device adds discrete Gaussian noise of the variance the "
      "server sets, and the model moves by the survivors' mean plus that noise, nothing more") {
    TempDir tmp;
    const Pki pki = make_pki(tmp / "pki", 4);
    const std::string state = tmp / "state";
    ServerProcess server(tmp);
    // clip 10 is far above these updates' norms (no clipping): the only change is the noise.
    START_SERVER(server, server_args(pki, state, kSecureCodec,
                                     {"--cohort", "4", "--over-selection", "1", "--rounds", "1",
                                      "--secure-aggregation", "on", "--secagg-phase", "5", "--deadline", "30",
                                      "--dp-clip", "10", "--dp-noise", "0.01", "--dp-delta", "1e-5"}));
    INFO("server log:\n" << server.all_logs());
    SecureDevices devices(pki, server.port(), 4, 40);
    devices.join();
    for (uint32_t d = 0; d < 4; ++d) CHECK_MESSAGE(devices.statuses[d] == Status::kOk, devices.errors[d]);
    REQUIRE(server.wait_exit(20000) == 0);
    const std::vector<float> v1 = read_model(model_path(state, 1));
    const std::vector<float> v2 = read_model(model_path(state, 2));
    const size_t n = v1.size();
    std::vector<Update> all;
    for (uint32_t d = 1; d <= 4; ++d) all.push_back(secure_update(n, d));
    // The noise the server asked for: (Z x sensitivity)^2 / cohort, sensitivity = C / step + sqrt(n).
    const double step = 0.0002, sensitivity = 10.0 / step + std::sqrt(double(n));
    const double variance = std::ceil(0.01 * sensitivity * 0.01 * sensitivity / 4.0);
    const std::vector<std::string> committed =
        lines_with(server.log(), {"event=round_committed", "updates=4"});
    REQUIRE(committed.size() == 1);
    CHECK(committed[0].find("dp_noise_variance=" + std::to_string(uint64_t(variance))) != std::string::npos);
    CHECK(committed[0].find("dp_epsilon=") != std::string::npos);
    // What the model moved by, less the exact mean: the mean of 4 devices' noise, in model units
    // (step x sqrt(4 variance) / 4 per coordinate), zero on average.
    double sum = 0, squares = 0;
    for (size_t j = 0; j < n; ++j) {
      double mean = 0;
      for (const Update& u : all) mean += u.decoded[j];
      const double r = double(v2[j]) - double(v1[j]) - mean / 4;
      sum += r;
      squares += r * r;
    }
    const double expected_sd = step * std::sqrt(4 * variance) / 4;
    const double sd = std::sqrt(squares / double(n));
    MESSAGE("noise on the model: sd " << sd << ", expected " << expected_sd << " over " << n
                                      << " coordinates");
    CHECK(sd == doctest::Approx(expected_sd).epsilon(0.05));
    CHECK(std::fabs(sum / double(n)) < 4 * expected_sd / std::sqrt(double(n)));
  }
}

// === e2e.hostile_server ==========================================================================
// edgefl::Client against a server that is not edgefl-server: whatever it says, the device ends
// the round with a specific status in bounded time and sends nothing it should not (no upload
// after a bad download, no Hello loop).

namespace {

// A loopback TCP listener and its accept thread: each connection goes to `serve` (one at a time,
// as a device holds one), then is closed; destruction stops and joins the thread. Owners declare
// it last, so that it stops before anything `serve` uses is destroyed.
class LoopbackListener {
 public:
  explicit LoopbackListener(std::function<void(int fd)> serve) : serve_(std::move(serve)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(listen_fd_ >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    REQUIRE(::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(listen_fd_, 4) == 0);
    socklen_t size = sizeof address;
    REQUIRE(::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &size) == 0);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~LoopbackListener() {
    stop_ = true;
    thread_.join();
    ::close(listen_fd_);
  }
  LoopbackListener(const LoopbackListener&) = delete;
  LoopbackListener& operator=(const LoopbackListener&) = delete;

  uint16_t port() const { return port_; }
  uint32_t connections() const { return connections_.load(); }
  // True once destruction began: `serve` returns soon after.
  bool stopping() const { return stop_.load(); }

 private:
  void run() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      ++connections_;
      serve_(fd);
      ::close(fd);
    }
  }

  std::function<void(int fd)> serve_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<uint32_t> connections_{0};
  std::thread thread_;
};

// A loopback server in this process that answers each device message with what `answer`
// returns: whole frames as bytes (so that they may be malformed), then optionally a close. It
// speaks plaintext frames (devices run with insecure_plaintext_for_tests), or with `tls` (server
// credentials) mutual TLS as edgefl-server does, where a reply may also break the TLS layer. One
// connection at a time, as a device holds one.
class ScriptedServer {
 public:
  struct Reply {
    std::vector<std::vector<uint8_t>> frames;
    bool close = false;
    // TLS only: close_notify after the frames, the connection left open.
    bool close_notify = false;
    // TLS only, when not 0: of the ciphertext of this reply, only the first bytes are sent (a
    // record cut short); the server then answers nothing more on this connection.
    size_t cut_ciphertext_at = 0;
    // Sent on the socket as they are, after the frames (under TLS: not a record of the session).
    std::vector<uint8_t> raw;
    // When not 0: the frames of this reply (their ciphertext under TLS) go out a byte at a time,
    // this many milliseconds apart, until the device closes the connection.
    uint32_t trickle_ms = 0;
  };
  // from_device: the device's message; index: how many device messages came before it.
  using Answer = std::function<Reply(const wire::Message& from_device, size_t index)>;

  explicit ScriptedServer(Answer answer, const tls::TlsCredentials* tls = nullptr)
      : answer_(std::move(answer)), tls_(tls), listener_([this](int fd) { serve(fd); }) {}
  ScriptedServer(const ScriptedServer&) = delete;
  ScriptedServer& operator=(const ScriptedServer&) = delete;

  uint16_t port() const { return listener_.port(); }
  // Every message the device sent, in order (whole frames that decoded).
  std::vector<wire::Message> received() {
    std::lock_guard<std::mutex> lock(mutex_);
    return received_;
  }
  size_t count(wire::MessageType type) {
    size_t n = 0;
    for (const wire::Message& m : received()) n += wire::message_type(m) == type;
    return n;
  }
  uint32_t connections() const { return listener_.connections(); }
  // TLS: connections whose handshake completed.
  uint32_t handshakes() const { return handshakes_.load(); }

 private:
  // Sends data[0..size): at once, or one byte every `trickle_ms` while the device listens.
  bool send_all(int fd, const uint8_t* data, size_t size, uint32_t trickle_ms = 0) const {
    if (trickle_ms == 0) return size == 0 || ::send(fd, data, size, MSG_NOSIGNAL) == ssize_t(size);
    for (size_t i = 0; i < size && !listener_.stopping(); ++i) {
      if (::send(fd, data + i, 1, MSG_NOSIGNAL) != 1) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(trickle_ms));
    }
    return true;
  }
  // Sends the session's pending ciphertext (at most `limit` bytes of it; the rest is dropped).
  bool flush(tls::TlsSession* session, int fd, size_t limit = SIZE_MAX, uint32_t trickle_ms = 0) const {
    const Span<const uint8_t> out = session->outgoing();
    const size_t size = std::min(out.size(), limit);
    const bool sent = send_all(fd, out.data(), size, trickle_ms);
    session->consume_outgoing(out.size());
    return sent;
  }
  // Reads what arrived on fd (waiting up to 20 ms): into *in as it came, or through the session.
  // 1: read something (or nothing yet), 0: the device closed or the session failed.
  int receive(int fd, tls::TlsSession* session, std::vector<uint8_t>* in) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) return 1;
    uint8_t buffer[16384];
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) return 0;  // the device closed
    if (session == nullptr) {
      in->insert(in->end(), buffer, buffer + n);
      return 1;
    }
    session->feed({buffer, size_t(n)});
    if (!session->handshake_done()) {
      const int r = session->handshake();
      if (!flush(session, fd)) return 0;
      if (r == 0) ++handshakes_;
      if (r != 0 && r != tls::TlsSession::kWantRead) return 0;
      if (r != 0) return 1;
    }
    for (;;) {
      const int r = session->read({buffer, sizeof buffer});
      if (!flush(session, fd)) return 0;
      if (r > 0) {
        in->insert(in->end(), buffer, buffer + r);
        continue;
      }
      return r == tls::TlsSession::kWantRead ? 1 : 0;
    }
  }

  void serve(int fd) {
    std::unique_ptr<tls::TlsSession> session;
    if (tls_ != nullptr) {
      session = std::make_unique<tls::TlsSession>();
      std::string error;
      if (session->init(tls_->config(), nullptr, &error) != Status::kOk) return;
      const int r = session->handshake();  // the server waits for the ClientHello
      if (!flush(session.get(), fd) || (r != 0 && r != tls::TlsSession::kWantRead)) return;
    }
    std::vector<uint8_t> in;
    std::vector<uint8_t> discarded;  // what the device sends after a record was cut short
    bool answering = true;           // false once a reply cut a record short
    while (!listener_.stopping()) {
      wire::FrameHeader h;
      if (in.size() >= wire::kFrameHeaderBytes &&
          wire::read_frame_header({in.data(), in.size()}, &h) == Status::kOk &&
          in.size() >= wire::kFrameHeaderBytes + h.payload_length) {
        const size_t length = wire::kFrameHeaderBytes + h.payload_length;
        wire::Message m;
        const Status decoded = wire::decode_frame({in.data(), length}, &m);
        in.erase(in.begin(), in.begin() + ptrdiff_t(length));
        if (decoded != Status::kOk) return;  // a device's malformed frame: the test fails on the counts
        size_t index;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          index = received_.size();
          received_.push_back(m);
        }
        if (!answering) continue;
        const Reply reply = answer_(m, index);
        for (const std::vector<uint8_t>& frame : reply.frames) {
          if (session == nullptr) {
            if (!send_all(fd, frame.data(), frame.size(), reply.trickle_ms)) return;
          } else if (session->write({frame.data(), frame.size()}) != int(frame.size())) {
            return;
          }
        }
        if (session != nullptr) {
          if (reply.close_notify) session->close_notify();
          if (!flush(session.get(), fd, reply.cut_ciphertext_at != 0 ? reply.cut_ciphertext_at : SIZE_MAX,
                     reply.trickle_ms))
            return;
          answering = reply.cut_ciphertext_at == 0;
        }
        if (!send_all(fd, reply.raw.data(), reply.raw.size())) return;
        if (reply.close) return;
        continue;
      }
      if (receive(fd, answering ? session.get() : nullptr, answering ? &in : &discarded) == 0) return;
      discarded.clear();
    }
  }

  Answer answer_;
  const tls::TlsCredentials* tls_;
  std::atomic<uint32_t> handshakes_{0};
  std::mutex mutex_;
  std::vector<wire::Message> received_;
  LoopbackListener listener_;  // last: it stops before the members serve() uses go
};

// A loopback server that is no TLS server: on each connection it sends `greeting` (maybe nothing),
// then reads and drops what comes until the device closes.
class RawServer {
 public:
  explicit RawServer(std::string greeting)
      : greeting_(std::move(greeting)), listener_([this](int fd) { serve(fd); }) {}

  uint16_t port() const { return listener_.port(); }
  uint32_t connections() const { return listener_.connections(); }

 private:
  void serve(int fd) {
    bool open = greeting_.empty() ||
                ::send(fd, greeting_.data(), greeting_.size(), MSG_NOSIGNAL) == ssize_t(greeting_.size());
    while (open && !listener_.stopping()) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      char buffer[4096];
      open = ::recv(fd, buffer, sizeof buffer, 0) > 0;
    }
  }

  std::string greeting_;
  LoopbackListener listener_;  // last: it stops before greeting_ goes
};

std::vector<uint8_t> frame_of(const wire::Message& m) {
  std::vector<uint8_t> frame;
  REQUIRE(wire::encode(m, &frame) == Status::kOk);
  return frame;
}

// A scripted server's answer of one well-formed message.
ScriptedServer::Reply say(const wire::Message& m) {
  ScriptedServer::Reply reply;
  reply.frames.push_back(frame_of(m));
  return reply;
}

// A well-formed offer of round 7, model v3 (10 parameters), the whole model (100 bytes) to download.
wire::TaskOffer scripted_offer() {
  wire::TaskOffer offer;
  offer.round_id = 7;
  offer.round_nonce.assign(16, 0x5A);
  offer.model_version = 3;
  offer.model_bytes = 100;
  offer.model_digest.fill(0x11);
  offer.parameter_count = 10;
  offer.model_spec = "mlp:4-2";
  offer.tensors = {TensorDesc{"w", {10}, TensorDtype::kF32}};
  offer.uplink_codec = "bf16";
  offer.downlink_codec = "sparq:0.02";
  offer.codec_seed = 99;
  offer.deadline_ms = 30000;
  offer.max_upload_bytes = 1u << 20;
  offer.max_chunk_bytes = 64;
  offer.public_model_digest.fill(0x22);
  return offer;
}

// A scripted server's model that a device can download and check: ten values on the bf16 grid,
// as one whole-model download stream.
struct ScriptedModel {
  std::vector<float> values;
  std::vector<uint8_t> stream;
};

ScriptedModel scripted_model() {
  ScriptedModel m;
  for (int i = 0; i < 10; ++i) m.values.push_back(0.25f * float(i - 5));
  CodecSpec spec;
  REQUIRE(parse_codec_spec("bf16", &spec) == Status::kOk);
  std::vector<uint8_t> workspace(workspace_size(spec, m.values.size()) + 1);
  std::vector<uint8_t> encoding(encoded_bound(spec, m.values.size()));
  size_t written = 0;
  REQUIRE(encode(spec, {m.values.data(), m.values.size()}, 1, {workspace.data(), workspace.size()},
                 {encoding.data(), encoding.size()}, &written) == Status::kOk);
  m.stream.resize(written + kStreamPrefixBytes);
  size_t used = 0;
  REQUIRE(stream_append({encoding.data(), written}, {m.stream.data(), m.stream.size()}, &used) ==
          Status::kOk);
  m.stream.resize(used);
  return m;
}

// scripted_offer() of that model, whose download applies and checks.
wire::TaskOffer scripted_offer(const ScriptedModel& model) {
  wire::TaskOffer offer = scripted_offer();
  offer.model_bytes = model.stream.size();
  offer.model_digest = tls::sha256({model.stream.data(), model.stream.size()});
  offer.public_model_digest = tls::sha256_of_floats({model.values.data(), model.values.size()});
  return offer;
}

// The chunk of `stream` a ModelRequest asks for.
wire::ModelChunk chunk_for(const wire::ModelRequest& request, const std::vector<uint8_t>& stream) {
  wire::ModelChunk chunk;
  chunk.round_id = request.round_id;
  chunk.model_version = request.model_version;
  chunk.offset = request.offset;
  chunk.total_bytes = stream.size();
  const size_t length = size_t(std::min<uint64_t>(request.max_length, stream.size() - request.offset));
  chunk.data.assign(stream.begin() + ptrdiff_t(request.offset),
                    stream.begin() + ptrdiff_t(request.offset + length));
  return chunk;
}

// What a scripted server says as edgefl-server would to Hello (the offer) and ModelRequest (the
// model's chunk), into *reply; false for other messages.
bool answer_download(const wire::Message& m, const wire::TaskOffer& offer, const ScriptedModel& model,
                     ScriptedServer::Reply* reply) {
  if (std::holds_alternative<wire::Hello>(m)) {
    *reply = say(wire::Message{offer});
    return true;
  }
  if (const auto* request = std::get_if<wire::ModelRequest>(&m)) {
    *reply = say(wire::Message{chunk_for(*request, model.stream)});
    return true;
  }
  return false;
}

// A new upload's status: the server holds none of it.
wire::UploadStatus fresh_upload_status(const wire::UploadStart& start) {
  wire::UploadStatus status;
  status.round_id = start.round_id;
  status.upload_id = start.upload_id;
  status.offset = 0;
  status.total_bytes = start.total_bytes;
  return status;
}

// What a scripted server says as edgefl-server would through a whole round: answer_download(), a
// fresh upload status to UploadStart, and an ack accepting the Commit (`edit_ack`, when given,
// changes it first), into *reply; false for other messages.
bool answer_round(const wire::Message& m, const wire::TaskOffer& offer, const ScriptedModel& model,
                  ScriptedServer::Reply* reply, const std::function<void(wire::Ack*)>& edit_ack = nullptr) {
  if (answer_download(m, offer, model, reply)) return true;
  if (const auto* start = std::get_if<wire::UploadStart>(&m)) {
    *reply = say(wire::Message{fresh_upload_status(*start)});
    return true;
  }
  if (const auto* commit = std::get_if<wire::Commit>(&m)) {
    wire::Ack ack;
    ack.round_id = commit->round_id;
    ack.upload_id = commit->upload_id;
    ack.disposition = wire::UpdateDisposition::kAccepted;
    if (edit_ack) edit_ack(&ack);
    *reply = say(wire::Message{ack});
    return true;
  }
  return false;
}

// A plaintext device of the scripted server, with short waits.
ClientOptions scripted_device(uint16_t port) {
  ClientOptions o;
  o.port = port;
  o.insecure_plaintext_for_tests = true;
  o.sdk_version = "hostile-server-test";
  o.backoff_initial_ms = 20;
  o.backoff_max_ms = 100;
  o.max_attempts = 3;
  o.io_timeout_ms = 2000;
  o.connect_timeout_ms = 2000;
  o.max_wait_ms = 60000;
  o.give_up_after_ms = 60000;
  o.seed = 5;
  return o;
}

// The scripted server's mutual TLS: a development PKI, the server's credentials from it, and a
// device that holds one of its certificates.
struct ScriptedTls {
  TempDir tmp;
  Pki pki = make_pki(tmp / "pki", 1);
  std::unique_ptr<tls::TlsCredentials> server = load_server();

  ClientOptions device(uint16_t port) const {
    ClientOptions o = scripted_device(port);
    o.insecure_plaintext_for_tests = false;
    o.ca_file = pki.ca();
    o.cert_file = pki.cert("device-0001");
    o.key_file = pki.key("device-0001");
    return o;
  }

 private:
  std::unique_ptr<tls::TlsCredentials> load_server() const {
    std::string error;
    REQUIRE_MESSAGE(tls::tls_global_init(&error) == Status::kOk, error);
    tls::TlsFiles files;
    files.ca_file = pki.ca();
    files.cert_file = pki.server_cert();
    files.key_file = pki.server_key();
    std::unique_ptr<tls::TlsCredentials> out;
    REQUIRE_MESSAGE(tls::TlsCredentials::load(tls::TlsRole::kServer, files, &out, &error) == Status::kOk,
                    error);
    return out;
  }
};

// A scripted server's answer: `reply` to every Hello, nothing to other messages.
ScriptedServer::Answer answer_hello(ScriptedServer::Reply reply) {
  return [reply](const wire::Message& m, size_t) {
    return std::holds_alternative<wire::Hello>(m) ? reply : ScriptedServer::Reply{};
  };
}

// A TaskOffer's header and 10 of its 400 bytes: a frame the device waits to see the rest of.
std::vector<uint8_t> partial_offer_frame() {
  std::vector<uint8_t> partial = frame_header(wire::MessageType::kTaskOffer, 400);
  partial.insert(partial.end(), 10, 0x00);
  return partial;
}

// The scripted device of a plaintext server (tls null) or of one over `tls`.
ClientOptions scripted_device(uint16_t port, const ScriptedTls* tls) {
  return tls != nullptr ? tls->device(port) : scripted_device(port);
}

// An application-data record that is not the session's (48 bytes the device cannot authenticate).
std::vector<uint8_t> forged_record() {
  std::vector<uint8_t> record = {0x17, 0x03, 0x03, 0x00, 0x30};
  record.resize(record.size() + 0x30, 0xA5);
  return record;
}

struct ScriptedRound {
  Status status = Status::kOk;
  RoundResult result;
  std::string error;
  double seconds = 0;
};

ScriptedRound run_scripted_round(const ClientOptions& o) {
  ScriptedRound r;
  Client client(o);
  REQUIRE(client.init(&r.error) == Status::kOk);
  FixedTrainer trainer(1, 1);
  const auto t0 = Clock::now();
  r.status = client.run_round(trainer, &r.result, &r.error);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

}  // namespace

TEST_SUITE("e2e.hostile_server") {
  TEST_CASE(
      "offers of patches from a version the device does not hold: it asks for the whole model, then "
      "ends with kProtocolError instead of saying Hello for ever") {
    wire::TaskOffer offer = scripted_offer();
    offer.base_model_version = 2;  // the device holds nothing
    // A device that loops (it never waits, so give_up_after_ms never ends it) is ended by the
    // server: from the 50th message on, it drains.
    ScriptedServer server([&](const wire::Message& m, size_t index) -> ScriptedServer::Reply {
      if (!std::holds_alternative<wire::Hello>(m)) return {};
      if (index < 50) return say(wire::Message{offer});
      wire::RetryLater drain;
      drain.retry_after_ms = 1000;
      drain.reason = wire::RetryReason::kDraining;
      return say(wire::Message{drain});
    });
    const ScriptedRound r = run_scripted_round(scripted_device(server.port()));
    INFO(r.error);
    CHECK(r.status == Status::kProtocolError);
    CHECK(r.error.find("after 2 such offers") != std::string::npos);
    std::vector<uint32_t> flags;
    for (const wire::Message& m : server.received()) {
      if (const auto* hello = std::get_if<wire::Hello>(&m)) flags.push_back(hello->capability_flags);
    }
    REQUIRE(flags.size() == 3);
    CHECK((flags[0] & wire::kCapabilityNeedsWholeModel) == 0);
    CHECK((flags[1] & wire::kCapabilityNeedsWholeModel) == 0);
    CHECK((flags[2] & wire::kCapabilityNeedsWholeModel) != 0);  // the last Hello asked for it
    CHECK(server.count(wire::MessageType::kModelRequest) == 0);
    CHECK(server.count(wire::MessageType::kUploadStart) == 0);
  }

  TEST_CASE("a model chunk that does not continue the download: kProtocolError, nothing uploaded") {
    const wire::TaskOffer offer = scripted_offer();
    const std::vector<uint8_t> stream(offer.model_bytes, 0x33);
    ScriptedServer server([&](const wire::Message& m, size_t) -> ScriptedServer::Reply {
      if (std::holds_alternative<wire::Hello>(m)) return say(wire::Message{offer});
      if (const auto* request = std::get_if<wire::ModelRequest>(&m)) {
        wire::ModelChunk chunk = chunk_for(*request, stream);
        chunk.offset += 8;  // skips 8 bytes
        chunk.data.resize(16);
        return say(wire::Message{chunk});
      }
      return {};
    });
    const ScriptedRound r = run_scripted_round(scripted_device(server.port()));
    INFO(r.error);
    CHECK(r.status == Status::kProtocolError);
    CHECK(r.error.find("model chunk does not continue the download") != std::string::npos);
    CHECK(server.count(wire::MessageType::kModelRequest) == 1);
    CHECK(server.count(wire::MessageType::kUploadStart) == 0);
  }

  TEST_CASE(
      "a download that does not match the offer's SHA-256: kChecksumMismatch, nothing trained or "
      "uploaded, and the next round downloads from the start") {
    const wire::TaskOffer offer = scripted_offer();
    const std::vector<uint8_t> stream(offer.model_bytes, 0x44);  // not the offer's digest
    ScriptedServer server([&](const wire::Message& m, size_t) -> ScriptedServer::Reply {
      if (std::holds_alternative<wire::Hello>(m)) return say(wire::Message{offer});
      if (const auto* request = std::get_if<wire::ModelRequest>(&m)) {
        return say(wire::Message{chunk_for(*request, stream)});
      }
      return {};
    });
    ClientOptions o = scripted_device(server.port());
    Client client(o);
    std::string error;
    REQUIRE(client.init(&error) == Status::kOk);
    FixedTrainer trainer(1, 1);
    RoundResult result;
    CHECK(client.run_round(trainer, &result, &error) == Status::kChecksumMismatch);
    CHECK(error.find("SHA-256") != std::string::npos);
    CHECK(result.model_bytes == offer.model_bytes);
    const size_t requests = server.count(wire::MessageType::kModelRequest);
    CHECK(requests == 2);  // 100 bytes in chunks of at most 64
    CHECK(server.count(wire::MessageType::kUploadStart) == 0);
    // The bytes that failed the check are not resumed from: the next round asks for offset 0.
    CHECK(client.run_round(trainer, &result, &error) == Status::kChecksumMismatch);
    const std::vector<wire::Message> all = server.received();
    std::vector<uint64_t> offsets;
    for (const wire::Message& m : all) {
      if (const auto* request = std::get_if<wire::ModelRequest>(&m)) offsets.push_back(request->offset);
    }
    CHECK(offsets == std::vector<uint64_t>{0, 64, 0, 64});
  }

  TEST_CASE(
      "a server that refuses the device's protocol version: kProtocolVersionMismatch with the server's "
      "words, not retried") {
    wire::Error refusal;
    refusal.code = wire::ErrorCode::kVersionMismatch;
    refusal.message = "protocol version 1 is not spoken here: this server speaks version 2";
    ScriptedServer server(answer_hello(say(wire::Message{refusal})));
    const ScriptedRound r = run_scripted_round(scripted_device(server.port()));
    INFO(r.error);
    CHECK(r.status == Status::kProtocolVersionMismatch);
    CHECK(r.error == "server: " + refusal.message);
    CHECK(server.count(wire::MessageType::kHello) == 1);  // max_attempts is 3: an update is needed
    // participate() ends on it too, instead of backing off and trying again.
    Client client(scripted_device(server.port()));
    std::string error;
    REQUIRE(client.init(&error) == Status::kOk);
    FixedTrainer trainer(1, 1);
    CHECK(client.participate(trainer, 1, nullptr, &error) == Status::kProtocolVersionMismatch);
    CHECK(server.count(wire::MessageType::kHello) == 2);
  }

  TEST_CASE(
      "a server that answers in another protocol version: kProtocolVersionMismatch at once, not "
      "retried, in plaintext and over TLS") {
    for (const bool over_tls : {false, true}) {
      CAPTURE(over_tls);
      const std::unique_ptr<ScriptedTls> tls = over_tls ? std::make_unique<ScriptedTls>() : nullptr;
      ScriptedServer::Reply newer = say(wire::Message{scripted_offer()});
      newer.frames[0][2] = static_cast<uint8_t>(wire::kProtocolVersion + 1);
      ScriptedServer server(answer_hello(newer), tls ? tls->server.get() : nullptr);
      const ScriptedRound r = run_scripted_round(scripted_device(server.port(), tls.get()));
      INFO(r.error);
      CHECK(r.status == Status::kProtocolVersionMismatch);
      CHECK(r.error == "bad frame header from the server: protocol_version_mismatch");
      CHECK(server.count(wire::MessageType::kHello) == 1);
      CHECK(server.count(wire::MessageType::kModelRequest) == 0);
    }
  }

  TEST_CASE("an offer above the device's memory budget: kMemoryBudgetExceeded before any download") {
    wire::TaskOffer offer = scripted_offer();
    offer.parameter_count = 50'000'000;
    offer.tensors = {TensorDesc{"w", {50'000'000}, TensorDtype::kF32}};
    offer.model_bytes = 100'000'000;
    ScriptedServer server([&](const wire::Message& m, size_t) -> ScriptedServer::Reply {
      if (std::holds_alternative<wire::Hello>(m)) return say(wire::Message{offer});
      return {};
    });
    ClientOptions o = scripted_device(server.port());
    o.memory_budget_bytes = 16u << 20;
    const ScriptedRound r = run_scripted_round(o);
    INFO(r.error);
    CHECK(r.status == Status::kMemoryBudgetExceeded);
    CHECK(server.count(wire::MessageType::kHello) == 1);
    CHECK(server.count(wire::MessageType::kModelRequest) == 0);
  }

  TEST_CASE(
      "a frame header announcing more than its type's cap: kFrameTooLarge without reading the payload "
      "or waiting for it, in plaintext and over TLS") {
    for (const bool over_tls : {false, true}) {
      CAPTURE(over_tls);
      const std::unique_ptr<ScriptedTls> tls = over_tls ? std::make_unique<ScriptedTls>() : nullptr;
      ScriptedServer::Reply header_only;
      header_only.frames.push_back(frame_header(wire::MessageType::kTaskOffer, 1u << 30));  // no payload
      ScriptedServer server(answer_hello(header_only), tls ? tls->server.get() : nullptr);
      const ScriptedRound r = run_scripted_round(scripted_device(server.port(), tls.get()));
      INFO(r.error);
      CHECK(r.status == Status::kFrameTooLarge);
      CHECK(r.seconds < 1.5);  // io_timeout_ms is 2000: it did not wait for the payload
      CHECK(server.count(wire::MessageType::kHello) == 1);
    }
  }

  TEST_CASE(
      "a server that stops in the middle of a frame: each attempt ends at io_timeout_ms, and the round "
      "at max_attempts with kTimeout") {
    ScriptedServer::Reply partial;
    partial.frames.push_back(partial_offer_frame());  // then nothing (the connection stays open)
    ScriptedServer server(answer_hello(partial));
    ClientOptions o = scripted_device(server.port());
    o.io_timeout_ms = 400;
    o.max_attempts = 3;
    const ScriptedRound r = run_scripted_round(o);
    INFO(r.error);
    CHECK(r.status == Status::kTimeout);
    CHECK(server.count(wire::MessageType::kHello) == 3);  // one Hello per attempt
    CHECK(server.connections() == 3);
    CHECK(r.seconds >= 3 * 0.4 * 0.9);  // every attempt waited its whole timeout...
    CHECK(r.seconds < 3 * 0.4 + 2.0);   // ...and no longer (backoff at most 100 ms a time)
  }

  TEST_CASE(
      "a server that trickles its answer a byte at a time: each attempt ends at io_timeout_ms although "
      "bytes keep coming (a deadline for the whole message), in plaintext and over TLS") {
    for (const bool over_tls : {false, true}) {
      CAPTURE(over_tls);
      const std::unique_ptr<ScriptedTls> tls = over_tls ? std::make_unique<ScriptedTls>() : nullptr;
      ScriptedServer::Reply trickled;
      trickled.frames.push_back(frame_of(wire::Message{scripted_offer()}));
      trickled.trickle_ms = 20;  // about 10 s for the whole offer
      ScriptedServer server(answer_hello(trickled), tls ? tls->server.get() : nullptr);
      ClientOptions o = scripted_device(server.port(), tls.get());
      o.io_timeout_ms = 400;
      o.max_attempts = 2;
      const ScriptedRound r = run_scripted_round(o);
      INFO(r.error);
      CHECK(r.status == Status::kTimeout);
      CHECK(server.count(wire::MessageType::kHello) == 2);  // one Hello per attempt
      CHECK(server.count(wire::MessageType::kModelRequest) == 0);
      CHECK(r.seconds >= 2 * 0.4 * 0.9);
      CHECK(r.seconds < 2 * 0.4 + 2.0);
    }
  }

  TEST_CASE(
      "RetryLater again and again: the device waits as asked, then stops at max_wait_ms with kTimeout") {
    ScriptedServer server([&](const wire::Message& m, size_t) -> ScriptedServer::Reply {
      if (!std::holds_alternative<wire::Hello>(m)) return {};
      wire::RetryLater retry;
      retry.retry_after_ms = 100;
      retry.retry_window_ms = 0;
      retry.reason = wire::RetryReason::kNoRound;
      return say(wire::Message{retry});
    });
    ClientOptions o = scripted_device(server.port());
    o.max_wait_ms = 1000;
    const ScriptedRound r = run_scripted_round(o);
    INFO(r.error);
    CHECK(r.status == Status::kTimeout);
    const size_t hellos = server.count(wire::MessageType::kHello);
    CHECK(hellos >= 5);
    CHECK(hellos <= 12);
    CHECK(r.seconds >= 0.1 * double(hellos - 1) * 0.9);  // it slept between Hellos, as asked
    CHECK(server.count(wire::MessageType::kModelRequest) == 0);
  }

  TEST_CASE(
      "an ack for another upload: kProtocolError, and the update stays pending: the next round sends it "
      "again under the same upload id and hears it accepted") {
    const ScriptedModel model = scripted_model();
    const wire::TaskOffer offer = scripted_offer(model);
    std::atomic<int> commits{0};
    ScriptedServer server([&](const wire::Message& m, size_t) -> ScriptedServer::Reply {
      ScriptedServer::Reply reply;
      answer_round(m, offer, model, &reply, [&](wire::Ack* ack) {
        if (commits++ == 0) ack->upload_id[0] ^= 0xFF;  // the first ack names another upload
      });
      return reply;
    });
    Client client(scripted_device(server.port()));
    std::string error;
    REQUIRE(client.init(&error) == Status::kOk);
    FixedTrainer trainer(1, 1);
    RoundResult first;
    CHECK(client.run_round(trainer, &first, &error) == Status::kProtocolError);
    CHECK(error.find("the ack is for another upload") != std::string::npos);
    CHECK(first.outcome != RoundOutcome::kAccepted);
    RoundResult second;
    error.clear();
    CHECK_MESSAGE(client.run_round(trainer, &second, &error) == Status::kOk, error);
    CHECK(second.outcome == RoundOutcome::kAccepted);
    std::vector<wire::Commit> sent;
    for (const wire::Message& m : server.received()) {
      if (const auto* commit = std::get_if<wire::Commit>(&m)) sent.push_back(*commit);
    }
    REQUIRE(sent.size() == 2);
    CHECK(sent[0].upload_id == sent[1].upload_id);  // the same update, not a new one
    CHECK(sent[0].digest == sent[1].digest);
    // The model was kept (it checked): the second round downloads nothing.
    bool committed = false;
    size_t requests_after = 0;
    for (const wire::Message& m : server.received()) {
      committed = committed || std::holds_alternative<wire::Commit>(m);
      requests_after += committed && std::holds_alternative<wire::ModelRequest>(m);
    }
    CHECK(server.count(wire::MessageType::kModelRequest) >= 1);
    CHECK(requests_after == 0);
  }

  TEST_CASE("an upload status for another size: kProtocolError before any chunk or commit") {
    const ScriptedModel model = scripted_model();
    const wire::TaskOffer offer = scripted_offer(model);
    ScriptedServer server([&](const wire::Message& m, size_t) -> ScriptedServer::Reply {
      ScriptedServer::Reply reply;
      if (answer_download(m, offer, model, &reply)) return reply;
      if (const auto* start = std::get_if<wire::UploadStart>(&m)) {
        wire::UploadStatus status = fresh_upload_status(*start);
        ++status.total_bytes;
        return say(wire::Message{status});
      }
      return {};
    });
    const ScriptedRound r = run_scripted_round(scripted_device(server.port()));
    INFO(r.error);
    CHECK(r.status == Status::kProtocolError);
    CHECK(r.error.find("upload status does not match this upload") != std::string::npos);
    CHECK(server.count(wire::MessageType::kUploadStart) == 1);
    CHECK(server.count(wire::MessageType::kUploadChunk) == 0);
    CHECK(server.count(wire::MessageType::kCommit) == 0);
  }

  TEST_CASE("a reply the phase does not expect: kProtocolError naming it, nothing uploaded") {
    const wire::TaskOffer offer = scripted_offer();
    ScriptedServer server([&](const wire::Message& m, size_t) -> ScriptedServer::Reply {
      // A TaskOffer to the Hello, and again to the ModelRequest.
      if (std::holds_alternative<wire::Hello>(m) || std::holds_alternative<wire::ModelRequest>(m)) {
        return say(wire::Message{offer});
      }
      return {};
    });
    const ScriptedRound r = run_scripted_round(scripted_device(server.port()));
    INFO(r.error);
    CHECK(r.status == Status::kProtocolError);
    CHECK(r.error.find("unexpected task_offer") != std::string::npos);
    CHECK(server.count(wire::MessageType::kUploadStart) == 0);
  }

  // The same server over mutual TLS, where the device reads through its TLS layer: frames split
  // or cut inside records, and records that are not the session's.

  TEST_CASE("over mutual TLS: a whole round with the scripted server, the update accepted") {
    const ScriptedTls tls;
    const ScriptedModel model = scripted_model();
    const wire::TaskOffer offer = scripted_offer(model);
    ScriptedServer server(
        [&](const wire::Message& m, size_t) -> ScriptedServer::Reply {
          ScriptedServer::Reply reply;
          answer_round(m, offer, model, &reply);
          return reply;
        },
        tls.server.get());
    const ScriptedRound r = run_scripted_round(tls.device(server.port()));
    INFO(r.error);
    CHECK(r.status == Status::kOk);
    CHECK(r.result.outcome == RoundOutcome::kAccepted);
    // Two connections, both over TLS: the download, then the upload (the device releases its
    // connection while it trains).
    CHECK(server.connections() == 2);
    CHECK(server.handshakes() == 2);
    CHECK(server.count(wire::MessageType::kCommit) == 1);
  }

  TEST_CASE(
      "over TLS, a record cut short (the connection left open): each attempt ends at io_timeout_ms, "
      "the round at max_attempts with kTimeout, nothing downloaded") {
    const ScriptedTls tls;
    ScriptedServer::Reply cut;
    cut.frames.push_back(frame_of(wire::Message{scripted_offer()}));
    cut.cut_ciphertext_at = 20;  // a record header and 15 bytes of its body
    ScriptedServer server(answer_hello(cut), tls.server.get());
    ClientOptions o = tls.device(server.port());
    o.io_timeout_ms = 400;
    o.max_attempts = 3;
    const ScriptedRound r = run_scripted_round(o);
    INFO(r.error);
    CHECK(r.status == Status::kTimeout);
    CHECK(server.handshakes() == 3);
    CHECK(server.count(wire::MessageType::kHello) == 3);  // one Hello per attempt
    CHECK(server.count(wire::MessageType::kModelRequest) == 0);
    CHECK(r.seconds >= 3 * 0.4 * 0.9);
    CHECK(r.seconds < 3 * 0.4 + 3.0);  // handshakes and backoff (at most 100 ms a time)
  }

  TEST_CASE(
      "over TLS, a forged record in answer to Hello on every fresh connection: read as a refused "
      "certificate (a TLS 1.3 refusal's alert fails the same MAC check), kTlsHandshakeFailed after three") {
    const ScriptedTls tls;
    ScriptedServer::Reply forged;
    forged.raw = forged_record();
    ScriptedServer server(answer_hello(forged), tls.server.get());
    ClientOptions o = tls.device(server.port());
    o.max_attempts = 5;  // the refusal rule ends it before max_attempts
    const ScriptedRound r = run_scripted_round(o);
    INFO(r.error);
    CHECK(r.status == Status::kTlsHandshakeFailed);
    CHECK(r.error.find("refuses this device's certificate") != std::string::npos);
    CHECK(r.error.find("MAC") != std::string::npos);  // the last error, as it was
    CHECK(server.handshakes() == 3);
    CHECK(server.count(wire::MessageType::kModelRequest) == 0);
  }

  TEST_CASE(
      "over TLS, a forged record in the middle of the download: kTlsError (TLS read failed) at "
      "max_attempts, never taken for a refusal, nothing uploaded") {
    const ScriptedTls tls;
    const ScriptedModel model = scripted_model();
    const wire::TaskOffer offer = scripted_offer(model);
    ScriptedServer server(
        [&](const wire::Message& m, size_t) {
          ScriptedServer::Reply reply;
          if (std::holds_alternative<wire::Hello>(m)) return say(wire::Message{offer});
          if (std::holds_alternative<wire::ModelRequest>(m)) reply.raw = forged_record();
          return reply;
        },
        tls.server.get());
    ClientOptions o = tls.device(server.port());
    o.max_attempts = 3;
    const ScriptedRound r = run_scripted_round(o);
    INFO(r.error);
    CHECK(r.status == Status::kTlsError);
    CHECK(r.error.find("TLS read failed") != std::string::npos);
    CHECK(r.error.find("refuses") == std::string::npos);
    CHECK(server.handshakes() == 3);  // every attempt reconnected
    CHECK(server.count(wire::MessageType::kModelRequest) == 3);
    CHECK(server.count(wire::MessageType::kUploadStart) == 0);
    CHECK(r.seconds < 3.0);  // no timeout waited
  }

  TEST_CASE(
      "a server that accepts the connection but never answers the ClientHello: each handshake ends at "
      "connect_timeout_ms, the round at max_attempts with kConnectionFailed naming the timeout") {
    const ScriptedTls tls;
    RawServer server("");
    ClientOptions o = tls.device(server.port());
    o.connect_timeout_ms = 300;
    o.max_attempts = 3;
    const ScriptedRound r = run_scripted_round(o);
    INFO(r.error);
    CHECK(r.status == Status::kConnectionFailed);
    CHECK(r.error.find("gave up after 3 connection attempts") != std::string::npos);
    CHECK(r.error.find("TLS handshake") != std::string::npos);
    CHECK(r.error.find("timed out") != std::string::npos);
    CHECK(server.connections() == 3);
    CHECK(r.seconds >= 3 * 0.3 * 0.9);
    CHECK(r.seconds < 3 * 0.3 + 2.0);
  }

  TEST_CASE(
      "a port that answers in plaintext (an HTTP server, not edgefl-server): kTlsHandshakeFailed at once, "
      "not retried") {
    const ScriptedTls tls;
    RawServer server("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    ClientOptions o = tls.device(server.port());
    o.max_attempts = 5;
    const ScriptedRound r = run_scripted_round(o);
    INFO(r.error);
    CHECK(r.status == Status::kTlsHandshakeFailed);
    CHECK(r.error.find("TLS handshake with 127.0.0.1:" + std::to_string(server.port()) + " failed") !=
          std::string::npos);
    CHECK(server.connections() == 1);
    CHECK(r.seconds < 1.5);
  }

  TEST_CASE(
      "over TLS, close_notify in the middle of a frame: kConnectionFailed (the server closed the "
      "connection), nothing downloaded") {
    const ScriptedTls tls;
    ScriptedServer::Reply closing;
    closing.frames.push_back(partial_offer_frame());
    closing.close_notify = true;
    ScriptedServer server(answer_hello(closing), tls.server.get());
    const ScriptedRound r = run_scripted_round(tls.device(server.port()));
    INFO(r.error);
    CHECK(r.status == Status::kConnectionFailed);
    CHECK(r.error.find("the server closed the connection") != std::string::npos);
    CHECK(r.seconds < 1.5);  // not a timeout
    CHECK(server.count(wire::MessageType::kModelRequest) == 0);
  }
}
