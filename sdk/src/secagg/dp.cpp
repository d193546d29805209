#include "secagg/dp.h"

#include <math.h>
#include <string.h>

#include <algorithm>

namespace edgefl {
namespace secagg {
namespace {

// Random words from a RandomSource, fetched in blocks.
class RandomWords {
 public:
  explicit RandomWords(RandomSource source) : source_(source) {}
  ~RandomWords() { memset(block_, 0, sizeof block_); }
  Status next(uint64_t* out) {
    if (used_ == kWords) {
      EDGEFL_RETURN_IF_ERROR(
          source_.fill(source_.context, reinterpret_cast<uint8_t*>(block_), sizeof block_));
      used_ = 0;
    }
    *out = block_[used_++];
    return Status::kOk;
  }
  // Uniform in [0, m), 1 <= m <= 2^63 (rejection of the low 2^64 mod m words).
  Status uniform(uint64_t m, uint64_t* out) {
    const uint64_t reject_below = (0 - m) % m;
    for (;;) {
      uint64_t r;
      EDGEFL_RETURN_IF_ERROR(next(&r));
      if (r >= reject_below) {
        *out = r % m;
        return Status::kOk;
      }
    }
  }
  // Bernoulli(num / den), 0 <= num <= den.
  Status bernoulli(uint64_t num, uint64_t den, bool* out) {
    uint64_t u;
    EDGEFL_RETURN_IF_ERROR(uniform(den, &u));
    *out = u < num;
    return Status::kOk;
  }
  // Bernoulli(exp(-num / den)), CKS20 Algorithm 1 (den <= 2^43).
  Status bernoulli_exp(uint64_t num, uint64_t den, bool* out) {
    for (uint64_t whole = num / den; whole > 0; --whole) {
      bool keep;
      EDGEFL_RETURN_IF_ERROR(bernoulli_exp_at_most_one(1, 1, &keep));
      if (!keep) {
        *out = false;
        return Status::kOk;
      }
    }
    return bernoulli_exp_at_most_one(num % den, den, out);
  }

 private:
  Status bernoulli_exp_at_most_one(uint64_t num, uint64_t den, bool* out) {
    uint64_t k = 1;
    for (;;) {
      bool a;
      EDGEFL_RETURN_IF_ERROR(bernoulli(num, den * k, &a));
      if (!a) break;
      ++k;  // P(k > 20) < 1 / 20!: den * k stays far from overflow
    }
    *out = (k & 1) == 1;
    return Status::kOk;
  }

  static constexpr size_t kWords = 128;
  RandomSource source_;
  uint64_t block_[kWords] = {};
  size_t used_ = kWords;
};

uint64_t isqrt(uint64_t v) {
  uint64_t r = uint64_t(sqrt(double(v)));
  while (r * r > v) --r;
  while ((r + 1) * (r + 1) <= v) ++r;
  return r;
}

// CKS20 Algorithm 2: the discrete Laplace distribution of scale t, P(x) ∝ exp(-|x| / t).
Status discrete_laplace(RandomWords& rng, uint64_t t, int64_t* out) {
  for (;;) {
    uint64_t u;
    bool d;
    EDGEFL_RETURN_IF_ERROR(rng.uniform(t, &u));
    EDGEFL_RETURN_IF_ERROR(rng.bernoulli_exp(u, t, &d));
    if (!d) continue;
    uint64_t v = 0;
    for (;;) {
      bool a;
      EDGEFL_RETURN_IF_ERROR(rng.bernoulli_exp(1, 1, &a));
      if (!a) break;
      ++v;
    }
    const uint64_t x = u + t * v;
    bool negative;
    EDGEFL_RETURN_IF_ERROR(rng.bernoulli(1, 2, &negative));
    if (negative && x == 0) continue;
    *out = negative ? -int64_t(x) : int64_t(x);
    return Status::kOk;
  }
}

// CKS20 Algorithm 3 with sigma^2 = variance (an integer): proposal discrete Laplace of scale
// t = floor(sigma) + 1, accepted with probability exp(-(|y| - variance / t)^2 / (2 variance)),
// i.e. exp(-(|y| t - variance)^2 / (2 variance t^2)), all integers.
Status discrete_gaussian(RandomWords& rng, uint64_t variance, int64_t* out) {
  const uint64_t t = isqrt(variance) + 1;
  const uint64_t den = 2 * variance * t * t;  // <= 2^21 * 1025^2 < 2^42
  for (;;) {
    int64_t y;
    EDGEFL_RETURN_IF_ERROR(discrete_laplace(rng, t, &y));
    const uint64_t magnitude = uint64_t(y < 0 ? -y : y);
    // (|y| t - variance)^2 must fit 64 bits: |y| t < 2^31 fails only past 2^31 / t^2 scales of
    // the proposal (probability below e^-2000); such a draw is proposed again.
    if (magnitude > (uint64_t(1) << 31) / t) continue;
    const int64_t a = int64_t(magnitude * t) - int64_t(variance);
    const uint64_t num = uint64_t(a) * uint64_t(a);
    bool accept;
    EDGEFL_RETURN_IF_ERROR(rng.bernoulli_exp(num, den, &accept));
    if (accept) {
      *out = y;
      return Status::kOk;
    }
  }
}

}  // namespace

Status sample_discrete_gaussian(uint64_t variance, RandomSource random, int64_t* out) {
  if (variance == 0 || variance > kMaxNoiseVariance || random.fill == nullptr || out == nullptr) {
    return Status::kInvalidArgument;
  }
  RandomWords rng(random);
  return discrete_gaussian(rng, variance, out);
}

Status add_discrete_gaussian_noise(uint64_t variance, RandomSource random, Span<int32_t> codes) {
  if (variance == 0 || variance > kMaxNoiseVariance || random.fill == nullptr)
    return Status::kInvalidArgument;
  RandomWords rng(random);
  for (size_t i = 0; i < codes.size(); ++i) {
    int64_t noise;
    Status s = discrete_gaussian(rng, variance, &noise);
    const int64_t v = int64_t(codes[i]) + noise;
    if (s == Status::kOk && (v > INT32_MAX || v < INT32_MIN)) s = Status::kOverflow;
    if (s != Status::kOk) return s;
    codes[i] = int32_t(v);
  }
  return Status::kOk;
}

void clip_codes_l2(Span<int32_t> codes, double bound, bool* clipped) {
  double sq = 0;
  for (size_t i = 0; i < codes.size(); ++i) sq += double(codes[i]) * double(codes[i]);
  const bool over = sq > bound * bound;
  if (clipped != nullptr) *clipped = over;
  if (!over) return;
  const double scale = bound / sqrt(sq);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = int32_t(double(codes[i]) * scale);  // towards zero
}

double code_sensitivity(double clip, double step, size_t dimension) {
  return clip / step + sqrt(double(dimension));
}

Status noisy_modulus_bits(uint32_t clients, uint32_t max_code, uint64_t variance, uint32_t* bits) {
  if (bits == nullptr || clients == 0) return Status::kInvalidArgument;
  const double noise = ceil(14.0 * sqrt(double(clients) * double(variance)));
  const double extent = double(clients) * double(max_code) + noise;
  const double values = 2 * extent + 1;
  uint32_t m = 1;
  while (m < 64 && ldexp(1.0, int(m)) < values) ++m;
  if (m > 32) return Status::kUnsafeConfiguration;
  *bits = m;
  return Status::kOk;
}

double ddg_rdp(double alpha, double l2, size_t dimension, uint32_t n, uint64_t variance) {
  const double pi = 3.14159265358979323846;
  const double var = double(variance), sd = sqrt(var), d = double(dimension), nn = double(n);
  double tau = 0;
  for (uint32_t k = 1; k < n; ++k) tau += exp(-2 * pi * pi * var * double(k) / double(k + 1));
  tau *= 10;
  const double l1 = std::min(l2 * l2, sqrt(d) * l2);
  const double half = alpha / 2;
  const double a = half * l2 * l2 / (nn * var) + tau * d;
  const double b = half * (l2 * l2 / (nn * var) + 2 * l1 * tau / (sqrt(nn) * sd) + tau * tau * d);
  const double c = half * (l2 / (sqrt(nn) * sd) + tau * sqrt(d)) * (l2 / (sqrt(nn) * sd) + tau * sqrt(d));
  return std::min(a, std::min(b, c));
}

double PrivacyAccountant::order(int i) {
  return 1 + 0.01 * pow(25500.0, double(i) / double(kOrders - 1));  // 1.01 .. 256
}

void PrivacyAccountant::add_round(double l2, size_t dimension, uint32_t n, uint64_t variance) {
  for (int i = 0; i < kOrders; ++i) rdp_[i] += ddg_rdp(order(i), l2, dimension, n, variance);
  ++rounds_;
}

double PrivacyAccountant::epsilon(double delta) const {
  if (rounds_ == 0) return 0;
  double best = HUGE_VAL;
  for (int i = 0; i < kOrders; ++i) {
    const double a = order(i);
    // Canonne, Kamath, Steinke 2020, Proposition 12 (tighter than Mironov's log(1/delta)/(a-1)).
    const double eps = rdp_[i] + log1p(-1 / a) - (log(delta) + log(a)) / (a - 1);
    best = std::min(best, eps);
  }
  return std::max(best, 0.0);
}

}  // namespace secagg
}  // namespace edgefl
