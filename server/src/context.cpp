#include "context.h"

namespace edgefl::server {

using asio::awaitable;
using asio::ip::tcp;

awaitable<void> watch(std::shared_ptr<Watchdog> dog, tcp::socket* socket, std::shared_ptr<bool> alive) {
  for (;;) {
    std::error_code ec;
    co_await dog->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (!*alive) co_return;
    if (dog->timer.expiry() <= Clock::now()) {
      dog->fired = true;
      std::error_code ignored;
      socket->close(ignored);
      co_return;
    }
  }
}

}  // namespace edgefl::server
