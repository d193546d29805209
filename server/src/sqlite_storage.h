// sqlite_storage.h: Storage (storage.h) in one SQLite database file.
//
// Durability: journal_mode=WAL (checked after setting it: a database that cannot use WAL, e.g. on
// a file system without shared memory, is refused), synchronous=FULL (every commit syncs the WAL
// before COMMIT returns), so a write method that returned kOk survives a process crash and a
// power loss (as far as fsync is honoured by the disk). Writes run in BEGIN IMMEDIATE
// transactions; a failed write rolls back completely.
//
// Schema (PRAGMA user_version = 1, application_id = 0x45444C46 "EDLF"; see sqlite_storage.cpp for
// the DDL): rounds, updates (UNIQUE (round_id, device_id); payload NULL after the round closed),
// models, settings. A database of a newer schema version is refused with kUnsupportedVersion; a
// file that is not an edgefl database (another application's, or not SQLite) with kIoError.
//
// Threads: every method takes an internal mutex, so the object may be shared between threads;
// calls are serialised. A callback of for_each_update must not call back into the same object
// (kInvalidArgument). Two processes on one database stay consistent (SQLite locking,
// busy_timeout 5 s) but the server is meant to be the only writer.
//
// After close_round the payloads' pages go to SQLite's free list and are reused by later rounds;
// the file does not shrink.
#ifndef EDGEFL_SERVER_SQLITE_STORAGE_H_
#define EDGEFL_SERVER_SQLITE_STORAGE_H_

#include <memory>
#include <string>

#include "storage.h"

namespace edgefl {
namespace server {

// The schema version this build writes and reads (PRAGMA user_version).
constexpr int kSqliteSchemaVersion = 2;

// Opens (creating it and its schema if absent) the database at `db_path`. On kOk *out owns it;
// otherwise *out is unchanged and *error (if non-null) says why. kInvalidArgument: null out or
// empty path; kIoError: SQLite could not open, configure or read the file; kUnsupportedVersion:
// the schema is newer than kSqliteSchemaVersion.
Status open_sqlite_storage(const std::string& db_path, std::unique_ptr<Storage>* out, std::string* error);

}  // namespace server
}  // namespace edgefl

#endif  // EDGEFL_SERVER_SQLITE_STORAGE_H_
