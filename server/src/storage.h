// storage.h: the server's durable state (rounds, the ledger of accepted updates, model versions,
// settings) behind a small interface, so that a networked database could replace SQLite
// (sqlite_storage.h) without touching the round logic.
//
// The promise the server makes to devices, "an acknowledged update is never lost", rests on one
// call: record_update() returns kOk only after its transaction has committed AND been synced to
// stable storage. Everything else is bookkeeping around it.
//
// Conventions (every implementation):
//  * No exception escapes; every method returns a Status. kOk: done. kInvalidArgument: misuse
//    (a null output, a value out of range, a round in the wrong state); nothing changed.
//    kIoError: the store failed (I/O, locking, corruption); *error says why; for writes,
//    nothing changed (the transaction rolled back).
//  * `error` may be null; when not, it receives a message on failure and is left alone on kOk.
//  * Outputs are written only on kOk.
//  * Unsigned ids, versions and sizes must be < 2^63 (they are stored as signed 64-bit integers);
//    larger values are kInvalidArgument.
#ifndef EDGEFL_SERVER_STORAGE_H_
#define EDGEFL_SERVER_STORAGE_H_

#include <stdint.h>

#include <array>
#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "edgefl/status.h"

namespace edgefl {
namespace server {

using Digest = std::array<uint8_t, 32>;    // SHA-256
using UploadId = std::array<uint8_t, 16>;  // chosen by the device, the same on every retry of one upload

enum class RoundState : uint8_t { kOpen = 1, kCommitted = 2, kAbandoned = 3 };

// "open", "committed", "abandoned"; "unknown" for any other value. Never null.
const char* round_state_name(RoundState state);

// True for a model path record_model() accepts: relative to the state directory, not empty, not
// absolute, no "." or ".." component, no NUL, no empty component.
bool valid_relative_path(const std::string& path);

struct RoundRecord {
  uint64_t round_id = 0;            // > 0
  std::vector<uint8_t> nonce;       // 16 or 32 bytes
  uint64_t base_model_version = 0;  // the model version clients train from
  RoundState state = RoundState::kOpen;
  int64_t opened_unix_ms = 0, deadline_unix_ms = 0, closed_unix_ms = 0;  // closed = 0 while open
  uint64_t result_model_version = 0;  // committed: the version it produced; else 0
  uint32_t accepted_updates = 0;      // filled on close (ledger count)
  // Sealed (seal_round) while open: its close has begun, the ledger takes nothing more. Only the
  // stores that several servers share keep it (SQLite's rounds are never sealed).
  bool sealed = false;
};

struct UpdateRecord {
  uint64_t round_id = 0;
  std::string device_id;  // non-empty
  UploadId upload_id{};
  uint32_t sample_count = 0;
  Digest digest{};
  uint64_t payload_bytes = 0;  // == payload.size() when recorded
  int64_t accepted_unix_ms = 0;
  uint64_t sequence = 0;         // acceptance order, assigned by record_update
  std::vector<uint8_t> payload;  // the encoded update; only filled where documented
  // Stores shared by several servers: the server process that acknowledged the update (its lease
  // holder name), whose partial sum counts it. "" otherwise; SQLite does not keep it.
  std::string aggregator;
};

// One aggregator's part of a round's ledger (stores shared by several servers).
struct LedgerShare {
  std::string aggregator;  // UpdateRecord::aggregator of the rows
  uint64_t updates = 0;    // rows
  uint64_t payload_bytes = 0;
  uint64_t samples = 0;       // the rows' sample counts, summed
  uint64_t sequence_sum = 0;  // the rows' sequences, summed modulo 2^62 (kSequenceSumMask)
};
constexpr uint64_t kSequenceSumMask = (uint64_t{1} << 62) - 1;

// The sum of the updates one aggregator acknowledged in a sealed round, written by that
// aggregator so that the coordinator merges sums instead of decoding every update.
struct PartialSum {
  uint64_t round_id = 0;
  std::string aggregator;  // non-empty: the UpdateRecord::aggregator of the rows it sums
  // Which rows it sums: how many, and their sequences summed modulo 2^62. The coordinator uses a
  // sum only when both equal the aggregator's LedgerShare (and its weight the share's samples).
  uint64_t updates = 0;
  uint64_t sequence_sum = 0;
  std::vector<uint8_t> state;  // StreamingAggregator::export_state(): 1 .. kMaxPartialSumBytes
};
// PostgreSQL's limit for one value (1 GB), less room for the message around it.
constexpr size_t kMaxPartialSumBytes = (size_t{1} << 30) - (size_t{1} << 20);

struct ModelRecord {
  uint64_t version = 0;   // > 0; versions only grow
  uint64_t round_id = 0;  // round 0: the initial model (or one loaded by the operator)
  std::string path;       // file name relative to the state directory
  Digest digest{};        // SHA-256 of the file
  uint64_t bytes = 0;
  int64_t created_unix_ms = 0;
};

// A step of an open round's protocol that must survive a restart (secure aggregation: a device's
// index, its keys, its shares, the end of a phase), replayed in append order by start().
struct RoundEvent {
  uint64_t round_id = 0;
  std::string device_id;  // "" for an event of the round itself
  uint32_t kind = 0;      // the caller's: 1 .. 255
  int64_t unix_ms = 0;
  std::vector<uint8_t> payload;  // 0 .. kMaxRoundEventBytes
  uint64_t sequence = 0;         // append order, assigned by append_round_event
};
constexpr size_t kMaxRoundEventBytes = size_t{1} << 20;

enum class InsertResult : uint8_t { kInserted = 1, kDuplicate = 2 };

// The coordinator lease of the servers that share one store (several aggregators, one round):
// the one server that opens, seals and closes rounds and records models. Times are the store's
// clock (PostgreSQL's clock_timestamp()), so the servers' clocks need not agree.
struct Lease {
  std::string holder;           // "" while nobody ever took it
  uint64_t epoch = 0;           // grows by one each time the lease changes hands (0: never taken)
  int64_t expires_unix_ms = 0;  // the holder's lease ends then unless renewed
  bool held = false;            // the caller holds it (after its acquire_lease call)
};

// Helpers of every implementation: whether an unsigned value fits the stores' signed 64-bit
// columns, and a kInvalidArgument with its message in `*error` (when not null).
inline bool fits_i64(uint64_t v) {
  return v <= uint64_t(INT64_MAX);
}
inline Status invalid_argument(std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
  return Status::kInvalidArgument;
}

// The argument checks every implementation makes before touching its store (kInvalidArgument
// with the message, or kOk): create_round's record, close_round's arguments, record_update's
// update and result pointer, record_model's record.
Status check_new_round(const RoundRecord& round, std::string* error);
Status check_close(uint64_t round_id, RoundState state, uint64_t result_model_version, std::string* error);
Status check_new_update(const UpdateRecord& update, const InsertResult* result, std::string* error);
Status check_new_model(const ModelRecord& model, std::string* error);
Status check_new_event(const RoundEvent& event, std::string* error);
Status check_new_partial_sum(const PartialSum& sum, std::string* error);

// What every implementation does around its calls: one mutex serialises them, and a call made
// from inside one of the object's own iteration callbacks (for_each_update,
// for_each_round_event), on the thread that holds the lock already, is refused.
class StorageGate {
 public:
  // Takes the lock into *lock; kInvalidArgument (with the message) for a call from inside an
  // iteration callback on this thread.
  Status enter(std::unique_lock<std::mutex>* lock, std::string* error);

  // Marks the calling thread as iterating (its callbacks may not call in) while alive. The
  // caller holds the lock.
  class Iteration {
   public:
    explicit Iteration(StorageGate* gate) : gate_(gate) {
      gate_->iterating_.store(std::this_thread::get_id());
    }
    ~Iteration() { gate_->iterating_.store(std::thread::id()); }
    Iteration(const Iteration&) = delete;
    Iteration& operator=(const Iteration&) = delete;

   private:
    StorageGate* gate_;
  };

 private:
  std::mutex mutex_;
  std::atomic<std::thread::id> iterating_{};
};

class Storage {
 public:
  virtual ~Storage() = default;

  // Stores a new open round. `round.state` must be kOpen and closed_unix_ms,
  // result_model_version and accepted_updates 0. Fails (kInvalidArgument) if the id exists or
  // another round is open.
  virtual Status create_round(const RoundRecord& round, std::string* error) = 0;

  // Marks the open round `round_id` committed or abandoned, stores the result version (committed:
  // a version recorded with record_model for this round, which must happen first; abandoned: 0)
  // and the ledger count, and, in the same transaction, drops the round's events and partial
  // sums. Payloads: a commit drops those of this round and of every round after the previous
  // committed one (the rounds abandoned in between, whose updates the next round may have
  // counted); an abandonment keeps them. The ledger rows with their digests stay.
  // kInvalidArgument if the round is not open.
  virtual Status close_round(uint64_t round_id, RoundState state, uint64_t result_model_version,
                             int64_t closed_unix_ms, std::string* error) = 0;

  // The single open round, if any (*out = nullopt otherwise).
  virtual Status open_round(std::optional<RoundRecord>* out, std::string* error) = 0;
  virtual Status get_round(uint64_t round_id, std::optional<RoundRecord>* out, std::string* error) = 0;
  // The highest round id ever created; 0 if none.
  virtual Status last_round_id(uint64_t* out, std::string* error) = 0;

  // Durable (committed, fsync'd) on kOk. (round, device, upload id) already present ->
  // *result = kDuplicate, nothing changes. A second, different upload id from a device that
  // already has an update in that round -> also kDuplicate (one update per device per round;
  // find_update tells the two apart). Only for an open round (kInvalidArgument otherwise).
  // `update.sequence` is ignored; payload.size() must equal payload_bytes. Fills nothing back
  // except *result and *sequence (if non-null): the new row's sequence, or for kDuplicate the
  // sequence of the update already stored.
  virtual Status record_update(const UpdateRecord& update, InsertResult* result, uint64_t* sequence,
                               std::string* error) = 0;

  // The device's update in the round, without payload; nullopt if none.
  virtual Status find_update(uint64_t round_id, const std::string& device_id,
                             std::optional<UpdateRecord>* out, std::string* error) = 0;
  // Ledger rows of the round (also after it closed).
  virtual Status count_updates(uint64_t round_id, uint64_t* out, std::string* error) = 0;

  // In acceptance order, with payloads (open round; after close the payloads are empty and
  // payload_bytes still tells their size) -- used to rebuild the aggregate after a restart.
  // Stops at fn's first non-kOk and returns it. fn must not call back into this Storage
  // (kInvalidArgument if it does).
  virtual Status for_each_update(uint64_t round_id, const std::function<Status(const UpdateRecord&)>& fn,
                                 std::string* error) = 0;

  // Appends an event of the open round `event.round_id`: durable (committed, fsync'd) on kOk, in
  // the same order for_each_round_event() gives back. kInvalidArgument for a round that is not
  // open, a kind outside 1..255 or a payload above kMaxRoundEventBytes. close_round() deletes the
  // round's events in its transaction.
  virtual Status append_round_event(const RoundEvent& event, std::string* error) = 0;
  // The round's events in append order (sequence filled). As for_each_update: stops at fn's first
  // non-kOk, and fn must not call back into this Storage.
  virtual Status for_each_round_event(uint64_t round_id, const std::function<Status(const RoundEvent&)>& fn,
                                      std::string* error) = 0;

  // Records a model file written (and synced) before. version > every recorded version;
  // round_id 0 or the open round; path relative (no leading '/', no ".." component).
  virtual Status record_model(const ModelRecord& model, std::string* error) = 0;
  // The highest version; nullopt if none.
  virtual Status latest_model(std::optional<ModelRecord>* out, std::string* error) = 0;

  // Small key/value store for server settings that must survive restarts (e.g. the model spec,
  // the optimizer state file name). Keys are non-empty. put_setting is durable on kOk.
  virtual Status put_setting(const std::string& key, const std::string& value, std::string* error) = 0;
  virtual Status get_setting(const std::string& key, std::optional<std::string>* value,
                             std::string* error) = 0;

  // --- Stores shared by several servers (PostgreSQL; the memory store for tests). The others
  // --- refuse these calls with kInvalidArgument: their state belongs to one server.

  // Takes the coordinator lease for `holder` (non-empty) when it is free, expired or already
  // `holder`'s, until ttl_ms (> 0) from now by the store's clock (`now_ms` for a store without
  // one); otherwise changes nothing. *out: the lease after the call (out->held: `holder` has it).
  // Taking it from another holder increments the epoch (the same holder, even after a lapse,
  // keeps it). Bounded: while the coordinator's fenced write holds the lease (PostgreSQL: its row
  // lock), the call waits at most 1 s, then fails with kIoError and changes nothing.
  virtual Status acquire_lease(const std::string& holder, uint32_t ttl_ms, int64_t now_ms, Lease* out,
                               std::string* error);
  // From now on, create_round, seal_round, close_round and record_model take effect only while
  // `holder` holds the lease at `epoch` (nobody took it since), checked inside their transaction; otherwise
  // they change nothing and return kProtocolError ("not the coordinator"). An empty holder
  // removes the fence.
  virtual Status set_fence(const std::string& holder, uint64_t epoch, std::string* error);
  // Gives the lease up if `holder` has it (it expires now; the next taker starts a new epoch);
  // otherwise changes nothing. For a holder that cannot coordinate, so that another one can.
  virtual Status release_lease(const std::string& holder, std::string* error);
  // Seals the open round `round_id`: from its commit on, record_update refuses the round
  // (kInvalidArgument) while every acknowledged update stays in its ledger, so the closer reads a
  // ledger that can no longer grow. Sealing a sealed round is kOk. kInvalidArgument if the round
  // is not open.
  virtual Status seal_round(uint64_t round_id, std::string* error);
  // The settings whose keys start with `prefix`, in key order (*out replaced on kOk).
  virtual Status list_settings(const std::string& prefix,
                               std::vector<std::pair<std::string, std::string>>* out, std::string* error);

  // The round's ledger by aggregator, ordered by aggregator (*out replaced on kOk; rows recorded
  // without an aggregator are the share of "").
  virtual Status ledger_shares(uint64_t round_id, std::vector<LedgerShare>* out, std::string* error);
  // As for_each_update, for the rows of one aggregator only.
  virtual Status for_each_update_of(uint64_t round_id, const std::string& aggregator,
                                    const std::function<Status(const UpdateRecord&)>& fn, std::string* error);
  // Stores `sum` durably, replacing the one of its (round, aggregator). Only for a sealed, open
  // round (kInvalidArgument otherwise; nothing changes): the rows it sums can no longer grow.
  // Not fenced: every aggregator writes its own.
  virtual Status put_partial_sum(const PartialSum& sum, std::string* error);
  // The round's partial sums, ordered by aggregator; with_state false leaves PartialSum::state
  // empty (nothing of it is read). As for_each_update: stops at fn's first non-kOk, and fn must
  // not call back into this Storage.
  virtual Status for_each_partial_sum(uint64_t round_id, bool with_state,
                                      const std::function<Status(const PartialSum&)>& fn, std::string* error);
};

}  // namespace server
}  // namespace edgefl

#endif  // EDGEFL_SERVER_STORAGE_H_
