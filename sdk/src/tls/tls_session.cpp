#include "tls/tls_session.h"

#include <mbedtls/error.h>
#include <mbedtls/ssl.h>

#include <stdio.h>
#include <string.h>

namespace edgefl {
namespace tls {

static_assert(TlsSession::kWantRead == MBEDTLS_ERR_SSL_WANT_READ, "kWantRead must be mbedTLS's WANT_READ");

std::string tls_error_text(int ret) {
  char text[160] = "";
#if defined(MBEDTLS_ERROR_C)
  mbedtls_strerror(ret, text, sizeof text);
#else
  snprintf(text, sizeof text, "mbedTLS error");
#endif
  char code[24];
  snprintf(code, sizeof code, " (-0x%04x)", static_cast<unsigned>(ret < 0 ? -ret : ret));
  return std::string(text) + code;
}

void TlsSession::SslDeleter::operator()(mbedtls_ssl_context* ssl) const {
  mbedtls_ssl_free(ssl);
  delete ssl;
}

TlsSession::TlsSession() = default;
TlsSession::~TlsSession() = default;

Status TlsSession::init(const mbedtls_ssl_config* config, const char* hostname, std::string* error) {
  std::unique_ptr<mbedtls_ssl_context, SslDeleter> ssl(new mbedtls_ssl_context);
  mbedtls_ssl_init(ssl.get());
  int ret = mbedtls_ssl_setup(ssl.get(), config);
  if (ret == 0 && hostname != nullptr) ret = mbedtls_ssl_set_hostname(ssl.get(), hostname);
  if (ret != 0) {
    if (error) *error = "TLS setup failed: " + tls_error_text(ret);
    return Status::kTlsError;
  }
  mbedtls_ssl_set_bio(ssl.get(), this, &TlsSession::send_callback, &TlsSession::recv_callback, nullptr);
  ssl_ = std::move(ssl);
  return Status::kOk;
}

int TlsSession::send_callback(void* self, const unsigned char* data, size_t size) {
  auto* session = static_cast<TlsSession*>(self);
  session->outgoing_.insert(session->outgoing_.end(), data, data + size);
  return static_cast<int>(size);
}

int TlsSession::recv_callback(void* self, unsigned char* data, size_t size) {
  auto* session = static_cast<TlsSession*>(self);
  const size_t available = session->incoming_.size() - session->incoming_pos_;
  if (available == 0) return MBEDTLS_ERR_SSL_WANT_READ;
  const size_t n = size < available ? size : available;
  memcpy(data, session->incoming_.data() + session->incoming_pos_, n);
  session->incoming_pos_ += n;
  if (session->incoming_pos_ == session->incoming_.size()) {
    session->incoming_.clear();
    session->incoming_pos_ = 0;
  }
  return static_cast<int>(n);
}

void TlsSession::feed(Span<const uint8_t> ciphertext) {
  if (incoming_pos_ > 0 && incoming_pos_ >= incoming_.size() / 2) {  // compact the consumed head
    incoming_.erase(incoming_.begin(), incoming_.begin() + static_cast<ptrdiff_t>(incoming_pos_));
    incoming_pos_ = 0;
  }
  incoming_.insert(incoming_.end(), ciphertext.data(), ciphertext.data() + ciphertext.size());
}

void TlsSession::trim_buffers(size_t bytes) {
  if (outgoing_.empty() && outgoing_.capacity() > bytes) std::vector<uint8_t>().swap(outgoing_);
  if (incoming_pos_ == incoming_.size() && incoming_.capacity() > bytes) {
    std::vector<uint8_t>().swap(incoming_);
    incoming_pos_ = 0;
  }
}

void TlsSession::consume_outgoing(size_t n) {
  if (n >= outgoing_.size()) {
    outgoing_.clear();
  } else {
    outgoing_.erase(outgoing_.begin(), outgoing_.begin() + static_cast<ptrdiff_t>(n));
  }
}

int TlsSession::handshake() {
  if (!ssl_) return MBEDTLS_ERR_SSL_BAD_INPUT_DATA;
  if (handshake_done_) return 0;
  const int ret = mbedtls_ssl_handshake(ssl_.get());
  if (ret == 0) handshake_done_ = true;
  return ret == MBEDTLS_ERR_SSL_WANT_WRITE ? MBEDTLS_ERR_SSL_WANT_READ : ret;
}

int TlsSession::read(Span<uint8_t> out) {
  if (!ssl_ || !handshake_done_) return MBEDTLS_ERR_SSL_BAD_INPUT_DATA;
  for (;;) {
    const int ret = mbedtls_ssl_read(ssl_.get(), out.data(), out.size());
    if (ret > 0) return ret;
    if (ret == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY || ret == 0) return kClosed;
    // TLS 1.3 post-handshake messages: handled inside mbedTLS; read again.
    if (ret == MBEDTLS_ERR_SSL_RECEIVED_NEW_SESSION_TICKET) continue;
    if (ret == MBEDTLS_ERR_SSL_WANT_WRITE) return MBEDTLS_ERR_SSL_WANT_READ;
    return ret;
  }
}

int TlsSession::write(Span<const uint8_t> data) {
  if (!ssl_ || !handshake_done_) return MBEDTLS_ERR_SSL_BAD_INPUT_DATA;
  size_t done = 0;
  while (done < data.size()) {
    // The send callback never blocks, so mbedTLS writes whole records.
    const int ret = mbedtls_ssl_write(ssl_.get(), data.data() + done, data.size() - done);
    if (ret < 0) return ret;
    done += static_cast<size_t>(ret);
  }
  return static_cast<int>(data.size());
}

void TlsSession::close_notify() {
  if (ssl_ && handshake_done_) (void)mbedtls_ssl_close_notify(ssl_.get());
}

const char* TlsSession::protocol() const {
  if (!ssl_ || !handshake_done_) return "unknown";
  const char* v = mbedtls_ssl_get_version(ssl_.get());
  return v != nullptr ? v : "unknown";
}

const char* TlsSession::ciphersuite() const {
  if (!ssl_ || !handshake_done_) return "unknown";
  const char* c = mbedtls_ssl_get_ciphersuite(ssl_.get());
  return c != nullptr ? c : "unknown";
}

}  // namespace tls
}  // namespace edgefl
