// The C ABI (edgefl/edgefl.h) in terms of edgefl::Client (edgefl/client.h).
//
// Every entry point catches everything: std::bad_alloc becomes EDGEFL_STATUS_OUT_OF_MEMORY, any
// other exception EDGEFL_STATUS_INTERNAL, so no exception unwinds into C (or JNI, or Swift).
// The handle lives in memory from the caller's allocator (or malloc); the round's buffers are the
// C++ client's (see the header's "Memory" paragraph).
#include "edgefl/edgefl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "edgefl/client.h"
#include "edgefl/status.h"
#include "edgefl/wire.h"

namespace {

using edgefl::Status;

// The C codes are the C++ codes: a renumbering on either side fails to compile here.
#define EDGEFL_C_SAME(c_name, cpp_name) \
  static_assert(int(EDGEFL_STATUS_##c_name) == int(Status::cpp_name), "edgefl.h: EDGEFL_STATUS_" #c_name);
EDGEFL_C_SAME(OK, kOk)
EDGEFL_C_SAME(INVALID_ARGUMENT, kInvalidArgument)
EDGEFL_C_SAME(INVALID_SPEC, kInvalidSpec)
EDGEFL_C_SAME(BUFFER_TOO_SMALL, kBufferTooSmall)
EDGEFL_C_SAME(WORKSPACE_TOO_SMALL, kWorkspaceTooSmall)
EDGEFL_C_SAME(NON_FINITE_INPUT, kNonFiniteInput)
EDGEFL_C_SAME(VALUE_OUT_OF_RANGE, kValueOutOfRange)
EDGEFL_C_SAME(DIMENSION_TOO_LARGE, kDimensionTooLarge)
EDGEFL_C_SAME(TRUNCATED, kTruncated)
EDGEFL_C_SAME(BAD_MAGIC, kBadMagic)
EDGEFL_C_SAME(UNSUPPORTED_VERSION, kUnsupportedVersion)
EDGEFL_C_SAME(UNKNOWN_CODEC, kUnknownCodec)
EDGEFL_C_SAME(BAD_PARAMETERS, kBadParameters)
EDGEFL_C_SAME(CHECKSUM_MISMATCH, kChecksumMismatch)
EDGEFL_C_SAME(SIZE_MISMATCH, kSizeMismatch)
EDGEFL_C_SAME(INDEX_OUT_OF_RANGE, kIndexOutOfRange)
EDGEFL_C_SAME(INDICES_NOT_SORTED, kIndicesNotSorted)
EDGEFL_C_SAME(CORRUPT_PAYLOAD, kCorruptPayload)
EDGEFL_C_SAME(DIMENSION_MISMATCH, kDimensionMismatch)
EDGEFL_C_SAME(NOT_SUMMABLE, kNotSummable)
EDGEFL_C_SAME(INCOMPATIBLE, kIncompatible)
EDGEFL_C_SAME(OVERFLOW, kOverflow)
EDGEFL_C_SAME(FRAME_TOO_LARGE, kFrameTooLarge)
EDGEFL_C_SAME(UNKNOWN_MESSAGE_TYPE, kUnknownMessageType)
EDGEFL_C_SAME(PROTOCOL_VERSION_MISMATCH, kProtocolVersionMismatch)
EDGEFL_C_SAME(MALFORMED_MESSAGE, kMalformedMessage)
EDGEFL_C_SAME(INVALID_MESSAGE, kInvalidMessage)
EDGEFL_C_SAME(MESSAGE_TYPE_MISMATCH, kMessageTypeMismatch)
EDGEFL_C_SAME(IO_ERROR, kIoError)
EDGEFL_C_SAME(CONNECTION_FAILED, kConnectionFailed)
EDGEFL_C_SAME(TIMEOUT, kTimeout)
EDGEFL_C_SAME(TLS_HANDSHAKE_FAILED, kTlsHandshakeFailed)
EDGEFL_C_SAME(TLS_ERROR, kTlsError)
EDGEFL_C_SAME(UNAUTHORIZED, kUnauthorized)
EDGEFL_C_SAME(SERVER_ERROR, kServerError)
EDGEFL_C_SAME(PROTOCOL_ERROR, kProtocolError)
EDGEFL_C_SAME(MEMORY_BUDGET_EXCEEDED, kMemoryBudgetExceeded)
EDGEFL_C_SAME(CANCELLED, kCancelled)
EDGEFL_C_SAME(UPDATE_NOT_ACCEPTED, kUpdateNotAccepted)
EDGEFL_C_SAME(AUTHENTICATION_FAILED, kAuthenticationFailed)
EDGEFL_C_SAME(BAD_SHARE, kBadShare)
EDGEFL_C_SAME(TOO_FEW_SURVIVORS, kTooFewSurvivors)
EDGEFL_C_SAME(SECAGG_REFUSED, kSecAggRefused)
EDGEFL_C_SAME(KEY_REUSE, kKeyReuse)
EDGEFL_C_SAME(UNSAFE_CONFIGURATION, kUnsafeConfiguration)
EDGEFL_C_SAME(CRYPTO_ERROR, kCryptoError)
#undef EDGEFL_C_SAME

static_assert(int(edgefl::RoundOutcome::kNone) == EDGEFL_ROUND_NONE &&
                  int(edgefl::RoundOutcome::kAccepted) == EDGEFL_ROUND_ACCEPTED &&
                  int(edgefl::RoundOutcome::kDuplicate) == EDGEFL_ROUND_DUPLICATE &&
                  int(edgefl::RoundOutcome::kStraggler) == EDGEFL_ROUND_STRAGGLER &&
                  int(edgefl::RoundOutcome::kLate) == EDGEFL_ROUND_LATE &&
                  int(edgefl::RoundOutcome::kRejected) == EDGEFL_ROUND_REJECTED &&
                  int(edgefl::RoundOutcome::kServerDraining) == EDGEFL_ROUND_SERVER_DRAINING &&
                  int(edgefl::RoundOutcome::kAbandoned) == EDGEFL_ROUND_ABANDONED,
              "edgefl.h: edgefl_round_outcome");
// The C++ client's log lines: EDGEFL_LOG_* is edgefl::LogLevel + 1.
static_assert(int(edgefl::LogLevel::kError) + 1 == EDGEFL_LOG_ERROR &&
                  int(edgefl::LogLevel::kWarn) + 1 == EDGEFL_LOG_WARNING &&
                  int(edgefl::LogLevel::kInfo) + 1 == EDGEFL_LOG_INFO &&
                  int(edgefl::LogLevel::kDebug) + 1 == EDGEFL_LOG_DEBUG,
              "edgefl.h: EDGEFL_LOG_*");
static_assert(sizeof(edgefl_round_result{}.codec) == edgefl::wire::kMaxCodecSpecChars + 1,
              "edgefl.h: edgefl_round_result.codec holds a codec spec of the wire's maximum length");

#if defined(EDGEFL_STRIP_ERROR_STRINGS)
#define EDGEFL_C_MSG(text) ""
#else
#define EDGEFL_C_MSG(text) text
#endif

// The codes only the C layer returns (100 and up).
bool is_c_only(int s) {
  return s == EDGEFL_STATUS_UNSUPPORTED || s == EDGEFL_STATUS_OUT_OF_MEMORY || s == EDGEFL_STATUS_INTERNAL;
}

// A value edgefl::status_name() knows.
bool is_cpp_code(int s) {
  return s >= 0 && s < 100 && strcmp(edgefl::status_name(static_cast<Status>(s)), "unknown_status") != 0;
}

edgefl_status to_c(Status s) {
  return static_cast<edgefl_status>(static_cast<int>(s));
}

// Writes `text` as one NUL-terminated, truncated line. Never allocates.
void set_error(char* error, size_t cap, const char* text) {
  if (error == nullptr || cap == 0) return;
  size_t n = strlen(text);
  if (n >= cap) n = cap - 1;
  memcpy(error, text, n);
  error[n] = '\0';
}

// The logging sink of one client (or of a create() that has no client yet).
struct Logger {
  edgefl_log_fn fn = nullptr;
  void* user = nullptr;
  int level = EDGEFL_LOG_INFO;

#if defined(__GNUC__) || defined(__clang__)
  __attribute__((format(printf, 3, 4)))
#endif
  void
  operator()(int at, const char* format, ...) const {
    if (fn == nullptr || at > level) return;
    char line[512];
    va_list args;
    va_start(args, format);
    vsnprintf(line, sizeof line, format, args);
    va_end(args);
    fn(user, at, line);
  }
};

// Fails with `s`: error text out, one log line.
edgefl_status fail(const Logger& log, const char* what, edgefl_status s, const char* text, char* error,
                   size_t cap) {
  set_error(error, cap, text);
  log(EDGEFL_LOG_ERROR, "%s: %s: %s", what, edgefl_status_name(s), text);
  return s;
}

// Runs `body`, turning every exception into a status (and an error line).
template <typename Body>
edgefl_status guarded(const Logger& log, const char* what, char* error, size_t cap, Body&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(log, what, EDGEFL_STATUS_OUT_OF_MEMORY, "out of memory", error, cap);
  } catch (const std::exception& e) {
    return fail(log, what, EDGEFL_STATUS_INTERNAL, e.what(), error, cap);
  } catch (...) {
    return fail(log, what, EDGEFL_STATUS_INTERNAL, "unknown exception", error, cap);
  }
}

// edgefl::LocalTrainer over the C callbacks. A callback's failure is kept as the C code it
// returned (which may have no C++ twin) and reported by run_round instead of its C++ stand-in.
class CTrainer final : public edgefl::LocalTrainer {
 public:
  explicit CTrainer(const edgefl_trainer& t) : t_(t) {}

  size_t memory_bytes(const edgefl::RoundTask& task) const override {
    if (t_.memory_bytes == nullptr) return 0;
    const edgefl_task c = to_c_task(task);
    return t_.memory_bytes(t_.user, &c);
  }
  Status prepare(const edgefl::RoundTask& task) override {
    if (t_.prepare == nullptr) return Status::kOk;
    const edgefl_task c = to_c_task(task);
    return note("prepare", t_.prepare(t_.user, &c));
  }
  Status fit(edgefl::Span<const float> global, edgefl::Span<float> delta, uint32_t* samples,
             float* loss) override {
    return note("fit", t_.fit(t_.user, global.data(), delta.data(), delta.size(), samples, loss));
  }

  // The callback that failed (null: none) and the C code it returned.
  const char* failed_callback() const { return failed_; }
  int failed_status() const { return failed_status_; }

 private:
  edgefl_task to_c_task(const edgefl::RoundTask& task) const {
    tensors_.assign(task.tensors.size(), edgefl_tensor{});
    for (size_t i = 0; i < task.tensors.size(); ++i) {
      const edgefl::TensorDesc& t = task.tensors[i];
      edgefl_tensor& e = tensors_[i];
      e.name = t.name.c_str();
      e.rank = static_cast<uint32_t>(std::min<size_t>(t.shape.size(), EDGEFL_MAX_TENSOR_RANK));
      for (uint32_t r = 0; r < e.rank; ++r) e.shape[r] = t.shape[r];
      e.dtype = static_cast<edgefl_tensor_dtype>(static_cast<int>(t.dtype));
    }
    edgefl_task c;
    memset(&c, 0, sizeof c);
    c.round_id = task.round_id;
    c.model_version = task.model_version;
    c.model_spec = task.model_spec.c_str();
    c.parameter_count = task.parameter_count;
    c.batch_size = task.training.batch_size;
    c.local_epochs = task.training.local_epochs;
    c.max_steps = task.training.max_steps;
    c.learning_rate = task.training.learning_rate;
    c.momentum = task.training.momentum;
    c.weight_decay = task.training.weight_decay;
    c.prox_mu = task.training.prox_mu;
    c.training_seed = task.training.seed;
    c.codec = task.codec.c_str();
    c.codec_seed = task.codec_seed;
    c.deadline_ms = task.deadline_ms;
    c.tensor_count = tensors_.size();
    c.tensors = tensors_.empty() ? nullptr : tensors_.data();
    return c;
  }
  Status note(const char* callback, edgefl_status s) {
    const int code = static_cast<int>(s);
    if (code == EDGEFL_STATUS_OK) return Status::kOk;
    failed_ = callback;
    failed_status_ = code;
    // Codes with no C++ twin end the round as kInvalidArgument; run_round reports the real one.
    return is_cpp_code(code) ? static_cast<Status>(code) : Status::kInvalidArgument;
  }

  edgefl_trainer t_;
  mutable std::vector<edgefl_tensor> tensors_;  // the task's table for the callbacks (valid during each)
  const char* failed_ = nullptr;
  int failed_status_ = EDGEFL_STATUS_OK;
};

void copy_result(const edgefl::RoundResult& r, edgefl_round_result* out) {
  memset(out, 0, sizeof *out);
  out->outcome = static_cast<edgefl_round_outcome>(static_cast<int>(r.outcome));
  out->round_id = r.round_id;
  out->model_version = r.model_version;
  set_error(out->codec, sizeof out->codec, r.codec.c_str());
  out->update_bytes = r.update_bytes;
  out->uploaded_bytes = r.uploaded_bytes;
  out->model_bytes = r.model_bytes;
  out->wire_bytes_up = r.wire_bytes_up;
  out->wire_bytes_down = r.wire_bytes_down;
  out->samples = r.samples;
  out->train_loss = r.train_loss;
  out->train_seconds = r.train_seconds;
  out->encode_seconds = r.encode_seconds;
  out->wait_seconds = r.wait_seconds;
  out->total_seconds = r.total_seconds;
  out->reconnects = r.reconnects;
  out->resumed_at = r.resumed_at;
  out->memory.model = r.memory.model;
  out->memory.delta = r.memory.delta;
  out->memory.residual = r.memory.residual;
  out->memory.codec_workspace = r.memory.codec_workspace;
  out->memory.encoded = r.memory.encoded;
  out->memory.trainer = r.memory.trainer;
  out->memory.tls = r.memory.tls;
  out->memory.total = r.memory.total();
}

// edgefl::Transport over the app's edgefl_transport. `user` is the handle's copy of the C struct.
// The C codes are the C++ codes; the ones only C has (UNSUPPORTED, OUT_OF_MEMORY, INTERNAL) and
// values neither side knows become kConnectionFailed. kTimeout ("nothing yet") passes through.
Status from_transport(edgefl_status s) {
  const int code = static_cast<int>(s);
  return is_cpp_code(code) ? static_cast<Status>(code) : Status::kConnectionFailed;
}
Status transport_connect(void* user, const char* host, uint16_t port, uint32_t timeout_ms) {
  const auto* t = static_cast<const edgefl_transport*>(user);
  return from_transport(t->connect(t->user, host, port, timeout_ms));
}
Status transport_send(void* user, const uint8_t* data, size_t size, size_t* sent, uint32_t timeout_ms) {
  const auto* t = static_cast<const edgefl_transport*>(user);
  return from_transport(t->send(t->user, data, size, sent, timeout_ms));
}
Status transport_recv(void* user, uint8_t* data, size_t capacity, size_t* received, uint32_t timeout_ms) {
  const auto* t = static_cast<const edgefl_transport*>(user);
  return from_transport(t->recv(t->user, data, capacity, received, timeout_ms));
}
void transport_close(void* user) {
  const auto* t = static_cast<const edgefl_transport*>(user);
  t->close(t->user);
}

// The callbacks of `t` that are NULL, as "connect, recv" ("" when all four are set).
std::string missing_callbacks(const edgefl_transport& t) {
  std::string missing;
  auto note = [&](bool set, const char* name) {
    if (set) return;
    if (!missing.empty()) missing += ", ";
    missing += name;
  };
  note(t.connect != nullptr, "connect");
  note(t.send != nullptr, "send");
  note(t.recv != nullptr, "recv");
  note(t.close != nullptr, "close");
  return missing;
}

void* default_alloc(void*, size_t size, size_t align) {
  // malloc's alignment (alignof(max_align_t)) covers the handle; larger requests are not made.
  return align <= alignof(max_align_t) ? malloc(size) : nullptr;
}
void default_free(void*, void* ptr, size_t) {
  free(ptr);
}

}  // namespace

// The handle: the C++ client plus what the C layer needs to log and to release itself.
struct edgefl_client {
  // `t`: the app's transport (copied here), or null for the client's own TCP socket.
  edgefl_client(edgefl::ClientOptions options, const edgefl_transport* t, const edgefl_allocator& a,
                const Logger& l)
      : transport(t != nullptr ? *t : edgefl_transport{}),
        client(with_transport(std::move(options), t != nullptr ? &transport : nullptr)),
        allocator(a),
        log(l) {}
  // Declared before `client`: the C++ client's Transport points here, so this copy is built
  // before it and destroyed after it (~Client closes an open connection through it).
  edgefl_transport transport;
  edgefl::Client client;
  edgefl_allocator allocator;
  Logger log;
  std::string host;  // for log lines
  uint16_t port = 0;

 private:
  static edgefl::ClientOptions with_transport(edgefl::ClientOptions o, edgefl_transport* t) {
    if (t != nullptr) {
      o.transport.user = t;
      o.transport.connect = transport_connect;
      o.transport.send = transport_send;
      o.transport.recv = transport_recv;
      o.transport.close = transport_close;
    }
    return o;
  }
};

extern "C" {

const char* edgefl_status_name(edgefl_status status) {
  switch (static_cast<int>(status)) {
    case EDGEFL_STATUS_UNSUPPORTED: return "unsupported";
    case EDGEFL_STATUS_OUT_OF_MEMORY: return "out_of_memory";
    case EDGEFL_STATUS_INTERNAL: return "internal";
    default: break;
  }
  return edgefl::status_name(static_cast<Status>(status));
}

const char* edgefl_status_message(edgefl_status status) {
  switch (static_cast<int>(status)) {
    case EDGEFL_STATUS_UNSUPPORTED: return EDGEFL_C_MSG("this build does not provide the requested feature");
    case EDGEFL_STATUS_OUT_OF_MEMORY: return EDGEFL_C_MSG("an allocation failed");
    case EDGEFL_STATUS_INTERNAL:
      return EDGEFL_C_MSG("an unexpected internal error (a C++ exception) occurred");
    default: break;
  }
  return edgefl::status_message(static_cast<Status>(status));
}

const char* edgefl_round_outcome_name(edgefl_round_outcome outcome) {
  return edgefl::round_outcome_name(static_cast<edgefl::RoundOutcome>(static_cast<int>(outcome)));
}

void edgefl_client_options_init(edgefl_client_options* options) {
  if (options == nullptr) return;
  memset(options, 0, sizeof *options);
  const edgefl::ClientOptions d;  // the C++ defaults are the C defaults
  options->struct_size = sizeof *options;
  options->host = "127.0.0.1";
  options->port = d.port;
  options->server_name = "localhost";
  options->ca_file = "";
  options->cert_file = "";
  options->key_file = "";
  options->memory_budget_bytes = d.memory_budget_bytes;
  options->upload_chunk_bytes = d.upload_chunk_bytes;
  options->connect_timeout_ms = d.connect_timeout_ms;
  options->io_timeout_ms = d.io_timeout_ms;
  options->backoff_initial_ms = d.backoff_initial_ms;
  options->backoff_max_ms = d.backoff_max_ms;
  options->max_attempts = d.max_attempts;
  options->max_wait_ms = d.max_wait_ms;
  options->error_feedback = d.error_feedback ? 1 : 0;
  options->residual_bf16 = d.residual_precision == edgefl::ResidualPrecision::kBf16 ? 1 : 0;
  options->seed = d.seed;
  options->log_level = EDGEFL_LOG_INFO;
}

edgefl_status edgefl_client_create(const edgefl_client_options* options, edgefl_client** out, char* error,
                                   size_t error_cap) {
  set_error(error, error_cap, "");
  if (out != nullptr) *out = nullptr;
  Logger log;
  if (options != nullptr && options->struct_size == sizeof *options) {
    log.fn = options->log;
    log.user = options->log_user;
    log.level = options->log_level;
  }
  const char* what = "edgefl_client_create";
  if (options == nullptr || out == nullptr) {
    return fail(log, what, EDGEFL_STATUS_INVALID_ARGUMENT, "options and out may not be NULL", error,
                error_cap);
  }
  if (options->struct_size != sizeof *options) {
    return fail(
        log, what, EDGEFL_STATUS_INVALID_ARGUMENT,
        "options.struct_size is not sizeof(edgefl_client_options): call edgefl_client_options_init() first "
        "(and build against this library's edgefl.h)",
        error, error_cap);
  }
  edgefl_allocator allocator{nullptr, default_alloc, default_free};
  if (options->allocator != nullptr) {
    if (options->allocator->alloc == nullptr || options->allocator->free == nullptr) {
      return fail(log, what, EDGEFL_STATUS_INVALID_ARGUMENT,
                  "allocator.alloc and allocator.free may not be NULL", error, error_cap);
    }
    allocator = *options->allocator;
  }
  return guarded(log, what, error, error_cap, [&]() -> edgefl_status {
    auto text = [](const char* s) { return std::string(s != nullptr ? s : ""); };
    edgefl::ClientOptions o;
    o.host = text(options->host);
    o.port = options->port;
    o.server_name = text(options->server_name);
    o.ca_file = text(options->ca_file);
    o.cert_file = text(options->cert_file);
    o.key_file = text(options->key_file);
    o.memory_budget_bytes = options->memory_budget_bytes;
    o.upload_chunk_bytes = options->upload_chunk_bytes;
    o.connect_timeout_ms = options->connect_timeout_ms;
    o.io_timeout_ms = options->io_timeout_ms;
    o.backoff_initial_ms = options->backoff_initial_ms;
    o.backoff_max_ms = options->backoff_max_ms;
    o.max_attempts = options->max_attempts;
    o.max_wait_ms = options->max_wait_ms;
    o.error_feedback = options->error_feedback != 0;
    o.residual_precision =
        options->residual_bf16 != 0 ? edgefl::ResidualPrecision::kBf16 : edgefl::ResidualPrecision::kFp32;
    o.seed = options->seed;
    if (log.fn != nullptr) {
      // The C++ client's own lines (reconnects, backoff, retry windows, lost connections).
      // LogLevel kError..kDebug (0..3) is EDGEFL_LOG_ERROR..EDGEFL_LOG_DEBUG (1..4).
      o.log = [log](edgefl::LogLevel level, const std::string& message) {
        const int at = static_cast<int>(level) + 1;
        if (at <= log.level) log.fn(log.user, at, message.c_str());
      };
    }
    if (options->transport != nullptr) {
      const std::string missing = missing_callbacks(*options->transport);
      if (!missing.empty()) {
        const std::string why = "transport is incomplete (NULL: " + missing +
                                "): it needs all four callbacks (connect, send, recv, close); "
                                "set options.transport = NULL for the built-in TCP socket";
        return fail(log, what, EDGEFL_STATUS_INVALID_ARGUMENT, why.c_str(), error, error_cap);
      }
    }

    void* memory = allocator.alloc(allocator.user, sizeof(edgefl_client), alignof(edgefl_client));
    if (memory == nullptr) {
      return fail(log, what, EDGEFL_STATUS_OUT_OF_MEMORY, "the allocator returned NULL for the client handle",
                  error, error_cap);
    }
    edgefl_client* client = nullptr;
    try {
      client = new (memory) edgefl_client(std::move(o), options->transport, allocator, log);
      client->host = text(options->host);
      client->port = options->port;
      std::string reason;
      const Status s = client->client.init(&reason);
      if (s != Status::kOk) {
        client->~edgefl_client();
        allocator.free(allocator.user, memory, sizeof(edgefl_client));
        return fail(log, what, to_c(s), reason.c_str(), error, error_cap);
      }
    } catch (...) {
      if (client != nullptr) client->~edgefl_client();
      allocator.free(allocator.user, memory, sizeof(edgefl_client));
      throw;
    }
    log(EDGEFL_LOG_INFO, "client for %s:%u created (certificate %s, %s)", client->host.c_str(),
        unsigned(client->port), options->cert_file != nullptr ? options->cert_file : "",
        options->transport != nullptr ? "the app's transport" : "TCP");
    *out = client;
    return EDGEFL_STATUS_OK;
  });
}

edgefl_status edgefl_client_run_round(edgefl_client* client, const edgefl_trainer* trainer,
                                      edgefl_round_result* result, char* error, size_t error_cap) {
  set_error(error, error_cap, "");
  const Logger none;
  const Logger& log = client != nullptr ? client->log : none;
  const char* what = "edgefl_client_run_round";
  if (client == nullptr || trainer == nullptr || result == nullptr) {
    return fail(log, what, EDGEFL_STATUS_INVALID_ARGUMENT, "client, trainer and result may not be NULL",
                error, error_cap);
  }
  memset(result, 0, sizeof *result);
  if (trainer->fit == nullptr) {
    return fail(log, what, EDGEFL_STATUS_INVALID_ARGUMENT, "trainer.fit may not be NULL", error, error_cap);
  }
  return guarded(log, what, error, error_cap, [&]() -> edgefl_status {
    log(EDGEFL_LOG_DEBUG, "round: starting against %s:%u", client->host.c_str(), unsigned(client->port));
    CTrainer adapter(*trainer);
    edgefl::RoundResult r;
    std::string reason;
    const Status s = client->client.run_round(adapter, &r, &reason);
    copy_result(r, result);
    if (s == Status::kOk) {
      log(EDGEFL_LOG_INFO,
          "round %llu (model v%llu): %s; update %llu B (%s), model %llu B down, wire %llu B up / %llu B "
          "down, "
          "train %.3f s, total %.3f s, %u reconnects",
          static_cast<unsigned long long>(r.round_id), static_cast<unsigned long long>(r.model_version),
          edgefl::round_outcome_name(r.outcome), static_cast<unsigned long long>(r.update_bytes),
          r.codec.c_str(), static_cast<unsigned long long>(r.model_bytes),
          static_cast<unsigned long long>(r.wire_bytes_up),
          static_cast<unsigned long long>(r.wire_bytes_down), r.train_seconds, r.total_seconds,
          unsigned(r.reconnects));
      return EDGEFL_STATUS_OK;
    }
    if (adapter.failed_callback() != nullptr) {
      // The round ended in the app's trainer: report the code it returned, not its C++ stand-in.
      const int code = adapter.failed_status();
      const edgefl_status c = is_cpp_code(code) || is_c_only(code) ? static_cast<edgefl_status>(code)
                                                                   : EDGEFL_STATUS_INVALID_ARGUMENT;
      char line[160];
      snprintf(line, sizeof line, "trainer %s() returned %s (%d)", adapter.failed_callback(),
               edgefl_status_name(static_cast<edgefl_status>(code)), code);
      return fail(log, what, c, line, error, error_cap);
    }
    if (reason.empty()) reason = edgefl::status_message(s);
    return fail(log, what, to_c(s), reason.c_str(), error, error_cap);
  });
}

void edgefl_client_cancel(edgefl_client* client) {
  if (client == nullptr) return;
  try {
    client->client.cancel();  // a mutex and a wake-up: nothing that fails in practice
  } catch (...) {
  }
}

void edgefl_client_free(edgefl_client* client) {
  if (client == nullptr) return;
  const edgefl_allocator allocator = client->allocator;
  client->~edgefl_client();  // destructors do not throw
  allocator.free(allocator.user, client, sizeof(edgefl_client));
}

}  // extern "C"
