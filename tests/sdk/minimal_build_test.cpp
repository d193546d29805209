// tests/sdk/minimal_build_test.cpp: edgefl_core built without the optional codec families
// (EDGEFL_WITH_SKC=0, EDGEFL_WITH_COUNT_SKETCH=0, EDGEFL_WITH_HADAMARD=0; edgefl/config.h), as a
// small device links it: every family left in gives the same bytes as the full build (the
// Cortex-M known answers, platforms/cortex-m/kat_vectors.h), and the families left out are
// refused by name, with no crash and nothing written: kInvalidSpec for their specs, kUnknownCodec
// for their encodings.
#include <string.h>

#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "edgefl/codec.h"
#include "kat_vectors.h"

static_assert(EDGEFL_WITH_SKC == 0 && EDGEFL_WITH_COUNT_SKETCH == 0 && EDGEFL_WITH_HADAMARD == 0,
              "this suite checks the build without the optional families");

namespace {

bool left_out(const char* spec) {
  return strcmp(spec, "skc") == 0 || strncmp(spec, "cs", 2) == 0 || strncmp(spec, "hq", 2) == 0;
}

}  // namespace

TEST_SUITE("codec.minimal_build") {
  TEST_CASE("the families left in encode and decode the known answers bit for bit") {
    std::vector<float> x(edgefl_kat::kN);
    edgefl_kat::make_update(x.data(), x.size());
    REQUIRE(edgefl_kat::fnv1a(x.data(), x.size() * 4) == edgefl_kat::kInputFnv1a);
    size_t kept = 0;
    for (const edgefl_kat::Vector& v : edgefl_kat::kVectors) {
      if (left_out(v.spec)) continue;
      ++kept;
      CAPTURE(v.spec);
      edgefl::CodecSpec spec;
      REQUIRE(edgefl::parse_codec_spec(v.spec, &spec) == edgefl::Status::kOk);
      std::vector<uint8_t> ws(edgefl::workspace_size(spec, x.size()) + 1),
          out(edgefl::encoded_bound(spec, x.size()));
      size_t written = 0;
      REQUIRE(edgefl::encode(spec, {x.data(), x.size()}, edgefl_kat::kSeed, {ws.data(), ws.size()},
                             {out.data(), out.size()}, &written) == edgefl::Status::kOk);
      CHECK(written == v.size);
      CHECK(memcmp(out.data(), v.bytes, v.size) == 0);
      std::vector<float> y(x.size());
      REQUIRE(edgefl::decode({v.bytes, v.size}, {y.data(), y.size()}) == edgefl::Status::kOk);
      CHECK(edgefl_kat::fnv1a(y.data(), y.size() * 4) == v.decoded_fnv1a);
    }
    CHECK(kept == 7);  // bf16, topk+q4, sparq, q8, randk+q8, qsgd, tern
  }

  TEST_CASE(
      "the families left out are refused by name: kInvalidSpec for specs, kUnknownCodec for encodings") {
    for (const char* text : {"skc", "topk:0.1+skc", "cs", "cs:0.1", "hq4", "hq1"}) {
      CAPTURE(text);
      edgefl::CodecSpec spec;
      CHECK(edgefl::parse_codec_spec(text, &spec) == edgefl::Status::kInvalidSpec);
    }
    edgefl::CodecSpec forced;  // a spec built by hand still cannot encode
    forced.values = edgefl::ValueCoderKind::kHadamard;
    forced.bits = 4;
    forced.block = 256;
    std::vector<float> x(512, 0.5f);
    std::vector<uint8_t> out(8192);
    size_t written = 99;
    CHECK(edgefl::encode(forced, {x.data(), x.size()}, 1, {}, {out.data(), out.size()}, &written) ==
          edgefl::Status::kInvalidSpec);
    CHECK(written == 0);
    size_t refused = 0;
    for (const edgefl_kat::Vector& v : edgefl_kat::kVectors) {
      if (!left_out(v.spec)) continue;
      ++refused;
      CAPTURE(v.spec);
      edgefl::EncodedInfo info;
      CHECK(edgefl::inspect({v.bytes, v.size}, &info) == edgefl::Status::kUnknownCodec);
      std::vector<float> y(edgefl_kat::kN, 7.0f);
      CHECK(edgefl::decode({v.bytes, v.size}, {y.data(), y.size()}) == edgefl::Status::kUnknownCodec);
      CHECK(y[0] == 7.0f);  // nothing written
      std::vector<uint8_t> ws(1 << 16);
      CHECK(edgefl::verify({v.bytes, v.size}, {ws.data(), ws.size()}, nullptr) ==
            edgefl::Status::kUnknownCodec);
    }
    CHECK(refused == 3);  // hq4, cs:0.1, skc
  }
}
