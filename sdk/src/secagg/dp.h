// Distributed differential privacy for secure rounds: the distributed discrete Gaussian
// mechanism (Kairouz, Liu, Steinke, ICML 2021, "The Distributed Discrete Gaussian Mechanism for
// Federated Learning with Secure Aggregation"). Each device bounds the L2 norm of its integer
// codes and adds discrete Gaussian noise N_Z(0, sigma^2) to every code before masking; the server
// adds nothing and sees only the sum, whose noise is the sum of the survivors' noises.
//
//   sampling   exact, after Canonne, Kamath, Steinke (NeurIPS 2020, "The Discrete Gaussian for
//              Differential Privacy", Algorithms 1-3): Bernoulli(exp(-gamma)) with rational gamma,
//              a discrete Laplace proposal, rejection; integer arithmetic only, sigma^2 an integer
//              (in code units: noise much finer than one code is never needed), draws from the
//              caller's RandomSource (the CSPRNG in production). Naive rounding of a continuous
//              Gaussian is not used: it can void the guarantee (shared/reference/security.md §2).
//   accounting Rényi DP of the sum of n discrete Gaussians (Kairouz et al., Proposition 14):
//              for order a, eps_a = min( a/2 D2^2/(n s^2) + tau d,
//                                        a/2 (D2^2/(n s^2) + 2 D1 tau/(sqrt(n) s) + tau^2 d),
//                                        a/2 (D2/(sqrt(n) s) + tau sqrt(d))^2 ),
//              tau = 10 sum_{k=1}^{n-1} exp(-2 pi^2 s^2 k/(k+1)); rounds compose additively in
//              RDP; (eps, delta) by Canonne-Kamath-Steinke's conversion, minimised over a. No
//              amplification by sampling is claimed (conservative).
#ifndef EDGEFL_SRC_SECAGG_DP_H_
#define EDGEFL_SRC_SECAGG_DP_H_

#include <stddef.h>
#include <stdint.h>

#include "edgefl/span.h"
#include "edgefl/status.h"
#include "secagg/shamir.h"

namespace edgefl {
namespace secagg {

constexpr uint64_t kMaxNoiseVariance = uint64_t(1) << 20;  // sigma <= 1024 codes

// One draw of N_Z(0, variance). Fails: kInvalidArgument (variance 0 or > kMaxNoiseVariance), or
// the random source's status.
[[nodiscard]] Status sample_discrete_gaussian(uint64_t variance, RandomSource random, int64_t* out);

// codes[i] += N_Z(0, variance), independently, drawing random bytes in blocks from `random`.
// Fails as above, or kOverflow if a noisy code would leave int32; `codes` then holds the noise
// of a prefix and must be discarded (the device sits the round out).
[[nodiscard]] Status add_discrete_gaussian_noise(uint64_t variance, RandomSource random, Span<int32_t> codes);

// Shrinks `codes` towards zero so that their L2 norm is at most `bound` (each code scaled by
// bound / norm and truncated: the norm only falls). *clipped says whether anything changed.
void clip_codes_l2(Span<int32_t> codes, double bound, bool* clipped);

// The L2 sensitivity in code units of an update clipped to L2 <= clip in float units, quantised
// with step `step` by stochastic rounding over `dimension` coordinates (each code moves by < 1
// from x / step): clip / step + sqrt(dimension). clip_codes_l2() to this bound enforces it.
double code_sensitivity(double clip, double step, size_t dimension);

// The modulus bits for `clients` noisy inputs: |code| <= max_code plus the sum of their noises,
// bounded at 14 standard deviations of that sum (probability below 1e-40 of exceeding it).
[[nodiscard]] Status noisy_modulus_bits(uint32_t clients, uint32_t max_code, uint64_t variance,
                                        uint32_t* bits);

// RDP of one round at order `alpha` > 1: n noisy contributions, L2 sensitivity l2 and
// dimension d (L1 sensitivity min(l2^2, sqrt(d) l2), the integer-vector bound).
double ddg_rdp(double alpha, double l2, size_t dimension, uint32_t n, uint64_t variance);

// Accumulates rounds; epsilon(delta) of everything so far. Orders 1.01 .. 256 (geometric in a - 1).
class PrivacyAccountant {
 public:
  void add_round(double l2, size_t dimension, uint32_t n, uint64_t variance);
  double epsilon(double delta) const;
  size_t rounds() const { return rounds_; }

 private:
  static constexpr int kOrders = 64;
  static double order(int i);
  double rdp_[kOrders] = {};
  size_t rounds_ = 0;
};

}  // namespace secagg
}  // namespace edgefl

#endif  // EDGEFL_SRC_SECAGG_DP_H_
