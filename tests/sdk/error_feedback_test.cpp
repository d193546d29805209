// tests/sdk/error_feedback_test.cpp: the error-feedback residual (error_feedback.h).
#include <math.h>
#include <string.h>

#include <vector>

#include "edgefl/error_feedback.h"
#include "support/bench_data.h"
#include "support/codec_util.h"

namespace {

using edgefl::CodecSpec;
using edgefl::ErrorFeedback;
using edgefl::ResidualPrecision;
using edgefl::Status;
using edgefl_test::decode_ok;
using edgefl_test::parse_or_fail;

// One client: its residual storage (at an odd address, to prove "any alignment") and buffers.
struct Client {
  Client(size_t n_, ResidualPrecision p) : n(n_) {
    storage.resize(ErrorFeedback::storage_bytes(n, p) + 1);
    REQUIRE(ef.init({storage.data() + 1, storage.size() - 1}, n, p) == Status::kOk);
  }
  // Encodes `update` through the residual; returns the bytes.
  Status encode(const CodecSpec& spec, std::vector<float> update, uint64_t seed,
                std::vector<uint8_t>* bytes) {
    std::vector<uint8_t> work(edgefl::workspace_size(spec, n));
    bytes->assign(edgefl::encoded_bound(spec, n), 0);
    size_t written = 77;
    const Status s = ef.encode(spec, {update.data(), update.size()}, seed, {work.data(), work.size()},
                               {bytes->data(), bytes->size()}, &written);
    if (s == Status::kOk) {
      bytes->resize(written);
    } else {
      CHECK(written == 0);
    }
    return s;
  }
  bool residual_sq_norm_is_zero() const { return ef.residual_sq_norm() == 0.0; }
  std::vector<float> residual() const {
    std::vector<float> r(n);
    for (size_t i = 0; i < n; ++i) r[i] = ef.residual(i);
    return r;
  }

  size_t n;
  std::vector<uint8_t> storage;
  ErrorFeedback ef;
};

const char* const kSpecs[] = {"topk:0.01+q4", "sign", "q2", "topk:0.1", "randk:0.1+q8", "hq2"};

}  // namespace

TEST_SUITE("error_feedback") {
  TEST_CASE("storage is four bytes per coordinate in fp32 and two in bf16") {
    for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{1} << 20}) {
      INFO("n: ", n);
      CHECK(ErrorFeedback::storage_bytes(n, ResidualPrecision::kFp32) == 4 * n);
      const size_t bf16 = ErrorFeedback::storage_bytes(n, ResidualPrecision::kBf16);
      CHECK(bf16 >= 2 * n);
      CHECK(bf16 <= 2 * n + 16);
    }
  }

  TEST_CASE("init zeroes the residual and rejects storage that is too small") {
    for (ResidualPrecision p : {ResidualPrecision::kFp32, ResidualPrecision::kBf16}) {
      const size_t n = 1000;
      std::vector<uint8_t> storage(ErrorFeedback::storage_bytes(n, p), 0xFF);
      ErrorFeedback ef;
      CHECK(ef.init({storage.data(), storage.size() - 1}, n, p) == Status::kInvalidArgument);
      REQUIRE(ef.init({storage.data(), storage.size()}, n, p) == Status::kOk);
      CHECK(ef.size() == n);
      CHECK(ef.precision() == p);
      CHECK(ef.residual_sq_norm() == 0.0);
      for (size_t i = 0; i < n; ++i) REQUIRE(ef.residual(i) == 0.0f);
    }
  }

  TEST_CASE("the residual plus the decoded update is the compensated input, in fp32") {
    const size_t n = 4099;
    for (const char* text : kSpecs) {
      INFO("spec: ", std::string(text));
      const CodecSpec spec = parse_or_fail(text);
      Client c(n, ResidualPrecision::kFp32);
      std::vector<float> previous(n, 0.0f);
      for (int round = 0; round < 3; ++round) {
        INFO("round: ", round);
        const std::vector<float> update = edgefl_test::gaussian_vector(n, 100 + round);
        std::vector<uint8_t> bytes;
        REQUIRE(c.encode(spec, update, 7 + round, &bytes) == Status::kOk);
        const std::vector<float> decoded = decode_ok(bytes, n);
        const std::vector<float> r = c.residual();
        size_t bad = 0;
        for (size_t i = 0; i < n; ++i) {
          const double compensated = static_cast<double>(update[i]) + previous[i];
          const double scale = fabs(compensated) + fabs(static_cast<double>(decoded[i]));
          // Two float roundings: update + residual, then minus decoded.
          if (fabs(r[i] + static_cast<double>(decoded[i]) - compensated) > 2.5e-7 * scale + 1e-30) ++bad;
        }
        CHECK(bad == 0);
        double sq = 0;
        for (float v : r) sq += static_cast<double>(v) * v;
        CHECK(fabs(c.ef.residual_sq_norm() - sq) <= 1e-9 * sq + 1e-30);
        previous = r;
      }
    }
  }

  TEST_CASE("the bf16 residual holds the dropped part within bf16 rounding") {
    const size_t n = 4099;
    for (const char* text : kSpecs) {
      INFO("spec: ", std::string(text));
      const CodecSpec spec = parse_or_fail(text);
      Client c(n, ResidualPrecision::kBf16);
      std::vector<float> previous(n, 0.0f);
      for (int round = 0; round < 3; ++round) {
        const std::vector<float> update = edgefl_test::gaussian_vector(n, 200 + round);
        std::vector<uint8_t> bytes;
        REQUIRE(c.encode(spec, update, 3, &bytes) == Status::kOk);
        const std::vector<float> decoded = decode_ok(bytes, n);
        const std::vector<float> r = c.residual();
        size_t bad = 0, not_bf16 = 0;
        for (size_t i = 0; i < n; ++i) {
          if (edgefl_test::bf16_round(r[i]) != r[i]) ++not_bf16;
          const double compensated = static_cast<double>(update[i]) + previous[i];
          const double dropped = compensated - decoded[i];
          const double tol =
              ldexp(fabs(dropped), -8) + 2.5e-7 * (fabs(compensated) + fabs(decoded[i])) * 2 + 1e-30;
          if (fabs(r[i] - dropped) > tol) ++bad;
        }
        CHECK(not_bf16 == 0);
        CHECK(bad == 0);
        previous = r;
      }
    }
  }

  TEST_CASE("over several rounds nothing is lost: sent plus residual equals the sum of updates") {
    const size_t n = 4099;
    for (const char* text : kSpecs) {
      INFO("spec: ", std::string(text));
      const CodecSpec spec = parse_or_fail(text);
      Client c(n, ResidualPrecision::kFp32);
      std::vector<double> sum_in(n, 0.0), sum_sent(n, 0.0);
      double max_abs = 0;
      const int rounds = 5;
      for (int round = 0; round < rounds; ++round) {
        const std::vector<float> update = edgefl_test::gaussian_vector(n, 300 + round);
        std::vector<uint8_t> bytes;
        REQUIRE(c.encode(spec, update, 11 + round, &bytes) == Status::kOk);
        const std::vector<float> decoded = decode_ok(bytes, n);
        for (size_t i = 0; i < n; ++i) {
          sum_in[i] += update[i];
          sum_sent[i] += decoded[i];
          max_abs = fmax(max_abs, fmax(fabs(update[i]), fabs(decoded[i])));
          max_abs = fmax(max_abs, fabs(c.ef.residual(i)));
        }
      }
      size_t bad = 0;
      for (size_t i = 0; i < n; ++i)
        if (fabs(sum_sent[i] + c.ef.residual(i) - sum_in[i]) > 4 * rounds * 1.2e-7 * max_abs) ++bad;
      CHECK(bad == 0);
    }
  }

  TEST_CASE("error feedback makes top-k converge on a fixed update") {
    // With a constant update g, after R rounds the sum sent is R*g - residual, and the residual is
    // bounded: the average sent per round approaches g.
    const size_t n = 2000;
    const CodecSpec spec = parse_or_fail("topk:0.05");
    Client c(n, ResidualPrecision::kFp32);
    const std::vector<float> g = edgefl_test::gaussian_vector(n, 400);
    std::vector<double> sent(n, 0.0);
    const int rounds = 200;
    for (int round = 0; round < rounds; ++round) {
      std::vector<uint8_t> bytes;
      REQUIRE(c.encode(spec, g, 1, &bytes) == Status::kOk);
      const std::vector<float> d = decode_ok(bytes, n);
      for (size_t i = 0; i < n; ++i) sent[i] += d[i];
    }
    double err = 0, norm = 0;
    for (size_t i = 0; i < n; ++i) {
      err += (sent[i] / rounds - g[i]) * (sent[i] / rounds - g[i]);
      norm += static_cast<double>(g[i]) * g[i];
    }
    CHECK(err / norm < 0.05);
  }

  TEST_CASE("a failed encode leaves the residual unchanged") {
    const size_t n = 1000;
    for (ResidualPrecision p : {ResidualPrecision::kFp32, ResidualPrecision::kBf16}) {
      const CodecSpec spec = parse_or_fail("topk:0.01+q4");
      Client c(n, p);
      std::vector<uint8_t> bytes;
      REQUIRE(c.encode(spec, edgefl_test::gaussian_vector(n, 1), 1, &bytes) == Status::kOk);
      const std::vector<uint8_t> storage_before = c.storage;
      REQUIRE(c.ef.residual_sq_norm() > 0);

      std::vector<float> bad = edgefl_test::gaussian_vector(n, 2);
      bad[n - 1] = NAN;
      CHECK(c.encode(spec, bad, 1, &bytes) == Status::kNonFiniteInput);
      CHECK(c.storage == storage_before);

      // Too little workspace and too little output.
      std::vector<float> update = edgefl_test::gaussian_vector(n, 3);
      const size_t ws = edgefl::workspace_size(spec, n);
      std::vector<uint8_t> work(ws), out(edgefl::encoded_bound(spec, n));
      size_t written = 1;
      if (ws > 0) {
        CHECK(c.ef.encode(spec, {update.data(), n}, 1, {work.data(), ws - 1}, {out.data(), out.size()},
                          &written) == Status::kWorkspaceTooSmall);
        CHECK(c.storage == storage_before);
      }
      CHECK(c.ef.encode(spec, {update.data(), n}, 1, {work.data(), ws}, {out.data(), out.size() - 1},
                        &written) == Status::kBufferTooSmall);
      CHECK(c.storage == storage_before);
      CHECK(c.ef.encode(spec, {update.data(), n - 1}, 1, {work.data(), ws}, {out.data(), out.size()},
                        &written) == Status::kDimensionMismatch);
      CHECK(c.storage == storage_before);
      CodecSpec invalid = spec;
      invalid.bits = 3;
      CHECK(c.ef.encode(invalid, {update.data(), n}, 1, {work.data(), ws}, {out.data(), out.size()},
                        &written) == Status::kInvalidSpec);
      CHECK(c.storage == storage_before);
    }
  }

  TEST_CASE("random-k reads only what it carries, but error feedback refuses NaN or Inf anywhere") {
    // A NaN that random-k does not carry would stay in the residual and come back in a later
    // round: ErrorFeedback checks every coordinate and changes nothing.
    const size_t n = 1000;
    const CodecSpec spec = parse_or_fail("randk:0.01+fp32");
    for (float bad_value : {NAN, INFINITY}) {
      Client c(n, ResidualPrecision::kFp32);
      std::vector<uint8_t> bytes;
      REQUIRE(c.encode(spec, edgefl_test::gaussian_vector(n, 1), 1, &bytes) == Status::kOk);
      const std::vector<uint8_t> storage_before = c.storage;
      for (size_t at = 0; at < n; at += 97) {
        CAPTURE(at);
        std::vector<float> bad = edgefl_test::gaussian_vector(n, 2);
        bad[at] = bad_value;
        CHECK(c.encode(spec, bad, 2, &bytes) == Status::kNonFiniteInput);
        CHECK(c.storage == storage_before);
      }
    }
  }

  TEST_CASE("restore gives an uncounted update back: the residual is the compensated input again") {
    // Round 1 is encoded and never counted (a secure round abandoned after its ack): restore()
    // makes the residual update + previous residual, so round 2 sends what both rounds owed.
    const size_t n = 2053;
    for (ResidualPrecision p : {ResidualPrecision::kFp32, ResidualPrecision::kBf16}) {
      for (const char* text : {"q8:shared=0.05", "topk:0.01+q4", "q2", "randk:0.1+q8"}) {
        INFO("spec: ", std::string(text), ", bf16: ", p == ResidualPrecision::kBf16);
        const CodecSpec spec = parse_or_fail(text);
        Client c(n, p);
        std::vector<uint8_t> first, lost;
        REQUIRE(c.encode(spec, edgefl_test::gaussian_vector(n, 1), 3, &first) == Status::kOk);
        const std::vector<float> before = c.residual();
        const std::vector<float> update = edgefl_test::gaussian_vector(n, 2);
        REQUIRE(c.encode(spec, update, 4, &lost) == Status::kOk);
        std::vector<float> scratch(n);
        std::vector<uint8_t> work(edgefl::workspace_size(spec, n));
        REQUIRE(c.ef.restore({lost.data(), lost.size()}, {scratch.data(), n}, {work.data(), work.size()}) ==
                Status::kOk);
        const std::vector<float> r = c.residual();
        const std::vector<float> decoded = decode_ok(lost, n);
        size_t bad = 0;
        for (size_t i = 0; i < n; ++i) {
          const double owed = double(update[i]) + double(before[i]);
          // Two roundings: of owed - decoded (the encode's residual), then of owed (the restore);
          // 2^-8 relative each in bf16, float rounding in fp32.
          const double scale = fabs(owed - double(decoded[i])) + fabs(owed);
          const double tolerance = (p == ResidualPrecision::kBf16 ? 0.004 : 2.5e-7) * scale + 1e-30;
          if (fabs(double(r[i]) - owed) > tolerance) ++bad;
        }
        CHECK(bad == 0);
      }
    }
  }

  TEST_CASE(
      "restore refuses another dimension, a corrupt encoding and non-finite values, and changes nothing") {
    const size_t n = 1000;
    const CodecSpec spec = parse_or_fail("q8:shared=0.05");
    Client c(n, ResidualPrecision::kFp32);
    std::vector<uint8_t> bytes;
    REQUIRE(c.encode(spec, edgefl_test::gaussian_vector(n, 1), 1, &bytes) == Status::kOk);
    const std::vector<uint8_t> storage_before = c.storage;
    std::vector<float> scratch(n);
    std::vector<uint8_t> work(edgefl::workspace_size(spec, n));
    CHECK(c.ef.restore({bytes.data(), bytes.size()}, {scratch.data(), n - 1}, {work.data(), work.size()}) ==
          Status::kDimensionMismatch);
    CHECK(c.storage == storage_before);
    Client other(n + 1, ResidualPrecision::kFp32);  // an encoding of another dimension
    std::vector<float> scratch1(n + 1);
    CHECK(other.ef.restore({bytes.data(), bytes.size()}, {scratch1.data(), n + 1},
                           {work.data(), work.size()}) != Status::kOk);
    CHECK(other.residual_sq_norm_is_zero());
    std::vector<uint8_t> truncated(bytes.begin(), bytes.end() - 1);
    CHECK(c.ef.restore({truncated.data(), truncated.size()}, {scratch.data(), n},
                       {work.data(), work.size()}) != Status::kOk);
    CHECK(c.storage == storage_before);
    // A residual near the float maximum plus a decoded value overflows to infinity: refused.
    std::vector<float> huge(n, 3.0e38f);
    Client big(n, ResidualPrecision::kFp32);
    std::vector<uint8_t> huge_bytes;
    const CodecSpec fp32 = parse_or_fail("fp32");
    REQUIRE(big.encode(parse_or_fail("topk:0.001+fp32"), huge, 1, &huge_bytes) == Status::kOk);
    const std::vector<uint8_t> big_before = big.storage;
    std::vector<uint8_t> dense;
    Client sender(n, ResidualPrecision::kFp32);
    REQUIRE(sender.encode(fp32, huge, 1, &dense) == Status::kOk);
    std::vector<uint8_t> work32(edgefl::workspace_size(fp32, n));
    CHECK(big.ef.restore({dense.data(), dense.size()}, {scratch.data(), n}, {work32.data(), work32.size()}) ==
          Status::kNonFiniteInput);
    CHECK(big.storage == big_before);
  }

  TEST_CASE("reset zeroes the residual") {
    Client c(500, ResidualPrecision::kBf16);
    std::vector<uint8_t> bytes;
    REQUIRE(c.encode(parse_or_fail("sign"), edgefl_test::gaussian_vector(500, 1), 1, &bytes) == Status::kOk);
    REQUIRE(c.ef.residual_sq_norm() > 0);
    c.ef.reset();
    CHECK(c.ef.residual_sq_norm() == 0.0);
    CHECK(c.residual() == std::vector<float>(500, 0.0f));
  }

  TEST_CASE("encoding through an unbound residual is an error") {
    ErrorFeedback ef;
    const CodecSpec spec = parse_or_fail("q8");
    std::vector<float> update(10, 1.0f);
    std::vector<uint8_t> out(edgefl::encoded_bound(spec, 10));
    size_t written = 3;
    CHECK(ef.encode(spec, {update.data(), 10}, 1, {nullptr, 0}, {out.data(), out.size()}, &written) ==
          Status::kDimensionMismatch);
    CHECK(written == 0);
  }

}  // TEST_SUITE
