#include "rounds.h"

#include <mbedtls/ctr_drbg.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>

#include "core/rng.h"
#include "log.h"
#include "model_files.h"
#include "round/seeds.h"
#include "safetensors.h"
#include "tls/digest.h"

namespace edgefl::server {
namespace {

// The durable list of rounds whose updates the next round counts: "<base model version> <round
// id> ..." (RoundManager::record_carried_rounds).
constexpr const char* kCarriedRoundsKey = "carried_rounds";
// The model version whose commit counted the updates of an abandoned round.
std::string counted_key(uint64_t round_id) {
  return "round." + std::to_string(round_id) + ".counted_in";
}
constexpr uint64_t kRoundsKept = 64;  // closed rounds remembered for straggler / late answers
constexpr uint64_t kMaxStoredId = (uint64_t{1} << 63) - 1;  // storage.h: ids are below 2^63
constexpr int64_t kCloseRetryMaxMs = 10000;                 // backoff cap of a failing round close

wire::RejectReason reject_reason_of(const UpdateCheck& check) {
  switch (check.verdict) {
    case UpdateVerdict::kAccepted: return wire::RejectReason::kNone;
    case UpdateVerdict::kInvalidEncoding: return wire::RejectReason::kInvalidEncoding;
    case UpdateVerdict::kNonFinite: return wire::RejectReason::kNonFinite;
    case UpdateVerdict::kModelOverflow: return wire::RejectReason::kModelOverflow;
    case UpdateVerdict::kNormTooLarge: return wire::RejectReason::kNormTooLarge;
  }
  return wire::RejectReason::kInvalidEncoding;
}

// The detail of a rejection, for the log.
std::string describe_check(const UpdateCheck& check, double norm_bound) {
  char text[160];
  switch (check.verdict) {
    case UpdateVerdict::kInvalidEncoding:
      if (check.status == Status::kInvalidArgument) {
        return "the encoding's seed is not the codec seed of this device's offer (round/seeds.h)";
      }
      return status_name(check.status);
    case UpdateVerdict::kNonFinite:
      return "coordinate " + std::to_string(check.coordinate) + " is not finite";
    case UpdateVerdict::kModelOverflow:
      return "the model plus this update is not finite at coordinate " + std::to_string(check.coordinate);
    case UpdateVerdict::kNormTooLarge:
      std::snprintf(text, sizeof text, "L2 norm %.6g above the bound %.6g", check.norm, norm_bound);
      return text;
    case UpdateVerdict::kAccepted: break;
  }
  return "accepted";
}

// Milliseconds before the next attempt after `failures` failed ones (>= 1) of a round close or
// open: 0.2 s, doubling, at most kCloseRetryMaxMs.
int64_t retry_backoff_ms(uint32_t failures) {
  return std::min<int64_t>(kCloseRetryMaxMs, int64_t{100} << std::min<uint32_t>(failures, 7));
}

template <size_t N>
std::string hex(const std::array<uint8_t, N>& bytes) {
  return tls::to_hex({bytes.data(), N});
}

// A 32-byte round nonce from the OS's CSPRNG (std::random_device is getrandom() on glibc).
std::vector<uint8_t> fresh_nonce() {
  std::random_device rd;
  std::vector<uint8_t> nonce(wire::kRoundNonceLongBytes);
  for (size_t i = 0; i < nonce.size(); i += 4) {
    const uint32_t r = rd();
    std::memcpy(nonce.data() + i, &r, 4);
  }
  if (std::all_of(nonce.begin(), nonce.end(), [](uint8_t b) { return b == 0; })) nonce[0] = 1;
  return nonce;
}

std::string model_file_name(uint64_t version) {
  char name[48];
  std::snprintf(name, sizeof name, "model-v%06llu.safetensors", static_cast<unsigned long long>(version));
  return name;
}

std::string optimizer_file_name(uint64_t version) {
  char name[48];
  std::snprintf(name, sizeof name, "optimizer-v%06llu.bin", static_cast<unsigned long long>(version));
  return name;
}

}  // namespace

RoundManager::RoundManager(RoundOptions options, Storage* storage, Metrics* metrics)
    : options_(std::move(options)), storage_(storage), metrics_(metrics) {}

RoundManager::~RoundManager() = default;

Status RoundManager::check_storage(std::string* error) {
  uint64_t last = 0;
  return storage_->last_round_id(&last, error);
}

void RoundManager::fatal(const std::string& what, const std::string& error) {
  // A storage or file failure after start(): logged here; the caller answers kInternal (the device
  // tries again later) and changes nothing it could not write.
  log_error("storage_failure").kv("what", what).kv("error", error);
}

Status RoundManager::resolve_model(std::string* error) {
  if (!options_.model_spec.empty()) {
    if (parse_model_spec(options_.model_spec.c_str(), &spec_) != Status::kOk) {
      *error = "invalid model spec '" + options_.model_spec + "'";
      return Status::kInvalidSpec;
    }
    EDGEFL_RETURN_IF_ERROR(tensor_table_from_spec(spec_, &tensors_));
    char text[wire::kMaxModelSpecChars + 1];
    format_model_spec(spec_, text, sizeof text);
    spec_text_ = text;
  } else if (options_.initial_model.empty()) {
    *error = "no model: give a built-in model spec (--model) or an initial model file (--initial-model)";
    return Status::kInvalidArgument;
  }
  if (options_.initial_model.empty()) return Status::kOk;

  std::vector<uint8_t> file;
  EDGEFL_RETURN_IF_ERROR(read_file(options_.initial_model, uint64_t{1} << 33, &file, error));
  SafetensorsModel model;
  if (const Status s = read_safetensors({file.data(), file.size()}, &model, error); s != Status::kOk) {
    *error = options_.initial_model + ": " + *error;
    return s;
  }
  // A file written by edgefl for a built-in model names it: the federation is that built-in model.
  const auto named = model.metadata.find("edgefl.model_spec");
  if (options_.model_spec.empty() && named != model.metadata.end()) {
    if (parse_model_spec(named->second.c_str(), &spec_) != Status::kOk) {
      *error = options_.initial_model + ": its edgefl.model_spec '" + named->second + "' is not a model spec";
      return Status::kInvalidSpec;
    }
    EDGEFL_RETURN_IF_ERROR(tensor_table_from_spec(spec_, &tensors_));
    char text[wire::kMaxModelSpecChars + 1];
    format_model_spec(spec_, text, sizeof text);
    spec_text_ = text;
  }
  if (!spec_text_.empty()) {
    // The file must hold the built-in model, by name and shape, in any order and dtype.
    if (const Status s =
            decode_safetensors({file.data(), file.size()}, tensors_, &initial_values_, nullptr, error);
        s != Status::kOk) {
      *error = options_.initial_model + " is not a '" + spec_text_ + "' model: " + *error;
      return s;
    }
  } else {
    builtin_ = false;
    tensors_ = std::move(model.tensors);
    initial_values_ = std::move(model.values);
  }
  for (const auto& [key, value] : model.metadata) {
    if (key.rfind("edgefl.", 0) != 0 && key != "format") user_metadata_.emplace_back(key, value);
  }
  return Status::kOk;
}

Status RoundManager::start(int64_t now_ms, std::string* error) {
  EDGEFL_RETURN_IF_ERROR(resolve_model(error));
  if (parse_codec_spec(options_.uplink_codec.c_str(), &codec_) != Status::kOk) {
    *error = "invalid uplink codec '" + options_.uplink_codec + "'";
    return Status::kInvalidSpec;
  }
  if (parse_codec_spec(options_.downlink_codec.c_str(), &downlink_) != Status::kOk) {
    *error = "invalid downlink codec '" + options_.downlink_codec + "'";
    return Status::kInvalidSpec;
  }
  if (parse_server_optimizer_spec(options_.optimizer.c_str(), &optimizer_spec_) != Status::kOk) {
    *error = "invalid server optimizer '" + options_.optimizer + "'";
    return Status::kInvalidSpec;
  }
  if (parse_robust_spec(options_.aggregation.c_str(), &robust_spec_) != Status::kOk) {
    *error = "invalid aggregation rule '" + options_.aggregation + "' (mean, median, trimmed-mean[:beta=B])";
    return Status::kInvalidSpec;
  }
  wire::DecodeDetail detail;
  if (wire::validate(wire::Message{wire::RetryLater{options_.retry_after_ms, options_.retry_window_ms,
                                                    wire::RetryReason::kNoRound}},
                     &detail) != Status::kOk ||
      options_.cohort == 0 || options_.over_selection < 1.0 || options_.over_selection > 10.0 ||
      options_.deadline_ms == 0 || options_.deadline_ms > wire::kMaxDeadlineMs ||
      options_.max_chunk_bytes == 0 || options_.max_chunk_bytes > wire::kMaxChunkBytes ||
      options_.max_samples_per_update == 0) {
    *error =
        "round options out of range (cohort >= 1, 1 <= over-selection <= 10, deadline, retry, chunk size)";
    return Status::kInvalidArgument;
  }
  n_ = size_t(tensor_table_parameters(tensors_));
  selection_rng_ = options_.seed * 0x2545F4914F6CDD1Dull;
  if (!(options_.selection_probability > 0.0 && options_.selection_probability <= 1.0)) {
    *error = "selection probability must be in (0, 1]";
    return Status::kInvalidArgument;
  }
  offers_per_round_ = static_cast<uint32_t>(std::ceil(options_.cohort * options_.over_selection - 1e-9));
  min_quorum_ = options_.min_quorum == 0 ? options_.cohort : std::min(options_.min_quorum, options_.cohort);
  max_upload_bytes_ = std::max<uint64_t>(encoded_bound(codec_, n_), 1);
  CodecSpec bf16{};
  if (parse_codec_spec("bf16", &bf16) == Status::kOk) bf16_update_bytes_ = encoded_bound(bf16, n_);
  // Any codec the device picks must also fit (a device may fall back to a dense encoding).
  CodecSpec fp32{};
  if (parse_codec_spec("fp32", &fp32) == Status::kOk)
    max_upload_bytes_ = std::max<uint64_t>(max_upload_bytes_, encoded_bound(fp32, n_));

  shared_ = !options_.aggregator_id.empty();
  if (shared_) {
    if (options_.aggregator_id.size() > 64 ||
        options_.aggregator_id.find_first_not_of(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != std::string::npos) {
      *error = "aggregator id '" + options_.aggregator_id + "': 1 to 64 of [A-Za-z0-9._-]";
      return Status::kInvalidArgument;
    }
    if (options_.secure_aggregation.enabled) {
      *error = "several aggregators cannot run secure rounds (a SecAgg+ round's state lives in one server)";
      return Status::kInvalidArgument;
    }
    if (options_.coordinator_lease_ms < 100 || options_.follow_interval_ms == 0 ||
        options_.follow_interval_ms > options_.coordinator_lease_ms) {
      *error = "coordinator lease >= 100 ms and a follow interval in (0, lease]";
      return Status::kInvalidArgument;
    }
  }
  const SecureAggregationOptions& sa = options_.secure_aggregation;
  if ((sa.dp_clip > 0) != (sa.dp_noise > 0) || ((sa.dp_clip > 0) && !sa.enabled) ||
      !std::isfinite(sa.dp_clip) || !std::isfinite(sa.dp_noise)) {
    *error = "differential privacy needs secure aggregation, a clip and a noise multiplier (both > 0)";
    return Status::kInvalidArgument;
  }
  if (sa.enabled) {
    if (robust_spec_.rule != RobustRule::kMean) {
      *error =
          "secure aggregation sums the updates: --aggregation must be mean (the server never sees one "
          "update)";
      return Status::kInvalidArgument;
    }
    if (offers_per_round_ < 3) {
      *error = "secure aggregation needs at least 3 devices per round (cohort x over-selection)";
      return Status::kInvalidArgument;
    }
    // The whole configuration, checked once now rather than at every round's opening.
    EncodedInfo like;
    EDGEFL_RETURN_IF_ERROR(secure_like(1, &like, error));
    SecureRound probe;
    const std::vector<uint8_t> nonce(wire::kRoundNonceLongBytes, 1);
    EDGEFL_RETURN_IF_ERROR(probe.start(options_.secure_aggregation, storage_, 1, nonce, offers_per_round_,
                                       options_.cohort, like, 0, error));
    max_upload_bytes_ = std::max<uint64_t>(max_upload_bytes_, probe.masked_bytes());
    // The privacy spent by earlier rounds of this state directory.
    uint64_t last = 0;
    EDGEFL_RETURN_IF_ERROR(storage_->last_round_id(&last, error));
    for (uint64_t r = 1; r <= last; ++r) {
      std::optional<std::string> spent;
      EDGEFL_RETURN_IF_ERROR(storage_->get_setting("secagg.dp.round." + std::to_string(r), &spent, error));
      double l2 = 0, dim = 0, contributors = 0, variance = 0;
      if (spent && std::sscanf(spent->c_str(), "%lf %lf %lf %lf", &l2, &dim, &contributors, &variance) == 4) {
        accountant_.add_round(l2, size_t(dim), uint32_t(contributors), uint64_t(variance));
      }
    }
  }

  // One state directory, one model: refuse to reuse it for another spec.
  // Whatever the start refuses, it refuses before the state directory records anything.
  evaluator_ = options_.evaluator;
  if (evaluator_ == nullptr && !options_.eval_data_dir.empty()) {
    std::unique_ptr<ModelEvaluator> built_in;
    EDGEFL_RETURN_IF_ERROR(make_fashion_mnist_evaluator(builtin_ ? spec_text_ : std::string("(tensors)"),
                                                        options_.eval_data_dir, options_.eval_samples,
                                                        &built_in, error));
    evaluator_ = std::move(built_in);
  }
  if (evaluator_ != nullptr) {
    EDGEFL_RETURN_IF_ERROR(evaluator_->check_model(tensors_, spec_text_, error));
    log_info("evaluation").kv("what", evaluator_->describe());
  }
  // A model of its own is known by the SHA-256 of its tensor table (names, dtypes, shapes).
  std::optional<std::string> stored_spec;
  EDGEFL_RETURN_IF_ERROR(storage_->get_setting("model_spec", &stored_spec, error));
  std::string spec_text = spec_text_;
  if (!builtin_) {
    const std::string table = describe_tensor_table(tensors_, SIZE_MAX);
    const tls::Sha256Digest digest =
        tls::sha256({reinterpret_cast<const uint8_t*>(table.data()), table.size()});
    static const char* const kHex = "0123456789abcdef";
    spec_text = "tensors:";
    for (uint8_t b : digest) spec_text += std::string{kHex[b >> 4], kHex[b & 15]};
  }
  if (stored_spec && *stored_spec != spec_text) {
    *error = "the state directory holds a federation of model '" + *stored_spec + "', not '" + spec_text +
             "': use another --state-dir";
    return Status::kInvalidArgument;
  }
  if (!stored_spec) EDGEFL_RETURN_IF_ERROR(storage_->put_setting("model_spec", spec_text, error));

  aggregate_memory_.resize(StreamingAggregator::storage_bytes(n_));
  EDGEFL_RETURN_IF_ERROR(aggregate_.init({aggregate_memory_.data(), aggregate_memory_.size()}, n_));
  optimizer_memory_.assign(ServerOptimizer::state_bytes(optimizer_spec_.kind, n_), 0);
  EDGEFL_RETURN_IF_ERROR(
      optimizer_.init(optimizer_spec_, {optimizer_memory_.data(), optimizer_memory_.size()}, n_));
  candidate_optimizer_memory_.assign(optimizer_memory_.size(), 0);
  EDGEFL_RETURN_IF_ERROR(candidate_optimizer_.init(
      optimizer_spec_, {candidate_optimizer_memory_.data(), candidate_optimizer_memory_.size()}, n_));
  if (!(options_.max_update_norm >= 0) || !(options_.update_norm_factor > 0) ||
      !std::isfinite(options_.max_update_norm) || !std::isfinite(options_.update_norm_factor)) {
    *error = "the update norm bound must be finite: max_update_norm >= 0, update_norm_factor > 0";
    return Status::kInvalidArgument;
  }
  scratch_.resize(n_);
  mean_.resize(n_);
  candidate_.resize(n_);

  files_dir_ = options_.state_dir;
  if (shared_) return start_shared(now_ms, error);
  size_t stale = 0;  // temp files of a write a crash interrupted
  EDGEFL_RETURN_IF_ERROR(remove_temp_files(options_.state_dir, &stale, error));
  if (stale != 0) log_info("stale_temp_files_removed").kv("count", uint64_t{stale});
  EDGEFL_RETURN_IF_ERROR(load_or_create_model(now_ms, error));
  EDGEFL_RETURN_IF_ERROR(recover_open_round(now_ms, error));
  if (!open_ && !finished_) EDGEFL_RETURN_IF_ERROR(open_next_round(now_ms, error));
  return Status::kOk;
}

Status RoundManager::load_or_create_model(int64_t now_ms, std::string* error) {
  std::optional<ModelRecord> latest;
  EDGEFL_RETURN_IF_ERROR(storage_->latest_model(&latest, error));
  // Whether version 1 is the seeded initial model, fixed when the state directory is created.
  std::optional<std::string> seed_setting;
  EDGEFL_RETURN_IF_ERROR(storage_->get_setting("initial_model_seed", &seed_setting, error));
  if (!latest && !seed_setting) {
    // A model from a file is downloaded whole by a new device: no seeded version 1.
    const std::string seed = options_.initial_model.empty() ? std::to_string(options_.seed) : "0";
    EDGEFL_RETURN_IF_ERROR(storage_->put_setting("initial_model_seed", seed, error));
    seed_setting = seed;
  }
  initial_model_seed_ = seed_setting ? std::strtoull(seed_setting->c_str(), nullptr, 10) : 0;
  EDGEFL_RETURN_IF_ERROR(public_.init(downlink_, n_, initial_model_seed_ != 0, error));
  if (!latest) {
    if (!initial_values_.empty()) {
      global_ = initial_values_;  // kept until version 1 is written: a failed write is tried again
    } else {
      global_.assign(n_, 0.0f);
      init_parameters(spec_, options_.seed, {global_.data(), n_});
    }
    // Versions count from 1 (the initial model); round 0 stands for "no round".
    model_version_ = 1;
    model_dir_ = files_dir_;
    EDGEFL_RETURN_IF_ERROR(public_.reset({global_.data(), n_}, 1, error));
    EDGEFL_RETURN_IF_ERROR(write_model(
        {global_.data(), n_}, {optimizer_memory_.data(), optimizer_memory_.size()}, 1, 0, now_ms, error));
    std::vector<float>().swap(initial_values_);
    log_info("model_created")
        .kv("version", uint64_t{1})
        .kv("model", builtin_ ? spec_text_ : std::string("tensors"))
        .kv("tensors", uint64_t{tensors_.size()})
        .kv("parameters", uint64_t{n_})
        .kv("from", options_.initial_model.empty() ? std::string("seed") : options_.initial_model);
  } else {
    EDGEFL_RETURN_IF_ERROR(load_model(*latest, error));
    std::vector<float>().swap(initial_values_);  // the state's own version 1 stands
  }
  metrics_->model_version.store(model_version_);
  return Status::kOk;
}

Status RoundManager::load_model(const ModelRecord& model, std::string* error) {
  // The model's files sit together: state_dir, or the directory its path names.
  const size_t slash = model.path.rfind('/');
  const std::string dir = slash == std::string::npos ? options_.state_dir
                                                     : options_.state_dir + "/" + model.path.substr(0, slash);
  std::vector<uint8_t> file;
  const std::string path = options_.state_dir + "/" + model.path;
  EDGEFL_RETURN_IF_ERROR(read_file(path, uint64_t{1} << 33, &file, error));
  const tls::Sha256Digest digest = tls::sha256({file.data(), file.size()});
  if (std::memcmp(digest.data(), model.digest.data(), digest.size()) != 0) {
    *error = "model file " + path + " does not match the digest recorded for version " +
             std::to_string(model.version) + " (corrupted or replaced)";
    return Status::kChecksumMismatch;
  }
  // Read whole into its own buffers first: a failure changes nothing held.
  std::map<std::string, std::string> metadata;
  std::vector<float> values;
  EDGEFL_RETURN_IF_ERROR(decode_safetensors({file.data(), file.size()}, tensors_, &values, &metadata, error));
  std::vector<uint8_t> state;
  if (!optimizer_memory_.empty()) {
    const std::string opt_path = dir + "/" + optimizer_file_name(model.version);
    const bool read = read_file(opt_path, optimizer_memory_.size(), &state, error) == Status::kOk &&
                      state.size() == optimizer_memory_.size();
    if (!read) state.clear();
    if (!read && model.version != 1) {  // version 1 may start from the optimizer's initial state
      *error = "optimizer state " + opt_path + " is missing or has the wrong size";
      return Status::kIoError;
    }
  }
  EDGEFL_RETURN_IF_ERROR(public_.load(dir, model.version, {values.data(), n_}, error));
  global_ = std::move(values);
  if (!state.empty()) std::memcpy(optimizer_memory_.data(), state.data(), state.size());
  model_version_ = model.version;
  // The user's metadata as the latest file carries it (the initial file may be gone).
  user_metadata_.clear();
  for (const auto& [key, value] : metadata) {
    if (key.rfind("edgefl.", 0) != 0 && key != "format") user_metadata_.emplace_back(key, value);
  }
  model_dir_ = dir;
  log_info("model_loaded").kv("version", model_version_).kv("file", model.path);
  metrics_->model_version.store(model_version_);
  return Status::kOk;
}

Status RoundManager::write_model(Span<const float> model, Span<const uint8_t> optimizer_state,
                                 uint64_t version, uint64_t round_id, int64_t now_ms, std::string* error) {
  std::vector<uint8_t> file;
  std::vector<std::pair<std::string, std::string>> metadata = user_metadata_;
  metadata.emplace_back("edgefl.model_version", std::to_string(version));
  metadata.emplace_back("edgefl.round", std::to_string(round_id));
  metadata.emplace_back("edgefl.optimizer", options_.optimizer);
  if (builtin_) metadata.emplace_back("edgefl.model_spec", spec_text_);
  // What a user must do to an input to use the model as it was trained and evaluated.
  const std::string preprocessing = evaluator_ != nullptr ? evaluator_->preprocessing()
                                    : builtin_            ? fashion_mnist_preprocessing(spec_text_)
                                                          : std::string();
  if (!preprocessing.empty()) metadata.emplace_back("edgefl.preprocessing", preprocessing);
  EDGEFL_RETURN_IF_ERROR(encode_safetensors(tensors_, model, metadata, &file, error));
  if (optimizer_state.size() != 0) {
    EDGEFL_RETURN_IF_ERROR(
        write_file_atomic(files_dir_, optimizer_file_name(version), optimizer_state, error));
  }
  // The public model's files (and the patch that made it) before the version is recorded.
  EDGEFL_RETURN_IF_ERROR(version == public_.version() ? public_.write_current(files_dir_, error)
                                                      : public_.write_candidate(files_dir_, version, error));
  const std::string name = model_file_name(version);
  EDGEFL_RETURN_IF_ERROR(write_file_atomic(files_dir_, name, {file.data(), file.size()}, error));
  // The newest model also under a fixed name, for tools (PyTorch, Hugging Face) to pick up.
  EDGEFL_RETURN_IF_ERROR(
      write_file_atomic(files_dir_, "global.safetensors", {file.data(), file.size()}, error));
  ModelRecord record;
  record.version = version;
  record.round_id = round_id;
  record.path = files_prefix_.empty() ? name : files_prefix_ + "/" + name;
  const tls::Sha256Digest digest = tls::sha256({file.data(), file.size()});
  std::memcpy(record.digest.data(), digest.data(), digest.size());
  record.bytes = file.size();
  record.created_unix_ms = now_ms;
  return storage_->record_model(record, error);
}

Status RoundManager::recover_open_round(int64_t now_ms, std::string* error) {
  uint64_t last = 0;
  EDGEFL_RETURN_IF_ERROR(storage_->last_round_id(&last, error));
  std::optional<RoundRecord> open;
  EDGEFL_RETURN_IF_ERROR(storage_->open_round(&open, error));
  // Rounds already ended count towards --rounds.
  rounds_ended_ = static_cast<uint32_t>(last - (open ? 1 : 0));
  if (!open) {
    if (options_.rounds != 0 && rounds_ended_ >= options_.rounds) finished_ = true;
    return Status::kOk;
  }
  std::optional<ModelRecord> latest;
  EDGEFL_RETURN_IF_ERROR(storage_->latest_model(&latest, error));
  if (latest && latest->round_id == open->round_id) {
    // The crash came between writing the round's model and marking the round committed.
    OpenRound finishing;
    finishing.record = *open;
    EDGEFL_RETURN_IF_ERROR(find_carried_rounds(&finishing, error));
    EDGEFL_RETURN_IF_ERROR(record_counted_rounds(finishing.carried_rounds, latest->version, error));
    EDGEFL_RETURN_IF_ERROR(
        storage_->close_round(open->round_id, RoundState::kCommitted, latest->version, now_ms, error));
    log_info("round_commit_completed").kv("round", open->round_id).kv("version", latest->version);
    ++rounds_ended_;
    if (options_.rounds != 0 && rounds_ended_ >= options_.rounds) finished_ = true;
    return Status::kOk;
  }
  if (open->base_model_version != model_version_) {
    *error = "open round " + std::to_string(open->round_id) + " trains model version " +
             std::to_string(open->base_model_version) + " but the latest model is version " +
             std::to_string(model_version_);
    return Status::kCorruptPayload;
  }
  // A round keeps the kind it was opened with (a secure round logs events from its first offer;
  // a plain one never does): a restart that would read masked vectors as updates, or updates as
  // masked vectors, is refused before anything is read.
  bool has_events = false;
  const Status seen = storage_->for_each_round_event(
      open->round_id,
      [&](const RoundEvent&) {
        has_events = true;
        return Status::kCancelled;  // one is enough
      },
      error);
  if (seen != Status::kOk && seen != Status::kCancelled) return seen;
  uint64_t in_ledger = 0;
  EDGEFL_RETURN_IF_ERROR(storage_->count_updates(open->round_id, &in_ledger, error));
  const bool secure = options_.secure_aggregation.enabled;
  if ((secure && !has_events && in_ledger > 0) || (!secure && has_events)) {
    *error = "open round " + std::to_string(open->round_id) + " was opened " +
             (has_events ? "with" : "without") +
             " secure aggregation: restart with the same --secure-aggregation setting until it ends";
    return Status::kInvalidArgument;
  }
  OpenRound round;
  round.record = *open;
  round.opened_wall_ms = now_ms;
  aggregate_.reset();
  if (secure) {
    // The SecAgg+ log, then the ledger's masked vectors where the masked phase ended.
    EDGEFL_RETURN_IF_ERROR(start_secure_round(*open, error));
    uint32_t masked = 0;
    const Status s = secure_->recover(
        [&](const SecureRound::MaskedVisitor& visit) -> Status {
          return storage_->for_each_update(
              open->round_id,
              [&](const UpdateRecord& u) -> Status {
                EDGEFL_RETURN_IF_ERROR(visit(u.device_id, {u.payload.data(), u.payload.size()}));
                round.contributed.insert(u.device_id);
                round.upload_bytes += u.payload_bytes;
                ++masked;
                return Status::kOk;
              },
              error);
        },
        error);
    if (s != Status::kOk) return s;
    round.accepted = masked;
    // Plain updates the round carries, counted (they join its mean when it commits).
    EDGEFL_RETURN_IF_ERROR(find_carried_rounds(&round, error));
    EDGEFL_RETURN_IF_ERROR(add_carried(&round, {}, error));
    // An index is never taken back: its device may go on where it was, with or without a Hello.
    for (const std::string& device : secure_->devices())
      round.offered[device] = std::numeric_limits<int64_t>::max();
    open_ = std::move(round);
    open_->norm_bound = update_norm_bound();
    metrics_->round_id.store(open->round_id);
    log_info("round_recovered")
        .kv("round", open->round_id)
        .kv("secure_phase", secure_phase_name(secure_->phase()))
        .kv("devices", uint64_t(secure_->assigned()))
        .kv("masked", uint64_t{masked})
        .kv("carried", uint64_t{open_->carried});
    error->clear();
    return Status::kOk;
  }
  EDGEFL_RETURN_IF_ERROR(find_carried_rounds(&round, error));
  EDGEFL_RETURN_IF_ERROR(rebuild_aggregate(&round, error));
  const uint32_t rebuilt = round.accepted + round.carried;
  // Several aggregators: a sealed ledger is final, so its rebuilt sum is the merge the close needs.
  round.ledger_merged = shared_ && open->sealed;
  open_ = std::move(round);
  open_->norm_bound = update_norm_bound();
  metrics_->round_id.store(open->round_id);
  log_info("round_recovered")
      .kv("round", open->round_id)
      .kv("updates", uint64_t{rebuilt})
      .kv("carried", uint64_t{open_->carried})
      .kv("deadline_in_ms", open->deadline_unix_ms - now_ms);
  // A close that fails on I/O here is retried by tick(): the server starts either way. A sealed
  // round (several aggregators) was being closed by a coordinator that is gone: its ledger is
  // final, and it commits if it holds the quorum.
  if (open->sealed || rebuilt >= options_.cohort)
    (void)close_round(rebuilt >= (open->sealed ? min_quorum_ : options_.cohort), now_ms, error);
  error->clear();
  return Status::kOk;
}

Status RoundManager::decode_recorded(const UpdateRecord& u) {
  // As commit() decoded it, the same bits. No seed or norm check: the update was accepted under
  // the rules of its day.
  const UpdateCheck check = check_upload({u.payload.data(), u.payload.size()}, nullptr, HUGE_VAL);
  if (check.status != Status::kOk) return check.status;
  return check.verdict == UpdateVerdict::kAccepted ? Status::kOk : Status::kCorruptPayload;
}

Status RoundManager::listed_carried_rounds(uint64_t base_model_version, std::vector<uint64_t>* ids,
                                           std::string* error) {
  ids->clear();
  std::optional<std::string> listed;
  EDGEFL_RETURN_IF_ERROR(storage_->get_setting(kCarriedRoundsKey, &listed, error));
  if (!listed) return Status::kOk;
  std::istringstream in(*listed);
  uint64_t base = 0, id = 0;
  if (!(in >> base) || base != base_model_version) return Status::kOk;  // a model ago
  while (in >> id) ids->push_back(id);
  return Status::kOk;
}

Status RoundManager::find_carried_rounds(OpenRound* round, std::string* error) {
  round->carried_rounds.clear();
  const uint64_t base = round->record.base_model_version;
  std::vector<uint64_t> listed, ids;
  EDGEFL_RETURN_IF_ERROR(listed_carried_rounds(base, &listed, error));
  for (const uint64_t id : listed) {
    if (id >= round->record.round_id) continue;  // written just before a close that did not happen
    std::optional<RoundRecord> earlier;
    EDGEFL_RETURN_IF_ERROR(storage_->get_round(id, &earlier, error));
    if (earlier && earlier->state == RoundState::kAbandoned && earlier->base_model_version == base)
      ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  // A secure round counts them too: they join its unmasked mean (secure_tick).
  round->carried_rounds = std::move(ids);
  return Status::kOk;
}

Status RoundManager::add_carried(OpenRound* round, const CarriedSinks& to, std::string* error) {
  // The count and the devices change only when every row was read: a rebuild that fails part way
  // (retried later) leaves the round's decisions on the whole count.
  uint32_t carried = 0;
  std::set<std::string> devices;
  for (const uint64_t id : round->carried_rounds) {
    const Status s = storage_->for_each_update(
        id,
        [&](const UpdateRecord& u) -> Status {
          if (u.payload.size() != u.payload_bytes) return Status::kCorruptPayload;  // dropped by a commit
          if (to.weighted != nullptr || to.rows != nullptr || to.sum != nullptr)
            EDGEFL_RETURN_IF_ERROR(decode_recorded(u));
          if (to.rows != nullptr)
            to.rows->insert(to.rows->end(), scratch_.begin(), scratch_.begin() + long(n_));
          if (to.sum != nullptr)
            for (size_t j = 0; j < n_; ++j) (*to.sum)[j] += double(scratch_[j]);
          if (to.weighted != nullptr)
            EDGEFL_RETURN_IF_ERROR(
                to.weighted->add_dense({scratch_.data(), n_}, static_cast<double>(u.sample_count)));
          devices.insert(u.device_id);
          ++carried;
          return Status::kOk;
        },
        error);
    if (s != Status::kOk) {
      if (error->empty())
        *error = "counting the updates of abandoned round " + std::to_string(id) + ": " + status_name(s);
      return s;
    }
  }
  round->carried = carried;
  round->carried_devices = std::move(devices);
  return Status::kOk;
}

Status RoundManager::record_carried_rounds(const OpenRound& round, std::string* error) {
  uint64_t own = 0;
  EDGEFL_RETURN_IF_ERROR(storage_->count_updates(round.record.round_id, &own, error));
  std::vector<uint64_t> ids = round.carried_rounds;
  if (own != 0) ids.push_back(round.record.round_id);
  if (ids.empty()) return Status::kOk;
  std::string value = std::to_string(round.record.base_model_version);
  for (const uint64_t id : ids) {
    value.push_back(' ');
    value.append(std::to_string(id));
  }
  return storage_->put_setting(kCarriedRoundsKey, value, error);
}

Status RoundManager::record_counted_rounds(const std::vector<uint64_t>& rounds, uint64_t version,
                                           std::string* error) {
  for (const uint64_t id : rounds)
    EDGEFL_RETURN_IF_ERROR(storage_->put_setting(counted_key(id), std::to_string(version), error));
  return Status::kOk;
}

Status RoundManager::abandoned_rows_counted(uint64_t round_id, bool* counted, std::string* error) {
  *counted = true;
  std::optional<RoundRecord> round;
  EDGEFL_RETURN_IF_ERROR(storage_->get_round(round_id, &round, error));
  return round ? abandoned_rows_counted(*round, counted, error) : Status::kOk;
}

Status RoundManager::abandoned_rows_counted(const RoundRecord& round, bool* counted, std::string* error) {
  *counted = true;
  if (round.state != RoundState::kAbandoned) return Status::kOk;
  std::optional<std::string> value;
  EDGEFL_RETURN_IF_ERROR(storage_->get_setting(counted_key(round.round_id), &value, error));
  if (value) return Status::kOk;  // a later commit counted them
  // Still to be counted: listed for the next round of the current model.
  std::vector<uint64_t> listed;
  if (round.base_model_version == model_version_)
    EDGEFL_RETURN_IF_ERROR(listed_carried_rounds(model_version_, &listed, error));
  *counted = std::find(listed.begin(), listed.end(), round.round_id) != listed.end();
  return Status::kOk;
}

Status RoundManager::rebuild_aggregate(OpenRound* round, std::string* error) {
  aggregate_.reset();
  round->aggregate_is_own = false;
  round->contributed.clear();
  round->upload_bytes = 0;
  EDGEFL_RETURN_IF_ERROR(add_carried(round, {.weighted = &aggregate_}, error));
  uint32_t rebuilt = 0;
  const Status s = storage_->for_each_update(
      round->record.round_id,
      [&](const UpdateRecord& u) -> Status {
        EDGEFL_RETURN_IF_ERROR(decode_recorded(u));
        const Status st = aggregate_.add_dense({scratch_.data(), n_}, static_cast<double>(u.sample_count));
        if (st != Status::kOk) return st;
        round->offered[u.device_id] = std::numeric_limits<int64_t>::max();
        round->contributed.insert(u.device_id);
        round->upload_bytes += u.payload_bytes;
        ++rebuilt;
        return Status::kOk;
      },
      error);
  if (s != Status::kOk) {
    if (error->empty()) *error = std::string("rebuilding the open round's aggregate: ") + status_name(s);
    return s;
  }
  round->accepted = rebuilt;
  return Status::kOk;
}

Status RoundManager::reconcile_ledger(std::string* error) {
  if (!open_ || !open_->ledger_in_doubt) return Status::kOk;
  OpenRound& round = *open_;
  if (secure_) {
    // Masked vectors are taken in the masked phase only, and this runs before it ends.
    if (secure_->phase() == SecurePhase::kMasked) {
      EDGEFL_RETURN_IF_ERROR(storage_->for_each_update(
          round.record.round_id,
          [&](const UpdateRecord& u) -> Status {
            if (round.contributed.count(u.device_id) != 0) return Status::kOk;
            // Every row was checked before its write; one that fails now cannot be summed, and is
            // not retried for ever.
            std::vector<uint32_t> words;
            Status st = secure_->check_masked(u.device_id, {u.payload.data(), u.payload.size()}, &words);
            if (st == Status::kOk) st = secure_->add_masked(u.device_id, {words.data(), words.size()});
            if (st != Status::kOk) {
              fatal("secure aggregation masked input in doubt", status_name(st));
              return Status::kOk;
            }
            round.contributed.insert(u.device_id);
            round.upload_bytes += u.payload_bytes;
            ++round.accepted;
            log_warn("ledger_row_recovered").kv("round", round.record.round_id).kv("device", u.device_id);
            return Status::kOk;
          },
          error));
    }
  } else {
    uint64_t in_ledger = 0;
    EDGEFL_RETURN_IF_ERROR(storage_->count_updates(round.record.round_id, &in_ledger, error));
    if (in_ledger != round.accepted || round.aggregate_stale) {
      const uint32_t before = round.accepted;
      round.aggregate_stale = true;
      EDGEFL_RETURN_IF_ERROR(rebuild_aggregate(&round, error));
      round.aggregate_stale = false;
      log_warn("aggregate_rebuilt")
          .kv("round", round.record.round_id)
          .kv("counted", uint64_t{before})
          .kv("in_ledger", uint64_t{round.accepted});
    }
  }
  round.ledger_in_doubt = false;
  return Status::kOk;
}

std::optional<Reply> RoundManager::count_before_duplicate(const std::string& device) {
  if (shared_ || !open_ || open_->contributed.count(device) != 0) return std::nullopt;
  open_->ledger_in_doubt = true;  // the row may have become visible only now
  std::string error;
  if (reconcile_ledger(&error) == Status::kOk) return std::nullopt;
  fatal("reading the ledger after a write in doubt", error);
  return error_reply(wire::ErrorCode::kInternal, "server storage failure", true);
}

void RoundManager::flush_partial_sum() {
  OpenRound& round = *open_;
  if (round.partial_sum_flushed || aggregate_.count() == 0 || !round.aggregate_is_own ||
      robust_spec_.rule != RobustRule::kMean)
    return;
  PartialSum sum;
  sum.round_id = round.record.round_id;
  sum.aggregator = lease_holder_;
  sum.updates = aggregate_.count();
  sum.sequence_sum = round.own_sequence_sum;
  std::string error;
  Status s = Status::kOk;
  const auto start = std::chrono::steady_clock::now();
  if (StreamingAggregator::export_bytes(n_) > kMaxPartialSumBytes) {
    s = Status::kInvalidArgument;
    error = "a model of " + std::to_string(n_) + " parameters has a sum above the store's value limit";
  } else {
    sum.state.resize(StreamingAggregator::export_bytes(n_));
    size_t written = 0;
    s = aggregate_.export_state({sum.state.data(), sum.state.size()}, &written);
    if (s != Status::kOk) error = std::string("export: ") + status_name(s);
    if (s == Status::kOk) s = storage_->put_partial_sum(sum, &error);
  }
  if (s != Status::kOk) {
    // The coordinator decodes this server's updates from the ledger if the sum never comes. A
    // store failure is retried at the next look while the round is open; a refusal is final.
    if (s == Status::kInvalidArgument) round.partial_sum_flushed = true;
    log_warn("partial_sum_flush_failed")
        .kv("round", sum.round_id)
        .kv("retried", s == Status::kInvalidArgument ? 0 : 1)
        .kv("error", error);
    return;
  }
  round.partial_sum_flushed = true;
  log_info("partial_sum_flushed")
      .kv("round", sum.round_id)
      .kv("updates", sum.updates)
      .kv("bytes", uint64_t{sum.state.size()})
      .kv("write_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

Status RoundManager::merge_partial_sums(int64_t now_ms, bool* waiting, std::string* error) {
  OpenRound& round = *open_;
  const uint64_t round_id = round.record.round_id;
  const auto start = std::chrono::steady_clock::now();
  if (!merged_.bound()) {  // the coordinator's only: allocated at its first merge
    merged_memory_.resize(aggregate_memory_.size());
    partial_memory_.resize(aggregate_memory_.size());
    EDGEFL_RETURN_IF_ERROR(merged_.init({merged_memory_.data(), merged_memory_.size()}, n_));
    EDGEFL_RETURN_IF_ERROR(partial_.init({partial_memory_.data(), partial_memory_.size()}, n_));
  }
  std::vector<LedgerShare> shares;
  EDGEFL_RETURN_IF_ERROR(storage_->ledger_shares(round_id, &shares, error));
  // Each share's rows, until a sum covers them: this server's own, a flushed one, or decoding. A
  // sum covers a share when it sums as many rows, with the same sequences and weight.
  std::map<std::string, LedgerShare> uncovered;
  uint64_t in_ledger = 0, payload_bytes = 0;
  for (LedgerShare& share : shares) {
    in_ledger += share.updates;
    payload_bytes += share.payload_bytes;
    uncovered[share.aggregator] = std::move(share);
  }
  auto same_rows = [](const LedgerShare& share, uint64_t updates, uint64_t sequence_sum, double weight) {
    return updates == share.updates && sequence_sum == share.sequence_sum && weight == double(share.samples);
  };
  merged_.reset();
  uint64_t own = 0;
  auto mine = uncovered.find(lease_holder_);
  if (mine != uncovered.end() && round.aggregate_is_own &&
      same_rows(mine->second, aggregate_.count(), round.own_sequence_sum, aggregate_.total_weight())) {
    EDGEFL_RETURN_IF_ERROR(merged_.merge(aggregate_));
    own = mine->second.updates;
    uncovered.erase(mine);
  }
  // First which flushed sums match their share (without their contents), then, once none is
  // awaited any more, the matching ones read and merged.
  std::set<std::string> matching, unusable;
  Status s = storage_->for_each_partial_sum(
      round_id, /*with_state=*/false,
      [&](const PartialSum& sum) -> Status {
        auto it = uncovered.find(sum.aggregator);
        if (it == uncovered.end()) return Status::kOk;  // this server's own, or no rows
        // A sum of other rows than its aggregator's share (a write of its was in doubt) is not
        // used, and no other comes (one flush per process): that share is decoded.
        const bool same = sum.updates == it->second.updates && sum.sequence_sum == it->second.sequence_sum;
        (same ? matching : unusable).insert(sum.aggregator);
        return Status::kOk;
      },
      error);
  if (s != Status::kOk) {
    if (error->empty()) *error = std::string("listing the partial sums: ") + status_name(s);
    return s;
  }
  // This server's own rows never come as a flushed sum; another aggregator's may, for a while.
  bool awaited = false;
  for (const auto& entry : uncovered) {
    awaited = awaited || (entry.first != lease_holder_ && matching.count(entry.first) == 0 &&
                          unusable.count(entry.first) == 0);
  }
  if (awaited && now_ms < round.sealed_ms + int64_t{options_.partial_sum_wait_ms}) {
    *waiting = true;
    return Status::kOk;
  }
  uint64_t partial_sums = 0;
  if (!matching.empty()) {
    s = storage_->for_each_partial_sum(
        round_id, /*with_state=*/true,
        [&](const PartialSum& sum) -> Status {
          auto it = uncovered.find(sum.aggregator);
          if (it == uncovered.end() || matching.count(sum.aggregator) == 0) return Status::kOk;
          const Status imported = partial_.import_state({sum.state.data(), sum.state.size()});
          if (imported != Status::kOk ||
              !same_rows(it->second, partial_.count(), sum.sequence_sum, partial_.total_weight())) {
            log_warn("partial_sum_refused")
                .kv("round", round_id)
                .kv("aggregator", sum.aggregator)
                .kv("reason", imported != Status::kOk
                                  ? std::string(status_name(imported))
                                  : std::string("its count or weight differs from its share"));
            return Status::kOk;
          }
          EDGEFL_RETURN_IF_ERROR(merged_.merge(partial_));
          uncovered.erase(it);
          ++partial_sums;
          return Status::kOk;
        },
        error);
    if (s != Status::kOk) {
      if (error->empty()) *error = std::string("merging the partial sums: ") + status_name(s);
      return s;
    }
  }
  uint64_t decoded = 0;
  for (const auto& entry : uncovered) {
    s = storage_->for_each_update_of(
        round_id, entry.first,
        [&](const UpdateRecord& u) -> Status {
          EDGEFL_RETURN_IF_ERROR(decode_recorded(u));
          ++decoded;
          return merged_.add_dense({scratch_.data(), n_}, static_cast<double>(u.sample_count));
        },
        error);
    if (s != Status::kOk) {
      if (error->empty()) *error = std::string("decoding the ledger's updates: ") + status_name(s);
      return s;
    }
  }
  if (merged_.count() != in_ledger) {  // the sealed ledger cannot change: a store that misreads
    *error = "the sealed ledger holds " + std::to_string(in_ledger) + " updates, its merge " +
             std::to_string(merged_.count());
    return Status::kIoError;
  }
  EDGEFL_RETURN_IF_ERROR(add_carried(&round, {.weighted = &merged_}, error));
  aggregate_.reset();
  EDGEFL_RETURN_IF_ERROR(aggregate_.merge(merged_));
  round.aggregate_is_own = false;
  round.ledger_merged = true;
  round.accepted = static_cast<uint32_t>(in_ledger);
  round.upload_bytes = payload_bytes;
  log_info("aggregate_merged")
      .kv("round", round_id)
      .kv("in_ledger", in_ledger)
      .kv("own", own)
      .kv("partial_sums", partial_sums)
      .kv("decoded", decoded)
      .kv("carried", uint64_t{round.carried})
      .kv("waited_s", double(now_ms - round.sealed_ms) / 1000.0)
      .kv("merge_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return Status::kOk;
}

Status RoundManager::open_next_round(int64_t now_ms, std::string* error) {
  uint64_t last = 0;
  EDGEFL_RETURN_IF_ERROR(storage_->last_round_id(&last, error));
  OpenRound round;
  round.record.round_id = last + 1;
  round.record.nonce = fresh_nonce();
  round.record.base_model_version = model_version_;
  round.record.state = RoundState::kOpen;
  round.record.opened_unix_ms = now_ms;
  round.record.deadline_unix_ms = now_ms + options_.deadline_ms;
  if (options_.secure_aggregation.enabled) {  // then shares, masked vectors and unmasking
    round.record.deadline_unix_ms += 3 * int64_t(options_.secure_aggregation.phase_ms);
  }
  round.opened_wall_ms = now_ms;
  round.norm_bound = update_norm_bound();
  aggregate_.reset();
  EDGEFL_RETURN_IF_ERROR(find_carried_rounds(&round, error));
  // Several aggregators: aggregate_ is this server's own partial sum; the close adds them.
  EDGEFL_RETURN_IF_ERROR(add_carried(&round, {.weighted = shared_ ? nullptr : &aggregate_}, error));
  EDGEFL_RETURN_IF_ERROR(storage_->create_round(round.record, error));
  if (options_.secure_aggregation.enabled) EDGEFL_RETURN_IF_ERROR(start_secure_round(round.record, error));
  metrics_->round_id.store(round.record.round_id);
  log_info("round_open")
      .kv("round", round.record.round_id)
      .kv("model_version", model_version_)
      .kv("cohort", uint64_t{options_.cohort})
      .kv("offers", uint64_t{offers_per_round_})
      .kv("deadline_ms", uint64_t{options_.deadline_ms})
      .kv("update_norm_bound", round.norm_bound)
      .kv("carried", uint64_t{round.carried});
  open_ = std::move(round);
  return Status::kOk;
}

void RoundManager::evaluate(RoundSummary* summary) {
  if (evaluator_ == nullptr) return;
  Evaluation result;
  std::string why;
  if (evaluator_->evaluate({global_.data(), n_}, &result, &why) == Status::kOk) {
    summary->test_accuracy = result.accuracy;
    summary->test_loss = result.loss;
    metrics_->test_accuracy_micros.store(static_cast<int64_t>(std::llround(double(result.accuracy) * 1e6)));
  } else {
    log_error("evaluation_failed").kv("error", why);
  }
}

double RoundManager::update_norm_bound() const {
  if (options_.max_update_norm > 0) return options_.max_update_norm;
  double norm2 = 0;
  for (float v : global_) norm2 += double(v) * double(v);
  return options_.update_norm_factor * std::max(1.0, std::sqrt(norm2));
}

uint32_t RoundManager::steered_window(const std::string& device, int64_t now_ms) {
  waiting_[device] = now_ms;
  const double spread = 1000.0 * double(waiting_.size()) / options_.target_checkins_per_s;
  const uint32_t window = static_cast<uint32_t>(
      std::clamp<double>(std::max<double>(options_.retry_window_ms, spread), 0, wire::kMaxRetryMs / 2));
  if (now_ms - waiting_pruned_ms_ >= 1000) {  // forget devices that have not come back
    waiting_pruned_ms_ = now_ms;
    const int64_t horizon = int64_t{window} + options_.retry_after_ms + 5000;
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      it = now_ms - it->second > horizon ? waiting_.erase(it) : std::next(it);
    }
  }
  return window;
}

uint32_t RoundManager::lease_ms() const {
  if (options_.offer_lease_ms != 0) return options_.offer_lease_ms;
  return std::max<uint32_t>(1000, options_.deadline_ms / 2);
}

void RoundManager::reclaim_expired_offers(int64_t now_ms) {
  if (!open_) return;
  OpenRound& round = *open_;
  for (auto it = round.offered.begin(); it != round.offered.end();) {
    if (it->second > now_ms || round.contributed.count(it->first) != 0) {
      ++it;
      continue;
    }
    log_info("offer_expired").kv("round", round.record.round_id).kv("device", it->first);
    metrics_->offers_expired.fetch_add(1);
    round.uploads.erase(it->first);
    expired_offers_.insert(it->first);
    it = round.offered.erase(it);
  }
}

bool RoundManager::renew_offer(const std::string& device, int64_t now_ms) {
  OpenRound& round = *open_;
  auto it = round.offered.find(device);
  if (it != round.offered.end()) {
    if (round.contributed.count(device) == 0) it->second = now_ms + lease_ms();
    return true;
  }
  if (expired_offers_.count(device) == 0) return false;
  if (round.offered.size() >= offers_per_round_) reclaim_expired_offers(now_ms);
  if (round.offered.size() >= offers_per_round_) return false;
  round.offered[device] = now_ms + lease_ms();
  expired_offers_.erase(device);
  log_info("offer_retaken").kv("round", round.record.round_id).kv("device", device);
  return true;
}

Status RoundManager::close_round(bool commit, int64_t now_ms, std::string* error) {
  OpenRound& round = *open_;
  if (!round.closing) {
    round.closing = true;
    round.closing_commit = commit;
    round.uploads.clear();  // nothing more is taken into this round
    candidate_ready_ = false;
  }
  return try_close(now_ms, error);
}

Status RoundManager::robust_combination(std::string* error) {
  // Every accepted update of the round, decoded as commit() decoded it, one row each.
  std::vector<float> rows;
  rows.reserve(size_t(open_->accepted + open_->carried) * n_);
  Status s = add_carried(&*open_, {.rows = &rows}, error);
  if (s != Status::kOk) return s;
  s = storage_->for_each_update(
      open_->record.round_id,
      [&](const UpdateRecord& u) -> Status {
        EDGEFL_RETURN_IF_ERROR(decode_recorded(u));
        rows.insert(rows.end(), scratch_.begin(), scratch_.begin() + long(n_));
        return Status::kOk;
      },
      error);
  if (s != Status::kOk) {
    if (error->empty()) *error = std::string("reading the round's updates: ") + status_name(s);
    return s;
  }
  const size_t count = n_ == 0 ? 0 : rows.size() / n_;
  std::vector<uint8_t> workspace(robust_workspace_bytes(count) + 4);
  const size_t skew = (4 - reinterpret_cast<uintptr_t>(workspace.data()) % 4) % 4;
  s = robust_combine(robust_spec_, {rows.data(), rows.size()}, count, {mean_.data(), n_},
                     {workspace.data() + skew, workspace.size() - skew});
  if (s != Status::kOk)
    *error = std::string("the ") + robust_rule_name(robust_spec_.rule) + " of " + std::to_string(count) +
             " updates: " + status_name(s);
  return s;
}

Status RoundManager::compute_candidate(std::string* error) {
  Status s = secure_ ? (secure_mean_ready_ ? Status::kOk : Status::kProtocolError)
             : robust_spec_.rule == RobustRule::kMean ? aggregate_.mean({mean_.data(), n_})
                                                      : robust_combination(error);
  if (s != Status::kOk) {
    if (error->empty()) *error = std::string("the mean of the round's updates: ") + status_name(s);
    return s;
  }
  std::copy(global_.begin(), global_.end(), candidate_.begin());
  std::copy(optimizer_memory_.begin(), optimizer_memory_.end(), candidate_optimizer_memory_.begin());
  s = candidate_optimizer_.apply({candidate_.data(), n_}, {mean_.data(), n_});
  if (s != Status::kOk) {
    *error = std::string("the server optimizer refuses the round's mean (") + status_name(s) +
             "): the new model would not be finite";
    return s;
  }
  // The devices' next public model: a patch towards the new server model (round/downlink.h).
  s = public_.prepare_next({candidate_.data(), n_},
                           downlink_seed(round_seed(options_.seed, open_->record.round_id)), error);
  if (s != Status::kOk) return s;
  candidate_ready_ = true;
  return Status::kOk;
}

Status RoundManager::try_close(int64_t now_ms, std::string* error) {
  OpenRound& round = *open_;
  Status s = Status::kOk;
  if (shared_ && !round.decided_on_seal) {
    // Several aggregators: the ledger is sealed before it is read, so that no update can be
    // acknowledged by another server after the sum was taken. The decision follows the sealed
    // ledger (updates acknowledged elsewhere count), taken once the count is read: a count that
    // fails after the seal is retried, never replaced by this server's own tally.
    uint64_t in_ledger = 0;
    if (!round.record.sealed) s = storage_->seal_round(round.record.round_id, error);
    if (s == Status::kOk) round.record.sealed = true;
    if (s == Status::kOk) s = storage_->count_updates(round.record.round_id, &in_ledger, error);
    if (s == Status::kOk) {
      round.decided_on_seal = true;
      round.sealed_ms = now_ms;
      round.in_ledger = in_ledger;
      round.closing_commit = in_ledger + round.carried >= min_quorum_;
      log_info("round_sealed")
          .kv("round", round.record.round_id)
          .kv("in_ledger", in_ledger)
          .kv("here", uint64_t{round.accepted})
          .kv("commit", round.closing_commit ? 1 : 0);
    }
  }
  if (s == Status::kOk && shared_ && round.closing_commit && !candidate_ready_ && !round.ledger_merged &&
      robust_spec_.rule == RobustRule::kMean) {
    bool waiting = false;
    s = merge_partial_sums(now_ms, &waiting, error);
    if (s == Status::kOk && waiting) {
      round.next_close_attempt_ms = now_ms + std::max<int64_t>(10, options_.follow_interval_ms / 2);
      return Status::kOk;  // the aggregators flush their sums once they see the seal
    }
  }
  if (s == Status::kOk && !shared_ && round.closing_commit && !candidate_ready_ && !secure_ &&
      robust_spec_.rule == RobustRule::kMean) {
    // The ledger is the truth: a write whose commit was in doubt (a networked store that went
    // away during COMMIT) may be in the ledger though record_update() failed and the update was
    // never added. The model is the mean of the ledger, so a count that differs rebuilds the sum.
    uint64_t in_ledger = 0;
    s = storage_->count_updates(round.record.round_id, &in_ledger, error);
    if (s == Status::kOk && (in_ledger != round.accepted || round.aggregate_stale)) {
      const uint32_t before = round.accepted;
      round.aggregate_stale = true;
      s = rebuild_aggregate(&round, error);
      if (s == Status::kOk) {
        round.aggregate_stale = false;
        log_warn("aggregate_rebuilt")
            .kv("round", round.record.round_id)
            .kv("counted", uint64_t{before})
            .kv("in_ledger", in_ledger);
      }
    }
  }
  if (s == Status::kOk && shared_ && robust_spec_.rule != RobustRule::kMean)
    round.accepted = static_cast<uint32_t>(round.in_ledger);  // the robust rules read the whole ledger
  if (s == Status::kOk && round.closing_commit && !candidate_ready_) {
    std::string why;
    s = compute_candidate(&why);
    if (s == Status::kIoError) {
      *error = why;  // the updates could not be read back (robust rules): a storage fault, retried
    } else if (s != Status::kOk) {
      // Deterministic: retrying gives the same answer. The round ends without a model.
      log_error("round_commit_impossible").kv("round", round.record.round_id).kv("reason", why);
      round.closing_commit = false;
      abandon_reason_ = why;
      s = Status::kOk;
    }
  }
  if (s == Status::kOk) s = finish_close(now_ms, error);
  if (s == Status::kOk) return Status::kOk;
  if (!open_) return s;  // closed, but the next round could not be opened: tick() retries
  // An I/O failure: nothing in memory changed; the same close is tried again later.
  ++open_->close_failures;
  const int64_t backoff = retry_backoff_ms(open_->close_failures);
  open_->next_close_attempt_ms = now_ms + backoff;
  metrics_->close_failures.fetch_add(1);
  log_error("round_close_failed")
      .kv("round", open_->record.round_id)
      .kv("commit", open_->closing_commit ? 1 : 0)
      .kv("attempt", uint64_t{open_->close_failures})
      .kv("retry_in_ms", backoff)
      .kv("error", error->empty() ? std::string(status_name(s)) : *error);
  return s;
}

Status RoundManager::finish_close(int64_t now_ms, std::string* error) {
  OpenRound& round = *open_;
  const uint64_t round_id = round.record.round_id;
  const bool commit = round.closing_commit;
  uint64_t result_version = 0;
  if (commit) {
    result_version = model_version_ + 1;
    // A retry after a failure between record_model and close_round finds the model recorded.
    std::optional<ModelRecord> latest;
    EDGEFL_RETURN_IF_ERROR(storage_->latest_model(&latest, error));
    if (!latest || latest->version < result_version) {
      // Durable order: model (and optimizer state) files, their record, then the round's state.
      EDGEFL_RETURN_IF_ERROR(write_model(
          {candidate_.data(), n_}, {candidate_optimizer_memory_.data(), candidate_optimizer_memory_.size()},
          result_version, round_id, now_ms, error));
    } else if (latest->version != result_version || latest->round_id != round_id) {
      *error = "model version " + std::to_string(latest->version) + " is recorded for round " +
               std::to_string(latest->round_id) + " while round " + std::to_string(round_id) + " closes";
      return Status::kCorruptPayload;
    }
  }
  if (commit) EDGEFL_RETURN_IF_ERROR(record_counted_rounds(round.carried_rounds, result_version, error));
  const bool spends_privacy = commit && secure_ && secure_->noise_variance() > 0;
  if (spends_privacy) {
    char spent[128];
    std::snprintf(spent, sizeof spent, "%.17g %u %u %llu", secure_->sensitivity(), unsigned(n_),
                  unsigned(secure_->contributors()),
                  static_cast<unsigned long long>(secure_->noise_variance()));
    EDGEFL_RETURN_IF_ERROR(
        storage_->put_setting("secagg.dp.round." + std::to_string(round_id), spent, error));
  }
  if (!commit && !secure_) {
    // Acknowledged updates are never dropped: a round abandoned below its quorum passes them on to
    // the next one, which trains the same model. One that failed otherwise (its model would not be
    // finite) passes nothing on: the same updates would fail the same way.
    if (abandon_reason_.empty()) {
      EDGEFL_RETURN_IF_ERROR(record_carried_rounds(round, error));
    } else if (!round.carried_rounds.empty()) {
      EDGEFL_RETURN_IF_ERROR(storage_->put_setting(kCarriedRoundsKey, "0", error));
      log_error("carried_updates_dropped")
          .kv("round", round_id)
          .kv("updates", uint64_t{round.carried})
          .kv("reason", abandon_reason_);
    }
  }
  EDGEFL_RETURN_IF_ERROR(storage_->close_round(
      round_id, commit ? RoundState::kCommitted : RoundState::kAbandoned, result_version, now_ms, error));
  if (spends_privacy) {
    accountant_.add_round(secure_->sensitivity(), n_, secure_->contributors(), secure_->noise_variance());
  }
  // Durable: only now does the in-memory state follow.
  if (commit) {
    global_.swap(candidate_);
    std::copy(candidate_optimizer_memory_.begin(), candidate_optimizer_memory_.end(),
              optimizer_memory_.begin());
    candidate_ready_ = false;
    model_version_ = result_version;
    model_dir_ = files_dir_;
    public_.commit_candidate();
    metrics_->model_version.store(model_version_);
  }
  (commit ? metrics_->rounds_committed : metrics_->rounds_abandoned).fetch_add(1);
  RoundSummary summary;
  summary.round_id = round_id;
  summary.state = commit ? RoundState::kCommitted : RoundState::kAbandoned;
  summary.accepted = round.accepted + round.carried;
  summary.upload_bytes = round.upload_bytes;
  summary.download_bytes = round.download_bytes;
  summary.seconds = double(now_ms - round.opened_wall_ms) / 1e3;
  if (commit) evaluate(&summary);
  if (secure_) {
    summary.accepted = secure_->phase() == SecurePhase::kDone ? secure_->contributors() + round.carried : 0;
    if (commit && secure_->noise_variance() > 0)
      summary.dp_epsilon = accountant_.epsilon(options_.secure_aggregation.dp_delta);
  }
  {
    LogLine line(LogLevel::kInfo, commit ? "round_committed" : "round_abandoned");
    line.kv("round", round_id)
        .kv("updates", uint64_t{round.accepted + round.carried})
        .kv("carried", uint64_t{round.carried})
        .kv("model_version", model_version_)
        .kv("upload_bytes", round.upload_bytes)
        .kv("download_bytes", round.download_bytes)
        .kv("seconds", summary.seconds);
    if (!commit) {
      line.kv("reason", !abandon_reason_.empty() ? abandon_reason_
                                                 : "quorum not reached by the deadline (" +
                                                       std::to_string(round.accepted + round.carried) +
                                                       " of " + std::to_string(min_quorum_) + ")");
    }
    if (round.close_failures != 0) line.kv("close_failures", uint64_t{round.close_failures});
    if (summary.test_accuracy >= 0)
      line.kv("test_accuracy", double(summary.test_accuracy)).kv("test_loss", double(summary.test_loss));
    if (secure_) line.kv("secure_modulus_bits", uint64_t{secure_->modulus_bits()});
    if (summary.dp_epsilon >= 0) {
      line.kv("dp_noise_variance", secure_->noise_variance())
          .kv("dp_epsilon", summary.dp_epsilon)
          .kv("dp_delta", options_.secure_aggregation.dp_delta);
    }
  }
  abandon_reason_.clear();
  history_.push_back(summary);

  closed_[round_id] = ClosedRound{round.record.deadline_unix_ms, now_ms, commit};
  // Its devices whose masked vectors are in the ledger poll for the outcome: a drain waits for them.
  awaiting_outcome_.clear();
  if (secure_) awaiting_outcome_ = round.contributed;
  secure_.reset();
  secure_mean_ready_ = false;
  while (closed_.size() > kRoundsKept) closed_.erase(closed_.begin());
  open_.reset();
  expired_offers_.clear();
  ++rounds_ended_;
  if (options_.rounds != 0 && rounds_ended_ >= options_.rounds) {
    finished_ = true;
    log_info("rounds_finished").kv("rounds", uint64_t{rounds_ended_}).kv("model_version", model_version_);
    return Status::kOk;
  }
  return open_or_schedule(now_ms, error);
}

Status RoundManager::open_or_schedule(int64_t now_ms, std::string* error) {
  const Status s = open_next_round(now_ms, error);
  if (s == Status::kOk) {
    open_failures_ = 0;
    return s;
  }
  ++open_failures_;
  const int64_t backoff = retry_backoff_ms(open_failures_);
  next_open_attempt_ms_ = now_ms + backoff;
  log_error("round_open_failed")
      .kv("attempt", uint64_t{open_failures_})
      .kv("retry_in_ms", backoff)
      .kv("error", error->empty() ? std::string(status_name(s)) : *error);
  return s;
}

int64_t RoundManager::ms_to_deadline(int64_t now_ms) const {
  if (!open_) return 0;
  return std::max<int64_t>(0, open_->record.deadline_unix_ms - now_ms);
}

void RoundManager::tick(int64_t now_ms) {
  std::string error;
  if (shared_) {
    if (now_ms >= next_lease_ms_) renew_lease(now_ms);
    if (!coordinating_) {
      if (now_ms >= next_look_ms_) {
        next_look_ms_ = now_ms + options_.follow_interval_ms;
        if (follow(now_ms, &error) != Status::kOk) log_warn("follow_failed").kv("error", error);
      }
      if (open_ && !open_->closing && open_->offered.size() >= offers_per_round_)
        reclaim_expired_offers(now_ms);
      return;
    }
  }
  if (!open_) {
    if (!finished_ && now_ms >= next_open_attempt_ms_) (void)open_or_schedule(now_ms, &error);
    return;
  }
  if (open_->closing) {
    if (now_ms >= open_->next_close_attempt_ms) (void)try_close(now_ms, &error);
    return;
  }
  if (secure_) {
    secure_tick(now_ms);
    return;
  }
  if (open_->ledger_in_doubt && reconcile_ledger(&error) != Status::kOk)
    fatal("reading the ledger after a write in doubt", error);  // the next tick tries again
  // The cohort reached outside count_update(): a row found in the ledger, or updates carried in
  // full (a cohort smaller than before). Several aggregators count the shared ledger below.
  if (!shared_ && open_->accepted + open_->carried >= options_.cohort) {
    (void)close_round(true, now_ms, &error);
    return;
  }
  if (shared_ && now_ms >= next_look_ms_) {
    // Updates acknowledged by the other aggregators count towards the cohort.
    next_look_ms_ = now_ms + options_.follow_interval_ms;
    uint64_t in_ledger = 0;
    if (storage_->count_updates(open_->record.round_id, &in_ledger, &error) == Status::kOk) {
      open_->in_ledger = in_ledger;
      if (in_ledger + open_->carried >= options_.cohort) {
        (void)close_round(true, now_ms, &error);
        return;
      }
    }
  }
  if (now_ms >= open_->record.deadline_unix_ms) {
    bool commit = open_->accepted + open_->carried >= min_quorum_;
    if (open_->ledger_in_doubt) {
      // The ledger could not be read in full: decide on its count (the close rebuilds the sum
      // from it). A store that cannot even count acknowledges nothing either: decide next tick.
      uint64_t in_ledger = 0;
      if (storage_->count_updates(open_->record.round_id, &in_ledger, &error) != Status::kOk) {
        fatal("counting the ledger at the deadline", error);
        return;
      }
      commit = in_ledger + open_->carried >= min_quorum_;
      open_->aggregate_stale = true;
    }
    // Several aggregators: the decision is taken again on the sealed ledger (try_close).
    (void)close_round(commit, now_ms, &error);
    return;
  }
  if (open_->offered.size() >= offers_per_round_) reclaim_expired_offers(now_ms);
}

// --- several aggregators, one round (RoundOptions::aggregator_id) ------------------------------

Status RoundManager::start_shared(int64_t now_ms, std::string* error) {
  // The lease is held by this process, not by the name: two processes started with one name (on
  // two machines, where the lock file cannot see both) never both believe they coordinate, and a
  // restarted coordinator waits for its old lease to lapse like any other aggregator.
  static const char* const kHex = "0123456789abcdef";
  lease_holder_ = options_.aggregator_id + "#";
  for (uint8_t b : fresh_nonce()) {
    if (lease_holder_.size() >= options_.aggregator_id.size() + 1 + 16) break;
    lease_holder_ += kHex[b >> 4];
    lease_holder_ += kHex[b & 15];
  }
  Lease lease;
  next_lease_ms_ = now_ms + std::max<int64_t>(1, options_.coordinator_lease_ms / 4);
  const Status taken =
      storage_->acquire_lease(lease_holder_, options_.coordinator_lease_ms, now_ms, &lease, error);
  if (taken != Status::kOk && taken != Status::kIoError) return taken;  // e.g. a store of one server
  if (taken != Status::kOk) {
    // The lease row busy (the coordinator mid-write) or the database away: this server follows,
    // and tick() tries the lease again at the next renewal.
    log_warn("lease_renewal_failed").kv("aggregator", options_.aggregator_id).kv("error", *error);
    lease = Lease{};
  }
  if (lease.held) {
    const Status started = become_coordinator(lease, now_ms, error);
    if (started != Status::kOk) give_up_lease(lease.epoch, now_ms, *error);  // the server exits
    return started;
  }
  coordinating_ = false;
  log_info("aggregator_following")
      .kv("aggregator", options_.aggregator_id)
      .kv("coordinator", lease.holder)
      .kv("epoch", lease.epoch);
  // A store the coordinator has not set up yet (no model) is looked at again by tick().
  return follow(now_ms, error);
}

Status RoundManager::become_coordinator(const Lease& lease, int64_t now_ms, std::string* error) {
  EDGEFL_RETURN_IF_ERROR(storage_->set_fence(lease_holder_, lease.epoch, error));
  lease_epoch_ = lease.epoch;
  // This epoch's own directory: a deposed coordinator still writing cannot replace these files.
  files_prefix_ = "coordinator-" + std::to_string(lease.epoch);
  EDGEFL_RETURN_IF_ERROR(make_directory(options_.state_dir, files_prefix_, error));
  files_dir_ = options_.state_dir + "/" + files_prefix_;
  size_t stale = 0;
  EDGEFL_RETURN_IF_ERROR(remove_temp_files(files_dir_, &stale, error));
  // As after a restart: the latest model, then the open round from the shared ledger.
  open_.reset();
  candidate_ready_ = false;
  expired_offers_.clear();
  EDGEFL_RETURN_IF_ERROR(load_or_create_model(now_ms, error));
  EDGEFL_RETURN_IF_ERROR(recover_open_round(now_ms, error));
  coordinating_ = true;
  log_info("coordinator_elected")
      .kv("aggregator", options_.aggregator_id)
      .kv("epoch", lease.epoch)
      .kv("files", files_prefix_);
  if (!open_ && !finished_) (void)open_or_schedule(now_ms, error);
  error->clear();
  return Status::kOk;
}

void RoundManager::renew_lease(int64_t now_ms) {
  next_lease_ms_ = now_ms + std::max<int64_t>(1, options_.coordinator_lease_ms / 4);
  if (!coordinating_ && now_ms < no_lease_until_ms_) return;  // following only, for now
  Lease lease;
  std::string error;
  if (storage_->acquire_lease(lease_holder_, options_.coordinator_lease_ms, now_ms, &lease, &error) !=
      Status::kOk) {
    // Unknown: a coordinator's writes stay fenced, so nothing wrong can be recorded meanwhile.
    log_warn("lease_renewal_failed").kv("aggregator", options_.aggregator_id).kv("error", error);
    return;
  }
  if (coordinating_ && (!lease.held || lease.epoch != lease_epoch_)) {
    // Deposed (the lease lapsed and was taken, or lapsed and taken again as a new epoch): what this
    // server held of the open round is dropped; it follows the store from now on, and its updates
    // already acknowledged are in the shared ledger.
    log_error("coordinator_lease_lost")
        .kv("aggregator", options_.aggregator_id)
        .kv("epoch", lease_epoch_)
        .kv("holder", lease.holder)
        .kv("holder_epoch", lease.epoch);
    coordinating_ = false;
    (void)storage_->set_fence("", 0, &error);
    open_.reset();
    candidate_ready_ = false;
    next_look_ms_ = now_ms;
    if (!lease.held) return;
  }
  if (!coordinating_ && lease.held && become_coordinator(lease, now_ms, &error) != Status::kOk)
    give_up_lease(lease.epoch, now_ms, error);
}

void RoundManager::give_up_lease(uint64_t epoch, int64_t now_ms, const std::string& why) {
  // This server cannot coordinate (say, the shared directory is unreadable from its machine): it
  // gives the lease up at once and leaves it to the others for two lease periods, instead of
  // holding the rounds still by renewing a lease it cannot use. What the failed start set up is
  // dropped: the next look at the store loads the model a coordinator recorded, even one that
  // carries the version number this server had begun to write.
  coordinating_ = false;
  open_.reset();
  candidate_ready_ = false;
  model_version_ = 0;
  next_look_ms_ = now_ms;
  std::string release_error;
  (void)storage_->set_fence("", 0, &release_error);
  const Status released = storage_->release_lease(lease_holder_, &release_error);
  no_lease_until_ms_ = now_ms + 2 * int64_t{options_.coordinator_lease_ms};
  log_error("coordinator_start_failed")
      .kv("aggregator", options_.aggregator_id)
      .kv("epoch", epoch)
      .kv("error", why)
      .kv("lease_released", released == Status::kOk ? std::string("yes") : release_error);
}

Status RoundManager::follow(int64_t now_ms, std::string* error) {
  std::optional<ModelRecord> latest;
  EDGEFL_RETURN_IF_ERROR(storage_->latest_model(&latest, error));
  if (!latest) return Status::kOk;  // the coordinator has not written version 1 yet
  if (model_version_ == 0) {
    // Whether version 1 is the seeded initial model: the coordinator fixed it with version 1.
    std::optional<std::string> seed_setting;
    EDGEFL_RETURN_IF_ERROR(storage_->get_setting("initial_model_seed", &seed_setting, error));
    if (!seed_setting) return Status::kOk;
    initial_model_seed_ = std::strtoull(seed_setting->c_str(), nullptr, 10);
    EDGEFL_RETURN_IF_ERROR(public_.init(downlink_, n_, initial_model_seed_ != 0, error));
  }
  if (latest->version != model_version_) EDGEFL_RETURN_IF_ERROR(load_model(*latest, error));
  uint64_t last = 0;
  std::optional<RoundRecord> open;
  EDGEFL_RETURN_IF_ERROR(storage_->last_round_id(&last, error));
  EDGEFL_RETURN_IF_ERROR(storage_->open_round(&open, error));
  if (open_ && (!open || open->round_id != open_->record.round_id)) {
    // The round this server took devices for has ended: its straggler and late answers come from
    // its record (closed_round()).
    metrics_->round_id.store(0);
    open_.reset();
  }
  rounds_ended_ = static_cast<uint32_t>(last - (open ? 1 : 0));
  finished_ = options_.rounds != 0 && rounds_ended_ >= options_.rounds;
  if (!open) return Status::kOk;
  uint64_t in_ledger = 0;
  EDGEFL_RETURN_IF_ERROR(storage_->count_updates(open->round_id, &in_ledger, error));
  if (!open_) {
    if (open->base_model_version != model_version_) return Status::kOk;  // its model comes next look
    OpenRound round;
    round.record = *open;
    round.opened_wall_ms = now_ms;
    // Which devices the round counts from abandoned rounds (the coordinator adds their updates).
    EDGEFL_RETURN_IF_ERROR(find_carried_rounds(&round, error));
    EDGEFL_RETURN_IF_ERROR(add_carried(&round, {}, error));
    aggregate_.reset();
    open_ = std::move(round);
    open_->norm_bound = update_norm_bound();
    metrics_->round_id.store(open->round_id);
    log_info("round_followed")
        .kv("round", open->round_id)
        .kv("model_version", model_version_)
        .kv("in_ledger", in_ledger)
        .kv("carried", uint64_t{open_->carried})
        .kv("update_norm_bound", open_->norm_bound);
  }
  open_->in_ledger = in_ledger;
  // Sealed (its close has begun), or the model moved past its base (its close is being recorded):
  // nothing more is taken here.
  if ((open->sealed || open->base_model_version != model_version_) && !open_->closing) {
    open_->closing = true;
    open_->closing_commit = true;
    open_->uploads.clear();
    open_->next_close_attempt_ms = now_ms + options_.follow_interval_ms;
  }
  if (open->sealed) flush_partial_sum();
  return Status::kOk;
}

int64_t RoundManager::drain_until_unix_ms(int64_t now_ms) {
  if (!finished_) return 0;
  std::string error;
  if (drain_until_ms_ == 0) {
    drain_until_ms_ = now_ms + int64_t(longest_retry_ms_);
    if (shared_ && storage_->put_setting("drain_until." + options_.aggregator_id,
                                         std::to_string(drain_until_ms_), &error) != Status::kOk)
      log_warn("drain_publish_failed").kv("error", error);
  }
  int64_t until = drain_until_ms_;
  std::vector<std::pair<std::string, std::string>> published;
  if (shared_ && storage_->list_settings("drain_until.", &published, &error) == Status::kOk) {
    for (const auto& entry : published) until = std::max<int64_t>(until, std::atoll(entry.second.c_str()));
  }
  return until;
}

std::optional<RoundManager::ClosedRound> RoundManager::closed_round(uint64_t round_id) {
  auto it = closed_.find(round_id);
  if (it != closed_.end()) return it->second;
  std::optional<RoundRecord> record;
  std::string error;
  if (storage_->get_round(round_id, &record, &error) != Status::kOk || !record ||
      record->state == RoundState::kOpen) {
    return std::nullopt;
  }
  return ClosedRound{record->deadline_unix_ms, record->closed_unix_ms,
                     record->state == RoundState::kCommitted};
}

Reply RoundManager::error_reply(wire::ErrorCode code, const std::string& message, bool close) {
  wire::Error e;
  e.code = code;
  e.message = message.substr(0, wire::kMaxErrorMessageBytes);
  return Reply{wire::Message{std::move(e)}, close};
}

Reply RoundManager::ack(uint64_t round, const wire::UploadId& id, wire::UpdateDisposition d,
                        wire::RejectReason reason) {
  wire::Ack a;
  a.round_id = round;
  a.upload_id = id;
  a.disposition = d;
  a.reason = reason;
  return Reply{wire::Message{a}, false};
}

UpdateCheck RoundManager::check_upload(Span<const uint8_t> bytes, const uint64_t* codec_seed,
                                       double norm_bound) {
  EncodedInfo info;
  if (read_header(bytes, &info) == Status::kOk) {
    decode_workspace_.resize(std::max(decode_workspace_.size(), decode_fast_workspace_size(info)));
  }
  return check_update(bytes, codec_seed, {global_.data(), n_}, norm_bound, {scratch_.data(), n_},
                      {decode_workspace_.data(), decode_workspace_.size()});
}

DeviceSeeds RoundManager::seeds_of(const std::string& device, uint64_t round_id) const {
  return device_seeds(round_seed(options_.seed, round_id), device.data(), device.size(), codec_);
}

wire::TaskOffer RoundManager::make_offer(const std::string& device, const wire::Hello& hello,
                                         int64_t now_ms) {
  wire::TaskOffer offer;
  offer.round_id = open_->record.round_id;
  offer.round_nonce = open_->record.nonce;
  offer.model_version = model_version_;
  const PublicModel::Download& download = public_.download_for(
      hello.model_version, (hello.capability_flags & wire::kCapabilityNeedsWholeModel) != 0);
  offer.base_model_version = download.base;
  offer.model_bytes = download.bytes;
  offer.model_digest = download.digest;
  offer.public_model_digest = public_.digest();
  offer.initial_model_seed = initial_model_seed_;
  offer.parameter_count = static_cast<uint32_t>(n_);
  offer.model_spec = spec_text_;
  offer.tensors = tensors_;
  offer.training = options_.training;
  const DeviceSeeds seeds = seeds_of(device, open_->record.round_id);  // round/seeds.h
  offer.training.seed = seeds.training;
  offer.uplink_codec = options_.uplink_codec;
  offer.downlink_codec = options_.downlink_codec;
  offer.codec_seed = seeds.codec;
  offer.deadline_ms = static_cast<uint32_t>(std::max<int64_t>(1, open_->record.deadline_unix_ms - now_ms));
  offer.max_upload_bytes = max_upload_bytes_;
  offer.max_chunk_bytes = options_.max_chunk_bytes;
  if (secure_) {
    if (const std::optional<uint32_t> index = secure_->index_of(device))
      offer.secure_aggregation = secure_->config_for(*index);
  }
  return offer;
}

Reply RoundManager::hello(const std::string& device, const wire::Hello& hello, int64_t now_ms) {
  // The drain's quiet timer: a device's first check-in after the last round counts, its repeats
  // (told "draining" already) do not, so a fleet that keeps coming back cannot hold it open.
  if (!finished_ || drained_.insert(device).second) last_checkin_ms_ = now_ms;
  auto retry_later = [&](wire::RetryReason reason, uint32_t after_ms) {
    metrics_->retry_later.fetch_add(1);
    const uint32_t window =
        reason == wire::RetryReason::kDraining ? options_.retry_window_ms : steered_window(device, now_ms);
    if (reason != wire::RetryReason::kDraining)
      longest_retry_ms_ = std::max<uint64_t>(longest_retry_ms_, uint64_t{after_ms} + window);
    return Reply{wire::Message{wire::RetryLater{after_ms, window, reason}}, false};
  };
  if (finished_) return retry_later(wire::RetryReason::kDraining, 60000);
  if (!open_) return retry_later(wire::RetryReason::kNoRound, options_.retry_after_ms);
  OpenRound& round = *open_;
  if (round.closing) {  // the close is being retried (e.g. a disk error): come back after it
    return retry_later(wire::RetryReason::kServerBusy,
                       static_cast<uint32_t>(std::clamp<int64_t>(
                           std::max<int64_t>(round.next_close_attempt_ms - now_ms, options_.retry_after_ms),
                           1, wire::kMaxRetryMs)));
  }
  if (secure_) return secure_hello(device, hello, now_ms);
  std::optional<UpdateRecord> existing;
  std::string error;
  if (storage_->find_update(round.record.round_id, device, &existing, &error) != Status::kOk) {
    fatal("find_update", error);
    return error_reply(wire::ErrorCode::kInternal, "server storage failure", true);
  }
  const bool already_offered = round.offered.count(device) != 0;
  if (!existing && !already_offered && round.offered.size() >= offers_per_round_)
    reclaim_expired_offers(now_ms);
  // Several aggregators: a cohort already in the shared ledger closes the round at the next look.
  const bool cohort_in = shared_ && round.in_ledger + round.carried >= options_.cohort;
  if (existing || round.carried_devices.count(device) != 0 ||
      (!already_offered && (round.offered.size() >= offers_per_round_ || cohort_in))) {
    // Full (or this device already contributed, here or in an abandoned round this one counts):
    // come back around the next round's opening.
    return retry_later(
        wire::RetryReason::kRoundFull,
        static_cast<uint32_t>(std::clamp<int64_t>(
            std::min<int64_t>(ms_to_deadline(now_ms), options_.retry_after_ms), 1, wire::kMaxRetryMs)));
  }
  // Random selection among check-ins, so that fast devices do not take every round.
  if (!already_offered && options_.selection_probability < 1.0 &&
      unit_double(splitmix64_next(&selection_rng_)) >= options_.selection_probability) {
    return retry_later(wire::RetryReason::kNotSelected, options_.retry_after_ms);
  }
  round.offered[device] = now_ms + lease_ms();
  expired_offers_.erase(device);
  waiting_.erase(device);
  metrics_->offers.fetch_add(1);
  log_info("task_offer")
      .kv("round", round.record.round_id)
      .kv("device", device)
      .kv("again", already_offered ? 1 : 0);
  return Reply{wire::Message{make_offer(device, hello, now_ms)}, false};
}

Reply RoundManager::model_request(const std::string& device, const wire::ModelRequest& request,
                                  int64_t now_ms) {
  if (request.model_version != model_version_) {
    return error_reply(
        wire::ErrorCode::kUnknownRound,
        "model version " + std::to_string(request.model_version) + " is not served; say Hello again");
  }
  if (!open_ || request.round_id != open_->record.round_id || open_->closing) {
    return error_reply(wire::ErrorCode::kUnknownRound,
                       "round " + std::to_string(request.round_id) + " is not open; say Hello again");
  }
  if (!renew_offer(device, now_ms)) {
    return error_reply(wire::ErrorCode::kUnknownRound,
                       "round " + std::to_string(request.round_id) +
                           " has no task for this device (its offer expired and the round is full)");
  }
  const PublicModel::Download* download = public_.download_from(request.base_model_version);
  if (download == nullptr || download->bytes == 0) {
    return error_reply(wire::ErrorCode::kUnknownRound,
                       "no download of version " + std::to_string(model_version_) + " from version " +
                           std::to_string(request.base_model_version) + " is served; say Hello again");
  }
  if (request.offset >= download->bytes) {
    return error_reply(wire::ErrorCode::kOffsetMismatch,
                       "offset beyond the download (" + std::to_string(download->bytes) + " bytes)");
  }
  wire::ModelChunk chunk;
  chunk.round_id = request.round_id;
  chunk.model_version = model_version_;
  chunk.offset = request.offset;
  chunk.total_bytes = download->bytes;
  const uint64_t length = std::min<uint64_t>(request.max_length, options_.max_chunk_bytes);
  (void)public_.read_download(request.base_model_version, request.offset, length, &chunk.data);
  metrics_->download_bytes.fetch_add(chunk.data.size());
  open_->download_bytes += chunk.data.size();
  return Reply{wire::Message{std::move(chunk)}, false};
}

Reply RoundManager::upload_start(const std::string& device, const wire::UploadStart& start, int64_t now_ms) {
  if (!open_ || start.round_id != open_->record.round_id) {
    // Resuming an upload the server already accepted (the ack was lost): report it complete, so
    // that the Commit is answered kDuplicate. A ledger that cannot be read is not "not held": the
    // device would take its counted update for one that was not.
    std::optional<UpdateRecord> existing;
    std::string error;
    if (start.round_id <= kMaxStoredId &&
        storage_->find_update(start.round_id, device, &existing, &error) != Status::kOk) {
      fatal("find_update", error);
      return error_reply(wire::ErrorCode::kInternal, "server storage failure", true);
    }
    if (existing && existing->upload_id == start.upload_id) {
      wire::UploadStatus status{start.round_id, start.upload_id, start.total_bytes, start.total_bytes};
      return Reply{wire::Message{status}, false};
    }
    if (closed_round(start.round_id)) {
      return error_reply(wire::ErrorCode::kUnknownRound,
                         "round " + std::to_string(start.round_id) + " is closed");
    }
    return error_reply(wire::ErrorCode::kUnknownRound,
                       "round " + std::to_string(start.round_id) + " is unknown");
  }
  OpenRound& round = *open_;
  if (start.round_nonce != round.record.nonce) {
    return error_reply(wire::ErrorCode::kNonceMismatch,
                       "the round nonce does not match round " + std::to_string(round.record.round_id));
  }
  // The ledger first: an update accepted before is reported complete (its Commit is then acked
  // Duplicate) whatever state the round is in now, closing included.
  std::optional<UpdateRecord> existing;
  std::string error;
  if (storage_->find_update(round.record.round_id, device, &existing, &error) != Status::kOk) {
    fatal("find_update", error);
    return error_reply(wire::ErrorCode::kInternal, "server storage failure", true);
  }
  // The same update again (its Commit then hears Duplicate) or another one (kAlreadyCounted): in
  // either case nothing more is taken from this device this round.
  if (existing) {  // accepted before: nothing to upload
    wire::UploadStatus status{round.record.round_id, start.upload_id, start.total_bytes, start.total_bytes};
    return Reply{wire::Message{status}, false};
  }
  if (round.closing) {
    return error_reply(wire::ErrorCode::kUnknownRound,
                       "round " + std::to_string(round.record.round_id) + " is closing");
  }
  if (round.carried_devices.count(device) != 0) {
    return error_reply(wire::ErrorCode::kUnauthorized,
                       "this device's update of an abandoned round is counted in round " +
                           std::to_string(round.record.round_id));
  }
  if (shared_ && round.offered.count(device) == 0 && expired_offers_.count(device) == 0) {
    // Several aggregators: the round's nonce comes only with an offer, so this device was offered
    // the round by another aggregator and came back through the balancer; its task stands here.
    round.offered[device] = now_ms + lease_ms();
    log_info("offer_adopted").kv("round", round.record.round_id).kv("device", device);
  }
  if (round.offered.count(device) == 0 && expired_offers_.count(device) == 0) {
    return error_reply(wire::ErrorCode::kUnauthorized,
                       "this device has no task in round " + std::to_string(round.record.round_id));
  }
  if (!renew_offer(device, now_ms)) {
    return error_reply(wire::ErrorCode::kUnknownRound, "the offer to this device in round " +
                                                           std::to_string(round.record.round_id) +
                                                           " expired and the round is full");
  }
  if (start.total_bytes > max_upload_bytes_) {
    return error_reply(wire::ErrorCode::kTooLarge, "update of " + std::to_string(start.total_bytes) +
                                                       " bytes exceeds the limit of " +
                                                       std::to_string(max_upload_bytes_));
  }
  Upload& upload = round.uploads[device];
  if (upload.upload_id != start.upload_id || upload.total != start.total_bytes) {
    // A new upload (or another one replacing an abandoned attempt of this device).
    upload = Upload{};
    upload.upload_id = start.upload_id;
    upload.total = start.total_bytes;  // the buffer grows as chunks arrive
    upload.started = std::chrono::steady_clock::now();
  }
  wire::UploadStatus status{round.record.round_id, upload.upload_id, upload.bytes.size(), upload.total};
  return Reply{wire::Message{status}, false};
}

std::optional<Reply> RoundManager::upload_chunk(const std::string& device, const wire::UploadChunk& chunk,
                                                int64_t now_ms) {
  if (!open_ || chunk.round_id != open_->record.round_id || open_->closing) {
    // The round closed while this device was uploading: drop the data silently; the Commit gets
    // the disposition (straggler or late).
    if ((open_ && chunk.round_id == open_->record.round_id) || closed_round(chunk.round_id))
      return std::nullopt;
    return error_reply(wire::ErrorCode::kUnknownRound,
                       "round " + std::to_string(chunk.round_id) + " is unknown", true);
  }
  auto it = open_->uploads.find(device);
  if (it == open_->uploads.end() || it->second.upload_id != chunk.upload_id) {
    return error_reply(wire::ErrorCode::kUnknownUpload, "no upload with this id: send UploadStart first",
                       true);
  }
  Upload& upload = it->second;
  if (chunk.total_bytes != upload.total || chunk.offset != upload.bytes.size()) {
    return error_reply(wire::ErrorCode::kOffsetMismatch,
                       "chunk at offset " + std::to_string(chunk.offset) + ", but the server holds " +
                           std::to_string(upload.bytes.size()) + " of " + std::to_string(upload.total) +
                           " bytes",
                       true);
  }
  upload.bytes.insert(upload.bytes.end(), chunk.data.begin(), chunk.data.end());
  metrics_->upload_bytes.fetch_add(chunk.data.size());
  auto lease = open_->offered.find(device);
  if (lease != open_->offered.end()) lease->second = now_ms + lease_ms();
  return std::nullopt;
}

Reply RoundManager::answer_counted_before(const std::string& device, const wire::Commit& commit,
                                          const UpdateRecord& counted) {
  const bool round_is_open = open_ && commit.round_id == open_->record.round_id;
  if (round_is_open && !open_->closing) {
    if (std::optional<Reply> failed = count_before_duplicate(device)) return std::move(*failed);
  }
  if (counted.upload_id == commit.upload_id &&
      std::memcmp(counted.digest.data(), commit.digest.data(), counted.digest.size()) == 0) {
    metrics_->updates_duplicate.fetch_add(1);
    log_info("update_duplicate")
        .kv("round", commit.round_id)
        .kv("device", device)
        .kv("upload", hex(commit.upload_id));
    return ack(commit.round_id, commit.upload_id, wire::UpdateDisposition::kDuplicate);
  }
  if (round_is_open) {  // the bytes of this other update, if any, are not kept
    auto it = open_->uploads.find(device);
    if (it != open_->uploads.end() && it->second.upload_id == commit.upload_id) open_->uploads.erase(it);
  }
  metrics_->updates_rejected.fetch_add(1);
  log_warn("update_rejected")
      .kv("round", commit.round_id)
      .kv("device", device)
      .kv("reason", wire::reject_reason_name(wire::RejectReason::kAlreadyCounted))
      .kv("upload", hex(commit.upload_id))
      .kv("counted_upload", hex(counted.upload_id));
  return ack(commit.round_id, commit.upload_id, wire::UpdateDisposition::kRejected,
             wire::RejectReason::kAlreadyCounted);
}

Reply RoundManager::straggler_or_late(const std::string& device, const wire::Commit& commit, bool late) {
  (late ? metrics_->updates_late : metrics_->updates_straggler).fetch_add(1);
  log_info(late ? "update_late" : "update_straggler").kv("round", commit.round_id).kv("device", device);
  return ack(commit.round_id, commit.upload_id,
             late ? wire::UpdateDisposition::kLate : wire::UpdateDisposition::kStraggler);
}

std::optional<Reply> RoundManager::commit_outside_open_round(const std::string& device,
                                                             const wire::Commit& commit, int64_t now_ms) {
  std::string error;
  if (commit.round_id > kMaxStoredId) {
    return error_reply(wire::ErrorCode::kUnknownRound,
                       "round " + std::to_string(commit.round_id) + " is unknown");
  }
  // Already accepted? (a retried commit after a lost ack, or a second update this round)
  std::optional<UpdateRecord> existing;
  if (storage_->find_update(commit.round_id, device, &existing, &error) != Status::kOk) {
    fatal("find_update", error);
    return error_reply(wire::ErrorCode::kInternal, "server storage failure", true);
  }
  if (existing && (!open_ || commit.round_id != open_->record.round_id)) {
    // A closed round's row counts only if its round committed, or was abandoned and its updates
    // passed on to a commit (or to the next round of the current model). The others (a secure
    // round abandoned after its masked phase, carried updates a failed commit dropped) are late.
    bool counted = true;
    if (abandoned_rows_counted(commit.round_id, &counted, &error) != Status::kOk) {
      fatal("reading an abandoned round", error);
      return error_reply(wire::ErrorCode::kInternal, "server storage failure", true);
    }
    if (!counted) return straggler_or_late(device, commit, true);
  }
  if (existing) return answer_counted_before(device, commit, *existing);
  // A round that is no longer open: straggler (closed with its quorum before the deadline) or late.
  if (!open_ || commit.round_id != open_->record.round_id) {
    const std::optional<ClosedRound> closed = closed_round(commit.round_id);
    if (!closed) {
      return error_reply(wire::ErrorCode::kUnknownRound,
                         "round " + std::to_string(commit.round_id) + " is unknown");
    }
    return straggler_or_late(device, commit, now_ms >= closed->deadline_ms || !closed->committed);
  }
  const OpenRound& round = *open_;
  if (commit.round_nonce != round.record.nonce) {
    return error_reply(wire::ErrorCode::kNonceMismatch,
                       "the round nonce does not match round " + std::to_string(round.record.round_id));
  }
  if (round.closing) {  // decided to close (its close is being retried): nothing more is taken
    return straggler_or_late(device, commit,
                             now_ms >= round.record.deadline_unix_ms || !round.closing_commit);
  }
  return std::nullopt;
}

Reply RoundManager::commit(const std::string& device, const wire::Commit& commit, int64_t now_ms) {
  // 1. Duplicates, closed rounds, stale nonces.
  if (std::optional<Reply> answer = commit_outside_open_round(device, commit, now_ms))
    return std::move(*answer);
  OpenRound& round = *open_;
  auto it = round.uploads.find(device);
  if (it == round.uploads.end() || it->second.upload_id != commit.upload_id) {
    return error_reply(wire::ErrorCode::kUnknownUpload, "no upload with this id in this round");
  }
  Upload& upload = it->second;
  if (upload.total != commit.total_bytes || upload.bytes.size() != upload.total) {
    return error_reply(wire::ErrorCode::kOffsetMismatch, "upload incomplete: the server holds " +
                                                             std::to_string(upload.bytes.size()) + " of " +
                                                             std::to_string(upload.total) + " bytes");
  }
  auto reject = [&](wire::RejectReason reason, const std::string& why) {
    metrics_->updates_rejected.fetch_add(1);
    log_warn("update_rejected")
        .kv("round", round.record.round_id)
        .kv("device", device)
        .kv("reason", wire::reject_reason_name(reason))
        .kv("detail", why);
    const wire::UploadId id = upload.upload_id;
    round.uploads.erase(it);
    return ack(round.record.round_id, id, wire::UpdateDisposition::kRejected, reason);
  };
  // 2. The bytes the device committed to.
  const tls::Sha256Digest digest = tls::sha256({upload.bytes.data(), upload.bytes.size()});
  if (std::memcmp(digest.data(), commit.digest.data(), digest.size()) != 0)
    return reject(wire::RejectReason::kDigestMismatch, "the bytes do not match the commit's SHA-256");
  if (commit.sample_count > options_.max_samples_per_update) {
    return reject(wire::RejectReason::kSampleCount, "sample count " + std::to_string(commit.sample_count) +
                                                        " above the limit of " +
                                                        std::to_string(options_.max_samples_per_update));
  }
  if (secure_) return count_masked(device, commit, digest, now_ms);
  // 3. This device's encoding (its seed) at the model's dimension, decoded once into scratch_;
  // 4. bounded influence (round/update_steps.h).
  const uint64_t codec_seed = seeds_of(device, round.record.round_id).codec;
  const UpdateCheck check =
      check_upload({upload.bytes.data(), upload.bytes.size()}, &codec_seed, round.norm_bound);
  if (check.verdict != UpdateVerdict::kAccepted) {
    return reject(reject_reason_of(check), describe_check(check, round.norm_bound));
  }
  // 5. Durable, then counted, then acked.
  return count_update(device, commit, digest, check.norm, now_ms);
}

std::optional<Reply> RoundManager::record_upload(const std::string& device, const wire::Commit& commit,
                                                 const tls::Sha256Digest& digest, int64_t now_ms,
                                                 UpdateRecord* record) {
  OpenRound& round = *open_;
  auto it = round.uploads.find(device);
  Upload& upload = it->second;
  record->round_id = round.record.round_id;
  record->device_id = device;
  record->upload_id = upload.upload_id;
  record->sample_count = commit.sample_count;
  std::memcpy(record->digest.data(), digest.data(), digest.size());
  record->payload_bytes = upload.bytes.size();
  record->accepted_unix_ms = now_ms;
  record->payload = std::move(upload.bytes);
  if (shared_) record->aggregator = lease_holder_;
  InsertResult inserted = InsertResult::kInserted;
  std::string error;
  const auto write_start = std::chrono::steady_clock::now();
  const Status written = storage_->record_update(*record, &inserted, &record->sequence, &error);
  const auto write_us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - write_start);
  if (written != Status::kOk && shared_) {
    // Several aggregators: the coordinator may have sealed or closed the round meanwhile.
    std::optional<RoundRecord> now;
    std::string why;
    if (storage_->get_round(round.record.round_id, &now, &why) == Status::kOk && now &&
        (now->state != RoundState::kOpen || now->sealed)) {
      round.closing = true;
      round.closing_commit = now->state != RoundState::kAbandoned;
      round.uploads.erase(it);
      return straggler_or_late(
          device, commit, now_ms >= round.record.deadline_unix_ms || now->state == RoundState::kAbandoned);
    }
  }
  if (written != Status::kOk) {
    upload.bytes = std::move(record->payload);   // kept for a retried commit
    if (!shared_) round.ledger_in_doubt = true;  // it may have taken effect
    fatal("record_update", error);
    return error_reply(wire::ErrorCode::kInternal, "server storage failure: the update was not recorded",
                       true);
  }
  metrics_->ledger_writes.fetch_add(1);
  metrics_->ledger_write_us_total.fetch_add(uint64_t(write_us.count()));
  if (inserted == InsertResult::kDuplicate) {  // the ledger held a row of this device already
    round.uploads.erase(it);
    std::optional<UpdateRecord> counted;
    if (storage_->find_update(round.record.round_id, device, &counted, &error) != Status::kOk || !counted) {
      if (!counted && error.empty()) error = "a duplicate ledger row that cannot be found again";
      fatal("find_update", error);
      return error_reply(wire::ErrorCode::kInternal, "server storage failure", true);
    }
    return answer_counted_before(device, commit, *counted);
  }
  return std::nullopt;
}

Reply RoundManager::count_update(const std::string& device, const wire::Commit& commit,
                                 const tls::Sha256Digest& digest, double norm, int64_t now_ms) {
  OpenRound& round = *open_;
  auto it = round.uploads.find(device);
  Upload& upload = it->second;
  UpdateRecord record;
  if (std::optional<Reply> done = record_upload(device, commit, digest, now_ms, &record))
    return std::move(*done);
  std::string error;
  const Status s = aggregate_.add_dense({scratch_.data(), n_}, double(commit.sample_count));
  if (s != Status::kOk) {  // cannot happen after the checks; the ledger still has it for a restart
    fatal("aggregate add", status_name(s));
    return error_reply(wire::ErrorCode::kInternal, "server failed to aggregate the update", true);
  }
  const double latency_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - upload.started).count();
  metrics_->observe_upload_latency(latency_s);
  metrics_->updates_accepted.fetch_add(1);
  round.upload_bytes += record.payload_bytes;
  round.own_sequence_sum = (round.own_sequence_sum + record.sequence) & kSequenceSumMask;
  ++round.accepted;
  round.contributed.insert(device);
  round.uploads.erase(it);
  log_info("update_accepted")
      .kv("round", round.record.round_id)
      .kv("device", device)
      .kv("bytes", record.payload_bytes)
      .kv("samples", uint64_t{commit.sample_count})
      .kv("norm", norm)
      .kv("accepted", uint64_t{round.accepted})
      .kv("upload_to_ack_s", latency_s);
  Reply reply = ack(record.round_id, record.upload_id, wire::UpdateDisposition::kAccepted);
  // A close that fails on I/O is logged and retried by tick(); this update is durable either way.
  if (!shared_ && round.accepted + round.carried >= options_.cohort) (void)close_round(true, now_ms, &error);
  return reply;
}

// --- secure aggregation rounds (secure_round.h) -----------------------------------------------

Status RoundManager::secure_like(uint64_t round_id, EncodedInfo* like, std::string* error) {
  // A codec with a round-shared seed (random-k) gives every device this seed (round/seeds.h).
  const uint64_t seed = seeds_of("secure-aggregation", round_id).codec;
  std::vector<float> zeros(n_, 0.0f);
  std::vector<uint8_t> workspace(workspace_size(codec_, n_)), out(encoded_bound(codec_, n_));
  size_t written = 0;
  Status s = encode_update(codec_, nullptr, {zeros.data(), n_}, seed, {workspace.data(), workspace.size()},
                           {out.data(), out.size()}, &written);
  if (s == Status::kOk) s = read_header({out.data(), written}, like);
  std::vector<int32_t> codes;
  if (s == Status::kOk) {
    codes.resize(integer_code_count(*like));
    s = read_integer_codes({out.data(), written}, {codes.data(), codes.size()});
  }
  if (s != Status::kOk) {
    *error =
        "secure aggregation sums integer codes: the uplink codec must be q<b>:shared=STEP, alone or after "
        "randk, or cs; '" +
        options_.uplink_codec + "' is not (" + status_name(s) + ")";
    return Status::kNotSummable;
  }
  return Status::kOk;
}

Status RoundManager::start_secure_round(const RoundRecord& record, std::string* error) {
  EDGEFL_RETURN_IF_ERROR(secure_like(record.round_id, &secure_like_, error));
  secure_.emplace();
  secure_mean_ready_ = false;
  const Status s =
      secure_->start(options_.secure_aggregation, storage_, record.round_id, record.nonce, offers_per_round_,
                     options_.cohort, secure_like_, record.opened_unix_ms + options_.deadline_ms, error);
  if (s != Status::kOk) secure_.reset();
  return s;
}

void RoundManager::secure_tick(int64_t now_ms) {
  if (!secure_ || !open_ || open_->closing) return;
  std::string error;
  if (reconcile_ledger(&error) != Status::kOk) {                // before the masked phase may end
    fatal("reading the ledger after a write in doubt", error);  // the next tick tries again
    return;
  }
  if (secure_->tick(now_ms, &error) != Status::kOk) {
    fatal("secure aggregation phase end", error);  // nothing changed: the next tick tries again
    return;
  }
  if (secure_->phase() == SecurePhase::kFailed) {
    abandon_reason_ = secure_->failure();
    (void)close_round(false, now_ms, &error);
    return;
  }
  if (secure_->phase() != SecurePhase::kDone) return;
  const uint32_t contributors = secure_->contributors();
  if (contributors < min_quorum_ || contributors == 0) {
    abandon_reason_ = "secure aggregation unmasked " + std::to_string(contributors) +
                      " devices, below the quorum of " + std::to_string(min_quorum_);
    (void)close_round(false, now_ms, &error);
    return;
  }
  if (!secure_mean_ready_) {
    const std::string wrong = secure_->wrong_share_holders();
    if (!wrong.empty())
      log_warn("secagg_wrong_shares_corrected").kv("round", open_->record.round_id).kv("devices", wrong);
    // The unmasked sum as one encoding (its codes, `contributors` recorded), decoded: the sum of
    // the contributors' decoded updates; the round's mean is its 1 / contributors.
    const std::vector<int32_t>& codes = secure_->summed_codes();
    std::vector<uint8_t> summed(kEncodedHeaderBytes + 4 * codes.size());
    size_t size = 0;
    Status s = write_integer_codes(secure_like_, {codes.data(), codes.size()}, contributors,
                                   {summed.data(), summed.size()}, &size);
    EncodedInfo info;
    if (s == Status::kOk) s = read_header({summed.data(), size}, &info);
    if (s == Status::kOk) {
      decode_workspace_.resize(std::max(decode_workspace_.size(), decode_fast_workspace_size(info)));
      s = decode({summed.data(), size}, {mean_.data(), n_},
                 {decode_workspace_.data(), decode_workspace_.size()});
    }
    if (s != Status::kOk) {
      abandon_reason_ = std::string("the unmasked sum does not decode: ") + status_name(s);
      (void)close_round(false, now_ms, &error);
      return;
    }
    // Plain updates carried from rounds abandoned before the server ran secure rounds join the
    // mean with one weight each, as every contributor has (secure rounds average uniformly).
    // They were seen in the clear when they were acknowledged: the server still learns nothing
    // of the contributors but their sum.
    std::vector<double> carried_sum(n_, 0.0);
    if (add_carried(&*open_, {.sum = &carried_sum}, &error) != Status::kOk) {
      fatal("reading the updates a secure round carries", error);  // the next tick tries again
      return;
    }
    const uint32_t carried = open_->carried;
    if (carried == 0) {
      const float scale = 1.0f / float(contributors);
      for (float& v : mean_) v *= scale;
    } else {
      const double scale = 1.0 / double(contributors + carried);
      for (size_t j = 0; j < n_; ++j) mean_[j] = float((double(mean_[j]) + carried_sum[j]) * scale);
    }
    secure_mean_ready_ = true;
  }
  (void)close_round(true, now_ms, &error);
}

std::optional<Reply> RoundManager::secagg_check(uint64_t round_id, const std::vector<uint8_t>& nonce) {
  if (!options_.secure_aggregation.enabled) {
    return error_reply(wire::ErrorCode::kUnexpectedMessage,
                       "this server does not run secure aggregation rounds");
  }
  if (!secure_round_open(round_id)) {
    return error_reply(wire::ErrorCode::kUnknownRound, "round " + std::to_string(round_id) + " is not open");
  }
  if (nonce != open_->record.nonce) {
    return error_reply(wire::ErrorCode::kNonceMismatch,
                       "the round nonce does not match round " + std::to_string(round_id));
  }
  return std::nullopt;
}

Reply RoundManager::secure_hello(const std::string& device, const wire::Hello& hello, int64_t now_ms) {
  OpenRound& round = *open_;
  if ((hello.capability_flags & wire::kCapabilitySecureAggregation) == 0) {
    return error_reply(wire::ErrorCode::kUnauthorized,
                       "this server runs secure aggregation rounds, which this device's SDK does not support",
                       true);
  }
  const bool known = secure_->index_of(device).has_value();
  uint32_t index = 0;
  std::string error;
  // A device that has done its part (or can no longer take it), or whose plain update this round
  // carries (a device contributes once per round), waits for the next round.
  const Status s =
      (known && !secure_->can_act(device)) || (!known && round.carried_devices.count(device) != 0)
          ? Status::kSecAggRefused
          : secure_->assign(device, now_ms, &index, &error);
  if (s == Status::kSecAggRefused) {
    metrics_->retry_later.fetch_add(1);
    const uint32_t after = static_cast<uint32_t>(std::clamp<int64_t>(
        std::min<int64_t>(ms_to_deadline(now_ms), options_.retry_after_ms), 1, wire::kMaxRetryMs));
    const uint32_t window = steered_window(device, now_ms);
    longest_retry_ms_ = std::max<uint64_t>(longest_retry_ms_, uint64_t{after} + window);
    return Reply{wire::Message{wire::RetryLater{after, window, wire::RetryReason::kRoundFull}}, false};
  }
  if (s != Status::kOk) {
    fatal("secure aggregation index", error);
    return error_reply(wire::ErrorCode::kInternal, "server storage failure", true);
  }
  round.offered[device] = std::numeric_limits<int64_t>::max();  // an index is never taken back
  waiting_.erase(device);
  if (!known) metrics_->offers.fetch_add(1);
  log_info("task_offer")
      .kv("round", round.record.round_id)
      .kv("device", device)
      .kv("secure_index", uint64_t{index})
      .kv("again", known ? 1 : 0);
  return Reply{wire::Message{make_offer(device, hello, now_ms)}, false};
}

Reply RoundManager::count_masked(const std::string& device, const wire::Commit& commit,
                                 const tls::Sha256Digest& digest, int64_t now_ms) {
  OpenRound& round = *open_;
  auto it = round.uploads.find(device);
  Upload& upload = it->second;
  std::vector<uint32_t> words;
  const Status checked = secure_->check_masked(device, {upload.bytes.data(), upload.bytes.size()}, &words);
  if (checked == Status::kProtocolError) {
    round.uploads.erase(it);
    return error_reply(
        wire::ErrorCode::kUnexpectedMessage,
        std::string("a masked vector is taken in the masked phase from a device that shared its keys; "
                    "round ") +
            std::to_string(round.record.round_id) + " is in the " + secure_phase_name(secure_->phase()) +
            " phase");
  }
  if (checked != Status::kOk) {
    metrics_->updates_rejected.fetch_add(1);
    log_warn("update_rejected")
        .kv("round", round.record.round_id)
        .kv("device", device)
        .kv("reason", "invalid_encoding")
        .kv("detail", std::string("not ") + std::to_string(secure_->masked_bytes()) + " bytes of " +
                          std::to_string(secure_->modulus_bits()) + "-bit words: " + status_name(checked));
    const wire::UploadId id = upload.upload_id;
    round.uploads.erase(it);
    return ack(round.record.round_id, id, wire::UpdateDisposition::kRejected,
               wire::RejectReason::kInvalidEncoding);
  }
  UpdateRecord record;
  if (std::optional<Reply> done = record_upload(device, commit, digest, now_ms, &record))
    return std::move(*done);
  round.uploads.erase(it);
  if (secure_->add_masked(device, {words.data(), words.size()}) != Status::kOk) {  // checked above
    fatal("secure aggregation masked input", "refused after its check");
    return error_reply(wire::ErrorCode::kInternal, "server failed to aggregate the masked vector", true);
  }
  metrics_->updates_accepted.fetch_add(1);
  round.upload_bytes += record.payload_bytes;
  round.own_sequence_sum = (round.own_sequence_sum + record.sequence) & kSequenceSumMask;
  ++round.accepted;
  round.contributed.insert(device);
  log_info("masked_vector_accepted")
      .kv("round", round.record.round_id)
      .kv("device", device)
      .kv("bytes", record.payload_bytes)
      .kv("masked", uint64_t(secure_->masked()));
  Reply reply = ack(record.round_id, record.upload_id, wire::UpdateDisposition::kAccepted);
  secure_tick(now_ms);
  return reply;
}

Reply RoundManager::secagg_advertise(const std::string& device, const wire::SecAggAdvertise& m,
                                     int64_t now_ms) {
  if (std::optional<Reply> refused = secagg_check(m.round_id, m.round_nonce)) return std::move(*refused);
  Reply reply{secure_->advertise(device, m, now_ms), false};
  secure_tick(now_ms);
  return reply;
}

Reply RoundManager::secagg_shares(const std::string& device, const wire::SecAggShares& m, int64_t now_ms) {
  if (std::optional<Reply> refused = secagg_check(m.round_id, m.round_nonce)) return std::move(*refused);
  Reply reply{secure_->shares(device, m, now_ms), false};
  secure_tick(now_ms);
  return reply;
}

Reply RoundManager::secagg_poll(const std::string& device, const wire::SecAggPoll& m, int64_t now_ms) {
  // Unmask polls of a round no longer open ask what became of the device's masked vector.
  if (m.phase == wire::SecAggPhase::kUnmask && !secure_round_open(m.round_id))
    return secure_outcome(device, m);
  if (std::optional<Reply> refused = secagg_check(m.round_id, m.round_nonce)) return std::move(*refused);
  secure_tick(now_ms);  // a phase whose deadline passed ends before the answer
  if (!secure_round_open(m.round_id)) {
    // The round ended with this tick (the next one may be open already, without this device):
    // one waiting for keys or shares hears that the round is gone, as it would from its next poll.
    if (m.phase == wire::SecAggPhase::kUnmask) return secure_outcome(device, m);
    return error_reply(wire::ErrorCode::kUnknownRound, "round " + std::to_string(m.round_id) + " ended");
  }
  return Reply{secure_->poll(device, m, now_ms), false};
}

Reply RoundManager::secure_outcome(const std::string& device, const wire::SecAggPoll& m) {
  std::optional<RoundRecord> round;
  std::optional<UpdateRecord> row;
  std::string error;
  if (m.round_id > kMaxStoredId) {
    return error_reply(wire::ErrorCode::kUnknownRound, "round " + std::to_string(m.round_id) + " is unknown");
  }
  // A store that cannot be read is not "not counted": the device would add a counted vector back.
  if (storage_->get_round(m.round_id, &round, &error) != Status::kOk ||
      (round && storage_->find_update(m.round_id, device, &row, &error) != Status::kOk)) {
    fatal("secure round outcome", error);
    return error_reply(wire::ErrorCode::kInternal, "server storage failure", true);
  }
  if (!round) {
    return error_reply(wire::ErrorCode::kUnknownRound, "round " + std::to_string(m.round_id) + " is unknown");
  }
  if (round->nonce != m.round_nonce) {
    return error_reply(wire::ErrorCode::kNonceMismatch,
                       "the round nonce does not match round " + std::to_string(m.round_id));
  }
  wire::SecAggStatus status{m.round_id, wire::SecAggPhase::kDone, 0, wire::SecAggOutcome::kNotCounted};
  if (round->state == RoundState::kOpen) {  // closing: its commit or abandonment is under way
    status.outcome = wire::SecAggOutcome::kPending;
    status.retry_after_ms = SecureRound::kOutcomeRetryMs;
  } else if (row && round->state == RoundState::kCommitted) {
    status.outcome = wire::SecAggOutcome::kCounted;
  } else if (row) {  // abandoned: counted only if a later round took its rows (plain rounds)
    bool counted = false;
    if (abandoned_rows_counted(*round, &counted, &error) != Status::kOk) {
      fatal("secure round outcome", error);
      return error_reply(wire::ErrorCode::kInternal, "server storage failure", true);
    }
    if (counted) status.outcome = wire::SecAggOutcome::kCounted;
  }
  if (status.outcome != wire::SecAggOutcome::kPending) {
    awaiting_outcome_.erase(device);
    log_info("secagg_outcome")
        .kv("round", m.round_id)
        .kv("device", device)
        .kv("state", round_state_name(round->state))
        .kv("outcome", status.outcome == wire::SecAggOutcome::kCounted ? "counted" : "not_counted");
  }
  return Reply{wire::Message{status}, false};
}

Reply RoundManager::secagg_unmask(const std::string& device, const wire::SecAggUnmaskResponse& m,
                                  int64_t now_ms) {
  if (std::optional<Reply> refused = secagg_check(m.round_id, m.round_nonce)) return std::move(*refused);
  Reply reply{secure_->unmask(device, m, now_ms), false};
  secure_tick(now_ms);
  // The answer that completed the round: its device hears the outcome now, not after a poll.
  const auto* status = std::get_if<wire::SecAggStatus>(&reply.message);
  if (status != nullptr && status->outcome == wire::SecAggOutcome::kPending &&
      !secure_round_open(m.round_id)) {
    return secure_outcome(device, wire::SecAggPoll{m.round_id, m.round_nonce, wire::SecAggPhase::kUnmask});
  }
  return reply;
}

}  // namespace edgefl::server
