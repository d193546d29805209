// server/src/rounds.h: the federated rounds of edgefl-server, as a state machine with no I/O of
// its own but the storage (server/src/storage.h) and the model files. Sessions call it with
// decoded messages from authenticated devices and send back what it returns.
//
// A round: opened with a fresh 32-byte nonce on the current model; devices that say Hello get a
// TaskOffer until ceil(cohort x over_selection) offers are out (later ones: RetryLater, pace
// steering); each offered device downloads the model, uploads its encoded update in chunks and
// commits it. A commit is checked (round, nonce, size, SHA-256 digest, a full decode of the
// encoding at the model's dimension), written to storage durably, then added to the streaming
// aggregate, then acked kAccepted. The round commits as soon as `cohort` updates are in; at its
// deadline it commits if it has `min_quorum`, and is abandoned otherwise. Either way the next
// round opens (until `rounds` rounds have run). Every round ends.
//
// Dispositions: an update for a round that closed with its quorum before the deadline is a
// straggler; after the deadline it is late; a second commit of an accepted update (same round,
// device and upload id), or a second update of one device in one round, is a duplicate.
//
// Crash safety: the ledger and the open round's payloads are in storage, so start() after a crash
// rebuilds the open round's aggregate from the acknowledged updates, each counted once. A model
// is written (temp file, fsync, rename) and recorded before its round is marked committed; start()
// finishes a commit that a crash interrupted between the two.
//
// Threading: not thread-safe; the server calls it from one thread (its io_context).
#ifndef EDGEFL_SERVER_ROUNDS_H_
#define EDGEFL_SERVER_ROUNDS_H_

#include <stdint.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "edgefl/aggregate.h"
#include "edgefl/codec.h"
#include "edgefl/data.h"
#include "edgefl/model.h"
#include "edgefl/trainer.h"
#include "edgefl/wire.h"
#include "metrics.h"
#include "storage.h"

namespace edgefl::server {

struct RoundOptions {
  std::string model_spec = "cnn";  // edgefl/model.h grammar
  std::string uplink_codec = "sparq:0.1";
  std::string optimizer = "fedavg";    // edgefl/aggregate.h grammar
  wire::TrainingConfig training;       // sent to devices in every offer
  uint32_t cohort = 4;                 // accepted updates that complete a round
  double over_selection = 1.3;         // offers per round = ceil(cohort x over_selection)
  uint32_t min_quorum = 0;             // accepted updates for a commit at the deadline; 0 = cohort
  uint32_t deadline_ms = 120000;       // reporting deadline, from the round's opening
  uint32_t rounds = 0;                 // rounds to run (committed or abandoned); 0 = no limit
  double selection_probability = 1.0;  // chance a check-in is offered a task while offers remain
                                       // (random selection, as pace steering; 1 = first come)
  uint32_t retry_after_ms = 1000;      // RetryLater when the round is full: come back in
  uint32_t retry_window_ms = 2000;     //   [after, after + window] ms
  uint32_t max_chunk_bytes = 256 * 1024;
  uint32_t max_samples_per_update = 1000000;  // a commit claiming more is rejected
  uint64_t seed = 1;                          // initial model and per-round training seeds
  std::string state_dir;                      // model files (the database lives here too)
  std::string eval_data_dir;                  // Fashion-MNIST directory for server-side evaluation; "" = none
  uint32_t eval_samples = 10000;              // test samples evaluated after each commit
};

// What a session should do with a device after a message: reply (always), and maybe close.
struct Reply {
  wire::Message message;
  bool close = false;
};

class RoundManager {
 public:
  RoundManager(RoundOptions options, Storage* storage, Metrics* metrics);
  ~RoundManager();

  // Checks the options, loads (or creates) the global model, recovers the open round from
  // storage (rebuilding its aggregate) or opens one. Fails with a message on any inconsistency
  // (a state directory made for another model spec, a model file whose digest does not match).
  [[nodiscard]] Status start(int64_t now_ms, std::string* error);

  Reply hello(const std::string& device, const wire::Hello& hello, int64_t now_ms);
  // Model bytes are little-endian float32 (the TaskOffer's downlink codec is "").
  Reply model_request(const std::string& device, const wire::ModelRequest& request);
  Reply upload_start(const std::string& device, const wire::UploadStart& start, int64_t now_ms);
  // No reply on success (nullopt): chunks stream until the Commit.
  std::optional<Reply> upload_chunk(const std::string& device, const wire::UploadChunk& chunk,
                                    int64_t now_ms);
  Reply commit(const std::string& device, const wire::Commit& commit, int64_t now_ms);

  // Ends the open round if its deadline passed. Call often (the server: every 100 ms).
  void tick(int64_t now_ms);

  // All `rounds` rounds have ended (never, when rounds == 0).
  bool finished() const { return finished_; }
  // Milliseconds until the open round's deadline (0 if none is open).
  int64_t ms_to_deadline(int64_t now_ms) const;

  // For tests and the summary: the committed rounds so far.
  struct RoundSummary {
    uint64_t round_id = 0;
    RoundState state = RoundState::kOpen;
    uint32_t accepted = 0;
    uint64_t upload_bytes = 0;    // accepted update bytes
    uint64_t download_bytes = 0;  // model bytes sent during the round
    double seconds = 0;           // open to close, wall time
    float test_accuracy = -1;     // -1: not evaluated
    float test_loss = -1;
  };
  const std::vector<RoundSummary>& history() const { return history_; }
  size_t parameter_count() const { return n_; }
  uint64_t model_version() const { return model_version_; }
  Span<const float> global_model() const { return {global_.data(), global_.size()}; }
  // The bytes one bf16 upload of this model would take (edgefl encoding of the dense model).
  uint64_t bf16_update_bytes() const { return bf16_update_bytes_; }

 private:
  struct Upload {
    wire::UploadId upload_id{};
    uint64_t total = 0;
    std::vector<uint8_t> bytes;
    std::chrono::steady_clock::time_point started;  // UploadStart, for the upload-to-ack latency
  };
  struct OpenRound {
    RoundRecord record;
    std::set<std::string> offered;
    std::map<std::string, Upload> uploads;  // by device
    int64_t opened_wall_ms = 0;
    uint64_t upload_bytes = 0;
    uint64_t download_bytes = 0;
    uint32_t accepted = 0;
  };
  struct ClosedRound {
    int64_t deadline_ms = 0;
    int64_t closed_ms = 0;
    bool committed = false;
  };

  Status load_or_create_model(int64_t now_ms, std::string* error);
  Status recover_open_round(int64_t now_ms, std::string* error);
  Status open_next_round(int64_t now_ms, std::string* error);
  Status close_round(bool commit, int64_t now_ms, std::string* error);
  Status write_model(uint64_t version, uint64_t round_id, int64_t now_ms, std::string* error);
  void evaluate(RoundSummary* summary);
  wire::TaskOffer make_offer(int64_t now_ms) const;
  Reply error_reply(wire::ErrorCode code, const std::string& message, bool close = false);
  Reply ack(uint64_t round, const wire::UploadId& id, wire::UpdateDisposition d);
  std::optional<ClosedRound> closed_round(uint64_t round_id);
  void fatal(const std::string& what, const std::string& error);

  RoundOptions options_;
  Storage* storage_;
  Metrics* metrics_;
  ModelSpec spec_{};
  CodecSpec codec_{};
  ServerOptimizerSpec optimizer_spec_{};
  size_t n_ = 0;
  uint32_t offers_per_round_ = 0;
  uint32_t min_quorum_ = 0;
  uint64_t max_upload_bytes_ = 0;
  uint64_t bf16_update_bytes_ = 0;

  std::vector<float> global_;
  std::vector<uint8_t> model_bytes_;  // global_ as little-endian float32, what devices download
  wire::Digest model_digest_{};
  uint64_t model_version_ = 0;
  std::vector<uint8_t> optimizer_memory_;
  ServerOptimizer optimizer_;
  std::vector<uint8_t> aggregate_memory_;
  StreamingAggregator aggregate_;
  std::vector<float> scratch_;  // decode check of a committed update
  std::vector<uint8_t> decode_workspace_;
  std::vector<float> mean_;

  std::optional<OpenRound> open_;
  std::map<uint64_t, ClosedRound> closed_;  // recent rounds, for straggler / late answers
  uint32_t rounds_ended_ = 0;
  bool finished_ = false;
  std::vector<RoundSummary> history_;
  uint64_t selection_rng_ = 0;

  // Server-side evaluation (optional).
  Dataset test_set_;
  std::vector<uint8_t> eval_workspace_;
  SgdTrainer eval_trainer_;
  bool eval_enabled_ = false;
};

}  // namespace edgefl::server

#endif  // EDGEFL_SERVER_ROUNDS_H_
