// server/src/session.h: device connections. Each is a coroutine on the server's io_context:
// TLS (or the test-only plaintext) around length-prefixed frames, every wait bounded by a
// watchdog, every message answered by the RoundManager; at the connection cap a small reserve of
// sessions only answers RetryLater(ServerBusy).
#ifndef EDGEFL_SERVER_SESSION_H_
#define EDGEFL_SERVER_SESSION_H_

#include <asio.hpp>

#include "context.h"

namespace edgefl::server {

// Accepts device connections until the acceptor closes, one session coroutine each.
asio::awaitable<void> accept_devices(Context* ctx, asio::ip::tcp::acceptor* acceptor);

}  // namespace edgefl::server

#endif  // EDGEFL_SERVER_SESSION_H_
