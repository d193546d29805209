#include "secure_round.h"

#include <chrono>

#include "edgefl/status.h"
#include "edgefl/wire.h"
#include "secagg/dp.h"
#include "secagg/protocol.h"

namespace edgefl {
namespace cli {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

uint64_t splitmix(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Message bodies (protocol.h) and one frame header each.
constexpr uint64_t kFrame = wire::kFrameHeaderBytes;
constexpr uint64_t kKeysBytes = 4 + 32 + 32;                       // AdvertisedKeys
constexpr uint64_t kSealedBytes = 8 + secagg::kSealedSharesBytes;  // SealedShares
constexpr uint64_t kRevealedBytes = 4 + 1 + secagg::kShareBytes;   // RevealedShare

}  // namespace

SecureRoundResult run_secure_round(uint64_t round_id, uint64_t seed,
                                   const std::vector<std::vector<int32_t>>& codes, uint32_t max_code,
                                   const std::vector<bool>& dropped, double dropout_rate,
                                   uint64_t noise_variance) {
  using namespace secagg;
  SecureRoundResult r;
  const uint32_t n = uint32_t(codes.size());
  const auto fail = [&](const std::string& what, Status s) {
    r.error = "secure aggregation: " + what + ": " + status_name(s);
    return r;
  };
  if (n < 3) return fail("a round needs at least 3 devices", Status::kInvalidArgument);
  RoundParameters p;
  p.round_id = round_id;
  for (auto& b : p.round_nonce) b = uint8_t(splitmix(&seed));
  for (auto& b : p.graph_seed) b = uint8_t(splitmix(&seed));
  Status s = find_graph_parameters(n, 0.05, dropout_rate, ThreatModel::kCuriousServer, &p.graph);
  if (s != Status::kOk) return fail("graph parameters", s);
  s = noise_variance > 0 ? noisy_modulus_bits(n, max_code, noise_variance, &p.modulus_bits)
                         : modulus_bits_for(n, max_code, /*is_signed=*/true, &p.modulus_bits);
  if (s != Status::kOk) return fail("modulus", s);
  p.words = uint32_t(codes[0].size());
  r.modulus_bits = p.modulus_bits;
  r.degree = p.graph.degree;
  r.threshold = p.graph.threshold;
  r.uplink_bytes.assign(n, 0);
  r.downlink_bytes.assign(n, 0);
  r.client_s.assign(n, 0);

  std::vector<SecAggClient> devices(n);
  SecAggServer server;
  Clock::time_point t = Clock::now();
  if ((s = server.start(p)) != Status::kOk) return fail("server start", s);
  r.server_s += seconds_since(t);
  for (uint32_t d = 0; d < n; ++d) {
    AdvertisedKeys keys;
    t = Clock::now();
    if ((s = devices[d].start(p, d, &keys)) != Status::kOk) return fail("device start", s);
    r.client_s[d] += seconds_since(t);
    t = Clock::now();
    if ((s = server.add_keys(keys)) != Status::kOk) return fail("advertise", s);
    r.server_s += seconds_since(t);
    r.uplink_bytes[d] += kFrame + kKeysBytes;
  }
  if ((s = server.end_keys()) != Status::kOk) return fail("end of advertising", s);
  for (uint32_t d = 0; d < n; ++d) {
    const std::vector<AdvertisedKeys> keys = server.keys_for(d);
    r.downlink_bytes[d] += kFrame + kKeysBytes * keys.size();
    std::vector<SealedShares> sealed;
    t = Clock::now();
    if ((s = devices[d].share({keys.data(), keys.size()}, &sealed)) != Status::kOk) return fail("share", s);
    r.client_s[d] += seconds_since(t);
    t = Clock::now();
    if ((s = server.add_shares(d, {sealed.data(), sealed.size()})) != Status::kOk) return fail("shares", s);
    r.server_s += seconds_since(t);
    r.uplink_bytes[d] += kFrame + kSealedBytes * sealed.size();
  }
  if ((s = server.end_shares()) != Status::kOk) return fail("end of sharing", s);
  std::vector<uint32_t> words(p.words), masked(p.words);
  for (uint32_t d = 0; d < n; ++d) {
    const std::vector<SealedShares> received = server.shares_for(d);
    r.downlink_bytes[d] += kFrame + kSealedBytes * received.size();
    if (dropped[d]) continue;
    for (size_t i = 0; i < words.size(); ++i) words[i] = to_word(codes[d][i], p.modulus_bits);
    t = Clock::now();
    s = devices[d].mask({received.data(), received.size()}, {words.data(), words.size()},
                        {masked.data(), masked.size()});
    r.client_s[d] += seconds_since(t);
    if (s != Status::kOk) return fail("mask", s);
    t = Clock::now();
    if ((s = server.add_masked(d, {masked.data(), masked.size()})) != Status::kOk)
      return fail("masked input", s);
    r.server_s += seconds_since(t);
    r.uplink_bytes[d] += kFrame + 4 + (uint64_t(p.words) * p.modulus_bits + 7) / 8;
  }
  if ((s = server.end_masked()) != Status::kOk) return fail("end of masking", s);
  for (uint32_t d = 0; d < n; ++d) {
    if (dropped[d]) continue;
    const UnmaskRequest request = server.unmask_request_for(d);
    r.downlink_bytes[d] += kFrame + 4 * (request.survivors.size() + request.dropped.size());
    std::vector<RevealedShare> revealed;
    t = Clock::now();
    if ((s = devices[d].unmask(request, &revealed)) != Status::kOk) return fail("unmask", s);
    r.client_s[d] += seconds_since(t);
    t = Clock::now();
    if ((s = server.add_unmask(d, {revealed.data(), revealed.size()})) != Status::kOk)
      return fail("unmasking", s);
    r.server_s += seconds_since(t);
    r.uplink_bytes[d] += kFrame + kRevealedBytes * revealed.size();
  }
  std::vector<uint32_t> sum(p.words);
  std::vector<uint32_t> contributors;
  t = Clock::now();
  if ((s = server.finish({sum.data(), sum.size()}, &contributors)) != Status::kOk) return fail("finish", s);
  r.server_s += seconds_since(t);
  r.summed_codes.resize(p.words);
  for (size_t i = 0; i < sum.size(); ++i) r.summed_codes[i] = int32_t(centered(sum[i], p.modulus_bits));
  r.contributors.assign(contributors.begin(), contributors.end());
  return r;
}

}  // namespace cli
}  // namespace edgefl
