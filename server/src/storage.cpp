// storage.cpp: the parts of storage.h shared by every implementation.
#include "storage.h"

#include "postgres_storage.h"

#include <stdint.h>

namespace edgefl {
namespace server {

Status check_new_round(const RoundRecord& round, std::string* error) {
  if (round.round_id == 0 || !fits_i64(round.round_id))
    return invalid_argument(error, "create_round: round id out of range");
  if (round.nonce.size() != 16 && round.nonce.size() != 32) {
    return invalid_argument(error, "create_round: the nonce must be 16 or 32 bytes");
  }
  if (!fits_i64(round.base_model_version))
    return invalid_argument(error, "create_round: base model version out of range");
  if (round.state != RoundState::kOpen || round.closed_unix_ms != 0 || round.result_model_version != 0 ||
      round.accepted_updates != 0) {
    return invalid_argument(error, "create_round: a new round is open, with no close time, result or count");
  }
  return Status::kOk;
}

Status check_close(uint64_t round_id, RoundState state, uint64_t result_model_version, std::string* error) {
  if (round_id == 0 || !fits_i64(round_id))
    return invalid_argument(error, "close_round: round id out of range");
  if (state == RoundState::kCommitted) {
    if (result_model_version == 0 || !fits_i64(result_model_version)) {
      return invalid_argument(error, "close_round: a committed round needs its result model version");
    }
  } else if (state == RoundState::kAbandoned) {
    if (result_model_version != 0)
      return invalid_argument(error, "close_round: an abandoned round has no result model");
  } else {
    return invalid_argument(error, "close_round: the new state must be committed or abandoned");
  }
  return Status::kOk;
}

Status check_new_update(const UpdateRecord& update, const InsertResult* result, std::string* error) {
  if (result == nullptr) return invalid_argument(error, "record_update: null result");
  if (update.round_id == 0 || !fits_i64(update.round_id))
    return invalid_argument(error, "record_update: round id out of range");
  if (update.device_id.empty() || update.device_id.find('\0') != std::string::npos) {
    return invalid_argument(error, "record_update: the device id must be non-empty text");
  }
  if (update.aggregator.find('\0') != std::string::npos)
    return invalid_argument(error, "record_update: the aggregator must be text");
  if (update.payload.size() != update.payload_bytes || !fits_i64(update.payload_bytes)) {
    return invalid_argument(error, "record_update: payload_bytes differs from the payload's size");
  }
  return Status::kOk;
}

Status check_new_partial_sum(const PartialSum& sum, std::string* error) {
  if (sum.round_id == 0 || !fits_i64(sum.round_id) || !fits_i64(sum.updates) ||
      sum.sequence_sum > kSequenceSumMask)
    return invalid_argument(error, "put_partial_sum: value out of range");
  if (sum.aggregator.empty() || sum.aggregator.find('\0') != std::string::npos)
    return invalid_argument(error, "put_partial_sum: the aggregator must be non-empty text");
  if (sum.state.empty() || sum.state.size() > kMaxPartialSumBytes)
    return invalid_argument(error, "put_partial_sum: the state must hold 1 .. 1023 MiB");
  return Status::kOk;
}

Status check_new_model(const ModelRecord& model, std::string* error) {
  if (model.version == 0 || !fits_i64(model.version))
    return invalid_argument(error, "record_model: version out of range");
  if (!fits_i64(model.round_id) || !fits_i64(model.bytes))
    return invalid_argument(error, "record_model: value out of range");
  if (!valid_relative_path(model.path)) {
    return invalid_argument(error, "record_model: the path must be relative to the state directory");
  }
  return Status::kOk;
}

Status check_new_event(const RoundEvent& event, std::string* error) {
  if (event.round_id == 0 || !fits_i64(event.round_id))
    return invalid_argument(error, "append_round_event: round id out of range");
  if (event.kind == 0 || event.kind > 255)
    return invalid_argument(error, "append_round_event: kind out of range");
  if (event.device_id.find('\0') != std::string::npos) {
    return invalid_argument(error, "append_round_event: the device id must be text");
  }
  if (event.payload.size() > kMaxRoundEventBytes) {
    return invalid_argument(error, "append_round_event: payload above kMaxRoundEventBytes");
  }
  return Status::kOk;
}

const char* round_state_name(RoundState state) {
  switch (state) {
    case RoundState::kOpen: return "open";
    case RoundState::kCommitted: return "committed";
    case RoundState::kAbandoned: return "abandoned";
  }
  return "unknown";
}

// A path relative to the state directory: not empty, not absolute, no "." or ".." component, no
// NUL, no empty component.
bool valid_relative_path(const std::string& path) {
  if (path.empty() || path.front() == '/' || path.find('\0') != std::string::npos) return false;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    const std::string part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

Status StorageGate::enter(std::unique_lock<std::mutex>* lock, std::string* error) {
  if (iterating_.load() == std::this_thread::get_id()) {
    return invalid_argument(error, "storage: called from inside a for_each_update callback");
  }
  *lock = std::unique_lock<std::mutex>(mutex_);
  return Status::kOk;
}

namespace {
Status not_shared(const char* call, std::string* error) {
  return invalid_argument(error, std::string(call) +
                                     ": this store belongs to one server (several aggregators need "
                                     "--state postgresql://...)");
}
}  // namespace

Status Storage::acquire_lease(const std::string&, uint32_t, int64_t, Lease*, std::string* error) {
  return not_shared("acquire_lease", error);
}
Status Storage::set_fence(const std::string&, uint64_t, std::string* error) {
  return not_shared("set_fence", error);
}
Status Storage::release_lease(const std::string&, std::string* error) {
  return not_shared("release_lease", error);
}
Status Storage::seal_round(uint64_t, std::string* error) {
  return not_shared("seal_round", error);
}
Status Storage::list_settings(const std::string&, std::vector<std::pair<std::string, std::string>>*,
                              std::string* error) {
  return not_shared("list_settings", error);
}

Status Storage::ledger_shares(uint64_t, std::vector<LedgerShare>*, std::string* error) {
  return not_shared("ledger_shares", error);
}
Status Storage::for_each_update_of(uint64_t, const std::string&,
                                   const std::function<Status(const UpdateRecord&)>&, std::string* error) {
  return not_shared("for_each_update_of", error);
}
Status Storage::put_partial_sum(const PartialSum&, std::string* error) {
  return not_shared("put_partial_sum", error);
}
Status Storage::for_each_partial_sum(uint64_t, bool, const std::function<Status(const PartialSum&)>&,
                                     std::string* error) {
  return not_shared("for_each_partial_sum", error);
}

bool is_postgres_url(const std::string& state) {
  return state.rfind("postgresql://", 0) == 0 || state.rfind("postgres://", 0) == 0;
}

}  // namespace server
}  // namespace edgefl
