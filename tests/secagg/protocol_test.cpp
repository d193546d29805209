// tests/secagg/protocol_test.cpp: SecAgg+ end to end in one process (sdk/src/secagg/protocol.h):
// the unmasked sum equals the exact sum of the surviving devices' integer codes for n = 10 and
// 100 with 0%, 10% and 30% of the devices dropping at each phase; what the server receives is
// uniformly distributed; and every refusal comes with its specific status.
#include <string.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "secagg/protocol.h"
#include "secagg/seeded_random.h"

namespace {

using edgefl::Status;
using namespace edgefl::secagg;

using edgefl::splitmix64_next;

enum class Phase { kAdvertise = 0, kShare = 1, kMask = 2, kUnmask = 3 };
const char* phase_name(Phase p) {
  static const char* names[] = {"advertise", "share", "mask", "unmask"};
  return names[int(p)];
}

RoundParameters parameters(uint32_t n, uint32_t max_magnitude, uint32_t words, uint64_t seed) {
  RoundParameters p;
  p.round_id = seed;
  uint64_t s = seed;
  for (auto& b : p.round_nonce) b = uint8_t(splitmix64_next(&s));
  for (auto& b : p.graph_seed) b = uint8_t(splitmix64_next(&s));
  REQUIRE(find_graph_parameters(n, 0.05, 0.33, ThreatModel::kCuriousServer, &p.graph) == Status::kOk);
  REQUIRE(modulus_bits_for(n, max_magnitude, /*is_signed=*/true, &p.modulus_bits) == Status::kOk);
  p.words = words;
  return p;
}

// Signed codes in [-max, max] as words modulo 2^m (a q8 shared-scale update, say).
std::vector<std::vector<uint32_t>> inputs_for(const RoundParameters& p, uint32_t max_magnitude,
                                              uint64_t seed) {
  std::vector<std::vector<uint32_t>> inputs(p.graph.clients, std::vector<uint32_t>(p.words));
  for (auto& x : inputs) {
    for (auto& w : x) {
      const int64_t v = int64_t(splitmix64_next(&seed) % (2 * max_magnitude + 1)) - int64_t(max_magnitude);
      w = to_word(v, p.modulus_bits);
    }
  }
  return inputs;
}

// The devices that drop at each phase (they send nothing from that phase on).
struct Dropouts {
  std::set<uint32_t> at[4];
};

Dropouts drop_fraction(uint32_t n, Phase phase, double fraction, uint64_t seed) {
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  for (uint32_t i = n - 1; i > 0; --i) std::swap(order[i], order[splitmix64_next(&seed) % (i + 1)]);
  Dropouts d;
  const uint32_t count = uint32_t(std::lround(fraction * n));
  d.at[int(phase)].insert(order.begin(), order.begin() + count);
  return d;
}

struct Outcome {
  Status status = Status::kOk;
  std::vector<uint32_t> sum;
  std::vector<uint32_t> contributors;
};

// One round with honest devices and server, devices dropping as `drops` says.
Outcome run_round(const RoundParameters& p, const std::vector<std::vector<uint32_t>>& inputs,
                  const Dropouts& drops) {
  const uint32_t n = p.graph.clients;
  std::vector<SecAggClient> devices(n);
  SecAggServer server;
  REQUIRE(server.start(p) == Status::kOk);
  auto active = [&](uint32_t d, Phase phase) {
    for (int k = 0; k <= int(phase); ++k) {
      if (drops.at[k].count(d)) return false;
    }
    return true;
  };
  Outcome out;
  for (uint32_t d = 0; d < n; ++d) {
    AdvertisedKeys keys;
    REQUIRE(devices[d].start(p, d, &keys) == Status::kOk);
    if (active(d, Phase::kAdvertise)) REQUIRE(server.add_keys(keys) == Status::kOk);
  }
  out.status = server.end_keys();
  if (out.status != Status::kOk) return out;
  for (uint32_t d = 0; d < n; ++d) {
    if (!active(d, Phase::kShare)) continue;
    const std::vector<AdvertisedKeys> keys = server.keys_for(d);
    std::vector<SealedShares> sealed;
    Key32 commitment;
    REQUIRE(devices[d].share({keys.data(), keys.size()}, &sealed, &commitment) == Status::kOk);
    REQUIRE(server.add_shares(d, commitment, {sealed.data(), sealed.size()}) == Status::kOk);
  }
  out.status = server.end_shares();
  if (out.status != Status::kOk) return out;
  std::vector<uint32_t> masked(p.words);
  for (uint32_t d = 0; d < n; ++d) {
    if (!active(d, Phase::kMask)) continue;
    const std::vector<SealedShares> received = server.shares_for(d);
    REQUIRE(devices[d].mask({received.data(), received.size()}, {inputs[d].data(), p.words},
                            {masked.data(), masked.size()}) == Status::kOk);
    REQUIRE(server.add_masked(d, {masked.data(), masked.size()}) == Status::kOk);
  }
  out.status = server.end_masked();
  if (out.status != Status::kOk) return out;
  for (uint32_t d = 0; d < n; ++d) {
    if (!active(d, Phase::kUnmask) || drops.at[int(Phase::kMask)].count(d)) continue;
    std::vector<RevealedShare> revealed;
    REQUIRE(devices[d].unmask(server.unmask_request_for(d), &revealed) == Status::kOk);
    REQUIRE(server.add_unmask(d, {revealed.data(), revealed.size()}) == Status::kOk);
  }
  out.sum.assign(p.words, 0);
  out.status = server.finish({out.sum.data(), out.sum.size()}, &out.contributors);
  return out;
}

std::vector<uint32_t> expected_sum(const RoundParameters& p, const std::vector<std::vector<uint32_t>>& inputs,
                                   const std::vector<uint32_t>& contributors) {
  std::vector<int64_t> total(p.words, 0);
  for (uint32_t d : contributors) {
    for (uint32_t i = 0; i < p.words; ++i) total[i] += centered(inputs[d][i], p.modulus_bits);
  }
  std::vector<uint32_t> words(p.words);
  for (uint32_t i = 0; i < p.words; ++i) words[i] = to_word(total[i], p.modulus_bits);
  return words;
}

// The devices that sent a masked vector under `drops`.
std::vector<uint32_t> senders(uint32_t n, const Dropouts& drops) {
  std::vector<uint32_t> out;
  for (uint32_t d = 0; d < n; ++d) {
    if (!drops.at[0].count(d) && !drops.at[1].count(d) && !drops.at[2].count(d)) out.push_back(d);
  }
  return out;
}

// A round run by hand up to the point a test wants to attack.
struct Setup {
  RoundParameters p;
  std::vector<SecAggClient> devices;
  SecAggServer server;
  std::vector<AdvertisedKeys> keys;
  std::vector<std::vector<SealedShares>> sealed;
  std::vector<Key32> commitments;
  std::vector<std::vector<uint32_t>> inputs;

  explicit Setup(uint32_t n, uint32_t words = 64)
      : p(parameters(n, 127, words, 77)), devices(n), keys(n), sealed(n), commitments(n) {
    inputs = inputs_for(p, 127, 5);
    REQUIRE(server.start(p) == Status::kOk);
    for (uint32_t d = 0; d < n; ++d) REQUIRE(devices[d].start(p, d, &keys[d]) == Status::kOk);
  }
  void advertise_all() {
    for (const AdvertisedKeys& k : keys) REQUIRE(server.add_keys(k) == Status::kOk);
    REQUIRE(server.end_keys() == Status::kOk);
  }
  void share_all() {
    for (uint32_t d = 0; d < p.graph.clients; ++d) {
      const std::vector<AdvertisedKeys> k = server.keys_for(d);
      REQUIRE(devices[d].share({k.data(), k.size()}, &sealed[d], &commitments[d]) == Status::kOk);
      REQUIRE(server.add_shares(d, commitments[d], {sealed[d].data(), sealed[d].size()}) == Status::kOk);
    }
    REQUIRE(server.end_shares() == Status::kOk);
  }
  Status mask(uint32_t d, const std::vector<SealedShares>& received, std::vector<uint32_t>* masked) {
    masked->assign(p.words, 0);
    return devices[d].mask({received.data(), received.size()}, {inputs[d].data(), p.words},
                           {masked->data(), masked->size()});
  }
  void mask_all() {
    std::vector<uint32_t> masked;
    for (uint32_t d = 0; d < p.graph.clients; ++d) {
      REQUIRE(mask(d, server.shares_for(d), &masked) == Status::kOk);
      REQUIRE(server.add_masked(d, {masked.data(), masked.size()}) == Status::kOk);
    }
    REQUIRE(server.end_masked() == Status::kOk);
  }
};

// Every phase x {0%, 10%, 30%} dropping there, the exact sum of the devices that sent a vector.
void check_dropout_matrix(uint32_t n) {
  const RoundParameters p = parameters(n, 127, 256, n);
  const std::vector<std::vector<uint32_t>> inputs = inputs_for(p, 127, n + 1);
  for (Phase phase : {Phase::kAdvertise, Phase::kShare, Phase::kMask, Phase::kUnmask}) {
    for (double fraction : {0.0, 0.1, 0.3}) {
      if (fraction == 0.0 && phase != Phase::kAdvertise) continue;  // the same round
      CAPTURE(n);
      CAPTURE(phase_name(phase));
      CAPTURE(fraction);
      const Dropouts drops = drop_fraction(n, phase, fraction, 1000 * n + uint64_t(phase));
      const Outcome out = run_round(p, inputs, drops);
      REQUIRE(out.status == Status::kOk);
      CHECK(out.contributors == senders(n, drops));
      CHECK(out.sum == expected_sum(p, inputs, out.contributors));
    }
  }
}

}  // namespace

TEST_SUITE("secagg.protocol") {
  TEST_CASE("masked words pack at m bits each and unpack exactly; padding and sizes are checked") {
    uint64_t state = 99;
    for (uint32_t bits : {1u, 3u, 7u, 8u, 11u, 17u, 31u, 32u}) {
      for (uint32_t count : {1u, 2u, 7u, 8u, 9u, 1000u}) {
        std::vector<uint32_t> words(count);
        for (uint32_t& w : words) {
          w = uint32_t(edgefl::splitmix64_next(&state)) & (bits == 32 ? 0xFFFFFFFFu : (1u << bits) - 1);
        }
        std::vector<uint8_t> packed(packed_words_bytes(count, bits));
        CHECK(packed.size() == (uint64_t(count) * bits + 7) / 8);
        REQUIRE(pack_words({words.data(), words.size()}, bits, {packed.data(), packed.size()}) ==
                Status::kOk);
        std::vector<uint32_t> back(count, 0xABCD);
        REQUIRE(unpack_words({packed.data(), packed.size()}, bits, {back.data(), back.size()}) ==
                Status::kOk);
        CHECK(back == words);
        if ((uint64_t(count) * bits) % 8 != 0) {  // a set padding bit is refused
          packed.back() |= 0x80;
          CHECK(unpack_words({packed.data(), packed.size()}, bits, {back.data(), back.size()}) ==
                Status::kInvalidMessage);
        }
        CHECK(unpack_words({packed.data(), packed.size() - 1}, bits, {back.data(), back.size()}) ==
              Status::kSizeMismatch);
        if (bits < 32) {
          words[0] = 1u << bits;
          CHECK(pack_words({words.data(), words.size()}, bits, {packed.data(), packed.size()}) ==
                Status::kValueOutOfRange);
        }
      }
    }
    uint32_t w = 1;
    uint8_t b[8] = {};
    CHECK(pack_words({&w, 1}, 0, {b, 8}) == Status::kInvalidArgument);
    CHECK(pack_words({&w, 1}, 33, {b, 8}) == Status::kInvalidArgument);
    CHECK(pack_words({&w, 1}, 9, {b, 1}) == Status::kBufferTooSmall);
  }

  TEST_CASE("modulus bits: the smallest m at which the cohort's sum cannot wrap, refused above 32") {
    uint32_t m = 0;
    REQUIRE(modulus_bits_for(100, 127, true, &m) == Status::kOk);
    CHECK(m == 15);  // 2 * 100 * 127 + 1 = 25,401 values
    REQUIRE(modulus_bits_for(1, 1, true, &m) == Status::kOk);
    CHECK(m == 2);
    REQUIRE(modulus_bits_for(1000, 1u << 22, false, &m) == Status::kOk);
    CHECK(m == 32);
    CHECK(modulus_bits_for(1000, 1u << 22, true, &m) == Status::kUnsafeConfiguration);
    CHECK(modulus_bits_for(2, 0xffffffffu, false, &m) == Status::kUnsafeConfiguration);
    for (int64_t v : {int64_t(-12700), int64_t(-1), int64_t(0), int64_t(1), int64_t(12700)}) {
      CHECK(centered(to_word(v, 15), 15) == v);
    }
  }

  TEST_CASE("exact sums, n = 10, with 0%, 10% and 30% dropping at each phase") {
    check_dropout_matrix(10);
  }

  TEST_CASE("exact sums, n = 100, with 0%, 10% and 30% dropping at each phase") {
    check_dropout_matrix(100);
  }

  TEST_CASE("10% dropping at every phase in one round of 100") {
    const RoundParameters p = parameters(100, 127, 512, 9);
    const std::vector<std::vector<uint32_t>> inputs = inputs_for(p, 127, 10);
    Dropouts drops;
    uint64_t s = 3;
    std::vector<uint32_t> order(100);
    std::iota(order.begin(), order.end(), 0u);
    for (uint32_t i = 99; i > 0; --i) std::swap(order[i], order[splitmix64_next(&s) % (i + 1)]);
    for (int k = 0; k < 4; ++k) drops.at[k].insert(order.begin() + 10 * k, order.begin() + 10 * k + 10);
    const Outcome out = run_round(p, inputs, drops);
    REQUIRE(out.status == Status::kOk);
    CHECK(out.contributors.size() == 70);
    CHECK(out.sum == expected_sum(p, inputs, out.contributors));
  }

  TEST_CASE("too many dropouts end the round cleanly with too_few_survivors") {
    const RoundParameters p = parameters(10, 127, 16, 4);
    const std::vector<std::vector<uint32_t>> inputs = inputs_for(p, 127, 4);
    // almost everyone leaves before unmasking: no secret gets t shares
    const Outcome late = run_round(p, inputs, drop_fraction(10, Phase::kUnmask, 0.9, 1));
    CHECK(late.status == Status::kTooFewSurvivors);
    const Outcome early = run_round(p, inputs, drop_fraction(10, Phase::kAdvertise, 0.9, 2));
    CHECK(early.status == Status::kTooFewSurvivors);
    // Most leave after sharing: the survivors' seeds (and the leavers' mask keys) have their shares
    // with fewer than t survivors. The masked phase's end says so, before any device is asked to
    // unmask (an honest one would refuse: run_round requires every answer).
    for (const double fraction : {0.6, 0.8}) {
      CAPTURE(fraction);
      const Outcome masked = run_round(p, inputs, drop_fraction(10, Phase::kMask, fraction, 3));
      CHECK(masked.status == Status::kTooFewSurvivors);
      CHECK(masked.sum.empty());  // ended by end_masked(), not by finish()
    }
  }

  TEST_CASE("what the server receives is uniform: masked zeros, byte and value histograms") {
    Setup s(12, 1 << 16);
    s.advertise_all();
    s.share_all();
    {
      std::fill(s.inputs[3].begin(), s.inputs[3].end(), 0u);  // the most revealing input there is
      std::vector<uint32_t> masked;
      REQUIRE(s.mask(3, s.server.shares_for(3), &masked) == Status::kOk);
      // m = 12 here (12 devices, codes in [-127, 127]); 65,536 samples; chi-square over 256 bins
      // of the top 8 bits and of the low 8 bits (expected 256 per bin, 255 degrees of freedom:
      // mean 255, sd 22.6; 400 is beyond 6 sd).
      const uint32_t m = s.p.modulus_bits;
      REQUIRE(m == 12);
      for (uint32_t shift : {0u, m - 8}) {
        std::vector<double> bins(256, 0);
        for (uint32_t w : masked) {
          REQUIRE(w < (1u << m));
          bins[(w >> shift) & 255] += 1;
        }
        double chi = 0;
        const double expect = double(masked.size()) / 256;
        for (double b : bins) chi += (b - expect) * (b - expect) / expect;
        CAPTURE(shift);
        CHECK(chi < 400);
      }
      // and the same zeros masked in another round agree with these no more than chance would
      // have it (1 word in 2^12: 16 expected)
      std::vector<uint32_t> again;
      Setup other(12, 1 << 16);
      other.advertise_all();
      other.share_all();
      REQUIRE(other.mask(3, other.server.shares_for(3), &again) == Status::kOk);
      size_t equal = 0;
      for (size_t i = 0; i < masked.size(); ++i) equal += masked[i] == again[i];
      CHECK(equal < 48);
    }
  }

  TEST_CASE("a share altered or relayed to the wrong device fails authentication; nothing changes") {
    Setup s(10);
    s.advertise_all();
    s.share_all();
    std::vector<SealedShares> received = s.server.shares_for(4);
    REQUIRE(received.size() >= s.p.graph.threshold);
    std::vector<uint32_t> masked;
    for (size_t byte : {size_t(0), size_t(50), kSealedSharesBytes - 1}) {
      std::vector<SealedShares> tampered = received;
      tampered[1].sealed[byte] ^= 0x01;
      CHECK(s.mask(4, tampered, &masked) == Status::kAuthenticationFailed);
    }
    // a share for device 5 handed to device 4 as if it were its own
    std::vector<SealedShares> for_five = s.server.shares_for(5);
    std::vector<SealedShares> misrouted = received;
    for (const SealedShares& x : for_five) {
      if (x.from == misrouted[0].from) continue;
      bool neighbour_of_four = false;
      for (const SealedShares& r : received) neighbour_of_four |= r.from == x.from;
      if (!neighbour_of_four) continue;
      for (SealedShares& r : misrouted) {
        if (r.from == x.from) {
          r.sealed = x.sealed;  // to = 4 kept: the ciphertext is bound to (from, 5)
        }
      }
      break;
    }
    CHECK(s.mask(4, misrouted, &masked) == Status::kAuthenticationFailed);
    std::vector<SealedShares> readdressed = received;
    readdressed[0].to = 5;
    CHECK(s.mask(4, readdressed, &masked) == Status::kProtocolError);
    std::vector<SealedShares> twice = received;
    twice.push_back(received[0]);
    CHECK(s.mask(4, twice, &masked) == Status::kProtocolError);
    // after all of that, the honest relay still works and the round sums exactly
    std::vector<uint32_t> out;
    for (uint32_t d = 0; d < 10; ++d) {
      REQUIRE(s.mask(d, s.server.shares_for(d), &out) == Status::kOk);
      REQUIRE(s.server.add_masked(d, {out.data(), out.size()}) == Status::kOk);
    }
    REQUIRE(s.server.end_masked() == Status::kOk);
    for (uint32_t d = 0; d < 10; ++d) {
      std::vector<RevealedShare> revealed;
      REQUIRE(s.devices[d].unmask(s.server.unmask_request_for(d), &revealed) == Status::kOk);
      REQUIRE(s.server.add_unmask(d, {revealed.data(), revealed.size()}) == Status::kOk);
    }
    std::vector<uint32_t> sum(s.p.words), contributors;
    REQUIRE(s.server.finish({sum.data(), sum.size()}, &contributors) == Status::kOk);
    CHECK(sum == expected_sum(s.p, s.inputs, contributors));
  }

  TEST_CASE("replayed keys: refused by the server and by a device") {
    Setup s(10);
    REQUIRE(s.server.add_keys(s.keys[0]) == Status::kOk);
    AdvertisedKeys replay = s.keys[0];
    replay.device = 1;
    CHECK(s.server.add_keys(replay) == Status::kKeyReuse);
    AdvertisedKeys half = s.keys[1];
    half.mask_public = s.keys[0].cipher_public;
    CHECK(s.server.add_keys(half) == Status::kKeyReuse);
    AdvertisedKeys same = s.keys[1];
    same.mask_public = same.cipher_public;
    CHECK(s.server.add_keys(same) == Status::kKeyReuse);
    CHECK(s.server.add_keys(s.keys[0]) == Status::kProtocolError);  // twice
    AdvertisedKeys out_of_range = s.keys[2];
    out_of_range.device = 10;
    CHECK(s.server.add_keys(out_of_range) == Status::kProtocolError);
    for (uint32_t d = 1; d < 10; ++d) REQUIRE(s.server.add_keys(s.keys[d]) == Status::kOk);
    REQUIRE(s.server.end_keys() == Status::kOk);

    // a (malicious) relay that gives device 2 someone's keys twice, or its own
    std::vector<AdvertisedKeys> k = s.server.keys_for(2);
    std::vector<SealedShares> sealed;
    Key32 commitment;
    std::vector<AdvertisedKeys> dup = k;
    dup[1].cipher_public = dup[0].cipher_public;
    dup[1].mask_public = dup[0].mask_public;
    CHECK(s.devices[2].share({dup.data(), dup.size()}, &sealed, &commitment) == Status::kKeyReuse);
    std::vector<AdvertisedKeys> own = k;
    own[0].cipher_public = s.keys[2].cipher_public;
    CHECK(s.devices[2].share({own.data(), own.size()}, &sealed, &commitment) == Status::kKeyReuse);
    std::vector<AdvertisedKeys> stranger = k;
    stranger[0].device = 2;  // itself, not a neighbour
    CHECK(s.devices[2].share({stranger.data(), stranger.size()}, &sealed, &commitment) ==
          Status::kProtocolError);
    std::vector<AdvertisedKeys> few(k.begin(), k.begin() + (s.p.graph.threshold - 1));
    CHECK(s.devices[2].share({few.data(), few.size()}, &sealed, &commitment) == Status::kTooFewSurvivors);
    CHECK(s.devices[2].share({k.data(), k.size()}, &sealed, &commitment) ==
          Status::kOk);  // unchanged by the refusals
  }

  TEST_CASE("the device never reveals both secrets of one neighbour, and answers once") {
    Setup s(10);
    s.advertise_all();
    s.share_all();
    s.mask_all();
    const UnmaskRequest honest = s.server.unmask_request_for(0);
    REQUIRE(honest.survivors.size() >= 2);
    std::vector<RevealedShare> revealed;
    UnmaskRequest both = honest;
    both.dropped.push_back(both.survivors[0]);
    CHECK(s.devices[0].unmask(both, &revealed) == Status::kSecAggRefused);
    UnmaskRequest repeated = honest;
    repeated.survivors.push_back(repeated.survivors[0]);
    CHECK(s.devices[0].unmask(repeated, &revealed) == Status::kSecAggRefused);
    UnmaskRequest stranger = honest;
    stranger.dropped.push_back(0);  // itself
    CHECK(s.devices[0].unmask(stranger, &revealed) == Status::kSecAggRefused);
    UnmaskRequest few;
    few.dropped = honest.survivors;  // "everyone dropped": would reveal every mask key
    CHECK(s.devices[0].unmask(few, &revealed) == Status::kTooFewSurvivors);
    REQUIRE(s.devices[0].unmask(honest, &revealed) == Status::kOk);
    CHECK(revealed.size() == honest.survivors.size());
    // a second request (say, "they dropped after all") is refused
    UnmaskRequest flipped;
    flipped.dropped = honest.survivors;
    CHECK(s.devices[0].unmask(flipped, &revealed) == Status::kSecAggRefused);
    CHECK(s.devices[0].unmask(honest, &revealed) == Status::kSecAggRefused);
  }

  TEST_CASE("the server refuses malformed or out-of-phase messages and corrects a wrong share") {
    Setup s(10);
    std::vector<uint32_t> words(s.p.words, 0);
    CHECK(s.server.add_masked(0, {words.data(), words.size()}) == Status::kProtocolError);  // phase
    s.advertise_all();
    CHECK(s.server.add_keys(s.keys[0]) == Status::kProtocolError);  // R0 is over
    // shares: one missing, one misaddressed
    std::vector<AdvertisedKeys> k = s.server.keys_for(0);
    std::vector<SealedShares> sealed;
    Key32 commitment;
    REQUIRE(s.devices[0].share({k.data(), k.size()}, &sealed, &commitment) == Status::kOk);
    std::vector<SealedShares> missing(sealed.begin(), sealed.end() - 1);
    CHECK(s.server.add_shares(0, commitment, {missing.data(), missing.size()}) == Status::kInvalidMessage);
    std::vector<SealedShares> wrong_from = sealed;
    wrong_from[0].from = 1;
    CHECK(s.server.add_shares(0, commitment, {wrong_from.data(), wrong_from.size()}) ==
          Status::kInvalidMessage);
    REQUIRE(s.server.add_shares(0, commitment, {sealed.data(), sealed.size()}) == Status::kOk);
    CHECK(s.server.add_shares(0, commitment, {sealed.data(), sealed.size()}) ==
          Status::kProtocolError);  // twice
    for (uint32_t d = 1; d < 10; ++d) {
      std::vector<AdvertisedKeys> kd = s.server.keys_for(d);
      REQUIRE(s.devices[d].share({kd.data(), kd.size()}, &s.sealed[d], &s.commitments[d]) == Status::kOk);
      REQUIRE(s.server.add_shares(d, s.commitments[d], {s.sealed[d].data(), s.sealed[d].size()}) ==
              Status::kOk);
    }
    REQUIRE(s.server.end_shares() == Status::kOk);
    // masked vectors: a word >= 2^m, a wrong length, an input word >= 2^m on the device
    std::vector<uint32_t> masked;
    REQUIRE(s.mask(0, s.server.shares_for(0), &masked) == Status::kOk);
    std::vector<uint32_t> wide = masked;
    wide[3] = 1u << s.p.modulus_bits;
    CHECK(s.server.add_masked(0, {wide.data(), wide.size()}) == Status::kInvalidMessage);
    CHECK(s.server.add_masked(0, {masked.data(), masked.size() - 1}) == Status::kDimensionMismatch);
    std::vector<uint32_t> bad_input = s.inputs[1];
    bad_input[0] = 1u << s.p.modulus_bits;
    std::vector<uint32_t> out(s.p.words);
    const std::vector<SealedShares> for_one = s.server.shares_for(1);
    CHECK(s.devices[1].mask({for_one.data(), for_one.size()}, {bad_input.data(), bad_input.size()},
                            {out.data(), out.size()}) == Status::kValueOutOfRange);
    REQUIRE(s.server.add_masked(0, {masked.data(), masked.size()}) == Status::kOk);
    CHECK(s.server.add_masked(0, {masked.data(), masked.size()}) == Status::kProtocolError);  // twice
    for (uint32_t d = 1; d < 10; ++d) {
      REQUIRE(s.mask(d, s.server.shares_for(d), &masked) == Status::kOk);
      REQUIRE(s.server.add_masked(d, {masked.data(), masked.size()}) == Status::kOk);
    }
    REQUIRE(s.server.end_masked() == Status::kOk);
    // unmask answers: wrong kind, wrong x; then one wrong y that the extra shares expose and correct
    for (uint32_t d = 0; d < 10; ++d) {
      std::vector<RevealedShare> revealed;
      REQUIRE(s.devices[d].unmask(s.server.unmask_request_for(d), &revealed) == Status::kOk);
      std::vector<RevealedShare> kind = revealed;
      kind[0].kind = SecretKind::kMaskKey;
      CHECK(s.server.add_unmask(d, {kind.data(), kind.size()}) == Status::kInvalidMessage);
      std::vector<RevealedShare> x = revealed;
      x[0].share.x += 1;
      CHECK(s.server.add_unmask(d, {x.data(), x.size()}) == Status::kInvalidMessage);
      if (d == 7) revealed[0].share.y[2] = (revealed[0].share.y[2] + 1) % kFieldPrime;
      REQUIRE(s.server.add_unmask(d, {revealed.data(), revealed.size()}) == Status::kOk);
    }
    std::vector<uint32_t> sum(s.p.words), contributors;
    REQUIRE(s.server.finish({sum.data(), sum.size()}, &contributors) == Status::kOk);
    CHECK(contributors.size() == 10);
    CHECK(sum == expected_sum(s.p, s.inputs, contributors));
    CHECK(s.server.wrong_share_holders() == std::vector<uint32_t>{7});
  }

  TEST_CASE(
      "devices that reveal wrong shares: the sum stays exact while each secret has at most "
      "floor((shares - t) / 2) wrong ones, and they are named; when no t honest shares are left the round "
      "fails with bad_share") {
    // n = 100: 10% drop before masking (their mask keys are recovered), 10% before they answer
    // the unmask request, and `liars` survivors answer with every share off its polynomial
    // (another error in each sub-secret): shares of seeds and of mask keys.
    Setup s(100, 32);
    s.advertise_all();
    s.share_all();
    auto masks = [](uint32_t d) { return d % 10 != 5; };
    auto answers = [&](uint32_t d) { return masks(d) && d % 10 != 3; };
    std::vector<uint32_t> masked;
    for (uint32_t d = 0; d < 100; ++d) {
      if (!masks(d)) continue;
      REQUIRE(s.mask(d, s.server.shares_for(d), &masked) == Status::kOk);
      REQUIRE(s.server.add_masked(d, {masked.data(), masked.size()}) == Status::kOk);
    }
    REQUIRE(s.server.end_masked() == Status::kOk);
    const uint32_t t = s.p.graph.threshold;
    std::vector<std::vector<RevealedShare>> honest(100);
    for (uint32_t d = 0; d < 100; ++d) {
      if (answers(d)) REQUIRE(s.devices[d].unmask(s.server.unmask_request_for(d), &honest[d]) == Status::kOk);
    }
    HararyGraph graph;
    REQUIRE(graph.build(s.p.graph, s.p.graph_seed) == Status::kOk);
    CAPTURE(t);
    CAPTURE(s.p.graph.degree);
    // 1, 4 and 40 liars (odd devices); then every answering device but one in ten.
    for (uint32_t liars : {1u, 4u, 40u, 100u}) {
      CAPTURE(liars);
      SecAggServer server = s.server;  // the same round up to R3, for each set of liars
      std::set<uint32_t> lying;
      for (uint32_t d = 0; d < 100 && lying.size() < liars; ++d) {
        if (answers(d) && (liars == 100 ? d % 10 != 0 : d % 2 == 1)) lying.insert(d);
      }
      for (uint32_t d = 0; d < 100; ++d) {
        if (!answers(d)) continue;
        std::vector<RevealedShare> revealed = honest[d];
        if (lying.count(d)) {
          for (RevealedShare& r : revealed) {
            for (size_t k = 0; k < kSubsecrets; ++k)
              r.share.y[k] = uint32_t((uint64_t(r.share.y[k]) + 1 + r.owner + k) % kFieldPrime);
          }
        }
        REQUIRE(server.add_unmask(d, {revealed.data(), revealed.size()}) == Status::kOk);
      }
      // Correctable when every seed's shares hold at most floor((m - t) / 2) lies, m its shares.
      bool correctable = true;
      for (uint32_t u = 0; u < 100; ++u) {
        uint32_t m = 0, lies = 0;
        for (uint32_t v : graph.neighbours(u)) {
          m += answers(v) ? 1 : 0;
          lies += lying.count(v) ? 1 : 0;
        }
        m = std::min(m, t + 2 * SecAggServer::kMaxCorrectedShares);
        correctable = correctable && lies <= (m - t) / 2;
      }
      // Fewer than t honest shares for some secret: nothing can recover it.
      bool hopeless = false;
      for (uint32_t u = 0; u < 100; ++u) {
        uint32_t honest_shares = 0;
        for (uint32_t v : graph.neighbours(u)) honest_shares += answers(v) && !lying.count(v) ? 1 : 0;
        hopeless = hopeless || honest_shares < t;
      }
      if (liars <= 4) CHECK(correctable);
      if (liars == 100) CHECK(hopeless);
      std::vector<uint32_t> sum(s.p.words), contributors;
      const Status status = server.finish({sum.data(), sum.size()}, &contributors);
      if (correctable) REQUIRE(status == Status::kOk);
      if (hopeless) REQUIRE(status == Status::kBadShare);
      if (status == Status::kOk) {
        // Corrected (past the one-secret bound too, once the liars caught in earlier secrets are
        // left out): the exact sum, and only liars named.
        CHECK(contributors.size() == 90);
        CHECK(sum == expected_sum(s.p, s.inputs, contributors));
        for (uint32_t d : server.wrong_share_holders()) CHECK(lying.count(d) == 1);
        if (correctable) {
          CHECK(server.wrong_share_holders() == std::vector<uint32_t>(lying.begin(), lying.end()));
        }
      } else {
        CHECK(status == Status::kBadShare);
        CHECK_FALSE(correctable);
      }
    }
  }

  TEST_CASE("a wrong share among exactly t is caught by the seed commitment, not summed") {
    // n = 3: the complete graph, k = 2 = t: every seed has exactly t shares, so no further share
    // can expose a wrong one; the commitment does.
    for (const char* variant : {"wrong share", "wrong commitment"}) {
      CAPTURE(variant);
      Setup s(3);
      REQUIRE(s.p.graph.degree == 2);
      REQUIRE(s.p.graph.threshold == 2);
      s.advertise_all();
      for (uint32_t d = 0; d < 3; ++d) {
        const std::vector<AdvertisedKeys> k = s.server.keys_for(d);
        REQUIRE(s.devices[d].share({k.data(), k.size()}, &s.sealed[d], &s.commitments[d]) == Status::kOk);
        Key32 commitment = s.commitments[d];
        if (d == 2 && std::string(variant) == "wrong commitment") commitment[0] ^= 1;
        REQUIRE(s.server.add_shares(d, commitment, {s.sealed[d].data(), s.sealed[d].size()}) == Status::kOk);
      }
      REQUIRE(s.server.end_shares() == Status::kOk);
      std::vector<uint32_t> masked;
      for (uint32_t d = 0; d < 3; ++d) {
        REQUIRE(s.mask(d, s.server.shares_for(d), &masked) == Status::kOk);
        REQUIRE(s.server.add_masked(d, {masked.data(), masked.size()}) == Status::kOk);
      }
      REQUIRE(s.server.end_masked() == Status::kOk);
      for (uint32_t d = 0; d < 3; ++d) {
        std::vector<RevealedShare> revealed;
        REQUIRE(s.devices[d].unmask(s.server.unmask_request_for(d), &revealed) == Status::kOk);
        if (d == 1 && std::string(variant) == "wrong share") {
          for (RevealedShare& r : revealed) {
            if (r.owner == 0) r.share.y[0] = (r.share.y[0] + 1) % kFieldPrime;  // still in the field
          }
        }
        REQUIRE(s.server.add_unmask(d, {revealed.data(), revealed.size()}) == Status::kOk);
      }
      std::vector<uint32_t> sum(s.p.words), contributors;
      CHECK(s.server.finish({sum.data(), sum.size()}, &contributors) == Status::kBadShare);
    }
  }

  TEST_CASE("round parameters a device must refuse") {
    RoundParameters p = parameters(10, 127, 16, 1);
    SecAggClient device;
    AdvertisedKeys keys;
    RoundParameters bad = p;
    bad.modulus_bits = 33;
    CHECK(device.start(bad, 0, &keys) == Status::kUnsafeConfiguration);
    bad = p;
    bad.modulus_bits = 0;
    CHECK(device.start(bad, 0, &keys) == Status::kUnsafeConfiguration);
    bad = p;
    bad.graph.threshold = 1;
    CHECK(device.start(bad, 0, &keys) == Status::kUnsafeConfiguration);
    bad = p;
    bad.words = 0;
    CHECK(device.start(bad, 0, &keys) == Status::kUnsafeConfiguration);
    CHECK(device.start(p, 10, &keys) == Status::kInvalidArgument);
    REQUIRE(device.start(p, 9, &keys) == Status::kOk);
    CHECK(device.start(p, 9, &keys) == Status::kProtocolError);
  }
}
