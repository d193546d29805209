// server/src/secure_round.h: the server's side of one secure aggregation round (SecAgg+, Bell et
// al. CCS 2020, over the four rounds of Bonawitz et al. CCS 2017; sdk/src/secagg/protocol.h): the
// devices' indices, the phases and their deadlines, the durable log of every protocol message it
// took, and the unmasked sum of the survivors' integer codes.
//
// Phases (wire::SecAggPhase), each ending early once every device that can still act has acted:
//   keys     until the round's reporting deadline (devices train first, then advertise), or when
//            all `cohort` indices are taken and have advertised;
//   shares   phase_ms after that, or when every device that advertised has shared;
//   masked   phase_ms after that, or when every device that shared has sent its masked vector
//            (through the ordinary upload: the ledger holds it, durably, before its ack);
//   unmask   phase_ms after that, or when every survivor has answered; then the sum is unmasked.
// A phase that ends with too few devices (fewer than t + 1 keys, t shares of a secret) fails the
// round: phase() becomes kFailed, and the caller abandons the round.
//
// Durability: every message that passes the cheap checks (the device holds an index, the phase is
// right, it has not acted in this phase, at most kMaxAttempts tries) is appended to storage as a
// RoundEvent before it is applied, and so is the end of each phase. The state is a deterministic
// function of that log (plus the ledger's masked vectors, which can only have been taken in the
// masked phase), so recover() after a crash rebuilds exactly the state that answered the devices:
// no acknowledged masked vector is lost or counted twice. A failure to append changes nothing and
// is answered kInternal (the device retries).
//
// What the server keeps: the devices' public keys, the sealed shares (which it cannot open), the
// seed commitments and the running masked sum. It never holds one device's unmasked vector.
//
// Threading: none; RoundManager calls it from its thread.
#ifndef EDGEFL_SERVER_SECURE_ROUND_H_
#define EDGEFL_SERVER_SECURE_ROUND_H_

#include <stdint.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "edgefl/codec.h"
#include "edgefl/status.h"
#include "edgefl/wire.h"
#include "secagg/protocol.h"
#include "storage.h"

namespace edgefl::server {

struct SecureAggregationOptions {
  bool enabled = false;
  double dropout = 0.3;       // fraction of the cohort that may drop out
  double adversarial = 0.05;  // fraction of devices that may collude with a curious server
  uint32_t phase_ms = 30000;  // each phase after the keys
  // Count Sketch inputs (cs): each device clips its sketch's cells to +-cell_bound, so that the
  // modulus holds the cohort's sum (the cells are sums of codes, with no bound of their own).
  uint32_t cell_bound = 2047;
  // Distributed differential privacy (secagg/dp.h): each device clips its update to L2 norm
  // dp_clip (model units) and adds discrete Gaussian noise to its codes, so that the sum of
  // `cohort` devices carries noise of standard deviation dp_noise x the sensitivity. 0: off.
  double dp_clip = 0;
  double dp_noise = 0;
  double dp_delta = 1e-5;  // for the reported epsilon
};

enum class SecurePhase : uint8_t { kKeys, kShares, kMasked, kUnmask, kDone, kFailed };
const char* secure_phase_name(SecurePhase phase);

class SecureRound {
 public:
  static constexpr uint32_t kMaxAttempts = 3;  // refused messages of one device in one phase
  // A device waiting for its masked vector's outcome polls again after this long.
  static constexpr uint32_t kOutcomeRetryMs = 200;

  // `cohort`: the devices the graph is made for; `like`: the encoding of the round's codec at the
  // model's dimension whose integer codes devices mask (read_integer_codes() must accept it:
  // shared-scale codes, dense or after random-k, or Count Sketch cells);
  // `keys_deadline_ms`: the end of the keys phase (unix ms). Fails with kUnsafeConfiguration (no
  // graph for these rates, a modulus above 32 bits, DP noise above secagg::kMaxNoiseVariance),
  // kNotSummable (a codec whose codes cannot be summed) and a message.
  [[nodiscard]] Status start(const SecureAggregationOptions& options, Storage* storage, uint64_t round_id,
                             const std::vector<uint8_t>& nonce, uint32_t cohort,
                             uint32_t expected_contributors, const EncodedInfo& like,
                             int64_t keys_deadline_ms, std::string* error);

  // Replays the round's event log, the ledger's masked vectors at the end of the masked phase
  // (`masked_vectors` calls its argument once per ledger row, in acceptance order). Fails with
  // the storage's status and a message.
  using MaskedVisitor = std::function<Status(const std::string& device, Span<const uint8_t> bytes)>;
  [[nodiscard]] Status recover(const std::function<Status(const MaskedVisitor&)>& masked_vectors,
                               std::string* error);

  SecurePhase phase() const { return phase_; }
  uint32_t cohort() const { return params_.graph.clients; }
  uint32_t modulus_bits() const { return params_.modulus_bits; }
  uint64_t noise_variance() const { return noise_variance_; }
  double sensitivity() const { return sensitivity_; }
  // Bytes of one masked vector on the wire.
  size_t masked_bytes() const;

  // The device's index, if it has one.
  std::optional<uint32_t> index_of(const std::string& device) const;
  // Gives `device` the next free index (durable). kOk with *index; kSecAggRefused when the keys
  // phase is over or every index is taken; kIoError (with *error) when the log cannot be written.
  [[nodiscard]] Status assign(const std::string& device, int64_t now_ms, uint32_t* index, std::string* error);
  wire::SecAggConfig config_for(uint32_t index) const;
  // Whether `device` (with an index) still has a step to take in this round: advertise (keys
  // phase), share (after advertising), mask and then unmask (after sharing), answer (after
  // masking). A device that cannot act any more is not offered the round again.
  bool can_act(const std::string& device) const;

  // The protocol messages: each returns the reply (the phase's result, SecAggStatus to poll
  // again, or an Error: kUnauthorized for a device without an index, kUnexpectedMessage for a
  // message out of its phase or a second, different one, kBadMessage for one the protocol
  // refuses, kUnknownRound once the round failed, kInternal when the log cannot be written).
  wire::Message advertise(const std::string& device, const wire::SecAggAdvertise& m, int64_t now_ms);
  wire::Message shares(const std::string& device, const wire::SecAggShares& m, int64_t now_ms);
  wire::Message poll(const std::string& device, const wire::SecAggPoll& m, int64_t now_ms);
  wire::Message unmask(const std::string& device, const wire::SecAggUnmaskResponse& m, int64_t now_ms);

  // A masked vector: kOk with its words when `device` may send one now (the masked phase, after
  // sharing, not sent before) and the bytes are words of modulus_bits() bits; otherwise the
  // reason (kProtocolError: not now; kSizeMismatch / kInvalidMessage: the bytes).
  [[nodiscard]] Status check_masked(const std::string& device, Span<const uint8_t> bytes,
                                    std::vector<uint32_t>* words) const;
  // Adds a checked vector whose ledger row is durable.
  [[nodiscard]] Status add_masked(const std::string& device, Span<const uint32_t> words);

  // Ends phases whose deadline passed or whose devices have all acted (durable). kIoError with a
  // message when the log cannot be written (nothing changed; try again).
  [[nodiscard]] Status tick(int64_t now_ms, std::string* error);

  // kDone: the unmasked sum of the contributors' codes (centred), and how many contributed.
  const std::vector<int32_t>& summed_codes() const { return summed_; }
  uint32_t contributors() const { return contributors_; }
  // Why the round failed (kFailed), in words.
  const std::string& failure() const { return failure_; }
  // The devices holding an index, by index.
  const std::vector<std::string>& devices() const { return by_index_; }
  // kDone: the devices that revealed a share off its secret's polynomial (corrected: the sum is
  // exact), comma-separated; "" if none.
  std::string wrong_share_holders() const;
  // Counts for logs and tests.
  size_t assigned() const { return devices_.size(); }
  size_t advertised() const { return server_.advertised(); }
  size_t shared() const { return server_.shared(); }
  size_t masked() const { return server_.masked(); }
  size_t answered() const { return server_.answered(); }

 private:
  enum Kind : uint32_t {
    kAssign = 1,
    kKeys = 2,
    kEndKeys = 3,
    kShares = 4,
    kEndShares = 5,
    kEndMasked = 6,
    kUnmask = 7,
    kEndUnmask = 8,
  };
  struct Device {
    uint32_t index = 0;
    std::vector<uint8_t> keys, shares, unmask;  // the payloads it sent (for repeats)
    bool masked = false;                        // its masked vector is in the sum
    uint32_t refused[3] = {};                   // refused keys, shares, answers (refusal_slot)
  };
  Status append(Kind kind, const std::string& device, std::vector<uint8_t> payload, int64_t now_ms,
                std::string* error);
  // Applies one event (live or replayed); returns the protocol's status for the message.
  Status apply(Kind kind, const std::string& device, const std::vector<uint8_t>& payload, int64_t unix_ms);
  void end_phase(Kind kind, int64_t unix_ms);
  int64_t phase_deadline() const;
  uint32_t retry_ms(int64_t now_ms) const;
  // kDone to device `d` (may be null) carries its vector's outcome while the round is open.
  wire::Message status_reply(wire::SecAggPhase waiting_for, int64_t now_ms, const Device* d = nullptr) const;
  wire::Message keys_reply(uint32_t index) const;
  wire::Message inbox_reply(uint32_t index) const;
  wire::Message unmask_request_reply(uint32_t index) const;
  // A refusal, counted against `d` (when known) for messages of `kind`.
  wire::Message refuse(Device* d, Kind kind, wire::ErrorCode code, const std::string& why);
  // A first message of `kind` from `d` in its phase: appended to the log (durable), then applied.
  // The reply is SecAggStatus(waiting_for), or the refusal (kRateLimited after kMaxAttempts
  // refusals of this kind, kInternal when the log cannot be written, kBadMessage when the protocol
  // refuses it).
  wire::Message take(Kind kind, const std::string& device, Device* d, const std::vector<uint8_t>& payload,
                     wire::SecAggPhase waiting_for, int64_t now_ms);
  static int refusal_slot(Kind kind) { return kind == kKeys ? 0 : kind == kShares ? 1 : 2; }
  Device* find(const std::string& device);

  SecureAggregationOptions options_;
  Storage* storage_ = nullptr;
  uint64_t round_id_ = 0;
  secagg::RoundParameters params_;
  EncodedInfo like_{};
  uint32_t max_code_ = 0;
  uint64_t noise_variance_ = 0;
  double sensitivity_ = 0;
  int64_t keys_deadline_ms_ = 0;
  int64_t phase_started_ms_ = 0;  // when the current phase (after keys) began
  SecurePhase phase_ = SecurePhase::kKeys;
  secagg::SecAggServer server_;
  std::map<std::string, Device> devices_;
  std::vector<std::string> by_index_;
  std::vector<int32_t> summed_;
  uint32_t contributors_ = 0;
  std::string failure_;
};

}  // namespace edgefl::server

#endif  // EDGEFL_SERVER_SECURE_ROUND_H_
