// postgres_storage.h: Storage (storage.h) in a PostgreSQL database, through libpq.
//
// The same promises as SQLite (sqlite_storage.h), on a database server that several edgefl-server
// processes can share:
//  * Durability: every session runs with synchronous_commit = on (set, then read back), and a
//    server with fsync = off is refused at open: a write method returns kOk only after its COMMIT
//    returned, that is after the commit record reached the server's stable storage.
//  * Transactions: each write is one transaction; a failed one rolls back completely. Row locks
//    order a device's update against the round's close: record_update() and
//    append_round_event() hold the round's row FOR SHARE, close_round() takes it FOR UPDATE, so an
//    update is either in the ledger before the close counts it or refused as "round closed".
//  * Schema: created on first open and migrated by version (table edgefl_schema: version,
//    application "edgefl"), under a transaction-scoped advisory lock so that aggregators starting
//    together do not race. A database whose schema is newer is refused with kUnsupportedVersion;
//    a database that holds other tables and no edgefl_schema with kIoError (not ours).
//  * Connection loss: a call that finds the connection broken, or loses it, reconnects and runs
//    its transaction again, up to kPostgresAttempts times with doubling waits (50 ms first);
//    then kIoError, and the next call tries again. When the connection drops during COMMIT, the
//    outcome is unknown: the retry reads what is stored and reports the first attempt's result
//    when it took effect (the same upload id in the ledger, the same round, model, event), so
//    nothing is acknowledged without its commit and nothing is written twice.
//  * A database that does not answer: connecting gives up after 5 s, TCP keepalives and
//    tcp_user_timeout notice a silent peer within about 11 s, a statement ends after 60 s and a
//    lock wait after 10 s (statement_timeout, lock_timeout; each unless the connection string or
//    the database's settings chose another value): the call fails, and the caller retries later.
//  * Data the database refuses (text that is not UTF-8, a NUL byte in a device id) is
//    kInvalidArgument; other server errors are kIoError with the message and SQLSTATE.
//
// The connection string is libpq's: a URI (postgresql://user@host:port/db?sslmode=...) or
// key=value pairs. Error messages never include it (it may hold a password).
//
// Threads: as SQLite, every method takes an internal mutex (one connection per object); a
// callback of for_each_update / for_each_round_event must not call back into the object
// (kInvalidArgument). Rows are streamed one at a time (libpq's single-row mode), so iterating a
// round holds one payload in memory, not the round's.
#ifndef EDGEFL_SERVER_POSTGRES_STORAGE_H_
#define EDGEFL_SERVER_POSTGRES_STORAGE_H_

#include <memory>
#include <string>

#include "storage.h"

namespace edgefl {
namespace server {

// The schema version this build writes and reads (edgefl_schema.version).
constexpr int kPostgresSchemaVersion = 3;
// Attempts of one call when the connection is lost (waits 50, 100, 200, 400 ms between them).
constexpr int kPostgresAttempts = 5;

// True when this build has PostgreSQL storage (libpq found at configure time).
bool postgres_storage_available();

// True for a --state value that names a PostgreSQL database: "postgresql://..." or
// "postgres://...".
bool is_postgres_url(const std::string& state);

// Connects to `conninfo`, checks the server's durability settings and creates or migrates the
// schema. On kOk *out owns the connection; otherwise *out is unchanged and *error says why.
// kInvalidArgument: null out or empty conninfo; kIoError: no connection, fsync off, not an edgefl
// database, a failed statement, or a build without libpq (the message says so);
// kUnsupportedVersion: a newer schema.
Status open_postgres_storage(const std::string& conninfo, std::unique_ptr<Storage>* out, std::string* error);

}  // namespace server
}  // namespace edgefl

#endif  // EDGEFL_SERVER_POSTGRES_STORAGE_H_
