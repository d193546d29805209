// tests/secagg/shamir_test.cpp: Shamir sharing over GF(2^31 + 11) (sdk/src/secagg/shamir.h):
// any t shares recover the secret, fewer are refused, a share off the polynomial, out of the
// field or repeated is detected when one share more than t is at hand, and up to
// floor((m - t) / 2) wrong ones among m are corrected (shamir_decode).
#include <string.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include <doctest/doctest.h>

#include "secagg/crypto.h"
#include "secagg/seeded_random.h"
#include "secagg/shamir.h"

namespace {

using edgefl::Status;
using namespace edgefl::secagg;

using TestRandom = edgefl_test::SeededRandom;

Secret secret_from(uint64_t seed) {
  TestRandom r{seed};
  Secret s;
  REQUIRE(TestRandom::fill(&r, s.data(), s.size()) == Status::kOk);
  return s;
}

std::vector<Share> split(const Secret& secret, uint32_t t, const std::vector<uint32_t>& holders,
                         uint64_t seed) {
  TestRandom r{seed};
  std::vector<Share> shares(holders.size());
  REQUIRE(shamir_split(secret, t, {holders.data(), holders.size()}, r.source(),
                       {shares.data(), shares.size()}) == Status::kOk);
  return shares;
}

std::vector<uint32_t> iota_holders(uint32_t n, uint32_t first = 1) {
  std::vector<uint32_t> h(n);
  std::iota(h.begin(), h.end(), first);
  return h;
}

}  // namespace

TEST_SUITE("secagg.shamir") {
  TEST_CASE("any t of n shares recover the secret, in any order and with any x") {
    for (uint32_t t : {2u, 3u, 6u, 24u, 39u}) {
      const uint32_t n = t + 10;
      std::vector<uint32_t> holders = iota_holders(n, 1);
      if (t == 6) holders = {kMaxHolders, 17, 1, 999999, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
      const Secret secret = secret_from(t);
      std::vector<Share> shares = split(secret, t, holders, 100 + t);
      TestRandom pick{t};
      for (int trial = 0; trial < 20; ++trial) {
        // a random subset of t shares, in random order
        for (size_t i = shares.size() - 1; i > 0; --i) {
          uint8_t b[4];
          TestRandom::fill(&pick, b, 4);
          std::swap(shares[i], shares[(uint32_t(b[0]) | uint32_t(b[1]) << 8) % (i + 1)]);
        }
        Secret got;
        REQUIRE(shamir_reconstruct({shares.data(), t}, t, &got) == Status::kOk);
        CHECK(got == secret);
        REQUIRE(shamir_reconstruct({shares.data(), shares.size()}, t, &got) == Status::kOk);
        CHECK(got == secret);
      }
    }
  }

  TEST_CASE("the extreme secrets: all zero and all ones") {
    for (uint8_t fill : {uint8_t(0), uint8_t(0xff)}) {
      Secret secret;
      secret.fill(fill);
      const std::vector<Share> shares = split(secret, 3, iota_holders(5), 7);
      Secret got;
      REQUIRE(shamir_reconstruct({shares.data(), shares.size()}, 3, &got) == Status::kOk);
      CHECK(got == secret);
    }
  }

  TEST_CASE("fewer than t shares are refused, and x = 0 is never a share") {
    const Secret secret = secret_from(1);
    const std::vector<Share> shares = split(secret, 5, iota_holders(9), 2);
    Secret got;
    CHECK(shamir_reconstruct({shares.data(), 4}, 5, &got) == Status::kTooFewSurvivors);
    // A "share" at x = 0 would be the secret itself: refused outright.
    std::vector<Share> with_zero(shares.begin(), shares.begin() + 4);
    Share fake;
    fake.x = 0;
    with_zero.push_back(fake);
    CHECK(shamir_reconstruct({with_zero.data(), with_zero.size()}, 5, &got) == Status::kBadShare);
  }

  TEST_CASE("shares of the same secret under different randomness are unrelated") {
    const Secret secret = secret_from(3);
    const std::vector<Share> a = split(secret, 4, iota_holders(6), 10);
    const std::vector<Share> b = split(secret, 4, iota_holders(6), 11);
    int equal = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      for (size_t s = 0; s < kSubsecrets; ++s) equal += a[i].y[s] == b[i].y[s];
    }
    CHECK(equal == 0);
  }

  TEST_CASE("a wrong share is detected when t + 1 shares are at hand") {
    const Secret secret = secret_from(4);
    const uint32_t t = 6;
    std::vector<Share> shares = split(secret, t, iota_holders(10), 5);
    for (size_t bad = 0; bad < shares.size(); ++bad) {
      for (size_t s = 0; s < kSubsecrets; ++s) {
        std::vector<Share> tampered = shares;
        tampered[bad].y[s] = (tampered[bad].y[s] + 1) % kFieldPrime;
        Secret got;
        got.fill(0xaa);
        CHECK(shamir_reconstruct({tampered.data(), tampered.size()}, t, &got) == Status::kBadShare);
        CHECK(got == Secret{});  // wiped
        if (bad >= t) {
          // the first t are untouched: with only them the secret still comes out
          REQUIRE(shamir_reconstruct({tampered.data(), t}, t, &got) == Status::kOk);
          CHECK(got == secret);
        }
      }
    }
  }

  TEST_CASE(
      "shamir_decode corrects up to floor((m - t) / 2) wrong values per sub-secret anywhere, names their "
      "shares, and refuses more") {
    TestRandom pick{99};
    auto random_below = [&](uint32_t bound) {
      uint8_t b[4] = {};
      REQUIRE(TestRandom::fill(&pick, b, 4) == Status::kOk);
      return (uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16) % bound;
    };
    for (uint32_t t : {2u, 3u, 7u, 30u}) {
      for (uint32_t extra : {0u, 1u, 2u, 5u, 12u}) {
        const uint32_t m = t + extra, e = extra / 2;
        CAPTURE(t);
        CAPTURE(m);
        const Secret secret = secret_from(t * 100 + m);
        const std::vector<Share> shares = split(secret, t, iota_holders(m, 3), t + m);
        for (uint32_t wrong_count = 0; wrong_count <= e + 2 && wrong_count <= m; ++wrong_count) {
          for (const bool all_subsecrets : {true, false}) {
            CAPTURE(wrong_count);
            CAPTURE(all_subsecrets);
            std::vector<Share> tampered = shares;
            std::vector<uint8_t> is_wrong(m, 0);
            uint32_t per_subsecret[kSubsecrets] = {};
            for (uint32_t w = 0; w < wrong_count;) {
              const uint32_t i = random_below(m);
              if (is_wrong[i]) continue;
              is_wrong[i] = 1;
              ++w;
              // every sub-secret, or one, moved by anything in the field but zero
              const size_t first = all_subsecrets ? 0 : random_below(kSubsecrets);
              const size_t last = all_subsecrets ? kSubsecrets : first + 1;
              for (size_t k = first; k < last; ++k) {
                ++per_subsecret[k];
                tampered[i].y[k] =
                    uint32_t((uint64_t(tampered[i].y[k]) + 1 + random_below(kFieldPrime - 1)) % kFieldPrime);
              }
            }
            const uint32_t worst = *std::max_element(per_subsecret, per_subsecret + kSubsecrets);
            Secret got;
            std::vector<uint8_t> flagged(m, 0xee);
            const Status status = shamir_decode({tampered.data(), m}, t, &got, {flagged.data(), m});
            if (worst <= e) {
              REQUIRE(status == Status::kOk);
              CHECK(got == secret);
              CHECK(flagged == is_wrong);
            } else if (extra == 0) {
              // t shares carry no redundancy: any t values are some polynomial's. The caller's
              // check (a commitment, a public key) is what catches this.
              CHECK((status != Status::kOk || got != secret));
            } else if (status == Status::kOk) {
              // Past the bound another polynomial may come out: never the secret's, and callers
              // check what they recover.
              CHECK(got != secret);
            } else {
              CHECK(status == Status::kBadShare);
              CHECK(got == Secret{});
              CHECK(flagged == std::vector<uint8_t>(m, 0));
            }
          }
        }
      }
    }
  }

  TEST_CASE("shamir_off_polynomial flags the shares off the polynomial through the first t") {
    const Secret secret = secret_from(12);
    std::vector<Share> shares = split(secret, 5, iota_holders(12), 13);
    shares[6].y[3] = (shares[6].y[3] + 1) % kFieldPrime;
    shares[11].y[0] = (shares[11].y[0] + 7) % kFieldPrime;
    std::vector<uint8_t> off(12, 0xee);
    REQUIRE(shamir_off_polynomial({shares.data(), 12}, 5, {off.data(), 12}) == Status::kOk);
    std::vector<uint8_t> expected(12, 0);
    expected[6] = expected[11] = 1;
    CHECK(off == expected);
    // A wrong share among the first t moves the polynomial: most others are off it.
    std::swap(shares[0], shares[6]);
    REQUIRE(shamir_off_polynomial({shares.data(), 12}, 5, {off.data(), 12}) == Status::kOk);
    CHECK(std::count(off.begin(), off.end(), uint8_t{1}) >= 6);
    CHECK(shamir_off_polynomial({shares.data(), 12}, 5, {off.data(), 11}) == Status::kInvalidArgument);
    CHECK(shamir_off_polynomial({shares.data(), 4}, 5, {off.data(), 4}) == Status::kTooFewSurvivors);
    shares[3].x = shares[2].x;
    CHECK(shamir_off_polynomial({shares.data(), 12}, 5, {off.data(), 12}) == Status::kBadShare);
    CHECK(off == std::vector<uint8_t>(12, 0));
  }

  TEST_CASE("shamir_decode: the same refusals as shamir_reconstruct, and a flag array of the wrong size") {
    const Secret secret = secret_from(8);
    std::vector<Share> shares = split(secret, 4, iota_holders(8), 9);
    Secret got;
    std::vector<uint8_t> flags(8);
    CHECK(shamir_decode({shares.data(), 3}, 4, &got, {}) == Status::kTooFewSurvivors);
    CHECK(shamir_decode({shares.data(), 8}, 4, &got, {flags.data(), 7}) == Status::kInvalidArgument);
    CHECK(shamir_decode({shares.data(), 8}, 1, &got, {}) == Status::kInvalidArgument);
    CHECK(shamir_decode({shares.data(), 8}, 4, nullptr, {}) == Status::kInvalidArgument);
    REQUIRE(shamir_decode({shares.data(), 8}, 4, &got, {}) == Status::kOk);
    CHECK(got == secret);
    shares[5].x = shares[2].x;
    CHECK(shamir_decode({shares.data(), 8}, 4, &got, {}) == Status::kBadShare);
    shares[5].x = 0;
    CHECK(shamir_decode({shares.data(), 8}, 4, &got, {}) == Status::kBadShare);
    shares[5].x = 6;
    shares[5].y[1] = kFieldPrime;
    CHECK(shamir_decode({shares.data(), 8}, 4, &got, {}) == Status::kBadShare);
  }

  TEST_CASE("bad input: x out of range or repeated, y outside the field, bad thresholds") {
    const Secret secret = secret_from(5);
    std::vector<Share> shares = split(secret, 3, iota_holders(5), 6);
    Secret got;
    std::vector<Share> s = shares;
    s[1].x = s[0].x;
    CHECK(shamir_reconstruct({s.data(), s.size()}, 3, &got) == Status::kBadShare);
    s = shares;
    s[2].x = kMaxHolders + 1;
    CHECK(shamir_reconstruct({s.data(), s.size()}, 3, &got) == Status::kBadShare);
    s = shares;
    s[0].y[4] = kFieldPrime;
    CHECK(shamir_reconstruct({s.data(), s.size()}, 3, &got) == Status::kBadShare);
    CHECK(shamir_reconstruct({shares.data(), shares.size()}, 1, &got) == Status::kInvalidArgument);
    CHECK(shamir_reconstruct({shares.data(), shares.size()}, kMaxThreshold + 1, &got) ==
          Status::kInvalidArgument);

    TestRandom r{1};
    std::vector<Share> out(3);
    const std::vector<uint32_t> dup = {1, 2, 2};
    CHECK(shamir_split(secret, 2, {dup.data(), 3}, r.source(), {out.data(), 3}) == Status::kBadShare);
    const std::vector<uint32_t> zero = {0, 1, 2};
    CHECK(shamir_split(secret, 2, {zero.data(), 3}, r.source(), {out.data(), 3}) == Status::kBadShare);
    const std::vector<uint32_t> ok = {1, 2, 3};
    CHECK(shamir_split(secret, 4, {ok.data(), 3}, r.source(), {out.data(), 3}) == Status::kInvalidArgument);
    CHECK(shamir_split(secret, 1, {ok.data(), 3}, r.source(), {out.data(), 3}) == Status::kInvalidArgument);
    CHECK(shamir_split(secret, 2, {ok.data(), 3}, r.source(), {out.data(), 2}) == Status::kInvalidArgument);
    // a failing random source: its status, and nothing of the secret left in `out`
    RandomSource failing{[](void*, uint8_t*, size_t) { return Status::kCryptoError; }, nullptr};
    CHECK(shamir_split(secret, 2, {ok.data(), 3}, failing, {out.data(), 3}) == Status::kCryptoError);
    for (const Share& share : out) {
      CHECK(share.x == 0);
      for (uint32_t y : share.y) CHECK(y == 0);
    }
  }

  TEST_CASE("the 40-byte form round-trips and refuses what is outside the field") {
    const std::vector<Share> shares = split(secret_from(6), 2, iota_holders(3), 8);
    uint8_t bytes[kShareBytes];
    shamir_share_to_bytes(shares[1], bytes);
    Share back;
    REQUIRE(shamir_share_from_bytes(bytes, &back) == Status::kOk);
    CHECK(back.x == shares[1].x);
    CHECK(memcmp(back.y, shares[1].y, sizeof back.y) == 0);
    uint8_t bad[kShareBytes];
    memcpy(bad, bytes, sizeof bad);
    memset(bad + 4, 0xff, 4);  // y[0] = 2^32 - 1 >= p
    CHECK(shamir_share_from_bytes(bad, &back) == Status::kBadShare);
    memcpy(bad, bytes, sizeof bad);
    memset(bad, 0, 4);  // x = 0
    CHECK(shamir_share_from_bytes(bad, &back) == Status::kBadShare);
  }

  TEST_CASE("with the CSPRNG: the production source works end to end") {
    REQUIRE(crypto_init() == Status::kOk);
    Secret secret;
    REQUIRE(crypto_random_bytes(secret.data(), secret.size()) == Status::kOk);
    const std::vector<uint32_t> holders = iota_holders(30);
    std::vector<Share> shares(30);
    REQUIRE(shamir_split(secret, 12, {holders.data(), 30}, crypto_random(), {shares.data(), 30}) ==
            Status::kOk);
    Secret got;
    REQUIRE(shamir_reconstruct({shares.data() + 18, 12}, 12, &got) == Status::kOk);
    CHECK(got == secret);
  }
}
