// postgres_test.h: the tests' view of a private PostgreSQL cluster
// (tests/support/postgres_cluster.sh). A test run on PostgreSQL has EDGEFL_TEST_POSTGRES_DIR set
// to the cluster's directory (its connection string in DIR/conninfo, its URL base in DIR/url);
// each test directory gets a database of its own, created on first use.
//
// Included by test files built with EDGEFL_HAVE_POSTGRESQL=1 (libpq linked); REQUIREs, so only
// from doctest cases.
#ifndef EDGEFL_TESTS_SUPPORT_POSTGRES_TEST_H_
#define EDGEFL_TESTS_SUPPORT_POSTGRES_TEST_H_

#include <doctest/doctest.h>
#include <libpq-fe.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <fstream>
#include <string>

namespace edgefl {
namespace testing {

// The cluster's directory in a PostgreSQL run; "" otherwise.
inline std::string postgres_dir() {
  const char* dir = getenv("EDGEFL_TEST_POSTGRES_DIR");
  return dir == nullptr ? "" : dir;
}

inline std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The cluster's connection string, for database `db` ("postgres" when empty).
inline std::string postgres_conninfo(const std::string& db = "") {
  const std::string base = read_first_line(postgres_dir() + "/conninfo");
  REQUIRE_MESSAGE(!base.empty(), "no conninfo in " << postgres_dir());
  return db.empty() ? base : base + " dbname=" + db;  // a later keyword wins
}

// Runs `sql` on database `db` through a connection of its own; the first value of the first row
// ("" if none). REQUIREs success.
inline std::string pg_query(const std::string& db, const std::string& sql) {
  PGconn* c = PQconnectdb(postgres_conninfo(db).c_str());
  REQUIRE(c != nullptr);
  INFO(PQerrorMessage(c));
  REQUIRE(PQstatus(c) == CONNECTION_OK);
  PGresult* r = PQexec(c, sql.c_str());
  const ExecStatusType status = PQresultStatus(r);
  INFO(sql << ": " << PQresultErrorMessage(r));
  const bool ok = status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK;
  std::string value;
  if (ok && PQntuples(r) > 0 && PQnfields(r) > 0) value = PQgetvalue(r, 0, 0);
  PQclear(r);
  PQfinish(c);
  REQUIRE(ok);
  return value;
}

// The database of test directory `path` (created on first use): a name from the path's hash.
inline std::string postgres_db_for(const std::string& path) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (const char ch : path) h = (h ^ uint8_t(ch)) * 1099511628211ull;
  char name[32];
  snprintf(name, sizeof name, "edgefl_test_%016llx", static_cast<unsigned long long>(h));
  if (pg_query("", std::string("SELECT count(*) FROM pg_database WHERE datname = '") + name + "'") == "0") {
    pg_query("", std::string("CREATE DATABASE ") + name);
  }
  return name;
}

// The --state URL of test directory `path`'s database.
inline std::string postgres_url_for(const std::string& path) {
  const std::string base = read_first_line(postgres_dir() + "/url");
  REQUIRE_MESSAGE(!base.empty(), "no url in " << postgres_dir());
  return base + "/" + postgres_db_for(path) + "?connect_timeout=5";
}

// Runs tests/support/postgres_cluster.sh ACTION (kill, resume) on the run's cluster
// (EDGEFL_TEST_POSTGRES_SCRIPT names the script); REQUIREs success.
inline void postgres_cluster(const char* action) {
  const char* script = getenv("EDGEFL_TEST_POSTGRES_SCRIPT");
  REQUIRE_MESSAGE(script != nullptr, "EDGEFL_TEST_POSTGRES_SCRIPT is not set");
  const std::string command = std::string("bash '") + script + "' " + action + " '" + postgres_dir() + "'";
  INFO(command);
  REQUIRE(system(command.c_str()) == 0);
}

}  // namespace testing
}  // namespace edgefl

#endif  // EDGEFL_TESTS_SUPPORT_POSTGRES_TEST_H_
