// postgres_storage.cpp: Storage over one PostgreSQL connection (libpq, binary parameters and
// results). See postgres_storage.h for the promises.
#include "postgres_storage.h"

#include <libpq-fe.h>
#include <stdint.h>
#include <string.h>

#include <chrono>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace edgefl {
namespace server {

bool postgres_storage_available() {
  return true;
}

namespace {

// For every transaction that holds the lease row (fenced writes, taking or giving up the lease):
// if this server stops between its statements (a paused or frozen process), the database ends its
// session after 5 s, and the lock with it, so successors are not held off for longer. (Only these:
// an update's upload may take longer than that to reach the database.)
constexpr const char* kLeaseIdleTimeoutSql =
    "SELECT set_config('idle_in_transaction_session_timeout', '5s', true) "
    "WHERE current_setting('idle_in_transaction_session_timeout') = '0' "
    "OR current_setting('idle_in_transaction_session_timeout')::interval > interval '5s'";

// For the transactions that take the lease: a lock wait of at most 1 s (they run on a server's
// event loop), unless the session's own is shorter.
constexpr const char* kLeaseLockTimeoutSql =
    "SELECT set_config('lock_timeout', '1s', true) WHERE current_setting('lock_timeout') = '0' "
    "OR current_setting('lock_timeout')::interval > interval '1s'";

// Type OIDs of the parameters and columns used here (pg_type.h, stable across versions).
constexpr Oid kBoolOid = 16;
constexpr Oid kByteaOid = 17;
constexpr Oid kInt8Oid = 20;
constexpr Oid kTextOid = 25;

// Key of the advisory lock held while the schema is created or migrated ("EDLF" twice).
constexpr long long kSchemaLockKey = 0x45444C4645444C46LL;

// Schema version 1: the tables of sqlite_storage.cpp's versions 1 and 2 (rounds, updates,
// models, settings, round_events) in PostgreSQL types: bigint for every integer (unsigned values
// stored non-negative), bytea for bytes, identity columns for the append orders. Payloads are
// stored without compression (EXTERNAL): encoded updates do not compress.
constexpr const char* kMigrations[] = {
    R"sql(
CREATE TABLE edgefl_schema (
  version     integer NOT NULL,
  application text    NOT NULL CHECK (application = 'edgefl')
);
INSERT INTO edgefl_schema (version, application) VALUES (0, 'edgefl');
CREATE TABLE rounds (
  round_id             bigint PRIMARY KEY CHECK (round_id > 0),
  nonce                bytea  NOT NULL CHECK (length(nonce) IN (16, 32)),
  base_model_version   bigint NOT NULL CHECK (base_model_version >= 0),
  state                bigint NOT NULL CHECK (state IN (1, 2, 3)),
  opened_unix_ms       bigint NOT NULL,
  deadline_unix_ms     bigint NOT NULL,
  closed_unix_ms       bigint NOT NULL DEFAULT 0,
  result_model_version bigint NOT NULL DEFAULT 0 CHECK (result_model_version >= 0),
  accepted_updates     bigint NOT NULL DEFAULT 0 CHECK (accepted_updates >= 0)
);
CREATE UNIQUE INDEX rounds_single_open ON rounds (state) WHERE state = 1;
CREATE TABLE updates (
  sequence         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  round_id         bigint NOT NULL REFERENCES rounds (round_id),
  device_id        text   NOT NULL CHECK (length(device_id) > 0),
  upload_id        bytea  NOT NULL CHECK (length(upload_id) = 16),
  sample_count     bigint NOT NULL CHECK (sample_count >= 0),
  digest           bytea  NOT NULL CHECK (length(digest) = 32),
  payload_bytes    bigint NOT NULL CHECK (payload_bytes >= 0),
  accepted_unix_ms bigint NOT NULL,
  payload          bytea,  -- NULL once the round closed
  UNIQUE (round_id, device_id)
);
ALTER TABLE updates ALTER COLUMN payload SET STORAGE EXTERNAL;
CREATE INDEX updates_by_round ON updates (round_id, sequence);
CREATE TABLE models (
  version         bigint PRIMARY KEY CHECK (version > 0),
  round_id        bigint NOT NULL CHECK (round_id >= 0),
  path            text   NOT NULL CHECK (length(path) > 0),
  digest          bytea  NOT NULL CHECK (length(digest) = 32),
  bytes           bigint NOT NULL CHECK (bytes >= 0),
  created_unix_ms bigint NOT NULL
);
CREATE TABLE settings (
  key   text PRIMARY KEY CHECK (length(key) > 0),
  value text NOT NULL
);
CREATE TABLE round_events (
  sequence  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  round_id  bigint NOT NULL REFERENCES rounds (round_id),
  device_id text   NOT NULL,
  kind      bigint NOT NULL CHECK (kind BETWEEN 1 AND 255),
  unix_ms   bigint NOT NULL,
  payload   bytea  NOT NULL CHECK (length(payload) <= 1048576)
);
ALTER TABLE round_events ALTER COLUMN payload SET STORAGE EXTERNAL;
CREATE INDEX round_events_by_round ON round_events (round_id, sequence);
)sql",
    // Version 2: several servers on one database. A round is sealed when its close begins (the
    // ledger then takes nothing more); one row holds the coordinator lease, its times by the
    // database's clock in Unix milliseconds.
    R"sql(
ALTER TABLE rounds ADD COLUMN sealed boolean NOT NULL DEFAULT false;
CREATE TABLE coordinator_lease (
  id              integer PRIMARY KEY CHECK (id = 1),
  holder          text    NOT NULL CHECK (length(holder) > 0),
  epoch           bigint  NOT NULL CHECK (epoch > 0),
  expires_unix_ms bigint  NOT NULL
);
)sql",
    // Version 3: each aggregator's partial sum of a sealed round, and which aggregator acknowledged
    // each update (the rows a partial sum covers). Rows from before have the aggregator ''.
    R"sql(
ALTER TABLE updates ADD COLUMN aggregator text NOT NULL DEFAULT '';
CREATE TABLE partial_sums (
  round_id   bigint NOT NULL REFERENCES rounds (round_id),
  aggregator text   NOT NULL CHECK (length(aggregator) > 0),
  updates    bigint NOT NULL CHECK (updates >= 0),
  sequence_sum bigint NOT NULL CHECK (sequence_sum >= 0),
  state      bytea  NOT NULL CHECK (length(state) > 0),
  PRIMARY KEY (round_id, aggregator)
);
ALTER TABLE partial_sums ALTER COLUMN state SET STORAGE EXTERNAL;
)sql",
};
static_assert(sizeof kMigrations / sizeof kMigrations[0] == kPostgresSchemaVersion,
              "one migration per schema version");

#define EDGEFL_ROUND_COLUMNS                                                                       \
  "round_id, nonce, base_model_version, state, opened_unix_ms, deadline_unix_ms, closed_unix_ms, " \
  "result_model_version, accepted_updates, sealed"
#define EDGEFL_UPDATE_COLUMNS                                                                         \
  "sequence, round_id, device_id, upload_id, sample_count, digest, payload_bytes, accepted_unix_ms, " \
  "aggregator"

constexpr const char* kGetRoundSql = "SELECT " EDGEFL_ROUND_COLUMNS " FROM rounds WHERE round_id = $1";
constexpr const char* kLockRoundShareSql =
    "SELECT " EDGEFL_ROUND_COLUMNS " FROM rounds WHERE round_id = $1 FOR SHARE";
constexpr const char* kLockRoundUpdateSql =
    "SELECT " EDGEFL_ROUND_COLUMNS " FROM rounds WHERE round_id = $1 FOR UPDATE";
constexpr const char* kGetOpenRoundSql =
    "SELECT " EDGEFL_ROUND_COLUMNS " FROM rounds WHERE state = 1 ORDER BY round_id LIMIT 1";
constexpr const char* kFindUpdateSql =
    "SELECT " EDGEFL_UPDATE_COLUMNS " FROM updates WHERE round_id = $1 AND device_id = $2";
constexpr const char* kEachUpdateSql =
    "SELECT " EDGEFL_UPDATE_COLUMNS ", payload FROM updates WHERE round_id = $1 ORDER BY sequence";
constexpr const char* kEachUpdateOfSql = "SELECT " EDGEFL_UPDATE_COLUMNS
                                         ", payload FROM updates WHERE round_id = $1 AND aggregator = $2 "
                                         "ORDER BY sequence";
constexpr const char* kLatestModelSql =
    "SELECT version, round_id, path, digest, bytes, created_unix_ms FROM models ORDER BY version DESC LIMIT "
    "1";

// The database's clock in Unix milliseconds (the lease's times).
#define EDGEFL_PG_NOW_MS "(floor(extract(epoch FROM clock_timestamp()) * 1000))::bigint"

// Parameters in binary format: integers big-endian, bytes and text as they are.
class Params {
 public:
  Params& i64(int64_t v) {
    std::array<char, 8>& b = ints_.emplace_back();
    for (int i = 0; i < 8; ++i) b[i] = char(uint64_t(v) >> (56 - 8 * i));
    return add(kInt8Oid, b.data(), 8);
  }
  Params& u64(uint64_t v) { return i64(int64_t(v)); }  // callers checked fits_i64
  Params& bytes(const void* p, size_t n) {
    static const char kEmpty = 0;  // libpq reads a null value pointer as SQL NULL
    return add(kByteaOid, n == 0 ? &kEmpty : static_cast<const char*>(p), n);
  }
  Params& text(const std::string& t) { return add(kTextOid, t.empty() ? "" : t.data(), t.size()); }

  int count() const { return int(values_.size()); }
  const Oid* types() const { return types_.data(); }
  const char* const* values() const { return values_.data(); }
  const int* lengths() const { return lengths_.data(); }
  const int* formats() const { return formats_.data(); }

 private:
  Params& add(Oid type, const char* p, size_t n) {
    types_.push_back(type);
    values_.push_back(p);
    lengths_.push_back(int(n));
    formats_.push_back(1);
    return *this;
  }
  std::deque<std::array<char, 8>> ints_;  // stable addresses
  std::vector<Oid> types_;
  std::vector<const char*> values_;
  std::vector<int> lengths_, formats_;
};

// A PGresult owned; cleared on destruction.
class Result {
 public:
  Result() = default;
  explicit Result(PGresult* r) : r_(r) {}
  ~Result() { PQclear(r_); }
  Result(Result&& o) noexcept : r_(std::exchange(o.r_, nullptr)) {}
  Result& operator=(Result&& o) noexcept {
    if (this != &o) {
      PQclear(r_);
      r_ = std::exchange(o.r_, nullptr);
    }
    return *this;
  }
  PGresult* get() const { return r_; }
  int rows() const { return r_ == nullptr ? 0 : PQntuples(r_); }

 private:
  PGresult* r_ = nullptr;
};

// Column readers for rows this file wrote (binary results); a value of another type, NULL where
// the schema forbids it, or out of range means the database was changed behind our back.
bool column_i64(PGresult* r, int row, int col, int64_t* out) {
  if (PQftype(r, col) != kInt8Oid || PQgetisnull(r, row, col) || PQgetlength(r, row, col) != 8) return false;
  const auto* p = reinterpret_cast<const uint8_t*>(PQgetvalue(r, row, col));
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  *out = int64_t(v);
  return true;
}

bool column_u64(PGresult* r, int row, int col, uint64_t* out) {
  int64_t v = 0;
  if (!column_i64(r, row, col, &v) || v < 0) return false;
  *out = uint64_t(v);
  return true;
}

bool column_u32(PGresult* r, int row, int col, uint32_t* out) {
  uint64_t v = 0;
  if (!column_u64(r, row, col, &v) || v > UINT32_MAX) return false;
  *out = uint32_t(v);
  return true;
}

// bytea; NULL reads as empty.
bool column_bytes(PGresult* r, int row, int col, std::vector<uint8_t>* out) {
  if (PQftype(r, col) != kByteaOid) return false;
  if (PQgetisnull(r, row, col)) {
    out->clear();
    return true;
  }
  const auto* p = reinterpret_cast<const uint8_t*>(PQgetvalue(r, row, col));
  out->assign(p, p + PQgetlength(r, row, col));
  return true;
}

template <size_t N>
bool column_array(PGresult* r, int row, int col, std::array<uint8_t, N>* out) {
  if (PQftype(r, col) != kByteaOid || PQgetisnull(r, row, col) || size_t(PQgetlength(r, row, col)) != N)
    return false;
  memcpy(out->data(), PQgetvalue(r, row, col), N);
  return true;
}

bool column_bool(PGresult* r, int row, int col, bool* out) {
  if (PQftype(r, col) != kBoolOid || PQgetisnull(r, row, col) || PQgetlength(r, row, col) != 1) return false;
  *out = PQgetvalue(r, row, col)[0] != 0;
  return true;
}

bool column_text(PGresult* r, int row, int col, std::string* out) {
  if (PQftype(r, col) != kTextOid || PQgetisnull(r, row, col)) return false;
  out->assign(PQgetvalue(r, row, col), size_t(PQgetlength(r, row, col)));
  return true;
}

bool read_round(PGresult* r, int row, RoundRecord* out) {
  uint64_t state = 0;
  if (!column_u64(r, row, 0, &out->round_id) || !column_bytes(r, row, 1, &out->nonce) ||
      !column_u64(r, row, 2, &out->base_model_version) || !column_u64(r, row, 3, &state) ||
      !column_i64(r, row, 4, &out->opened_unix_ms) || !column_i64(r, row, 5, &out->deadline_unix_ms) ||
      !column_i64(r, row, 6, &out->closed_unix_ms) || !column_u64(r, row, 7, &out->result_model_version) ||
      !column_u32(r, row, 8, &out->accepted_updates) || !column_bool(r, row, 9, &out->sealed)) {
    return false;
  }
  if (state < 1 || state > 3 || (out->nonce.size() != 16 && out->nonce.size() != 32)) return false;
  out->state = RoundState(state);
  return true;
}

bool read_update(PGresult* r, int row, bool with_payload, UpdateRecord* u) {
  if (!column_u64(r, row, 0, &u->sequence) || !column_u64(r, row, 1, &u->round_id) ||
      !column_text(r, row, 2, &u->device_id) || !column_array(r, row, 3, &u->upload_id) ||
      !column_u32(r, row, 4, &u->sample_count) || !column_array(r, row, 5, &u->digest) ||
      !column_u64(r, row, 6, &u->payload_bytes) || !column_i64(r, row, 7, &u->accepted_unix_ms) ||
      !column_text(r, row, 8, &u->aggregator)) {
    return false;
  }
  if (!with_payload) {
    u->payload.clear();
    return true;
  }
  return column_bytes(r, row, 9, &u->payload);
}

bool read_model(PGresult* r, int row, ModelRecord* m) {
  return column_u64(r, row, 0, &m->version) && column_u64(r, row, 1, &m->round_id) &&
         column_text(r, row, 2, &m->path) && column_array(r, row, 3, &m->digest) &&
         column_u64(r, row, 4, &m->bytes) && column_i64(r, row, 5, &m->created_unix_ms);
}

std::string trimmed(const char* message) {
  std::string s = message == nullptr ? "" : message;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// What one attempt of a call knows about the attempt before it.
struct Attempt {
  int number = 0;                // 0 for the first
  bool commit_in_doubt = false;  // an earlier attempt lost the connection during its COMMIT
};

class PostgresStorage final : public Storage {
 public:
  explicit PostgresStorage(std::string conninfo) : conninfo_(std::move(conninfo)) {}
  ~PostgresStorage() override { PQfinish(conn_); }
  PostgresStorage(const PostgresStorage&) = delete;
  PostgresStorage& operator=(const PostgresStorage&) = delete;

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
  Status acquire_lease(const std::string& holder, uint32_t ttl_ms, int64_t now_ms, Lease* out,
                       std::string* error) override;
  Status set_fence(const std::string& holder, uint64_t epoch, std::string* error) override;
  Status release_lease(const std::string& holder, std::string* error) override;
  Status seal_round(uint64_t round_id, std::string* error) override;
  Status list_settings(const std::string& prefix, std::vector<std::pair<std::string, std::string>>* out,
                       std::string* error) override;
  Status ledger_shares(uint64_t round_id, std::vector<LedgerShare>* out, std::string* error) override;
  Status for_each_update_of(uint64_t round_id, const std::string& aggregator,
                            const std::function<Status(const UpdateRecord&)>& fn,
                            std::string* error) override;
  Status put_partial_sum(const PartialSum& sum, std::string* error) override;
  Status for_each_partial_sum(uint64_t round_id, bool with_state,
                              const std::function<Status(const PartialSum&)>& fn,
                              std::string* error) override;

 private:
  // each_row() inside with_retry(), each row handed once: a connection lost after the first row
  // ends the call (kIoError) instead of starting the rows over. `row` gets the call's message.
  Status each_row_once(const char* what, const char* sql, const Params& params,
                       const std::function<Status(PGresult*, std::string*)>& row, std::string* error);
  // for_each_update and for_each_update_of: the rows of `sql` with `params`, each handed once.
  Status each_update(const char* sql, const Params& params,
                     const std::function<Status(const UpdateRecord&)>& fn, std::string* error);

  bool connected() const { return conn_ != nullptr && PQstatus(conn_) == CONNECTION_OK; }

  // Opens the connection and sets up the session: synchronous_commit on (read back), fsync on
  // the server, no notices.
  Status connect(std::string* error);

  // Runs `body` (one transaction, or one read) with the connection up, the lock held. When the
  // connection is found broken or breaks during the body, reconnects and runs it again (up to
  // kPostgresAttempts, waits doubling from 50 ms); a body that returns without losing the
  // connection ends the call with its status.
  template <typename Body>
  Status with_retry(Body&& body, std::string* error) {
    std::unique_lock<std::mutex> lock;
    EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
    Attempt attempt;
    std::string message;
    for (;;) {
      Status st = Status::kOk;
      if (!connected()) {
        st = connect(&message);
      }
      if (st == Status::kOk) {
        in_commit_ = false;
        st = body(attempt, &message);
        if (st == Status::kOk || connected()) {
          if (st != Status::kOk && error != nullptr) *error = message;
          return st;
        }
      }
      // The connection is down (never up, or lost during the body).
      // Sticky: once a COMMIT's outcome is unknown, every later attempt must look for its effect.
      attempt.commit_in_doubt = attempt.commit_in_doubt || (st != Status::kOk && in_commit_);
      if (++attempt.number >= kPostgresAttempts) {
        if (error != nullptr) {
          *error =
              "postgresql: connection lost (" + std::to_string(kPostgresAttempts) + " attempts): " + message;
        }
        return Status::kIoError;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50 << (attempt.number - 1)));
    }
  }

  // The message of a failed statement, with its SQLSTATE; kInvalidArgument for data the database
  // refuses (SQLSTATE class 22: not UTF-8, a NUL in text, a value out of range), kIoError else.
  Status failed(const char* what, PGresult* r, std::string* error) const {
    const char* state = r == nullptr ? nullptr : PQresultErrorField(r, PG_DIAG_SQLSTATE);
    const char* text = r == nullptr ? nullptr : PQresultErrorMessage(r);
    if (text == nullptr || *text == '\0') text = PQerrorMessage(conn_);
    if (error != nullptr) {
      *error = std::string("postgresql: ") + what + ": " + trimmed(text) +
               (state != nullptr ? std::string(" (SQLSTATE ") + state + ")" : std::string());
    }
    return state != nullptr && strncmp(state, "22", 2) == 0 ? Status::kInvalidArgument : Status::kIoError;
  }

  // Runs `sql` with `params`; *out gets the result. kOk when the result is `expect`.
  Status exec(const char* what, const char* sql, const Params& params, ExecStatusType expect, Result* out,
              std::string* error) {
    Result r(PQexecParams(conn_, sql, params.count(), params.types(), params.values(), params.lengths(),
                          params.formats(), 1));
    if (r.get() == nullptr || PQresultStatus(r.get()) != expect) return failed(what, r.get(), error);
    *out = std::move(r);
    return Status::kOk;
  }
  Status command(const char* what, const char* sql, const Params& params, std::string* error) {
    Result ignored;
    return exec(what, sql, params, PGRES_COMMAND_OK, &ignored, error);
  }
  Status query(const char* what, const char* sql, const Params& params, Result* out, std::string* error) {
    return exec(what, sql, params, PGRES_TUPLES_OK, out, error);
  }
  // A statement without parameters, in text mode (BEGIN, SET, DDL); its rows, if any, unread.
  Status simple(const char* sql, std::string* error, ExecStatusType expect = PGRES_COMMAND_OK) {
    Result r(PQexec(conn_, sql));
    if (r.get() == nullptr || PQresultStatus(r.get()) != expect) return failed(sql, r.get(), error);
    return Status::kOk;
  }

  // A write transaction: BEGIN now; rolled back on destruction unless commit() succeeded.
  class Transaction {
   public:
    explicit Transaction(PostgresStorage* s) : s_(s) {}
    ~Transaction() {
      if (open_ && s_->connected()) (void)s_->simple("ROLLBACK", nullptr);
    }
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;
    Status begin(std::string* error) {
      EDGEFL_RETURN_IF_ERROR(s_->simple("BEGIN", error));
      open_ = true;
      return Status::kOk;
    }
    // Returns after the commit record is durable (synchronous_commit = on).
    Status commit(std::string* error) {
      s_->in_commit_ = true;
      const Status st = s_->simple("COMMIT", error);
      if (st == Status::kOk || !s_->connected()) open_ = false;
      if (st == Status::kOk) s_->in_commit_ = false;
      return st;
    }

   private:
    PostgresStorage* s_;
    bool open_ = false;
  };

  // Inside a write transaction: kProtocolError unless the fence is unset or its holder holds the
  // lease at its epoch (expiry alone does not fence: a lapsed lease nobody took is still this
  // holder's, and a takeover always moves the epoch under this row's lock). The lease row stays
  // share-locked until
  // the transaction ends, so a takeover waits for this write and the next write of the old
  // holder fails.
  // BEGINs `txn` for taking or giving up the lease: lock waits of at most 1 s, and the idle limit
  // of every transaction that holds the lease row.
  Status begin_lease_transaction(Transaction* txn, std::string* error) {
    EDGEFL_RETURN_IF_ERROR(txn->begin(error));
    EDGEFL_RETURN_IF_ERROR(simple(kLeaseLockTimeoutSql, error, PGRES_TUPLES_OK));
    return simple(kLeaseIdleTimeoutSql, error, PGRES_TUPLES_OK);
  }

  Status check_fence(const char* call, std::string* error) {
    if (fence_holder_.empty()) return Status::kOk;
    EDGEFL_RETURN_IF_ERROR(simple(kLeaseIdleTimeoutSql, error, PGRES_TUPLES_OK));
    Params p;
    p.text(fence_holder_).u64(fence_epoch_);
    Result r;
    EDGEFL_RETURN_IF_ERROR(query("check the coordinator lease",
                                 "SELECT holder, epoch FROM coordinator_lease WHERE id = 1 AND holder = $1 "
                                 "AND epoch = $2 FOR SHARE",
                                 p, &r, error));
    if (r.rows() == 1) return Status::kOk;
    if (error != nullptr) {
      *error = std::string(call) + ": not the coordinator: the lease of '" + fence_holder_ + "' at epoch " +
               std::to_string(fence_epoch_) + " is no longer held";
    }
    return Status::kProtocolError;
  }

  Status corrupt_row(const char* table, std::string* error) const {
    if (error != nullptr)
      *error = std::string("postgresql: a row of table ") + table + " holds values this build never writes";
    return Status::kIoError;
  }

  // The round row by `sql` (one of the round selects; $1 = round_id unless kGetOpenRoundSql).
  Status select_round(const char* sql, uint64_t round_id, std::optional<RoundRecord>* out,
                      std::string* error) {
    Params p;
    if (sql != kGetOpenRoundSql) p.u64(round_id);
    Result r;
    EDGEFL_RETURN_IF_ERROR(query("select round", sql, p, &r, error));
    if (r.rows() == 0) {
      out->reset();
      return Status::kOk;
    }
    RoundRecord round;
    if (!read_round(r.get(), 0, &round)) return corrupt_row("rounds", error);
    *out = std::move(round);
    return Status::kOk;
  }

  // Streams the rows of `sql` (with `params`) one at a time to `row`, with the object marked as
  // iterating. Stops at row's first non-kOk (the rest of the result is drained).
  Status each_row(const char* what, const char* sql, const Params& params,
                  const std::function<Status(PGresult*)>& row, std::string* error);

  std::string conninfo_;
  PGconn* conn_ = nullptr;
  bool in_commit_ = false;    // the last statement sent was a COMMIT
  std::string fence_holder_;  // set_fence's; "" = no fence
  uint64_t fence_epoch_ = 0;
  StorageGate gate_;  // serialises calls; refuses calls from an iteration's callback
};

Status PostgresStorage::connect(std::string* error) {
  PQfinish(conn_);
  // Bounds on a database that does not answer, each overridden by the connection string's own
  // value (later keywords win; the string expands in place of "dbname"): connect within 5 s,
  // notice a silent peer by TCP keepalives (5 s idle, 2 s apart, 3 probes) and unacknowledged
  // sends after 10 s.
  static const char* const kKeywords[] = {
      "connect_timeout",  "keepalives",       "keepalives_idle", "keepalives_interval",
      "keepalives_count", "tcp_user_timeout", "dbname",          nullptr};
  const char* const values[] = {"5", "1", "5", "2", "3", "10000", conninfo_.c_str(), nullptr};
  conn_ = PQconnectdbParams(kKeywords, values, /*expand_dbname=*/1);
  if (conn_ == nullptr) {
    if (error != nullptr) *error = "postgresql: out of memory connecting";
    return Status::kIoError;
  }
  if (PQstatus(conn_) != CONNECTION_OK) {
    if (error != nullptr) *error = "postgresql: cannot connect: " + trimmed(PQerrorMessage(conn_));
    return Status::kIoError;
  }
  EDGEFL_RETURN_IF_ERROR(simple("SET client_min_messages TO warning", error));
  EDGEFL_RETURN_IF_ERROR(simple("SET synchronous_commit TO on", error));
  // A statement or a lock wait that does not end is an error (retried by the caller), not a
  // server wedged on its state store: 60 s (a whole round's updates are read in one statement)
  // and 10 s, unless the connection string's options (or the role's or database's settings)
  // chose their own.
  EDGEFL_RETURN_IF_ERROR(
      simple("SELECT set_config('statement_timeout', '60s', false) "
             "WHERE current_setting('statement_timeout') = '0'",
             error, PGRES_TUPLES_OK));
  EDGEFL_RETURN_IF_ERROR(
      simple("SELECT set_config('lock_timeout', '10s', false) "
             "WHERE current_setting('lock_timeout') = '0'",
             error, PGRES_TUPLES_OK));
  Result r(PQexec(conn_, "SELECT current_setting('synchronous_commit'), current_setting('fsync')"));
  if (r.get() == nullptr || PQresultStatus(r.get()) != PGRES_TUPLES_OK || r.rows() != 1)
    return failed("read the durability settings", r.get(), error);
  const std::string synchronous = PQgetvalue(r.get(), 0, 0), fsync = PQgetvalue(r.get(), 0, 1);
  if (synchronous != "on") {
    if (error != nullptr)
      *error = "postgresql: synchronous_commit = on did not take (it is " + synchronous + ")";
    return Status::kIoError;
  }
  if (fsync != "on") {
    if (error != nullptr) {
      *error = "postgresql: the server runs with fsync = " + fsync +
               ": an acknowledged update could be lost in a crash; turn fsync on";
    }
    return Status::kIoError;
  }
  return Status::kOk;
}

Status PostgresStorage::init(std::string* error) {
  return with_retry(
      [&](const Attempt&, std::string* message) -> Status {
        Transaction txn(this);
        EDGEFL_RETURN_IF_ERROR(txn.begin(message));
        Params lock;
        lock.i64(kSchemaLockKey);
        Result r;
        EDGEFL_RETURN_IF_ERROR(
            query("lock the schema", "SELECT pg_advisory_xact_lock($1)", lock, &r, message));
        EDGEFL_RETURN_IF_ERROR(
            query("look for the schema",
                  "SELECT to_regclass('edgefl_schema') IS NOT NULL, "
                  "(SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = current_schema())",
                  Params(), &r, message));
        const bool ours = PQgetvalue(r.get(), 0, 0)[0] == 1;
        int64_t tables = 0;
        if (!column_i64(r.get(), 0, 1, &tables)) return corrupt_row("pg_tables", message);
        int64_t version = 0;
        if (!ours && tables > 0) {
          if (message != nullptr) {
            *message = "postgresql: not an edgefl state database (" + std::to_string(tables) +
                       " tables and no edgefl_schema in the current schema)";
          }
          return Status::kIoError;
        }
        if (ours) {
          EDGEFL_RETURN_IF_ERROR(query("read the schema version",
                                       "SELECT version::bigint, application FROM edgefl_schema", Params(), &r,
                                       message));
          std::string application;
          if (r.rows() != 1 || !column_i64(r.get(), 0, 0, &version) ||
              !column_text(r.get(), 0, 1, &application) || application != "edgefl") {
            return corrupt_row("edgefl_schema", message);
          }
          if (version > kPostgresSchemaVersion) {
            if (message != nullptr) {
              *message = "postgresql: schema version " + std::to_string(version) +
                         " is newer than this build's (" + std::to_string(kPostgresSchemaVersion) + ")";
            }
            return Status::kUnsupportedVersion;
          }
        }
        for (int64_t v = version; v < kPostgresSchemaVersion; ++v) {
          Result applied(PQexec(conn_, kMigrations[v]));  // several statements: text protocol
          if (applied.get() == nullptr || PQresultStatus(applied.get()) != PGRES_COMMAND_OK) {
            return failed(("migrate to schema version " + std::to_string(v + 1)).c_str(), applied.get(),
                          message);
          }
          Params to;
          to.i64(v + 1);
          EDGEFL_RETURN_IF_ERROR(
              command("record the schema version", "UPDATE edgefl_schema SET version = $1", to, message));
        }
        return txn.commit(message);
      },
      error);
}

Status PostgresStorage::create_round(const RoundRecord& round, std::string* error) {
  EDGEFL_RETURN_IF_ERROR(check_new_round(round, error));
  return with_retry(
      [&](const Attempt& attempt, std::string* message) -> Status {
        Transaction txn(this);
        EDGEFL_RETURN_IF_ERROR(txn.begin(message));
        EDGEFL_RETURN_IF_ERROR(check_fence("create_round", message));
        // One creator at a time: the existence checks below and the insert are then one step.
        EDGEFL_RETURN_IF_ERROR(simple("LOCK TABLE rounds IN SHARE ROW EXCLUSIVE MODE", message));
        std::optional<RoundRecord> existing;
        EDGEFL_RETURN_IF_ERROR(select_round(kGetRoundSql, round.round_id, &existing, message));
        if (existing) {
          if (attempt.commit_in_doubt && existing->state == RoundState::kOpen &&
              existing->nonce == round.nonce && existing->opened_unix_ms == round.opened_unix_ms) {
            return Status::kOk;  // the previous attempt's commit took effect
          }
          return invalid_argument(message,
                                  "create_round: round " + std::to_string(round.round_id) + " exists");
        }
        EDGEFL_RETURN_IF_ERROR(select_round(kGetOpenRoundSql, 0, &existing, message));
        if (existing) {
          return invalid_argument(
              message, "create_round: round " + std::to_string(existing->round_id) + " is still open");
        }
        Params p;
        p.u64(round.round_id)
            .bytes(round.nonce.data(), round.nonce.size())
            .u64(round.base_model_version)
            .i64(round.opened_unix_ms)
            .i64(round.deadline_unix_ms);
        EDGEFL_RETURN_IF_ERROR(command("insert round",
                                       "INSERT INTO rounds (round_id, nonce, base_model_version, state, "
                                       "opened_unix_ms, deadline_unix_ms) VALUES ($1, $2, $3, 1, $4, $5)",
                                       p, message));
        return txn.commit(message);
      },
      error);
}

Status PostgresStorage::close_round(uint64_t round_id, RoundState state, uint64_t result_model_version,
                                    int64_t closed_unix_ms, std::string* error) {
  EDGEFL_RETURN_IF_ERROR(check_close(round_id, state, result_model_version, error));
  return with_retry(
      [&](const Attempt& attempt, std::string* message) -> Status {
        Transaction txn(this);
        EDGEFL_RETURN_IF_ERROR(txn.begin(message));
        EDGEFL_RETURN_IF_ERROR(check_fence("close_round", message));
        std::optional<RoundRecord> round;
        EDGEFL_RETURN_IF_ERROR(select_round(kLockRoundUpdateSql, round_id, &round, message));
        if (!round) return invalid_argument(message, "close_round: no round " + std::to_string(round_id));
        if (round->state != RoundState::kOpen) {
          if (attempt.commit_in_doubt && round->state == state &&
              round->result_model_version == result_model_version &&
              round->closed_unix_ms == closed_unix_ms) {
            return Status::kOk;  // the previous attempt's commit took effect
          }
          return invalid_argument(message, "close_round: round " + std::to_string(round_id) + " is " +
                                               round_state_name(round->state));
        }
        Params id;
        id.u64(round_id);
        if (state == RoundState::kCommitted) {
          Params v;
          v.u64(result_model_version);
          Result r;
          EDGEFL_RETURN_IF_ERROR(
              query("select model", "SELECT round_id FROM models WHERE version = $1", v, &r, message));
          if (r.rows() == 0) {
            return invalid_argument(message, "close_round: model version " +
                                                 std::to_string(result_model_version) + " is not recorded");
          }
          int64_t model_round = 0;
          if (!column_i64(r.get(), 0, 0, &model_round)) return corrupt_row("models", message);
          if (model_round != int64_t(round_id)) {
            return invalid_argument(message, "close_round: model version " +
                                                 std::to_string(result_model_version) +
                                                 " was recorded for another round");
          }
        }
        Params p;
        p.u64(round_id).i64(int64_t(state)).u64(result_model_version).i64(closed_unix_ms);
        Result r;
        EDGEFL_RETURN_IF_ERROR(
            exec("close round",
                 "UPDATE rounds SET state = $2, result_model_version = $3, closed_unix_ms = $4, "
                 "accepted_updates = (SELECT count(*) FROM updates WHERE round_id = $1) "
                 "WHERE round_id = $1 AND state = 1",
                 p, PGRES_COMMAND_OK, &r, message));
        if (strcmp(PQcmdTuples(r.get()), "1") != 0) {
          if (message != nullptr) *message = "postgresql: close round: no row changed";
          return Status::kIoError;
        }
        if (state == RoundState::kCommitted) {
          EDGEFL_RETURN_IF_ERROR(
              command("drop payloads",
                      "UPDATE updates SET payload = NULL WHERE round_id <= $1 AND payload IS NOT NULL AND "
                      "round_id > (SELECT coalesce(max(round_id), 0) FROM rounds WHERE state = 2 AND "
                      "round_id < $1)",
                      id, message));
        }
        EDGEFL_RETURN_IF_ERROR(
            command("drop round events", "DELETE FROM round_events WHERE round_id = $1", id, message));
        EDGEFL_RETURN_IF_ERROR(
            command("drop partial sums", "DELETE FROM partial_sums WHERE round_id = $1", id, message));
        return txn.commit(message);
      },
      error);
}

Status PostgresStorage::open_round(std::optional<RoundRecord>* out, std::string* error) {
  if (out == nullptr) return invalid_argument(error, "open_round: null output");
  return with_retry(
      [&](const Attempt&, std::string* message) { return select_round(kGetOpenRoundSql, 0, out, message); },
      error);
}

Status PostgresStorage::get_round(uint64_t round_id, std::optional<RoundRecord>* out, std::string* error) {
  if (out == nullptr) return invalid_argument(error, "get_round: null output");
  if (!fits_i64(round_id)) return invalid_argument(error, "get_round: round id out of range");
  return with_retry([&](const Attempt&,
                        std::string* message) { return select_round(kGetRoundSql, round_id, out, message); },
                    error);
}

Status PostgresStorage::last_round_id(uint64_t* out, std::string* error) {
  if (out == nullptr) return invalid_argument(error, "last_round_id: null output");
  return with_retry(
      [&](const Attempt&, std::string* message) -> Status {
        Result r;
        EDGEFL_RETURN_IF_ERROR(query("select max(round_id)",
                                     "SELECT coalesce(max(round_id), 0)::bigint FROM rounds", Params(), &r,
                                     message));
        uint64_t v = 0;
        if (r.rows() != 1 || !column_u64(r.get(), 0, 0, &v)) return corrupt_row("rounds", message);
        *out = v;
        return Status::kOk;
      },
      error);
}

Status PostgresStorage::record_update(const UpdateRecord& update, InsertResult* result, uint64_t* sequence,
                                      std::string* error) {
  EDGEFL_RETURN_IF_ERROR(check_new_update(update, result, error));
  return with_retry(
      [&](const Attempt& attempt, std::string* message) -> Status {
        Transaction txn(this);
        EDGEFL_RETURN_IF_ERROR(txn.begin(message));
        std::optional<RoundRecord> round;
        EDGEFL_RETURN_IF_ERROR(select_round(kLockRoundShareSql, update.round_id, &round, message));
        if (!round)
          return invalid_argument(message, "record_update: no round " + std::to_string(update.round_id));
        Params find;
        find.u64(update.round_id).text(update.device_id);
        Result r;
        if (attempt.commit_in_doubt) {
          // The previous attempt reached COMMIT only after inserting this upload: when the row is
          // there, its commit took effect (the round may have closed since) and the update is
          // this call's, not a duplicate.
          EDGEFL_RETURN_IF_ERROR(query("select update", kFindUpdateSql, find, &r, message));
          UpdateRecord existing;
          // Only a row of this aggregator: the same upload retried through another aggregator (a
          // device that timed out and came back through the balancer) is that one's, a duplicate
          // here, or both aggregators' partial sums would count it.
          if (r.rows() == 1 && read_update(r.get(), 0, false, &existing) &&
              existing.upload_id == update.upload_id && existing.aggregator == update.aggregator) {
            *result = InsertResult::kInserted;
            if (sequence != nullptr) *sequence = existing.sequence;
            return Status::kOk;
          }
        }
        if (round->state != RoundState::kOpen) {
          return invalid_argument(message, "record_update: round " + std::to_string(update.round_id) +
                                               " is " + round_state_name(round->state));
        }
        if (round->sealed) {
          return invalid_argument(
              message, "record_update: round " + std::to_string(update.round_id) + " is sealed (closing)");
        }
        EDGEFL_RETURN_IF_ERROR(query("select update", kFindUpdateSql, find, &r, message));
        if (r.rows() == 1) {
          // Same upload retried, or a second upload from this device: either way the first one stands.
          UpdateRecord existing;
          if (!read_update(r.get(), 0, false, &existing)) return corrupt_row("updates", message);
          *result = InsertResult::kDuplicate;
          if (sequence != nullptr) *sequence = existing.sequence;
          return Status::kOk;  // nothing written; the transaction rolls back
        }
        Params p;
        p.u64(update.round_id)
            .text(update.device_id)
            .bytes(update.upload_id.data(), update.upload_id.size())
            .i64(int64_t(update.sample_count))
            .bytes(update.digest.data(), update.digest.size())
            .u64(update.payload_bytes)
            .i64(update.accepted_unix_ms)
            .bytes(update.payload.data(), update.payload.size())
            .text(update.aggregator);
        EDGEFL_RETURN_IF_ERROR(
            query("insert update",
                  "INSERT INTO updates (round_id, device_id, upload_id, sample_count, digest, "
                  "payload_bytes, accepted_unix_ms, payload, aggregator) "
                  "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING sequence",
                  p, &r, message));
        uint64_t assigned = 0;
        if (r.rows() != 1 || !column_u64(r.get(), 0, 0, &assigned)) return corrupt_row("updates", message);
        EDGEFL_RETURN_IF_ERROR(txn.commit(message));  // durable from here on
        *result = InsertResult::kInserted;
        if (sequence != nullptr) *sequence = assigned;
        return Status::kOk;
      },
      error);
}

Status PostgresStorage::find_update(uint64_t round_id, const std::string& device_id,
                                    std::optional<UpdateRecord>* out, std::string* error) {
  if (out == nullptr) return invalid_argument(error, "find_update: null output");
  if (!fits_i64(round_id)) return invalid_argument(error, "find_update: round id out of range");
  return with_retry(
      [&](const Attempt&, std::string* message) -> Status {
        Params p;
        p.u64(round_id).text(device_id);
        Result r;
        EDGEFL_RETURN_IF_ERROR(query("select update", kFindUpdateSql, p, &r, message));
        if (r.rows() == 0) {
          out->reset();
          return Status::kOk;
        }
        UpdateRecord u;
        if (!read_update(r.get(), 0, false, &u)) return corrupt_row("updates", message);
        *out = std::move(u);
        return Status::kOk;
      },
      error);
}

Status PostgresStorage::count_updates(uint64_t round_id, uint64_t* out, std::string* error) {
  if (out == nullptr) return invalid_argument(error, "count_updates: null output");
  if (!fits_i64(round_id)) return invalid_argument(error, "count_updates: round id out of range");
  return with_retry(
      [&](const Attempt&, std::string* message) -> Status {
        Params p;
        p.u64(round_id);
        Result r;
        EDGEFL_RETURN_IF_ERROR(
            query("count updates", "SELECT count(*) FROM updates WHERE round_id = $1", p, &r, message));
        uint64_t v = 0;
        if (r.rows() != 1 || !column_u64(r.get(), 0, 0, &v)) return corrupt_row("updates", message);
        *out = v;
        return Status::kOk;
      },
      error);
}

Status PostgresStorage::each_row(const char* what, const char* sql, const Params& p,
                                 const std::function<Status(PGresult*)>& row, std::string* error) {
  if (PQsendQueryParams(conn_, sql, p.count(), p.types(), p.values(), p.lengths(), p.formats(), 1) != 1 ||
      PQsetSingleRowMode(conn_) != 1) {
    return failed(what, nullptr, error);
  }
  StorageGate::Iteration iteration(&gate_);
  Status st = Status::kOk;
  bool stopped = false;
  for (;;) {
    Result r(PQgetResult(conn_));
    if (r.get() == nullptr) break;  // the query is over
    const ExecStatusType status = PQresultStatus(r.get());
    if (status == PGRES_SINGLE_TUPLE) {
      if (!stopped) {
        st = row(r.get());
        stopped = st != Status::kOk;
      }
    } else if (status != PGRES_TUPLES_OK && !stopped) {
      st = failed(what, r.get(), error);
      stopped = true;
    }
  }
  return st;
}

Status PostgresStorage::each_row_once(const char* what, const char* sql, const Params& params,
                                      const std::function<Status(PGresult*, std::string*)>& row,
                                      std::string* error) {
  bool called = false;
  return with_retry(
      [&](const Attempt&, std::string* message) -> Status {
        if (called) {  // never hand a row twice: a connection lost mid-iteration ends the call
          if (message != nullptr) *message = std::string("postgresql: connection lost during ") + what;
          return Status::kIoError;
        }
        return each_row(
            what, sql, params,
            [&](PGresult* r) -> Status {
              called = true;
              return row(r, message);
            },
            message);
      },
      error);
}

Status PostgresStorage::each_update(const char* sql, const Params& params,
                                    const std::function<Status(const UpdateRecord&)>& fn,
                                    std::string* error) {
  UpdateRecord u;  // reused: its payload buffer keeps its capacity from row to row
  return each_row_once(
      "select updates", sql, params,
      [&](PGresult* r, std::string* message) -> Status {
        if (!read_update(r, 0, true, &u)) return corrupt_row("updates", message);
        return fn(u);
      },
      error);
}

Status PostgresStorage::for_each_update(uint64_t round_id,
                                        const std::function<Status(const UpdateRecord&)>& fn,
                                        std::string* error) {
  if (!fn) return invalid_argument(error, "for_each_update: no callback");
  if (!fits_i64(round_id)) return invalid_argument(error, "for_each_update: round id out of range");
  Params p;
  p.u64(round_id);
  return each_update(kEachUpdateSql, p, fn, error);
}

Status PostgresStorage::for_each_update_of(uint64_t round_id, const std::string& aggregator,
                                           const std::function<Status(const UpdateRecord&)>& fn,
                                           std::string* error) {
  if (!fn) return invalid_argument(error, "for_each_update_of: no callback");
  if (!fits_i64(round_id)) return invalid_argument(error, "for_each_update_of: round id out of range");
  Params p;
  p.u64(round_id).text(aggregator);
  return each_update(kEachUpdateOfSql, p, fn, error);
}

Status PostgresStorage::ledger_shares(uint64_t round_id, std::vector<LedgerShare>* out, std::string* error) {
  if (out == nullptr) return invalid_argument(error, "ledger_shares: null output");
  if (!fits_i64(round_id)) return invalid_argument(error, "ledger_shares: round id out of range");
  return with_retry(
      [&](const Attempt&, std::string* message) -> Status {
        Params p;
        p.u64(round_id);
        Result r;
        EDGEFL_RETURN_IF_ERROR(
            query("count updates by aggregator",
                  "SELECT aggregator, count(*)::bigint, coalesce(sum(payload_bytes), 0)::bigint, "
                  "coalesce(sum(sample_count), 0)::bigint, "
                  "(coalesce(sum(sequence), 0) % 4611686018427387904)::bigint "
                  "FROM updates WHERE round_id = $1 GROUP BY aggregator ORDER BY aggregator",
                  p, &r, message));
        std::vector<LedgerShare> shares(size_t(r.rows()));
        for (int i = 0; i < r.rows(); ++i) {
          LedgerShare& share = shares[size_t(i)];
          if (!column_text(r.get(), i, 0, &share.aggregator) || !column_u64(r.get(), i, 1, &share.updates) ||
              !column_u64(r.get(), i, 2, &share.payload_bytes) ||
              !column_u64(r.get(), i, 3, &share.samples) || !column_u64(r.get(), i, 4, &share.sequence_sum))
            return corrupt_row("updates", message);
        }
        *out = std::move(shares);
        return Status::kOk;
      },
      error);
}

Status PostgresStorage::put_partial_sum(const PartialSum& sum, std::string* error) {
  EDGEFL_RETURN_IF_ERROR(check_new_partial_sum(sum, error));
  return with_retry(
      [&](const Attempt&, std::string* message) -> Status {
        // An upsert: a retry after a COMMIT in doubt writes the same row again.
        Transaction txn(this);
        EDGEFL_RETURN_IF_ERROR(txn.begin(message));
        std::optional<RoundRecord> round;
        EDGEFL_RETURN_IF_ERROR(select_round(kLockRoundShareSql, sum.round_id, &round, message));
        if (!round || round->state != RoundState::kOpen || !round->sealed) {
          return invalid_argument(
              message, "put_partial_sum: round " + std::to_string(sum.round_id) + " is not open and sealed");
        }
        Params p;
        p.u64(sum.round_id)
            .text(sum.aggregator)
            .u64(sum.updates)
            .bytes(sum.state.data(), sum.state.size())
            .u64(sum.sequence_sum);
        EDGEFL_RETURN_IF_ERROR(command(
            "store partial sum",
            "INSERT INTO partial_sums (round_id, aggregator, updates, state, sequence_sum) "
            "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (round_id, aggregator) DO UPDATE "
            "SET updates = excluded.updates, state = excluded.state, sequence_sum = excluded.sequence_sum",
            p, message));
        return txn.commit(message);
      },
      error);
}

Status PostgresStorage::for_each_partial_sum(uint64_t round_id, bool with_state,
                                             const std::function<Status(const PartialSum&)>& fn,
                                             std::string* error) {
  if (!fn) return invalid_argument(error, "for_each_partial_sum: no callback");
  if (!fits_i64(round_id)) return invalid_argument(error, "for_each_partial_sum: round id out of range");
  PartialSum sum;
  sum.round_id = round_id;
  Params p;
  p.u64(round_id);
  return each_row_once(
      "select partial sums",
      with_state ? "SELECT aggregator, updates, sequence_sum, state FROM partial_sums WHERE round_id = $1 "
                   "ORDER BY aggregator"
                 : "SELECT aggregator, updates, sequence_sum FROM partial_sums WHERE round_id = $1 "
                   "ORDER BY aggregator",
      p,
      [&](PGresult* r, std::string* message) -> Status {
        if (!column_text(r, 0, 0, &sum.aggregator) || !column_u64(r, 0, 1, &sum.updates) ||
            !column_u64(r, 0, 2, &sum.sequence_sum) || (with_state && !column_bytes(r, 0, 3, &sum.state))) {
          return corrupt_row("partial_sums", message);
        }
        return fn(sum);
      },
      error);
}

Status PostgresStorage::append_round_event(const RoundEvent& event, std::string* error) {
  EDGEFL_RETURN_IF_ERROR(check_new_event(event, error));
  uint64_t inserted = 0;  // the sequence an attempt that reached COMMIT was given
  return with_retry(
      [&](const Attempt& attempt, std::string* message) -> Status {
        Transaction txn(this);
        EDGEFL_RETURN_IF_ERROR(txn.begin(message));
        Result r;
        if (attempt.commit_in_doubt && inserted != 0) {
          Params seq;
          seq.u64(inserted);
          EDGEFL_RETURN_IF_ERROR(query("select round event", "SELECT 1 FROM round_events WHERE sequence = $1",
                                       seq, &r, message));
          if (r.rows() == 1) return Status::kOk;  // the previous attempt's commit took effect
        }
        std::optional<RoundRecord> round;
        EDGEFL_RETURN_IF_ERROR(select_round(kLockRoundShareSql, event.round_id, &round, message));
        if (!round || round->state != RoundState::kOpen) {
          return invalid_argument(
              message, "append_round_event: round " + std::to_string(event.round_id) + " is not open");
        }
        Params p;
        p.u64(event.round_id)
            .text(event.device_id)
            .i64(int64_t(event.kind))
            .i64(event.unix_ms)
            .bytes(event.payload.data(), event.payload.size());
        EDGEFL_RETURN_IF_ERROR(query("insert round event",
                                     "INSERT INTO round_events (round_id, device_id, kind, unix_ms, payload) "
                                     "VALUES ($1, $2, $3, $4, $5) RETURNING sequence",
                                     p, &r, message));
        if (r.rows() != 1 || !column_u64(r.get(), 0, 0, &inserted))
          return corrupt_row("round_events", message);
        return txn.commit(message);  // durable from here on
      },
      error);
}

Status PostgresStorage::for_each_round_event(uint64_t round_id,
                                             const std::function<Status(const RoundEvent&)>& fn,
                                             std::string* error) {
  if (!fn) return invalid_argument(error, "for_each_round_event: no callback");
  if (!fits_i64(round_id)) return invalid_argument(error, "for_each_round_event: round id out of range");
  RoundEvent e;
  e.round_id = round_id;
  Params p;
  p.u64(round_id);
  return each_row_once(
      "select round events",
      "SELECT sequence, device_id, kind, unix_ms, payload FROM round_events WHERE round_id = $1 "
      "ORDER BY sequence",
      p,
      [&](PGresult* r, std::string* message) -> Status {
        if (!column_u64(r, 0, 0, &e.sequence) || !column_text(r, 0, 1, &e.device_id) ||
            !column_u32(r, 0, 2, &e.kind) || !column_i64(r, 0, 3, &e.unix_ms) ||
            !column_bytes(r, 0, 4, &e.payload)) {
          return corrupt_row("round_events", message);
        }
        return fn(e);
      },
      error);
}

Status PostgresStorage::record_model(const ModelRecord& model, std::string* error) {
  EDGEFL_RETURN_IF_ERROR(check_new_model(model, error));
  return with_retry(
      [&](const Attempt& attempt, std::string* message) -> Status {
        Transaction txn(this);
        EDGEFL_RETURN_IF_ERROR(txn.begin(message));
        EDGEFL_RETURN_IF_ERROR(check_fence("record_model", message));
        // One writer of versions at a time: "above every recorded version" holds at commit.
        EDGEFL_RETURN_IF_ERROR(simple("LOCK TABLE models IN SHARE ROW EXCLUSIVE MODE", message));
        Result r;
        EDGEFL_RETURN_IF_ERROR(query("select model", kLatestModelSql, Params(), &r, message));
        if (r.rows() == 1) {
          ModelRecord latest;
          if (!read_model(r.get(), 0, &latest)) return corrupt_row("models", message);
          if (attempt.commit_in_doubt && latest.version == model.version && latest.digest == model.digest &&
              latest.path == model.path) {
            return Status::kOk;  // the previous attempt's commit took effect
          }
          if (model.version <= latest.version) {
            return invalid_argument(message, "record_model: version " + std::to_string(model.version) +
                                                 " is not above " + std::to_string(latest.version));
          }
        }
        if (model.round_id != 0) {
          std::optional<RoundRecord> round;
          EDGEFL_RETURN_IF_ERROR(select_round(kLockRoundShareSql, model.round_id, &round, message));
          if (!round || round->state != RoundState::kOpen) {
            return invalid_argument(message,
                                    "record_model: round " + std::to_string(model.round_id) + " is not open");
          }
        }
        Params p;
        p.u64(model.version)
            .u64(model.round_id)
            .text(model.path)
            .bytes(model.digest.data(), model.digest.size())
            .u64(model.bytes)
            .i64(model.created_unix_ms);
        EDGEFL_RETURN_IF_ERROR(
            command("insert model",
                    "INSERT INTO models (version, round_id, path, digest, bytes, created_unix_ms) "
                    "VALUES ($1, $2, $3, $4, $5, $6)",
                    p, message));
        return txn.commit(message);
      },
      error);
}

Status PostgresStorage::latest_model(std::optional<ModelRecord>* out, std::string* error) {
  if (out == nullptr) return invalid_argument(error, "latest_model: null output");
  return with_retry(
      [&](const Attempt&, std::string* message) -> Status {
        Result r;
        EDGEFL_RETURN_IF_ERROR(query("select model", kLatestModelSql, Params(), &r, message));
        if (r.rows() == 0) {
          out->reset();
          return Status::kOk;
        }
        ModelRecord m;
        if (!read_model(r.get(), 0, &m)) return corrupt_row("models", message);
        *out = std::move(m);
        return Status::kOk;
      },
      error);
}

Status PostgresStorage::put_setting(const std::string& key, const std::string& value, std::string* error) {
  if (key.empty()) return invalid_argument(error, "put_setting: empty key");
  return with_retry(
      [&](const Attempt&, std::string* message) -> Status {
        Params p;
        p.text(key).text(value);
        // One statement, its own transaction; an upsert, so running it again after a COMMIT in
        // doubt is harmless.
        return command("put setting",
                       "INSERT INTO settings (key, value) VALUES ($1, $2) "
                       "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                       p, message);
      },
      error);
}

Status PostgresStorage::get_setting(const std::string& key, std::optional<std::string>* value,
                                    std::string* error) {
  if (value == nullptr) return invalid_argument(error, "get_setting: null output");
  return with_retry(
      [&](const Attempt&, std::string* message) -> Status {
        Params p;
        p.text(key);
        Result r;
        EDGEFL_RETURN_IF_ERROR(
            query("get setting", "SELECT value FROM settings WHERE key = $1", p, &r, message));
        if (r.rows() == 0) {
          value->reset();
          return Status::kOk;
        }
        std::string v;
        if (!column_text(r.get(), 0, 0, &v)) return corrupt_row("settings", message);
        *value = std::move(v);
        return Status::kOk;
      },
      error);
}

#undef EDGEFL_ROUND_COLUMNS
#undef EDGEFL_UPDATE_COLUMNS

Status PostgresStorage::acquire_lease(const std::string& holder, uint32_t ttl_ms, int64_t /*now_ms*/,
                                      Lease* out, std::string* error) {
  if (holder.empty() || ttl_ms == 0 || out == nullptr)
    return invalid_argument(error, "acquire_lease: empty holder, zero ttl or null output");
  return with_retry(
      [&](const Attempt&, std::string* message) -> Status {
        // The row is share-locked by the coordinator's fenced writes until they commit: a renewal
        // waits at most 1 s for them (it runs on a server's event loop), then fails and is tried
        // again at the next renewal.
        Transaction txn(this);
        EDGEFL_RETURN_IF_ERROR(begin_lease_transaction(&txn, message));
        // Taken when free, expired or already the caller's; a change of hands is a new epoch. One statement:
        // concurrent callers serialise on the row.
        Params p;
        p.text(holder).i64(int64_t{ttl_ms});
        EDGEFL_RETURN_IF_ERROR(
            command("take the coordinator lease",
                    "INSERT INTO coordinator_lease AS l (id, holder, epoch, expires_unix_ms) "
                    "VALUES (1, $1, 1, " EDGEFL_PG_NOW_MS " + $2) "
                    "ON CONFLICT (id) DO UPDATE SET "
                    "epoch = CASE WHEN l.holder = EXCLUDED.holder THEN l.epoch ELSE l.epoch + 1 END, "
                    "holder = EXCLUDED.holder, expires_unix_ms = EXCLUDED.expires_unix_ms "
                    "WHERE l.holder = EXCLUDED.holder OR l.expires_unix_ms <= " EDGEFL_PG_NOW_MS,
                    p, message));
        Result r;
        EDGEFL_RETURN_IF_ERROR(
            query("read the coordinator lease",
                  "SELECT holder, epoch, expires_unix_ms FROM coordinator_lease WHERE id = 1", Params(), &r,
                  message));
        Lease lease;
        if (r.rows() != 1 || !column_text(r.get(), 0, 0, &lease.holder) ||
            !column_u64(r.get(), 0, 1, &lease.epoch) || !column_i64(r.get(), 0, 2, &lease.expires_unix_ms)) {
          return corrupt_row("coordinator_lease", message);
        }
        EDGEFL_RETURN_IF_ERROR(txn.commit(message));
        lease.held = lease.holder == holder;
        *out = lease;
        return Status::kOk;
      },
      error);
}

Status PostgresStorage::list_settings(const std::string& prefix,
                                      std::vector<std::pair<std::string, std::string>>* out,
                                      std::string* error) {
  if (out == nullptr) return invalid_argument(error, "list_settings: null output");
  return with_retry(
      [&](const Attempt&, std::string* message) -> Status {
        Params p;
        p.text(prefix);
        Result r;
        EDGEFL_RETURN_IF_ERROR(query("list settings",
                                     "SELECT key, value FROM settings WHERE left(key, length($1)) = $1 "
                                     "ORDER BY key COLLATE \"C\"",
                                     p, &r, message));
        std::vector<std::pair<std::string, std::string>> rows(size_t(r.rows()));
        for (int i = 0; i < r.rows(); ++i) {
          if (!column_text(r.get(), i, 0, &rows[size_t(i)].first) ||
              !column_text(r.get(), i, 1, &rows[size_t(i)].second))
            return corrupt_row("settings", message);
        }
        *out = std::move(rows);
        return Status::kOk;
      },
      error);
}

Status PostgresStorage::release_lease(const std::string& holder, std::string* error) {
  return with_retry(
      [&](const Attempt&, std::string* message) -> Status {
        Transaction txn(this);
        EDGEFL_RETURN_IF_ERROR(begin_lease_transaction(&txn, message));
        // Whoever takes it next, even `holder`, starts a new epoch: the holder is renamed.
        Params p;
        p.text(holder);
        EDGEFL_RETURN_IF_ERROR(
            command("release the coordinator lease",
                    "UPDATE coordinator_lease SET expires_unix_ms = LEAST(expires_unix_ms, " EDGEFL_PG_NOW_MS
                    "), holder = holder || ' (released)' WHERE holder = $1",
                    p, message));
        return txn.commit(message);
      },
      error);
}

Status PostgresStorage::set_fence(const std::string& holder, uint64_t epoch, std::string* error) {
  if (!fits_i64(epoch)) return invalid_argument(error, "set_fence: epoch out of range");
  std::unique_lock<std::mutex> lock;
  EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
  fence_holder_ = holder;
  fence_epoch_ = holder.empty() ? 0 : epoch;
  return Status::kOk;
}

Status PostgresStorage::seal_round(uint64_t round_id, std::string* error) {
  if (!fits_i64(round_id)) return invalid_argument(error, "seal_round: round id out of range");
  return with_retry(
      [&](const Attempt&, std::string* message) -> Status {
        Transaction txn(this);
        EDGEFL_RETURN_IF_ERROR(txn.begin(message));
        EDGEFL_RETURN_IF_ERROR(check_fence("seal_round", message));
        // FOR UPDATE waits for every record_update holding the row FOR SHARE: those commit first
        // (and are in the ledger), the ones after see the seal.
        std::optional<RoundRecord> round;
        EDGEFL_RETURN_IF_ERROR(select_round(kLockRoundUpdateSql, round_id, &round, message));
        if (!round || round->state != RoundState::kOpen)
          return invalid_argument(message, "seal_round: round " + std::to_string(round_id) + " is not open");
        if (round->sealed) return Status::kOk;  // sealed already (or by an attempt whose commit was in doubt)
        Params p;
        p.u64(round_id);
        EDGEFL_RETURN_IF_ERROR(
            command("seal round", "UPDATE rounds SET sealed = true WHERE round_id = $1", p, message));
        return txn.commit(message);
      },
      error);
}

}  // namespace

Status open_postgres_storage(const std::string& conninfo, std::unique_ptr<Storage>* out, std::string* error) {
  if (out == nullptr || conninfo.empty() || conninfo.find('\0') != std::string::npos) {
    return invalid_argument(error, "open_postgres_storage: null output or empty connection string");
  }
  auto storage = std::make_unique<PostgresStorage>(conninfo);
  EDGEFL_RETURN_IF_ERROR(storage->init(error));
  *out = std::move(storage);
  return Status::kOk;
}

}  // namespace server
}  // namespace edgefl
