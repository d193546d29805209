// server/src/http.h: the metrics and health endpoint: GET /metrics (Prometheus text) and
// GET /healthz, one bounded request per connection.
#ifndef EDGEFL_SERVER_HTTP_H_
#define EDGEFL_SERVER_HTTP_H_

#include <asio.hpp>

#include "context.h"

namespace edgefl::server {

// Accepts HTTP connections until the acceptor closes.
asio::awaitable<void> accept_http(Context* ctx, asio::ip::tcp::acceptor* acceptor);

}  // namespace edgefl::server

#endif  // EDGEFL_SERVER_HTTP_H_
