// edgefl/client.h: a device's side of federated rounds against edgefl-server, over mutual TLS.
//
//   edgefl::ClientOptions o;
//   o.host = "fl.example.com"; o.port = 7443; o.server_name = "fl.example.com";
//   o.ca_file = "ca.crt"; o.cert_file = "device.crt"; o.key_file = "device.key";
//   o.memory_budget_bytes = 8 << 20;
//   edgefl::Client client(o);
//   std::string error;
//   if (client.init(&error) != edgefl::Status::kOk) { ... }        // loads the credentials
//   MyTrainer trainer;  // the app's LocalTrainer, or edgefl::DatasetTrainer (edgefl/dataset_trainer.h)
//   edgefl::RoundResult r;
//   edgefl::Status s = client.run_round(trainer, &r, &error);        // blocks: one round
//
// run_round() says Hello, waits as the server asks (RetryLater: a uniformly random time in the
// server's window), downloads the model in chunks (verified against the offer's SHA-256), checks
// that the round fits the memory budget, trains, encodes with the server's codec (with error
// feedback for biased codecs, the residual carried across rounds), uploads in chunks and commits
// with the update's SHA-256. A dropped connection is retried with exponential backoff and jitter;
// an interrupted upload resumes from the offset the server holds (at most one chunk is sent
// twice), and a commit whose ack was lost is answered kDuplicate, never counted twice (another
// update for a round that counted this device's is answered kRejected, "already_counted").
//
// The device id is the subject CN of the client certificate; nothing in a message claims it.
//
// Threading: a Client is used from one thread; cancel() may be called from any thread and makes
// the blocking call return kCancelled promptly (within ~50 ms of network waits).
#ifndef EDGEFL_CLIENT_H_
#define EDGEFL_CLIENT_H_

#include <stddef.h>
#include <stdint.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "edgefl/codec.h"
#include "edgefl/error_feedback.h"
#include "edgefl/span.h"
#include "edgefl/status.h"
#include "edgefl/tensor_table.h"
#include "edgefl/trainer.h"

namespace edgefl {

namespace net {
class Connection;
}  // namespace net
namespace tls {
class TlsCredentials;
}  // namespace tls

// A round's task as the server offered it.
struct RoundTask {
  uint64_t round_id = 0;
  uint64_t model_version = 0;
  std::string model_spec;  // a built-in model (edgefl/model.h grammar), or "" for a model of its own
  size_t parameter_count = 0;
  // The model's tensors (edgefl/tensor_table.h): the flat vector given to fit() is these, in
  // order, each row-major. A trainer for a model of its own checks them against its model in
  // prepare() (names and shapes) and refuses the task (kInvalidSpec) if they differ.
  std::vector<TensorDesc> tensors;
  TrainConfig training;  // hyper-parameters (and the round's training seed)
  std::string codec;     // the uplink codec spec
  uint64_t codec_seed = 0;
  uint32_t deadline_ms = 0;     // from the offer's receipt
  uint64_t download_bytes = 0;  // the model download of this round (TaskOffer.model_bytes)
  std::string downlink_codec;   // the codec of its patches (round/downlink.h)
};

// The app's training engine for network rounds.
class LocalTrainer {
 public:
  virtual ~LocalTrainer() = default;
  // Bytes fit() holds for `task` beyond the model and delta the client owns (counted against
  // the memory budget before the round starts).
  virtual size_t memory_bytes(const RoundTask& task) const = 0;
  // Binds to the task's model and hyper-parameters. kInvalidSpec if this trainer cannot train it.
  [[nodiscard]] virtual Status prepare(const RoundTask& task) = 0;
  // delta = local - global (parameter_count floats each); *samples = examples used (the update's
  // weight, > 0); *loss = mean training loss.
  [[nodiscard]] virtual Status fit(Span<const float> global, Span<float> delta, uint32_t* samples,
                                   float* loss) = 0;
};

// A byte stream the app provides instead of the client's own TCP socket (a platform socket API, a
// proxy, a test harness). TLS runs on top of it unchanged. Each call may block at most timeout_ms
// (the client calls with at most 50 ms, to notice cancel()); kTimeout means "nothing yet, call
// again". recv() setting *received = 0 with kOk means the peer closed. Any other status is a
// failure (kConnectionFailed for a broken stream). All four must be set, or none.
struct Transport {
  void* user = nullptr;
  Status (*connect)(void* user, const char* host, uint16_t port, uint32_t timeout_ms) = nullptr;
  Status (*send)(void* user, const uint8_t* data, size_t size, size_t* sent, uint32_t timeout_ms) = nullptr;
  Status (*recv)(void* user, uint8_t* data, size_t capacity, size_t* received, uint32_t timeout_ms) = nullptr;
  void (*close)(void* user) = nullptr;
  bool is_set() const { return connect != nullptr; }
};

// Levels of ClientOptions::log.
enum class LogLevel : uint8_t { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

struct ClientOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 7443;
  std::string server_name = "localhost";      // must match the server certificate ("" = no check: unsafe)
  std::string ca_file;                        // PEM: the CA that issued the server's certificate
  std::string cert_file;                      // PEM: this device's certificate (CN = device id)
  std::string key_file;                       // PEM: its private key
  bool insecure_plaintext_for_tests = false;  // no TLS; only against a server started the same way

  uint64_t memory_budget_bytes = 64ull << 20;  // a round that needs more is refused up front
  ResidualPrecision residual_precision = ResidualPrecision::kFp32;
  bool error_feedback = true;                 // for codecs that need it (needs_error_feedback())
  uint32_t upload_chunk_bytes = 64 * 1024;    // <= the offer's max_chunk_bytes
  uint32_t download_chunk_bytes = 64 * 1024;  // largest ModelChunk asked for (<= the offer's max)
  uint32_t connect_timeout_ms = 10000;
  uint32_t io_timeout_ms = 30000;     // per message
  uint32_t backoff_initial_ms = 200;  // reconnect: min(max, initial x 2^attempt) x U[0.5, 1]
  uint32_t backoff_max_ms = 10000;
  uint32_t max_attempts = 20;      // connection attempts (and transient refusals) per run_round()
  uint32_t max_wait_ms = 3600000;  // longest total RetryLater wait in one run_round()
  // The app's limits on participate(), which otherwise persists through every transient
  // condition (see participate()): end it when the server says it drains (demos, tests; by
  // default the device waits the server's window and comes back), and give up after this long
  // without an accepted round (0 = never; cancel() always works).
  bool stop_when_draining = false;
  uint64_t give_up_after_ms = 0;
  uint64_t seed = 0;  // jitter and upload ids (0: from the OS)
  std::string sdk_version = "edgefl 0.1";
  // Test hook: drop the connection after this many upload chunks of the first attempt (0 = never).
  uint32_t test_disconnect_after_chunks = 0;
  // Test hook: drop the connection after this many model chunks of the first attempt (0 = never).
  uint32_t test_disconnect_after_model_chunks = 0;
  // Test hook: drop the connection right after the first Commit of each run_round() is sent,
  // before its ack is read.
  bool test_disconnect_before_ack = false;
  // Optional: the transport (default: the client's own TCP socket through Asio).
  Transport transport;
  // Optional: told about reconnects, backoff, retry windows and refusals, one line each.
  std::function<void(LogLevel level, const std::string& message)> log;
  // Optional: bytes of heap in use (e.g. glibc's mallinfo2()), sampled at every phase of a round
  // (connected, model downloaded, trained, encoded, uploaded) to report the round's peak heap.
  std::function<size_t()> heap_probe;
};

// Memory a round needs, in bytes, as planned before it starts.
struct MemoryPlan {
  size_t model = 0;            // the public model (float32), kept between rounds
  size_t download = 0;         // the download stream and the decode workspace of its patches
  size_t delta = 0;            // the update (float32)
  size_t residual = 0;         // error-feedback residual (0 if the codec needs none)
  size_t codec_workspace = 0;  // workspace_size(codec, n)
  size_t encoded = 0;          // encoded_bound(codec, n)
  size_t trainer = 0;          // LocalTrainer::memory_bytes()
  size_t tls = 0;              // TLS record buffers and handshake state (estimate for our config)
  // A secure round's SecAgg+ state: the integer codes, the masked vector and its packing, the
  // sealed shares sent and received, and the plain encoding kept while error feedback may need
  // it back (0 in other rounds).
  size_t secure_aggregation = 0;
  size_t total() const {
    return model + download + delta + residual + codec_workspace + encoded + trainer + tls +
           secure_aggregation;
  }
  std::string describe() const;  // "model 221 kB + delta 221 kB + ... = 1.2 MB"
};

enum class RoundOutcome : uint8_t {
  // No answer about an update: run_round() failed (its status and error say why). Only with a
  // status other than kOk.
  kNone = 0,
  kAccepted = 1,        // counted once in the round's aggregate
  kDuplicate = 2,       // was accepted before (a retried commit)
  kStraggler = 3,       // the round had closed with its quorum
  kLate = 4,            // after the deadline
  kRejected = 5,        // the server refused the update (RoundResult::reject_reason says why)
  kServerDraining = 6,  // the server is shutting down: no task
  // A secure round the server acked the masked vector in ended without a model that counts it
  // (abandoned): with error feedback the update went back into the residual (the next update
  // carries it); without, it is lost.
  kAbandoned = 7,
};
const char* round_outcome_name(RoundOutcome outcome);

struct RoundResult {
  RoundOutcome outcome = RoundOutcome::kNone;
  uint64_t round_id = 0;
  uint64_t model_version = 0;
  std::string codec;
  uint64_t update_bytes = 0;     // the encoded update
  uint64_t uploaded_bytes = 0;   // update bytes sent (more than update_bytes if chunks were resent)
  uint64_t model_bytes = 0;      // model bytes downloaded this round
  uint64_t wire_bytes_up = 0;    // frames sent, all messages
  uint64_t wire_bytes_down = 0;  // frames received
  uint32_t samples = 0;
  float train_loss = 0;
  double train_seconds = 0;
  double encode_seconds = 0;
  double wait_seconds = 0;  // RetryLater waits and backoff
  double total_seconds = 0;
  uint32_t reconnects = 0;
  uint64_t resumed_at = 0;           // offset an interrupted upload resumed from (0: none)
  uint64_t download_resumed_at = 0;  // offset an interrupted model download resumed from (0: none)
  uint64_t download_base = 0;        // the version the download patched (0: the whole model)
  // kServerDraining: when the server asked the device to come back ([after, after + window] ms).
  uint32_t retry_after_ms = 0;
  uint32_t retry_window_ms = 0;
  // kRejected: why, as the server said (wire::RejectReason's name: "norm_too_large", ...).
  std::string reject_reason;
  MemoryPlan memory;
  // With ClientOptions::heap_probe: the largest heap in use at the sampled points of the round,
  // minus the heap in use when the round started; and the heap one TLS connection took
  // (measured across connect()). 0 without a probe.
  size_t heap_peak_bytes = 0;
  size_t heap_tls_bytes = 0;
};

class Client {
 public:
  explicit Client(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Loads and checks the credentials. Fails: kIoError / kTlsError with the reason.
  [[nodiscard]] Status init(std::string* error);

  // One round, start to ack (see the top of this file). kOk with result->outcome for every
  // answer the server gives, including kServerDraining. Fails: kUnauthorized (the server refused
  // this device), kTlsHandshakeFailed (e.g. an untrusted or expired certificate: not retried),
  // kMemoryBudgetExceeded (with the plan in *error), kConnectionFailed / kTimeout after
  // max_attempts, kServerError, kProtocolError, kProtocolVersionMismatch (the server speaks another
  // protocol version: not retried), kCancelled; the trainer's and codec's statuses.
  [[nodiscard]] Status run_round(LocalTrainer& trainer, RoundResult* result, std::string* error);

  // Rounds until `rounds` were accepted (0 = no limit), or the server drains and
  // stop_when_draining is set. progress() is called after each round. Every transient condition
  // (a reset or refused connection, a server at its connection cap, a closed round, a model
  // version that moved on, a server that restarts or drains, timeouts, a server storage failure)
  // leads to backoff with jitter and a new Hello; the call ends only on the app's limits
  // (rounds, give_up_after_ms: the last transient status; cancel(): kCancelled) or on a
  // configuration error, with its status: kUnauthorized, kTlsHandshakeFailed (a certificate the
  // server refuses), kMemoryBudgetExceeded, kInvalidArgument, kProtocolError (the server speaks
  // something this client does not), kProtocolVersionMismatch (another protocol version), and the
  // trainer's or codec's own failures.
  using Progress = std::function<void(const RoundResult&)>;
  [[nodiscard]] Status participate(LocalTrainer& trainer, uint32_t rounds, const Progress& progress,
                                   std::string* error);

  void cancel();

  // What a task would need, given this client's options.
  MemoryPlan plan_memory(const RoundTask& task, const LocalTrainer& trainer) const;

 private:
  struct Pending;
  struct Attempt;  // one run_round(): its phases and state (client.cpp)
  Status connect_with_backoff(RoundResult* result, std::string* error);
  Status back_off(uint32_t attempt, RoundResult* result);
  void note(LogLevel level, const std::string& message) const;
  // An encoded update will never reach the model (discarded, straggler, late, rejected): the
  // error-feedback residual, which assumed it would (residual := x - C(x)), starts again from 0.
  void forget_residual();
  Status sleep_ms(uint64_t ms);

  ClientOptions options_;
  std::unique_ptr<tls::TlsCredentials> credentials_;
  std::unique_ptr<net::Connection> connection_;
  std::unique_ptr<Pending> pending_;  // an encoded update not yet acked
  std::atomic<bool> cancelled_{false};
  std::mutex wait_mutex_;  // sleep_ms() waits on wait_cv_; cancel() wakes it
  std::condition_variable wait_cv_;
  uint64_t rng_state_ = 0;
  // The public model (round/downlink.h) and its version (~0: none). Patches apply to it in place;
  // it is trusted again only when its SHA-256 matches the offer's.
  uint64_t model_version_ = ~0ull;
  std::vector<float> model_;
  // The download stream of (download_version_, download_base_, download_digest_), kept across
  // reconnects so that an interrupted download resumes where it stopped.
  std::vector<uint8_t> download_;
  uint64_t download_version_ = 0, download_base_ = 0;
  std::array<uint8_t, 32> download_digest_{};  // wire::Digest
  bool needs_whole_model_ = false;             // a patched model failed its digest: ask for the whole one
  uint64_t secure_round_over_ = 0;  // the last secure round this device finished or dropped out of (0: none)
  std::vector<float> delta_;
  std::vector<uint8_t> workspace_;
  std::vector<uint8_t> residual_memory_;
  ErrorFeedback feedback_;
  std::string feedback_codec_;
  uint32_t chunks_sent_total_ = 0;
  // participate(): when give_up_after_ms runs out (no wait goes past it); epoch = none.
  std::chrono::steady_clock::time_point give_up_at_{};
};

}  // namespace edgefl

#endif  // EDGEFL_CLIENT_H_
