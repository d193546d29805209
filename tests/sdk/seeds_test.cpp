// tests/sdk/seeds_test.cpp: the seed rule of a round (sdk/src/round/seeds.h) and why it matters:
// devices with independent codec seeds make independent rounding errors, so the error of the
// cohort's mean falls as 1/K; random-k and Count Sketch devices share the round's seed.
#include <string.h>

#include <set>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "core/siphash.h"
#include "edgefl/codec.h"
#include "round/seeds.h"
#include "support/bench_data.h"
#include "support/codec_util.h"

namespace {

using edgefl::CodecSpec;
using edgefl::DeviceSeeds;
using edgefl_test::decode_ok;
using edgefl_test::encode_ok;
using edgefl_test::parse_or_fail;

DeviceSeeds seeds_of(uint64_t round_seed, const std::string& id, const CodecSpec& spec) {
  return edgefl::device_seeds(round_seed, id.data(), id.size(), spec);
}

// E ||mean of K devices' decodings of x - x||^2 / ||x||^2 over `rounds` rounds, each device
// encoding with the codec seed `seed_of(round, device)`.
template <typename SeedOf>
double vnmse_of_mean(const CodecSpec& spec, const std::vector<float>& x, int k, int rounds, SeedOf seed_of) {
  const size_t n = x.size();
  double total = 0;
  for (int r = 1; r <= rounds; ++r) {
    std::vector<double> mean(n, 0.0);
    for (int d = 0; d < k; ++d) {
      const std::vector<float> y = decode_ok(encode_ok(spec, x, seed_of(r, d)), n);
      for (size_t i = 0; i < n; ++i) mean[i] += double(y[i]) / k;
    }
    double err = 0, norm = 0;
    for (size_t i = 0; i < n; ++i) {
      err += (mean[i] - x[i]) * (mean[i] - x[i]);
      norm += double(x[i]) * x[i];
    }
    total += err / norm;
  }
  return total / rounds;
}

}  // namespace

TEST_SUITE("seeds") {
  TEST_CASE("SipHash-2-4 matches the reference vectors (key 00..0f, message 00..len-1)") {
    const edgefl::SipKey key{0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
    uint8_t message[16];
    for (unsigned i = 0; i < sizeof message; ++i) message[i] = uint8_t(i);
    CHECK(edgefl::siphash24(key, message, 0) == 0x726fdb47dd0e0e31ull);
    CHECK(edgefl::siphash24(key, message, 1) == 0x74f839c593dc67fdull);
    CHECK(edgefl::siphash24(key, message, 15) == 0xa129ca6149be45e5ull);
  }

  TEST_CASE("seeds are pure, differ by device, round and purpose, and take every byte of a long id") {
    const CodecSpec q4 = parse_or_fail("q4");
    const uint64_t r1 = edgefl::round_seed(1, 1), r2 = edgefl::round_seed(1, 2);
    CHECK(r1 != r2);
    CHECK(edgefl::round_seed(2, 1) != r1);
    CHECK(edgefl::round_seed(1, 1) == r1);
    std::set<uint64_t> seen;
    for (int d = 0; d < 1000; ++d) {
      const DeviceSeeds s = seeds_of(r1, "device-" + std::to_string(d), q4);
      CHECK(s.codec != s.training);
      seen.insert(s.codec);
      seen.insert(s.training);
    }
    CHECK(seen.size() == 2000);  // no collisions among 1,000 devices
    CHECK(seeds_of(r1, "device-1", q4).codec == seeds_of(r1, "device-1", q4).codec);
    CHECK(seeds_of(r1, "device-1", q4).codec != seeds_of(r2, "device-1", q4).codec);
    CHECK(edgefl::downlink_seed(r1) != edgefl::downlink_seed(r2));
    const std::string long_a(600, 'a');
    std::string long_b = long_a;
    long_b[599] = 'b';  // differs in the third 255-byte block only
    CHECK(seeds_of(r1, long_a, q4).codec != seeds_of(r1, long_b, q4).codec);
    CHECK(seeds_of(r1, "", q4).codec != seeds_of(r1, "x", q4).codec);
  }

  TEST_CASE("random-k and Count Sketch share the round's codec seed; the rest do not") {
    const uint64_t r = edgefl::round_seed(9, 4);
    for (const char* text : {"randk:0.1+fp32", "randk:0.05+q8", "cs"}) {
      CAPTURE(text);
      const CodecSpec spec = parse_or_fail(text);
      CHECK(edgefl::codec_seed_is_shared(spec));
      CHECK(seeds_of(r, "a", spec).codec == seeds_of(r, "b", spec).codec);
      CHECK(seeds_of(r, "a", spec).training != seeds_of(r, "b", spec).training);
    }
    for (const char* text : {"fp32", "bf16", "q4", "hq4", "qsgd", "topk:0.01+q4", "sparq:0.1", "skc"}) {
      CAPTURE(text);
      const CodecSpec spec = parse_or_fail(text);
      CHECK_FALSE(edgefl::codec_seed_is_shared(spec));
      CHECK(seeds_of(r, "a", spec).codec != seeds_of(r, "b", spec).codec);
    }
  }

  TEST_CASE("two devices with the same update in one round send different stochastic codes") {
    const std::vector<float> x = edgefl_test::gaussian_vector(4096, 11);
    const uint64_t r = edgefl::round_seed(1, 1);
    for (const char* text : {"q4", "hq4", "qsgd"}) {
      CAPTURE(text);
      const CodecSpec spec = parse_or_fail(text);
      CHECK(encode_ok(spec, x, seeds_of(r, "device-a", spec).codec) !=
            encode_ok(spec, x, seeds_of(r, "device-b", spec).codec));
    }
  }

  TEST_CASE("the vNMSE of the mean of K devices' decoded updates falls as 1/K (within 20%)") {
    // The same update on every device: what is left of the mean's error is rounding error alone.
    // With one seed per round (the old rule) every device sends the same code and the error of
    // the mean does not fall at all; that is checked too, so this test shows the defect.
    const std::vector<float> x = edgefl_test::gaussian_vector(4096, 5);
    const int kRounds = 6;
    for (const char* text : {"q4", "hq4", "qsgd"}) {
      const CodecSpec spec = parse_or_fail(text);
      auto per_device = [&](int round, int device) {
        return seeds_of(edgefl::round_seed(3, uint64_t(round)), "device-" + std::to_string(device), spec)
            .codec;
      };
      auto per_round = [&](int round, int) { return edgefl::round_seed(3, uint64_t(round)); };
      const double one = vnmse_of_mean(spec, x, 1, kRounds, per_device);
      REQUIRE(one > 0);
      for (const int k : {4, 16}) {
        const double independent = vnmse_of_mean(spec, x, k, kRounds, per_device);
        const double shared = vnmse_of_mean(spec, x, k, kRounds, per_round);
        const double ratio = independent * k / one;  // 1 when the error falls as 1/K
        MESSAGE(std::string(text) << ": K=" << k << " vNMSE(1)=" << one << " vNMSE(K)=" << independent
                                  << " K*vNMSE(K)/vNMSE(1)=" << ratio
                                  << " (one seed per round: " << shared * k / one << ")");
        CHECK(ratio > 0.8);
        CHECK(ratio < 1.2);
        CHECK(shared * k / one > 0.8 * k);  // shared seed: no averaging out
      }
    }
  }

  TEST_CASE("random-k devices of one round send the same coordinates") {
    const CodecSpec spec = parse_or_fail("randk:0.05+fp32");
    const uint64_t r = edgefl::round_seed(2, 8);
    const std::vector<float> a = decode_ok(
        encode_ok(spec, edgefl_test::gaussian_vector(2000, 1), seeds_of(r, "device-a", spec).codec), 2000);
    const std::vector<float> b = decode_ok(
        encode_ok(spec, edgefl_test::gaussian_vector(2000, 2), seeds_of(r, "device-b", spec).codec), 2000);
    size_t kept = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      CHECK((a[i] != 0) == (b[i] != 0));
      kept += a[i] != 0;
    }
    CHECK(kept == 100);
  }
}
