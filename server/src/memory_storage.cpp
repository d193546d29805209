#include "memory_storage.h"

#include <stdint.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>

namespace edgefl {
namespace server {
namespace {

class MemoryStorage final : public Storage {
 public:
  Status create_round(const RoundRecord& round, std::string* error) override {
    EDGEFL_RETURN_IF_ERROR(check_new_round(round, error));
    std::unique_lock<std::mutex> lock;
    EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
    EDGEFL_RETURN_IF_ERROR(check_fence("create_round", error));
    if (rounds_.count(round.round_id) != 0) {
      return invalid_argument(error, "create_round: round " + std::to_string(round.round_id) + " exists");
    }
    if (const RoundRecord* open = find_open()) {
      return invalid_argument(error,
                              "create_round: round " + std::to_string(open->round_id) + " is still open");
    }
    rounds_[round.round_id] = round;
    return Status::kOk;
  }

  Status close_round(uint64_t round_id, RoundState state, uint64_t result_model_version,
                     int64_t closed_unix_ms, std::string* error) override {
    EDGEFL_RETURN_IF_ERROR(check_close(round_id, state, result_model_version, error));
    std::unique_lock<std::mutex> lock;
    EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
    EDGEFL_RETURN_IF_ERROR(check_fence("close_round", error));
    auto it = rounds_.find(round_id);
    if (it == rounds_.end())
      return invalid_argument(error, "close_round: no round " + std::to_string(round_id));
    RoundRecord& round = it->second;
    if (round.state != RoundState::kOpen) {
      return invalid_argument(
          error, "close_round: round " + std::to_string(round_id) + " is " + round_state_name(round.state));
    }
    if (state == RoundState::kCommitted) {
      auto model = models_.find(result_model_version);
      if (model == models_.end()) {
        return invalid_argument(
            error, "close_round: model version " + std::to_string(result_model_version) + " is not recorded");
      }
      if (model->second.round_id != round_id) {
        return invalid_argument(error, "close_round: model version " + std::to_string(result_model_version) +
                                           " was recorded for another round");
      }
    }
    uint64_t previous_commit = 0;  // payloads after it and up to this round go with a commit
    for (const auto& [id, earlier] : rounds_) {
      if (id < round_id && earlier.state == RoundState::kCommitted) previous_commit = id;
    }
    uint32_t count = 0;
    for (auto& [key, update] : updates_) {
      if (key.first == round_id) ++count;
      if (state == RoundState::kCommitted && key.first > previous_commit && key.first <= round_id)
        std::vector<uint8_t>().swap(update.payload);  // the ledger row stays, its payload goes
    }
    events_.erase(round_id);
    partial_sums_.erase(partial_sums_.lower_bound({round_id, std::string()}),
                        partial_sums_.lower_bound({round_id + 1, std::string()}));
    round.state = state;
    round.result_model_version = result_model_version;
    round.closed_unix_ms = closed_unix_ms;
    round.accepted_updates = count;
    return Status::kOk;
  }

  Status open_round(std::optional<RoundRecord>* out, std::string* error) override {
    if (out == nullptr) return invalid_argument(error, "open_round: null output");
    std::unique_lock<std::mutex> lock;
    EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
    const RoundRecord* open = find_open();
    *out = open != nullptr ? std::optional<RoundRecord>(*open) : std::nullopt;
    return Status::kOk;
  }

  Status get_round(uint64_t round_id, std::optional<RoundRecord>* out, std::string* error) override {
    if (out == nullptr) return invalid_argument(error, "get_round: null output");
    if (!fits_i64(round_id)) return invalid_argument(error, "get_round: round id out of range");
    std::unique_lock<std::mutex> lock;
    EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
    auto it = rounds_.find(round_id);
    *out = it != rounds_.end() ? std::optional<RoundRecord>(it->second) : std::nullopt;
    return Status::kOk;
  }

  Status last_round_id(uint64_t* out, std::string* error) override {
    if (out == nullptr) return invalid_argument(error, "last_round_id: null output");
    std::unique_lock<std::mutex> lock;
    EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
    *out = rounds_.empty() ? 0 : rounds_.rbegin()->first;
    return Status::kOk;
  }

  Status record_update(const UpdateRecord& update, InsertResult* result, uint64_t* sequence,
                       std::string* error) override {
    EDGEFL_RETURN_IF_ERROR(check_new_update(update, result, error));
    std::unique_lock<std::mutex> lock;
    EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
    auto round = rounds_.find(update.round_id);
    if (round == rounds_.end())
      return invalid_argument(error, "record_update: no round " + std::to_string(update.round_id));
    if (round->second.state != RoundState::kOpen) {
      return invalid_argument(error, "record_update: round " + std::to_string(update.round_id) + " is " +
                                         round_state_name(round->second.state));
    }
    if (round->second.sealed) {
      return invalid_argument(
          error, "record_update: round " + std::to_string(update.round_id) + " is sealed (closing)");
    }
    auto existing = updates_.find({update.round_id, update.device_id});
    if (existing != updates_.end()) {  // the same upload retried, or a second one: the first stands
      *result = InsertResult::kDuplicate;
      if (sequence != nullptr) *sequence = existing->second.sequence;
      return Status::kOk;
    }
    UpdateRecord stored = update;
    stored.sequence = ++last_sequence_;
    updates_[{update.round_id, update.device_id}] = std::move(stored);
    *result = InsertResult::kInserted;
    if (sequence != nullptr) *sequence = last_sequence_;
    return Status::kOk;
  }

  Status find_update(uint64_t round_id, const std::string& device_id, std::optional<UpdateRecord>* out,
                     std::string* error) override {
    if (out == nullptr) return invalid_argument(error, "find_update: null output");
    if (!fits_i64(round_id)) return invalid_argument(error, "find_update: round id out of range");
    std::unique_lock<std::mutex> lock;
    EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
    auto it = updates_.find({round_id, device_id});
    if (it == updates_.end()) {
      out->reset();
      return Status::kOk;
    }
    UpdateRecord u = it->second;
    u.payload.clear();  // without payload, as documented
    *out = std::move(u);
    return Status::kOk;
  }

  Status count_updates(uint64_t round_id, uint64_t* out, std::string* error) override {
    if (out == nullptr) return invalid_argument(error, "count_updates: null output");
    if (!fits_i64(round_id)) return invalid_argument(error, "count_updates: round id out of range");
    std::unique_lock<std::mutex> lock;
    EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
    uint64_t n = 0;
    for (const auto& entry : updates_) n += entry.first.first == round_id;
    *out = n;
    return Status::kOk;
  }

  Status for_each_update(uint64_t round_id, const std::function<Status(const UpdateRecord&)>& fn,
                         std::string* error) override {
    if (!fn) return invalid_argument(error, "for_each_update: no callback");
    if (!fits_i64(round_id)) return invalid_argument(error, "for_each_update: round id out of range");
    return visit_updates(round_id, nullptr, fn, error);
  }

  Status append_round_event(const RoundEvent& event, std::string* error) override {
    EDGEFL_RETURN_IF_ERROR(check_new_event(event, error));
    std::unique_lock<std::mutex> lock;
    EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
    auto it = rounds_.find(event.round_id);
    if (it == rounds_.end() || it->second.state != RoundState::kOpen) {
      return invalid_argument(error,
                              "append_round_event: round " + std::to_string(event.round_id) + " is not open");
    }
    RoundEvent stored = event;
    stored.sequence = ++last_event_sequence_;
    events_[event.round_id].push_back(std::move(stored));
    return Status::kOk;
  }

  Status for_each_round_event(uint64_t round_id, const std::function<Status(const RoundEvent&)>& fn,
                              std::string* error) override {
    if (!fn) return invalid_argument(error, "for_each_round_event: no callback");
    std::unique_lock<std::mutex> lock;
    EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
    auto it = events_.find(round_id);
    if (it == events_.end()) return Status::kOk;
    return visit(it->second, fn);
  }

  Status record_model(const ModelRecord& model, std::string* error) override {
    EDGEFL_RETURN_IF_ERROR(check_new_model(model, error));
    std::unique_lock<std::mutex> lock;
    EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
    EDGEFL_RETURN_IF_ERROR(check_fence("record_model", error));
    if (!models_.empty() && model.version <= models_.rbegin()->first) {
      return invalid_argument(error, "record_model: version " + std::to_string(model.version) +
                                         " is not above " + std::to_string(models_.rbegin()->first));
    }
    if (model.round_id != 0) {
      auto round = rounds_.find(model.round_id);
      if (round == rounds_.end() || round->second.state != RoundState::kOpen) {
        return invalid_argument(error,
                                "record_model: round " + std::to_string(model.round_id) + " is not open");
      }
    }
    models_[model.version] = model;
    return Status::kOk;
  }

  Status latest_model(std::optional<ModelRecord>* out, std::string* error) override {
    if (out == nullptr) return invalid_argument(error, "latest_model: null output");
    std::unique_lock<std::mutex> lock;
    EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
    *out = models_.empty() ? std::nullopt : std::optional<ModelRecord>(models_.rbegin()->second);
    return Status::kOk;
  }

  Status put_setting(const std::string& key, const std::string& value, std::string* error) override {
    if (key.empty()) return invalid_argument(error, "put_setting: empty key");
    std::unique_lock<std::mutex> lock;
    EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
    settings_[key] = value;
    return Status::kOk;
  }

  Status get_setting(const std::string& key, std::optional<std::string>* value, std::string* error) override {
    if (value == nullptr) return invalid_argument(error, "get_setting: null output");
    std::unique_lock<std::mutex> lock;
    EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
    auto it = settings_.find(key);
    *value = it != settings_.end() ? std::optional<std::string>(it->second) : std::nullopt;
    return Status::kOk;
  }

  Status acquire_lease(const std::string& holder, uint32_t ttl_ms, int64_t now_ms, Lease* out,
                       std::string* error) override {
    if (holder.empty() || ttl_ms == 0 || out == nullptr)
      return invalid_argument(error, "acquire_lease: empty holder, zero ttl or null output");
    std::unique_lock<std::mutex> lock;
    EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
    Shared& s = *shared_;
    s.clock_ms = std::max(s.clock_ms, now_ms);
    const bool mine = s.lease.holder == holder && s.lease.expires_unix_ms > s.clock_ms;
    if (mine || s.lease.holder.empty() || s.lease.expires_unix_ms <= s.clock_ms) {
      if (s.lease.holder != holder) ++s.lease.epoch;
      s.lease.holder = holder;
      s.lease.expires_unix_ms = s.clock_ms + int64_t{ttl_ms};
    }
    *out = s.lease;
    out->held = s.lease.holder == holder;
    return Status::kOk;
  }

  Status release_lease(const std::string& holder, std::string* error) override {
    std::unique_lock<std::mutex> lock;
    EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
    Shared& s = *shared_;
    if (!holder.empty() && s.lease.holder == holder) {
      s.lease.expires_unix_ms = std::min(s.lease.expires_unix_ms, s.clock_ms);
      s.lease.holder += " (released)";  // whoever takes it next, even `holder`, starts a new epoch
    }
    return Status::kOk;
  }

  Status set_fence(const std::string& holder, uint64_t epoch, std::string* error) override {
    std::unique_lock<std::mutex> lock;
    EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
    fence_holder_ = holder;
    fence_epoch_ = holder.empty() ? 0 : epoch;
    return Status::kOk;
  }

  Status list_settings(const std::string& prefix, std::vector<std::pair<std::string, std::string>>* out,
                       std::string* error) override {
    if (out == nullptr) return invalid_argument(error, "list_settings: null output");
    std::unique_lock<std::mutex> lock;
    EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
    out->clear();
    for (auto it = settings_.lower_bound(prefix); it != settings_.end() && it->first.rfind(prefix, 0) == 0;
         ++it)
      out->emplace_back(it->first, it->second);
    return Status::kOk;
  }

  Status seal_round(uint64_t round_id, std::string* error) override {
    std::unique_lock<std::mutex> lock;
    EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
    EDGEFL_RETURN_IF_ERROR(check_fence("seal_round", error));
    auto it = rounds_.find(round_id);
    if (it == rounds_.end() || it->second.state != RoundState::kOpen)
      return invalid_argument(error, "seal_round: round " + std::to_string(round_id) + " is not open");
    it->second.sealed = true;
    return Status::kOk;
  }

  Status ledger_shares(uint64_t round_id, std::vector<LedgerShare>* out, std::string* error) override {
    if (out == nullptr) return invalid_argument(error, "ledger_shares: null output");
    std::unique_lock<std::mutex> lock;
    EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
    std::map<std::string, LedgerShare> shares;
    for (const auto& [key, update] : updates_) {
      if (key.first != round_id) continue;
      LedgerShare& share = shares[update.aggregator];
      share.aggregator = update.aggregator;
      ++share.updates;
      share.payload_bytes += update.payload_bytes;
      share.samples += update.sample_count;
      share.sequence_sum = (share.sequence_sum + update.sequence) & kSequenceSumMask;
    }
    out->clear();
    for (auto& entry : shares) out->push_back(std::move(entry.second));
    return Status::kOk;
  }

  Status for_each_update_of(uint64_t round_id, const std::string& aggregator,
                            const std::function<Status(const UpdateRecord&)>& fn,
                            std::string* error) override {
    if (!fn) return invalid_argument(error, "for_each_update_of: no callback");
    return visit_updates(round_id, &aggregator, fn, error);
  }

  Status put_partial_sum(const PartialSum& sum, std::string* error) override {
    EDGEFL_RETURN_IF_ERROR(check_new_partial_sum(sum, error));
    std::unique_lock<std::mutex> lock;
    EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
    auto it = rounds_.find(sum.round_id);
    if (it == rounds_.end() || it->second.state != RoundState::kOpen || !it->second.sealed) {
      return invalid_argument(
          error, "put_partial_sum: round " + std::to_string(sum.round_id) + " is not open and sealed");
    }
    partial_sums_[{sum.round_id, sum.aggregator}] = sum;
    return Status::kOk;
  }

  Status for_each_partial_sum(uint64_t round_id, bool with_state,
                              const std::function<Status(const PartialSum&)>& fn,
                              std::string* error) override {
    if (!fn) return invalid_argument(error, "for_each_partial_sum: no callback");
    std::unique_lock<std::mutex> lock;
    EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
    std::vector<const PartialSum*> rows;
    for (auto it = partial_sums_.lower_bound({round_id, std::string()});
         it != partial_sums_.end() && it->first.first == round_id; ++it)
      rows.push_back(&it->second);
    return visit(rows, [&](const PartialSum* p) {
      if (with_state) return fn(*p);
      PartialSum bare = *p;
      bare.state.clear();
      return fn(bare);
    });
  }

 private:
  // for_each_update (aggregator null) and for_each_update_of: the round's rows in acceptance order.
  Status visit_updates(uint64_t round_id, const std::string* aggregator,
                       const std::function<Status(const UpdateRecord&)>& fn, std::string* error) {
    std::unique_lock<std::mutex> lock;
    EDGEFL_RETURN_IF_ERROR(gate_.enter(&lock, error));
    std::vector<const UpdateRecord*> rows;
    for (const auto& [key, update] : updates_) {
      if (key.first == round_id && (aggregator == nullptr || update.aggregator == *aggregator))
        rows.push_back(&update);
    }
    std::sort(rows.begin(), rows.end(),
              [](const UpdateRecord* a, const UpdateRecord* b) { return a->sequence < b->sequence; });
    return visit(rows, [&](const UpdateRecord* u) { return fn(*u); });
  }

  // Calls fn on each of `rows` until it returns non-kOk. The caller holds the lock throughout (as
  // with SQLite), and this thread is marked: a callback that calls back in is refused.
  template <typename Rows, typename Fn>
  Status visit(const Rows& rows, const Fn& fn) {
    StorageGate::Iteration iteration(&gate_);
    for (const auto& row : rows) {
      const Status st = fn(row);
      if (st != Status::kOk) return st;
    }
    return Status::kOk;
  }

  const RoundRecord* find_open() const {
    for (const auto& entry : rounds_) {
      if (entry.second.state == RoundState::kOpen) return &entry.second;
    }
    return nullptr;
  }

  // Fails (kProtocolError) when this client's fence is set and its lease is not held now.
  Status check_fence(const char* call, std::string* error) const {
    if (fence_holder_.empty()) return Status::kOk;
    const Shared& s = *shared_;
    if (s.lease.holder == fence_holder_ && s.lease.epoch == fence_epoch_) return Status::kOk;
    if (error != nullptr) {
      *error = std::string(call) + ": not the coordinator: the lease of '" + fence_holder_ + "' at epoch " +
               std::to_string(fence_epoch_) + " is no longer held (holder '" + s.lease.holder + "', epoch " +
               std::to_string(s.lease.epoch) + ")";
    }
    return Status::kProtocolError;
  }

  // The rows, shared by every client made by make_memory_storage_sharing(); each client has its
  // own fence, as each server has its own connection to a shared database.
  struct Shared {
    StorageGate gate;
    std::map<uint64_t, RoundRecord> rounds;
    std::map<std::pair<uint64_t, std::string>, UpdateRecord> updates;  // (round, device) -> row
    std::map<uint64_t, ModelRecord> models;                            // by version
    std::map<std::string, std::string> settings;
    uint64_t last_sequence = 0;
    std::map<uint64_t, std::vector<RoundEvent>> events;  // by round, in append order
    uint64_t last_event_sequence = 0;
    std::map<std::pair<uint64_t, std::string>, PartialSum> partial_sums;  // (round, aggregator)
    Lease lease;                                                          // `held` unused
    int64_t clock_ms = 0;  // the latest now_ms given to acquire_lease: this store's clock
  };

 public:
  MemoryStorage() : MemoryStorage(std::make_shared<Shared>()) {}
  explicit MemoryStorage(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}
  const std::shared_ptr<Shared>& shared() const { return shared_; }

 private:
  std::shared_ptr<Shared> shared_;
  StorageGate& gate_ = shared_->gate;
  std::map<uint64_t, RoundRecord>& rounds_ = shared_->rounds;
  std::map<std::pair<uint64_t, std::string>, UpdateRecord>& updates_ = shared_->updates;
  std::map<uint64_t, ModelRecord>& models_ = shared_->models;
  std::map<std::string, std::string>& settings_ = shared_->settings;
  uint64_t& last_sequence_ = shared_->last_sequence;
  std::map<uint64_t, std::vector<RoundEvent>>& events_ = shared_->events;
  uint64_t& last_event_sequence_ = shared_->last_event_sequence;
  std::map<std::pair<uint64_t, std::string>, PartialSum>& partial_sums_ = shared_->partial_sums;
  std::string fence_holder_;
  uint64_t fence_epoch_ = 0;
};

}  // namespace

std::unique_ptr<Storage> make_memory_storage() {
  return std::make_unique<MemoryStorage>();
}

std::unique_ptr<Storage> make_memory_storage_sharing(Storage* other) {
  auto* memory = dynamic_cast<MemoryStorage*>(other);
  if (memory == nullptr) return nullptr;
  return std::make_unique<MemoryStorage>(memory->shared());
}

}  // namespace server
}  // namespace edgefl
