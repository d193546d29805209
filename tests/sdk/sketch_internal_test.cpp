// tests/sdk/sketch_internal_test.cpp: white-box checks of the sketch codecs' parts over the internal
// headers (sdk/src): the length-limited Huffman coder (entropy/huffman.h), the rANS coder
// (entropy/rans.h: bulk decoder against the symbol-by-symbol one), the classic mergeable
// quantiles sketch (sketch/quantile_sketch.h) and the SKCompress internals (sketch/skc.h): exact-
// bucket rate against the derived 0.43 (reference/compression.md section 2), the MinMaxSketch
// "never further from zero" guarantee per key, and the encoder's table-driven bucket lookup.
#include <doctest/doctest.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include <algorithm>
#include <memory>
#include <queue>
#include <string>
#include <vector>

#include "core/bitio.h"
#include "edgefl/codec.h"
#include "entropy/huffman.h"
#include "entropy/rans.h"
#include "sketch/quantile_sketch.h"
#include "sketch/skc.h"
#include "support/bench_data.h"

#if defined(__SANITIZE_ADDRESS__)
#define EDGEFL_SKETCH_TEST_SLOW 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EDGEFL_SKETCH_TEST_SLOW 1
#endif
#endif
#ifndef EDGEFL_SKETCH_TEST_SLOW
#define EDGEFL_SKETCH_TEST_SLOW 0
#endif

namespace doctest {
template <>
struct StringMaker<edgefl::Status> {
  static String convert(edgefl::Status s) {
    return String(edgefl::status_name(s)) + "(" + toString(static_cast<int>(s)) + ")";
  }
};
}  // namespace doctest

namespace {

using edgefl::BitReader;
using edgefl::BitWriter;
using edgefl::Status;
namespace entropy = edgefl::entropy;
namespace skc = edgefl::skc;
namespace qs = edgefl::sketch;

constexpr bool kSlow = EDGEFL_SKETCH_TEST_SLOW != 0;

// ---- Huffman helpers -------------------------------------------------------------------------

struct HuffmanCase {
  std::string name;
  std::vector<uint32_t> freq;
};

// Optimal (unlimited) prefix-code cost in bits of `freq`: the sum of the merged weights of any
// Huffman tree.
uint64_t optimal_cost_bits(const std::vector<uint32_t>& freq) {
  std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<uint64_t>> q;
  for (uint32_t f : freq)
    if (f) q.push(f);
  if (q.size() == 1) return q.top();  // a lone symbol still costs one bit
  uint64_t cost = 0;
  while (q.size() > 1) {
    const uint64_t a = q.top();
    q.pop();
    const uint64_t b = q.top();
    q.pop();
    cost += a + b;
    q.push(a + b);
  }
  return cost;
}

// Shannon entropy of the counts, in bits per symbol.
double entropy_bits(const std::vector<uint32_t>& freq) {
  double total = 0;
  for (uint32_t f : freq) total += f;
  double h = 0;
  for (uint32_t f : freq)
    if (f) h -= (f / total) * log2(f / total);
  return h;
}

// True when no Huffman tree of `freq` can be deeper than kHuffmanMaxBits: a tree of depth d needs
// a total weight of at least w_min x (F(d+3) - 1) (the Fibonacci chain is the extreme case), and
// F(15) - 1 = 609 for d = 12; a ratio below 300 leaves a margin.
bool provably_unlimited(const std::vector<uint32_t>& freq) {
  uint64_t total = 0;
  uint32_t lo = 0xFFFFFFFFu;
  for (uint32_t f : freq) {
    total += f;
    if (f) lo = std::min(lo, f);
  }
  return total > 0 && total < uint64_t(lo) * 300;
}

// The symbols counted in freq, each freq[s] times, in a seeded random order; for large totals, a
// sample of 100000 symbols drawn uniformly over the present ones (every code, long ones included).
std::vector<unsigned> stream_of(const std::vector<uint32_t>& freq, uint64_t seed) {
  std::vector<unsigned> s;
  uint64_t total = 0;
  for (uint32_t f : freq) total += f;
  edgefl_test::SplitMix64 rng(seed);
  if (total > 300000) {
    std::vector<unsigned> present;
    for (unsigned sym = 0; sym < freq.size(); ++sym)
      if (freq[sym]) present.push_back(sym);
    for (int i = 0; i < 100000; ++i) s.push_back(present[static_cast<size_t>(rng.below(present.size()))]);
    return s;
  }
  for (unsigned sym = 0; sym < freq.size(); ++sym) s.insert(s.end(), freq[sym], sym);
  for (size_t i = s.size(); i > 1; --i) std::swap(s[i - 1], s[static_cast<size_t>(rng.below(i))]);
  return s;
}

std::vector<HuffmanCase> huffman_cases() {
  std::vector<HuffmanCase> cases;
  edgefl_test::SplitMix64 rng(2024);
  cases.push_back({"1 symbol", {57}});
  cases.push_back({"2 symbols", {900, 100}});
  cases.push_back({"2 symbols, one absent", {0, 31}});
  {
    std::vector<uint32_t> f(16);
    for (unsigned s = 0; s < 16; ++s) f[s] = static_cast<uint32_t>(4000 * pow(0.8, s)) + 1;
    cases.push_back({"16 geometric", f});
  }
  {
    std::vector<uint32_t> f(16);
    for (unsigned s = 0; s < 16; ++s) f[s] = 1 + static_cast<uint32_t>(rng.below(3000) * rng.uniform());
    cases.push_back({"16 random skewed", f});
  }
  {
    std::vector<uint32_t> f(32);
    for (unsigned s = 0; s < 32; ++s) f[s] = static_cast<uint32_t>(2000 * pow(0.85, s)) + 1;
    cases.push_back({"32 geometric", f});
  }
  {
    std::vector<uint32_t> f(32);
    for (unsigned s = 0; s < 32; ++s) f[s] = s % 3 == 1 ? 0 : 20 + static_cast<uint32_t>(rng.below(130));
    cases.push_back({"32 bounded, a third absent", f});
  }
  {
    std::vector<uint32_t> f(32);
    // A MinMaxSketch table: rank 0 (nearest zero) dominates, the rest falls off.
    for (unsigned s = 0; s < 32; ++s) f[s] = static_cast<uint32_t>(5000.0 / (1.0 + s * s)) + (s < 31 ? 1 : 0);
    cases.push_back({"32 sketch-like", f});
  }
  {
    std::vector<uint32_t> f(256);
    for (unsigned s = 0; s < 256; ++s) f[s] = static_cast<uint32_t>(10000.0 / (s + 1));
    cases.push_back({"256 zipf", f});
  }
  {
    std::vector<uint32_t> f(256);
    for (unsigned s = 0; s < 256; ++s) f[s] = 100 + static_cast<uint32_t>(rng.below(11));
    cases.push_back({"256 near uniform", f});
  }
  {
    std::vector<uint32_t> f(256);
    for (unsigned s = 0; s < 256; ++s)
      f[s] = rng.below(4) == 0 ? 0 : 1 + static_cast<uint32_t>(rng.below(50000) * pow(rng.uniform(), 4));
    cases.push_back({"256 random skewed with gaps", f});
  }
  {
    // Fibonacci counts: the unlimited Huffman code is a chain 29 deep.
    std::vector<uint32_t> f(30);
    f[0] = f[1] = 1;
    for (unsigned s = 2; s < 30; ++s) f[s] = f[s - 1] + f[s - 2];
    cases.push_back({"30 fibonacci", f});
  }
  {
    std::vector<uint32_t> f(256, 0);
    uint32_t a = 1, b = 1;
    for (unsigned s = 0; s < 20; ++s) {
      f[s * 12 + 3] = a;  // scattered over the alphabet, gaps between: a chain 19 deep unlimited
      const uint32_t c = a + b;
      a = b;
      b = c;
    }
    cases.push_back({"256 fibonacci-like with gaps", f});
  }
  return cases;
}

// ---- quantile sketch helpers -----------------------------------------------------------------

constexpr uint32_t kCanaryBits = 0x7FA5A5A5u;  // a NaN pattern no update produces
constexpr uint64_t kCanary64 = 0xA5A5DEADBEEFA5A5ull;

float canary_float() {
  float f;
  memcpy(&f, &kCanaryBits, 4);
  return f;
}

bool canary_intact(const std::vector<float>& mem, size_t from) {
  for (size_t i = from; i < mem.size(); ++i) {
    uint32_t b;
    memcpy(&b, &mem[i], 4);
    if (b != kCanaryBits) return false;
  }
  return true;
}

struct QuantileRun {
  double max_rank_error = 0;
  bool monotone = true;
  bool min_exact = false;
  bool max_exact = false;
  bool memory_intact = false;
  bool scratch_intact = false;
};

// Feeds `data` to a sketch with max_n = data.size() in memory followed by a canary, queries the
// 255 quantiles at ranks i/256 and measures the normalized rank error of each against the data.
QuantileRun run_quantiles(const std::vector<float>& data, unsigned k, uint64_t seed, unsigned parts = 256) {
  const size_t n = data.size();
  const size_t floats = qs::quantile_sketch_floats(k, n);
  std::vector<float> mem(floats + 1024, canary_float());
  const size_t items = qs::quantile_query_items(k, n);
  std::vector<uint64_t> scratch(items + 256, kCanary64);
  qs::QuantileSketch sketch(k, n, mem.data(), seed);
  for (float v : data) sketch.update(v);
  QuantileRun r;
  REQUIRE(sketch.count() == n);
  std::vector<float> q(parts - 1);
  sketch.quantiles(parts, q.data(), scratch.data());
  std::vector<float> sorted(data);
  std::sort(sorted.begin(), sorted.end());
  r.min_exact = sketch.min() == sorted.front();
  r.max_exact = sketch.max() == sorted.back();
  for (unsigned p = 1; p < parts; ++p) {
    const float v = q[p - 1];
    if (p > 1 && v < q[p - 2]) r.monotone = false;
    // The ranks v occupies in the data: [#(< v), #(<= v)] / n.
    const double lo = double(std::lower_bound(sorted.begin(), sorted.end(), v) - sorted.begin()) / double(n);
    const double hi = double(std::upper_bound(sorted.begin(), sorted.end(), v) - sorted.begin()) / double(n);
    const double target = double(p) / double(parts);
    const double err = target < lo ? lo - target : target > hi ? target - hi : 0.0;
    r.max_rank_error = std::max(r.max_rank_error, err);
  }
  r.memory_intact = canary_intact(mem, floats);
  r.scratch_intact = true;
  for (size_t i = items; i < scratch.size(); ++i)
    if (scratch[i] != kCanary64) r.scratch_intact = false;
  return r;
}

// ---- skc helpers -------------------------------------------------------------------------------

// n zeros, `nnz` distinct uniformly random keys with N(0, 1) values (never 0).
std::vector<float> sparse_gaussian(size_t n, size_t nnz, uint64_t seed) {
  edgefl_test::SplitMix64 rng(seed);
  std::vector<float> x(n, 0.0f);
  size_t placed = 0;
  while (placed < nnz) {
    const size_t i = static_cast<size_t>(rng.below(n));
    if (x[i] != 0.0f) continue;
    float v = 0.0f;
    while (v == 0.0f) v = static_cast<float>(rng.gaussian());
    x[i] = v;
    ++placed;
  }
  return x;
}

std::vector<uint8_t> encode_public(const char* text, const std::vector<float>& x, uint64_t seed) {
  edgefl::CodecSpec spec;
  REQUIRE(edgefl::parse_codec_spec(text, &spec) == Status::kOk);
  std::vector<uint8_t> ws(edgefl::workspace_size(spec, x.size()));
  std::vector<uint8_t> out(edgefl::encoded_bound(spec, x.size()));
  size_t written = 0;
  REQUIRE(edgefl::encode(spec, {x.data(), x.size()}, seed, {ws.data(), ws.size()}, {out.data(), out.size()},
                         &written) == Status::kOk);
  out.resize(written);
  return out;
}

// An skc encoding opened with the internal parser, its sketch tables decoded (as
// sdk/cli/bench.cpp's skc_exact_bucket_rate does).
struct Opened {
  edgefl::EncodedInfo info;
  skc::Params p;
  skc::Layout l;
  std::vector<uint8_t> workspace;
  const uint8_t* cells = nullptr;
  std::vector<float> splits;
};

void open_skc(const std::vector<uint8_t>& bytes, Opened* o) {
  REQUIRE(edgefl::inspect({bytes.data(), bytes.size()}, &o->info) == Status::kOk);
  REQUIRE(o->info.values == edgefl::ValueCoderKind::kSkCompress);
  o->p.bins = static_cast<uint16_t>(o->info.block);
  o->p.groups = static_cast<uint8_t>(o->info.levels >> 4);
  o->p.rows = static_cast<uint8_t>(o->info.levels & 15u);
  o->p.cols = o->info.param;
  const uint8_t* region = bytes.data() + o->info.header_bytes;
  REQUIRE(skc::parse(o->p, o->info.n, o->info.nnz, region, o->info.value_bytes, &o->l) == Status::kOk);
  o->workspace.assign(edgefl::decode_workspace_size(o->info), 0);
  uint32_t* table = reinterpret_cast<uint32_t*>(o->workspace.data());
  uint8_t* cells = o->workspace.data() + entropy::huffman_decoder_table_bytes();
  REQUIRE(skc::decode_sketches(o->p, o->l, cells, table) == Status::kOk);
  o->cells = cells;
  o->splits.resize(o->l.split_count);
  if (!o->splits.empty()) memcpy(o->splits.data(), o->l.splits, o->splits.size() * 4);
}

// The bucket of v by binary search over the splits: the number of splits <= v (-0 counts as +0).
unsigned search_bucket(const std::vector<float>& splits, float v) {
  if (v == 0.0f) v = 0.0f;
  return static_cast<unsigned>(std::upper_bound(splits.begin(), splits.end(), v) - splits.begin());
}

unsigned group_of_bucket(const skc::Layout& l, unsigned b) {
  for (unsigned g = 0; g < l.group_count; ++g)
    if (b >= l.groups[g].first && b < unsigned(l.groups[g].first) + l.groups[g].buckets) return g;
  return skc::kMaxGroups;
}

struct SkcStats {
  size_t keys = 0;
  size_t exact = 0;
  size_t further_from_zero = 0;
  size_t sign_flips = 0;
  size_t other_group = 0;
  size_t wrong_keys = 0;
  double rate() const { return keys ? double(exact) / double(keys) : 0.0; }
};

SkcStats skc_stats(const std::vector<uint8_t>& bytes, const std::vector<float>& x) {
  Opened o;
  open_skc(bytes, &o);
  SkcStats st;
  std::vector<uint32_t> support;
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i] != 0.0f) support.push_back(static_cast<uint32_t>(i));
  size_t next = 0;
  const Status s = skc::visit(o.p, o.l, o.info.n, o.info.seed, o.cells, true, [&](size_t key, float d) {
    if (next >= support.size() || support[next] != key) ++st.wrong_keys;
    ++next;
    ++st.keys;
    const float v = x[key];
    const unsigned b = search_bucket(o.splits, v);
    const float rep = skc::bucket_representative(o.l, b);
    st.exact += d == rep ? 1 : 0;
    if (fabsf(d) > fabsf(rep)) ++st.further_from_zero;
    if ((d > 0) != (v > 0) || (d < 0) != (v < 0)) ++st.sign_flips;
    // A collision moves a value only within its own group.
    const unsigned g = group_of_bucket(o.l, b);
    if (g == skc::kMaxGroups) {
      ++st.other_group;
    } else {
      const float r0 = skc::bucket_representative(o.l, o.l.groups[g].first);
      const float r1 = skc::bucket_representative(o.l, o.l.groups[g].first + o.l.groups[g].buckets - 1u);
      if (!(d >= std::min(r0, r1) && d <= std::max(r0, r1))) ++st.other_group;
    }
  });
  REQUIRE(s == Status::kOk);
  if (next != support.size()) ++st.wrong_keys;
  return st;
}

// Runs the skc::Encoder passes over `values` (keys 0..n-1) and parses the region it writes.
struct Built {
  std::vector<uint64_t> workspace;
  std::unique_ptr<skc::Encoder> enc;
  std::vector<uint8_t> region;
  skc::Layout l;
  std::vector<float> splits;
};

void build_encoder(const std::vector<float>& values, const skc::Params& p, uint64_t seed, Built* b) {
  const uint64_t nnz = values.size();
  b->workspace.assign((skc::encode_workspace_bytes(p, nnz) + 7) / 8, 0);
  b->enc.reset(new skc::Encoder(p, nnz, seed, reinterpret_cast<uint8_t*>(b->workspace.data())));
  for (float v : values) b->enc->observe(v);
  b->enc->plan();
  for (size_t i = 0; i < values.size(); ++i) b->enc->count(static_cast<uint32_t>(i), values[i]);
  b->region.assign(static_cast<size_t>(skc::region_bound(p, nnz)), 0);
  REQUIRE(b->enc->layout(b->region.data(), b->region.size()) == Status::kOk);
  for (size_t i = 0; i < values.size(); ++i) b->enc->insert(static_cast<uint32_t>(i), values[i]);
  size_t bytes = 0;
  REQUIRE(b->enc->finish(&bytes) == Status::kOk);
  REQUIRE(bytes <= b->region.size());
  REQUIRE(skc::parse(p, static_cast<uint32_t>(nnz), static_cast<uint32_t>(nnz), b->region.data(), bytes,
                     &b->l) == Status::kOk);
  b->splits.resize(b->l.split_count);
  if (!b->splits.empty()) memcpy(b->splits.data(), b->l.splits, b->splits.size() * 4);
}

float random_finite_float(edgefl_test::SplitMix64& rng) {
  for (;;) {
    const uint32_t bits = static_cast<uint32_t>(rng.next());
    float f;
    memcpy(&f, &bits, 4);
    if (std::isfinite(f)) return f;
  }
}

}  // namespace

TEST_SUITE("sketch.internal") {
  // ---- Huffman -----------------------------------------------------------------------------

  TEST_CASE("huffman: codes respect the length limit and Kraft, and round-trip through the bit streams") {
    for (const HuffmanCase& c : huffman_cases()) {
      INFO("case: ", c.name);
      const unsigned symbols = static_cast<unsigned>(c.freq.size());
      uint8_t lengths[entropy::kHuffmanMaxSymbols + 1];  // + 1: a guard byte past a full alphabet
      memset(lengths, 0xEE, sizeof lengths);
      entropy::huffman_lengths(c.freq.data(), symbols, lengths);
      uint64_t kraft = 0;  // in units of 2^-kHuffmanMaxBits
      for (unsigned s = 0; s < symbols; ++s) {
        CHECK(lengths[s] <= entropy::kHuffmanMaxBits);
        CHECK((lengths[s] == 0) == (c.freq[s] == 0));  // every present symbol has a code
        if (lengths[s]) kraft += uint64_t(1) << (entropy::kHuffmanMaxBits - lengths[s]);
      }
      CHECK(kraft <= (uint64_t(1) << entropy::kHuffmanMaxBits));
      CHECK(lengths[symbols] == 0xEE);  // nothing written past the alphabet

      const std::vector<unsigned> stream = stream_of(c.freq, 7);
      const uint64_t cost = entropy::huffman_cost_bits(c.freq.data(), lengths, symbols);
      uint64_t stream_bits = 0;
      for (unsigned sym : stream) stream_bits += lengths[sym];
      const size_t table_bits = size_t(symbols) * 4;
      CHECK(entropy::huffman_table_bytes(symbols) * 8 >= table_bits);
      std::vector<uint8_t> buf((table_bits + stream_bits + 7) / 8);  // exactly the bytes needed
      BitWriter w(buf.data(), buf.size());
      const entropy::HuffmanEncoder enc(lengths, symbols);
      enc.write_table(&w);
      for (unsigned s : stream) enc.put(&w, s);
      CHECK(w.finish() == buf.size());
      CHECK(!w.overflowed());

      std::vector<uint32_t> table(entropy::huffman_table_entries(), 0xFFFFFFFFu);
      entropy::HuffmanDecoder dec(table.data());
      BitReader r(buf.data(), buf.size());
      REQUIRE(dec.read_table(&r, symbols) == Status::kOk);
      size_t mismatches = 0;
      for (unsigned want : stream) {
        unsigned got = 9999;
        if (!dec.get(&r, &got) || got != want) ++mismatches;
      }
      CHECK(mismatches == 0);
      CHECK(!r.failed());
      CHECK(r.bit_position() == table_bits + stream_bits);

      // The bulk decoder (multi-symbol table entries, five per 64-bit load) gives the same
      // symbols and ends on the same bit, without writing past `count`.
      std::vector<uint8_t> bulk(stream.size() + 1, 0xEE);
      size_t bit = table_bits;
      REQUIRE(dec.decode(buf.data(), buf.size(), &bit, bulk.data(), stream.size()) == Status::kOk);
      CHECK(bit == table_bits + stream_bits);
      mismatches = 0;
      for (size_t i = 0; i < stream.size(); ++i) mismatches += bulk[i] != stream[i] ? 1 : 0;
      CHECK(mismatches == 0);
      CHECK(bulk[stream.size()] == 0xEE);

      // Cost: never below the entropy (Kraft); optimal, hence within one bit per symbol of the
      // entropy, whenever no Huffman tree of these counts can exceed the limit.
      double n = 0;
      for (uint32_t f : c.freq) n += f;
      const double h = entropy_bits(c.freq);
      CHECK(double(cost) >= h * n - 1e-6 * n);
      CHECK(cost >= optimal_cost_bits(c.freq));
      if (provably_unlimited(c.freq)) {
        INFO("entropy: ", h, "  bits/symbol: ", double(cost) / n);
        CHECK(cost == optimal_cost_bits(c.freq));
        CHECK(double(cost) <= (h + 1.0) * n + 1e-6 * n);
        CHECK(double(cost) > h * n - 1e-6 * n);
      }
    }
  }

  TEST_CASE(
      "huffman: the unlimited cases are really unlimited and the fibonacci ones really need the limit") {
    // Guards against a vacuous test: some cases are checked for optimality, some force limiting.
    size_t unlimited = 0, limited = 0;
    for (const HuffmanCase& c : huffman_cases()) {
      if (provably_unlimited(c.freq)) ++unlimited;
      if (c.name.find("fibonacci") != std::string::npos) {
        // The unlimited code of Fibonacci counts is a chain: its deepest code has length symbols-1.
        ++limited;
        uint8_t lengths[entropy::kHuffmanMaxSymbols];
        entropy::huffman_lengths(c.freq.data(), static_cast<unsigned>(c.freq.size()), lengths);
        unsigned deepest = 0;
        for (size_t s = 0; s < c.freq.size(); ++s) deepest = std::max(deepest, unsigned(lengths[s]));
        CHECK(deepest == entropy::kHuffmanMaxBits);
      }
    }
    CHECK(unlimited >= 5);
    CHECK(limited == 2);
  }

  TEST_CASE("huffman: corrupt tables are kCorruptPayload") {
    std::vector<uint32_t> table(entropy::huffman_table_entries());
    entropy::HuffmanDecoder dec(table.data());
    auto read = [&](const std::vector<uint8_t>& lengths, unsigned symbols, size_t bytes) {
      std::vector<uint8_t> buf((lengths.size() * 4 + 7) / 8 + 8, 0);
      BitWriter w(buf.data(), buf.size());
      for (uint8_t len : lengths) w.put(len, 4);
      w.finish();
      std::vector<uint8_t> exact(buf.begin(), buf.begin() + static_cast<long>(bytes));
      BitReader r(exact.data(), exact.size());
      return dec.read_table(&r, symbols);
    };
    // A valid table for reference: 16 symbols of length 4.
    const std::vector<uint8_t> valid(16, 4);
    CHECK(read(valid, 16, 8) == Status::kOk);
    for (uint8_t bad = entropy::kHuffmanMaxBits + 1; bad <= 15; ++bad) {
      INFO("length: ", int(bad));
      std::vector<uint8_t> l(16, 5);
      l[7] = bad;
      CHECK(read(l, 16, 8) == Status::kCorruptPayload);
    }
    CHECK(read(std::vector<uint8_t>(16, 0), 16, 8) == Status::kCorruptPayload);  // no symbol
    CHECK(read(std::vector<uint8_t>(32, 0), 32, 16) == Status::kCorruptPayload);
    CHECK(read({1, 1, 1, 0}, 4, 2) == Status::kCorruptPayload);                  // Kraft 3/2
    CHECK(read({2, 2, 2, 2, 3, 0, 0, 0}, 8, 4) == Status::kCorruptPayload);      // Kraft 9/8
    CHECK(read(std::vector<uint8_t>(17, 4), 17, 9) == Status::kCorruptPayload);  // 17/16
    CHECK(read({1, 0, 0, 0}, 4, 2) == Status::kOk);                              // incomplete is fine
    CHECK(read(std::vector<uint8_t>(2048 / 8, 8), 256, 128) == Status::kOk);
    CHECK(read(valid, 16, 7) == Status::kCorruptPayload);  // truncated table
    CHECK(read(valid, 16, 0) == Status::kCorruptPayload);
    CHECK(read(valid, 0, 8) == Status::kCorruptPayload);                             // no alphabet
    CHECK(read(std::vector<uint8_t>(258, 8), 257, 129) == Status::kCorruptPayload);  // over 256
  }

  TEST_CASE("huffman: the bulk decoder matches get() at every start bit, and fails on bad streams") {
    // 16 symbols, skewed: codes of 1..11 bits (the geometric case), 3000 symbols.
    std::vector<uint32_t> freq(16);
    for (unsigned s = 0; s < 16; ++s) freq[s] = static_cast<uint32_t>(4000 * pow(0.6, s)) + 1;
    uint8_t lengths[16];
    entropy::huffman_lengths(freq.data(), 16, lengths);
    const entropy::HuffmanEncoder enc(lengths, 16);
    std::vector<unsigned> msg;
    edgefl_test::SplitMix64 rng(3);
    for (int i = 0; i < 3000; ++i) msg.push_back(static_cast<unsigned>(rng.below(16)));
    std::vector<uint32_t> table(entropy::huffman_table_entries());
    entropy::HuffmanDecoder dec(table.data());
    {
      std::vector<uint8_t> tbuf(8);
      BitWriter tw(tbuf.data(), tbuf.size());
      enc.write_table(&tw);
      tw.finish();
      BitReader tr(tbuf.data(), tbuf.size());
      REQUIRE(dec.read_table(&tr, 16) == Status::kOk);
    }
    for (unsigned junk = 0; junk < 16; ++junk) {
      INFO("start bit: ", junk);
      std::vector<uint8_t> buf(2 + 3000 * entropy::kHuffmanMaxBits / 8 + 2);
      BitWriter w(buf.data(), buf.size());
      w.put(0x5A5Au, junk);
      uint64_t bits = junk;
      for (unsigned sym : msg) {
        enc.put(&w, sym);
        bits += lengths[sym];
      }
      const size_t used = w.finish();
      REQUIRE(!w.overflowed());
      for (size_t count :
           {size_t{0}, size_t{1}, size_t{3}, size_t{4}, size_t{5}, size_t{2999}, size_t{3000}}) {
        INFO("count: ", count);
        std::vector<uint8_t> out(count + 1, 0xEE);
        size_t bit = junk;
        REQUIRE(dec.decode(buf.data(), used, &bit, out.data(), count) == Status::kOk);
        uint64_t want_bits = junk;
        size_t bad = 0;
        for (size_t i = 0; i < count; ++i) {
          want_bits += lengths[msg[i]];
          bad += out[i] != msg[i] ? 1 : 0;
        }
        CHECK(bad == 0);
        CHECK(bit == want_bits);
        CHECK(out[count] == 0xEE);
      }
      // Cut short: the last code runs past the end.
      size_t bit = junk;
      std::vector<uint8_t> out(3000);
      if ((bits + 7) / 8 == used) {
        std::vector<uint8_t> cut(buf.begin(), buf.begin() + static_cast<long>(used - 1));
        CHECK(dec.decode(cut.data(), cut.size(), &bit, out.data(), 3000) == Status::kCorruptPayload);
      }
    }
    {
      // An incomplete code (symbol 0 only, code "0"): a "1" bit is unassigned, in the 64-bit path
      // (16 bytes of ones) and in the bit-by-bit tail (1 byte).
      std::vector<uint8_t> tbuf = {0x01, 0x00};  // lengths {1, 0, 0, 0}
      BitReader tr(tbuf.data(), tbuf.size());
      REQUIRE(dec.read_table(&tr, 4) == Status::kOk);
      std::vector<uint8_t> ones(16, 0xFF), zeros(16, 0x00), out(128);
      size_t bit = 0;
      CHECK(dec.decode(ones.data(), ones.size(), &bit, out.data(), 8) == Status::kCorruptPayload);
      bit = 0;
      CHECK(dec.decode(ones.data(), 1, &bit, out.data(), 1) == Status::kCorruptPayload);
      bit = 0;
      REQUIRE(dec.decode(zeros.data(), zeros.size(), &bit, out.data(), 128) == Status::kOk);
      CHECK(bit == 128u);
      bit = 120;  // 8 bits left: 9 symbols do not fit
      CHECK(dec.decode(zeros.data(), zeros.size(), &bit, out.data(), 9) == Status::kCorruptPayload);
      bit = 200;  // a start past the end
      CHECK(dec.decode(zeros.data(), zeros.size(), &bit, out.data(), 1) == Status::kCorruptPayload);
    }
  }

  TEST_CASE("huffman: an unassigned code makes get() false; reading past the end sets failed()") {
    std::vector<uint32_t> table(entropy::huffman_table_entries());
    entropy::HuffmanDecoder dec(table.data());
    {
      // Only symbol 0, length 1: code "0"; a "1" bit is unassigned.
      std::vector<uint8_t> buf(4, 0);
      BitWriter w(buf.data(), buf.size());
      w.put(1, 4);  // symbol 0: length 1
      w.put(0, 4);  // symbol 1: absent
      w.put(0, 1);  // symbol 0
      w.put(0, 1);  // symbol 0
      w.put(1, 1);  // unassigned
      w.finish();
      BitReader r(buf.data(), buf.size());
      REQUIRE(dec.read_table(&r, 2) == Status::kOk);
      unsigned s = 99;
      CHECK(dec.get(&r, &s));
      CHECK(s == 0);
      CHECK(dec.get(&r, &s));
      CHECK(!dec.get(&r, &s));
      CHECK(!r.failed());
    }
    {
      // A complete code over 4 symbols, 10 symbols coded, then reads past the end.
      const uint32_t freq[4] = {5, 3, 1, 1};
      uint8_t lengths[4];
      entropy::huffman_lengths(freq, 4, lengths);
      const entropy::HuffmanEncoder enc(lengths, 4);
      std::vector<uint8_t> buf(16, 0);
      BitWriter w(buf.data(), buf.size());
      enc.write_table(&w);
      const unsigned msg[10] = {0, 1, 2, 3, 0, 0, 1, 0, 1, 0};
      for (unsigned s : msg) enc.put(&w, s);
      const size_t used = w.finish();
      std::vector<uint8_t> exact(buf.begin(), buf.begin() + static_cast<long>(used));
      BitReader r(exact.data(), exact.size());
      REQUIRE(dec.read_table(&r, 4) == Status::kOk);
      for (unsigned want : msg) {
        unsigned s = 99;
        REQUIRE(dec.get(&r, &s));
        CHECK(s == want);
      }
      CHECK(!r.failed());
      for (int i = 0; i < 64 && !r.failed(); ++i) {
        unsigned s;
        (void)dec.get(&r, &s);
      }
      CHECK(r.failed());
    }
    {
      BitReader r(nullptr, 0);
      CHECK(dec.read_table(&r, 4) == Status::kCorruptPayload);
      CHECK(r.failed());
    }
  }

  TEST_CASE("huffman: multi-symbol entries stop before an unassigned code, which the bulk decoder reports") {
    // Lengths {1, 2, 0, 0}: codes "0" and "01" (LSB-first "0", "10"); "11" is unassigned.
    std::vector<uint32_t> table(entropy::huffman_table_entries());
    entropy::HuffmanDecoder dec(table.data());
    std::vector<uint8_t> tbuf = {0x21, 0x00};
    BitReader tr(tbuf.data(), tbuf.size());
    REQUIRE(dec.read_table(&tr, 4) == Status::kOk);
    for (size_t bad_at : {size_t{0}, size_t{2}, size_t{3}, size_t{17}, size_t{40}}) {
      INFO("unassigned code after ", bad_at, " symbols");
      // bad_at symbols (0, 1, 0, 0, 1, ...), then "11", then zeros (symbol 0).
      std::vector<uint8_t> buf(64, 0);
      BitWriter w(buf.data(), buf.size());
      for (size_t i = 0; i < bad_at; ++i) {
        if (i % 3 == 1) {
          w.put(1, 1);  // symbol 1: bits 1, 0
          w.put(0, 1);
        } else {
          w.put(0, 1);
        }
      }
      w.put(3, 2);
      w.finish();
      std::vector<uint8_t> out(64, 0xEE);
      size_t bit = 0;
      CHECK(dec.decode(buf.data(), buf.size(), &bit, out.data(), 64) == Status::kCorruptPayload);
      bit = 0;
      if (bad_at > 0) {
        REQUIRE(dec.decode(buf.data(), buf.size(), &bit, out.data(), bad_at) == Status::kOk);
        for (size_t i = 0; i < bad_at; ++i) CHECK(out[i] == (i % 3 == 1 ? 1 : 0));
      }
    }
  }

  TEST_CASE("huffman: bulk decode agrees with get() on random codes and random (mostly invalid) streams") {
    // Random length tables (complete or not), random bytes: the bulk decoder and a get() loop
    // must give the same verdict, the same symbols and the same end bit, for every count.
    edgefl_test::SplitMix64 rng(77);
    std::vector<uint32_t> table(entropy::huffman_table_entries());
    entropy::HuffmanDecoder dec(table.data());
    const int trials = kSlow ? 150 : 600;
    size_t ok_runs = 0;
    for (int t = 0; t < trials; ++t) {
      const unsigned symbols = 1 + static_cast<unsigned>(rng.below(t % 3 == 0 ? 256 : 12));
      std::vector<uint32_t> freq(symbols);
      for (uint32_t& f : freq)
        f = rng.below(4) == 0 ? 0 : 1 + static_cast<uint32_t>(rng.below(1u << rng.below(12)));
      freq[rng.below(symbols)] += 1;
      std::vector<uint8_t> lengths(symbols);
      entropy::huffman_lengths(freq.data(), symbols, lengths.data());
      if (t % 5 == 0) lengths[rng.below(symbols)] = 0;  // an incomplete code (if still one symbol)
      if (std::count(lengths.begin(), lengths.end(), 0) == static_cast<long>(symbols)) lengths[0] = 1;
      std::vector<uint8_t> tbuf(entropy::huffman_table_bytes(symbols));
      BitWriter tw(tbuf.data(), tbuf.size());
      for (unsigned sym = 0; sym < symbols; ++sym) tw.put(lengths[sym], 4);
      tw.finish();
      BitReader tr(tbuf.data(), tbuf.size());
      REQUIRE(dec.read_table(&tr, symbols) == Status::kOk);
      // A stream of valid codes (when t is even) or random bytes, then a random cut.
      std::vector<uint8_t> data(1 + rng.below(200));
      if (t % 2 == 0) {
        const entropy::HuffmanEncoder enc(lengths.data(), symbols);
        BitWriter w(data.data(), data.size());
        while (!w.overflowed()) {
          const unsigned sym = static_cast<unsigned>(rng.below(symbols));
          if (lengths[sym]) enc.put(&w, sym);
        }
      } else {
        for (uint8_t& b : data) b = static_cast<uint8_t>(rng.next());
      }
      const size_t start = rng.below(9);
      for (size_t count : {size_t{1}, size_t{15}, size_t{16}, size_t{31}, data.size(), data.size() * 3}) {
        INFO("trial ", t, ", count ", count);
        std::vector<uint8_t> bulk(count + 1, 0xEE), ref(count, 0);
        size_t bit = start;
        const Status got = dec.decode(data.data(), data.size(), &bit, bulk.data(), count);
        BitReader r(data.data(), data.size());
        r.skip(static_cast<unsigned>(start));
        bool ok = true;
        for (size_t i = 0; i < count && ok; ++i) {
          unsigned sym = 0;
          ok = dec.get(&r, &sym) && !r.failed();
          ref[i] = static_cast<uint8_t>(sym);
        }
        ok = ok && !r.failed();
        REQUIRE((got == Status::kOk) == ok);
        CHECK(bulk[count] == 0xEE);
        if (ok) {
          ++ok_runs;
          CHECK(bit == r.bit_position());
          CHECK(std::equal(ref.begin(), ref.end(), bulk.begin()));
        }
      }
    }
    CHECK(ok_runs > static_cast<size_t>(trials));  // the valid streams did decode
  }

  // ---- rANS --------------------------------------------------------------------------------

  TEST_CASE("rans: frequency tables round-trip within their size bounds; corrupt tables are rejected") {
    edgefl_test::SplitMix64 rng(9);
    for (int t = 0; t < 400; ++t) {
      const unsigned symbols = 1 + static_cast<unsigned>(rng.below(t % 2 == 0 ? 16 : 256));
      std::vector<uint32_t> counts(symbols);
      const unsigned shape = static_cast<unsigned>(rng.below(4));
      for (unsigned sym = 0; sym < symbols; ++sym) {
        if (shape == 0) counts[sym] = static_cast<uint32_t>(rng.below(1000));         // flat
        if (shape == 1) counts[sym] = static_cast<uint32_t>(100000 * pow(0.7, sym));  // geometric
        if (shape == 2) counts[sym] = rng.below(3) == 0 ? static_cast<uint32_t>(rng.below(50)) : 0;  // sparse
        if (shape == 3)
          counts[sym] = sym == symbols / 2 ? 1000000 : static_cast<uint32_t>(rng.below(2));  // one dominant
      }
      counts[rng.below(symbols)] += 1;
      uint16_t freq[entropy::kRansMaxSymbols];
      entropy::rans_frequencies(counts.data(), symbols, freq);
      const size_t bytes = entropy::rans_table_bytes(freq, symbols);
      INFO("trial ", t, ": ", symbols, " symbols, shape ", shape, ", ", bytes, " bytes");
      CHECK(bytes >= entropy::rans_table_min_bytes(symbols));
      CHECK(bytes <= entropy::rans_table_max_bytes(symbols));
      CHECK(bytes <= (size_t(symbols) * 13 + 7) / 8);  // never above the fixed 13-bit fields
      std::vector<uint8_t> buf(bytes + 1, 0);
      BitWriter w(buf.data(), bytes);
      entropy::rans_write_table(freq, symbols, &w);
      CHECK(w.finish() == bytes);
      CHECK(!w.overflowed());
      // Decoded through a stream of one symbol per frequency slot: the table is the same.
      entropy::RansDecoder dec;
      BitReader r(buf.data(), bytes);
      REQUIRE(dec.read_table(&r, symbols) == Status::kOk);
      CHECK((r.bit_position() + 7) / 8 == bytes);
      std::vector<uint8_t> msg;
      for (unsigned sym = 0; sym < symbols; ++sym) msg.insert(msg.end(), freq[sym] > 0 ? 3 : 0, uint8_t(sym));
      std::vector<uint8_t> stream(msg.size() * 4 + 64);
      const size_t n = entropy::rans_encode(msg.data(), msg.size(), freq, symbols, entropy::kRansLanes,
                                            stream.data(), stream.size());
      REQUIRE(n > 0);
      REQUIRE(dec.begin(stream.data(), n) == Status::kOk);
      std::vector<uint8_t> out(msg.size());
      REQUIRE(dec.decode(out.data(), out.size()) == Status::kOk);
      CHECK(out == msg);
      CHECK(dec.finish() == Status::kOk);
      // Every truncation of the table fails.
      for (size_t cut = 0; cut < bytes; ++cut) {
        BitReader rc(buf.data(), cut);
        entropy::RansDecoder d2;
        if (d2.read_table(&rc, symbols) == Status::kOk) {
          FAIL("a table cut to ", cut, " bytes was accepted");
          break;
        }
      }
    }
    auto read = [](std::vector<uint8_t> bytes, unsigned symbols) {
      entropy::RansDecoder dec;
      BitReader r(bytes.data(), bytes.size());
      return dec.read_table(&r, symbols);
    };
    // k = 13..15 is out of range.
    for (unsigned k = 13; k < 16; ++k) {
      std::vector<uint8_t> b(8, 0xFF);
      b[0] = static_cast<uint8_t>(0xF0 | k);
      CHECK(read(b, 2) == Status::kCorruptPayload);
    }
    {
      // 3 symbols: k = 12, implied index 3 (2 bits) is out of the alphabet.
      std::vector<uint8_t> b(8, 0);
      BitWriter w(b.data(), b.size());
      w.put(12, 4);
      w.put(3, 2);
      w.finish();
      CHECK(read(b, 3) == Status::kCorruptPayload);
    }
    {
      // 2 symbols, implied 1, the other 4096: the implied one would be 0.
      std::vector<uint8_t> b(8, 0);
      BitWriter w(b.data(), b.size());
      w.put(12, 4);
      w.put(1, 1);
      w.put_unary(1);
      w.put(0, 12);
      w.finish();
      CHECK(read(b, 2) == Status::kCorruptPayload);
      // The other 4095: valid, implied 1.
      std::vector<uint8_t> ok(8, 0);
      BitWriter w2(ok.data(), ok.size());
      w2.put(12, 4);
      w2.put(1, 1);
      w2.put_unary(0);
      w2.put(4095, 12);
      w2.finish();
      CHECK(read(ok, 2) == Status::kOk);
    }
    {
      // k = 0 and a unary run past 4096 zeros.
      std::vector<uint8_t> b(600, 0);
      CHECK(read(b, 2) == Status::kCorruptPayload);
    }
    CHECK(read(std::vector<uint8_t>(8, 0), 0) == Status::kCorruptPayload);
    CHECK(read(std::vector<uint8_t>(8, 0), 257) == Status::kCorruptPayload);
  }

  TEST_CASE("rans: round trips; the bulk decoder matches get() for every split of the symbols") {
    struct Case {
      const char* name;
      unsigned symbols;
      std::vector<uint32_t> counts;
    };
    std::vector<Case> cases;
    cases.push_back(
        {"binomial 16 (q4 codes)", 16, {1, 12, 60, 180, 400, 650, 800, 820, 640, 400, 200, 80, 25, 6, 1, 1}});
    cases.push_back({"two symbols, skewed", 2, {4000, 3}});
    cases.push_back({"one symbol (frequency 4096)", 4, {0, 0, 7, 0}});
    {
      Case c{"256 symbols, geometric", 256, std::vector<uint32_t>(256)};
      for (unsigned sym = 0; sym < 256; ++sym)
        c.counts[sym] = 1 + static_cast<uint32_t>(20000 * pow(0.97, sym));
      cases.push_back(c);
    }
    {
      Case c{"256 symbols, uniform", 256, std::vector<uint32_t>(256, 5)};
      cases.push_back(c);
    }
    for (const Case& c : cases) {
      uint16_t freq[entropy::kRansMaxSymbols];
      entropy::rans_frequencies(c.counts.data(), c.symbols, freq);
      std::vector<uint8_t> table(entropy::rans_table_bytes(freq, c.symbols));
      BitWriter tw(table.data(), table.size());
      entropy::rans_write_table(freq, c.symbols, &tw);
      tw.finish();
      std::vector<unsigned> present;
      for (unsigned sym = 0; sym < c.symbols; ++sym)
        if (c.counts[sym]) present.push_back(sym);
      edgefl_test::SplitMix64 rng(11);
      for (unsigned lanes : {entropy::kRansLanes, entropy::kRansWideLanes})
        for (size_t count :
             {size_t{0}, size_t{1}, size_t{3}, size_t{4}, size_t{5}, size_t{7}, size_t{8}, size_t{9},
              size_t{15}, size_t{17}, size_t{33}, size_t{95}, size_t{1000}, size_t{4099}, size_t{65537}}) {
          INFO("case: ", c.name, "  lanes: ", lanes, "  count: ", count);
          // Symbols drawn by the counts (the coder's model), so that the stream is realistic.
          std::vector<uint8_t> msg(count);
          uint64_t total = 0;
          for (uint32_t n : c.counts) total += n;
          for (uint8_t& m : msg) {
            uint64_t u = rng.below(total);
            unsigned sym = 0;
            while (u >= c.counts[sym]) u -= c.counts[sym++];
            m = static_cast<uint8_t>(sym);
          }
          std::vector<uint8_t> stream(count * 2 + 160);
          const size_t bytes =
              entropy::rans_encode(msg.data(), count, freq, c.symbols, lanes, stream.data(), stream.size());
          REQUIRE(bytes >= entropy::rans_state_bytes(lanes));
          CHECK(bytes % 2 == 0);
          stream.resize(bytes);
          // The scalar twin writes the same bytes, with room to spare, into exactly the room,
          // and neither fits one byte less.
          for (const size_t cap : {count * 2 + 160, bytes, bytes - 1}) {
            std::vector<uint8_t> simd(cap), scalar(cap);
            const size_t a =
                entropy::rans_encode_with(msg.data(), count, freq, c.symbols, lanes, simd.data(), cap, true);
            const size_t b = entropy::rans_encode_with(msg.data(), count, freq, c.symbols, lanes,
                                                       scalar.data(), cap, false);
            CHECK(a == (cap >= bytes ? bytes : 0));
            CHECK(b == a);
            CHECK(std::equal(simd.begin(), simd.begin() + long(a), stream.begin()));
            CHECK(std::equal(scalar.begin(), scalar.begin() + long(b), stream.begin()));
          }
          auto start = [&](entropy::RansDecoder* d) {
            BitReader tr(table.data(), table.size());
            REQUIRE(d->read_table(&tr, c.symbols) == Status::kOk);
            REQUIRE(d->begin(stream.data(), stream.size(), lanes) == Status::kOk);
          };
          entropy::RansDecoder ref;
          start(&ref);
          size_t bad = 0;
          for (size_t i = 0; i < count; ++i) bad += ref.get() != msg[i] ? 1 : 0;
          CHECK(bad == 0);
          CHECK(ref.finish() == Status::kOk);
          for (size_t head : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{6}, size_t{9}, size_t{33}}) {
            if (head > count) continue;
            INFO("first call: ", head, " symbols");
            entropy::RansDecoder dec;
            start(&dec);
            std::vector<uint8_t> out(count + 1, 0xEE);
            REQUIRE(dec.decode(out.data(), head) == Status::kOk);
            REQUIRE(dec.decode(out.data() + head, count - head) == Status::kOk);
            CHECK(std::equal(msg.begin(), msg.end(), out.begin()));
            CHECK(out[count] == 0xEE);
            CHECK(dec.finish() == Status::kOk);
          }
        }
    }
  }

  TEST_CASE("rans: a symbol outside the table fails the encoder, in every lane and path") {
    const uint16_t freq[4] = {2048, 2047, 1, 0};  // symbol 3 has no slot
    for (const unsigned lanes : {entropy::kRansLanes, entropy::kRansWideLanes}) {
      for (const size_t at : {size_t{0}, size_t{10}, size_t{63}, size_t{99}}) {
        CAPTURE(lanes);
        CAPTURE(at);
        std::vector<uint8_t> msg(100);
        for (size_t i = 0; i < msg.size(); ++i) msg[i] = uint8_t(i % 3);
        msg[at] = 3;
        std::vector<uint8_t> stream(1024);
        for (const bool simd : {true, false}) {
          CHECK(entropy::rans_encode_with(msg.data(), msg.size(), freq, 4, lanes, stream.data(),
                                          stream.size(), simd) == 0);
        }
        msg[at] = 7;  // outside the alphabet
        CHECK(entropy::rans_encode(msg.data(), msg.size(), freq, 4, lanes, stream.data(), stream.size()) ==
              0);
      }
    }
  }

  TEST_CASE("rans: truncated, extended and corrupted streams fail finish(), never read out of bounds") {
    for (const unsigned lanes : {entropy::kRansLanes, entropy::kRansWideLanes}) {
      CAPTURE(lanes);
      const uint32_t counts[16] = {1, 12, 60, 180, 400, 650, 800, 820, 640, 400, 200, 80, 25, 6, 1, 1};
      uint16_t freq[16];
      entropy::rans_frequencies(counts, 16, freq);
      std::vector<uint8_t> table(entropy::rans_table_bytes(freq, 16));
      BitWriter tw(table.data(), table.size());
      entropy::rans_write_table(freq, 16, &tw);
      tw.finish();
      edgefl_test::SplitMix64 rng(5);
      const size_t count = 3001;
      std::vector<uint8_t> msg(count);
      for (uint8_t& m : msg) {
        unsigned sym = 0;
        for (int j = 0; j < 15; ++j) sym += rng.below(100) < 45 ? 1 : 0;
        m = static_cast<uint8_t>(sym);
      }
      std::vector<uint8_t> stream(count * 2 + 64);
      const size_t bytes =
          entropy::rans_encode(msg.data(), count, freq, 16, lanes, stream.data(), stream.size());
      REQUIRE(bytes > 64);
      stream.resize(bytes);
      // Each variant in a buffer of exactly its size (ASan catches any read past it); decodes with
      // the bulk decoder and with get(), which must agree on every symbol and on the verdict.
      auto run = [&](const std::vector<uint8_t>& s, bool* finished_ok) {
        std::unique_ptr<uint8_t[]> exact(new uint8_t[s.size() == 0 ? 1 : s.size()]);
        if (!s.empty()) memcpy(exact.get(), s.data(), s.size());
        entropy::RansDecoder dec, ref;
        BitReader t1(table.data(), table.size()), t2(table.data(), table.size());
        REQUIRE(dec.read_table(&t1, 16) == Status::kOk);
        REQUIRE(ref.read_table(&t2, 16) == Status::kOk);
        const Status began = dec.begin(exact.get(), s.size(), lanes);
        REQUIRE(began == ref.begin(exact.get(), s.size(), lanes));
        if (began != Status::kOk) {
          *finished_ok = false;
          return;
        }
        std::vector<uint8_t> out(count);
        const Status decoded = dec.decode(out.data(), count);
        size_t mismatches = 0, outside = 0;
        for (size_t i = 0; i < count; ++i) {
          mismatches += out[i] != ref.get() ? 1 : 0;
          outside += out[i] >= 16 ? 1 : 0;
        }
        CHECK(mismatches == 0);
        CHECK(outside == 0);
        const bool ok = dec.finish() == Status::kOk;
        CHECK(ok == (ref.finish() == Status::kOk));
        if (decoded != Status::kOk) CHECK(!ok);
        *finished_ok = ok;
      };
      bool ok = false;
      run(stream, &ok);
      CHECK(ok);
      for (size_t cut = 1; cut <= 40; ++cut) {
        INFO("cut: ", cut, " bytes");
        run(std::vector<uint8_t>(stream.begin(), stream.end() - static_cast<long>(cut)), &ok);
        CHECK(!ok);
      }
      for (size_t keep : {size_t{0}, size_t{3}, size_t{15}, size_t{16}, size_t{17}, size_t{127}, size_t{128},
                          size_t{129}}) {
        INFO("kept: ", keep, " bytes");
        run(std::vector<uint8_t>(stream.begin(), stream.begin() + static_cast<long>(keep)), &ok);
        CHECK(!ok);
      }
      {
        std::vector<uint8_t> longer = stream;
        longer.push_back(0);
        longer.push_back(0);
        run(longer, &ok);
        CHECK(!ok);
      }
      size_t accepted = 0;
      for (int trial = 0; trial < 200; ++trial) {
        std::vector<uint8_t> bad = stream;
        const size_t at = rng.below(bad.size());
        bad[at] = static_cast<uint8_t>(bad[at] ^ (1 + rng.below(255)));
        run(bad, &ok);
        accepted += ok ? 1 : 0;
      }
      CHECK(accepted == 0);
      {
        // A state below 2^16 is rejected by begin().
        std::vector<uint8_t> low = stream;
        edgefl::store_le32(low.data() + 8, entropy::kRansLow - 1);
        entropy::RansDecoder dec;
        BitReader t1(table.data(), table.size());
        REQUIRE(dec.read_table(&t1, 16) == Status::kOk);
        CHECK(dec.begin(low.data(), low.size(), lanes) == Status::kCorruptPayload);
        // A lane count other than 4 and 8 is refused.
        CHECK(dec.begin(stream.data(), stream.size(), 6) == Status::kCorruptPayload);
      }
      // The other lane count does not decode this stream.
      {
        entropy::RansDecoder dec;
        BitReader t1(table.data(), table.size());
        REQUIRE(dec.read_table(&t1, 16) == Status::kOk);
        const unsigned other = lanes == entropy::kRansLanes ? entropy::kRansWideLanes : entropy::kRansLanes;
        std::vector<uint8_t> out(count);
        if (dec.begin(stream.data(), stream.size(), other) == Status::kOk) {
          (void)dec.decode(out.data(), count);
          CHECK(dec.finish() == Status::kCorruptPayload);
        }
      }
    }
  }

  // ---- quantile sketch -----------------------------------------------------------------------

  TEST_CASE("quantile sketch: rank error <= 0.02 at ranks i/256, exact min and max, memory within bounds") {
    const size_t n = 100000;
    for (uint64_t seed : {1ull, 2ull, 3ull}) {
      const std::vector<std::pair<const char*, std::vector<float>>> inputs = {
          {"uniform", edgefl_test::uniform_vector(n, seed, -3.0, 5.0)},
          {"gaussian", edgefl_test::gaussian_vector(n, seed + 10)},
          {"bench", edgefl_test::bench_vector(n, seed + 20)},
      };
      for (const auto& input : inputs) {
        INFO("input: ", std::string(input.first), "  seed: ", seed);
        const QuantileRun r = run_quantiles(input.second, 128, seed);
        INFO("max rank error: ", r.max_rank_error);
        if (seed == 1)
          MESSAGE("quantile sketch k = 128, n = ", n, ", ", std::string(input.first), ": max rank error ",
                  r.max_rank_error);
        CHECK(r.max_rank_error <= 0.02);
        CHECK(r.monotone);
        CHECK(r.min_exact);
        CHECK(r.max_exact);
        CHECK(r.memory_intact);
        CHECK(r.scratch_intact);
      }
    }
  }

  TEST_CASE("quantile sketch: memory stays within quantile_sketch_floats at every level boundary") {
    // n around multiples of 2k x 2^j, where a carry climbs to a new level.
    const unsigned k = 16;
    for (size_t n :
         {1u, 31u, 32u, 33u, 63u, 64u, 65u, 127u, 128u, 129u, 4095u, 4096u, 4097u, 65536u, 65537u}) {
      INFO("n: ", n);
      const QuantileRun r = run_quantiles(edgefl_test::gaussian_vector(n, n), k, 5, n >= 2 ? 16 : 2);
      CHECK(r.memory_intact);
      CHECK(r.scratch_intact);
      CHECK(r.monotone);
      CHECK(r.min_exact);
      CHECK(r.max_exact);
      if (n >= 1000) CHECK(r.max_rank_error <= 0.1);  // k = 16: looser, but bounded
    }
  }

  TEST_CASE("quantile sketch: below 2k items the quantiles are exact order statistics") {
    const unsigned k = 128;
    const size_t n = 200;  // < 2k: everything stays in the base buffer
    const std::vector<float> data = edgefl_test::gaussian_vector(n, 9);
    std::vector<float> mem(qs::quantile_sketch_floats(k, n));
    qs::QuantileSketch sketch(k, n, mem.data(), 1);
    for (float v : data) sketch.update(v);
    std::vector<uint64_t> scratch(qs::quantile_query_items(k, n));
    std::vector<float> q(255);
    sketch.quantiles(256, q.data(), scratch.data());
    std::vector<float> sorted(data);
    std::sort(sorted.begin(), sorted.end());
    for (unsigned p = 1; p < 256; ++p) {
      // The first item whose cumulative count exceeds p n / 256.
      const size_t j = static_cast<size_t>(floor(double(p) * double(n) / 256.0));
      CHECK(q[p - 1] == sorted[j]);
    }
  }

  // ---- skc internals -------------------------------------------------------------------------

  TEST_CASE(
      "skc at the defaults: exact-bucket rate near the derived 0.43, never further from zero, never across "
      "groups") {
    const size_t n = kSlow ? 200000 : 1000000;
    for (double density : {0.01, 0.1}) {
      for (uint64_t seed : {1ull, 2ull}) {
        INFO("density: ", density, "  seed: ", seed);
        const std::vector<float> x = sparse_gaussian(n, static_cast<size_t>(density * n), seed * 31);
        const std::vector<uint8_t> bytes = encode_public("skc", x, seed);
        const SkcStats st = skc_stats(bytes, x);
        INFO("keys: ", st.keys, "  exact-bucket rate: ", st.rate());
        MESSAGE("skc defaults, n = ", n, ", density ", density, ", seed ", seed, ": exact-bucket rate ",
                st.rate());
        CHECK(st.keys == static_cast<size_t>(density * n));
        CHECK(st.wrong_keys == 0);
        CHECK(st.rate() >= 0.35);
        CHECK(st.rate() <= 0.55);
        CHECK(st.further_from_zero == 0);
        CHECK(st.sign_flips == 0);
        CHECK(st.other_group == 0);
      }
    }
  }

  TEST_CASE(
      "skc: more columns and rows raise the exact-bucket rate as derived (0.83 at c=1, 0.92 at s=3, c=1)") {
    const size_t n = kSlow ? 100000 : 400000;
    const std::vector<float> x = sparse_gaussian(n, n / 10, 5);
    const double r_default = skc_stats(encode_public("skc", x, 3), x).rate();
    const SkcStats c1 = skc_stats(encode_public("skc:cols=1", x, 3), x);
    const SkcStats s3 = skc_stats(encode_public("skc:rows=3,cols=1", x, 3), x);
    INFO("default: ", r_default, "  cols=1: ", c1.rate(), "  rows=3,cols=1: ", s3.rate());
    MESSAGE("exact-bucket rate: defaults ", r_default, ", cols=1 ", c1.rate(), ", rows=3,cols=1 ", s3.rate());
    CHECK(c1.rate() > r_default);
    CHECK(s3.rate() > c1.rate());
    CHECK(c1.rate() >= 0.75);
    CHECK(c1.rate() <= 0.9);
    CHECK(s3.rate() >= 0.85);
    CHECK(s3.rate() <= 0.97);
    CHECK(c1.further_from_zero == 0);
    CHECK(s3.further_from_zero == 0);
  }

  TEST_CASE("skc: topk+skc on dense data keeps the guarantees too") {
    const size_t n = kSlow ? 100000 : 1000000;
    const std::vector<float> dense = edgefl_test::bench_vector(n, 4);
    const std::vector<uint8_t> bytes = encode_public("topk:0.01+skc", dense, 8);
    // The carried keys are the top-k: zero out the rest to compare.
    edgefl::EncodedInfo info;
    REQUIRE(edgefl::inspect({bytes.data(), bytes.size()}, &info) == Status::kOk);
    std::vector<float> mags(n);
    for (size_t i = 0; i < n; ++i) mags[i] = fabsf(dense[i]);
    std::nth_element(mags.begin(), mags.begin() + static_cast<long>(n - info.nnz), mags.end());
    const float kth = mags[n - info.nnz];
    std::vector<float> x(n, 0.0f);
    for (size_t i = 0; i < n; ++i)
      if (fabsf(dense[i]) > kth) x[i] = dense[i];
    size_t ties = 0;
    for (size_t i = 0; i < n; ++i) ties += fabsf(dense[i]) == kth ? 1 : 0;
    REQUIRE(ties == 1);  // continuous data: the k-th magnitude is unique
    for (size_t i = 0; i < n; ++i)
      if (fabsf(dense[i]) == kth) x[i] = dense[i];
    const SkcStats st = skc_stats(bytes, x);
    CHECK(st.keys == info.nnz);
    CHECK(st.wrong_keys == 0);
    CHECK(st.further_from_zero == 0);
    CHECK(st.sign_flips == 0);
    CHECK(st.other_group == 0);
  }

  TEST_CASE("skc: sortable_key is strictly monotone over the finite floats, with -0 as +0") {
    std::vector<float> v = {-FLT_MAX, -1e30f,  -2.0f, -1.0f, -FLT_MIN, -1.4e-45f, 0.0f,
                            1.4e-45f, FLT_MIN, 1.0f,  2.0f,  1e30f,    FLT_MAX};
    edgefl_test::SplitMix64 rng(21);
    for (int i = 0; i < 20000; ++i) v.push_back(random_finite_float(rng));
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());  // -0 == +0: one of them stays
    size_t bad = 0;
    for (size_t i = 1; i < v.size(); ++i)
      bad += skc::sortable_key(v[i - 1]) < skc::sortable_key(v[i]) ? 0 : 1;
    CHECK(bad == 0);
    CHECK(skc::sortable_key(-0.0f) == skc::sortable_key(0.0f));
    CHECK(skc::sortable_key(-1.4e-45f) + 1 == skc::sortable_key(0.0f));
    CHECK(skc::sortable_key(1.4e-45f) == skc::sortable_key(0.0f) + 1);
  }

  TEST_CASE("skc::Encoder bucket lookup (table + fix-up) agrees with a binary search over the splits") {
    struct Input {
      const char* name;
      std::vector<float> values;
    };
    std::vector<Input> inputs;
    inputs.push_back({"gaussian, both signs", edgefl_test::gaussian_vector(20000, 1)});
    inputs.push_back({"positive uniform", edgefl_test::uniform_vector(20000, 2, 0.001, 7.0)});
    inputs.push_back({"negative uniform", edgefl_test::uniform_vector(20000, 3, -9.0, -0.5)});
    // Every value shares the high 16 key bits: the table gives one start, the fix-up walks.
    inputs.push_back({"clustered in [1, 1.0039)", edgefl_test::uniform_vector(20000, 4, 1.0, 1.0039)});
    inputs.push_back({"heavy tails", edgefl_test::bench_vector(20000, 5)});
    {
      std::vector<float> v = edgefl_test::gaussian_vector(20000, 6, 1e-38);  // subnormals and tiny normals
      inputs.push_back({"tiny", v});
    }
    {
      edgefl_test::SplitMix64 rng(7);
      std::vector<float> v(20000);
      for (float& f : v) f = static_cast<float>(static_cast<int>(rng.below(21)) - 10) * 0.5f;
      inputs.push_back({"21 levels with duplicates", v});
    }
    const size_t probes = kSlow ? 20000 : 100000;
    for (const Input& in : inputs) {
      for (const char* params : {"defaults", "bins=16"}) {
        INFO("input: ", std::string(in.name), "  params: ", std::string(params));
        skc::Params p;
        if (std::string(params) == "bins=16") p.bins = 16;
        Built b;
        build_encoder(in.values, p, 11, &b);
        const skc::Encoder& enc = *b.enc;
        CHECK(enc.bucket_count() == b.l.split_count + 1);
        CHECK(enc.zero_buckets() == b.l.zero);
        for (unsigned k = 0; k < enc.bucket_count(); ++k)
          CHECK(enc.representative(k) == skc::bucket_representative(b.l, k));

        std::vector<float> probe;
        for (float s : b.splits) {
          probe.push_back(s);
          probe.push_back(nextafterf(s, -INFINITY));
          probe.push_back(nextafterf(s, INFINITY));
        }
        const float mn = *std::min_element(in.values.begin(), in.values.end());
        const float mx = *std::max_element(in.values.begin(), in.values.end());
        for (float v : {0.0f, -0.0f, mn, mx, nextafterf(mn, -INFINITY), nextafterf(mx, INFINITY), FLT_MAX,
                        -FLT_MAX, FLT_MIN, -FLT_MIN, 1.4e-45f, -1.4e-45f})
          probe.push_back(v);
        edgefl_test::SplitMix64 rng(13);
        for (size_t i = 0; i < probes; ++i) {
          if (i % 4 == 0) {
            probe.push_back(random_finite_float(rng));
          } else if (i % 4 == 1) {
            probe.push_back(in.values[static_cast<size_t>(rng.below(in.values.size()))]);
          } else {
            probe.push_back(static_cast<float>(mn + (static_cast<double>(mx) - mn) * rng.uniform()));
          }
        }
        size_t mismatches = 0;
        float first_bad = 0;
        for (float v : probe) {
          if (enc.bucket(v) != search_bucket(b.splits, v)) {
            if (mismatches == 0) first_bad = v;
            ++mismatches;
          }
        }
        INFO("first mismatch at ", first_bad);
        CHECK(mismatches == 0);
      }
    }
  }

  TEST_CASE("skc: columns() is ceil(ratio x keys), at least 1, and 0 for an empty group") {
    CHECK(skc::columns(0.3f, 0) == 0u);
    CHECK(skc::columns(0.3f, 1) == 1u);
    CHECK(skc::columns(0.01f, 1) == 1u);
    CHECK(skc::columns(0.25f, 10) == 3u);
    CHECK(skc::columns(0.25f, 12) == 3u);
    CHECK(skc::columns(1.0f, 1000) == 1000u);
    CHECK(skc::columns(4.0f, 7) == 28u);
    CHECK(skc::columns(0.5f, 3) == 2u);
    // The ratio is the float of the header: 0.3f is 0.300000012, so 10 keys need 4 columns.
    CHECK(skc::columns(0.3f, 10) == 4u);
    CHECK(skc::columns(0.3f, 1000) == 301u);
  }

  TEST_CASE("skc: the decode workspace covers every cell the groups can hold") {
    // decode_sketches() writes sum over groups of rows x ceil(cols x keys) cells after the
    // Huffman table; the workspace bound must cover it for any split of nnz keys into groups.
    for (float cols : {0.3f, 0.01f, 1.0f, 4.0f}) {
      for (unsigned rows : {1u, 2u, 4u}) {
        for (uint64_t nnz : {1ull, 7ull, 100ull, 12345ull}) {
          skc::Params p;
          p.cols = cols;
          p.rows = static_cast<uint8_t>(rows);
          p.groups = 16;
          // Worst split: 15 groups of one key and the rest in the last.
          uint64_t cells = 0;
          const uint64_t singles = nnz > 15 ? 15 : nnz - 1;
          cells += singles * rows * skc::columns(cols, 1);
          cells += uint64_t(rows) * skc::columns(cols, static_cast<uint32_t>(nnz - singles));
          INFO("cols: ", cols, "  rows: ", rows, "  nnz: ", nnz);
          CHECK(skc::decode_workspace_bytes(p, nnz) >= entropy::huffman_decoder_table_bytes() + cells);
        }
      }
    }
  }
}  // TEST_SUITE
