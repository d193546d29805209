// tests/sdk/downlink_test.cpp: the downlink of a round (sdk/src/round/downlink.h): the public
// model on the bf16 grid, patches that every device applies to the same bits, the server's
// error feedback (what a patch leaves out goes out later), and the download stream's framing.
#include <math.h>

#include <vector>

#include <doctest/doctest.h>

#include "core/half.h"
#include "edgefl/codec.h"
#include "round/downlink.h"
#include "support/bench_data.h"
#include "support/codec_util.h"

namespace {

using edgefl::Span;
using edgefl::Status;
using edgefl_test::parse_or_fail;

bool on_bf16_grid(const std::vector<float>& m) {
  for (float v : m) {
    if (edgefl::bf16_to_float(edgefl::float_to_bf16(v)) != v) return false;
  }
  return true;
}

double distance(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return sqrt(s);
}

// The server's side of one round: the patch from `server` to `public_model`, applied to it.
std::vector<uint8_t> patch_and_apply(const char* spec_text, const std::vector<float>& server,
                                     std::vector<float>* public_model, uint64_t seed) {
  const edgefl::CodecSpec spec = parse_or_fail(spec_text);
  const size_t n = server.size();
  std::vector<float> scratch(n);
  std::vector<uint8_t> workspace(edgefl::workspace_size(spec, n)), out(edgefl::encoded_bound(spec, n));
  size_t size = 0;
  REQUIRE(edgefl::make_patch(spec, {server.data(), n}, {public_model->data(), n}, seed, {scratch.data(), n},
                             {workspace.data(), workspace.size()}, {out.data(), out.size()},
                             &size) == Status::kOk);
  out.resize(size);
  std::vector<uint8_t> decode_ws(edgefl::stream_decode_workspace({out.data(), size}));
  REQUIRE(edgefl::apply_patch({out.data(), size}, {public_model->data(), n}, {scratch.data(), n},
                              {decode_ws.data(), decode_ws.size()}) == Status::kOk);
  return out;
}

}  // namespace

TEST_SUITE("downlink") {
  TEST_CASE("the public model lives on the bf16 grid; non-finite values are refused") {
    std::vector<float> m = {1.0f, 1.00390625f + 1e-6f, -3.14159f, 0.0f, 1e-30f};
    REQUIRE(edgefl::round_to_bf16_grid({m.data(), m.size()}) == Status::kOk);
    CHECK(on_bf16_grid(m));
    CHECK(m[0] == 1.0f);
    const std::vector<float> again = m;
    REQUIRE(edgefl::round_to_bf16_grid({m.data(), m.size()}) == Status::kOk);
    CHECK(m == again);  // idempotent
    std::vector<float> bad = {1.0f, NAN};
    CHECK(edgefl::round_to_bf16_grid({bad.data(), bad.size()}) == Status::kNonFiniteInput);
    std::vector<float> huge = {3.4e38f};  // rounds to infinity in bf16
    CHECK(edgefl::round_to_bf16_grid({huge.data(), huge.size()}) == Status::kNonFiniteInput);
  }

  TEST_CASE("every device that applies the same patches holds the same bits as the server") {
    const size_t n = 4099;
    std::vector<float> server = edgefl_test::bench_vector(n, 7);
    std::vector<float> public_server(n, 0.0f), device_a(n, 0.0f), device_b(n, 0.0f);
    std::vector<std::vector<uint8_t>> patches;
    for (uint64_t round = 1; round <= 6; ++round) {
      for (size_t i = 0; i < n; ++i) server[i] += 0.01f * float((i * round) % 17) - 0.08f;  // a step
      patches.push_back(patch_and_apply("sparq:0.05", server, &public_server, 1000 + round));
      CHECK(on_bf16_grid(public_server));
    }
    // Device A applies each patch as it comes; device B applies the chain of all six at once.
    std::vector<float> scratch(n);
    std::vector<uint8_t> stream(8 << 20), ws;
    size_t used = 0;
    for (const std::vector<uint8_t>& p : patches) {
      ws.resize(std::max(ws.size(), edgefl::stream_decode_workspace({p.data(), p.size()})));
      REQUIRE(edgefl::apply_patch({p.data(), p.size()}, {device_a.data(), n}, {scratch.data(), n},
                                  {ws.data(), ws.size()}) == Status::kOk);
      REQUIRE(edgefl::stream_append({p.data(), p.size()}, {stream.data(), stream.size()}, &used) ==
              Status::kOk);
    }
    uint64_t count = 0;
    CHECK(edgefl::download_decode_workspace({stream.data(), used}) <= ws.size());
    REQUIRE(edgefl::apply_download({stream.data(), used}, false, {device_b.data(), n}, {scratch.data(), n},
                                   {ws.data(), ws.size()}, &count) == Status::kOk);
    CHECK(count == patches.size());
    CHECK(device_a == public_server);
    CHECK(device_b == public_server);
  }

  TEST_CASE("the server's error feedback: what a sparse patch leaves out goes out in later patches") {
    const size_t n = 8192;
    const std::vector<float> server = edgefl_test::bench_vector(n, 3);
    std::vector<float> public_model(n, 0.0f);
    std::vector<float> bf16_server = server;
    REQUIRE(edgefl::round_to_bf16_grid({bf16_server.data(), n}) == Status::kOk);
    const double start = distance(server, public_model);
    double previous = start;
    for (uint64_t round = 1; round <= 40; ++round) {
      patch_and_apply("topk:0.1", server, &public_model, round);
      const double d = distance(server, public_model);
      CHECK(d <= previous * 1.0000001);  // never further away
      previous = d;
    }
    // 40 patches of the top 10% each carry every coordinate: the public model is the server's in bf16
    // (within bf16 rounding of each coordinate's sum).
    CHECK(previous < 0.01 * start);
    CHECK(distance(bf16_server, public_model) < 0.01 * start);
  }

  TEST_CASE("a bad patch changes nothing; a stream's framing is checked") {
    const size_t n = 1000;
    const std::vector<float> server = edgefl_test::bench_vector(n, 5);
    std::vector<float> public_model(n, 0.0f);
    std::vector<uint8_t> patch = patch_and_apply("q8", server, &public_model, 9);
    const std::vector<float> before = public_model;
    std::vector<float> scratch(n);
    std::vector<uint8_t> ws(64 << 10);
    std::vector<uint8_t> flipped = patch;
    flipped[flipped.size() / 2] ^= 0x10;
    CHECK(edgefl::apply_patch({flipped.data(), flipped.size()}, {public_model.data(), n}, {scratch.data(), n},
                              {ws.data(), ws.size()}) == Status::kChecksumMismatch);
    CHECK(public_model == before);
    std::vector<float> other(n + 1, 0.0f), other_scratch(n + 1);
    CHECK(edgefl::apply_patch({patch.data(), patch.size()}, {other.data(), n + 1},
                              {other_scratch.data(), n + 1},
                              {ws.data(), ws.size()}) == Status::kDimensionMismatch);
    // The whole model travels as dense bf16 only.
    CHECK(edgefl::apply_whole_model({patch.data(), patch.size()}, {public_model.data(), n}) ==
          Status::kBadParameters);
    CHECK(public_model == before);

    std::vector<uint8_t> stream(patch.size() + 8);
    size_t used = 0;
    REQUIRE(edgefl::stream_append({patch.data(), patch.size()}, {stream.data(), stream.size()}, &used) ==
            Status::kOk);
    CHECK(edgefl::stream_append({patch.data(), patch.size()}, {stream.data(), stream.size()}, &used) ==
          Status::kBufferTooSmall);
    Span<const uint8_t> e;
    size_t offset = 0;
    CHECK(edgefl::stream_next({stream.data(), used - 1}, &offset, &e) == Status::kTruncated);
    CHECK(offset == 0);
    CHECK(edgefl::stream_next({stream.data(), 3}, &offset, &e) == Status::kTruncated);
    const uint8_t empty[4] = {0, 0, 0, 0};
    CHECK(edgefl::stream_next({empty, 4}, &offset, &e) == Status::kCorruptPayload);
    REQUIRE(edgefl::stream_next({stream.data(), used}, &offset, &e) == Status::kOk);
    CHECK(e.size() == patch.size());
    CHECK(offset == used);
    // A whole download holds exactly one encoding; a cut stream or an empty one is refused.
    uint64_t count = 0;
    CHECK(edgefl::apply_download({stream.data(), used}, true, {public_model.data(), n}, {scratch.data(), n},
                                 {ws.data(), ws.size()}, &count) == Status::kBadParameters);  // q8, not bf16
    CHECK(edgefl::apply_download({stream.data(), used - 1}, false, {public_model.data(), n},
                                 {scratch.data(), n}, {ws.data(), ws.size()}, &count) == Status::kTruncated);
    CHECK(edgefl::download_decode_workspace({stream.data(), used - 1}) == 0);
    CHECK(edgefl::apply_download({stream.data(), 0}, true, {public_model.data(), n}, {scratch.data(), n},
                                 {ws.data(), ws.size()}, &count) == Status::kTruncated);
    std::vector<uint8_t> two(2 * used);
    size_t two_used = 0;
    REQUIRE(edgefl::stream_append({patch.data(), patch.size()}, {two.data(), two.size()}, &two_used) ==
            Status::kOk);
    REQUIRE(edgefl::stream_append({patch.data(), patch.size()}, {two.data(), two.size()}, &two_used) ==
            Status::kOk);
    CHECK(edgefl::apply_download({two.data(), two_used}, true, {public_model.data(), n}, {scratch.data(), n},
                                 {ws.data(), ws.size()}, &count) == Status::kCorruptPayload);
    CHECK(public_model == before);
  }
}
