// tests/sdk/spec_test.cpp: the codec spec grammar (codec.h): parse, validate, format.
#include <math.h>
#include <string.h>

#include <string>
#include <vector>

#include "edgefl/codec.h"
#include "support/codec_util.h"

namespace {

using edgefl::CodecSpec;
using edgefl::IndexCoding;
using edgefl::SparsifierKind;
using edgefl::Status;
using edgefl::ValueCoderKind;

const char* const kValidSpecs[] = {
    "fp32",
    "fp16",
    "bf16",
    "q1",
    "q2",
    "q4",
    "q8",
    "q4:block=64",
    "q8:det",
    "q8:shared=0.001",
    "q4:block=64,det",
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
    "topk:k=100",
    "topk:0.01+q4",
    "topk:0.01,approx+q4",
    "topk:0.01,approx,sample=0.02+q8",
    "topk:0.01,idx=rice+q4",
    "topk:0.01,idx=ef+q4",
    "topk:0.01,idx=auto+q4",
    "topk:0.01,idx=blockrice+q4",
    "thresh:0.5+fp16",
    "thresh:0.5,idx=rice",
    "thresh:0.5,idx=blockrice",
    "randk:0.1+q8",
    "randk:0.1,unscaled+q8:shared=0.01",
    "randk:k=10",
    "topk:1",
    "topk:0.01+sign",
    "topk:0.01+hq4",
    "topk:0.01+qsgd",
    "topk:0.01+tern",
    "topk:0.01+bf16",
    "q4:block=3",
    "q4:block=1",
    "topk:1e-3",
    "topk:.5",
    "thresh:1e-3",
};

const char* const kInvalidSpecs[] = {
    "",    // empty
    "q3",  // bits not in {1,2,4,8}
    "q0",
    "q16",
    "q",
    "q4:",
    "q4:block=",
    "q4:block=0",
    "q4:block=-1",
    "q4:block=x",
    "q4:block=99999999",  // > EDGEFL_MAX_BLOCK
    "q4:blocks=64",       // unknown key
    "q4:foo",
    "q4:foo=1",
    "topk:0",
    "topk:1.5",
    "topk:-1",
    "topk:",
    "topk",
    "topk:k=0",
    "topk:k=-3",
    "topk:abc",
    "topk:0.01,foo",
    "topk:0.01,idx=zip",
    "topk:0.01,unscaled",
    "foo",
    "fp64",
    "FP32",
    "q4+topk:0.01",  // the sparsifier must come first
    "topk:0.01+topk:0.01",
    "topk:0.01+randk:0.1",
    "fp32+q4",
    "q4+q8",
    "q4+",
    "topk:0.01+",  // trailing '+'
    "+q4",         // leading '+'
    "hq0",
    "hq5",
    "hq8",
    "hq4:det",
    "q8:shared=-1",
    "q8:shared=0",
    "q8:shared=nan",
    "q8:shared=inf",
    "q8:shared=",
    "qsgd:s=0",
    "qsgd:s=32768",
    "qsgd:bucket=0",
    "qsgd:t=3",
    "tern:block=0",
    "sign:block=0",
    "thresh:0",
    "thresh:-0.5",
    "thresh:nan",
    "thresh:0.5,approx",
    "randk:0",
    "randk:1.5",
    "randk:0.1,approx",
    "randk:0.1,idx=rice",
    "randk:0.1,idx=blockrice",
    "topk:nan",
    "randk:nan",
};

bool same_spec(const CodecSpec& a, const CodecSpec& b) {
  return a.sparsifier == b.sparsifier && a.density == b.density && a.k == b.k && a.threshold == b.threshold &&
         a.sample_fraction == b.sample_fraction && a.randk_unscaled == b.randk_unscaled &&
         a.index_coding == b.index_coding && a.values == b.values && a.bits == b.bits && a.block == b.block &&
         a.stochastic == b.stochastic && a.shared_step == b.shared_step && a.levels == b.levels;
}

std::string describe(const CodecSpec& s) {
  return "sparsifier=" + std::to_string(int(s.sparsifier)) + " density=" + std::to_string(s.density) +
         " k=" + std::to_string(s.k) + " threshold=" + std::to_string(s.threshold) +
         " sample=" + std::to_string(s.sample_fraction) + " unscaled=" + std::to_string(s.randk_unscaled) +
         " idx=" + std::to_string(int(s.index_coding)) + " values=" + std::to_string(int(s.values)) +
         " bits=" + std::to_string(s.bits) + " block=" + std::to_string(s.block) +
         " stochastic=" + std::to_string(s.stochastic) + " step=" + std::to_string(s.shared_step) +
         " levels=" + std::to_string(s.levels);
}

std::string format(const CodecSpec& spec) {
  char buf[256];
  const size_t len = edgefl::format_codec_spec(spec, buf, sizeof buf);
  REQUIRE(len < sizeof buf);
  REQUIRE(strlen(buf) == len);
  return std::string(buf, len);
}

}  // namespace

TEST_SUITE("codec.spec") {
  TEST_CASE("every documented spec parses and validates") {
    for (const char* text : kValidSpecs) {
      INFO("spec: '", std::string(text), "'");
      CodecSpec spec;
      CHECK(edgefl::parse_codec_spec(text, &spec) == Status::kOk);
      CHECK(edgefl::validate_codec_spec(spec) == Status::kOk);
    }
  }

  TEST_CASE("malformed and out-of-range specs are rejected with kInvalidSpec") {
    for (const char* text : kInvalidSpecs) {
      INFO("spec: '", std::string(text), "'");
      CodecSpec spec;
      CHECK(edgefl::parse_codec_spec(text, &spec) == Status::kInvalidSpec);
    }
  }

  TEST_CASE("a rejected spec leaves the output untouched") {
    for (const char* text : kInvalidSpecs) {
      INFO("spec: '", std::string(text), "'");
      CodecSpec spec;
      spec.sparsifier = SparsifierKind::kRandomK;
      spec.density = 0.25;
      spec.k = 7;
      spec.values = ValueCoderKind::kQsgd;
      spec.bits = 5;
      spec.block = 77;
      spec.levels = 9;
      CodecSpec before = spec;
      const Status s = edgefl::parse_codec_spec(text, &spec);
      if (s != Status::kOk) CHECK(same_spec(spec, before));
    }
  }

  TEST_CASE("a null text or a null output is an error, not a crash") {
    CodecSpec spec;
    CHECK(edgefl::parse_codec_spec(nullptr, &spec) != Status::kOk);
    CHECK(edgefl::parse_codec_spec("q8", nullptr) != Status::kOk);
  }

  TEST_CASE("dense float coders parse to their kind and width") {
    const CodecSpec fp32 = edgefl_test::parse_or_fail("fp32");
    CHECK(fp32.sparsifier == SparsifierKind::kNone);
    CHECK(fp32.values == ValueCoderKind::kFp32);
    CHECK(fp32.bits == 32);
    const CodecSpec fp16 = edgefl_test::parse_or_fail("fp16");
    CHECK(fp16.values == ValueCoderKind::kFp16);
    CHECK(fp16.bits == 16);
    const CodecSpec bf16 = edgefl_test::parse_or_fail("bf16");
    CHECK(bf16.values == ValueCoderKind::kBf16);
    CHECK(bf16.bits == 16);
  }

  TEST_CASE("uniform quantizers default to stochastic per-block scales") {
    const int widths[] = {1, 2, 4, 8};
    for (int b : widths) {
      const std::string text = "q" + std::to_string(b);
      INFO(std::string(text));
      const CodecSpec s = edgefl_test::parse_or_fail(text.c_str());
      CHECK(s.sparsifier == SparsifierKind::kNone);
      CHECK(s.values == ValueCoderKind::kUniform);
      CHECK(s.bits == b);
      CHECK(s.stochastic);
      CHECK(s.shared_step == 0.0f);
      CHECK(s.block == 256);
    }
  }

  TEST_CASE("uniform options set block, rounding and shared step") {
    CHECK(edgefl_test::parse_or_fail("q4:block=64").block == 64);
    CHECK_FALSE(edgefl_test::parse_or_fail("q8:det").stochastic);
    const CodecSpec both = edgefl_test::parse_or_fail("q4:block=64,det");
    CHECK(both.block == 64);
    CHECK_FALSE(both.stochastic);
    const CodecSpec shared = edgefl_test::parse_or_fail("q8:shared=0.001");
    CHECK(shared.shared_step == 0.001f);
    CHECK(shared.bits == 8);
    CHECK(shared.values == ValueCoderKind::kUniform);
  }

  TEST_CASE("hadamard, qsgd, terngrad and sign parse their parameters") {
    for (int b = 1; b <= 4; ++b) {
      const std::string text = "hq" + std::to_string(b);
      INFO(std::string(text));
      const CodecSpec s = edgefl_test::parse_or_fail(text.c_str());
      CHECK(s.values == ValueCoderKind::kHadamard);
      CHECK(s.bits == b);
    }
    CHECK(edgefl_test::parse_or_fail("hq4:block=1024").block == 1024);
    const CodecSpec q = edgefl_test::parse_or_fail("qsgd");
    CHECK(q.values == ValueCoderKind::kQsgd);
    CHECK(q.levels >= 1);
    const CodecSpec q15 = edgefl_test::parse_or_fail("qsgd:s=15,bucket=256");
    CHECK(q15.levels == 15);
    CHECK(q15.block == 256);
    CHECK(edgefl_test::parse_or_fail("qsgd:bucket=512,s=3").levels == 3);
    CHECK(edgefl_test::parse_or_fail("tern").values == ValueCoderKind::kTernGrad);
    CHECK(edgefl_test::parse_or_fail("tern:block=1024").block == 1024);
    CHECK(edgefl_test::parse_or_fail("sign").values == ValueCoderKind::kScaledSign);
  }

  TEST_CASE("top-k parses density, count, approximation, sample and index coding") {
    const CodecSpec a = edgefl_test::parse_or_fail("topk:0.01");
    CHECK(a.sparsifier == SparsifierKind::kTopK);
    CHECK(a.density == 0.01);
    CHECK(a.k == 0);
    CHECK(a.values == ValueCoderKind::kFp32);  // a sparsifier alone keeps fp32 values
    CHECK(a.index_coding == IndexCoding::kEliasFano);
    CHECK(edgefl_test::parse_or_fail("topk:k=100").k == 100);
    const CodecSpec b = edgefl_test::parse_or_fail("topk:0.01+q4");
    CHECK(b.sparsifier == SparsifierKind::kTopK);
    CHECK(b.values == ValueCoderKind::kUniform);
    CHECK(b.bits == 4);
    CHECK(edgefl_test::parse_or_fail("topk:0.01,approx+q4").sparsifier == SparsifierKind::kTopKApprox);
    const CodecSpec c = edgefl_test::parse_or_fail("topk:0.01,approx,sample=0.02+q8");
    CHECK(c.sparsifier == SparsifierKind::kTopKApprox);
    CHECK(c.sample_fraction == 0.02);
    CHECK(c.bits == 8);
    CHECK(edgefl_test::parse_or_fail("topk:0.01,idx=rice+q4").index_coding == IndexCoding::kRice);
    CHECK(edgefl_test::parse_or_fail("topk:0.01,idx=ef+q4").index_coding == IndexCoding::kEliasFano);
    CHECK(edgefl_test::parse_or_fail("topk:0.01,idx=auto+q4").index_coding == IndexCoding::kAuto);
    CHECK(edgefl_test::parse_or_fail("topk:0.01,idx=blockrice+q4").index_coding == IndexCoding::kBlockRice);
  }

  TEST_CASE("threshold and random-k parse their parameters") {
    const CodecSpec t = edgefl_test::parse_or_fail("thresh:0.5+fp16");
    CHECK(t.sparsifier == SparsifierKind::kThreshold);
    CHECK(t.threshold == 0.5f);
    CHECK(t.values == ValueCoderKind::kFp16);
    const CodecSpec r = edgefl_test::parse_or_fail("randk:0.1+q8");
    CHECK(r.sparsifier == SparsifierKind::kRandomK);
    CHECK(r.density == 0.1);
    CHECK_FALSE(r.randk_unscaled);
    const CodecSpec u = edgefl_test::parse_or_fail("randk:0.1,unscaled+q8:shared=0.01");
    CHECK(u.randk_unscaled);
    CHECK(u.shared_step == 0.01f);
    CHECK(u.values == ValueCoderKind::kUniform);
  }

  TEST_CASE("the sample fraction belongs to approximate top-k only") {
    // 'sample=' estimates the approximate threshold; exact top-k has nothing to sample.
    CodecSpec spec;
    CHECK(edgefl::parse_codec_spec("topk:0.01,sample=0.05", &spec) == Status::kInvalidSpec);
  }

  TEST_CASE("validate rejects impossible hand-built specs") {
    CodecSpec ok;  // default: dense fp32
    CHECK(edgefl::validate_codec_spec(ok) == Status::kOk);

    CodecSpec s = edgefl_test::parse_or_fail("q4");
    s.bits = 3;
    CHECK(edgefl::validate_codec_spec(s) == Status::kInvalidSpec);
    s = edgefl_test::parse_or_fail("q4");
    s.block = 0;
    CHECK(edgefl::validate_codec_spec(s) == Status::kInvalidSpec);
    s = edgefl_test::parse_or_fail("q4");
    s.block = EDGEFL_MAX_BLOCK + 1;
    CHECK(edgefl::validate_codec_spec(s) == Status::kInvalidSpec);
    s = edgefl_test::parse_or_fail("hq4");
    s.bits = 5;
    CHECK(edgefl::validate_codec_spec(s) == Status::kInvalidSpec);
    s = edgefl_test::parse_or_fail("fp16");
    s.bits = 32;
    CHECK(edgefl::validate_codec_spec(s) == Status::kInvalidSpec);
    s = edgefl_test::parse_or_fail("topk:0.01");
    s.density = 0.0;
    CHECK(edgefl::validate_codec_spec(s) == Status::kInvalidSpec);
    s.density = 1.5;
    CHECK(edgefl::validate_codec_spec(s) == Status::kInvalidSpec);
    s.density = NAN;
    CHECK(edgefl::validate_codec_spec(s) == Status::kInvalidSpec);
    s = edgefl_test::parse_or_fail("thresh:0.5");
    s.threshold = 0.0f;
    CHECK(edgefl::validate_codec_spec(s) == Status::kInvalidSpec);
    s.threshold = INFINITY;
    CHECK(edgefl::validate_codec_spec(s) == Status::kInvalidSpec);
    s = edgefl_test::parse_or_fail("q8:shared=0.01");
    s.shared_step = NAN;
    CHECK(edgefl::validate_codec_spec(s) == Status::kInvalidSpec);
    s.shared_step = -0.01f;
    CHECK(edgefl::validate_codec_spec(s) == Status::kInvalidSpec);
    s = edgefl_test::parse_or_fail("qsgd");
    s.levels = 0;
    CHECK(edgefl::validate_codec_spec(s) == Status::kInvalidSpec);
    s = edgefl_test::parse_or_fail("q8");
    s.values = static_cast<ValueCoderKind>(99);
    CHECK(edgefl::validate_codec_spec(s) == Status::kInvalidSpec);
    s = edgefl_test::parse_or_fail("q8");
    s.sparsifier = static_cast<SparsifierKind>(99);
    CHECK(edgefl::validate_codec_spec(s) == Status::kInvalidSpec);
    s = edgefl_test::parse_or_fail("topk:0.01");
    s.index_coding = static_cast<IndexCoding>(7);
    CHECK(edgefl::validate_codec_spec(s) == Status::kInvalidSpec);
  }

  TEST_CASE("an invalid spec needs no workspace and encodes to kInvalidSpec") {
    CodecSpec s = edgefl_test::parse_or_fail("q4");
    s.bits = 3;
    CHECK(edgefl::workspace_size(s, 1000) == 0);
    std::vector<float> x(1000, 1.0f);
    std::vector<uint8_t> out(1 << 16);
    size_t written = 99;
    CHECK(edgefl::encode(s, {x.data(), x.size()}, 1, {nullptr, 0}, {out.data(), out.size()}, &written) ==
          Status::kInvalidSpec);
    CHECK(written == 0);
  }

  TEST_CASE("a spec that validates is never refused by encode as kInvalidSpec") {
    // encode() re-validates; it must agree with validate_codec_spec() (and with workspace_size(),
    // which returns 0 for exactly the invalid specs).
    const char* const extremes[] = {"q8:shared=1e30", "q8:shared=1e-30",   "q8:shared=1e-40", "thresh:1e30",
                                    "thresh:1e-40",   "topk:k=4294967295", "q4:block=65536",  "qsgd:s=32767"};
    std::vector<float> x(1000, 0.5f);
    for (const char* text : extremes) {
      INFO("spec: ", std::string(text));
      CodecSpec spec;
      if (edgefl::parse_codec_spec(text, &spec) != Status::kOk) continue;  // rejecting it is fine too
      REQUIRE(edgefl::validate_codec_spec(spec) == Status::kOk);
      std::vector<uint8_t> work(edgefl::workspace_size(spec, x.size())),
          out(edgefl::encoded_bound(spec, x.size()));
      size_t written = 0;
      CHECK(edgefl::encode(spec, {x.data(), x.size()}, 1, {work.data(), work.size()},
                           {out.data(), out.size()}, &written) != Status::kInvalidSpec);
    }
  }

  TEST_CASE("format then parse gives back the same spec") {
    for (const char* text : kValidSpecs) {
      INFO("spec: '", std::string(text), "'");
      const CodecSpec spec = edgefl_test::parse_or_fail(text);
      const std::string canonical = format(spec);
      INFO("canonical: '", canonical, "'");
      CodecSpec again;
      REQUIRE(edgefl::parse_codec_spec(canonical.c_str(), &again) == Status::kOk);
      INFO("parsed:   ", describe(spec));
      INFO("reparsed: ", describe(again));
      CHECK(same_spec(spec, again));
      CHECK(format(again) == canonical);  // the canonical spelling is a fixed point
    }
  }

  TEST_CASE("format reports the full length and truncates with a NUL") {
    const CodecSpec spec = edgefl_test::parse_or_fail("topk:0.01,approx,sample=0.02+q8");
    const std::string full = format(spec);
    REQUIRE(full.size() > 6);
    char small[6];
    memset(small, 'x', sizeof small);
    CHECK(edgefl::format_codec_spec(spec, small, sizeof small) == full.size());
    CHECK(small[5] == '\0');
    CHECK(std::string(small) == full.substr(0, 5));
    char none[4] = {'x', 'x', 'x', 'x'};
    CHECK(edgefl::format_codec_spec(spec, none, 0) == full.size());
    CHECK(none[0] == 'x');  // cap 0: nothing written
    CHECK(edgefl::format_codec_spec(spec, nullptr, 0) == full.size());
  }

  TEST_CASE("enum names are short and never null") {
    CHECK(std::string(edgefl::sparsifier_name(SparsifierKind::kTopK)) != "");
    CHECK(edgefl::sparsifier_name(static_cast<SparsifierKind>(200)) != nullptr);
    CHECK(edgefl::value_coder_name(static_cast<ValueCoderKind>(200)) != nullptr);
    CHECK(edgefl::index_coding_name(static_cast<IndexCoding>(200)) != nullptr);
    CHECK(edgefl::status_name(static_cast<Status>(12345)) != nullptr);
    CHECK(edgefl::status_message(static_cast<Status>(12345)) != nullptr);
    CHECK(std::string(edgefl::status_name(Status::kChecksumMismatch)) == "checksum_mismatch");
    CHECK(std::string(edgefl::status_name(Status::kOk)) == "ok");
  }

}  // TEST_SUITE
