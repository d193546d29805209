// edgefl sim: N clients in one process, K per round, real local training on Fashion-MNIST, any
// uplink codec with per-client error feedback, streaming decode-and-add aggregation, and a link
// model for simulated wall-clock time.
#include "sim.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <iomanip>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "commands.h"
#include "edgefl/aggregate.h"
#include "edgefl/codec.h"
#include "edgefl/data.h"
#include "edgefl/error_feedback.h"
#include "edgefl/model.h"
#include "json_writer.h"
#include "npy.h"
#include "report.h"
#include "round/downlink.h"
#include "round/seeds.h"
#include "round/update_steps.h"
#include "timing.h"
#if defined(EDGEFL_CLI_HAVE_SECAGG)
#include "secagg/crypto.h"
#include "secagg/dp.h"
#include "secure_round.h"
#endif

namespace edgefl {
namespace cli {

namespace {

uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
uint64_t derive_seed(uint64_t seed, uint64_t a, uint64_t b, uint64_t purpose) {
  return mix64(mix64(mix64(seed ^ purpose) ^ a) ^ (b * 0xD1B54A32D192ED03ull));
}

// K distinct clients out of N, by a seeded partial Fisher-Yates shuffle, sorted.
std::vector<uint32_t> select_clients(size_t n, size_t k, uint64_t seed) {
  std::vector<uint32_t> all(n);
  for (size_t i = 0; i < n; ++i) all[i] = uint32_t(i);
  uint64_t state = seed;
  for (size_t i = 0; i < k; ++i) {
    state = mix64(state);
    const size_t j = i + size_t((uint64_t(uint32_t(state >> 32)) * (n - i)) >> 32);
    std::swap(all[i], all[j]);
  }
  all.resize(k);
  std::sort(all.begin(), all.end());
  return all;
}

// Per worker thread: one trainer and its buffers, reused for every client it serves.
struct Worker {
  std::vector<uint8_t> trainer_memory;
  SgdTrainer trainer;
  std::vector<float> delta;
  std::vector<uint8_t> codec_workspace;
  std::vector<uint8_t> encoded;
};

struct ClientOutcome {
  FitResult fit;
  size_t bytes = 0;           // upload
  size_t download_bytes = 0;  // the download stream (round/downlink.h), length prefixes included
  double train_s = 0, encode_s = 0, decode_s = 0;
  std::vector<int32_t> codes;  // --secure-aggregation: the update's integer codes
  Status status = Status::kOk;
  const char* stage = "";
};

std::string format_bytes(double b) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(b >= 1e6 ? 2 : 1);
  if (b >= 1e6) {
    o << b / 1e6 << " MB";
  } else {
    o << b / 1e3 << " kB";
  }
  return o.str();
}

// One simulation: its configuration parsed, the server's state, the clients' residuals and the
// worker threads' buffers; run() plays the rounds. Every step that touches an update is the
// product's (round/seeds.h, round/update_steps.h).
class Simulation {
 public:
  Simulation(const SimConfig& config, std::vector<RoundRecord>* records, std::ostream& err)
      : c_(config), records_(records), err_(err) {}

  int run() {
    records_->clear();
    std::string error = parse();
    if (error.empty()) error = load_data();
    if (error.empty()) error = allocate();
    if (error.empty()) error = open_outputs();
    if (!error.empty()) return fail(error);
    RoundRecord total;
    for (size_t round = 1; round <= c_.rounds; ++round) {
      error = run_round(round, &total);
      if (!error.empty()) return fail(error);
    }
    return 0;
  }

 private:
  int fail(const std::string& what) {
    err_ << "edgefl sim: " << what << "\n";
    return 1;
  }

  std::string parse() {
    if (parse_model_spec(c_.model.c_str(), &model_) != Status::kOk)
      return "invalid --model '" + c_.model + "'";
    if (parse_codec_spec(c_.codec.c_str(), &codec_) != Status::kOk)
      return "invalid --codec '" + c_.codec + "'";
    whole_downloads_ = c_.downlink == "full";
    if (!whole_downloads_ && parse_codec_spec(c_.downlink.c_str(), &downlink_) != Status::kOk) {
      return "invalid --downlink '" + c_.downlink + "' (full, or a codec spec for the patches)";
    }
    if (parse_server_optimizer_spec(c_.server_optimizer.c_str(), &optimizer_spec_) != Status::kOk) {
      return "invalid --server-opt '" + c_.server_optimizer + "'";
    }
    std::string error;
    if (!parse_partition_spec(c_.partition, &partition_spec_, &error)) return "--partition: " + error;
    if (c_.clients == 0 || c_.per_round == 0 || c_.per_round > c_.clients)
      return "need 1 <= --per-round <= --clients";
    if (c_.secure_aggregation) {
#if !defined(EDGEFL_CLI_HAVE_SECAGG)
      return "--secure-aggregation needs a build with mbedTLS (EDGEFL_BUILD_NET)";
#endif
      const bool sketch = codec_.values == ValueCoderKind::kCountSketch;
      const bool integer =
          sketch ||
          (codec_.values == ValueCoderKind::kUniform && codec_.shared_step > 0 && !codec_.entropy_coded &&
           (codec_.sparsifier == SparsifierKind::kNone || codec_.sparsifier == SparsifierKind::kRandomK));
      if (!integer) {
        return "--secure-aggregation needs a codec with integer codes that sum: q<b>:shared=STEP[,clip], "
               "optionally after randk:F, or cs (not '" +
               c_.codec + "')";
      }
      if (sketch && c_.dp_clip > 0) return "--dp-clip: DP over Count Sketch cells is not supported";
      if (c_.secagg_cell_bound < 1 || c_.secagg_cell_bound > (1u << 24)) {
        return "--secagg-cell-bound must be in 1 .. 2^24";
      }
      if (c_.per_round < 3) return "--secure-aggregation needs --per-round >= 3";
      if (!(c_.secagg_dropout >= 0 && c_.secagg_dropout < 0.5)) return "--secagg-dropout must be in [0, 0.5)";
    }
#if defined(EDGEFL_CLI_HAVE_SECAGG)
    if (c_.secure_aggregation && secagg::crypto_init() != Status::kOk) return "PSA crypto does not start";
#endif
    if ((c_.dp_clip > 0) != (c_.dp_noise > 0)) return "--dp-clip and --dp-noise go together";
    if (c_.dp_clip > 0 && !c_.secure_aggregation) return "--dp-clip needs --secure-aggregation on";
    if (c_.dp_clip > 0 && !(c_.dp_delta > 0 && c_.dp_delta < 1)) return "--dp-delta must be in (0, 1)";
    if (c_.error_feedback == "auto") {
      use_ef_ = needs_error_feedback(codec_);
    } else if (c_.error_feedback == "fp32" || c_.error_feedback == "bf16") {
      use_ef_ = true;
      ef_precision_ = c_.error_feedback == "bf16" ? ResidualPrecision::kBf16 : ResidualPrecision::kFp32;
    } else if (c_.error_feedback != "none") {
      return "--ef must be none, fp32, bf16 or auto";
    }
    return "";
  }

  std::string load_data() {
    std::string error;
    if (!load_fashion_mnist(c_.data_dir, true, &train_set_, &error)) return error;
    if (!load_fashion_mnist(c_.data_dir, false, &test_set_, &error)) return error;
    if (train_set_.dim() != input_dim(model_)) return "the model's input size does not match the data (784)";
    parts_ = partition(train_set_.labels, c_.clients, partition_spec_, c_.seed, &error);
    if (parts_.size() != c_.clients) return "partition: " + error;
    eval_count_ = c_.eval_samples == 0 ? test_set_.count : std::min(c_.eval_samples, test_set_.count);
    return "";
  }

  // The model and the server's state, the clients' residuals, the workers.
  std::string allocate() {
    n_ = parameter_count(model_);
    global_.resize(n_);
    mean_delta_.resize(n_);
    server_decoded_.resize(n_);
    init_parameters(model_, c_.seed, {global_.data(), n_});
    // Version 1 of the public model: the initial model on the bf16 grid (round/downlink.h). A
    // device builds it from the model spec and the seed, as edgefl::Client does for built-in models.
    public_ = global_;
    if (round_to_bf16_grid({public_.data(), n_}) != Status::kOk) return "initial model not finite";
    held_.assign(c_.clients, 0);
    version_ = 1;
    patch_bytes_.assign(2, 0);
    aggregator_memory_.resize(StreamingAggregator::storage_bytes(n_));
    if (aggregator_.init({aggregator_memory_.data(), aggregator_memory_.size()}, n_) != Status::kOk) {
      return "aggregator init";
    }
    optimizer_memory_.resize(ServerOptimizer::state_bytes(optimizer_spec_.kind, n_));
    if (optimizer_.init(optimizer_spec_, {optimizer_memory_.data(), optimizer_memory_.size()}, n_) !=
        Status::kOk) {
      return "server optimizer init";
    }
    CodecSpec bf16{};
    if (parse_codec_spec("bf16", &bf16) != Status::kOk) return "bf16 codec";
    whole_bytes_ = kStreamPrefixBytes + encoded_bound(bf16, n_);
    if (!whole_downloads_) {
      down_workspace_.resize(workspace_size(downlink_, n_));
      down_encoded_.resize(encoded_bound(downlink_, n_));
      patch_decoded_.resize(n_);
    }
    // Per-client error-feedback residuals, carried across rounds.
    const size_t ef_bytes = use_ef_ ? ErrorFeedback::storage_bytes(n_, ef_precision_) : 0;
    ef_memory_.resize(ef_bytes * c_.clients);
    feedback_ = std::vector<ErrorFeedback>(use_ef_ ? c_.clients : 0);
    for (size_t i = 0; i < feedback_.size(); ++i) {
      if (feedback_[i].init({ef_memory_.data() + i * ef_bytes, ef_bytes}, n_, ef_precision_) != Status::kOk) {
        return "error feedback init";
      }
    }
    threads_ = std::max<size_t>(1, c_.threads ? c_.threads : std::thread::hardware_concurrency());
    workers_n_ = std::min(threads_, c_.per_round);
    const size_t trainer_bytes = SgdTrainer::workspace_bytes(model_, c_.train);
    if (trainer_bytes == 0) return "invalid training configuration";
    for (size_t t = 0; t < std::max(workers_n_, threads_); ++t) {
      auto w = std::make_unique<Worker>();
      w->trainer_memory.resize(trainer_bytes);
      if (w->trainer.init(model_, c_.train, {w->trainer_memory.data(), trainer_bytes}) != Status::kOk) {
        return "trainer init";
      }
      w->delta.resize(n_);
      w->codec_workspace.resize(workspace_size(codec_, n_));
      w->encoded.resize(encoded_bound(codec_, n_));
      workers_.push_back(std::move(w));
    }
    return "";
  }

  std::string open_outputs() {
    if (!c_.json_path.empty()) {
      json_.open(c_.json_path);
      if (!json_) return "cannot write " + c_.json_path;
    }
    if (!c_.quiet) {
      err_ << "edgefl sim: " << c_.model << " (" << n_ << " parameters), " << c_.clients << " clients ("
           << c_.partition << "), " << c_.per_round << " per round, codec " << c_.codec
           << (use_ef_ ? " + error feedback" : "") << ", downlink " << c_.downlink << ", " << threads_
           << " threads\n";
    }
    return "";
  }

  std::string run_round(size_t round, RoundRecord* total) {
    const Clock::time_point round_start = Clock::now();
    RoundRecord rec;
    rec.round = round;
    const std::vector<uint32_t> selected =
        select_clients(c_.clients, c_.per_round, derive_seed(c_.seed, round, 0, 1));
    // Downlink: each selected client brings its public model to the current version.
    std::vector<ClientOutcome> outcomes(selected.size());
    for (size_t i = 0; i < selected.size(); ++i) outcomes[i].download_bytes = download_bytes(selected[i]);
    std::string error = run_clients(round, selected, &outcomes);
    if (!error.empty()) return error;
    // Server: mean delta, then the server optimizer.
    const Clock::time_point t_server = Clock::now();
    Status s = Status::kOk;
    if (c_.secure_aggregation) {
      error = secure_mean(round, &outcomes, &rec);
      if (!error.empty()) return error;
    } else {
      s = aggregator_.mean({mean_delta_.data(), n_});
    }
    if (s == Status::kOk) s = optimizer_.apply({global_.data(), n_}, {mean_delta_.data(), n_});
    if (s != Status::kOk) return std::string("server update: ") + status_name(s);
    error = publish(round);
    if (!error.empty()) return error;
    account(outcomes, seconds_since(t_server), &rec, total);
    error = evaluate(round, &rec);
    if (!error.empty()) return error;
    rec.wall_s = seconds_since(round_start);
    records_->push_back(rec);
    write_json(rec);
    print_progress(rec);
    return "";
  }

  // The download of `client` this round, in bytes, as edgefl-server serves it: the whole bf16
  // model, or the patches since the version the client holds when they are smaller (a client
  // that holds nothing builds version 1 from the model spec and the seed). The client then holds
  // the current version.
  size_t download_bytes(uint32_t client) {
    const uint64_t held = std::max<uint64_t>(held_[client], 1);
    held_[client] = version_;
    if (whole_downloads_) return whole_bytes_;
    size_t chain = 0;
    for (uint64_t v = held + 1; v <= version_ && chain < whole_bytes_; ++v) chain += patch_bytes_[v];
    return std::min(chain, whole_bytes_);
  }

  // The server's downlink step after the model update (round/downlink.h): the next public model,
  // either the server model rounded to bf16 (whole downloads) or the public model moved by a
  // compressed patch of (server model - public model).
  std::string publish(size_t round) {
    ++version_;
    if (whole_downloads_) {
      public_ = global_;
      if (round_to_bf16_grid({public_.data(), n_}) != Status::kOk) return "the model is not finite";
      patch_bytes_.push_back(whole_bytes_);
      return "";
    }
    size_t size = 0;
    Status s = make_patch(downlink_, {global_.data(), n_}, {public_.data(), n_},
                          downlink_seed(round_seed(c_.seed, round)), {patch_decoded_.data(), n_},
                          {down_workspace_.data(), down_workspace_.size()},
                          {down_encoded_.data(), down_encoded_.size()}, &size);
    if (s == Status::kOk) {
      const Span<const uint8_t> patch{down_encoded_.data(), size};
      const size_t ws = stream_decode_workspace(patch);
      if (ws > patch_decode_workspace_.size()) patch_decode_workspace_.resize(ws);
      s = apply_patch(patch, {public_.data(), n_}, {patch_decoded_.data(), n_},
                      {patch_decode_workspace_.data(), patch_decode_workspace_.size()});
    }
    if (s != Status::kOk) return std::string("downlink patch: ") + status_name(s);
    patch_bytes_.push_back(kStreamPrefixBytes + size);
    return "";
  }

  // Clients in parallel; their updates are added to the aggregate in selection order as soon as
  // each is ready (streaming, deterministic whatever the thread timing).
  std::string run_clients(size_t round, const std::vector<uint32_t>& selected,
                          std::vector<ClientOutcome>* outcomes) {
    aggregator_.reset();
    RoundShared shared(round, round_seed(c_.seed, round), selected, *outcomes);
    std::vector<std::thread> pool;
    for (size_t t = 1; t < workers_n_; ++t)
      pool.emplace_back([&, t] { serve_clients(*workers_[t], shared); });
    serve_clients(*workers_[0], shared);
    for (std::thread& t : pool) t.join();
    for (const ClientOutcome& o : *outcomes) {
      if (o.status != Status::kOk) return std::string(o.stage) + ": " + status_name(o.status);
    }
    return "";
  }

  // What the workers of one round share.
  struct RoundShared {
    RoundShared(size_t round_number, uint64_t round_seed_value, const std::vector<uint32_t>& chosen,
                std::vector<ClientOutcome>& results)
        : round(round_number), seed(round_seed_value), selected(chosen), outcomes(results) {}
    size_t round;
    uint64_t seed;  // round/seeds.h, as the server does
    const std::vector<uint32_t>& selected;
    std::vector<ClientOutcome>& outcomes;
    std::atomic<size_t> next_client{0};
    std::mutex add_mutex;
    std::condition_variable add_turn;
    size_t next_to_add = 0;
    bool aborted = false;
  };

  void serve_clients(Worker& w, RoundShared& r) {
    for (;;) {
      const size_t slot = r.next_client.fetch_add(1);
      if (slot >= r.selected.size()) return;
      const uint32_t client = r.selected[slot];
      ClientOutcome& o = r.outcomes[slot];
      char device_id[32];
      const int id_len = snprintf(device_id, sizeof device_id, "sim-%u", unsigned(client));
      const DeviceSeeds seeds = device_seeds(r.seed, device_id, size_t(id_len), codec_);
      train_and_encode(w, client, seeds, &o);
      if (slot == 0 && r.round == c_.capture_round && o.status == Status::kOk)
        capture_update(w, client, seeds, &o);
      std::unique_lock<std::mutex> lock(r.add_mutex);
      r.add_turn.wait(lock, [&] { return r.next_to_add == slot || r.aborted; });
      if (o.status == Status::kOk && !r.aborted) check_and_add(w, seeds.codec, &o);
      if (o.status != Status::kOk) r.aborted = true;
      ++r.next_to_add;
      r.add_turn.notify_all();
    }
  }

  // The device's steps, as edgefl::Client runs them (round/update_steps.h).
  void train_and_encode(Worker& w, uint32_t client, const DeviceSeeds& seeds, ClientOutcome* o) {
    const std::vector<uint32_t>& idx = parts_[client];
    DataView view{train_set_.inputs.data(),
                  train_set_.labels.data(),
                  train_set_.count,
                  train_set_.dim(),
                  idx.data(),
                  idx.size()};
    Clock::time_point t0 = Clock::now();
    o->status = w.trainer.set_data(view);
    if (o->status == Status::kOk) {
      w.trainer.set_seed(seeds.training);
      o->status = w.trainer.fit({public_.data(), n_}, {w.delta.data(), n_}, &o->fit);
    }
    o->train_s = seconds_since(t0);
    o->stage = "train";
    if (o->status != Status::kOk) return;
    t0 = Clock::now();
    if (c_.dp_clip > 0) {  // DP: every device bounds its contribution (the codes are bounded again)
      double sq = 0;
      for (float v : w.delta) sq += double(v) * v;
      if (sq > c_.dp_clip * c_.dp_clip) {
        const float scale = float(c_.dp_clip / sqrt(sq));
        for (float& v : w.delta) v *= scale;
      }
    }
    const Span<uint8_t> ws{w.codec_workspace.data(), w.codec_workspace.size()};
    o->status = encode_update(codec_, use_ef_ ? &feedback_[client] : nullptr, {w.delta.data(), n_},
                              seeds.codec, ws, {w.encoded.data(), w.encoded.size()}, &o->bytes);
    o->stage = "encode";
    if (o->status == Status::kOk) {
      o->status = verify_update({w.encoded.data(), o->bytes}, n_, seeds.codec, ws);
      o->stage = "verify";
    }
    o->encode_s = seconds_since(t0);
  }

  // The raw update of the first client (before compression), for `edgefl bench`.
  void capture_update(Worker& w, uint32_t, const DeviceSeeds& seeds, ClientOutcome* o) {
    if (c_.save_update_path.empty() && c_.capture_update == nullptr) return;
    std::vector<float> raw(n_);
    w.trainer.set_seed(seeds.training);
    if (w.trainer.fit({public_.data(), n_}, {raw.data(), n_}, &o->fit) != Status::kOk) return;
    std::string e;
    if (!c_.save_update_path.empty() && !write_npy_f32_file(c_.save_update_path, raw.data(), n_, &e)) {
      o->status = Status::kInvalidArgument;
      o->stage = "--save-update";
    }
    if (c_.capture_update != nullptr) *c_.capture_update = raw;
  }

  // The server's steps, as edgefl-server runs them (no norm bound here): the header, one decode
  // pass into server_decoded_, the checks, then add_dense. Called under the add lock: the decode
  // scratch of the sketch codecs (skc, cs) is shared.
  void check_and_add(Worker& w, uint64_t codec_seed, ClientOutcome* o) {
    const Clock::time_point t1 = Clock::now();
    EncodedInfo info;
    if (read_header({w.encoded.data(), o->bytes}, &info) == Status::kOk &&
        decode_fast_workspace_size(info) > decode_scratch_.size()) {
      decode_scratch_.resize(decode_fast_workspace_size(info));
    }
    const UpdateCheck check =
        check_update({w.encoded.data(), o->bytes}, &codec_seed, {global_.data(), n_}, HUGE_VAL,
                     {server_decoded_.data(), n_}, {decode_scratch_.data(), decode_scratch_.size()});
    if (check.verdict == UpdateVerdict::kAccepted && c_.secure_aggregation) {
      // The server never sees this encoding under SecAgg: the device masks its integer codes.
      if (read_header({w.encoded.data(), o->bytes}, &secure_like_) == Status::kOk) {
        o->codes.resize(integer_code_count(secure_like_));
        o->status = read_integer_codes({w.encoded.data(), o->bytes}, {o->codes.data(), o->codes.size()});
        if (secure_like_.values == ValueCoderKind::kCountSketch) {  // as edgefl::Client clips its cells
          const int32_t bound = int32_t(c_.secagg_cell_bound);
          for (int32_t& cell : o->codes) cell = std::clamp(cell, -bound, bound);
        }
      } else {
        o->status = Status::kCorruptPayload;
      }
    } else {
      o->status = check.verdict == UpdateVerdict::kAccepted
                      ? aggregator_.add_dense({server_decoded_.data(), n_}, double(o->fit.samples))
                      : (check.status != Status::kOk ? check.status : Status::kNonFiniteInput);
    }
    o->decode_s = seconds_since(t1);
    o->stage = "aggregate";
  }

  // --secure-aggregation: SecAgg+ over the round's integer codes (secure_round.h); the mean is the
  // unmasked sum decoded (write_integer_codes, then decode) over the number of contributors. The
  // devices' bytes and times become the secure protocol's.
  std::string secure_mean(size_t round, std::vector<ClientOutcome>* outcomes, RoundRecord* rec) {
#if defined(EDGEFL_CLI_HAVE_SECAGG)
    const size_t k = outcomes->size();
    std::vector<std::vector<int32_t>> codes(k);
    for (size_t i = 0; i < k; ++i) codes[i] = std::move((*outcomes)[i].codes);
    std::vector<bool> dropped(k, false);
    uint64_t pick = derive_seed(c_.seed, round, 0, 7);
    const size_t drops = size_t(c_.secagg_dropout * double(k) + 0.5);
    for (size_t d = 0; d < drops;) {
      pick = mix64(pick);
      const size_t slot = size_t(pick % k);
      if (!dropped[slot]) dropped[slot] = true, ++d;
    }
    const uint32_t max_code = secure_like_.values == ValueCoderKind::kCountSketch
                                  ? c_.secagg_cell_bound
                                  : (1u << (secure_like_.bits - 1)) - 1;
    uint64_t variance = 0;
    double sensitivity = 0;
    std::vector<double> noise_s(k, 0.0);
    if (c_.dp_clip > 0) {
      // Code units: x / step, times n / k for scaled random-k.
      const bool scaled = secure_like_.sparsifier == SparsifierKind::kRandomK && !secure_like_.randk_unscaled;
      const double scale = scaled ? double(secure_like_.n) / double(secure_like_.nnz) : 1.0;
      sensitivity =
          secagg::code_sensitivity(c_.dp_clip * scale, double(secure_like_.param), secure_like_.nnz);
      const double v = ceil(c_.dp_noise * sensitivity * c_.dp_noise * sensitivity / double(k));
      if (v > double(secagg::kMaxNoiseVariance)) {
        return "--dp-noise: a device's noise variance " + std::to_string(v) + " (code units) is above " +
               std::to_string(secagg::kMaxNoiseVariance) + ": raise the codec's step or lower --dp-clip";
      }
      variance = uint64_t(std::max(1.0, v));
      for (size_t i = 0; i < k; ++i) {  // on each device, before masking
        if (dropped[i]) continue;
        const Clock::time_point t0 = Clock::now();
        secagg::clip_codes_l2({codes[i].data(), codes[i].size()}, sensitivity, nullptr);
        const Status s = secagg::add_discrete_gaussian_noise(variance, secagg::crypto_random(),
                                                             {codes[i].data(), codes[i].size()});
        if (s != Status::kOk) return std::string("--dp-noise: ") + status_name(s);
        noise_s[i] = seconds_since(t0);
      }
    }
    const SecureRoundResult r = run_secure_round(round, derive_seed(c_.seed, round, 0, 8), codes, max_code,
                                                 dropped, std::max(0.1, c_.secagg_dropout), variance);
    if (!r.error.empty()) return r.error;
    if (variance > 0) {
      accountant_.add_round(sensitivity, secure_like_.nnz, uint32_t(r.contributors.size()), variance);
      rec->dp_epsilon = accountant_.epsilon(c_.dp_delta);
      rec->dp_noise_variance = variance;
    }
    for (size_t i = 0; i < k; ++i) {
      ClientOutcome& o = (*outcomes)[i];
      o.bytes = r.uplink_bytes[i];
      o.download_bytes += r.downlink_bytes[i];
      o.encode_s += r.client_s[i] + noise_s[i];
      rec->secagg_client_s += r.client_s[i] + noise_s[i];
      rec->secagg_protocol_bytes += r.uplink_bytes[i] + r.downlink_bytes[i];
      if (dropped[i]) o.fit.samples = 0;  // its update is not in the model
    }
    rec->secagg_server_s = r.server_s;
    rec->secagg_modulus_bits = r.modulus_bits;
    rec->contributors = r.contributors.size();
    std::vector<uint8_t> summed(kEncodedHeaderBytes + 4 * integer_code_count(secure_like_));
    size_t size = 0;
    Status s = write_integer_codes(secure_like_, {r.summed_codes.data(), r.summed_codes.size()},
                                   uint32_t(r.contributors.size()), {summed.data(), summed.size()}, &size);
    std::vector<uint8_t> workspace(decode_workspace_size(secure_like_));
    if (s == Status::kOk)
      s = decode({summed.data(), size}, {mean_delta_.data(), n_}, {workspace.data(), workspace.size()});
    if (s != Status::kOk) return std::string("secure aggregation: the unmasked sum: ") + status_name(s);
    const float scale = 1.0f / float(r.contributors.size());
    for (float& v : mean_delta_) v *= scale;
    return "";
#else
    (void)round, (void)outcomes, (void)rec;
    return "--secure-aggregation needs a build with mbedTLS";
#endif
  }

  // Round accounting and the link model: the round lasts as long as its slowest client, then
  // the server decodes the updates one by one and steps the model.
  void account(const std::vector<ClientOutcome>& outcomes, double server_s, RoundRecord* rec,
               RoundRecord* total) const {
    const double up_bps = c_.uplink_mbps * 1e6, down_bps = c_.downlink_mbps * 1e6;
    double slowest = 0, loss_sum = 0, acc_sum = 0;
    for (const ClientOutcome& o : outcomes) {
      rec->uplink_bytes += o.bytes;
      rec->downlink_bytes += o.download_bytes;
      rec->train_s += o.train_s;
      rec->encode_s += o.encode_s;
      rec->decode_s += o.decode_s;
      rec->samples += o.fit.samples;
      loss_sum += double(o.fit.loss) * o.fit.samples;
      acc_sum += double(o.fit.accuracy) * o.fit.samples;
      // SecAgg+ adds three exchanges with the server (keys, shares, unmasking) to the upload.
      const double round_trips = c_.secure_aggregation ? 4 : 1;
      const double client_s = round_trips * c_.rtt_ms / 1e3 + double(o.download_bytes) * 8 / down_bps +
                              (o.train_s + o.encode_s) * c_.compute_scale + double(o.bytes) * 8 / up_bps;
      slowest = std::max(slowest, client_s);
    }
    rec->train_loss = rec->samples ? loss_sum / double(rec->samples) : 0;
    rec->train_acc = rec->samples ? acc_sum / double(rec->samples) : 0;
    rec->round_sim_s = slowest + rec->decode_s + server_s;
    total->cum_uplink_bytes += rec->uplink_bytes;
    total->cum_downlink_bytes += rec->downlink_bytes;
    total->sim_time_s += rec->round_sim_s;
    rec->cum_uplink_bytes = total->cum_uplink_bytes;
    rec->cum_downlink_bytes = total->cum_downlink_bytes;
    rec->sim_time_s = total->sim_time_s;
  }

  // Evaluation on the test set, split over the workers (every eval_every rounds and the last).
  std::string evaluate(size_t round, RoundRecord* rec) {
    if (round % std::max<size_t>(1, c_.eval_every) != 0 && round != c_.rounds) {
      if (!records_->empty()) {
        rec->test_acc = records_->back().test_acc;
        rec->test_loss = records_->back().test_loss;
      }
      return "";
    }
    std::vector<uint32_t> all(eval_count_);
    for (size_t i = 0; i < eval_count_; ++i) all[i] = uint32_t(i);
    const size_t chunks = std::min(threads_, eval_count_);
    std::vector<double> loss(chunks), acc(chunks);
    std::vector<Status> st(chunks, Status::kOk);
    auto eval_chunk = [&](size_t t) {
      const size_t lo = eval_count_ * t / chunks, hi = eval_count_ * (t + 1) / chunks;
      DataView v{test_set_.inputs.data(), test_set_.labels.data(), test_set_.count,
                 test_set_.dim(),         all.data() + lo,         hi - lo};
      float l = 0, a = 0;
      st[t] = workers_[t]->trainer.evaluate({global_.data(), n_}, v, &l, &a);
      loss[t] = double(l) * double(hi - lo);
      acc[t] = nearbyint(double(a) * double(hi - lo));  // correct predictions: an exact count
    };
    std::vector<std::thread> eval_pool;
    for (size_t t = 1; t < chunks; ++t) eval_pool.emplace_back(eval_chunk, t);
    eval_chunk(0);
    for (std::thread& t : eval_pool) t.join();
    double l = 0, a = 0;
    for (size_t t = 0; t < chunks; ++t) {
      if (st[t] != Status::kOk) return std::string("evaluate: ") + status_name(st[t]);
      l += loss[t];
      a += acc[t];
    }
    rec->evaluated = true;
    rec->test_loss = l / double(eval_count_);
    rec->test_acc = a / double(eval_count_);
    return "";
  }

  void write_json(const RoundRecord& rec) {
    if (!json_.is_open()) return;
    const bool any = rec.evaluated || rec.test_acc > 0;  // null before any evaluation
    JsonObjectWriter j;
    j.add_uint("round", rec.round)
        .add_string("codec", c_.codec)
        .add_string("downlink", c_.downlink)
        .add_number("test_acc", any ? rec.test_acc : NAN, 6)
        .add_number("test_loss", any ? rec.test_loss : NAN, 6)
        .add_bool("evaluated", rec.evaluated)
        .add_number("train_loss", rec.train_loss, 6)
        .add_uint("uplink_bytes", rec.uplink_bytes)
        .add_uint("downlink_bytes", rec.downlink_bytes)
        .add_uint("cum_uplink_bytes", rec.cum_uplink_bytes)
        .add_uint("cum_downlink_bytes", rec.cum_downlink_bytes)
        .add_number("train_s", rec.train_s, 6)
        .add_number("encode_s", rec.encode_s, 6)
        .add_number("decode_s", rec.decode_s, 6)
        .add_number("wall_s", rec.wall_s, 6)
        .add_number("round_sim_s", rec.round_sim_s, 6)
        .add_number("sim_time_s", rec.sim_time_s, 6)
        .add_uint("samples", rec.samples);
    if (c_.secure_aggregation) {
      j.add_bool("secure_aggregation", true)
          .add_uint("contributors", rec.contributors)
          .add_uint("secagg_modulus_bits", rec.secagg_modulus_bits)
          .add_uint("secagg_protocol_bytes", rec.secagg_protocol_bytes)
          .add_number("secagg_client_s", rec.secagg_client_s, 6)
          .add_number("secagg_server_s", rec.secagg_server_s, 6);
      if (c_.dp_clip > 0) {
        j.add_number("dp_epsilon", rec.dp_epsilon, 6)
            .add_number("dp_delta", c_.dp_delta, 9)
            .add_uint("dp_noise_variance", rec.dp_noise_variance);
      }
    }
    json_ << j.str() << "\n";
  }

  void print_progress(const RoundRecord& rec) {
    if (c_.quiet) return;
    std::ostringstream acc;  // "-" until the first evaluation
    if (rec.evaluated || rec.test_acc > 0) {
      acc << std::fixed << std::setprecision(4) << rec.test_acc << "  loss " << std::setprecision(3)
          << rec.test_loss;
    } else {
      acc << "  -     loss   -  ";
    }
    err_ << std::fixed << "round " << std::setw(3) << rec.round << "/" << c_.rounds << "  acc " << acc.str()
         << "  up " << format_bytes(double(rec.uplink_bytes)) << "  down "
         << format_bytes(double(rec.downlink_bytes)) << "  train " << std::setprecision(2) << rec.train_s
         << "s enc " << std::setprecision(3) << rec.encode_s << "s dec " << rec.decode_s << "s  wall "
         << std::setprecision(2) << rec.wall_s << "s  sim " << std::setprecision(1) << rec.sim_time_s << "s\n"
         << std::defaultfloat;
  }

  const SimConfig& c_;
  std::vector<RoundRecord>* records_;
  std::ostream& err_;
  ModelSpec model_{};
  CodecSpec codec_{}, downlink_{};
  ServerOptimizerSpec optimizer_spec_{};
  PartitionSpec partition_spec_{};
  bool use_ef_ = false;
  ResidualPrecision ef_precision_ = ResidualPrecision::kFp32;
  Dataset train_set_, test_set_;
  std::vector<std::vector<uint32_t>> parts_;
  size_t eval_count_ = 0;
  size_t n_ = 0;
  std::vector<float> global_, mean_delta_;  // global_: the server model
  // The downlink (round/downlink.h): the public model the clients train from, its version, the
  // version each client holds (0: none), each version's patch in bytes (with its prefix).
  bool whole_downloads_ = false;  // --downlink full: the whole bf16 model every round
  std::vector<float> public_, patch_decoded_;
  std::vector<uint64_t> held_;
  uint64_t version_ = 1;
  std::vector<size_t> patch_bytes_;
  size_t whole_bytes_ = 0;
  std::vector<uint8_t> patch_decode_workspace_;
  std::vector<float> server_decoded_;  // the update being checked and added
  EncodedInfo secure_like_{};          // --secure-aggregation: a header of the round's encodings
#if defined(EDGEFL_CLI_HAVE_SECAGG)
  secagg::PrivacyAccountant accountant_;  // --dp-noise: every round so far
#endif
  std::vector<uint8_t> decode_scratch_;  // decode workspace of the sketch codecs, grown once
  std::vector<uint8_t> aggregator_memory_;
  StreamingAggregator aggregator_;
  std::vector<uint8_t> optimizer_memory_;
  ServerOptimizer optimizer_;
  std::vector<uint8_t> down_workspace_, down_encoded_;
  std::vector<uint8_t> ef_memory_;
  std::vector<ErrorFeedback> feedback_;
  size_t threads_ = 1, workers_n_ = 1;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::ofstream json_;
};

}  // namespace

int run_sim(const SimConfig& c, std::vector<RoundRecord>* records, std::ostream& err) {
  return Simulation(c, records, err).run();
}

namespace {
int set_sim_option(const std::string& arg, const std::string& v, SimConfig* c);

// One --compare entry, "UPLINK[@DOWNLINK][ --option value ...]", applied to a copy of the base
// configuration. The options are those of one run (--epochs, --server-opt, --lr, --rounds, ...),
// not --seed or --json, which the comparison fixes. A run's --rounds lets a codec that learns
// more slowly show whether it reaches the baseline's target at all (the baseline's --rounds sets
// the target). "" or what is wrong.
std::string apply_entry(const std::string& entry, SimConfig* c) {
  std::istringstream words(entry);
  std::string codec, arg, value;
  words >> codec;
  const size_t at = codec.find('@');
  c->codec = codec.substr(0, at);
  if (at != std::string::npos) c->downlink = codec.substr(at + 1);
  while (words >> arg) {
    if (!(words >> value)) return "missing value after " + arg;
    if (arg == "--seed" || arg == "--json") return arg + " is the same for every run";
    const int set = set_sim_option(arg, value, c);
    if (set != 0) return (set == 2 ? "unknown option " : "invalid value for ") + arg;
  }
  return "";
}
}  // namespace

int run_compare(const SimConfig& base, const CompareOptions& options, std::ostream& out, std::ostream& err) {
  if (options.codecs.empty()) {
    err << "edgefl sim: --compare needs at least one codec\n";
    return 2;
  }
  for (const std::string& entry : options.codecs) {  // every entry checked before any run
    SimConfig probe = base;
    const std::string bad = apply_entry(entry, &probe);
    if (!bad.empty()) {
      err << "edgefl sim: --compare entry '" << entry << "': " << bad << "\n";
      return 2;
    }
  }
  const std::vector<uint64_t> seeds =
      options.seeds.empty() ? std::vector<uint64_t>{base.seed} : options.seeds;
  std::vector<CodecRun> runs;
  const size_t total = seeds.size() * options.codecs.size();
  for (uint64_t seed : seeds) {
    for (size_t entry = 0; entry < options.codecs.size(); ++entry) {
      const std::string& codec = options.codecs[entry];
      SimConfig c = base;
      c.seed = seed;
      if (entry == 0) c.downlink = "full";  // the baseline: bf16 both ways
      const std::string bad = apply_entry(codec, &c);
      if (!bad.empty()) {
        err << "edgefl sim: --compare entry '" << codec << "': " << bad << "\n";
        return 2;
      }
      c.json_path = options.report_dir + "/" + sanitize_file_name(codec) +
                    (seeds.size() > 1 ? "-seed" + std::to_string(seed) : std::string()) + ".jsonl";
      CodecRun run;
      run.codec = codec;
      run.seed = seed;
      std::string error;
      if (options.reuse && read_jsonl(c.json_path, &run.records, &error) && run.records.size() == c.rounds) {
        if (!base.quiet) err << "edgefl sim: --compare reuses " << c.json_path << "\n";
      } else {
        if (!base.quiet) {
          err << "edgefl sim: --compare run " << runs.size() + 1 << "/" << total << ": " << codec << ", seed "
              << seed << "\n";
        }
        if (int code = run_sim(c, &run.records, err); code != 0) return code;
      }
      runs.push_back(std::move(run));
    }
  }
  std::string error;
  ReportSettings settings;
  settings.target_acc = options.target_acc;
  settings.description = describe(base);
  if (!write_report(options.report_dir, runs, settings, out, &error)) {
    err << "edgefl sim: " << error << "\n";
    return 1;
  }
  return 0;
}

bool make_real_update(const std::string& model, size_t round, std::vector<float>* update,
                      std::string* error) {
  SimConfig c;
  c.model = model;
  c.downlink = "full";  // bf16 both ways, as documented
  c.rounds = round;
  c.eval_every = round + 1;  // evaluate once, at the end
  c.eval_samples = 1000;
  c.quiet = true;
  c.capture_update = update;
  c.capture_round = round;
  // The README's end-to-end setting (edgefl sim --epochs 2 --lr 0.02: 100 clients, Dirichlet 0.5,
  // 10 per round), so that the update has the sparsity of the updates codecs meet there.
  c.train.local_epochs = 2;
  c.train.learning_rate = 0.02f;
  update->clear();
  std::vector<RoundRecord> records;
  std::ostringstream log;
  if (run_sim(c, &records, log) != 0 || update->empty()) {
    *error = "could not train a real update: " + log.str();
    return false;
  }
  return true;
}

std::string describe(const SimConfig& c) {
  std::ostringstream o;
  o << "model " << c.model << ", " << c.clients << " clients (" << c.partition << "), " << c.per_round
    << " per round, " << c.rounds << " rounds, batch " << c.train.batch_size << ", " << c.train.local_epochs
    << " local epoch(s), lr " << c.train.learning_rate << ", momentum " << c.train.momentum << ", server "
    << c.server_optimizer << ", downlink " << c.downlink << ", error feedback " << c.error_feedback
    << ", link " << c.uplink_mbps << " Mbit/s up / " << c.downlink_mbps << " Mbit/s down / " << c.rtt_ms
    << " ms RTT";
  return o.str();
}

namespace {

const char kSimUsage[] =
    "usage: edgefl sim [options]\n"
    "\n"
    "Federated training of simulated clients on Fashion-MNIST, measured end to end.\n"
    "\n"
    "  --clients N          simulated devices (100)\n"
    "  --per-round K        clients sampled per round (10)\n"
    "  --rounds R           rounds (50)\n"
    "  --model SPEC         cnn | cnn:C1-C2-H | mlp:784-H...-10 (cnn)\n"
    "  --partition SPEC     iid | dirichlet:ALPHA | shards:K (dirichlet:0.5)\n"
    "  --codec SPEC         uplink codec (bf16)\n"
    "  --compare LIST       ';'-separated runs 'UPLINK[@DOWNLINK][ --option value ...]', the same\n"
    "                       seeds for each (the first is the baseline); options of one run such as\n"
    "                       --epochs, --server-opt or --rounds apply to that run only\n"
    "  --seeds LIST         ','-separated seeds for --compare: every run once per seed (--seed)\n"
    "  --reuse              --compare: take a run from its JSONL in --report when it is complete\n"
    "  --report DIR         where --compare writes report.md, the plots and the JSONL (sim-report)\n"
    "  --target-acc A       accuracy for bytes/time-to-target (default: baseline final - 0.005)\n"
    "  --downlink SPEC      full: the whole bf16 model every round; or the codec of the patches that\n"
    "                       move the clients' public model (round/downlink.h) (sparq:0.02, as\n"
    "                       edgefl-server; --compare's first entry: full unless it says '@')\n"
    "  --ef MODE            error feedback: none | fp32 | bf16 | auto (auto: fp32 for biased codecs)\n"
    "  --server-opt SPEC    fedavg[:lr=X] | fedavgm:lr=X,momentum=M | fedadam:lr=X,b1=,b2=,tau= (fedavg)\n"
    "  --secure-aggregation on|off  SecAgg+ over the codec's integer codes (q<b>:shared=STEP[,clip],\n"
    "                       optionally after randk:F, or Count Sketch cells, cs): the server sees only\n"
    "                       each round's sum and averages uniformly (off)\n"
    "  --secagg-cell-bound B   cs under --secure-aggregation: devices clip cells to +-B (2047)\n"
    "  --secagg-dropout F   --secure-aggregation: this fraction of each round's devices drops after\n"
    "                       sharing its keys, before masking (0)\n"
    "  --dp-clip C --dp-noise Z [--dp-delta D]   distributed DP under --secure-aggregation: devices clip\n"
    "                       updates to L2 <= C and add discrete Gaussian noise so that the sum carries\n"
    "                       Z x the sensitivity; epsilon at D (1e-5) over the rounds in the JSON\n"
    "  --lr X --momentum M --weight-decay W --prox-mu MU --batch B --epochs E   local SGD (0.05 0.9 0 0 32 "
    "1)\n"
    "  --uplink-mbps X --downlink-mbps Y --rtt-ms Z   link model (1 10 50)\n"
    "  --compute-scale F    device compute time = this machine's x F (1)\n"
    "  --threads T          worker threads (cores)\n"
    "  --eval-every R       evaluate every R rounds (1); --eval-samples S (all 10000)\n"
    "  --seed S             (1)\n"
    "  --json FILE          one JSON line per round\n"
    "  --save-update FILE   write the first client's round-1 update (float32 .npy) for edgefl bench\n"
    "  --data DIR           Fashion-MNIST IDX files (/usr/share/datasets/fashion-mnist)\n"
    "  --quiet              no progress lines\n";

bool to_size(const std::string& s, size_t* out) {
  if (s.empty() || s.size() > 12) return false;
  size_t v = 0;
  for (char ch : s) {
    if (ch < '0' || ch > '9') return false;
    v = v * 10 + size_t(ch - '0');
  }
  *out = v;
  return true;
}

bool to_double(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  const double v = strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

// One `edgefl sim` option with its value into *c. 1: a bad value; 2: not an option of a run.
int set_sim_option(const std::string& arg, const std::string& v, SimConfig* c) {
  double d = 0;
  size_t z = 0;
  bool ok = true;
  if (arg == "--clients")
    ok = to_size(v, &c->clients);
  else if (arg == "--per-round")
    ok = to_size(v, &c->per_round);
  else if (arg == "--rounds")
    ok = to_size(v, &c->rounds);
  else if (arg == "--model")
    c->model = v;
  else if (arg == "--partition")
    c->partition = v;
  else if (arg == "--codec")
    c->codec = v;
  else if (arg == "--downlink")
    c->downlink = v;
  else if (arg == "--ef")
    c->error_feedback = v;
  else if (arg == "--server-opt")
    c->server_optimizer = v;
  else if (arg == "--secure-aggregation")
    ok = (v == "on" || v == "off") && (c->secure_aggregation = v == "on", true);
  else if (arg == "--dp-clip")
    ok = to_double(v, &c->dp_clip) && c->dp_clip > 0;
  else if (arg == "--dp-noise")
    ok = to_double(v, &c->dp_noise) && c->dp_noise > 0;
  else if (arg == "--dp-delta")
    ok = to_double(v, &c->dp_delta) && c->dp_delta > 0 && c->dp_delta < 1;
  else if (arg == "--secagg-dropout")
    ok = to_double(v, &c->secagg_dropout) && c->secagg_dropout >= 0 && c->secagg_dropout < 0.5;
  else if (arg == "--secagg-cell-bound")
    ok = to_double(v, &d) && d >= 1 && d <= double(1u << 24) && (c->secagg_cell_bound = uint32_t(d), true);
  else if (arg == "--lr")
    ok = to_double(v, &d) && d > 0 && (c->train.learning_rate = float(d), true);
  else if (arg == "--momentum")
    ok = to_double(v, &d) && d >= 0 && d < 1 && (c->train.momentum = float(d), true);
  else if (arg == "--weight-decay")
    ok = to_double(v, &d) && d >= 0 && (c->train.weight_decay = float(d), true);
  else if (arg == "--prox-mu")
    ok = to_double(v, &d) && d >= 0 && (c->train.prox_mu = float(d), true);
  else if (arg == "--batch")
    ok = to_size(v, &z) && z >= 1 && z <= 65536 && (c->train.batch_size = uint32_t(z), true);
  else if (arg == "--epochs")
    ok = to_size(v, &z) && z >= 1 && z <= 1000 && (c->train.local_epochs = uint32_t(z), true);
  else if (arg == "--uplink-mbps")
    ok = to_double(v, &c->uplink_mbps) && c->uplink_mbps > 0;
  else if (arg == "--downlink-mbps")
    ok = to_double(v, &c->downlink_mbps) && c->downlink_mbps > 0;
  else if (arg == "--rtt-ms")
    ok = to_double(v, &c->rtt_ms) && c->rtt_ms >= 0;
  else if (arg == "--compute-scale")
    ok = to_double(v, &c->compute_scale) && c->compute_scale >= 0;
  else if (arg == "--threads")
    ok = to_size(v, &c->threads);
  else if (arg == "--eval-every")
    ok = to_size(v, &c->eval_every) && c->eval_every >= 1;
  else if (arg == "--eval-samples")
    ok = to_size(v, &c->eval_samples);
  else if (arg == "--seed")
    ok = to_size(v, &z) && (c->seed = z, true);
  else if (arg == "--json")
    c->json_path = v;
  else if (arg == "--save-update")
    c->save_update_path = v;
  else if (arg == "--data")
    c->data_dir = v;
  else
    return 2;
  return ok ? 0 : 1;
}

}  // namespace

int run_sim_command(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  SimConfig c;
  std::string compare, seed_list;
  CompareOptions compare_options;
  auto usage = [&](const std::string& what) {
    err << "edgefl sim: " << what << "\n" << kSimUsage;
    return 2;
  };
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      out << kSimUsage << "\n" << kCodecSpecHelp;
      return 0;
    }
    if (arg == "--quiet" || arg == "--reuse") {
      (arg == "--quiet" ? c.quiet : compare_options.reuse) = true;
      continue;
    }
    if (i + 1 >= argc) return usage("missing value after " + arg);
    const std::string v = argv[++i];
    bool ok = true;
    if (arg == "--compare") {
      compare = v;
    } else if (arg == "--report") {
      compare_options.report_dir = v;
    } else if (arg == "--seeds") {
      seed_list = v;
    } else if (arg == "--target-acc") {
      ok = to_double(v, &compare_options.target_acc) && compare_options.target_acc > 0 &&
           compare_options.target_acc <= 1;
    } else {
      const int set = set_sim_option(arg, v, &c);
      if (set == 2) return usage("unknown option " + arg);
      ok = set == 0;
    }
    if (!ok) return usage("invalid value '" + v + "' for " + arg);
  }
  if (!compare.empty()) {
    std::string item;
    std::istringstream list(compare);
    while (std::getline(list, item, ';')) {
      if (!item.empty()) compare_options.codecs.push_back(item);
    }
    std::istringstream seeds(seed_list);
    while (std::getline(seeds, item, ',')) {
      size_t seed = 0;
      if (!to_size(item, &seed)) return usage("invalid seed '" + item + "' in --seeds");
      compare_options.seeds.push_back(seed);
    }
    if (!make_directories(compare_options.report_dir)) {
      err << "edgefl sim: cannot create " << compare_options.report_dir << "\n";
      return 1;
    }
    return run_compare(c, compare_options, out, err);
  }
  std::vector<RoundRecord> records;
  return run_sim(c, &records, err);
}

}  // namespace cli
}  // namespace edgefl
