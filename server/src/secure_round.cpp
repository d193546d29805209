// server/src/secure_round.cpp: see secure_round.h.
#include "secure_round.h"

#include <string.h>

#include <algorithm>
#include <cmath>

#include "core/bitio.h"
#include "log.h"
#include "secagg/crypto.h"
#include "secagg/dp.h"
#include "secagg/graph.h"
#include "secagg/wire_form.h"

namespace edgefl::server {

namespace {

constexpr size_t kSealedEntryBytes = 4 + secagg::kSealedSharesBytes;  // receiver, sealed pair
constexpr size_t kRevealedEntryBytes = 4 + 1 + secagg::kShareBytes;   // owner, kind, x and y
constexpr uint32_t kMinRetryMs = 20, kMaxRetryMs = 250;  // devices poll at most this long after a phase ends

wire::Message error_message(wire::ErrorCode code, const std::string& why) {
  wire::Error e;
  e.code = code;
  e.message = why.substr(0, wire::kMaxErrorMessageBytes);
  return wire::Message{e};
}

}  // namespace

const char* secure_phase_name(SecurePhase phase) {
  switch (phase) {
    case SecurePhase::kKeys: return "keys";
    case SecurePhase::kShares: return "shares";
    case SecurePhase::kMasked: return "masked";
    case SecurePhase::kUnmask: return "unmask";
    case SecurePhase::kDone: return "done";
    case SecurePhase::kFailed: return "failed";
  }
  return "unknown";
}

Status SecureRound::start(const SecureAggregationOptions& options, Storage* storage, uint64_t round_id,
                          const std::vector<uint8_t>& nonce, uint32_t cohort, uint32_t expected_contributors,
                          const EncodedInfo& like, int64_t keys_deadline_ms, std::string* error) {
  options_ = options;
  storage_ = storage;
  round_id_ = round_id;
  like_ = like;
  keys_deadline_ms_ = keys_deadline_ms;
  if (nonce.size() != secagg::Key32{}.size()) {
    *error = "secure aggregation needs a 32-byte round nonce";
    return Status::kInvalidArgument;
  }
  const bool sketch = like.values == ValueCoderKind::kCountSketch;
  if (!sketch &&
      (!like.shared_scale || like.values != ValueCoderKind::kUniform || like.entropy_coded ||
       (like.sparsifier != SparsifierKind::kNone && like.sparsifier != SparsifierKind::kRandomK))) {
    *error =
        "secure aggregation sums integer codes: the uplink codec must be q<b>:shared=STEP, alone or after "
        "randk (without ans), or cs";
    return Status::kNotSummable;
  }
  if (sketch && options.dp_clip > 0) {
    *error =
        "differential privacy over Count Sketch cells is not supported (its sensitivity per cell differs)";
    return Status::kUnsafeConfiguration;
  }
  if (sketch && (options.cell_bound < 1 || options.cell_bound > (1u << 24))) {
    *error = "the Count Sketch cell bound must be in 1 .. 2^24";
    return Status::kInvalidArgument;
  }
  params_.round_id = round_id;
  std::copy(nonce.begin(), nonce.end(), params_.round_nonce.begin());
  static const char kGraphLabel[] = "edgefl secagg graph seed";
  Status s = secagg::sha256_of(
      {{reinterpret_cast<const uint8_t*>(kGraphLabel), sizeof kGraphLabel - 1}, {nonce.data(), nonce.size()}},
      &params_.graph_seed);
  if (s != Status::kOk) {
    *error = "the graph seed";
    return s;
  }
  s = secagg::find_graph_parameters(cohort, options.adversarial, options.dropout,
                                    secagg::ThreatModel::kCuriousServer, &params_.graph);
  if (s != Status::kOk) {
    *error = "no SecAgg+ graph for " + std::to_string(cohort) + " devices with " +
             std::to_string(options.dropout) + " dropping and " + std::to_string(options.adversarial) +
             " adversarial: " + status_name(s);
    return s;
  }
  max_code_ = sketch ? options.cell_bound : (1u << (like.bits - 1)) - 1;
  if (options.dp_clip > 0) {
    const bool scaled = like.sparsifier == SparsifierKind::kRandomK && !like.randk_unscaled;
    const double scale = scaled ? double(like.n) / double(like.nnz) : 1.0;
    sensitivity_ = secagg::code_sensitivity(options.dp_clip * scale, double(like.param), like.nnz);
    const double z = options.dp_noise * sensitivity_;
    const double v = std::ceil(z * z / double(std::max<uint32_t>(1, expected_contributors)));
    if (!(v <= double(secagg::kMaxNoiseVariance))) {
      *error = "differential privacy: a device's noise variance " + std::to_string(v) +
               " (code units) is above " + std::to_string(secagg::kMaxNoiseVariance) +
               ": raise the codec's step or lower the clip";
      return Status::kUnsafeConfiguration;
    }
    noise_variance_ = uint64_t(std::max(1.0, v));
    s = secagg::noisy_modulus_bits(cohort, max_code_, noise_variance_, &params_.modulus_bits);
  } else {
    s = secagg::modulus_bits_for(cohort, max_code_, /*is_signed=*/true, &params_.modulus_bits);
  }
  if (s != Status::kOk) {
    *error = "the sum of " + std::to_string(cohort) + " devices' codes could wrap even modulo 2^32";
    return s;
  }
  params_.words = uint32_t(integer_code_count(like));
  s = server_.start(params_);
  if (s != Status::kOk) {
    *error = "SecAgg+ parameters refused";
    return s;
  }
  by_index_.clear();
  devices_.clear();
  phase_ = SecurePhase::kKeys;
  return Status::kOk;
}

size_t SecureRound::masked_bytes() const {
  return secagg::packed_words_bytes(params_.words, params_.modulus_bits);
}

std::optional<uint32_t> SecureRound::index_of(const std::string& device) const {
  auto it = devices_.find(device);
  if (it == devices_.end()) return std::nullopt;
  return it->second.index;
}

SecureRound::Device* SecureRound::find(const std::string& device) {
  auto it = devices_.find(device);
  return it == devices_.end() ? nullptr : &it->second;
}

wire::SecAggConfig SecureRound::config_for(uint32_t index) const {
  wire::SecAggConfig c;
  c.device_index = index;
  c.cohort = params_.graph.clients;
  c.degree = params_.graph.degree;
  c.threshold = params_.graph.threshold;
  c.modulus_bits = params_.modulus_bits;
  c.words = params_.words;
  c.graph_seed = params_.graph_seed;
  c.max_code = max_code_;
  c.noise_variance = noise_variance_;
  c.clip_l2_codes = noise_variance_ > 0 ? sensitivity_ : 0.0;
  c.phase_ms = options_.phase_ms;
  return c;
}

bool SecureRound::can_act(const std::string& device) const {
  auto it = devices_.find(device);
  if (it == devices_.end()) return false;
  const Device& d = it->second;
  switch (phase_) {
    case SecurePhase::kKeys: return true;
    case SecurePhase::kShares: return !d.keys.empty();
    case SecurePhase::kMasked: return !d.shares.empty();
    case SecurePhase::kUnmask: return d.masked && d.unmask.empty();
    default: return false;
  }
}

Status SecureRound::append(Kind kind, const std::string& device, std::vector<uint8_t> payload, int64_t now_ms,
                           std::string* error) {
  RoundEvent e;
  e.round_id = round_id_;
  e.device_id = device;
  e.kind = kind;
  e.unix_ms = now_ms;
  e.payload = std::move(payload);
  return storage_->append_round_event(e, error);
}

Status SecureRound::assign(const std::string& device, int64_t now_ms, uint32_t* index, std::string* error) {
  if (auto existing = index_of(device)) {
    *index = *existing;
    return Status::kOk;
  }
  if (phase_ != SecurePhase::kKeys || by_index_.size() >= params_.graph.clients)
    return Status::kSecAggRefused;
  EDGEFL_RETURN_IF_ERROR(append(kAssign, device, {}, now_ms, error));
  (void)apply(kAssign, device, {}, now_ms);
  *index = devices_[device].index;
  return Status::kOk;
}

// --- the log: every state change goes through apply() -----------------------------------------

Status SecureRound::apply(Kind kind, const std::string& device, const std::vector<uint8_t>& payload,
                          int64_t unix_ms) {
  if (kind == kAssign) {
    if (devices_.count(device) != 0 || by_index_.size() >= params_.graph.clients)
      return Status::kProtocolError;
    Device d;
    d.index = uint32_t(by_index_.size());
    devices_[device] = d;
    by_index_.push_back(device);
    return Status::kOk;
  }
  if (kind == kEndKeys || kind == kEndShares || kind == kEndMasked || kind == kEndUnmask) {
    end_phase(kind, unix_ms);
    return Status::kOk;
  }
  Device* d = find(device);
  if (d == nullptr) return Status::kProtocolError;
  switch (kind) {
    case kKeys: {
      if (payload.size() != 64) return Status::kInvalidMessage;
      secagg::AdvertisedKeys k;
      k.device = d->index;
      memcpy(k.cipher_public.data(), payload.data(), 32);
      memcpy(k.mask_public.data(), payload.data() + 32, 32);
      const Status s = server_.add_keys(k);
      if (s == Status::kOk) d->keys = payload;
      return s;
    }
    case kShares: {
      if (payload.size() < 32 || (payload.size() - 32) % kSealedEntryBytes != 0)
        return Status::kInvalidMessage;
      secagg::Key32 commitment;
      memcpy(commitment.data(), payload.data(), 32);
      std::vector<secagg::SealedShares> sealed((payload.size() - 32) / kSealedEntryBytes);
      for (size_t i = 0; i < sealed.size(); ++i) {
        const uint8_t* p = payload.data() + 32 + i * kSealedEntryBytes;
        sealed[i].from = d->index;
        sealed[i].to = load_le32(p);
        memcpy(sealed[i].sealed.data(), p + 4, sealed[i].sealed.size());
      }
      const Status s = server_.add_shares(d->index, commitment, {sealed.data(), sealed.size()});
      if (s == Status::kOk) d->shares = payload;
      return s;
    }
    case kUnmask: {
      if (payload.size() % kRevealedEntryBytes != 0) return Status::kInvalidMessage;
      std::vector<secagg::RevealedShare> revealed(payload.size() / kRevealedEntryBytes);
      for (size_t i = 0; i < revealed.size(); ++i) {
        const uint8_t* p = payload.data() + i * kRevealedEntryBytes;
        revealed[i].owner = load_le32(p);
        if (p[4] > 1) return Status::kInvalidMessage;
        revealed[i].kind = secagg::SecretKind(p[4]);
        EDGEFL_RETURN_IF_ERROR(secagg::shamir_share_from_bytes(p + 5, &revealed[i].share));
      }
      const Status s = server_.add_unmask(d->index, {revealed.data(), revealed.size()});
      if (s == Status::kOk) d->unmask = payload;
      return s;
    }
    default: return Status::kInvalidMessage;
  }
}

void SecureRound::end_phase(Kind kind, int64_t unix_ms) {
  const SecurePhase ended = phase_;
  Status s = Status::kOk;
  switch (kind) {
    case kEndKeys:
      if (phase_ != SecurePhase::kKeys) return;
      s = server_.end_keys();
      phase_ = SecurePhase::kShares;
      break;
    case kEndShares:
      if (phase_ != SecurePhase::kShares) return;
      s = server_.end_shares();
      phase_ = SecurePhase::kMasked;
      break;
    case kEndMasked:
      if (phase_ != SecurePhase::kMasked) return;
      s = server_.end_masked();
      phase_ = SecurePhase::kUnmask;
      break;
    case kEndUnmask: {
      if (phase_ != SecurePhase::kUnmask) return;
      std::vector<uint32_t> sum(params_.words);
      std::vector<uint32_t> contributors;
      s = server_.finish({sum.data(), sum.size()}, &contributors);
      if (s == Status::kOk) {
        summed_.resize(sum.size());
        for (size_t i = 0; i < sum.size(); ++i)
          summed_[i] = int32_t(secagg::centered(sum[i], params_.modulus_bits));
        contributors_ = uint32_t(contributors.size());
        phase_ = SecurePhase::kDone;
      }
      break;
    }
    default: return;
  }
  phase_started_ms_ = unix_ms;
  if (s != Status::kOk) {
    phase_ = SecurePhase::kFailed;
    failure_ = std::string("secure aggregation failed at the end of the ") + secure_phase_name(ended) +
               " phase: " + status_name(s);
  }
}

std::string SecureRound::wrong_share_holders() const {
  std::string out;
  for (uint32_t index : server_.wrong_share_holders()) {
    if (index >= by_index_.size()) continue;
    out += (out.empty() ? "" : ",") + by_index_[index];
  }
  return out;
}

Status SecureRound::recover(const std::function<Status(const MaskedVisitor&)>& masked_vectors,
                            std::string* error) {
  // The log first (storage refuses a read from inside another read's callback), then replayed.
  std::vector<RoundEvent> events;
  EDGEFL_RETURN_IF_ERROR(storage_->for_each_round_event(
      round_id_,
      [&](const RoundEvent& e) {
        events.push_back(e);
        return Status::kOk;
      },
      error));
  bool masked_replayed = false;
  const auto replay_masked = [&]() -> Status {
    masked_replayed = true;
    return masked_vectors([&](const std::string& device, Span<const uint8_t> bytes) -> Status {
      std::vector<uint32_t> words;
      EDGEFL_RETURN_IF_ERROR(check_masked(device, bytes, &words));
      return add_masked(device, {words.data(), words.size()});
    });
  };
  Status s = Status::kOk;
  for (const RoundEvent& e : events) {
    // The ledger's masked vectors were all taken in the masked phase, before it ended.
    if (e.kind == kEndMasked && !masked_replayed && phase_ == SecurePhase::kMasked) s = replay_masked();
    if (s != Status::kOk) break;
    (void)apply(Kind(e.kind), e.device_id, e.payload, e.unix_ms);  // refused then, refused now
  }
  if (s == Status::kOk && !masked_replayed && phase_ == SecurePhase::kMasked) s = replay_masked();
  if (s != Status::kOk && error->empty())
    *error = std::string("replaying the secure round: ") + status_name(s);
  return s;
}

// --- phases -----------------------------------------------------------------------------------

int64_t SecureRound::phase_deadline() const {
  return phase_ == SecurePhase::kKeys ? keys_deadline_ms_ : phase_started_ms_ + int64_t(options_.phase_ms);
}

uint32_t SecureRound::retry_ms(int64_t now_ms) const {
  return uint32_t(std::clamp<int64_t>(phase_deadline() - now_ms, kMinRetryMs, kMaxRetryMs));
}

Status SecureRound::tick(int64_t now_ms, std::string* error) {
  for (;;) {
    const bool due = now_ms >= phase_deadline();
    Kind end;
    switch (phase_) {
      case SecurePhase::kKeys:
        if (!due && !(by_index_.size() == params_.graph.clients && advertised() == by_index_.size()))
          return Status::kOk;
        end = kEndKeys;
        break;
      case SecurePhase::kShares:
        if (!due && shared() < advertised()) return Status::kOk;
        end = kEndShares;
        break;
      case SecurePhase::kMasked:
        if (!due && masked() < shared()) return Status::kOk;
        end = kEndMasked;
        break;
      case SecurePhase::kUnmask:
        if (!due && answered() < masked()) return Status::kOk;
        end = kEndUnmask;
        break;
      default: return Status::kOk;
    }
    EDGEFL_RETURN_IF_ERROR(append(end, "", {}, now_ms, error));
    const SecurePhase before = phase_;
    end_phase(end, now_ms);
    log_info("secagg_phase_end")
        .kv("round", round_id_)
        .kv("phase", secure_phase_name(before))
        .kv("next", secure_phase_name(phase_))
        .kv("assigned", uint64_t(assigned()))
        .kv("advertised", uint64_t(advertised()))
        .kv("shared", uint64_t(shared()))
        .kv("masked", uint64_t(masked()))
        .kv("answered", uint64_t(answered()));
  }
}

// --- messages ---------------------------------------------------------------------------------

wire::Message SecureRound::status_reply(wire::SecAggPhase waiting_for, int64_t now_ms,
                                        const Device* d) const {
  wire::SecAggStatus st;
  st.round_id = round_id_;
  st.phase = waiting_for;
  st.retry_after_ms = waiting_for == wire::SecAggPhase::kDone ? 0 : retry_ms(now_ms);
  if (waiting_for == wire::SecAggPhase::kDone && d != nullptr) {
    // The round is still open: a device whose masked vector is in waits to hear whether the
    // round's model counts it (the round may yet be abandoned); one without has none counted.
    st.outcome = d->masked ? wire::SecAggOutcome::kPending : wire::SecAggOutcome::kNotCounted;
    if (d->masked) st.retry_after_ms = kOutcomeRetryMs;
  }
  return wire::Message{st};
}

wire::Message SecureRound::keys_reply(uint32_t index) const {
  wire::SecAggKeys k;
  k.round_id = round_id_;
  k.keys = secagg::to_wire_all(server_.keys_for(index));
  return wire::Message{std::move(k)};
}

wire::Message SecureRound::inbox_reply(uint32_t index) const {
  wire::SecAggInbox in;
  in.round_id = round_id_;
  in.shares = secagg::to_wire_all(server_.shares_for(index));
  return wire::Message{std::move(in)};
}

wire::Message SecureRound::unmask_request_reply(uint32_t index) const {
  const secagg::UnmaskRequest r = server_.unmask_request_for(index);
  wire::SecAggUnmaskRequest w;
  w.round_id = round_id_;
  w.survivors = r.survivors;
  w.dropped = r.dropped;
  return wire::Message{std::move(w)};
}

wire::Message SecureRound::refuse(Device* d, Kind kind, wire::ErrorCode code, const std::string& why) {
  if (d != nullptr) ++d->refused[refusal_slot(kind)];
  log_warn("secagg_refused").kv("round", round_id_).kv("reason", why);
  return error_message(code, why);
}

wire::Message SecureRound::take(Kind kind, const std::string& device, Device* d,
                                const std::vector<uint8_t>& payload, wire::SecAggPhase waiting_for,
                                int64_t now_ms) {
  const char* what = kind == kKeys ? "keys" : kind == kShares ? "shares" : "answer";
  if (d->refused[refusal_slot(kind)] >= kMaxAttempts) {
    return error_message(wire::ErrorCode::kRateLimited, std::string("too many refused messages: ") + what);
  }
  std::string error;
  if (append(kind, device, payload, now_ms, &error) != Status::kOk) {
    log_error("storage_failure").kv("what", std::string("secagg ") + what).kv("error", error);
    return error_message(wire::ErrorCode::kInternal,
                         std::string("server storage failure: ") + what + " not recorded");
  }
  const Status s = apply(kind, device, payload, now_ms);
  if (s != Status::kOk) {
    return refuse(d, kind, wire::ErrorCode::kBadMessage, std::string(what) + " refused: " + status_name(s));
  }
  return status_reply(waiting_for, now_ms, d);
}

wire::Message SecureRound::advertise(const std::string& device, const wire::SecAggAdvertise& m,
                                     int64_t now_ms) {
  Device* d = find(device);
  if (d == nullptr)
    return refuse(nullptr, kKeys, wire::ErrorCode::kUnauthorized, "this device has no index in the round");
  std::vector<uint8_t> payload(m.keys.cipher_public.begin(), m.keys.cipher_public.end());
  payload.insert(payload.end(), m.keys.mask_public.begin(), m.keys.mask_public.end());
  if (!d->keys.empty()) {  // sent before: a repeat is answered as a poll
    if (payload != d->keys)
      return refuse(d, kKeys, wire::ErrorCode::kUnexpectedMessage, "keys advertised already");
    if (phase_ == SecurePhase::kKeys) return status_reply(wire::SecAggPhase::kKeys, now_ms);
    return phase_ == SecurePhase::kFailed ? error_message(wire::ErrorCode::kUnknownRound, failure_)
                                          : keys_reply(d->index);
  }
  if (m.keys.device != d->index) {
    return refuse(d, kKeys, wire::ErrorCode::kBadMessage,
                  "the keys name index " + std::to_string(m.keys.device) + ", this device's is " +
                      std::to_string(d->index));
  }
  if (phase_ != SecurePhase::kKeys) {
    return refuse(d, kKeys, wire::ErrorCode::kUnknownRound,
                  "the keys phase of round " + std::to_string(round_id_) + " is over");
  }
  return take(kKeys, device, d, payload, wire::SecAggPhase::kKeys, now_ms);
}

wire::Message SecureRound::shares(const std::string& device, const wire::SecAggShares& m, int64_t now_ms) {
  Device* d = find(device);
  if (d == nullptr)
    return refuse(nullptr, kShares, wire::ErrorCode::kUnauthorized, "this device has no index in the round");
  std::vector<uint8_t> payload(m.seed_commitment.begin(), m.seed_commitment.end());
  payload.reserve(32 + m.shares.size() * kSealedEntryBytes);
  for (const wire::SecAggSealedShare& s : m.shares) {
    if (s.from != d->index) {
      return refuse(d, kShares, wire::ErrorCode::kBadMessage,
                    "shares sent as index " + std::to_string(s.from));
    }
    uint8_t to[4];
    store_le32(to, s.to);
    payload.insert(payload.end(), to, to + 4);
    payload.insert(payload.end(), s.sealed.begin(), s.sealed.end());
  }
  if (!d->shares.empty()) {
    if (payload != d->shares)
      return refuse(d, kShares, wire::ErrorCode::kUnexpectedMessage, "shares sent already");
    if (phase_ == SecurePhase::kShares) return status_reply(wire::SecAggPhase::kShares, now_ms);
    return phase_ == SecurePhase::kFailed ? error_message(wire::ErrorCode::kUnknownRound, failure_)
                                          : inbox_reply(d->index);
  }
  if (phase_ != SecurePhase::kShares) {
    return refuse(d, kShares, wire::ErrorCode::kUnexpectedMessage,
                  std::string("shares are taken in the shares phase; round ") + std::to_string(round_id_) +
                      " is in " + secure_phase_name(phase_));
  }
  return take(kShares, device, d, payload, wire::SecAggPhase::kShares, now_ms);
}

wire::Message SecureRound::poll(const std::string& device, const wire::SecAggPoll& m, int64_t now_ms) {
  Device* d = find(device);
  if (d == nullptr)
    return error_message(wire::ErrorCode::kUnauthorized, "this device has no index in the round");
  if (phase_ == SecurePhase::kFailed) return error_message(wire::ErrorCode::kUnknownRound, failure_);
  switch (m.phase) {
    case wire::SecAggPhase::kKeys:
      if (d->keys.empty()) return error_message(wire::ErrorCode::kUnexpectedMessage, "advertise keys first");
      return phase_ == SecurePhase::kKeys ? status_reply(wire::SecAggPhase::kKeys, now_ms)
                                          : keys_reply(d->index);
    case wire::SecAggPhase::kShares:
      if (d->shares.empty()) return error_message(wire::ErrorCode::kUnexpectedMessage, "send shares first");
      return phase_ == SecurePhase::kShares ? status_reply(wire::SecAggPhase::kShares, now_ms)
                                            : inbox_reply(d->index);
    case wire::SecAggPhase::kUnmask:
      if (d->shares.empty()) return error_message(wire::ErrorCode::kUnexpectedMessage, "send shares first");
      if (phase_ <= SecurePhase::kMasked) return status_reply(wire::SecAggPhase::kUnmask, now_ms);
      if (!d->unmask.empty() || phase_ == SecurePhase::kDone)
        return status_reply(wire::SecAggPhase::kDone, now_ms, d);
      return unmask_request_reply(d->index);
    default: return error_message(wire::ErrorCode::kBadMessage, "poll for keys, shares or unmask");
  }
}

wire::Message SecureRound::unmask(const std::string& device, const wire::SecAggUnmaskResponse& m,
                                  int64_t now_ms) {
  Device* d = find(device);
  if (d == nullptr)
    return refuse(nullptr, kUnmask, wire::ErrorCode::kUnauthorized, "this device has no index in the round");
  std::vector<uint8_t> payload;
  payload.reserve(m.shares.size() * kRevealedEntryBytes);
  for (const wire::SecAggRevealedShare& r : m.shares) {
    uint8_t entry[kRevealedEntryBytes];
    store_le32(entry, r.owner);
    entry[4] = r.kind;
    secagg::Share share;
    share.x = r.x;
    std::copy(r.y.begin(), r.y.end(), share.y);
    secagg::shamir_share_to_bytes(share, entry + 5);
    payload.insert(payload.end(), entry, entry + kRevealedEntryBytes);
  }
  if (!d->unmask.empty()) {
    if (payload != d->unmask)
      return refuse(d, kUnmask, wire::ErrorCode::kUnexpectedMessage, "unmask answered already");
    return status_reply(wire::SecAggPhase::kDone, now_ms, d);
  }
  if (phase_ == SecurePhase::kFailed) return error_message(wire::ErrorCode::kUnknownRound, failure_);
  if (phase_ != SecurePhase::kUnmask) {
    return refuse(d, kUnmask, wire::ErrorCode::kUnexpectedMessage,
                  std::string("unmask answers are taken in the unmask phase; round ") +
                      std::to_string(round_id_) + " is in " + secure_phase_name(phase_));
  }
  return take(kUnmask, device, d, payload, wire::SecAggPhase::kDone, now_ms);
}

Status SecureRound::check_masked(const std::string& device, Span<const uint8_t> bytes,
                                 std::vector<uint32_t>* words) const {
  auto it = devices_.find(device);
  if (it == devices_.end() || phase_ != SecurePhase::kMasked || it->second.shares.empty())
    return Status::kProtocolError;
  std::vector<uint32_t> out(params_.words);
  EDGEFL_RETURN_IF_ERROR(secagg::unpack_words(bytes, params_.modulus_bits, {out.data(), out.size()}));
  *words = std::move(out);
  return Status::kOk;
}

Status SecureRound::add_masked(const std::string& device, Span<const uint32_t> words) {
  auto it = devices_.find(device);
  if (it == devices_.end()) return Status::kProtocolError;
  const Status s = server_.add_masked(it->second.index, words);
  if (s == Status::kOk) it->second.masked = true;
  return s;
}

}  // namespace edgefl::server
