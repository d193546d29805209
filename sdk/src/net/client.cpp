#include "edgefl/client.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "core/rng.h"
#include "edgefl/model.h"
#include "edgefl/wire.h"
#include "net/tls_stream.h"
#include "round/downlink.h"
#include "round/update_steps.h"
#include "secagg/crypto.h"
#include "secagg/dp.h"
#include "secagg/protocol.h"
#include "secagg/wire_form.h"
#include "tls/digest.h"
#include "tls/tls_credentials.h"
#include "wire/client_protocol.h"

namespace edgefl {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// TLS memory per connection with platforms/mbedtls/edgefl_mbedtls_config.h: two 16 KiB record
// buffers plus their overhead, the handshake state, and the peer certificate kept for the
// device id (measured by the footprint table in the README; conservative).
constexpr size_t kTlsConnectionBytes = 2 * (16384 + 2048) + 24 * 1024;

std::string kb(size_t bytes) {
  char text[32];
  if (bytes >= 10u << 20) {
    std::snprintf(text, sizeof text, "%.1f MB", double(bytes) / 1e6);
  } else {
    std::snprintf(text, sizeof text, "%.1f kB", double(bytes) / 1e3);
  }
  return text;
}

// Refusals that say "not now" rather than "never": the round moved on, the upload must restart,
// the server had a storage failure or is rate limiting. The device says Hello again.
bool is_transient_refusal(wire::ErrorCode code) {
  switch (code) {
    case wire::ErrorCode::kUnknownRound:
    case wire::ErrorCode::kNonceMismatch:
    case wire::ErrorCode::kUnknownUpload:
    case wire::ErrorCode::kOffsetMismatch:
    case wire::ErrorCode::kDigestMismatch:
    case wire::ErrorCode::kRateLimited:
    case wire::ErrorCode::kInternal: return true;
    default: return false;
  }
}

// Statuses of run_round() after which participate() tries again (with backoff).
bool is_transient_status(Status s) {
  return s == Status::kConnectionFailed || s == Status::kTimeout || s == Status::kTlsError ||
         s == Status::kServerError || s == Status::kChecksumMismatch;
}

RoundOutcome outcome_of(wire::UpdateDisposition d) {
  switch (d) {
    case wire::UpdateDisposition::kAccepted: return RoundOutcome::kAccepted;
    case wire::UpdateDisposition::kDuplicate: return RoundOutcome::kDuplicate;
    case wire::UpdateDisposition::kStraggler: return RoundOutcome::kStraggler;
    case wire::UpdateDisposition::kLate: return RoundOutcome::kLate;
    case wire::UpdateDisposition::kRejected: return RoundOutcome::kRejected;
  }
  return RoundOutcome::kRejected;
}

}  // namespace

const char* round_outcome_name(RoundOutcome outcome) {
  switch (outcome) {
    case RoundOutcome::kNone: return "none";
    case RoundOutcome::kAccepted: return "accepted";
    case RoundOutcome::kDuplicate: return "duplicate";
    case RoundOutcome::kStraggler: return "straggler";
    case RoundOutcome::kLate: return "late";
    case RoundOutcome::kRejected: return "rejected";
    case RoundOutcome::kServerDraining: return "server_draining";
    case RoundOutcome::kAbandoned: return "abandoned";
  }
  return "unknown";
}

std::string MemoryPlan::describe() const {
  return "model " + kb(model) + " + download " + kb(download) + " + delta " + kb(delta) + " + residual " +
         kb(residual) + " + codec workspace " + kb(codec_workspace) + " + encoded update " + kb(encoded) +
         " + trainer " + kb(trainer) + " + TLS " + kb(tls) +
         (secure_aggregation != 0 ? " + secure aggregation " + kb(secure_aggregation) : std::string()) +
         " = " + kb(total());
}

// An encoded update waiting for its ack, kept across reconnects so that the upload resumes.
struct Client::Pending {
  uint64_t round_id = 0;
  std::vector<uint8_t> nonce;
  wire::UploadId upload_id{};
  std::vector<uint8_t> bytes;
  wire::Digest digest{};
  uint32_t samples = 0;
  float loss = 0;
  std::chrono::steady_clock::time_point deadline;  // the round's reporting deadline, as offered
  uint64_t model_version = 0;                      // the model it was trained from
  std::string codec;                               // the uplink codec it was encoded with
  bool commit_sent = false;     // a Commit went out: the server may hold it even if no ack came back
  bool error_feedback = false;  // encoded through the residual (which assumes the update counts)
  // A secure aggregation round (TaskOffer.secure_aggregation): the device's SecAgg+ state. `bytes`
  // holds the encoding until the device masks it, then the masked vector.
  struct Secure {
    enum class Stage : uint8_t { kAdvertise, kShare, kMask, kUpload, kUnmask };
    Stage stage = Stage::kAdvertise;
    wire::SecAggConfig config;
    secagg::SecAggClient client;
    std::vector<uint32_t> words;  // the (noisy) integer codes modulo 2^m, wiped once masked
    // The plain encoding, kept after masking when error feedback encoded it: should the round
    // end without counting the masked vector, it goes back into the residual.
    std::vector<uint8_t> encoding;
    bool outcome_seen = false;  // the server told this round's outcomes (SecAggStatus.outcome)
    wire::SecAggAdvertise advertise;
    wire::SecAggShares shares;
    std::optional<wire::SecAggUnmaskResponse> answer;
  };
  std::unique_ptr<Secure> secure;
};

Client::Client(ClientOptions options) : options_(std::move(options)), connection_(new net::Connection) {
  if (options_.transport.is_set()) connection_->set_transport(options_.transport);
  rng_state_ = options_.seed;
  if (rng_state_ == 0) {
    std::random_device rd;
    rng_state_ = (uint64_t{rd()} << 32) ^ rd();
  }
}

Client::~Client() {
  // A cancel() from another thread that woke the owner may still be running: wait it out.
  std::lock_guard<std::mutex> lock(wait_mutex_);
}

void Client::cancel() {
  // All under the mutex: a sleep_ms() between its check and its wait cannot miss the signal, and
  // the destructor waits until this call no longer touches the object.
  std::lock_guard<std::mutex> lock(wait_mutex_);
  cancelled_.store(true);
  connection_->cancel();
  wait_cv_.notify_all();
}

void Client::forget_residual() {
  if (feedback_.size() != 0) feedback_.reset();
}

void Client::note(LogLevel level, const std::string& message) const {
  if (options_.log) options_.log(level, message);
}

Status Client::init(std::string* error) {
  const Transport& t = options_.transport;
  const int set = (t.connect != nullptr) + (t.send != nullptr) + (t.recv != nullptr) + (t.close != nullptr);
  if (set != 0 && set != 4) {
    *error = "a transport needs all four callbacks (connect, send, recv, close)";
    return Status::kInvalidArgument;
  }
  if (options_.insecure_plaintext_for_tests) return Status::kOk;
  EDGEFL_RETURN_IF_ERROR(tls::tls_global_init(error));
  tls::TlsFiles files;
  files.ca_file = options_.ca_file;
  files.cert_file = options_.cert_file;
  files.key_file = options_.key_file;
  files.server_name = options_.server_name;
  return tls::TlsCredentials::load(tls::TlsRole::kClient, files, &credentials_, error);
}

MemoryPlan Client::plan_memory(const RoundTask& task, const LocalTrainer& trainer) const {
  MemoryPlan plan;
  const size_t n = task.parameter_count;
  plan.model = 4 * n;
  plan.delta = 4 * n;  // also the decode scratch of the download's patches
  CodecSpec downlink;
  plan.download = task.download_bytes;
  if (parse_codec_spec(task.downlink_codec.c_str(), &downlink) == Status::kOk) {
    plan.download += workspace_size(downlink, n);
  }
  CodecSpec codec;
  if (parse_codec_spec(task.codec.c_str(), &codec) == Status::kOk) {
    plan.codec_workspace = workspace_size(codec, n);
    plan.encoded = encoded_bound(codec, n);
    if (options_.error_feedback && needs_error_feedback(codec)) {
      plan.residual = ErrorFeedback::storage_bytes(n, options_.residual_precision);
    }
  }
  plan.trainer = trainer.memory_bytes(task);
  plan.tls = options_.insecure_plaintext_for_tests ? 0 : kTlsConnectionBytes;
  return plan;
}

Status Client::sleep_ms(uint64_t ms) {
  auto until = Clock::now() + std::chrono::milliseconds(ms);
  // participate()'s give_up_after_ms: no wait runs past it.
  const bool gives_up = give_up_at_ != Clock::time_point{} && until >= give_up_at_;
  if (gives_up) until = give_up_at_;
  // One timed wait, woken early only by cancel(): a device waiting out a RetryLater window
  // does not wake its CPU until then.
  std::unique_lock<std::mutex> lock(wait_mutex_);
  if (wait_cv_.wait_until(lock, until, [&] { return cancelled_.load(); })) return Status::kCancelled;
  return gives_up ? Status::kTimeout : Status::kOk;
}

// Exponential backoff with jitter before reconnect number `attempt` (>= 1):
// min(max, initial x 2^attempt) x U[0.5, 1].
Status Client::back_off(uint32_t attempt, RoundResult* result) {
  const double cap =
      std::min<double>(options_.backoff_max_ms,
                       double(options_.backoff_initial_ms) * std::ldexp(1.0, int(std::min(attempt, 20u))));
  const double jitter = 0.5 + 0.5 * unit_double(splitmix64_next(&rng_state_));
  note(LogLevel::kInfo, "waiting " + std::to_string(static_cast<uint64_t>(cap * jitter)) +
                            " ms before trying again (backoff " + std::to_string(attempt) + ")");
  const auto t0 = Clock::now();
  const Status s = sleep_ms(static_cast<uint64_t>(cap * jitter));
  result->wait_seconds += seconds_since(t0);
  ++result->reconnects;
  return s;
}

Status Client::connect_with_backoff(RoundResult* result, std::string* error) {
  if (connection_->is_open()) return Status::kOk;
  const size_t heap_before = options_.heap_probe ? options_.heap_probe() : 0;
  std::string last;
  for (uint32_t attempt = 0; attempt < options_.max_attempts; ++attempt) {
    if (cancelled_.load()) return Status::kCancelled;
    if (attempt > 0) {
      if (const Status w = back_off(attempt, result); w != Status::kOk) {
        *error = last;
        return w;
      }
    }
    note(LogLevel::kInfo, "connecting to " + options_.host + ":" + std::to_string(options_.port) +
                              " (attempt " + std::to_string(attempt + 1) + " of " +
                              std::to_string(options_.max_attempts) + ")");
    const Status s = connection_->connect(options_.host, options_.port, credentials_.get(),
                                          options_.connect_timeout_ms, &last);
    if (s == Status::kOk) {
      if (options_.heap_probe) {
        const size_t after = options_.heap_probe();
        result->heap_tls_bytes =
            std::max(result->heap_tls_bytes, after > heap_before ? after - heap_before : 0);
      }
      return s;
    }
    // A handshake TLS itself refused (an untrusted or expired certificate, a bad server name)
    // does not get better by retrying; a transport that dropped does.
    if (s == Status::kTlsHandshakeFailed) {
      *error = last;
      return s;
    }
    if (s == Status::kCancelled) return s;
    note(LogLevel::kWarn, "connect failed: " + last);
  }
  *error = "gave up after " + std::to_string(options_.max_attempts) + " connection attempts: " + last;
  return Status::kConnectionFailed;
}

// One run_round(): the state it carries across reconnects and its phases. A phase returns kNext
// (go on), kAgain (say Hello again: a lost connection or a transient refusal, after backoff) or
// kDone (the round ends with `status`).
struct Client::Attempt {
  enum class Step : uint8_t { kNext, kAgain, kDone };

  Attempt(Client& client, RoundResult* round_result, std::string* error_text)
      : c(client),
        result(round_result),
        error(error_text),
        started(Clock::now()),
        sent0(client.connection_->frame_bytes_sent()),
        received0(client.connection_->frame_bytes_received()),
        heap_base(client.options_.heap_probe ? client.options_.heap_probe() : 0) {}

  Client& c;
  RoundResult* result;
  std::string* error;
  const Clock::time_point started;
  const uint64_t sent0, received0;
  const size_t heap_base;
  Status status = Status::kOk;  // the round's status once a phase says kDone
  double waited_ms = 0;
  uint32_t failures = 0;
  // TLS 1.3 clients finish their handshake before the server has checked the client certificate:
  // a server that refuses it (expired, another CA, CRL) closes the connection after the client's
  // handshake "succeeded". Fresh connections that die before the server answers Hello, several
  // times in a row, are therefore reported as a refused handshake, not retried for ever.
  uint32_t silent_refusals = 0;
  static constexpr uint32_t kSilentRefusalsBeforeGivingUp = 3;
  // Offers of patches from a version this device does not hold, in this run_round().
  uint32_t unusable_offers = 0;
  static constexpr uint32_t kUnusableOffersBeforeGivingUp = 2;
  bool fresh = false;  // this pass opened a new connection
  bool drop_injected = false;
  bool model_drop_injected = false;
  bool ack_drop_injected = false;
  wire::Message reply;  // the last message from the server

  void sample_heap() {
    if (!c.options_.heap_probe) return;
    const size_t now = c.options_.heap_probe();
    if (now > heap_base) result->heap_peak_bytes = std::max(result->heap_peak_bytes, now - heap_base);
  }
  Step done(Status s) {
    status = s;
    return Step::kDone;
  }
  Status finish() {
    sample_heap();
    result->total_seconds = seconds_since(started);
    result->wire_bytes_up = c.connection_->frame_bytes_sent() - sent0;
    result->wire_bytes_down = c.connection_->frame_bytes_received() - received0;
    return status;
  }
  Status exchange(const wire::Message& out) {
    Status st = c.connection_->send(out, c.options_.io_timeout_ms, error);
    if (st == Status::kOk) st = c.connection_->receive(&reply, c.options_.io_timeout_ms, error);
    return st;
  }
  // A dropped connection: back off and resume with a new Hello, within max_attempts.
  Step connection_lost(Status st) {
    if (st == Status::kCancelled) return done(st);
    if (st != Status::kConnectionFailed && st != Status::kTimeout && st != Status::kTlsError) return done(st);
    c.note(LogLevel::kWarn, std::string("connection lost (") + status_name(st) + "): " + *error);
    c.connection_->close();
    if (++failures >= c.options_.max_attempts) return done(st);
    return c.back_off(failures, result) == Status::kOk ? Step::kAgain : done(st);
  }
  // `reply` is not the message the phase expected: a transient refusal says Hello again after
  // backoff; anything else ends the round with the server's reason.
  Step refused() {
    const auto* e = std::get_if<wire::Error>(&reply);
    if (e != nullptr && is_transient_refusal(e->code)) {
      c.note(LogLevel::kWarn, "the server answered '" + e->message + "': saying Hello again");
      c.connection_->close();
      if (++failures < c.options_.max_attempts && c.back_off(failures, result) == Status::kOk)
        return Step::kAgain;
    }
    if (c.cancelled_.load()) return done(Status::kCancelled);
    c.connection_->close();
    if (e == nullptr) {
      *error = std::string("unexpected ") + wire::message_type_name(wire::message_type(reply)) +
               " from the server";
      return done(Status::kProtocolError);
    }
    *error = "server: " + e->message;
    if (e->code == wire::ErrorCode::kUnauthorized) return done(Status::kUnauthorized);
    // A server of another protocol version: this device needs an update (or the server one).
    if (e->code == wire::ErrorCode::kVersionMismatch) return done(Status::kProtocolVersionMismatch);
    // The server found our messages malformed, too large or out of order: a client/server
    // mismatch, not a condition that passes.
    return done(is_transient_refusal(e->code) ? Status::kServerError : Status::kProtocolError);
  }
  // The test hooks' network failure: the connection closes here, once per attempt (*injected).
  Step drop_connection_once(bool* injected, const char* what) {
    *injected = true;
    c.connection_->close();
    *error = what;
    return connection_lost(Status::kConnectionFailed);
  }
  Step fail(const std::string& what, Status s) {
    *error = what;
    c.connection_->close();
    return done(s);
  }

  Step say_hello(wire::TaskOffer* offer);
  Step check_task(const wire::TaskOffer& offer, const RoundTask& task, const LocalTrainer& trainer,
                  CodecSpec* codec);
  Step download_model(const wire::TaskOffer& offer);
  Status apply_download(const wire::TaskOffer& offer, bool seeded, std::string* why);
  Step compute_update(LocalTrainer& trainer, const wire::TaskOffer& offer, const RoundTask& task,
                      const CodecSpec& codec);
  Step upload_update(const wire::TaskOffer& offer);
  Step commit_update();
  // Secure rounds: the SecAgg+ state of a computed update (its integer codes, DP noise, keys),
  // then the phases: advertise, share, mask and upload, unmask.
  Step prepare_secure(const wire::TaskOffer& offer, Pending* p);
  Step secure_steps(const wire::TaskOffer& offer);
  // Sends `out`; while the server answers SecAggStatus for `phase`, waits as it asks and polls.
  Step secure_exchange(const wire::Message& out, wire::SecAggPhase phase);
  // The pending update is a secure round's masked vector the server acknowledged.
  bool secure_vector_acked() const {
    return c.pending_ && c.pending_->secure && c.pending_->secure->stage == Pending::Secure::Stage::kUnmask;
  }
  // That round went on without this device's unmask answer (the server had enough, or ended it):
  // the vector counted; the round is over for this device.
  void finish_secure_round() {
    if (result->outcome != RoundOutcome::kDuplicate) result->outcome = RoundOutcome::kAccepted;
    report_pending(*c.pending_);
    c.secure_round_over_ = c.pending_->round_id;
    c.pending_.reset();
    done(Status::kOk);
  }
  // The secure round ended without a model that counts the acked masked vector (abandoned): the
  // update goes back into the error-feedback residual, and the result says kAbandoned.
  void secure_round_not_counted(const std::string& why) {
    Pending& p = *c.pending_;
    result->outcome = RoundOutcome::kAbandoned;
    report_pending(p);
    const bool kept = give_back_secure_update(p);
    c.note(LogLevel::kWarn, "secure aggregation round " + std::to_string(p.round_id) + " " + why +
                                (kept ? ": the update went back into the error-feedback residual"
                                      : ": the update is lost (no error feedback to keep it)"));
    c.secure_round_over_ = p.round_id;
    c.pending_.reset();
    done(Status::kOk);
  }
  // A secure update the model never counted: its plain encoding goes back into the residual (the
  // next update carries it). False when there is nothing to give back, or the decode failed (the
  // residual then starts again from 0).
  bool give_back_secure_update(const Pending& p) {
    if (!p.error_feedback || !p.secure) return false;
    const std::vector<uint8_t>& encoding = p.secure->encoding.empty() ? p.bytes : p.secure->encoding;
    const Status s =
        c.feedback_.restore({encoding.data(), encoding.size()}, {c.delta_.data(), c.delta_.size()},
                            {c.workspace_.data(), c.workspace_.size()});
    if (s == Status::kOk) return true;
    c.note(LogLevel::kWarn, std::string("the update could not go back into the residual (") + status_name(s) +
                                "): the residual starts again from 0");
    c.forget_residual();
    return false;
  }
  // The acked masked vector's outcome: from `reply` when it says, else by polling (kUnmask) while
  // the round is open or closing. kDone once known (kAccepted or kAbandoned).
  Step settle_secure_round();
  // The same, for a round that ended while this device was away: asks first.
  Step ask_secure_outcome();
  Step ask_after_round_ended();
  // The round result's fields that describe the pending update (its round, model, codec and size).
  void report_pending(const Pending& p) {
    result->round_id = p.round_id;
    result->model_version = p.model_version;
    result->codec = p.codec;
    result->update_bytes = p.bytes.size();
    result->samples = p.samples;
    result->train_loss = p.loss;
  }
  // A secure round's poll for `phase` (kUnmask after the ack: what became of the masked vector?).
  static wire::SecAggPoll poll_of(const Pending& p, wire::SecAggPhase phase) {
    wire::SecAggPoll poll;
    poll.round_id = p.round_id;
    poll.round_nonce = p.nonce;
    poll.phase = phase;
    return poll;
  }
  // The UploadStart of a pending upload: where does the server stand with it?
  static wire::UploadStart upload_start(const Pending& p) {
    wire::UploadStart start;
    start.round_id = p.round_id;
    start.round_nonce = p.nonce;
    start.upload_id = p.upload_id;
    start.total_bytes = p.bytes.size();
    return start;
  }
};

namespace {

// The chunk size to use: the app's choice within the offer's and the protocol's limits (>= 1).
uint32_t chunk_bytes(uint32_t wanted, const wire::TaskOffer& offer) {
  return wire::internal::chunk_length(wanted, offer.max_chunk_bytes);
}

// "the ack is for another upload (Ack.upload_id)": a sequence rule's failure for the log.
std::string mismatch(const char* what, const wire::DecodeDetail& detail) {
  return std::string(what) + " (" + detail.field + ")";
}

RoundTask task_of(const wire::TaskOffer& offer) {
  RoundTask task;
  task.round_id = offer.round_id;
  task.model_version = offer.model_version;
  task.model_spec = offer.model_spec;
  task.parameter_count = offer.parameter_count;
  task.tensors = offer.tensors;
  task.training.batch_size = offer.training.batch_size;
  task.training.local_epochs = offer.training.local_epochs;
  task.training.max_steps = offer.training.max_steps;
  task.training.learning_rate = offer.training.learning_rate;
  task.training.momentum = offer.training.momentum;
  task.training.weight_decay = offer.training.weight_decay;
  task.training.prox_mu = offer.training.prox_mu;
  task.training.seed = offer.training.seed;
  task.codec = offer.uplink_codec;
  task.codec_seed = offer.codec_seed;
  task.deadline_ms = offer.deadline_ms;
  task.download_bytes = offer.model_bytes;
  task.downlink_codec = offer.downlink_codec;
  return task;
}

}  // namespace

// 1. Hello, until the server offers a task (waiting as it asks) or says it drains.
Client::Attempt::Step Client::Attempt::say_hello(wire::TaskOffer* offer) {
  wire::Hello hello;
  hello.sdk_version = c.options_.sdk_version;
  hello.supported_sparsifiers = wire::kKnownSparsifierBits;
  hello.supported_value_coders = wire::kKnownValueCoderBits;
  hello.supported_index_codings = wire::kKnownIndexCodingBits;
  hello.memory_budget_bytes =
      std::clamp<uint64_t>(c.options_.memory_budget_bytes, 1, wire::kMaxMemoryBudgetBytes);
  hello.cpu_cores = static_cast<uint16_t>(std::min(std::thread::hardware_concurrency(), 1024u));
  hello.model_version = c.model_version_ == ~0ull ? 0 : c.model_version_;
  if (c.needs_whole_model_) hello.capability_flags |= wire::kCapabilityNeedsWholeModel;
  hello.capability_flags |= wire::kCapabilitySecureAggregation;
  const Status s = exchange(wire::Message{hello});
  if (s != Status::kOk) {
    if (fresh && !c.options_.insecure_plaintext_for_tests && s == Status::kTlsError &&
        ++silent_refusals >= kSilentRefusalsBeforeGivingUp) {
      return fail("the server closed " + std::to_string(silent_refusals) +
                      " fresh TLS connections before answering Hello: it refuses this device's certificate "
                      "(expired, revoked, or from another CA); last error: " +
                      *error,
                  Status::kTlsHandshakeFailed);
    }
    return connection_lost(s);
  }
  silent_refusals = 0;
  if (const auto* retry = std::get_if<wire::RetryLater>(&reply)) {
    if (retry->reason == wire::RetryReason::kDraining) {
      // The server finished its rounds: one may have been this device's acked masked vector's.
      if (secure_vector_acked()) return ask_secure_outcome();
      c.connection_->close();
      result->outcome = RoundOutcome::kServerDraining;
      result->retry_after_ms = retry->retry_after_ms;
      result->retry_window_ms = retry->retry_window_ms;
      return done(Status::kOk);
    }
    const double wait = static_cast<double>(
        wire::internal::retry_pause_ms(*retry, static_cast<uint32_t>(splitmix64_next(&c.rng_state_) >> 32)));
    if (waited_ms + wait > c.options_.max_wait_ms) {
      *error = "no task within " + std::to_string(c.options_.max_wait_ms) + " ms";
      return done(Status::kTimeout);
    }
    waited_ms += wait;
    c.note(LogLevel::kInfo, std::string("no task: ") + wire::retry_reason_text(retry->reason) + "; back in " +
                                std::to_string(static_cast<uint64_t>(wait)) +
                                " ms, as the server asks (window " + std::to_string(retry->retry_after_ms) +
                                " + " + std::to_string(retry->retry_window_ms) + " ms)");
    // Long waits release the connection; short ones keep it. A busy server closes it anyway.
    if (wait > 5000 || retry->reason == wire::RetryReason::kServerBusy) c.connection_->close();
    const auto t0 = Clock::now();
    const Status slept = c.sleep_ms(static_cast<uint64_t>(wait));
    result->wait_seconds += seconds_since(t0);
    return slept == Status::kOk ? Step::kAgain : done(slept);
  }
  const auto* task_offer = std::get_if<wire::TaskOffer>(&reply);
  if (task_offer == nullptr) return refused();
  *offer = *task_offer;
  return Step::kNext;
}

// 2. The task fits: the memory budget, the codecs.
Client::Attempt::Step Client::Attempt::check_task(const wire::TaskOffer& offer, const RoundTask& task,
                                                  const LocalTrainer& trainer, CodecSpec* codec) {
  result->memory = c.plan_memory(task, trainer);
  if (offer.secure_aggregation) {
    // prepare_secure() and secure_steps(): codes and masked words (4 bytes each), the packed masked
    // vector, two sealed shares per neighbour (sent and received), the kept plain encoding.
    const wire::SecAggConfig& config = *offer.secure_aggregation;
    const size_t words = config.words;
    result->memory.secure_aggregation = 8 * words + (size_t(words) * config.modulus_bits + 7) / 8 +
                                        2 * size_t(config.degree) * wire::kSecAggSealedBytes +
                                        (result->memory.residual != 0 ? result->memory.encoded : 0);
  }
  if (result->memory.total() > c.options_.memory_budget_bytes) {
    return fail("round " + std::to_string(task.round_id) + " needs " + result->memory.describe() +
                    ", above the memory budget of " + kb(c.options_.memory_budget_bytes),
                Status::kMemoryBudgetExceeded);
  }
  CodecSpec downlink;
  if (parse_codec_spec(offer.downlink_codec.c_str(), &downlink) != Status::kOk) {
    return fail("the server's downlink codec '" + offer.downlink_codec + "' does not parse",
                Status::kProtocolError);
  }
  if (parse_codec_spec(task.codec.c_str(), codec) != Status::kOk) {
    return fail("the server's codec '" + task.codec + "' does not parse", Status::kProtocolError);
  }
  const std::string download = offer.model_bytes == 0 ? std::string("nothing to download")
                               : offer.base_model_version == 0
                                   ? "the whole model, " + std::to_string(offer.model_bytes) + " bytes"
                                   : "patches since v" + std::to_string(offer.base_model_version) + ", " +
                                         std::to_string(offer.model_bytes) + " bytes";
  c.note(LogLevel::kInfo, "round " + std::to_string(task.round_id) + ": task for model v" +
                              std::to_string(task.model_version) + " (" + download + "), codec " +
                              task.codec + ", deadline " + std::to_string(task.deadline_ms / 1000) + " s");
  return Step::kNext;
}

// 3. The model (round/downlink.h), unless this version is here already: the download stream in
// chunks (resumed after a reconnect, checked against the offer's SHA-256), then applied in place
// (the whole model, or the patches since the version held, with delta_ as decode scratch), then
// the public model checked against the offer's digest. Until that check passes the model is not
// trusted (model_version_ = ~0), and a failed check asks for the whole model next time.
Client::Attempt::Step Client::Attempt::download_model(const wire::TaskOffer& offer) {
  const size_t n = offer.parameter_count;
  const uint64_t held = c.model_.size() == n && c.model_version_ != ~0ull ? c.model_version_ : 0;
  if (held == offer.model_version) return Step::kNext;
  const uint64_t base = offer.base_model_version;
  const bool seeded = base == 1 && held == 0 && offer.initial_model_seed != 0;
  if (base != 0 && base != held && !seeded) {
    // The server answered another Hello (e.g. before a failed apply): ask again; the second time,
    // for the whole model; a third such offer is the server's fault, not a race, and ends the
    // round (no Hello loop against a server that never sends what this device can apply).
    const std::string why =
        "the offer patches version " + std::to_string(base) + ", this device holds " + std::to_string(held);
    if (++unusable_offers > kUnusableOffersBeforeGivingUp) {
      return fail(why + ", after " + std::to_string(kUnusableOffersBeforeGivingUp) +
                      " such offers (the last Hello asked for the whole model)",
                  Status::kProtocolError);
    }
    if (unusable_offers == kUnusableOffersBeforeGivingUp) c.needs_whole_model_ = true;
    c.note(LogLevel::kInfo,
           why + (c.needs_whole_model_ ? ": asking for the whole model" : ": saying Hello again"));
    return Step::kAgain;
  }
  if (c.download_version_ != offer.model_version || c.download_base_ != base ||
      c.download_digest_ != offer.model_digest) {
    c.download_.clear();
    c.download_version_ = offer.model_version;
    c.download_base_ = base;
    c.download_digest_ = offer.model_digest;
  }
  if (!c.download_.empty()) result->download_resumed_at = c.download_.size();
  result->download_base = base;
  uint32_t chunks = 0;
  while (c.download_.size() < offer.model_bytes) {
    if (c.options_.test_disconnect_after_model_chunks != 0 && !model_drop_injected &&
        ++chunks > c.options_.test_disconnect_after_model_chunks) {
      return drop_connection_once(&model_drop_injected, "test: connection dropped mid-download");
    }
    wire::ModelRequest request;
    request.round_id = offer.round_id;
    request.model_version = offer.model_version;
    request.base_model_version = base;
    request.offset = c.download_.size();
    request.max_length = chunk_bytes(c.options_.download_chunk_bytes, offer);
    const Status s = exchange(wire::Message{request});
    if (s != Status::kOk) return connection_lost(s);
    const auto* chunk = std::get_if<wire::ModelChunk>(&reply);
    if (chunk == nullptr) return refused();
    wire::DecodeDetail detail;
    if (wire::internal::expect_model_chunk(wire::internal::view_of(*chunk), request, offer.model_bytes,
                                           &detail) != Status::kOk) {
      return fail(mismatch("model chunk does not continue the download", detail), Status::kProtocolError);
    }
    c.download_.insert(c.download_.end(), chunk->data.begin(), chunk->data.end());
    result->model_bytes += chunk->data.size();
  }
  reply = wire::Message{};  // release the last chunk's data
  const tls::Sha256Digest digest = tls::sha256({c.download_.data(), c.download_.size()});
  if (std::memcmp(digest.data(), offer.model_digest.data(), digest.size()) != 0) {
    c.download_.clear();
    return fail("the downloaded model does not match the offer's SHA-256", Status::kChecksumMismatch);
  }
  std::string why;
  const Status applied = apply_download(offer, seeded, &why);
  c.download_.clear();
  c.download_.shrink_to_fit();
  if (applied != Status::kOk) {
    c.needs_whole_model_ = base != 0;
    return fail(why, applied);
  }
  c.needs_whole_model_ = false;
  c.model_version_ = offer.model_version;
  sample_heap();
  return Step::kNext;
}

Status Client::Attempt::apply_download(const wire::TaskOffer& offer, bool seeded, std::string* why) {
  const size_t n = offer.parameter_count;
  c.model_version_ = ~0ull;
  c.model_.resize(n);
  if (seeded) {  // version 1, built here: the initial model on the bf16 grid
    ModelSpec spec;
    if (parse_model_spec(offer.model_spec.c_str(), &spec) != Status::kOk || parameter_count(spec) != n) {
      *why = "the offer's initial model seed needs a built-in model spec of " + std::to_string(n) +
             " parameters";
      return Status::kProtocolError;
    }
    init_parameters(spec, offer.initial_model_seed, {c.model_.data(), n});
    if (round_to_bf16_grid({c.model_.data(), n}) != Status::kOk) {
      *why = "the initial model is not finite";
      return Status::kProtocolError;
    }
  }
  c.delta_.resize(n);
  const Span<const uint8_t> stream{c.download_.data(), c.download_.size()};
  c.workspace_.resize(std::max(c.workspace_.size(), download_decode_workspace(stream)));
  const bool whole = offer.base_model_version == 0;
  uint64_t patches = 0;
  const Status s = edgefl::apply_download(stream, whole, {c.model_.data(), n}, {c.delta_.data(), n},
                                          {c.workspace_.data(), c.workspace_.size()}, &patches);
  if (s != Status::kOk) {
    *why = std::string("the model download does not apply (") + status_name(s) + ")";
    return Status::kProtocolError;
  }
  if (!whole && patches != offer.model_version - offer.base_model_version) {
    *why = "the download holds " + std::to_string(patches) + " patches, not " +
           std::to_string(offer.model_version - offer.base_model_version);
    return Status::kProtocolError;
  }
  const tls::Sha256Digest digest = tls::sha256_of_floats({c.model_.data(), n});
  if (std::memcmp(digest.data(), offer.public_model_digest.data(), digest.size()) != 0) {
    *why = "the model after applying the download does not match the offer's public model SHA-256";
    return Status::kChecksumMismatch;
  }
  return Status::kOk;
}

// 4. Train, encode (error feedback where the codec needs it) and verify the encoding
// (round/update_steps.h), into a pending upload. The connection is released meanwhile: training
// may take longer than the server's timeouts.
Client::Attempt::Step Client::Attempt::compute_update(LocalTrainer& trainer, const wire::TaskOffer& offer,
                                                      const RoundTask& task, const CodecSpec& codec) {
  const size_t n = task.parameter_count;
  const auto deadline = Clock::now() + std::chrono::milliseconds(task.deadline_ms);
  c.connection_->close();
  Status s = trainer.prepare(task);
  if (s != Status::kOk) {
    const std::string model = !task.model_spec.empty()
                                  ? "model '" + task.model_spec + "'"
                                  : "a model of its own (" + std::to_string(task.tensors.size()) +
                                        " tensors, the first '" +
                                        (task.tensors.empty() ? std::string() : task.tensors[0].name) + "')";
    *error = "the trainer refused round " + std::to_string(task.round_id) + "'s " + model + " (" +
             status_name(s) + "): this device's trainer cannot train it";
    return done(s);
  }
  c.note(LogLevel::kInfo, "round " + std::to_string(task.round_id) + ": training model v" +
                              std::to_string(task.model_version) + " (" + std::to_string(n) + " parameters)");
  c.delta_.assign(n, 0.0f);
  auto t0 = Clock::now();
  auto p = std::make_unique<Pending>();
  s = trainer.fit({c.model_.data(), n}, {c.delta_.data(), n}, &p->samples, &p->loss);
  result->train_seconds = seconds_since(t0);
  sample_heap();
  if (s != Status::kOk) {
    *error = std::string("training failed: ") + status_name(s);
    return done(s);
  }
  t0 = Clock::now();
  c.workspace_.resize(workspace_size(codec, n));
  p->bytes.resize(encoded_bound(codec, n));
  ErrorFeedback* feedback = nullptr;
  if (c.options_.error_feedback && needs_error_feedback(codec)) {
    if (c.feedback_.size() != n || c.feedback_codec_ != task.codec) {
      c.residual_memory_.assign(ErrorFeedback::storage_bytes(n, c.options_.residual_precision), 0);
      s = c.feedback_.init({c.residual_memory_.data(), c.residual_memory_.size()}, n,
                           c.options_.residual_precision);
      if (s != Status::kOk) return done(s);
      c.feedback_codec_ = task.codec;
    }
    feedback = &c.feedback_;
  }
  const Span<uint8_t> workspace{c.workspace_.data(), c.workspace_.size()};
  size_t written = 0;
  s = encode_update(codec, feedback, {c.delta_.data(), n}, task.codec_seed, workspace,
                    {p->bytes.data(), p->bytes.size()}, &written);
  if (s == Status::kOk) s = verify_update({p->bytes.data(), written}, n, task.codec_seed, workspace);
  result->encode_seconds = seconds_since(t0);
  sample_heap();
  if (s != Status::kOk) {
    *error = std::string("encoding failed: ") + status_name(s);
    return done(s);
  }
  p->bytes.resize(written);
  c.note(LogLevel::kInfo, "round " + std::to_string(task.round_id) + ": trained on " +
                              std::to_string(p->samples) + " samples in " +
                              std::to_string(int(result->train_seconds * 1000)) + " ms; uploading " +
                              std::to_string(written) + " bytes (" + task.codec + ")");
  const tls::Sha256Digest digest = tls::sha256({p->bytes.data(), p->bytes.size()});
  std::memcpy(p->digest.data(), digest.data(), digest.size());
  p->round_id = offer.round_id;
  p->nonce = offer.round_nonce;
  p->deadline = deadline;
  p->model_version = offer.model_version;
  p->codec = task.codec;
  p->error_feedback = feedback != nullptr;
  if (offer.secure_aggregation) {
    const Step prepared = prepare_secure(offer, p.get());
    if (prepared != Step::kNext) return prepared;
  }
  for (size_t i = 0; i < p->upload_id.size(); i += 8) {
    const uint64_t r = splitmix64_next(&c.rng_state_);
    std::memcpy(p->upload_id.data() + i, &r, std::min<size_t>(8, p->upload_id.size() - i));
  }
  if (std::all_of(p->upload_id.begin(), p->upload_id.end(), [](uint8_t b) { return b == 0; }))
    p->upload_id[0] = 1;
  c.pending_ = std::move(p);
  return Step::kNext;
}

// 5. The pending upload, from the offset the server holds.
Client::Attempt::Step Client::Attempt::upload_update(const wire::TaskOffer& offer) {
  Pending& p = *c.pending_;
  result->update_bytes = p.bytes.size();
  result->samples = p.samples;
  result->train_loss = p.loss;
  Status s = exchange(wire::Message{upload_start(p)});
  if (s != Status::kOk) return connection_lost(s);
  const auto* status_message = std::get_if<wire::UploadStatus>(&reply);
  if (status_message == nullptr) return refused();
  wire::DecodeDetail detail;
  if (wire::internal::expect_upload_status(*status_message, p.round_id,
                                           {p.upload_id.data(), p.upload_id.size()}, p.bytes.size(),
                                           &detail) != Status::kOk) {
    return fail(mismatch("the server's upload status does not match this upload", detail),
                Status::kProtocolError);
  }
  if (status_message->offset > 0 && status_message->offset < p.bytes.size()) {
    result->resumed_at = status_message->offset;
  }
  const uint32_t upload_chunk = chunk_bytes(c.options_.upload_chunk_bytes, offer);
  uint64_t offset = status_message->offset;
  while (offset < p.bytes.size()) {
    if (c.options_.test_disconnect_after_chunks != 0 && !drop_injected &&
        c.chunks_sent_total_ >= c.options_.test_disconnect_after_chunks) {
      return drop_connection_once(&drop_injected, "test: connection dropped mid-upload");
    }
    wire::UploadChunk chunk;
    chunk.round_id = p.round_id;
    chunk.upload_id = p.upload_id;
    chunk.offset = offset;
    chunk.total_bytes = p.bytes.size();
    const size_t len = std::min<uint64_t>(upload_chunk, p.bytes.size() - offset);
    chunk.data.assign(p.bytes.begin() + static_cast<ptrdiff_t>(offset),
                      p.bytes.begin() + static_cast<ptrdiff_t>(offset + len));
    s = c.connection_->send(wire::Message{std::move(chunk)}, c.options_.io_timeout_ms, error);
    if (s != Status::kOk) return connection_lost(s);
    ++c.chunks_sent_total_;
    offset += len;
    result->uploaded_bytes += len;
  }
  sample_heap();
  return Step::kNext;
}

// 6. Commit, and the server's ack.
Client::Attempt::Step Client::Attempt::commit_update() {
  Pending& p = *c.pending_;
  wire::Commit commit;
  commit.round_id = p.round_id;
  commit.round_nonce = p.nonce;
  commit.upload_id = p.upload_id;
  commit.total_bytes = p.bytes.size();
  commit.sample_count = std::max<uint32_t>(p.samples, 1);
  commit.metrics.push_back(wire::Metric{"train_loss", std::isfinite(p.loss) ? double(p.loss) : 0.0});
  commit.metrics.push_back(wire::Metric{"train_seconds", result->train_seconds});
  commit.digest = p.digest;
  p.commit_sent = true;
  if (c.options_.test_disconnect_before_ack && !ack_drop_injected) {
    const Status sent = c.connection_->send(wire::Message{commit}, c.options_.io_timeout_ms, error);
    if (sent != Status::kOk) return connection_lost(sent);
    return drop_connection_once(&ack_drop_injected, "test: connection dropped before the ack");
  }
  const Status s = exchange(wire::Message{commit});
  if (s != Status::kOk) return connection_lost(s);
  const auto* ack = std::get_if<wire::Ack>(&reply);
  if (ack == nullptr) return refused();
  wire::DecodeDetail detail;
  if (wire::internal::expect_ack(*ack, p.round_id, {p.upload_id.data(), p.upload_id.size()}, &detail) !=
      Status::kOk) {
    return fail(mismatch("the ack is for another upload", detail), Status::kProtocolError);
  }
  result->outcome = outcome_of(ack->disposition);
  if (ack->disposition == wire::UpdateDisposition::kRejected) {
    result->reject_reason = wire::reject_reason_name(ack->reason);
    c.note(LogLevel::kWarn, "round " + std::to_string(p.round_id) + ": the server rejected the update (" +
                                result->reject_reason + ")");
  }
  const bool counted = wire::internal::counted(*ack);
  if (p.secure && counted) {  // the masked vector is in: the unmask phase follows
    p.secure->stage = Pending::Secure::Stage::kUnmask;
    return Step::kNext;
  }
  if (!counted) {
    // A secure update the server holds no vector of (late, straggler) goes back into the residual;
    // a rejected one does not (the same update would be rejected again).
    if (!p.secure || ack->disposition == wire::UpdateDisposition::kRejected || !give_back_secure_update(p))
      c.forget_residual();
  }
  c.pending_.reset();
  return done(Status::kOk);
}

// The pending update's round is over, and its Commit went out without an ack coming back (the
// connection or the server died in between): the server may have counted it. Asks (an
// UploadStart for that round: the server answers from its ledger) and, if it did, commits again
// for the kDuplicate ack. kNext: the server does not hold it (the caller discards it): the round
// is unknown or closed without it, or the server's round of that id has another nonce (its state
// was started again: the update was for a round this server never had).
Client::Attempt::Step Client::Attempt::ask_after_round_ended() {
  Pending& p = *c.pending_;
  const Status s = exchange(wire::Message{upload_start(p)});
  if (s != Status::kOk) return connection_lost(s);
  const auto* status_message = std::get_if<wire::UploadStatus>(&reply);
  if (status_message == nullptr) {
    const auto* e = std::get_if<wire::Error>(&reply);
    const bool not_held = e != nullptr && (e->code == wire::ErrorCode::kUnknownRound ||
                                           e->code == wire::ErrorCode::kNonceMismatch);
    return not_held ? Step::kNext : refused();
  }
  wire::DecodeDetail detail;
  if (wire::internal::expect_upload_status(*status_message, p.round_id,
                                           {p.upload_id.data(), p.upload_id.size()}, p.bytes.size(),
                                           &detail) != Status::kOk) {
    return fail(mismatch("the server's answer about an ended round's upload does not match it", detail),
                Status::kProtocolError);
  }
  if (status_message->offset != p.bytes.size()) return Step::kNext;  // not in the ledger: not counted
  report_pending(p);
  return commit_update();
}

// --- secure aggregation rounds (sdk/src/secagg/protocol.h) -----------------------------------

Client::Attempt::Step Client::Attempt::prepare_secure(const wire::TaskOffer& offer, Pending* p) {
  const wire::SecAggConfig& config = *offer.secure_aggregation;
  auto secure = std::make_unique<Pending::Secure>();
  secure->config = config;
  const auto refuse = [&](const std::string& why, Status s) {
    return fail("secure aggregation round " + std::to_string(offer.round_id) + ": " + why, s);
  };
  // The codes this device masks: its encoding's integer codes, in range, then DP noise.
  std::vector<int32_t> codes(config.words);
  Status s = read_integer_codes({p->bytes.data(), p->bytes.size()}, {codes.data(), codes.size()});
  if (s != Status::kOk) {
    return refuse("the update's encoding has no " + std::to_string(config.words) +
                      " summable integer codes (" + status_name(s) + ")",
                  Status::kNotSummable);
  }
  EncodedInfo encoding;
  s = read_header({p->bytes.data(), p->bytes.size()}, &encoding);
  if (s != Status::kOk) return refuse("the update's encoding", s);
  const int32_t bound = int32_t(std::min<uint32_t>(config.max_code, INT32_MAX));
  size_t clipped = 0;
  for (int32_t& code : codes) {
    if (code <= bound && code >= -bound) continue;
    // A Count Sketch's cells are sums of codes with no bound of their own: they are clipped to the
    // round's bound (a biased but bounded error, counted). Shared-scale codes never exceed it.
    if (encoding.values != ValueCoderKind::kCountSketch) {
      return refuse("a code above the round's max_code " + std::to_string(config.max_code),
                    Status::kValueOutOfRange);
    }
    code = code > 0 ? bound : -bound;
    ++clipped;
  }
  if (clipped > 0) {
    c.note(LogLevel::kInfo, "secure aggregation round " + std::to_string(offer.round_id) + ": " +
                                std::to_string(clipped) + " Count Sketch cells clipped to +-" +
                                std::to_string(bound));
  }
  // Fail closed: the sum of the cohort's codes must fit the modulus the server chose.
  uint32_t needed = 0;
  s = config.noise_variance > 0
          ? secagg::noisy_modulus_bits(config.cohort, config.max_code, config.noise_variance, &needed)
          : secagg::modulus_bits_for(config.cohort, config.max_code, /*is_signed=*/true, &needed);
  if (s != Status::kOk || needed > config.modulus_bits) {
    return refuse("the server's modulus 2^" + std::to_string(config.modulus_bits) +
                      " could wrap the sum of " + std::to_string(config.cohort) + " devices' codes",
                  Status::kUnsafeConfiguration);
  }
  if (config.noise_variance > 0) {
    secagg::clip_codes_l2({codes.data(), codes.size()}, config.clip_l2_codes, nullptr);
    s = secagg::add_discrete_gaussian_noise(config.noise_variance, secagg::crypto_random(),
                                            {codes.data(), codes.size()});
    if (s != Status::kOk) return refuse(std::string("DP noise: ") + status_name(s), s);
  }
  secure->words.resize(codes.size());
  for (size_t i = 0; i < codes.size(); ++i) secure->words[i] = secagg::to_word(codes[i], config.modulus_bits);
  std::fill(codes.begin(), codes.end(), 0);
  const secagg::RoundParameters params = secagg::round_parameters_of(offer);
  secagg::AdvertisedKeys keys;
  s = secagg::crypto_init();
  if (s == Status::kOk) s = secure->client.start(params, config.device_index, &keys);
  if (s != Status::kOk) return refuse(std::string("the round's parameters: ") + status_name(s), s);
  secure->advertise.round_id = offer.round_id;
  secure->advertise.round_nonce = offer.round_nonce;
  secure->advertise.keys = secagg::to_wire(keys);
  p->secure = std::move(secure);
  return Step::kNext;
}

Client::Attempt::Step Client::Attempt::secure_exchange(const wire::Message& out, wire::SecAggPhase phase) {
  Pending& p = *c.pending_;
  Status s = exchange(out);
  for (;;) {
    if (s != Status::kOk) return connection_lost(s);
    const auto* e = std::get_if<wire::Error>(&reply);
    const auto* status_message = std::get_if<wire::SecAggStatus>(&reply);
    // Waiting for keys or shares, "done" means the round ended before this device's next step.
    const bool ended = status_message != nullptr && status_message->phase == wire::SecAggPhase::kDone &&
                       phase != wire::SecAggPhase::kUnmask;
    if (ended ||
        (e != nullptr && !is_transient_refusal(e->code) && e->code != wire::ErrorCode::kUnauthorized)) {
      // The server refused this device's step (a message out of its phase, a second and different
      // one), or the round ended: it drops out of this round, which goes on without it.
      c.note(LogLevel::kWarn, "secure aggregation round " + std::to_string(p.round_id) + ": " +
                                  (ended ? std::string("the round ended")
                                         : "the server refused a step ('" + e->message + "')") +
                                  ": this device drops out");
      if (p.secure->stage == Pending::Secure::Stage::kUnmask)
        return ask_secure_outcome();  // its vector is in
      c.secure_round_over_ = p.round_id;
      if (p.secure->stage < Pending::Secure::Stage::kUnmask) result->outcome = RoundOutcome::kStraggler;
      c.pending_.reset();
      c.connection_->close();
      return done(Status::kOk);
    }
    if (status_message == nullptr || status_message->phase == wire::SecAggPhase::kDone) return Step::kNext;
    if (Clock::now() >= p.deadline) {
      return fail("secure aggregation round " + std::to_string(p.round_id) +
                      " did not finish its phases by its deadline",
                  Status::kTimeout);
    }
    const Status slept = c.sleep_ms(status_message->retry_after_ms);
    if (slept != Status::kOk) return done(slept);
    s = exchange(wire::Message{poll_of(p, phase)});
  }
}

Client::Attempt::Step Client::Attempt::secure_steps(const wire::TaskOffer& offer) {
  using Stage = Pending::Secure::Stage;
  Pending& p = *c.pending_;
  Pending::Secure& sa = *p.secure;
  // The protocol refused a step (too few neighbours, a share that does not authenticate, ...):
  // this device drops out of the round, which goes on without it; the next round is another chance.
  const auto failed = [&](const char* what, Status s) {
    c.note(LogLevel::kWarn, std::string("secure aggregation round ") + std::to_string(offer.round_id) + ": " +
                                what + " failed (" + status_name(s) +
                                "): this device drops out of the round");
    // Its masked vector is in (unmasking failed): whether the round counted it is the server's
    // to say.
    if (sa.stage == Stage::kUnmask) return ask_secure_outcome();
    result->outcome = RoundOutcome::kStraggler;
    c.secure_round_over_ = offer.round_id;
    c.pending_.reset();
    c.connection_->close();
    return done(Status::kOk);
  };
  if (sa.stage == Stage::kAdvertise) {
    const Step st = secure_exchange(wire::Message{sa.advertise}, wire::SecAggPhase::kKeys);
    if (st != Step::kNext) return st;
    const auto* keys = std::get_if<wire::SecAggKeys>(&reply);
    if (keys == nullptr || keys->round_id != p.round_id) return refused();
    const std::vector<secagg::AdvertisedKeys> neighbours = secagg::from_wire_all(keys->keys);
    std::vector<secagg::SealedShares> sealed;
    secagg::Key32 commitment;
    const Status s = sa.client.share({neighbours.data(), neighbours.size()}, &sealed, &commitment);
    if (s != Status::kOk) return failed("sharing keys", s);
    sa.shares.round_id = p.round_id;
    sa.shares.round_nonce = p.nonce;
    sa.shares.seed_commitment = commitment;
    sa.shares.shares = secagg::to_wire_all(sealed);
    sa.stage = Stage::kShare;
  }
  if (sa.stage == Stage::kShare) {
    const Step st = secure_exchange(wire::Message{sa.shares}, wire::SecAggPhase::kShares);
    if (st != Step::kNext) return st;
    const auto* inbox = std::get_if<wire::SecAggInbox>(&reply);
    if (inbox == nullptr || inbox->round_id != p.round_id) return refused();
    const std::vector<secagg::SealedShares> received = secagg::from_wire_all(inbox->shares);
    std::vector<uint32_t> masked(sa.words.size());
    Status s = sa.client.mask({received.data(), received.size()}, {sa.words.data(), sa.words.size()},
                              {masked.data(), masked.size()});
    std::fill(sa.words.begin(), sa.words.end(), 0u);
    if (s != Status::kOk) return failed("masking", s);
    std::vector<uint8_t> packed(secagg::packed_words_bytes(uint32_t(masked.size()), sa.config.modulus_bits));
    s = secagg::pack_words({masked.data(), masked.size()}, sa.config.modulus_bits,
                           {packed.data(), packed.size()});
    if (s != Status::kOk) return failed("packing the masked vector", s);
    if (p.error_feedback) sa.encoding = std::move(p.bytes);
    p.bytes = std::move(packed);
    const tls::Sha256Digest digest = tls::sha256({p.bytes.data(), p.bytes.size()});
    std::memcpy(p.digest.data(), digest.data(), digest.size());
    sa.stage = Stage::kUpload;
  }
  if (sa.stage == Stage::kUpload) {
    Step st = upload_update(offer);
    if (st == Step::kNext) st = commit_update();
    if (st != Step::kNext) return st;  // not counted (pending reset), or the connection dropped
  }
  // Unmask: the server's question once the masked phase has ended, then this device's answer.
  if (!sa.answer) {
    const Step st =
        secure_exchange(wire::Message{poll_of(p, wire::SecAggPhase::kUnmask)}, wire::SecAggPhase::kUnmask);
    if (st != Step::kNext) return st;
    // Anything but this round's question: the round went on (or ended) without needing its
    // answer, or the server refused (settle_secure_round() tells which).
    const auto* request = std::get_if<wire::SecAggUnmaskRequest>(&reply);
    if (request == nullptr || request->round_id != p.round_id) return settle_secure_round();
    secagg::UnmaskRequest question;
    question.survivors = request->survivors;
    question.dropped = request->dropped;
    std::vector<secagg::RevealedShare> revealed;
    const Status s = sa.client.unmask(question, &revealed);
    if (s != Status::kOk) return failed("unmasking", s);
    wire::SecAggUnmaskResponse answer;
    answer.round_id = p.round_id;
    answer.round_nonce = p.nonce;
    answer.shares = secagg::to_wire_all(revealed);
    sa.answer = std::move(answer);
  }
  const Step st = secure_exchange(wire::Message{*sa.answer}, wire::SecAggPhase::kUnmask);
  if (st != Step::kNext) return st;
  const auto* e = std::get_if<wire::Error>(&reply);
  if (!std::holds_alternative<wire::SecAggStatus>(reply) &&
      (e == nullptr ||
       (e->code != wire::ErrorCode::kUnknownRound && e->code != wire::ErrorCode::kNonceMismatch))) {
    return refused();
  }
  return settle_secure_round();
}

Client::Attempt::Step Client::Attempt::ask_secure_outcome() {
  Pending& p = *c.pending_;
  const Status s = exchange(wire::Message{poll_of(p, wire::SecAggPhase::kUnmask)});
  if (s != Status::kOk) return connection_lost(s);
  return settle_secure_round();
}

Client::Attempt::Step Client::Attempt::settle_secure_round() {
  Pending& p = *c.pending_;
  Pending::Secure& sa = *p.secure;
  // The server closes a round by its deadline; its outcome is known soon after. Past this, the
  // device keeps its pending vector and asks again on its next call.
  const auto give_up_at = p.deadline + std::chrono::milliseconds(4 * uint64_t(sa.config.phase_ms) + 10000);
  constexpr uint32_t kWaitingRetryMs = 200;  // while the round still waits for a phase to end
  for (;;) {
    const auto* status_message = std::get_if<wire::SecAggStatus>(&reply);
    const auto* request = std::get_if<wire::SecAggUnmaskRequest>(&reply);
    const auto* e = std::get_if<wire::Error>(&reply);
    uint32_t wait_ms = 0;
    if (status_message != nullptr && status_message->round_id == p.round_id &&
        status_message->phase == wire::SecAggPhase::kDone) {
      switch (status_message->outcome) {
        case wire::SecAggOutcome::kUnspecified:  // a server older than outcomes: kDone meant counted
        case wire::SecAggOutcome::kCounted: finish_secure_round(); return Step::kDone;
        case wire::SecAggOutcome::kNotCounted:
          secure_round_not_counted("ended without a model that counts this device's masked vector");
          return Step::kDone;
        case wire::SecAggOutcome::kPending: sa.outcome_seen = true; break;
      }
      wait_ms = status_message->retry_after_ms;
    } else if ((status_message != nullptr && status_message->round_id == p.round_id) ||
               (request != nullptr && request->round_id == p.round_id)) {
      // The round still runs a phase (after a refused step, this device's answer is optional):
      // its outcome comes once the round ends.
      wait_ms = status_message != nullptr ? status_message->retry_after_ms : kWaitingRetryMs;
    } else if (e != nullptr && e->code == wire::ErrorCode::kNonceMismatch) {
      // The server's round of this id is another: its state started again without this round.
      secure_round_not_counted("is unknown to the server (its state started again)");
      return Step::kDone;
    } else if (e != nullptr && e->code == wire::ErrorCode::kUnknownRound) {
      // A server that tells outcomes knows every round it acked a vector in. One that does not
      // (older) answers this for every closed round, after a kDone that meant counted.
      if (!sa.outcome_seen) {
        finish_secure_round();
        return Step::kDone;
      }
      secure_round_not_counted("is unknown to the server");
      return Step::kDone;
    } else {
      return refused();  // a transient refusal (storage, rate) says Hello again after backoff
    }
    if (Clock::now() >= give_up_at) {
      return fail("secure aggregation round " + std::to_string(p.round_id) +
                      ": the server did not say whether its model counts this device's masked vector",
                  Status::kTimeout);
    }
    const Status slept = c.sleep_ms(wait_ms);
    if (slept != Status::kOk) return done(slept);
    const Status s = exchange(wire::Message{poll_of(p, wire::SecAggPhase::kUnmask)});
    if (s != Status::kOk) return connection_lost(s);
  }
}

Status Client::run_round(LocalTrainer& trainer, RoundResult* result, std::string* error) {
  std::string local_error;
  if (error == nullptr) error = &local_error;
  *result = RoundResult{};
  if (!options_.insecure_plaintext_for_tests && !credentials_) {
    *error = "call init() first";
    return Status::kInvalidArgument;
  }
  using Step = Attempt::Step;
  Attempt a(*this, result, error);
  // Each pass: connect, Hello, then what the round still needs. A pass that trains ends with
  // kAgain: the device reconnects, says Hello (the same offer) and uploads.
  for (;;) {
    if (cancelled_.load()) {
      a.done(Status::kCancelled);
      return a.finish();
    }
    a.fresh = !connection_->is_open();
    const Status connected = connect_with_backoff(result, error);
    if (connected != Status::kOk) {
      a.done(connected);
      return a.finish();
    }
    a.sample_heap();
    wire::TaskOffer offer;
    Step step = a.say_hello(&offer);
    if (step == Step::kNext) {
      const RoundTask task = task_of(offer);
      result->round_id = task.round_id;
      result->model_version = task.model_version;
      result->codec = task.codec;
      const wire::internal::PendingUpload meaning =
          pending_ ? wire::internal::pending_after_offer(pending_->round_id,
                                                         {pending_->nonce.data(), pending_->nonce.size()},
                                                         pending_->commit_sent, offer.round_id,
                                                         {offer.round_nonce.data(), offer.round_nonce.size()})
                   : wire::internal::PendingUpload::kSameRound;
      const bool round_ended = meaning != wire::internal::PendingUpload::kSameRound;
      if (meaning == wire::internal::PendingUpload::kAskTheLedger && !a.secure_vector_acked()) {
        step = a.ask_after_round_ended();
        if (step == Step::kDone) return a.finish();
        if (step == Step::kAgain) continue;
      }
      if (round_ended && a.secure_vector_acked()) {
        // Its masked vector is in (acked before, or held by the ledger just asked), and the round
        // went on without this device's unmask answer: did its model count the vector?
        step = a.ask_secure_outcome();
        if (step == Step::kDone) return a.finish();
        continue;
      }
      if (round_ended) {
        // The round it was for ended while the device trained or was away: the update is
        // discarded, and said so (the next call joins the round just offered).
        const bool late = Clock::now() >= pending_->deadline;
        result->outcome = late ? RoundOutcome::kLate : RoundOutcome::kStraggler;
        a.report_pending(*pending_);
        note(LogLevel::kInfo,
             "round " + std::to_string(pending_->round_id) + " ended before its update was uploaded" +
                 (late ? " (past its deadline)" : " (closed while this device trained)") +
                 ": the update is discarded; round " + std::to_string(offer.round_id) + " is open");
        forget_residual();
        pending_.reset();
        a.done(Status::kOk);
        return a.finish();
      }
      if (!pending_ && offer.secure_aggregation && offer.round_id == secure_round_over_) {
        // This device is done with this secure round, or dropped out of it (its keys are gone):
        // it waits for the next round, as a RetryLater would have it.
        constexpr uint32_t kSecureRecheckMs = 500;
        if (a.waited_ms + kSecureRecheckMs > options_.max_wait_ms) {
          *error = "no new round within " + std::to_string(options_.max_wait_ms) + " ms";
          a.done(Status::kTimeout);
          return a.finish();
        }
        a.waited_ms += kSecureRecheckMs;
        connection_->close();
        if (const Status slept = sleep_ms(kSecureRecheckMs); slept != Status::kOk) {
          a.done(slept);
          return a.finish();
        }
        continue;
      }
      if (!pending_) {
        CodecSpec codec;
        step = a.check_task(offer, task, trainer, &codec);
        if (step == Step::kNext) step = a.download_model(offer);
        if (step == Step::kNext) step = a.compute_update(trainer, offer, task, codec);
        if (step == Step::kNext) step = Step::kAgain;  // reconnect, Hello again, then upload
      } else if (pending_->secure) {
        step = a.secure_steps(offer);
      } else {
        step = a.upload_update(offer);
        if (step == Step::kNext) step = a.commit_update();
      }
    }
    if (step == Step::kDone) return a.finish();
  }
}

Status Client::participate(LocalTrainer& trainer, uint32_t rounds, const Progress& progress,
                           std::string* error) {
  std::string local_error;
  if (error == nullptr) error = &local_error;
  uint32_t accepted = 0;
  uint32_t transient_failures = 0;
  uint32_t not_counted = 0;  // updates in a row the server did not count (rejected, straggler, late)
  auto last_accepted = Clock::now();
  auto set_give_up = [&] {
    give_up_at_ = options_.give_up_after_ms != 0
                      ? last_accepted + std::chrono::milliseconds(options_.give_up_after_ms)
                      : Clock::time_point{};
  };
  set_give_up();
  // A wait cut short by give_up_after_ms ends the call with the reason.
  auto gave_up = [&](Status s) {
    if (s == Status::kTimeout && give_up_at_ != Clock::time_point{} && Clock::now() >= give_up_at_) {
      *error = "no round accepted in " + std::to_string(options_.give_up_after_ms) + " ms; last: " + *error;
    }
    connection_->close();
    return s;
  };
  struct ClearGiveUp {
    Client* c;
    ~ClearGiveUp() { c->give_up_at_ = Clock::time_point{}; }
  } clear_give_up{this};
  while (rounds == 0 || accepted < rounds) {
    RoundResult result;
    const Status s = run_round(trainer, &result, error);
    if (s == Status::kOk) {
      transient_failures = 0;
      if (progress) progress(result);
      if (result.outcome == RoundOutcome::kAccepted || result.outcome == RoundOutcome::kDuplicate) {
        ++accepted;
        not_counted = 0;
        last_accepted = Clock::now();
        set_give_up();
      } else if (result.outcome != RoundOutcome::kServerDraining) {
        // The same model and seed would give the same update: retrying at once would only repeat
        // it (a rejected norm) or find the round closed again. Back off, longer each time in a
        // row, so that the next attempt meets a new round.
        RoundResult waited;
        const std::string why = result.outcome == RoundOutcome::kRejected
                                    ? "rejected (" + result.reject_reason + ")"
                                    : std::string(round_outcome_name(result.outcome));
        note(LogLevel::kInfo, "round " + std::to_string(result.round_id) + ": the update was not counted: " +
                                  why + "; backing off before the next round");
        if (const Status w = back_off(++not_counted, &waited); w != Status::kOk) return gave_up(w);
      }
      if (result.outcome != RoundOutcome::kServerDraining) continue;
      if (options_.stop_when_draining) break;
      // The server restarts or shuts down: come back in its window, as it asks.
      wire::RetryLater retry;
      retry.retry_after_ms = result.retry_after_ms;
      retry.retry_window_ms = result.retry_window_ms;
      const double wait = static_cast<double>(
          wire::internal::retry_pause_ms(retry, static_cast<uint32_t>(splitmix64_next(&rng_state_) >> 32)));
      note(LogLevel::kInfo, "the server is draining: back in " + std::to_string(uint64_t(wait)) + " ms");
      if (const Status w = sleep_ms(static_cast<uint64_t>(wait)); w != Status::kOk) return gave_up(w);
      continue;
    }
    if (!is_transient_status(s)) {
      connection_->close();
      return s;
    }
    if (give_up_at_ != Clock::time_point{} && Clock::now() >= give_up_at_) {
      *error = "no round accepted in " + std::to_string(options_.give_up_after_ms) + " ms; last: " + *error;
      connection_->close();
      return s;
    }
    note(LogLevel::kWarn, std::string("round failed (") + status_name(s) + "): " + *error + "; trying again");
    RoundResult waited;
    if (const Status w = back_off(++transient_failures, &waited); w != Status::kOk) return gave_up(w);
  }
  connection_->close();
  return Status::kOk;
}

}  // namespace edgefl
