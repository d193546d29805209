// sdk/cli/bench_peers.cpp: the BytePS compressors that edgefl's codecs are measured against, re-
// implemented from their published algorithms (bytedance/byteps, byteps/common/compressor/impl:
// onebit.cc, randomk.cc, topk.cc, and the XorShift128PlusBitShifterRNG of randomk.h), so that both
// sides run in the same process, on the same inputs, with the same compiler flags:
//
//  - onebit: scale = mean |x| (summed in double); the signs packed 32 to a word, most significant
//    bit first, bit set = negative; then the f32 scale. Decompress: each bit to (1 - 2 bit) scale.
//  - randomk:F: k = F n draws, with replacement, index = xorshift128+ % n (seeded (s, s)); k
//    (u32 index, f32 value) pairs, values unscaled. Decompress: zero the output, scatter.
//  - topk:F: one pass keeping the k largest |x| in a min-heap of (index, value) pairs
//    (std::push_heap / pop_heap, as BytePS); the same pairs and decompression as randomk.
//
// BytePS's server sums decompressed tensors: decode_add is the decompression into a buffer then a
// dense add into the accumulator. Bytes are counted as BytePS sends them (no header, no checksum).
#include <math.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "bench.h"
#include "timing.h"

namespace edgefl {
namespace cli {

namespace {

// xorshift128+ as BytePS seeds and draws it.
class XorShift128Plus {
 public:
  explicit XorShift128Plus(uint64_t seed) : a_(seed), b_(seed) {}
  uint64_t below(uint64_t n) { return next() % n; }

 private:
  uint64_t next() {
    uint64_t t = a_;
    const uint64_t s = b_;
    a_ = s;
    t ^= t << 23;
    t ^= t >> 17;
    t ^= s ^ (s >> 26);
    b_ = t;
    return t + s;
  }
  uint64_t a_, b_;
};

struct Pair {
  uint32_t index;
  float value;
};

// The encoded form of one peer compressor.
struct PeerEncoding {
  std::vector<uint32_t> words;  // onebit: the sign words
  float scale = 0.0f;           // onebit
  std::vector<Pair> pairs;      // randomk, topk
  size_t bytes() const { return words.size() * 4 + (words.empty() ? 0 : 4) + pairs.size() * sizeof(Pair); }
};

void onebit_compress(const float* x, size_t n, PeerEncoding* e) {
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += fabs(double(x[i]));
  e->scale = n > 0 ? float(sum / double(n)) : 0.0f;
  const size_t words = (n + 31) / 32;
  e->words.resize(words);
  for (size_t w = 0; w < words; ++w) {
    uint32_t bits = 0;
    for (size_t j = 0; j < 32; ++j) {
      const size_t i = 32 * w + j;
      bits = (bits << 1) | (i < n && x[i] < 0.0f ? 1u : 0u);  // padding: positive
    }
    e->words[w] = bits;
  }
}

void onebit_decompress(const PeerEncoding& e, float* out, size_t n) {
  for (size_t w = 0; w < e.words.size(); ++w) {
    uint32_t bits = e.words[w];
    for (size_t j = 32; j-- > 0;) {
      const size_t i = 32 * w + j;
      if (i < n) out[i] = float(1 - int((bits & 1u) << 1)) * e.scale;
      bits >>= 1;
    }
  }
}

void randomk_compress(const float* x, size_t n, size_t k, uint64_t seed, PeerEncoding* e) {
  XorShift128Plus rng(seed);
  e->pairs.resize(k);
  for (size_t j = 0; j < k; ++j) {
    const uint32_t i = uint32_t(rng.below(n));
    e->pairs[j] = {i, x[i]};
  }
}

void topk_compress(const float* x, size_t n, size_t k, PeerEncoding* e) {
  // A min-heap on |value| (BytePS orders its heap by value and compares magnitudes against the
  // top; keeping |value| makes it the top-k by magnitude that it intends).
  auto greater = [](const Pair& a, const Pair& b) { return fabsf(a.value) > fabsf(b.value); };
  e->pairs.clear();
  e->pairs.reserve(k);
  for (size_t i = 0; i < n; ++i) {
    if (e->pairs.size() < k) {
      e->pairs.push_back({uint32_t(i), x[i]});
      std::push_heap(e->pairs.begin(), e->pairs.end(), greater);
    } else if (fabsf(x[i]) > fabsf(e->pairs.front().value)) {
      std::pop_heap(e->pairs.begin(), e->pairs.end(), greater);
      e->pairs.back() = {uint32_t(i), x[i]};
      std::push_heap(e->pairs.begin(), e->pairs.end(), greater);
    }
  }
}

void pairs_decompress(const PeerEncoding& e, float* out, size_t n) {
  memset(out, 0, n * sizeof(float));
  for (const Pair& p : e.pairs) out[p.index] = p.value;
}

}  // namespace

std::vector<BenchResult> bench_byteps_peers(const std::string& dataset, const float* x, size_t n, int reps) {
  struct Peer {
    std::string name;
    double density;  // 0: onebit
  };
  const Peer peers[] = {{"byteps:onebit", 0.0},
                        {"byteps:randomk:0.01", 0.01},
                        {"byteps:randomk:0.1", 0.1},
                        {"byteps:topk:0.01", 0.01}};
  std::vector<BenchResult> rows;
  const int runs = std::max(reps, 5);
  double energy = 0.0;
  for (size_t i = 0; i < n; ++i) energy += double(x[i]) * x[i];
  for (const Peer& peer : peers) {
    BenchResult r;
    r.dataset = dataset;
    r.codec = r.requested = peer.name;
    r.n = n;
    r.reps = runs;
    r.sparse = peer.density > 0;
    r.bits_per_nnz = r.count_error = r.bias = r.shrink = r.gaussian_rd_bits = r.rd_gap_bits =
        r.workspace_bytes = r.workspace_ratio = std::numeric_limits<double>::quiet_NaN();
    if (n == 0) {
      r.error = "empty input";
      rows.push_back(r);
      continue;
    }
    const size_t k = peer.density > 0 ? std::max<size_t>(1, size_t(peer.density * double(n))) : 0;
    const bool topk = peer.name.find("topk") != std::string::npos;
    PeerEncoding e;
    std::vector<float> decoded(n), accumulator(n, 0.0f), copy(n);
    std::vector<double> memcpy_times, encode_times, decode_times, add_times;
    for (int run = 0; run <= runs; ++run) {  // run 0 warms up
      const double t_memcpy = paired_memcpy_seconds(x, n, copy.data());
      Clock::time_point start = Clock::now();
      if (k == 0) {
        onebit_compress(x, n, &e);
      } else if (topk) {
        topk_compress(x, n, k, &e);
      } else {
        randomk_compress(x, n, k, 2654435761u + uint64_t(run), &e);
      }
      const double t_encode = seconds_since(start);
      auto decompress = [&] {
        if (k == 0) {
          onebit_decompress(e, decoded.data(), n);
        } else {
          pairs_decompress(e, decoded.data(), n);
        }
      };
      start = Clock::now();
      decompress();
      const double t_decode = seconds_since(start);
      start = Clock::now();
      decompress();
      for (size_t i = 0; i < n; ++i) accumulator[i] += decoded[i];
      const double t_add = seconds_since(start);
      if (run == 0) continue;
      memcpy_times.push_back(t_memcpy);
      encode_times.push_back(t_encode);
      decode_times.push_back(t_decode);
      add_times.push_back(t_add);
    }
    double err = 0.0;
    for (size_t i = 0; i < n; ++i) err += (double(decoded[i]) - x[i]) * (double(decoded[i]) - x[i]);
    r.nnz = k == 0 ? double(n) : double(k);
    r.encoded_bytes = double(e.bytes());
    r.bits_per_coord = 8.0 * r.encoded_bytes / double(n);
    if (k > 0) r.bits_per_nnz = 8.0 * r.encoded_bytes / double(k);
    r.vnmse = energy > 0 ? err / energy : std::numeric_limits<double>::quiet_NaN();
    if (r.vnmse > 0) {
      r.gaussian_rd_bits = std::max(0.0, 0.5 * log2(1.0 / r.vnmse));
      r.rd_gap_bits = r.bits_per_coord - r.gaussian_rd_bits;
    }
    r.encode_gbps = gbps(n, median(encode_times));
    r.decode_gbps = gbps(n, median(decode_times));
    r.decode_add_gbps = gbps(n, median(add_times));
    if (k > 0) r.decode_add_mnnz = double(k) / median(add_times) / 1e6;
    r.memcpy_paired_gbps = gbps(n, median(std::move(memcpy_times)));
    // Keep the accumulator observable.
    if (!std::isfinite(accumulator[n / 2])) r.error = "non-finite sum";
    r.deterministic = true;
    r.decode_add_consistent = true;
    rows.push_back(r);
  }
  return rows;
}

}  // namespace cli
}  // namespace edgefl
