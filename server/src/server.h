// server/src/server.h: edgefl-server's network side: a TLS listener whose sessions speak the wire
// protocol (edgefl/wire.h) to RoundManager, an HTTP listener for /metrics and /healthz, a 100 ms
// tick for round deadlines, and SIGINT/SIGTERM handling. Everything runs on one thread (one
// io_context, C++20 coroutines), so RoundManager needs no locks.
//
// Every connection is bounded: a handshake timeout, an idle timeout between frames, frame caps
// checked before the payload is read (UploadChunk: the offered chunk size), buffers that grow as
// bytes arrive and shrink between messages, at most max_connections at once (then RetryLater
// ServerBusy from a small reserve of handshakes), at most max_connections_per_device per device. A device is
// the subject CN of its client certificate; refused devices are told why (Error kUnauthorized) and logged.
#ifndef EDGEFL_SERVER_SERVER_H_
#define EDGEFL_SERVER_SERVER_H_

#include <stdint.h>

#include <string>

#include "rounds.h"
#include "tls/tls_credentials.h"

namespace edgefl::server {

struct ServerOptions {
  std::string listen_host = "127.0.0.1";
  uint16_t port = 7443;  // 0: an ephemeral port (written to port_file)
  std::string metrics_host = "127.0.0.1";
  uint16_t metrics_port = 0;  // 0: no metrics listener
  std::string port_file;      // if set: "<port> <metrics port>\n" written once listening
  tls::TlsFiles tls;
  bool insecure_plaintext_for_tests = false;  // no TLS, device id = "insecure-<connection>"
  uint32_t handshake_timeout_ms = 10000;
  uint32_t idle_timeout_ms = 60000;
  uint32_t max_connections = 1024;
  // At the cap, up to busy_reserve further connections at once are handshaken and answered
  // RetryLater{ServerBusy, busy_retry_after_ms, busy_retry_window_ms}; more are closed.
  uint32_t busy_reserve = 64;
  double busy_per_second = 50;  // busy answers per second at most; the rest are closed
  uint32_t busy_retry_after_ms = 2000;
  uint32_t busy_retry_window_ms = 8000;
  uint32_t max_connections_per_device = 4;  // more at once: Error{kRateLimited}
  // TLS handshakes under way at once; while at the limit no connection is accepted (the kernel's
  // backlog holds them), so that under a herd of devices the admitted handshakes finish in a
  // fraction of a second instead of all of them running together past their timeouts.
  uint32_t max_handshakes = 128;
  uint32_t drain_ms = 3000;  // after the last round: answer kDraining this long, then exit
  std::string summary_file;  // if set: the per-round summary as JSON lines
  bool progress = false;     // one human-readable line per round on stdout
  // Where the rounds, the ledger and the settings live: "" = SQLite in rounds.state_dir/state.db;
  // a postgresql:// URL = that PostgreSQL database (postgres_storage.h). Model files stay in
  // rounds.state_dir either way.
  std::string state_url;
  RoundOptions rounds;
};

// Runs until the configured rounds are done (plus drain_ms) or a signal arrives. Returns the
// process exit code (0 on a clean finish). Logs every event on stderr; prints the summary table on
// stdout at the end.
int run_server(const ServerOptions& options);

}  // namespace edgefl::server

#endif  // EDGEFL_SERVER_SERVER_H_
