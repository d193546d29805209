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

// Another client of the rows of `other` (a store made here; null otherwise), as a second server
// has its own connection to a shared database: the same rounds, ledger, models, settings and
// lease, its own fence (Storage::set_fence). `other` must outlive nothing: the rows live as long
// as any client.
std::unique_ptr<Storage> make_memory_storage_sharing(Storage* other);

}  // namespace server
}  // namespace edgefl

#endif  // EDGEFL_SERVER_MEMORY_STORAGE_H_
