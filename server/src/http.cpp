#include "http.h"

#include <string>

namespace edgefl::server {
namespace {

using asio::awaitable;
using asio::ip::tcp;
constexpr size_t kMaxHttpRequestBytes = 8 * 1024;

// GET /metrics (Prometheus text) and GET /healthz (200 "ok ..." when ready, 503 with the reason);
// anything else 404. HTTP/1.0 style: one
// request per connection, bounded size and time.
awaitable<void> serve_http(Context* ctx, tcp::socket socket) {
  auto dog = std::make_shared<Watchdog>(socket.get_executor());
  auto alive = std::make_shared<bool>(true);
  dog->arm(5000);
  asio::co_spawn(socket.get_executor(), watch(dog, &socket, alive), asio::detached);
  std::string request;
  char buffer[1024];
  while (request.find("\r\n\r\n") == std::string::npos && request.find("\n\n") == std::string::npos) {
    std::error_code ec;
    const size_t n =
        co_await socket.async_read_some(asio::buffer(buffer), asio::redirect_error(asio::use_awaitable, ec));
    if (ec || request.size() + n > kMaxHttpRequestBytes) {
      *alive = false;
      dog->timer.cancel();
      co_return;
    }
    request.append(buffer, n);
  }
  std::string status = "200 OK", type = "text/plain; version=0.0.4; charset=utf-8", body;
  if (request.rfind("GET /metrics ", 0) == 0 || request.rfind("GET /metrics?", 0) == 0) {
    body = ctx->metrics->render();
  } else if (request.rfind("GET /healthz ", 0) == 0) {
    type = "text/plain; charset=utf-8";
    // Readiness, for a load balancer: 503 while stopping, or while the state store does not answer
    // (updates could not be acknowledged). After the last round the server stays in rotation: its
    // answer, "draining", is what every device coming back must hear.
    std::string storage_error;
    if (ctx->stopping) {
      status = "503 Service Unavailable";
      body = "stopping\n";
    } else if (ctx->rounds->finished()) {
      body = "draining: the last round is over\n";
    } else if (ctx->rounds->check_storage(&storage_error) != Status::kOk) {
      status = "503 Service Unavailable";
      for (char& c : storage_error) {
        if (c == '\n' || c == '\r' || c == '\t') c = ' ';
      }
      body = "state store unavailable: " + storage_error + "\n";
    } else {
      body = "ok round=" + std::to_string(ctx->metrics->round_id.load()) +
             " model_version=" + std::to_string(ctx->metrics->model_version.load()) + "\n";
    }
  } else {
    status = "404 Not Found";
    type = "text/plain; charset=utf-8";
    body = "try /metrics or /healthz\n";
  }
  std::string response = "HTTP/1.1 " + status + "\r\nContent-Type: " + type +
                         "\r\nContent-Length: " + std::to_string(body.size()) +
                         "\r\nConnection: close\r\n\r\n" + body;
  std::error_code ec;
  co_await asio::async_write(socket, asio::buffer(response), asio::redirect_error(asio::use_awaitable, ec));
  *alive = false;
  dog->timer.cancel();
  socket.shutdown(tcp::socket::shutdown_both, ec);
}

}  // namespace

awaitable<void> accept_http(Context* ctx, tcp::acceptor* acceptor) {
  for (;;) {
    std::error_code ec;
    tcp::socket socket = co_await acceptor->async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ctx->stopping || ec == asio::error::operation_aborted) co_return;
      continue;
    }
    asio::co_spawn(acceptor->get_executor(), serve_http(ctx, std::move(socket)), asio::detached);
  }
}

}  // namespace edgefl::server
