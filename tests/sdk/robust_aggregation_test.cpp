// tests/sdk/robust_aggregation_test.cpp: coordinate-wise median and trimmed mean (edgefl/
// aggregate.h, robust_combine) against crafted updates: with f crafted rows among K, the median
// stays between the honest values ranked K/2 - f and K/2 + f, the trimmed mean with
// floor(beta K) >= f within the honest values' range, while the plain mean goes wherever the
// attacker sends it.
#include <stdint.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include "edgefl/aggregate.h"

namespace {

using edgefl::RobustRule;
using edgefl::RobustSpec;
using edgefl::Status;

RobustSpec spec_of(const char* text) {
  RobustSpec s;
  REQUIRE(edgefl::parse_robust_spec(text, &s) == Status::kOk);
  return s;
}

std::vector<float> combine(const RobustSpec& spec, const std::vector<float>& rows, size_t count, size_t n) {
  std::vector<float> out(n, -7.0f);
  std::vector<float> ws(count);
  REQUIRE(edgefl::robust_combine(spec, {rows.data(), rows.size()}, count, {out.data(), n},
                                 {reinterpret_cast<uint8_t*>(ws.data()), 4 * count}) == Status::kOk);
  return out;
}

enum class Attack { kScale, kLittleIsEnough, kSignFlip };

// K rows of n coordinates: the first K - f honest (coordinate i ~ N(mu_i, 1)), the last f crafted.
struct Round {
  size_t count, n, crafted;
  std::vector<float> rows;
  std::vector<std::vector<float>> honest_sorted;  // per coordinate
  std::vector<double> honest_mean;
};

Round make_round(size_t count, size_t n, size_t crafted, Attack attack, uint32_t seed) {
  Round r{count,
          n,
          crafted,
          std::vector<float>(count * n),
          std::vector<std::vector<float>>(n),
          std::vector<double>(n, 0)};
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  const size_t honest = count - crafted;
  for (size_t i = 0; i < n; ++i) {
    const float mu = 0.01f * float(i % 97) - 0.4f;
    double sum = 0, sq = 0;
    for (size_t k = 0; k < honest; ++k) {
      const float v = mu + noise(rng);
      r.rows[k * n + i] = v;
      r.honest_sorted[i].push_back(v);
      sum += v;
      sq += double(v) * v;
    }
    const double mean = sum / double(honest),
                 sd = std::sqrt(std::max(0.0, sq / double(honest) - mean * mean));
    r.honest_mean[i] = mean;
    for (size_t k = honest; k < count; ++k) {
      float v = 0;
      switch (attack) {
        case Attack::kScale: v = 1e6f; break;  // a boosted (backdoor) update
        case Attack::kLittleIsEnough:
          v = float(mean - 1.0 * sd);
          break;  // Baruch et al. 2019: inside the spread
        case Attack::kSignFlip: v = float(-10.0 * mean); break;
      }
      r.rows[k * n + i] = v;
    }
    std::sort(r.honest_sorted[i].begin(), r.honest_sorted[i].end());
  }
  return r;
}

float honest_rank(const Round& r, size_t i, long rank) {
  const long last = long(r.count - r.crafted) - 1;
  return r.honest_sorted[i][size_t(std::clamp(rank, 0L, last))];
}

}  // namespace

TEST_SUITE("aggregate") {
  TEST_CASE("robust specs: names, beta, and what is refused") {
    CHECK(spec_of("mean").rule == RobustRule::kMean);
    CHECK(spec_of("median").rule == RobustRule::kMedian);
    CHECK(spec_of("trimmed-mean").rule == RobustRule::kTrimmedMean);
    CHECK(spec_of("trimmed-mean").trim_fraction == doctest::Approx(0.2));
    CHECK(spec_of("trimmed-mean:beta=0.1").trim_fraction == doctest::Approx(0.1));
    CHECK(spec_of("trimmed-mean:beta=0").trim_fraction == 0.0);
    RobustSpec s;
    for (const char* bad : {"", "avg", "mean:", "median:beta=0.1", "trimmed-mean:", "trimmed-mean:beta=",
                            "trimmed-mean:beta=0.5", "trimmed-mean:beta=-0.1", "trimmed-mean:b=0.1",
                            "trimmed-mean:beta=0.1,beta=0.2", "Median"}) {
      CAPTURE(bad);
      CHECK(edgefl::parse_robust_spec(bad, &s) == Status::kInvalidSpec);
    }
    CHECK(edgefl::parse_robust_spec(nullptr, &s) == Status::kInvalidArgument);
    CHECK(std::string(edgefl::robust_rule_name(RobustRule::kTrimmedMean)) == "trimmed-mean");
  }

  TEST_CASE("robust rules on a small example, exactly") {
    // 5 rows x 3 coordinates; column values are {1,2,3,4,100}, {-5,-1,0,1,5}, {2,2,2,2,2}
    const std::vector<float> rows = {1, -5, 2, 100, 0, 2, 3, 5, 2, 2, -1, 2, 4, 1, 2};
    const std::vector<float> median = combine(spec_of("median"), rows, 5, 3);
    CHECK(median == std::vector<float>{3, 0, 2});
    const std::vector<float> trimmed = combine(spec_of("trimmed-mean:beta=0.2"), rows, 5, 3);
    CHECK(trimmed == std::vector<float>{3, 0, 2});  // (2+3+4)/3, (-1+0+1)/3, 2
    const std::vector<float> mean = combine(spec_of("mean"), rows, 5, 3);
    CHECK(mean[0] == doctest::Approx(22.0));
    // even K: the mean of the two middle values
    const std::vector<float> four = {1, 2, 10, 20};
    CHECK(combine(spec_of("median"), four, 4, 1) == std::vector<float>{6});
  }

  TEST_CASE("crafted updates: the median and the trimmed mean stay with the honest values") {
    const size_t count = 20, n = 300;
    for (Attack attack : {Attack::kScale, Attack::kLittleIsEnough, Attack::kSignFlip}) {
      for (size_t crafted : {size_t(1), size_t(4), size_t(9)}) {
        CAPTURE(int(attack));
        CAPTURE(crafted);
        const Round r = make_round(count, n, crafted, attack, uint32_t(17 * crafted + int(attack)));
        const std::vector<float> median = combine(spec_of("median"), r.rows, count, n);
        const double beta = double(crafted) / double(count);  // floor(beta K) = f
        RobustSpec trim;
        trim.rule = RobustRule::kTrimmedMean;
        trim.trim_fraction = beta + 1e-9;
        const std::vector<float> trimmed = combine(trim, r.rows, count, n);
        const std::vector<float> mean = combine(spec_of("mean"), r.rows, count, n);
        double median_error = 0, trimmed_error = 0, mean_error = 0;
        for (size_t i = 0; i < n; ++i) {
          const long f = long(crafted), half = long(count) / 2;
          CHECK(median[i] >= honest_rank(r, i, half - 1 - f));
          CHECK(median[i] <= honest_rank(r, i, half + f));
          CHECK(trimmed[i] >=
                r.honest_sorted[i].front() - 1e-5f * (1 + std::fabs(r.honest_sorted[i].front())));
          CHECK(trimmed[i] <= r.honest_sorted[i].back() + 1e-5f * (1 + std::fabs(r.honest_sorted[i].back())));
          median_error = std::max(median_error, std::fabs(median[i] - r.honest_mean[i]));
          trimmed_error = std::max(trimmed_error, std::fabs(trimmed[i] - r.honest_mean[i]));
          mean_error = std::max(mean_error, std::fabs(mean[i] - r.honest_mean[i]));
        }
        // honest values have sd 1: the robust rules stay within a few sd of the honest mean
        CHECK(median_error < 3.0);
        CHECK(trimmed_error < 3.0);
        if (attack == Attack::kScale) CHECK(mean_error > 1e4);  // what they defend against
      }
    }
  }

  TEST_CASE("robust_combine refuses bad arguments and non-finite rows, leaving out unchanged") {
    std::vector<float> rows = {1, 2, 3, 4, 5, 6};
    std::vector<float> out(3, -7.0f), ws(2);
    const edgefl::Span<uint8_t> workspace(reinterpret_cast<uint8_t*>(ws.data()), 8);
    const RobustSpec median = spec_of("median");
    CHECK(edgefl::robust_combine(median, {rows.data(), 6}, 0, {out.data(), 3}, workspace) ==
          Status::kInvalidArgument);
    CHECK(edgefl::robust_combine(median, {rows.data(), 5}, 2, {out.data(), 3}, workspace) ==
          Status::kInvalidArgument);
    CHECK(edgefl::robust_combine(median, {rows.data(), 6}, 2, {out.data(), 2}, workspace) ==
          Status::kDimensionMismatch);
    CHECK(edgefl::robust_combine(median, {rows.data(), 6}, 2, {out.data(), 3}, workspace.subspan(0, 4)) ==
          Status::kInvalidArgument);
    RobustSpec bad = spec_of("trimmed-mean");
    bad.trim_fraction = 0.6;
    CHECK(edgefl::robust_combine(bad, {rows.data(), 6}, 2, {out.data(), 3}, workspace) ==
          Status::kInvalidArgument);
    rows[4] = std::numeric_limits<float>::quiet_NaN();
    CHECK(edgefl::robust_combine(median, {rows.data(), 6}, 2, {out.data(), 3}, workspace) ==
          Status::kNonFiniteInput);
    rows[4] = std::numeric_limits<float>::infinity();
    CHECK(edgefl::robust_combine(median, {rows.data(), 6}, 2, {out.data(), 3}, workspace) ==
          Status::kNonFiniteInput);
    for (float v : out) CHECK(v == -7.0f);
    CHECK(edgefl::robust_workspace_bytes(10) == 40);
  }
}
