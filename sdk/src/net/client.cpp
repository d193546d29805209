#include "edgefl/client.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "core/rng.h"
#include "edgefl/wire.h"
#include "net/digest.h"
#include "net/tls_credentials.h"
#include "net/tls_stream.h"

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
    case RoundOutcome::kAccepted: return "accepted";
    case RoundOutcome::kDuplicate: return "duplicate";
    case RoundOutcome::kStraggler: return "straggler";
    case RoundOutcome::kLate: return "late";
    case RoundOutcome::kRejected: return "rejected";
    case RoundOutcome::kServerDraining: return "server_draining";
  }
  return "unknown";
}

std::string MemoryPlan::describe() const {
  return "model " + kb(model) + " + delta " + kb(delta) + " + residual " + kb(residual) +
         " + codec workspace " + kb(codec_workspace) + " + encoded update " + kb(encoded) + " + trainer " +
         kb(trainer) + " + TLS " + kb(tls) + " = " + kb(total());
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
};

Client::Client(ClientOptions options) : options_(std::move(options)), connection_(new net::Connection) {
  if (options_.transport.is_set()) connection_->set_transport(options_.transport);
  rng_state_ = options_.seed;
  if (rng_state_ == 0) {
    std::random_device rd;
    rng_state_ = (uint64_t{rd()} << 32) ^ rd();
  }
}

Client::~Client() = default;

void Client::cancel() {
  cancelled_.store(true);
  connection_->cancel();
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
  EDGEFL_RETURN_IF_ERROR(net::tls_global_init(error));
  net::TlsFiles files;
  files.ca_file = options_.ca_file;
  files.cert_file = options_.cert_file;
  files.key_file = options_.key_file;
  files.server_name = options_.server_name;
  return net::TlsCredentials::load(net::TlsRole::kClient, files, &credentials_, error);
}

MemoryPlan Client::plan_memory(const RoundTask& task, const LocalTrainer& trainer) const {
  MemoryPlan plan;
  const size_t n = task.parameter_count;
  plan.model = 4 * n;
  plan.delta = 4 * n;
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
  const auto until = Clock::now() + std::chrono::milliseconds(ms);
  while (Clock::now() < until) {
    if (cancelled_.load()) return Status::kCancelled;
    std::this_thread::sleep_for(
        std::min<Clock::duration>(until - Clock::now(), std::chrono::milliseconds(50)));
  }
  return cancelled_.load() ? Status::kCancelled : Status::kOk;
}

// Exponential backoff with jitter before reconnect number `attempt` (>= 1):
// min(max, initial x 2^attempt) x U[0.5, 1].
Status Client::back_off(uint32_t attempt, RoundResult* result) {
  const double cap =
      std::min<double>(options_.backoff_max_ms,
                       double(options_.backoff_initial_ms) * std::ldexp(1.0, int(std::min(attempt, 20u))));
  const double jitter = 0.5 + 0.5 * unit_double(splitmix64_next(&rng_state_));
  note(LogLevel::kInfo, "reconnecting in " + std::to_string(static_cast<uint64_t>(cap * jitter)) +
                            " ms (attempt " + std::to_string(attempt + 1) + ")");
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
    if (attempt > 0) EDGEFL_RETURN_IF_ERROR(back_off(attempt, result));
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

Status Client::run_round(LocalTrainer& trainer, RoundResult* result, std::string* error) {
  std::string local_error;
  if (error == nullptr) error = &local_error;
  *result = RoundResult{};
  const auto started = Clock::now();
  const uint64_t sent0 = connection_->frame_bytes_sent(), received0 = connection_->frame_bytes_received();
  const size_t heap_base = options_.heap_probe ? options_.heap_probe() : 0;
  auto sample_heap = [&] {
    if (!options_.heap_probe) return;
    const size_t now = options_.heap_probe();
    if (now > heap_base) result->heap_peak_bytes = std::max(result->heap_peak_bytes, now - heap_base);
  };
  auto finish = [&](Status s) {
    sample_heap();
    result->total_seconds = seconds_since(started);
    result->wire_bytes_up = connection_->frame_bytes_sent() - sent0;
    result->wire_bytes_down = connection_->frame_bytes_received() - received0;
    return s;
  };
  if (!options_.insecure_plaintext_for_tests && !credentials_) {
    *error = "call init() first";
    return Status::kInvalidArgument;
  }
  double waited_ms = 0;
  uint32_t failures = 0;
  // TLS 1.3 clients finish their handshake before the server has checked the client certificate:
  // a server that refuses it (expired, another CA, CRL) closes the connection after the client's
  // handshake "succeeded". Fresh connections that die before the server answers Hello, several
  // times in a row, are therefore reported as a refused handshake, not retried for ever.
  uint32_t silent_refusals = 0;
  constexpr uint32_t kSilentRefusalsBeforeGivingUp = 3;
  bool drop_injected = false;
  for (;;) {
    if (cancelled_.load()) return finish(Status::kCancelled);
    const bool fresh = !connection_->is_open();
    Status s = connect_with_backoff(result, error);
    if (s != Status::kOk) return finish(s);
    sample_heap();

    // Any failure below with a dropped connection goes round this loop again (resume).
    auto retry_or_fail = [&](Status st) -> bool {
      if (st == Status::kCancelled) return false;
      if (st != Status::kConnectionFailed && st != Status::kTimeout && st != Status::kTlsError) return false;
      note(LogLevel::kWarn, std::string("connection lost (") + status_name(st) + "): " + *error);
      connection_->close();
      if (++failures >= options_.max_attempts) return false;
      return back_off(failures, result) == Status::kOk;
    };
    auto exchange = [&](const wire::Message& out, wire::Message* in) -> Status {
      Status st = connection_->send(out, options_.io_timeout_ms, error);
      if (st == Status::kOk) st = connection_->receive(in, options_.io_timeout_ms, error);
      return st;
    };
    auto server_error = [&](const wire::Message& m) -> Status {
      const auto* e = std::get_if<wire::Error>(&m);
      if (e == nullptr) {
        *error =
            std::string("unexpected ") + wire::message_type_name(wire::message_type(m)) + " from the server";
        connection_->close();
        return Status::kProtocolError;
      }
      *error = "server: " + e->message;
      connection_->close();
      if (e->code == wire::ErrorCode::kUnauthorized) return Status::kUnauthorized;
      // The server found our messages malformed, too large or out of order: a client/server
      // mismatch, not a condition that passes.
      if (!is_transient_refusal(e->code)) return Status::kProtocolError;
      return Status::kServerError;
    };
    // A transient refusal: close, back off, and say Hello again (true); false when the attempts
    // are used up or the wait was cancelled.
    auto retry_after_refusal = [&](const wire::Message& m) -> bool {
      const auto* e = std::get_if<wire::Error>(&m);
      if (e == nullptr || !is_transient_refusal(e->code)) return false;
      note(LogLevel::kWarn, "the server answered '" + e->message + "': saying Hello again");
      connection_->close();
      if (++failures >= options_.max_attempts) return false;
      return back_off(failures, result) == Status::kOk;
    };

    // 1. Hello.
    wire::Hello hello;
    hello.sdk_version = options_.sdk_version;
    hello.supported_sparsifiers = wire::kKnownSparsifierBits;
    hello.supported_value_coders = wire::kKnownValueCoderBits;
    hello.supported_index_codings = wire::kKnownIndexCodingBits;
    hello.memory_budget_bytes =
        std::clamp<uint64_t>(options_.memory_budget_bytes, 1, wire::kMaxMemoryBudgetBytes);
    hello.cpu_cores = static_cast<uint16_t>(std::min(std::thread::hardware_concurrency(), 1024u));
    wire::Message reply;
    s = exchange(wire::Message{hello}, &reply);
    if (s != Status::kOk) {
      if (fresh && !options_.insecure_plaintext_for_tests && s == Status::kTlsError &&
          ++silent_refusals >= kSilentRefusalsBeforeGivingUp) {
        connection_->close();
        *error = "the server closed " + std::to_string(silent_refusals) +
                 " fresh TLS connections before answering Hello: it refuses this device's certificate "
                 "(expired, revoked, or from another CA); last error: " +
                 *error;
        return finish(Status::kTlsHandshakeFailed);
      }
      if (retry_or_fail(s)) continue;
      return finish(s);
    }
    silent_refusals = 0;
    if (const auto* retry = std::get_if<wire::RetryLater>(&reply)) {
      if (retry->reason == wire::RetryReason::kDraining) {
        connection_->close();
        result->outcome = RoundOutcome::kServerDraining;
        result->retry_after_ms = retry->retry_after_ms;
        result->retry_window_ms = retry->retry_window_ms;
        return finish(Status::kOk);
      }
      const double wait =
          retry->retry_after_ms + double(retry->retry_window_ms) * unit_double(splitmix64_next(&rng_state_));
      if (waited_ms + wait > options_.max_wait_ms) {
        *error = "no task within " + std::to_string(options_.max_wait_ms) + " ms";
        return finish(Status::kTimeout);
      }
      waited_ms += wait;
      note(LogLevel::kInfo, "no task (reason " + std::to_string(static_cast<int>(retry->reason)) +
                                "): retrying in " + std::to_string(static_cast<uint64_t>(wait)) +
                                " ms, as the server asks");
      // Long waits release the connection; short ones keep it. A busy server closes it anyway.
      if (wait > 5000 || retry->reason == wire::RetryReason::kServerBusy) connection_->close();
      const auto t0 = Clock::now();
      s = sleep_ms(static_cast<uint64_t>(wait));
      result->wait_seconds += seconds_since(t0);
      if (s != Status::kOk) return finish(s);
      continue;
    }
    if (std::get_if<wire::TaskOffer>(&reply) == nullptr) {
      if (retry_after_refusal(reply)) continue;
      if (cancelled_.load()) return finish(Status::kCancelled);
      return finish(server_error(reply));
    }
    // A copy: `reply` is reused for the messages that follow.
    const wire::TaskOffer offer_message = std::get<wire::TaskOffer>(reply);
    const wire::TaskOffer* offer = &offer_message;

    RoundTask task;
    task.round_id = offer->round_id;
    task.model_version = offer->model_version;
    task.model_spec = offer->model_spec;
    task.parameter_count = offer->parameter_count;
    task.training.batch_size = offer->training.batch_size;
    task.training.local_epochs = offer->training.local_epochs;
    task.training.max_steps = offer->training.max_steps;
    task.training.learning_rate = offer->training.learning_rate;
    task.training.momentum = offer->training.momentum;
    task.training.weight_decay = offer->training.weight_decay;
    task.training.prox_mu = offer->training.prox_mu;
    task.training.seed = offer->training.seed;
    task.codec = offer->uplink_codec;
    task.codec_seed = offer->codec_seed;
    task.deadline_ms = offer->deadline_ms;
    result->round_id = task.round_id;
    result->model_version = task.model_version;
    result->codec = task.codec;
    const size_t n = task.parameter_count;

    if (pending_ && (pending_->round_id != offer->round_id || pending_->nonce != offer->round_nonce)) {
      pending_.reset();  // the round it was for has ended
    }
    if (!pending_) {
      // 2. Memory: refuse up front rather than fail half-way.
      result->memory = plan_memory(task, trainer);
      if (result->memory.total() > options_.memory_budget_bytes) {
        *error = "round " + std::to_string(task.round_id) + " needs " + result->memory.describe() +
                 ", above the memory budget of " + kb(options_.memory_budget_bytes);
        connection_->close();
        return finish(Status::kMemoryBudgetExceeded);
      }
      if (!offer->downlink_codec.empty()) {
        *error = "downlink codec '" + offer->downlink_codec + "' is not supported by this client";
        connection_->close();
        return finish(Status::kProtocolError);
      }
      CodecSpec codec;
      if (parse_codec_spec(task.codec.c_str(), &codec) != Status::kOk) {
        *error = "the server's codec '" + task.codec + "' does not parse";
        connection_->close();
        return finish(Status::kProtocolError);
      }
      // 3. The model, in chunks, unless this version is here already.
      if (model_version_ != offer->model_version || model_.size() != n) {
        if (offer->model_bytes != uint64_t{4} * n) {
          *error = "model size does not match the parameter count";
          connection_->close();
          return finish(Status::kProtocolError);
        }
        // Straight into the model (no second copy): the cached model is stale anyway, so it is
        // invalidated first and trusted again only when the SHA-256 of the whole download matches.
        model_version_ = ~0ull;
        model_.resize(n);
        net::Sha256 hash;
        uint64_t received = 0;
        bool dropped = false;
        while (received < offer->model_bytes) {
          wire::ModelRequest request;
          request.round_id = offer->round_id;
          request.model_version = offer->model_version;
          request.offset = received;
          request.max_length = std::min<uint32_t>(offer->max_chunk_bytes, wire::kMaxChunkBytes) & ~3u;
          if (request.max_length == 0) request.max_length = 4;
          s = exchange(wire::Message{request}, &reply);
          if (s != Status::kOk) {
            dropped = true;
            break;
          }
          const auto* chunk = std::get_if<wire::ModelChunk>(&reply);
          if (chunk == nullptr) {
            if (retry_after_refusal(reply)) continue;
            if (cancelled_.load()) return finish(Status::kCancelled);
            return finish(server_error(reply));
          }
          if (chunk->offset != received || chunk->total_bytes != offer->model_bytes ||
              chunk->model_version != offer->model_version || chunk->data.size() % 4 != 0) {
            *error = "model chunk does not continue the download";
            connection_->close();
            return finish(Status::kProtocolError);
          }
          hash.update({chunk->data.data(), chunk->data.size()});
          const uint8_t* b = chunk->data.data();
          for (size_t i = 0; i < chunk->data.size() / 4; ++i, b += 4) {
            const uint32_t bits =
                uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24;
            std::memcpy(&model_[received / 4 + i], &bits, 4);
          }
          received += chunk->data.size();
          result->model_bytes += chunk->data.size();
        }
        if (dropped) {
          if (retry_or_fail(s)) continue;
          return finish(s);
        }
        reply = wire::Message{};  // release the last chunk's data
        const net::Sha256Digest digest = hash.finish();
        if (std::memcmp(digest.data(), offer->model_digest.data(), digest.size()) != 0) {
          *error = "the downloaded model does not match the offer's SHA-256";
          connection_->close();
          return finish(Status::kChecksumMismatch);
        }
        model_version_ = offer->model_version;
        sample_heap();
      }
      // 4. Train. The connection is released meanwhile (training may take longer than timeouts).
      connection_->close();
      EDGEFL_RETURN_IF_ERROR(trainer.prepare(task));
      delta_.assign(n, 0.0f);
      auto t0 = Clock::now();
      auto p = std::make_unique<Pending>();
      s = trainer.fit({model_.data(), n}, {delta_.data(), n}, &p->samples, &p->loss);
      result->train_seconds = seconds_since(t0);
      sample_heap();
      if (s != Status::kOk) {
        *error = std::string("training failed: ") + status_name(s);
        return finish(s);
      }
      // 5. Encode (with error feedback where the codec needs it).
      t0 = Clock::now();
      workspace_.resize(workspace_size(codec, n));
      p->bytes.resize(encoded_bound(codec, n));
      size_t written = 0;
      if (options_.error_feedback && needs_error_feedback(codec)) {
        if (feedback_.size() != n || feedback_codec_ != task.codec) {
          residual_memory_.assign(ErrorFeedback::storage_bytes(n, options_.residual_precision), 0);
          EDGEFL_RETURN_IF_ERROR(feedback_.init({residual_memory_.data(), residual_memory_.size()}, n,
                                                options_.residual_precision));
          feedback_codec_ = task.codec;
        }
        s = feedback_.encode(codec, {delta_.data(), n}, task.codec_seed,
                             {workspace_.data(), workspace_.size()}, {p->bytes.data(), p->bytes.size()},
                             &written);
      } else {
        s = encode(codec, {delta_.data(), n}, task.codec_seed, {workspace_.data(), workspace_.size()},
                   {p->bytes.data(), p->bytes.size()}, &written);
      }
      result->encode_seconds = seconds_since(t0);
      sample_heap();
      if (s != Status::kOk) {
        *error = std::string("encoding failed: ") + status_name(s);
        return finish(s);
      }
      p->bytes.resize(written);
      const net::Sha256Digest digest = net::sha256({p->bytes.data(), p->bytes.size()});
      std::memcpy(p->digest.data(), digest.data(), digest.size());
      p->round_id = offer->round_id;
      p->nonce = offer->round_nonce;
      for (size_t i = 0; i < p->upload_id.size(); i += 8) {
        const uint64_t r = splitmix64_next(&rng_state_);
        std::memcpy(p->upload_id.data() + i, &r, std::min<size_t>(8, p->upload_id.size() - i));
      }
      if (std::all_of(p->upload_id.begin(), p->upload_id.end(), [](uint8_t b) { return b == 0; }))
        p->upload_id[0] = 1;
      pending_ = std::move(p);
      continue;  // reconnect, Hello again (the same offer), then upload
    }

    // 6. Upload from the offset the server holds, then commit.
    Pending& p = *pending_;
    result->update_bytes = p.bytes.size();
    result->samples = p.samples;
    result->train_loss = p.loss;
    wire::UploadStart start;
    start.round_id = p.round_id;
    start.round_nonce = p.nonce;
    start.upload_id = p.upload_id;
    start.total_bytes = p.bytes.size();
    s = exchange(wire::Message{start}, &reply);
    if (s != Status::kOk) {
      if (retry_or_fail(s)) continue;
      return finish(s);
    }
    const auto* status = std::get_if<wire::UploadStatus>(&reply);
    if (status == nullptr) {
      if (retry_after_refusal(reply)) continue;
      if (cancelled_.load()) return finish(Status::kCancelled);
      return finish(server_error(reply));
    }
    if (status->offset > p.bytes.size() || status->upload_id != p.upload_id) {
      *error = "the server's upload status does not match this upload";
      connection_->close();
      return finish(Status::kProtocolError);
    }
    if (status->offset > 0 && status->offset < p.bytes.size()) result->resumed_at = status->offset;
    const uint32_t chunk_bytes = std::max<uint32_t>(
        1, std::min({options_.upload_chunk_bytes, offer->max_chunk_bytes, wire::kMaxChunkBytes}));
    uint64_t offset = status->offset;
    bool dropped = false;
    while (offset < p.bytes.size()) {
      if (options_.test_disconnect_after_chunks != 0 && !drop_injected &&
          chunks_sent_total_ >= options_.test_disconnect_after_chunks) {
        drop_injected = true;  // the test hook: the network "fails" here, once
        connection_->close();
        s = Status::kConnectionFailed;
        *error = "test: connection dropped mid-upload";
        dropped = true;
        break;
      }
      wire::UploadChunk chunk;
      chunk.round_id = p.round_id;
      chunk.upload_id = p.upload_id;
      chunk.offset = offset;
      chunk.total_bytes = p.bytes.size();
      const size_t len = std::min<uint64_t>(chunk_bytes, p.bytes.size() - offset);
      chunk.data.assign(p.bytes.begin() + static_cast<ptrdiff_t>(offset),
                        p.bytes.begin() + static_cast<ptrdiff_t>(offset + len));
      s = connection_->send(wire::Message{std::move(chunk)}, options_.io_timeout_ms, error);
      if (s != Status::kOk) {
        dropped = true;
        break;
      }
      ++chunks_sent_total_;
      offset += len;
      result->uploaded_bytes += len;
    }
    if (dropped) {
      if (retry_or_fail(s)) continue;
      return finish(s);
    }
    sample_heap();
    wire::Commit commit;
    commit.round_id = p.round_id;
    commit.round_nonce = p.nonce;
    commit.upload_id = p.upload_id;
    commit.total_bytes = p.bytes.size();
    commit.sample_count = std::max<uint32_t>(p.samples, 1);
    commit.metrics.push_back(wire::Metric{"train_loss", std::isfinite(p.loss) ? double(p.loss) : 0.0});
    commit.metrics.push_back(wire::Metric{"train_seconds", result->train_seconds});
    commit.digest = p.digest;
    s = exchange(wire::Message{commit}, &reply);
    if (s != Status::kOk) {
      if (retry_or_fail(s)) continue;
      return finish(s);
    }
    const auto* ack = std::get_if<wire::Ack>(&reply);
    if (ack == nullptr) {
      if (retry_after_refusal(reply)) continue;
      if (cancelled_.load()) return finish(Status::kCancelled);
      return finish(server_error(reply));
    }
    if (ack->upload_id != p.upload_id || ack->round_id != p.round_id) {
      *error = "the ack is for another upload";
      connection_->close();
      return finish(Status::kProtocolError);
    }
    result->outcome = outcome_of(ack->disposition);
    if (ack->disposition == wire::UpdateDisposition::kRejected) {
      result->reject_reason = wire::reject_reason_name(ack->reason);
      note(LogLevel::kWarn, "round " + std::to_string(p.round_id) + ": the server rejected the update (" +
                                result->reject_reason + ")");
    }
    pending_.reset();
    return finish(Status::kOk);
  }
}

Status Client::participate(LocalTrainer& trainer, uint32_t rounds, const Progress& progress,
                           std::string* error) {
  std::string local_error;
  if (error == nullptr) error = &local_error;
  uint32_t accepted = 0;
  uint32_t transient_failures = 0;
  auto last_accepted = Clock::now();
  while (rounds == 0 || accepted < rounds) {
    RoundResult result;
    const Status s = run_round(trainer, &result, error);
    if (s == Status::kOk) {
      transient_failures = 0;
      if (progress) progress(result);
      if (result.outcome == RoundOutcome::kAccepted || result.outcome == RoundOutcome::kDuplicate) {
        ++accepted;
        last_accepted = Clock::now();
      }
      if (result.outcome != RoundOutcome::kServerDraining) continue;
      if (options_.stop_when_draining) break;
      // The server restarts or shuts down: come back in its window, as it asks.
      const double wait =
          result.retry_after_ms + double(result.retry_window_ms) * unit_double(splitmix64_next(&rng_state_));
      note(LogLevel::kInfo, "the server is draining: back in " + std::to_string(uint64_t(wait)) + " ms");
      EDGEFL_RETURN_IF_ERROR(sleep_ms(static_cast<uint64_t>(wait)));
      continue;
    }
    if (!is_transient_status(s)) {
      connection_->close();
      return s;
    }
    const double idle_ms = std::chrono::duration<double, std::milli>(Clock::now() - last_accepted).count();
    if (options_.give_up_after_ms != 0 && idle_ms >= double(options_.give_up_after_ms)) {
      *error = "no round accepted in " + std::to_string(options_.give_up_after_ms) + " ms; last: " + *error;
      connection_->close();
      return s;
    }
    note(LogLevel::kWarn, std::string("round failed (") + status_name(s) + "): " + *error + "; trying again");
    RoundResult waited;
    EDGEFL_RETURN_IF_ERROR(back_off(++transient_failures, &waited));
  }
  connection_->close();
  return Status::kOk;
}

}  // namespace edgefl
