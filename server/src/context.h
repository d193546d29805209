// server/src/context.h: what the server's coroutines share (one io_context thread: no locks),
// and the watchdog that bounds every wait of a connection.
#ifndef EDGEFL_SERVER_CONTEXT_H_
#define EDGEFL_SERVER_CONTEXT_H_

#include <asio.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "metrics.h"
#include "rounds.h"
#include "server.h"
#include "tls/tls_credentials.h"

namespace edgefl::server {

using Clock = std::chrono::steady_clock;

// The server's state as its coroutines see it. Owned by run_server(); outlives every session.
struct Context {
  const ServerOptions* options = nullptr;
  RoundManager* rounds = nullptr;
  Metrics* metrics = nullptr;
  const tls::TlsCredentials* credentials = nullptr;
  uint64_t next_connection = 1;
  bool stopping = false;
  uint32_t busy_sessions = 0;  // handshakes under way only to answer ServerBusy
  uint32_t handshakes = 0;     // TLS handshakes under way (accepted, not yet finished or failed)
  double busy_tokens = 0;      // busy answers allowed now (refilled per second)
  Clock::time_point busy_refilled{};
  std::map<std::string, uint32_t> per_device;  // open sessions by device id
};

// Closes the socket when the deadline passes; the owner moves the deadline before each wait.
struct Watchdog {
  explicit Watchdog(asio::any_io_executor ex) : timer(ex) {}
  asio::steady_timer timer;
  bool fired = false;
  void arm(uint32_t ms) { timer.expires_after(std::chrono::milliseconds(ms)); }
};

// Runs until *alive is false: closes `socket` when `dog`'s deadline passes.
asio::awaitable<void> watch(std::shared_ptr<Watchdog> dog, asio::ip::tcp::socket* socket,
                            std::shared_ptr<bool> alive);

}  // namespace edgefl::server

#endif  // EDGEFL_SERVER_CONTEXT_H_
