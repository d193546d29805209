// tests/sdk/codec_add_test.cpp: summing encodings without decoding (add_encoded).
#include <math.h>

#include <stdint.h>

#include <string>
#include <vector>

#include "edgefl/codec.h"
#include "support/bench_data.h"
#include "support/codec_util.h"

namespace {

using edgefl::EncodedInfo;
using edgefl::Status;
using edgefl_test::decode_ok;
using edgefl_test::encode_ok;
using edgefl_test::inspect_ok;

struct Sum {
  Status status;
  std::vector<uint8_t> bytes;
};

// add_encoded into an output of exactly add_encoded_bound() bytes (when both operands inspect).
Sum add(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  EncodedInfo ia, ib;
  size_t cap = 1 << 20;
  if (edgefl::inspect({a.data(), a.size()}, &ia) == Status::kOk &&
      edgefl::inspect({b.data(), b.size()}, &ib) == Status::kOk)
    cap = edgefl::add_encoded_bound(ia, ib);
  Sum s;
  s.bytes.assign(cap, 0);
  size_t written = 12345;
  s.status = edgefl::add_encoded({a.data(), a.size()}, {b.data(), b.size()}, {s.bytes.data(), cap}, &written);
  if (s.status == Status::kOk) {
    REQUIRE(written <= cap);
    s.bytes.resize(written);
  } else {
    CHECK(written == 0);
  }
  return s;
}

std::vector<uint8_t> add_ok(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  Sum s = add(a, b);
  REQUIRE(s.status == Status::kOk);
  return s.bytes;
}

std::vector<float> plus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> c(a.size());
  for (size_t i = 0; i < a.size(); ++i) c[i] = a[i] + b[i];
  return c;
}

// 2^-7: codes * step and their sums are exact in float.
constexpr const char* kShared = "q8:shared=0.0078125";

}  // namespace

TEST_SUITE("codec.add") {
  TEST_CASE("shared-scale encodings add exactly as integers") {
    const size_t n = 4099;
    const std::vector<float> x = edgefl_test::uniform_vector(n, 1, -0.9, 0.9);  // |code| <= 116
    const std::vector<float> y = edgefl_test::uniform_vector(n, 2, -0.9, 0.9);
    const std::vector<uint8_t> a = encode_ok(kShared, x, 10), b = encode_ok(kShared, y, 11);
    const std::vector<uint8_t> sum = add_ok(a, b);
    const EncodedInfo info = inspect_ok(sum);
    CHECK(info.contributions == 2);
    CHECK(info.n == n);
    CHECK(info.shared_scale);
    CHECK(info.param == 0.0078125f);
    CHECK(edgefl_test::same_bits(decode_ok(sum, n), plus(decode_ok(a, n), decode_ok(b, n))));
    // Commutative (the bytes may differ in informational fields such as the seed).
    CHECK(edgefl_test::same_bits(decode_ok(add_ok(b, a), n), decode_ok(sum, n)));
  }

  TEST_CASE("the sum of two encodings fits add_encoded_bound and needs that much room at most") {
    const size_t n = 1000;
    const std::vector<uint8_t> a = encode_ok(kShared, edgefl_test::uniform_vector(n, 1, -0.9, 0.9), 1);
    const std::vector<uint8_t> b = encode_ok(kShared, edgefl_test::uniform_vector(n, 2, -0.9, 0.9), 2);
    const EncodedInfo ia = inspect_ok(a), ib = inspect_ok(b);
    const size_t bound = edgefl::add_encoded_bound(ia, ib);
    std::vector<uint8_t> out(bound);
    size_t written = 0;
    REQUIRE(edgefl::add_encoded({a.data(), a.size()}, {b.data(), b.size()}, {out.data(), bound}, &written) ==
            Status::kOk);
    CHECK(written <= bound);
    std::vector<uint8_t> none(8);
    CHECK(edgefl::add_encoded({a.data(), a.size()}, {b.data(), b.size()}, {none.data(), none.size()},
                              &written) == Status::kBufferTooSmall);
    CHECK(written == 0);
  }

  TEST_CASE("random-k encodings with a shared seed add, scaled and shared-scale") {
    const size_t n = 4099;
    const std::vector<float> x = edgefl_test::uniform_vector(n, 3, -0.09, 0.09);  // x n/k within 8 bits
    const std::vector<float> y = edgefl_test::uniform_vector(n, 4, -0.09, 0.09);
    for (const char* text : {"randk:0.1+q8:shared=0.0078125", "randk:0.1,unscaled+q8:shared=0.0078125"}) {
      INFO("spec: ", std::string(text));
      const std::vector<uint8_t> a = encode_ok(text, x, 77), b = encode_ok(text, y, 77);
      const std::vector<uint8_t> sum = add_ok(a, b);
      CHECK(inspect_ok(sum).contributions == 2);
      CHECK(inspect_ok(sum).seed == 77);
      CHECK(inspect_ok(sum).nnz == inspect_ok(a).nnz);
      CHECK(edgefl_test::same_bits(decode_ok(sum, n), plus(decode_ok(a, n), decode_ok(b, n))));
    }
  }

  TEST_CASE("fp32 encodings add as floats, dense or random-k") {
    const size_t n = 4099;
    const std::vector<float> x = edgefl_test::gaussian_vector(n, 5), y = edgefl_test::gaussian_vector(n, 6);
    for (const char* text : {"fp32", "randk:0.1"}) {
      INFO("spec: ", std::string(text));
      const std::vector<uint8_t> a = encode_ok(text, x, 3), b = encode_ok(text, y, 3);
      EncodedInfo ia = inspect_ok(a);
      CHECK(edgefl::is_summable(ia));
      const std::vector<uint8_t> sum = add_ok(a, b);
      CHECK(inspect_ok(sum).contributions == 2);
      CHECK(edgefl_test::same_bits(decode_ok(sum, n), plus(decode_ok(a, n), decode_ok(b, n))));
    }
  }

  TEST_CASE("random-k encodings with different seeds are kIncompatible") {
    const std::vector<float> x = edgefl_test::gaussian_vector(1000, 5);
    for (const char* text : {"randk:0.1+q8:shared=0.5", "randk:0.1"}) {  // |x| n/k / 0.5 < 127
      INFO("spec: ", std::string(text));
      CHECK(add(encode_ok(text, x, 1), encode_ok(text, x, 2)).status == Status::kIncompatible);
    }
    // Same seed, different k.
    CHECK(add(encode_ok("randk:0.1", x, 1), encode_ok("randk:0.2", x, 1)).status == Status::kIncompatible);
  }

  TEST_CASE("per-client scales and client-chosen indices are kNotSummable") {
    const std::vector<float> x = edgefl_test::gaussian_vector(1000, 5);
    for (const char* text : {"topk:0.1", "topk:0.1+q8:shared=0.5", "q8", "q4:block=64", "qsgd", "sign",
                             "tern", "hq4", "thresh:0.5", "fp16", "bf16", "randk:0.1+q8"}) {
      INFO("spec: ", std::string(text));
      const std::vector<uint8_t> a = encode_ok(text, x, 1);
      CHECK_FALSE(edgefl::is_summable(inspect_ok(a)));
      CHECK(add(a, a).status == Status::kNotSummable);
    }
    // rANS-coded shared codes are a stream, not integers in place (small values: ans pays).
    std::vector<float> small = x;
    for (float& v : small) v *= 0.01f;
    for (const char* text : {"q8:shared=0.0625,ans", "randk:0.5+q8:shared=0.5,ans"}) {
      INFO("spec: ", std::string(text));
      const std::vector<uint8_t> a = encode_ok(text, small, 1);
      REQUIRE(inspect_ok(a).entropy_coded);
      CHECK_FALSE(edgefl::is_summable(inspect_ok(a)));
      CHECK(add(a, a).status == Status::kNotSummable);
    }
    for (const char* text :
         {"q8:shared=0.0625", "fp32", "randk:0.1", "randk:0.1+q8:shared=0.5"}) {  // in range
      INFO("spec: ", std::string(text));
      CHECK(edgefl::is_summable(inspect_ok(encode_ok(text, x, 1))));
    }
  }

  TEST_CASE("encodings of different shapes or scales are kIncompatible") {
    const std::vector<float> x = edgefl_test::uniform_vector(1000, 5, -0.5, 0.5);
    const std::vector<float> shorter(x.begin(), x.begin() + 999);
    CHECK(add(encode_ok(kShared, x, 1), encode_ok(kShared, shorter, 1)).status == Status::kIncompatible);
    CHECK(add(encode_ok("fp32", x, 1), encode_ok("fp32", shorter, 1)).status == Status::kIncompatible);
    CHECK(add(encode_ok(kShared, x, 1), encode_ok("q8:shared=0.015625", x, 1)).status ==
          Status::kIncompatible);
    CHECK(add(encode_ok(kShared, x, 1), encode_ok("fp32", x, 1)).status == Status::kIncompatible);
    CHECK(add(encode_ok("randk:0.1", x, 1), encode_ok("fp32", x, 1)).status == Status::kIncompatible);
    CHECK(add(encode_ok("randk:0.1", x, 1), encode_ok("randk:0.1,unscaled", x, 1)).status ==
          Status::kIncompatible);
  }

  TEST_CASE("two hundred adds widen the code width and stay exact") {
    const size_t n = 1000;
    std::vector<uint8_t> acc = encode_ok(kShared, edgefl_test::uniform_vector(n, 0, 0.5, 0.99), 0);
    std::vector<float> expect = decode_ok(acc, n);
    for (int i = 1; i < 200; ++i) {
      // Positive values only: the sums grow to 200 * 127 codes, which needs 16 bits.
      const std::vector<uint8_t> next = encode_ok(kShared, edgefl_test::uniform_vector(n, i, 0.5, 0.99), i);
      expect = plus(expect, decode_ok(next, n));
      acc = add_ok(i % 2 ? acc : next, i % 2 ? next : acc);
    }
    const EncodedInfo info = inspect_ok(acc);
    CHECK(info.contributions == 200);
    CHECK(info.bits >= 15);  // 200 * 127 > 2^14
    CHECK(info.bits <= 32);
    CHECK(edgefl_test::same_bits(decode_ok(acc, n), expect));
  }

  TEST_CASE("sums of encodings that were themselves sums stay exact") {
    const size_t n = 257;
    std::vector<std::vector<uint8_t>> parts;
    std::vector<float> expect(n, 0.0f);
    for (int i = 0; i < 8; ++i) {
      parts.push_back(encode_ok(kShared, edgefl_test::uniform_vector(n, 50 + i, -0.99, 0.99), i));
      expect = plus(expect, decode_ok(parts.back(), n));
    }
    // A balanced tree: ((0+1)+(2+3)) + ((4+5)+(6+7)).
    while (parts.size() > 1) {
      std::vector<std::vector<uint8_t>> next;
      for (size_t i = 0; i + 1 < parts.size(); i += 2) next.push_back(add_ok(parts[i], parts[i + 1]));
      parts = next;
    }
    CHECK(inspect_ok(parts[0]).contributions == 8);
    CHECK(edgefl_test::same_bits(decode_ok(parts[0], n), expect));
  }

  TEST_CASE("doubling a sum widens its codes to 31 bits exactly, then fails with kOverflow") {
    const size_t n = 64;
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = (i % 2 ? 127 : -127) * 0.0078125f;  // codes +-127, exact
    std::vector<uint8_t> sum = encode_ok(kShared, x, 1);
    REQUIRE(decode_ok(sum, n) == x);
    // 127 * 2^24 < 2^31 - 1 < 127 * 2^25.
    for (int doubling = 1; doubling <= 24; ++doubling) {
      INFO("doubling: ", doubling);
      sum = add_ok(sum, sum);
      const std::vector<float> y = decode_ok(sum, n);
      const float want = ldexpf(127 * 0.0078125f, doubling);
      size_t bad = 0;
      for (size_t i = 0; i < n; ++i)
        if (y[i] != (i % 2 ? want : -want)) ++bad;
      REQUIRE(bad == 0);
      CHECK(inspect_ok(sum).contributions == (1u << doubling));
    }
    CHECK(inspect_ok(sum).bits <= 32);
    CHECK(add(sum, sum).status == Status::kOverflow);
  }

  TEST_CASE("a value beyond the code range fails with kValueOutOfRange unless clip saturates it") {
    const size_t n = 16;
    std::vector<float> x(n, 0.25f);
    x[7] = 2.0f;  // 256 steps of 2^-7: beyond the +-127 of an 8-bit code
    const edgefl_test::Encoding e = edgefl_test::encode_vec(edgefl_test::parse_or_fail(kShared), x, 1);
    CHECK(e.status == Status::kValueOutOfRange);
    CHECK(e.written == 0);
    const std::vector<float> clipped = decode_ok(encode_ok("q8:shared=0.0078125,clip", x, 1), n);
    CHECK(clipped[7] == 127 * 0.0078125f);
    CHECK(clipped[0] == 0.25f);
    // Random-k scales its values by n / k before the range check.
    CHECK(edgefl_test::encode_vec(edgefl_test::parse_or_fail("randk:0.1+q8:shared=0.0078125"),
                                  std::vector<float>(n, 0.25f), 1)
              .status == Status::kValueOutOfRange);
  }

  TEST_CASE("float sums that overflow and contribution counters that would wrap are kOverflow") {
    const std::vector<uint8_t> big = encode_ok("fp32", std::vector<float>(4, 3e38f), 1);
    CHECK(add(big, big).status == Status::kOverflow);
    std::vector<uint8_t> many = encode_ok(kShared, std::vector<float>(4, 0.5f), 1);
    edgefl_test::store_u32(many, edgefl_test::wire::kContributions, 0xFFFFFFFFu);
    edgefl_test::fix_checksum(many);
    CHECK(add(many, encode_ok(kShared, std::vector<float>(4, 0.5f), 1)).status == Status::kOverflow);
    edgefl_test::store_u32(many, edgefl_test::wire::kContributions, 0x80000000u);
    edgefl_test::fix_checksum(many);
    CHECK(add(many, many).status == Status::kOverflow);
  }

  TEST_CASE("shared-scale values beyond the 8-bit range are not silently clipped") {
    // q8 codes are 8-bit two's complement: a value of 200 steps either widens the code or fails;
    // it never decodes to 127 steps.
    const std::vector<float> x(10, 200 * 0.0078125f);
    const edgefl_test::Encoding e = edgefl_test::encode_vec(edgefl_test::parse_or_fail(kShared), x, 1);
    if (e.status == Status::kOk) {
      CHECK(decode_ok(e.bytes, x.size()) == x);
    } else {
      CHECK(e.status == Status::kValueOutOfRange);
    }
  }

  TEST_CASE(
      "integer codes out and back: the sum of many devices' codes decodes to the sum of their updates") {
    const size_t n = 3001;
    for (const char* spec :
         {"q4:shared=0.05,clip", "q8:shared=0.0078125", "randk:0.1+q8:shared=0.1",
          "randk:0.05,unscaled+q4:shared=0.02,clip", "cs:cells=0.2,rows=3,step=0.01,top=0.1"}) {
      CAPTURE(std::string(spec));
      // random-k and Count Sketch: one round seed for every device (the same coordinates, hashes)
      const bool shared = std::string(spec).rfind("randk", 0) == 0 || std::string(spec).rfind("cs", 0) == 0;
      const uint64_t shared_seed = 99;
      std::vector<std::vector<uint8_t>> enc;
      for (uint64_t d = 0; d < 7; ++d) {
        enc.push_back(encode_ok(spec, edgefl_test::uniform_vector(n, 10 + d, -0.9, 0.9),
                                shared ? shared_seed : 1000 + d));
      }
      const EncodedInfo first = inspect_ok(enc[0]);
      const size_t count = edgefl::integer_code_count(first);
      CHECK(count == (first.values == edgefl::ValueCoderKind::kCountSketch
                          ? size_t(first.levels) * first.block
                          : size_t(first.nnz)));
      std::vector<int64_t> total(count, 0);
      std::vector<float> decoded_sum(n, 0.0f);
      for (const std::vector<uint8_t>& e : enc) {
        std::vector<int32_t> codes(count);
        REQUIRE(edgefl::read_integer_codes({e.data(), e.size()}, {codes.data(), codes.size()}) ==
                Status::kOk);
        for (size_t j = 0; j < codes.size(); ++j) total[j] += codes[j];
        if (first.values != edgefl::ValueCoderKind::kCountSketch)
          decoded_sum = plus(decoded_sum, decode_ok(e, n));
      }
      std::vector<int32_t> summed(total.begin(), total.end());
      std::vector<uint8_t> out(edgefl::kEncodedHeaderBytes + 4 * count);
      size_t written = 0;
      REQUIRE(edgefl::write_integer_codes(first, {summed.data(), summed.size()}, 7, {out.data(), out.size()},
                                          &written) == Status::kOk);
      out.resize(written);
      CHECK(inspect_ok(out).contributions == 7);
      // the same as adding the encodings pairwise, bit for bit
      std::vector<uint8_t> pairwise = enc[0];
      for (size_t d = 1; d < enc.size(); ++d) pairwise = add_ok(pairwise, enc[d]);
      if (first.values == edgefl::ValueCoderKind::kCountSketch) {
        CHECK(out == pairwise);  // the same cells and header, byte for byte (unsketching is not linear)
        continue;
      }
      CHECK(edgefl_test::same_bits(decode_ok(out, n), decode_ok(pairwise, n)));
      const std::vector<float> got = decode_ok(out, n);
      for (size_t i = 0; i < n; ++i) CHECK(got[i] == doctest::Approx(decoded_sum[i]).epsilon(1e-5));
    }
  }

  TEST_CASE("integer codes: what has none is refused, and sizes are checked") {
    const size_t n = 500;
    const std::vector<float> x = edgefl_test::uniform_vector(n, 1, -0.9, 0.9);
    std::vector<int32_t> codes(n);
    for (const char* spec :
         {"fp32", "bf16", "q8", "sparq:0.1", "topk:0.1+q8:shared=0.01", "q8:shared=0.01,ans", "skc"}) {
      CAPTURE(std::string(spec));
      // (rANS-coded codes are a stream; a peaked update keeps the encoder on the rANS form)
      const bool ans = std::string(spec).find("ans") != std::string::npos;
      const std::vector<uint8_t> e = encode_ok(spec, ans ? edgefl_test::gaussian_vector(n, 1, 0.02) : x, 3);
      if (ans) REQUIRE(inspect_ok(e).entropy_coded);
      CHECK(edgefl::read_integer_codes({e.data(), e.size()}, {codes.data(), codes.size()}) ==
            Status::kNotSummable);
    }
    const std::vector<uint8_t> e = encode_ok("q8:shared=0.01", x, 3);
    CHECK(edgefl::read_integer_codes({e.data(), e.size()}, {codes.data(), n - 1}) == Status::kBufferTooSmall);
    std::vector<uint8_t> bad = e;
    bad[bad.size() - 1] ^= 1;
    CHECK(edgefl::read_integer_codes({bad.data(), bad.size()}, {codes.data(), n}) ==
          Status::kChecksumMismatch);
    const EncodedInfo info = inspect_ok(e);
    std::vector<uint8_t> out(edgefl::kEncodedHeaderBytes + 4 * n);
    size_t written = 0;
    CHECK(edgefl::write_integer_codes(info, {codes.data(), n - 1}, 1, {out.data(), out.size()}, &written) ==
          Status::kSizeMismatch);
    CHECK(edgefl::write_integer_codes(info, {codes.data(), n}, 0, {out.data(), out.size()}, &written) ==
          Status::kOverflow);
    codes[5] = INT32_MIN;
    CHECK(edgefl::write_integer_codes(info, {codes.data(), n}, 1, {out.data(), out.size()}, &written) ==
          Status::kOverflow);
    CHECK(written == 0);
  }
}  // TEST_SUITE
