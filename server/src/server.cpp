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

#include "log.h"
#include "metrics.h"
#include "net/tls_session.h"
#include "sqlite_storage.h"

namespace edgefl::server {
namespace {

using asio::awaitable;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
constexpr size_t kReadChunkBytes = 16 * 1024;
constexpr size_t kMaxHttpRequestBytes = 8 * 1024;
constexpr uint32_t kLingerMs = 1000;             // linger_close(): longest wait for the peer's FIN
constexpr size_t kMaxLingerBytes = 256 * 1024;   // and the most it reads meanwhile
constexpr size_t kKeptBufferBytes = 128 * 1024;  // buffer capacity a connection keeps between messages

struct Context {
  const ServerOptions* options = nullptr;
  RoundManager* rounds = nullptr;
  Metrics* metrics = nullptr;
  const net::TlsCredentials* credentials = nullptr;
  uint64_t next_connection = 1;
  bool stopping = false;
  uint32_t busy_sessions = 0;  // handshakes under way only to answer ServerBusy
  double busy_tokens = 0;      // busy answers allowed now (refilled per second)
  Clock::time_point busy_refilled{};
  std::map<std::string, uint32_t> per_device;  // open sessions by device id
};

// A session's largest frame payload: the type's cap (wire::max_payload_bytes), and for
// UploadChunk the chunk size this server offers plus the frame's own fields.
uint64_t payload_ceiling(const ServerOptions& options, wire::MessageType type) {
  const uint64_t cap = wire::max_payload_bytes(type);
  if (type != wire::MessageType::kUploadChunk) return cap;
  return std::min<uint64_t>(cap, uint64_t{options.rounds.max_chunk_bytes} + 1024);
}

// Closes the socket when the deadline passes; the session moves the deadline before each wait.
struct Watchdog {
  explicit Watchdog(asio::any_io_executor ex) : timer(ex) {}
  asio::steady_timer timer;
  bool fired = false;
  void arm(uint32_t ms) { timer.expires_after(std::chrono::milliseconds(ms)); }
};

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

  awaitable<void> run() {
    auto alive = std::make_shared<bool>(true);
    dog_->arm(ctx_->options->handshake_timeout_ms);
    asio::co_spawn(socket_.get_executor(), watch(dog_, &socket_, alive), asio::detached);
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
      uint8_t head[wire::kFrameHeaderBytes];
      if (!co_await read_exact(head, sizeof head)) co_return;
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
        const std::string why = std::string("bad frame header: ") + status_name(s);
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
        if (!co_await read_exact(payload_.data() + have, step)) co_return;
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
      if (ret != net::TlsSession::kWantRead) {
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
        .kv("reason", why[0] ? std::string(why) : net::describe_tls_failure(ret, tls_.ssl()));
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

  awaitable<bool> fill() {
    uint8_t buffer[kReadChunkBytes];
    std::error_code ec;
    const size_t n =
        co_await socket_.async_read_some(asio::buffer(buffer), asio::redirect_error(asio::use_awaitable, ec));
    if (ec || n == 0) co_return false;
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
      if (ret == net::TlsSession::kClosed) co_return false;
      if (ret != net::TlsSession::kWantRead) {
        log_warn("tls_error").kv("device", device_).kv("error", net::tls_error_text(ret));
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
  bool counted_device_ = false;  // device_ holds a slot in ctx_->per_device
  std::shared_ptr<Watchdog> dog_;
  std::string peer_;
  std::string device_;
  net::TlsSession tls_;
  std::vector<uint8_t> plain_;
  size_t plain_pos_ = 0;
  std::vector<uint8_t> payload_;
};

awaitable<void> run_session(Context* ctx, tcp::socket socket) {
  const uint64_t id = ctx->next_connection++;
  ctx->metrics->connections_total.fetch_add(1);
  ctx->metrics->connections_open.fetch_add(1);
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

awaitable<void> accept_devices(Context* ctx, tcp::acceptor* acceptor) {
  for (;;) {
    std::error_code ec;
    tcp::socket socket = co_await acceptor->async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ctx->stopping || ec == asio::error::operation_aborted) co_return;
      log_warn("accept_failed").kv("error", ec.message());
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
    asio::co_spawn(acceptor->get_executor(), run_session(ctx, std::move(socket)), asio::detached);
  }
}

// GET /metrics (Prometheus text) and GET /healthz; anything else 404. HTTP/1.0 style: one
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
    if (ctx->stopping) {
      status = "503 Service Unavailable";
      body = "stopping\n";
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

// One line per ended round, for people watching (the log has the same as events).
void print_progress(const RoundManager& rounds, size_t* printed) {
  const auto& history = rounds.history();
  for (; *printed < history.size(); ++*printed) {
    const auto& r = history[*printed];
    char acc[32] = "";
    if (r.test_accuracy >= 0) std::snprintf(acc, sizeof acc, "test acc %.4f, ", double(r.test_accuracy));
    const double bf16 = double(rounds.bf16_update_bytes()) * r.accepted;
    std::printf("round %3llu %-9s %u updates, %s%8.1f kB up (bf16: %8.1f kB), %8.1f kB down, %6.2f s\n",
                static_cast<unsigned long long>(r.round_id), round_state_name(r.state), r.accepted, acc,
                double(r.upload_bytes) / 1e3, bf16 / 1e3, double(r.download_bytes) / 1e3, r.seconds);
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
  const double bf16 = double(rounds.bf16_update_bytes()) * double(updates);
  std::printf("\n%llu updates, %llu bytes uploaded with '%s' (%.1f kB per update);\n",
              static_cast<unsigned long long>(updates), static_cast<unsigned long long>(up),
              options.rounds.uplink_codec.c_str(), updates ? double(up) / double(updates) / 1e3 : 0.0);
  if (updates > 0 && bf16 > 0) {
    std::printf(
        "bf16 uploads of the same updates: %.0f bytes (%.1f kB each): %.3fx bf16's bytes, %.1f times "
        "fewer.\n",
        bf16, double(rounds.bf16_update_bytes()) / 1e3, double(up) / bf16, bf16 / double(up));
  }
  std::printf("model downloads: %llu bytes (float32). Final model version %llu: %s/global.safetensors\n",
              static_cast<unsigned long long>(down), static_cast<unsigned long long>(rounds.model_version()),
              options.rounds.state_dir.c_str());
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
      out << ",\"bf16_upload_bytes\":" << rounds.bf16_update_bytes() * r.accepted << "}\n";
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

}  // namespace

int run_server(const ServerOptions& options) {
  std::string error;
  std::unique_ptr<net::TlsCredentials> credentials;
  if (options.insecure_plaintext_for_tests) {
    log_warn("INSECURE_PLAINTEXT_FOR_TESTS")
        .kv("message",
            "TLS is off: anyone can connect and impersonate any device. Never use this outside tests.");
  } else {
    if (net::tls_global_init(&error) != Status::kOk ||
        net::TlsCredentials::load(net::TlsRole::kServer, options.tls, &credentials, &error) != Status::kOk) {
      log_error("tls_credentials").kv("error", error);
      return 2;
    }
  }
  // One server per state directory: a second one would race the first on the ledger.
  const std::string lock_path = options.rounds.state_dir + "/server.lock";
  const int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    log_error("state_dir_locked")
        .kv("path", lock_path)
        .kv("error", lock_fd < 0 ? std::strerror(errno) : "another edgefl-server uses this state directory");
    return 2;
  }
  std::unique_ptr<Storage> storage;
  if (open_sqlite_storage(options.rounds.state_dir + "/state.db", &storage, &error) != Status::kOk) {
    log_error("storage_open").kv("error", error);
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

  std::error_code ec;
  tcp::acceptor acceptor(io);
  const auto address = asio::ip::make_address(options.listen_host, ec);
  if (ec) {
    log_error("listen_failed").kv("address", options.listen_host).kv("error", ec.message());
    return 2;
  }
  tcp::endpoint endpoint(address, options.port);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    log_error("listen_failed")
        .kv("address", options.listen_host)
        .kv("port", unsigned(options.port))
        .kv("error", ec.message());
    return 2;
  }
  tcp::acceptor http(io);
  uint16_t metrics_port = 0;
  if (options.metrics_port != 0 || !options.port_file.empty()) {
    tcp::endpoint http_endpoint(asio::ip::make_address(options.metrics_host, ec), options.metrics_port);
    if (!ec) http.open(http_endpoint.protocol(), ec);
    if (!ec) http.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) http.bind(http_endpoint, ec);
    if (!ec) http.listen(64, ec);
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
  if (!options.port_file.empty()) {
    const std::string tmp = options.port_file + ".tmp";
    {
      std::ofstream out(tmp);
      out << port << " " << metrics_port << "\n";
    }
    std::rename(tmp.c_str(), options.port_file.c_str());
  }
  asio::co_spawn(io, accept_devices(&ctx, &acceptor), asio::detached);

  int exit_code = 0;
  auto stop = [&](const char* why) {
    if (ctx.stopping) return;
    ctx.stopping = true;
    log_info("stopping").kv("reason", why);
    std::error_code ignored;
    acceptor.close(ignored);
    http.close(ignored);
    io.stop();
  };
  // Live revocation: the CRL and the deny list are read again on SIGHUP and when either file
  // changes (checked once a second). Files that do not parse or a CRL that fails its checks keep
  // both lists in force and say why.
  struct Stamp {
    ino_t ino = 0;
    off_t size = -1;
    timespec mtime{};
    bool operator==(const Stamp& o) const {
      return ino == o.ino && size == o.size && mtime.tv_sec == o.mtime.tv_sec &&
             mtime.tv_nsec == o.mtime.tv_nsec;
    }
  };
  auto stamp_of = [](const std::string& path) {
    Stamp out;
    struct stat st {};
    if (!path.empty() && ::stat(path.c_str(), &st) == 0) out = Stamp{st.st_ino, st.st_size, st.st_mtim};
    return out;
  };
  const bool live_revocation =
      credentials && (!options.tls.deny_file.empty() || !options.tls.crl_file.empty());
  Stamp deny_stamp = stamp_of(options.tls.deny_file), crl_stamp = stamp_of(options.tls.crl_file);
  auto reload_revocation = [&](const char* trigger) {
    deny_stamp = stamp_of(options.tls.deny_file);
    crl_stamp = stamp_of(options.tls.crl_file);
    std::string e;
    if (credentials->reload_revocation(&e) == Status::kOk) {
      log_info("revocation_reloaded")
          .kv("trigger", trigger)
          .kv("crl", options.tls.crl_file)
          .kv("deny", options.tls.deny_file);
    } else {
      log_error("revocation_reload_failed")
          .kv("trigger", trigger)
          .kv("error", e)
          .kv("kept", "the previous lists");
    }
  };
  asio::signal_set hangup(io, SIGHUP);
  std::function<void(std::error_code, int)> on_hangup = [&](std::error_code e, int) {
    if (e) return;
    if (live_revocation) reload_revocation("SIGHUP");
    hangup.async_wait(on_hangup);
  };
  hangup.async_wait(on_hangup);
  uint32_t ticks = 0;

  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](std::error_code e, int sig) {
    if (e) return;
    exit_code = 0;
    stop(sig == SIGINT ? "SIGINT" : "SIGTERM");
  });
  // Round deadlines, and the drain after the last round.
  asio::steady_timer ticker(io);
  std::optional<Clock::time_point> drain_until;
  size_t printed = 0;
  std::function<void(std::error_code)> on_tick = [&](std::error_code e) {
    if (e || ctx.stopping) return;
    rounds.tick(unix_ms_now());
    if (live_revocation && ++ticks % 10 == 0 &&
        (!(stamp_of(options.tls.deny_file) == deny_stamp) || !(stamp_of(options.tls.crl_file) == crl_stamp)))
      reload_revocation("file_changed");
    if (options.progress) print_progress(rounds, &printed);
    if (rounds.finished()) {
      // Drain at least as long as the longest come-back time handed out, so that every device
      // turned away hears "draining" when it returns.
      if (!drain_until)
        drain_until = Clock::now() + std::chrono::milliseconds(
                                         std::max<uint64_t>(options.drain_ms, rounds.longest_retry_ms()));
      if (Clock::now() >= *drain_until) {
        stop("all rounds done");
        return;
      }
    }
    ticker.expires_after(std::chrono::milliseconds(100));
    ticker.async_wait(on_tick);
  };
  ticker.expires_after(std::chrono::milliseconds(100));
  ticker.async_wait(on_tick);

  io.run();
  if (options.progress) print_progress(rounds, &printed);
  log_info("stopped")
      .kv("rounds_committed", metrics.rounds_committed.load())
      .kv("rounds_abandoned", metrics.rounds_abandoned.load())
      .kv("updates_accepted", metrics.updates_accepted.load())
      .kv("p50_upload_to_ack_s", metrics.upload_latency_quantile(0.5))
      .kv("p99_upload_to_ack_s", metrics.upload_latency_quantile(0.99))
      .kv("peak_rss_kb", peak_rss_kb())
      .kv("handshakes", metrics.handshakes_ok.load())
      .kv("server_busy", metrics.server_busy.load())
      .kv("handshake_ms_mean", metrics.handshakes_ok.load() ? double(metrics.handshake_us_total.load()) /
                                                                  1e3 / double(metrics.handshakes_ok.load())
                                                            : 0.0);
  print_summary(rounds, options);
  return exit_code;
}

}  // namespace edgefl::server
