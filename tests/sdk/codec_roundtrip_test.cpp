// tests/sdk/codec_roundtrip_test.cpp: encode -> decode for every codec, the buffer contracts
// (workspace_size, encoded_bound), inspect(), decode_add(), and each coder's error bound.
#include <float.h>
#include <math.h>
#include <string.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "edgefl/codec.h"
#include "support/bench_data.h"
#include "support/codec_util.h"

namespace {

using edgefl::CodecSpec;
using edgefl::EncodedInfo;
using edgefl::IndexCoding;
using edgefl::SparsifierKind;
using edgefl::Status;
using edgefl::ValueCoderKind;
using edgefl_test::decode_ok;
using edgefl_test::encode_ok;
using edgefl_test::encode_vec;
using edgefl_test::inspect_ok;
using edgefl_test::parse_or_fail;

const char* const kAllSpecs[] = {
    "fp32",
    "fp16",
    "bf16",
    "bf16:ans",
    "q1",
    "q2",
    "q4",
    "q8",
    "q4:block=64",
    "q8:det",
    "q2:block=64,det",
    "q8:shared=0.05",
    "q8:shared=0.05,det",
    "q8:shared=0.05,ans",
    "q4:shared=0.3,clip,ans",
    "q2:shared=0.5,clip,ans",
    "hq1",
    "hq2",
    "hq3",
    "hq4",
    "hq4:block=1024",
    "qsgd",
    "qsgd:s=15,bucket=256",
    "tern",
    "tern:block=1024",
    "sign",
    "sign:block=64",
    "topk:0.01",
    "topk:0.1",
    "topk:k=100",
    "topk:0.01+q4",
    "topk:0.1+q8:det",
    "topk:0.01,approx+q4",
    "topk:0.05,approx,sample=0.025+q8",
    "topk:0.1,idx=rice+q4",
    "topk:0.1,idx=blockrice+q4",
    "topk:0.01,approx,idx=blockrice+q4:sm,ans",
    "topk:0.1,idx=auto+q8",
    "topk:0.1+fp16",
    "topk:0.1+bf16",
    "topk:0.1+bf16:ans",
    "topk:0.1+sign",
    "topk:0.1+tern",
    "topk:0.1+qsgd",
    "topk:0.1+hq4",
    "topk:0.2+q8:shared=0.05",
    "thresh:0.5+fp16",
    "thresh:0.5,idx=rice+q4",
    "thresh:0.5,idx=blockrice+q1:block=4096",
    "thresh:1.5",
    "randk:0.1+q8",
    "randk:0.1",
    "randk:k=50+q4",
    "randk:0.1,unscaled+q8:shared=0.05",
    "randk:0.1,unscaled+q8:shared=0.05,ans",
    "randk:0.3+hq2",
    // Blocks whose codes straddle bytes: packing at every phase.
    "q4:block=3",
    "q2:block=5",
    "q1:block=7",
    "q8:block=1",
    "tern:block=7",
    "sign:block=9",
    "qsgd:s=3,bucket=3",
    "hq3:block=64",
    "topk:0.3+q2:block=5",
    "topk:0.3+tern:block=7",
};

const size_t kLengths[] = {0, 1, 7, 255, 256, 257, 1000, 4099};

bool is_dense(const CodecSpec& s) {
  return s.sparsifier == SparsifierKind::kNone;
}

IndexCoding expected_index_coding(const CodecSpec& s) {
  if (is_dense(s) || s.sparsifier == SparsifierKind::kRandomK) return IndexCoding::kNone;
  return s.index_coding;
}

// The number of coordinates a k/density sparsifier keeps: k, else the density of n, within one.
void check_count(const CodecSpec& s, size_t n, size_t nnz) {
  if (s.k != 0) {
    CHECK(nnz == std::min<size_t>(s.k, n));
  } else {
    CHECK(fabs(static_cast<double>(nnz) - s.density * static_cast<double>(n)) < 1.0);
  }
}

bool close_rel(float got, float want, double rel, double abs_tol = 1e-30) {
  return fabs(static_cast<double>(got) - want) <= rel * fabs(static_cast<double>(want)) + abs_tol;
}

// Blocks of `block` consecutive elements of v: calls f(begin, end).
template <typename F>
void for_each_block(size_t size, size_t block, F f) {
  for (size_t b = 0; b < size; b += block) f(b, std::min(size, b + block));
}

// The kept set of exact top-k: k largest |x|, ties broken by the lower index.
std::vector<uint32_t> reference_topk(const std::vector<float>& x, size_t k) {
  std::vector<uint32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0u);
  std::partial_sort(order.begin(), order.begin() + static_cast<long>(k), order.end(),
                    [&](uint32_t a, uint32_t b) {
                      const float fa = fabsf(x[a]), fb = fabsf(x[b]);
                      return fa != fb ? fa > fb : a < b;
                    });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

}  // namespace

TEST_SUITE("codec.roundtrip") {
  TEST_CASE("every codec round-trips every awkward length within its bound") {
    for (const char* text : kAllSpecs) {
      const CodecSpec spec = parse_or_fail(text);
      for (size_t n : kLengths) {
        INFO("spec: ", std::string(text), "  n: ", n);
        const std::vector<float> x = edgefl_test::gaussian_vector(n, 1000 + n);
        const uint64_t seed = 0x1234567890ull + n;
        const edgefl_test::Encoding e = encode_vec(spec, x, seed);
        CHECK(e.status == Status::kOk);
        if (e.status != Status::kOk) continue;
        CHECK(e.written >= edgefl::kEncodedHeaderBytes);
        CHECK(e.written <= edgefl::encoded_bound(spec, n));

        EncodedInfo info;
        CHECK(edgefl::inspect({e.bytes.data(), e.bytes.size()}, &info) == Status::kOk);
        // Version 2 exactly for block Rice indices (format.h): every other encoding is version 1.
        CHECK(info.version == (info.index_coding == IndexCoding::kBlockRice ? 2 : 1));
        CHECK(info.n == n);
        CHECK(info.sparsifier == spec.sparsifier);
        CHECK(info.values == spec.values);
        if (spec.index_coding == IndexCoding::kAuto && !is_dense(spec) &&
            spec.sparsifier != SparsifierKind::kRandomK) {
          CHECK(
              (info.index_coding == IndexCoding::kEliasFano || info.index_coding == IndexCoding::kBlockRice));
        } else {
          CHECK(info.index_coding == expected_index_coding(spec));
        }
        if (is_dense(spec)) {
          CHECK(info.nnz == n);
        } else {
          CHECK(info.nnz <= n);
        }
        if (spec.sparsifier == SparsifierKind::kTopK || spec.sparsifier == SparsifierKind::kRandomK)
          check_count(spec, n, info.nnz);
        if (spec.values == ValueCoderKind::kUniform) CHECK(info.shared_scale == (spec.shared_step > 0));
        CHECK(info.contributions == 1);
        CHECK(info.header_bytes == edgefl::kEncodedHeaderBytes);
        CHECK(info.total_bytes == e.written);
        CHECK(info.header_bytes + info.index_bytes + info.value_bytes == info.total_bytes);
        CHECK(info.checksum == edgefl_test::load_u32(e.bytes, edgefl_test::wire::kChecksum));
        CHECK(info.checksum == edgefl_test::expected_checksum(e.bytes));

        std::vector<float> out(n, 7.0f);
        const Status decoded = edgefl_test::decode_vec(e.bytes, &out);
        CHECK(decoded == Status::kOk);
        if (decoded != Status::kOk) continue;
        CHECK(edgefl_test::all_finite(out));

        // Sparse fp32 values arrive exactly (times n / k for scaled random-k), one per carried index.
        if (!is_dense(spec) && spec.values == ValueCoderKind::kFp32) {
          const bool scaled = spec.sparsifier == SparsifierKind::kRandomK && !spec.randk_unscaled;
          const double scale = scaled && info.nnz ? static_cast<double>(n) / info.nnz : 1.0;
          size_t carried = 0, wrong = 0;
          for (size_t i = 0; i < n; ++i) {
            if (out[i] == 0.0f) continue;
            ++carried;
            if (!close_rel(out[i], static_cast<float>(x[i] * scale), scaled ? 1e-6 : 0.0)) ++wrong;
          }
          CHECK(carried == info.nnz);  // Gaussian data: no carried value is 0
          CHECK(wrong == 0);
        }

        // decode_add(weight 1) onto zeros is decode(), in float and in double.
        std::vector<float> zeros(n + 1, 0.0f);
        REQUIRE(edgefl::decode_add({e.bytes.data(), e.bytes.size()}, 1.0f, {zeros.data(), n}) == Status::kOk);
        std::vector<double> zeros_d(n + 1, 0.0);
        REQUIRE(edgefl::decode_add({e.bytes.data(), e.bytes.size()}, 1.0, {zeros_d.data(), n}) ==
                Status::kOk);
        size_t differ = 0;
        for (size_t i = 0; i < n; ++i)
          differ += zeros[i] != out[i] || zeros_d[i] != static_cast<double>(out[i]);
        CHECK(differ == 0);
      }
    }
  }

  TEST_CASE("decode_add adds weight times the decoded update") {
    const float weights[] = {0.75f, -2.5f, 1e-3f, 0.0f};
    for (const char* text : kAllSpecs) {
      const CodecSpec spec = parse_or_fail(text);
      const size_t n = 1000;
      INFO("spec: ", std::string(text));
      const std::vector<float> x = edgefl_test::gaussian_vector(n, 7);
      const std::vector<uint8_t> bytes = encode_ok(spec, x, 99);
      const std::vector<float> decoded = decode_ok(bytes, n);
      for (float w : weights) {
        INFO("weight: ", w);
        std::vector<float> acc = edgefl_test::gaussian_vector(n, 8, 10.0);
        const std::vector<float> before = acc;
        REQUIRE(edgefl::decode_add({bytes.data(), bytes.size()}, w, {acc.data(), n}) == Status::kOk);
        size_t bad = 0;
        for (size_t i = 0; i < n; ++i) {
          const double want = static_cast<double>(before[i]) + static_cast<double>(w) * decoded[i];
          const double tol =
              1e-6 * (fabs(static_cast<double>(before[i])) + fabs(w * static_cast<double>(decoded[i]))) +
              1e-30;
          if (fabs(acc[i] - want) > tol) ++bad;
        }
        CHECK(bad == 0);
      }
    }
  }

  TEST_CASE("the double accumulator adds weight times the decoded update in double") {
    const double weights[] = {0.75, -2.5, 1e-3, 1e300};
    for (const char* text : kAllSpecs) {
      const CodecSpec spec = parse_or_fail(text);
      const size_t n = 1000;
      INFO("spec: ", std::string(text));
      const std::vector<uint8_t> bytes = encode_ok(spec, edgefl_test::gaussian_vector(n, 7), 99);
      const std::vector<float> decoded = decode_ok(bytes, n);
      for (double w : weights) {
        INFO("weight: ", w);
        std::vector<double> acc(n);
        for (size_t i = 0; i < n; ++i) acc[i] = 1e3 + static_cast<double>(i) / 7;
        const std::vector<double> before = acc;
        REQUIRE(edgefl::decode_add({bytes.data(), bytes.size()}, w, {acc.data(), n}) == Status::kOk);
        size_t bad = 0;
        for (size_t i = 0; i < n; ++i) {
          const double want = before[i] + w * static_cast<double>(decoded[i]);
          if (fabs(acc[i] - want) > 1e-15 * (fabs(before[i]) + fabs(w * decoded[i]))) ++bad;
        }
        CHECK(bad == 0);
      }
    }
  }

  TEST_CASE("the double accumulator rejects non-finite weights and wrong lengths untouched") {
    const std::vector<uint8_t> bytes = encode_ok("q8", edgefl_test::gaussian_vector(100, 1), 1);
    for (double w :
         {static_cast<double>(NAN), static_cast<double>(INFINITY), -static_cast<double>(INFINITY)}) {
      std::vector<double> acc(100, 1.5);
      CHECK(edgefl::decode_add({bytes.data(), bytes.size()}, w, {acc.data(), acc.size()}) ==
            Status::kInvalidArgument);
      CHECK(acc == std::vector<double>(100, 1.5));
    }
    std::vector<double> shorter(99, 1.5);
    CHECK(edgefl::decode_add({bytes.data(), bytes.size()}, 1.0, {shorter.data(), shorter.size()}) ==
          Status::kDimensionMismatch);
    CHECK(shorter == std::vector<double>(99, 1.5));
    // Every finite weight is a weight.
    const std::vector<uint8_t> zeros = encode_ok("q8", std::vector<float>(100, 0.0f), 1);
    for (double w : {DBL_MAX, -DBL_MAX, 1e300, 5e-324}) {
      INFO("weight: ", w);
      std::vector<double> acc(100, 2.0);
      CHECK(edgefl::decode_add({zeros.data(), zeros.size()}, w, {acc.data(), acc.size()}) == Status::kOk);
      CHECK(acc == std::vector<double>(100, 2.0));
    }
  }

  TEST_CASE("the bytes do not depend on what the output and workspace held before") {
    for (const char* text : kAllSpecs) {
      const CodecSpec spec = parse_or_fail(text);
      for (size_t n : {size_t{1}, size_t{257}, size_t{4099}}) {
        INFO("spec: ", std::string(text), "  n: ", n);
        const std::vector<float> x = edgefl_test::gaussian_vector(n, 33);
        const size_t ws = edgefl::workspace_size(spec, n), cap = edgefl::encoded_bound(spec, n);
        std::vector<uint8_t> out[2], work[2];
        size_t written[2] = {0, 0};
        for (int fill = 0; fill < 2; ++fill) {
          out[fill].assign(cap, fill ? 0xFF : 0x00);
          work[fill].assign(ws, fill ? 0xA5 : 0x00);
          REQUIRE(edgefl::encode(spec, {x.data(), n}, 5, {work[fill].data(), ws}, {out[fill].data(), cap},
                                 &written[fill]) == Status::kOk);
          out[fill].resize(written[fill]);
        }
        CHECK(out[0] == out[1]);
      }
    }
  }

  TEST_CASE("encode works with exactly workspace_size bytes and fails with one fewer") {
    for (const char* text : kAllSpecs) {
      const CodecSpec spec = parse_or_fail(text);
      for (size_t n : kLengths) {
        INFO("spec: ", std::string(text), "  n: ", n);
        const size_t ws = edgefl::workspace_size(spec, n);
        if (ws == 0) continue;
        const std::vector<float> x = edgefl_test::gaussian_vector(n, 5);
        const size_t cap = edgefl::encoded_bound(spec, n);
        std::vector<uint8_t> work(ws - 1), out(cap, 0xAB);
        size_t written = 77;
        CHECK(edgefl::encode(spec, {x.data(), n}, 1, {work.data(), ws - 1}, {out.data(), cap}, &written) ==
              Status::kWorkspaceTooSmall);
        CHECK(written == 0);
      }
    }
  }

  TEST_CASE("encode fails with kBufferTooSmall one byte short of encoded_bound") {
    for (const char* text : kAllSpecs) {
      const CodecSpec spec = parse_or_fail(text);
      for (size_t n : kLengths) {
        INFO("spec: ", std::string(text), "  n: ", n);
        const std::vector<float> x = edgefl_test::gaussian_vector(n, 5);
        const size_t ws = edgefl::workspace_size(spec, n);
        const size_t cap = edgefl::encoded_bound(spec, n);
        REQUIRE(cap >= edgefl::kEncodedHeaderBytes);
        std::vector<uint8_t> work(ws), out(cap - 1);
        size_t written = 77;
        CHECK(edgefl::encode(spec, {x.data(), n}, 1, {work.data(), ws}, {out.data(), cap - 1}, &written) ==
              Status::kBufferTooSmall);
        CHECK(written == 0);
      }
    }
  }

  TEST_CASE("workspace and output may have any alignment") {
    for (const char* text : kAllSpecs) {
      const CodecSpec spec = parse_or_fail(text);
      const size_t n = 1000;
      INFO("spec: ", std::string(text));
      const std::vector<float> x = edgefl_test::gaussian_vector(n, 3);
      const std::vector<uint8_t> aligned = encode_ok(spec, x, 42);
      const size_t ws = edgefl::workspace_size(spec, n);
      const size_t cap = edgefl::encoded_bound(spec, n);
      for (size_t shift = 1; shift < 4; ++shift) {
        INFO("shift: ", shift);
        std::vector<uint8_t> work(ws + shift), out(cap + shift);
        size_t written = 0;
        REQUIRE(edgefl::encode(spec, {x.data(), n}, 42, {work.data() + shift, ws}, {out.data() + shift, cap},
                               &written) == Status::kOk);
        CHECK(std::vector<uint8_t>(out.begin() + static_cast<long>(shift),
                                   out.begin() + static_cast<long>(shift + written)) == aligned);
        // Decoding from a misaligned copy and into a misaligned float array.
        std::vector<uint8_t> in(aligned.size() + shift);
        memcpy(in.data() + shift, aligned.data(), aligned.size());
        std::vector<float> dec(n);
        REQUIRE(edgefl::decode({in.data() + shift, aligned.size()}, {dec.data(), n}) == Status::kOk);
        CHECK(edgefl_test::same_bits(dec, decode_ok(aligned, n)));
      }
    }
  }

  TEST_CASE("the same input, spec and seed give the same bytes") {
    for (const char* text : kAllSpecs) {
      const CodecSpec spec = parse_or_fail(text);
      INFO("spec: ", std::string(text));
      const std::vector<float> x = edgefl_test::gaussian_vector(4099, 11);
      CHECK(encode_ok(spec, x, 5) == encode_ok(spec, x, 5));
    }
  }

  TEST_CASE("the encoder does not modify its input") {
    for (const char* text : kAllSpecs) {
      const CodecSpec spec = parse_or_fail(text);
      INFO("spec: ", std::string(text));
      const std::vector<float> x = edgefl_test::gaussian_vector(1000, 12);
      std::vector<float> copy = x;
      (void)encode_ok(spec, copy, 5);
      CHECK(edgefl_test::same_bits(copy, x));
    }
  }

  TEST_CASE("decode into an output of the wrong length fails with kDimensionMismatch") {
    const std::vector<float> x = edgefl_test::gaussian_vector(100, 1);
    for (const char* text : {"fp32", "q4", "topk:0.1+q4", "randk:0.1+q8"}) {
      INFO("spec: ", std::string(text));
      const std::vector<uint8_t> bytes = encode_ok(text, x, 1);
      for (size_t len : {size_t{0}, size_t{99}, size_t{101}}) {
        std::vector<float> out(len, 3.0f);
        const std::vector<float> before = out;
        CHECK(edgefl_test::decode_vec(bytes, &out) == Status::kDimensionMismatch);
        CHECK(edgefl_test::same_bits(out, before));
        CHECK(edgefl::decode_add({bytes.data(), bytes.size()}, 1.0f, {out.data(), len}) ==
              Status::kDimensionMismatch);
        CHECK(edgefl_test::same_bits(out, before));
      }
    }
  }

  TEST_CASE("decode_add rejects a weight that is not finite and leaves the accumulator") {
    const std::vector<float> x = edgefl_test::gaussian_vector(100, 1);
    const std::vector<uint8_t> bytes = encode_ok("q8", x, 1);
    for (float w : {NAN, INFINITY, -INFINITY}) {
      std::vector<float> acc(100, 1.5f);
      CHECK(edgefl::decode_add({bytes.data(), bytes.size()}, w, {acc.data(), acc.size()}) ==
            Status::kInvalidArgument);
      CHECK(acc == std::vector<float>(100, 1.5f));
    }
  }

  TEST_CASE("decode_add accepts every finite weight") {
    const std::vector<float> zeros(100, 0.0f);
    const std::vector<uint8_t> bytes = encode_ok("q8", zeros, 1);
    for (float w : {FLT_MAX, -FLT_MAX, 3.1e38f, FLT_MIN, 1e-45f, -0.0f}) {
      INFO("weight: ", w);
      std::vector<float> acc(100, 2.0f);
      CHECK(edgefl::decode_add({bytes.data(), bytes.size()}, w, {acc.data(), acc.size()}) == Status::kOk);
      CHECK(acc == std::vector<float>(100, 2.0f));
    }
  }

  TEST_CASE("encode refuses a dimension above EDGEFL_MAX_DIMENSION before reading anything") {
    const CodecSpec spec = parse_or_fail("q8");
    float one = 1.0f;
    size_t written = 5;
    const size_t huge = static_cast<size_t>(EDGEFL_MAX_DIMENSION) + 1;
    // Only the first float exists: the encoder must fail on the size alone.
    CHECK(edgefl::encode(spec, {&one, huge}, 1, {nullptr, 0}, {nullptr, 0}, &written) ==
          Status::kDimensionTooLarge);
    CHECK(written == 0);
  }

  // ---------------------------------------------------------------------------------------------
  // Error bounds of the value coders.

  TEST_CASE("fp32 is lossless, bit for bit") {
    std::vector<float> x = edgefl_test::gaussian_vector(1000, 2);
    x[0] = -0.0f;
    x[1] = FLT_MAX;
    x[2] = -FLT_MAX;
    x[3] = FLT_MIN;
    x[4] = 1e-45f;  // smallest subnormal
    x[5] = 0.0f;
    const std::vector<uint8_t> bytes = encode_ok("fp32", x, 1);
    CHECK(edgefl_test::same_bits(decode_ok(bytes, x.size()), x));
  }

  TEST_CASE("bf16 rounds to nearest even") {
    std::vector<float> x = edgefl_test::gaussian_vector(4099, 3);
    const uint32_t patterns[] = {0x3F808000u,   // tie, even below: rounds down
                                 0x3F818000u,   // tie, odd below: rounds up
                                 0x3F808001u,   // just above a tie: up
                                 0x3F807FFFu,   // just below a tie: down
                                 0x7F7F7FFFu,   // below the largest bf16 tie: stays finite
                                 0x00018000u,   // a subnormal
                                 0x80000000u};  // -0
    for (size_t i = 0; i < sizeof patterns / sizeof patterns[0]; ++i) memcpy(&x[i], &patterns[i], 4);
    const std::vector<float> y = decode_ok(encode_ok("bf16", x, 1), x.size());
    size_t bad = 0, first_bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = edgefl_test::bf16_round(x[i]);
      if (memcmp(&y[i], &want, 4) != 0 && bad++ == 0) first_bad = i;
      if (fabsf(x[i]) >= FLT_MIN) CHECK(fabs(y[i] - x[i]) <= ldexp(fabs(x[i]), -8));  // normal range
    }
    INFO("first mismatch at ", first_bad, ": x ", x[first_bad], " got ", y[first_bad], " want ",
         edgefl_test::bf16_round(x[first_bad]));
    CHECK(bad == 0);
  }

  TEST_CASE("fp16 rounds to nearest even with relative error at most 2^-11 in the normal range") {
    std::vector<float> x = edgefl_test::gaussian_vector(4099, 4, 100.0);
    x[0] = 65504.0f;
    x[1] = -65519.0f;         // rounds to -65504
    x[2] = 6.103515625e-05f;  // smallest normal
    x[3] = 1e-7f;             // subnormal in fp16
    x[4] = 1e-9f;             // rounds to 0
    x[5] = 1.00048828125f;    // 1 + 2^-11: a tie, rounds to 1
    x[6] = 1.00146484375f;    // 1 + 3*2^-11: a tie, rounds up to 1 + 2^-9
    const std::vector<float> y = decode_ok(encode_ok("fp16", x, 1), x.size());
    size_t bad = 0, first_bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = edgefl_test::fp16_round(x[i]);
      if (memcmp(&y[i], &want, 4) != 0 && bad++ == 0) first_bad = i;
      if (fabs(x[i]) >= 6.103515625e-05f) CHECK(fabs(y[i] - x[i]) <= ldexp(fabs(x[i]), -11));
    }
    INFO("first mismatch at ", first_bad, ": x ", x[first_bad], " got ", y[first_bad], " want ",
         edgefl_test::fp16_round(x[first_bad]));
    CHECK(bad == 0);
    CHECK(y[1] == -65504.0f);
    CHECK(y[5] == 1.0f);
    CHECK(y[6] == 1.001953125f);
  }

  TEST_CASE("the fp16 and bf16 references agree with the compiler's conversions") {
// The compiler's IEEE binary16: _Float16 (C++ on x86 since GCC 12, on ARM since GCC 13; clang), or
// ARM's __fp16 where it is IEEE (always on AArch64; with -mfp16-format=ieee on 32-bit ARM).
#if defined(__FLT16_MAX__) && \
    (defined(__clang__) || __GNUC__ >= 13 || !(defined(__arm__) || defined(__aarch64__)))
    using CompilerHalf = _Float16;
#define EDGEFL_TEST_COMPILER_HALF 1
#elif defined(__ARM_FP16_FORMAT_IEEE)
    using CompilerHalf = __fp16;
#define EDGEFL_TEST_COMPILER_HALF 1
#endif
#if defined(EDGEFL_TEST_COMPILER_HALF)
    const std::vector<float> x = edgefl_test::gaussian_vector(20000, 17, 3000.0);
    for (float v : x) {
      const float want = static_cast<float>(static_cast<CompilerHalf>(v));
      REQUIRE(edgefl_test::fp16_round(v) == want);
      const float tiny = v * 1e-9f;
      REQUIRE(edgefl_test::fp16_round(tiny) == static_cast<float>(static_cast<CompilerHalf>(tiny)));
    }
#endif
    CHECK(edgefl_test::bf16_round(1.0f) == 1.0f);
    CHECK(edgefl_test::fp16_round(65520.0f) == INFINITY);
  }

  TEST_CASE("values beyond fp16 or bf16 range fail with kValueOutOfRange") {
    const size_t n = 300;
    struct Case {
      const char* spec;
      float value;
    };
    const Case cases[] = {
        {"fp16", 1e6f},          {"fp16", -1e6f},
        {"fp16", 65520.0f},                           // the tie above 65504 rounds to inf
        {"bf16", FLT_MAX},       {"bf16", -FLT_MAX},  // rounds up to inf
        {"topk:0.5+fp16", 1e6f}, {"thresh:0.5+fp16", 70000.0f},
    };
    for (const Case& c : cases) {
      for (size_t at : {size_t{0}, n / 2, n - 1}) {
        INFO("spec: ", std::string(c.spec), "  value: ", c.value, "  at: ", at);
        std::vector<float> x = edgefl_test::gaussian_vector(n, 9);
        x[at] = c.value;
        const edgefl_test::Encoding e = encode_vec(parse_or_fail(c.spec), x, 1);
        CHECK(e.status == Status::kValueOutOfRange);
        CHECK(e.written == 0);
      }
    }
    // The largest finite values that round to a finite half / bfloat16 still encode.
    std::vector<float> ok_fp16(10, 65519.0f);
    CHECK(decode_ok(encode_ok("fp16", ok_fp16, 1), 10)[0] == 65504.0f);
    uint32_t bits = 0x7F7F0000u;  // the largest bfloat16
    float big;
    memcpy(&big, &bits, 4);
    std::vector<float> ok_bf16(10, big);
    CHECK(decode_ok(encode_ok("bf16", ok_bf16, 1), 10)[0] == big);
  }

  TEST_CASE(
      "bf16:ans is lossless (bf16's values), smaller on an update, and plain bf16 where rANS cannot pay") {
    const size_t n = 6000;
    // An update's magnitudes span a few binades: Gaussian values with a lognormal scale per block.
    std::vector<float> x = edgefl_test::gaussian_vector(n, 41);
    const std::vector<float> scales = edgefl_test::gaussian_vector(n / 100 + 1, 42);
    for (size_t i = 0; i < n; ++i) x[i] *= 1e-3f * std::exp(scales[i / 100]);
    const std::vector<uint8_t> plain = encode_ok("bf16", x, 1);
    const std::vector<uint8_t> coded = encode_ok("bf16:ans", x, 1);
    EncodedInfo info;
    REQUIRE(edgefl::inspect({coded.data(), coded.size()}, &info) == Status::kOk);
    CHECK(info.entropy_coded);
    MESSAGE("bf16 " << plain.size() << " bytes, bf16:ans " << coded.size() << " bytes");
    CHECK(coded.size() < plain.size() * 3 / 4);
    const std::vector<float> a = decode_ok(plain, n), b = decode_ok(coded, n);
    CHECK(memcmp(a.data(), b.data(), n * sizeof(float)) == 0);
    // Exponents spread over every binade: nothing to gain, the plain layout is kept.
    std::vector<float> wide(n);
    uint32_t state = 7;
    for (size_t i = 0; i < n; ++i) {
      state = state * 1664525u + 1013904223u;
      const uint32_t exponent = 1 + (state >> 8) % 253;                                          // 1..253
      const uint32_t bits = (exponent << 23) | ((state & 0x7Fu) << 16) | ((state >> 31) << 31);  // bf16-exact
      memcpy(&wide[i], &bits, 4);
    }
    const std::vector<uint8_t> wide_coded = encode_ok("bf16:ans", wide, 1);
    REQUIRE(edgefl::inspect({wide_coded.data(), wide_coded.size()}, &info) == Status::kOk);
    CHECK_FALSE(info.entropy_coded);
    CHECK(wide_coded.size() == encode_ok("bf16", wide, 1).size());
    const std::vector<float> w = decode_ok(wide_coded, n);
    for (size_t i = 0; i < n; ++i) CHECK_MESSAGE(w[i] == wide[i], "at ", i);  // bf16-exact inputs
  }

  TEST_CASE("q<b>:shared=STEP,ans: the plain shared codes' values exactly, in fewer bytes on an update") {
    // Gaussian values: with one step for the whole update, the codes cluster around 0.
    for (const size_t n : {size_t{6000}, size_t{40000}}) {  // 4 and 32 rANS lanes
      CAPTURE(n);
      std::vector<float> x = edgefl_test::gaussian_vector(n, 43);
      for (float& v : x) v *= 0.01f;
      for (const char* base : {"q8:shared=0.001,clip", "q4:shared=0.01,clip", "q2:shared=0.02,clip",
                               "randk:0.5+q8:shared=0.001,clip"}) {
        const std::string text = std::string(base) + ",ans";
        CAPTURE(text);
        const std::vector<uint8_t> plain = encode_ok(base, x, 9);
        const std::vector<uint8_t> coded = encode_ok(text.c_str(), x, 9);
        const EncodedInfo info = inspect_ok(coded);
        CHECK(info.entropy_coded);
        CHECK(info.shared_scale);
        CHECK(info.rans_wide == (info.nnz >= 32768));  // entropy::kRansWideMinSymbols
        CHECK(coded.size() < plain.size());
        MESSAGE(base << " n=" << n << ": " << plain.size() << " bytes, with ans " << coded.size());
        const std::vector<float> a = decode_ok(plain, n), b = decode_ok(coded, n);
        CHECK(memcmp(a.data(), b.data(), n * sizeof(float)) == 0);
        // The spec prints as it parses.
        CodecSpec spec = parse_or_fail(text.c_str());
        char printed[128];
        const size_t length = edgefl::format_codec_spec(spec, printed, sizeof printed);
        REQUIRE(length > 0);
        REQUIRE(length < sizeof printed);
        CodecSpec again = parse_or_fail(printed);
        CHECK(again.entropy_coded);
        CHECK(again.shared_step == spec.shared_step);
      }
    }
  }

  TEST_CASE("dense fp16 and bf16 (one pass: convert, range check, checksum) tell NaN/Inf from overflow") {
    // Long enough for the fused kernels' three-lane blocks (768 values each) and a tail.
    const size_t n = 3 * 768 + 100;
    for (const char* text : {"fp16", "bf16"}) {
      const bool bf16 = text[0] == 'b';
      for (size_t at : {size_t{0}, size_t{767}, size_t{1500}, n - 1}) {
        INFO("spec: ", std::string(text), "  at: ", at);
        std::vector<float> x = edgefl_test::gaussian_vector(n, 21);
        const std::vector<float> y = decode_ok(encode_ok(text, x, 1), n);
        CHECK(y[at] == (bf16 ? edgefl_test::bf16_round(x[at]) : edgefl_test::fp16_round(x[at])));
        x[at] = bf16 ? -FLT_MAX : 1e6f;
        edgefl_test::Encoding e = encode_vec(parse_or_fail(text), x, 1);
        CHECK(e.status == Status::kValueOutOfRange);
        CHECK(e.written == 0);
        x[at] = NAN;
        x[n / 3] = bf16 ? FLT_MAX : 1e6f;  // both: NaN wins, whichever comes first
        e = encode_vec(parse_or_fail(text), x, 1);
        CHECK(e.status == Status::kNonFiniteInput);
        CHECK(e.written == 0);
      }
    }
  }

  TEST_CASE(
      "hq checks each block's range as it transforms it; NaN or Inf anywhere still wins over overflow") {
    // Several blocks of every size and a tail: the block out of range may come before or after
    // the non-finite one.
    const size_t n = 3 * 1024 + 77;
    for (const char* text : {"hq1", "hq4", "hq3:block=64", "hq4:block=1024"}) {
      for (size_t big_at : {size_t{0}, size_t{700}, n - 1}) {
        INFO("spec: ", std::string(text), "  out of range at: ", big_at);
        std::vector<float> x = edgefl_test::gaussian_vector(n, 23);
        x[big_at] = -1e30f;
        edgefl_test::Encoding e = encode_vec(parse_or_fail(text), x, 1);
        CHECK(e.status == Status::kValueOutOfRange);
        CHECK(e.written == 0);
        for (size_t bad_at : {size_t{1}, n / 2, n - 2}) {
          for (float bad : {NAN, -INFINITY}) {
            CAPTURE(bad_at);
            std::vector<float> y = x;
            y[bad_at] = bad;
            e = encode_vec(parse_or_fail(text), y, 1);
            CHECK(e.status == Status::kNonFiniteInput);
            CHECK(e.written == 0);
          }
        }
      }
    }
  }

  TEST_CASE("extreme finite values encode to finite decodable output or fail with kValueOutOfRange") {
    // Sums of squares, block ranges (max - min) and Hadamard sums overflow float long before the
    // values do: the encoder must not emit an encoding its own decoder rejects or decodes to inf.
    const size_t n = 1000;
    const float magnitudes[] = {3.4e38f, 1e30f, 1e20f};
    for (const char* text : kAllSpecs) {
      const CodecSpec spec = parse_or_fail(text);
      for (float m : magnitudes) {
        INFO("spec: ", std::string(text), "  magnitude: ", m);
        std::vector<float> x = edgefl_test::gaussian_vector(n, 13);
        for (size_t i = 0; i < n; ++i)
          x[i] = (x[i] < 0 ? -m : m) * (0.5f + 0.5f * fabsf(sinf(static_cast<float>(i))));
        const edgefl_test::Encoding e = encode_vec(spec, x, 1);
        if (e.status == Status::kValueOutOfRange) continue;
        REQUIRE(e.status == Status::kOk);
        std::vector<float> y(n, 0.0f);
        CHECK(edgefl_test::decode_vec(e.bytes, &y) == Status::kOk);
        CHECK(edgefl_test::all_finite(y));
      }
    }
  }

  TEST_CASE("NaN or infinity fails every codec with kNonFiniteInput; random-k reads only what it carries") {
    const size_t n = 1000;
    const std::vector<float> clean = edgefl_test::gaussian_vector(n, 10);
    size_t unread_checked = 0;
    for (const char* text : kAllSpecs) {
      const CodecSpec spec = parse_or_fail(text);
      // Random-k without a shared scale reads, in O(k), only the coordinates the seed draws:
      // found by encoding ones with the same seed and k as fp32 (the draw depends on n, k and
      // the seed only) and decoding them.
      std::vector<bool> carried(n, true);
      const edgefl_test::Encoding clean_encoding = encode_vec(spec, clean, 1);
      const bool reads_carried_only = spec.sparsifier == SparsifierKind::kRandomK && spec.shared_step == 0.0f;
      if (reads_carried_only) {
        REQUIRE(clean_encoding.status == Status::kOk);
        EncodedInfo info;
        REQUIRE(edgefl::inspect({clean_encoding.bytes.data(), clean_encoding.bytes.size()}, &info) ==
                Status::kOk);
        CodecSpec probe;
        probe.sparsifier = SparsifierKind::kRandomK;
        probe.k = info.nnz;
        probe.randk_unscaled = true;
        const edgefl_test::Encoding ones = encode_vec(probe, std::vector<float>(n, 1.0f), 1);
        REQUIRE(ones.status == Status::kOk);
        std::vector<float> decoded(n, 0.0f);
        REQUIRE(edgefl_test::decode_vec(ones.bytes, &decoded) == Status::kOk);
        for (size_t i = 0; i < n; ++i) carried[i] = decoded[i] == 1.0f;
      }
      for (float bad : {NAN, INFINITY, -INFINITY}) {
        std::vector<size_t> positions = {0, 1, n / 2, n - 2, n - 1};
        if (reads_carried_only) {  // and one carried, one not
          positions.push_back(size_t(std::find(carried.begin(), carried.end(), true) - carried.begin()));
          positions.push_back(size_t(std::find(carried.begin(), carried.end(), false) - carried.begin()));
        }
        for (size_t at : positions) {
          INFO("spec: ", std::string(text), "  value: ", bad, "  at: ", at, "  carried: ", bool(carried[at]));
          std::vector<float> x = clean;
          x[at] = bad;
          const edgefl_test::Encoding e = encode_vec(spec, x, 1);
          if (carried[at]) {
            CHECK(e.status == Status::kNonFiniteInput);
            CHECK(e.written == 0);
          } else {
            // Not read: the encoding of the clean vector, byte for byte.
            CHECK(e.status == Status::kOk);
            CHECK(e.bytes == clean_encoding.bytes);
            ++unread_checked;
          }
        }
      }
    }
    CHECK(unread_checked >= 9);  // three random-k specs x three values, at least
    // A single coordinate, and a NaN among values a sparsifier would drop.
    std::vector<float> one(1, NAN);
    CHECK(encode_vec(parse_or_fail("q8"), one, 1).status == Status::kNonFiniteInput);
    std::vector<float> quiet(1000, 0.0f);
    quiet[3] = 100.0f;
    quiet[500] = NAN;
    CHECK(encode_vec(parse_or_fail("thresh:50"), quiet, 1).status == Status::kNonFiniteInput);
  }

  TEST_CASE("uniform codes are within one step of their block, half a step when deterministic") {
    const int widths[] = {1, 2, 4, 8};
    const size_t blocks[] = {256, 64};
    const size_t n = 4099;
    const std::vector<float> x = edgefl_test::gaussian_vector(n, 21, 3.0);
    for (int b : widths) {
      for (size_t block : blocks) {
        for (bool det : {false, true}) {
          const std::string text =
              "q" + std::to_string(b) + ":block=" + std::to_string(block) + (det ? ",det" : "");
          INFO("spec: ", std::string(text));
          const std::vector<float> y = decode_ok(encode_ok(text.c_str(), x, 77), n);
          size_t bad = 0;
          for_each_block(n, block, [&](size_t lo, size_t hi) {
            const float mn =
                *std::min_element(x.begin() + static_cast<long>(lo), x.begin() + static_cast<long>(hi));
            const float mx =
                *std::max_element(x.begin() + static_cast<long>(lo), x.begin() + static_cast<long>(hi));
            const double step = (static_cast<double>(mx) - mn) / ((1 << b) - 1);
            const double tol = 1e-5 * step + 1e-6 * std::max(fabs(mn), fabs(mx));
            const double bound = (det ? 0.5 * step : step) + tol;
            for (size_t i = lo; i < hi; ++i) {
              if (fabs(static_cast<double>(y[i]) - x[i]) > bound) ++bad;
              if (y[i] < mn - tol || y[i] > mx + tol) ++bad;
            }
          });
          CHECK(bad == 0);
        }
      }
    }
  }

  TEST_CASE("a constant block decodes exactly") {
    for (const char* text : {"q1", "q4", "q8", "q8:det", "tern", "sign"}) {
      INFO("spec: ", std::string(text));
      const std::vector<float> x(600, -3.25f);
      const std::vector<float> y = decode_ok(encode_ok(text, x, 3), x.size());
      CHECK(y == x);
    }
    const std::vector<float> zeros(600, 0.0f);
    for (const char* text : {"q4", "hq4", "tern", "sign", "qsgd", "bf16", "topk:0.1+q4", "randk:0.1+q8"}) {
      INFO("spec: ", std::string(text));
      CHECK(decode_ok(encode_ok(text, zeros, 3), zeros.size()) == zeros);
    }
  }

  TEST_CASE("shared-scale codes are integer multiples of the step within one step of x") {
    const float step = 0.01f;
    const size_t n = 4099;
    const std::vector<float> x = edgefl_test::uniform_vector(n, 31, -1.2, 1.2);  // |x| / step < 127
    for (bool det : {false, true}) {
      const char* text = det ? "q8:shared=0.01,det" : "q8:shared=0.01";
      INFO("spec: ", std::string(text));
      const std::vector<uint8_t> bytes = encode_ok(text, x, 5);
      const EncodedInfo info = inspect_ok(bytes);
      CHECK(info.shared_scale);
      CHECK(info.param == step);
      CHECK(info.block == 0);
      const std::vector<float> y = decode_ok(bytes, n);
      size_t bad = 0;
      for (size_t i = 0; i < n; ++i) {
        const double code = static_cast<double>(y[i]) / step;
        if (fabs(code - nearbyint(code)) > 1e-3) ++bad;
        if (fabs(static_cast<double>(y[i]) - x[i]) > (det ? 0.5 : 1.0) * step * (1 + 1e-5)) ++bad;
      }
      CHECK(bad == 0);
    }
  }

  TEST_CASE("scaled sign keeps the sign and the block's mean magnitude") {
    for (size_t block : {size_t{256}, size_t{64}}) {
      const std::string text = "sign:block=" + std::to_string(block);
      INFO("spec: ", std::string(text));
      const size_t n = 4099;
      std::vector<float> x = edgefl_test::gaussian_vector(n, 41);
      x[10] = 0.0f;
      const std::vector<float> y = decode_ok(encode_ok(text.c_str(), x, 1), n);
      size_t bad = 0;
      for_each_block(n, block, [&](size_t lo, size_t hi) {
        double mean = 0;
        for (size_t i = lo; i < hi; ++i) mean += fabs(x[i]);
        mean /= static_cast<double>(hi - lo);
        for (size_t i = lo; i < hi; ++i) {
          if (!close_rel(fabsf(y[i]), static_cast<float>(mean), 1e-5)) ++bad;
          if (x[i] != 0 && (y[i] < 0) != (x[i] < 0)) ++bad;
        }
      });
      CHECK(bad == 0);
    }
  }

  TEST_CASE("terngrad decodes to zero or the block max with the sign of x") {
    for (size_t block : {size_t{256}, size_t{1024}}) {
      const std::string text = "tern:block=" + std::to_string(block);
      INFO("spec: ", std::string(text));
      const size_t n = 4099;
      const std::vector<float> x = edgefl_test::gaussian_vector(n, 43);
      const std::vector<float> y = decode_ok(encode_ok(text.c_str(), x, 9), n);
      size_t bad = 0, nonzero = 0;
      for_each_block(n, block, [&](size_t lo, size_t hi) {
        float m = 0;
        for (size_t i = lo; i < hi; ++i) m = std::max(m, fabsf(x[i]));
        for (size_t i = lo; i < hi; ++i) {
          if (y[i] == 0.0f) continue;
          ++nonzero;
          if (!close_rel(fabsf(y[i]), m, 1e-6)) ++bad;
          if ((y[i] < 0) != (x[i] < 0)) ++bad;
        }
      });
      CHECK(bad == 0);
      CHECK(nonzero > 0);
    }
  }

  TEST_CASE("qsgd errs by at most one level, norm / s, per coordinate") {
    for (const char* text :
         {"qsgd", "qsgd:s=15,bucket=256", "qsgd:s=1,bucket=64", "qsgd:s=127,bucket=1024"}) {
      INFO("spec: ", std::string(text));
      const size_t n = 4099;
      const std::vector<float> x = edgefl_test::gaussian_vector(n, 47);
      const std::vector<uint8_t> bytes = encode_ok(text, x, 3);
      const EncodedInfo info = inspect_ok(bytes);
      const CodecSpec spec = parse_or_fail(text);
      CHECK(info.levels == spec.levels);
      CHECK(info.block == spec.block);
      const std::vector<float> y = decode_ok(bytes, n);
      size_t bad = 0;
      for_each_block(n, spec.block, [&](size_t lo, size_t hi) {
        double norm = 0;
        for (size_t i = lo; i < hi; ++i) norm += static_cast<double>(x[i]) * x[i];
        norm = sqrt(norm);
        const double level = norm / spec.levels;
        for (size_t i = lo; i < hi; ++i) {
          if (fabs(static_cast<double>(y[i]) - x[i]) > level * (1 + 1e-5)) ++bad;
          if (y[i] != 0 && (y[i] < 0) != (x[i] < 0)) ++bad;
        }
      });
      CHECK(bad == 0);
    }
  }

  TEST_CASE("hadamard codes keep the energy of the update") {
    // EDEN's unbiasing scale makes E[x_hat] = x; a sanity bound on the error of one draw here (the
    // figures of merit are in codec_statistics_test.cpp).
    struct Case {
      const char* spec;
      double max_vnmse;
    };
    const Case cases[] = {
        {"hq1", 0.75}, {"hq2", 0.2}, {"hq3", 0.06}, {"hq4", 0.016}, {"hq4:block=1024", 0.016}};
    const std::vector<float> x = edgefl_test::gaussian_vector(16384, 51);
    for (const Case& c : cases) {
      INFO("spec: ", std::string(c.spec));
      const std::vector<float> y = decode_ok(encode_ok(c.spec, x, 77), x.size());
      CHECK(edgefl_test::vnmse(x, y) <= c.max_vnmse);
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Sparsifiers.

  TEST_CASE("exact top-k keeps the k largest magnitudes, ties to the lower index, values exact") {
    for (size_t n : {size_t{1}, size_t{7}, size_t{257}, size_t{1000}, size_t{4099}, size_t{100000}}) {
      for (const char* text : {"topk:0.01", "topk:0.1", "topk:0.5", "topk:1", "topk:k=100", "topk:k=1"}) {
        INFO("spec: ", std::string(text), "  n: ", n);
        // One decimal of a Gaussian: many exact ties in |x|, including +v / -v pairs.
        std::vector<float> x = edgefl_test::gaussian_vector(n, 61 + n);
        for (float& v : x) v = nearbyintf(v * 10.0f) / 10.0f;
        const std::vector<uint8_t> bytes = encode_ok(text, x, 1);
        const EncodedInfo info = inspect_ok(bytes);
        check_count(parse_or_fail(text), n, info.nnz);
        const std::vector<float> y = decode_ok(bytes, n);
        const std::vector<uint32_t> want = reference_topk(x, info.nnz);
        std::vector<float> expect(n, 0.0f);
        for (uint32_t i : want) expect[i] = x[i];
        CHECK(edgefl_test::same_bits(y, expect));
      }
    }
  }

  TEST_CASE("exact top-k values go through the value coder in blocks of carried values") {
    const size_t n = 4099;
    const std::vector<float> x = edgefl_test::gaussian_vector(n, 63);
    const std::vector<float> kept = decode_ok(encode_ok("topk:0.1", x, 1), n);
    const std::vector<uint32_t> idx = edgefl_test::nonzero_indices(kept);
    const std::vector<float> y = decode_ok(encode_ok("topk:0.1+q4:block=64,det", x, 1), n);
    std::vector<float> carried;
    for (uint32_t i : idx) carried.push_back(x[i]);
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i)
      if (kept[i] == 0.0f && y[i] != 0.0f) ++bad;  // nothing outside the kept set
    for_each_block(carried.size(), 64, [&](size_t lo, size_t hi) {
      const float mn =
          *std::min_element(carried.begin() + static_cast<long>(lo), carried.begin() + static_cast<long>(hi));
      const float mx =
          *std::max_element(carried.begin() + static_cast<long>(lo), carried.begin() + static_cast<long>(hi));
      const double half = 0.5 * (static_cast<double>(mx) - mn) / 15 * (1 + 1e-5) + 1e-6;
      for (size_t j = lo; j < hi; ++j)
        if (fabs(static_cast<double>(y[idx[j]]) - carried[j]) > half) ++bad;
    });
    CHECK(bad == 0);
  }

  TEST_CASE("approximate top-k keeps an upper set of magnitudes within 20% of k") {
    const size_t n = 100000;
    const std::vector<float> x = edgefl_test::gaussian_vector(n, 71);
    for (const char* text : {"topk:0.01,approx", "topk:0.001,approx", "topk:0.1,approx",
                             "topk:0.01,approx,sample=0.025", "topk:k=2000,approx"}) {
      const CodecSpec spec = parse_or_fail(text);
      for (uint64_t seed = 1; seed <= 8; ++seed) {
        INFO("spec: ", std::string(text), "  seed: ", seed);
        const std::vector<uint8_t> bytes = encode_ok(spec, x, seed);
        const double k = spec.k ? spec.k : spec.density * n;
        const EncodedInfo info = inspect_ok(bytes);
        CHECK(info.sparsifier == SparsifierKind::kTopKApprox);
        CHECK(fabs(info.nnz - k) <= 0.2 * k);
        const std::vector<float> y = decode_ok(bytes, n);
        float min_kept = INFINITY, max_dropped = 0;
        size_t kept = 0, wrong_value = 0;
        for (size_t i = 0; i < n; ++i) {
          if (y[i] != 0.0f) {
            ++kept;
            min_kept = std::min(min_kept, fabsf(x[i]));
            if (y[i] != x[i]) ++wrong_value;
          } else {
            max_dropped = std::max(max_dropped, fabsf(x[i]));
          }
        }
        CHECK(kept == info.nnz);
        CHECK(wrong_value == 0);
        CHECK(min_kept >= max_dropped);
      }
    }
  }

  TEST_CASE("approximate top-k of equal magnitudes still keeps about k") {
    // Every sampled threshold ties with every coordinate: a naive count would keep all of them.
    const size_t n = 100000;
    std::vector<float> x = edgefl_test::gaussian_vector(n, 72);
    for (float& v : x) v = v < 0 ? -0.25f : 0.25f;
    for (const char* text : {"topk:0.01,approx", "topk:0.1,approx+q4"}) {
      INFO("spec: ", std::string(text));
      const CodecSpec spec = parse_or_fail(text);
      const EncodedInfo info = inspect_ok(encode_ok(spec, x, 1));
      CHECK(fabs(info.nnz - spec.density * n) <= 0.2 * spec.density * n);
    }
  }

  TEST_CASE("threshold keeps exactly the coordinates with |x| >= T") {
    const size_t n = 4099;
    std::vector<float> x = edgefl_test::gaussian_vector(n, 73);
    x[0] = 0.5f;
    x[1] = -0.5f;
    x[2] = nextafterf(0.5f, 0.0f);
    x[3] = -nextafterf(0.5f, 0.0f);
    x[n - 1] = 0.5f;
    for (const char* text : {"thresh:0.5", "thresh:0.5,idx=rice"}) {
      INFO("spec: ", std::string(text));
      const std::vector<uint8_t> bytes = encode_ok(text, x, 1);
      const EncodedInfo info = inspect_ok(bytes);
      CHECK(info.param == 0.5f);
      const std::vector<float> y = decode_ok(bytes, n);
      size_t count = 0, bad = 0;
      for (size_t i = 0; i < n; ++i) {
        const bool keep = fabsf(x[i]) >= 0.5f;
        count += keep;
        if (keep ? y[i] != x[i] : y[i] != 0.0f) ++bad;
      }
      CHECK(bad == 0);
      CHECK(info.nnz == count);
    }
    // A threshold nothing reaches gives an empty (valid) encoding.
    const std::vector<uint8_t> none = encode_ok("thresh:1000", x, 1);
    CHECK(inspect_ok(none).nnz == 0);
    CHECK(decode_ok(none, n) == std::vector<float>(n, 0.0f));
  }

  TEST_CASE("random-k picks k coordinates from the seed alone and scales them by n / k") {
    const size_t n = 1000;
    const std::vector<float> a = edgefl_test::uniform_vector(n, 81, 1.0, 2.0);  // no zeros
    const std::vector<float> b = edgefl_test::uniform_vector(n, 82, -2.0, -1.0);
    for (const char* text : {"randk:0.1", "randk:k=37", "randk:0.1,unscaled"}) {
      const CodecSpec spec = parse_or_fail(text);
      INFO("spec: ", std::string(text));
      const std::vector<uint8_t> ea = encode_ok(spec, a, 1234);
      const std::vector<uint8_t> eb = encode_ok(spec, b, 1234);
      const std::vector<uint8_t> ec = encode_ok(spec, a, 1235);
      const EncodedInfo info = inspect_ok(ea);
      CHECK(info.index_bytes == 0);
      CHECK(info.seed == 1234);
      CHECK(info.randk_unscaled == spec.randk_unscaled);
      check_count(spec, n, info.nnz);
      const size_t k = info.nnz;
      const std::vector<float> ya = decode_ok(ea, n), yb = decode_ok(eb, n), yc = decode_ok(ec, n);
      const std::vector<uint32_t> ia = edgefl_test::nonzero_indices(ya);
      CHECK(ia.size() == k);
      CHECK(edgefl_test::nonzero_indices(yb) == ia);  // the same seed picks the same support
      CHECK(edgefl_test::nonzero_indices(yc) != ia);  // another seed, another support
      const double scale = spec.randk_unscaled ? 1.0 : static_cast<double>(n) / k;
      size_t bad = 0;
      for (uint32_t i : ia)
        if (!close_rel(ya[i], static_cast<float>(a[i] * scale), 1e-6)) ++bad;
      CHECK(bad == 0);
    }
  }

  TEST_CASE("random-k supports do not depend on the values coder") {
    const size_t n = 4099;
    const std::vector<float> a = edgefl_test::uniform_vector(n, 83, 1.0, 2.0);
    const std::vector<uint32_t> s1 =
        edgefl_test::nonzero_indices(decode_ok(encode_ok("randk:0.05", a, 9), n));
    const std::vector<uint32_t> s2 =
        edgefl_test::nonzero_indices(decode_ok(encode_ok("randk:0.05+fp16", a, 9), n));
    CHECK(s1 == s2);
  }

  // ---------------------------------------------------------------------------------------------
  // Index codings.

  namespace {

  std::vector<uint32_t> random_set(size_t n, size_t k, uint64_t seed) {
    edgefl_test::SplitMix64 rng(seed);
    std::vector<uint32_t> all(n);
    std::iota(all.begin(), all.end(), 0u);
    for (size_t i = 0; i < k; ++i) std::swap(all[i], all[i + rng.below(n - i)]);
    all.resize(k);
    std::sort(all.begin(), all.end());
    return all;
  }

  // Runs of 1..32 consecutive indices separated by gaps of up to 2000.
  std::vector<uint32_t> clustered_set(size_t n, uint64_t seed) {
    edgefl_test::SplitMix64 rng(seed);
    std::vector<uint32_t> out;
    size_t i = rng.below(50);
    while (i < n) {
      const size_t run = 1 + rng.below(32);
      for (size_t j = 0; j < run && i < n; ++j) out.push_back(static_cast<uint32_t>(i++));
      i += 1 + rng.below(2000);
    }
    return out;
  }

  struct IndexCase {
    std::string name;
    size_t n;
    std::vector<uint32_t> idx;
  };

  std::vector<IndexCase> index_cases() {
    std::vector<IndexCase> cases;
    for (size_t n : {size_t{1}, size_t{2}, size_t{3}, size_t{8}, size_t{63}, size_t{64}, size_t{65},
                     size_t{1000}, size_t{4099}}) {
      cases.push_back({"all", n, random_set(n, n, 1)});
      cases.push_back({"first only", n, {0}});
      cases.push_back({"last only", n, {static_cast<uint32_t>(n - 1)}});
      if (n > 1) cases.push_back({"first and last", n, {0, static_cast<uint32_t>(n - 1)}});
      if (n > 2) cases.push_back({"half", n, random_set(n, n / 2, n)});
      if (n > 10) cases.push_back({"a tenth", n, random_set(n, n / 10, n + 1)});
      cases.push_back({"all but one", n, random_set(n, n - 1, n + 2)});
    }
    for (size_t k : {size_t{1}, size_t{10}, size_t{100}, size_t{1000}, size_t{10000}})
      cases.push_back({"random", 100000, random_set(100000, k, k)});
    cases.push_back({"clustered", 100000, clustered_set(100000, 5)});
    cases.push_back({"clustered", 1000000, clustered_set(1000000, 6)});
    return cases;
  }

  }  // namespace

  TEST_CASE("elias-fano, rice and block rice index codings round-trip any index set") {
    for (const IndexCase& c : index_cases()) {
      for (const char* text :
           {"thresh:0.5,idx=ef", "thresh:0.5,idx=rice", "thresh:0.5,idx=blockrice", "thresh:0.5,idx=auto"}) {
        INFO("spec: ", std::string(text), "  set: ", c.name, "  n: ", c.n, "  k: ", c.idx.size());
        const std::vector<float> x = edgefl_test::indicator_vector(c.n, c.idx);
        const std::vector<uint8_t> bytes = encode_ok(text, x, 1);
        const EncodedInfo info = inspect_ok(bytes);
        CHECK(info.nnz == c.idx.size());
        CHECK(info.value_bytes == 4 * c.idx.size());
        const std::vector<float> y = decode_ok(bytes, c.n);
        CHECK(edgefl_test::same_bits(y, x));
        std::vector<float> acc(c.n, 1.0f);
        REQUIRE(edgefl::decode_add({bytes.data(), bytes.size()}, 2.0f, {acc.data(), c.n}) == Status::kOk);
        size_t bad = 0;
        for (size_t i = 0; i < c.n; ++i)
          if (acc[i] != 1.0f + 2.0f * x[i]) ++bad;
        CHECK(bad == 0);
      }
    }
  }

  TEST_CASE("an empty index set round-trips under every coding") {
    for (const char* text :
         {"thresh:0.5,idx=ef", "thresh:0.5,idx=rice", "thresh:0.5,idx=blockrice", "thresh:0.5,idx=auto"}) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{1000}}) {
        INFO("spec: ", std::string(text), "  n: ", n);
        const std::vector<float> x(n, 0.25f);
        const std::vector<uint8_t> bytes = encode_ok(text, x, 1);
        CHECK(inspect_ok(bytes).nnz == 0);
        CHECK(decode_ok(bytes, n) == std::vector<float>(n, 0.0f));
      }
    }
  }

  namespace {

  // Encodes c's set under `spec` (a threshold spec with an index coding), checks that it used
  // `coding` and that its index region is `want` byte for byte; returns the encoding.
  std::vector<uint8_t> expect_index_region(const char* spec, const IndexCase& c, IndexCoding coding,
                                           const std::vector<uint8_t>& want) {
    const std::vector<uint8_t> bytes = encode_ok(spec, edgefl_test::indicator_vector(c.n, c.idx), 1);
    const EncodedInfo info = inspect_ok(bytes);
    REQUIRE(info.index_coding == coding);
    REQUIRE(info.index_bytes == want.size());
    CHECK(std::vector<uint8_t>(bytes.begin() + 52, bytes.begin() + 52 + static_cast<long>(want.size())) ==
          want);
    return bytes;
  }

  }  // namespace

  TEST_CASE("elias-fano bytes follow the documented layout") {
    for (const IndexCase& c : index_cases()) {
      INFO("set: ", c.name, "  n: ", c.n, "  k: ", c.idx.size());
      const EncodedInfo info = inspect_ok(
          expect_index_region("thresh:0.5,idx=ef", c, IndexCoding::kEliasFano,
                              edgefl_test::elias_fano_reference(c.idx, static_cast<uint32_t>(c.n))));
      // At most 2 + ceil(log2(n / k)) bits per index, plus two bytes of padding.
      const double k = static_cast<double>(c.idx.size());
      if (k > 0) CHECK(8.0 * info.index_bytes <= k * (2 + ceil(log2(static_cast<double>(c.n) / k))) + 16);
    }
  }

  TEST_CASE("rice bytes follow the documented adaptive layout") {
    for (const IndexCase& c : index_cases()) {
      INFO("set: ", c.name, "  n: ", c.n, "  k: ", c.idx.size());
      expect_index_region("thresh:0.5,idx=rice", c, IndexCoding::kRice,
                          edgefl_test::rice_reference(c.idx, static_cast<uint32_t>(c.n)));
    }
  }

  TEST_CASE("block rice bytes follow the documented layout, version 2, within the bound") {
    for (const IndexCase& c : index_cases()) {
      INFO("set: ", c.name, "  n: ", c.n, "  k: ", c.idx.size());
      const std::vector<uint8_t> bytes = expect_index_region(
          "thresh:0.5,idx=blockrice", c, IndexCoding::kBlockRice, edgefl_test::block_rice_reference(c.idx));
      const EncodedInfo info = inspect_ok(bytes);
      CHECK(bytes[4] == 2);
      // The documented bound: k * (3 + log2(1 + n / k)) bits, 7 per block of 16, padding, prefix.
      const double k = static_cast<double>(c.idx.size());
      if (k > 0) {
        CHECK(8.0 * info.index_bytes <=
              k * (3 + log2(1 + static_cast<double>(c.n) / k)) + 7 * ceil(k / 16) + 16 + 40);
      }
    }
  }

  TEST_CASE("encoded_bound() is 0 past EDGEFL_MAX_DIMENSION, where encode() refuses") {
    const size_t too_many = size_t{EDGEFL_MAX_DIMENSION} + 1;
    for (const char* text : {"topk:0.5", "thresh:0.5,idx=blockrice", "sparq:0.1", "fp32"}) {
      INFO("spec: ", std::string(text));
      CHECK(edgefl::encoded_bound(parse_or_fail(text), too_many) == 0);
      CHECK(edgefl::encoded_bound(parse_or_fail(text), size_t{EDGEFL_MAX_DIMENSION}) > 0);
    }
  }

  TEST_CASE("block rice stays within its bound on the sets that cost it most") {
    // One index per block at the far end of a huge gap, and sets whose every block mixes runs of
    // neighbours with one long jump (the parameter cannot suit both), at several densities.
    for (size_t n : {size_t{1} << 10, size_t{1} << 20, size_t{EDGEFL_MAX_DIMENSION}}) {
      for (size_t k : {size_t{1}, size_t{17}, size_t{1000}}) {
        if (k > n / 4) continue;
        std::vector<uint32_t> idx;
        for (size_t j = 0; j < k; ++j) {
          // 15 neighbours then one jump to the next stride of n / k.
          const uint64_t stride = n / k;
          idx.push_back(static_cast<uint32_t>(j * stride + (j % 16 == 15 ? stride - 1 : j % 16)));
        }
        std::sort(idx.begin(), idx.end());
        idx.erase(std::unique(idx.begin(), idx.end()), idx.end());
        INFO("n: ", n, "  k: ", idx.size());
        const std::vector<uint8_t> region = edgefl_test::block_rice_reference(idx);
        const double k_kept = static_cast<double>(idx.size());
        CHECK(8.0 * region.size() <=
              k_kept * (3 + log2(1 + static_cast<double>(n) / k_kept)) + 7 * ceil(k_kept / 16) + 16 + 40);
        if (n <= (size_t{1} << 20)) {
          const std::vector<uint8_t> bytes =
              encode_ok("thresh:0.5,idx=blockrice", edgefl_test::indicator_vector(n, idx), 1);
          CHECK(inspect_ok(bytes).index_bytes == region.size());
          CHECK(edgefl_test::nonzero_indices(decode_ok(bytes, n)) == idx);
        }
      }
    }
  }

  TEST_CASE("on clustered sets rice beats elias-fano, block rice beats rice, and auto picks the cheaper") {
    for (uint64_t seed : {5ull, 6ull, 7ull}) {
      INFO("seed: ", seed);
      const size_t n = 1000000;
      const std::vector<float> x = edgefl_test::indicator_vector(n, clustered_set(n, seed));
      const EncodedInfo ef = inspect_ok(encode_ok("thresh:0.5,idx=ef", x, 1));
      const EncodedInfo rice = inspect_ok(encode_ok("thresh:0.5,idx=rice", x, 1));
      const EncodedInfo block = inspect_ok(encode_ok("thresh:0.5,idx=blockrice", x, 1));
      const EncodedInfo best = inspect_ok(encode_ok("thresh:0.5,idx=auto", x, 1));
      CHECK(rice.index_coding == IndexCoding::kRice);
      CHECK(rice.index_bytes < ef.index_bytes);
      CHECK(block.index_bytes < rice.index_bytes);
      CHECK(best.index_coding == IndexCoding::kBlockRice);
      CHECK(best.index_bytes == std::min(ef.index_bytes, block.index_bytes));
    }
    // On uniformly random sets auto never costs more than either.
    for (size_t k : {size_t{10}, size_t{1000}, size_t{50000}}) {
      INFO("k: ", k);
      const std::vector<float> x = edgefl_test::indicator_vector(100000, random_set(100000, k, 3));
      const EncodedInfo ef = inspect_ok(encode_ok("thresh:0.5,idx=ef", x, 1));
      const EncodedInfo block = inspect_ok(encode_ok("thresh:0.5,idx=blockrice", x, 1));
      const EncodedInfo best = inspect_ok(encode_ok("thresh:0.5,idx=auto", x, 1));
      CHECK(best.index_bytes == std::min(ef.index_bytes, block.index_bytes));
    }
  }

}  // TEST_SUITE

// Its own suite (and ctest entry): a null empty span is the one input an empty std::vector gives,
// and an undefined-behaviour report here must not hide the results of the other suites.
TEST_SUITE("codec.empty") {
  TEST_CASE("a zero-length update encodes and decodes through null spans") {
    for (const char* text : kAllSpecs) {
      INFO("spec: ", std::string(text));
      const CodecSpec spec = parse_or_fail(text);
      std::vector<uint8_t> out(edgefl::encoded_bound(spec, 0)), work(edgefl::workspace_size(spec, 0));
      size_t written = 0;
      REQUIRE(edgefl::encode(spec, {nullptr, 0}, 1, {work.data(), work.size()}, {out.data(), out.size()},
                             &written) == Status::kOk);
      CHECK(edgefl::decode({out.data(), written}, {nullptr, 0}) == Status::kOk);
      CHECK(edgefl::decode_add({out.data(), written}, 1.0f, edgefl::Span<float>(nullptr, 0)) == Status::kOk);
      CHECK(edgefl::decode_add({out.data(), written}, 1.0, edgefl::Span<double>(nullptr, 0)) == Status::kOk);
    }
  }

}  // TEST_SUITE
