// tests/secagg/dp_test.cpp: the distributed discrete Gaussian (sdk/src/secagg/dp.h): the exact
// sampler matches N_Z(0, sigma^2) (chi-square over its support, moments), code clipping bounds
// the norm, the modulus leaves room for the noise, and the accountant agrees with the Gaussian
// mechanism's zCDP where the discrete correction vanishes.
#include <math.h>

#include <map>
#include <vector>

#include <doctest/doctest.h>

#include "secagg/dp.h"
#include "secagg/seeded_random.h"

namespace {

using edgefl::Status;
using namespace edgefl::secagg;

using SplitMix = edgefl_test::SeededRandom;

}  // namespace

TEST_SUITE("secagg.dp") {
  TEST_CASE("the sampler is the discrete Gaussian: chi-square over the support, and its moments") {
    for (uint64_t variance : {1ull, 9ull, 400ull}) {
      CAPTURE(variance);
      SplitMix rng{variance};
      const size_t draws = 200000;
      std::vector<int32_t> x(draws, 0);
      REQUIRE(add_discrete_gaussian_noise(variance, rng.source(), {x.data(), x.size()}) == Status::kOk);
      // P(k) = exp(-k^2 / (2 var)) / Z over the integers
      const double sd = sqrt(double(variance));
      const int64_t span = int64_t(ceil(6 * sd));
      double z = 0;
      for (int64_t k = -40 * span; k <= 40 * span; ++k) z += exp(-double(k * k) / (2.0 * double(variance)));
      std::map<int64_t, double> count;
      double sum = 0, sq = 0;
      for (int32_t v : x) {
        sum += v;
        sq += double(v) * v;
        const int64_t bin = std::max<int64_t>(-span, std::min<int64_t>(span, v));  // tails pooled
        count[bin] += 1;
      }
      double chi = 0;
      int bins = 0;
      for (int64_t b = -span; b <= span; ++b) {
        double p = 0;
        if (b == -span || b == span) {
          for (int64_t k = span; k <= 40 * span; ++k) p += exp(-double(k * k) / (2.0 * double(variance))) / z;
        } else {
          p = exp(-double(b * b) / (2.0 * double(variance))) / z;
        }
        const double expect = p * draws;
        if (expect < 5) continue;  // (too small to test; its mass is in the tails' bins)
        chi += (count[b] - expect) * (count[b] - expect) / expect;
        ++bins;
      }
      // chi-square with bins - 1 degrees of freedom: below mean + 7 sd is far from chance
      CHECK(chi < (bins - 1) + 7 * sqrt(2.0 * (bins - 1)));
      const double mean = sum / draws, var = sq / draws - mean * mean;
      CHECK(fabs(mean) < 5 * sd / sqrt(double(draws)));
      CHECK(var == doctest::Approx(double(variance)).epsilon(0.02));
    }
  }

  TEST_CASE("sampler arguments and a failing random source") {
    SplitMix rng{1};
    int64_t out = 0;
    CHECK(sample_discrete_gaussian(0, rng.source(), &out) == Status::kInvalidArgument);
    CHECK(sample_discrete_gaussian(kMaxNoiseVariance + 1, rng.source(), &out) == Status::kInvalidArgument);
    REQUIRE(sample_discrete_gaussian(kMaxNoiseVariance, rng.source(), &out) == Status::kOk);
    RandomSource failing{[](void*, uint8_t*, size_t) { return Status::kCryptoError; }, nullptr};
    CHECK(sample_discrete_gaussian(4, failing, &out) == Status::kCryptoError);
    std::vector<int32_t> codes(40);
    for (size_t i = 0; i < codes.size(); ++i) codes[i] = i % 2 ? INT32_MIN : INT32_MAX;
    // any noise away from zero overflows one of them (all 40 pointing inwards: 2^-40)
    CHECK(add_discrete_gaussian_noise(kMaxNoiseVariance, rng.source(), {codes.data(), codes.size()}) ==
          Status::kOverflow);
  }

  TEST_CASE("code clipping: the norm falls to the bound, never above; short vectors are untouched") {
    std::vector<int32_t> codes = {300, -400, 0, 7};
    bool clipped = false;
    clip_codes_l2({codes.data(), codes.size()}, 100.0, &clipped);
    CHECK(clipped);
    double sq = 0;
    for (int32_t c : codes) sq += double(c) * c;
    CHECK(sqrt(sq) <= 100.0);
    CHECK(sqrt(sq) > 98.0);
    CHECK(codes[0] > 0);
    CHECK(codes[1] < 0);
    std::vector<int32_t> small = {3, 4};
    clip_codes_l2({small.data(), small.size()}, 5.0, &clipped);
    CHECK(!clipped);
    CHECK(small == std::vector<int32_t>{3, 4});
    CHECK(code_sensitivity(0.5, 0.01, 10000) == doctest::Approx(150.0));
  }

  TEST_CASE("the modulus leaves room for the cohort's noise, and refuses past 32 bits") {
    uint32_t m = 0;
    REQUIRE(noisy_modulus_bits(10, 127, 900, &m) == Status::kOk);
    CHECK(m == 13);  // 2 (1270 + ceil(14 sqrt(9000))) + 1 = 5199 values
    CHECK(noisy_modulus_bits(100000, 32767, kMaxNoiseVariance, &m) == Status::kUnsafeConfiguration);
  }

  TEST_CASE("the accountant: the Gaussian mechanism's RDP where tau vanishes; more noise, less epsilon") {
    // sigma = 30: tau = 10 sum exp(-2 pi^2 900 k/(k+1)) underflows to 0.
    const double l2 = 300, alpha = 8;
    const uint32_t n = 10;
    const uint64_t variance = 900;
    CHECK(ddg_rdp(alpha, l2, 55000, n, variance) == doctest::Approx(alpha * l2 * l2 / (2.0 * n * variance)));
    // sigma^2 = 0.25 codes^2 would make tau dominate; at sigma^2 = 1 it is still visible
    CHECK(ddg_rdp(alpha, 10, 1000, 2, 1) > alpha * 100 / (2.0 * 2 * 1));

    PrivacyAccountant one, more_noise;
    one.add_round(l2, 55000, n, variance);
    more_noise.add_round(l2, 55000, n, 4 * variance);
    CHECK(more_noise.epsilon(1e-5) < one.epsilon(1e-5));
    // zCDP rho = l2^2 / (2 n var) per round; T rounds: eps <= rho T + 2 sqrt(rho T log(1/delta))
    PrivacyAccountant many;
    for (int t = 0; t < 100; ++t) many.add_round(l2, 55000, n, variance);
    const double rho = 100 * l2 * l2 / (2.0 * n * variance);
    const double bound = rho + 2 * sqrt(rho * log(1e5));
    CHECK(many.epsilon(1e-5) <= bound);
    CHECK(many.epsilon(1e-5) >= 0.75 * bound);
    CHECK(many.epsilon(1e-5) > one.epsilon(1e-5));
    CHECK(many.rounds() == 100);
  }
}
