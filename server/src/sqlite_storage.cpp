// sqlite_storage.cpp: Storage over one SQLite database (WAL, synchronous=FULL).
#include "sqlite_storage.h"

#include <sqlite3.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <array>
#include <mutex>
#include <utility>

namespace edgefl {
namespace server {
namespace {

constexpr int32_t kApplicationId = 0x45444C46;  // "EDLF"
constexpr int kBusyTimeoutMs = 5000;

// Schema version 1. STRICT tables (SQLite >= 3.37) reject values of the wrong type; unsigned
// values are stored as non-negative signed 64-bit integers. The partial unique index keeps at
// most one round open; UNIQUE (round_id, device_id) keeps one update per device per round (and
// so one per (round, device, upload id)). updates.sequence is an AUTOINCREMENT rowid: strictly
// increasing, never reused: the acceptance order.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE rounds (
  round_id             INTEGER PRIMARY KEY CHECK (round_id > 0),
  nonce                BLOB    NOT NULL CHECK (length(nonce) IN (16, 32)),
  base_model_version   INTEGER NOT NULL CHECK (base_model_version >= 0),
  state                INTEGER NOT NULL CHECK (state IN (1, 2, 3)),
  opened_unix_ms       INTEGER NOT NULL,
  deadline_unix_ms     INTEGER NOT NULL,
  closed_unix_ms       INTEGER NOT NULL DEFAULT 0,
  result_model_version INTEGER NOT NULL DEFAULT 0 CHECK (result_model_version >= 0),
  accepted_updates     INTEGER NOT NULL DEFAULT 0 CHECK (accepted_updates >= 0)
) STRICT;
CREATE UNIQUE INDEX rounds_single_open ON rounds (state) WHERE state = 1;
CREATE TABLE updates (
  sequence         INTEGER PRIMARY KEY AUTOINCREMENT,
  round_id         INTEGER NOT NULL REFERENCES rounds (round_id),
  device_id        TEXT    NOT NULL CHECK (length(device_id) > 0),
  upload_id        BLOB    NOT NULL CHECK (length(upload_id) = 16),
  sample_count     INTEGER NOT NULL CHECK (sample_count >= 0),
  digest           BLOB    NOT NULL CHECK (length(digest) = 32),
  payload_bytes    INTEGER NOT NULL CHECK (payload_bytes >= 0),
  accepted_unix_ms INTEGER NOT NULL,
  payload          BLOB,  -- NULL once the round closed
  UNIQUE (round_id, device_id)
) STRICT;
CREATE INDEX updates_by_round ON updates (round_id, sequence);
CREATE TABLE models (
  version         INTEGER PRIMARY KEY CHECK (version > 0),
  round_id        INTEGER NOT NULL CHECK (round_id >= 0),
  path            TEXT    NOT NULL CHECK (length(path) > 0),
  digest          BLOB    NOT NULL CHECK (length(digest) = 32),
  bytes           INTEGER NOT NULL CHECK (bytes >= 0),
  created_unix_ms INTEGER NOT NULL
) STRICT;
CREATE TABLE settings (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
) STRICT;
)sql";

// Schema version 2 adds the events of open rounds (storage.h: RoundEvent), deleted at close.
constexpr const char* kSchemaV2 = R"sql(
CREATE TABLE round_events (
  sequence  INTEGER PRIMARY KEY AUTOINCREMENT,
  round_id  INTEGER NOT NULL REFERENCES rounds (round_id),
  device_id TEXT    NOT NULL,
  kind      INTEGER NOT NULL CHECK (kind BETWEEN 1 AND 255),
  unix_ms   INTEGER NOT NULL,
  payload   BLOB    NOT NULL CHECK (length(payload) <= 1048576)
) STRICT;
CREATE INDEX round_events_by_round ON round_events (round_id, sequence);
)sql";

enum Query : int {
  kBegin,
  kCommit,
  kRollback,
  kGetRound,
  kGetOpenRound,
  kLastRoundId,
  kInsertRound,
  kCloseRound,
  kDropPayloads,
  kFindUpdate,
  kInsertUpdate,
  kCountUpdates,
  kEachUpdate,
  kModelRound,
  kLatestModel,
  kInsertModel,
  kGetSetting,
  kPutSetting,
  kInsertEvent,
  kEachEvent,
  kDropEvents,
  kQueryCount
};

#define EDGEFL_ROUND_COLUMNS                                                                       \
  "round_id, nonce, base_model_version, state, opened_unix_ms, deadline_unix_ms, closed_unix_ms, " \
  "result_model_version, accepted_updates"
#define EDGEFL_UPDATE_COLUMNS \
  "sequence, round_id, device_id, upload_id, sample_count, digest, payload_bytes, accepted_unix_ms"

constexpr const char* kQuerySql[kQueryCount] = {
    /* kBegin */ "BEGIN IMMEDIATE",
    /* kCommit */ "COMMIT",
    /* kRollback */ "ROLLBACK",
    /* kGetRound */ "SELECT " EDGEFL_ROUND_COLUMNS " FROM rounds WHERE round_id = ?1",
    /* kGetOpenRound */
    "SELECT " EDGEFL_ROUND_COLUMNS " FROM rounds WHERE state = 1 ORDER BY round_id LIMIT 1",
    /* kLastRoundId */ "SELECT coalesce(max(round_id), 0) FROM rounds",
    /* kInsertRound */
    "INSERT INTO rounds (round_id, nonce, base_model_version, state, opened_unix_ms, deadline_unix_ms) "
    "VALUES (?1, ?2, ?3, 1, ?4, ?5)",
    /* kCloseRound */
    "UPDATE rounds SET state = ?2, result_model_version = ?3, closed_unix_ms = ?4, "
    "accepted_updates = (SELECT count(*) FROM updates WHERE round_id = ?1) WHERE round_id = ?1 AND state = 1",
    /* kDropPayloads */
    "UPDATE updates SET payload = NULL WHERE round_id <= ?1 AND payload IS NOT NULL AND round_id > "
    "(SELECT coalesce(max(round_id), 0) FROM rounds WHERE state = 2 AND round_id < ?1)",
    /* kFindUpdate */ "SELECT " EDGEFL_UPDATE_COLUMNS " FROM updates WHERE round_id = ?1 AND device_id = ?2",
    /* kInsertUpdate */
    "INSERT INTO updates (round_id, device_id, upload_id, sample_count, digest, payload_bytes, "
    "accepted_unix_ms, payload) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    /* kCountUpdates */ "SELECT count(*) FROM updates WHERE round_id = ?1",
    /* kEachUpdate */
    "SELECT " EDGEFL_UPDATE_COLUMNS ", payload FROM updates WHERE round_id = ?1 ORDER BY sequence",
    /* kModelRound */ "SELECT round_id FROM models WHERE version = ?1",
    /* kLatestModel */
    "SELECT version, round_id, path, digest, bytes, created_unix_ms FROM models "
    "ORDER BY version DESC LIMIT 1",
    /* kInsertModel */
    "INSERT INTO models (version, round_id, path, digest, bytes, created_unix_ms) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    /* kGetSetting */ "SELECT value FROM settings WHERE key = ?1",
    /* kPutSetting */
    "INSERT INTO settings (key, value) VALUES (?1, ?2) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    /* kInsertEvent */
    "INSERT INTO round_events (round_id, device_id, kind, unix_ms, payload) VALUES (?1, ?2, ?3, ?4, ?5)",
    /* kEachEvent */
    "SELECT sequence, device_id, kind, unix_ms, payload FROM round_events WHERE round_id = ?1 ORDER BY "
    "sequence",
    /* kDropEvents */ "DELETE FROM round_events WHERE round_id = ?1",
};

#undef EDGEFL_ROUND_COLUMNS
#undef EDGEFL_UPDATE_COLUMNS

// Binds parameters 1, 2, ... in order; remembers the first failure.
class Binder {
 public:
  explicit Binder(sqlite3_stmt* s) : s_(s) {}
  Binder& i64(int64_t v) {
    if (rc_ == SQLITE_OK) rc_ = sqlite3_bind_int64(s_, ++i_, v);
    return *this;
  }
  Binder& u64(uint64_t v) { return i64(int64_t(v)); }  // callers checked fits_i64
  // A zero-length blob, never NULL (sqlite3_bind_blob binds NULL for a null pointer).
  Binder& blob(const void* p, size_t n) {
    static const uint8_t kEmpty = 0;
    if (rc_ == SQLITE_OK) rc_ = sqlite3_bind_blob64(s_, ++i_, n == 0 ? &kEmpty : p, n, SQLITE_STATIC);
    return *this;
  }
  Binder& text(const std::string& t) {
    if (rc_ == SQLITE_OK) rc_ = sqlite3_bind_text64(s_, ++i_, t.data(), t.size(), SQLITE_STATIC, SQLITE_UTF8);
    return *this;
  }
  int rc() const { return rc_; }

 private:
  sqlite3_stmt* s_;
  int rc_ = SQLITE_OK;
  int i_ = 0;
};

// Resets a cached statement (and drops its bindings, which point into the caller's data) when
// the scope ends.
class StatementScope {
 public:
  explicit StatementScope(sqlite3_stmt* s) : s_(s) {}
  ~StatementScope() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
  StatementScope(const StatementScope&) = delete;
  StatementScope& operator=(const StatementScope&) = delete;

 private:
  sqlite3_stmt* s_;
};

// Column readers for rows this file wrote; a value outside what the schema allows means the
// file was changed behind our back.
bool column_u64(sqlite3_stmt* s, int i, uint64_t* out) {
  if (sqlite3_column_type(s, i) != SQLITE_INTEGER) return false;
  const int64_t v = sqlite3_column_int64(s, i);
  if (v < 0) return false;
  *out = uint64_t(v);
  return true;
}

bool column_i64(sqlite3_stmt* s, int i, int64_t* out) {
  if (sqlite3_column_type(s, i) != SQLITE_INTEGER) return false;
  *out = sqlite3_column_int64(s, i);
  return true;
}

bool column_u32(sqlite3_stmt* s, int i, uint32_t* out) {
  uint64_t v = 0;
  if (!column_u64(s, i, &v) || v > UINT32_MAX) return false;
  *out = uint32_t(v);
  return true;
}

template <size_t N>
bool column_array(sqlite3_stmt* s, int i, std::array<uint8_t, N>* out) {
  if (sqlite3_column_type(s, i) != SQLITE_BLOB) return false;
  const void* p = sqlite3_column_blob(s, i);
  if (p == nullptr || size_t(sqlite3_column_bytes(s, i)) != N) return false;
  memcpy(out->data(), p, N);
  return true;
}

bool column_bytes(sqlite3_stmt* s, int i, std::vector<uint8_t>* out) {
  const int type = sqlite3_column_type(s, i);
  if (type == SQLITE_NULL) {
    out->clear();
    return true;
  }
  if (type != SQLITE_BLOB) return false;
  const uint8_t* p = static_cast<const uint8_t*>(sqlite3_column_blob(s, i));
  const size_t n = size_t(sqlite3_column_bytes(s, i));
  if (p == nullptr && n != 0) return false;  // out of memory
  out->assign(p, p + n);
  return true;
}

bool column_text(sqlite3_stmt* s, int i, std::string* out) {
  if (sqlite3_column_type(s, i) != SQLITE_TEXT) return false;
  const char* p = reinterpret_cast<const char*>(sqlite3_column_text(s, i));
  const size_t n = size_t(sqlite3_column_bytes(s, i));
  if (p == nullptr && n != 0) return false;
  out->assign(p == nullptr ? "" : p, n);
  return true;
}

bool read_round(sqlite3_stmt* s, RoundRecord* r) {
  uint64_t state = 0;
  if (!column_u64(s, 0, &r->round_id) || !column_bytes(s, 1, &r->nonce) ||
      !column_u64(s, 2, &r->base_model_version) || !column_u64(s, 3, &state) ||
      !column_i64(s, 4, &r->opened_unix_ms) || !column_i64(s, 5, &r->deadline_unix_ms) ||
      !column_i64(s, 6, &r->closed_unix_ms) || !column_u64(s, 7, &r->result_model_version) ||
      !column_u32(s, 8, &r->accepted_updates)) {
    return false;
  }
  if (state < 1 || state > 3 || (r->nonce.size() != 16 && r->nonce.size() != 32)) return false;
  r->state = RoundState(state);
  return true;
}

// The columns of EDGEFL_UPDATE_COLUMNS, then (with_payload) the payload.
bool read_update(sqlite3_stmt* s, bool with_payload, UpdateRecord* u) {
  if (!column_u64(s, 0, &u->sequence) || !column_u64(s, 1, &u->round_id) ||
      !column_text(s, 2, &u->device_id) || !column_array(s, 3, &u->upload_id) ||
      !column_u32(s, 4, &u->sample_count) || !column_array(s, 5, &u->digest) ||
      !column_u64(s, 6, &u->payload_bytes) || !column_i64(s, 7, &u->accepted_unix_ms)) {
    return false;
  }
  if (!with_payload) {
    u->payload.clear();
    return true;
  }
  return column_bytes(s, 8, &u->payload);
}

class SqliteStorage final : public Storage {
 public:
  explicit SqliteStorage(sqlite3* db) : db_(db) {}
  ~SqliteStorage() override {
    for (sqlite3_stmt* s : statements_) sqlite3_finalize(s);
    sqlite3_close_v2(db_);  // checkpoints the WAL when this is the last connection
  }
  SqliteStorage(const SqliteStorage&) = delete;
  SqliteStorage& operator=(const SqliteStorage&) = delete;

  Status init(std::string* error);

  Status create_round(const RoundRecord& round, std::string* error) override;
  Status close_round(uint64_t round_id, RoundState state, uint64_t result_model_version,
                     int64_t closed_unix_ms, std::string* error) override;
  Status open_round(std::optional<RoundRecord>* out, std::string* error) override;
  Status get_round(uint64_t round_id, std::optional<RoundRecord>* out, std::string* error) override;
  Status last_round_id(uint64_t* out, std::string* error) override;
  Status record_update(const UpdateRecord& update, InsertResult* result, uint64_t* sequence,
                       std::string* error) override;
  Status find_update(uint64_t round_id, const std::string& device_id, std::optional<UpdateRecord>* out,
                     std::string* error) override;
  Status count_updates(uint64_t round_id, uint64_t* out, std::string* error) override;
  Status for_each_update(uint64_t round_id, const std::function<Status(const UpdateRecord&)>& fn,
                         std::string* error) override;
  Status append_round_event(const RoundEvent& event, std::string* error) override;
  Status for_each_round_event(uint64_t round_id, const std::function<Status(const RoundEvent&)>& fn,
                              std::string* error) override;
  Status record_model(const ModelRecord& model, std::string* error) override;
  Status latest_model(std::optional<ModelRecord>* out, std::string* error) override;
  Status put_setting(const std::string& key, const std::string& value, std::string* error) override;
  Status get_setting(const std::string& key, std::optional<std::string>* value, std::string* error) override;

 private:
  // Ends a write transaction: rolls back unless commit() succeeded.
  class Transaction {
   public:
    explicit Transaction(SqliteStorage* s) : s_(s) {}
    ~Transaction() {
      if (active_ && sqlite3_get_autocommit(s_->db_) == 0) {
        std::string ignored;
        sqlite3_stmt* rollback = nullptr;
        if (s_->statement(kRollback, &rollback, &ignored) == Status::kOk) {
          StatementScope scope(rollback);
          (void)sqlite3_step(rollback);
        }
      }
    }
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;
    Status begin(std::string* error) {
      EDGEFL_RETURN_IF_ERROR(s_->run(kBegin, "BEGIN IMMEDIATE", error));
      active_ = true;
      return Status::kOk;
    }
    // With synchronous=FULL in WAL mode, COMMIT returns after the WAL is synced.
    Status commit(std::string* error) {
      EDGEFL_RETURN_IF_ERROR(s_->run(kCommit, "COMMIT", error));
      active_ = false;
      return Status::kOk;
    }

   private:
    SqliteStorage* s_;
    bool active_ = false;
  };

  Status io_error(const char* what, std::string* error) const {
    if (error != nullptr) {
      *error = std::string("sqlite: ") + what + ": " + sqlite3_errmsg(db_) + " (code " +
               std::to_string(sqlite3_extended_errcode(db_)) + ")";
    }
    return Status::kIoError;
  }
  // Steps the SELECT `q` of one round (?1 = round_id), with the storage locked and marked as
  // iterating (a callback that calls back in is refused), handing each row to `row` until one
  // returns non-kOk. `what` names the rows in an I/O error.
  Status each_row(Query q, uint64_t round_id, const char* what,
                  const std::function<Status(sqlite3_stmt*)>& row, std::string* error) {
    std::unique_lock<std::mutex> lock;
    EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
    sqlite3_stmt* s = nullptr;
    EDGEFL_RETURN_IF_ERROR(statement(q, &s, error));
    StatementScope scope(s);
    if (sqlite3_bind_int64(s, 1, int64_t(round_id)) != SQLITE_OK) return io_error("bind", error);
    StorageGate::Iteration iteration(&gate_);
    for (;;) {
      const int rc = sqlite3_step(s);
      if (rc == SQLITE_DONE) return Status::kOk;
      if (rc != SQLITE_ROW) return io_error(what, error);
      const Status st = row(s);
      if (st != Status::kOk) return st;
    }
  }

  Status corrupt_row(const char* table, std::string* error) const {
    if (error != nullptr)
      *error = std::string("sqlite: a row of table ") + table + " holds values this build never writes";
    return Status::kIoError;
  }

  Status statement(Query q, sqlite3_stmt** out, std::string* error) {
    if (statements_[q] == nullptr) {
      if (sqlite3_prepare_v3(db_, kQuerySql[q], -1, SQLITE_PREPARE_PERSISTENT, &statements_[q], nullptr) !=
          SQLITE_OK) {
        statements_[q] = nullptr;
        return io_error("prepare", error);
      }
    }
    *out = statements_[q];
    return Status::kOk;
  }

  // Runs a cached statement without parameters that returns no row.
  Status run(Query q, const char* what, std::string* error) {
    sqlite3_stmt* s = nullptr;
    EDGEFL_RETURN_IF_ERROR(statement(q, &s, error));
    StatementScope scope(s);
    if (sqlite3_step(s) != SQLITE_DONE) return io_error(what, error);
    return Status::kOk;
  }

  // One-off statement (set-up only): runs `sql`; *first (if non-null) gets the first row's
  // first column as text ("" if no row).
  Status exec_once(const char* sql, std::string* first, std::string* error) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db_, sql, -1, &s, nullptr) != SQLITE_OK) return io_error(sql, error);
    std::string value;
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
      const unsigned char* t = sqlite3_column_text(s, 0);
      if (t != nullptr) value.assign(reinterpret_cast<const char*>(t), size_t(sqlite3_column_bytes(s, 0)));
      while (rc == SQLITE_ROW) rc = sqlite3_step(s);
    }
    if (rc != SQLITE_DONE) {
      const Status st = io_error(sql, error);
      sqlite3_finalize(s);
      return st;
    }
    sqlite3_finalize(s);
    if (first != nullptr) *first = std::move(value);
    return Status::kOk;
  }

  Status get_round_locked(Query q, uint64_t round_id, std::optional<RoundRecord>* out, std::string* error);

  sqlite3* db_;
  std::array<sqlite3_stmt*, kQueryCount> statements_{};
  StorageGate gate_;  // serialises calls; an iteration holds the lock and a cached statement
};

Status SqliteStorage::init(std::string* error) {
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, kBusyTimeoutMs);
  // Defensive: no writes to the schema or shadow tables through SQL, no journal-mode tricks.
  (void)sqlite3_db_config(db_, SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);

  // Read the header first (this is the first access to the file: a file that is not SQLite fails
  // here), and refuse another application's database before changing anything in it.
  std::string text;
  EDGEFL_RETURN_IF_ERROR(exec_once("PRAGMA application_id", &text, error));
  const long long app_id = atoll(text.c_str());
  EDGEFL_RETURN_IF_ERROR(exec_once("PRAGMA user_version", &text, error));
  const long long version = atoll(text.c_str());
  EDGEFL_RETURN_IF_ERROR(exec_once("SELECT count(*) FROM sqlite_schema", &text, error));
  const long long objects = atoll(text.c_str());
  const bool empty = app_id == 0 && version == 0 && objects == 0;
  if (!empty && app_id != kApplicationId) {
    if (error != nullptr) {
      *error = "sqlite: not an edgefl state database (application_id " + std::to_string(app_id) + ", " +
               std::to_string(objects) + " schema objects)";
    }
    return Status::kIoError;
  }
  if (version > kSqliteSchemaVersion) {
    if (error != nullptr) {
      *error = "sqlite: schema version " + std::to_string(version) + " is newer than this build's (" +
               std::to_string(kSqliteSchemaVersion) + ")";
    }
    return Status::kUnsupportedVersion;
  }

  EDGEFL_RETURN_IF_ERROR(exec_once("PRAGMA journal_mode=WAL", &text, error));
  if (text != "wal") {
    if (error != nullptr) *error = "sqlite: journal_mode=WAL did not take (the mode is \"" + text + "\")";
    return Status::kIoError;
  }
  EDGEFL_RETURN_IF_ERROR(exec_once("PRAGMA synchronous=FULL", nullptr, error));
  EDGEFL_RETURN_IF_ERROR(exec_once("PRAGMA synchronous", &text, error));
  if (text != "2") {
    if (error != nullptr) *error = "sqlite: synchronous=FULL did not take (" + text + ")";
    return Status::kIoError;
  }
  EDGEFL_RETURN_IF_ERROR(exec_once("PRAGMA foreign_keys=ON", nullptr, error));
  EDGEFL_RETURN_IF_ERROR(exec_once("PRAGMA foreign_keys", &text, error));
  if (text != "1") {
    if (error != nullptr) *error = "sqlite: foreign_keys=ON did not take";
    return Status::kIoError;
  }
  (void)exec_once("PRAGMA trusted_schema=OFF", nullptr, nullptr);

  // Create or migrate the schema under the write lock (another process may be doing the same).
  Transaction txn(this);
  EDGEFL_RETURN_IF_ERROR(txn.begin(error));
  EDGEFL_RETURN_IF_ERROR(exec_once("PRAGMA user_version", &text, error));
  const long long locked_version = atoll(text.c_str());
  if (locked_version == 0) {
    char* message = nullptr;
    if (sqlite3_exec(db_, kSchemaV1, nullptr, nullptr, &message) != SQLITE_OK) {
      if (error != nullptr) *error = std::string("sqlite: creating the schema: ") + (message ? message : "?");
      sqlite3_free(message);
      return Status::kIoError;
    }
    EDGEFL_RETURN_IF_ERROR(exec_once("PRAGMA application_id=1162103878", nullptr, error));  // kApplicationId
  } else if (locked_version > kSqliteSchemaVersion) {
    if (error != nullptr) *error = "sqlite: unexpected schema version " + std::to_string(locked_version);
    return Status::kUnsupportedVersion;
  }
  if (locked_version < 2) {  // a new database, or one made by a build of schema version 1
    char* message = nullptr;
    if (sqlite3_exec(db_, kSchemaV2, nullptr, nullptr, &message) != SQLITE_OK) {
      if (error != nullptr)
        *error = std::string("sqlite: migrating to schema 2: ") + (message ? message : "?");
      sqlite3_free(message);
      return Status::kIoError;
    }
    EDGEFL_RETURN_IF_ERROR(exec_once("PRAGMA user_version=2", nullptr, error));
  }
  return txn.commit(error);
}

static_assert(kApplicationId == 1162103878, "the PRAGMA above spells kApplicationId in decimal");

Status SqliteStorage::create_round(const RoundRecord& round, std::string* error) {
  EDGEFL_RETURN_IF_ERROR(check_new_round(round, error));
  std::unique_lock<std::mutex> lock;
  EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
  Transaction txn(this);
  EDGEFL_RETURN_IF_ERROR(txn.begin(error));
  std::optional<RoundRecord> existing;
  EDGEFL_RETURN_IF_ERROR(get_round_locked(kGetRound, round.round_id, &existing, error));
  if (existing)
    return invalid_argument(error, "create_round: round " + std::to_string(round.round_id) + " exists");
  EDGEFL_RETURN_IF_ERROR(get_round_locked(kGetOpenRound, 0, &existing, error));
  if (existing)
    return invalid_argument(error,
                            "create_round: round " + std::to_string(existing->round_id) + " is still open");
  sqlite3_stmt* s = nullptr;
  EDGEFL_RETURN_IF_ERROR(statement(kInsertRound, &s, error));
  {
    StatementScope scope(s);
    Binder b(s);
    b.u64(round.round_id)
        .blob(round.nonce.data(), round.nonce.size())
        .u64(round.base_model_version)
        .i64(round.opened_unix_ms)
        .i64(round.deadline_unix_ms);
    if (b.rc() != SQLITE_OK || sqlite3_step(s) != SQLITE_DONE) return io_error("insert round", error);
  }
  return txn.commit(error);
}

Status SqliteStorage::close_round(uint64_t round_id, RoundState state, uint64_t result_model_version,
                                  int64_t closed_unix_ms, std::string* error) {
  EDGEFL_RETURN_IF_ERROR(check_close(round_id, state, result_model_version, error));
  std::unique_lock<std::mutex> lock;
  EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
  Transaction txn(this);
  EDGEFL_RETURN_IF_ERROR(txn.begin(error));
  std::optional<RoundRecord> round;
  EDGEFL_RETURN_IF_ERROR(get_round_locked(kGetRound, round_id, &round, error));
  if (!round) return invalid_argument(error, "close_round: no round " + std::to_string(round_id));
  if (round->state != RoundState::kOpen) {
    return invalid_argument(
        error, "close_round: round " + std::to_string(round_id) + " is " + round_state_name(round->state));
  }
  sqlite3_stmt* s = nullptr;
  if (state == RoundState::kCommitted) {
    EDGEFL_RETURN_IF_ERROR(statement(kModelRound, &s, error));
    StatementScope scope(s);
    if (sqlite3_bind_int64(s, 1, int64_t(result_model_version)) != SQLITE_OK) return io_error("bind", error);
    const int rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) {
      return invalid_argument(
          error, "close_round: model version " + std::to_string(result_model_version) + " is not recorded");
    }
    if (rc != SQLITE_ROW) return io_error("select model", error);
    if (sqlite3_column_int64(s, 0) != int64_t(round_id)) {
      return invalid_argument(error, "close_round: model version " + std::to_string(result_model_version) +
                                         " was recorded for another round");
    }
  }
  EDGEFL_RETURN_IF_ERROR(statement(kCloseRound, &s, error));
  {
    StatementScope scope(s);
    Binder b(s);
    b.u64(round_id).i64(int64_t(state)).u64(result_model_version).i64(closed_unix_ms);
    if (b.rc() != SQLITE_OK || sqlite3_step(s) != SQLITE_DONE) return io_error("close round", error);
    if (sqlite3_changes(db_) != 1) return io_error("close round (no row changed)", error);
  }
  if (state == RoundState::kCommitted) {
    EDGEFL_RETURN_IF_ERROR(statement(kDropPayloads, &s, error));
    StatementScope scope(s);
    if (sqlite3_bind_int64(s, 1, int64_t(round_id)) != SQLITE_OK || sqlite3_step(s) != SQLITE_DONE) {
      return io_error("drop payloads", error);
    }
  }
  EDGEFL_RETURN_IF_ERROR(statement(kDropEvents, &s, error));
  {
    StatementScope scope(s);
    if (sqlite3_bind_int64(s, 1, int64_t(round_id)) != SQLITE_OK || sqlite3_step(s) != SQLITE_DONE) {
      return io_error("drop round events", error);
    }
  }
  return txn.commit(error);
}

Status SqliteStorage::append_round_event(const RoundEvent& event, std::string* error) {
  EDGEFL_RETURN_IF_ERROR(check_new_event(event, error));
  std::unique_lock<std::mutex> lock;
  EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
  Transaction txn(this);
  EDGEFL_RETURN_IF_ERROR(txn.begin(error));
  std::optional<RoundRecord> round;
  EDGEFL_RETURN_IF_ERROR(get_round_locked(kGetRound, event.round_id, &round, error));
  if (!round || round->state != RoundState::kOpen) {
    return invalid_argument(error,
                            "append_round_event: round " + std::to_string(event.round_id) + " is not open");
  }
  sqlite3_stmt* s = nullptr;
  EDGEFL_RETURN_IF_ERROR(statement(kInsertEvent, &s, error));
  {
    StatementScope scope(s);
    Binder b(s);
    b.u64(event.round_id)
        .text(event.device_id)
        .i64(int64_t(event.kind))
        .i64(event.unix_ms)
        .blob(event.payload.data(), event.payload.size());
    if (b.rc() != SQLITE_OK || sqlite3_step(s) != SQLITE_DONE) return io_error("insert round event", error);
  }
  return txn.commit(error);  // durable from here on
}

Status SqliteStorage::for_each_round_event(uint64_t round_id,
                                           const std::function<Status(const RoundEvent&)>& fn,
                                           std::string* error) {
  if (!fn) return invalid_argument(error, "for_each_round_event: no callback");
  if (!fits_i64(round_id)) return invalid_argument(error, "for_each_round_event: round id out of range");
  RoundEvent e;
  e.round_id = round_id;
  return each_row(
      kEachEvent, round_id, "select round events",
      [&](sqlite3_stmt* s) -> Status {
        if (!column_u64(s, 0, &e.sequence) || !column_text(s, 1, &e.device_id) ||
            !column_u32(s, 2, &e.kind) || !column_i64(s, 3, &e.unix_ms) || !column_bytes(s, 4, &e.payload)) {
          return corrupt_row("round_events", error);
        }
        return fn(e);
      },
      error);
}

Status SqliteStorage::get_round_locked(Query q, uint64_t round_id, std::optional<RoundRecord>* out,
                                       std::string* error) {
  sqlite3_stmt* s = nullptr;
  EDGEFL_RETURN_IF_ERROR(statement(q, &s, error));
  StatementScope scope(s);
  if (q == kGetRound && sqlite3_bind_int64(s, 1, int64_t(round_id)) != SQLITE_OK)
    return io_error("bind", error);
  const int rc = sqlite3_step(s);
  if (rc == SQLITE_DONE) {
    out->reset();
    return Status::kOk;
  }
  if (rc != SQLITE_ROW) return io_error("select round", error);
  RoundRecord r;
  if (!read_round(s, &r)) return corrupt_row("rounds", error);
  *out = std::move(r);
  return Status::kOk;
}

Status SqliteStorage::open_round(std::optional<RoundRecord>* out, std::string* error) {
  if (out == nullptr) return invalid_argument(error, "open_round: null output");
  std::unique_lock<std::mutex> lock;
  EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
  std::optional<RoundRecord> r;
  EDGEFL_RETURN_IF_ERROR(get_round_locked(kGetOpenRound, 0, &r, error));
  *out = std::move(r);
  return Status::kOk;
}

Status SqliteStorage::get_round(uint64_t round_id, std::optional<RoundRecord>* out, std::string* error) {
  if (out == nullptr) return invalid_argument(error, "get_round: null output");
  if (!fits_i64(round_id)) return invalid_argument(error, "get_round: round id out of range");
  std::unique_lock<std::mutex> lock;
  EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
  std::optional<RoundRecord> r;
  EDGEFL_RETURN_IF_ERROR(get_round_locked(kGetRound, round_id, &r, error));
  *out = std::move(r);
  return Status::kOk;
}

Status SqliteStorage::last_round_id(uint64_t* out, std::string* error) {
  if (out == nullptr) return invalid_argument(error, "last_round_id: null output");
  std::unique_lock<std::mutex> lock;
  EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
  sqlite3_stmt* s = nullptr;
  EDGEFL_RETURN_IF_ERROR(statement(kLastRoundId, &s, error));
  StatementScope scope(s);
  if (sqlite3_step(s) != SQLITE_ROW) return io_error("select max(round_id)", error);
  uint64_t v = 0;
  if (!column_u64(s, 0, &v)) return corrupt_row("rounds", error);
  *out = v;
  return Status::kOk;
}

Status SqliteStorage::record_update(const UpdateRecord& update, InsertResult* result, uint64_t* sequence,
                                    std::string* error) {
  EDGEFL_RETURN_IF_ERROR(check_new_update(update, result, error));
  std::unique_lock<std::mutex> lock;
  EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
  Transaction txn(this);
  EDGEFL_RETURN_IF_ERROR(txn.begin(error));
  std::optional<RoundRecord> round;
  EDGEFL_RETURN_IF_ERROR(get_round_locked(kGetRound, update.round_id, &round, error));
  if (!round) return invalid_argument(error, "record_update: no round " + std::to_string(update.round_id));
  if (round->state != RoundState::kOpen) {
    return invalid_argument(error, "record_update: round " + std::to_string(update.round_id) + " is " +
                                       round_state_name(round->state));
  }
  sqlite3_stmt* s = nullptr;
  EDGEFL_RETURN_IF_ERROR(statement(kFindUpdate, &s, error));
  {
    StatementScope scope(s);
    Binder b(s);
    b.u64(update.round_id).text(update.device_id);
    if (b.rc() != SQLITE_OK) return io_error("bind", error);
    const int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
      // Same upload retried, or a second upload from this device: either way the first one stands.
      UpdateRecord existing;
      if (!read_update(s, false, &existing)) return corrupt_row("updates", error);
      *result = InsertResult::kDuplicate;
      if (sequence != nullptr) *sequence = existing.sequence;
      return Status::kOk;  // the transaction rolls back: nothing was written
    }
    if (rc != SQLITE_DONE) return io_error("select update", error);
  }
  EDGEFL_RETURN_IF_ERROR(statement(kInsertUpdate, &s, error));
  uint64_t assigned = 0;
  {
    StatementScope scope(s);
    Binder b(s);
    b.u64(update.round_id)
        .text(update.device_id)
        .blob(update.upload_id.data(), update.upload_id.size())
        .i64(int64_t(update.sample_count))
        .blob(update.digest.data(), update.digest.size())
        .u64(update.payload_bytes)
        .i64(update.accepted_unix_ms)
        .blob(update.payload.data(), update.payload.size());
    if (b.rc() != SQLITE_OK || sqlite3_step(s) != SQLITE_DONE) return io_error("insert update", error);
    const int64_t rowid = sqlite3_last_insert_rowid(db_);
    if (rowid <= 0) return io_error("insert update (no rowid)", error);
    assigned = uint64_t(rowid);
  }
  EDGEFL_RETURN_IF_ERROR(txn.commit(error));  // durable from here on
  *result = InsertResult::kInserted;
  if (sequence != nullptr) *sequence = assigned;
  return Status::kOk;
}

Status SqliteStorage::find_update(uint64_t round_id, const std::string& device_id,
                                  std::optional<UpdateRecord>* out, std::string* error) {
  if (out == nullptr) return invalid_argument(error, "find_update: null output");
  if (!fits_i64(round_id)) return invalid_argument(error, "find_update: round id out of range");
  std::unique_lock<std::mutex> lock;
  EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
  sqlite3_stmt* s = nullptr;
  EDGEFL_RETURN_IF_ERROR(statement(kFindUpdate, &s, error));
  StatementScope scope(s);
  Binder b(s);
  b.u64(round_id).text(device_id);
  if (b.rc() != SQLITE_OK) return io_error("bind", error);
  const int rc = sqlite3_step(s);
  if (rc == SQLITE_DONE) {
    out->reset();
    return Status::kOk;
  }
  if (rc != SQLITE_ROW) return io_error("select update", error);
  UpdateRecord u;
  if (!read_update(s, false, &u)) return corrupt_row("updates", error);
  *out = std::move(u);
  return Status::kOk;
}

Status SqliteStorage::count_updates(uint64_t round_id, uint64_t* out, std::string* error) {
  if (out == nullptr) return invalid_argument(error, "count_updates: null output");
  if (!fits_i64(round_id)) return invalid_argument(error, "count_updates: round id out of range");
  std::unique_lock<std::mutex> lock;
  EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
  sqlite3_stmt* s = nullptr;
  EDGEFL_RETURN_IF_ERROR(statement(kCountUpdates, &s, error));
  StatementScope scope(s);
  if (sqlite3_bind_int64(s, 1, int64_t(round_id)) != SQLITE_OK || sqlite3_step(s) != SQLITE_ROW) {
    return io_error("count updates", error);
  }
  uint64_t v = 0;
  if (!column_u64(s, 0, &v)) return corrupt_row("updates", error);
  *out = v;
  return Status::kOk;
}

Status SqliteStorage::for_each_update(uint64_t round_id, const std::function<Status(const UpdateRecord&)>& fn,
                                      std::string* error) {
  if (!fn) return invalid_argument(error, "for_each_update: no callback");
  if (!fits_i64(round_id)) return invalid_argument(error, "for_each_update: round id out of range");
  UpdateRecord u;  // reused: its payload buffer keeps its capacity from row to row
  return each_row(
      kEachUpdate, round_id, "select updates",
      [&](sqlite3_stmt* s) -> Status {
        if (!read_update(s, true, &u)) return corrupt_row("updates", error);
        return fn(u);
      },
      error);
}

Status SqliteStorage::record_model(const ModelRecord& model, std::string* error) {
  EDGEFL_RETURN_IF_ERROR(check_new_model(model, error));
  std::unique_lock<std::mutex> lock;
  EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
  Transaction txn(this);
  EDGEFL_RETURN_IF_ERROR(txn.begin(error));
  sqlite3_stmt* s = nullptr;
  EDGEFL_RETURN_IF_ERROR(statement(kLatestModel, &s, error));
  {
    StatementScope scope(s);
    const int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
      uint64_t latest = 0;
      if (!column_u64(s, 0, &latest)) return corrupt_row("models", error);
      if (model.version <= latest) {
        return invalid_argument(error, "record_model: version " + std::to_string(model.version) +
                                           " is not above " + std::to_string(latest));
      }
    } else if (rc != SQLITE_DONE) {
      return io_error("select model", error);
    }
  }
  if (model.round_id != 0) {
    std::optional<RoundRecord> round;
    EDGEFL_RETURN_IF_ERROR(get_round_locked(kGetRound, model.round_id, &round, error));
    if (!round || round->state != RoundState::kOpen) {
      return invalid_argument(error,
                              "record_model: round " + std::to_string(model.round_id) + " is not open");
    }
  }
  EDGEFL_RETURN_IF_ERROR(statement(kInsertModel, &s, error));
  {
    StatementScope scope(s);
    Binder b(s);
    b.u64(model.version)
        .u64(model.round_id)
        .text(model.path)
        .blob(model.digest.data(), model.digest.size())
        .u64(model.bytes)
        .i64(model.created_unix_ms);
    if (b.rc() != SQLITE_OK || sqlite3_step(s) != SQLITE_DONE) return io_error("insert model", error);
  }
  return txn.commit(error);
}

Status SqliteStorage::latest_model(std::optional<ModelRecord>* out, std::string* error) {
  if (out == nullptr) return invalid_argument(error, "latest_model: null output");
  std::unique_lock<std::mutex> lock;
  EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
  sqlite3_stmt* s = nullptr;
  EDGEFL_RETURN_IF_ERROR(statement(kLatestModel, &s, error));
  StatementScope scope(s);
  const int rc = sqlite3_step(s);
  if (rc == SQLITE_DONE) {
    out->reset();
    return Status::kOk;
  }
  if (rc != SQLITE_ROW) return io_error("select model", error);
  ModelRecord m;
  if (!column_u64(s, 0, &m.version) || !column_u64(s, 1, &m.round_id) || !column_text(s, 2, &m.path) ||
      !column_array(s, 3, &m.digest) || !column_u64(s, 4, &m.bytes) ||
      !column_i64(s, 5, &m.created_unix_ms)) {
    return corrupt_row("models", error);
  }
  *out = std::move(m);
  return Status::kOk;
}

Status SqliteStorage::put_setting(const std::string& key, const std::string& value, std::string* error) {
  if (key.empty()) return invalid_argument(error, "put_setting: empty key");
  std::unique_lock<std::mutex> lock;
  EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
  Transaction txn(this);
  EDGEFL_RETURN_IF_ERROR(txn.begin(error));
  sqlite3_stmt* s = nullptr;
  EDGEFL_RETURN_IF_ERROR(statement(kPutSetting, &s, error));
  {
    StatementScope scope(s);
    Binder b(s);
    b.text(key).text(value);
    if (b.rc() != SQLITE_OK || sqlite3_step(s) != SQLITE_DONE) return io_error("put setting", error);
  }
  return txn.commit(error);
}

Status SqliteStorage::get_setting(const std::string& key, std::optional<std::string>* value,
                                  std::string* error) {
  if (value == nullptr) return invalid_argument(error, "get_setting: null output");
  std::unique_lock<std::mutex> lock;
  EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
  sqlite3_stmt* s = nullptr;
  EDGEFL_RETURN_IF_ERROR(statement(kGetSetting, &s, error));
  StatementScope scope(s);
  Binder b(s);
  b.text(key);
  if (b.rc() != SQLITE_OK) return io_error("bind", error);
  const int rc = sqlite3_step(s);
  if (rc == SQLITE_DONE) {
    value->reset();
    return Status::kOk;
  }
  if (rc != SQLITE_ROW) return io_error("get setting", error);
  std::string v;
  if (!column_text(s, 0, &v)) return corrupt_row("settings", error);
  *value = std::move(v);
  return Status::kOk;
}

}  // namespace

Status open_sqlite_storage(const std::string& db_path, std::unique_ptr<Storage>* out, std::string* error) {
  if (out == nullptr || db_path.empty() || db_path.find('\0') != std::string::npos) {
    return invalid_argument(error, "open_sqlite_storage: null output or empty path");
  }
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;  // our mutex serialises
#ifdef SQLITE_OPEN_EXRESCODE
  flags |= SQLITE_OPEN_EXRESCODE;
#endif
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(db_path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    if (error != nullptr) {
      *error =
          "sqlite: opening " + db_path + ": " + (db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    }
    sqlite3_close_v2(db);
    return Status::kIoError;
  }
  auto storage = std::make_unique<SqliteStorage>(db);  // owns db from here on
  std::string message;
  const Status st = storage->init(&message);
  if (st != Status::kOk) {
    if (error != nullptr) *error = db_path + ": " + message;
    return st;
  }
  *out = std::move(storage);
  return Status::kOk;
}

}  // namespace server
}  // namespace edgefl
