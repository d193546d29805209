// net/tls_stream.h: a client connection to edgefl-server for a plain application thread: TCP
// through Asio, TLS through tls::TlsSession, whole wire messages in and out, every call bounded by a
// timeout and abortable from another thread with cancel().
//
//   Connection c;
//   Status s = c.connect("127.0.0.1", 7443, creds, /*timeout_ms=*/10000, &error);
//   s = c.send(wire::Message{hello}, 30000, &error);
//   wire::Message reply;
//   s = c.receive(&reply, 30000, &error);
//
// Failures: kConnectionFailed (resolve, connect, read, write, peer closed), kTimeout, kCancelled,
// kTlsHandshakeFailed (with mbedTLS's reason and the certificate verification result),
// kTlsError, and the frame and decode statuses of edgefl/wire.h for bytes that are not a valid
// message. After any failure the connection is closed; connect() may be called again.
//
// Plaintext (no TLS) exists only for tests of the protocol itself: pass creds == nullptr, which
// the server accepts only under --insecure-plaintext-for-tests.
#ifndef EDGEFL_NET_TLS_STREAM_H_
#define EDGEFL_NET_TLS_STREAM_H_

#include <stddef.h>
#include <stdint.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "edgefl/client.h"
#include "edgefl/status.h"
#include "edgefl/wire.h"

namespace edgefl {
namespace net {

class Connection {
 public:
  Connection();
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Uses `transport` (copied) instead of TCP for every later connect(); an unset one restores TCP.
  void set_transport(const Transport& transport);

  // TCP connect, then the TLS handshake (creds: the client's credentials, or null for plaintext).
  [[nodiscard]] Status connect(const std::string& host, uint16_t port, const tls::TlsCredentials* creds,
                               uint32_t timeout_ms, std::string* error);
  // Encodes and sends one message (all of it, or a failure).
  [[nodiscard]] Status send(const wire::Message& message, uint32_t timeout_ms, std::string* error);
  // Receives one message. Frame caps are checked before the payload is read.
  [[nodiscard]] Status receive(wire::Message* message, uint32_t timeout_ms, std::string* error);
  // Sends close_notify (best effort) and closes the socket. Idempotent.
  void close();
  // Thread-safe: makes the blocking call in progress (and every later one, until reset_cancel())
  // fail with kCancelled.
  void cancel();
  void reset_cancel();
  bool is_open() const;

  // Wire bytes (frames) sent and received since construction, and TLS overhead included
  // (bytes on the socket).
  uint64_t frame_bytes_sent() const { return frame_bytes_sent_; }
  uint64_t frame_bytes_received() const { return frame_bytes_received_; }
  uint64_t socket_bytes_sent() const { return socket_bytes_sent_; }
  uint64_t socket_bytes_received() const { return socket_bytes_received_; }
  // "TLSv1.3" etc., or "plaintext".
  std::string protocol() const;

 private:
  struct Impl;
  Status fail(Status status, const std::string& what, std::string* error);
  Status write_raw(const uint8_t* data, size_t size, uint32_t timeout_ms, std::string* error);
  Status read_some_raw(std::vector<uint8_t>* into, uint32_t timeout_ms, std::string* error);
  Status flush_tls(uint32_t timeout_ms, std::string* error);
  Status read_plain(uint8_t* out, size_t size, uint32_t timeout_ms, std::string* error);

  std::unique_ptr<Impl> impl_;
  Transport transport_;
  std::atomic<bool> cancelled_{false};
  uint64_t frame_bytes_sent_ = 0;
  uint64_t frame_bytes_received_ = 0;
  uint64_t socket_bytes_sent_ = 0;
  uint64_t socket_bytes_received_ = 0;
};

}  // namespace net
}  // namespace edgefl

#endif  // EDGEFL_NET_TLS_STREAM_H_
