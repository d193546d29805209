// tests/sdk/codec_budget_test.cpp: the client working-memory budget (reference/compression.md
// section 6: codec workspace <= 0.1x the fp32 update), for every codec of the benchmark list.
#include <vector>

#include "edgefl/codec.h"
#include "support/bench_data.h"
#include "support/codec_util.h"

namespace {

const char* const kBenchmarkSpecs[] = {
    "fp32",
    "fp16",
    "bf16",
    "q8",
    "q4",
    "q2",
    "q1",
    "q8:det",
    "q4:block=64",
    "q8:shared=0.001,clip",
    "hq4",
    "hq2",
    "qsgd",
    "tern",
    "sign",
    "topk:0.01",
    "topk:0.01+q4",
    "topk:0.01,approx+q4",
    "topk:0.1+q4",
    "topk:0.01,idx=rice+q4",
    "thresh:0.001+q8",
    "randk:0.01+q8",
    "randk:0.1+q8",
};

constexpr size_t kN = size_t{1} << 20;

}  // namespace

TEST_SUITE("codec.budget") {
  TEST_CASE("every benchmark codec needs at most a tenth of the update as workspace") {
    for (const char* text : kBenchmarkSpecs) {
      const edgefl::CodecSpec spec = edgefl_test::parse_or_fail(text);
      const size_t ws = edgefl::workspace_size(spec, kN);
      INFO("spec: ", std::string(text), "  workspace: ", ws, " bytes (", 100.0 * ws / (4.0 * kN),
           "% of the update)");
      CHECK(ws <= 4 * kN / 10);
    }
  }

  TEST_CASE("workspace sizes are pinned: growth beyond 3% fails") {
    // Measured at n = 2^20 when the codecs landed (style.md rule 2: the high-water mark is pinned by
    // a test). A deliberate increase updates this table in the same change; a decrease is welcome
    // and should update it too.
    struct Pin {
      const char* spec;
      size_t bytes;
    };
    const Pin pins[] = {
        {"fp32", 0},
        {"fp16", 0},
        {"bf16", 0},
        {"q8", 0},
        {"q4", 0},
        {"q2", 0},
        {"q1", 0},
        {"q8:det", 0},
        {"q4:block=64", 0},
        {"q8:shared=0.001,clip", 0},
        {"hq4", 1088},
        {"hq2", 1088},
        {"qsgd", 0},
        {"tern", 0},
        {"sign", 0},
        {"topk:0.01", 9344},
        {"topk:0.01+q4", 9344},
        {"topk:0.01,approx+q4", 219188},
        {"topk:0.1+q4", 9344},
        {"topk:0.01,idx=rice+q4", 9344},
        {"thresh:0.001+q8", 1088},
        {"randk:0.01+q8", 1088},
        {"randk:0.1+q8", 1088},
    };
    static_assert(sizeof pins / sizeof pins[0] == sizeof kBenchmarkSpecs / sizeof kBenchmarkSpecs[0],
                  "one pin per benchmark codec");
    for (const Pin& p : pins) {
      const size_t ws = edgefl::workspace_size(edgefl_test::parse_or_fail(p.spec), kN);
      INFO("spec: ", std::string(p.spec), "  workspace: ", ws, "  pinned: ", p.bytes);
      CHECK(ws <= p.bytes + p.bytes * 3 / 100);
      if (ws < p.bytes) MESSAGE("workspace of ", std::string(p.spec), " shrank to ", ws, ": update the pin");
    }
  }

  TEST_CASE("the budgeted workspace really is enough on Bench-1M-like data") {
    // Heavy-tailed data with local scales: the worst case for threshold estimation and index runs.
    const std::vector<float> x = edgefl_test::bench_vector(kN, 1);
    for (const char* text : kBenchmarkSpecs) {
      INFO("spec: ", std::string(text));
      const std::vector<uint8_t> bytes = edgefl_test::encode_ok(text, x, 2);  // exactly workspace_size bytes
      const edgefl::EncodedInfo info = edgefl_test::inspect_ok(bytes);
      CHECK(info.n == kN);
      CHECK(bytes.size() <= edgefl::encoded_bound(edgefl_test::parse_or_fail(text), kN));
    }
  }

  TEST_CASE("encoded_bound is within a header and a few blocks of the codec's bit rate") {
    struct Case {
      const char* spec;
      double bits_per_coordinate;  // payload upper bound, before per-block scales
    };
    const Case cases[] = {{"fp32", 32},
                          {"fp16", 16},
                          {"bf16", 16},
                          {"q8", 8 + 64.0 / 256},
                          {"q4", 4 + 64.0 / 256},
                          {"q1", 1 + 64.0 / 256},
                          {"sign", 1 + 32.0 / 256},
                          {"tern", (8.0 * 52 + 32) / 256},  // 52 = ceil(256 / 5)
                          {"hq4", 4 + 32.0 / 256}};
    for (const Case& c : cases) {
      INFO("spec: ", std::string(c.spec));
      const size_t bound = edgefl::encoded_bound(edgefl_test::parse_or_fail(c.spec), kN);
      CHECK(bound <= edgefl::kEncodedHeaderBytes + static_cast<size_t>(c.bits_per_coordinate * kN / 8) + 64);
    }
  }

}  // TEST_SUITE
