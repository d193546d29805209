// tls/tls_session.h: one TLS connection as a state machine over byte buffers (sans I/O).
//
// mbedTLS reads and writes through two callbacks; here they read from an `incoming` buffer that
// the driver fills with what arrived from the socket, and append to an `outgoing` buffer that the
// driver sends. So the same session runs under a blocking client loop (tls/tls_stream.h) and under
// the server's coroutines (server/src/session.cpp), and in tests without any socket:
//
//   TlsSession s;  s.init(creds.config(), "localhost", &error);
//   for (;;) {
//     int r = s.handshake();              // 0: done; kWantRead: feed() more; < 0: failed
//     send(s.outgoing()); s.consume_outgoing(n);
//     if (r == TlsSession::kWantRead) s.feed(recv()); else break;
//   }
//
// Ownership: the session owns its mbedTLS context and both buffers; the config must outlive it.
// Not thread-safe: one driver thread (or strand) per session.
#ifndef EDGEFL_SRC_TLS_TLS_SESSION_H_
#define EDGEFL_SRC_TLS_TLS_SESSION_H_

#include <stddef.h>
#include <stdint.h>

#include <memory>
#include <string>
#include <vector>

#include "edgefl/span.h"
#include "edgefl/status.h"

struct mbedtls_ssl_config;
struct mbedtls_ssl_context;

namespace edgefl {
namespace tls {

class TlsSession {
 public:
  // Results of handshake(), read() and write() besides byte counts and mbedTLS errors (< 0).
  static constexpr int kWantRead = -0x6900;  // MBEDTLS_ERR_SSL_WANT_READ: feed() ciphertext, retry
  static constexpr int kClosed = 0;          // read(): the peer sent close_notify

  TlsSession();
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // Binds to `config` (which must outlive the session). `hostname` (client side): the name the
  // server's certificate must carry, or null to skip the check. Fails: kTlsError.
  [[nodiscard]] Status init(const mbedtls_ssl_config* config, const char* hostname, std::string* error);

  // Appends ciphertext received from the peer. The buffer is consumed by handshake()/read().
  void feed(Span<const uint8_t> ciphertext);
  // Bytes of ciphertext fed but not yet consumed.
  size_t pending_input() const { return incoming_.size() - incoming_pos_; }

  // Ciphertext to send, in order; consume_outgoing(n) after n bytes went out.
  Span<const uint8_t> outgoing() const { return {outgoing_.data(), outgoing_.size()}; }
  void consume_outgoing(size_t n);
  // Frees the input and output buffers' memory when they are empty and hold more than `bytes`
  // of capacity (after a large message, so that idle connections stay small).
  void trim_buffers(size_t bytes);

  // One step of the handshake: 0 when complete, kWantRead, or an mbedTLS error (< 0).
  int handshake();
  bool handshake_done() const { return handshake_done_; }
  // Plaintext: up to out.size() bytes read (> 0), kWantRead, kClosed, or an mbedTLS error.
  int read(Span<uint8_t> out);
  // Encrypts all of `data` into outgoing(); returns data.size() or an mbedTLS error.
  int write(Span<const uint8_t> data);
  // Queues close_notify into outgoing().
  void close_notify();

  mbedtls_ssl_context* ssl() { return ssl_.get(); }
  const mbedtls_ssl_context* ssl() const { return ssl_.get(); }
  // "TLSv1.3", "TLSv1.2" or "unknown".
  const char* protocol() const;
  const char* ciphersuite() const;

 private:
  static int send_callback(void* self, const unsigned char* data, size_t size);
  static int recv_callback(void* self, unsigned char* data, size_t size);

  struct SslDeleter {
    void operator()(mbedtls_ssl_context* ssl) const;
  };
  std::unique_ptr<mbedtls_ssl_context, SslDeleter> ssl_;
  std::vector<uint8_t> incoming_;
  size_t incoming_pos_ = 0;
  std::vector<uint8_t> outgoing_;
  bool handshake_done_ = false;
};

// mbedtls_strerror of `ret` ("SSL - ..."), with the code in hex.
std::string tls_error_text(int ret);

}  // namespace tls
}  // namespace edgefl

#endif  // EDGEFL_SRC_TLS_TLS_SESSION_H_
