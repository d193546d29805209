#include "net/tls_stream.h"

#include <asio.hpp>

#include <string.h>
#include <algorithm>
#include <chrono>

#include "tls/tls_credentials.h"
#include "tls/tls_session.h"

namespace edgefl {
namespace net {

namespace {
using Clock = std::chrono::steady_clock;
// An app's Transport cannot be woken by cancel(): its calls are given at most this long each.
constexpr auto kTransportSlice = std::chrono::milliseconds(50);
constexpr size_t kReadChunkBytes = 16 * 1024;
}  // namespace

struct Connection::Impl {
  asio::io_context io;
  asio::ip::tcp::socket socket{io};
  std::unique_ptr<tls::TlsSession> tls;  // null: plaintext
  std::vector<uint8_t> plain;            // decrypted (or plaintext) bytes not yet returned
  size_t plain_pos = 0;
  bool open = false;

  // Runs the io_context until `done` or the deadline / cancellation; on either, closes the socket
  // so that the pending operation completes with operation_aborted, and reports why. It sleeps
  // until an operation completes, the deadline, or cancel()'s wake-up: no periodic polling.
  Status wait(const bool& done, Clock::time_point deadline, const std::atomic<bool>& cancelled) {
    Status result = Status::kOk;
    while (!done) {
      if (cancelled.load(std::memory_order_relaxed)) {
        result = Status::kCancelled;
        break;
      }
      const auto now = Clock::now();
      if (now >= deadline) {
        result = Status::kTimeout;
        break;
      }
      io.restart();
      io.run_one_for(deadline - now);
    }
    if (!done) {
      std::error_code ignored;
      socket.close(ignored);
      while (!done) {
        io.restart();  // a cancel() may have stopped it
        io.run_one();
      }
    }
    return result;
  }
};

Connection::Connection() : impl_(new Impl) {}
Connection::~Connection() {
  close();
}

bool Connection::is_open() const {
  return impl_->open;
}

void Connection::set_transport(const Transport& transport) {
  close();
  transport_ = transport;
}

void Connection::cancel() {
  cancelled_.store(true);
  // Wakes a wait() in progress on the owning thread: stop() is thread-safe and allocates nothing;
  // wait() restarts the io_context before each run and checks its conditions again.
  impl_->io.stop();
}
void Connection::reset_cancel() {
  cancelled_.store(false);
}

std::string Connection::protocol() const {
  if (!impl_->tls) return "plaintext";
  return impl_->tls->protocol();
}

Status Connection::fail(Status status, const std::string& what, std::string* error) {
  if (error) *error = what;
  std::error_code ignored;
  impl_->socket.close(ignored);
  if (impl_->open && transport_.is_set()) transport_.close(transport_.user);
  impl_->open = false;
  return status;
}

void Connection::close() {
  if (impl_->open && transport_.is_set()) {
    if (impl_->tls && impl_->tls->handshake_done()) {
      impl_->tls->close_notify();
      const auto out = impl_->tls->outgoing();
      size_t sent = 0;
      (void)transport_.send(transport_.user, out.data(), out.size(), &sent, 0);  // best effort
    }
    transport_.close(transport_.user);
    impl_->open = false;
  }
  if (impl_->open && impl_->tls && impl_->tls->handshake_done()) {
    impl_->tls->close_notify();
    std::error_code ignored;
    const auto out = impl_->tls->outgoing();
    // Best effort, never blocks long: the socket is non-blocking for this one write.
    impl_->socket.non_blocking(true, ignored);
    if (!ignored) impl_->socket.write_some(asio::buffer(out.data(), out.size()), ignored);
  }
  std::error_code ignored;
  impl_->socket.close(ignored);
  impl_->open = false;
  impl_->tls.reset();
  impl_->plain.clear();
  impl_->plain_pos = 0;
}

Status Connection::write_raw(const uint8_t* data, size_t size, uint32_t timeout_ms, std::string* error) {
  if (transport_.is_set()) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    size_t done_bytes = 0;
    while (done_bytes < size) {
      if (cancelled_.load()) return fail(Status::kCancelled, "cancelled", error);
      if (Clock::now() >= deadline) return fail(Status::kTimeout, "timed out sending to the server", error);
      size_t sent = 0;
      const Status s = transport_.send(transport_.user, data + done_bytes, size - done_bytes, &sent,
                                       static_cast<uint32_t>(kTransportSlice.count()));
      if (s != Status::kOk && s != Status::kTimeout) {
        return fail(s == Status::kCancelled ? s : Status::kConnectionFailed,
                    std::string("transport send failed: ") + status_name(s), error);
      }
      done_bytes += std::min(sent, size - done_bytes);
    }
    socket_bytes_sent_ += size;
    return Status::kOk;
  }
  bool done = false;
  std::error_code result;
  asio::async_write(impl_->socket, asio::buffer(data, size), [&](std::error_code ec, size_t) {
    result = ec;
    done = true;
  });
  const Status s = impl_->wait(done, Clock::now() + std::chrono::milliseconds(timeout_ms), cancelled_);
  if (s == Status::kTimeout) return fail(s, "timed out sending to the server", error);
  if (s != Status::kOk) return fail(s, "cancelled", error);
  if (result) return fail(Status::kConnectionFailed, "send failed: " + result.message(), error);
  socket_bytes_sent_ += size;
  return Status::kOk;
}

Status Connection::read_some_raw(std::vector<uint8_t>* into, uint32_t timeout_ms, std::string* error) {
  uint8_t buffer[kReadChunkBytes];
  if (transport_.is_set()) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      if (cancelled_.load()) return fail(Status::kCancelled, "cancelled", error);
      if (Clock::now() >= deadline) return fail(Status::kTimeout, "timed out waiting for the server", error);
      size_t got = 0;
      const Status s = transport_.recv(transport_.user, buffer, sizeof buffer, &got,
                                       static_cast<uint32_t>(kTransportSlice.count()));
      if (s == Status::kTimeout) continue;
      if (s != Status::kOk) {
        return fail(s == Status::kCancelled ? s : Status::kConnectionFailed,
                    std::string("transport receive failed: ") + status_name(s), error);
      }
      if (got == 0) return fail(Status::kConnectionFailed, "the server closed the connection", error);
      got = std::min(got, sizeof buffer);
      socket_bytes_received_ += got;
      into->assign(buffer, buffer + got);
      return Status::kOk;
    }
  }
  bool done = false;
  std::error_code result;
  size_t got = 0;
  impl_->socket.async_read_some(asio::buffer(buffer, sizeof buffer), [&](std::error_code ec, size_t n) {
    result = ec;
    got = n;
    done = true;
  });
  const Status s = impl_->wait(done, Clock::now() + std::chrono::milliseconds(timeout_ms), cancelled_);
  if (s == Status::kTimeout) return fail(s, "timed out waiting for the server", error);
  if (s != Status::kOk) return fail(s, "cancelled", error);
  if (result == asio::error::eof)
    return fail(Status::kConnectionFailed, "the server closed the connection", error);
  if (result) return fail(Status::kConnectionFailed, "receive failed: " + result.message(), error);
  socket_bytes_received_ += got;
  into->assign(buffer, buffer + got);
  return Status::kOk;
}

Status Connection::flush_tls(uint32_t timeout_ms, std::string* error) {
  const Span<const uint8_t> out = impl_->tls->outgoing();
  if (out.size() == 0) return Status::kOk;
  const Status s = write_raw(out.data(), out.size(), timeout_ms, error);
  if (s == Status::kOk) impl_->tls->consume_outgoing(out.size());
  return s;
}

Status Connection::connect(const std::string& host, uint16_t port, const tls::TlsCredentials* creds,
                           uint32_t timeout_ms, std::string* error) {
  close();
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  auto remaining_ms = [&]() -> uint32_t {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return left > 0 ? static_cast<uint32_t>(left) : 0u;
  };
  const std::string where = host + ":" + std::to_string(port);
  Status s = Status::kOk;
  if (transport_.is_set()) {
    s = transport_.connect(transport_.user, host.c_str(), port, timeout_ms);
    if (s != Status::kOk) {
      if (error) *error = std::string("transport cannot connect to ") + where + ": " + status_name(s);
      return s == Status::kTimeout || s == Status::kCancelled ? s : Status::kConnectionFailed;
    }
  } else {
    asio::ip::tcp::resolver resolver(impl_->io);
    std::error_code ec;
    const auto endpoints = resolver.resolve(host, std::to_string(port), ec);
    if (ec) return fail(Status::kConnectionFailed, "cannot resolve " + host + ": " + ec.message(), error);

    bool done = false;
    std::error_code result;
    asio::async_connect(impl_->socket, endpoints, [&](std::error_code e, const asio::ip::tcp::endpoint&) {
      result = e;
      done = true;
    });
    s = impl_->wait(done, deadline, cancelled_);
    if (s == Status::kTimeout) return fail(s, "timed out connecting to " + where, error);
    if (s != Status::kOk) return fail(s, "cancelled", error);
    if (result)
      return fail(Status::kConnectionFailed, "cannot connect to " + where + ": " + result.message(), error);
    impl_->socket.set_option(asio::ip::tcp::no_delay(true), ec);
  }
  impl_->open = true;
  if (creds == nullptr) return Status::kOk;

  impl_->tls.reset(new tls::TlsSession);
  const std::string& name = creds->server_name();
  s = impl_->tls->init(creds->config(), name.empty() ? nullptr : name.c_str(), error);
  if (s != Status::kOk) return fail(s, error ? *error : "TLS setup failed", error);
  std::vector<uint8_t> received;
  for (;;) {
    const int ret = impl_->tls->handshake();
    s = flush_tls(remaining_ms(), error);
    if (s != Status::kOk) {
      if (error) *error = "TLS handshake with " + where + ": " + *error;
      return s;
    }
    if (ret == 0) break;
    if (ret != tls::TlsSession::kWantRead) {
      return fail(
          Status::kTlsHandshakeFailed,
          "TLS handshake with " + where + " failed: " + tls::describe_tls_failure(ret, impl_->tls->ssl()),
          error);
    }
    s = read_some_raw(&received, remaining_ms(), error);
    if (s != Status::kOk) {
      // The transport ended (a reset, a close, a timeout) before TLS said anything: a server at
      // its connection cap, restarting, or a network fault; transient. A server that refuses our
      // certificate says so with a TLS alert (the branch above, or a kTlsError on the first read
      // in TLS 1.3) or with Error{kUnauthorized}.
      if (error) *error = "TLS handshake with " + where + ": " + *error;
      return s;
    }
    impl_->tls->feed({received.data(), received.size()});
  }
  return Status::kOk;
}

Status Connection::send(const wire::Message& message, uint32_t timeout_ms, std::string* error) {
  if (!impl_->open) {
    if (error) *error = "not connected";
    return Status::kConnectionFailed;
  }
  std::vector<uint8_t> frame;
  wire::DecodeDetail detail;
  Status s = wire::encode(message, &frame, &detail);
  if (s != Status::kOk) {
    if (error)
      *error = std::string("cannot encode ") + wire::message_type_name(wire::message_type(message)) + ": " +
               status_name(s) + " " + detail.field;
    return s;
  }
  frame_bytes_sent_ += frame.size();
  if (!impl_->tls) return write_raw(frame.data(), frame.size(), timeout_ms, error);
  const int ret = impl_->tls->write({frame.data(), frame.size()});
  if (ret < 0) return fail(Status::kTlsError, "TLS write failed: " + tls::tls_error_text(ret), error);
  return flush_tls(timeout_ms, error);
}

Status Connection::read_plain(uint8_t* out, size_t size, uint32_t timeout_ms, std::string* error) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::vector<uint8_t> received;
  size_t have = 0;
  while (have < size) {
    const size_t buffered = impl_->plain.size() - impl_->plain_pos;
    if (buffered > 0) {
      const size_t n = std::min(buffered, size - have);
      memcpy(out + have, impl_->plain.data() + impl_->plain_pos, n);
      impl_->plain_pos += n;
      have += n;
      if (impl_->plain_pos == impl_->plain.size()) {
        impl_->plain.clear();
        impl_->plain_pos = 0;
      }
      continue;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    const uint32_t left_ms = left > 0 ? static_cast<uint32_t>(left) : 0u;
    if (!impl_->tls) {
      Status s = read_some_raw(&received, left_ms, error);
      if (s != Status::kOk) return s;
      impl_->plain.swap(received);
      continue;
    }
    uint8_t buffer[kReadChunkBytes];
    const int ret = impl_->tls->read({buffer, sizeof buffer});
    Status s = flush_tls(left_ms, error);  // TLS 1.3 may answer post-handshake messages
    if (s != Status::kOk) return s;
    if (ret > 0) {
      impl_->plain.assign(buffer, buffer + ret);
      continue;
    }
    if (ret == tls::TlsSession::kClosed)
      return fail(Status::kConnectionFailed, "the server closed the connection", error);
    if (ret != tls::TlsSession::kWantRead)
      return fail(Status::kTlsError, "TLS read failed: " + tls::tls_error_text(ret), error);
    s = read_some_raw(&received, left_ms, error);
    if (s != Status::kOk) return s;
    impl_->tls->feed({received.data(), received.size()});
  }
  return Status::kOk;
}

Status Connection::receive(wire::Message* message, uint32_t timeout_ms, std::string* error) {
  if (!impl_->open) {
    if (error) *error = "not connected";
    return Status::kConnectionFailed;
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  uint8_t head[wire::kFrameHeaderBytes];
  Status s = read_plain(head, sizeof head, timeout_ms, error);
  if (s != Status::kOk) return s;
  wire::FrameHeader header;
  s = wire::read_frame_header({head, sizeof head}, &header);
  if (s != Status::kOk)
    return fail(s, std::string("bad frame header from the server: ") + status_name(s), error);
  std::vector<uint8_t> payload(header.payload_length);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  s = read_plain(payload.data(), payload.size(), left > 0 ? static_cast<uint32_t>(left) : 0u, error);
  if (s != Status::kOk) return s;
  frame_bytes_received_ += sizeof head + payload.size();
  wire::DecodeDetail detail;
  s = wire::decode(header, {payload.data(), payload.size()}, message, &detail);
  if (s != Status::kOk) {
    return fail(s,
                std::string("bad ") + wire::message_type_name(header.type) +
                    " from the server: " + status_name(s) +
                    (detail.field[0] ? std::string(" (") + detail.field + ")" : std::string()),
                error);
  }
  return Status::kOk;
}

}  // namespace net
}  // namespace edgefl
