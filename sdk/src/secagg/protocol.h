// SecAgg+ (Bell et al., CCS 2020) over SecAgg's four rounds (Bonawitz et al., CCS 2017), for
// the semi-honest and semi-malicious server of shared/reference/security.md §1: the server
// learns the sum of the surviving devices' vectors modulo 2^m and nothing else about any one of
// them, as long as fewer than t neighbours of a device collude with it.
//
//   R0 advertise  device -> server   two X25519 public keys (c: for sealing shares, s: for masks)
//                 server -> device   the keys of its neighbours that advertised
//   R1 share      device -> server   for each such neighbour v, sealed for v (ChaCha20-Poly1305
//                                    under HKDF(X25519(c_u, c_v))): a Shamir share of its fresh
//                                    self-mask seed b_u and one of its mask secret key s_u
//                 server -> device   the sealed shares addressed to it by neighbours that shared
//   R2 mask       device -> server   y_u = x_u + PRG(b_u) + sum over those neighbours v of
//                                    +-PRG(HKDF(X25519(s_u, s_v))) mod 2^m (+ if u < v)
//                 server -> device   which of its neighbours sent y (survivors) and which
//                                    shared but did not (dropped)
//   R3 unmask     device -> server   its share of b_v for each survivor v and of s_v for each
//                                    dropped v: never both for one v
//   the server sums the y of the survivors, removes their PRG(b_u) and the pair masks they
//   hold with dropped devices, and is left with the sum of the survivors' x.
//
// Every key derivation uses the round's nonce as salt and (round id, lower index, higher index)
// as info; every sealed share authenticates (round id, nonce, sender, receiver). Inputs are
// vectors of `words` integers modulo 2^m: a codec's integer codes (shared-scale b-bit levels,
// random-k values, Count Sketch cells). modulus_bits_for() picks the smallest m at which the
// sum of the cohort cannot wrap, and refuses (kUnsafeConfiguration) when 32 bits do not suffice.
//
// Both state machines are sans-IO: they take and give messages as structs; the transport, the
// wire encoding and the deadlines of each phase belong to the caller. Device indices are 0 ..
// n - 1; Shamir holders are index + 1. Failures leave the object in its phase (a refused message
// changes nothing) unless documented otherwise.
#ifndef EDGEFL_SRC_SECAGG_PROTOCOL_H_
#define EDGEFL_SRC_SECAGG_PROTOCOL_H_

#include <stdint.h>

#include <algorithm>
#include <array>
#include <vector>

#include "edgefl/span.h"
#include "edgefl/status.h"
#include "secagg/crypto.h"
#include "secagg/graph.h"
#include "secagg/shamir.h"

namespace edgefl {
namespace secagg {

constexpr uint32_t kMaxWords = 1u << 26;  // 256 MiB of masked words per device

struct RoundParameters {
  uint64_t round_id = 0;
  Key32 round_nonce{};  // fresh per round, chosen by the server
  Key32 graph_seed{};   // the Harary graph's ring order
  GraphParameters graph;
  uint32_t modulus_bits = 32;  // m, 1..32
  uint32_t words = 0;          // the length of every vector, 1..kMaxWords
};

// kUnsafeConfiguration for graph parameters, m or L out of range (check_graph_parameters()).
[[nodiscard]] Status check_round_parameters(const RoundParameters& p);

// The smallest m such that the sum of `clients` inputs, each word in [-max_magnitude,
// max_magnitude] (is_signed: two's complement modulo 2^m) or [0, max_magnitude], cannot wrap.
// kUnsafeConfiguration when it would take more than 32 bits.
[[nodiscard]] Status modulus_bits_for(uint32_t clients, uint32_t max_magnitude, bool is_signed,
                                      uint32_t* bits);
// A word modulo 2^bits as a signed integer (>= 2^(bits-1) is negative) or `value` back to a word.
int64_t centered(uint32_t word, uint32_t bits);
uint32_t to_word(int64_t value, uint32_t bits);

// The masked vector on the wire: `words` words of `bits` bits, packed little-endian (word i at
// bit i * bits), the last byte's unused high bits zero.
size_t packed_words_bytes(uint32_t words, uint32_t bits);
// Fails: kBufferTooSmall (out smaller than packed_words_bytes), kValueOutOfRange (a word >= 2^bits),
// kInvalidArgument (bits outside 1..32).
[[nodiscard]] Status pack_words(Span<const uint32_t> words, uint32_t bits, Span<uint8_t> out);
// Fails: kSizeMismatch (bytes.size() != packed_words_bytes(words.size(), bits)), kInvalidMessage
// (unused high bits not zero), kInvalidArgument (bits outside 1..32). `words` is unchanged on failure
// only for kSizeMismatch and kInvalidArgument.
[[nodiscard]] Status unpack_words(Span<const uint8_t> bytes, uint32_t bits, Span<uint32_t> words);

struct AdvertisedKeys {
  uint32_t device = 0;
  Key32 cipher_public{};
  Key32 mask_public{};
};

// The plaintext sealed for one neighbour: sender, receiver (LE32 each), then the two shares.
constexpr size_t kSharesPlaintextBytes = 8 + 2 * kShareBytes;
constexpr size_t kSealedSharesBytes = kSharesPlaintextBytes + kAeadTagBytes;  // 104
struct SealedShares {
  uint32_t from = 0;
  uint32_t to = 0;
  std::array<uint8_t, kSealedSharesBytes> sealed{};
};

struct UnmaskRequest {
  std::vector<uint32_t> survivors;  // neighbours whose masked vector the server holds
  std::vector<uint32_t> dropped;    // neighbours that shared their keys but sent no vector
};

enum class SecretKind : uint8_t { kSelfMaskSeed = 0, kMaskKey = 1 };
struct RevealedShare {
  uint32_t owner = 0;
  SecretKind kind = SecretKind::kSelfMaskSeed;
  Share share;
};

class SecAggClient {
 public:
  SecAggClient() = default;
  ~SecAggClient();
  SecAggClient(const SecAggClient&) = delete;
  SecAggClient& operator=(const SecAggClient&) = delete;

  // R0: checks the parameters, builds the graph, draws both key pairs. Fails:
  // kUnsafeConfiguration, kInvalidArgument (self >= n), kCryptoError.
  [[nodiscard]] Status start(const RoundParameters& p, uint32_t self, AdvertisedKeys* out);

  // R1: the keys the server relayed. Fails: kProtocolError (not after start(), or a device that is
  // not a neighbour, or one listed twice), kKeyReuse (a key equal to this device's or to another
  // neighbour's), kTooFewSurvivors (fewer than t neighbours), kInvalidMessage (a low-order key),
  // kCryptoError. One SealedShares per neighbour in `out`, and the commitment to the self-mask
  // seed (SHA-256 of a label, the round id and nonce, the device and the seed), with which the
  // server checks the seed it reconstructs.
  [[nodiscard]] Status share(Span<const AdvertisedKeys> neighbours, std::vector<SealedShares>* out,
                             Key32* seed_commitment);

  // R2: opens the shares the server relayed and masks `input` (L words, each < 2^m) into
  // `masked` (L words). Fails: kProtocolError (phase, a sender that did not advertise to this
  // device or is listed twice, a share addressed to another), kAuthenticationFailed (a sealed
  // share altered or sealed for someone else), kBadShare (a share not at this device's x),
  // kTooFewSurvivors, kDimensionMismatch, kValueOutOfRange (an input word >= 2^m), kCryptoError.
  [[nodiscard]] Status mask(Span<const SealedShares> received, Span<const uint32_t> input,
                            Span<uint32_t> masked);

  // R3, answered once per round: shares of b for survivors, of s for dropped neighbours. Fails:
  // kSecAggRefused (a device in both lists, listed twice, not among the neighbours whose shares
  // this device holds, or a second request), kTooFewSurvivors (fewer than t survivors),
  // kProtocolError (phase).
  [[nodiscard]] Status unmask(const UnmaskRequest& request, std::vector<RevealedShare>* out);

 private:
  enum class Phase : uint8_t { kIdle, kAdvertised, kShared, kMasked, kDone };
  struct Neighbour {
    uint32_t device = 0;
    Key32 cipher_public{};
    Key32 mask_public{};
    Key32 share_key{};    // seals what goes to it and opens what comes from it
    bool shared = false;  // its sealed shares arrived in R2
    Share seed_share;     // of its b
    Share key_share;      // of its s
  };
  Neighbour* find(uint32_t device);
  void wipe();

  Phase phase_ = Phase::kIdle;
  RoundParameters params_;
  uint32_t self_ = 0;
  HararyGraph graph_;
  KeyPair cipher_keys_;
  KeyPair mask_keys_;
  Secret self_seed_{};
  std::vector<Neighbour> neighbours_;  // sorted by device
};

class SecAggServer {
 public:
  // Fails: kUnsafeConfiguration, kCryptoError.
  [[nodiscard]] Status start(const RoundParameters& p);

  // R0. Fails: kProtocolError (phase, an index out of range, a device that already advertised),
  // kKeyReuse (a public key another device advertised, or the same key twice).
  [[nodiscard]] Status add_keys(const AdvertisedKeys& keys);
  // Ends R0. kTooFewSurvivors when fewer than t + 1 devices advertised (the round is over).
  [[nodiscard]] Status end_keys();
  std::vector<AdvertisedKeys> keys_for(uint32_t device) const;

  // R1: all of a device's sealed shares at once, one for each neighbour it was sent keys of, and
  // its seed commitment. Fails: kProtocolError (phase, a device that did not advertise or already
  // shared), kInvalidMessage (a missing, extra, repeated or misaddressed share).
  [[nodiscard]] Status add_shares(uint32_t device, const Key32& seed_commitment,
                                  Span<const SealedShares> shares);
  [[nodiscard]] Status end_shares();
  std::vector<SealedShares> shares_for(uint32_t device) const;

  // R2: a masked vector, added to the running sum (the server keeps no vector of its own per
  // device). Fails: kProtocolError (phase, a device that did not share or already sent),
  // kDimensionMismatch, kInvalidMessage (a word >= 2^m).
  [[nodiscard]] Status add_masked(uint32_t device, Span<const uint32_t> words);
  // Ends R2. kTooFewSurvivors (the round is over) when no vector came, or when some secret in
  // the sum could not be recovered: a survivor's self-mask seed, or the mask key of a device
  // that shared but dropped, has its shares with fewer than t survivors (the only devices asked
  // to reveal, and an honest survivor with fewer than t surviving neighbours answers nothing).
  [[nodiscard]] Status end_masked();
  UnmaskRequest unmask_request_for(uint32_t device) const;

  // R3. Fails: kProtocolError (phase, not a survivor, already answered), kInvalidMessage (a
  // share of a non-neighbour, of the wrong kind for what the server asked, twice for one owner,
  // or not at the sender's x).
  [[nodiscard]] Status add_unmask(uint32_t device, Span<const RevealedShare> shares);

  // Unmasks the sum of the survivors' vectors into `sum` (L words) and lists them in
  // `contributors`. Each secret is recovered from its revealed shares and checked (a seed against
  // its commitment, a mask key against its public key). Wrong shares are corrected while they are
  // few: a secret whose shares are not on one polynomial, or whose recovery does not check, is
  // decoded again (shamir_decode) from its first t + 2e shares for e = 1, 2, 4, ...
  // kMaxCorrectedShares, until the result checks; the holders of shares off the recovered
  // polynomial are listed in wrong_share_holders(), and their shares of later secrets are left
  // out (while t + 1 others remain) or put last. A holder is named only when all of the secret's
  // s shares show it: at most floor((s - t) / 2) of them off the recovered polynomial (colluding
  // devices could otherwise plant a polynomial with the right secret that blames an honest one).
  // The decodes of one call cost at most decode_work_cap(t) (the sum of m^3 over them, m the
  // shares decoded): a bounded stall of the server, whatever devices send. Fails: kTooFewSurvivors (a secret
  // with fewer than t shares), kBadShare (a secret that cannot be recovered so that it checks: more wrong
  // shares than can be corrected within the budget, or a wrong one among only t), kProtocolError (phase),
  // kDimensionMismatch, kCryptoError. The server is then done.
  [[nodiscard]] Status finish(Span<uint32_t> sum, std::vector<uint32_t>* contributors);
  static constexpr uint32_t kMaxCorrectedShares = 32;
  // max(2^24, 4 (t + 2 kMaxCorrectedShares)^3): a few decodes of the largest size at any t.
  static uint64_t decode_work_cap(uint32_t t) {
    const uint64_t largest = uint64_t{t} + 2 * kMaxCorrectedShares;
    return std::max<uint64_t>(uint64_t{1} << 24, 4 * largest * largest * largest);
  }
  // After finish(): the devices that revealed a share off its secret's polynomial, ascending. A
  // device there lied in R3, or was dealt a wrong share in R1 by the secret's owner.
  const std::vector<uint32_t>& wrong_share_holders() const { return wrong_share_holders_; }

  // What each phase has seen, for deadlines and reports.
  size_t advertised() const { return count(kAdvertised); }
  size_t shared() const { return count(kShared); }
  size_t masked() const { return count(kMasked); }
  size_t answered() const { return count(kAnswered); }

 private:
  enum Flag : uint8_t { kAdvertised = 1, kShared = 2, kMasked = 4, kAnswered = 8 };
  enum class Phase : uint8_t { kIdle, kKeys, kShares, kMasked, kUnmask, kDone };
  size_t count(Flag flag) const;
  bool has(uint32_t device, Flag flag) const { return (flags_[device] & flag) != 0; }

  Phase phase_ = Phase::kIdle;
  RoundParameters params_;
  HararyGraph graph_;
  std::vector<uint8_t> flags_;
  std::vector<AdvertisedKeys> keys_;
  std::vector<std::vector<SealedShares>> inbox_;              // by receiver
  std::vector<std::vector<Share>> seed_shares_, key_shares_;  // by owner
  std::vector<Key32> commitments_;                            // by owner
  std::vector<uint32_t> sum_;
  std::vector<uint32_t> wrong_share_holders_;
};

}  // namespace secagg
}  // namespace edgefl

#endif  // EDGEFL_SRC_SECAGG_PROTOCOL_H_
