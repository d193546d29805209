#include "secure_round.h"

#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>

#include "core/rng.h"
#include "edgefl/status.h"
#include "edgefl/wire.h"
#include "secagg/dp.h"
#include "secagg/protocol.h"
#include "secagg/wire_form.h"

namespace edgefl {
namespace cli {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The bytes of `m`'s frame on the wire (header and FlatBuffer), as edgefl::Client and
// edgefl-server exchange it.
uint64_t frame_bytes(const wire::Message& m) {
  std::vector<uint8_t> frame;
  return wire::encode(m, &frame) == Status::kOk ? frame.size() : 0;
}

// A masked vector of `bytes` bytes as the device uploads it: UploadStart, chunks of the server's
// default 64 KiB, and the Commit with the metrics edgefl::Client sends.
uint64_t upload_bytes(uint64_t round_id, const std::vector<uint8_t>& nonce, uint64_t bytes) {
  constexpr uint64_t kChunk = 64 * 1024;
  wire::UploadStart start;
  start.round_id = round_id;
  start.round_nonce = nonce;
  start.upload_id.fill(0x5A);
  start.total_bytes = bytes;
  uint64_t total = frame_bytes(wire::Message{start});
  for (uint64_t offset = 0; offset < bytes; offset += kChunk) {
    wire::UploadChunk chunk;
    chunk.round_id = round_id;
    chunk.upload_id = start.upload_id;
    chunk.offset = offset;
    chunk.total_bytes = bytes;
    chunk.data.assign(std::min(kChunk, bytes - offset), 0);
    total += frame_bytes(wire::Message{std::move(chunk)});
  }
  wire::Commit commit;
  commit.round_id = round_id;
  commit.round_nonce = nonce;
  commit.upload_id = start.upload_id;
  commit.total_bytes = bytes;
  commit.sample_count = 1;
  commit.metrics = {{"train_loss", 0.5}, {"train_seconds", 0.5}};
  return total + frame_bytes(wire::Message{commit});
}

}  // namespace

const char kSecaggBenchUsage[] =
    "usage: edgefl secagg-bench [--devices 10,100,1000] [--words 55338] [--bits 4] [--dropout 0.1] [--reps "
    "3]\n"
    "\n"
    "Runs whole SecAgg+ rounds in one process (every device and the server, X25519, ChaCha20 masks,\n"
    "Shamir shares) over random --bits-bit codes of --words words, with --dropout of the devices leaving\n"
    "before masking, and prints a markdown table: graph degree k and threshold t, modulus bits, the\n"
    "slowest device's and the server's CPU seconds, bytes per device both ways, upload bits per\n"
    "parameter. A benchmark: minutes at 1000 devices on one core.\n";

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
  for (auto& b : p.round_nonce) b = uint8_t(splitmix64_next(&seed));
  for (auto& b : p.graph_seed) b = uint8_t(splitmix64_next(&seed));
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

  const std::vector<uint8_t> nonce(p.round_nonce.begin(), p.round_nonce.end());
  wire::Ack acked;
  acked.round_id = round_id;
  acked.upload_id.fill(0x5A);
  const uint64_t ack_bytes = frame_bytes(wire::Message{acked});
  const uint64_t done_bytes =
      frame_bytes(wire::Message{wire::SecAggStatus{round_id, wire::SecAggPhase::kDone, 0}});
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
    wire::SecAggAdvertise advertise;
    advertise.round_id = round_id;
    advertise.round_nonce = nonce;
    advertise.keys = to_wire(keys);
    r.uplink_bytes[d] += frame_bytes(wire::Message{advertise});
  }
  if ((s = server.end_keys()) != Status::kOk) return fail("end of advertising", s);
  for (uint32_t d = 0; d < n; ++d) {
    const std::vector<AdvertisedKeys> keys = server.keys_for(d);
    r.downlink_bytes[d] += frame_bytes(wire::Message{wire::SecAggKeys{round_id, to_wire_all(keys)}});
    std::vector<SealedShares> sealed;
    Key32 commitment;
    t = Clock::now();
    if ((s = devices[d].share({keys.data(), keys.size()}, &sealed, &commitment)) != Status::kOk) {
      return fail("share", s);
    }
    r.client_s[d] += seconds_since(t);
    t = Clock::now();
    if ((s = server.add_shares(d, commitment, {sealed.data(), sealed.size()})) != Status::kOk)
      return fail("shares", s);
    r.server_s += seconds_since(t);
    r.uplink_bytes[d] +=
        frame_bytes(wire::Message{wire::SecAggShares{round_id, nonce, commitment, to_wire_all(sealed)}});
  }
  if ((s = server.end_shares()) != Status::kOk) return fail("end of sharing", s);
  std::vector<uint32_t> words(p.words), masked(p.words);
  for (uint32_t d = 0; d < n; ++d) {
    const std::vector<SealedShares> received = server.shares_for(d);
    r.downlink_bytes[d] += frame_bytes(wire::Message{wire::SecAggInbox{round_id, to_wire_all(received)}});
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
    r.uplink_bytes[d] += upload_bytes(round_id, nonce, packed_words_bytes(p.words, p.modulus_bits));
    r.downlink_bytes[d] += ack_bytes;
  }
  if ((s = server.end_masked()) != Status::kOk) return fail("end of masking", s);
  for (uint32_t d = 0; d < n; ++d) {
    if (dropped[d]) continue;
    const UnmaskRequest request = server.unmask_request_for(d);
    r.downlink_bytes[d] +=
        frame_bytes(wire::Message{wire::SecAggUnmaskRequest{round_id, request.survivors, request.dropped}});
    std::vector<RevealedShare> revealed;
    t = Clock::now();
    if ((s = devices[d].unmask(request, &revealed)) != Status::kOk) return fail("unmask", s);
    r.client_s[d] += seconds_since(t);
    t = Clock::now();
    if ((s = server.add_unmask(d, {revealed.data(), revealed.size()})) != Status::kOk)
      return fail("unmasking", s);
    r.server_s += seconds_since(t);
    r.uplink_bytes[d] +=
        frame_bytes(wire::Message{wire::SecAggUnmaskResponse{round_id, nonce, to_wire_all(revealed)}});
    r.downlink_bytes[d] += done_bytes;
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

namespace edgefl {
namespace cli {

int run_secagg_bench_command(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  std::vector<uint32_t> cohorts = {10, 100, 1000};
  uint32_t words = 55338, bits = 4, reps = 3;
  double dropout = 0.1;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      out << kSecaggBenchUsage;
      return 0;
    }
    if (i + 1 >= argc) {
      err << "edgefl secagg-bench: missing value after " << arg << "\n" << kSecaggBenchUsage;
      return 2;
    }
    const std::string v = argv[++i];
    char* end = nullptr;
    const double number = strtod(v.c_str(), &end);
    const bool numeric = end != v.c_str() && *end == '\0';
    if (arg == "--devices") {
      cohorts.clear();
      size_t at = 0;
      while (at <= v.size()) {
        const size_t comma = std::min(v.find(',', at), v.size());
        const unsigned long d = strtoul(v.substr(at, comma - at).c_str(), nullptr, 10);
        if (d < 3 || d > 100000) {
          err << "edgefl secagg-bench: --devices takes counts in 3..100000\n";
          return 2;
        }
        cohorts.push_back(uint32_t(d));
        at = comma + 1;
      }
    } else if (arg == "--words" && numeric && number >= 1 && number <= secagg::kMaxWords) {
      words = uint32_t(number);
    } else if (arg == "--bits" && numeric && number >= 2 && number <= 16) {
      bits = uint32_t(number);
    } else if (arg == "--dropout" && numeric && number >= 0 && number < 0.5) {
      dropout = number;
    } else if (arg == "--reps" && numeric && number >= 1 && number <= 100) {
      reps = uint32_t(number);
    } else {
      err << "edgefl secagg-bench: bad option " << arg << " " << v << "\n" << kSecaggBenchUsage;
      return 2;
    }
  }
  const uint32_t max_code = (1u << (bits - 1)) - 1;
  out << "SecAgg+ rounds in one process: " << words << " words of " << bits << "-bit codes per device, "
      << dropout * 100 << "% of the devices dropping before masking, curious server with 5% adversarial "
      << "devices; medians of " << reps << " runs\n\n"
      << "| devices | k | t | m (bits) | device CPU (s) | server CPU (s) | up per device (B) | down per "
         "device (B) "
         "| up bits/parameter | SecAgg bytes besides the vector (up+down, per device) |\n"
      << "|---|---|---|---|---|---|---|---|---|---|\n";
  for (uint32_t n : cohorts) {
    std::vector<double> device_s, server_s;
    SecureRoundResult last;
    for (uint32_t rep = 0; rep < reps; ++rep) {
      std::vector<std::vector<int32_t>> codes(n, std::vector<int32_t>(words));
      uint64_t state = 1000 * n + rep;
      for (auto& c : codes) {
        for (int32_t& v : c) v = int32_t(splitmix64_next(&state) % (2 * max_code + 1)) - int32_t(max_code);
      }
      std::vector<bool> dropped(n, false);
      for (uint32_t d = 0; d < uint32_t(dropout * n + 0.5);) {
        const uint32_t slot = uint32_t(splitmix64_next(&state) % n);
        if (!dropped[slot]) dropped[slot] = true, ++d;
      }
      last = run_secure_round(rep + 1, state, codes, max_code, dropped, std::max(0.1, dropout));
      if (!last.error.empty()) {
        err << "edgefl secagg-bench: " << last.error << "\n";
        return 1;
      }
      double device = 0;
      for (double s : last.client_s) device = std::max(device, s);
      device_s.push_back(device);
      server_s.push_back(last.server_s);
    }
    std::sort(device_s.begin(), device_s.end());
    std::sort(server_s.begin(), server_s.end());
    const size_t who = last.contributors.empty() ? 0 : last.contributors[0];  // a device that stayed
    const double vector_bytes = double(secagg::packed_words_bytes(words, last.modulus_bits));
    const double up = double(last.uplink_bytes[who]), down = double(last.downlink_bytes[who]);
    char line[512];
    snprintf(line, sizeof line, "| %u | %u | %u | %u | %.3f | %.3f | %.0f | %.0f | %.3f | %.0f |\n", n,
             last.degree, last.threshold, last.modulus_bits, device_s[device_s.size() / 2],
             server_s[server_s.size() / 2], up, down, 8 * up / words, up + down - vector_bytes);
    out << line << std::flush;
  }
  out << "\ndevice CPU: the slowest device's SecAgg steps (keys, sharing, masking, unmasking); server CPU:\n"
         "every server step including unmasking; bits/parameter: all of a device's upload, the masked\n"
         "vector at m bits per word included.\n";
  return 0;
}

}  // namespace cli
}  // namespace edgefl
