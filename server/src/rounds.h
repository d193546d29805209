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
// device, upload id and SHA-256) is a duplicate; any other update of a device whose update of that
// round is counted is rejected, already_counted (the upload id names the update: the same bytes
// under another upload id are another update).
//
// Bounded influence: before its ack, an update must decode at the model's dimension, be finite,
// keep global + update finite, and have an L2 norm within the round's bound (RoundOptions); so
// the FedAvg mean (a convex combination of accepted updates) cannot overflow the model. A reject
// carries its wire::RejectReason.
//
// Closing a round is idempotent: the next model (and optimizer state) is computed once into its
// own buffers from the unchanged global model and the round's aggregate, written (temp file,
// fsync, rename), recorded, and only then is the round marked committed and the in-memory model
// replaced. A failure at any step (disk full, EIO, read-only directory, a storage error) changes
// nothing in memory; the round stays "closing" (no update is taken, check-ins get RetryLater
// ServerBusy) and tick() retries with backoff (0.2 s doubling to 10 s) until the disk recovers:
// the retry produces the same bytes, and the model is applied exactly once. A commit that cannot
// succeed (the optimizer's result would not be finite) abandons the round with that reason.
//
// Crash safety: the ledger and the open round's payloads are in storage, so start() after a crash
// rebuilds the open round's aggregate from the acknowledged updates, each counted once, in
// acceptance order (the same binary64 sums, so the same next model). start() finishes a commit
// that a crash interrupted after the model was recorded, and redoes one interrupted before.
//
// Offers are leases: an offered device that sends nothing for RoundOptions::offer_lease_ms loses
// its slot to the pool; it may take a free slot again.
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
#include "edgefl/tensor_table.h"
#include "edgefl/trainer.h"
#include "edgefl/wire.h"
#include "evaluator.h"
#include "metrics.h"
#include "public_model.h"
#include "round/seeds.h"
#include "round/update_steps.h"
#include "secagg/dp.h"
#include "secure_round.h"
#include "storage.h"
#include "tls/digest.h"

namespace edgefl::server {

struct RoundOptions {
  // The model: a built-in spec (edgefl/model.h grammar), or "" with initial_model.
  std::string model_spec = "cnn";
  // A .safetensors file (server/src/safetensors.h: read_safetensors) holding the model the
  // federation starts from: its tensors define the model (any names and shapes, F32/F16/BF16),
  // its values are version 1, its __metadata__ is carried into every model file (keys not starting
  // with "edgefl." or "format"). With model_spec set too, the file must hold that model. Read at
  // the first start of a state directory; later starts check that it still describes the
  // directory's model and otherwise ignore it. "" = the built-in spec's seeded initialisation.
  std::string initial_model;
  bool model_spec_given = false;  // edgefl-server: --model was on the command line
  std::string uplink_codec = "sparq:0.1";
  // The codec of the patches that move the devices' public model (sdk/src/round/downlink.h,
  // server/src/public_model.h); the whole model always travels as bf16.
  std::string downlink_codec = "sparq:0.02";
  std::string optimizer = "fedavg";  // edgefl/aggregate.h grammar
  // How a round's updates are combined (edgefl/aggregate.h, parse_robust_spec): "mean" is the
  // streaming weighted FedAvg mean; "median" and "trimmed-mean[:beta=B]" re-read the round's
  // accepted updates from storage at commit and combine them coordinate-wise, unweighted.
  std::string aggregation = "mean";
  wire::TrainingConfig training;              // sent to devices in every offer
  uint32_t cohort = 4;                        // accepted updates that complete a round
  double over_selection = 1.3;                // offers per round = ceil(cohort x over_selection)
  uint32_t min_quorum = 0;                    // accepted updates for a commit at the deadline; 0 = cohort
  uint32_t deadline_ms = 120000;              // reporting deadline, from the round's opening
  uint32_t rounds = 0;                        // rounds to run (committed or abandoned); 0 = no limit
  double selection_probability = 1.0;         // chance a check-in is offered a task while offers remain
                                              // (random selection, as pace steering; 1 = first come)
  uint32_t retry_after_ms = 1000;             // RetryLater when the round is full: come back in
  uint32_t retry_window_ms = 2000;            //   [after, after + window] ms, the window widened
  double target_checkins_per_s = 50;          //   so that the devices turned away come back at
                                              //   about this rate (pace steering, Bonawitz et
                                              //   al. 2019, "Towards federated learning at scale")
  uint32_t max_chunk_bytes = 64 * 1024;       // model and upload chunks (one frame's data)
  uint32_t max_samples_per_update = 1000000;  // a commit claiming more is rejected
  // Bound on one update's influence: an update whose decoded L2 norm is above the bound is
  // rejected (RejectReason::kNormTooLarge) before its ack. max_update_norm > 0: that bound;
  // 0: update_norm_factor x max(1, ||global model||) of the round's base model.
  double max_update_norm = 0;
  double update_norm_factor = 1.0;
  // An offered device that sends nothing for this long loses its offer (the slot goes back to
  // the pool; it may take one again while the round has room). 0: deadline_ms / 2.
  uint32_t offer_lease_ms = 0;
  uint64_t seed = 1;      // initial model and per-round training seeds
  std::string state_dir;  // model files (the database lives here too)
  // Server-side evaluation after each commit: `evaluator` if set (evaluator.h), else the built-in
  // Fashion-MNIST evaluator when eval_data_dir is set. Either one must accept the model at start.
  std::shared_ptr<ModelEvaluator> evaluator;
  // Secure aggregation (secure_round.h): every round is a SecAgg+ round over the integer codes of
  // the uplink codec (q<b>:shared=STEP, alone or after randk); only devices with the capability
  // take part; the server sees the sum of the survivors' codes, never one device's update.
  SecureAggregationOptions secure_aggregation;
  // Several aggregators, one round: this server's name among the servers that share one store
  // (PostgreSQL; "" = the only server). One of them, elected through the store's coordinator
  // lease (Storage::acquire_lease), opens, seals and closes rounds and writes the models; every
  // one takes devices and records their updates in the shared ledger, and the coordinator's close
  // is the FedAvg of that ledger, whoever acknowledged the updates. Model files are shared through
  // state_dir (each coordinator writes under state_dir/coordinator-<epoch>/, so a deposed one
  // cannot overwrite its successor's files). Not with secure aggregation (its round state lives in
  // one server).
  std::string aggregator_id;
  // The lease's length: a coordinator that stops renewing it (every quarter of it) is replaced
  // after this long; a follower looks at the store every follow_interval_ms.
  uint32_t coordinator_lease_ms = 10000;
  uint32_t follow_interval_ms = 100;
  // Once the coordinator has sealed a round, it merges the partial sums the aggregators flush
  // (each sums the updates it acknowledged) and decodes from the ledger only the updates of an
  // aggregator whose sum is missing or does not match its share of the ledger (one that died, or
  // restarted mid-round). It waits this long after the seal for the sums before decoding.
  uint32_t partial_sum_wait_ms = 500;
  std::string eval_data_dir;      // Fashion-MNIST directory for the built-in evaluator; "" = none
  uint32_t eval_samples = 10000;  // test samples the built-in evaluator uses
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
  // Serves the download stream the device's offer named (public_model.h).
  Reply model_request(const std::string& device, const wire::ModelRequest& request, int64_t now_ms);
  Reply upload_start(const std::string& device, const wire::UploadStart& start, int64_t now_ms);
  // No reply on success (nullopt): chunks stream until the Commit.
  std::optional<Reply> upload_chunk(const std::string& device, const wire::UploadChunk& chunk,
                                    int64_t now_ms);
  Reply commit(const std::string& device, const wire::Commit& commit, int64_t now_ms);
  // Secure aggregation rounds (secure_round.h); an Error when the server does not run them.
  Reply secagg_advertise(const std::string& device, const wire::SecAggAdvertise& m, int64_t now_ms);
  Reply secagg_shares(const std::string& device, const wire::SecAggShares& m, int64_t now_ms);
  Reply secagg_poll(const std::string& device, const wire::SecAggPoll& m, int64_t now_ms);
  Reply secagg_unmask(const std::string& device, const wire::SecAggUnmaskResponse& m, int64_t now_ms);
  // kUnmask polls of a round that is not open: kDone with the outcome of the device's masked
  // vector, read from the round's record and ledger (kPending while its close is under way).
  Reply secure_outcome(const std::string& device, const wire::SecAggPoll& m);
  // The open secure round, for tests (null when none).
  const SecureRound* secure_round() const { return secure_ ? &*secure_ : nullptr; }

  // Ends the open round if its deadline passed; retries a round close that failed on I/O (with
  // backoff); reclaims expired offers. Call often (the server: every 100 ms).
  void tick(int64_t now_ms);

  // The longest [after + window] of the RetryLater answers given so far, ms.
  uint64_t longest_retry_ms() const { return longest_retry_ms_; }
  // Once finished(): until when (Unix ms) devices may still come back from a RetryLater, so that
  // each of them hears "draining": the first call's now_ms + longest_retry_ms(); with several
  // aggregators, the latest such time any of them published (a device turned away by one comes
  // back through the balancer to any). 0 before finished().
  int64_t drain_until_unix_ms(int64_t now_ms);
  // When the latest Hello came (Unix ms; 0: none yet): the server drains until devices are quiet.
  int64_t last_checkin_ms() const { return last_checkin_ms_; }
  // Some device of the last closed secure round has not heard what became of its masked vector.
  bool awaiting_secure_outcomes() const { return !awaiting_outcome_.empty(); }

  // All `rounds` rounds have ended (never, when rounds == 0).
  bool finished() const { return finished_; }
  // This server opens and closes rounds: always for the only server; with aggregator_id, while it
  // holds the coordinator lease.
  bool coordinating() const { return coordinating_; }
  // Whether the state store answers now (a read of it: SQLite's file, PostgreSQL's connection,
  // opened again if it was lost); kIoError with *error saying why. For /healthz.
  Status check_storage(std::string* error);
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
    double dp_epsilon = -1;  // secure rounds with DP: epsilon so far at dp_delta; else -1
  };
  const std::vector<RoundSummary>& history() const { return history_; }
  size_t parameter_count() const { return n_; }
  uint64_t model_version() const { return model_version_; }
  // Updates of abandoned rounds the open round counts (OpenRound::carried); 0 without one.
  uint32_t carried_updates() const { return open_ ? open_->carried : 0; }
  // The directory of the current model's files (its global.safetensors): state_dir, or with
  // several aggregators the directory of the coordinator that wrote it.
  const std::string& model_dir() const { return model_dir_; }
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
    std::map<std::string, int64_t> offered;  // device -> lease expiry (unix ms)
    std::set<std::string> contributed;       // devices with an accepted update (never expire)
    std::map<std::string, Upload> uploads;   // by device
    int64_t opened_wall_ms = 0;
    uint64_t upload_bytes = 0;
    uint64_t download_bytes = 0;
    uint32_t accepted = 0;
    bool aggregate_stale = false;  // a rebuild from the ledger failed part way: redo it
    // A ledger write failed, and may have taken effect (a store whose connection dropped during
    // COMMIT): until reconcile_ledger() reads the ledger again, `accepted`, `contributed` and the
    // sums (plain or masked) may miss a row the ledger holds. One server only.
    bool ledger_in_doubt = false;
    double norm_bound = 0;  // max L2 norm of one update in this round
    // Set once the round has decided to close: no update is taken any more, and the close is
    // retried (same result: the candidate model is computed once) until it is durable.
    bool closing = false;
    bool closing_commit = false;
    uint64_t in_ledger = 0;        // several aggregators: the ledger's count at the last look
    bool decided_on_seal = false;  // several aggregators: commit or abandon taken on the sealed ledger
    int64_t sealed_ms = 0;         // several aggregators: when this server found the round sealed
    // aggregate_ sums only updates this process recorded in this round (false once rebuilt from
    // the whole ledger): what its partial sum may hold.
    bool aggregate_is_own = true;
    uint64_t own_sequence_sum = 0;     // the sequences of the updates aggregate_ holds (kSequenceSumMask)
    bool partial_sum_flushed = false;  // a follower's partial sum of the sealed round is stored
    bool ledger_merged = false;        // the coordinator's aggregate_ is the sealed ledger's sum
    uint32_t close_failures = 0;
    int64_t next_close_attempt_ms = 0;
    // The updates of the rounds abandoned below their quorum since the last commit (plain
    // rounds): they were acknowledged Accepted and trained this same model version, so this round
    // counts them. In the mean (one server: aggregate_ from the opening; several aggregators: the
    // coordinator's merge) and the robust rules' rows, towards the cohort and the quorum;
    // `accepted`, `contributed` and `in_ledger` stay this round's own. Their devices get no task.
    std::vector<uint64_t> carried_rounds;  // ascending
    std::set<std::string> carried_devices;
    uint32_t carried = 0;
  };
  struct ClosedRound {
    int64_t deadline_ms = 0;
    int64_t closed_ms = 0;
    bool committed = false;
  };

  Status resolve_model(std::string* error);  // spec_, tensors_, initial_values_ from the options
  Status load_or_create_model(int64_t now_ms, std::string* error);
  // The global model, optimizer state and public model of the recorded version `model`, from
  // the files next to its path.
  Status load_model(const ModelRecord& model, std::string* error);
  // Several aggregators: the first lease attempt; taking the coordinator's part (fenced writes,
  // this epoch's file directory, the latest model, the open round recovered from the shared
  // ledger as after a restart); a follower's look at the store (the latest model, the open round,
  // its ledger count); the lease renewed (or taken, or found lost).
  Status start_shared(int64_t now_ms, std::string* error);
  Status become_coordinator(const Lease& lease, int64_t now_ms, std::string* error);
  Status follow(int64_t now_ms, std::string* error);
  void renew_lease(int64_t now_ms);
  void give_up_lease(uint64_t epoch, int64_t now_ms, const std::string& why);  // after a failed start
  Status recover_open_round(int64_t now_ms, std::string* error);
  // Sets the aggregate, round->accepted, contributed and upload_bytes from the round's ledger
  // (the plain rounds' rule: every ledger update decoded and added, in acceptance order).
  Status rebuild_aggregate(OpenRound* round, std::string* error);
  // Sets round->carried_rounds from the durable list of abandoned rounds (setting
  // kCarriedRoundsKey) that trained the round's base model version and are still abandoned.
  Status find_carried_rounds(OpenRound* round, std::string* error);
  // The round ids of kCarriedRoundsKey when it lists them for `base_model_version`; else none.
  Status listed_carried_rounds(uint64_t base_model_version, std::vector<uint64_t>* ids, std::string* error);
  // Where add_carried() puts the carried updates, decoded; each sink when not null.
  struct CarriedSinks {
    StreamingAggregator* weighted = nullptr;  // added, weighted by their sample counts
    std::vector<float>* rows = nullptr;       // appended, n_ floats each
    std::vector<double>* sum = nullptr;       // n_ doubles: added, one weight each (a secure mean)
  };
  // Sets round->carried and carried_devices from the carried rounds' ledgers (unchanged on
  // failure); puts their updates in `to` (no sink: they are only counted).
  Status add_carried(OpenRound* round, const CarriedSinks& to, std::string* error);
  // Before a plain round is abandoned below its quorum: the list the next round reads, this
  // round added when its ledger holds an update.
  Status record_carried_rounds(const OpenRound& round, std::string* error);
  // Before a commit to `version` is durable: the abandoned rounds whose updates it counts.
  Status record_counted_rounds(const std::vector<uint64_t>& rounds, uint64_t version, std::string* error);
  // *counted: false when round_id was abandoned and its updates reached no model and wait for no
  // round (a secure round; carried updates a commit that could not succeed dropped).
  Status abandoned_rows_counted(uint64_t round_id, bool* counted, std::string* error);
  Status abandoned_rows_counted(const RoundRecord& round, bool* counted, std::string* error);
  // The open round is a secure round of this id, not closing.
  bool secure_round_open(uint64_t round_id) const {
    return secure_ && open_ && !open_->closing && open_->record.round_id == round_id;
  }
  // After a ledger write in doubt (OpenRound::ledger_in_doubt), counts what the ledger holds and
  // this process missed: a plain round's aggregate is rebuilt from the ledger; a secure round in
  // its masked phase adds the masked vectors it lacks. Runs before any decision that counts the
  // round's updates (an ack of Duplicate, the cohort, the deadline, the masked phase's end).
  // kOk when nothing is in doubt any more; else the storage's status (still in doubt).
  Status reconcile_ledger(std::string* error);
  // The open round's ledger holds `device`'s update: if this server has not counted it (a write
  // in doubt), counts it before the device hears Duplicate. An Internal error reply when the
  // ledger cannot be read (nothing is answered Duplicate then); nullopt otherwise.
  std::optional<Reply> count_before_duplicate(const std::string& device);
  // A ledger update decoded into scratch_ as commit() decoded it; its decode status, or
  // kCorruptPayload for one the checks would now refuse.
  Status decode_recorded(const UpdateRecord& u);
  // Several aggregators, once the round is sealed. A follower stores the sum of the updates it
  // recorded (retried at the next look on failure). The coordinator sets aggregate_ to the sealed
  // ledger's sum: its own sum, the partial sums whose count matches their aggregator's share of
  // the ledger, and the other shares' updates decoded from the ledger; *waiting (nothing changed)
  // while a share has no matching sum and the wait for them has not run out.
  void flush_partial_sum();
  Status merge_partial_sums(int64_t now_ms, bool* waiting, std::string* error);
  Status open_next_round(int64_t now_ms, std::string* error);
  // Decides to close the open round (commit or abandon) and tries to make it durable. kOk when
  // the round is closed (and the next one opened); an I/O failure leaves it closing, retried by
  // tick(). A commit that cannot succeed (the new model would not be finite) abandons the round.
  Status close_round(bool commit, int64_t now_ms, std::string* error);
  Status try_close(int64_t now_ms, std::string* error);
  // mean_ = the round's updates combined by robust_spec_ (median or trimmed mean), re-read from
  // storage. Fails with the storage's or robust_combine()'s status.
  Status robust_combination(std::string* error);
  // Computes the next model and optimizer state into candidate_ / candidate_optimizer_memory_
  // from global_, the optimizer state and the aggregate, none of which it changes.
  Status compute_candidate(std::string* error);
  Status finish_close(int64_t now_ms, std::string* error);
  // Opens the next round; on failure logs it and schedules a retry from tick().
  Status open_or_schedule(int64_t now_ms, std::string* error);
  Status write_model(Span<const float> model, Span<const uint8_t> optimizer_state, uint64_t version,
                     uint64_t round_id, int64_t now_ms, std::string* error);
  double update_norm_bound() const;
  // The offer of `device` in the open round is live (renews its lease), or can be taken again.
  bool renew_offer(const std::string& device, int64_t now_ms);
  void reclaim_expired_offers(int64_t now_ms);
  uint32_t lease_ms() const;
  // The RetryLater window for a device turned away: wide enough that all the devices turned away
  // recently come back at about target_checkins_per_s.
  uint32_t steered_window(const std::string& device, int64_t now_ms);
  void evaluate(RoundSummary* summary);
  wire::TaskOffer make_offer(const std::string& device, const wire::Hello& hello, int64_t now_ms);
  // commit(), step by step: the answer when the commit is not for the open round's upload (a
  // duplicate, a closed round, a stale nonce, a closing round); then counting a checked update
  // (ledger first, then the aggregate, then the ack).
  std::optional<Reply> commit_outside_open_round(const std::string& device, const wire::Commit& commit,
                                                 int64_t now_ms);
  Reply straggler_or_late(const std::string& device, const wire::Commit& commit, bool late);
  // The answer to a Commit of `device` whose ledger already holds `counted` for that round:
  // Duplicate when the Commit is that update again (its upload id and SHA-256), so that a device
  // whose ack was lost learns it was counted; otherwise Rejected (kAlreadyCounted), so that a
  // device that lost its state and sends another update for the round does not take the counted
  // one for its own (its error feedback would subtract the wrong update). Counts a row in doubt
  // first (count_before_duplicate) where the round is open.
  Reply answer_counted_before(const std::string& device, const wire::Commit& commit,
                              const UpdateRecord& counted);
  Reply count_update(const std::string& device, const wire::Commit& commit, const tls::Sha256Digest& digest,
                     double norm, int64_t now_ms);
  // The ledger step of both: `device`'s upload recorded durably (its bytes move into *record); a
  // reply when that is the end of it (a storage failure, a duplicate).
  std::optional<Reply> record_upload(const std::string& device, const wire::Commit& commit,
                                     const tls::Sha256Digest& digest, int64_t now_ms, UpdateRecord* record);
  // check_update() (round/update_steps.h) of an upload into scratch_, growing the decode workspace.
  UpdateCheck check_upload(Span<const uint8_t> bytes, const uint64_t* codec_seed, double norm_bound);
  // `device`'s training and codec seeds in round `round_id` (round/seeds.h).
  DeviceSeeds seeds_of(const std::string& device, uint64_t round_id) const;
  Reply error_reply(wire::ErrorCode code, const std::string& message, bool close = false);
  Reply ack(uint64_t round, const wire::UploadId& id, wire::UpdateDisposition d,
            wire::RejectReason reason = wire::RejectReason::kNone);
  std::optional<ClosedRound> closed_round(uint64_t round_id);
  // Secure rounds: the encoding whose integer codes devices mask in round `round_id`; the start of
  // the round's SecureRound; its phases (ending them, then closing the round); the masked vector of
  // a commit; and the check common to the SecAgg messages (round, nonce, open).
  Status secure_like(uint64_t round_id, EncodedInfo* like, std::string* error);
  Status start_secure_round(const RoundRecord& record, std::string* error);
  void secure_tick(int64_t now_ms);
  Reply count_masked(const std::string& device, const wire::Commit& commit, const tls::Sha256Digest& digest,
                     int64_t now_ms);
  std::optional<Reply> secagg_check(uint64_t round_id, const std::vector<uint8_t>& nonce);
  Reply secure_hello(const std::string& device, const wire::Hello& hello, int64_t now_ms);
  void fatal(const std::string& what, const std::string& error);

  RoundOptions options_;
  Storage* storage_;
  Metrics* metrics_;
  ModelSpec spec_{};                   // the built-in model (when builtin_)
  bool builtin_ = true;                // false: a model defined by its tensors (initial_model)
  std::string spec_text_;              // the canonical spec, or "" for a model of its own
  std::vector<TensorDesc> tensors_;    // the model's tensors (sent in every offer)
  std::vector<float> initial_values_;  // from initial_model, until version 1 is written
  std::vector<std::pair<std::string, std::string>> user_metadata_;  // carried into every model file
  CodecSpec codec_{};
  ServerOptimizerSpec optimizer_spec_{};
  RobustSpec robust_spec_{};
  size_t n_ = 0;
  uint32_t offers_per_round_ = 0;
  uint32_t min_quorum_ = 0;
  uint64_t max_upload_bytes_ = 0;
  uint64_t bf16_update_bytes_ = 0;

  std::vector<float> global_;
  PublicModel public_;  // what devices hold and download (public_model.h)
  CodecSpec downlink_{};
  uint64_t initial_model_seed_ = 0;  // != 0: version 1 is the seeded initial model
  uint64_t model_version_ = 0;
  std::vector<uint8_t> optimizer_memory_;
  ServerOptimizer optimizer_;
  std::vector<uint8_t> aggregate_memory_;
  StreamingAggregator aggregate_;
  // Several aggregators: the coordinator's merge of the sealed ledger, and one partial sum read.
  std::vector<uint8_t> merged_memory_, partial_memory_;
  StreamingAggregator merged_, partial_;
  std::vector<float> scratch_;  // decode check of a committed update
  std::vector<uint8_t> decode_workspace_;
  std::vector<float> mean_;
  // The model a closing round produces, kept across retries of its close.
  std::vector<float> candidate_;
  std::vector<uint8_t> candidate_optimizer_memory_;
  ServerOptimizer candidate_optimizer_;
  bool candidate_ready_ = false;

  std::optional<OpenRound> open_;
  std::map<uint64_t, ClosedRound> closed_;  // recent rounds, for straggler / late answers
  uint32_t rounds_ended_ = 0;
  bool finished_ = false;
  std::vector<RoundSummary> history_;
  uint64_t selection_rng_ = 0;
  std::set<std::string> expired_offers_;    // devices whose offer in the open round expired
  std::map<std::string, int64_t> waiting_;  // devices turned away recently -> when
  int64_t waiting_pruned_ms_ = 0;
  uint64_t longest_retry_ms_ = 0;
  std::string abandon_reason_;  // why the closing round is abandoned ("" = no quorum)
  uint32_t open_failures_ = 0;  // failed attempts to open the next round
  int64_t next_open_attempt_ms_ = 0;

  // Several aggregators (RoundOptions::aggregator_id).
  bool shared_ = false;            // aggregator_id is set
  bool coordinating_ = true;       // the only server, or the lease holder
  std::string lease_holder_;       // aggregator_id#<16 random hex digits>: this process holds the lease
  uint64_t lease_epoch_ = 0;       // of the lease this server coordinates under
  int64_t next_lease_ms_ = 0;      // next renewal (or attempt)
  int64_t no_lease_until_ms_ = 0;  // after a failed start as coordinator: leaves the lease to others
  int64_t next_look_ms_ = 0;       // next look at the store (a follower) or the ledger count (coordinator)
  std::string files_dir_;          // where this server writes model files
  std::string files_prefix_;       // files_dir_ relative to state_dir ("" = state_dir itself)
  std::string model_dir_;          // the current model's files
  int64_t drain_until_ms_ = 0;     // drain_until_unix_ms()'s own horizon, once finished
  int64_t last_checkin_ms_ = 0;
  std::set<std::string> drained_;  // devices told "draining"
  // Devices whose masked vectors the last closed secure round acked and that have not heard its
  // outcome (secure_outcome) since.
  std::set<std::string> awaiting_outcome_;

  std::optional<SecureRound> secure_;  // the open round's, when secure aggregation is on
  EncodedInfo secure_like_{};          // the encoding whose integer codes its devices mask
  bool secure_mean_ready_ = false;     // mean_ holds the unmasked mean of the closing round
  secagg::PrivacyAccountant accountant_;

  // Server-side evaluation (optional).
  std::shared_ptr<ModelEvaluator> evaluator_;  // null: no evaluation
};

}  // namespace edgefl::server

#endif  // EDGEFL_SERVER_ROUNDS_H_
