// Shamir secret sharing (Shamir, "How to share a secret", CACM 1979) of 32-byte secrets over the
// prime field GF(2^31 + 11), the field of SecAgg's reference implementation (Google FCP,
// fcp/secagg/shared/shamir_secret_sharing.h; shared/reference/security.md §1): a secret is cut
// into nine sub-secrets of at most 31 bits (eight of 31 bits, one of 8 bits), and each is the
// constant term of its own random polynomial of degree threshold - 1.
//
// Contract: split() draws every coefficient uniformly from the field with the caller's random
// source, writes one Share per holder and wipes its coefficients; reconstruct() needs at least
// `threshold` shares, interpolates from the first `threshold` and checks that every further
// share lies on the same polynomials, so that a wrong share is detected whenever one more share
// than the threshold is at hand (with exactly `threshold` shares, no check is possible).
// Holders are x = 1 .. kMaxHolders (x = 0 would reveal the secret). Nothing allocates.
#ifndef EDGEFL_SRC_SECAGG_SHAMIR_H_
#define EDGEFL_SRC_SECAGG_SHAMIR_H_

#include <stddef.h>
#include <stdint.h>

#include <array>

#include "edgefl/span.h"
#include "edgefl/status.h"

namespace edgefl {
namespace secagg {

constexpr uint32_t kFieldPrime = 2147483659u;  // 2^31 + 11
constexpr size_t kSecretBytes = 32;
constexpr size_t kSubsecrets = 9;           // ceil(256 / 31)
constexpr uint32_t kMaxHolders = 1u << 20;  // x coordinates 1 .. 2^20 (cohorts of up to a million)
constexpr uint32_t kMaxThreshold = 1024;    // reconstruct()'s stack holds this many weights

using Secret = std::array<uint8_t, kSecretBytes>;

// One holder's share of one secret: x and the nine polynomial values at x. 40 bytes on the wire
// (shamir_share_bytes: x and y[] as little-endian 32-bit words).
struct Share {
  uint32_t x = 0;
  uint32_t y[kSubsecrets] = {};
};
constexpr size_t kShareBytes = 4 + 4 * kSubsecrets;

// The source of the polynomials' coefficients: fills `size` bytes, kOk or an error it chose
// (kCryptoError for a failed CSPRNG). Production code passes crypto_random() (secagg/crypto.h).
struct RandomSource {
  Status (*fill)(void* context, uint8_t* out, size_t size) = nullptr;
  void* context = nullptr;
};

// Splits `secret` into one share per x of `holders` (distinct, 1 .. kMaxHolders) so that any
// `threshold` of them (2 .. min(holders.size(), kMaxThreshold)) recover it and fewer reveal
// nothing. Fails: kInvalidArgument (sizes, threshold), kBadShare (an x out of range or repeated),
// or the random source's error; `out` is then wiped.
[[nodiscard]] Status shamir_split(const Secret& secret, uint32_t threshold, Span<const uint32_t> holders,
                                  RandomSource random, Span<Share> out);

// Recovers the secret from `shares` (at least `threshold` of them). Fails: kTooFewSurvivors
// (fewer shares than the threshold), kInvalidArgument (threshold out of 2 .. kMaxThreshold),
// kBadShare (an x out of range or repeated, a y outside the field, a share off the polynomial,
// or a recovered sub-secret wider than its bits); `secret` is then wiped.
[[nodiscard]] Status shamir_reconstruct(Span<const Share> shares, uint32_t threshold, Secret* secret);

// Recovers the secret when some of `shares` may be wrong: each sub-secret's polynomial is decoded
// as a Reed-Solomon codeword (McEliece and Sarwate, "On sharing secrets and Reed-Solomon codes",
// CACM 1981; the Berlekamp-Welch decoder), which corrects up to floor((m - threshold) / 2) wrong
// shares among the m = shares.size() given (with m = threshold nothing can be detected: the
// caller checks the secret). `wrong` is empty, or one flag per share: set (1) for
// a share off the recovered polynomials, else 0. Costs O(m^3) field operations per sub-secret and
// 4 m^2 bytes of heap: pass at most threshold + 2 x (the wrong shares to correct), and try
// shamir_reconstruct() first. Fails: kTooFewSurvivors (m < threshold), kInvalidArgument
// (threshold, wrong's size), kBadShare (an x out of range or repeated, a y outside the field, no
// polynomial within the bound, a sub-secret wider than its bits); `secret` and `wrong` are then
// zeroed. With more wrong shares than the bound the result may also be another polynomial's
// secret (kOk): the caller checks it (a commitment, a public key) before using it.
[[nodiscard]] Status shamir_decode(Span<const Share> shares, uint32_t threshold, Secret* secret,
                                   Span<uint8_t> wrong);

// Flags (1 in `off`, one per share) the shares not on the polynomials through the first
// `threshold` shares, which get 0. O(shares x threshold^2) field operations, no allocation.
// Fails: kTooFewSurvivors, kInvalidArgument (threshold, off's size), kBadShare (an x out of range
// or repeated, a y outside the field); `off` is then zeroed.
[[nodiscard]] Status shamir_off_polynomial(Span<const Share> shares, uint32_t threshold, Span<uint8_t> off);

// The 40-byte little-endian form of a share, and back (kBadShare for an x or y out of range).
void shamir_share_to_bytes(const Share& share, uint8_t out[kShareBytes]);
[[nodiscard]] Status shamir_share_from_bytes(const uint8_t in[kShareBytes], Share* share);

}  // namespace secagg
}  // namespace edgefl

#endif  // EDGEFL_SRC_SECAGG_SHAMIR_H_
