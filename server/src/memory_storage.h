// memory_storage.h: Storage (storage.h) in process memory, for tests of the round logic without a
// database or sockets, and for simulations. Same rules and the same refusals as the SQLite store
// (tests/server/storage_test.cpp runs its ledger cases on both); "durable" means "in this object":
// a RoundManager built again over the same MemoryStorage is a restart, the process dying is not.
// Thread-safe (one mutex), like every Storage.
#ifndef EDGEFL_SERVER_MEMORY_STORAGE_H_
#define EDGEFL_SERVER_MEMORY_STORAGE_H_

#include <memory>

#include "storage.h"

namespace edgefl {
namespace server {

std::unique_ptr<Storage> make_memory_storage();

}  // namespace server
}  // namespace edgefl

#endif  // EDGEFL_SERVER_MEMORY_STORAGE_H_
