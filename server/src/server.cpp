#include "server.h"

#include <mbedtls/ssl.h>
#include <asio.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>

#include "context.h"
#include "http.h"
#include "log.h"
#include "metrics.h"
#include "postgres_storage.h"
#include "session.h"
#include "sqlite_storage.h"

namespace edgefl::server {
namespace {

using asio::ip::tcp;

// One line per ended round, for people watching (the log has the same as events).
void print_progress(const RoundManager& rounds, size_t* printed) {
  const auto& history = rounds.history();
  for (; *printed < history.size(); ++*printed) {
    const auto& r = history[*printed];
    char acc[32] = "";
    if (r.test_accuracy >= 0) std::snprintf(acc, sizeof acc, "test acc %.4f, ", double(r.test_accuracy));
    const double bf16 = double(rounds.bf16_update_bytes()) * r.accepted;
    std::printf(
        "round %3llu %-9s %u updates, %s%7.1f kB up, %7.1f kB down (bf16: %7.1f kB each way), %6.2f s\n",
        static_cast<unsigned long long>(r.round_id), round_state_name(r.state), r.accepted, acc,
        double(r.upload_bytes) / 1e3, double(r.download_bytes) / 1e3, bf16 / 1e3, r.seconds);
  }
  std::fflush(stdout);
}

void print_summary(const RoundManager& rounds, const ServerOptions& options) {
  const auto& history = rounds.history();
  uint64_t up = 0, down = 0, updates = 0;
  std::printf("\n%-6s %-10s %8s %12s %12s %9s %9s\n", "round", "state", "updates", "bytes up", "bytes down",
              "seconds", "test acc");
  for (const auto& r : history) {
    char acc[16] = "-";
    if (r.test_accuracy >= 0) std::snprintf(acc, sizeof acc, "%.4f", double(r.test_accuracy));
    std::printf("%-6llu %-10s %8u %12llu %12llu %9.2f %9s\n", static_cast<unsigned long long>(r.round_id),
                round_state_name(r.state), r.accepted, static_cast<unsigned long long>(r.upload_bytes),
                static_cast<unsigned long long>(r.download_bytes), r.seconds, acc);
    up += r.upload_bytes;
    down += r.download_bytes;
    updates += r.accepted;
  }
  // The 16-bit baseline both ways: each accepted update uploaded in bf16, and its device's model
  // downloaded whole in bf16 (what a server without patches sends every round).
  const double bf16 = double(rounds.bf16_update_bytes()) * double(updates);
  std::printf("\n%llu updates; up: %llu bytes with '%s' (%.1f kB per update)",
              static_cast<unsigned long long>(updates), static_cast<unsigned long long>(up),
              options.rounds.uplink_codec.c_str(), updates ? double(up) / double(updates) / 1e3 : 0.0);
  if (updates > 0 && bf16 > 0) std::printf(", %.3fx bf16 uploads (%.0f bytes)", double(up) / bf16, bf16);
  std::printf(";\ndown: %llu bytes of patches ('%s') and whole bf16 models",
              static_cast<unsigned long long>(down), options.rounds.downlink_codec.c_str());
  if (updates > 0 && bf16 > 0) {
    std::printf(
        ", %.3fx whole bf16 models every round (%.0f bytes);\nboth ways: %.3fx bf16 both ways, %.1f times "
        "fewer bytes",
        double(down) / bf16, bf16, double(up + down) / (2 * bf16), 2 * bf16 / double(up + down));
  }
  std::printf(".\nFinal model version %llu: %s/global.safetensors\n",
              static_cast<unsigned long long>(rounds.model_version()), rounds.model_dir().c_str());
  std::fflush(stdout);
  if (!options.summary_file.empty()) {
    std::ofstream out(options.summary_file);
    for (const auto& r : history) {
      out << "{\"round\":" << r.round_id << ",\"state\":\"" << round_state_name(r.state)
          << "\",\"updates\":" << r.accepted << ",\"upload_bytes\":" << r.upload_bytes
          << ",\"download_bytes\":" << r.download_bytes << ",\"seconds\":" << r.seconds
          << ",\"test_accuracy\":";
      if (r.test_accuracy >= 0)
        out << r.test_accuracy;
      else
        out << "null";
      out << ",\"bf16_upload_bytes\":" << rounds.bf16_update_bytes() * r.accepted;
      if (r.dp_epsilon >= 0) out << ",\"dp_epsilon\":" << r.dp_epsilon;
      out << "}\n";
    }
  }
}

// Peak resident set size of this process (VmHWM), kB; 0 where /proc is absent.
uint64_t peak_rss_kb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10);
  }
  return 0;
}

// The server's TLS credentials; null with --insecure-plaintext-for-tests. False: logged.
bool load_credentials(const ServerOptions& options, std::unique_ptr<tls::TlsCredentials>* credentials) {
  if (options.insecure_plaintext_for_tests) {
    log_warn("INSECURE_PLAINTEXT_FOR_TESTS")
        .kv("message",
            "TLS is off: anyone can connect and impersonate any device. Never use this outside tests.");
    return true;
  }
  std::string error;
  if (tls::tls_global_init(&error) != Status::kOk ||
      tls::TlsCredentials::load(tls::TlsRole::kServer, options.tls, credentials, &error) != Status::kOk) {
    log_error("tls_credentials").kv("error", error);
    return false;
  }
  return true;
}

// One server per state directory: a second one would race the first on the ledger. Several
// aggregators share one directory, each under its own lock: two processes with one name would
// both take its part. The lock lives as long as the process (the descriptor is never closed).
// False: logged.
bool lock_state_dir(const std::string& state_dir, const std::string& aggregator_id) {
  const std::string lock_path =
      state_dir + (aggregator_id.empty() ? "/server.lock" : "/aggregator-" + aggregator_id + ".lock");
  const int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    log_error("state_dir_locked")
        .kv("path", lock_path)
        .kv("error", lock_fd < 0 ? std::strerror(errno)
                     : aggregator_id.empty()
                         ? "another edgefl-server uses this state directory"
                         : "another edgefl-server runs as aggregator '" + aggregator_id + "'");
    return false;
  }
  return true;
}

// Binds and listens on host:port (port 0: any free one). `backlog` connections may wait.
std::error_code listen_on(tcp::acceptor* acceptor, const std::string& host, uint16_t port, int backlog) {
  std::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) return ec;
  const tcp::endpoint endpoint(address, port);
  acceptor->open(endpoint.protocol(), ec);
  if (!ec) acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor->bind(endpoint, ec);
  if (!ec) acceptor->listen(backlog, ec);
  return ec;
}

// '<port> <metrics port>' into `path`, atomically (tests and scripts wait for it).
void write_port_file(const std::string& path, uint16_t port, uint16_t metrics_port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << port << " " << metrics_port << "\n";
  }
  std::rename(tmp.c_str(), path.c_str());
}

// Live revocation: the CRL and the deny list are read again on SIGHUP and when either file
// changes (poll() once a second). Files that do not parse or a CRL that fails its checks keep
// both lists in force and say why.
class RevocationWatch {
 public:
  RevocationWatch(const ServerOptions& options, tls::TlsCredentials* credentials)
      : options_(options),
        credentials_(credentials),
        enabled_(credentials != nullptr && (!options.tls.deny_file.empty() || !options.tls.crl_file.empty())),
        deny_(stamp_of(options.tls.deny_file)),
        crl_(stamp_of(options.tls.crl_file)) {}

  void reload(const char* trigger) {
    if (!enabled_) return;
    deny_ = stamp_of(options_.tls.deny_file);
    crl_ = stamp_of(options_.tls.crl_file);
    std::string e;
    if (credentials_->reload_revocation(&e) == Status::kOk) {
      log_info("revocation_reloaded")
          .kv("trigger", trigger)
          .kv("crl", options_.tls.crl_file)
          .kv("deny", options_.tls.deny_file);
    } else {
      log_error("revocation_reload_failed")
          .kv("trigger", trigger)
          .kv("error", e)
          .kv("kept", "the previous lists");
    }
  }
  void poll() {
    if (enabled_ &&
        (!(stamp_of(options_.tls.deny_file) == deny_) || !(stamp_of(options_.tls.crl_file) == crl_))) {
      reload("file_changed");
    }
  }

 private:
  struct Stamp {
    ino_t ino = 0;
    off_t size = -1;
    timespec mtime{};
    bool operator==(const Stamp& o) const {
      return ino == o.ino && size == o.size && mtime.tv_sec == o.mtime.tv_sec &&
             mtime.tv_nsec == o.mtime.tv_nsec;
    }
  };
  static Stamp stamp_of(const std::string& path) {
    Stamp out;
    struct stat st {};
    if (!path.empty() && ::stat(path.c_str(), &st) == 0) out = Stamp{st.st_ino, st.st_size, st.st_mtim};
    return out;
  }
  const ServerOptions& options_;
  tls::TlsCredentials* credentials_;
  const bool enabled_;
  Stamp deny_, crl_;
};

void log_stopped(const Metrics& metrics) {
  const uint64_t handshakes = metrics.handshakes_ok.load();
  log_info("stopped")
      .kv("rounds_committed", metrics.rounds_committed.load())
      .kv("rounds_abandoned", metrics.rounds_abandoned.load())
      .kv("updates_accepted", metrics.updates_accepted.load())
      .kv("p50_upload_to_ack_s", metrics.upload_latency_quantile(0.5))
      .kv("p99_upload_to_ack_s", metrics.upload_latency_quantile(0.99))
      .kv("peak_rss_kb", peak_rss_kb())
      .kv("handshakes", handshakes)
      .kv("connections_peak", metrics.connections_open_peak.load())
      .kv("connections_abandoned", metrics.connections_abandoned.load())
      .kv("connections_timed_out", metrics.connections_timed_out.load())
      .kv("server_busy", metrics.server_busy.load())
      .kv("handshake_ms_mean",
          handshakes ? double(metrics.handshake_us_total.load()) / 1e3 / double(handshakes) : 0.0)
      .kv("ledger_write_ms_mean",
          metrics.ledger_writes.load() != 0
              ? double(metrics.ledger_write_us_total.load()) / 1e3 / double(metrics.ledger_writes.load())
              : 0.0);
}

}  // namespace

int run_server(const ServerOptions& options) {
  std::unique_ptr<tls::TlsCredentials> credentials;
  if (!load_credentials(options, &credentials) ||
      !lock_state_dir(options.rounds.state_dir, options.rounds.aggregator_id))
    return 2;
  std::string error;
  std::unique_ptr<Storage> storage;
  const bool postgres = !options.state_url.empty();
  const Status opened = postgres
                            ? open_postgres_storage(options.state_url, &storage, &error)
                            : open_sqlite_storage(options.rounds.state_dir + "/state.db", &storage, &error);
  if (opened != Status::kOk) {
    log_error("storage_open").kv("backend", postgres ? "postgresql" : "sqlite").kv("error", error);
    return 2;
  }
  Metrics metrics;
  RoundManager rounds(options.rounds, storage.get(), &metrics);
  if (rounds.start(unix_ms_now(), &error) != Status::kOk) {
    log_error("start_failed").kv("error", error);
    return 2;
  }

  asio::io_context io(1);
  Context ctx;
  ctx.options = &options;
  ctx.rounds = &rounds;
  ctx.metrics = &metrics;
  ctx.credentials = credentials.get();
  tcp::acceptor acceptor(io), http(io);
  std::error_code ec =
      listen_on(&acceptor, options.listen_host, options.port, asio::socket_base::max_listen_connections);
  if (ec) {
    log_error("listen_failed")
        .kv("address", options.listen_host)
        .kv("port", unsigned(options.port))
        .kv("error", ec.message());
    return 2;
  }
  uint16_t metrics_port = 0;
  if (options.metrics_port != 0 || !options.port_file.empty()) {
    ec = listen_on(&http, options.metrics_host, options.metrics_port, 64);
    if (ec) {
      log_error("metrics_listen_failed").kv("port", unsigned(options.metrics_port)).kv("error", ec.message());
      return 2;
    }
    metrics_port = http.local_endpoint().port();
    asio::co_spawn(io, accept_http(&ctx, &http), asio::detached);
  }
  const uint16_t port = acceptor.local_endpoint().port();
  log_info("listening")
      .kv("address", options.listen_host)
      .kv("port", unsigned(port))
      .kv("metrics_port", unsigned(metrics_port))
      .kv("tls", options.insecure_plaintext_for_tests ? "off (INSECURE, tests only)" : "mutual")
      .kv("model", options.rounds.model_spec)
      .kv("codec", options.rounds.uplink_codec)
      .kv("parameters", uint64_t{rounds.parameter_count()});
  if (!options.port_file.empty()) write_port_file(options.port_file, port, metrics_port);
  asio::co_spawn(io, accept_devices(&ctx, &acceptor), asio::detached);

  auto stop = [&](const char* why) {
    if (ctx.stopping) return;
    ctx.stopping = true;
    log_info("stopping").kv("reason", why);
    std::error_code ignored;
    acceptor.close(ignored);
    http.close(ignored);
    io.stop();
  };
  RevocationWatch revocation(options, credentials.get());
  asio::signal_set hangup(io, SIGHUP);
  std::function<void(std::error_code, int)> on_hangup = [&](std::error_code e, int) {
    if (e) return;
    revocation.reload("SIGHUP");
    hangup.async_wait(on_hangup);
  };
  hangup.async_wait(on_hangup);
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](std::error_code e, int sig) {
    if (!e) stop(sig == SIGINT ? "SIGINT" : "SIGTERM");
  });
  // Round deadlines, revocation files, and the drain after the last round.
  asio::steady_timer ticker(io);
  std::optional<int64_t> drain_start;  // Unix ms: the last round ended
  size_t printed = 0;
  uint32_t ticks = 0;
  std::function<void(std::error_code)> on_tick = [&](std::error_code e) {
    if (e || ctx.stopping) return;
    rounds.tick(unix_ms_now());
    if (++ticks % 10 == 0) revocation.poll();
    if (options.progress) print_progress(rounds, &printed);
    if (rounds.finished()) {
      // Drain until the last come-back time handed out (by any aggregator) has passed and no
      // device has said Hello for --drain: every device still trying (turned away, backing off
      // after a failed connection, slowed by load) hears "draining" before the server goes.
      const int64_t now = unix_ms_now();
      if (!drain_start) drain_start = now;
      const int64_t quiet_since = std::max(*drain_start, rounds.last_checkin_ms());
      // Devices of a secure last round poll for their vectors' outcome (every 200 ms): they are
      // waited for, up to kOutcomeWaitMs, so that none takes an abandoned update for counted.
      constexpr int64_t kOutcomeWaitMs = 10000;
      const bool outcomes_told = !rounds.awaiting_secure_outcomes() || now - *drain_start >= kOutcomeWaitMs;
      if (now >= rounds.drain_until_unix_ms(now) && now - quiet_since >= int64_t{options.drain_ms} &&
          outcomes_told)
        return stop("all rounds done");
    }
    ticker.expires_after(std::chrono::milliseconds(100));
    ticker.async_wait(on_tick);
  };
  ticker.expires_after(std::chrono::milliseconds(100));
  ticker.async_wait(on_tick);

  io.run();
  if (options.progress) print_progress(rounds, &printed);
  log_stopped(metrics);
  print_summary(rounds, options);
  return 0;
}

}  // namespace edgefl::server
