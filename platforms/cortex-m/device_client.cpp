// platforms/cortex-m/device_client.cpp: a bare-metal Cortex-M4F device takes part in federated
// rounds of an unmodified edgefl-server, over mutually authenticated TLS 1.3, in a fixed amount
// of RAM (no heap, no OS, no exceptions).
//
// Per round: Hello -> TaskOffer (or RetryLater: wait as asked) -> the model (version 1 built here
// from the offer's spec and seed; later versions as the patch stream of round/downlink.h, checked
// by SHA-256 before and after applying) -> local training on the Fashion-MNIST shard in flash
// (edgefl::SgdTrainer) -> error feedback and encoding with the offer's codec and codec seed
// (round/update_steps.h, the functions the hosted client uses) -> UploadStart / UploadChunk ->
// Commit -> Ack. All on one TLS session; the server's idle timeout (60 s) is far above a round.
//
// The link is UART0, which QEMU bridges to the server's TCP port (`-serial tcp:HOST:PORT`), so
// the server sees an ordinary TLS client. Credentials (CA, device certificate and key, server
// name) come from the flash partition of credentials.h; entropy from mbedtls_hardware_poll()
// below; mbedTLS's memory from a 24 KiB arena (MBEDTLS_MEMORY_BUFFER_ALLOC_C); the round's from
// a second arena carved per round by plan_round(). The protocol is the SDK's, the code the hosted
// clients run: frames (wire/frame.cpp), the client's messages (wire/client_tables.h), the server's
// messages read and checked field by field, and the sequence rules (wire/client_protocol.h).
//
// Output (semihosting): one line per phase, the memory plan, and a footprint line. Exit status 0
// when kRounds updates were counted (acked Accepted or Duplicate; a round that ends without the
// device's update, because the server moved on, is followed by the next, up to kMaxRoundsEnded
// times), else a status naming the failed step (kExit*).
// device_client_test.sh runs it against a real server.
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <mbedtls/entropy.h>
#include <mbedtls/memory_buffer_alloc.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>
#include <psa/crypto.h>
extern "C" {  // mbedTLS 3.6.6's psa_util.h does not declare C linkage itself
#include <mbedtls/psa_util.h>
}

#include "board.h"
#include "credentials.h"
#include "device_shard.h"
#include "edgefl/codec.h"
#include "edgefl/error_feedback.h"
#include "edgefl/model.h"
#include "edgefl/trainer.h"
#include "edgefl/wire.h"
#include "round/downlink.h"
#include "round/update_steps.h"
#include "semihost.h"
#include "wire/client_protocol.h"
#include "wire/client_tables.h"

#include "edgefl_wire_generated.h"

[[noreturn]] void device_fault(const char* what);

namespace fbs = edgefl::wire::fb;
// The protocol code shared with the hosted clients: the client's message tables
// (wire/client_tables.h), the reading of the server's messages and the round's sequence rules
// (wire/client_protocol.h).
namespace tables = edgefl::wire::internal;
using edgefl::Span;
using edgefl::Status;
using edgefl::wire::MessageType;

// FlatBuffers' DefaultAllocator (operator new[]) is the fallback of a builder given no allocator;
// every builder here gets one (MessageAllocator), so these are never called. Firmware has no
// heap: a call ends the program.
void* operator new[](size_t) {
  device_fault("operator new[]");
}
void operator delete[](void*) noexcept {
  device_fault("operator delete[]");
}
void operator delete[](void*, size_t) noexcept {
  device_fault("operator delete[]");
}
void operator delete(void*) noexcept {
  device_fault("operator delete");
}
void operator delete(void*, size_t) noexcept {
  device_fault("operator delete");
}

// FlatBuffers' internal consistency checks (device_assert.h).
extern "C" void edgefl_device_assert_failed(void) {
  device_fault("FlatBuffers assertion");
}

[[noreturn]] void device_fault(const char* what) {
  (Line() << "device: FAIL: " << what << " (no heap on the device)").print();
  semihost_exit(97);
}

namespace {

#ifndef EDGEFL_DEVICE_ROUNDS
#define EDGEFL_DEVICE_ROUNDS 2
#endif
constexpr int kRounds = EDGEFL_DEVICE_ROUNDS;  // rounds to complete before the device stops

enum ExitStatus : int {
  kExitOk = 0,
  kExitCredentials = 10,
  kExitCrypto = 11,
  kExitTlsSetup = 12,
  kExitHandshake = 13,
  kExitProtocol = 14,
  kExitRefused = 15,
  kExitMemory = 16,
  kExitModel = 17,
  kExitTraining = 18,
  kExitEncoding = 19,
  kExitNotAccepted = 20,
  kExitNoTask = 21,
  kExitLink = 22,  // the link failed (or, internally: failed once, reconnect)
  // Internal, not an exit status: the round ended without this device's update (the server moved
  // on while the device was away, or does not hold the update); the run goes on with the next.
  kExitRoundEnded = 23,
};

// --- memory: everything is here, sized at build time --------------------------------------
// The RAM budget of the whole device program is 256 KiB: these arenas, the message buffers, the
// 24 KiB stack (CMakeLists.txt: decoding a sparq patch takes 15 KiB of it) and a few hundred bytes
// of state. The footprint line reports each; device_client_test.sh checks the ELF against it.
constexpr size_t kTlsArenaBytes = 24 * 1024;     // mbedTLS: the goal for one TLS connection
constexpr size_t kRoundArenaBytes = 184 * 1024;  // the model, its update and the round's phases
constexpr size_t kMessageBytes = 4 * 1024;       // one outgoing message, built in place
// One incoming payload: a frame must fit one TLS record this device can read.
constexpr size_t kReplyBytes = MBEDTLS_SSL_IN_CONTENT_LEN - edgefl::wire::kFrameHeaderBytes;
// ModelChunks must fit one TLS record the device can read (MBEDTLS_SSL_IN_CONTENT_LEN 4096, with
// the frame and the FlatBuffer around the data); UploadChunks are cut the same way.
#if EDGEFL_DEVICE_TEST_DROPS || EDGEFL_DEVICE_TEST_AWAY
#define EDGEFL_DEVICE_TEST_BUILD 1
#endif
#if EDGEFL_DEVICE_TEST_DROPS
// The test build drops its link on purpose (device_client_test.sh): small chunks, so that a drop
// lands in the middle of a download and of an upload.
constexpr uint32_t kDownloadChunkBytes = 64;
constexpr uint32_t kUploadChunkBytes = 256;
#else
constexpr uint32_t kDownloadChunkBytes = 3 * 1024;
constexpr uint32_t kUploadChunkBytes = 3 * 1024;
#endif
// A read that waits longer than this ends the session (the link is taken for dead), and so does a
// frame or a handshake that takes longer than kExchangeDeadlineMs in all.
constexpr uint32_t kReadTimeoutMs = 20000;
constexpr uint32_t kExchangeDeadlineMs = 60000;
// After a failed link: up to kMaxReconnects new sessions, kReconnectDelayMs apart (QEMU's bridge
// redials 1 s after the server closed the TCP connection; a modem would redial too).
constexpr int kMaxReconnects = 4;
constexpr int kMaxReconnectsPerRun = 16;
constexpr uint32_t kCloseWaitMs = 2000;            // for the server's end of a session the device ended
constexpr uint32_t kKeepSessionMaxPauseMs = 5000;  // longer RetryLater pauses end the session
constexpr uint32_t kMaxBusyPauseMs = 30000;        // the longest ServerBusy pause during a reconnect
constexpr uint32_t kReconnectDelayMs = 1500;
constexpr uint32_t kMaxWaitForTaskMs = 300000;
constexpr uint64_t kMaxTrainingSteps = 4096;  // per round: a bound on what a server can ask
constexpr int kMaxRoundsEnded = 8;            // rounds that end without the device, per run, before it stops

// Painted arenas: the highest byte that is no longer paint is the high-water mark.
constexpr uint8_t kPaint = 0xA5;
alignas(8) uint8_t g_tls_arena[kTlsArenaBytes];
alignas(8) uint8_t g_round_arena[kRoundArenaBytes];
alignas(8) uint8_t g_message_arena[kMessageBytes];
alignas(8) uint8_t g_reply[kReplyBytes];
// mbedtls_memory_buffer_alloc_init() zeroes its arena and writes one block header at the start.
constexpr size_t kTlsArenaHeaderBytes = 64;

size_t high_water(const uint8_t* arena, size_t size) {
  while (size > 0 && arena[size - 1] == kPaint) --size;
  return size;
}
size_t tls_high_water() {
  return high_water(g_tls_arena, kTlsArenaBytes);
}
size_t round_high_water() {
  return high_water(g_round_arena, kRoundArenaBytes);
}

// One builder at a time owns g_message_arena (each builder gets its own allocator, a local: an
// object with a virtual destructor at namespace scope would need atexit()).
class MessageAllocator final : public flatbuffers::Allocator {
 public:
  uint8_t* allocate(size_t size) override {
    if (in_use_ || size > sizeof g_message_arena) return nullptr;
    in_use_ = true;
    return g_message_arena;
  }
  void deallocate(uint8_t*, size_t) override { in_use_ = false; }

 private:
  bool in_use_ = false;
};

extern "C" const uint8_t __credentials_start__[];
extern "C" const uint8_t __credentials_end__[];

// --- TLS over the UART ----------------------------------------------------------------------
mbedtls_x509_crt g_ca, g_own;
mbedtls_pk_context g_key;
mbedtls_ssl_config g_conf;
mbedtls_ssl_context g_ssl;

int uart_send(void*, const unsigned char* data, size_t length) {
  board::uart_write(data, length);
  return static_cast<int>(length);
}

uint32_t g_read_timeout_ms = kReadTimeoutMs;
// Reads give up at this tick (0: no deadline): a whole frame, or a whole handshake, must arrive
// within kExchangeDeadlineMs, however the server paces its bytes.
uint64_t g_deadline_ticks = 0;

int uart_recv(void*, unsigned char* data, size_t length) {
  uint32_t timeout_ms = g_read_timeout_ms;
  if (g_deadline_ticks != 0) {
    const uint64_t now = board::ticks();
    if (now >= g_deadline_ticks) return MBEDTLS_ERR_SSL_TIMEOUT;
    const uint32_t left_ms = board::ticks_to_ms(g_deadline_ticks - now) + 1;
    if (left_ms < timeout_ms) timeout_ms = left_ms;
  }
  const size_t n = board::uart_read(data, length, timeout_ms);
  return n == 0 ? MBEDTLS_ERR_SSL_TIMEOUT : static_cast<int>(n);
}

// The policy of edgefl's hosted clients (sdk/src/tls/tls_credentials.cpp), TLS 1.3 only.
const int kSuites[] = {MBEDTLS_TLS1_3_AES_128_GCM_SHA256, 0};
const uint16_t kGroups[] = {MBEDTLS_SSL_IANA_TLS_GROUP_X25519, MBEDTLS_SSL_IANA_TLS_GROUP_SECP256R1,
                            MBEDTLS_SSL_IANA_TLS_GROUP_NONE};
const uint16_t kSigAlgs[] = {MBEDTLS_TLS1_3_SIG_ECDSA_SECP256R1_SHA256, MBEDTLS_TLS1_3_SIG_NONE};
const mbedtls_x509_crt_profile kP256Only = {
    MBEDTLS_X509_ID_FLAG(MBEDTLS_MD_SHA256),
    MBEDTLS_X509_ID_FLAG(MBEDTLS_PK_ECKEY) | MBEDTLS_X509_ID_FLAG(MBEDTLS_PK_ECDSA),
    MBEDTLS_X509_ID_FLAG(MBEDTLS_ECP_DP_SECP256R1), 2048};

int tls_write_all(const uint8_t* data, size_t length) {
  while (length > 0) {
    const int n = mbedtls_ssl_write(&g_ssl, data, length);
    if (n == MBEDTLS_ERR_SSL_WANT_READ || n == MBEDTLS_ERR_SSL_WANT_WRITE) continue;
    if (n <= 0) return n == 0 ? MBEDTLS_ERR_SSL_CONN_EOF : n;
    data += n;
    length -= static_cast<size_t>(n);
  }
  return 0;
}

int tls_read_exactly(uint8_t* out, size_t length) {
  size_t have = 0;
  while (have < length) {
    const int n = mbedtls_ssl_read(&g_ssl, out + have, length - have);
    if (n == MBEDTLS_ERR_SSL_WANT_READ || n == MBEDTLS_ERR_SSL_WANT_WRITE) continue;
    if (n <= 0) return n == 0 ? MBEDTLS_ERR_SSL_CONN_EOF : n;
    have += static_cast<size_t>(n);
  }
  return 0;
}

// --- reporting ------------------------------------------------------------------------------
struct Phase {
  const char* name;
  uint64_t start_ticks;
  uint64_t start_wait;
};

Phase begin(const char* name) {
  return {name, board::ticks(), board::uart_wait_ticks()};
}

void end(const Phase& phase, int round) {
  const uint64_t total = board::ticks() - phase.start_ticks;
  const uint64_t wait = board::uart_wait_ticks() - phase.start_wait;
  // Work: the ticks not spent waiting for bytes. Under QEMU with -icount shift=0 one instruction
  // takes 1 ns of virtual time, so a 25 MHz tick is 40 instructions (device_client_test.sh).
  (Line() << "device: round " << static_cast<unsigned long>(round) << " " << phase.name << ": "
          << static_cast<unsigned long>(board::ticks_to_ms(total)) << " ms ("
          << static_cast<unsigned long>(board::ticks_to_ms(wait)) << " ms waiting for the server), work "
          << static_cast<unsigned long>(total - wait) << " ticks, stack so far "
          << static_cast<unsigned long>(startup_stack_high_water()) << " bytes")
      .print();
}

int fail(int status, const char* step, int code = 0) {
  Line line;
  line << "device: FAIL: " << step;
  if (code < 0) {
    line << ": mbedTLS error -";
    line.hex(static_cast<uint32_t>(-code));
  }
  line.print();
  return status;
}

int fail_status(int exit_status, const char* step, Status s) {
  (Line() << "device: FAIL: " << step << ": " << edgefl::status_name(s)).print();
  return exit_status;
}

// The round ended without this device's update: said so, and the run goes on (kExitRoundEnded).
int round_ended(uint64_t round_id, const char* why) {
  (Line() << "device: round " << static_cast<unsigned long>(round_id)
          << " ended without this device's update (" << why << "): not counted")
      .print();
  return kExitRoundEnded;
}

// A reply the shared rules refuse: the status and the field (wire/client_protocol.h).
int fail_detail(const char* step, Status s, const edgefl::wire::DecodeDetail& detail) {
  (Line() << "device: FAIL: " << step << ": " << edgefl::status_name(s) << " ("
          << edgefl::wire::violation_name(detail.violation) << " " << detail.field << ")")
      .print();
  return kExitProtocol;
}

// --- messages --------------------------------------------------------------------------------
// True once the server has answered on this TLS session.
bool g_session_answered = false;

// What a failed read or write means: before the server's first answer on a session, that the
// server refuses this device (in TLS 1.3 the client's handshake ends before the server has
// checked the client's certificate: a refusal arrives as the first record after it, an alert
// under the handshake keys, which this side reads as a bad MAC, or the end of the connection);
// after it, a failed link (kExitLink: the caller reconnects and resumes).
int link_failure(const char* what, int ret) {
  if (!g_session_answered) {
    return fail(kExitRefused,
                "the server ended the session after the handshake (it refuses this certificate)", ret);
  }
  return fail(kExitLink, what, ret);
}

// Sends the message `builder` holds as one frame.
int send_message(MessageType type, flatbuffers::FlatBufferBuilder& builder) {
  uint8_t header[edgefl::wire::kFrameHeaderBytes];
  if (edgefl::wire::write_frame_header(type, static_cast<uint32_t>(builder.GetSize()),
                                       {header, sizeof header}) != Status::kOk) {
    return fail(kExitProtocol, "a message above its frame cap");
  }
  int ret = tls_write_all(header, sizeof header);
  if (ret == 0) ret = tls_write_all(builder.GetBufferPointer(), builder.GetSize());
  return ret == 0 ? kExitOk : link_failure("sending", ret);
}

// Builds one message over g_message_arena with build(builder), which calls the SDK's table
// builder for it (wire/client_tables.h: the code edgefl::wire's encode() runs for the hosted
// clients) and returns the table, then sends it as one frame.
template <typename Build>
int send_built(MessageType type, const Build& build) {
  MessageAllocator allocator;
  flatbuffers::FlatBufferBuilder builder(kMessageBytes - 64, &allocator, false, 8);
  tables::finish_envelope(builder, type, build(builder));
  return send_message(type, builder);
}

// The round and nonce of the last TaskOffer the server sent: after a reconnect, whether the round
// the device works on is still the one open (wire/client_protocol.h: pending_after_offer).
struct OfferSeen {
  bool valid = false;
  uint64_t round_id = 0;
  uint8_t nonce[edgefl::wire::kRoundNonceLongBytes] = {};
  size_t nonce_length = 0;
};
OfferSeen g_offer_seen;

// One message from the server, read and checked by the shared reader: the view of its type is
// set; views point into g_reply until the next receive().
struct Reply {
  MessageType type = MessageType::kError;
  tables::OfferView offer;
  edgefl::wire::RetryLater retry;
  tables::ModelChunkView chunk;
  edgefl::wire::UploadStatus upload_status;
  edgefl::wire::Ack ack;
  tables::ErrorView error;
};

// Reads the server's message within kExchangeDeadlineMs into g_reply: verified under the SDK's
// Verifier limits and the field rules of its type (the hosted decode() runs the same code; of a
// TaskOffer, the tensor table and secure-aggregation settings are not read here: see accept_offer).
int receive(Reply* reply) {
  struct Deadline {  // the whole frame within kExchangeDeadlineMs
    Deadline() { g_deadline_ticks = board::ticks() + board::ms_to_ticks(kExchangeDeadlineMs); }
    ~Deadline() { g_deadline_ticks = 0; }
  } deadline;
  uint8_t header[edgefl::wire::kFrameHeaderBytes];
  int ret = tls_read_exactly(header, sizeof header);
  if (ret != 0) return link_failure("reading a frame header", ret);
  edgefl::wire::FrameHeader frame;
  Status s = edgefl::wire::read_frame_header({header, sizeof header}, &frame);
  if (s != Status::kOk) return fail_status(kExitProtocol, "an invalid frame header", s);
  if (frame.payload_length > kReplyBytes) return fail(kExitProtocol, "a reply larger than this device takes");
  ret = tls_read_exactly(g_reply, frame.payload_length);
  if (ret != 0) return link_failure("reading a reply", ret);
  const fbs::Envelope* e = nullptr;
  s = tables::open_envelope(frame, {g_reply, frame.payload_length}, &e);
  if (s != Status::kOk) return fail_status(kExitProtocol, "a reply that fails verification", s);
  edgefl::wire::DecodeDetail detail;
  reply->type = frame.type;
  switch (frame.type) {
    case MessageType::kTaskOffer:
      s = tables::read_offer(*e->message_as_TaskOffer(), &reply->offer, &detail);
      break;
    case MessageType::kRetryLater:
      s = tables::read_retry_later(*e->message_as_RetryLater(), &reply->retry, &detail);
      break;
    case MessageType::kModelChunk:
      s = tables::read_model_chunk(*e->message_as_ModelChunk(), &reply->chunk, &detail);
      break;
    case MessageType::kUploadStatus:
      s = tables::read_upload_status(*e->message_as_UploadStatus(), &reply->upload_status, &detail);
      break;
    case MessageType::kAck: s = tables::read_ack(*e->message_as_Ack(), &reply->ack, &detail); break;
    case MessageType::kError: s = tables::read_error(*e->message_as_Error(), &reply->error, &detail); break;
    default: return fail(kExitProtocol, "a message no server sends to a device in a plain round");
  }
  if (s != Status::kOk) return fail_detail("a reply the protocol's rules refuse", s, detail);
  if (reply->type == MessageType::kTaskOffer) {
    g_offer_seen.valid = true;
    g_offer_seen.round_id = reply->offer.round_id;
    g_offer_seen.nonce_length = reply->offer.round_nonce.size();  // 16 or 32: the shared rules
    memcpy(g_offer_seen.nonce, reply->offer.round_nonce.data(), g_offer_seen.nonce_length);
  }
  if (reply->type == MessageType::kError) {
    // The server's text, printable ASCII only (it must not forge lines of this output).
    char text[96] = {};
    for (size_t i = 0; i < reply->error.message.size() && i + 1 < sizeof text; ++i) {
      const char c = reply->error.message[i];
      text[i] = (c >= 0x20 && c < 0x7F) ? c : '?';
    }
    (Line() << "device: the server answered Error " << static_cast<unsigned long>(reply->error.code) << ": "
            << text)
        .print();
  }
  g_session_answered = true;
  return kExitOk;
}

int sha256(const void* data, size_t length, uint8_t out[32]) {
  size_t written = 0;
  const psa_status_t s =
      psa_hash_compute(PSA_ALG_SHA_256, static_cast<const uint8_t*>(data), length, out, 32, &written);
  return s == PSA_SUCCESS && written == 32 ? kExitOk
                                           : fail(kExitCrypto, "SHA-256 (PSA status)", static_cast<int>(s));
}

// --- the session: handshake, and a new session after a failed link --------------------------
int g_reconnects = 0;
// The test builds' drops, each once. EDGEFL_DEVICE_TEST_DROPS: in the middle of an upload,
// between Commit and its Ack, in the middle of a download. EDGEFL_DEVICE_TEST_AWAY: before the
// first upload, away for kAwayMs (longer than the test server's deadline: the round ends meanwhile).
enum TestDrop : unsigned { kDropMidUpload = 1, kDropBeforeAck = 2, kDropMidDownload = 4, kDropAway = 8 };
constexpr uint32_t kAwayMs = 7000;
#if EDGEFL_DEVICE_TEST_BUILD
#if EDGEFL_DEVICE_TEST_DROPS
unsigned g_drops_left = kDropMidUpload | kDropBeforeAck | kDropMidDownload;
#else
unsigned g_drops_left = kDropAway;
#endif

// True (once per kind) when the test build drops its link here.
bool test_drop(TestDrop which, const char* where) {
  if (!(g_drops_left & which)) return false;
  g_drops_left &= ~which;
  (Line() << "device: test: dropping the link " << where).print();
  return true;
}
#else
bool test_drop(TestDrop, const char*) {
  return false;
}
#endif

int handshake() {
  g_session_answered = false;
  g_deadline_ticks = board::ticks() + board::ms_to_ticks(kExchangeDeadlineMs);
  int ret;
  do {
    ret = mbedtls_ssl_handshake(&g_ssl);
  } while (ret == MBEDTLS_ERR_SSL_WANT_READ || ret == MBEDTLS_ERR_SSL_WANT_WRITE);
  g_deadline_ticks = 0;
  return ret;
}

void wait_ms(uint32_t ms) {
  const uint64_t until = board::ticks() + board::ms_to_ticks(ms);
  while (board::ticks() < until) {
  }
}

int say_hello(Reply* reply);

// Ends the current session and opens a new one after `delay_ms`: close_notify, a short wait for
// the server's end of it (so that the new session's first bytes go to a new connection; best
// effort, the link may be gone already), the delay (QEMU's bridge redials a second after the
// server closed), at most 4 KiB or 2 s of stale bytes dropped, then a full handshake (this build
// keeps no resumption ticket). Returns the handshake's mbedTLS code.
int new_session(uint32_t delay_ms) {
  uint8_t ignored[64];
  if (mbedtls_ssl_is_handshake_over(&g_ssl)) {  // a session to end (not a failed handshake)
    mbedtls_ssl_close_notify(&g_ssl);
    g_read_timeout_ms = kCloseWaitMs;
    for (int i = 0; i < 64 && mbedtls_ssl_read(&g_ssl, ignored, sizeof ignored) > 0; ++i) {
    }
    g_read_timeout_ms = kReadTimeoutMs;
  }
  wait_ms(delay_ms);
  const uint64_t drain_until = board::ticks() + board::ms_to_ticks(2000);
  for (size_t dropped = 0; dropped < 4096 && board::ticks() < drain_until;) {
    const size_t n = board::uart_read(ignored, sizeof ignored, 100);
    if (n == 0) break;
    dropped += n;
  }
  const int reset = mbedtls_ssl_session_reset(&g_ssl);
  return reset != 0 ? reset : handshake();
}

// After a failed link: a new session with a Hello, which the server wants first on every
// connection; the caller resumes what it was doing. Up to kMaxReconnects attempts, and
// kMaxReconnectsPerRun in all: then kExitLink, final. A refusal right after a new handshake (or
// an Error answering Hello: the server is busy) counts as a failed attempt; a draining server
// ends the run.
int reconnect() {
  if (g_reconnects >= kMaxReconnectsPerRun) return fail(kExitLink, "the link failed too often");
  for (int attempt = 1; attempt <= kMaxReconnects; ++attempt) {
    const int ret = new_session(kReconnectDelayMs);
    if (ret != 0) {
      fail(kExitLink, "reconnecting: handshake", ret);
      continue;
    }
    Reply reply;
    g_offer_seen.valid = false;  // what this Hello's answer says about the round, if anything
    const int status = say_hello(&reply);
    if (status == kExitLink || status == kExitRefused) continue;
    if (status != kExitOk) return status;
    if (reply.type == MessageType::kError) continue;
    const bool retry = reply.type == MessageType::kRetryLater;
    if (retry && reply.retry.reason == edgefl::wire::RetryReason::kDraining) {
      return fail(kExitNoTask, "the server drains");
    }
    if (retry && reply.retry.reason == edgefl::wire::RetryReason::kServerBusy) {
      // A busy server closes the connection after this answer: wait as asked (capped), then
      // another attempt.
      const uint32_t pause_ms =
          reply.retry.retry_after_ms < kMaxBusyPauseMs ? reply.retry.retry_after_ms : kMaxBusyPauseMs;
      wait_ms(pause_ms);
      continue;
    }
    ++g_reconnects;
    (Line() << "device: reconnected (session " << static_cast<unsigned long>(g_reconnects + 1) << ", attempt "
            << static_cast<unsigned long>(attempt) << ")")
        .print();
    return kExitOk;
  }
  ++g_reconnects;
  return fail(kExitLink, "the link did not come back");
}

// --- the round's memory (caller-owned, carved from g_round_arena) --------------------------
// Kept across rounds: the public model and the error-feedback residual. Per round: the update,
// then one region reused by the phases in turn (download stream + decode workspace; trainer
// workspace; encoded update + codec workspace, the encoding kept until the upload ends).
struct RoundPlan {
  size_t model = 0, residual = 0, delta = 0;
  size_t download = 0, train = 0, encode = 0;
  size_t total() const {
    size_t phases = download;
    if (train > phases) phases = train;
    if (encode > phases) phases = encode;
    return model + residual + delta + phases;
  }
};

size_t align8(size_t n) {
  return (n + 7) & ~size_t{7};
}

struct DeviceState {
  uint64_t model_version = 0;  // 0: no trusted model
  size_t n = 0;                // the model's parameter count (0: none)
  char codec[edgefl::wire::kMaxCodecSpecChars + 1] = {};
  edgefl::ErrorFeedback feedback;
  bool feedback_ready = false;
  bool needs_whole_model = false;  // a patched model failed: ask for the whole one (Hello flag)
};
DeviceState g_state;

float* model_floats() {
  return reinterpret_cast<float*>(g_round_arena);
}

// --- one round --------------------------------------------------------------------------------
// The offer, copied out of g_reply (which every reply overwrites) and checked.
struct Offer {
  uint64_t round_id = 0;
  uint8_t nonce[edgefl::wire::kRoundNonceLongBytes] = {};
  size_t nonce_length = 0;
  uint64_t model_version = 0;
  uint64_t base_model_version = 0;
  uint64_t model_bytes = 0;
  uint8_t model_digest[32] = {};
  uint8_t public_model_digest[32] = {};
  uint64_t initial_model_seed = 0;
  uint64_t codec_seed = 0;
  uint32_t max_chunk_bytes = 0;
  uint64_t max_upload_bytes = 0;
  char model_spec[edgefl::wire::kMaxModelSpecChars + 1] = {};
  char uplink_codec[edgefl::wire::kMaxCodecSpecChars + 1] = {};
  edgefl::TrainConfig training;
  edgefl::ModelSpec spec;
  edgefl::CodecSpec codec;
  edgefl::CodecSpec downlink;
  size_t n = 0;
};

// The shared rules hold (printable, within the protocol's lengths); `capacity` is this device's.
bool copy_text(Span<const char> text, char* out, size_t capacity) {
  if (text.size() >= capacity) return false;
  memcpy(out, text.data(), text.size());
  out[text.size()] = '\0';
  return true;
}

int accept_offer(const tables::OfferView& t, Offer* offer);

// Hello: what this device can do and the model version it holds; *reply is the server's answer.
int say_hello(Reply* reply) {
  static const char kSdkVersion[] = "0.1.0-cortex-m4f";
  tables::HelloView hello;
  hello.sdk_version = {kSdkVersion, sizeof kSdkVersion - 1};
  hello.supported_sparsifiers = edgefl::wire::kKnownSparsifierBits;
  hello.supported_value_coders = edgefl::wire::kKnownValueCoderBits;
  hello.supported_index_codings = edgefl::wire::kKnownIndexCodingBits;
  hello.memory_budget_bytes = kRoundArenaBytes;
  hello.cpu_cores = 1;
  hello.model_version = g_state.model_version;
  if (g_state.needs_whole_model) hello.capability_flags |= edgefl::wire::kCapabilityNeedsWholeModel;
  const int status = send_built(
      MessageType::kHello, [&](flatbuffers::FlatBufferBuilder& b) { return tables::build_hello(b, hello); });
  return status != kExitOk ? status : receive(reply);
}

// Hello until a TaskOffer (waiting as RetryLater asks), read into *offer.
int obtain_offer(int round, Offer* offer) {
  const uint64_t started = board::ticks();
  for (;;) {
    Reply reply;
    int status = say_hello(&reply);
    if (status == kExitLink) {  // the link failed around Hello: a new session, and Hello again
      status = reconnect();
      if (status != kExitOk) return status;
      continue;
    }
    if (status != kExitOk) return status;
    if (reply.type == MessageType::kRetryLater) {
      const edgefl::wire::RetryLater& retry = reply.retry;  // its ranges checked by the shared reader
      if (retry.reason == edgefl::wire::RetryReason::kDraining) return fail(kExitNoTask, "the server drains");
      // A uniform point of the server's window (devices spread out as the server asks).
      uint32_t random = 0;
      if (psa_generate_random(reinterpret_cast<uint8_t*>(&random), sizeof random) != PSA_SUCCESS) {
        return fail(kExitCrypto, "random pause");
      }
      const uint64_t pause_ms = tables::retry_pause_ms(retry, random);
      if (board::ticks() - started + board::ms_to_ticks(static_cast<uint32_t>(pause_ms)) >
          board::ms_to_ticks(kMaxWaitForTaskMs)) {
        return fail(kExitNoTask, "no task offered in 300 s");
      }
      (Line() << "device: round " << static_cast<unsigned long>(round) << ": retry later, waiting "
              << static_cast<unsigned long>(pause_ms) << " ms")
          .print();
      if (pause_ms > kKeepSessionMaxPauseMs || retry.reason == edgefl::wire::RetryReason::kServerBusy) {
        // The session ends: a busy server closes it after this answer, and a long pause would
        // outlast its idle timeout (60 s). A new one opens after the pause (with retries).
        int ret = new_session(static_cast<uint32_t>(pause_ms));
        for (int attempt = 2; ret != 0 && attempt <= kMaxReconnects; ++attempt) {
          fail(kExitLink, "a new session after a pause: handshake", ret);
          ret = new_session(kReconnectDelayMs);
        }
        if (ret != 0) return fail(kExitLink, "no new session after a pause", ret);
      } else {
        wait_ms(static_cast<uint32_t>(pause_ms));
      }
      continue;
    }
    if (reply.type != MessageType::kTaskOffer)
      return fail(kExitProtocol, "neither a TaskOffer nor a RetryLater");
    return accept_offer(reply.offer, offer);
  }
}

// The offer, valid by the protocol's rules (the shared reader checked every field), against what
// this device can do: a built-in model over its data, within its memory and its step limit, and
// no secure rounds. Copied into *offer: g_reply is overwritten by the next reply.
int accept_offer(const tables::OfferView& t, Offer* offer) {
  char downlink_codec[edgefl::wire::kMaxCodecSpecChars + 1];
  if (!copy_text(t.model_spec, offer->model_spec, sizeof offer->model_spec) ||
      !copy_text(t.uplink_codec, offer->uplink_codec, sizeof offer->uplink_codec) ||
      !copy_text(t.downlink_codec, downlink_codec, sizeof downlink_codec)) {
    return fail(kExitProtocol, "a TaskOffer with a text longer than this device takes");
  }
  if (t.secure_aggregation) {
    return fail(kExitProtocol, "a secure-aggregation round: this device does not take part in them");
  }
  // This device's own limit: at most kMaxTrainingSteps optimizer steps per round.
  const edgefl::wire::TrainingConfig& training = t.training;
  const uint64_t batches = (uint64_t{kShardCount} + training.batch_size - 1) / training.batch_size;
  uint64_t steps = batches * training.local_epochs;
  if (training.max_steps != 0 && training.max_steps < steps) steps = training.max_steps;
  if (steps > kMaxTrainingSteps)
    return fail(kExitTraining, "a round of more training steps than this device allows");
  offer->round_id = t.round_id;
  offer->nonce_length = t.round_nonce.size();  // 16 or 32: the shared rules
  memcpy(offer->nonce, t.round_nonce.data(), t.round_nonce.size());
  offer->model_version = t.model_version;
  offer->base_model_version = t.base_model_version;
  offer->model_bytes = t.model_bytes;
  memcpy(offer->model_digest, t.model_digest.data(), 32);  // 32 bytes: the shared reader
  memcpy(offer->public_model_digest, t.public_model_digest.data(), 32);
  offer->initial_model_seed = t.initial_model_seed;
  offer->codec_seed = t.codec_seed;
  offer->max_chunk_bytes = t.max_chunk_bytes;
  offer->training.batch_size = training.batch_size;
  offer->training.local_epochs = training.local_epochs;
  offer->training.max_steps = training.max_steps;
  offer->training.learning_rate = training.learning_rate;
  offer->training.momentum = training.momentum;
  offer->training.weight_decay = training.weight_decay;
  offer->training.prox_mu = training.prox_mu;
  offer->training.seed = training.seed;
  offer->training.micro_batch = 1;  // the smallest activations; the result is the same bits
  if (edgefl::parse_model_spec(offer->model_spec, &offer->spec) != Status::kOk) {
    return fail(kExitModel, "the offer's model is not a built-in model spec");
  }
  offer->n = edgefl::parameter_count(offer->spec);
  if (offer->n != t.parameter_count || edgefl::input_dim(offer->spec) != kShardInputDim) {
    return fail(kExitModel, "the offer's model does not match its parameter count or this device's data");
  }
  // Before any size arithmetic (32-bit size_t): a model, its residual and its update, 4 bytes per
  // parameter each, must fit the round arena.
  if (offer->n > kRoundArenaBytes / 12 || offer->model_bytes > kRoundArenaBytes) {
    return fail(kExitMemory, "the offer's model is larger than this device's memory");
  }
  offer->max_upload_bytes = t.max_upload_bytes;
  if (edgefl::parse_codec_spec(offer->uplink_codec, &offer->codec) != Status::kOk ||
      edgefl::parse_codec_spec(downlink_codec, &offer->downlink) != Status::kOk) {
    return fail(kExitProtocol, "the offer's codecs do not parse");
  }
  return kExitOk;
}

int plan_round(const Offer& offer, RoundPlan* plan) {
  const size_t n = offer.n;
  plan->model = align8(n * sizeof(float));
  plan->residual = align8(edgefl::ErrorFeedback::storage_bytes(n, edgefl::ResidualPrecision::kFp32));
  plan->delta = align8(n * sizeof(float));
  plan->download = align8(static_cast<size_t>(offer.model_bytes)) + edgefl::workspace_size(offer.downlink, n);
  plan->train = edgefl::SgdTrainer::workspace_bytes(offer.spec, offer.training);
  plan->encode = align8(edgefl::encoded_bound(offer.codec, n)) + edgefl::workspace_size(offer.codec, n);
  (Line() << "device: plan: model " << static_cast<unsigned long>(plan->model) << " + residual "
          << static_cast<unsigned long>(plan->residual) << " + update "
          << static_cast<unsigned long>(plan->delta) << " + max(download "
          << static_cast<unsigned long>(plan->download) << ", train "
          << static_cast<unsigned long>(plan->train) << ", encode "
          << static_cast<unsigned long>(plan->encode) << ") = " << static_cast<unsigned long>(plan->total())
          << " of " << static_cast<unsigned long>(kRoundArenaBytes) << " bytes")
      .print();
  if (plan->total() > kRoundArenaBytes || offer.model_bytes > kRoundArenaBytes) {
    return fail(kExitMemory, "the round needs more memory than this device has");
  }
  return kExitOk;
}

// After a reconnect: what the Hello's answer means for the round of `offer` and its update
// (commit_sent: a Commit of it went out), by the shared decision of wire/client_protocol.h. A
// RetryLater or an Error says nothing about it: kSameRound, and the server's next answers tell.
tables::PendingUpload after_reconnect(const Offer& offer, bool commit_sent) {
  if (!g_offer_seen.valid) return tables::PendingUpload::kSameRound;
  return tables::pending_after_offer(offer.round_id, {offer.nonce, offer.nonce_length}, commit_sent,
                                     g_offer_seen.round_id, {g_offer_seen.nonce, g_offer_seen.nonce_length});
}

// A new session in the middle of a download; kExitRoundEnded when the server offers another round
// meanwhile (nothing of this round's can count any more).
int reconnect_during_download(const Offer& offer) {
  const int status = reconnect();
  if (status != kExitOk) return status;
  return after_reconnect(offer, false) == tables::PendingUpload::kDiscard
             ? round_ended(offer.round_id, "another round opened while away")
             : kExitOk;
}

// The model of the offer's version in model_floats(), checked against the offer's digests.
int obtain_model(int round, const Offer& offer, const RoundPlan& plan) {
  const size_t n = offer.n;
  if (g_state.n != n) {  // another model: nothing held is of use
    g_state.model_version = 0;
    g_state.feedback_ready = false;
    g_state.n = n;
  }
  const uint64_t held = g_state.model_version;
  if (held == offer.model_version) {  // held already: still the server's public model?
    uint8_t held_digest[32];
    if (sha256(model_floats(), n * sizeof(float), held_digest) != kExitOk) return kExitCrypto;
    if (memcmp(offer.public_model_digest, held_digest, 32) == 0) return kExitOk;
    g_state.model_version = 0;
    g_state.needs_whole_model = true;
    return fail(kExitModel, "the held model no longer matches the offer's public-model SHA-256");
  }
  const uint64_t base = offer.base_model_version;
  const bool seeded = base == 1 && held == 0 && offer.initial_model_seed != 0;
  if (base != 0 && base != held && !seeded)
    return fail(kExitModel, "the offer patches a version this device lacks");
  Phase phase = begin("download");
  float* model = model_floats();
  float* delta = reinterpret_cast<float*>(g_round_arena + plan.model + plan.residual);
  uint8_t* stream = g_round_arena + plan.model + plan.residual + plan.delta;
  uint8_t* workspace = stream + align8(static_cast<size_t>(offer.model_bytes));
  uint64_t got = 0;
  int resumed = 0;
  while (got < offer.model_bytes) {
    edgefl::wire::ModelRequest request;
    request.round_id = offer.round_id;
    request.model_version = offer.model_version;
    request.offset = got;
    request.max_length = tables::chunk_length(kDownloadChunkBytes, offer.max_chunk_bytes);
    request.base_model_version = base;
    int status = send_built(MessageType::kModelRequest, [&](flatbuffers::FlatBufferBuilder& b) {
      return tables::build_model_request(b, {request.round_id, request.model_version, request.offset,
                                             request.max_length, request.base_model_version});
    });
    Reply reply;
    if (status == kExitOk) status = receive(&reply);
    if (status == kExitLink) {  // a new session, then the same request: the download resumes at `got`
      status = reconnect_during_download(offer);
      if (status != kExitOk) return status;
      continue;
    }
    if (status != kExitOk) return status;
    if (reply.type == MessageType::kError && reply.error.code == edgefl::wire::ErrorCode::kUnknownRound) {
      return round_ended(offer.round_id, "the server ended it during the download");
    }
    if (reply.type != MessageType::kModelChunk)
      return fail(kExitProtocol, "a reply to ModelRequest not a chunk");
    // Its fields and CRC32C were checked by the reader; now that it continues this download.
    edgefl::wire::DecodeDetail detail;
    const Status s = tables::expect_model_chunk(reply.chunk, request, offer.model_bytes, &detail);
    if (s != Status::kOk) return fail_detail("a model chunk that does not continue the download", s, detail);
    memcpy(stream + got, reply.chunk.data.data(), reply.chunk.data.size());
    got += reply.chunk.data.size();
    if (got < offer.model_bytes && test_drop(kDropMidDownload, "mid-download")) {
      status = reconnect_during_download(offer);
      if (status != kExitOk) return status;
      ++resumed;
    }
  }
  uint8_t digest[32];
  if (sha256(stream, static_cast<size_t>(got), digest) != kExitOk) return kExitCrypto;
  if (memcmp(offer.model_digest, digest, 32) != 0)
    return fail(kExitModel, "the download fails the offer's SHA-256");
  g_state.model_version = 0;  // untrusted until the public model's digest matches
  if (seeded) {
    edgefl::init_parameters(offer.spec, offer.initial_model_seed, {model, n});
    if (edgefl::round_to_bf16_grid({model, n}) != Status::kOk) return fail(kExitModel, "the initial model");
  }
  // The decode workspace the patches need (they may come from an earlier downlink codec than the
  // offer's), within the round arena.
  const size_t workspace_bytes = edgefl::download_decode_workspace({stream, static_cast<size_t>(got)});
  if (workspace_bytes > static_cast<size_t>(g_round_arena + kRoundArenaBytes - workspace)) {
    g_state.needs_whole_model = true;
    return fail(kExitMemory, "the download's decode workspace does not fit this device's memory");
  }
  uint64_t patches = 0;
  Status s = edgefl::apply_download({stream, static_cast<size_t>(got)}, base == 0, {model, n}, {delta, n},
                                    {workspace, workspace_bytes}, &patches);
  if (s != Status::kOk) {
    g_state.needs_whole_model = base != 0;
    return fail_status(kExitModel, "the download does not apply", s);
  }
  if (base != 0 && patches != offer.model_version - base)
    return fail(kExitModel, "the download's patch count");
  if (sha256(model, n * sizeof(float), digest) != kExitOk) return kExitCrypto;
  if (memcmp(offer.public_model_digest, digest, 32) != 0) {
    g_state.needs_whole_model = base != 0;
    return fail(kExitModel, "the model after the download fails the offer's public-model SHA-256");
  }
  g_state.model_version = offer.model_version;
  g_state.needs_whole_model = false;
  end(phase, round);
  (Line() << "device: round " << static_cast<unsigned long>(round) << " model v"
          << static_cast<unsigned long>(offer.model_version) << ": "
          << (seeded      ? "built from the offer's seed"
              : base == 0 ? "whole model"
                          : "patched")
          << ", " << static_cast<unsigned long>(got) << " bytes downloaded, "
          << static_cast<unsigned long>(patches) << " patches, public-model SHA-256 verified"
          << (resumed > 0 ? ", download resumed after a new session" : ""))
      .print();
  return kExitOk;
}

struct Update {
  const uint8_t* bytes;
  size_t length;
  uint32_t samples;
  float loss;
  uint8_t digest[32];
  bool commit_sent;  // a Commit went out: the server may have counted it, even if no Ack came back
};

int compute_update(int round, const Offer& offer, const RoundPlan& plan, Update* update) {
  const size_t n = offer.n;
  float* model = model_floats();
  uint8_t* residual = g_round_arena + plan.model;
  float* delta = reinterpret_cast<float*>(g_round_arena + plan.model + plan.residual);
  uint8_t* region = g_round_arena + plan.model + plan.residual + plan.delta;
  Phase phase = begin("train");
  edgefl::SgdTrainer trainer;
  Status s = trainer.init(offer.spec, offer.training, {region, plan.train});
  if (s == Status::kOk) {
    edgefl::DataView data;
    data.inputs = kShardInputs;
    data.labels = kShardLabels;
    data.count = kShardCount;
    data.input_dim = kShardInputDim;
    s = trainer.set_data(data);
  }
  edgefl::FitResult fit;
  if (s == Status::kOk) {
    trainer.set_seed(offer.training.seed);
    s = trainer.fit({model, n}, {delta, n}, &fit);
  }
  if (s != Status::kOk) return fail_status(kExitTraining, "training", s);
  end(phase, round);
  (Line() << "device: round " << static_cast<unsigned long>(round) << " trained on "
          << static_cast<unsigned long>(fit.samples) << " samples (" << static_cast<unsigned long>(fit.steps)
          << " steps), loss x1000 " << static_cast<unsigned long>(fit.loss * 1000.0f) << ", accuracy x1000 "
          << static_cast<unsigned long>(fit.accuracy * 1000.0f))
      .print();

  phase = begin("encode");
  // The codec of this round; the residual carries over while the model and codec stay the same.
  edgefl::ErrorFeedback* feedback = nullptr;
  if (edgefl::needs_error_feedback(offer.codec)) {
    if (!g_state.feedback_ready || strcmp(g_state.codec, offer.uplink_codec) != 0) {
      s = g_state.feedback.init({residual, plan.residual}, n, edgefl::ResidualPrecision::kFp32);
      if (s != Status::kOk) return fail_status(kExitEncoding, "error feedback", s);
      memcpy(g_state.codec, offer.uplink_codec, sizeof g_state.codec);  // same size, NUL-terminated
      g_state.feedback_ready = true;
    }
    feedback = &g_state.feedback;
  }
  uint8_t* out = region;
  const size_t out_bytes = edgefl::encoded_bound(offer.codec, n);
  uint8_t* workspace = region + align8(out_bytes);
  const size_t workspace_bytes = edgefl::workspace_size(offer.codec, n);
  size_t written = 0;
  s = edgefl::encode_update(offer.codec, feedback, {delta, n}, offer.codec_seed, {workspace, workspace_bytes},
                            {out, out_bytes}, &written);
  if (s == Status::kOk)
    s = edgefl::verify_update({out, written}, n, offer.codec_seed, {workspace, workspace_bytes});
  if (s != Status::kOk) return fail_status(kExitEncoding, "encoding", s);
  update->bytes = out;
  update->length = written;
  update->samples = fit.samples > 0 ? fit.samples : 1;
  update->loss = fit.loss;
  if (sha256(out, written, update->digest) != kExitOk) return kExitCrypto;
  end(phase, round);
  (Line() << "device: round " << static_cast<unsigned long>(round)
          << " update: " << static_cast<unsigned long>(written) << " bytes with " << offer.uplink_codec
          << " (" << static_cast<unsigned long>(n * 2) << " in bf16)")
      .print();
  return kExitOk;
}

// One attempt at the upload on the current session: UploadStart (the server answers the offset it
// holds: 0, or where an earlier session stopped, or all of it), the chunks from there, Commit,
// Ack. kExitLink when the link fails: the caller reconnects and tries again with the same upload
// id, so nothing is sent twice that the server holds and an update is counted once (a second
// Commit of a counted update is acked Duplicate). ask_the_ledger: the round has ended; only an
// update the server holds in full (counted before) is committed again, for its Duplicate ack.
int try_upload(const Offer& offer, Update& update, const uint8_t* upload_id, bool ask_the_ledger,
               bool* accepted) {
  const uint64_t round_id = offer.round_id;
  const tables::UploadStartView start{
      round_id, {offer.nonce, offer.nonce_length}, {upload_id, edgefl::wire::kUploadIdBytes}, update.length};
  int status = send_built(MessageType::kUploadStart, [&](flatbuffers::FlatBufferBuilder& b) {
    return tables::build_upload_start(b, start);
  });
  if (status != kExitOk) return status;
  Reply reply;
  status = receive(&reply);
  if (status != kExitOk) return status;
  if (reply.type == MessageType::kError) {
    const edgefl::wire::ErrorCode code = reply.error.code;
    if (code == edgefl::wire::ErrorCode::kUnknownRound)
      return round_ended(round_id, "the server neither takes nor holds the update");
    // Asked about an ended round: a round of that id under another nonce (the server's state was
    // started again) never held the update either.
    if (ask_the_ledger && code == edgefl::wire::ErrorCode::kNonceMismatch)
      return round_ended(round_id,
                         "the server's round of that id has another nonce and never held the update");
    return fail(kExitProtocol, "the server refused UploadStart");
  }
  if (reply.type != MessageType::kUploadStatus)
    return fail(kExitProtocol, "a reply to UploadStart not a status");
  edgefl::wire::DecodeDetail detail;
  Status s = tables::expect_upload_status(reply.upload_status, round_id,
                                          {upload_id, edgefl::wire::kUploadIdBytes}, update.length, &detail);
  if (s != Status::kOk) return fail_detail("an upload status that does not match this upload", s, detail);
  const uint64_t held = reply.upload_status.offset;  // <= update.length: the shared rules
  if (ask_the_ledger && held != update.length) {
    return round_ended(round_id, "the server's ledger does not hold the update");
  }
  if (held > 0) {
    (Line() << "device: upload: the server holds " << static_cast<unsigned long>(held) << " of "
            << static_cast<unsigned long>(update.length) << " bytes; resuming from there")
        .print();
  }
  // The offer's chunk cap too: the server refuses a larger UploadChunk.
  const size_t chunk_bytes = tables::chunk_length(kUploadChunkBytes, offer.max_chunk_bytes);
  for (uint64_t offset = held; offset < update.length;) {
    const size_t length =
        update.length - offset < chunk_bytes ? static_cast<size_t>(update.length - offset) : chunk_bytes;
    const tables::UploadChunkView chunk{round_id,
                                        {upload_id, edgefl::wire::kUploadIdBytes},
                                        offset,
                                        update.length,
                                        {update.bytes + offset, length}};
    status = send_built(MessageType::kUploadChunk, [&](flatbuffers::FlatBufferBuilder& b) {
      return tables::build_upload_chunk(b, chunk);
    });
    if (status != kExitOk) return status;
    offset += length;
    if (offset < update.length && test_drop(kDropMidUpload, "mid-upload")) return kExitLink;
  }
  // Set before the send: a Commit that fails half-way may still have reached the server.
  update.commit_sent = true;
  status = send_built(MessageType::kCommit, [&](flatbuffers::FlatBufferBuilder& b) {
    static const char kLossName[] = "train_loss";
    const tables::MetricView loss{{kLossName, sizeof kLossName - 1},
                                  __builtin_isfinite(update.loss) ? update.loss : 0.0};
    flatbuffers::Offset<fbs::Metric> loss_offset;
    tables::CommitView commit;
    commit.round_id = round_id;
    commit.round_nonce = {offer.nonce, offer.nonce_length};
    commit.upload_id = {upload_id, edgefl::wire::kUploadIdBytes};
    commit.total_bytes = update.length;
    commit.sample_count = update.samples;
    commit.metrics = {&loss, 1};
    commit.metric_offsets = {&loss_offset, 1};
    commit.digest = {update.digest, sizeof update.digest};
    return tables::build_commit(b, commit);
  });
  if (status != kExitOk) return status;
  if (test_drop(kDropBeforeAck, "between Commit and Ack")) return kExitLink;
  status = receive(&reply);
  if (status != kExitOk) return status;
  if (reply.type != MessageType::kAck) return fail(kExitProtocol, "a reply to Commit not an ack");
  const edgefl::wire::Ack& ack = reply.ack;
  s = tables::expect_ack(ack, round_id, {upload_id, edgefl::wire::kUploadIdBytes}, &detail);
  if (s != Status::kOk) return fail_detail("no ack for this upload", s, detail);
  Line line;
  line << "device: ack: round " << static_cast<unsigned long>(round_id);
  if (ack.disposition == edgefl::wire::UpdateDisposition::kAccepted) {
    line << ", accepted";
  } else if (ack.disposition == edgefl::wire::UpdateDisposition::kDuplicate) {
    line << ", duplicate (counted once, by an earlier session)";
  } else {
    line << ", not accepted: disposition " << static_cast<unsigned long>(ack.disposition) << ", reason "
         << static_cast<unsigned long>(ack.reason);
  }
  line.print();
  *accepted = tables::counted(ack);
  if (ack.disposition == edgefl::wire::UpdateDisposition::kStraggler ||
      ack.disposition == edgefl::wire::UpdateDisposition::kLate) {
    return round_ended(round_id, "the update came after the round closed");
  }
  return kExitOk;
}

int upload_update(int round, const Offer& offer, Update& update) {
  Phase phase = begin("upload");
  uint8_t upload_id[edgefl::wire::kUploadIdBytes];
  if (psa_generate_random(upload_id, sizeof upload_id) != PSA_SUCCESS) {
    return fail(kExitCrypto, "random upload id");
  }
  upload_id[0] |= 1;  // never all zero
  bool accepted = false;
  if (update.length > offer.max_upload_bytes)
    return fail(kExitEncoding, "the update is above the offer's upload cap");
  update.commit_sent = false;
  int status = kExitLink;
  if (test_drop(kDropAway, "before the upload, and staying away")) {
    wait_ms(kAwayMs);
  } else {
    status = try_upload(offer, update, upload_id, false, &accepted);
  }
  while (status == kExitLink) {
    status = reconnect();  // kExitOk, or a final failure
    if (status != kExitOk) break;
    // Another round is open: an update never committed is not counted; one whose Commit went out
    // is asked about (UploadStart for its round: the server answers from its ledger).
    const tables::PendingUpload meaning = after_reconnect(offer, update.commit_sent);
    if (meaning == tables::PendingUpload::kDiscard)
      return round_ended(offer.round_id, "another round opened while away");
    status = try_upload(offer, update, upload_id, meaning == tables::PendingUpload::kAskTheLedger, &accepted);
  }
  if (status != kExitOk) return status;
  end(phase, round);
  (Line() << "device: round " << static_cast<unsigned long>(round) << " ack: round "
          << static_cast<unsigned long>(offer.round_id) << (accepted ? ", counted" : ", not counted"))
      .print();
  return accepted ? kExitOk : fail(kExitNotAccepted, "the update was not counted");
}

int run_round(int round) {
  Offer offer;
  int status = obtain_offer(round, &offer);
  if (status != kExitOk) return status;
  (Line() << "device: round " << static_cast<unsigned long>(round) << " offer: round "
          << static_cast<unsigned long>(offer.round_id) << ", model " << offer.model_spec << " v"
          << static_cast<unsigned long>(offer.model_version) << ", " << static_cast<unsigned long>(offer.n)
          << " parameters, codec " << offer.uplink_codec)
      .print();
  RoundPlan plan;
  status = plan_round(offer, &plan);
  if (status == kExitOk) status = obtain_model(round, offer, plan);
  Update update;
  if (status == kExitOk) status = compute_update(round, offer, plan, &update);
  if (status == kExitOk) {
    status = upload_update(round, offer, update);
    // The residual assumed the encoded update would reach the model (residual := x - C(x)); it
    // did not, so what it holds no longer means anything: it starts again from zero.
    if (status == kExitRoundEnded && g_state.feedback_ready) g_state.feedback.reset();
  }
  return status;
}

}  // namespace

// mbedTLS's fatal stop (MBEDTLS_PLATFORM_EXIT_MACRO): the TLS arena's block list is corrupt.
extern "C" void edgefl_mbedtls_device_exit(int) {
  semihost_write("device: FAIL: mbedTLS stopped the program (TLS arena corrupted)\n");
  semihost_exit(96);
}

// The entropy source (MBEDTLS_ENTROPY_HARDWARE_ALT). A real board reads its TRNG here; under
// QEMU the host's /dev/urandom is read through semihosting (emulation only).
extern "C" int mbedtls_hardware_poll(void*, unsigned char* output, size_t length, size_t* produced) {
  static int handle = -1;
  if (handle < 0) handle = semihost_open("/dev/urandom", 1);
  if (handle < 0) return MBEDTLS_ERR_ENTROPY_SOURCE_FAILED;
  *produced = semihost_read(handle, output, length);
  return 0;  // fewer bytes than asked: the entropy module polls again, then fails if it stays short
}

int main() {
  startup_guard_stack();
  board::timer_init();
  board::uart_init();
  mbedtls_memory_buffer_alloc_init(g_tls_arena, sizeof g_tls_arena);
  memset(g_tls_arena + kTlsArenaHeaderBytes, kPaint, sizeof g_tls_arena - kTlsArenaHeaderBytes);
  memset(g_round_arena, kPaint, sizeof g_round_arena);

  device::Credentials credentials;
  const device::CredentialsStatus cs = device::read_credentials(
      __credentials_start__, static_cast<size_t>(__credentials_end__ - __credentials_start__), &credentials);
  if (cs != device::CredentialsStatus::kOk) {
    (Line() << "device: FAIL: " << device::credentials_status_text(cs)).print();
    return kExitCredentials;
  }

  Phase phase = begin("tls setup");
  if (psa_crypto_init() != PSA_SUCCESS) return fail(kExitCrypto, "psa_crypto_init");
  mbedtls_x509_crt_init(&g_ca);
  mbedtls_x509_crt_init(&g_own);
  mbedtls_pk_init(&g_key);
  mbedtls_ssl_config_init(&g_conf);
  mbedtls_ssl_init(&g_ssl);
  int ret = mbedtls_x509_crt_parse_der_nocopy(&g_ca, credentials.ca_der, credentials.ca_der_length);
  if (ret != 0) return fail(kExitCredentials, "CA certificate", ret);
  ret = mbedtls_x509_crt_parse_der_nocopy(&g_own, credentials.cert_der, credentials.cert_der_length);
  if (ret != 0) return fail(kExitCredentials, "device certificate", ret);
  ret = mbedtls_pk_parse_key(&g_key, credentials.key_der, credentials.key_der_length, nullptr, 0,
                             mbedtls_psa_get_random, MBEDTLS_PSA_RANDOM_STATE);
  if (ret != 0) return fail(kExitCredentials, "device key", ret);
  ret = mbedtls_ssl_config_defaults(&g_conf, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_TRANSPORT_STREAM,
                                    MBEDTLS_SSL_PRESET_DEFAULT);
  if (ret != 0) return fail(kExitTlsSetup, "mbedtls_ssl_config_defaults", ret);
  mbedtls_ssl_conf_min_tls_version(&g_conf, MBEDTLS_SSL_VERSION_TLS1_3);
  mbedtls_ssl_conf_max_tls_version(&g_conf, MBEDTLS_SSL_VERSION_TLS1_3);
  mbedtls_ssl_conf_ciphersuites(&g_conf, kSuites);
  mbedtls_ssl_conf_groups(&g_conf, kGroups);
  mbedtls_ssl_conf_sig_algs(&g_conf, kSigAlgs);
  mbedtls_ssl_conf_cert_profile(&g_conf, &kP256Only);
  mbedtls_ssl_conf_authmode(&g_conf, MBEDTLS_SSL_VERIFY_REQUIRED);
  mbedtls_ssl_conf_tls13_key_exchange_modes(&g_conf, MBEDTLS_SSL_TLS1_3_KEY_EXCHANGE_MODE_EPHEMERAL);
  mbedtls_ssl_conf_rng(&g_conf, mbedtls_psa_get_random, MBEDTLS_PSA_RANDOM_STATE);
  mbedtls_ssl_conf_ca_chain(&g_conf, &g_ca, nullptr);
  ret = mbedtls_ssl_conf_own_cert(&g_conf, &g_own, &g_key);
  if (ret != 0) return fail(kExitTlsSetup, "mbedtls_ssl_conf_own_cert", ret);
  ret = mbedtls_ssl_setup(&g_ssl, &g_conf);
  if (ret != 0) return fail(kExitTlsSetup, "mbedtls_ssl_setup", ret);
  ret = mbedtls_ssl_set_hostname(&g_ssl, credentials.server_name);
  if (ret != 0) return fail(kExitTlsSetup, "mbedtls_ssl_set_hostname", ret);
  mbedtls_ssl_set_bio(&g_ssl, nullptr, uart_send, uart_recv, nullptr);
  end(phase, 0);

  phase = begin("handshake");
  ret = handshake();
  if (ret != 0) {
    Line line;
    line << "device: handshake refused, certificate verify flags ";
    line.hex(mbedtls_ssl_get_verify_result(&g_ssl));
    line.print();
    return fail(kExitHandshake, "handshake", ret);
  }
  end(phase, 0);
  (Line() << "device: " << mbedtls_ssl_get_version(&g_ssl) << " " << mbedtls_ssl_get_ciphersuite(&g_ssl)
          << ", server certificate verified for " << credentials.server_name << ", TLS arena "
          << static_cast<unsigned long>(tls_high_water()) << " bytes")
      .print();

  int status = kExitOk;
  int completed = 0;
  int ended = 0;  // rounds that ended without this device's update
  for (int round = 1; round <= kRounds && status == kExitOk;) {
    status = run_round(round);
    if ((status == kExitModel || status == kExitMemory) && g_state.needs_whole_model) {
      // A patched model that failed: once more, with a Hello that asks for the whole model.
      (Line() << "device: round " << static_cast<unsigned long>(round) << ": asking for the whole model")
          .print();
      status = run_round(round);
    }
    if (status == kExitRoundEnded) {  // the server moved on: the same round number again, with it
      status = ++ended <= kMaxRoundsEnded
                   ? kExitOk
                   : fail(kExitNotAccepted, "too many rounds ended without this device");
      continue;
    }
    if (status == kExitOk) {
      ++completed;
      ++round;
    }
  }
  mbedtls_ssl_close_notify(&g_ssl);
  (Line() << "device: footprint: TLS arena " << static_cast<unsigned long>(tls_high_water()) << " of "
          << static_cast<unsigned long>(kTlsArenaBytes) << " bytes, round arena "
          << static_cast<unsigned long>(round_high_water()) << " of "
          << static_cast<unsigned long>(kRoundArenaBytes) << " bytes, stack "
          << static_cast<unsigned long>(startup_stack_high_water()) << " of "
          << static_cast<unsigned long>(startup_stack_size()) << " bytes")
      .print();
  mbedtls_ssl_free(&g_ssl);
  mbedtls_ssl_config_free(&g_conf);
  mbedtls_pk_free(&g_key);
  mbedtls_x509_crt_free(&g_own);
  mbedtls_x509_crt_free(&g_ca);
  mbedtls_psa_crypto_free();
  (Line() << "device: " << static_cast<unsigned long>(completed) << " of "
          << static_cast<unsigned long>(kRounds) << " rounds completed, "
          << static_cast<unsigned long>(g_reconnects) << " reconnects, " << static_cast<unsigned long>(ended)
          << " rounds ended without this device")
      .print();
  return status;
}
