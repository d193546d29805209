#include "session.h"

#include <mbedtls/ssl.h>
#include <poll.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "log.h"
#include "tls/tls_session.h"

namespace edgefl::server {
namespace {

using asio::awaitable;
using asio::ip::tcp;
constexpr size_t kReadChunkBytes = 16 * 1024;
constexpr uint32_t kLingerMs = 1000;             // linger_close(): longest wait for the peer's FIN
constexpr size_t kMaxLingerBytes = 256 * 1024;   // and the most it reads meanwhile
constexpr size_t kKeptBufferBytes = 128 * 1024;  // buffer capacity a connection keeps between messages

// A session's largest frame payload: the type's cap (wire::max_payload_bytes), and for
// UploadChunk the chunk size this server offers plus the frame's own fields.
uint64_t payload_ceiling(const ServerOptions& options, wire::MessageType type) {
  const uint64_t cap = wire::max_payload_bytes(type);
  if (type != wire::MessageType::kUploadChunk) return cap;
  return std::min<uint64_t>(cap, uint64_t{options.rounds.max_chunk_bytes} + 1024);
}

// One device connection: TLS (or the test-only plaintext) around frames.
class Session {
 public:
  // busy: the server is at its connection cap; the session only tells the device when to come
  // back (RetryLater ServerBusy) and closes.
  Session(Context* ctx, tcp::socket socket, uint64_t id, bool busy = false)
      : ctx_(ctx),
        socket_(std::move(socket)),
        id_(id),
        busy_(busy),
        dog_(std::make_shared<Watchdog>(socket_.get_executor())) {
    std::error_code ec;
    const auto endpoint = socket_.remote_endpoint(ec);
    peer_ = ec ? "unknown" : endpoint.address().to_string() + ":" + std::to_string(endpoint.port());
  }

  ~Session() { release_handshake_slot(); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Context::handshakes was counted for this session by the accept loop: given back once, when
  // the handshake ends (or the session, without one).
  void release_handshake_slot() {
    if (holds_handshake_slot_) {
      holds_handshake_slot_ = false;
      --ctx_->handshakes;
    }
  }

  awaitable<void> run() {
    auto alive = std::make_shared<bool>(true);
    dog_->arm(ctx_->options->handshake_timeout_ms);
    asio::co_spawn(socket_.get_executor(), watch(dog_, &socket_, alive), asio::detached);
    if (ctx_->options->insecure_plaintext_for_tests) release_handshake_slot();
    if (busy_) {
      co_await answer_busy();
    } else {
      co_await serve();
    }
    if (counted_device_) {
      auto it = ctx_->per_device.find(device_);
      if (it != ctx_->per_device.end() && --it->second == 0) ctx_->per_device.erase(it);
    }
    co_await linger_close();
    *alive = false;
    dog_->timer.cancel();
    std::error_code ignored;
    socket_.close(ignored);
  }

 private:
  // At the connection cap: the handshake (so that the answer is authenticated and in protocol),
  // then RetryLater{ServerBusy} with a window that spreads the devices' return.
  awaitable<void> answer_busy() {
    if (!ctx_->options->insecure_plaintext_for_tests && !co_await handshake(false)) co_return;
    ctx_->metrics->server_busy.fetch_add(1);
    ctx_->metrics->retry_later.fetch_add(1);
    const wire::RetryLater busy{ctx_->options->busy_retry_after_ms, ctx_->options->busy_retry_window_ms,
                                wire::RetryReason::kServerBusy};
    co_await send(wire::Message{busy});
  }

  awaitable<void> serve() {
    if (ctx_->options->insecure_plaintext_for_tests) {
      device_ = "insecure-connection-" + std::to_string(id_);
    } else if (!co_await handshake(true)) {
      co_return;
    }
    if (!ctx_->options->insecure_plaintext_for_tests) {
      counted_device_ = true;
      if (++ctx_->per_device[device_] > ctx_->options->max_connections_per_device) {
        const std::string why = "more than " + std::to_string(ctx_->options->max_connections_per_device) +
                                " connections from this device at once";
        co_await refuse(wire::ErrorCode::kRateLimited, why);
        co_return;
      }
    }
    bool said_hello = false;
    for (;;) {
      dog_->arm(ctx_->options->idle_timeout_ms);
      const uint64_t received_before = received_bytes_;
      const bool started = plain_pos_ < plain_.size();  // the next message's first bytes are here
      auto in_message = [&] { return started || received_bytes_ != received_before; };
      uint8_t head[wire::kFrameHeaderBytes];
      if (!co_await read_exact(head, sizeof head)) {
        note_timeout(in_message());
        co_return;
      }
      wire::FrameHeader header;
      Status s = wire::read_frame_header({head, sizeof head}, &header);
      // Refusal messages are built in named variables, never as temporaries inside a co_await
      // operand: GCC 12 destroys the temporaries of a conditional expression there twice
      // (free(): invalid pointer on every malformed frame; tests/server/e2e_test.cpp).
      if (s != Status::kOk) {
        const wire::ErrorCode code = s == Status::kFrameTooLarge ? wire::ErrorCode::kTooLarge
                                     : s == Status::kProtocolVersionMismatch
                                         ? wire::ErrorCode::kVersionMismatch
                                         : wire::ErrorCode::kBadMessage;
        // A device of another protocol version hears which version this server speaks.
        const std::string why = s == Status::kProtocolVersionMismatch
                                    ? "protocol version " + std::to_string(head[2]) +
                                          " is not spoken here: this server speaks version " +
                                          std::to_string(wire::kProtocolVersion)
                                    : std::string("bad frame header: ") + status_name(s);
        co_await refuse(code, why);
        co_return;
      }
      if (wire::message_direction(header.type) == wire::Direction::kServerToClient) {
        const std::string why =
            std::string(wire::message_type_name(header.type)) + " is a server-to-client message";
        co_await refuse(wire::ErrorCode::kUnexpectedMessage, why);
        co_return;
      }
      if (header.payload_length > payload_ceiling(*ctx_->options, header.type)) {
        const std::string why = std::string(wire::message_type_name(header.type)) + " of " +
                                std::to_string(header.payload_length) +
                                " bytes is above this server's limit of " +
                                std::to_string(payload_ceiling(*ctx_->options, header.type));
        co_await refuse(wire::ErrorCode::kTooLarge, why);
        co_return;
      }
      // The buffer grows as bytes arrive, never on the length prefix alone.
      payload_.clear();
      while (payload_.size() < header.payload_length) {
        const size_t have = payload_.size();
        const size_t step = std::min<size_t>(header.payload_length - have, kReadChunkBytes);
        payload_.resize(have + step);
        if (!co_await read_exact(payload_.data() + have, step)) {
          note_timeout(true);
          co_return;
        }
      }
      wire::Message message;
      wire::DecodeDetail detail;
      s = wire::decode(header, {payload_.data(), payload_.size()}, &message, &detail);
      if (s != Status::kOk) {
        const wire::ErrorCode code = s == Status::kProtocolVersionMismatch ? wire::ErrorCode::kVersionMismatch
                                                                           : wire::ErrorCode::kBadMessage;
        std::string why = std::string("bad ") + wire::message_type_name(header.type) + ": " + status_name(s);
        if (detail.field[0])
          why += std::string(" (") + detail.field + ", " + wire::violation_name(detail.violation) + ")";
        co_await refuse(code, why);
        co_return;
      }
      const int64_t now = unix_ms_now();
      std::optional<Reply> reply;
      if (auto* hello = std::get_if<wire::Hello>(&message)) {
        said_hello = true;
        // Test-only plaintext mode: there is no certificate, so the device names itself.
        if (ctx_->options->insecure_plaintext_for_tests) device_ = "insecure-" + hello->sdk_version;
        reply = ctx_->rounds->hello(device_, *hello, now);
      } else if (auto* error = std::get_if<wire::Error>(&message)) {
        log_info("device_error")
            .kv("device", device_)
            .kv("code", unsigned(error->code))
            .kv("message", error->message);
        co_return;
      } else if (!said_hello) {
        const std::string why = "say Hello first";
        co_await refuse(wire::ErrorCode::kUnexpectedMessage, why);
        co_return;
      } else if (auto* request = std::get_if<wire::ModelRequest>(&message)) {
        reply = ctx_->rounds->model_request(device_, *request, now);
      } else if (auto* start = std::get_if<wire::UploadStart>(&message)) {
        reply = ctx_->rounds->upload_start(device_, *start, now);
      } else if (auto* chunk = std::get_if<wire::UploadChunk>(&message)) {
        reply = ctx_->rounds->upload_chunk(device_, *chunk, now);
      } else if (auto* commit = std::get_if<wire::Commit>(&message)) {
        reply = ctx_->rounds->commit(device_, *commit, now);
      } else if (auto* advertise = std::get_if<wire::SecAggAdvertise>(&message)) {
        reply = ctx_->rounds->secagg_advertise(device_, *advertise, now);
      } else if (auto* shares = std::get_if<wire::SecAggShares>(&message)) {
        reply = ctx_->rounds->secagg_shares(device_, *shares, now);
      } else if (auto* poll = std::get_if<wire::SecAggPoll>(&message)) {
        reply = ctx_->rounds->secagg_poll(device_, *poll, now);
      } else if (auto* unmask = std::get_if<wire::SecAggUnmaskResponse>(&message)) {
        reply = ctx_->rounds->secagg_unmask(device_, *unmask, now);
      }
      if (!reply) continue;
      if (auto* e = std::get_if<wire::Error>(&reply->message)) {
        ctx_->metrics->frames_rejected.fetch_add(1);
        log_warn("request_refused")
            .kv("device", device_)
            .kv("code", unsigned(e->code))
            .kv("message", e->message);
      }
      if (!co_await send(reply->message)) co_return;
      if (reply->close) co_return;
      // Idle connections keep small buffers: a model chunk or an upload chunk is not kept.
      if (payload_.capacity() > kKeptBufferBytes) std::vector<uint8_t>().swap(payload_);
      if (plain_.capacity() > kKeptBufferBytes && plain_pos_ == 0 && plain_.empty())
        std::vector<uint8_t>().swap(plain_);
      tls_.trim_buffers(kKeptBufferBytes);
    }
  }

  // identify: check the peer as a device (CN, deny list, CRL) and log it; off for busy answers.
  awaitable<bool> handshake(bool identify) {
    struct SlotRelease {  // the accept loop's handshake slot, given back however this ends
      Session* session;
      ~SlotRelease() { session->release_handshake_slot(); }
    } release{this};
    std::string error;
    const auto started = Clock::now();
    if (tls_.init(ctx_->credentials->config(), nullptr, &error) != Status::kOk) {
      log_error("tls_setup_failed").kv("peer", peer_).kv("error", error);
      co_return false;
    }
    for (;;) {
      const int ret = tls_.handshake();
      if (!co_await flush()) {
        if (ret != 0) note_handshake_failure(ret, "connection closed during the handshake");
        co_return false;
      }
      if (ret == 0) break;
      if (ret != tls::TlsSession::kWantRead) {
        note_handshake_failure(ret, "");
        co_return false;
      }
      if (!co_await fill()) {
        note_handshake_failure(
            ret, dog_->fired ? "handshake timed out" : "connection closed during the handshake");
        co_return false;
      }
    }
    ctx_->metrics->handshakes_ok.fetch_add(1);
    ctx_->metrics->handshake_us_total.fetch_add(static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started).count()));
    if (!identify) co_return true;
    std::string reason;
    if (ctx_->credentials->check_peer(tls_.ssl(), &device_, &reason) != Status::kOk) {
      ctx_->metrics->devices_unauthorized.fetch_add(1);
      log_warn("device_refused").kv("peer", peer_).kv("device", device_).kv("reason", reason);
      co_await refuse(wire::ErrorCode::kUnauthorized, reason);
      co_return false;
    }
    log_info("device_connected")
        .kv("peer", peer_)
        .kv("device", device_)
        .kv("tls", tls_.protocol())
        .kv("cipher", tls_.ciphersuite());
    co_return true;
  }

  void note_handshake_failure(int ret, const char* why) {
    ctx_->metrics->handshakes_failed.fetch_add(1);
    log_warn("tls_handshake_failed")
        .kv("peer", peer_)
        .kv("reason", why[0] ? std::string(why) : tls::describe_tls_failure(ret, tls_.ssl()));
  }

  // Sends Error{code, message} (best effort) before the session closes.
  awaitable<void> refuse(wire::ErrorCode code, const std::string& message) {
    ctx_->metrics->frames_rejected.fetch_add(1);
    log_warn("connection_refused")
        .kv("peer", peer_)
        .kv("device", device_)
        .kv("code", unsigned(code))
        .kv("message", message);
    wire::Error e;
    e.code = code;
    e.message = message.substr(0, wire::kMaxErrorMessageBytes);
    dog_->arm(2000);
    co_await send(wire::Message{std::move(e)});
  }

  // A close the peer can read to the end: our last bytes (an Error, a TLS alert) are sent with a
  // FIN, and what the peer still sends is read and dropped for up to kLingerMs. Closing a socket
  // with unread input sends a reset instead, which discards our last bytes at the peer: a device
  // would see "connection reset" where the server said why (an expired certificate, a busy
  // server).
  awaitable<void> linger_close() {
    std::error_code ec;
    if (!socket_.is_open()) co_return;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    if (ec) co_return;
    dog_->arm(kLingerMs);
    uint8_t sink[4096];
    size_t drained = 0;
    while (drained < kMaxLingerBytes) {
      const size_t n =
          co_await socket_.async_read_some(asio::buffer(sink), asio::redirect_error(asio::use_awaitable, ec));
      if (ec || n == 0) break;
      drained += n;
    }
  }

  // After a read of a message failed: when the idle timeout closed the connection (a device
  // that went quiet, or one that sends a message more slowly than --idle-timeout allows for the
  // whole of it), a log line and a count; a device that went away is not news.
  void note_timeout(bool in_message) {
    if (!dog_->fired) return;
    ctx_->metrics->connections_timed_out.fetch_add(1);
    log_info("connection_timed_out")
        .kv("peer", peer_)
        .kv("device", device_)
        .kv("idle_timeout_ms", ctx_->options->idle_timeout_ms)
        .kv("waiting_for", in_message ? "the rest of a message" : "a message");
  }

  awaitable<bool> fill() {
    uint8_t buffer[kReadChunkBytes];
    std::error_code ec;
    const size_t n =
        co_await socket_.async_read_some(asio::buffer(buffer), asio::redirect_error(asio::use_awaitable, ec));
    if (ec || n == 0) co_return false;
    received_bytes_ += n;
    if (ctx_->options->insecure_plaintext_for_tests) {
      plain_.insert(plain_.end(), buffer, buffer + n);
    } else {
      tls_.feed({buffer, n});
    }
    co_return true;
  }

  awaitable<bool> flush() {
    if (ctx_->options->insecure_plaintext_for_tests) co_return true;
    const Span<const uint8_t> out = tls_.outgoing();
    if (out.size() == 0) co_return true;
    std::error_code ec;
    co_await asio::async_write(socket_, asio::buffer(out.data(), out.size()),
                               asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return false;
    tls_.consume_outgoing(out.size());
    co_return true;
  }

  awaitable<bool> read_exact(uint8_t* out, size_t size) {
    size_t have = 0;
    while (have < size) {
      const size_t buffered = plain_.size() - plain_pos_;
      if (buffered > 0) {
        const size_t n = std::min(buffered, size - have);
        std::memcpy(out + have, plain_.data() + plain_pos_, n);
        plain_pos_ += n;
        have += n;
        if (plain_pos_ == plain_.size()) {
          plain_.clear();
          plain_pos_ = 0;
        }
        continue;
      }
      if (ctx_->options->insecure_plaintext_for_tests) {
        if (!co_await fill()) co_return false;
        continue;
      }
      uint8_t buffer[kReadChunkBytes];
      const int ret = tls_.read({buffer, sizeof buffer});
      if (!co_await flush()) co_return false;
      if (ret > 0) {
        plain_.assign(buffer, buffer + ret);
        continue;
      }
      if (ret == tls::TlsSession::kClosed) co_return false;
      if (ret != tls::TlsSession::kWantRead) {
        log_warn("tls_error").kv("device", device_).kv("error", tls::tls_error_text(ret));
        co_return false;
      }
      if (!co_await fill()) co_return false;
    }
    co_return true;
  }

  awaitable<bool> send(const wire::Message& message) {
    std::vector<uint8_t> frame;
    if (wire::encode(message, &frame) != Status::kOk) {
      log_error("encode_failed").kv("type", wire::message_type_name(wire::message_type(message)));
      co_return false;
    }
    if (ctx_->options->insecure_plaintext_for_tests) {
      std::error_code ec;
      co_await asio::async_write(socket_, asio::buffer(frame), asio::redirect_error(asio::use_awaitable, ec));
      co_return !ec;
    }
    if (tls_.write({frame.data(), frame.size()}) < 0) co_return false;
    co_return co_await flush();
  }

  Context* ctx_;
  tcp::socket socket_;
  uint64_t id_;
  bool busy_ = false;
  bool holds_handshake_slot_ = true;
  bool counted_device_ = false;  // device_ holds a slot in ctx_->per_device
  std::shared_ptr<Watchdog> dog_;
  std::string peer_;
  std::string device_;
  tls::TlsSession tls_;
  std::vector<uint8_t> plain_;
  size_t plain_pos_ = 0;
  uint64_t received_bytes_ = 0;  // from the socket (ciphertext under TLS), since the accept
  std::vector<uint8_t> payload_;
};

awaitable<void> run_session(Context* ctx, tcp::socket socket) {
  const uint64_t id = ctx->next_connection++;
  ctx->metrics->connections_total.fetch_add(1);
  const int64_t open = ctx->metrics->connections_open.fetch_add(1) + 1;
  int64_t peak = ctx->metrics->connections_open_peak.load();
  while (open > peak && !ctx->metrics->connections_open_peak.compare_exchange_weak(peak, open)) {
  }
  {
    Session session(ctx, std::move(socket), id);
    co_await session.run();
  }
  ctx->metrics->connections_open.fetch_sub(1);
}

awaitable<void> run_busy_session(Context* ctx, tcp::socket socket) {
  const uint64_t id = ctx->next_connection++;
  ++ctx->busy_sessions;
  {
    Session session(ctx, std::move(socket), id, true);
    co_await session.run();
  }
  --ctx->busy_sessions;
}

// Whether the device already closed its side of `socket` (Linux: POLLRDHUP): a connection that
// waited in the backlog longer than the device's connect timeout. Its ClientHello may be there,
// but a handshake would be computed for nobody.
bool peer_gave_up(tcp::socket& socket) {
#ifdef POLLRDHUP
  pollfd p{};
  p.fd = socket.native_handle();
  p.events = POLLRDHUP;
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
#else
  (void)socket;
  return false;
#endif
}

}  // namespace

awaitable<void> accept_devices(Context* ctx, tcp::acceptor* acceptor) {
  asio::steady_timer pause(acceptor->get_executor());
  for (;;) {
    std::error_code ec;
    // Admission: at the handshake limit, leave new connections in the kernel's backlog until a
    // handshake under way ends (checked every 5 ms).
    while (ctx->handshakes >= ctx->options->max_handshakes && !ctx->stopping) {
      pause.expires_after(std::chrono::milliseconds(5));
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    tcp::socket socket = co_await acceptor->async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ctx->stopping || ec == asio::error::operation_aborted) co_return;
      log_warn("accept_failed").kv("error", ec.message());
      continue;
    }
    if (peer_gave_up(socket)) {
      ctx->metrics->connections_abandoned.fetch_add(1);
      log_debug("connection_abandoned").kv("reason", "closed by the device while in the backlog");
      std::error_code ignored;
      socket.close(ignored);
      continue;
    }
    socket.set_option(tcp::no_delay(true), ec);
    if (ctx->metrics->connections_open.load() >= static_cast<int64_t>(ctx->options->max_connections)) {
      // At the cap: answer in protocol from a small reserve; past it, the socket is closed.
      // Each answer costs a handshake: at most busy_per_second of them, so that an overload of
      // devices cannot take the CPU from the sessions under way.
      const auto now = Clock::now();
      ctx->busy_tokens = std::min<double>(
          ctx->options->busy_per_second,
          ctx->busy_tokens + ctx->options->busy_per_second *
                                 std::chrono::duration<double>(now - ctx->busy_refilled).count());
      ctx->busy_refilled = now;
      if (ctx->busy_sessions < ctx->options->busy_reserve && ctx->busy_tokens >= 1) {
        ctx->busy_tokens -= 1;
        ++ctx->handshakes;  // given back by the session
        asio::co_spawn(acceptor->get_executor(), run_busy_session(ctx, std::move(socket)), asio::detached);
      } else {
        log_warn("connection_limit")
            .kv("open", ctx->metrics->connections_open.load())
            .kv("busy_answers_in_flight", uint64_t{ctx->busy_sessions});
        std::error_code ignored;
        socket.close(ignored);
      }
      continue;
    }
    ++ctx->handshakes;  // given back by the session
    asio::co_spawn(acceptor->get_executor(), run_session(ctx, std::move(socket)), asio::detached);
  }
}

}  // namespace edgefl::server
