// postgres_storage_absent.cpp: the PostgreSQL entry points of a build without libpq
// (EDGEFL_POSTGRESQL=OFF, or libpq-dev not installed): opening says so.
#include "postgres_storage.h"

namespace edgefl {
namespace server {

bool postgres_storage_available() {
  return false;
}

Status open_postgres_storage(const std::string& conninfo, std::unique_ptr<Storage>* out, std::string* error) {
  (void)conninfo;
  (void)out;
  if (error != nullptr) {
    *error =
        "this edgefl-server was built without PostgreSQL (configure with libpq-dev installed, "
        "or -DEDGEFL_POSTGRESQL=ON)";
  }
  return Status::kIoError;
}

}  // namespace server
}  // namespace edgefl
