// tests/sdk/aggregate_test.cpp: streaming FedAvg and the server optimizers (edgefl/aggregate.h).
//
// Tolerances. The aggregate is a binary64 sum of terms t_k = w_k * x_k (exact: a float times an
// integer weight below 2^29 fits in 53 bits). Summing K terms in any order has an error below
// (K - 1) u sum|t_k| with u = 2^-53 (Higham, "Accuracy and Stability of Numerical Algorithms",
// 2nd ed., eq. 4.4), so two orders differ by at most 2 (K - 1) u sum|t_k|. For K <= 64 that is
// below 1.4e-14 sum|t_k|: the tests allow kSumRelTol = 1e-12 of sum|t_k|, 70x the bound.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "edgefl/aggregate.h"
#include "edgefl/codec.h"
#include "support/codec_util.h"
#include "support/crc32c.h"

namespace {

using edgefl::ServerOptimizer;
using edgefl::ServerOptimizerKind;
using edgefl::ServerOptimizerSpec;
using edgefl::Status;
using edgefl::StreamingAggregator;

constexpr double kSumRelTol = 1e-12;

// An aggregator with its own storage (exactly storage_bytes(n), so ASan sees overruns).
struct Agg {
  explicit Agg(size_t n) : storage(StreamingAggregator::storage_bytes(n)) {
    REQUIRE(agg.init({storage.data(), storage.size()}, n) == Status::kOk);
  }
  std::vector<uint8_t> storage;
  StreamingAggregator agg;

  std::vector<uint8_t> exported() const {
    std::vector<uint8_t> out(StreamingAggregator::export_bytes(agg.size()));
    size_t written = 0;
    REQUIRE(agg.export_state({out.data(), out.size()}, &written) == Status::kOk);
    REQUIRE(written == out.size());
    return out;
  }
  std::vector<float> mean() const {
    std::vector<float> out(agg.size());
    REQUIRE(agg.mean({out.data(), out.size()}) == Status::kOk);
    return out;
  }
  Status add(const std::vector<uint8_t>& bytes, double w) {
    return agg.add_encoded({bytes.data(), bytes.size()}, w);
  }
};

struct Update {
  std::vector<uint8_t> bytes;  // the encoding
  std::vector<float> decoded;  // what the server sees
  double weight = 0;           // samples
};

std::vector<float> random_vector(size_t n, uint64_t seed, float scale) {
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    v[i] = scale * (float(int64_t(s >> 40) - (int64_t(1) << 23)) / float(1 << 23));
  }
  return v;
}

// K updates of n coordinates, under a mix of codecs, with integer weights (sample counts).
std::vector<Update> make_updates(size_t k, size_t n, uint64_t seed) {
  const char* specs[] = {"fp32", "q8", "topk:0.1+q4", "fp16", "randk:0.2", "qsgd", "hq4", "sign"};
  std::vector<Update> ups;
  for (size_t c = 0; c < k; ++c) {
    Update u;
    const auto x = random_vector(n, seed + c, 0.01f * float(1 + c % 5));
    u.bytes = edgefl_test::encode_ok(specs[c % 8], x, seed * 1000 + c);
    u.decoded = edgefl_test::decode_ok(u.bytes, n);
    u.weight = double(50 + (c * 37) % 400);
    ups.push_back(std::move(u));
  }
  return ups;
}

// Reference weighted sums in binary64, in the given order, and sum|w x| per coordinate.
void reference_sums(const std::vector<Update>& ups, const std::vector<size_t>& order, size_t n,
                    std::vector<double>* sum, std::vector<double>* abs_sum, double* weight) {
  sum->assign(n, 0.0);
  abs_sum->assign(n, 0.0);
  *weight = 0;
  for (size_t k : order) {
    for (size_t i = 0; i < n; ++i) {
      (*sum)[i] += ups[k].weight * double(ups[k].decoded[i]);
      (*abs_sum)[i] += std::fabs(ups[k].weight * double(ups[k].decoded[i]));
    }
    *weight += ups[k].weight;
  }
}

std::vector<size_t> iota(size_t k) {
  std::vector<size_t> o(k);
  for (size_t i = 0; i < k; ++i) o[i] = i;
  return o;
}

void check_sums_close(const StreamingAggregator& a, const std::vector<double>& expect,
                      const std::vector<double>& abs_sum) {
  REQUIRE(a.sum().size() == expect.size());
  for (size_t i = 0; i < expect.size(); ++i) {
    INFO("coordinate ", i);
    CHECK(std::fabs(a.sum()[i] - expect[i]) <= kSumRelTol * abs_sum[i]);
  }
}

ServerOptimizerSpec opt_spec(const char* text) {
  ServerOptimizerSpec s;
  INFO("spec: ", text);
  REQUIRE(edgefl::parse_server_optimizer_spec(text, &s) == Status::kOk);
  return s;
}

struct Opt {
  Opt(const char* text, size_t n) : spec(opt_spec(text)), state(ServerOptimizer::state_bytes(spec.kind, n)) {
    REQUIRE(opt.init(spec, {state.data(), state.size()}, n) == Status::kOk);
  }
  ServerOptimizerSpec spec;
  std::vector<uint8_t> state;
  ServerOptimizer opt;
  Status apply(std::vector<float>& g, const std::vector<float>& d) {
    return opt.apply({g.data(), g.size()}, {d.data(), d.size()});
  }
};

}  // namespace

TEST_SUITE("aggregate") {
  // ----- StreamingAggregator -----------------------------------------------------------------------

  TEST_CASE("storage and export sizes follow the documented layout") {
    CHECK(StreamingAggregator::storage_bytes(0) == 0);
    CHECK(StreamingAggregator::storage_bytes(1000) == 8000 + 7);
    CHECK(StreamingAggregator::export_bytes(0) == 40);
    CHECK(StreamingAggregator::export_bytes(1000) == 40 + 8000);
    CHECK(edgefl::kAggregateStateHeaderBytes == 40);
    CHECK(StreamingAggregator::storage_bytes(size_t(EDGEFL_MAX_DIMENSION) + 1) == 0);
  }

  TEST_CASE("init binds storage of any alignment and rejects what is too small") {
    const size_t n = 100;
    std::vector<uint8_t> buf(StreamingAggregator::storage_bytes(n) + 8);
    for (size_t offset = 0; offset < 8; ++offset) {
      StreamingAggregator a;
      REQUIRE(a.init({buf.data() + offset, StreamingAggregator::storage_bytes(n)}, n) == Status::kOk);
      CHECK(reinterpret_cast<uintptr_t>(a.sum().data()) % alignof(double) == 0);
      CHECK(a.sum().data() >= reinterpret_cast<const double*>(buf.data() + offset));
      const std::vector<float> x(n, 1.5f);
      CHECK(a.add_dense({x.data(), n}, 2.0) == Status::kOk);
      CHECK(a.sum()[n - 1] == 3.0);
    }
    StreamingAggregator a;
    CHECK(a.init({buf.data(), StreamingAggregator::storage_bytes(n) - 1}, n) == Status::kInvalidArgument);
    CHECK_FALSE(a.bound());
    CHECK(a.init({nullptr, 1000}, n) == Status::kInvalidArgument);
    CHECK(a.init({buf.data(), buf.size()}, size_t(EDGEFL_MAX_DIMENSION) + 1) == Status::kDimensionTooLarge);
    // An unbound aggregator refuses everything.
    const std::vector<float> x(n, 1.0f);
    float out[1];
    CHECK(a.add_dense({x.data(), n}, 1.0) == Status::kInvalidArgument);
    CHECK(a.mean({out, 1}) == Status::kInvalidArgument);
    size_t written = 7;
    CHECK(a.export_state({buf.data(), buf.size()}, &written) == Status::kInvalidArgument);
    CHECK(written == 0);
    // n == 0 works with no storage at all.
    StreamingAggregator empty;
    REQUIRE(empty.init({}, 0) == Status::kOk);
    CHECK(empty.add_dense({}, 3.0) == Status::kOk);
    CHECK(empty.count() == 1);
    CHECK(empty.mean({}) == Status::kOk);
  }

  TEST_CASE("the streaming mean equals the batch weighted mean of the decoded updates") {
    const size_t n = 1000, k = 24;
    const auto ups = make_updates(k, n, 1);
    Agg a(n);
    for (const auto& u : ups) REQUIRE(a.add(u.bytes, u.weight) == Status::kOk);
    std::vector<double> sum, abs_sum;
    double weight = 0;
    reference_sums(ups, iota(k), n, &sum, &abs_sum, &weight);
    CHECK(a.agg.count() == k);
    CHECK(a.agg.total_weight() == weight);  // integer weights: exact
    // Same order, same binary64 arithmetic (acc += w * double(x)): the sums agree bit for bit.
    for (size_t i = 0; i < n; ++i) REQUIRE(a.agg.sum()[i] == sum[i]);
    const auto mean = a.mean();
    for (size_t i = 0; i < n; ++i) CHECK(mean[i] == float(sum[i] / weight));
  }

  TEST_CASE("the aggregate does not depend on the order of the updates") {
    const size_t n = 700, k = 40;
    const auto ups = make_updates(k, n, 2);
    std::vector<size_t> order = iota(k);
    std::reverse(order.begin(), order.end());
    std::rotate(order.begin(), order.begin() + 13, order.end());
    Agg a(n);
    for (size_t c : order) REQUIRE(a.add(ups[c].bytes, ups[c].weight) == Status::kOk);
    std::vector<double> sum, abs_sum;
    double weight = 0;
    reference_sums(ups, iota(k), n, &sum, &abs_sum, &weight);
    check_sums_close(a.agg, sum, abs_sum);
    CHECK(a.agg.total_weight() == weight);
    const auto mean = a.mean();
    for (size_t i = 0; i < n; ++i) {
      // The float means may differ in the last place where the sums differ in the last bits.
      CHECK(std::fabs(double(mean[i]) - sum[i] / weight) <=
            1e-7 * std::fabs(sum[i] / weight) + kSumRelTol * abs_sum[i] / weight);
    }
  }

  TEST_CASE("merging partial aggregates equals one aggregate over all updates") {
    const size_t n = 500, k = 30;
    const auto ups = make_updates(k, n, 3);
    // Three edge servers with uneven loads, merged by a root; one of them merges a sub-tier first.
    Agg root(n), edge1(n), edge2(n), edge3(n), leaf(n), single(n);
    for (size_t c = 0; c < k; ++c) {
      Agg& target = c < 4 ? edge1 : c < 20 ? edge2 : c < 25 ? edge3 : leaf;
      REQUIRE(target.add(ups[c].bytes, ups[c].weight) == Status::kOk);
      REQUIRE(single.add(ups[c].bytes, ups[c].weight) == Status::kOk);
    }
    REQUIRE(edge3.agg.merge(leaf.agg) == Status::kOk);
    REQUIRE(root.agg.merge(edge2.agg) == Status::kOk);
    REQUIRE(root.agg.merge(edge1.agg) == Status::kOk);
    REQUIRE(root.agg.merge(edge3.agg) == Status::kOk);
    CHECK(root.agg.count() == single.agg.count());
    CHECK(root.agg.total_weight() == single.agg.total_weight());
    std::vector<double> sum, abs_sum;
    double weight = 0;
    reference_sums(ups, iota(k), n, &sum, &abs_sum, &weight);
    check_sums_close(root.agg, std::vector<double>(single.agg.sum().begin(), single.agg.sum().end()),
                     abs_sum);
    // The merged-from aggregates are unchanged; merging an empty aggregate changes nothing.
    CHECK(edge1.agg.count() == 4);
    Agg none(n);
    const auto before = root.exported();
    REQUIRE(root.agg.merge(none.agg) == Status::kOk);
    CHECK(root.exported() == before);
  }

  TEST_CASE("merge refuses itself, other dimensions and unbound aggregates") {
    Agg a(10), b(11);
    const std::vector<float> x(10, 1.0f);
    REQUIRE(a.agg.add_dense({x.data(), 10}, 1.0) == Status::kOk);
    CHECK(a.agg.merge(a.agg) == Status::kInvalidArgument);
    CHECK(a.agg.merge(b.agg) == Status::kDimensionMismatch);
    StreamingAggregator unbound;
    CHECK(a.agg.merge(unbound) == Status::kInvalidArgument);
    CHECK(a.agg.count() == 1);
    CHECK(a.agg.sum()[0] == 1.0);
  }

  TEST_CASE("export then import restores the aggregate bit for bit, and adding continues identically") {
    const size_t n = 300, k = 12;
    const auto ups = make_updates(k, n, 4);
    Agg a(n), reference(n);
    for (size_t c = 0; c < 6; ++c) {
      REQUIRE(a.add(ups[c].bytes, ups[c].weight) == Status::kOk);
      REQUIRE(reference.add(ups[c].bytes, ups[c].weight) == Status::kOk);
    }
    const auto checkpoint = a.exported();
    // The documented layout, checked independently of the implementation.
    CHECK(memcmp(checkpoint.data(), "EFAG", 4) == 0);
    CHECK((checkpoint[4] | checkpoint[5] << 8) == 1);
    CHECK((checkpoint[6] | checkpoint[7] << 8) == 40);
    CHECK(edgefl_test::load_u32(checkpoint, 8) == n);
    CHECK(edgefl_test::load_u32(checkpoint, 12) == 0);
    CHECK((edgefl_test::load_u32(checkpoint, 16) | uint64_t(edgefl_test::load_u32(checkpoint, 20)) << 32) ==
          6);
    uint64_t wbits = edgefl_test::load_u32(checkpoint, 24) | uint64_t(edgefl_test::load_u32(checkpoint, 28))
                                                                 << 32;
    double w;
    memcpy(&w, &wbits, 8);
    CHECK(w == a.agg.total_weight());
    uint32_t crc = edgefl_test::crc32c_update(0, checkpoint.data(), 32);
    crc = edgefl_test::crc32c_update(crc, checkpoint.data() + 40, checkpoint.size() - 40);
    CHECK(edgefl_test::load_u32(checkpoint, 32) == crc);
    uint64_t s0bits = edgefl_test::load_u32(checkpoint, 40) | uint64_t(edgefl_test::load_u32(checkpoint, 44))
                                                                  << 32;
    double s0;
    memcpy(&s0, &s0bits, 8);
    CHECK(s0 == a.agg.sum()[0]);

    // Restore into a fresh aggregator (a restarted server), then finish the round on both.
    Agg restored(n);
    REQUIRE(restored.agg.import_state({checkpoint.data(), checkpoint.size()}) == Status::kOk);
    CHECK(restored.exported() == checkpoint);
    CHECK(restored.agg.count() == 6);
    for (size_t c = 6; c < k; ++c) {
      REQUIRE(restored.add(ups[c].bytes, ups[c].weight) == Status::kOk);
      REQUIRE(reference.add(ups[c].bytes, ups[c].weight) == Status::kOk);
    }
    CHECK(restored.exported() == reference.exported());
    CHECK(edgefl_test::same_bits(restored.mean(), reference.mean()));

    // An empty aggregate round-trips too.
    Agg empty(n), target(n);
    const auto empty_state = empty.exported();
    REQUIRE(target.add(ups[0].bytes, 1.0) == Status::kOk);
    REQUIRE(target.agg.import_state({empty_state.data(), empty_state.size()}) == Status::kOk);
    CHECK(target.agg.count() == 0);
    CHECK(target.exported() == empty_state);
  }

  TEST_CASE("export needs a buffer of export_bytes and reports the bytes written") {
    Agg a(16);
    std::vector<uint8_t> out(StreamingAggregator::export_bytes(16) - 1);
    size_t written = 99;
    CHECK(a.agg.export_state({out.data(), out.size()}, &written) == Status::kBufferTooSmall);
    CHECK(written == 0);
    CHECK(a.agg.export_state({out.data(), out.size()}, nullptr) == Status::kInvalidArgument);
  }

  TEST_CASE("import rejects damaged or mismatched checkpoints and leaves the aggregate unchanged") {
    const size_t n = 64;
    const auto ups = make_updates(3, n, 5);
    Agg source(n);
    for (const auto& u : ups) REQUIRE(source.add(u.bytes, u.weight) == Status::kOk);
    const auto good = source.exported();

    Agg target(n);
    REQUIRE(target.add(ups[1].bytes, 3.0) == Status::kOk);
    const auto before = target.exported();

    auto expect = [&](std::vector<uint8_t> bytes, Status status, const char* what) {
      INFO(what);
      CHECK(target.agg.import_state({bytes.data(), bytes.size()}) == status);
      CHECK(target.exported() == before);
    };
    auto refix = [](std::vector<uint8_t>& b) {
      uint32_t crc = edgefl_test::crc32c_update(0, b.data(), 32);
      crc = edgefl_test::crc32c_update(crc, b.data() + 40, b.size() - 40);
      edgefl_test::store_u32(b, 32, crc);
    };
    auto store_f64 = [](std::vector<uint8_t>& b, size_t at, double v) {
      uint64_t bits;
      memcpy(&bits, &v, 8);
      edgefl_test::store_u32(b, at, uint32_t(bits));
      edgefl_test::store_u32(b, at + 4, uint32_t(bits >> 32));
    };

    expect({}, Status::kTruncated, "empty");
    expect(std::vector<uint8_t>(good.begin(), good.begin() + 39), Status::kTruncated, "header cut");
    expect(std::vector<uint8_t>(good.begin(), good.end() - 1), Status::kTruncated, "payload cut");
    auto longer = good;
    longer.push_back(0);
    expect(longer, Status::kSizeMismatch, "trailing byte");
    auto b = good;
    b[0] = 'X';
    expect(b, Status::kBadMagic, "magic");
    b = good;
    b[4] = 2;
    expect(b, Status::kUnsupportedVersion, "version 2");
    b = good;
    b[6] = 48;
    expect(b, Status::kBadParameters, "header bytes");
    b = good;
    b[12] = 1;
    expect(b, Status::kBadParameters, "flags");
    b = good;
    b[36] = 1;
    expect(b, Status::kBadParameters, "reserved");
    b = good;
    edgefl_test::store_u32(b, 8, n + 1);
    expect(b, Status::kDimensionMismatch, "dimension");
    for (size_t at : {16u, 24u, 32u, 40u, 100u, 40u + 8 * 63u + 7u}) {
      b = good;
      b[at] ^= 0x10;
      INFO("flipped byte ", at);
      expect(b, Status::kChecksumMismatch, "bit flip");
    }
    // Checksummed but inconsistent: a crafted checkpoint, not a damaged one.
    b = good;
    store_f64(b, 40 + 8 * 5, std::numeric_limits<double>::quiet_NaN());
    refix(b);
    expect(b, Status::kCorruptPayload, "NaN in the sum");
    b = good;
    store_f64(b, 40, std::numeric_limits<double>::infinity());
    refix(b);
    expect(b, Status::kCorruptPayload, "Inf in the sum");
    b = good;
    store_f64(b, 24, -1.0);
    refix(b);
    expect(b, Status::kCorruptPayload, "negative weight");
    b = good;
    edgefl_test::store_u32(b, 16, 0);
    refix(b);
    expect(b, Status::kCorruptPayload, "no updates but a weight");
    b = good;
    store_f64(b, 24, 1e13 * 3 + 1e12);
    refix(b);
    expect(b, Status::kCorruptPayload, "weight above count * max");
    // Still importable after all that.
    CHECK(target.agg.import_state({good.data(), good.size()}) == Status::kOk);
    CHECK(target.exported() == good);
  }

  TEST_CASE("a malformed update is rejected and leaves the aggregate bit-identical") {
    const size_t n = 256;
    const auto ups = make_updates(4, n, 6);
    Agg a(n);
    REQUIRE(a.add(ups[0].bytes, ups[0].weight) == Status::kOk);
    REQUIRE(a.add(ups[1].bytes, ups[1].weight) == Status::kOk);
    const auto before = a.exported();
    auto expect = [&](const std::vector<uint8_t>& bytes, double w, Status status, const char* what) {
      INFO(what);
      CHECK(a.add(bytes, w) == status);
      CHECK(a.exported() == before);  // sum, count and weight: same bytes
    };
    const auto& good = ups[2].bytes;
    expect({}, 1.0, Status::kTruncated, "empty");
    expect(std::vector<uint8_t>(good.begin(), good.end() - 1), 1.0, Status::kTruncated, "last byte missing");
    auto b = good;
    b[edgefl_test::wire::kHeaderBytes + (b.size() - edgefl_test::wire::kHeaderBytes) / 2] ^= 0x04;
    expect(b, 1.0, Status::kChecksumMismatch, "payload bit flip");
    b = good;
    b[0] ^= 0xFF;
    expect(b, 1.0, Status::kBadMagic, "magic");
    const auto other_n = edgefl_test::encode_ok("fp32", random_vector(n + 1, 9, 1.0f), 1);
    expect(other_n, 1.0, Status::kDimensionMismatch, "another dimension");
    // A payload made inconsistent, with the checksum fixed up: rejected by the decoder's checks.
    b = edgefl_test::encode_ok("topk:0.1+q4", random_vector(n, 10, 1.0f), 1);
    edgefl_test::store_u32(b, edgefl_test::wire::kN, n + 7);
    edgefl_test::fix_checksum(b);
    CHECK(a.add(b, 1.0) != Status::kOk);
    CHECK(a.exported() == before);
    // Bad weights.
    for (double w : {0.0, -1.0, std::nan(""), HUGE_VAL, 1e12 * 1.5}) {
      INFO("weight ", w);
      expect(good, w, Status::kInvalidArgument, "weight");
    }
    // The largest allowed weight is fine.
    CHECK(a.add(good, edgefl::kMaxUpdateWeight) == Status::kOk);
  }

  TEST_CASE("add_dense agrees bit for bit with a dense fp32 encoding of the same floats") {
    const size_t n = 333;
    Agg dense(n), encoded(n);
    for (uint64_t c = 0; c < 5; ++c) {
      const auto x = random_vector(n, 100 + c, 3.0f);
      const double w = 17.0 + double(c);
      REQUIRE(dense.agg.add_dense({x.data(), n}, w) == Status::kOk);
      REQUIRE(encoded.add(edgefl_test::encode_ok("fp32", x, c), w) == Status::kOk);
    }
    CHECK(dense.exported() == encoded.exported());
  }

  TEST_CASE("add_dense rejects non-finite values and wrong sizes, leaving the aggregate unchanged") {
    const size_t n = 8;
    Agg a(n);
    std::vector<float> x(n, 0.5f);
    REQUIRE(a.agg.add_dense({x.data(), n}, 2.0) == Status::kOk);
    const auto before = a.exported();
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()}) {
      auto y = x;
      y[n - 1] = bad;  // the last one: nothing may have been added before it was seen
      CHECK(a.agg.add_dense({y.data(), n}, 1.0) == Status::kNonFiniteInput);
      CHECK(a.exported() == before);
    }
    CHECK(a.agg.add_dense({x.data(), n - 1}, 1.0) == Status::kDimensionMismatch);
    CHECK(a.exported() == before);
  }

  TEST_CASE("mean of an empty aggregate, or into the wrong size, is an error that leaves out unchanged") {
    Agg a(4);
    std::vector<float> out(4, 7.0f);
    CHECK(a.agg.mean({out.data(), 4}) == Status::kInvalidArgument);
    const std::vector<float> x = {1, 2, 3, 4};
    REQUIRE(a.agg.add_dense({x.data(), 4}, 1.0) == Status::kOk);
    CHECK(a.agg.mean({out.data(), 3}) == Status::kDimensionMismatch);
    CHECK(out == std::vector<float>(4, 7.0f));
    REQUIRE(a.agg.mean({out.data(), 4}) == Status::kOk);
    CHECK(out == x);
  }

  TEST_CASE("weights are sample counts: the mean is sum(n_k x_k) / sum(n_k)") {
    Agg a(2);
    const std::vector<float> x1 = {1.0f, -2.0f}, x2 = {4.0f, 2.0f};
    REQUIRE(a.agg.add_dense({x1.data(), 2}, 100.0) == Status::kOk);
    REQUIRE(a.agg.add_dense({x2.data(), 2}, 300.0) == Status::kOk);
    const auto m = a.mean();
    CHECK(m[0] == 3.25f);  // (100 * 1 + 300 * 4) / 400
    CHECK(m[1] == 1.0f);   // (100 * -2 + 300 * 2) / 400
    a.agg.reset();
    CHECK(a.agg.count() == 0);
    CHECK(a.agg.total_weight() == 0.0);
    CHECK(a.agg.sum()[0] == 0.0);
  }

  TEST_CASE("memory does not grow with the number of clients") {
    // The aggregator's only memory is the caller's storage_bytes(n); 2000 updates later it has
    // written nothing outside it (the guard bytes around it are intact).
    const size_t n = 128;
    std::vector<uint8_t> buf(StreamingAggregator::storage_bytes(n) + 64, 0xA5);
    StreamingAggregator a;
    REQUIRE(a.init({buf.data() + 32, StreamingAggregator::storage_bytes(n)}, n) == Status::kOk);
    const auto x = random_vector(n, 1, 1.0f);
    const auto enc = edgefl_test::encode_ok("q8", x, 1);
    for (int c = 0; c < 2000; ++c) REQUIRE(a.add_encoded({enc.data(), enc.size()}, 1.0) == Status::kOk);
    CHECK(a.count() == 2000);
    for (size_t i = 0; i < 32; ++i) {
      CHECK(buf[i] == 0xA5);
      CHECK(buf[buf.size() - 1 - i] == 0xA5);
    }
  }

  // ----- server optimizers -------------------------------------------------------------------------

  TEST_CASE("optimizer specs parse with the documented defaults") {
    ServerOptimizerSpec s = opt_spec("fedavg");
    CHECK(s.kind == ServerOptimizerKind::kFedAvg);
    CHECK(s.lr == 1.0f);
    s = opt_spec("fedavg:lr=0.5");
    CHECK(s.lr == 0.5f);
    s = opt_spec("fedavgm");
    CHECK(s.kind == ServerOptimizerKind::kFedAvgM);
    CHECK(s.lr == 1.0f);
    CHECK(s.momentum == 0.9f);
    s = opt_spec("fedavgm:lr=1.0,momentum=0.99");
    CHECK(s.momentum == 0.99f);
    s = opt_spec("fedadam");
    CHECK(s.kind == ServerOptimizerKind::kFedAdam);
    CHECK(s.lr == 0.01f);
    CHECK(s.b1 == 0.9f);
    CHECK(s.b2 == 0.99f);
    CHECK(s.tau == 1e-3f);
    s = opt_spec("fedadam:lr=0.01,b1=0.9,b2=0.99,tau=1e-3");
    CHECK(s.tau == 0.001f);
    s = opt_spec("fedadam:tau=.5,b2=0,lr=3E-2");
    CHECK(s.tau == 0.5f);
    CHECK(s.b2 == 0.0f);
    CHECK(s.lr == 0.03f);
    CHECK(std::string(edgefl::server_optimizer_name(ServerOptimizerKind::kFedAdam)) == "fedadam");
  }

  TEST_CASE("malformed optimizer specs are rejected and leave the spec unchanged") {
    for (const char* text : {"",
                             "fedsgd",
                             "FEDAVG",
                             "fedavg:",
                             "fedavg:lr",
                             "fedavg:lr=",
                             "fedavg:lr=-1",
                             "fedavg:lr=0",
                             "fedavg:lr=1e7",
                             "fedavg:lr=1,",
                             "fedavg:lr=1,lr=2",
                             "fedavg:lr=abc",
                             "fedavg:lr=1x",
                             "fedavg:momentum=0.9",
                             "fedavgm:momentum=1",
                             "fedavgm:momentum=1.5",
                             "fedadam:b1=1",
                             "fedadam:b2=1.0",
                             "fedadam:tau=0",
                             "fedadam:eps=1e-8",
                             "fedadam:lr=inf",
                             "fedadam:lr=nan",
                             "fedavg :lr=1",
                             "fedavg:lr=1 "}) {
      ServerOptimizerSpec s;
      s.lr = 42.0f;
      INFO("spec: '", text, "'");
      CHECK(edgefl::parse_server_optimizer_spec(text, &s) == Status::kInvalidSpec);
      CHECK(s.lr == 42.0f);
    }
    ServerOptimizerSpec s;
    CHECK(edgefl::parse_server_optimizer_spec(nullptr, &s) == Status::kInvalidArgument);
  }

  TEST_CASE("optimizer state sizes: none for FedAvg, one vector for FedAvgM, two for FedAdam") {
    CHECK(ServerOptimizer::state_bytes(ServerOptimizerKind::kFedAvg, 1000) == 0);
    CHECK(ServerOptimizer::state_bytes(ServerOptimizerKind::kFedAvgM, 1000) == 4000);
    CHECK(ServerOptimizer::state_bytes(ServerOptimizerKind::kFedAdam, 1000) == 8000);
    ServerOptimizer opt;
    std::vector<uint8_t> state(7999);
    CHECK(opt.init(opt_spec("fedadam"), {state.data(), state.size()}, 1000) == Status::kInvalidArgument);
    CHECK(opt.init(opt_spec("fedavg"), {}, 1000) == Status::kOk);
    ServerOptimizerSpec bad;
    bad.lr = -1.0f;
    CHECK(opt.init(bad, {}, 10) == Status::kInvalidSpec);
    std::vector<float> g(10), d(10);
    CHECK(opt.apply({g.data(), 10}, {d.data(), 10}) == Status::kInvalidArgument);  // init failed
  }

  TEST_CASE("FedAvg adds lr times the mean delta") {
    Opt o("fedavg:lr=0.5", 3);
    std::vector<float> g = {1.0f, -2.0f, 0.5f};
    REQUIRE(o.apply(g, {0.5f, 0.25f, -1.0f}) == Status::kOk);
    CHECK(g == std::vector<float>{1.25f, -1.875f, 0.0f});
    CHECK(o.opt.steps() == 1);
  }

  TEST_CASE("FedAvgM accumulates momentum: v = momentum v + delta, global += lr v") {
    Opt o("fedavgm:lr=1,momentum=0.5", 2);
    std::vector<float> g = {0.0f, 0.0f};
    REQUIRE(o.apply(g, {1.0f, 2.0f}) == Status::kOk);  // v = (1, 2)
    CHECK(g == std::vector<float>{1.0f, 2.0f});
    CHECK(o.opt.momentum(1) == 2.0f);
    REQUIRE(o.apply(g, {1.0f, -2.0f}) == Status::kOk);  // v = (0.5 + 1, 1 - 2) = (1.5, -1)
    CHECK(g == std::vector<float>{2.5f, 1.0f});
    CHECK(o.opt.momentum(0) == 1.5f);
    REQUIRE(o.apply(g, {0.0f, 0.0f}) == Status::kOk);  // v = (0.75, -0.5): momentum alone moves on
    CHECK(g == std::vector<float>{3.25f, 0.5f});
    o.opt.reset();
    CHECK(o.opt.momentum(0) == 0.0f);
    CHECK(o.opt.steps() == 0);
  }

  TEST_CASE("FedAdam follows Reddi et al.: m, v moments, step lr m / (sqrt(v) + tau), v starting at tau^2") {
    Opt o("fedadam:lr=0.1,b1=0.5,b2=0.5,tau=1", 2);
    CHECK(o.opt.second_moment(0) == 1.0f);  // tau^2
    std::vector<float> g = {0.0f, 1.0f};
    // Step 1, delta (7, -1):  m = 0.5 * 0 + 0.5 * d = (3.5, -0.5);  v = 0.5 * 1 + 0.5 * d^2 = (25, 1);
    // global += 0.1 * m / (sqrt(v) + 1) = (0.35 / 6, -0.05 / 2) = (0.058333.., -0.025).
    REQUIRE(o.apply(g, {7.0f, -1.0f}) == Status::kOk);
    CHECK(o.opt.momentum(0) == 3.5f);
    CHECK(o.opt.second_moment(0) == 25.0f);
    CHECK(o.opt.second_moment(1) == 1.0f);
    CHECK(g[0] == doctest::Approx(0.35 / 6.0).epsilon(1e-6));
    CHECK(g[1] == 0.975f);
    // Step 2, delta (1, 3):  m = (0.5 * 3.5 + 0.5, -0.25 + 1.5) = (2.25, 1.25);
    // v = (0.5 * 25 + 0.5, 0.5 + 4.5) = (13, 5);  global += 0.1 * m / (sqrt(v) + 1).
    REQUIRE(o.apply(g, {1.0f, 3.0f}) == Status::kOk);
    CHECK(o.opt.momentum(0) == 2.25f);
    CHECK(o.opt.second_moment(1) == 5.0f);
    CHECK(g[0] == doctest::Approx(0.35 / 6.0 + 0.225 / (std::sqrt(13.0) + 1.0)).epsilon(1e-6));
    CHECK(g[1] == doctest::Approx(0.975 + 0.125 / (std::sqrt(5.0) + 1.0)).epsilon(1e-6));
    // Adaptivity: with b1 = b2 = 0 and a tiny tau the step is lr * sign(delta), whatever its size.
    Opt sign("fedadam:lr=0.01,b1=0,b2=0,tau=1e-6", 3);
    std::vector<float> h = {0.0f, 0.0f, 0.0f};
    REQUIRE(sign.apply(h, {1000.0f, -0.5f, 3.0f}) == Status::kOk);
    CHECK(h[0] == doctest::Approx(0.01).epsilon(1e-5));
    CHECK(h[1] == doctest::Approx(-0.01).epsilon(1e-5));
    CHECK(h[2] == doctest::Approx(0.01).epsilon(1e-5));
  }

  TEST_CASE("a rejected optimizer step changes neither the model nor the state") {
    for (const char* spec : {"fedavg", "fedavgm:momentum=0.9", "fedadam:lr=1"}) {
      INFO("spec ", spec);
      Opt o(spec, 3);
      std::vector<float> g = {1.0f, 2.0f, 3.0f};
      REQUIRE(o.apply(g, {0.1f, 0.2f, 0.3f}) == Status::kOk);
      const auto g_before = g;
      const auto state_before = o.state;
      CHECK(o.apply(g, {0.1f, 0.2f, std::numeric_limits<float>::quiet_NaN()}) == Status::kNonFiniteInput);
      CHECK(o.apply(g, {0.1f, std::numeric_limits<float>::infinity(), 0.3f}) == Status::kNonFiniteInput);
      CHECK(o.apply(g, {0.1f, 0.2f}) == Status::kDimensionMismatch);
      // Overflow: the new global of the last coordinate would be +Inf.
      std::vector<float> big = g;
      big[2] = 3.0e38f;
      const auto big_before = big;
      CHECK(o.apply(big, {1.0f, 1.0f, 3.0e38f}) == Status::kValueOutOfRange);
      CHECK(big == big_before);
      CHECK(g == g_before);
      CHECK(o.state == state_before);
      CHECK(o.opt.steps() == 1);
    }
  }

  TEST_CASE("one FedAvg round: aggregate the clients' deltas, apply with lr 1, get the weighted mean model") {
    const size_t n = 64;
    std::vector<float> global = random_vector(n, 50, 1.0f);
    std::vector<std::vector<float>> local(3);
    const double samples[3] = {100, 250, 650};
    Agg agg(n);
    for (size_t c = 0; c < 3; ++c) {
      local[c] = global;
      const auto noise = random_vector(n, 60 + c, 0.1f);
      std::vector<float> delta(n);
      for (size_t i = 0; i < n; ++i) {
        local[c][i] += noise[i];
        delta[i] = local[c][i] - global[i];
      }
      REQUIRE(agg.add(edgefl_test::encode_ok("fp32", delta, c), samples[c]) == Status::kOk);
    }
    const auto mean = agg.mean();
    Opt opt("fedavg", n);
    std::vector<float> next = global;
    REQUIRE(opt.apply(next, mean) == Status::kOk);
    for (size_t i = 0; i < n; ++i) {
      double expect = 0;
      for (size_t c = 0; c < 3; ++c) expect += samples[c] * double(local[c][i]);
      expect /= 1000.0;
      CHECK(next[i] == doctest::Approx(expect).epsilon(1e-6));
    }
  }

}  // TEST_SUITE("aggregate")
