// tests/server/rounds_test.cpp: RoundManager in process, with SQLite (or MemoryStorage) in a
// temporary directory and a fake clock, no sockets: its rules, and the faults that must cost
// nothing but themselves.
//
//   server.rounds.influence   an update that would overflow the model, or is above the norm bound, or
//                      not finite, is rejected before its ack with its reason; a commit that
//                      cannot succeed abandons the round with a reason; the server restarts
//   server.rounds.close       a failing disk (each write, fsync, rename, ... in turn), failing storage
//                      calls, a crash between any two steps of a close, a full and a read-only
//                      filesystem: the next model is the FedAvg of the ledger, applied once
//   server.rounds.leases      offers of silent devices go back to the pool
//   server.rounds.ids         out-of-range round ids are unknown rounds, not storage failures
//   server.rounds.seeds       each device's own codec and training seeds (round/seeds.h)
//   server.rounds.logic       selection, deadlines and quorum, duplicates, stragglers, late
//                      commits, restart rebuild (over MemoryStorage)
//
// Reference model: global + float(sum_i w_i u_i / sum_i w_i) with binary64 sums in acceptance
// order (FedAvg, server learning rate 1), computed here from the updates the test sent.
#include <errno.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/rng.h"
#include "edgefl/codec.h"
#include "edgefl/model.h"
#include "log.h"
#include "memory_storage.h"
#include "model_files.h"
#include "round/downlink.h"
#include "rounds.h"
#include "safetensors.h"
#include "secagg/crypto.h"
#include "secagg/protocol.h"
#include "secagg/wire_form.h"
#include "sqlite_storage.h"
#include "tls/digest.h"

namespace {

using namespace edgefl;
using namespace edgefl::server;
namespace fs = std::filesystem;

constexpr char kSpec[] = "mlp:784-4-10";  // 3,190 parameters: fast, and big enough to matter
constexpr int64_t kT0 = 1'800'000'000'000;

// Every directory make_temp_dir() made, removed when the test program exits (with the tests that
// remove their own, and after a failure too); EDGEFL_KEEP_TEST_DIRS=1 keeps them for a post-mortem.
struct TempDirs {
  std::vector<std::string> made;
  ~TempDirs() {
    if (const char* keep = getenv("EDGEFL_KEEP_TEST_DIRS"); keep != nullptr && keep[0] == '1') return;
    for (const std::string& dir : made) {
      std::error_code ignored;  // already removed by its test: fine
      fs::remove_all(dir, ignored);
    }
  }
};
TempDirs g_temp_dirs;

std::string make_temp_dir() {
  char tmpl[] = "/tmp/edgefl-rounds-XXXXXX";
  const char* dir = mkdtemp(tmpl);
  REQUIRE(dir != nullptr);
  g_temp_dirs.made.push_back(dir);
  return dir;
}

// Storage that fails chosen calls (kIoError, nothing changed) while `failing` names them.
class FaultyStorage final : public Storage {
 public:
  explicit FaultyStorage(std::unique_ptr<Storage> inner) : owned_(std::move(inner)), inner_(owned_.get()) {}
  explicit FaultyStorage(Storage* borrowed) : inner_(borrowed) {}
  std::map<std::string, int> failing;  // call -> failures left (-1: always)
  std::map<std::string, int> calls;
  // record_update calls that take effect and still fail (kIoError): a networked store whose
  // connection dropped during COMMIT. The caller cannot tell; the ledger holds the update.
  int record_update_in_doubt = 0;
  // find_update calls that answer "no such row" although the ledger holds it: a row another
  // aggregator inserted between a lookup and this server's insert.
  int hide_updates = 0;

  Status create_round(const RoundRecord& r, std::string* e) override {
    if (fail("create_round", e)) return Status::kIoError;
    return inner_->create_round(r, e);
  }
  Status close_round(uint64_t id, RoundState st, uint64_t v, int64_t t, std::string* e) override {
    if (fail("close_round", e)) return Status::kIoError;
    return inner_->close_round(id, st, v, t, e);
  }
  Status open_round(std::optional<RoundRecord>* out, std::string* e) override {
    return inner_->open_round(out, e);
  }
  Status get_round(uint64_t id, std::optional<RoundRecord>* out, std::string* e) override {
    if (fail("get_round", e)) return Status::kIoError;
    return inner_->get_round(id, out, e);
  }
  Status last_round_id(uint64_t* out, std::string* e) override { return inner_->last_round_id(out, e); }
  Status record_update(const UpdateRecord& u, InsertResult* r, uint64_t* seq, std::string* e) override {
    if (fail("record_update", e)) return Status::kIoError;
    const Status st = inner_->record_update(u, r, seq, e);
    if (st == Status::kOk && record_update_in_doubt > 0) {
      --record_update_in_doubt;
      if (e != nullptr) *e = "injected: the connection dropped during COMMIT (it took effect)";
      return Status::kIoError;
    }
    return st;
  }
  Status find_update(uint64_t id, const std::string& d, std::optional<UpdateRecord>* out,
                     std::string* e) override {
    if (fail("find_update", e)) return Status::kIoError;
    if (hide_updates > 0) {
      --hide_updates;
      out->reset();
      return Status::kOk;
    }
    return inner_->find_update(id, d, out, e);
  }
  Status count_updates(uint64_t id, uint64_t* out, std::string* e) override {
    if (fail("count_updates", e)) return Status::kIoError;
    return inner_->count_updates(id, out, e);
  }
  Status for_each_update(uint64_t id, const std::function<Status(const UpdateRecord&)>& fn,
                         std::string* e) override {
    if (fail("for_each_update", e)) return Status::kIoError;
    return inner_->for_each_update(id, fn, e);
  }
  Status append_round_event(const RoundEvent& ev, std::string* e) override {
    if (fail("append_round_event", e)) return Status::kIoError;
    return inner_->append_round_event(ev, e);
  }
  Status for_each_round_event(uint64_t id, const std::function<Status(const RoundEvent&)>& fn,
                              std::string* e) override {
    if (fail("for_each_round_event", e)) return Status::kIoError;
    return inner_->for_each_round_event(id, fn, e);
  }
  Status record_model(const ModelRecord& m, std::string* e) override {
    if (fail("record_model", e)) return Status::kIoError;
    return inner_->record_model(m, e);
  }
  Status latest_model(std::optional<ModelRecord>* out, std::string* e) override {
    if (fail("latest_model", e)) return Status::kIoError;
    return inner_->latest_model(out, e);
  }
  Status put_setting(const std::string& k, const std::string& v, std::string* e) override {
    if (fail("put_setting", e)) return Status::kIoError;
    return inner_->put_setting(k, v, e);
  }
  Status get_setting(const std::string& k, std::optional<std::string>* v, std::string* e) override {
    if (fail("get_setting", e)) return Status::kIoError;
    return inner_->get_setting(k, v, e);
  }
  Status acquire_lease(const std::string& h, uint32_t ttl, int64_t now, Lease* out, std::string* e) override {
    if (fail("acquire_lease", e)) return Status::kIoError;
    return inner_->acquire_lease(h, ttl, now, out, e);
  }
  Status set_fence(const std::string& h, uint64_t epoch, std::string* e) override {
    if (fail("set_fence", e)) return Status::kIoError;
    return inner_->set_fence(h, epoch, e);
  }
  Status release_lease(const std::string& h, std::string* e) override {
    ++calls["release_lease"];
    return inner_->release_lease(h, e);
  }
  Status list_settings(const std::string& prefix, std::vector<std::pair<std::string, std::string>>* out,
                       std::string* e) override {
    return inner_->list_settings(prefix, out, e);
  }
  Status seal_round(uint64_t id, std::string* e) override {
    if (fail("seal_round", e)) return Status::kIoError;
    return inner_->seal_round(id, e);
  }
  Status ledger_shares(uint64_t id, std::vector<LedgerShare>* out, std::string* e) override {
    if (fail("ledger_shares", e)) return Status::kIoError;
    return inner_->ledger_shares(id, out, e);
  }
  Status for_each_update_of(uint64_t id, const std::string& a,
                            const std::function<Status(const UpdateRecord&)>& fn, std::string* e) override {
    if (fail("for_each_update_of", e)) return Status::kIoError;
    return inner_->for_each_update_of(id, a, fn, e);
  }
  Status put_partial_sum(const PartialSum& sum, std::string* e) override {
    if (fail("put_partial_sum", e)) return Status::kIoError;
    return inner_->put_partial_sum(sum, e);
  }
  Status for_each_partial_sum(uint64_t id, bool with_state,
                              const std::function<Status(const PartialSum&)>& fn, std::string* e) override {
    if (fail("for_each_partial_sum", e)) return Status::kIoError;
    return inner_->for_each_partial_sum(id, with_state, fn, e);
  }

 private:
  bool fail(const char* call, std::string* e) {
    ++calls[call];
    auto it = failing.find(call);
    if (it == failing.end() || it->second == 0) return false;
    if (it->second > 0) --it->second;
    if (e != nullptr) *e = std::string("injected failure of ") + call;
    return true;
  }
  std::unique_ptr<Storage> owned_;
  Storage* inner_;
};

struct Update {
  std::string device;
  std::vector<float> values;
  uint32_t samples = 1;
};

// One server's round state over a state directory; reopen() is a restart.
struct Server {
  std::string dir;
  bool in_memory = false;  // MemoryStorage instead of SQLite (model files still go to `dir`)
  std::unique_ptr<Storage> memory_store;
  Storage* share_with = nullptr;  // in_memory: another server's store, shared (several aggregators)
  RoundOptions options;
  std::unique_ptr<Storage> sqlite;
  FaultyStorage* faults = nullptr;
  std::map<std::string, int> failing_at_open;  // faults->failing from the start of open()
  std::unique_ptr<Storage> storage;
  Metrics metrics;
  std::unique_ptr<RoundManager> rounds;
  int64_t now = kT0;

  explicit Server(std::string state_dir, RoundOptions o = {})
      : dir(std::move(state_dir)), options(std::move(o)) {
    options.model_spec = kSpec;
    if (options.uplink_codec == "sparq:0.1") options.uplink_codec = "fp32";
    options.state_dir = dir;
    set_log_level(LogLevel::kError);
  }

  Status open() {
    std::string error;
    std::unique_ptr<Storage> inner;
    std::unique_ptr<FaultyStorage> faulty;
    if (in_memory) {  // the store outlives reopen(): a restart
      if (!memory_store)
        memory_store =
            share_with != nullptr ? make_memory_storage_sharing(share_with) : make_memory_storage();
      faulty = std::make_unique<FaultyStorage>(memory_store.get());
    } else {
      REQUIRE(open_sqlite_storage(dir + "/state.db", &inner, &error) == Status::kOk);
      faulty = std::make_unique<FaultyStorage>(std::move(inner));
    }
    faults = faulty.get();
    faults->failing = failing_at_open;
    storage = std::move(faulty);
    rounds = std::make_unique<RoundManager>(options, storage.get(), &metrics);
    const Status s = rounds->start(now, &error);
    INFO(error);
    return s;
  }
  void reopen() {
    rounds.reset();
    storage.reset();
    REQUIRE(open() == Status::kOk);
  }

  wire::TaskOffer offer(const std::string& device, uint64_t held_model_version = 0, uint32_t flags = 0) {
    wire::Hello hello;
    hello.sdk_version = "test";
    hello.model_version = held_model_version;
    hello.capability_flags = flags;
    Reply r = rounds->hello(device, hello, now);
    const auto* offer = std::get_if<wire::TaskOffer>(&r.message);
    REQUIRE_MESSAGE(offer != nullptr, "no offer for " << device);
    return *offer;
  }

  // Uploads and commits `u` under `offer`; returns the server's answer.
  wire::Message upload(const wire::TaskOffer& offer, const Update& u, const char* codec = "fp32") {
    CodecSpec spec;
    REQUIRE(parse_codec_spec(codec, &spec) == Status::kOk);
    std::vector<uint8_t> ws(workspace_size(spec, u.values.size())), out(encoded_bound(spec, u.values.size()));
    size_t written = 0;
    REQUIRE(encode(spec, {u.values.data(), u.values.size()}, offer.codec_seed, {ws.data(), ws.size()},
                   {out.data(), out.size()}, &written) == Status::kOk);
    out.resize(written);
    return upload_bytes(offer, u.device, out, u.samples);
  }

  wire::Message upload_bytes(const wire::TaskOffer& offer, const std::string& device,
                             const std::vector<uint8_t>& bytes, uint32_t samples) {
    wire::UploadStart start;
    start.round_id = offer.round_id;
    start.round_nonce = offer.round_nonce;
    start.upload_id.fill(0);
    for (size_t i = 0; i < device.size(); ++i) start.upload_id[i % 16] ^= uint8_t(device[i]);
    start.upload_id[15] ^= 0x5A;
    start.total_bytes = bytes.size();
    Reply r = rounds->upload_start(device, start, now);
    if (!std::holds_alternative<wire::UploadStatus>(r.message)) return r.message;
    const uint64_t have = std::get<wire::UploadStatus>(r.message).offset;
    for (uint64_t off = have; off < bytes.size(); off += 4096) {
      wire::UploadChunk chunk;
      chunk.round_id = offer.round_id;
      chunk.upload_id = start.upload_id;
      chunk.offset = off;
      chunk.total_bytes = bytes.size();
      chunk.data.assign(bytes.begin() + long(off),
                        bytes.begin() + long(std::min<uint64_t>(bytes.size(), off + 4096)));
      std::optional<Reply> cr = rounds->upload_chunk(device, chunk, now);
      if (cr) return cr->message;
    }
    wire::Commit commit;
    commit.round_id = offer.round_id;
    commit.round_nonce = offer.round_nonce;
    commit.upload_id = start.upload_id;
    commit.total_bytes = bytes.size();
    commit.sample_count = samples;
    const tls::Sha256Digest d = tls::sha256({bytes.data(), bytes.size()});
    std::memcpy(commit.digest.data(), d.data(), d.size());
    return rounds->commit(device, commit, now).message;
  }

  std::vector<float> model() const {
    auto m = rounds->global_model();
    return {m.data(), m.data() + m.size()};
  }
  // The model file on disk for `version`, decoded.
  std::vector<float> model_file(uint64_t version) const {
    char name[64];
    std::snprintf(name, sizeof name, "/model-v%06llu.safetensors", static_cast<unsigned long long>(version));
    std::vector<uint8_t> file;
    std::string error;
    REQUIRE(read_file(dir + name, 1u << 28, &file, &error) == Status::kOk);
    ModelSpec spec;
    REQUIRE(parse_model_spec(kSpec, &spec) == Status::kOk);
    std::vector<float> values;
    std::map<std::string, std::string> meta;
    REQUIRE(decode_safetensors({file.data(), file.size()}, spec, &values, &meta, &error) == Status::kOk);
    return values;
  }
};

wire::UpdateDisposition disposition(const wire::Message& m) {
  const auto* ack = std::get_if<wire::Ack>(&m);
  REQUIRE_MESSAGE(ack != nullptr,
                  "expected an Ack, got message type " << wire::message_type_name(wire::message_type(m)));
  return ack->disposition;
}

wire::RejectReason reject_reason(const wire::Message& m) {
  const auto* ack = std::get_if<wire::Ack>(&m);
  REQUIRE(ack != nullptr);
  return ack->reason;
}

size_t spec_size() {
  ModelSpec spec;
  REQUIRE(parse_model_spec(kSpec, &spec) == Status::kOk);
  return parameter_count(spec);
}

// A small, deterministic honest update.
Update honest(const std::string& device, uint32_t salt, uint32_t samples) {
  Update u;
  u.device = device;
  u.samples = samples;
  u.values.resize(spec_size());
  uint64_t x = 0x9E3779B97F4A7C15ull * (salt + 1);
  for (float& v : u.values) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v = float(int64_t(x % 2001) - 1000) * 1e-5f;
  }
  return u;
}

// FedAvg with server learning rate 1, as the server computes it.
std::vector<float> fedavg(const std::vector<float>& global, const std::vector<Update>& updates) {
  std::vector<double> sum(global.size(), 0.0);
  double weight = 0;
  for (const Update& u : updates) {
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += double(u.samples) * double(u.values[i]);
    weight += u.samples;
  }
  std::vector<float> out(global.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = global[i] + 1.0f * float(sum[i] / weight);
  return out;
}

// The largest |a[j] - b[j]| (a and b of one size).
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t j = 0; j < a.size(); ++j) worst = std::max(worst, std::fabs(double(a[j] - b[j])));
  return worst;
}

// Runs one round of `updates` (cohort = updates.size()) to its close attempt.
void run_round(Server& s, const std::vector<Update>& updates) {
  for (const Update& u : updates) {
    const wire::TaskOffer offer = s.offer(u.device);
    CHECK(disposition(s.upload(offer, u)) == wire::UpdateDisposition::kAccepted);
  }
}

wire::Digest digest_of(const std::vector<uint8_t>& bytes) {
  const tls::Sha256Digest d = tls::sha256({bytes.data(), bytes.size()});
  wire::Digest out;
  std::memcpy(out.data(), d.data(), out.size());
  return out;
}

// Plain (not secure) rounds walked at random from `seed`, over several rounds: devices say Hello,
// upload in chunks of any size, lose their connection and resume, commit and retry; between their
// steps come a hostile device's messages, failing storage calls (appends, a commit that took
// effect but reported failure, closes, model records, new rounds), restarts and time passing.
struct PlainWalk {
  struct Device {
    std::string id;
    enum class Next { kHello, kStart, kChunk, kCommit } next = Next::kHello;
    wire::TaskOffer offer;
    Update update;
    std::vector<uint8_t> bytes;
    wire::UploadId upload_id{};
    uint64_t offset = 0;
    uint32_t updates = 0;  // updates made so far (the salt of the next)

    wire::UploadStart start() const {
      wire::UploadStart m;
      m.round_id = offer.round_id;
      m.round_nonce = offer.round_nonce;
      m.upload_id = upload_id;
      m.total_bytes = bytes.size();
      return m;
    }
    wire::Commit commit() const {
      wire::Commit m;
      m.round_id = offer.round_id;
      m.round_nonce = offer.round_nonce;
      m.upload_id = upload_id;
      m.total_bytes = bytes.size();
      m.sample_count = update.samples;
      m.digest = digest_of(bytes);
      return m;
    }
  };
  // An update a device sent, by (round, device, digest).
  struct Sent {
    Update update;
    bool acked = false;    // Accepted or Duplicate
    bool refused = false;  // Straggler or Late: must be in no model
  };

  uint64_t rng;
  Server s;
  std::vector<Device> devices;
  std::map<std::tuple<uint64_t, std::string, wire::Digest>, Sent> sent;
  std::string trace;
  uint32_t hostile_sent = 0;
  uint32_t told_already_counted = 0;                 // hostile commits of a counted device answered so
  uint64_t rounds_committed = 0, rounds_closed = 0;  // by check()
  uint64_t commits_carrying = 0;                     // by check(): commits that counted abandoned rounds

  explicit PlainWalk(uint32_t seed) : rng(seed * 0xD1B54A32D192ED03ull), s(make_temp_dir(), options(seed)) {
    s.in_memory = seed % 2 == 1;
    devices.resize(3 + seed % 4);
    for (size_t d = 0; d < devices.size(); ++d) devices[d].id = "dev-" + std::to_string(d);
  }
  static RoundOptions options(uint32_t seed) {
    RoundOptions o;
    o.cohort = 2 + seed % 3;
    o.over_selection = 1.5;
    // Odd seeds: a round commits what it has at its deadline. Even seeds: only a full cohort
    // commits, and a round abandoned below it passes its updates on to the next one.
    // (with deadlines short enough that rounds end mid-walk).
    o.min_quorum = seed % 2 == 1 ? 1 : o.cohort;
    o.deadline_ms = seed % 2 == 1 ? 5000 : 1500;
    return o;
  }
  uint32_t below(uint32_t n) { return uint32_t(splitmix64_next(&rng) % n); }
  // Where the server stands: what a refusal must leave as it was, and a restart rebuild.
  std::string where() {
    // Read past the armed faults (they stay armed for the server).
    const std::map<std::string, int> armed = std::exchange(s.faults->failing, {});
    struct Rearm {
      FaultyStorage* faults;
      const std::map<std::string, int>& armed;
      ~Rearm() { faults->failing = armed; }
    } rearm{s.faults, armed};
    std::string out = "version " + std::to_string(s.rounds->model_version());
    std::optional<RoundRecord> open;
    std::string error;
    REQUIRE(s.storage->open_round(&open, &error) == Status::kOk);
    if (open) {
      uint64_t rows = 0;
      REQUIRE(s.storage->count_updates(open->round_id, &rows, &error) == Status::kOk);
      out += ", round " + std::to_string(open->round_id) + " open with " + std::to_string(rows) + " updates";
    }
    return out;
  }
  void note(const std::string& line) { trace += "\n  " + line; }

  void run() {
    INFO("walk trace:" << trace);
    REQUIRE(s.open() == Status::kOk);
    for (int step = 0; step < 300; ++step) {
      const uint32_t roll = below(100);
      if (roll < 68) {
        act(devices[below(uint32_t(devices.size()))]);
      } else if (roll < 70) {
        Device& d = devices[below(uint32_t(devices.size()))];
        if (d.next != Device::Next::kHello) {
          d.next = Device::Next::kHello;  // the connection dropped: Hello on the next one
          note(d.id + " loses its connection");
        }
      } else if (roll < 78) {
        hostile();
      } else if (roll < 85) {
        static const char* const kCalls[] = {"for_each_update", "record_update", "close_round",
                                             "record_model",    "create_round",  "count_updates",
                                             "get_round",       "put_setting",   "get_setting"};
        const uint32_t pick = below(10);
        if (pick == 9) {
          s.faults->record_update_in_doubt = 1;
          note("armed: a commit that takes effect and reports failure");
        } else {
          s.faults->failing[kCalls[pick]] = 1;
          note(std::string("armed: ") + kCalls[pick] + " fails once");
        }
      } else if (roll < 87) {
        restart();
      } else {
        s.now += 20 + below(400);
        s.rounds->tick(s.now);
        note("now +" + std::to_string(s.now - kT0) + " ms: " + where());
      }
    }
    // No more faults; time runs past the open round's deadline and its close retries.
    s.faults->failing.clear();
    s.faults->record_update_in_doubt = 0;
    for (int i = 0; i < 20; ++i) {
      s.now += 1000;
      s.rounds->tick(s.now);
    }
    check();
  }

  // Every closed round: its model is the previous one plus the FedAvg of its ledger and of the
  // ledgers of the rounds abandoned since the last commit; every acknowledged update is in its
  // round's ledger, once, and so in one model or carried by the open round; no refused or hostile
  // update is.
  void check() {
    std::string error;
    uint64_t last = 0;
    REQUIRE(s.storage->last_round_id(&last, &error) == Status::kOk);
    uint64_t version = 1, committed = 0;
    std::set<std::tuple<uint64_t, std::string, wire::Digest>> in_ledger;
    std::vector<Update> carried;  // the ledgers of the rounds abandoned since the last commit
    for (uint64_t r = 1; r <= last; ++r) {
      CAPTURE(r);
      std::optional<RoundRecord> round;
      REQUIRE(s.storage->get_round(r, &round, &error) == Status::kOk);
      REQUIRE(round.has_value());
      if (round->state == RoundState::kOpen) continue;  // the one opened last
      std::vector<Update> counted;
      std::set<std::string> seen;
      REQUIRE(s.storage->for_each_update(
                  r,
                  [&](const UpdateRecord& u) {
                    CHECK_MESSAGE(seen.insert(u.device_id).second, u.device_id << " twice in round " << r);
                    auto it = sent.find({r, u.device_id, u.digest});
                    REQUIRE_MESSAGE(it != sent.end(), "a ledger row no device sent: " << u.device_id);
                    CHECK_MESSAGE(!it->second.refused, u.device_id << ": refused, yet in the ledger");
                    CHECK(u.sample_count == it->second.update.samples);
                    in_ledger.insert({r, u.device_id, u.digest});
                    counted.push_back(it->second.update);
                    return Status::kOk;
                  },
                  &error) == Status::kOk);
      // One server decides on its ledger: a round is abandoned only below the quorum (an update
      // whose ledger write was in doubt counts, as after a restart).
      if (round->state == RoundState::kAbandoned) {
        CHECK_MESSAGE(carried.size() + counted.size() < s.options.min_quorum,
                      "round " << r << " abandoned with " << counted.size() << " updates in its ledger and "
                               << carried.size() << " carried");
        carried.insert(carried.end(), counted.begin(), counted.end());
      }
      if (round->state == RoundState::kCommitted) {
        ++committed;
        REQUIRE(round->result_model_version == version + 1);
        commits_carrying += carried.empty() ? 0 : 1;
        counted.insert(counted.begin(), carried.begin(), carried.end());
        carried.clear();
        const std::vector<float> before = s.model_file(version), after = s.model_file(version + 1);
        const std::vector<float> expected = fedavg(before, counted);
        double worst = 0;
        for (size_t j = 0; j < after.size(); ++j)
          worst = std::max(worst, std::fabs(double(after[j] - expected[j])));
        CHECK_MESSAGE(worst < 1e-6, "round " << r << ": the model is not the FedAvg of its ledger");
        ++version;
      }
    }
    CHECK(s.rounds->model_version() == version);
    for (const auto& [key, what] : sent) {
      if (what.acked) CHECK_MESSAGE(in_ledger.count(key) == 1, std::get<1>(key) << "'s acked update is lost");
    }
    rounds_committed = committed;
    std::optional<RoundRecord> open;
    REQUIRE(s.storage->open_round(&open, &error) == Status::kOk);
    // The updates of the last rounds, abandoned, are counted by the round open now.
    if (open) CHECK(s.rounds->carried_updates() == carried.size());
    rounds_closed = last - (open ? 1 : 0);
  }

  void act(Device& d) {
    using Next = Device::Next;
    const std::string before = where();
    const int in_doubt = s.faults->record_update_in_doubt;
    static const char* const kSteps[] = {"hello", "upload start", "chunk", "commit"};
    const std::string step = kSteps[int(d.next)];
    wire::Message m;
    switch (d.next) {
      case Next::kHello: {
        wire::Hello hello;
        hello.sdk_version = "test";
        hello.model_version = s.rounds->model_version();
        m = s.rounds->hello(d.id, hello, s.now).message;
        if (const auto* offer = std::get_if<wire::TaskOffer>(&m)) {
          const bool same_round = !d.bytes.empty() && offer->round_id == d.offer.round_id;
          d.offer = *offer;
          d.next = Next::kStart;
          if (same_round) break;  // the update not yet acknowledged: upload it (where it stands)
          d.update = honest(d.id, uint32_t(&d - devices.data()) + 1000 * ++d.updates, 1 + below(9));
          CodecSpec spec;
          REQUIRE(parse_codec_spec("fp32", &spec) == Status::kOk);
          std::vector<uint8_t> ws(workspace_size(spec, d.update.values.size()));
          d.bytes.assign(encoded_bound(spec, d.update.values.size()), 0);
          size_t written = 0;
          REQUIRE(encode(spec, {d.update.values.data(), d.update.values.size()}, offer->codec_seed,
                         {ws.data(), ws.size()}, {d.bytes.data(), d.bytes.size()}, &written) == Status::kOk);
          d.bytes.resize(written);
          for (uint8_t& b : d.upload_id) b = uint8_t(below(256));
          d.upload_id[0] |= 1;
        }
        break;
      }
      case Next::kStart: {
        m = s.rounds->upload_start(d.id, d.start(), s.now).message;
        if (const auto* st = std::get_if<wire::UploadStatus>(&m)) {
          REQUIRE(st->offset <= d.bytes.size());
          d.offset = st->offset;
          d.next = d.offset == d.bytes.size() ? Next::kCommit : Next::kChunk;
        }
        break;
      }
      case Next::kChunk: {
        wire::UploadChunk chunk;
        chunk.round_id = d.offer.round_id;
        chunk.upload_id = d.upload_id;
        chunk.offset = d.offset;
        chunk.total_bytes = d.bytes.size();
        const uint64_t room = std::min<uint64_t>(d.bytes.size() - d.offset, d.offer.max_chunk_bytes);
        const uint64_t length = below(2) == 0 ? room : 1 + below(uint32_t(std::min<uint64_t>(room, 20000)));
        chunk.data.assign(d.bytes.begin() + long(d.offset), d.bytes.begin() + long(d.offset + length));
        std::optional<Reply> r = s.rounds->upload_chunk(d.id, chunk, s.now);
        if (!r) {
          d.offset += length;
          if (d.offset == d.bytes.size()) d.next = Next::kCommit;
          return;
        }
        m = r->message;
        break;
      }
      case Next::kCommit: {
        const wire::Commit commit = d.commit();
        Sent& record = sent[{d.offer.round_id, d.id, commit.digest}];
        record.update = d.update;
        m = s.rounds->commit(d.id, commit, s.now).message;
        if (const auto* ack = std::get_if<wire::Ack>(&m)) {
          REQUIRE_MESSAGE(ack->disposition != wire::UpdateDisposition::kRejected,
                          d.id << ": an honest update rejected");
          if (ack->disposition == wire::UpdateDisposition::kAccepted ||
              ack->disposition == wire::UpdateDisposition::kDuplicate) {
            record.acked = true;
          } else {
            record.refused = true;  // a straggler or late
          }
          d.bytes.clear();
          d.next = Next::kHello;
        }
        break;
      }
    }
    note(d.id + " " + step + ": " + wire::message_type_name(wire::message_type(m)));
    if (const auto* e = std::get_if<wire::Error>(&m)) {
      trace += " " + std::to_string(int(e->code)) + " " + e->message;
      REQUIRE_MESSAGE(!e->message.empty(), "an error without words");
      // A storage failure changes nothing, but for a commit that took effect before its
      // connection failed: the ledger has it, and the retried commit hears Duplicate.
      if (e->code == wire::ErrorCode::kInternal && s.faults->record_update_in_doubt == in_doubt) {
        CHECK_MESSAGE(where() == before, "a storage failure changed the server's state");
      }
      // An upload the server lost or refused starts again (UploadStart tells it where the
      // server stands); a round that is gone, or a task the server does not know, sends the
      // device back to Hello, as edgefl::Client does.
      const bool again = e->code == wire::ErrorCode::kUnknownUpload ||
                         e->code == wire::ErrorCode::kOffsetMismatch ||
                         e->code == wire::ErrorCode::kDigestMismatch || e->code == wire::ErrorCode::kInternal;
      d.next = again && d.next != Next::kHello ? Next::kStart : Next::kHello;
    } else if (std::holds_alternative<wire::RetryLater>(m)) {
      d.next = Next::kHello;
    }
  }

  // A hostile device's message: it is refused and changes nothing.
  void hostile() {
    Device& d = devices[below(uint32_t(devices.size()))];
    if (d.offer.round_id == 0) return;
    const std::string before = where();
    wire::Message m;
    std::string what, sender = "mallory";
    bool commit_sent = false;
    switch (below(6)) {
      case 0: {  // a commit of bytes it never sent
        what = "a commit of nothing uploaded";
        wire::Commit c;
        c.round_id = d.offer.round_id;
        c.round_nonce = d.offer.round_nonce;
        c.upload_id.fill(0x77);
        c.total_bytes = 64;
        c.sample_count = 1;
        m = s.rounds->commit("mallory", c, s.now).message;
        commit_sent = true;
        break;
      }
      case 1: {  // a commit whose digest is not its bytes'
        if (d.next != Device::Next::kCommit) return;
        what = "a commit with a wrong digest";
        wire::Commit c = d.commit();
        c.digest[3] ^= 0x10;
        sender = d.id;
        m = s.rounds->commit(d.id, c, s.now).message;
        commit_sent = true;
        d.next = Device::Next::kStart;  // its upload may be gone now: it resumes
        break;
      }
      case 2: {  // an upload as large as the protocol allows
        what = "an oversize upload";
        wire::UploadStart start;
        start.round_id = d.offer.round_id;
        start.round_nonce = d.offer.round_nonce;
        start.upload_id.fill(0x55);
        start.total_bytes = wire::kMaxUploadBytes;
        m = s.rounds->upload_start("mallory", start, s.now).message;
        break;
      }
      case 3: {  // a chunk at the wrong offset, in its own name
        if (d.next != Device::Next::kChunk) return;
        what = "a chunk at the wrong offset";
        wire::UploadChunk chunk;
        chunk.round_id = d.offer.round_id;
        chunk.upload_id = d.upload_id;
        chunk.offset = d.offset + 1;
        chunk.total_bytes = d.bytes.size();
        chunk.data.assign(4, 0);
        sender = d.id;
        std::optional<Reply> r = s.rounds->upload_chunk(d.id, chunk, s.now);
        d.next = Device::Next::kStart;
        if (!r) {  // dropped unanswered: a closed (or closing) round's chunks are
          CHECK(where() == before);
          ++hostile_sent;
          return;
        }
        m = r->message;
        break;
      }
      case 4: {  // another update of a device whose update of this round is counted
        std::optional<UpdateRecord> counted;
        std::string why;
        REQUIRE(s.storage->find_update(d.offer.round_id, d.id, &counted, &why) == Status::kOk);
        if (!counted || d.bytes.empty()) return;
        what = "another update of a counted device";
        wire::Commit c = d.commit();
        c.upload_id.fill(0x33);
        sender = d.id;
        m = s.rounds->commit(d.id, c, s.now).message;
        commit_sent = true;
        break;
      }
      default: {  // another round's nonce
        what = "a wrong nonce";
        wire::UploadStart start;
        start.round_id = d.offer.round_id;
        start.round_nonce = d.offer.round_nonce;
        start.round_nonce[0] ^= 1;
        start.upload_id.fill(0x66);
        start.total_bytes = 100;
        sender = d.id;
        m = s.rounds->upload_start(d.id, start, s.now).message;
        break;
      }
    }
    ++hostile_sent;  // sent (the cases that find nothing to send return above)
    note("hostile: " + what + ": " + wire::message_type_name(wire::message_type(m)));
    const auto* e = std::get_if<wire::Error>(&m);
    const auto* ack = std::get_if<wire::Ack>(&m);
    // Never Accepted, and never Duplicate: no hostile commit is an update the ledger holds (its
    // upload id or its digest differs). Where the sender's update of this round is counted, the
    // answer says so (kAlreadyCounted), or the server could not read its ledger.
    std::optional<UpdateRecord> held;
    std::string error;
    REQUIRE(s.storage->find_update(d.offer.round_id, sender, &held, &error) == Status::kOk);
    const bool refused = e != nullptr || std::holds_alternative<wire::RetryLater>(m) ||
                         (ack != nullptr && ack->disposition != wire::UpdateDisposition::kAccepted &&
                          ack->disposition != wire::UpdateDisposition::kDuplicate);
    CHECK_MESSAGE(refused, what << " was not refused");
    if (held && commit_sent) {
      const bool said_counted = ack != nullptr && ack->disposition == wire::UpdateDisposition::kRejected &&
                                ack->reason == wire::RejectReason::kAlreadyCounted;
      CHECK_MESSAGE((said_counted || (e != nullptr && e->code == wire::ErrorCode::kInternal)),
                    what << " from a counted device was not answered already_counted");
      told_already_counted += said_counted ? 1 : 0;
    }
    if (e != nullptr) {
      trace += " " + std::to_string(int(e->code)) + " " + e->message;
      CHECK(!e->message.empty());
    }
    CHECK_MESSAGE(where() == before, what << " changed the server's state");
  }

  // kill -9 and start again: the same model and open round with the same ledger, or, when a
  // close had begun (its storage write failed and waits for a retry), that round closed and the
  // next one open (check() then verifies the close). Uploads in progress are gone; every device
  // connects again.
  void restart() {
    s.faults->failing.clear();
    s.faults->record_update_in_doubt = 0;
    const std::string before = where();
    std::optional<RoundRecord> open;
    std::string error;
    REQUIRE(s.storage->open_round(&open, &error) == Status::kOk);
    s.reopen();
    if (where() != before && !open) {  // no round was open (creating it failed): one is now
      CHECK_MESSAGE(where().rfind(before + ", round ", 0) == 0,
                    "the restart rebuilt another state: " << where());
    } else if (where() != before) {
      std::optional<RoundRecord> then;
      REQUIRE(s.storage->get_round(open->round_id, &then, &error) == Status::kOk);
      CHECK_MESSAGE(then->state != RoundState::kOpen, "the restart rebuilt another state: " << where());
    }
    s.rounds->tick(s.now);
    for (Device& d : devices) d.next = Device::Next::kHello;  // every connection dropped
    note("restart: " + before + " -> " + where());
  }
};

}  // namespace

TEST_SUITE("server.rounds.influence") {
  TEST_CASE(
      "--aggregation median and trimmed-mean: a crafted update is outvoted; a failing read is retried") {
    for (const char* rule : {"median", "trimmed-mean:beta=0.2", "mean"}) {
      CAPTURE(rule);
      const std::string dir = make_temp_dir();
      RoundOptions o;
      o.cohort = 5;
      o.aggregation = rule;
      o.max_update_norm = 1e30;  // let the crafted update in: the rule alone must hold it off
      Server s(dir, o);
      REQUIRE(s.open() == Status::kOk);
      const std::vector<float> v1 = s.model();
      std::vector<Update> ups = {honest("a", 1, 1), honest("b", 2, 50), honest("c", 3, 1), honest("d", 4, 1)};
      Update crafted = honest("e", 5, 1000);  // claims many samples too
      for (float& v : crafted.values) v = 1e4f;
      ups.push_back(crafted);
      s.faults->failing["for_each_update"] = 2;  // the rule's read of the round fails twice first
      run_round(s, ups);
      for (int i = 0; i < 100 && s.rounds->model_version() == 1; ++i) {
        s.now += 1000;
        s.rounds->tick(s.now);
      }
      REQUIRE(s.rounds->model_version() == 2);
      const std::vector<float> model = s.model();
      if (std::string(rule) == "mean") {
        CHECK(s.faults->failing["for_each_update"] == 2);  // the streaming mean never reads back
        CHECK(model == fedavg(v1, ups));
        fs::remove_all(dir);
        continue;
      }
      CHECK(s.faults->failing["for_each_update"] == 0);
      // the expected combination of the five, unweighted, per coordinate
      for (size_t i = 0; i < model.size(); ++i) {
        std::vector<float> column;
        for (const Update& u : ups) column.push_back(u.values[i]);
        std::sort(column.begin(), column.end());
        const float expect = std::string(rule) == "median"
                                 ? column[2]
                                 : float((double(column[1]) + double(column[2]) + double(column[3])) / 3);
        REQUIRE(model[i] == v1[i] + expect);
        CHECK(std::fabs(model[i] - v1[i]) <= 0.011f);  // honest values are within +-0.01
      }
      fs::remove_all(dir);
    }
    RoundOptions bad;
    bad.aggregation = "trimmed-mean:beta=0.5";
    Server s(make_temp_dir(), bad);
    CHECK(s.open() == Status::kInvalidSpec);
    fs::remove_all(s.dir);
  }

  TEST_CASE(
      "median and trimmed-mean count the updates an abandoned round passes on, the crafted one included") {
    for (const char* rule : {"median", "trimmed-mean:beta=0.2"}) {
      CAPTURE(rule);
      const std::string dir = make_temp_dir();
      RoundOptions o;
      o.cohort = 5;
      o.aggregation = rule;
      o.deadline_ms = 10000;
      o.max_update_norm = 1e30;
      Server s(dir, o);
      REQUIRE(s.open() == Status::kOk);
      const std::vector<float> v1 = s.model();
      Update crafted = honest("e", 5, 1000);
      for (float& v : crafted.values) v = 1e4f;
      const std::vector<Update> first = {honest("a", 1, 1), crafted};
      const std::vector<Update> second = {honest("b", 2, 50), honest("c", 3, 1), honest("d", 4, 1)};
      run_round(s, first);
      s.now += 10001;
      s.rounds->tick(s.now);  // 2 of 5: abandoned
      REQUIRE(s.rounds->carried_updates() == 2);
      run_round(s, second);  // 2 carried + 3: the cohort
      REQUIRE(s.rounds->model_version() == 2);
      const std::vector<float> model = s.model();
      for (size_t i = 0; i < model.size(); ++i) {
        std::vector<float> column;
        for (const Update& u : first) column.push_back(u.values[i]);
        for (const Update& u : second) column.push_back(u.values[i]);
        std::sort(column.begin(), column.end());
        const float expect = std::string(rule) == "median"
                                 ? column[2]
                                 : float((double(column[1]) + double(column[2]) + double(column[3])) / 3);
        REQUIRE(model[i] == v1[i] + expect);
      }
      fs::remove_all(dir);
    }
  }

  TEST_CASE("an fp32 update of 3e38 per coordinate is rejected before its ack; rounds go on; restarts work") {
    const std::string dir = make_temp_dir();
    RoundOptions o;
    o.cohort = 2;
    Server s(dir, o);
    REQUIRE(s.open() == Status::kOk);
    for (int round = 0; round < 2; ++round) {
      const std::vector<float> before = s.model();
      Update attack;
      attack.device = "attacker";
      attack.values.assign(before.size(), 3.0e38f);
      attack.samples = 1000000;
      const wire::Message m = s.upload(s.offer("attacker"), attack);
      CHECK(disposition(m) == wire::UpdateDisposition::kRejected);
      // The model stays finite either way; which check fires first is the overflow (3e38 + w).
      const wire::RejectReason why = reject_reason(m);
      CHECK((why == wire::RejectReason::kModelOverflow || why == wire::RejectReason::kNormTooLarge));
      const std::vector<Update> ups = {honest("a", 10 * round + 1, 30), honest("b", 10 * round + 2, 50)};
      run_round(s, ups);
      CHECK(s.rounds->model_version() == uint64_t(2 + round));
      CHECK(s.model() == fedavg(before, ups));
    }
    CHECK(s.metrics.updates_rejected.load() == 2);
    s.reopen();  // the restart that used to fail with start_failed error=""
    CHECK(s.rounds->model_version() == 3);
    fs::remove_all(dir);
  }

  TEST_CASE("the L2 norm bound: default relative to the model, explicit when set; NaN never gets in") {
    const std::string dir = make_temp_dir();
    RoundOptions o;
    o.cohort = 3;
    o.max_update_norm = 2.0;
    Server s(dir, o);
    REQUIRE(s.open() == Status::kOk);
    Update big;
    big.device = "big";
    big.values.assign(spec_size(), 0.0f);
    big.values[7] = 2.5f;  // norm 2.5 > 2
    CHECK(reject_reason(s.upload(s.offer("big"), big)) == wire::RejectReason::kNormTooLarge);
    Update edge = big;
    edge.device = "edge";
    edge.values[7] = 2.0f;  // norm exactly at the bound: accepted
    CHECK(disposition(s.upload(s.offer("edge"), edge)) == wire::UpdateDisposition::kAccepted);
    Update nan = big;
    nan.device = "nan";
    nan.values[7] = 0;
    std::vector<uint8_t> bytes;
    const wire::TaskOffer nan_offer = s.offer("nan");
    {  // fp32 with a NaN: the encoder refuses NaN, so the bytes are patched after encoding
      CodecSpec spec;
      REQUIRE(parse_codec_spec("fp32", &spec) == Status::kOk);
      std::vector<uint8_t> ws(workspace_size(spec, nan.values.size()));
      bytes.resize(encoded_bound(spec, nan.values.size()));
      size_t written = 0;
      nan.values[7] = 1.2345f;
      REQUIRE(encode(spec, {nan.values.data(), nan.values.size()}, nan_offer.codec_seed,
                     {ws.data(), ws.size()}, {bytes.data(), bytes.size()}, &written) == Status::kOk);
      bytes.resize(written);
    }
    // With the checksum intact the codec's own checks refuse a patched payload: the reason is
    // then invalid_encoding. Either way it is rejected before its ack and counted nowhere.
    const uint32_t bits = 0x7FC00000u;
    const float target = 1.2345f;
    for (size_t i = 0; i + 4 <= bytes.size(); ++i) {
      if (std::memcmp(bytes.data() + i, &target, 4) == 0) std::memcpy(bytes.data() + i, &bits, 4);
    }
    const wire::Message m = s.upload_bytes(nan_offer, "nan", bytes, 1);
    CHECK(disposition(m) == wire::UpdateDisposition::kRejected);
    CHECK((reject_reason(m) == wire::RejectReason::kInvalidEncoding ||
           reject_reason(m) == wire::RejectReason::kNonFinite));
    fs::remove_all(dir);

    // Default: update_norm_factor x max(1, ||model||).
    const std::string dir2 = make_temp_dir();
    Server d(dir2, RoundOptions{});
    REQUIRE(d.open() == Status::kOk);
    double norm2 = 0;
    for (float v : d.model()) norm2 += double(v) * v;
    const float bound = float(std::max(1.0, std::sqrt(norm2)));
    Update over;
    over.device = "over";
    over.values.assign(spec_size(), 0.0f);
    over.values[0] = bound * 1.01f;
    CHECK(reject_reason(d.upload(d.offer("over"), over)) == wire::RejectReason::kNormTooLarge);
    Update under = over;
    under.device = "under";
    under.values[0] = bound * 0.99f;
    CHECK(disposition(d.upload(d.offer("under"), under)) == wire::UpdateDisposition::kAccepted);
    fs::remove_all(dir2);
  }

  TEST_CASE(
      "a commit whose model would not be finite abandons the round with a reason; the next round opens") {
    const std::string dir = make_temp_dir();
    RoundOptions o;
    o.cohort = 2;
    o.optimizer = "fedavg:lr=1000000";  // each update passes its checks; the step overflows
    o.max_update_norm = 1e38;
    Server s(dir, o);
    REQUIRE(s.open() == Status::kOk);
    Update a, b;
    a.device = "a";
    b.device = "b";
    a.values.assign(spec_size(), 1.0e34f);
    b.values.assign(spec_size(), 1.0e34f);
    a.values.resize(spec_size());
    const std::vector<float> before = s.model();
    // Each update's norm is 1e34 * sqrt(3190) < 1e38, and model + update is finite.
    run_round(s, {a, b});
    REQUIRE(s.rounds->history().size() == 1);
    CHECK(s.rounds->history()[0].state == RoundState::kAbandoned);
    CHECK(s.rounds->model_version() == 1);
    CHECK(s.model() == before);
    CHECK(s.metrics.rounds_abandoned.load() == 1);
    // The next round runs, and a restart starts.
    const wire::TaskOffer next = s.offer("c");
    CHECK(next.round_id == 2);
    s.reopen();
    CHECK(s.rounds->model_version() == 1);
    CHECK(s.offer("d").round_id == 2);
    fs::remove_all(dir);
  }
}

TEST_SUITE("server.rounds.close") {
  // Each system call of the model write fails (`times` times), then the disk recovers: the
  // close is retried by tick() and the model is v1 + FedAvg exactly once, in memory and on disk.
  TEST_CASE(
      "a disk error at each write, fsync, close, rename and directory sync: the model is applied once") {
    for (const char* call : {"open", "write", "fsync", "close", "rename", "open_dir", "fsync_dir"}) {
      for (int times : {1, 5}) {
        CAPTURE(call);
        CAPTURE(times);
        const std::string dir = make_temp_dir();
        RoundOptions o;
        o.cohort = 3;
        o.optimizer = "fedavgm:lr=1,momentum=0.5";  // state that must be applied once too
        Server s(dir, o);
        REQUIRE(s.open() == Status::kOk);
        int left = times;
        set_file_fault_hook([&](const char* c, const std::string&) {
          if (std::strcmp(c, call) != 0 || left == 0) return 0;
          --left;
          return EIO;
        });
        const std::vector<float> v1 = s.model();
        const std::vector<Update> ups = {honest("a", 1, 10), honest("b", 2, 20), honest("c", 3, 30)};
        std::vector<wire::TaskOffer> offers;
        for (const Update& u : ups) {
          offers.push_back(s.offer(u.device));
          CHECK(disposition(s.upload(offers.back(), u)) == wire::UpdateDisposition::kAccepted);
        }
        CHECK(s.rounds->model_version() == 1);  // the close failed: nothing changed
        CHECK(s.model() == v1);
        // While closing: check-ins are told to come back, late commits are stragglers.
        wire::Hello hello;
        const Reply busy = s.rounds->hello("e", hello, s.now);
        REQUIRE(std::holds_alternative<wire::RetryLater>(busy.message));
        CHECK(std::get<wire::RetryLater>(busy.message).reason == wire::RetryReason::kServerBusy);
        // A device whose ack was lost asks again while the round closes: the ledger answers (all
        // of it held, the Commit acked Duplicate), not "closing" (which would tell it "not counted").
        const wire::Message again = s.upload(offers[0], ups[0]);
        REQUIRE(std::holds_alternative<wire::Ack>(again));
        CHECK(std::get<wire::Ack>(again).disposition == wire::UpdateDisposition::kDuplicate);
        for (int i = 0; i < 200 && s.rounds->model_version() == 1; ++i) {
          s.now += 1000;
          s.rounds->tick(s.now);
        }
        set_file_fault_hook(nullptr);
        CHECK(left == 0);
        REQUIRE(s.rounds->model_version() == 2);
        // FedAvgM with v0 = 0: v1 = mean, global += lr * v1, i.e. FedAvg in the first step.
        const std::vector<float> expected = fedavg(v1, ups);
        CHECK(s.model() == expected);
        CHECK(s.model_file(2) == expected);
        CHECK(s.metrics.close_failures.load() == uint64_t(times));
        s.reopen();
        CHECK(s.rounds->model_version() == 2);
        CHECK(s.model() == expected);
        fs::remove_all(dir);
      }
    }
  }

  TEST_CASE("storage failures at record_model, close_round, latest_model and create_round: applied once") {
    for (const char* call : {"record_model", "close_round", "latest_model", "create_round"}) {
      CAPTURE(call);
      const std::string dir = make_temp_dir();
      RoundOptions o;
      o.cohort = 2;
      Server s(dir, o);
      REQUIRE(s.open() == Status::kOk);
      const std::vector<float> v1 = s.model();
      const std::vector<Update> ups = {honest("a", 4, 7), honest("b", 5, 9)};
      s.faults->failing[call] = 3;
      run_round(s, ups);
      for (int i = 0; i < 100 && (s.rounds->model_version() == 1 || s.rounds->ms_to_deadline(s.now) == 0);
           ++i) {
        s.now += 1000;
        s.rounds->tick(s.now);
      }
      CHECK(s.faults->failing[call] == 0);
      REQUIRE(s.rounds->model_version() == 2);
      CHECK(s.model() == fedavg(v1, ups));
      // The next round is open and takes updates.
      const std::vector<float> v2 = s.model();
      const std::vector<Update> next = {honest("a", 6, 1), honest("b", 7, 2)};
      run_round(s, next);
      CHECK(s.rounds->model_version() == 3);
      CHECK(s.model() == fedavg(v2, next));
      fs::remove_all(dir);
    }
  }

  TEST_CASE(
      "an update whose write failed but took effect is in the model, once: the close follows the ledger") {
    for (const bool device_retries : {false, true}) {
      CAPTURE(device_retries);
      const std::string dir = make_temp_dir();
      RoundOptions o;
      o.cohort = 2;
      Server s(dir, o);
      REQUIRE(s.open() == Status::kOk);
      const std::vector<float> v1 = s.model();
      const Update doubtful = honest("a", 4, 7);
      const wire::TaskOffer offer = s.offer("a");
      s.faults->record_update_in_doubt = 1;
      const wire::Message reply = s.upload(offer, doubtful);  // the device hears an Internal error
      REQUIRE(std::holds_alternative<wire::Error>(reply));
      CHECK(std::get<wire::Error>(reply).code == wire::ErrorCode::kInternal);
      if (device_retries) {  // the same upload again: the ledger has it, so it is a duplicate
        CHECK(disposition(s.upload(offer, doubtful)) == wire::UpdateDisposition::kDuplicate);
      }
      const std::vector<Update> others = {honest("b", 5, 9), honest("c", 6, 3)};
      run_round(s, others);
      for (int i = 0; i < 20 && s.rounds->model_version() == 1; ++i) {
        s.now += 1000;
        s.rounds->tick(s.now);
      }
      REQUIRE(s.rounds->model_version() >= 2);
      // The model is the FedAvg of the round's ledger, the doubtful update counted once. A retry
      // made the server read its ledger (the Duplicate is counted before it is answered): the
      // round is full with b. Otherwise the server learns of it at the close, after b and c.
      const std::vector<Update> ledger = device_retries ? std::vector<Update>{doubtful, others[0]}
                                                        : std::vector<Update>{doubtful, others[0], others[1]};
      CHECK(s.model_file(2) == fedavg(v1, ledger));
      REQUIRE(!s.rounds->history().empty());
      CHECK(s.rounds->history()[0].accepted == ledger.size());
      fs::remove_all(dir);
    }
  }

  TEST_CASE(
      "a write in doubt and a ledger that cannot be read back: the deadline still ends the round's intake, "
      "decided on the ledger's count, and the close waits for the ledger") {
    RoundOptions o;
    o.cohort = 3;
    o.min_quorum = 1;
    o.deadline_ms = 5000;
    Server s(make_temp_dir(), o);
    s.in_memory = true;
    REQUIRE(s.open() == Status::kOk);
    const std::vector<float> v1 = s.model();
    const Update a = honest("a", 4, 7), b = honest("b", 5, 2);
    const wire::TaskOffer offer_a = s.offer("a"), offer_b = s.offer("b");
    s.faults->record_update_in_doubt = 1;
    REQUIRE(std::holds_alternative<wire::Error>(s.upload(offer_a, a)));  // in the ledger nonetheless
    s.faults->failing["for_each_update"] = -1;                           // its rows cannot be read
    s.now += 5001;
    s.rounds->tick(s.now);
    // Past the deadline nothing more is taken, though the server's own count is still 0.
    const wire::Message late = s.upload(offer_b, b);
    const auto* ack = std::get_if<wire::Ack>(&late);
    CHECK_MESSAGE((ack == nullptr || ack->disposition != wire::UpdateDisposition::kAccepted),
                  "an update taken after the deadline");
    CHECK(s.rounds->model_version() == 1);
    s.faults->failing.clear();
    for (int i = 0; i < 20 && s.rounds->model_version() == 1; ++i) {
      s.now += 1000;
      s.rounds->tick(s.now);
    }
    REQUIRE(s.rounds->model_version() == 2);  // one update in the ledger meets the quorum of 1
    CHECK(s.model() == fedavg(v1, {a}));
  }

  // A crash between any two steps of a close: the process ends (the manager is dropped while the
  // close is failing at that step), a new one starts on the same state: exactly once.
  TEST_CASE("a crash between any two steps of a close: after the restart the model is applied once") {
    struct Step {
      const char* file_call;  // fail this write_file_atomic call for ever, or
      const char* storage_call;
      int skip;  // let this many of those calls succeed first
    };
    const Step steps[] = {{"rename", nullptr, 0},       {"rename", nullptr, 1},
                          {"rename", nullptr, 2},       {"fsync_dir", nullptr, 2},
                          {nullptr, "record_model", 0}, {nullptr, "close_round", 0},
                          {nullptr, "create_round", 0}};
    for (const Step& step : steps) {
      CAPTURE(step.file_call ? step.file_call : step.storage_call);
      CAPTURE(step.skip);
      const std::string dir = make_temp_dir();
      RoundOptions o;
      o.cohort = 2;
      o.optimizer = "fedadam";
      Server s(dir, o);
      REQUIRE(s.open() == Status::kOk);
      const std::vector<float> v1 = s.model();
      int skip = step.skip;
      if (step.file_call != nullptr) {
        set_file_fault_hook([&](const char* c, const std::string&) {
          if (std::strcmp(c, step.file_call) != 0) return 0;
          if (skip > 0) {
            --skip;
            return 0;
          }
          return EIO;
        });
      } else {
        s.faults->failing[step.storage_call] = -1;
      }
      const std::vector<Update> ups = {honest("a", 8, 3), honest("b", 9, 4)};
      run_round(s, ups);
      s.now += 500;
      s.rounds->tick(s.now);
      set_file_fault_hook(nullptr);
      // "Crash": a new process on the same state directory.
      s.reopen();
      for (int i = 0; i < 20 && s.rounds->model_version() == 1; ++i) {
        s.now += 1000;
        s.rounds->tick(s.now);
      }
      REQUIRE(s.rounds->model_version() == 2);
      // Compare with a reference server that never failed.
      const std::string ref_dir = make_temp_dir();
      Server ref(ref_dir, o);
      REQUIRE(ref.open() == Status::kOk);
      REQUIRE(ref.model() == v1);
      run_round(ref, ups);
      REQUIRE(ref.rounds->model_version() == 2);
      CHECK(s.model() == ref.model());
      CHECK(s.model_file(2) == ref.model());
      // And the optimizer state went forward once: the next round agrees too.
      const std::vector<Update> next = {honest("a", 10, 5), honest("b", 11, 6)};
      for (int i = 0; i < 20 && s.rounds->ms_to_deadline(s.now) == 0; ++i) {
        s.now += 1000;
        s.rounds->tick(s.now);
      }
      run_round(s, next);
      run_round(ref, next);
      CHECK(s.rounds->model_version() == 3);
      CHECK(s.model() == ref.model());
      fs::remove_all(ref_dir);
      fs::remove_all(dir);
    }
  }

  // The real thing, where the test may mount: a 2 MiB tmpfs as the state directory, filled up,
  // then remounted read-only. Needs root (CI runs as root); elsewhere the injected faults above
  // cover the same code paths, and this test says so.
  TEST_CASE("a full and a read-only filesystem: the close waits for the disk and applies the model once") {
    const std::string dir = make_temp_dir();
    if (::geteuid() != 0 || ::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=2m") != 0) {
      MESSAGE("not root or mount(2) refused (" << std::strerror(errno)
                                               << "): covered by the injected-fault cases only");
      fs::remove_all(dir);
      return;
    }
    struct Unmount {  // also when an assertion ends the test early
      std::string dir;
      ~Unmount() {
        while (::umount2(dir.c_str(), MNT_DETACH) == 0) {
        }
        fs::remove_all(dir);
      }
    } unmount{dir};
    {
      RoundOptions o;
      o.cohort = 2;
      Server s(dir, o);
      REQUIRE(s.open() == Status::kOk);
      const std::vector<float> v1 = s.model();
      // Fill the filesystem: the next model file (13 kB) cannot be written.
      const std::string filler = dir + "/filler";
      {
        std::ofstream out(filler, std::ios::binary);
        std::vector<char> block(4096, 'x');
        while (out.write(block.data(), long(block.size()))) {
        }
      }
      std::vector<Update> ups = {honest("a", 20, 5), honest("b", 21, 6)};
      // record_update may itself fail on a full disk (SQLite's WAL grows): that device is told
      // "server storage failure" and nothing is acked; free a little room for the ledger only.
      fs::resize_file(filler, fs::file_size(filler) - 64 * 1024);
      run_round(s, ups);
      {
        std::ofstream more(dir + "/filler2", std::ios::binary);
        std::vector<char> block(4096, 'y');
        while (more.write(block.data(), long(block.size()))) {
        }
      }
      for (int i = 0; i < 5; ++i) {
        s.now += 1000;
        s.rounds->tick(s.now);
      }
      CHECK(s.rounds->model_version() == 1);
      CHECK(s.metrics.close_failures.load() >= 1);
      CHECK(s.model() == v1);
      // Free the space, make the directory read-only (a read-only bind mount over it: the
      // database's open descriptors stay writable, every new file gets EROFS): still failing.
      fs::remove(filler);
      fs::remove(dir + "/filler2");
      REQUIRE(::mount(dir.c_str(), dir.c_str(), nullptr, MS_BIND, nullptr) == 0);
      REQUIRE(::mount(nullptr, dir.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) == 0);
      const uint64_t failures = s.metrics.close_failures.load();
      for (int i = 0; i < 3; ++i) {
        s.now += 20000;
        s.rounds->tick(s.now);
      }
      CHECK(s.metrics.close_failures.load() > failures);
      CHECK(s.rounds->model_version() == 1);
      REQUIRE(::umount2(dir.c_str(), 0) == 0);  // the read-only layer goes
      for (int i = 0; i < 3 && s.rounds->model_version() == 1; ++i) {
        s.now += 20000;
        s.rounds->tick(s.now);
      }
      REQUIRE(s.rounds->model_version() == 2);
      CHECK(s.model() == fedavg(v1, ups));
      CHECK(s.model_file(2) == fedavg(v1, ups));
      s.reopen();
      CHECK(s.model() == fedavg(v1, ups));
    }
  }
}

TEST_SUITE("server.rounds.aggregators") {
  // Two servers over one shared store (the memory store's second client stands for a second
  // connection to PostgreSQL) and one shared state directory.
  struct Pair {
    std::string dir = make_temp_dir();
    std::unique_ptr<Server> a, b;
    explicit Pair(uint32_t cohort, uint32_t lease_ms = 1000) {
      RoundOptions o;
      o.cohort = cohort;
      o.coordinator_lease_ms = lease_ms;
      o.follow_interval_ms = 100;
      // (std::string objects: GCC 12's -Wrestrict misfires on short literals assigned here.)
      const std::string name_a("a"), name_b("b");
      o.aggregator_id = name_a;
      a = std::make_unique<Server>(dir, o);
      a->in_memory = true;
      REQUIRE(a->open() == Status::kOk);
      o.aggregator_id = name_b;
      b = std::make_unique<Server>(dir, o);
      b->in_memory = true;
      b->share_with = a->memory_store.get();
      REQUIRE(b->open() == Status::kOk);
    }
    ~Pair() { fs::remove_all(dir); }
    // Both clocks move on by `ms`, and both servers tick.
    void advance(int64_t ms) {
      a->now += ms;
      b->now += ms;
      a->rounds->tick(a->now);
      b->rounds->tick(b->now);
    }
  };

  TEST_CASE("updates acknowledged by either aggregator are all in the coordinator's model, once") {
    Pair p(4);
    REQUIRE(p.a->rounds->coordinating());
    REQUIRE_FALSE(p.b->rounds->coordinating());
    const std::vector<float> v1 = p.a->model();
    CHECK(p.b->model() == v1);  // the follower loaded the coordinator's version 1
    const std::vector<Update> ups = {honest("d0", 1, 10), honest("d1", 2, 20), honest("d2", 3, 30),
                                     honest("d3", 4, 40)};
    for (size_t i = 0; i < ups.size(); ++i) {
      Server& via = i % 2 == 0 ? *p.a : *p.b;
      const wire::TaskOffer offer = via.offer(ups[i].device);
      CHECK(offer.round_id == 1);
      CHECK(disposition(via.upload(offer, ups[i])) == wire::UpdateDisposition::kAccepted);
    }
    // A retried commit at the other aggregator is a duplicate, counted once.
    {
      wire::Hello hello;
      const Reply again = p.a->rounds->hello("d1", hello, p.a->now);
      CHECK(std::holds_alternative<wire::RetryLater>(again.message));
    }
    CHECK(p.a->rounds->model_version() == 1);  // two updates here: the cohort is in the ledger only
    p.advance(100);  // the coordinator counts the shared ledger and seals; the follower flushes its sum
    CHECK(p.a->rounds->model_version() == 1);
    CHECK(p.b->faults->calls["put_partial_sum"] == 1);
    p.advance(100);  // the coordinator merges its own sum with the follower's, and commits
    REQUIRE(p.a->rounds->model_version() == 2);
    CHECK(p.a->model() == fedavg(v1, ups));
    CHECK(p.a->faults->calls["for_each_update_of"] == 0);  // no update decoded again
    REQUIRE(p.a->rounds->history().size() == 1);
    CHECK(p.a->rounds->history()[0].accepted == 4);
    p.advance(100);  // the follower loads version 2 and follows round 2
    CHECK(p.b->rounds->model_version() == 2);
    CHECK(p.b->model() == p.a->model());
    CHECK(p.b->offer("d4").round_id == 2);
    // The coordinator's files are in its epoch's directory.
    CHECK(fs::exists(p.dir + "/coordinator-1/model-v000002.safetensors"));
  }

  TEST_CASE(
      "a round abandoned below its quorum passes its updates, acknowledged by either aggregator, to the "
      "next one; their devices get no task at either") {
    Pair p(4);  // the quorum is the cohort
    const std::vector<float> v1 = p.a->model();
    const Update c = honest("c", 3, 5), d = honest("d", 4, 7), e = honest("e", 5, 11), f = honest("f", 6, 13);
    CHECK(disposition(p.a->upload(p.a->offer("c"), c)) == wire::UpdateDisposition::kAccepted);
    CHECK(disposition(p.b->upload(p.b->offer("d"), d)) == wire::UpdateDisposition::kAccepted);
    p.advance(120001);  // the deadline: 2 of 4, sealed, abandoned
    p.advance(100);     // round 2 opens; the follower follows it
    REQUIRE(p.a->rounds->history().size() == 1);
    CHECK(p.a->rounds->history()[0].state == RoundState::kAbandoned);
    CHECK(p.a->rounds->model_version() == 1);
    CHECK(p.a->rounds->carried_updates() == 2);
    CHECK(p.b->rounds->carried_updates() == 2);
    for (Server* via : {p.a.get(), p.b.get()}) {
      for (const char* device : {"c", "d"}) {
        CAPTURE(device);
        const Reply again = via->rounds->hello(device, wire::Hello{}, via->now);
        CHECK(std::holds_alternative<wire::RetryLater>(again.message));
      }
    }
    // Nor can a carried device adopt a task it was never given at the follower.
    wire::TaskOffer forged = p.b->offer("e");
    CHECK(std::holds_alternative<wire::Error>(p.b->upload(forged, honest("c", 9, 5))));
    CHECK(disposition(p.b->upload(forged, e)) == wire::UpdateDisposition::kAccepted);
    CHECK(disposition(p.a->upload(p.a->offer("f"), f)) == wire::UpdateDisposition::kAccepted);
    p.advance(100);  // 2 carried + 2 in the ledger: the cohort; sealed
    p.advance(100);  // merged with the carried updates, committed
    REQUIRE(p.a->rounds->model_version() == 2);
    REQUIRE(p.a->rounds->history().size() == 2);
    CHECK(p.a->rounds->history()[1].accepted == 4);
    CHECK(max_abs_diff(p.a->model(), fedavg(v1, {c, d, e, f})) < 1e-7);
  }

  TEST_CASE("a device offered by one aggregator uploads through another: its task stands there") {
    Pair p(2);
    const std::vector<float> v1 = p.a->model();
    const std::vector<Update> ups = {honest("d0", 1, 10), honest("d1", 2, 20)};
    const wire::TaskOffer from_a = p.a->offer("d0");  // then the balancer sends it to b
    CHECK(disposition(p.b->upload(from_a, ups[0])) == wire::UpdateDisposition::kAccepted);
    const wire::TaskOffer from_b = p.b->offer("d1");  // and this one to a
    CHECK(disposition(p.a->upload(from_b, ups[1])) == wire::UpdateDisposition::kAccepted);
    p.advance(100);
    p.advance(100);
    REQUIRE(p.a->rounds->model_version() == 2);
    CHECK(p.a->model() == fedavg(v1, ups));
    // Without the round's nonce there is no task to adopt.
    wire::TaskOffer forged = from_a;
    forged.round_id = 2;
    forged.round_nonce.assign(forged.round_nonce.size(), 0);
    p.advance(100);
    const wire::Message refused = p.b->upload(forged, honest("d2", 3, 30));
    CHECK(std::holds_alternative<wire::Error>(refused));
  }

  TEST_CASE("a commit after the seal is a straggler at the follower, never an ack missing from the model") {
    Pair p(3);
    const std::vector<float> v1 = p.a->model();
    const std::vector<Update> ups = {honest("d0", 1, 10), honest("d1", 2, 20), honest("d2", 3, 30)};
    const wire::TaskOffer late_offer = p.b->offer("late");  // offered by the follower, uploads later
    for (const Update& u : ups) {
      const wire::TaskOffer offer = p.a->offer(u.device);
      CHECK(disposition(p.a->upload(offer, u)) == wire::UpdateDisposition::kAccepted);
    }
    p.a->now += 100;
    p.a->rounds->tick(p.a->now);  // sealed and committed; the follower has not looked yet
    REQUIRE(p.a->rounds->model_version() == 2);
    CHECK(disposition(p.b->upload(late_offer, honest("late", 9, 90))) == wire::UpdateDisposition::kStraggler);
    CHECK(p.a->model() == fedavg(v1, ups));
    uint64_t in_ledger = 0;
    std::string error;
    REQUIRE(p.a->storage->count_updates(1, &in_ledger, &error) == Status::kOk);
    CHECK(in_ledger == 3);
  }

  TEST_CASE(
      "the coordinator stops: the follower takes over within the lease, finishes the open round from "
      "the shared ledger, and the deposed one's writes are refused") {
    Pair p(4, 1000);
    const std::vector<float> v1 = p.a->model();
    const std::vector<Update> ups = {honest("d0", 1, 10), honest("d1", 2, 20), honest("d2", 3, 30),
                                     honest("d3", 4, 40)};
    CHECK(disposition(p.a->upload(p.a->offer("d0"), ups[0])) == wire::UpdateDisposition::kAccepted);
    CHECK(disposition(p.b->upload(p.b->offer("d1"), ups[1])) == wire::UpdateDisposition::kAccepted);
    // The coordinator goes silent (a pause, a partition); the follower keeps ticking.
    for (int i = 0; i < 9; ++i) {
      p.b->now += 100;
      p.b->rounds->tick(p.b->now);
    }
    CHECK_FALSE(p.b->rounds->coordinating());  // 900 ms: the lease still runs
    for (int i = 0; i < 4; ++i) {
      p.b->now += 100;
      p.b->rounds->tick(p.b->now);
    }
    REQUIRE(p.b->rounds->coordinating());  // taken within the lease time (+ a renewal period)
    // The deposed coordinator's steering writes are refused by the store, whatever it believes.
    std::string error;
    CHECK(p.a->storage->seal_round(1, &error) == Status::kProtocolError);
    CHECK(error.find("not the coordinator") != std::string::npos);
    // Round 1 goes on under the new coordinator, with the two updates already in its ledger.
    CHECK(disposition(p.b->upload(p.b->offer("d2"), ups[2])) == wire::UpdateDisposition::kAccepted);
    CHECK(disposition(p.b->upload(p.b->offer("d3"), ups[3])) == wire::UpdateDisposition::kAccepted);
    // Sealed at the next look; the silent one's update has no flushed sum: after the wait for one
    // (500 ms), it is decoded from the ledger.
    int ticks = 0;
    for (; ticks < 10 && p.b->rounds->model_version() == 1; ++ticks) {
      p.b->now += 100;
      p.b->rounds->tick(p.b->now);
    }
    REQUIRE(p.b->rounds->model_version() == 2);
    CHECK(ticks == 6);
    CHECK(p.b->faults->calls["for_each_update_of"] >= 1);
    CHECK(p.b->model() == fedavg(v1, ups));
    CHECK(fs::exists(p.dir + "/coordinator-2/model-v000002.safetensors"));
    // The old one wakes up: it finds the lease gone, follows, and serves version 2.
    p.a->now = p.b->now;
    p.a->rounds->tick(p.a->now);
    CHECK_FALSE(p.a->rounds->coordinating());
    p.a->now += 100;
    p.a->rounds->tick(p.a->now);
    CHECK(p.a->rounds->model_version() == 2);
    CHECK(p.a->model() == p.b->model());
    CHECK(p.a->offer("d5").round_id == 2);
  }

  TEST_CASE(
      "a coordinator that dies while sealing is replaced, and the sealed round is closed from its ledger") {
    Pair p(2, 1000);
    const std::vector<float> v1 = p.a->model();
    const std::vector<Update> ups = {honest("d0", 1, 10), honest("d1", 2, 20)};
    CHECK(disposition(p.a->upload(p.a->offer("d0"), ups[0])) == wire::UpdateDisposition::kAccepted);
    CHECK(disposition(p.b->upload(p.b->offer("d1"), ups[1])) == wire::UpdateDisposition::kAccepted);
    // The coordinator seals, then its model write fails for good (it dies before the commit).
    p.a->faults->failing["record_model"] = -1;
    p.a->now += 100;
    p.a->rounds->tick(p.a->now);
    CHECK(p.a->rounds->model_version() == 1);
    std::optional<RoundRecord> round;
    std::string error;
    REQUIRE(p.b->storage->get_round(1, &round, &error) == Status::kOk);
    REQUIRE(round);
    CHECK(round->sealed);
    CHECK(disposition(p.b->upload(p.b->offer("d9"), honest("d9", 9, 90))) !=
          wire::UpdateDisposition::kAccepted);
    for (int i = 0; i < 15 && !p.b->rounds->coordinating(); ++i) {
      p.b->now += 100;
      p.b->rounds->tick(p.b->now);
    }
    REQUIRE(p.b->rounds->coordinating());
    // The sealed round, committed at takeover: b's update from the sum b flushed when it saw the
    // seal, the dead coordinator's decoded from the ledger once the wait for a sum ran out.
    CHECK(p.b->faults->calls["put_partial_sum"] == 1);
    for (int i = 0; i < 6 && p.b->rounds->model_version() == 1; ++i) {
      p.b->now += 100;
      p.b->rounds->tick(p.b->now);
    }
    CHECK(p.b->rounds->model_version() == 2);
    CHECK(p.b->model() == fedavg(v1, ups));
  }

  TEST_CASE("an aggregator that takes the lease but cannot coordinate gives it up; another coordinates") {
    Pair p(2, 1000);
    const std::vector<float> v1 = p.a->model();
    p.b->faults->failing["set_fence"] = -1;  // b can never start as coordinator
    // The coordinator goes silent; b takes the lapsed lease, fails to start, and releases it.
    for (int i = 0; i < 14; ++i) {
      p.b->now += 100;
      p.b->rounds->tick(p.b->now);
    }
    CHECK(p.b->faults->calls["set_fence"] >= 1);
    CHECK(p.b->faults->calls["release_lease"] == 1);
    CHECK_FALSE(p.b->rounds->coordinating());
    // a is back: the released lease is free, and a coordinates again under a new epoch.
    p.a->now = p.b->now;
    p.a->rounds->tick(p.a->now);
    REQUIRE(p.a->rounds->coordinating());
    // b keeps following (no second attempt while it sits out), and the rounds go on through both.
    const std::vector<Update> ups = {honest("d0", 1, 10), honest("d1", 2, 20)};
    for (int i = 0; i < 5; ++i) p.advance(100);
    CHECK(p.b->faults->calls["release_lease"] == 1);
    CHECK_FALSE(p.b->rounds->coordinating());
    const int attempts = p.b->faults->calls["acquire_lease"];
    for (int i = 0; i < 25; ++i) p.advance(100);            // past b's two lease periods out
    CHECK(p.b->faults->calls["acquire_lease"] > attempts);  // b looks at the lease again
    CHECK(p.b->faults->calls["release_lease"] == 1);        // and finds a's
    CHECK_FALSE(p.b->rounds->coordinating());
    REQUIRE(p.a->rounds->coordinating());
    CHECK(disposition(p.a->upload(p.a->offer("d0"), ups[0])) == wire::UpdateDisposition::kAccepted);
    CHECK(disposition(p.b->upload(p.b->offer("d1"), ups[1])) == wire::UpdateDisposition::kAccepted);
    p.advance(100);
    p.advance(100);
    REQUIRE(p.a->rounds->model_version() == 2);
    CHECK(p.a->model() == fedavg(v1, ups));
  }

  TEST_CASE(
      "a follower that dies before flushing its sum: the coordinator waits for it, then decodes that "
      "follower's updates only") {
    Pair p(3);
    const std::vector<float> v1 = p.a->model();
    const std::vector<Update> ups = {honest("d0", 1, 10), honest("d1", 2, 20), honest("d2", 3, 30)};
    CHECK(disposition(p.a->upload(p.a->offer("d0"), ups[0])) == wire::UpdateDisposition::kAccepted);
    CHECK(disposition(p.b->upload(p.b->offer("d1"), ups[1])) == wire::UpdateDisposition::kAccepted);
    CHECK(disposition(p.b->upload(p.b->offer("d2"), ups[2])) == wire::UpdateDisposition::kAccepted);
    // b dies (it never ticks again); a seals at its next look and waits 500 ms for b's sum.
    int64_t sealed_at = 0;
    for (int i = 0; i < 12 && p.a->rounds->model_version() == 1; ++i) {
      p.a->now += 100;
      p.a->rounds->tick(p.a->now);
      if (sealed_at == 0) {
        std::optional<RoundRecord> round;
        REQUIRE(p.a->storage->get_round(1, &round, nullptr) == Status::kOk);
        if (round && round->sealed) sealed_at = p.a->now;
      }
    }
    REQUIRE(p.a->rounds->model_version() == 2);
    REQUIRE(sealed_at != 0);
    const int64_t waited = p.a->now - sealed_at;
    CHECK(waited >= 500);
    CHECK(waited <= 600);
    CHECK(p.a->faults->calls["for_each_update_of"] == 1);  // b's share only: a's own sum is in memory
    CHECK(p.a->model() == fedavg(v1, ups));
    REQUIRE(p.a->rounds->history().size() == 1);
    CHECK(p.a->rounds->history()[0].accepted == 3);
  }

  TEST_CASE(
      "a flushed sum of other rows than its share, or one that does not verify, is not used: that share is "
      "decoded at once; a failed read during the merge is retried") {
    // in doubt: b's write of d2 commits, but b is told it failed (a connection lost during COMMIT):
    //   the ledger has it, b's sum (one update) does not.
    // other rows: a sum with the share's count and weight but other sequences.
    // corrupt: a sum of the share's rows whose bytes do not verify.
    // weight: the share's count and sequences, a valid state of another weight.
    for (const std::string variant : {"in doubt", "other rows", "corrupt", "weight"}) {
      CAPTURE(variant);
      Pair p(3);
      const std::vector<float> v1 = p.a->model();
      const std::vector<Update> ups = {honest("d0", 1, 10), honest("d1", 2, 20), honest("d2", 3, 30)};
      CHECK(disposition(p.a->upload(p.a->offer("d0"), ups[0])) == wire::UpdateDisposition::kAccepted);
      CHECK(disposition(p.b->upload(p.b->offer("d1"), ups[1])) == wire::UpdateDisposition::kAccepted);
      if (variant == "in doubt") {
        p.b->faults->record_update_in_doubt = 1;
        CHECK(std::holds_alternative<wire::Error>(p.b->upload(p.b->offer("d2"), ups[2])));
      } else {
        CHECK(disposition(p.b->upload(p.b->offer("d2"), ups[2])) == wire::UpdateDisposition::kAccepted);
      }
      uint64_t in_ledger = 0;
      REQUIRE(p.a->storage->count_updates(1, &in_ledger, nullptr) == Status::kOk);
      REQUIRE(in_ledger == 3);
      p.a->now += 100;
      p.a->rounds->tick(p.a->now);  // sealed; b's sum awaited
      REQUIRE(p.a->rounds->model_version() == 1);
      const int64_t sealed_at = p.a->now;
      if (variant != "in doubt") {
        std::vector<LedgerShare> shares;
        REQUIRE(p.a->storage->ledger_shares(1, &shares, nullptr) == Status::kOk);
        REQUIRE(shares.size() == 2);
        const LedgerShare& b_share = shares[0].aggregator.rfind("b#", 0) == 0 ? shares[0] : shares[1];
        REQUIRE(b_share.updates == 2);
        p.b->faults->failing["put_partial_sum"] = -1;  // b's own flush never lands
        PartialSum bad;
        bad.round_id = 1;
        bad.aggregator = b_share.aggregator;
        bad.updates = 2;
        bad.sequence_sum = variant == "other rows" ? b_share.sequence_sum + 1 : b_share.sequence_sum;
        // A valid state of two updates: b's own (the right rows) or of another weight.
        std::vector<uint8_t> memory(StreamingAggregator::storage_bytes(spec_size()));
        StreamingAggregator made;
        REQUIRE(made.init({memory.data(), memory.size()}, spec_size()) == Status::kOk);
        const double extra = variant == "weight" ? 1 : 0;
        REQUIRE(made.add_dense({ups[1].values.data(), spec_size()}, 20 + extra) == Status::kOk);
        REQUIRE(made.add_dense({ups[2].values.data(), spec_size()}, 30) == Status::kOk);
        bad.state.resize(StreamingAggregator::export_bytes(spec_size()));
        size_t written = 0;
        REQUIRE(made.export_state({bad.state.data(), bad.state.size()}, &written) == Status::kOk);
        if (variant == "corrupt") bad.state[bad.state.size() / 2] ^= 1;
        REQUIRE(p.a->storage->put_partial_sum(bad, nullptr) == Status::kOk);
      }
      p.b->now = p.a->now;
      p.b->rounds->tick(p.b->now);  // b flushes (or fails to)
      // The first attempt's read of the sums fails: retried, with the same result.
      p.a->faults->failing["for_each_partial_sum"] = 1;
      for (int i = 0; i < 8 && p.a->rounds->model_version() == 1; ++i) {
        p.a->now += 50;
        p.a->rounds->tick(p.a->now);  // not waited for once read: decoded
      }
      REQUIRE(p.a->rounds->model_version() == 2);
      CHECK(p.a->faults->calls["for_each_partial_sum"] >= 2);
      const int64_t closed_after = p.a->now - sealed_at;
      CHECK(closed_after < 500);  // at the retry after its 200 ms backoff, not after the 500 ms wait
      CHECK(p.a->faults->calls["for_each_update_of"] == 1);
      CHECK(p.a->model() == fedavg(v1, ups));
    }
  }

  TEST_CASE("configurations several aggregators cannot run are refused at start") {
    const std::string dir = make_temp_dir();
    RoundOptions o;
    const std::string spaced("a b"), fine("a");
    o.aggregator_id = spaced;
    Server bad_name(dir, o);
    bad_name.in_memory = true;
    CHECK(bad_name.open() == Status::kInvalidArgument);
    o.aggregator_id = fine;
    Server on_sqlite(dir, o);  // SQLite belongs to one server
    CHECK(on_sqlite.open() == Status::kInvalidArgument);
    fs::remove_all(dir);
  }
}

TEST_SUITE("server.rounds.leases") {
  TEST_CASE(
      "offers of silent devices go back to the pool after their lease; the device may retake a free slot") {
    const std::string dir = make_temp_dir();
    RoundOptions o;
    o.cohort = 2;
    o.over_selection = 1.0;  // two offers
    o.offer_lease_ms = 5000;
    o.deadline_ms = 60000;
    Server s(dir, o);
    REQUIRE(s.open() == Status::kOk);
    const wire::TaskOffer silent1 = s.offer("silent-1");
    (void)s.offer("silent-2");
    wire::Hello hello;
    Reply full = s.rounds->hello("worker-1", hello, s.now);
    REQUIRE(std::holds_alternative<wire::RetryLater>(full.message));
    CHECK(std::get<wire::RetryLater>(full.message).reason == wire::RetryReason::kRoundFull);
    // Activity renews a lease: silent-2 asks for the model at +4 s.
    s.now += 4000;
    wire::ModelRequest req;
    req.round_id = silent1.round_id;
    req.model_version = silent1.model_version;
    req.max_length = 64;
    CHECK(std::holds_alternative<wire::ModelChunk>(s.rounds->model_request("silent-2", req, s.now).message));
    s.now += 2000;  // silent-1's lease (5 s) has run out; silent-2's has not
    s.rounds->tick(s.now);
    CHECK(s.metrics.offers_expired.load() == 1);
    const wire::TaskOffer w1 = s.offer("worker-1");
    CHECK(w1.round_id == silent1.round_id);
    Reply still_full = s.rounds->hello("worker-2", hello, s.now);
    CHECK(std::holds_alternative<wire::RetryLater>(still_full.message));
    // silent-1 comes back while the round is full: told its offer expired (an unknown round).
    Reply back = s.rounds->model_request("silent-1", req, s.now);
    REQUIRE(std::holds_alternative<wire::Error>(back.message));
    CHECK(std::get<wire::Error>(back.message).code == wire::ErrorCode::kUnknownRound);
    // The round completes with the devices that work.
    s.now += 10000;  // silent-2 expires as well
    CHECK(disposition(s.upload(w1, honest("worker-1", 1, 1))) == wire::UpdateDisposition::kAccepted);
    CHECK(disposition(s.upload(s.offer("worker-2"), honest("worker-2", 2, 1))) ==
          wire::UpdateDisposition::kAccepted);
    CHECK(s.rounds->model_version() == 2);
    fs::remove_all(dir);
  }

  TEST_CASE("a device whose lease expired may upload into a slot that is still free") {
    const std::string dir = make_temp_dir();
    RoundOptions o;
    o.cohort = 2;
    o.over_selection = 1.0;
    o.offer_lease_ms = 1000;
    Server s(dir, o);
    REQUIRE(s.open() == Status::kOk);
    const wire::TaskOffer slow = s.offer("slow");
    s.now += 3000;
    s.rounds->tick(s.now);
    // Nobody took the slot: the slow device's upload is taken.
    CHECK(disposition(s.upload(slow, honest("slow", 1, 1))) == wire::UpdateDisposition::kAccepted);
    fs::remove_all(dir);
  }
}

TEST_SUITE("server.rounds.ids") {
  TEST_CASE("a commit or upload for round 2^63 or above is an unknown round, not a storage failure") {
    const std::string dir = make_temp_dir();
    Server s(dir, RoundOptions{});
    REQUIRE(s.open() == Status::kOk);
    wire::TaskOffer fake = s.offer("a");
    for (uint64_t id : {uint64_t{1} << 63, ~uint64_t{0}}) {
      fake.round_id = id;
      const wire::Message m = s.upload_bytes(fake, "a", std::vector<uint8_t>(16, 1), 1);
      REQUIRE(std::holds_alternative<wire::Error>(m));
      CHECK(std::get<wire::Error>(m).code == wire::ErrorCode::kUnknownRound);
      wire::Commit commit;
      commit.round_id = id;
      commit.round_nonce = fake.round_nonce;
      commit.upload_id.fill(3);
      commit.total_bytes = 16;
      commit.sample_count = 1;
      const Reply r = s.rounds->commit("a", commit, s.now);
      REQUIRE(std::holds_alternative<wire::Error>(r.message));
      CHECK(std::get<wire::Error>(r.message).code == wire::ErrorCode::kUnknownRound);
      CHECK_FALSE(r.close);
    }
    fs::remove_all(dir);
  }
}

TEST_SUITE("server.rounds.seeds") {
  TEST_CASE("each device of a round gets its own codec and training seeds, stable across a restart") {
    const std::string dir = make_temp_dir();
    RoundOptions o;
    o.cohort = 3;
    o.uplink_codec = "q4";
    Server s(dir, o);
    REQUIRE(s.open() == Status::kOk);
    const wire::TaskOffer a = s.offer("device-a"), b = s.offer("device-b");
    CHECK(a.round_id == b.round_id);
    CHECK(a.codec_seed != b.codec_seed);  // the defect: one codec seed for the whole round
    CHECK(a.training.seed != b.training.seed);
    CodecSpec q4;
    REQUIRE(parse_codec_spec("q4", &q4) == Status::kOk);
    const DeviceSeeds expected = device_seeds(round_seed(o.seed, a.round_id), "device-a", 8, q4);
    CHECK(a.codec_seed == expected.codec);
    CHECK(a.training.seed == expected.training);
    CHECK(s.offer("device-a").codec_seed == a.codec_seed);  // offered again: the same seeds
    s.reopen();
    CHECK(s.offer("device-a").codec_seed == a.codec_seed);  // and after a restart
    fs::remove_all(dir);
  }

  TEST_CASE("random-k and Count Sketch rounds share one codec seed; training seeds stay per device") {
    for (const char* codec : {"randk:0.1+fp32", "cs"}) {
      CAPTURE(codec);
      const std::string dir = make_temp_dir();
      RoundOptions o;
      o.cohort = 3;
      o.uplink_codec = codec;
      Server s(dir, o);
      REQUIRE(s.open() == Status::kOk);
      const wire::TaskOffer a = s.offer("device-a"), b = s.offer("device-b");
      CHECK(a.codec_seed == b.codec_seed);
      CHECK(a.training.seed != b.training.seed);
      fs::remove_all(dir);
    }
  }

  TEST_CASE("an update encoded with another seed than its offer's is rejected before its ack") {
    const std::string dir = make_temp_dir();
    RoundOptions o;
    o.cohort = 2;
    Server s(dir, o);
    REQUIRE(s.open() == Status::kOk);
    const Update u = honest("device-a", 1, 10);
    wire::TaskOffer offer = s.offer("device-a");
    wire::TaskOffer other = offer;
    other.codec_seed = s.offer("device-b").codec_seed;  // device-b's seed, device-a's round
    CodecSpec spec;
    REQUIRE(parse_codec_spec("fp32", &spec) == Status::kOk);
    std::vector<uint8_t> ws(workspace_size(spec, u.values.size())),
        bytes(encoded_bound(spec, u.values.size()));
    size_t written = 0;
    REQUIRE(encode(spec, {u.values.data(), u.values.size()}, other.codec_seed, {ws.data(), ws.size()},
                   {bytes.data(), bytes.size()}, &written) == Status::kOk);
    bytes.resize(written);
    const wire::Message m = s.upload_bytes(offer, "device-a", bytes, u.samples);
    CHECK(disposition(m) == wire::UpdateDisposition::kRejected);
    CHECK(reject_reason(m) == wire::RejectReason::kInvalidEncoding);
    CHECK(s.metrics.updates_accepted.load() == 0);
    // The same update under its own seed is accepted.
    CHECK(disposition(s.upload(offer, u)) == wire::UpdateDisposition::kAccepted);
    fs::remove_all(dir);
  }
}

// RoundManager's rules over MemoryStorage and the fake clock alone: no database, no sockets.
TEST_SUITE("server.rounds.logic") {
  // A hello's answer, whatever it is.
  wire::Message hello_of(Server & s, const std::string& device) {
    wire::Hello hello;
    hello.sdk_version = "test";
    return s.rounds->hello(device, hello, s.now).message;
  }
  // A Commit alone (no upload), as a device whose upload finished before the round closed sends it.
  // The ledger's row of `device` in `round_id` (which must be there).
  UpdateRecord ledger_row(Server & s, uint64_t round_id, const std::string& device) {
    std::optional<UpdateRecord> row;
    std::string error;
    REQUIRE(s.storage->find_update(round_id, device, &row, &error) == Status::kOk);
    REQUIRE(row.has_value());
    return *row;
  }
  // A Commit of the update in `row`, under `offer` (its upload id, digest, size and samples).
  wire::Commit commit_of(const UpdateRecord& row, const wire::TaskOffer& offer) {
    wire::Commit commit;
    commit.round_id = offer.round_id;
    commit.round_nonce = offer.round_nonce;
    commit.upload_id = row.upload_id;
    commit.digest = row.digest;
    commit.total_bytes = row.payload_bytes;
    commit.sample_count = row.sample_count;
    return commit;
  }
  wire::Message commit_only(Server & s, const wire::TaskOffer& offer, const std::string& device) {
    wire::Commit commit;
    commit.round_id = offer.round_id;
    commit.round_nonce = offer.round_nonce;
    commit.upload_id.fill(0x42);
    commit.total_bytes = 100;
    commit.sample_count = 1;
    return s.rounds->commit(device, commit, s.now).message;
  }
  wire::RetryReason retry_reason(const wire::Message& m) {
    const auto* r = std::get_if<wire::RetryLater>(&m);
    REQUIRE_MESSAGE(r != nullptr,
                    "expected RetryLater, got " << wire::message_type_name(wire::message_type(m)));
    return r->reason;
  }

  TEST_CASE(
      "selection: ceil(K x over-selection) offers, then RoundFull; an offered device gets its offer again") {
    const std::string dir = make_temp_dir();
    RoundOptions o;
    o.cohort = 4;
    o.over_selection = 1.5;  // 6 offers
    Server s(dir, o);
    s.in_memory = true;
    REQUIRE(s.open() == Status::kOk);
    std::vector<wire::TaskOffer> offers;
    for (int d = 0; d < 6; ++d) offers.push_back(s.offer("device-" + std::to_string(d)));
    CHECK(retry_reason(hello_of(s, "device-6")) == wire::RetryReason::kRoundFull);
    const wire::TaskOffer again = s.offer("device-2");
    CHECK(again.round_id == offers[2].round_id);
    CHECK(again.codec_seed == offers[2].codec_seed);
    CHECK(s.metrics.offers.load() == 7);
    fs::remove_all(dir);
  }

  TEST_CASE("selection probability: some check-ins are told NotSelected, and come back") {
    const std::string dir = make_temp_dir();
    RoundOptions o;
    o.cohort = 50;
    o.selection_probability = 0.5;
    Server s(dir, o);
    s.in_memory = true;
    REQUIRE(s.open() == Status::kOk);
    int offered = 0, not_selected = 0;
    for (int d = 0; d < 60; ++d) {
      const wire::Message m = hello_of(s, "device-" + std::to_string(d));
      if (std::holds_alternative<wire::TaskOffer>(m)) {
        ++offered;
      } else {
        CHECK(retry_reason(m) == wire::RetryReason::kNotSelected);
        ++not_selected;
      }
    }
    CHECK(offered > 15);  // about 30 of 60
    CHECK(not_selected > 15);
    fs::remove_all(dir);
  }

  TEST_CASE(
      "deadline: a quorum commits what it has; below the quorum the round is abandoned and the model kept") {
    const std::string dir = make_temp_dir();
    RoundOptions o;
    o.cohort = 4;
    o.min_quorum = 2;
    o.deadline_ms = 10000;
    Server s(dir, o);
    s.in_memory = true;
    REQUIRE(s.open() == Status::kOk);
    const std::vector<float> v1 = s.model();
    // Round 1: two of four by the deadline -> committed with those two.
    const std::vector<Update> two = {honest("a", 1, 10), honest("b", 2, 30)};
    run_round(s, two);
    s.now += 10001;
    s.rounds->tick(s.now);
    REQUIRE(s.rounds->history().size() == 1);
    CHECK(s.rounds->history()[0].state == RoundState::kCommitted);
    CHECK(s.rounds->history()[0].accepted == 2);
    const std::vector<float> v2 = s.model();
    CHECK(v2 == fedavg(v1, two));
    // Round 2: one of four -> abandoned at the deadline; the model does not move.
    run_round(s, {honest("c", 3, 5)});
    s.now += 10001;
    s.rounds->tick(s.now);
    REQUIRE(s.rounds->history().size() == 2);
    CHECK(s.rounds->history()[1].state == RoundState::kAbandoned);
    CHECK(s.model() == v2);
    CHECK(s.rounds->model_version() == 2);
    fs::remove_all(dir);
  }

  TEST_CASE(
      "below the quorum, acknowledged updates are not lost: the next round counts them, across a restart and "
      "a second abandonment, and their devices get no second task on that model") {
    for (const bool in_memory : {false, true}) {
      CAPTURE(in_memory);
      const std::string dir = make_temp_dir();
      RoundOptions o;
      o.cohort = 4;
      o.min_quorum = 3;
      o.deadline_ms = 10000;
      Server s(dir, o);
      s.in_memory = in_memory;
      REQUIRE(s.open() == Status::kOk);
      const std::vector<float> v1 = s.model();
      const Update c = honest("c", 3, 5), d = honest("d", 4, 7), e = honest("e", 5, 11),
                   f = honest("f", 6, 13);
      // Round 1: c only, acknowledged Accepted; abandoned at the deadline (1 of 3).
      const wire::TaskOffer round1 = s.offer("c");
      REQUIRE(disposition(s.upload(round1, c)) == wire::UpdateDisposition::kAccepted);
      s.now += 10001;
      s.rounds->tick(s.now);
      REQUIRE(s.rounds->history().size() == 1);
      CHECK(s.rounds->history()[0].state == RoundState::kAbandoned);
      CHECK(s.model() == v1);
      CHECK(s.rounds->carried_updates() == 1);
      // Round 2: c already counts here; d is accepted; a restart rebuilds both.
      CHECK(retry_reason(s.rounds->hello("c", wire::Hello{}, s.now).message) ==
            wire::RetryReason::kRoundFull);
      run_round(s, {d});
      s.reopen();
      CHECK(s.rounds->carried_updates() == 1);
      CHECK(retry_reason(s.rounds->hello("c", wire::Hello{}, s.now).message) ==
            wire::RetryReason::kRoundFull);
      // Abandoned again (1 carried + 1 of 3): round 3 counts both.
      s.now += 10001;
      s.rounds->tick(s.now);
      REQUIRE(s.rounds->history().size() == 1);  // the restart began a new history
      CHECK(s.rounds->history()[0].state == RoundState::kAbandoned);
      CHECK(s.rounds->history()[0].accepted == 2);
      CHECK(s.rounds->carried_updates() == 2);
      CHECK(retry_reason(s.rounds->hello("c", wire::Hello{}, s.now).message) ==
            wire::RetryReason::kRoundFull);
      CHECK(retry_reason(s.rounds->hello("d", wire::Hello{}, s.now).message) ==
            wire::RetryReason::kRoundFull);
      // c's ack of round 1 was lost: its retried commit hears Duplicate, it is counted.
      CHECK(disposition(s.upload(round1, c)) == wire::UpdateDisposition::kDuplicate);
      // e and f make the cohort of 4 with the two carried: round 3 commits at once.
      run_round(s, {e, f});
      REQUIRE(s.rounds->history().size() == 2);
      CHECK(s.rounds->history()[1].state == RoundState::kCommitted);
      CHECK(s.rounds->history()[1].accepted == 4);
      CHECK(max_abs_diff(s.model(), fedavg(v1, {c, d, e, f})) < 1e-7);
      CHECK(s.rounds->model_version() == 2);
      // The next model: nothing carried, every device may take part again; payloads dropped.
      CHECK(s.rounds->carried_updates() == 0);
      CHECK(disposition(s.upload(round1, c)) == wire::UpdateDisposition::kDuplicate);  // counted in v2
      (void)s.offer("c");
      std::string error;
      for (uint64_t r = 1; r <= 3; ++r) {
        CAPTURE(r);
        REQUIRE(s.storage->for_each_update(
                    r,
                    [&](const UpdateRecord& u) {
                      CHECK(u.payload.empty());
                      return Status::kOk;
                    },
                    &error) == Status::kOk);
      }
      fs::remove_all(dir);
    }
  }

  TEST_CASE("an abandoned last round (--rounds) leaves its updates to the next start of the state") {
    const std::string dir = make_temp_dir();
    RoundOptions o;
    o.cohort = 2;
    o.rounds = 1;
    o.deadline_ms = 10000;
    Server s(dir, o);
    REQUIRE(s.open() == Status::kOk);
    const std::vector<float> v1 = s.model();
    const Update a = honest("a", 1, 5), b = honest("b", 2, 9);
    run_round(s, {a});
    s.now += 10001;
    s.rounds->tick(s.now);
    CHECK(s.rounds->finished());
    CHECK(s.rounds->carried_updates() == 0);  // no round open
    s.options.rounds = 2;
    s.reopen();
    CHECK(s.rounds->carried_updates() == 1);
    CHECK(retry_reason(s.rounds->hello("a", wire::Hello{}, s.now).message) == wire::RetryReason::kRoundFull);
    run_round(s, {b});
    REQUIRE(s.rounds->model_version() == 2);
    CHECK(max_abs_diff(s.model(), fedavg(v1, {a, b})) < 1e-7);
    fs::remove_all(dir);
  }

  TEST_CASE(
      "a round whose model would not be finite is abandoned and passes nothing on, its carried updates "
      "included") {
    const std::string dir = make_temp_dir();
    RoundOptions o;
    o.cohort = 3;
    o.min_quorum = 2;
    o.deadline_ms = 10000;
    o.optimizer = "fedavg:lr=1000000";  // each update passes its checks; the step overflows
    o.max_update_norm = 1e38;
    Server s(dir, o);
    REQUIRE(s.open() == Status::kOk);
    const std::vector<float> v1 = s.model();
    const Update a = honest("a", 1, 5);
    const wire::TaskOffer round1 = s.offer("a");
    REQUIRE(disposition(s.upload(round1, a)) == wire::UpdateDisposition::kAccepted);
    s.now += 10001;
    s.rounds->tick(s.now);
    REQUIRE(s.rounds->carried_updates() == 1);
    CHECK(disposition(s.upload(round1, a)) == wire::UpdateDisposition::kDuplicate);  // still to count
    Update huge = honest("b", 2, 5);
    for (float& v : huge.values) v = 1.0e34f;
    Update huge2 = huge;
    huge2.device = "c";
    run_round(s, {huge, huge2});  // 1 carried + 2: the cohort; the step overflows the model
    REQUIRE(s.rounds->history().size() == 2);
    CHECK(s.rounds->history()[1].state == RoundState::kAbandoned);
    CHECK(s.model() == v1);
    CHECK(s.rounds->carried_updates() == 0);
    s.reopen();
    CHECK(s.rounds->carried_updates() == 0);
    // a's ack was lost: its update reached no model and waits for none, so its retry is late.
    CHECK(disposition(s.upload(round1, a)) == wire::UpdateDisposition::kLate);
    fs::remove_all(dir);
  }

  TEST_CASE(
      "plain rounds walked at random (chunked uploads resumed after lost connections, retried commits, a "
      "hostile device, failing storage calls, commits that took effect but reported failure, restarts, "
      "deadlines): every acknowledged update is in its round's model once, each model is the FedAvg of its "
      "ledger, and refusals change nothing") {
    // EDGEFL_ROUND_WALKS walks (default 12) from seed EDGEFL_ROUND_FIRST_WALK (default 1) on.
    uint32_t walks = 12, first = 1;
    if (const char* env = std::getenv("EDGEFL_ROUND_WALKS")) walks = uint32_t(std::strtoul(env, nullptr, 10));
    if (const char* env = std::getenv("EDGEFL_ROUND_FIRST_WALK"))
      first = uint32_t(std::strtoul(env, nullptr, 10));
    REQUIRE(walks > 0);
    uint64_t rounds = 0, committed = 0, updates = 0, acked = 0, hostile = 0, already_counted = 0,
             carrying = 0;
    for (uint32_t seed = first; seed < first + walks; ++seed) {
      INFO("seed " << seed);
      PlainWalk walk(seed);
      walk.run();
      rounds += walk.rounds_closed;
      committed += walk.rounds_committed;
      carrying += walk.commits_carrying;
      hostile += walk.hostile_sent;
      already_counted += walk.told_already_counted;
      updates += walk.sent.size();
      for (const auto& entry : walk.sent) acked += entry.second.acked ? 1 : 0;
    }
    MESSAGE(walks << " walks: " << committed << " of " << rounds
                  << " rounds committed (all those opened but the last); " << updates << " commits sent, "
                  << acked << " acknowledged; " << hostile << " hostile messages (" << already_counted
                  << " commits of another update by a counted device, answered already_counted); " << carrying
                  << " commits counted the updates of rounds abandoned below their quorum");
    CHECK(already_counted > 0);
    if (walks >= 4) CHECK(carrying > 0);
    CHECK(committed > 0);
  }
  TEST_CASE("duplicates, stragglers and late commits are answered as such and counted nowhere") {
    const std::string dir = make_temp_dir();
    RoundOptions o;
    o.cohort = 2;
    o.over_selection = 2;
    o.deadline_ms = 10000;
    Server s(dir, o);
    s.in_memory = true;
    REQUIRE(s.open() == Status::kOk);
    const std::vector<float> v1 = s.model();
    const Update a = honest("a", 1, 10), b = honest("b", 2, 20);
    const wire::TaskOffer offer_a = s.offer("a"), offer_b = s.offer("b"), offer_c = s.offer("c");
    CHECK(disposition(s.upload(offer_a, a)) == wire::UpdateDisposition::kAccepted);
    // A retried commit (its ack was lost): duplicate, not counted again.
    CHECK(disposition(s.upload(offer_a, a)) == wire::UpdateDisposition::kDuplicate);
    // Another update of a's for this round (a device that lost its state and trained again), under
    // the same upload id or another: refused as such, so that a does not take the counted update
    // for this one; a's first update stays the one counted.
    const wire::Message other_bytes = s.upload(offer_a, honest("a", 99, 10));
    CHECK(disposition(other_bytes) == wire::UpdateDisposition::kRejected);
    CHECK(std::get<wire::Ack>(other_bytes).reason == wire::RejectReason::kAlreadyCounted);
    const wire::Message other_upload = commit_only(s, offer_a, "a");
    CHECK(disposition(other_upload) == wire::UpdateDisposition::kRejected);
    CHECK(std::get<wire::Ack>(other_upload).reason == wire::RejectReason::kAlreadyCounted);
    CHECK(disposition(s.upload(offer_b, b)) == wire::UpdateDisposition::kAccepted);  // the cohort: commits
    REQUIRE(s.rounds->history().size() == 1);
    CHECK(s.model() == fedavg(v1, {a, b}));
    // c trained for round 1 and commits before its deadline: a straggler.
    CHECK(disposition(commit_only(s, offer_c, "c")) == wire::UpdateDisposition::kStraggler);
    // Round 2 is abandoned at its deadline; a commit for it afterwards is late.
    const wire::TaskOffer offer_d = s.offer("d");
    s.now += 10001;
    s.rounds->tick(s.now);
    CHECK(disposition(commit_only(s, offer_d, "d")) == wire::UpdateDisposition::kLate);
    CHECK(s.model() == fedavg(v1, {a, b}));
    CHECK(s.metrics.updates_accepted.load() == 2);
    CHECK(s.metrics.updates_duplicate.load() == 1);
    CHECK(s.metrics.updates_rejected.load() == 2);
    CHECK(s.metrics.updates_straggler.load() == 1);
    CHECK(s.metrics.updates_late.load() == 1);
    fs::remove_all(dir);
  }

  TEST_CASE(
      "a row the store finds only at insert (another aggregator's): the same update hears Duplicate, "
      "another already_counted, and a ledger that cannot be read Internal; nothing is counted twice") {
    const std::string dir = make_temp_dir();
    RoundOptions o;
    o.cohort = 3;
    Server s(dir, o);
    s.in_memory = true;
    REQUIRE(s.open() == Status::kOk);
    const std::vector<float> v1 = s.model();
    const Update a = honest("a", 1, 10), b = honest("b", 2, 20), c = honest("c", 3, 30);
    const wire::TaskOffer offer_a = s.offer("a"), offer_b = s.offer("b"), offer_c = s.offer("c");
    CHECK(disposition(s.upload(offer_a, a)) == wire::UpdateDisposition::kAccepted);
    // The lookups of UploadStart and Commit miss a's row; the insert finds it.
    s.faults->hide_updates = 2;
    CHECK(disposition(s.upload(offer_a, a)) == wire::UpdateDisposition::kDuplicate);
    s.faults->hide_updates = 2;
    const wire::Message other = s.upload(offer_a, honest("a", 99, 10));
    CHECK(disposition(other) == wire::UpdateDisposition::kRejected);
    CHECK(std::get<wire::Ack>(other).reason == wire::RejectReason::kAlreadyCounted);
    // The row is not found again after the insert reported it: Internal, retryable.
    s.faults->hide_updates = 3;
    const wire::Message lost = s.upload(offer_a, a);
    REQUIRE(std::holds_alternative<wire::Error>(lost));
    CHECK(std::get<wire::Error>(lost).code == wire::ErrorCode::kInternal);
    // The same bytes under another upload id are another update.
    const UpdateRecord counted_a = ledger_row(s, offer_a.round_id, "a");
    wire::Commit same_bytes = commit_of(counted_a, offer_a);
    same_bytes.upload_id[0] ^= 0xFF;
    const wire::Message renamed = s.rounds->commit("a", same_bytes, s.now).message;
    CHECK(disposition(renamed) == wire::UpdateDisposition::kRejected);
    CHECK(std::get<wire::Ack>(renamed).reason == wire::RejectReason::kAlreadyCounted);
    // A ledger that cannot be read: the lookup of a closed round's upload answers Internal, not
    // "unknown round" (which a device would take for "not counted").
    CHECK(disposition(s.upload(offer_b, b)) == wire::UpdateDisposition::kAccepted);
    CHECK(disposition(s.upload(offer_c, c)) == wire::UpdateDisposition::kAccepted);  // round 1 commits
    REQUIRE(s.rounds->model_version() == 2);
    CHECK(s.model() == fedavg(v1, {a, b, c}));
    s.faults->failing["find_update"] = 1;
    wire::UploadStart start;
    start.round_id = offer_a.round_id;
    start.round_nonce = offer_a.round_nonce;
    start.upload_id = counted_a.upload_id;
    start.total_bytes = counted_a.payload_bytes;
    const wire::Message unreadable = s.rounds->upload_start("a", start, s.now).message;
    REQUIRE(std::holds_alternative<wire::Error>(unreadable));
    CHECK(std::get<wire::Error>(unreadable).code == wire::ErrorCode::kInternal);
    const wire::Message readable = s.rounds->upload_start("a", start, s.now).message;  // then it is there
    REQUIRE(std::holds_alternative<wire::UploadStatus>(readable));
    CHECK(std::get<wire::UploadStatus>(readable).offset == counted_a.payload_bytes);
    fs::remove_all(dir);
  }

  TEST_CASE("a restart rebuilds the open round from the ledger: the model is the FedAvg of all its updates") {
    const std::string dir = make_temp_dir();
    RoundOptions o;
    o.cohort = 3;
    Server s(dir, o);
    s.in_memory = true;
    REQUIRE(s.open() == Status::kOk);
    const std::vector<float> v1 = s.model();
    const std::vector<Update> ups = {honest("a", 1, 7), honest("b", 2, 11), honest("c", 3, 13)};
    run_round(s, {ups[0], ups[1]});
    s.reopen();  // a restart over the same store
    CHECK(s.rounds->model_version() == 1);
    // The two accepted before the restart are duplicates now; the third completes the round.
    const wire::TaskOffer offer_c = s.offer("c");
    CHECK(retry_reason(hello_of(s, "a")) == wire::RetryReason::kRoundFull);  // it contributed already
    // a's counted update committed again (its ack was lost)
    const wire::Commit again = commit_of(ledger_row(s, offer_c.round_id, "a"), offer_c);
    CHECK(disposition(s.rounds->commit("a", again, s.now).message) == wire::UpdateDisposition::kDuplicate);
    // Any other update of a's for this round is refused as such: it is not the counted one.
    const wire::Message other = commit_only(s, offer_c, "a");
    CHECK(disposition(other) == wire::UpdateDisposition::kRejected);
    CHECK(std::get<wire::Ack>(other).reason == wire::RejectReason::kAlreadyCounted);
    CHECK(disposition(s.upload(offer_c, ups[2])) == wire::UpdateDisposition::kAccepted);
    REQUIRE(s.rounds->model_version() == 2);
    CHECK(s.model() == fedavg(v1, ups));
    CHECK(s.model_file(2) == s.model());
    fs::remove_all(dir);
  }
}

namespace {

// The download of `offer` through model_request in chunks of `chunk` bytes, applied to *model
// (the device's model of version `held`, or nothing) as edgefl::Client applies it; the result
// must match the offer's public model digest.
void download_and_apply(Server& s, const std::string& device, const wire::TaskOffer& offer, uint64_t held,
                        std::vector<float>* model, uint32_t chunk = 1000) {
  std::vector<uint8_t> stream;
  while (stream.size() < offer.model_bytes) {
    wire::ModelRequest request;
    request.round_id = offer.round_id;
    request.model_version = offer.model_version;
    request.base_model_version = offer.base_model_version;
    request.offset = stream.size();
    request.max_length = chunk;
    const Reply r = s.rounds->model_request(device, request, s.now);
    const auto* c = std::get_if<wire::ModelChunk>(&r.message);
    REQUIRE(c != nullptr);
    REQUIRE(c->offset == stream.size());
    REQUIRE(c->total_bytes == offer.model_bytes);
    stream.insert(stream.end(), c->data.begin(), c->data.end());
  }
  const tls::Sha256Digest d = tls::sha256({stream.data(), stream.size()});
  REQUIRE(std::memcmp(d.data(), offer.model_digest.data(), d.size()) == 0);
  const size_t n = offer.parameter_count;
  if (offer.base_model_version == 1 && held == 0) {
    ModelSpec spec;
    REQUIRE(parse_model_spec(offer.model_spec.c_str(), &spec) == Status::kOk);
    model->assign(n, 0.0f);
    init_parameters(spec, offer.initial_model_seed, {model->data(), n});
    REQUIRE(round_to_bf16_grid({model->data(), n}) == Status::kOk);
  } else if (offer.base_model_version != 0) {
    REQUIRE(offer.base_model_version == held);
  }
  if (offer.base_model_version == 0) model->assign(n, 0.0f);
  std::vector<float> scratch(n);
  std::vector<uint8_t> ws(download_decode_workspace({stream.data(), stream.size()}));
  uint64_t patches = 0;
  REQUIRE(apply_download({stream.data(), stream.size()}, offer.base_model_version == 0, {model->data(), n},
                         {scratch.data(), n}, {ws.data(), ws.size()}, &patches) == Status::kOk);
  CHECK(patches == (offer.base_model_version == 0 ? 0 : offer.model_version - offer.base_model_version));
  const tls::Sha256Digest p = tls::sha256_of_floats({model->data(), model->size()});
  CHECK(std::memcmp(p.data(), offer.public_model_digest.data(), p.size()) == 0);
}

}  // namespace

TEST_SUITE("server.rounds.downlink") {
  TEST_CASE(
      "downloads: the seed, then patches since the version held, else the whole model; after restarts too") {
    const std::string dir = make_temp_dir();
    RoundOptions o;
    o.cohort = 2;
    o.over_selection = 3;
    o.downlink_codec = "sparq:0.1";
    Server s(dir, o);
    REQUIRE(s.open() == Status::kOk);
    // Version 1: a device with no model builds it from the seed; nothing to download.
    std::vector<float> v1;
    wire::TaskOffer first = s.offer("watcher");
    CHECK(first.base_model_version == 1);
    CHECK(first.model_bytes == 0);
    CHECK(first.initial_model_seed == o.seed);
    CHECK(first.downlink_codec == "sparq:0.1");
    download_and_apply(s, "watcher", first, 0, &v1);
    for (uint32_t r = 0; r < 3; ++r) run_round(s, {honest("a", r, 3), honest("b", 10 + r, 5)});
    REQUIRE(s.rounds->model_version() == 4);

    // Three sparq:0.1 patches (about 1 bit per parameter each) beat the whole model in bf16.
    std::vector<float> m = v1;
    const wire::TaskOffer behind = s.offer("c", 1);
    CHECK(behind.base_model_version == 1);
    CHECK(behind.model_version == 4);
    CHECK(behind.model_bytes < 2 * spec_size());
    download_and_apply(s, "c", behind, 1, &m);
    const std::vector<float> v4 = m;
    // The patches moved the public model towards the server model (the residual, server - public,
    // is what they left out, and goes out later).
    double gap = 0, gap_before = 0;
    for (size_t i = 0; i < v4.size(); ++i) {
      gap += (double(s.model()[i]) - v4[i]) * (double(s.model()[i]) - v4[i]);
      gap_before += (double(s.model()[i]) - v1[i]) * (double(s.model()[i]) - v1[i]);
    }
    CHECK(gap < 0.8 * gap_before);

    // Asked for, unknown version, or a patch this server cannot build: the whole model.
    for (const auto& [held, flags] : std::vector<std::pair<uint64_t, uint32_t>>{
             {1, wire::kCapabilityNeedsWholeModel}, {99, 0}, {0, wire::kCapabilityNeedsWholeModel}}) {
      CAPTURE(held);
      const wire::TaskOffer whole = s.offer("c", held, flags);
      CHECK(whole.base_model_version == 0);
      std::vector<float> w;
      download_and_apply(s, "c", whole, held, &w);
      CHECK(w == v4);
    }
    wire::ModelRequest bad;
    bad.round_id = behind.round_id;
    bad.model_version = 4;
    bad.base_model_version = 5;
    bad.max_length = 100;
    CHECK(std::holds_alternative<wire::Error>(s.rounds->model_request("c", bad, s.now).message));
    // A device that holds the current version downloads nothing.
    const wire::TaskOffer current = s.offer("c", 4);
    CHECK(current.base_model_version == 4);
    CHECK(current.model_bytes == 0);

    // After a restart, the patches come from their files: the same bytes, the same model.
    s.reopen();
    const wire::TaskOffer again = s.offer("d", 1);
    CHECK(again.base_model_version == 1);
    CHECK(again.model_digest == behind.model_digest);
    m = v1;
    download_and_apply(s, "d", again, 1, &m);
    CHECK(m == v4);
    // A lost patch file: devices before it get the whole model, devices after it the rest.
    std::filesystem::remove(dir + "/patch-v000003.bin");
    s.reopen();
    CHECK(s.offer("e", 1).base_model_version == 0);
    CHECK(s.offer("f", 3).base_model_version == 3);
    // A damaged public model file: the server starts from its own model in bf16 and sends it whole.
    {
      std::fstream f(dir + "/public-v000004.bin", std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(100);
      const char byte = char(f.get());
      f.seekp(100);
      f.put(char(byte ^ 0x5A));
      REQUIRE(f.good());
    }
    s.reopen();
    const wire::TaskOffer rebuilt = s.offer("g", 3);
    CHECK(rebuilt.base_model_version == 0);
    std::vector<float> w;
    download_and_apply(s, "g", rebuilt, 3, &w);
    std::vector<float> server_bf16 = s.model();
    REQUIRE(round_to_bf16_grid({server_bf16.data(), server_bf16.size()}) == Status::kOk);
    CHECK(w == server_bf16);
    // And the rounds go on from there; after another restart no patch of the old history (the
    // patch into version 4) is chained to the new one.
    run_round(s, {honest("a", 7, 3), honest("b", 8, 5)});
    CHECK(s.rounds->model_version() == 5);
    const wire::TaskOffer next = s.offer("h", 4);
    CHECK(next.base_model_version == 4);
    download_and_apply(s, "h", next, 4, &w);
    CHECK_FALSE(std::filesystem::exists(dir + "/patch-v000004.bin"));
    s.reopen();
    CHECK(s.offer("i", 3).base_model_version == 0);
    CHECK(s.offer("j", 4).base_model_version == 4);
    std::filesystem::remove_all(dir);
  }
}

namespace {

// A model of its own (nothing built-in has these names): 39 parameters.
const std::vector<TensorDesc> kOwnTable = {{"embed.weight", {5, 7}, TensorDtype::kF32},
                                           {"head.bias", {3}, TensorDtype::kF32},
                                           {"norm.scale", {}, TensorDtype::kF32}};

std::string write_model_file(const std::string& path, const std::vector<TensorDesc>& table,
                             const std::vector<float>& values,
                             const std::vector<std::pair<std::string, std::string>>& metadata) {
  std::vector<uint8_t> file;
  std::string error;
  REQUIRE(encode_safetensors(table, {values.data(), values.size()}, metadata, &file, &error) == Status::kOk);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(file.data()), long(file.size()));
  return path;
}

Update sized(const std::string& device, size_t n, uint32_t salt, uint32_t samples) {
  Update u = honest(device, salt, samples);
  u.values.resize(n);
  for (size_t i = 0; i < n; ++i) u.values[i] = float(int(i % 7) - 3) * 1e-3f * float(salt + 1);
  return u;
}

// An evaluator of the deployment's own: counts its calls and reports the model's mean.
class MeanEvaluator final : public ModelEvaluator {
 public:
  std::string describe() const override { return "mean of the parameters"; }
  Status check_model(const std::vector<TensorDesc>& tensors, const std::string&,
                     std::string* error) const override {
    if (tensors != kOwnTable) {
      *error = "not the table this evaluator knows";
      return Status::kInvalidSpec;
    }
    return Status::kOk;
  }
  Status evaluate(Span<const float> model, Evaluation* out, std::string*) override {
    double sum = 0;
    for (float v : model) sum += v;
    ++calls;
    *out = Evaluation{0.25f, float(sum / double(model.size())), uint32_t(model.size())};
    return Status::kOk;
  }
  std::string preprocessing() const override { return "none: the inputs are already features"; }
  int calls = 0;
};

std::string read_error(Server& s) {
  std::string error;
  std::unique_ptr<Storage> inner;
  REQUIRE(open_sqlite_storage(s.dir + "/state.db", &inner, &error) == Status::kOk);
  RoundManager rounds(s.options, inner.get(), &s.metrics);
  (void)rounds.start(s.now, &error);
  return error;
}

}  // namespace

TEST_SUITE("server.rounds.models") {
  TEST_CASE(
      "a model of its own: its tensors in every offer, written back with its names, shapes and metadata") {
    const std::string dir = make_temp_dir();
    std::vector<float> initial(39);
    for (size_t i = 0; i < initial.size(); ++i) initial[i] = 0.01f * float(i) - 0.2f;
    const std::string file = write_model_file(dir + "/initial.safetensors", kOwnTable, initial,
                                              {{"preprocessing", "x / 255"}, {"edgefl.round", "99"}});
    RoundOptions o;
    o.cohort = 2;
    Server s(dir, o);
    s.options.model_spec.clear();
    s.options.initial_model = file;
    auto evaluator = std::make_shared<MeanEvaluator>();
    s.options.evaluator = evaluator;
    REQUIRE(s.open() == Status::kOk);
    CHECK(s.model() == initial);  // the file's values, exactly (the server model is not rounded)

    const wire::TaskOffer offer = s.offer("a");
    CHECK(offer.tensors == kOwnTable);
    CHECK(offer.model_spec.empty());
    CHECK(offer.parameter_count == 39);
    CHECK(offer.initial_model_seed == 0);  // nothing to build: download it
    CHECK(offer.base_model_version == 0);  // the whole model
    CHECK(offer.model_bytes > 0);

    const std::vector<Update> updates = {sized("a", 39, 1, 3), sized("b", 39, 2, 5)};
    const std::vector<float> want = fedavg(initial, updates);
    CHECK(disposition(s.upload(offer, updates[0])) == wire::UpdateDisposition::kAccepted);
    CHECK(disposition(s.upload(s.offer("b"), updates[1])) == wire::UpdateDisposition::kAccepted);
    REQUIRE(s.rounds->model_version() == 2);
    CHECK(evaluator->calls == 1);
    CHECK(s.metrics.test_accuracy_micros.load() == 250000);

    std::vector<uint8_t> bytes;
    std::string error;
    REQUIRE(read_file(dir + "/model-v000002.safetensors", 1u << 20, &bytes, &error) == Status::kOk);
    SafetensorsModel written;
    REQUIRE(read_safetensors({bytes.data(), bytes.size()}, &written, &error) == Status::kOk);
    CHECK(written.tensors == kOwnTable);
    REQUIRE(written.values.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i)
      CHECK(written.values[i] == doctest::Approx(want[i]).epsilon(1e-6));
    CHECK(written.metadata.at("preprocessing") == "x / 255");  // the user's metadata, carried
    CHECK(written.metadata.at("edgefl.round") == "1");         // ours, not the file's
    CHECK(written.metadata.at("edgefl.model_version") == "2");
    CHECK(written.metadata.at("edgefl.preprocessing") == "none: the inputs are already features");
    CHECK(written.metadata.count("edgefl.model_spec") == 0);

    // A restart reads its own files (the initial file may be gone), and offers the same table.
    std::filesystem::remove(file);
    s.options.initial_model.clear();
    s.options.model_spec.clear();
    CHECK(s.open() == Status::kInvalidArgument);  // no model named at all
    s.options.initial_model = write_model_file(dir + "/again.safetensors", kOwnTable, initial, {});
    s.reopen();
    CHECK(s.rounds->model_version() == 2);
    CHECK(s.offer("c").tensors == kOwnTable);
    // Another model's file cannot take over the state directory.
    std::vector<TensorDesc> other = kOwnTable;
    other[0].shape = {7, 5};
    s.options.initial_model = write_model_file(dir + "/other.safetensors", other, initial, {});
    s.options.evaluator = nullptr;  // (it would refuse the other table first)
    s.rounds.reset();
    s.storage.reset();
    CHECK(s.open() == Status::kInvalidArgument);
    CHECK(read_error(s).find("holds a federation of model 'tensors:") != std::string::npos);
  }

  TEST_CASE(
      "a model of its own whose first write failed is written from the file when the lease comes back") {
    const std::string dir = make_temp_dir();
    std::vector<float> initial(39);
    for (size_t i = 0; i < initial.size(); ++i) initial[i] = 0.02f * float(i) - 0.3f;
    const std::string file = write_model_file(dir + "/initial.safetensors", kOwnTable, initial, {});
    RoundOptions o;
    o.cohort = 2;
    o.coordinator_lease_ms = 1000;
    o.follow_interval_ms = 100;
    const std::string name("a");
    o.aggregator_id = name;
    Server s(dir, o);
    s.options.model_spec.clear();
    s.options.initial_model = file;
    s.in_memory = true;
    // The lease cannot be read at start (it follows), and its first start as coordinator fails at
    // the model's record: it gives the lease up, and takes it again two lease periods later.
    s.failing_at_open = {{"acquire_lease", 1}, {"record_model", 1}};
    REQUIRE(s.open() == Status::kOk);
    CHECK_FALSE(s.rounds->coordinating());
    for (int i = 0; i < 50 && !s.rounds->coordinating(); ++i) {
      s.now += 100;
      s.rounds->tick(s.now);
    }
    REQUIRE(s.rounds->coordinating());
    CHECK(s.faults->calls["release_lease"] == 1);
    CHECK(s.rounds->model_version() == 1);
    CHECK(s.model() == initial);  // the file's values, not a seeded model
    fs::remove_all(dir);
  }

  TEST_CASE("bad initial model files are refused with their own error and change nothing") {
    std::vector<float> initial(39, 0.5f);
    struct Bad {
      const char* what;
      std::function<void(std::vector<uint8_t>*)> damage;
      Status want;
      const char* message;
    };
    const Bad bad[] = {
        {"truncated", [](std::vector<uint8_t>* f) { f->resize(f->size() - 3); }, Status::kCorruptPayload,
         "run past"},
        {"NaN weight",
         [](std::vector<uint8_t>* f) {
           const uint32_t nan = 0x7FC00000u;
           std::memcpy(f->data() + f->size() - 4, &nan, 4);
         },
         Status::kNonFiniteInput, "\"norm.scale\" element 0 is not finite"},
        {"header over its cap",
         [](std::vector<uint8_t>* f) { (*f)[0] = 0, (*f)[1] = 0, (*f)[2] = 0x20, (*f)[3] = 0; },
         Status::kCorruptPayload, "exceeds the limit"},
        {"unknown dtype",
         [](std::vector<uint8_t>* f) {
           std::string text(f->begin(), f->end());
           const size_t at = text.find("\"F32\"");
           std::memcpy(f->data() + at, "\"U32\"", 5);
         },
         Status::kCorruptPayload, "F32, F16 or BF16"},
    };
    for (const Bad& b : bad) {
      CAPTURE(b.what);
      const std::string dir = make_temp_dir();
      const std::string path = write_model_file(dir + "/initial.safetensors", kOwnTable, initial, {});
      std::vector<uint8_t> bytes;
      std::string error;
      REQUIRE(read_file(path, 1u << 20, &bytes, &error) == Status::kOk);
      b.damage(&bytes);
      std::ofstream(path, std::ios::binary | std::ios::trunc)
          .write(reinterpret_cast<const char*>(bytes.data()), long(bytes.size()));
      Server s(dir);
      s.options.model_spec.clear();
      s.options.initial_model = path;
      CHECK(s.open() == b.want);
      const std::string why = read_error(s);
      CAPTURE(why);
      CHECK(why.find(b.message) != std::string::npos);
      CHECK(why.find(path) != std::string::npos);
      CHECK(!std::filesystem::exists(dir + "/model-v000001.safetensors"));
      // Nothing was recorded: the right file starts the federation.
      write_model_file(path, kOwnTable, initial, {});
      s.rounds.reset();
      s.storage.reset();
      REQUIRE(s.open() == Status::kOk);
      CHECK(s.rounds->model_version() == 1);
    }
  }

  TEST_CASE("a built-in model from its file, and evaluation refused at start where it cannot run") {
    const std::string dir = make_temp_dir();
    ModelSpec spec;
    REQUIRE(parse_model_spec(kSpec, &spec) == Status::kOk);
    std::vector<float> values(parameter_count(spec));
    init_parameters(spec, 99, {values.data(), values.size()});
    std::vector<uint8_t> file;
    std::string error;
    REQUIRE(encode_safetensors(spec, {values.data(), values.size()}, {}, &file, &error) == Status::kOk);
    const std::string path = dir + "/cnn.safetensors";
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(file.data()), long(file.size()));
    {
      Server s(dir);
      s.options.model_spec.clear();
      s.options.initial_model = path;
      REQUIRE(s.open() == Status::kOk);
      CHECK(s.model() == values);
      const wire::TaskOffer offer = s.offer("a");
      CHECK(offer.model_spec == kSpec);  // the file named its built-in model
      CHECK(offer.initial_model_seed == 0);
    }
    // The same file under --model for another built-in model is refused by name and shape.
    {
      Server s(make_temp_dir());
      s.options.model_spec = "mlp:784-5-10";
      s.options.initial_model = path;
      CHECK(s.open() == Status::kDimensionMismatch);
      CHECK(read_error(s).find("is not a 'mlp:784-5-10' model") != std::string::npos);
    }
    // --eval of a model the built-in evaluation cannot run: said at start, not skipped later.
    {
      Server s(make_temp_dir());
      s.options.model_spec = "mlp:10-5-2";
      s.options.eval_data_dir = "/nonexistent";
      CHECK(s.open() == Status::kInvalidSpec);
      CHECK(read_error(s).find("10 inputs and has 2 classes") != std::string::npos);
    }
    {
      Server s(make_temp_dir());
      s.options.model_spec.clear();
      s.options.initial_model =
          write_model_file(s.dir + "/own.safetensors", kOwnTable, std::vector<float>(39, 1.0f), {});
      s.options.eval_data_dir = "/nonexistent";
      CHECK(s.open() == Status::kInvalidSpec);
      CHECK(read_error(s).find("not a built-in model") != std::string::npos);
      // A deployment's own evaluator that refuses the model stops the start too.
      s.options.eval_data_dir.clear();
      std::vector<TensorDesc> other = kOwnTable;
      other[1].name = "head.b";
      s.options.initial_model =
          write_model_file(s.dir + "/other.safetensors", other, std::vector<float>(39, 1.0f), {});
      s.options.evaluator = std::make_shared<MeanEvaluator>();
      s.rounds.reset();
      s.storage.reset();
      CHECK(s.open() == Status::kInvalidSpec);
    }
  }
}

// --- secure aggregation rounds (secure_round.h), in process -------------------------------------

namespace {

// One device of a secure round: its SecAgg+ state machine and the update it contributes.
struct SecureDevice {
  std::string id;
  wire::TaskOffer offer;
  secagg::SecAggClient client;
  secagg::AdvertisedKeys keys;
  std::vector<float> update;
  std::vector<uint8_t> encoding;  // `update` encoded with the round's codec
  std::vector<int32_t> codes;     // its integer codes as masked
  // When set, share() and mask() return nothing where the protocol itself refuses the step (too
  // few neighbours' keys or shares: kTooFewSurvivors), and the device drops out, as edgefl::Client
  // does; otherwise that is a test failure.
  bool may_drop = false;
  Status dropped_with = Status::kOk;

  void start(const wire::TaskOffer& o) {
    offer = o;
    REQUIRE(o.secure_aggregation.has_value());
    const secagg::RoundParameters p = secagg::round_parameters_of(o);
    REQUIRE(secagg::crypto_init() == Status::kOk);
    REQUIRE(client.start(p, o.secure_aggregation->device_index, &keys) == Status::kOk);
  }
  wire::SecAggAdvertise advertise() const {
    wire::SecAggAdvertise m;
    m.round_id = offer.round_id;
    m.round_nonce = offer.round_nonce;
    m.keys = secagg::to_wire(keys);
    return m;
  }
  wire::SecAggPoll poll(wire::SecAggPhase phase) const {
    wire::SecAggPoll m;
    m.round_id = offer.round_id;
    m.round_nonce = offer.round_nonce;
    m.phase = phase;
    return m;
  }
  wire::SecAggShares share(const wire::SecAggKeys& k) {
    const std::vector<secagg::AdvertisedKeys> neighbours = secagg::from_wire_all(k.keys);
    std::vector<secagg::SealedShares> sealed;
    secagg::Key32 commitment;
    const Status st = client.share({neighbours.data(), neighbours.size()}, &sealed, &commitment);
    if (may_drop && st == Status::kTooFewSurvivors) {
      dropped_with = st;
      return {};
    }
    REQUIRE(st == Status::kOk);
    wire::SecAggShares m;
    m.round_id = offer.round_id;
    m.round_nonce = offer.round_nonce;
    m.seed_commitment = commitment;
    m.shares = secagg::to_wire_all(sealed);
    return m;
  }
  // The masked vector of `update`'s integer codes, packed.
  std::vector<uint8_t> mask(const wire::SecAggInbox& inbox) {
    const wire::SecAggConfig& c = *offer.secure_aggregation;
    CodecSpec spec;
    REQUIRE(parse_codec_spec(offer.uplink_codec.c_str(), &spec) == Status::kOk);
    std::vector<uint8_t> ws(workspace_size(spec, update.size()));
    encoding.assign(encoded_bound(spec, update.size()), 0);
    size_t written = 0;
    REQUIRE(encode(spec, {update.data(), update.size()}, offer.codec_seed, {ws.data(), ws.size()},
                   {encoding.data(), encoding.size()}, &written) == Status::kOk);
    encoding.resize(written);
    codes.assign(c.words, 0);
    REQUIRE(read_integer_codes({encoding.data(), encoding.size()}, {codes.data(), codes.size()}) ==
            Status::kOk);
    const int32_t bound = int32_t(c.max_code);  // Count Sketch cells are clipped, as edgefl::Client does
    for (int32_t& code : codes) code = std::clamp(code, -bound, bound);
    std::vector<uint32_t> words(c.words), masked(c.words);
    for (size_t i = 0; i < codes.size(); ++i) words[i] = secagg::to_word(codes[i], c.modulus_bits);
    const std::vector<secagg::SealedShares> received = secagg::from_wire_all(inbox.shares);
    const Status st = client.mask({received.data(), received.size()}, {words.data(), words.size()},
                                  {masked.data(), masked.size()});
    if (may_drop && st == Status::kTooFewSurvivors) {
      dropped_with = st;
      return {};
    }
    REQUIRE(st == Status::kOk);
    std::vector<uint8_t> packed(secagg::packed_words_bytes(c.words, c.modulus_bits));
    REQUIRE(secagg::pack_words({masked.data(), masked.size()}, c.modulus_bits,
                               {packed.data(), packed.size()}) == Status::kOk);
    return packed;
  }
  wire::SecAggUnmaskResponse unmask(const wire::SecAggUnmaskRequest& request) {
    secagg::UnmaskRequest q{request.survivors, request.dropped};
    std::vector<secagg::RevealedShare> revealed;
    REQUIRE(client.unmask(q, &revealed) == Status::kOk);
    wire::SecAggUnmaskResponse m;
    m.round_id = offer.round_id;
    m.round_nonce = offer.round_nonce;
    m.shares = secagg::to_wire_all(revealed);
    return m;
  }
};

template <typename T>
T expect(const wire::Message& m) {
  const T* got = std::get_if<T>(&m);
  const wire::Error* e = std::get_if<wire::Error>(&m);
  REQUIRE_MESSAGE(got != nullptr, "got " << wire::message_type_name(wire::message_type(m))
                                         << (e != nullptr ? ": " + e->message : std::string()));
  return *got;
}

// The largest distance between `after` and `before` moved by the mean of the contributors'
// updates as the server computes it: their summed integer codes, decoded, over their count.
// The contributors' summed codes as the server decodes them: the sum of their decoded updates.
std::vector<float> decoded_secure_sum(const std::vector<const SecureDevice*>& contributors, size_t n) {
  REQUIRE(!contributors.empty());
  std::vector<int32_t> sum(contributors[0]->codes.size(), 0);
  for (const SecureDevice* d : contributors) {
    for (size_t j = 0; j < sum.size(); ++j) sum[j] += d->codes[j];
  }
  EncodedInfo like;
  const std::vector<uint8_t>& first = contributors[0]->encoding;
  REQUIRE(read_header({first.data(), first.size()}, &like) == Status::kOk);
  std::vector<uint8_t> summed(kEncodedHeaderBytes + 4 * sum.size());
  size_t size = 0;
  REQUIRE(write_integer_codes(like, {sum.data(), sum.size()}, uint32_t(contributors.size()),
                              {summed.data(), summed.size()}, &size) == Status::kOk);
  std::vector<float> decoded(n);
  std::vector<uint8_t> workspace(decode_workspace_size(like));
  REQUIRE(decode({summed.data(), size}, {decoded.data(), n}, {workspace.data(), workspace.size()}) ==
          Status::kOk);
  return decoded;
}

double off_secure_mean(const std::vector<float>& before, const std::vector<const SecureDevice*>& contributors,
                       const std::vector<float>& after) {
  const size_t n = before.size();
  const std::vector<float> mean = decoded_secure_sum(contributors, n);
  const float scale = 1.0f / float(contributors.size());
  double worst = 0;
  for (size_t j = 0; j < n; ++j)
    worst = std::max(worst, std::fabs(double(after[j]) - (double(before[j]) + double(mean[j] * scale))));
  return worst;
}

void expect_error(const wire::Message& m, wire::ErrorCode code, const std::string& text) {
  const wire::Error* e = std::get_if<wire::Error>(&m);
  REQUIRE_MESSAGE(e != nullptr, "got " << wire::message_type_name(wire::message_type(m)));
  CHECK(e->code == code);
  CHECK_MESSAGE(e->message.find(text) != std::string::npos, e->message);
}

// Every device in `d` advertises its keys, shares them, masks its update and uploads it (acked):
// the honest path of a secure round up to its unmask phase. Returns the masked vectors.
std::vector<std::vector<uint8_t>> mask_all(Server& s, std::vector<SecureDevice>& d) {
  for (SecureDevice& x : d)
    expect<wire::SecAggStatus>(s.rounds->secagg_advertise(x.id, x.advertise(), s.now).message);
  for (SecureDevice& x : d) {
    const wire::SecAggKeys keys = expect<wire::SecAggKeys>(
        s.rounds->secagg_poll(x.id, x.poll(wire::SecAggPhase::kKeys), s.now).message);
    expect<wire::SecAggStatus>(s.rounds->secagg_shares(x.id, x.share(keys), s.now).message);
  }
  std::vector<std::vector<uint8_t>> masked;
  for (SecureDevice& x : d) {
    const wire::SecAggInbox inbox = expect<wire::SecAggInbox>(
        s.rounds->secagg_poll(x.id, x.poll(wire::SecAggPhase::kShares), s.now).message);
    masked.push_back(x.mask(inbox));
    CHECK(expect<wire::Ack>(s.upload_bytes(x.offer, x.id, masked.back(), 1)).disposition ==
          wire::UpdateDisposition::kAccepted);
  }
  return masked;
}

// One secure round walked at random from `seed` (the random-walk test in server.rounds.secure).
// Honest devices take their next step in a random order; between steps come drop-outs, hostile
// messages (an intruder, a wrong nonce, forged indices, replayed keys, misaddressed shares, wrong
// answers, short masked vectors, second different messages), failing appends to the round's log
// and ledger rows, restarts (some whose first replay fails), and time passing. The model of each
// device is what the server's replies told it, as a device knows it.
struct SecureWalk {
  struct Walker {
    SecureDevice dev;
    enum class Next { kAdvertise, kShare, kMask, kUnmask, kDone, kGone } next = Next::kAdvertise;
    std::optional<wire::SecAggShares> shares;  // computed once, sent again after a failure
    std::vector<uint8_t> masked;               // likewise
    std::optional<wire::SecAggUnmaskResponse> answer;
    bool advertised = false, shared = false;  // the server took its keys, its shares
    bool acked = false;                       // its masked vector was acknowledged: it is in the sum
    uint32_t refused[3] = {};  // hostile refusals charged to it in this server life (keys, shares, answer)
  };
  // What a refusal must leave unchanged, and what a restart must rebuild.
  struct State {
    int phase = -1;
    size_t assigned = 0, advertised = 0, shared = 0, masked = 0, answered = 0;
    uint64_t version = 0;
    bool operator==(const State& o) const {
      return phase == o.phase && assigned == o.assigned && advertised == o.advertised && shared == o.shared &&
             masked == o.masked && answered == o.answered && version == o.version;
    }
    friend std::ostream& operator<<(std::ostream& out, const State& st) {
      return out << "{phase " << st.phase << ", assigned " << st.assigned << ", advertised " << st.advertised
                 << ", shared " << st.shared << ", masked " << st.masked << ", answered " << st.answered
                 << ", model version " << st.version << "}";
    }
  };

  uint64_t rng;
  Server s;
  std::vector<Walker> w;
  wire::TaskOffer offer;  // the round's (device 0's)
  std::vector<float> before;
  uint32_t dropped = 0;
  bool committed = false;
  std::string trace;  // the walk's steps, shown when a check fails

  explicit SecureWalk(uint32_t seed)
      : rng(seed * 0x9E3779B97F4A7C15ull), s(make_temp_dir(), options(seed)), w(s.options.cohort) {
    s.in_memory = seed % 2 == 0;
  }
  static RoundOptions options(uint32_t seed) {
    RoundOptions o;
    o.cohort = 4 + seed % 4;
    o.over_selection = 1.0;
    o.min_quorum = 2;
    o.deadline_ms = 4000;  // the keys phase; then 3 phases of phase_ms
    o.uplink_codec = seed % 3 == 0 ? "cs:cells=0.5,rows=3,step=0.0002,top=0.2" : "q8:shared=0.0002,det";
    o.secure_aggregation.enabled = true;
    o.secure_aggregation.cell_bound = 40;
    o.secure_aggregation.phase_ms = 2000;
    return o;
  }
  uint64_t next() { return splitmix64_next(&rng); }
  uint32_t below(uint32_t n) { return uint32_t(next() % n); }

  State state() const {
    State st;
    st.version = s.rounds->model_version();
    if (const SecureRound* r = s.rounds->secure_round()) {
      st.phase = int(r->phase());
      st.assigned = r->assigned();
      st.advertised = r->advertised();
      st.shared = r->shared();
      st.masked = r->masked();
      st.answered = r->answered();
    }
    return st;
  }
  RoundState round_state() {
    std::optional<RoundRecord> r;
    std::string error;
    REQUIRE_MESSAGE(s.storage->get_round(offer.round_id, &r, &error) == Status::kOk, error);
    REQUIRE(r.has_value());
    return r->state;
  }
  bool open() { return round_state() == RoundState::kOpen; }
  SecurePhase phase() const { return s.rounds->secure_round()->phase(); }
  // Whether the one injected failure of `call` was used up by the last step.
  bool fired(const char* call) const {
    return s.faults->failing.count(call) != 0 && s.faults->failing.at(call) == 0;
  }
  void clear_faults() {
    s.faults->failing.clear();
    s.faults->record_update_in_doubt = 0;
  }
  // Ends the phases due now (with any armed fault held back), so that the tick a message runs
  // after itself finds nothing to end: what changes then is the message's doing.
  void settle() {
    const std::map<std::string, int> armed = s.faults->failing;
    const int in_doubt = s.faults->record_update_in_doubt;
    clear_faults();
    s.rounds->tick(s.now);
    s.faults->failing = armed;
    s.faults->record_update_in_doubt = in_doubt;
  }

  void run() {
    INFO("walk trace:" << trace);
    REQUIRE(s.open() == Status::kOk);
    before = s.model();
    const size_t n = before.size();
    const uint32_t cohort = s.options.cohort;
    for (uint32_t i = 0; i < cohort; ++i) {
      w[i].dev.id = "dev-" + std::to_string(i);
      w[i].dev.may_drop = true;
      w[i].dev.start(s.offer(w[i].dev.id, 0, wire::kCapabilitySecureAggregation));
      w[i].dev.update.resize(n);
      for (size_t j = 0; j < n; ++j)
        w[i].dev.update[j] = 0.003f * float(std::sin(0.07 * double(j) + 1.3 * double(i) + double(rng % 7)));
    }
    offer = w[0].dev.offer;
    const uint32_t max_drops = std::max(1u, cohort / 3);
    for (int step = 0; step < 400 && open(); ++step) {
      const uint32_t roll = below(100);
      if (roll < 55) {
        honest(below(cohort));
      } else if (roll < 72) {
        hostile();
      } else if (roll < 80) {
        const uint32_t pick = below(4);
        if (pick == 0) {
          s.faults->record_update_in_doubt = 1;  // a ledger row that is written, then reported failed
        } else {
          s.faults->failing[pick == 1 ? "record_update" : "append_round_event"] = 1;
        }
        trace += "\n  fault armed";
      } else if (roll < 84) {
        restart();
      } else if (roll < 86) {
        Walker& d = w[below(cohort)];
        if (dropped < max_drops && d.next != Walker::Next::kDone && d.next != Walker::Next::kGone) {
          d.next = Walker::Next::kGone;
          ++dropped;
          trace += "\n  " + d.dev.id + " drops out";
        }
      } else {
        s.now += 20 + below(300);
        s.rounds->tick(s.now);
        trace += "\n  now +" + std::to_string(s.now - kT0) + " ms: phase " + std::to_string(state().phase);
      }
    }
    // Then no more faults: the devices left keep acting while time runs out; the round must end.
    clear_faults();
    for (int pass = 0; pass < 40 && open(); ++pass) {
      for (uint32_t i = 0; i < cohort; ++i) honest(i);
      s.now += 400;
      s.rounds->tick(s.now);
    }
    REQUIRE_MESSAGE(!open(), "the round is still open after every deadline passed");
    committed = round_state() == RoundState::kCommitted;
    std::vector<const SecureDevice*> contributors;
    bool all_finished = true;
    for (const Walker& d : w) {
      if (d.acked) contributors.push_back(&d.dev);
      all_finished = all_finished && d.next == Walker::Next::kDone;
    }
    if (all_finished) CHECK_MESSAGE(committed, "every device did its part, yet the round was abandoned");
    if (committed) {
      REQUIRE(contributors.size() >= 2);
      CHECK(off_secure_mean(before, contributors, s.model()) < 1e-6);
    }
    // Every device asks what became of its masked vector: counted exactly when the round
    // committed with it in the sum; the same answers after a restart.
    for (int life = 0; life < 2; ++life) {
      if (life == 1) s.reopen();
      for (const Walker& d : w) {
        CAPTURE(d.dev.id);
        CAPTURE(life);
        const wire::SecAggStatus outcome = expect<wire::SecAggStatus>(
            s.rounds->secagg_poll(d.dev.id, d.dev.poll(wire::SecAggPhase::kUnmask), s.now).message);
        CHECK(outcome.phase == wire::SecAggPhase::kDone);
        CHECK(outcome.outcome ==
              (committed && d.acked ? wire::SecAggOutcome::kCounted : wire::SecAggOutcome::kNotCounted));
      }
    }
  }

  // The next step of device i, as edgefl::Client would take it.
  void honest(uint32_t i) {
    Walker& d = w[i];
    using Next = Walker::Next;
    if (d.next == Next::kDone || d.next == Next::kGone || !open()) return;
    settle();
    if (!open()) return;
    State was = state();  // before the step's message (a poll before it may end a phase)
    const int in_doubt = s.faults->record_update_in_doubt;
    wire::Message m;
    const char* what = "";
    int step_phase = 0;  // the SecurePhase the step belongs to
    // The device's own protocol refused the step: it drops out, as edgefl::Client does.
    const auto refused_by_protocol = [&] {
      if (d.dev.dropped_with == Status::kOk) return false;
      trace += "\n  " + d.dev.id + " cannot " + what + ": " + status_name(d.dev.dropped_with);
      d.next = Next::kGone;
      return true;
    };
    switch (d.next) {
      case Next::kAdvertise:
        what = "advertise";
        was = state();
        m = s.rounds->secagg_advertise(d.dev.id, d.dev.advertise(), s.now).message;
        if (std::holds_alternative<wire::SecAggStatus>(m)) {
          d.advertised = true;
          d.next = Next::kShare;
        }
        break;
      case Next::kShare:
        what = "share";
        step_phase = int(SecurePhase::kShares);
        if (!d.shares) {
          m = s.rounds->secagg_poll(d.dev.id, d.dev.poll(wire::SecAggPhase::kKeys), s.now).message;
          if (const auto* keys = std::get_if<wire::SecAggKeys>(&m)) {
            d.shares = d.dev.share(*keys);
            if (refused_by_protocol()) return;  // too few neighbours advertised
          } else {
            break;
          }
        }
        was = state();
        m = s.rounds->secagg_shares(d.dev.id, *d.shares, s.now).message;
        if (std::holds_alternative<wire::SecAggStatus>(m)) {
          d.shared = true;
          d.next = Next::kMask;
        }
        break;
      case Next::kMask:
        what = "mask";
        step_phase = int(SecurePhase::kMasked);
        if (d.masked.empty()) {
          m = s.rounds->secagg_poll(d.dev.id, d.dev.poll(wire::SecAggPhase::kShares), s.now).message;
          if (const auto* inbox = std::get_if<wire::SecAggInbox>(&m)) {
            d.masked = d.dev.mask(*inbox);
            if (refused_by_protocol()) return;  // too few neighbours shared
          } else {
            break;
          }
        }
        was = state();
        m = s.upload_bytes(d.dev.offer, d.dev.id, d.masked, 1);
        if (const auto* a = std::get_if<wire::Ack>(&m)) {
          REQUIRE_MESSAGE((a->disposition == wire::UpdateDisposition::kAccepted ||
                           a->disposition == wire::UpdateDisposition::kDuplicate),
                          d.dev.id << ": its masked vector was not acknowledged");
          d.acked = true;
          d.next = Next::kUnmask;
        }
        break;
      case Next::kUnmask:
        what = "unmask";
        step_phase = int(SecurePhase::kUnmask);
        if (!d.answer) {
          m = s.rounds->secagg_poll(d.dev.id, d.dev.poll(wire::SecAggPhase::kUnmask), s.now).message;
          if (const auto* request = std::get_if<wire::SecAggUnmaskRequest>(&m)) {
            d.answer = d.dev.unmask(*request);
          } else {
            if (const auto* st = std::get_if<wire::SecAggStatus>(&m);
                st && st->phase == wire::SecAggPhase::kDone)
              d.next = Next::kDone;
            break;
          }
        }
        was = state();
        m = s.rounds->secagg_unmask(d.dev.id, *d.answer, s.now).message;
        if (std::holds_alternative<wire::SecAggStatus>(m)) d.next = Next::kDone;
        break;
      default: return;
    }
    trace += "\n  " + d.dev.id + " " + what + ": " + wire::message_type_name(wire::message_type(m));
    if (const auto* e = std::get_if<wire::Error>(&m)) {
      trace += " " + std::to_string(int(e->code)) + " " + e->message;
      REQUIRE_MESSAGE(!e->message.empty(), "an error without words");
      REQUIRE_MESSAGE(e->code != wire::ErrorCode::kRateLimited,
                      d.dev.id << " was rate-limited for its own message");
      const bool fault = fired("append_round_event") || fired("record_update") ||
                         s.faults->record_update_in_doubt < in_doubt;
      if (e->code == wire::ErrorCode::kInternal) {
        REQUIRE_MESSAGE(fault, "kInternal without a storage failure: " << e->message);
        CHECK(state() == was);  // nothing changed; the device tries again
        clear_faults();
        return;
      }
      // Otherwise the device's phase is over (or the round failed): it has no more part in it.
      const bool over =
          e->code == wire::ErrorCode::kUnknownRound || e->code == wire::ErrorCode::kUnexpectedMessage;
      REQUIRE_MESSAGE(over, d.dev.id << ": " << e->message);
      CHECK_MESSAGE((!open() || state().phase > step_phase),
                    d.dev.id << " refused while its step's phase is still on: " << e->message);
      d.next = d.acked ? Next::kDone : Next::kGone;
    }
    if (fired("append_round_event") || fired("record_update") || s.faults->record_update_in_doubt < in_doubt)
      clear_faults();
  }

  // One hostile message; it must be refused with its specific error and change nothing.
  void hostile() {
    settle();
    if (!open()) return;
    using Next = Walker::Next;
    Walker& d = w[below(uint32_t(w.size()))];
    Walker& other = w[below(uint32_t(w.size()))];
    const uint32_t index = d.dev.offer.secure_aggregation->device_index;
    const State was = state();
    wire::Message m;
    std::vector<wire::ErrorCode> expected;
    int slot = -1;  // the refusal counter it is charged to, if any
    std::string what;
    switch (below(8)) {
      case 0: {  // an intruder: no index in the round
        what = "an intruder's keys";
        m = s.rounds->secagg_advertise("mallory", d.dev.advertise(), s.now).message;
        expected = {wire::ErrorCode::kUnauthorized};
        break;
      }
      case 1: {  // a nonce from another round
        what = "a wrong nonce";
        wire::SecAggPoll p = d.dev.poll(wire::SecAggPhase::kKeys);
        p.round_nonce[0] ^= 1;
        m = s.rounds->secagg_poll(d.dev.id, p, s.now).message;
        expected = {wire::ErrorCode::kNonceMismatch};
        break;
      }
      case 2: {  // keys that name another index, or a second, different set of keys
        if (d.refused[0] >= SecureRound::kMaxAttempts - 1) return;
        wire::SecAggAdvertise a = d.dev.advertise();
        if (!d.advertised) {
          what = "keys naming another index";
          a.keys.device = (index + 1) % uint32_t(w.size());
          expected = {wire::ErrorCode::kBadMessage};
        } else {
          what = "a second set of keys";
          a.keys.mask_public[5] ^= 0x20;
          expected = {wire::ErrorCode::kUnexpectedMessage};
        }
        m = s.rounds->secagg_advertise(d.dev.id, a, s.now).message;
        slot = 0;
        break;
      }
      case 3: {  // another device's keys, replayed as its own
        if (d.refused[0] >= SecureRound::kMaxAttempts - 1 || &d == &other || d.advertised ||
            !other.advertised)
          return;
        what = "replayed keys of " + other.dev.id;
        wire::SecAggAdvertise a = other.dev.advertise();
        a.keys.device = index;
        a.round_nonce = d.dev.offer.round_nonce;
        m = s.rounds->secagg_advertise(d.dev.id, a, s.now).message;
        expected = {phase() == SecurePhase::kKeys ? wire::ErrorCode::kBadMessage
                                                  : wire::ErrorCode::kUnknownRound};
        slot = 0;
        break;
      }
      case 4: {  // shares in another's name, or misaddressed, or a second, different set
        if (!d.shares || d.shares->shares.size() < 2 || d.refused[1] >= SecureRound::kMaxAttempts - 1) return;
        wire::SecAggShares sh = *d.shares;
        if (below(2) == 0) {
          what = "shares sent in another's name";
          sh.shares[0].from = (index + 1) % uint32_t(w.size());
          expected = {wire::ErrorCode::kBadMessage};
        } else {
          what = "misaddressed shares";
          sh.shares[0].to = sh.shares[1].to;
          sh.shares.pop_back();
          if (d.shared)
            expected = {wire::ErrorCode::kUnexpectedMessage};  // sent already
          else
            expected = {phase() == SecurePhase::kShares ? wire::ErrorCode::kBadMessage
                                                        : wire::ErrorCode::kUnexpectedMessage};
        }
        m = s.rounds->secagg_shares(d.dev.id, sh, s.now).message;
        slot = 1;
        break;
      }
      case 5: {  // answers of the wrong kind
        if (!d.answer || d.answer->shares.empty() || d.next != Next::kUnmask ||
            d.refused[2] >= SecureRound::kMaxAttempts - 1)
          return;
        what = "answers of the wrong kind";
        wire::SecAggUnmaskResponse a = *d.answer;
        for (wire::SecAggRevealedShare& r : a.shares) r.kind ^= 1;
        m = s.rounds->secagg_unmask(d.dev.id, a, s.now).message;
        expected = {phase() == SecurePhase::kUnmask ? wire::ErrorCode::kBadMessage
                                                    : wire::ErrorCode::kUnexpectedMessage};
        slot = 2;
        break;
      }
      case 6: {  // a masked vector a byte short
        if (d.masked.empty() || d.acked) return;
        what = "a short masked vector";
        // Its vector may be in the ledger already (a write in doubt it has not asked about yet):
        // then that one is counted, and this other vector is refused as already counted.
        std::optional<UpdateRecord> held;
        std::string error;
        REQUIRE(s.storage->find_update(d.dev.offer.round_id, d.dev.id, &held, &error) == Status::kOk);
        const std::vector<uint8_t> cut(d.masked.begin(), d.masked.end() - 1);
        m = s.upload_bytes(d.dev.offer, d.dev.id, cut, 1);
        if (const auto* a = std::get_if<wire::Ack>(&m)) {
          if (held) {
            CHECK(a->disposition == wire::UpdateDisposition::kRejected);
            CHECK(a->reason == wire::RejectReason::kAlreadyCounted);
          } else {
            CHECK(a->disposition == wire::UpdateDisposition::kRejected);
            CHECK(a->reason == wire::RejectReason::kInvalidEncoding);
            CHECK(phase() == SecurePhase::kMasked);
          }
        } else {
          expected = {wire::ErrorCode::kUnexpectedMessage};  // not the masked phase
        }
        break;
      }
      default: {  // an answer before the unmask phase, or from a device that masked nothing
        if (!d.advertised || d.acked || d.refused[2] >= SecureRound::kMaxAttempts - 1) return;
        what = "an answer out of turn";
        wire::SecAggUnmaskResponse a;
        a.round_id = d.dev.offer.round_id;
        a.round_nonce = d.dev.offer.round_nonce;
        m = s.rounds->secagg_unmask(d.dev.id, a, s.now).message;
        expected = {phase() == SecurePhase::kUnmask ? wire::ErrorCode::kBadMessage
                                                    : wire::ErrorCode::kUnexpectedMessage};
        slot = 2;
        break;
      }
    }
    trace += "\n  hostile, " + d.dev.id + ": " + what + ": " + wire::message_type_name(wire::message_type(m));
    const bool fault = fired("append_round_event") || fired("record_update");
    if (fault) clear_faults();
    if (const auto* e = std::get_if<wire::Error>(&m)) {
      trace += " " + std::to_string(int(e->code)) + " " + e->message;
      CHECK_MESSAGE(!e->message.empty(), what);
      // A message the log had to take (to be replayed, refused again) may meet the failing log.
      const bool as_expected = std::find(expected.begin(), expected.end(), e->code) != expected.end() ||
                               (fault && e->code == wire::ErrorCode::kInternal);
      CHECK_MESSAGE(as_expected, what << " answered " << int(e->code) << ": " << e->message);
      if (slot >= 0 && e->code != wire::ErrorCode::kInternal) ++d.refused[slot];
    } else {
      CHECK_MESSAGE(expected.empty(), what << " was not refused");
    }
    CHECK_MESSAGE(state() == was, what << " changed the round's state");
  }

  // kill -9 and start again: the same state, rebuilt from the log and the ledger. One restart in
  // three first meets a log that cannot be read: that start fails, and changes nothing.
  void restart() {
    clear_faults();
    s.rounds->tick(s.now);
    const State was = state();
    const bool failing_read = below(3) == 0;
    s.rounds.reset();
    s.storage.reset();
    if (failing_read) {
      s.failing_at_open = {{"for_each_round_event", 1}};
      const Status first = s.open();
      if (s.faults->failing["for_each_round_event"] == 0) CHECK(first != Status::kOk);
      s.rounds.reset();
      s.storage.reset();
      s.failing_at_open.clear();
    }
    REQUIRE(s.open() == Status::kOk);
    s.rounds->tick(s.now);
    for (Walker& d : w) std::fill(std::begin(d.refused), std::end(d.refused), 0);
    trace += std::string("\n  restart") + (failing_read ? " (the first replay fails)" : "");
    CHECK_MESSAGE(state() == was, "the restart rebuilt another state");
  }
};

}  // namespace

TEST_SUITE("server.rounds.secure") {
  TEST_CASE(
      "a secure round against hostile devices and a failing log: specific refusals, nothing changed by "
      "them, a restart in every phase, and the exact mean of the survivors") {
    // Shared-scale codes on SQLite, Count Sketch cells (some clipped) in memory.
    for (const bool in_memory : {false, true}) {
      CAPTURE(in_memory);
      RoundOptions o;
      o.cohort = 4;
      o.over_selection = 1.0;
      o.min_quorum = 3;
      o.deadline_ms = 60000;
      o.uplink_codec = in_memory ? "cs:cells=0.5,rows=3,step=0.0002,top=0.2" : "q8:shared=0.0002,det";
      o.secure_aggregation.cell_bound = 40;
      o.secure_aggregation.enabled = true;
      o.secure_aggregation.phase_ms = 1000;
      Server s(make_temp_dir(), o);
      s.in_memory = in_memory;
      REQUIRE(s.open() == Status::kOk);
      const std::vector<float> v1 = s.model();
      const size_t n = v1.size();
      const uint32_t secure = wire::kCapabilitySecureAggregation;

      // An SDK without the capability is refused; four devices get indices, a fifth waits.
      wire::Hello plain;
      plain.sdk_version = "old";
      expect_error(s.rounds->hello("old", plain, s.now).message, wire::ErrorCode::kUnauthorized,
                   "secure aggregation");
      std::vector<SecureDevice> d(4);
      for (size_t i = 0; i < 4; ++i) {
        d[i].id = "dev-" + std::to_string(i);
        d[i].start(s.offer(d[i].id, 0, secure));
        d[i].update.resize(n);
        for (size_t j = 0; j < n; ++j) d[i].update[j] = 0.004f * float(std::sin(0.1 * double(j) + double(i)));
      }
      wire::Hello late;
      late.sdk_version = "test";
      late.capability_flags = secure;
      CHECK(expect<wire::RetryLater>(s.rounds->hello("dev-late", late, s.now).message).reason ==
            wire::RetryReason::kRoundFull);
      const SecureRound* round = s.rounds->secure_round();
      REQUIRE(round != nullptr);
      CHECK(round->assigned() == 4);

      // Keys: a forged index, another device's keys, a failing log.
      wire::SecAggAdvertise forged = d[0].advertise();
      forged.keys.device = d[1].keys.device;
      expect_error(s.rounds->secagg_advertise(d[0].id, forged, s.now).message, wire::ErrorCode::kBadMessage,
                   "this device's is");
      s.faults->failing["append_round_event"] = 1;
      expect_error(s.rounds->secagg_advertise(d[0].id, d[0].advertise(), s.now).message,
                   wire::ErrorCode::kInternal, "not recorded");
      CHECK(round->advertised() == 0);  // nothing changed
      expect<wire::SecAggStatus>(s.rounds->secagg_advertise(d[0].id, d[0].advertise(), s.now).message);
      wire::SecAggAdvertise replayed = d[0].advertise();  // device 1 replays device 0's keys
      replayed.keys.device = d[1].keys.device;
      expect_error(s.rounds->secagg_advertise(d[1].id, replayed, s.now).message, wire::ErrorCode::kBadMessage,
                   "key_reuse");
      CHECK(round->advertised() == 1);
      expect<wire::SecAggStatus>(s.rounds->secagg_advertise(d[1].id, d[1].advertise(), s.now).message);
      wire::SecAggAdvertise other = d[1].advertise();  // a second, different advertisement
      other.keys.mask_public[0] ^= 1;
      expect_error(s.rounds->secagg_advertise(d[1].id, other, s.now).message,
                   wire::ErrorCode::kUnexpectedMessage, "already");
      // Shares before the keys phase ended are refused.
      wire::SecAggShares early;
      early.round_id = d[0].offer.round_id;
      early.round_nonce = d[0].offer.round_nonce;
      expect_error(s.rounds->secagg_shares(d[0].id, early, s.now).message,
                   wire::ErrorCode::kUnexpectedMessage, "shares phase");
      s.reopen();  // a restart in the keys phase
      round = s.rounds->secure_round();
      REQUIRE(round != nullptr);
      CHECK(round->advertised() == 2);
      CHECK(round->assigned() == 4);
      expect<wire::SecAggStatus>(s.rounds->secagg_advertise(d[2].id, d[2].advertise(), s.now).message);
      expect<wire::SecAggStatus>(s.rounds->secagg_advertise(d[3].id, d[3].advertise(), s.now).message);
      CHECK(round->phase() == SecurePhase::kShares);  // everyone advertised: the phase ended early

      // Shares.
      std::vector<wire::SecAggShares> shares;
      for (size_t i = 0; i < 4; ++i) {
        const wire::SecAggKeys keys = expect<wire::SecAggKeys>(
            s.rounds->secagg_poll(d[i].id, d[i].poll(wire::SecAggPhase::kKeys), s.now).message);
        CHECK(keys.keys.size() == 3);
        shares.push_back(d[i].share(keys));
      }
      wire::SecAggShares misaddressed = shares[0];
      misaddressed.shares[0].to = misaddressed.shares[1].to;
      misaddressed.shares.pop_back();
      expect_error(s.rounds->secagg_shares(d[0].id, misaddressed, s.now).message,
                   wire::ErrorCode::kBadMessage, "shares refused");
      for (size_t i = 0; i < 4; ++i) s.rounds->secagg_shares(d[i].id, shares[i], s.now);
      round = s.rounds->secure_round();
      CHECK(round->phase() == SecurePhase::kMasked);
      s.reopen();  // a restart in the masked phase
      round = s.rounds->secure_round();
      REQUIRE(round != nullptr);
      CHECK(round->phase() == SecurePhase::kMasked);
      CHECK(round->shared() == 4);

      // Masked vectors: a wrong size is rejected; devices 0, 1 and 2 send theirs, device 3 drops.
      std::vector<std::vector<uint8_t>> masked;
      for (size_t i = 0; i < 3; ++i) {
        const wire::SecAggInbox inbox = expect<wire::SecAggInbox>(
            s.rounds->secagg_poll(d[i].id, d[i].poll(wire::SecAggPhase::kShares), s.now).message);
        masked.push_back(d[i].mask(inbox));
      }
      std::vector<uint8_t> short_vector(masked[0].begin(), masked[0].end() - 1);
      const wire::Ack rejected = expect<wire::Ack>(s.upload_bytes(d[0].offer, d[0].id, short_vector, 1));
      CHECK(rejected.disposition == wire::UpdateDisposition::kRejected);
      CHECK(rejected.reason == wire::RejectReason::kInvalidEncoding);
      for (size_t i = 0; i < 3; ++i) {
        CHECK(expect<wire::Ack>(s.upload_bytes(d[i].offer, d[i].id, masked[i], 1)).disposition ==
              wire::UpdateDisposition::kAccepted);
      }
      CHECK(expect<wire::Ack>(s.upload_bytes(d[0].offer, d[0].id, masked[0], 1)).disposition ==
            wire::UpdateDisposition::kDuplicate);  // counted once
      s.reopen();                                  // a restart with three vectors in the ledger
      round = s.rounds->secure_round();
      REQUIRE(round != nullptr);
      CHECK(round->masked() == 3);
      CHECK(expect<wire::SecAggStatus>(
                s.rounds->secagg_poll(d[0].id, d[0].poll(wire::SecAggPhase::kUnmask), s.now).message)
                .phase == wire::SecAggPhase::kUnmask);
      s.now += 1001;  // the masked phase's deadline: device 3 is dropped
      s.rounds->tick(s.now);
      CHECK(round->phase() == SecurePhase::kUnmask);
      // Device 3, which did not mask, has nothing more to do in this round.
      CHECK(std::holds_alternative<wire::RetryLater>(s.rounds->hello(d[3].id, late, s.now).message));

      // Unmasking: a share of the wrong kind is refused; then the survivors answer.
      std::vector<wire::SecAggUnmaskResponse> answers;
      for (size_t i = 0; i < 3; ++i) {
        const wire::SecAggUnmaskRequest request = expect<wire::SecAggUnmaskRequest>(
            s.rounds->secagg_poll(d[i].id, d[i].poll(wire::SecAggPhase::kUnmask), s.now).message);
        CHECK(request.dropped == std::vector<uint32_t>{d[3].keys.device});
        answers.push_back(d[i].unmask(request));
      }
      wire::SecAggUnmaskResponse wrong = answers[0];
      for (wire::SecAggRevealedShare& r : wrong.shares) r.kind ^= 1;
      expect_error(s.rounds->secagg_unmask(d[0].id, wrong, s.now).message, wire::ErrorCode::kBadMessage,
                   "answer refused");
      s.reopen();  // a restart in the unmask phase
      // Until the round commits, a device that answered hears its vector's outcome is pending;
      // the answer that completes the round hears it counted.
      for (size_t i = 0; i < 3; ++i) {
        const wire::SecAggStatus answered =
            expect<wire::SecAggStatus>(s.rounds->secagg_unmask(d[i].id, answers[i], s.now).message);
        CHECK(answered.phase == wire::SecAggPhase::kDone);
        CHECK(answered.outcome == (i < 2 ? wire::SecAggOutcome::kPending : wire::SecAggOutcome::kCounted));
        CHECK((answered.retry_after_ms > 0) == (i < 2));
      }
      CHECK(s.rounds->model_version() == 2);       // committed
      CHECK(s.rounds->secure_round() != nullptr);  // the next round, secure too
      CHECK(s.rounds->secure_round()->assigned() == 0);

      // The closed round's outcomes, from its record and ledger: counted for the three vectors,
      // not counted for device 3 (no vector); a wrong nonce, an unknown round and a store that
      // cannot be read are refused, and change nothing.
      const auto outcome_of = [&](size_t i) {
        const wire::SecAggStatus st = expect<wire::SecAggStatus>(
            s.rounds->secagg_poll(d[i].id, d[i].poll(wire::SecAggPhase::kUnmask), s.now).message);
        CHECK(st.phase == wire::SecAggPhase::kDone);
        return st.outcome;
      };
      for (size_t i = 0; i < 3; ++i) CHECK(outcome_of(i) == wire::SecAggOutcome::kCounted);
      CHECK(outcome_of(3) == wire::SecAggOutcome::kNotCounted);
      wire::SecAggPoll forged_nonce = d[0].poll(wire::SecAggPhase::kUnmask);
      forged_nonce.round_nonce[0] ^= 1;
      expect_error(s.rounds->secagg_poll(d[0].id, forged_nonce, s.now).message,
                   wire::ErrorCode::kNonceMismatch, "nonce");
      wire::SecAggPoll unknown = d[0].poll(wire::SecAggPhase::kUnmask);
      unknown.round_id = 99;
      expect_error(s.rounds->secagg_poll(d[0].id, unknown, s.now).message, wire::ErrorCode::kUnknownRound,
                   "unknown");
      s.faults->failing["find_update"] = 1;
      expect_error(s.rounds->secagg_poll(d[0].id, d[0].poll(wire::SecAggPhase::kUnmask), s.now).message,
                   wire::ErrorCode::kInternal, "storage");
      CHECK(outcome_of(0) == wire::SecAggOutcome::kCounted);

      // The model moved by the mean of devices 0, 1 and 2: their summed codes, decoded, over 3
      // (for a Count Sketch, the heavy hitters of the summed sketch).
      const std::vector<float> v2 = s.model();
      double moved = 0;
      for (size_t j = 0; j < n; ++j) moved = std::max(moved, std::fabs(double(v2[j]) - double(v1[j])));
      CHECK(moved > 1e-3);
      CHECK(off_secure_mean(v1, {&d[0], &d[1], &d[2]}, v2) < 1e-6);
    }
  }
  TEST_CASE(
      "secure rounds walked at random (devices in any order, drop-outs, hostile messages, failing log "
      "writes and ledger rows, restarts, deadlines): a refusal changes nothing, a restart rebuilds the "
      "same state, every round ends, and a commit is the exact mean of the acknowledged masked vectors") {
    // EDGEFL_SECAGG_WALKS walks (default 24) from seed EDGEFL_SECAGG_FIRST_WALK (default 1) on;
    // a failure names its seed.
    uint32_t walks = 24, first = 1;
    if (const char* env = std::getenv("EDGEFL_SECAGG_WALKS"))
      walks = uint32_t(std::strtoul(env, nullptr, 10));
    if (const char* env = std::getenv("EDGEFL_SECAGG_FIRST_WALK"))
      first = uint32_t(std::strtoul(env, nullptr, 10));
    REQUIRE(walks > 0);
    uint32_t committed_walks = 0, abandoned_walks = 0;
    for (uint32_t seed = first; seed < first + walks; ++seed) {
      INFO("seed " << seed);
      SecureWalk walk(seed);
      walk.run();
      (walk.committed ? committed_walks : abandoned_walks) += 1;
    }
    MESSAGE(committed_walks << " walks committed, " << abandoned_walks << " abandoned");
    CHECK(committed_walks > 0);
  }
  TEST_CASE("a poll whose own tick ends the round hears that its round ended, not the next round's answer") {
    for (const bool at_unmask : {false, true}) {
      CAPTURE(at_unmask);
      RoundOptions o;
      o.cohort = 4;
      o.over_selection = 1.0;
      o.min_quorum = 2;
      o.deadline_ms = 5000;
      o.uplink_codec = "q8:shared=0.0002,det";
      o.secure_aggregation.enabled = true;
      o.secure_aggregation.phase_ms = 1000;
      Server s(make_temp_dir(), o);
      s.in_memory = true;
      REQUIRE(s.open() == Status::kOk);
      std::vector<SecureDevice> d(4);
      for (size_t i = 0; i < d.size(); ++i) {
        d[i].id = "dev-" + std::to_string(i);
        d[i].start(s.offer(d[i].id, 0, wire::kCapabilitySecureAggregation));
        d[i].update.assign(s.model().size(), 0.001f * float(i + 1));
      }
      std::vector<std::vector<uint8_t>> masked;
      if (!at_unmask) {
        // One device advertises; the keys deadline passes with no tick: the poll's own tick fails
        // the round (fewer than t + 1 keys) and opens the next.
        expect<wire::SecAggStatus>(s.rounds->secagg_advertise(d[0].id, d[0].advertise(), s.now).message);
        s.now += 5001;
        expect_error(s.rounds->secagg_poll(d[0].id, d[0].poll(wire::SecAggPhase::kKeys), s.now).message,
                     wire::ErrorCode::kUnknownRound, "round 1 ended");
      } else {
        // Everyone masks, no one answers; the unmask deadline passes with no tick.
        masked = mask_all(s, d);
        REQUIRE(s.rounds->secure_round()->phase() == SecurePhase::kUnmask);
        s.now += 1001;
        // The round ends unanswered: a device that masked hears its vector was not counted.
        const wire::SecAggStatus ended = expect<wire::SecAggStatus>(
            s.rounds->secagg_poll(d[0].id, d[0].poll(wire::SecAggPhase::kUnmask), s.now).message);
        CHECK(ended.phase == wire::SecAggPhase::kDone);
        CHECK(ended.outcome == wire::SecAggOutcome::kNotCounted);
      }
      std::optional<RoundRecord> first;
      std::string error;
      REQUIRE(s.storage->get_round(1, &first, &error) == Status::kOk);
      CHECK(first->state == RoundState::kAbandoned);
      CHECK(s.rounds->secure_round()->assigned() == 0);  // round 2, which knows none of them
      if (at_unmask) {
        // A device whose ack was lost asks again: its masked vector reached no model, so late;
        // asked directly, the server says so too.
        CHECK(expect<wire::Ack>(s.upload_bytes(d[1].offer, d[1].id, masked[1], 1)).disposition ==
              wire::UpdateDisposition::kLate);
        CHECK(expect<wire::SecAggStatus>(
                  s.rounds->secagg_poll(d[1].id, d[1].poll(wire::SecAggPhase::kUnmask), s.now).message)
                  .outcome == wire::SecAggOutcome::kNotCounted);
      }
    }
  }
  TEST_CASE(
      "plain updates carried past a switch to secure aggregation join a secure round's mean, once: not "
      "lost to an abandoned secure round, nor to the commit") {
    RoundOptions o;
    o.cohort = 3;
    o.over_selection = 1.0;
    o.min_quorum = 3;
    o.deadline_ms = 5000;
    o.uplink_codec = "q8:shared=0.0002,det";
    o.secure_aggregation.phase_ms = 1000;
    Server s(make_temp_dir(), o);
    s.in_memory = true;
    REQUIRE(s.open() == Status::kOk);
    const std::vector<float> v1 = s.model();
    const size_t n = v1.size();

    // Round 1, plain: two of three acks, then the deadline: abandoned, its two updates carried.
    CodecSpec spec;
    REQUIRE(parse_codec_spec(o.uplink_codec.c_str(), &spec) == Status::kOk);
    std::vector<double> plain_sum(n, 0.0);
    std::vector<wire::TaskOffer> plain_offers;
    std::vector<std::vector<uint8_t>> plain_bytes;
    for (int i = 0; i < 2; ++i) {
      const std::string id = "plain-" + std::to_string(i);
      const wire::TaskOffer offer = s.offer(id);
      std::vector<float> x(n);
      for (size_t j = 0; j < n; ++j) x[j] = 0.003f * float(i + 1) * (j % 2 == 0 ? 1.0f : -0.5f);
      std::vector<uint8_t> ws(workspace_size(spec, n)), bytes(encoded_bound(spec, n));
      size_t written = 0;
      REQUIRE(encode(spec, {x.data(), n}, offer.codec_seed, {ws.data(), ws.size()},
                     {bytes.data(), bytes.size()}, &written) == Status::kOk);
      bytes.resize(written);
      std::vector<float> decoded(n);
      EncodedInfo info;
      REQUIRE(read_header({bytes.data(), bytes.size()}, &info) == Status::kOk);
      std::vector<uint8_t> dws(decode_workspace_size(info));
      REQUIRE(decode({bytes.data(), bytes.size()}, {decoded.data(), n}, {dws.data(), dws.size()}) ==
              Status::kOk);
      for (size_t j = 0; j < n; ++j) plain_sum[j] += double(decoded[j]);
      CHECK(expect<wire::Ack>(s.upload_bytes(offer, id, bytes, 100)).disposition ==
            wire::UpdateDisposition::kAccepted);
      plain_offers.push_back(offer);
      plain_bytes.push_back(bytes);
    }
    s.now += 5001;
    s.rounds->tick(s.now);
    REQUIRE(s.rounds->carried_updates() == 2);

    // The operator restarts with secure aggregation on (round 2 holds no update: allowed). Round
    // 2 meets no device by its deadline: abandoned, and the plain updates stay carried.
    s.rounds.reset();
    s.storage.reset();
    s.options.secure_aggregation.enabled = true;
    REQUIRE(s.open() == Status::kOk);
    REQUIRE(s.rounds->secure_round() != nullptr);
    CHECK(s.rounds->carried_updates() == 2);
    s.now += 5001;
    s.rounds->tick(s.now);
    CHECK(s.rounds->model_version() == 1);
    CHECK(s.rounds->carried_updates() == 2);
    s.reopen();  // and across a restart
    CHECK(s.rounds->carried_updates() == 2);

    // Round 3, secure: three devices mask and unmask; the mean is over five updates, one weight
    // each. A device whose plain update the round carries gets no index (once per round).
    wire::Hello carried_hello;
    carried_hello.sdk_version = "test";
    carried_hello.capability_flags = wire::kCapabilitySecureAggregation;
    const wire::RetryLater full =
        expect<wire::RetryLater>(s.rounds->hello("plain-0", carried_hello, s.now).message);
    CHECK(full.reason == wire::RetryReason::kRoundFull);
    std::vector<SecureDevice> d(3);
    for (size_t i = 0; i < d.size(); ++i) {
      d[i].id = "dev-" + std::to_string(i);
      d[i].start(s.offer(d[i].id, 0, wire::kCapabilitySecureAggregation));
      d[i].update.assign(n, 0.001f * float(i + 1));
    }
    (void)mask_all(s, d);
    std::vector<wire::SecAggUnmaskResponse> answers;
    for (SecureDevice& x : d) {
      answers.push_back(x.unmask(expect<wire::SecAggUnmaskRequest>(
          s.rounds->secagg_poll(x.id, x.poll(wire::SecAggPhase::kUnmask), s.now).message)));
    }
    for (size_t i = 0; i < d.size(); ++i)
      expect<wire::SecAggStatus>(s.rounds->secagg_unmask(d[i].id, answers[i], s.now).message);
    REQUIRE(s.rounds->model_version() == 2);

    // The model: v1 + (the secure sum + the two plain updates) / 5.
    const std::vector<float> secure_sum = decoded_secure_sum({&d[0], &d[1], &d[2]}, n);
    const std::vector<float> v2 = s.model();
    double off = 0, moved = 0;
    for (size_t j = 0; j < n; ++j) {
      const double expected = double(v1[j]) + (double(secure_sum[j]) + plain_sum[j]) / 5.0;
      off = std::max(off, std::fabs(double(v2[j]) - expected));
      moved = std::max(moved, std::fabs(double(v2[j]) - double(v1[j])));
    }
    MESSAGE("the secure commit is within " << off << " of the five updates' mean (moved " << moved << ")");
    CHECK(moved > 1e-3);
    CHECK(off < 1e-6);

    // Counted once: round 4 carries nothing, after a restart too, and a plain device whose ack
    // was lost hears its update counted (before, the secure commit dropped it: late).
    CHECK(s.rounds->carried_updates() == 0);
    s.reopen();
    CHECK(s.rounds->carried_updates() == 0);
    CHECK(s.rounds->model_version() == 2);
    CHECK(s.model() == v2);
    for (size_t i = 0; i < plain_offers.size(); ++i) {
      const wire::Ack again = expect<wire::Ack>(
          s.upload_bytes(plain_offers[i], "plain-" + std::to_string(i), plain_bytes[i], 100));
      CHECK(again.disposition == wire::UpdateDisposition::kDuplicate);
    }
  }

  TEST_CASE("a restart that would change an open round's kind (secure or not) is refused, with the reason") {
    RoundOptions o;
    o.cohort = 3;
    o.over_selection = 1.0;
    o.uplink_codec = "q8:shared=0.0002,det";
    o.secure_aggregation.enabled = true;
    {
      Server s(make_temp_dir(), o);
      REQUIRE(s.open() == Status::kOk);
      (void)s.offer("dev-0", 0, wire::kCapabilitySecureAggregation);  // an index: the round's log starts
      s.rounds.reset();
      s.storage.reset();
      s.options.secure_aggregation.enabled = false;
      CHECK(s.open() == Status::kInvalidArgument);
      s.options.secure_aggregation.enabled = true;  // the same setting again: it goes on
      s.rounds.reset();
      s.storage.reset();
      REQUIRE(s.open() == Status::kOk);
      CHECK(s.rounds->secure_round()->assigned() == 1);
    }
    {
      o.secure_aggregation.enabled = false;
      Server s(make_temp_dir(), o);
      REQUIRE(s.open() == Status::kOk);
      const wire::TaskOffer offer = s.offer("dev-0");
      Update u{"dev-0", std::vector<float>(s.model().size(), 0.001f), 1};
      REQUIRE(std::holds_alternative<wire::Ack>(s.upload(offer, u, "q8:shared=0.0002,det")));
      s.rounds.reset();
      s.storage.reset();
      s.options.secure_aggregation.enabled = true;
      CHECK(s.open() == Status::kInvalidArgument);  // its acked update would not count
    }
  }
}
