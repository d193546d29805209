// tests/sdk/sketch_test.cpp: the sketch codecs through the public API only (edgefl/codec.h):
// SKCompress ("skc", reference/compression.md section 2), the Count Sketch ("cs", FetchSGD) and
// the "sparq" alias. Black-box: nothing here includes sdk/src; the byte layout used to craft
// malformed encodings is the documented one (format.h, mirrored in tests/support/codec_util.h,
// and the skc value region of sketch/skc.h, restated below).
#include <math.h>
#include <string.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "edgefl/codec.h"
#include "support/bench_data.h"
#include "support/codec_util.h"

// Smaller problems under AddressSanitizer (the asan preset is a Debug build): the properties
// checked are the same, only n shrinks.
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

namespace {

using edgefl::CodecSpec;
using edgefl::EncodedInfo;
using edgefl::Status;
using edgefl::ValueCoderKind;
using edgefl_test::encode_ok;
using edgefl_test::fix_checksum;
using edgefl_test::inspect_ok;
using edgefl_test::load_u32;
using edgefl_test::parse_or_fail;
namespace wire = edgefl_test::wire;

constexpr bool kSlow = EDGEFL_SKETCH_TEST_SLOW != 0;

// Under the sanitizers a crash aborts the process (abort_on_error=1, halt_on_error=1): doctest's
// report is written line by line, so that the results of the cases before a crash are not lost
// in a stdout buffer.
[[maybe_unused]] const bool kUnbufferedReport = [] {
  std::cout.setf(std::ios::unitbuf);
  return true;
}();

// Little-endian stores into a crafted encoding, bounds-checked (and so free of GCC's
// -Wstringop-overflow false positives on the shared helpers).
void put_u32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  REQUIRE(at + 4 <= b.size());
  for (size_t i = 0; i < 4; ++i) b.at(at + i) = static_cast<uint8_t>(v >> (8 * i));
}
void put_f32(std::vector<uint8_t>& b, size_t at, float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  put_u32(b, at, u);
}

// ---- helpers -------------------------------------------------------------------------------

std::string spell(const CodecSpec& s) {
  char buf[512];
  const size_t need = edgefl::format_codec_spec(s, buf, sizeof buf);
  REQUIRE(need < sizeof buf);
  return std::string(buf, need);
}

// Every field of two specs, compared (CodecSpec has no operator==).
bool same_spec(const CodecSpec& a, const CodecSpec& b) {
  return a.sparsifier == b.sparsifier && a.density == b.density && a.k == b.k && a.threshold == b.threshold &&
         a.sample_fraction == b.sample_fraction && a.randk_unscaled == b.randk_unscaled &&
         a.index_coding == b.index_coding && a.values == b.values && a.bits == b.bits && a.block == b.block &&
         a.stochastic == b.stochastic && a.shared_step == b.shared_step && a.clip == b.clip &&
         a.entropy_coded == b.entropy_coded && a.levels == b.levels && a.skc_bins == b.skc_bins &&
         a.skc_groups == b.skc_groups && a.skc_cols == b.skc_cols && a.quantile_k == b.quantile_k &&
         a.sketch_rows == b.sketch_rows && a.sketch_cells == b.sketch_cells && a.sketch_cols == b.sketch_cols;
}

// n zeros, then `nnz` distinct uniformly random positions set to N(0, scale^2) draws (never 0).
std::vector<float> sparse_gaussian(size_t n, size_t nnz, uint64_t seed, double scale = 1.0) {
  edgefl_test::SplitMix64 rng(seed);
  std::vector<float> x(n, 0.0f);
  size_t placed = 0;
  while (placed < nnz) {
    const size_t i = static_cast<size_t>(rng.below(n));
    if (x[i] != 0.0f) continue;
    float v = 0.0f;
    while (v == 0.0f) v = static_cast<float>(rng.gaussian() * scale);
    x[i] = v;
    ++placed;
  }
  return x;
}

// The exact top-k set: the k largest |x|, ties broken by the lower index (codec.h).
std::vector<uint32_t> exact_top_k(const std::vector<float>& x, size_t k) {
  std::vector<uint32_t> order(x.size());
  for (size_t i = 0; i < x.size(); ++i) order[i] = static_cast<uint32_t>(i);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const float fa = fabsf(x[a]), fb = fabsf(x[b]);
    return fa != fb ? fa > fb : a < b;
  });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

std::vector<uint8_t> decode_workspace_for(const std::vector<uint8_t>& bytes) {
  const EncodedInfo info = inspect_ok(bytes);
  return std::vector<uint8_t>(edgefl::decode_workspace_size(info));
}

// decode() with a workspace of exactly decode_workspace_size() bytes (its own heap block).
Status decode_ws(const std::vector<uint8_t>& bytes, std::vector<float>* out) {
  EncodedInfo info;
  size_t ws_size = 0;
  if (edgefl::inspect({bytes.data(), bytes.size()}, &info) == Status::kOk)
    ws_size = edgefl::decode_workspace_size(info);
  std::vector<uint8_t> ws(ws_size);
  static float empty_target = 0.0f;
  float* data = out->empty() ? &empty_target : out->data();
  return edgefl::decode({bytes.data(), bytes.size()}, {data, out->size()}, {ws.data(), ws.size()});
}

std::vector<float> decode_ws_ok(const std::vector<uint8_t>& bytes, size_t n) {
  std::vector<float> out(n, 0.0f);
  REQUIRE(decode_ws(bytes, &out) == Status::kOk);
  return out;
}

// The outcome of decode, decode_add (float) and decode_add (double) over untrusted bytes. A failing
// call must leave its output bit-identical; a succeeding one must produce finite values.
struct Outcome {
  Status decode = Status::kOk;
  Status add_f = Status::kOk;
  Status add_d = Status::kOk;
  bool untouched_on_error = true;
  bool finite_on_success = true;
};

Outcome run_untrusted(const std::vector<uint8_t>& bytes_in, size_t n, size_t fallback_ws) {
  const std::vector<uint8_t> bytes(bytes_in);  // an exactly sized heap block
  const edgefl::Span<const uint8_t> in(bytes.data(), bytes.size());
  // The workspace the header asks for when the header verifies and matches n (a mutated n fails
  // with kDimensionMismatch before the workspace is looked at), else a small fallback: decode
  // verifies the header before it uses any workspace.
  EncodedInfo info;
  size_t ws_size = fallback_ws;
  if (edgefl::inspect(in, &info) == Status::kOk && info.n == n) ws_size = edgefl::decode_workspace_size(info);
  std::vector<uint8_t> ws(ws_size + 1);
  const edgefl::Span<uint8_t> work(ws.data(), ws_size);
  Outcome o;

  std::vector<float> out(n + 1);
  for (size_t i = 0; i <= n; ++i) out[i] = static_cast<float>(i) * 0.25f - 2.0f;
  const std::vector<float> out_before = out;
  o.decode = edgefl::decode(in, {out.data(), n}, work);
  if (out[n] != out_before[n]) o.untouched_on_error = false;  // never past n
  if (o.decode != Status::kOk) {
    if (!edgefl_test::same_bits(out, out_before)) o.untouched_on_error = false;
  } else if (!edgefl_test::all_finite(out)) {
    o.finite_on_success = false;
  }

  std::vector<float> acc(n + 1);
  for (size_t i = 0; i <= n; ++i) acc[i] = 1.0f + static_cast<float>(i % 17);
  const std::vector<float> acc_before = acc;
  o.add_f = edgefl::decode_add(in, -0.75f, {acc.data(), n}, work);
  if (o.add_f != Status::kOk) {
    if (!edgefl_test::same_bits(acc, acc_before)) o.untouched_on_error = false;
  } else if (!edgefl_test::all_finite(acc)) {
    o.finite_on_success = false;
  }

  std::vector<double> acc_d(n + 1);
  for (size_t i = 0; i <= n; ++i) acc_d[i] = 0.5 * static_cast<double>(i % 5) - 1.0;
  const std::vector<double> acc_d_before = acc_d;
  o.add_d = edgefl::decode_add(in, 2.5, {acc_d.data(), n}, work);
  if (o.add_d != Status::kOk) {
    if (memcmp(acc_d.data(), acc_d_before.data(), acc_d.size() * sizeof(double)) != 0)
      o.untouched_on_error = false;
  } else {
    for (double v : acc_d)
      if (!std::isfinite(v)) o.finite_on_success = false;
  }
  return o;
}

// Checks a run over malformed or mutated bytes: the three entry points agree, nothing is touched on
// error and nothing non-finite comes out on success.
void check_untrusted(const std::vector<uint8_t>& bytes, size_t n, size_t fallback_ws, bool must_fail) {
  const Outcome o = run_untrusted(bytes, n, fallback_ws);
  CHECK(o.untouched_on_error);
  CHECK(o.finite_on_success);
  CHECK(o.add_f == o.decode);
  CHECK(o.add_d == o.decode);
  if (must_fail) CHECK(o.decode != Status::kOk);
}

// Indices i with v[i] != 0.
std::vector<uint32_t> support_of(const std::vector<float>& v) {
  return edgefl_test::nonzero_indices(v);
}

// The skc contract on one decode: non-zeros exactly at the carried keys, every carried value keeps
// the sign of the true value and stays within [min, max] of the carried values (bucket
// representatives are midpoints of splits inside that range).
struct SkcCheck {
  size_t support_errors = 0;
  size_t sign_flips = 0;
  size_t out_of_range = 0;
  size_t first_bad = static_cast<size_t>(-1);
};

SkcCheck check_skc_decode(const std::vector<float>& x, const std::vector<uint32_t>& carried,
                          const std::vector<float>& y) {
  SkcCheck c;
  float lo = INFINITY, hi = -INFINITY;
  for (uint32_t i : carried) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  std::vector<uint8_t> is_carried(x.size(), 0);
  for (uint32_t i : carried) is_carried[i] = 1;
  for (size_t i = 0; i < x.size(); ++i) {
    bool bad = false;
    if (!is_carried[i]) {
      if (y[i] != 0.0f) ++c.support_errors, bad = true;
    } else if (x[i] != 0.0f) {
      if (y[i] == 0.0f) ++c.support_errors, bad = true;
      if ((y[i] > 0.0f) != (x[i] > 0.0f) || (y[i] < 0.0f) != (x[i] < 0.0f)) ++c.sign_flips, bad = true;
      if (!(y[i] >= lo && y[i] <= hi)) ++c.out_of_range, bad = true;
    }
    if (bad && c.first_bad == static_cast<size_t>(-1)) c.first_bad = i;
  }
  return c;
}

void require_clean(const SkcCheck& c, const std::vector<float>& x, const std::vector<float>& y) {
  const size_t i = c.first_bad;
  const bool any = i != static_cast<size_t>(-1);
  INFO("support errors: ", c.support_errors, "  sign flips: ", c.sign_flips,
       "  out of range: ", c.out_of_range);
  INFO("first bad index: ", any ? std::to_string(i) : std::string("none"), "  true: ", any ? x[i] : 0.0f,
       "  decoded: ", any ? y[i] : 0.0f);
  CHECK(c.support_errors == 0);
  CHECK(c.sign_flips == 0);
  CHECK(c.out_of_range == 0);
}

// decode_add(w) adds exactly w * decode() at every carried coordinate and leaves the others alone,
// bit for bit, for both accumulator types.
void check_decode_add_matches(const std::vector<uint8_t>& bytes, const std::vector<float>& y, float w) {
  const size_t n = y.size();
  std::vector<uint8_t> ws = decode_workspace_for(bytes);
  std::vector<float> acc(n);
  for (size_t i = 0; i < n; ++i) acc[i] = static_cast<float>(static_cast<int>(i % 11) - 5) * 0.125f;
  const std::vector<float> before = acc;
  REQUIRE(edgefl::decode_add({bytes.data(), bytes.size()}, w, {acc.data(), n}, {ws.data(), ws.size()}) ==
          Status::kOk);
  size_t mismatches = 0;
  for (size_t i = 0; i < n; ++i) {
    const float want = y[i] == 0.0f ? before[i] : before[i] + w * y[i];
    if (memcmp(&acc[i], &want, 4) != 0) ++mismatches;
  }
  CHECK(mismatches == 0);

  std::vector<double> acc_d(n, 0.0);
  for (size_t i = 0; i < n; ++i) acc_d[i] = static_cast<double>(i % 7) - 3.0;
  const std::vector<double> before_d = acc_d;
  const double wd = static_cast<double>(w);
  REQUIRE(edgefl::decode_add({bytes.data(), bytes.size()}, wd, {acc_d.data(), n}, {ws.data(), ws.size()}) ==
          Status::kOk);
  mismatches = 0;
  for (size_t i = 0; i < n; ++i) {
    const double want = y[i] == 0.0f ? before_d[i] : before_d[i] + wd * static_cast<double>(y[i]);
    if (acc_d[i] != want) ++mismatches;
  }
  CHECK(mismatches == 0);
}

// Encodes with the workspace and the output pre-filled with `fill` (exact sizes).
std::vector<uint8_t> encode_with_fill(const CodecSpec& spec, const std::vector<float>& x, uint64_t seed,
                                      uint8_t fill) {
  std::vector<uint8_t> ws(edgefl::workspace_size(spec, x.size()), fill);
  const size_t cap = edgefl::encoded_bound(spec, x.size());
  std::vector<uint8_t> out(cap, fill);
  size_t written = 0;
  REQUIRE(edgefl::encode(spec, {x.data(), x.size()}, seed, {ws.data(), ws.size()}, {out.data(), cap},
                         &written) == Status::kOk);
  REQUIRE(written <= cap);
  out.resize(written);
  return out;
}

// Integer multiples of a power-of-two step: the Count Sketch codes are exact (no rounding).
std::vector<float> step_multiples(size_t n, uint64_t seed, float step, int max_m, double density) {
  edgefl_test::SplitMix64 rng(seed);
  std::vector<float> x(n, 0.0f);
  for (size_t i = 0; i < n; ++i) {
    if (rng.uniform() >= density) continue;
    const int m = static_cast<int>(rng.below(2 * static_cast<uint64_t>(max_m) + 1)) - max_m;
    x[i] = static_cast<float>(m) * step;
  }
  return x;
}

std::vector<float> plus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> c(a.size());
  for (size_t i = 0; i < a.size(); ++i) c[i] = a[i] + b[i];
  return c;
}

struct AddResult {
  Status status;
  std::vector<uint8_t> bytes;
};

AddResult add(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  EncodedInfo ia, ib;
  size_t cap = 1 << 16;
  if (edgefl::inspect({a.data(), a.size()}, &ia) == Status::kOk &&
      edgefl::inspect({b.data(), b.size()}, &ib) == Status::kOk)
    cap = edgefl::add_encoded_bound(ia, ib);
  AddResult r;
  r.bytes.assign(cap, 0xCD);
  size_t written = 999;
  r.status = edgefl::add_encoded({a.data(), a.size()}, {b.data(), b.size()}, {r.bytes.data(), cap}, &written);
  if (r.status == Status::kOk) {
    REQUIRE(written <= cap);
    r.bytes.resize(written);
  } else {
    CHECK(written == 0);
  }
  return r;
}

// Byte offsets inside an skc value region (sketch/skc.h, "Value region layout"), relative to the
// start of the encoding.
struct SkcRegion {
  size_t min = wire::kHeaderBytes;
  size_t max = wire::kHeaderBytes + 4;
  size_t split_count = wire::kHeaderBytes + 8;
  size_t splits = wire::kHeaderBytes + 10;
  size_t zero = 0;    // u16
  size_t groups = 0;  // u8 G
  size_t group0 = 0;  // first group header: u16 first, u16 buckets, u32 keys, u32 columns, u8 layout,
                      // u32 key bytes, u32 sketch bytes (21 bytes)
  explicit SkcRegion(const std::vector<uint8_t>& b) {
    const unsigned s = static_cast<unsigned>(b[split_count] | (b[split_count + 1] << 8));
    zero = splits + 4 * size_t(s);
    groups = zero + 2;
    group0 = groups + 1;
  }
};

}  // namespace

TEST_SUITE("sketch") {
  // ---- spec grammar ------------------------------------------------------------------------

  TEST_CASE("sketch specs parse, and their canonical spelling is a fixed point") {
    const char* const specs[] = {
        "skc",
        "topk:0.01+skc",
        "skc:bins=64,groups=4,rows=3,cols=0.5,k=64",
        "thresh:0.5+skc",
        "skc:bins=2,groups=2,rows=1,cols=4,k=16",
        "skc:bins=256,groups=16,rows=4,k=1024",
        "cs",
        "cs:0.05",
        "cs:cols=1000,rows=3,k=50,step=0.001",
        "cs:cells=0.2,rows=15,top=1",
        "sparq:0.01",
        "sparq:0.1",
    };
    for (const char* text : specs) {
      INFO("spec: ", std::string(text));
      const CodecSpec s = parse_or_fail(text);
      CHECK(edgefl::validate_codec_spec(s) == Status::kOk);
      const std::string canonical = spell(s);
      INFO("canonical: ", canonical);
      const CodecSpec again = parse_or_fail(canonical.c_str());
      CHECK(same_spec(s, again));
      CHECK(spell(again) == canonical);
    }
  }

  TEST_CASE("skc and cs defaults and explicit parameters land in the documented fields") {
    const CodecSpec skc = parse_or_fail("skc");
    CHECK(skc.values == ValueCoderKind::kSkCompress);
    CHECK(skc.sparsifier == edgefl::SparsifierKind::kNone);
    CHECK(skc.index_coding == edgefl::IndexCoding::kNone);
    CHECK(skc.skc_bins == 256);  // the published defaults (reference/compression.md section 2)
    CHECK(skc.skc_groups == 8);
    CHECK(skc.sketch_rows == 2);
    CHECK(skc.skc_cols == 0.3f);
    CHECK(skc.quantile_k == 128);

    const CodecSpec topk = parse_or_fail("topk:0.01+skc");
    CHECK(topk.sparsifier == edgefl::SparsifierKind::kTopK);
    CHECK(topk.density == 0.01);
    CHECK(topk.values == ValueCoderKind::kSkCompress);
    CHECK(topk.index_coding == edgefl::IndexCoding::kNone);  // skc codes its own keys

    const CodecSpec custom = parse_or_fail("skc:bins=64,groups=4,rows=3,cols=0.5,k=64");
    CHECK(custom.skc_bins == 64);
    CHECK(custom.skc_groups == 4);
    CHECK(custom.sketch_rows == 3);
    CHECK(custom.skc_cols == 0.5f);
    CHECK(custom.quantile_k == 64);

    const CodecSpec cs = parse_or_fail("cs");
    CHECK(cs.values == ValueCoderKind::kCountSketch);
    CHECK(cs.sparsifier == edgefl::SparsifierKind::kNone);
    CHECK(cs.sketch_rows == 5);
    CHECK(cs.sketch_cells == 0.1);
    CHECK(cs.sketch_cols == 0u);
    CHECK(cs.shared_step > 0.0f);

    CHECK(parse_or_fail("cs:0.05").sketch_cells == 0.05);
    const CodecSpec shaped = parse_or_fail("cs:cols=1000,rows=3,k=50,step=0.001");
    CHECK(shaped.sketch_cols == 1000u);
    CHECK(shaped.sketch_rows == 3);
    CHECK(shaped.k == 50u);
    CHECK(shaped.shared_step == 0.001f);
  }

  TEST_CASE("sparq is the documented alias of topk:FRACTION,approx,idx=auto+q4:ans") {
    const char* const aliases[][2] = {{"sparq:0.01", "topk:0.01,approx,idx=auto+q4:ans"},
                                      {"sparq:0.1", "topk:0.1,approx,idx=auto+q4:ans"},
                                      {"sparq:0.003", "topk:0.003,approx,idx=auto+q4:ans"}};
    for (const auto& pair : aliases) {
      INFO("alias: ", std::string(pair[0]));
      const CodecSpec a = parse_or_fail(pair[0]);
      const CodecSpec b = parse_or_fail(pair[1]);
      CHECK(same_spec(a, b));
      CHECK(a.sparsifier == edgefl::SparsifierKind::kTopKApprox);
      CHECK(a.index_coding == edgefl::IndexCoding::kAuto);
      CHECK(a.values == ValueCoderKind::kUniform);
      CHECK(a.bits == 4);
      CHECK(a.entropy_coded);
    }
  }

  TEST_CASE("invalid sketch specs are kInvalidSpec and leave the spec unchanged") {
    const char* const bad[] = {
        // skc
        "randk:0.1+skc",  // random-k has no keys to sketch
        "skc:bins=1",     // 2..256 buckets
        "skc:bins=257",
        "skc:groups=1",  // 2..16 groups
        "skc:groups=17",
        "skc:rows=0",  // 1..4 rows
        "skc:rows=5",
        "skc:cols=0",  // (0, 4] columns per key
        "skc:cols=4.5",
        "skc:k=127",  // quantile k even, 16..1024
        "skc:k=8",
        "skc:k=1026",
        "skc:bins=",
        "skc:colour=3",
        "skc:0.5",
        "skc+q4",
        // cs
        "topk:0.01+cs",  // the Count Sketch takes the whole update
        "thresh:0.5+cs",
        "randk:0.1+cs",
        "cs:rows=0",  // 1..15 rows
        "cs:rows=16",
        "cs:step=0",
        "cs:step=-1",
        "cs:top=0",
        "cs:top=1.5",
        "cs:cols=0",
        "cs:0",
        "cs:cells=5",
        "cs:k=0",
        "cs:depth=3",
        // sparq
        "sparq:0.01+q8",
        "sparq:0.01,approx",
        "sparq:0.01,idx=rice",
        "sparq:",
        "sparq:0",
        "sparq:1.5",
        "sparq",
    };
    for (const char* text : bad) {
      INFO("spec: ", std::string(text));
      CodecSpec s = parse_or_fail("q8:det");
      const std::string before = spell(s);
      CHECK(edgefl::parse_codec_spec(text, &s) == Status::kInvalidSpec);
      CHECK(spell(s) == before);
    }
  }

  TEST_CASE("validate_codec_spec and the size functions refuse impossible sketch fields") {
    CodecSpec s = parse_or_fail("skc");
    s.skc_cols = -1.0f;
    CHECK(edgefl::validate_codec_spec(s) == Status::kInvalidSpec);
    CHECK(edgefl::workspace_size(s, 1000) == 0);
    CHECK(edgefl::encoded_bound(s, 1000) == 0);
    CodecSpec c = parse_or_fail("cs");
    c.sketch_rows = 16;
    CHECK(edgefl::validate_codec_spec(c) == Status::kInvalidSpec);
    CHECK(edgefl::encoded_bound(c, 1000) == 0);
    const std::vector<float> x(100, 1.0f);
    std::vector<uint8_t> out(1 << 12);
    size_t written = 1;
    CHECK(edgefl::encode(c, {x.data(), x.size()}, 1, {nullptr, 0}, {out.data(), out.size()}, &written) ==
          Status::kInvalidSpec);
    CHECK(written == 0);
  }

  // ---- skc: properties ---------------------------------------------------------------------

  TEST_CASE("skc on a sparse update: exact support, no sign flip, values inside the data range") {
    const size_t n = 200000;
    for (double density : {0.01, 0.1}) {
      for (uint64_t seed : {1ull, 2ull, 3ull}) {
        INFO("density: ", density, "  seed: ", seed);
        const size_t nnz = static_cast<size_t>(density * n);
        const std::vector<float> x = sparse_gaussian(n, nnz, seed * 101);
        const std::vector<uint8_t> bytes = encode_ok("skc", x, seed);
        const EncodedInfo info = inspect_ok(bytes);
        CHECK(info.values == ValueCoderKind::kSkCompress);
        CHECK(info.sparsifier == edgefl::SparsifierKind::kNone);
        CHECK(info.n == n);
        CHECK(info.nnz == nnz);
        CHECK(info.contributions == 1u);
        CHECK(info.seed == seed);
        CHECK(info.index_bytes == 0u);
        CHECK(info.total_bytes == bytes.size());
        CHECK(!edgefl::is_summable(info));
        CHECK(bytes.size() <= edgefl::encoded_bound(parse_or_fail("skc"), n));
        const std::vector<float> y = decode_ws_ok(bytes, n);
        require_clean(check_skc_decode(x, support_of(x), y), x, y);
        check_decode_add_matches(bytes, y, 0.375f);
        check_decode_add_matches(bytes, y, -3.0f);
      }
    }
  }

  TEST_CASE("topk:0.01+skc carries exactly the top-k set of a dense update") {
    const size_t n = kSlow ? 50000 : 200000;
    const size_t k = static_cast<size_t>(0.01 * n + 0.5);
    for (uint64_t seed : {4ull, 5ull, 6ull}) {
      INFO("seed: ", seed);
      const std::vector<float> x = edgefl_test::gaussian_vector(n, seed);
      const std::vector<uint8_t> bytes = encode_ok("topk:0.01+skc", x, seed);
      const EncodedInfo info = inspect_ok(bytes);
      CHECK(info.sparsifier == edgefl::SparsifierKind::kTopK);
      CHECK(info.nnz == k);
      const std::vector<uint32_t> top = exact_top_k(x, k);
      const std::vector<float> y = decode_ws_ok(bytes, n);
      CHECK(support_of(y) == top);
      require_clean(check_skc_decode(x, top, y), x, y);
      check_decode_add_matches(bytes, y, 0.5f);
    }
  }

  TEST_CASE("skc keeps its contract on one-signed updates and at the parameter extremes") {
    const size_t n = 50000;
    std::vector<float> both = sparse_gaussian(n, n / 10, 30);
    std::vector<float> positive = both, negative = both;
    for (size_t i = 0; i < n; ++i) {
      positive[i] = fabsf(both[i]);
      negative[i] = -fabsf(both[i]);
    }
    const std::pair<const char*, const std::vector<float>*> inputs[] = {
        {"both signs", &both}, {"positive only", &positive}, {"negative only", &negative}};
    for (const char* text :
         {"skc", "skc:bins=2,groups=2", "skc:bins=16,groups=16", "skc:rows=4,cols=4", "skc:rows=1,cols=0.01",
          "skc:bins=256,groups=16,rows=3,cols=1,k=1024", "skc:k=16"}) {
      for (const auto& input : inputs) {
        INFO("spec: ", std::string(text), "  input: ", std::string(input.first));
        const std::vector<float>& x = *input.second;
        const std::vector<uint8_t> bytes = encode_ok(text, x, 3);
        CHECK(inspect_ok(bytes).nnz == n / 10);
        std::vector<float> y(n, 0.0f);
        const Status st = decode_ws(bytes, &y);
        CHECK(st == Status::kOk);
        if (st == Status::kOk) require_clean(check_skc_decode(x, support_of(x), y), x, y);
      }
    }
  }

  TEST_CASE("thresh+skc carries exactly the coordinates at or above the threshold") {
    const size_t n = 50000;
    const std::vector<float> x = edgefl_test::gaussian_vector(n, 31);
    const std::vector<uint8_t> bytes = encode_ok("thresh:1.5+skc", x, 4);
    std::vector<uint32_t> want;
    for (size_t i = 0; i < n; ++i)
      if (fabsf(x[i]) >= 1.5f) want.push_back(static_cast<uint32_t>(i));
    CHECK(inspect_ok(bytes).sparsifier == edgefl::SparsifierKind::kThreshold);
    CHECK(inspect_ok(bytes).nnz == want.size());
    const std::vector<float> y = decode_ws_ok(bytes, n);
    CHECK(support_of(y) == want);
    require_clean(check_skc_decode(x, want, y), x, y);
  }

  TEST_CASE("skc header fields are the documented ones (format.h)") {
    const size_t n = 4000;
    const std::vector<float> x = sparse_gaussian(n, 400, 32);
    {
      const EncodedInfo info = inspect_ok(encode_ok("skc", x, 77));
      CHECK(info.bits == 8);
      CHECK(info.block == 256u);             // buckets
      CHECK(info.levels == (2 | (8 << 4)));  // rows | groups << 4
      CHECK(info.param == 0.3f);             // MinMaxSketch columns per key
      CHECK(!info.stochastic);
      CHECK(!info.shared_scale);
      CHECK(info.index_coding == edgefl::IndexCoding::kNone);
      CHECK(info.index_bytes == 0u);
      CHECK(info.header_bytes == wire::kHeaderBytes);
      CHECK(info.value_bytes + wire::kHeaderBytes == info.total_bytes);
    }
    {
      const EncodedInfo info = inspect_ok(encode_ok("skc:bins=64,groups=4,rows=3,cols=0.5,k=64", x, 77));
      CHECK(info.block == 64u);
      CHECK(info.levels == (3 | (4 << 4)));
      CHECK(info.param == 0.5f);
    }
    // A dimension mismatch is reported before anything is touched.
    const std::vector<uint8_t> bytes = encode_ok("skc", x, 77);
    std::vector<uint8_t> ws = decode_workspace_for(bytes);
    std::vector<float> wrong(n + 1, 2.0f);
    CHECK(edgefl::decode({bytes.data(), bytes.size()}, {wrong.data(), n + 1}, {ws.data(), ws.size()}) ==
          Status::kDimensionMismatch);
    CHECK(wrong == std::vector<float>(n + 1, 2.0f));
  }

  TEST_CASE("skc sketch error is biased toward zero: |decoded| averages below |true|") {
    // A decoded bucket is never further from zero than the true one (MinMaxSketch), so the decoded
    // magnitudes sum to less than the magnitudes of the true buckets' representatives; with
    // midpoint representatives the comparison with |x| itself holds on average, by a wide margin
    // at the defaults (about 57% of the keys decode to a bucket nearer zero).
    const size_t n = 100000;
    const std::vector<float> x = sparse_gaussian(n, n / 10, 77);
    const std::vector<float> y = decode_ws_ok(encode_ok("skc", x, 9), n);
    double sum_x = 0, sum_y = 0;
    for (size_t i = 0; i < n; ++i) {
      sum_x += fabs(static_cast<double>(x[i]));
      sum_y += fabs(static_cast<double>(y[i]));
    }
    CHECK(sum_y < sum_x);
  }

  TEST_CASE("skc is deterministic: same seed, same bytes, whatever the buffers held") {
    const size_t n = 50000;
    const std::vector<float> x = sparse_gaussian(n, n / 20, 8);
    for (const char* text : {"skc", "topk:0.01+skc", "skc:bins=64,groups=4,rows=3,cols=0.5,k=64"}) {
      INFO("spec: ", std::string(text));
      const CodecSpec spec = parse_or_fail(text);
      const std::vector<uint8_t> a = encode_with_fill(spec, x, 123, 0x00);
      const std::vector<uint8_t> b = encode_with_fill(spec, x, 123, 0xFF);
      const std::vector<uint8_t> c = encode_with_fill(spec, x, 123, 0x5A);
      CHECK(a == b);
      CHECK(a == c);
      const std::vector<uint8_t> d = encode_with_fill(spec, x, 124, 0x00);
      CHECK(inspect_ok(d).seed == 124u);
      // The decoders' workspace contents do not matter either.
      std::vector<uint8_t> ws = decode_workspace_for(a);
      std::vector<float> y1(n, 7.0f), y2(n, -7.0f);
      memset(ws.data(), 0xEE, ws.size());
      REQUIRE(edgefl::decode({a.data(), a.size()}, {y1.data(), n}, {ws.data(), ws.size()}) == Status::kOk);
      memset(ws.data(), 0x11, ws.size());
      REQUIRE(edgefl::decode({a.data(), a.size()}, {y2.data(), n}, {ws.data(), ws.size()}) == Status::kOk);
      CHECK(edgefl_test::same_bits(y1, y2));
    }
  }

  TEST_CASE("skc encodings stay within encoded_bound, and the encoder needs no more than it asks") {
    const size_t n = 30000;
    for (const char* text : {"skc", "topk:0.1+skc", "skc:bins=2,groups=2,rows=1,cols=4,k=16",
                             "skc:bins=256,groups=16,rows=4,cols=4,k=1024", "thresh:1.5+skc"}) {
      INFO("spec: ", std::string(text));
      const CodecSpec spec = parse_or_fail(text);
      for (const std::vector<float>& x : {sparse_gaussian(n, n / 3, 1), edgefl_test::gaussian_vector(n, 2),
                                          edgefl_test::bench_vector(n, 3)}) {
        const edgefl_test::Encoding e = edgefl_test::encode_vec(spec, x, 5);  // exact-size buffers
        REQUIRE(e.status == Status::kOk);
        CHECK(e.bytes.size() <= edgefl::encoded_bound(spec, n));
        // One byte less of workspace or output is refused up front.
        const size_t ws = edgefl::workspace_size(spec, n), cap = edgefl::encoded_bound(spec, n);
        std::vector<uint8_t> work(ws), out(cap);
        size_t written = 1;
        if (ws > 0) {
          CHECK(edgefl::encode(spec, {x.data(), n}, 5, {work.data(), ws - 1}, {out.data(), cap}, &written) ==
                Status::kWorkspaceTooSmall);
          CHECK(written == 0);
        }
        CHECK(edgefl::encode(spec, {x.data(), n}, 5, {work.data(), ws}, {out.data(), cap - 1}, &written) ==
              Status::kBufferTooSmall);
      }
    }
  }

  TEST_CASE("sketch workspaces are pinned at n = 2^20; topk:0.01+skc is within the 0.1x budget") {
    // Measured when the sketch codecs landed (style.md rule 2: the high-water mark is pinned by a
    // test). Growth beyond 3% fails; a decrease should update the pin.
    //  - topk:0.01+skc: the top-k histogram (2048 x u32) and the skc encoder (its state, the
    //    quantile sketch of k = 128 over 10486 values and its query scratch, the 64 Ki-entry bucket
    //    table, 2 x ceil(0.3 x 10486) sketch cells), plus 64 bytes of alignment slack per part.
    //  - cs: it sketches in place in its output; the workspace is the unsketch scratch (histogram
    //    and one float per coordinate, 128 bytes of alignment) that error feedback needs: about
    //    1.0x the update, so cs is outside the 0.1x client budget (reference/compression.md
    //    section 6), by design.
    const size_t n = size_t{1} << 20;
    struct Pin {
      const char* spec;
      size_t bytes;
      bool within_client_budget;
    };
    const Pin pins[] = {
        {"topk:0.01+skc", 100708, true}, {"cs", 4202688, false},  // 128 + 2048 x 4 + 2^20 x 4 + 64 slack
    };
    for (const Pin& p : pins) {
      const size_t ws = edgefl::workspace_size(parse_or_fail(p.spec), n);
      INFO("spec: ", std::string(p.spec), "  workspace: ", ws, "  pinned: ", p.bytes);
      CHECK(ws <= p.bytes + p.bytes * 3 / 100);
      if (p.within_client_budget) CHECK(ws <= 4 * n / 10);  // at most 0.1x the update
      if (ws < p.bytes) MESSAGE("workspace of ", std::string(p.spec), " shrank to ", ws, ": update the pin");
    }
  }

  TEST_CASE("skc decode needs its workspace: without it, or one byte short, nothing is touched") {
    const size_t n = 20000;
    const std::vector<float> x = sparse_gaussian(n, n / 10, 11);
    const std::vector<uint8_t> bytes = encode_ok("skc", x, 12);
    const EncodedInfo info = inspect_ok(bytes);
    const size_t need = edgefl::decode_workspace_size(info);
    CHECK(need > 0);
    const edgefl::Span<const uint8_t> in(bytes.data(), bytes.size());

    std::vector<float> out(n, 3.5f);
    const std::vector<float> out_before = out;
    CHECK(edgefl::decode(in, {out.data(), n}) == Status::kWorkspaceTooSmall);
    CHECK(edgefl_test::same_bits(out, out_before));
    std::vector<float> acc(n, -1.25f);
    const std::vector<float> acc_before = acc;
    CHECK(edgefl::decode_add(in, 1.0f, {acc.data(), n}) == Status::kWorkspaceTooSmall);
    CHECK(edgefl_test::same_bits(acc, acc_before));
    std::vector<double> acc_d(n, 0.5);
    CHECK(edgefl::decode_add(in, 1.0, {acc_d.data(), n}) == Status::kWorkspaceTooSmall);
    CHECK(acc_d == std::vector<double>(n, 0.5));

    std::vector<uint8_t> short_ws(need - 1);
    CHECK(edgefl::decode(in, {out.data(), n}, {short_ws.data(), short_ws.size()}) ==
          Status::kWorkspaceTooSmall);
    CHECK(edgefl_test::same_bits(out, out_before));
    CHECK(edgefl::decode_add(in, 2.0f, {acc.data(), n}, {short_ws.data(), short_ws.size()}) ==
          Status::kWorkspaceTooSmall);
    CHECK(edgefl_test::same_bits(acc, acc_before));
    CHECK(edgefl::decode_add(in, 2.0, {acc_d.data(), n}, {short_ws.data(), short_ws.size()}) ==
          Status::kWorkspaceTooSmall);
    CHECK(acc_d == std::vector<double>(n, 0.5));

    // Exactly decode_workspace_size() bytes suffice at any alignment (each its own heap block,
    // so that AddressSanitizer sees a byte past the end).
    const std::vector<float> reference = decode_ws_ok(bytes, n);
    for (size_t offset : {1u, 3u, 8u, 17u, 63u}) {
      INFO("workspace offset: ", offset);
      std::vector<uint8_t> block(offset + need);
      std::vector<float> y(n, 9.0f);
      REQUIRE(edgefl::decode(in, {y.data(), n}, {block.data() + offset, need}) == Status::kOk);
      CHECK(edgefl_test::same_bits(y, reference));
    }
  }

  TEST_CASE("skc of an all-zero update carries nothing and decodes to zeros") {
    const size_t n = 5000;
    const std::vector<float> zeros(n, 0.0f);
    const std::vector<uint8_t> bytes = encode_ok("skc", zeros, 1);
    const EncodedInfo info = inspect_ok(bytes);
    CHECK(info.nnz == 0u);
    std::vector<float> y(n, 5.0f);
    REQUIRE(decode_ws(bytes, &y) == Status::kOk);
    CHECK(edgefl_test::same_bits(y, zeros));
    // -0.0 is zero too.
    const std::vector<float> negative_zeros(n, -0.0f);
    CHECK(inspect_ok(encode_ok("skc", negative_zeros, 1)).nnz == 0u);
  }

  TEST_CASE("topk+skc of an all-zero update decodes to zeros") {
    // The top-k set of an all-zero vector is k zeros: skc carries only non-zeros, so none.
    const size_t n = 5000;
    const std::vector<float> zeros(n, 0.0f);
    const std::vector<uint8_t> bytes = encode_ok("topk:0.01+skc", zeros, 1);
    CHECK(inspect_ok(bytes).nnz == 0u);
    std::vector<float> y(n, 5.0f);
    const Status s = decode_ws(bytes, &y);
    CHECK(s == Status::kOk);
    if (s == Status::kOk) CHECK(support_of(y).empty());
  }

  TEST_CASE("topk+skc with fewer non-zeros than k: the carried zeros decode to zero") {
    // topk:k=1000 on 600 non-zeros selects 400 zeros too; skc carries only the 600 non-zeros. A
    // zero must not come back as a value (a sign change 0 -> +-, and support the update never
    // had); the non-zeros keep the skc contract.
    const size_t n = 10000;
    for (uint64_t seed : {1ull, 2ull}) {
      INFO("seed: ", seed);
      const std::vector<float> x = sparse_gaussian(n, 600, seed + 40);
      const std::vector<uint8_t> bytes = encode_ok("topk:k=1000+skc", x, seed);
      REQUIRE(inspect_ok(bytes).nnz == 600u);
      std::vector<float> y(n, 0.0f);
      const Status s = decode_ws(bytes, &y);
      REQUIRE(s == Status::kOk);
      size_t zeros_made_values = 0;
      for (size_t i = 0; i < n; ++i) zeros_made_values += (x[i] == 0.0f && y[i] != 0.0f) ? 1 : 0;
      CHECK(zeros_made_values == 0);
      const SkcCheck c = check_skc_decode(x, support_of(x), y);
      CHECK(c.sign_flips == 0);
      CHECK(c.out_of_range == 0);
    }
  }

  TEST_CASE("skc round-trips updates with very few keys or few distinct values") {
    // Small or degenerate inputs: one key, two keys, all values equal, values in {-1, +1}, a few
    // quantization levels. Every encoding the encoder produces must decode, with the skc contract.
    const size_t n = 1000;
    struct Case {
      const char* name;
      std::vector<float> x;
    };
    std::vector<Case> cases;
    {
      std::vector<float> x(n, 0.0f);
      x[17] = 0.5f;
      cases.push_back({"one key", x});
    }
    {
      std::vector<float> x(n, 0.0f);
      x[3] = -2.0f;
      cases.push_back({"one negative key", x});
    }
    {
      std::vector<float> x(n, 0.0f);
      x[10] = 1.0f;
      x[900] = 3.0f;
      cases.push_back({"two keys", x});
    }
    {
      std::vector<float> x(n, 0.0f);
      for (size_t i = 0; i < n; i += 7) x[i] = 1.0f;
      cases.push_back({"one distinct value", x});
    }
    {
      std::vector<float> x(n, 0.0f);
      for (size_t i = 0; i < n; i += 3) x[i] = (i / 3) % 2 ? 1.0f : -1.0f;
      cases.push_back({"values in {-1, +1}", x});
    }
    {
      edgefl_test::SplitMix64 rng(3);
      std::vector<float> x(n, 0.0f);
      for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(static_cast<int>(rng.below(9)) - 4) * 0.25f;
      cases.push_back({"nine levels, zeros included", x});
    }
    {
      std::vector<float> x = sparse_gaussian(n, 40, 5);
      cases.push_back({"40 gaussian keys", x});
    }
    for (const Case& c : cases) {
      for (const char* text : {"skc", "skc:bins=16,groups=2,rows=1,cols=1,k=16"}) {
        INFO("case: ", std::string(c.name), "  spec: ", std::string(text));
        const std::vector<uint8_t> bytes = encode_ok(text, c.x, 21);
        CHECK(inspect_ok(bytes).nnz == support_of(c.x).size());
        std::vector<float> y(n, 0.0f);
        const Status s = decode_ws(bytes, &y);
        CHECK(s == Status::kOk);
        if (s == Status::kOk) require_clean(check_skc_decode(c.x, support_of(c.x), y), c.x, y);
      }
    }
  }

  TEST_CASE("skc keeps the sign of subnormal values") {
    // Many distinct subnormal values of both signs (so that every group has keys): the midpoints
    // of tiny splits must not round to zero, or a carried key would vanish.
    const size_t n = 20000;
    edgefl_test::SplitMix64 rng(17);
    std::vector<float> x(n, 0.0f);
    for (size_t i = 0; i < n; i += 4) {
      const float tiny = 1.4e-45f * static_cast<float>(1 + rng.below(1u << 20));
      x[i] = rng.below(2) ? tiny : -tiny;
    }
    const std::vector<uint8_t> bytes = encode_ok("skc", x, 2);
    std::vector<float> y(n, 0.0f);
    REQUIRE(decode_ws(bytes, &y) == Status::kOk);
    require_clean(check_skc_decode(x, support_of(x), y), x, y);
  }

  TEST_CASE("skc refuses non-finite input") {
    const size_t n = 1000;
    for (float bad : {NAN, INFINITY, -INFINITY}) {
      for (const char* text : {"skc", "topk:0.01+skc"}) {
        std::vector<float> x = sparse_gaussian(n, 100, 1);
        x[500] = bad;
        INFO("spec: ", std::string(text), "  value: ", bad);
        CHECK(edgefl_test::encode_vec(parse_or_fail(text), x, 1).status == Status::kNonFiniteInput);
      }
    }
  }

  // ---- skc: malformed encodings ------------------------------------------------------------

  TEST_CASE("a valid skc encoding carries the checksum the test recomputes") {
    const std::vector<uint8_t> bytes = encode_ok("skc", sparse_gaussian(3000, 300, 1), 3);
    CHECK(load_u32(bytes, wire::kChecksum) == edgefl_test::expected_checksum(bytes));
    const uint8_t check[] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
    CHECK(edgefl_test::crc32c(check, sizeof check) == 0xE3069283u);
  }

  TEST_CASE("every truncation of an skc or cs encoding is rejected") {
    struct Source {
      const char* spec;
      std::vector<float> x;
    };
    const size_t n = 3000;
    const Source sources[] = {{"skc", sparse_gaussian(n, 300, 1)},
                              {"topk:0.05+skc", edgefl_test::gaussian_vector(n, 2)},
                              {"cs:cols=100,rows=3,k=30", edgefl_test::gaussian_vector(n, 3)}};
    for (const Source& src : sources) {
      const std::vector<uint8_t> bytes = encode_ok(src.spec, src.x, 4);
      check_untrusted(bytes, n, 0, false);
      CHECK(run_untrusted(bytes, n, 0).decode == Status::kOk);
      const size_t step = kSlow ? 3 : 1;
      for (size_t len = 0; len < bytes.size(); len += step) {
        INFO("spec: ", std::string(src.spec), "  length: ", len, " of ", bytes.size());
        const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<long>(len));
        const Outcome o = run_untrusted(cut, n, 256);
        CHECK(o.untouched_on_error);
        CHECK((o.decode == Status::kTruncated || o.decode == Status::kSizeMismatch));
        CHECK(o.add_f == o.decode);
        CHECK(o.add_d == o.decode);
      }
    }
  }

  TEST_CASE(
      "every payload bit flip of an skc encoding, with the checksum fixed, fails cleanly or decodes "
      "finitely") {
    const size_t n = 3000;
    const std::vector<uint8_t> bytes = encode_ok("skc", sparse_gaussian(n, 300, 6), 7);
    REQUIRE(run_untrusted(bytes, n, 0).decode == Status::kOk);
    size_t failures = 0, flips = 0;
    for (size_t bit = 8 * wire::kHeaderBytes; bit < 8 * bytes.size(); ++bit) {
      std::vector<uint8_t> bad = bytes;
      bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      fix_checksum(bad);
      const Outcome o = run_untrusted(bad, n, 0);
      ++flips;
      failures += o.decode != Status::kOk ? 1 : 0;
      if (!o.untouched_on_error || !o.finite_on_success || o.add_f != o.decode || o.add_d != o.decode) {
        INFO("bit: ", bit, " of ", 8 * bytes.size(), "  decode: ", o.decode, "  add: ", o.add_f, " / ",
             o.add_d);
        CHECK(o.untouched_on_error);
        CHECK(o.finite_on_success);
        CHECK(o.add_f == o.decode);
        CHECK(o.add_d == o.decode);
      }
    }
    MESSAGE("skc payload flips: ", flips, ", rejected: ", failures);
    CHECK(failures > 0);
  }

  TEST_CASE(
      "every header bit flip of an skc encoding, with the checksum fixed, fails cleanly or decodes "
      "finitely") {
    const size_t n = 3000;
    const std::vector<uint8_t> bytes = encode_ok("topk:0.1+skc", edgefl_test::gaussian_vector(n, 8), 9);
    for (size_t bit = 0; bit < 8 * wire::kChecksum; ++bit) {
      std::vector<uint8_t> bad = bytes;
      bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      fix_checksum(bad);
      const Outcome o = run_untrusted(bad, n, 256);
      if (!o.untouched_on_error || !o.finite_on_success || o.add_f != o.decode || o.add_d != o.decode) {
        INFO("bit: ", bit, "  decode: ", o.decode);
        CHECK(o.untouched_on_error);
        CHECK(o.finite_on_success);
        CHECK(o.add_f == o.decode);
        CHECK(o.add_d == o.decode);
      }
    }
  }

  TEST_CASE("random multi-byte mutations of skc and cs encodings, checksum fixed, never crash") {
    const size_t n = 2000;
    struct Source {
      const char* spec;
      std::vector<float> x;
    };
    const Source sources[] = {{"skc", sparse_gaussian(n, 200, 12)},
                              {"topk:0.02+skc", edgefl_test::bench_vector(n, 13)},
                              {"cs:cols=64,rows=3,k=20", edgefl_test::gaussian_vector(n, 14)}};
    const int rounds = kSlow ? 400 : 3000;
    for (const Source& src : sources) {
      const std::vector<uint8_t> bytes = encode_ok(src.spec, src.x, 15);
      edgefl_test::SplitMix64 rng(99);
      for (int round = 0; round < rounds; ++round) {
        std::vector<uint8_t> bad = bytes;
        const int edits = 1 + static_cast<int>(rng.below(6));
        for (int e = 0; e < edits; ++e) {
          size_t at = 4 + static_cast<size_t>(rng.below(bad.size() - 4));  // keep the magic
          if (at >= wire::kChecksum && at < wire::kHeaderBytes)
            at = wire::kHeaderBytes + (at - wire::kChecksum);
          if (at >= bad.size()) continue;
          bad[at] = static_cast<uint8_t>(rng.next());
        }
        fix_checksum(bad);
        const Outcome o = run_untrusted(bad, n, 256);
        if (!o.untouched_on_error || !o.finite_on_success || o.add_f != o.decode || o.add_d != o.decode) {
          INFO("spec: ", std::string(src.spec), "  round: ", round, "  decode: ", o.decode);
          CHECK(o.untouched_on_error);
          CHECK(o.finite_on_success);
          CHECK(o.add_f == o.decode);
          CHECK(o.add_d == o.decode);
        }
      }
    }
  }

  TEST_CASE("crafted skc value regions are rejected with kCorruptPayload or kSizeMismatch") {
    const size_t n = 3000;
    const std::vector<uint8_t> bytes = encode_ok("skc", sparse_gaussian(n, 300, 16), 17);
    const SkcRegion r(bytes);
    REQUIRE(r.group0 + 21 <= bytes.size());
    const unsigned splits = bytes[r.split_count] | (bytes[r.split_count + 1] << 8);
    REQUIRE(splits >= 3);
    const unsigned groups = bytes[r.groups];
    REQUIRE(groups == 8);  // the default, and 300 keys of distinct values fill them all

    auto expect = [&](std::vector<uint8_t> bad, Status want, const char* what) {
      fix_checksum(bad);
      INFO("corruption: ", std::string(what));
      const Outcome o = run_untrusted(bad, n, 256);
      CHECK(o.decode == want);
      CHECK(o.add_f == want);
      CHECK(o.add_d == want);
      CHECK(o.untouched_on_error);
    };
    {
      std::vector<uint8_t> bad = bytes;
      put_f32(bad, r.min, NAN);
      expect(bad, Status::kCorruptPayload, "min is NaN");
    }
    {
      std::vector<uint8_t> bad = bytes;
      put_f32(bad, r.max, INFINITY);
      expect(bad, Status::kCorruptPayload, "max is +inf");
    }
    {
      std::vector<uint8_t> bad = bytes;
      const float mx = edgefl_test::load_f32(bad, r.max);
      put_f32(bad, r.min, mx + 1.0f);
      expect(bad, Status::kCorruptPayload, "min above max");
    }
    {
      std::vector<uint8_t> bad = bytes;
      put_u32(bad, r.splits + 4, load_u32(bad, r.splits));  // split 1 == split 0
      expect(bad, Status::kCorruptPayload, "splits not strictly increasing");
    }
    {
      std::vector<uint8_t> bad = bytes;
      put_f32(bad, r.splits + 4, NAN);
      expect(bad, Status::kCorruptPayload, "a NaN split");
    }
    {
      std::vector<uint8_t> bad = bytes;
      bad[r.zero] = static_cast<uint8_t>(splits + 2);  // more buckets below zero than buckets
      bad[r.zero + 1] = static_cast<uint8_t>((splits + 2) >> 8);
      expect(bad, Status::kCorruptPayload, "zero past the last bucket");
    }
    {
      std::vector<uint8_t> bad = bytes;
      bad[r.groups] = 17;
      expect(bad, Status::kCorruptPayload, "more groups than the header allows");
    }
    {
      std::vector<uint8_t> bad = bytes;
      put_u32(bad, r.group0 + 8, load_u32(bad, r.group0 + 8) + 1);  // columns != ceil(cols x keys)
      expect(bad, Status::kCorruptPayload, "group columns");
    }
    {
      std::vector<uint8_t> bad = bytes;
      bad[r.group0 + 12] = 8;  // key layouts are 0..7
      expect(bad, Status::kCorruptPayload, "key layout 8");
    }
    {
      std::vector<uint8_t> bad = bytes;
      put_u32(bad, r.group0 + 4, load_u32(bad, r.group0 + 4) + 1);  // keys no longer sum to nnz
      expect(bad, Status::kCorruptPayload, "group keys");
    }
    {
      std::vector<uint8_t> bad = bytes;
      put_u32(bad, r.group0 + 13, load_u32(bad, r.group0 + 13) + 1);  // key bytes: sizes disagree
      expect(bad, Status::kSizeMismatch, "group key bytes");
    }
    {
      std::vector<uint8_t> bad = bytes;
      put_u32(bad, r.group0 + 17, 0);  // an empty sketch
      expect(bad, Status::kCorruptPayload, "zero sketch bytes");
    }
  }

  // ---- cs ----------------------------------------------------------------------------------

  TEST_CASE("cs: the sum of two sketches with one seed is the sketch of the sum, exactly") {
    const size_t n = kSlow ? 20000 : 100000;
    const float step = 1.0f / 1024.0f;  // "step=0.0009765625"
    const char* const spec = "cs:cols=4096,rows=5,k=100,step=0.0009765625";
    for (uint64_t seed : {1ull, 2ull, 3ull}) {
      INFO("seed: ", seed);
      const std::vector<float> a = step_multiples(n, seed * 10 + 1, step, 50, 0.3);
      const std::vector<float> b = step_multiples(n, seed * 10 + 2, step, 50, 0.3);
      const std::vector<float> ab = plus(a, b);  // exact: |m| <= 100, a multiple of 2^-10
      const std::vector<uint8_t> ea = encode_ok(spec, a, seed), eb = encode_ok(spec, b, seed);
      const std::vector<uint8_t> eab = encode_ok(spec, ab, seed);
      const AddResult sum = add(ea, eb);
      REQUIRE(sum.status == Status::kOk);
      REQUIRE(sum.bytes.size() == eab.size());
      // Identical except the contributions field (and so the checksum).
      CHECK(std::equal(sum.bytes.begin(), sum.bytes.begin() + wire::kContributions, eab.begin()));
      CHECK(std::equal(sum.bytes.begin() + wire::kIndexBytes, sum.bytes.begin() + wire::kChecksum,
                       eab.begin() + wire::kIndexBytes));
      CHECK(std::equal(sum.bytes.begin() + wire::kHeaderBytes, sum.bytes.end(),
                       eab.begin() + wire::kHeaderBytes));
      CHECK(load_u32(sum.bytes, wire::kContributions) == 2u);
      CHECK(load_u32(eab, wire::kContributions) == 1u);
      const EncodedInfo info = inspect_ok(sum.bytes);  // the checksum was recomputed
      CHECK(info.contributions == 2u);
      CHECK(edgefl::is_summable(info));
      // Commutative, and the sums decode to the same values as the sketch of the sum.
      const AddResult rev = add(eb, ea);
      REQUIRE(rev.status == Status::kOk);
      CHECK(rev.bytes == sum.bytes);
      CHECK(edgefl_test::same_bits(decode_ws_ok(sum.bytes, n), decode_ws_ok(eab, n)));
      // Contributions add up: ((a + b) + c) counts three.
      const std::vector<float> c = step_multiples(n, seed * 10 + 3, step, 50, 0.3);
      const AddResult three = add(sum.bytes, encode_ok(spec, c, seed));
      REQUIRE(three.status == Status::kOk);
      CHECK(inspect_ok(three.bytes).contributions == 3u);
      const std::vector<uint8_t> eabc = encode_ok(spec, plus(ab, c), seed);
      CHECK(std::equal(three.bytes.begin() + wire::kHeaderBytes, three.bytes.end(),
                       eabc.begin() + wire::kHeaderBytes));
      const AddResult six = add(three.bytes, three.bytes);
      REQUIRE(six.status == Status::kOk);
      CHECK(inspect_ok(six.bytes).contributions == 6u);
    }
  }

  TEST_CASE("cs: sketches of another seed, shape, step, size or codec do not add") {
    const size_t n = 5000;
    const std::vector<float> x = edgefl_test::gaussian_vector(n, 1, 0.01);
    const std::vector<float> z = edgefl_test::gaussian_vector(n, 2, 0.01);
    const char* const base = "cs:cols=500,rows=3,k=20,step=0.0001";
    const std::vector<uint8_t> a = encode_ok(base, x, 7);
    REQUIRE(add(a, encode_ok(base, z, 7)).status == Status::kOk);
    CHECK(add(a, encode_ok(base, z, 8)).status == Status::kIncompatible);  // seed
    CHECK(add(a, encode_ok("cs:cols=500,rows=4,k=20,step=0.0001", z, 7)).status ==
          Status::kIncompatible);  // rows
    CHECK(add(a, encode_ok("cs:cols=501,rows=3,k=20,step=0.0001", z, 7)).status ==
          Status::kIncompatible);  // cols
    CHECK(add(a, encode_ok("cs:cols=500,rows=3,k=20,step=0.0002", z, 7)).status ==
          Status::kIncompatible);  // step
    CHECK(add(a, encode_ok("cs:cols=500,rows=3,k=21,step=0.0001", z, 7)).status ==
          Status::kIncompatible);  // top k
    CHECK(add(a, encode_ok(base, edgefl_test::gaussian_vector(n + 1, 2, 0.01), 7)).status ==
          Status::kIncompatible);  // dimension
    CHECK(add(a, encode_ok("q8:shared=0.001", z, 7)).status ==
          Status::kIncompatible);  // another summable codec
    CHECK(add(encode_ok("q8:shared=0.001", z, 7), a).status == Status::kIncompatible);
    CHECK(add(a, encode_ok("skc", z, 7)).status == Status::kNotSummable);
    {
      // One byte short of add_encoded_bound() is refused.
      const std::vector<uint8_t> b = encode_ok(base, z, 7);
      EncodedInfo ia = inspect_ok(a), ib = inspect_ok(b);
      const size_t cap = edgefl::add_encoded_bound(ia, ib);
      std::vector<uint8_t> out(cap - 1);
      size_t written = 5;
      CHECK(edgefl::add_encoded({a.data(), a.size()}, {b.data(), b.size()}, {out.data(), out.size()},
                                &written) == Status::kBufferTooSmall);
      CHECK(written == 0);
    }
    CHECK(add(encode_ok("topk:0.1+skc", z, 7), a).status == Status::kNotSummable);
  }

  TEST_CASE("is_summable: true for cs, false for skc") {
    const size_t n = 2000;
    const std::vector<float> x = edgefl_test::gaussian_vector(n, 3);
    CHECK(edgefl::is_summable(inspect_ok(encode_ok("cs", x, 1))));
    CHECK(edgefl::is_summable(inspect_ok(encode_ok("cs:0.05", x, 1))));
    CHECK(!edgefl::is_summable(inspect_ok(encode_ok("skc", x, 1))));
    CHECK(!edgefl::is_summable(inspect_ok(encode_ok("topk:0.01+skc", x, 1))));
    const std::vector<uint8_t> s = encode_ok("skc", x, 1);
    CHECK(add(s, s).status == Status::kNotSummable);
  }

  TEST_CASE("cs header: shape, step and heavy hitters as documented") {
    const size_t n = 10000;
    const std::vector<float> x = edgefl_test::gaussian_vector(n, 4, 0.1);
    {
      const EncodedInfo info = inspect_ok(encode_ok("cs:0.05", x, 1));
      CHECK(info.values == ValueCoderKind::kCountSketch);
      CHECK(info.sparsifier == edgefl::SparsifierKind::kNone);
      CHECK(info.levels == 5);                    // rows
      CHECK(info.block == 100u);                  // columns: 0.05 x n cells over 5 rows
      CHECK(info.nnz == 100u);                    // top = 0.01 (default) x n
      CHECK(info.value_bytes == 5u * 100u * 4u);  // int32 cells
      CHECK(info.index_bytes == 0u);
      CHECK(info.contributions == 1u);
      CHECK(info.param == parse_or_fail("cs").shared_step);
    }
    {
      const EncodedInfo info = inspect_ok(encode_ok("cs:cols=1000,rows=3,k=50,step=0.001", x, 1));
      CHECK(info.levels == 3);
      CHECK(info.block == 1000u);
      CHECK(info.nnz == 50u);
      CHECK(info.param == 0.001f);
      CHECK(info.total_bytes == wire::kHeaderBytes + 3u * 1000u * 4u);
      CHECK(info.total_bytes ==
            edgefl::encoded_bound(parse_or_fail("cs:cols=1000,rows=3,k=50,step=0.001"), n));
    }
    {
      // More heavy hitters than coordinates: all n are decoded.
      const std::vector<float> small = edgefl_test::gaussian_vector(300, 5, 0.1);
      const std::vector<uint8_t> bytes = encode_ok("cs:cols=50,rows=3,k=5000", small, 1);
      CHECK(inspect_ok(bytes).nnz == 300u);
      CHECK(edgefl_test::all_finite(decode_ws_ok(bytes, 300)));
      CHECK(inspect_ok(encode_ok("cs:cols=50,rows=3,top=1", small, 1)).nnz == 300u);
    }
  }

  TEST_CASE("cs recovers planted heavy hitters exactly, with values within a few steps") {
    // k spikes of magnitude 10..100 over N(0, 1e-4) noise, step 1e-3: noise codes are 0 or +-1
    // (stochastic rounding of |t| ~ 0.1), about 8% of coordinates, so a cell of a 10^4-column row
    // holds ~0.8 unit codes beside its spike; the median of 5 rows is within 4 steps of the spike's
    // own code, itself within one step of the spike.
    const size_t n = kSlow ? 50000 : 200000;
    const size_t k = 20;
    const float step = 0.001f;
    for (uint64_t seed : {1ull, 2ull, 3ull}) {
      INFO("seed: ", seed);
      std::vector<float> x = edgefl_test::gaussian_vector(n, seed, 1e-4);
      edgefl_test::SplitMix64 rng(seed + 1000);
      std::vector<uint32_t> spikes;
      while (spikes.size() < k) {
        const uint32_t i = static_cast<uint32_t>(rng.below(n));
        if (std::find(spikes.begin(), spikes.end(), i) != spikes.end()) continue;
        spikes.push_back(i);
        x[i] = static_cast<float>((rng.below(2) ? 1.0 : -1.0) * (10.0 + 90.0 * rng.uniform()));
      }
      std::sort(spikes.begin(), spikes.end());
      const std::vector<uint8_t> bytes = encode_ok("cs:cols=10000,rows=5,k=20,step=0.001", x, seed);
      const EncodedInfo info = inspect_ok(bytes);
      CHECK(info.nnz == k);
      const std::vector<float> y = decode_ws_ok(bytes, n);
      CHECK(support_of(y) == spikes);  // recall 1 and nothing else
      double worst = 0;
      for (uint32_t i : spikes) worst = std::max(worst, fabs(static_cast<double>(y[i]) - x[i]));
      INFO("worst error: ", worst / step, " steps");
      CHECK(worst <= 5.0 * step);
      check_decode_add_matches(bytes, y, 0.25f);
    }
  }

  TEST_CASE("cs is deterministic and independent of what the output buffer held") {
    const size_t n = 20000;
    const std::vector<float> x = edgefl_test::gaussian_vector(n, 5, 0.01);
    const CodecSpec spec = parse_or_fail("cs:0.05");
    CHECK(encode_with_fill(spec, x, 3, 0x00) == encode_with_fill(spec, x, 3, 0xFF));
    CHECK(encode_with_fill(spec, x, 3, 0x00) == encode_with_fill(spec, x, 3, 0x7B));
  }

  TEST_CASE("cs cells that would overflow int32 are kValueOutOfRange") {
    const size_t n = 100;
    // |x| / step >= 2^31: 2048 / 2^-20 = 2^31.
    const CodecSpec spec = parse_or_fail("cs:cols=10,rows=3,k=5,step=0.00000095367431640625");
    REQUIRE(spec.shared_step == 1.0f / 1048576.0f);
    {
      std::vector<float> x(n, 0.0f);
      x[7] = 2048.0f;
      CHECK(edgefl_test::encode_vec(spec, x, 1).status == Status::kValueOutOfRange);
      x[7] = -2048.0f;
      CHECK(edgefl_test::encode_vec(spec, x, 1).status == Status::kValueOutOfRange);
      x[7] = 1.0e30f;
      CHECK(edgefl_test::encode_vec(spec, x, 1).status == Status::kValueOutOfRange);
      x[7] = 1024.0f;  // 2^30: fits
      CHECK(edgefl_test::encode_vec(spec, x, 1).status == Status::kOk);
    }
    {
      // Two codes of 1500 x 2^20 (~1.57e9 each) in one cell of each of 15 rows: unless every row
      // gives them opposite signs (probability 2^-15 for a seed), some cell sum exceeds int32.
      const CodecSpec one_col = parse_or_fail("cs:cols=1,rows=15,k=1,step=0.00000095367431640625");
      std::vector<float> x(n, 0.0f);
      x[10] = 1500.0f;
      x[20] = 1500.0f;
      for (uint64_t seed : {1ull, 2ull, 3ull})
        CHECK(edgefl_test::encode_vec(one_col, x, seed).status == Status::kValueOutOfRange);
    }
    {
      // add_encoded: the same coordinate twice lands in the same cell with the same sign.
      const CodecSpec one = parse_or_fail("cs:cols=1,rows=1,k=1,step=0.00000095367431640625");
      std::vector<float> x(n, 0.0f);
      x[10] = 1500.0f;
      const std::vector<uint8_t> e = encode_ok(one, x, 4);
      CHECK(add(e, e).status == Status::kOverflow);
      x[10] = 1000.0f;  // 2 x 1000 x 2^20 < 2^31
      const std::vector<uint8_t> f = encode_ok(one, x, 4);
      CHECK(add(f, f).status == Status::kOk);
    }
  }

  TEST_CASE("cs refuses non-finite input") {
    const size_t n = 1000;
    for (float bad : {NAN, INFINITY, -INFINITY}) {
      std::vector<float> x = edgefl_test::gaussian_vector(n, 1, 0.01);
      x[999] = bad;
      CHECK(edgefl_test::encode_vec(parse_or_fail("cs"), x, 1).status == Status::kNonFiniteInput);
    }
  }

  TEST_CASE("cs decode needs its workspace; exactly decode_workspace_size() bytes suffice") {
    const size_t n = 10000;
    const std::vector<uint8_t> bytes = encode_ok("cs:0.05", edgefl_test::gaussian_vector(n, 6, 0.01), 2);
    const EncodedInfo info = inspect_ok(bytes);
    const size_t need = edgefl::decode_workspace_size(info);
    CHECK(need >= n * sizeof(float));  // one estimate per coordinate
    std::vector<float> out(n, 1.5f);
    const std::vector<float> before = out;
    CHECK(edgefl::decode({bytes.data(), bytes.size()}, {out.data(), n}) == Status::kWorkspaceTooSmall);
    CHECK(edgefl_test::same_bits(out, before));
    std::vector<uint8_t> short_ws(need - 1);
    CHECK(edgefl::decode_add({bytes.data(), bytes.size()}, 1.0f, {out.data(), n},
                             {short_ws.data(), need - 1}) == Status::kWorkspaceTooSmall);
    CHECK(edgefl_test::same_bits(out, before));
    const std::vector<float> reference = decode_ws_ok(bytes, n);
    CHECK(support_of(reference).size() <= info.nnz);
    for (size_t offset : {1u, 31u, 63u}) {
      std::vector<uint8_t> block(offset + need);
      std::vector<float> y(n, -4.0f);
      REQUIRE(edgefl::decode({bytes.data(), bytes.size()}, {y.data(), n}, {block.data() + offset, need}) ==
              Status::kOk);
      CHECK(edgefl_test::same_bits(y, reference));
    }
    // A dimension mismatch is reported before anything is touched.
    std::vector<float> wrong(n - 1, 2.0f);
    std::vector<uint8_t> ws(need);
    CHECK(edgefl::decode({bytes.data(), bytes.size()}, {wrong.data(), n - 1}, {ws.data(), need}) ==
          Status::kDimensionMismatch);
    CHECK(wrong == std::vector<float>(n - 1, 2.0f));
  }

  TEST_CASE(
      "every payload and header bit flip of a cs encoding, with the checksum fixed, fails cleanly or decodes "
      "finitely") {
    const size_t n = 1000;
    const std::vector<uint8_t> bytes =
        encode_ok("cs:cols=20,rows=5,k=10", edgefl_test::gaussian_vector(n, 7, 0.01), 8);
    REQUIRE(run_untrusted(bytes, n, 0).decode == Status::kOk);
    for (size_t bit = 0; bit < 8 * bytes.size(); ++bit) {
      if (bit / 8 >= wire::kChecksum && bit / 8 < wire::kHeaderBytes) continue;
      if (bit < 8 * wire::kHeaderBytes && kSlow && bit % 2) continue;
      std::vector<uint8_t> bad = bytes;
      bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      fix_checksum(bad);
      const Outcome o = run_untrusted(bad, n, 256);
      if (!o.untouched_on_error || !o.finite_on_success || o.add_f != o.decode || o.add_d != o.decode) {
        INFO("bit: ", bit, "  decode: ", o.decode);
        CHECK(o.untouched_on_error);
        CHECK(o.finite_on_success);
        CHECK(o.add_f == o.decode);
        CHECK(o.add_d == o.decode);
      }
      // Any cell value is a valid sketch: a payload flip decodes.
      if (bit >= 8 * wire::kHeaderBytes) CHECK(o.decode == Status::kOk);
    }
  }

  // ---- sparq ---------------------------------------------------------------------------------

  TEST_CASE("sparq: bits per non-zero, header included, at 1% and 10% of a Gaussian 2^18 vector") {
    const size_t n = size_t{1} << 18;
    for (uint64_t seed : {1ull, 2ull}) {
      const std::vector<float> x = edgefl_test::gaussian_vector(n, seed);
      struct Case {
        const char* spec;
        double density;
        double max_bits_per_nnz;
      };
      const Case cases[] = {{"sparq:0.01", 0.01, 13.0}, {"sparq:0.1", 0.1, 9.5}};
      for (const Case& c : cases) {
        const std::vector<uint8_t> sq = encode_ok(c.spec, x, seed);
        const EncodedInfo info = inspect_ok(sq);
        REQUIRE(info.nnz > 0);
        const double bits_per_nnz = 8.0 * static_cast<double>(sq.size()) / static_cast<double>(info.nnz);
        INFO("spec: ", std::string(c.spec), "  seed: ", seed, "  bits/nnz: ", bits_per_nnz);
        CHECK(info.nnz ==
              static_cast<uint32_t>(c.density * static_cast<double>(n) + 0.5));  // approx: exactly k
        CHECK(bits_per_nnz <= c.max_bits_per_nnz);
      }
    }
  }

  // sparq against topk+skc at the same density: the same carried set (both select the exact top-k),
  // so the error difference is the value coding alone. The floor both share is the top-k error.
  void compare_sparq_with_skc(const char* sparq, const char* skc_spec, uint64_t seed) {
    const size_t n = size_t{1} << 18;
    const std::vector<float> x = edgefl_test::gaussian_vector(n, seed);
    const std::vector<uint8_t> sq = encode_ok(sparq, x, seed);
    const std::vector<uint8_t> sk = encode_ok(skc_spec, x, seed);
    const EncodedInfo info = inspect_ok(sq);
    REQUIRE(info.nnz == inspect_ok(sk).nnz);  // the same density
    const std::vector<float> ys = edgefl_test::decode_ok(sq, n);
    const std::vector<float> yk = decode_ws_ok(sk, n);
    REQUIRE(support_of(ys) == support_of(yk));
    std::vector<float> kept(n, 0.0f);
    for (uint32_t i : support_of(yk)) kept[i] = x[i];
    const double floor = edgefl_test::vnmse(x, kept);
    const double e_sparq = edgefl_test::vnmse(x, ys), e_skc = edgefl_test::vnmse(x, yk);
    INFO("seed: ", seed, "  top-k floor: ", floor, "\n  ", std::string(sparq), ": ", sq.size(),
         " bytes, vNMSE ", e_sparq, " (", e_sparq - floor, " above the floor)\n  ", std::string(skc_spec),
         ": ", sk.size(), " bytes, vNMSE ", e_skc, " (", e_skc - floor, " above the floor)");
    CHECK(e_sparq < e_skc);
    CHECK(sq.size() <= sk.size());
  }

  TEST_CASE("sparq:0.1 has a lower vNMSE than topk:0.1+skc in no more bytes") {
    for (uint64_t seed : {1ull, 2ull}) compare_sparq_with_skc("sparq:0.1", "topk:0.1+skc", seed);
  }

  TEST_CASE("sparq:0.01 has a lower vNMSE than topk:0.01+skc in no more bytes") {
    for (uint64_t seed : {1ull, 2ull}) compare_sparq_with_skc("sparq:0.01", "topk:0.01+skc", seed);
  }

  // ---- empty updates (last: a crash here must not hide the results of the cases above) -------

  void check_empty_round_trip(const char* text) {
    INFO("spec: ", std::string(text));
    const CodecSpec spec = parse_or_fail(text);
    CHECK(edgefl::workspace_size(spec, 0) == 0u);
    const size_t cap = edgefl::encoded_bound(spec, 0);
    REQUIRE(cap >= wire::kHeaderBytes);
    std::vector<uint8_t> out(cap);
    size_t written = 0;
    const float dummy = 0.0f;
    REQUIRE(edgefl::encode(spec, {&dummy, 0}, 1, {nullptr, 0}, {out.data(), cap}, &written) == Status::kOk);
    out.resize(written);
    const EncodedInfo info = inspect_ok(out);
    CHECK(info.n == 0u);
    CHECK(info.nnz == 0u);
    std::vector<uint8_t> ws(edgefl::decode_workspace_size(info));
    float target = 42.0f;
    CHECK(edgefl::decode({out.data(), out.size()}, {&target, 0}, {ws.data(), ws.size()}) == Status::kOk);
    CHECK(target == 42.0f);
    CHECK(edgefl::decode_add({out.data(), out.size()}, 1.0f, {nullptr, 0}, {ws.data(), ws.size()}) ==
          Status::kOk);
    CHECK(edgefl::decode_add({out.data(), out.size()}, 1.0, edgefl::Span<double>(), {ws.data(), ws.size()}) ==
          Status::kOk);
  }

  TEST_CASE("cs round-trips an empty update (n = 0)") {
    check_empty_round_trip("cs");
    check_empty_round_trip("cs:cols=8,rows=2,k=1");
  }

  TEST_CASE("skc round-trips an empty update (n = 0)") {
    check_empty_round_trip("skc");
  }

  TEST_CASE("topk+skc round-trips an empty update (n = 0)") {
    check_empty_round_trip("topk:0.01+skc");
  }

}  // TEST_SUITE
