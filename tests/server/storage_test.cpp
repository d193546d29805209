// storage_test.cpp: Storage over SQLite (server/src/sqlite_storage.h) and PostgreSQL
// (postgres_storage.h): WAL and full sync, an acknowledged update surviving a killed process, the
// ledger's rules (one update per device per round, duplicates change nothing, closed rounds refuse
// updates, close drops payloads only), reopening, and stores that are not ours.
//
// The ledger's cases run over SQLite and MemoryStorage (ctest server.storage), or over PostgreSQL
// when EDGEFL_TEST_POSTGRES_DIR names a running private cluster (tests/support/postgres_cluster.sh;
// ctest server.storage.postgresql starts one), together with suite server.storage.postgresql.
#include <doctest/doctest.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "memory_storage.h"
#if EDGEFL_HAVE_POSTGRESQL
#include "support/postgres_test.h"
#endif
#include "postgres_storage.h"
#include "sqlite_storage.h"
#include "storage.h"

namespace edgefl {
namespace server {
namespace {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const char* base = getenv("TMPDIR");
    std::string pattern =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/edgefl_storage_XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    REQUIRE(mkdtemp(buf.data()) != nullptr);
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The ledger's rules hold for every Storage: the cases marked STORAGE_BACKENDS() run once over
// SQLite and once over MemoryStorage (memory_storage.h), which the round-logic tests use, or over
// PostgreSQL in the PostgreSQL run; DURABLE_BACKENDS() cases over SQLite or PostgreSQL.
enum class Backend { kSqlite, kMemory, kPostgres };
Backend g_backend = Backend::kSqlite;

// The private cluster's directory in the PostgreSQL run (its connection string is DIR/conninfo);
// "" otherwise.
std::string postgres_dir() {
#if EDGEFL_HAVE_POSTGRESQL
  return testing::postgres_dir();
#else
  return "";
#endif
}
bool postgres_run() {
  return !postgres_dir().empty();
}

#define STORAGE_BACKENDS()          \
  if (postgres_run()) {             \
    g_backend = Backend::kPostgres; \
  } else {                          \
    SUBCASE("sqlite") {             \
      g_backend = Backend::kSqlite; \
    }                               \
    SUBCASE("memory") {             \
      g_backend = Backend::kMemory; \
    }                               \
  }
#define DURABLE_BACKENDS() g_backend = postgres_run() ? Backend::kPostgres : Backend::kSqlite

std::unique_ptr<Storage> open_db(const std::string& path) {
  std::unique_ptr<Storage> s;
  std::string error;
  const Status st = open_sqlite_storage(path, &s, &error);
  INFO(error);
  REQUIRE(st == Status::kOk);
  REQUIRE(s != nullptr);
  return s;
}

#if EDGEFL_HAVE_POSTGRESQL
using testing::pg_query;
using testing::postgres_conninfo;
using testing::postgres_db_for;

Status open_postgres_for(const std::string& path, std::unique_ptr<Storage>* out, std::string* error) {
  return open_postgres_storage(postgres_conninfo(postgres_db_for(path)), out, error);
}

std::unique_ptr<Storage> open_postgres(const std::string& path) {
  std::unique_ptr<Storage> s;
  std::string error;
  const Status st = open_postgres_for(path, &s, &error);
  INFO(error);
  REQUIRE(st == Status::kOk);
  REQUIRE(s != nullptr);
  return s;
}

#else
// A build without libpq has no PostgreSQL run (postgres_run() is false there).
std::unique_ptr<Storage> open_postgres(const std::string&) {
  FAIL("this build has no PostgreSQL storage");
  return nullptr;
}
std::string postgres_conninfo(const std::string& = "") {
  FAIL("this build has no PostgreSQL storage");
  return "";
}
std::string postgres_db_for(const std::string&) {
  FAIL("this build has no PostgreSQL storage");
  return "";
}
std::string pg_query(const std::string&, const std::string&) {
  FAIL("this build has no PostgreSQL storage");
  return "";
}
#endif

// The store of the STORAGE_BACKENDS() / DURABLE_BACKENDS() case under way.
std::unique_ptr<Storage> open_backend(const std::string& path) {
  switch (g_backend) {
    case Backend::kMemory: return make_memory_storage();
    case Backend::kPostgres: return open_postgres(path);
    case Backend::kSqlite: break;
  }
  return open_db(path);
}

std::string raw_query(const std::string& path, const char* sql);

// One value of `sql`, read past the Storage (SQLite or PostgreSQL backend).
std::string backend_query(const std::string& path, const char* sql) {
  return g_backend == Backend::kPostgres ? pg_query(postgres_db_for(path), sql) : raw_query(path, sql);
}

RoundRecord make_round(uint64_t id, uint64_t base_version = 1) {
  RoundRecord r;
  r.round_id = id;
  r.nonce.assign(32, uint8_t(id));
  r.base_model_version = base_version;
  r.opened_unix_ms = 1'700'000'000'000 + int64_t(id);
  r.deadline_unix_ms = r.opened_unix_ms + 60'000;
  return r;
}

UpdateRecord make_update(uint64_t round, const std::string& device, uint8_t upload,
                         size_t payload_size = 100) {
  UpdateRecord u;
  u.round_id = round;
  u.device_id = device;
  u.upload_id.fill(upload);
  u.sample_count = 32 + upload;
  u.payload.resize(payload_size);
  for (size_t i = 0; i < payload_size; ++i) u.payload[i] = uint8_t(i * 7 + upload + device.size());
  u.payload_bytes = payload_size;
  for (size_t i = 0; i < u.digest.size(); ++i) u.digest[i] = uint8_t(i ^ upload);
  u.accepted_unix_ms = 1'700'000'001'000 + upload;
  return u;
}

void create(Storage& s, const RoundRecord& r) {
  std::string error;
  const Status st = s.create_round(r, &error);
  INFO(error);
  REQUIRE(st == Status::kOk);
}

InsertResult record(Storage& s, const UpdateRecord& u, uint64_t* sequence = nullptr) {
  InsertResult result{};
  std::string error;
  const Status st = s.record_update(u, &result, sequence, &error);
  INFO(error);
  REQUIRE(st == Status::kOk);
  return result;
}

uint64_t count(Storage& s, uint64_t round) {
  uint64_t n = 999;
  REQUIRE(s.count_updates(round, &n, nullptr) == Status::kOk);
  return n;
}

std::vector<PartialSum> partial_sums(Storage& s, uint64_t round, bool with_state) {
  std::vector<PartialSum> out;
  std::string error;
  const Status st = s.for_each_partial_sum(
      round, with_state,
      [&](const PartialSum& p) {
        out.push_back(p);
        return Status::kOk;
      },
      &error);
  INFO(error);
  REQUIRE(st == Status::kOk);
  return out;
}

std::vector<UpdateRecord> all_updates(Storage& s, uint64_t round) {
  std::vector<UpdateRecord> out;
  std::string error;
  const Status st = s.for_each_update(
      round,
      [&](const UpdateRecord& u) {
        out.push_back(u);
        return Status::kOk;
      },
      &error);
  INFO(error);
  REQUIRE(st == Status::kOk);
  return out;
}

void record_model_for(Storage& s, uint64_t version, uint64_t round) {
  ModelRecord m;
  m.version = version;
  m.round_id = round;
  m.path = "model-" + std::to_string(version) + ".safetensors";
  m.digest.fill(uint8_t(version));
  m.bytes = 1000 + version;
  m.created_unix_ms = 1'700'000'002'000;
  std::string error;
  const Status st = s.record_model(m, &error);
  INFO(error);
  REQUIRE(st == Status::kOk);
}

// One value of a pragma or query, read through a separate raw connection.
std::string raw_query(const std::string& path, const char* sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr) == SQLITE_OK);
  std::string value;
  if (sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_text(stmt, 0) != nullptr) {
    value = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return value;
}

// --- a VFS shim that counts xSync calls, to see that commits reach the disk -------------------

struct CountingFile {
  sqlite3_file base;
  sqlite3_file* real;  // the default VFS's file, allocated right after this struct
  bool wal;
};
sqlite3_vfs* g_real_vfs = nullptr;
sqlite3_vfs g_counting_vfs;
sqlite3_io_methods g_counting_methods;
std::atomic<int> g_wal_syncs{0};
std::atomic<int> g_db_syncs{0};

sqlite3_file* real_of(sqlite3_file* f) {
  return reinterpret_cast<CountingFile*>(f)->real;
}
int c_close(sqlite3_file* f) {
  return real_of(f)->pMethods->xClose(real_of(f));
}
int c_read(sqlite3_file* f, void* p, int n, sqlite3_int64 off) {
  return real_of(f)->pMethods->xRead(real_of(f), p, n, off);
}
int c_write(sqlite3_file* f, const void* p, int n, sqlite3_int64 off) {
  return real_of(f)->pMethods->xWrite(real_of(f), p, n, off);
}
int c_truncate(sqlite3_file* f, sqlite3_int64 size) {
  return real_of(f)->pMethods->xTruncate(real_of(f), size);
}
int c_sync(sqlite3_file* f, int flags) {
  (reinterpret_cast<CountingFile*>(f)->wal ? g_wal_syncs : g_db_syncs)++;
  return real_of(f)->pMethods->xSync(real_of(f), flags);
}
int c_file_size(sqlite3_file* f, sqlite3_int64* size) {
  return real_of(f)->pMethods->xFileSize(real_of(f), size);
}
int c_lock(sqlite3_file* f, int level) {
  return real_of(f)->pMethods->xLock(real_of(f), level);
}
int c_unlock(sqlite3_file* f, int level) {
  return real_of(f)->pMethods->xUnlock(real_of(f), level);
}
int c_check_reserved(sqlite3_file* f, int* out) {
  return real_of(f)->pMethods->xCheckReservedLock(real_of(f), out);
}
int c_file_control(sqlite3_file* f, int op, void* arg) {
  return real_of(f)->pMethods->xFileControl(real_of(f), op, arg);
}
int c_sector_size(sqlite3_file* f) {
  return real_of(f)->pMethods->xSectorSize(real_of(f));
}
int c_device_characteristics(sqlite3_file* f) {
  return real_of(f)->pMethods->xDeviceCharacteristics(real_of(f));
}
int c_shm_map(sqlite3_file* f, int page, int size, int extend, void volatile** p) {
  return real_of(f)->pMethods->xShmMap(real_of(f), page, size, extend, p);
}
int c_shm_lock(sqlite3_file* f, int offset, int n, int flags) {
  return real_of(f)->pMethods->xShmLock(real_of(f), offset, n, flags);
}
void c_shm_barrier(sqlite3_file* f) {
  real_of(f)->pMethods->xShmBarrier(real_of(f));
}
int c_shm_unmap(sqlite3_file* f, int del) {
  return real_of(f)->pMethods->xShmUnmap(real_of(f), del);
}
int c_fetch(sqlite3_file* f, sqlite3_int64 off, int n, void** p) {
  return real_of(f)->pMethods->xFetch(real_of(f), off, n, p);
}
int c_unfetch(sqlite3_file* f, sqlite3_int64 off, void* p) {
  return real_of(f)->pMethods->xUnfetch(real_of(f), off, p);
}

int c_open(sqlite3_vfs*, sqlite3_filename name, sqlite3_file* f, int flags, int* out_flags) {
  CountingFile* c = reinterpret_cast<CountingFile*>(f);
  c->real = reinterpret_cast<sqlite3_file*>(c + 1);
  c->wal = (flags & SQLITE_OPEN_WAL) != 0;
  c->base.pMethods = nullptr;
  const int rc = g_real_vfs->xOpen(g_real_vfs, name, c->real, flags, out_flags);
  if (c->real->pMethods != nullptr) {
    if (g_counting_methods.iVersion == 0) g_counting_methods.iVersion = c->real->pMethods->iVersion;
    c->base.pMethods = &g_counting_methods;  // forwards xClose even when xOpen failed
  }
  return rc;
}

// Makes the counting VFS the default while alive.
class CountingVfs {
 public:
  CountingVfs() {
    g_real_vfs = sqlite3_vfs_find(nullptr);
    REQUIRE(g_real_vfs != nullptr);
    g_counting_methods = sqlite3_io_methods{0,
                                            c_close,
                                            c_read,
                                            c_write,
                                            c_truncate,
                                            c_sync,
                                            c_file_size,
                                            c_lock,
                                            c_unlock,
                                            c_check_reserved,
                                            c_file_control,
                                            c_sector_size,
                                            c_device_characteristics,
                                            c_shm_map,
                                            c_shm_lock,
                                            c_shm_barrier,
                                            c_shm_unmap,
                                            c_fetch,
                                            c_unfetch};
    g_counting_vfs = *g_real_vfs;
    g_counting_vfs.szOsFile = int(sizeof(CountingFile)) + g_real_vfs->szOsFile;
    g_counting_vfs.zName = "edgefl-counting";
    g_counting_vfs.pNext = nullptr;
    g_counting_vfs.xOpen = c_open;
    REQUIRE(sqlite3_vfs_register(&g_counting_vfs, 1) == SQLITE_OK);
  }
  ~CountingVfs() { sqlite3_vfs_unregister(&g_counting_vfs); }
};

static_assert(sizeof(CountingFile) % 8 == 0, "the real file after it stays aligned");

}  // namespace

TEST_SUITE("server.storage") {
  TEST_CASE("a new database uses WAL, the current schema version, and starts empty") {
    TempDir dir;
    const std::string path = dir.file("state.db");
    {
      auto s = open_db(path);
      std::optional<RoundRecord> open;
      REQUIRE(s->open_round(&open, nullptr) == Status::kOk);
      CHECK(!open.has_value());
      uint64_t last = 99;
      REQUIRE(s->last_round_id(&last, nullptr) == Status::kOk);
      CHECK(last == 0);
      std::optional<ModelRecord> model;
      REQUIRE(s->latest_model(&model, nullptr) == Status::kOk);
      CHECK(!model.has_value());
      // journal_mode=WAL is stored in the file: another connection sees it.
      CHECK(raw_query(path, "PRAGMA journal_mode") == "wal");
    }
    CHECK(raw_query(path, "PRAGMA user_version") == std::to_string(kSqliteSchemaVersion));
    CHECK(raw_query(path, "PRAGMA application_id") == "1162103878");
    CHECK(std::string(round_state_name(RoundState::kOpen)) == "open");
    CHECK(std::string(round_state_name(RoundState::kCommitted)) == "committed");
    CHECK(std::string(round_state_name(RoundState::kAbandoned)) == "abandoned");
  }

  TEST_CASE("record_update syncs the WAL before it returns; reads do not write") {
    TempDir dir;
    CountingVfs vfs;
    auto s = open_db(dir.file("state.db"));
    create(*s, make_round(1));
    g_wal_syncs = 0;
    g_db_syncs = 0;
    CHECK(record(*s, make_update(1, "dev-a", 1)) == InsertResult::kInserted);
    CHECK(g_wal_syncs.load() >= 1);  // synchronous=NORMAL would not sync the WAL on commit
    g_wal_syncs = 0;
    std::optional<UpdateRecord> found;
    REQUIRE(s->find_update(1, "dev-a", &found, nullptr) == Status::kOk);
    CHECK(found.has_value());
    CHECK(count(*s, 1) == 1);
    CHECK(g_wal_syncs.load() == 0);
    // A duplicate writes nothing either.
    CHECK(record(*s, make_update(1, "dev-a", 1)) == InsertResult::kDuplicate);
    CHECK(g_wal_syncs.load() == 0);
    REQUIRE(s->put_setting("k", "v", nullptr) == Status::kOk);
    CHECK(g_wal_syncs.load() >= 1);
    s.reset();
  }

  TEST_CASE("an acknowledged update survives its process dying right after record_update") {
    DURABLE_BACKENDS();
    for (const bool sigkill : {true, false}) {
      CAPTURE(sigkill);
      TempDir dir;
      const std::string path = dir.file("state.db");
      {
        auto s = open_backend(path);
        create(*s, make_round(7));
        CHECK(record(*s, make_update(7, "dev-before", 1)) == InsertResult::kInserted);
      }  // no connection crosses the fork
      const std::string conninfo =
          g_backend == Backend::kPostgres ? postgres_conninfo(postgres_db_for(path)) : "";
      const UpdateRecord update = make_update(7, "dev-crash", 42, 300'000);
      const pid_t child = fork();
      REQUIRE(child >= 0);
      if (child == 0) {
        std::unique_ptr<Storage> s;
        const Status opened = conninfo.empty() ? open_sqlite_storage(path, &s, nullptr)
                                               : open_postgres_storage(conninfo, &s, nullptr);
        if (opened != Status::kOk) _exit(2);
        InsertResult result{};
        if (s->record_update(update, &result, nullptr, nullptr) != Status::kOk ||
            result != InsertResult::kInserted) {
          _exit(3);
        }
        // The ack would go out here. Die without closing the database (no checkpoint).
        if (sigkill) kill(getpid(), SIGKILL);
        _exit(0);
      }
      int wstatus = 0;
      REQUIRE(waitpid(child, &wstatus, 0) == child);
      if (sigkill) {
        REQUIRE(WIFSIGNALED(wstatus));
        CHECK(WTERMSIG(wstatus) == SIGKILL);
      } else {
        REQUIRE(WIFEXITED(wstatus));
        REQUIRE(WEXITSTATUS(wstatus) == 0);
      }
      if (g_backend == Backend::kSqlite) {
        CHECK(std::filesystem::exists(path + "-wal"));  // the update lives in the WAL, not yet checkpointed
      }

      auto s = open_backend(path);
      std::optional<UpdateRecord> found;
      REQUIRE(s->find_update(7, "dev-crash", &found, nullptr) == Status::kOk);
      REQUIRE(found.has_value());
      CHECK(found->digest == update.digest);
      CHECK(found->upload_id == update.upload_id);
      CHECK(found->sample_count == update.sample_count);
      CHECK(found->payload_bytes == update.payload.size());
      CHECK(found->payload.empty());  // find_update never fills the payload
      const auto updates = all_updates(*s, 7);
      REQUIRE(updates.size() == 2);
      CHECK(updates[0].device_id == "dev-before");
      CHECK(updates[1].device_id == "dev-crash");
      CHECK(updates[1].payload == update.payload);
      CHECK(updates[1].digest == update.digest);
      CHECK(updates[1].accepted_unix_ms == update.accepted_unix_ms);
    }
  }

  TEST_CASE("a retried upload is a duplicate and changes nothing") {
    STORAGE_BACKENDS();
    TempDir dir;
    auto s = open_backend(dir.file("state.db"));
    create(*s, make_round(1));
    const UpdateRecord first = make_update(1, "dev-a", 5);
    uint64_t seq1 = 0, seq2 = 0;
    CHECK(record(*s, first, &seq1) == InsertResult::kInserted);
    CHECK(seq1 > 0);
    UpdateRecord retry = make_update(1, "dev-a", 5, 64);  // same upload id, other bytes
    retry.payload.assign(64, 0xEE);
    retry.digest.fill(0xEE);
    CHECK(record(*s, retry, &seq2) == InsertResult::kDuplicate);
    CHECK(seq2 == seq1);
    CHECK(count(*s, 1) == 1);
    const auto updates = all_updates(*s, 1);
    REQUIRE(updates.size() == 1);
    CHECK(updates[0].payload == first.payload);
    CHECK(updates[0].digest == first.digest);
    CHECK(updates[0].sequence == seq1);
  }

  TEST_CASE("a second upload from a device in the same round is a duplicate; other rounds are not") {
    STORAGE_BACKENDS();
    TempDir dir;
    auto s = open_backend(dir.file("state.db"));
    create(*s, make_round(1));
    uint64_t seq = 0;
    CHECK(record(*s, make_update(1, "dev-a", 1)) == InsertResult::kInserted);
    CHECK(record(*s, make_update(1, "dev-b", 1)) == InsertResult::kInserted);  // same upload id, other device
    CHECK(record(*s, make_update(1, "dev-a", 2), &seq) == InsertResult::kDuplicate);
    CHECK(count(*s, 1) == 2);
    std::optional<UpdateRecord> found;
    REQUIRE(s->find_update(1, "dev-a", &found, nullptr) == Status::kOk);
    REQUIRE(found.has_value());
    CHECK(found->upload_id == make_update(1, "dev-a", 1).upload_id);  // the first one stands
    CHECK(found->sequence == seq);
    REQUIRE(s->find_update(1, "dev-c", &found, nullptr) == Status::kOk);
    CHECK(!found.has_value());

    REQUIRE(s->close_round(1, RoundState::kAbandoned, 0, 5, nullptr) == Status::kOk);
    create(*s, make_round(2));
    CHECK(record(*s, make_update(2, "dev-a", 1)) == InsertResult::kInserted);
    CHECK(count(*s, 2) == 1);
  }

  TEST_CASE("updates into a closed or unknown round are refused and change nothing") {
    STORAGE_BACKENDS();
    TempDir dir;
    auto s = open_backend(dir.file("state.db"));
    InsertResult result = InsertResult::kInserted;
    std::string error;
    CHECK(s->record_update(make_update(1, "dev-a", 1), &result, nullptr, &error) == Status::kInvalidArgument);
    CHECK(error.find("no round") != std::string::npos);
    create(*s, make_round(1));
    CHECK(record(*s, make_update(1, "dev-a", 1)) == InsertResult::kInserted);
    REQUIRE(s->close_round(1, RoundState::kAbandoned, 0, 9, nullptr) == Status::kOk);
    error.clear();
    CHECK(s->record_update(make_update(1, "dev-b", 1), &result, nullptr, &error) == Status::kInvalidArgument);
    CHECK(error.find("abandoned") != std::string::npos);
    CHECK(count(*s, 1) == 1);
    // Closing twice is refused too.
    CHECK(s->close_round(1, RoundState::kAbandoned, 0, 10, nullptr) == Status::kInvalidArgument);
  }

  TEST_CASE("create_round refuses an existing id, a second open round and bad records") {
    STORAGE_BACKENDS();
    TempDir dir;
    auto s = open_backend(dir.file("state.db"));
    create(*s, make_round(3));
    std::string error;
    CHECK(s->create_round(make_round(4), &error) == Status::kInvalidArgument);
    CHECK(error.find("still open") != std::string::npos);
    CHECK(s->create_round(make_round(3), &error) == Status::kInvalidArgument);
    REQUIRE(s->close_round(3, RoundState::kAbandoned, 0, 1, nullptr) == Status::kOk);
    CHECK(s->create_round(make_round(3), &error) == Status::kInvalidArgument);
    CHECK(error.find("exists") != std::string::npos);

    RoundRecord bad = make_round(4);
    bad.nonce.resize(20);
    CHECK(s->create_round(bad, nullptr) == Status::kInvalidArgument);
    bad = make_round(4);
    bad.state = RoundState::kCommitted;
    CHECK(s->create_round(bad, nullptr) == Status::kInvalidArgument);
    bad = make_round(0);
    CHECK(s->create_round(bad, nullptr) == Status::kInvalidArgument);
    bad = make_round(uint64_t(1) << 63);
    CHECK(s->create_round(bad, nullptr) == Status::kInvalidArgument);

    RoundRecord good = make_round(4);
    good.nonce.resize(16);
    create(*s, good);
    std::optional<RoundRecord> open;
    REQUIRE(s->open_round(&open, nullptr) == Status::kOk);
    REQUIRE(open.has_value());
    CHECK(open->round_id == 4);
    CHECK(open->nonce == good.nonce);
    CHECK(open->base_model_version == good.base_model_version);
    CHECK(open->opened_unix_ms == good.opened_unix_ms);
    CHECK(open->deadline_unix_ms == good.deadline_unix_ms);
    CHECK(open->state == RoundState::kOpen);
    CHECK(open->closed_unix_ms == 0);
    uint64_t last = 0;
    REQUIRE(s->last_round_id(&last, nullptr) == Status::kOk);
    CHECK(last == 4);
  }

  TEST_CASE("close_round drops the payloads but keeps the ledger") {
    STORAGE_BACKENDS();
    TempDir dir;
    const std::string path = dir.file("state.db");
    auto s = open_backend(path);
    create(*s, make_round(1));
    for (uint8_t i = 0; i < 3; ++i) {
      CHECK(record(*s, make_update(1, "dev-" + std::to_string(i), i, 1000)) == InsertResult::kInserted);
    }
    std::string error;
    // A committed round needs its model recorded first, for this round.
    CHECK(s->close_round(1, RoundState::kCommitted, 2, 50, &error) == Status::kInvalidArgument);
    CHECK(error.find("not recorded") != std::string::npos);
    CHECK(s->close_round(1, RoundState::kCommitted, 0, 50, nullptr) == Status::kInvalidArgument);
    CHECK(s->close_round(1, RoundState::kOpen, 0, 50, nullptr) == Status::kInvalidArgument);
    CHECK(s->close_round(1, RoundState::kAbandoned, 2, 50, nullptr) == Status::kInvalidArgument);
    record_model_for(*s, 2, 1);
    REQUIRE(s->close_round(1, RoundState::kCommitted, 2, 50, &error) == Status::kOk);

    std::optional<RoundRecord> round;
    REQUIRE(s->get_round(1, &round, nullptr) == Status::kOk);
    REQUIRE(round.has_value());
    CHECK(round->state == RoundState::kCommitted);
    CHECK(round->result_model_version == 2);
    CHECK(round->closed_unix_ms == 50);
    CHECK(round->accepted_updates == 3);
    std::optional<RoundRecord> open;
    REQUIRE(s->open_round(&open, nullptr) == Status::kOk);
    CHECK(!open.has_value());

    CHECK(count(*s, 1) == 3);
    const auto updates = all_updates(*s, 1);
    REQUIRE(updates.size() == 3);
    for (uint8_t i = 0; i < 3; ++i) {
      CHECK(updates[i].payload.empty());
      CHECK(updates[i].payload_bytes == 1000);
      CHECK(updates[i].digest == make_update(1, "x", i).digest);
    }
    if (g_backend != Backend::kMemory) {  // and in the store
      CHECK(backend_query(path, "SELECT count(*) FROM updates WHERE payload IS NOT NULL") == "0");
      CHECK(backend_query(path, "SELECT count(*) FROM updates") == "3");
    }
  }

  TEST_CASE("an abandoned round keeps its payloads until a later round commits, which drops them") {
    STORAGE_BACKENDS();
    TempDir dir;
    const std::string path = dir.file("state.db");
    auto s = open_backend(path);
    auto payloads_kept = [&](uint64_t round) {
      size_t kept = 0;
      for (const UpdateRecord& u : all_updates(*s, round)) kept += u.payload.size() == u.payload_bytes;
      return kept;
    };
    create(*s, make_round(1));
    CHECK(record(*s, make_update(1, "dev-a", 1, 100)) == InsertResult::kInserted);
    record_model_for(*s, 2, 1);
    REQUIRE(s->close_round(1, RoundState::kCommitted, 2, 10, nullptr) == Status::kOk);
    CHECK(payloads_kept(1) == 0);
    // Rounds 2 and 3 are abandoned: the next round may count their updates.
    create(*s, make_round(2));
    CHECK(record(*s, make_update(2, "dev-a", 2, 200)) == InsertResult::kInserted);
    CHECK(record(*s, make_update(2, "dev-b", 3, 300)) == InsertResult::kInserted);
    REQUIRE(s->close_round(2, RoundState::kAbandoned, 0, 20, nullptr) == Status::kOk);
    create(*s, make_round(3));
    CHECK(record(*s, make_update(3, "dev-c", 4, 400)) == InsertResult::kInserted);
    REQUIRE(s->close_round(3, RoundState::kAbandoned, 0, 30, nullptr) == Status::kOk);
    CHECK(payloads_kept(2) == 2);
    CHECK(payloads_kept(3) == 1);
    std::optional<RoundRecord> round;
    REQUIRE(s->get_round(2, &round, nullptr) == Status::kOk);
    REQUIRE(round.has_value());
    CHECK(round->accepted_updates == 2);
    // Round 4 commits: its payloads and those of the rounds abandoned since round 1 go.
    create(*s, make_round(4));
    CHECK(record(*s, make_update(4, "dev-d", 5, 500)) == InsertResult::kInserted);
    record_model_for(*s, 3, 4);
    REQUIRE(s->close_round(4, RoundState::kCommitted, 3, 40, nullptr) == Status::kOk);
    for (uint64_t r = 1; r <= 4; ++r) {
      CAPTURE(r);
      CHECK(payloads_kept(r) == 0);
      CHECK(count(*s, r) == (r == 2 ? 2 : 1));  // the ledger stays
    }
    if (g_backend != Backend::kMemory) {
      CHECK(backend_query(path, "SELECT count(*) FROM updates WHERE payload IS NOT NULL") == "0");
    }
  }

  TEST_CASE("round events: durable in append order, only for an open round, deleted at close") {
    STORAGE_BACKENDS();
    TempDir dir;
    const std::string path = dir.file("state.db");
    auto s = open_backend(path);
    RoundEvent e;
    e.round_id = 1;
    e.kind = 3;
    e.device_id = "dev-a";
    e.unix_ms = 77;
    e.payload = {1, 2, 3};
    std::string error;
    CHECK(s->append_round_event(e, &error) == Status::kInvalidArgument);  // no round 1 yet
    create(*s, make_round(1));
    for (uint32_t i = 0; i < 5; ++i) {
      e.kind = 1 + i;
      e.device_id = i == 4 ? "" : "dev-" + std::to_string(i);
      e.payload.assign(i * 100, uint8_t(i));
      REQUIRE(s->append_round_event(e, &error) == Status::kOk);
    }
    RoundEvent bad = e;
    bad.kind = 0;
    CHECK(s->append_round_event(bad, nullptr) == Status::kInvalidArgument);
    bad.kind = 256;
    CHECK(s->append_round_event(bad, nullptr) == Status::kInvalidArgument);
    bad.kind = 1;
    bad.payload.assign(kMaxRoundEventBytes + 1, 0);
    CHECK(s->append_round_event(bad, nullptr) == Status::kInvalidArgument);
    const auto read_all = [](Storage& st) {
      std::vector<RoundEvent> out;
      REQUIRE(st.for_each_round_event(
                  1,
                  [&](const RoundEvent& ev) {
                    out.push_back(ev);
                    return Status::kOk;
                  },
                  nullptr) == Status::kOk);
      return out;
    };
    const auto check_events = [](const std::vector<RoundEvent>& got) {
      REQUIRE(got.size() == 5);
      for (uint32_t i = 0; i < 5; ++i) {
        CHECK(got[i].kind == 1 + i);
        CHECK(got[i].device_id == (i == 4 ? "" : "dev-" + std::to_string(i)));
        CHECK(got[i].payload == std::vector<uint8_t>(i * 100, uint8_t(i)));
        CHECK(got[i].unix_ms == 77);
        CHECK(got[i].round_id == 1);
        if (i > 0) CHECK(got[i].sequence > got[i - 1].sequence);
      }
    };
    check_events(read_all(*s));
    // Stops at the first error, and a callback cannot call back in.
    int seen = 0;
    CHECK(s->for_each_round_event(
              1, [&](const RoundEvent&) { return ++seen == 2 ? Status::kCancelled : Status::kOk; },
              nullptr) == Status::kCancelled);
    CHECK(seen == 2);
    CHECK(s->for_each_round_event(
              1, [&](const RoundEvent& ev) { return s->append_round_event(ev, nullptr); }, nullptr) ==
          Status::kInvalidArgument);
    if (g_backend != Backend::kMemory) {  // survives a restart
      s.reset();
      s = open_backend(path);
      check_events(read_all(*s));
    }
    REQUIRE(s->close_round(1, RoundState::kAbandoned, 0, 90, &error) == Status::kOk);
    CHECK(read_all(*s).empty());
    CHECK(s->append_round_event(e, nullptr) == Status::kInvalidArgument);  // closed
    if (g_backend != Backend::kMemory) CHECK(backend_query(path, "SELECT count(*) FROM round_events") == "0");
  }

  TEST_CASE("a database of schema version 1 is migrated to version 2, keeping its rows") {
    TempDir dir;
    const std::string path = dir.file("state.db");
    {
      auto s = open_db(path);
      create(*s, make_round(1));
      CHECK(record(*s, make_update(1, "dev-a", 1, 10)) == InsertResult::kInserted);
    }
    // What a build of schema version 1 left: no round_events table.
    raw_query(path, "DROP TABLE round_events");
    raw_query(path, "PRAGMA user_version = 1");
    REQUIRE(raw_query(path, "PRAGMA user_version") == "1");
    auto s = open_db(path);
    CHECK(raw_query(path, "PRAGMA user_version") == "2");
    CHECK(count(*s, 1) == 1);
    RoundEvent e;
    e.round_id = 1;
    e.kind = 1;
    CHECK(s->append_round_event(e, nullptr) == Status::kOk);
  }

  TEST_CASE("for_each_update yields acceptance order with payloads and stops at the first error") {
    STORAGE_BACKENDS();
    TempDir dir;
    auto s = open_backend(dir.file("state.db"));
    create(*s, make_round(1));
    const std::vector<std::string> devices = {"zeta", "alpha", "mid", "beta"};  // not sorted
    std::vector<uint64_t> sequences;
    for (size_t i = 0; i < devices.size(); ++i) {
      uint64_t seq = 0;
      CHECK(record(*s, make_update(1, devices[i], uint8_t(i), 10 + i), &seq) == InsertResult::kInserted);
      if (!sequences.empty()) CHECK(seq > sequences.back());
      sequences.push_back(seq);
    }
    const auto updates = all_updates(*s, 1);
    REQUIRE(updates.size() == devices.size());
    for (size_t i = 0; i < devices.size(); ++i) {
      CHECK(updates[i].device_id == devices[i]);
      CHECK(updates[i].sequence == sequences[i]);
      CHECK(updates[i].payload == make_update(1, devices[i], uint8_t(i), 10 + i).payload);
    }
    int calls = 0;
    CHECK(s->for_each_update(
              1,
              [&](const UpdateRecord&) {
                ++calls;
                return calls == 2 ? Status::kCorruptPayload : Status::kOk;
              },
              nullptr) == Status::kCorruptPayload);
    CHECK(calls == 2);
    // The callback may not call back into the storage (the iteration holds it).
    Status inner = Status::kOk;
    CHECK(s->for_each_update(
              1,
              [&](const UpdateRecord&) {
                uint64_t n = 0;
                inner = s->count_updates(1, &n, nullptr);
                return Status::kOk;
              },
              nullptr) == Status::kOk);
    CHECK(inner == Status::kInvalidArgument);
    // And it works again afterwards.
    CHECK(count(*s, 1) == devices.size());
    CHECK(all_updates(*s, 99).empty());
  }

  TEST_CASE("reopening keeps rounds, ledger, models and settings") {
    DURABLE_BACKENDS();
    TempDir dir;
    const std::string path = dir.file("state.db");
    {
      auto s = open_backend(path);
      record_model_for(*s, 1, 0);
      create(*s, make_round(1));
      CHECK(record(*s, make_update(1, "dev-a", 1)) == InsertResult::kInserted);
      record_model_for(*s, 2, 1);
      REQUIRE(s->close_round(1, RoundState::kCommitted, 2, 77, nullptr) == Status::kOk);
      create(*s, make_round(2, 2));
      CHECK(record(*s, make_update(2, "dev-b", 3)) == InsertResult::kInserted);
      REQUIRE(s->put_setting("model_spec", "cnn", nullptr) == Status::kOk);
      REQUIRE(s->put_setting("model_spec", "mlp:784-128-10", nullptr) == Status::kOk);
    }
    auto s = open_backend(path);
    std::optional<RoundRecord> round;
    REQUIRE(s->get_round(1, &round, nullptr) == Status::kOk);
    REQUIRE(round.has_value());
    CHECK(round->state == RoundState::kCommitted);
    CHECK(round->accepted_updates == 1);
    REQUIRE(s->open_round(&round, nullptr) == Status::kOk);
    REQUIRE(round.has_value());
    CHECK(round->round_id == 2);
    CHECK(round->base_model_version == 2);
    uint64_t last = 0;
    REQUIRE(s->last_round_id(&last, nullptr) == Status::kOk);
    CHECK(last == 2);
    CHECK(count(*s, 1) == 1);
    const auto updates = all_updates(*s, 2);
    REQUIRE(updates.size() == 1);
    CHECK(updates[0].payload == make_update(2, "dev-b", 3).payload);
    std::optional<ModelRecord> model;
    REQUIRE(s->latest_model(&model, nullptr) == Status::kOk);
    REQUIRE(model.has_value());
    CHECK(model->version == 2);
    CHECK(model->round_id == 1);
    CHECK(model->path == "model-2.safetensors");
    CHECK(model->bytes == 1002);
    std::optional<std::string> value;
    REQUIRE(s->get_setting("model_spec", &value, nullptr) == Status::kOk);
    CHECK(value == std::optional<std::string>("mlp:784-128-10"));
    REQUIRE(s->get_setting("absent", &value, nullptr) == Status::kOk);
    CHECK(!value.has_value());
  }

  TEST_CASE("record_model: versions only grow, paths stay inside the state directory") {
    STORAGE_BACKENDS();
    TempDir dir;
    auto s = open_backend(dir.file("state.db"));
    record_model_for(*s, 5, 0);
    ModelRecord m;
    m.version = 5;
    m.path = "m.safetensors";
    CHECK(s->record_model(m, nullptr) == Status::kInvalidArgument);  // not above 5
    m.version = 6;
    m.round_id = 3;  // no such round
    CHECK(s->record_model(m, nullptr) == Status::kInvalidArgument);
    m.round_id = 0;
    for (const char* bad : {"", "/etc/passwd", "../m", "a/../m", "a//m", "./m", "m/"}) {
      m.path = bad;
      CAPTURE(m.path);
      CHECK(s->record_model(m, nullptr) == Status::kInvalidArgument);
    }
    m.path = "models/m6.safetensors";
    CHECK(s->record_model(m, nullptr) == Status::kOk);
    m.version = 0;
    CHECK(s->record_model(m, nullptr) == Status::kInvalidArgument);
  }

  TEST_CASE("misuse is kInvalidArgument") {
    STORAGE_BACKENDS();
    TempDir dir;
    auto s = open_backend(dir.file("state.db"));
    create(*s, make_round(1));
    UpdateRecord u = make_update(1, "dev-a", 1);
    u.payload_bytes += 1;
    InsertResult result{};
    CHECK(s->record_update(u, &result, nullptr, nullptr) == Status::kInvalidArgument);
    CHECK(s->record_update(make_update(1, "", 1), &result, nullptr, nullptr) == Status::kInvalidArgument);
    CHECK(s->record_update(make_update(1, "dev-a", 1), nullptr, nullptr, nullptr) ==
          Status::kInvalidArgument);
    CHECK(s->open_round(nullptr, nullptr) == Status::kInvalidArgument);
    CHECK(s->get_round(1, nullptr, nullptr) == Status::kInvalidArgument);
    CHECK(s->last_round_id(nullptr, nullptr) == Status::kInvalidArgument);
    CHECK(s->count_updates(1, nullptr, nullptr) == Status::kInvalidArgument);
    CHECK(s->find_update(1, "dev-a", nullptr, nullptr) == Status::kInvalidArgument);
    CHECK(s->for_each_update(1, nullptr, nullptr) == Status::kInvalidArgument);
    CHECK(s->latest_model(nullptr, nullptr) == Status::kInvalidArgument);
    CHECK(s->put_setting("", "v", nullptr) == Status::kInvalidArgument);
    CHECK(s->get_setting("k", nullptr, nullptr) == Status::kInvalidArgument);
    CHECK(count(*s, 1) == 0);
    std::unique_ptr<Storage> none;
    CHECK(open_sqlite_storage("", &none, nullptr) == Status::kInvalidArgument);
    CHECK(open_sqlite_storage(dir.file("x.db"), nullptr, nullptr) == Status::kInvalidArgument);
  }

  TEST_CASE("a file that is not an edgefl database is refused with kIoError") {
    TempDir dir;
    std::unique_ptr<Storage> s;
    std::string error;

    const std::string garbage = dir.file("garbage.db");
    {
      std::ofstream f(garbage, std::ios::binary);
      for (int i = 0; i < 4096; ++i) f.put(char(i * 31 + 7));
    }
    CHECK(open_sqlite_storage(garbage, &s, &error) == Status::kIoError);
    CHECK(s == nullptr);
    CHECK(error.find("not a database") != std::string::npos);
    CHECK(error.find(garbage) != std::string::npos);

    // A real database whose header is damaged later (the first page overwritten).
    const std::string damaged = dir.file("damaged.db");
    { auto ok = open_db(damaged); }
    {
      std::fstream f(damaged, std::ios::binary | std::ios::in | std::ios::out);
      f.seekp(0);
      f.write("this is not SQLite at all", 25);
    }
    error.clear();
    CHECK(open_sqlite_storage(damaged, &s, &error) == Status::kIoError);
    CHECK(!error.empty());

    // Another application's SQLite database is left alone.
    const std::string other = dir.file("other.db");
    {
      sqlite3* db = nullptr;
      REQUIRE(sqlite3_open(other.c_str(), &db) == SQLITE_OK);
      REQUIRE(sqlite3_exec(db, "CREATE TABLE t (x INTEGER)", nullptr, nullptr, nullptr) == SQLITE_OK);
      sqlite3_close(db);
    }
    error.clear();
    CHECK(open_sqlite_storage(other, &s, &error) == Status::kIoError);
    CHECK(error.find("not an edgefl state database") != std::string::npos);
    CHECK(raw_query(other, "PRAGMA journal_mode") == "delete");  // not switched to WAL

    // A directory, and a path whose parent does not exist.
    error.clear();
    CHECK(open_sqlite_storage(dir.path(), &s, &error) == Status::kIoError);
    CHECK(!error.empty());
    CHECK(open_sqlite_storage(dir.file("missing/state.db"), &s, &error) == Status::kIoError);
    CHECK(s == nullptr);
  }

  TEST_CASE("a database of a newer schema version is refused") {
    TempDir dir;
    const std::string path = dir.file("state.db");
    { auto s = open_db(path); }
    CHECK(raw_query(path, "PRAGMA user_version = 3").empty());
    std::unique_ptr<Storage> s;
    std::string error;
    CHECK(open_sqlite_storage(path, &s, &error) == Status::kUnsupportedVersion);
    CHECK(error.find("newer") != std::string::npos);
  }
}

// Stores several servers share (several aggregators, one round): the coordinator lease, the
// fence on the coordinator's writes, the sealed round. Two clients of one store stand for two
// servers: two connections to one PostgreSQL database in the PostgreSQL run, two clients of one
// memory store otherwise.
namespace {
struct SharedStores {
  TempDir dir;
  std::unique_ptr<Storage> a, b;
  SharedStores() {
    if (postgres_run()) {
      a = open_postgres(dir.file("db"));
      b = open_postgres(dir.file("db"));
    } else {
      a = make_memory_storage();
      b = make_memory_storage_sharing(a.get());
    }
    REQUIRE(b != nullptr);
  }
  // The memory store's clock is the callers' (PostgreSQL's is its own): real time for both.
  static int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  Lease take(Storage& s, const std::string& holder, uint32_t ttl_ms) {
    Lease lease;
    std::string error;
    const Status st = s.acquire_lease(holder, ttl_ms, now_ms(), &lease, &error);
    INFO(error);
    REQUIRE(st == Status::kOk);
    return lease;
  }
};
}  // namespace

TEST_SUITE("server.storage.shared") {
  TEST_CASE("the coordinator lease: one holder until it lapses, a new epoch when it changes hands") {
    SharedStores s;
    const Lease first = s.take(*s.a, "a", 400);
    CHECK(first.held);
    CHECK(first.holder == "a");
    CHECK(first.epoch == 1);
    const Lease refused = s.take(*s.b, "b", 400);
    CHECK_FALSE(refused.held);
    CHECK(refused.holder == "a");
    CHECK(refused.epoch == 1);
    const Lease renewed = s.take(*s.a, "a", 400);
    CHECK(renewed.held);
    CHECK(renewed.epoch == 1);  // a renewal is the same epoch
    CHECK(renewed.expires_unix_ms >= first.expires_unix_ms);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const Lease taken = s.take(*s.b, "b", 400);
    CHECK(taken.held);
    CHECK(taken.epoch == 2);
    const Lease lost = s.take(*s.a, "a", 400);
    CHECK_FALSE(lost.held);
    CHECK(lost.holder == "b");
    Lease out;
    CHECK(s.a->acquire_lease("", 400, 0, &out, nullptr) == Status::kInvalidArgument);
    CHECK(s.a->acquire_lease("a", 0, 0, &out, nullptr) == Status::kInvalidArgument);
  }

  TEST_CASE("a released lease is free at once, and whoever takes it next starts a new epoch") {
    SharedStores s;
    CHECK(s.take(*s.a, "a", 60000).held);
    std::string error;
    REQUIRE(s.b->release_lease("b", &error) == Status::kOk);  // not b's: nothing changes
    CHECK_FALSE(s.take(*s.b, "b", 60000).held);
    REQUIRE(s.a->release_lease("a", &error) == Status::kOk);
    const Lease again = s.take(*s.a, "a", 60000);  // even the old holder: a new epoch
    CHECK(again.held);
    CHECK(again.epoch == 2);
    REQUIRE(s.a->release_lease("a", &error) == Status::kOk);
    const Lease other = s.take(*s.b, "b", 60000);
    CHECK(other.held);
    CHECK(other.epoch == 3);
  }

  TEST_CASE("a fenced coordinator's writes are refused once its lease changed hands, and change nothing") {
    SharedStores s;
    const Lease lease_a = s.take(*s.a, "a", 300);
    std::string error;
    REQUIRE(s.a->set_fence("a", lease_a.epoch, &error) == Status::kOk);
    create(*s.a, make_round(1));  // held: the writes go through
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    // Lapsed but not taken: still a's (a slow close must not fence itself out).
    REQUIRE(s.a->seal_round(1, &error) == Status::kOk);
    const Lease again = s.take(*s.a, "a", 300);
    CHECK(again.held);
    CHECK(again.epoch == lease_a.epoch);
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    const Lease lease_b = s.take(*s.b, "b", 5000);
    REQUIRE(lease_b.held);
    REQUIRE(s.b->set_fence("b", lease_b.epoch, &error) == Status::kOk);
    ModelRecord model;
    model.version = 2;
    model.round_id = 1;
    model.path = "coordinator-1/model-v000002.safetensors";
    model.bytes = 10;
    CHECK(s.a->seal_round(1, &error) == Status::kProtocolError);
    CHECK(error.find("not the coordinator") != std::string::npos);
    CHECK(s.a->record_model(model, &error) == Status::kProtocolError);
    CHECK(s.a->close_round(1, RoundState::kAbandoned, 0, 5, &error) == Status::kProtocolError);
    CHECK(s.a->create_round(make_round(2), &error) == Status::kProtocolError);
    std::optional<ModelRecord> latest;
    REQUIRE(s.b->latest_model(&latest, nullptr) == Status::kOk);
    CHECK_FALSE(latest.has_value());
    std::optional<RoundRecord> open;
    REQUIRE(s.b->open_round(&open, nullptr) == Status::kOk);
    REQUIRE(open.has_value());
    CHECK(open->round_id == 1);
    CHECK(open->sealed);  // by a, while it held the lease
    // Updates are not fenced (every aggregator records them), but a sealed round takes none.
    InsertResult result{};
    CHECK(s.a->record_update(make_update(1, "dev-a", 1), &result, nullptr, &error) ==
          Status::kInvalidArgument);
    // The new holder steers the round.
    model.path = "coordinator-2/model-v000002.safetensors";
    REQUIRE(s.b->seal_round(1, &error) == Status::kOk);
    REQUIRE(s.b->record_model(model, &error) == Status::kOk);
    REQUIRE(s.b->close_round(1, RoundState::kCommitted, 2, 6, &error) == Status::kOk);
    // Without a fence, the writes are not checked (the only server).
    REQUIRE(s.a->set_fence("", 0, &error) == Status::kOk);
    create(*s.a, make_round(2));
  }

  TEST_CASE("a sealed round takes no more updates, keeps its ledger, and closes as usual") {
    SharedStores s;
    create(*s.a, make_round(1));
    CHECK(record(*s.b, make_update(1, "dev-a", 1)) == InsertResult::kInserted);
    std::string error;
    REQUIRE(s.a->seal_round(1, &error) == Status::kOk);
    REQUIRE(s.a->seal_round(1, &error) == Status::kOk);  // again: kOk
    InsertResult result{};
    error.clear();
    CHECK(s.b->record_update(make_update(1, "dev-b", 2), &result, nullptr, &error) ==
          Status::kInvalidArgument);
    CHECK(error.find("sealed") != std::string::npos);
    std::optional<RoundRecord> round;
    REQUIRE(s.b->get_round(1, &round, nullptr) == Status::kOk);
    REQUIRE(round.has_value());
    CHECK(round->sealed);
    CHECK(round->state == RoundState::kOpen);
    CHECK(count(*s.b, 1) == 1);
    REQUIRE(s.a->close_round(1, RoundState::kAbandoned, 0, 7, &error) == Status::kOk);
    CHECK(s.a->seal_round(1, &error) == Status::kInvalidArgument);  // not open
    CHECK(s.a->seal_round(9, &error) == Status::kInvalidArgument);  // unknown
  }

  TEST_CASE("list_settings gives the keys under a prefix, in order, from every client") {
    SharedStores s;
    std::string error;
    REQUIRE(s.a->put_setting("drain_until.b", "20", &error) == Status::kOk);
    REQUIRE(s.b->put_setting("drain_until.a", "10", &error) == Status::kOk);
    REQUIRE(s.a->put_setting("drain_until", "not under the prefix", &error) == Status::kOk);
    REQUIRE(s.a->put_setting("model_spec", "cnn", &error) == Status::kOk);
    std::vector<std::pair<std::string, std::string>> out = {{"stale", "x"}};
    REQUIRE(s.b->list_settings("drain_until.", &out, &error) == Status::kOk);
    REQUIRE(out.size() == 2);
    CHECK(out[0] == std::pair<std::string, std::string>("drain_until.a", "10"));
    CHECK(out[1] == std::pair<std::string, std::string>("drain_until.b", "20"));
    REQUIRE(s.a->list_settings("none.", &out, &error) == Status::kOk);
    CHECK(out.empty());
    CHECK(s.a->list_settings("x", nullptr, &error) == Status::kInvalidArgument);
  }

  TEST_CASE(
      "ledger shares and partial sums: by aggregator, only for a sealed open round, replaced in place, "
      "dropped at close") {
    SharedStores s;
    create(*s.a, make_round(1));
    const std::string agg_a("a#01"), agg_b("b#02");
    UpdateRecord u1 = make_update(1, "dev-1", 1, 100), u2 = make_update(1, "dev-2", 2, 50),
                 u3 = make_update(1, "dev-3", 3, 70);
    u1.aggregator = agg_a;
    u2.aggregator = agg_b;
    u3.aggregator = agg_a;
    uint64_t seq1 = 0, seq2 = 0, seq3 = 0;
    CHECK(record(*s.a, u1, &seq1) == InsertResult::kInserted);
    CHECK(record(*s.b, u2, &seq2) == InsertResult::kInserted);
    CHECK(record(*s.a, u3, &seq3) == InsertResult::kInserted);
    std::string error;
    std::vector<LedgerShare> shares = {LedgerShare{}};
    REQUIRE(s.b->ledger_shares(1, &shares, &error) == Status::kOk);
    REQUIRE(shares.size() == 2);
    CHECK(shares[0].aggregator == agg_a);
    CHECK(shares[0].updates == 2);
    CHECK(shares[0].payload_bytes == 170);
    CHECK(shares[0].samples == u1.sample_count + u3.sample_count);
    CHECK(shares[0].sequence_sum == seq1 + seq3);
    CHECK(shares[1].sequence_sum == seq2);
    CHECK(shares[1].aggregator == agg_b);
    CHECK(shares[1].updates == 1);
    CHECK(shares[1].payload_bytes == 50);
    std::vector<std::string> devices;
    REQUIRE(s.b->for_each_update_of(
                1, agg_a,
                [&](const UpdateRecord& u) {
                  CHECK(u.aggregator == agg_a);
                  CHECK(u.payload.size() == u.payload_bytes);
                  devices.push_back(u.device_id);
                  return Status::kOk;
                },
                &error) == Status::kOk);
    CHECK(devices == std::vector<std::string>{"dev-1", "dev-3"});  // acceptance order
    PartialSum sum;
    sum.round_id = 1;
    sum.aggregator = agg_b;
    sum.updates = 1;
    sum.sequence_sum = seq2;
    sum.state.assign(64, 0x5a);
    error.clear();
    CHECK(s.b->put_partial_sum(sum, &error) == Status::kInvalidArgument);  // not sealed yet
    CHECK(error.find("sealed") != std::string::npos);
    REQUIRE(s.a->seal_round(1, &error) == Status::kOk);
    REQUIRE(s.b->put_partial_sum(sum, &error) == Status::kOk);
    sum.state.assign(80, 0x6b);  // written again (a retry): replaced, not added
    REQUIRE(s.b->put_partial_sum(sum, &error) == Status::kOk);
    PartialSum other = sum;
    other.aggregator = agg_a;
    other.updates = 2;
    other.state.assign(16, 1);
    REQUIRE(s.a->put_partial_sum(other, &error) == Status::kOk);
    std::vector<PartialSum> read = partial_sums(*s.a, 1, true);
    REQUIRE(read.size() == 2);
    CHECK(read[0].aggregator == agg_a);
    CHECK(read[0].updates == 2);
    CHECK(read[0].state == other.state);
    CHECK(read[1].aggregator == agg_b);
    CHECK(read[1].state == sum.state);
    CHECK(read[1].sequence_sum == seq2);
    read = partial_sums(*s.b, 1, false);
    REQUIRE(read.size() == 2);  // without their contents
    CHECK(read[0].state.empty());
    CHECK(read[0].updates == 2);
    CHECK(read[1].sequence_sum == seq2);
    // Bad sums change nothing.
    PartialSum bad = sum;
    bad.aggregator.clear();
    CHECK(s.a->put_partial_sum(bad, &error) == Status::kInvalidArgument);
    bad = sum;
    bad.state.clear();
    CHECK(s.a->put_partial_sum(bad, &error) == Status::kInvalidArgument);
    bad = sum;
    bad.sequence_sum = kSequenceSumMask + 1;
    CHECK(s.a->put_partial_sum(bad, &error) == Status::kInvalidArgument);
    bad = sum;
    bad.round_id = 9;
    CHECK(s.a->put_partial_sum(bad, &error) == Status::kInvalidArgument);
    // An iteration's callback cannot call back in; the first non-kOk ends it.
    int calls = 0;
    CHECK(s.a->for_each_partial_sum(
              1, true,
              [&](const PartialSum&) {
                ++calls;
                return Status::kCorruptPayload;
              },
              &error) == Status::kCorruptPayload);
    CHECK(calls == 1);
    REQUIRE(s.a->close_round(1, RoundState::kAbandoned, 0, 9, &error) == Status::kOk);
    read = partial_sums(*s.a, 1, true);
    CHECK(read.empty());                                                   // dropped at close
    CHECK(s.a->put_partial_sum(sum, &error) == Status::kInvalidArgument);  // closed
    REQUIRE(s.a->ledger_shares(1, &shares, &error) == Status::kOk);
    CHECK(shares.size() == 2);  // the ledger stays
  }

  TEST_CASE("SQLite belongs to one server: lease, fence and seal are refused") {
    TempDir dir;
    auto s = open_db(dir.file("state.db"));
    Lease lease;
    std::string error;
    CHECK(s->acquire_lease("a", 1000, 0, &lease, &error) == Status::kInvalidArgument);
    CHECK(error.find("postgresql") != std::string::npos);
    CHECK(s->set_fence("a", 1, &error) == Status::kInvalidArgument);
    CHECK(s->seal_round(1, &error) == Status::kInvalidArgument);
    std::vector<std::pair<std::string, std::string>> settings;
    CHECK(s->list_settings("", &settings, &error) == Status::kInvalidArgument);
    std::vector<LedgerShare> shares;
    CHECK(s->ledger_shares(1, &shares, &error) == Status::kInvalidArgument);
    PartialSum sum;
    sum.round_id = 1;
    sum.aggregator = "a";
    sum.state.assign(8, 0);
    CHECK(s->put_partial_sum(sum, &error) == Status::kInvalidArgument);
  }
}

#if EDGEFL_HAVE_POSTGRESQL
using testing::postgres_cluster;

TEST_SUITE("server.storage.postgresql") {
  TEST_CASE("a new database gets the current schema; durability settings are read back") {
    REQUIRE_MESSAGE(postgres_run(), "set EDGEFL_TEST_POSTGRES_DIR (ctest server.storage.postgresql does)");
    CHECK(postgres_storage_available());
    TempDir dir;
    const std::string path = dir.file("db");
    { auto s = open_postgres(path); }
    const std::string db = postgres_db_for(path);
    CHECK(pg_query(db, "SELECT version FROM edgefl_schema") == std::to_string(kPostgresSchemaVersion));
    CHECK(pg_query(db, "SELECT count(*) FROM edgefl_schema") == "1");
    auto s = open_postgres(path);  // a second open migrates nothing
    CHECK(pg_query(db, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == "8");
    // The ack promise: the session commits synchronously even when the database's default is off.
    pg_query(db, "ALTER DATABASE " + db + " SET synchronous_commit = off");
    s = open_postgres(path);
    create(*s, make_round(1));
    CHECK(record(*s, make_update(1, "dev-a", 1)) == InsertResult::kInserted);
    CHECK(pg_query(db, "SELECT count(*) FROM updates") == "1");
  }

  TEST_CASE(
      "a database of schema version 1 is migrated to version 3 (sealed rounds, the lease, partial sums), "
      "keeping its rows") {
    REQUIRE(postgres_run());
    TempDir dir;
    const std::string path = dir.file("db");
    const std::string db = postgres_db_for(path);
    {
      auto s = open_postgres(path);
      create(*s, make_round(1));
      CHECK(record(*s, make_update(1, "dev-a", 1)) == InsertResult::kInserted);
    }
    // Back to version 1's tables, as a build of that version left them.
    pg_query(db, "ALTER TABLE rounds DROP COLUMN sealed");
    pg_query(db, "DROP TABLE coordinator_lease");
    pg_query(db, "DROP TABLE partial_sums");
    pg_query(db, "ALTER TABLE updates DROP COLUMN aggregator");
    pg_query(db, "UPDATE edgefl_schema SET version = 1");
    auto s = open_postgres(path);
    CHECK(pg_query(db, "SELECT version FROM edgefl_schema") == "3");
    std::vector<LedgerShare> shares;
    REQUIRE(s->ledger_shares(1, &shares, nullptr) == Status::kOk);
    REQUIRE(shares.size() == 1);
    CHECK(shares[0].aggregator.empty());  // the row from before: nobody's partial sum
    CHECK(shares[0].updates == 1);
    std::optional<RoundRecord> open;
    REQUIRE(s->open_round(&open, nullptr) == Status::kOk);
    REQUIRE(open.has_value());
    CHECK(open->round_id == 1);
    CHECK_FALSE(open->sealed);
    CHECK(count(*s, 1) == 1);
    Lease lease;
    REQUIRE(s->acquire_lease("a", 1000, 0, &lease, nullptr) == Status::kOk);
    CHECK(lease.held);
  }

  TEST_CASE("a newer schema, and a database of another application, are refused and left alone") {
    REQUIRE(postgres_run());
    TempDir dir;
    const std::string newer = dir.file("newer"), other = dir.file("other");
    { auto s = open_postgres(newer); }
    pg_query(postgres_db_for(newer), "UPDATE edgefl_schema SET version = 99");
    std::unique_ptr<Storage> s;
    std::string error;
    CHECK(open_postgres_for(newer, &s, &error) == Status::kUnsupportedVersion);
    CHECK(error.find("newer") != std::string::npos);
    CHECK(s == nullptr);

    pg_query(postgres_db_for(other), "CREATE TABLE invoices (id bigint)");
    error.clear();
    CHECK(open_postgres_for(other, &s, &error) == Status::kIoError);
    CHECK(error.find("not an edgefl state database") != std::string::npos);
    CHECK(pg_query(postgres_db_for(other), "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") ==
          "1");

    error.clear();
    CHECK(open_postgres_storage("host=127.0.0.1 port=1 connect_timeout=2", &s, &error) == Status::kIoError);
    CHECK(error.find("cannot connect") != std::string::npos);
    CHECK(error.find("port=1") == std::string::npos);  // the connection string is never echoed
  }

  TEST_CASE("text the database cannot store is kInvalidArgument and writes nothing") {
    REQUIRE(postgres_run());
    TempDir dir;
    auto s = open_postgres(dir.file("db"));
    create(*s, make_round(1));
    InsertResult result{};
    std::string error;
    CHECK(s->record_update(make_update(1, "dev-\xff", 1), &result, nullptr, &error) ==
          Status::kInvalidArgument);
    CHECK(error.find("SQLSTATE 22") != std::string::npos);
    CHECK(count(*s, 1) == 0);
    CHECK(record(*s, make_update(1, "dev-a", 1)) == InsertResult::kInserted);  // the connection still works
  }

  TEST_CASE("a connection the database drops is opened again; nothing is written twice") {
    REQUIRE(postgres_run());
    TempDir dir;
    const std::string path = dir.file("db");
    const std::string db = postgres_db_for(path);
    auto s = open_postgres(path);
    create(*s, make_round(1));
    const std::string terminate =
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = '" + db +
        "' AND pid <> pg_backend_pid()";
    CHECK(pg_query(db, terminate) == "1");
    uint64_t first = 0;
    CHECK(record(*s, make_update(1, "dev-a", 1), &first) == InsertResult::kInserted);
    CHECK(pg_query(db, terminate) == "1");
    uint64_t again = 0;
    CHECK(record(*s, make_update(1, "dev-a", 1), &again) == InsertResult::kDuplicate);
    CHECK(again == first);
    CHECK(pg_query(db, terminate) == "1");
    CHECK(count(*s, 1) == 1);
    CHECK(pg_query(db, "SELECT count(*) FROM updates") == "1");
  }

  TEST_CASE("the database server crashes mid-round: acknowledged updates stay, calls fail until it is back") {
    REQUIRE(postgres_run());
    TempDir dir;
    const std::string path = dir.file("db");
    auto s = open_postgres(path);
    create(*s, make_round(1));
    for (uint8_t i = 0; i < 3; ++i) {
      CHECK(record(*s, make_update(1, "dev-" + std::to_string(i), i, 5000)) == InsertResult::kInserted);
    }
    postgres_cluster("kill");  // immediate shutdown: no checkpoint, as a power loss
    InsertResult result{};
    std::string error;
    CHECK(s->record_update(make_update(1, "dev-late", 9), &result, nullptr, &error) == Status::kIoError);
    CHECK(error.find("connection lost") != std::string::npos);
    uint64_t n = 0;
    CHECK(s->count_updates(1, &n, nullptr) == Status::kIoError);
    postgres_cluster("resume");
    CHECK(record(*s, make_update(1, "dev-late", 9)) == InsertResult::kInserted);
    const auto updates = all_updates(*s, 1);
    REQUIRE(updates.size() == 4);
    for (uint8_t i = 0; i < 3; ++i)
      CHECK(updates[i].payload == make_update(1, "dev-" + std::to_string(i), i, 5000).payload);
    CHECK(updates[3].device_id == "dev-late");
  }

  TEST_CASE("a lock that is never released ends the write with kIoError, not a hung server") {
    REQUIRE(postgres_run());
    TempDir dir;
    const std::string path = dir.file("db");
    const std::string db = postgres_db_for(path);
    { auto s = open_postgres(path); }  // the schema
    std::unique_ptr<Storage> s;
    std::string error;
    // The connection string's own lock_timeout (300 ms) wins over the 10 s default.
    REQUIRE(open_postgres_storage(postgres_conninfo(db) + " options='-c lock_timeout=300'", &s, &error) ==
            Status::kOk);
    create(*s, make_round(1));
    PGconn* other = PQconnectdb(postgres_conninfo(db).c_str());
    REQUIRE(PQstatus(other) == CONNECTION_OK);
    PQclear(PQexec(other, "BEGIN"));
    PGresult* locked = PQexec(other, "LOCK TABLE updates IN ACCESS EXCLUSIVE MODE");
    REQUIRE(PQresultStatus(locked) == PGRES_COMMAND_OK);
    PQclear(locked);
    InsertResult result{};
    const auto start = std::chrono::steady_clock::now();
    CHECK(s->record_update(make_update(1, "dev-a", 1), &result, nullptr, &error) == Status::kIoError);
    const auto waited = std::chrono::steady_clock::now() - start;
    CHECK(error.find("lock timeout") != std::string::npos);
    CHECK(waited < std::chrono::seconds(5));
    PQclear(PQexec(other, "ROLLBACK"));
    PQfinish(other);
    CHECK(record(*s, make_update(1, "dev-a", 1)) == InsertResult::kInserted);
    CHECK(count(*s, 1) == 1);
  }

  TEST_CASE("a lease attempt waits at most 1 s for a coordinator's write, then fails and changes nothing") {
    REQUIRE(postgres_run());
    TempDir dir;
    const std::string path = dir.file("db");
    const std::string db = postgres_db_for(path);
    auto a = open_postgres(path);
    auto b = open_postgres(path);
    Lease lease;
    std::string error;
    REQUIRE(a->acquire_lease("a", 60000, 0, &lease, &error) == Status::kOk);
    REQUIRE(lease.held);
    // What a fenced write holds until its commit: a share lock on the lease row.
    PGconn* other = PQconnectdb(postgres_conninfo(db).c_str());
    REQUIRE(PQstatus(other) == CONNECTION_OK);
    PQclear(PQexec(other, "BEGIN"));
    PGresult* locked = PQexec(other, "SELECT epoch FROM coordinator_lease WHERE id = 1 FOR SHARE");
    REQUIRE(PQresultStatus(locked) == PGRES_TUPLES_OK);
    PQclear(locked);
    const auto start = std::chrono::steady_clock::now();
    CHECK(b->acquire_lease("b", 60000, 0, &lease, &error) == Status::kIoError);
    const auto waited = std::chrono::steady_clock::now() - start;
    CHECK_MESSAGE(error.find("lock timeout") != std::string::npos, error);
    CHECK(waited < std::chrono::milliseconds(2500));
    PQclear(PQexec(other, "ROLLBACK"));
    PQfinish(other);
    REQUIRE(b->acquire_lease("b", 60000, 0, &lease, &error) == Status::kOk);
    CHECK_FALSE(lease.held);
    CHECK(lease.holder == "a");
    CHECK(lease.epoch == 1);
  }

  TEST_CASE(
      "a coordinator stopped inside a fenced write loses its session after 5 s, and the lease is free") {
    REQUIRE(postgres_run());
    TempDir dir;
    const std::string path = dir.file("db");
    const std::string db = postgres_db_for(path);
    {
      auto s = open_postgres(path);
      create(*s, make_round(1));
    }
    const std::string conninfo = postgres_conninfo(db);
    auto other = open_postgres(path);  // another aggregator, connected before the fault
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {  // a coordinator (a 1 s lease, never renewed) sealing as fast as it can
      std::unique_ptr<Storage> s;
      std::string error;
      Lease lease;
      if (open_postgres_storage(conninfo, &s, &error) != Status::kOk ||
          s->acquire_lease("stopped", 1000, 0, &lease, &error) != Status::kOk || !lease.held ||
          s->set_fence("stopped", lease.epoch, &error) != Status::kOk)
        _exit(3);
      for (;;) (void)s->seal_round(1, &error);  // fenced: holds the lease row until each commit
    }
    struct KillAtEnd {
      pid_t pid;
      ~KillAtEnd() {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    } kill_at_end{child};
    // Once it seals (it holds the lease and writes fenced), stop it at random points until it is
    // stopped inside a fenced write, holding the lease row.
    for (int i = 0; i < 300 && pg_query(db, "SELECT sealed FROM rounds WHERE round_id = 1") != "t"; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    REQUIRE(pg_query(db, "SELECT holder FROM coordinator_lease") == "stopped");
    // Stopped after the fence check locked the lease row (pg_stat_activity.query: its last statement).
    const std::string idle_in_txn = "SELECT count(*) FROM pg_stat_activity WHERE datname = '" + db +
                                    "' AND state = 'idle in transaction' AND query NOT ILIKE 'BEGIN%' "
                                    "AND query NOT ILIKE '%set_config%'";
    bool caught = false;
    for (int attempt = 0; attempt < 400 && !caught; ++attempt) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5 + attempt % 7));
      REQUIRE(::kill(child, SIGSTOP) == 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      caught = pg_query(db, idle_in_txn) == "1";
      if (!caught) REQUIRE(::kill(child, SIGCONT) == 0);
    }
    REQUIRE_MESSAGE(caught, "the coordinator was never stopped inside a transaction");
    const auto stopped = std::chrono::steady_clock::now();
    // Another aggregator's attempts: refused (lock timeout) while the stopped one holds the row.
    Lease lease;
    std::string error;
    while (!lease.held && std::chrono::steady_clock::now() - stopped < std::chrono::seconds(15)) {
      if (other->acquire_lease("successor", 10000, 0, &lease, &error) != Status::kOk) lease.held = false;
      if (!lease.held) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
    CHECK(lease.held);
    CHECK_MESSAGE(lease.epoch == 2, "epoch ", lease.epoch, " holder ", lease.holder, " ", error);
    CHECK(pg_query(db, idle_in_txn) == "0");
    CHECK_MESSAGE(seconds < 9, "the stopped coordinator held the lease row for ", seconds, " s");
    CHECK_MESSAGE(seconds > 3, "free after ", seconds, " s: before the 5 s timeout?");
  }

  TEST_CASE("two stores on one database: an update is in the ledger before the close counts it, or refused") {
    REQUIRE(postgres_run());
    TempDir dir;
    const std::string path = dir.file("db");
    auto a = open_postgres(path);
    auto b = open_postgres(path);
    create(*a, make_round(1));
    std::atomic<bool> closed{false};
    std::atomic<int> inserted{0}, refused{0}, other{0};
    std::thread writer([&] {
      for (int i = 0; i < 400 && !closed.load(); ++i) {
        InsertResult result{};
        const Status st = b->record_update(make_update(1, "dev-" + std::to_string(i), uint8_t(i)), &result,
                                           nullptr, nullptr);
        if (st == Status::kOk && result == InsertResult::kInserted) {
          ++inserted;
        } else if (st == Status::kInvalidArgument) {
          ++refused;  // the round closed
          break;
        } else {
          ++other;
        }
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::string error;
    REQUIRE(a->close_round(1, RoundState::kAbandoned, 0, 10, &error) == Status::kOk);
    closed = true;
    writer.join();
    CHECK(other.load() == 0);
    std::optional<RoundRecord> round;
    REQUIRE(a->get_round(1, &round, nullptr) == Status::kOk);
    REQUIRE(round.has_value());
    CAPTURE(inserted.load());
    CHECK(inserted.load() > 0);
    CHECK(round->accepted_updates == uint32_t(inserted.load()));  // every acknowledged update counted
    CHECK(count(*a, 1) == uint64_t(inserted.load()));
  }
}

#endif  // EDGEFL_HAVE_POSTGRESQL

}  // namespace server
}  // namespace edgefl
