// tests/sdk/codec_malformed_test.cpp: untrusted bytes. Every malformed encoding is rejected with
// its documented status, and a rejected decode leaves `out` and the accumulator bit-identical.
#include <math.h>

#include <string.h>
#include <cmath>

#include <algorithm>
#include <string>
#include <vector>

#include "edgefl/codec.h"
#include "support/bench_data.h"
#include "support/codec_util.h"

namespace {

using edgefl::EncodedInfo;
using edgefl::Status;
using edgefl_test::encode_ok;
using edgefl_test::fix_checksum;
using edgefl_test::load_u32;
using edgefl_test::store_f32;
using edgefl_test::store_u32;
namespace wire = edgefl_test::wire;

const char* const kSpecs[] = {
    "fp32",
    "fp16",
    "bf16",
    "bf16:ans",
    "q4",
    "q8:det",
    "q8:shared=0.05",
    "q8:shared=0.05,ans",
    "hq2",
    "qsgd",
    "tern",
    "sign",
    "topk:0.1+q4",
    "topk:0.1+q4:sm",
    "sparq:0.1",
    "topk:0.1,idx=rice+q8",
    "thresh:0.5,idx=rice",
    "topk:0.1,idx=blockrice+q8",
    "thresh:0.5,idx=blockrice",
    "thresh:0.5",
    "randk:0.1+q8",
    "topk:0.1,approx+bf16",
    "randk:0.2,unscaled",
};

constexpr size_t kN = 300;

struct Outcome {
  Status inspect_status;
  Status decode_status;
  Status add_status;
};

// Runs inspect, decode and decode_add over `bytes` (copied into an exactly-sized heap block) with
// an output of `n` floats, and checks that a failing decode touched nothing.
Outcome run_all(const std::vector<uint8_t>& bytes, size_t n = kN) {
  std::vector<uint8_t> exact(bytes);
  const edgefl::Span<const uint8_t> in(exact.data(), exact.size());
  Outcome o;
  EncodedInfo info;
  o.inspect_status = edgefl::inspect(in, &info);

  std::vector<float> out(n + 1);  // never empty: a null empty span is tested in codec.empty
  for (size_t i = 0; i <= n; ++i) out[i] = static_cast<float>(i) * 0.5f - 3.0f;
  const std::vector<float> out_before = out;
  o.decode_status = edgefl::decode(in, {out.data(), n});
  CHECK(out[n] == out_before[n]);  // never past n
  if (o.decode_status != Status::kOk) {
    CHECK(edgefl_test::same_bits(out, out_before));
  } else {
    CHECK(edgefl_test::all_finite(out));  // nothing non-finite reaches an aggregate
    CHECK(o.inspect_status == Status::kOk);
  }

  std::vector<float> acc(n + 1);
  for (size_t i = 0; i <= n; ++i) acc[i] = 1.0f + static_cast<float>(i);
  const std::vector<float> acc_before = acc;
  o.add_status = edgefl::decode_add(in, 0.5f, {acc.data(), n});
  if (o.add_status != Status::kOk) {
    CHECK(edgefl_test::same_bits(acc, acc_before));
  } else {
    CHECK(edgefl_test::all_finite(acc));
  }
  CHECK(o.add_status == o.decode_status);
  if (o.inspect_status == Status::kOk) {
    // With decode_fast_workspace_size() bytes (indices read once): the same status, the same
    // bits, nothing touched on failure. The workspace is its own exactly-sized heap block.
    std::vector<uint8_t> fast_workspace(edgefl::decode_fast_workspace_size(info));
    const edgefl::Span<uint8_t> ws(fast_workspace.data(), fast_workspace.size());
    std::vector<float> fast_out = out_before;
    CHECK(edgefl::decode(in, {fast_out.data(), n}, ws) == o.decode_status);
    if (o.decode_status == Status::kOk) {
      CHECK(edgefl_test::same_bits(fast_out, out));
    } else {
      CHECK(edgefl_test::same_bits(fast_out, out_before));
    }
    std::vector<float> fast_acc = acc_before;
    CHECK(edgefl::decode_add(in, 0.5f, {fast_acc.data(), n}, ws) == o.add_status);
    CHECK(edgefl_test::same_bits(fast_acc, acc));
    CHECK(edgefl::verify(in, ws, nullptr) == edgefl::verify(in, {}, nullptr));
  }
  // verify() agrees with decode() (it does not know n: a dimension mismatch is decode's alone),
  // and read_header() accepts whatever decodes.
  EncodedInfo verified, header;
  const Status verify_status = edgefl::verify(in, {}, &verified);
  if (o.decode_status != Status::kDimensionMismatch) CHECK(verify_status == o.decode_status);
  if (o.decode_status == Status::kOk) {
    CHECK(edgefl::read_header(in, &header) == Status::kOk);
    CHECK(header.checksum == verified.checksum);
    CHECK(header.n == n);
  }

  std::vector<double> acc_d(n + 1);
  for (size_t i = 0; i <= n; ++i) acc_d[i] = 0.25 * static_cast<double>(i) - 7.0;
  const std::vector<double> acc_d_before = acc_d;
  const Status add_d = edgefl::decode_add(in, 0.5, {acc_d.data(), n});
  CHECK(add_d == o.decode_status);
  if (add_d != Status::kOk) {
    CHECK(acc_d == acc_d_before);
  } else {
    for (double v : acc_d) CHECK(std::isfinite(v));
  }
  return o;
}

// All three entry points agree that `bytes` is malformed with status `want`.
void expect_rejected(const std::vector<uint8_t>& bytes, Status want, size_t n = kN) {
  const Outcome o = run_all(bytes, n);
  CHECK(o.decode_status == want);
  CHECK(o.add_status == want);
  // inspect() verifies the header and the checksum only: payload errors are decode's.
  if (want != Status::kIndexOutOfRange && want != Status::kIndicesNotSorted &&
      want != Status::kCorruptPayload)
    CHECK(o.inspect_status == want);
}

void expect_not_ok(const std::vector<uint8_t>& bytes, size_t n = kN) {
  const Outcome o = run_all(bytes, n);
  CHECK(o.decode_status != Status::kOk);
  CHECK(o.add_status != Status::kOk);
}

std::vector<uint8_t> valid_encoding(const char* spec, uint64_t seed = 7) {
  return encode_ok(spec, edgefl_test::gaussian_vector(kN, seed), seed);
}

bool is_header_status(Status s) {
  return s == Status::kTruncated || s == Status::kBadMagic || s == Status::kUnsupportedVersion ||
         s == Status::kUnknownCodec || s == Status::kBadParameters || s == Status::kChecksumMismatch ||
         s == Status::kSizeMismatch || s == Status::kDimensionTooLarge;
}

}  // namespace

TEST_SUITE("codec.malformed") {
  TEST_CASE("valid encodings pass all three entry points") {
    for (const char* text : kSpecs) {
      INFO("spec: ", std::string(text));
      const Outcome o = run_all(valid_encoding(text));
      CHECK(o.inspect_status == Status::kOk);
      CHECK(o.decode_status == Status::kOk);
    }
  }

  TEST_CASE("verify() with its workspace accepts valid encodings of every family, sketches included") {
    for (const char* spec :
         {"fp32", "q4", "hq4", "qsgd", "topk:0.1+q4", "sparq:0.1", "randk:0.1+q8", "skc", "cs"}) {
      CAPTURE(spec);
      const std::vector<uint8_t> bytes = valid_encoding(spec);
      EncodedInfo info;
      REQUIRE(edgefl::read_header({bytes.data(), bytes.size()}, &info) == Status::kOk);
      std::vector<uint8_t> workspace(edgefl::decode_workspace_size(info));
      EncodedInfo verified;
      CHECK(edgefl::verify({bytes.data(), bytes.size()}, {workspace.data(), workspace.size()}, &verified) ==
            Status::kOk);
      CHECK(verified.n == kN);
      std::vector<uint8_t> fast_workspace(edgefl::decode_fast_workspace_size(info));
      CHECK(fast_workspace.size() >= workspace.size());
      CHECK(edgefl::verify({bytes.data(), bytes.size()}, {fast_workspace.data(), fast_workspace.size()},
                           nullptr) == Status::kOk);
      std::vector<uint8_t> corrupt = bytes;
      corrupt.back() ^= 0x40;  // the checksum catches it
      CHECK(edgefl::verify({corrupt.data(), corrupt.size()}, {workspace.data(), workspace.size()}, nullptr) ==
            Status::kChecksumMismatch);
    }
  }

  TEST_CASE("every truncation is rejected") {
    for (const char* text : kSpecs) {
      const std::vector<uint8_t> bytes = valid_encoding(text);
      for (size_t len = 0; len < bytes.size(); ++len) {
        INFO("spec: ", std::string(text), "  length: ", len, " of ", bytes.size());
        const Outcome o =
            run_all(std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<long>(len)));
        if (len < wire::kHeaderBytes) {
          CHECK(o.inspect_status == Status::kTruncated);
          CHECK(o.decode_status == Status::kTruncated);
        } else {
          CHECK((o.decode_status == Status::kTruncated || o.decode_status == Status::kSizeMismatch));
          CHECK((o.inspect_status == Status::kTruncated || o.inspect_status == Status::kSizeMismatch));
        }
      }
    }
  }

  TEST_CASE("a null pointer with a non-zero length or a null info is an error") {
    float out[4] = {0, 0, 0, 0};
    EncodedInfo info;
    CHECK(edgefl::inspect({nullptr, 0}, &info) == Status::kTruncated);
    CHECK(edgefl::decode({nullptr, 0}, {out, 4}) == Status::kTruncated);
    const std::vector<uint8_t> bytes = valid_encoding("fp32");
    CHECK(edgefl::inspect({bytes.data(), bytes.size()}, nullptr) == Status::kInvalidArgument);
  }

  TEST_CASE("every flipped header bit is rejected") {
    for (const char* text : kSpecs) {
      const std::vector<uint8_t> bytes = valid_encoding(text);
      for (size_t bit = 0; bit < 8 * wire::kHeaderBytes; ++bit) {
        INFO("spec: ", std::string(text), "  bit: ", bit);
        std::vector<uint8_t> bad = bytes;
        bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
        const Outcome o = run_all(bad);
        CHECK(o.decode_status != Status::kOk);
        CHECK(o.inspect_status != Status::kOk);
        CHECK(is_header_status(o.inspect_status));
        if (bit / 8 >= wire::kChecksum) CHECK(o.decode_status == Status::kChecksumMismatch);
      }
    }
  }

  TEST_CASE("every flipped payload bit is a checksum mismatch") {
    for (const char* text : kSpecs) {
      const std::vector<uint8_t> bytes = valid_encoding(text);
      for (size_t bit = 8 * wire::kHeaderBytes; bit < 8 * bytes.size(); bit += 3) {
        INFO("spec: ", std::string(text), "  bit: ", bit);
        std::vector<uint8_t> bad = bytes;
        bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
        expect_rejected(bad, Status::kChecksumMismatch);
      }
    }
  }

  TEST_CASE("the test's CRC32C matches the standard check value and the encoder's") {
    const uint8_t check[] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
    CHECK(edgefl_test::crc32c(check, sizeof check) == 0xE3069283u);
    for (const char* text : kSpecs) {
      INFO("spec: ", std::string(text));
      const std::vector<uint8_t> bytes = valid_encoding(text);
      CHECK(load_u32(bytes, wire::kChecksum) == edgefl_test::expected_checksum(bytes));
    }
  }

  TEST_CASE("an unknown format version is kUnsupportedVersion") {
    for (const char* text : {"fp32", "topk:0.1+q4", "topk:0.1,idx=blockrice+q4"}) {
      for (uint8_t version : {0, 3, 255}) {
        INFO("spec: ", std::string(text), "  version: ", int(version));
        std::vector<uint8_t> bad = valid_encoding(text);
        bad[wire::kVersion] = version;
        fix_checksum(bad);
        expect_rejected(bad, Status::kUnsupportedVersion);
      }
    }
  }

  TEST_CASE("a wrong magic is kBadMagic") {
    for (size_t at = 0; at < 4; ++at) {
      INFO("byte: ", at);
      std::vector<uint8_t> bad = valid_encoding("q8");
      bad[at] ^= 0x20;
      fix_checksum(bad);
      expect_rejected(bad, Status::kBadMagic);
    }
    // Not an encoding at all, but long enough.
    expect_rejected(std::vector<uint8_t>(200, 0), Status::kBadMagic);
  }

  TEST_CASE("unknown codec and index-coding ids are kUnknownCodec") {
    struct Case {
      const char* spec;
      size_t offset;
      uint8_t value;
    };
    const Case cases[] = {
        {"q8", wire::kValueCoder, 0},
        {"q8", wire::kValueCoder, 11},  // 9 (skc) and 10 (cs) are known ids
        {"q8", wire::kValueCoder, 200},
        {"q8", wire::kSparsifier, 5},
        {"q8", wire::kSparsifier, 255},
        {"topk:0.1+q4", wire::kIndexCoding, 4},
        {"topk:0.1+q4", wire::kIndexCoding, 255},  // kAuto is a spec value, never on the wire
        {"topk:0.1+q4", wire::kValueCoder, 77},
        {"topk:0.1+q4", wire::kSparsifier, 9},
    };
    for (const Case& c : cases) {
      INFO("spec: ", std::string(c.spec), "  offset: ", c.offset, "  value: ", int(c.value));
      std::vector<uint8_t> bad = valid_encoding(c.spec);
      bad[c.offset] = c.value;
      fix_checksum(bad);
      expect_rejected(bad, Status::kUnknownCodec);
    }
  }

  TEST_CASE("a known codec id that contradicts the layout is rejected") {
    struct Case {
      const char* spec;
      size_t offset;
      uint8_t value;
    };
    const Case cases[] = {
        {"q8", wire::kValueCoder, 1},                          // uniform bytes read as fp32
        {"q4", wire::kValueCoder, 8},                          // as hadamard
        {"fp32", wire::kSparsifier, 1},                        // dense read as top-k
        {"topk:0.1+q4", wire::kSparsifier, 0},                 // sparse read as dense
        {"topk:0.1+q4", wire::kIndexCoding, 0},                // top-k without index coding
        {"topk:0.1+q4", wire::kIndexCoding, 2},                // elias-fano bytes read as rice
        {"q8", wire::kIndexCoding, 1},                         // dense with an index coding
        {"topk:0.1,idx=blockrice+q4", wire::kIndexCoding, 1},  // block rice bytes read as elias-fano
        {"topk:0.1,idx=blockrice+q4", wire::kIndexCoding, 2},  // ... and as rice
        {"randk:0.1+q8", wire::kIndexCoding, 1},
    };
    for (const Case& c : cases) {
      INFO("spec: ", std::string(c.spec), "  offset: ", c.offset, "  value: ", int(c.value));
      std::vector<uint8_t> bad = valid_encoding(c.spec);
      bad[c.offset] = c.value;
      fix_checksum(bad);
      expect_not_ok(bad);
    }
  }

  TEST_CASE("a dimension above EDGEFL_MAX_DIMENSION is rejected before the payload is read") {
    for (const char* text : {"fp32", "thresh:0.5"}) {
      INFO("spec: ", std::string(text));
      std::vector<uint8_t> bad = valid_encoding(text);
      const uint32_t huge = static_cast<uint32_t>(EDGEFL_MAX_DIMENSION) + 1;
      store_u32(bad, wire::kN, huge);
      if (std::string(text) == "fp32") store_u32(bad, wire::kNnz, huge);  // dense: nnz == n
      fix_checksum(bad);
      const Outcome o = run_all(bad);
      // config.h: "Encodings that claim more are rejected before anything is read", with the
      // status that names the limit.
      CHECK(o.inspect_status == Status::kDimensionTooLarge);
      CHECK(o.decode_status == Status::kDimensionTooLarge);
    }
  }

  TEST_CASE("header parameters out of range are kBadParameters") {
    struct Case {
      const char* name;
      const char* spec;
      void (*mutate)(std::vector<uint8_t>&);
    };
    const Case cases[] = {
        {"nnz > n", "thresh:0.5",
         [](std::vector<uint8_t>& b) { store_u32(b, wire::kNnz, load_u32(b, wire::kN) + 1); }},
        {"dense nnz != n", "fp32",
         [](std::vector<uint8_t>& b) { store_u32(b, wire::kNnz, load_u32(b, wire::kN) - 1); }},
        {"unknown flag", "q8", [](std::vector<uint8_t>& b) { b[wire::kFlags] |= 0x80; }},
        {"no contributions", "q8", [](std::vector<uint8_t>& b) { store_u32(b, wire::kContributions, 0); }},
        {"zero block", "q4", [](std::vector<uint8_t>& b) { store_u32(b, wire::kBlock, 0); }},
        {"huge block", "q4", [](std::vector<uint8_t>& b) { store_u32(b, wire::kBlock, 0xFFFFFFFFu); }},
        {"zero bits", "q4", [](std::vector<uint8_t>& b) { b[wire::kBits] = 0; }},
        {"33 bits", "q8:shared=0.05", [](std::vector<uint8_t>& b) { b[wire::kBits] = 33; }},
        {"fp32 of 16 bits", "fp32", [](std::vector<uint8_t>& b) { b[wire::kBits] = 16; }},
        {"hadamard of 5 bits", "hq2", [](std::vector<uint8_t>& b) { b[wire::kBits] = 5; }},
        {"qsgd of 0 levels", "qsgd",
         [](std::vector<uint8_t>& b) {
           b[wire::kLevels] = 0;
           b[wire::kLevels + 1] = 0;
         }},
        {"shared step NaN", "q8:shared=0.05",
         [](std::vector<uint8_t>& b) { store_f32(b, wire::kParam, NAN); }},
        {"shared step 0", "q8:shared=0.05",
         [](std::vector<uint8_t>& b) { store_f32(b, wire::kParam, 0.0f); }},
        {"shared step -1", "q8:shared=0.05",
         [](std::vector<uint8_t>& b) { store_f32(b, wire::kParam, -1.0f); }},
        {"shared step inf", "q8:shared=0.05",
         [](std::vector<uint8_t>& b) { store_f32(b, wire::kParam, INFINITY); }},
        {"threshold NaN", "thresh:0.5", [](std::vector<uint8_t>& b) { store_f32(b, wire::kParam, NAN); }},
        {"randk unscaled flag on top-k", "topk:0.1", [](std::vector<uint8_t>& b) { b[wire::kFlags] |= 4; }},
        {"shared flag on fp32", "fp32", [](std::vector<uint8_t>& b) { b[wire::kFlags] |= 2; }},
    };
    for (const Case& c : cases) {
      INFO("case: ", std::string(c.name));
      std::vector<uint8_t> bad = valid_encoding(c.spec);
      c.mutate(bad);
      fix_checksum(bad);
      expect_rejected(bad, Status::kBadParameters);
    }
  }

  TEST_CASE("region sizes that disagree with the parameters are kSizeMismatch") {
    for (const char* text : kSpecs) {
      const std::vector<uint8_t> bytes = valid_encoding(text);
      const uint32_t index_bytes = load_u32(bytes, wire::kIndexBytes);
      const uint32_t value_bytes = load_u32(bytes, wire::kValueBytes);
      INFO("spec: ", std::string(text));
      // An rANS-coded region's size follows from its content, as a Rice region's: inspect()
      // checks only its bounds; decode finds the stream's end off (kCorruptPayload).
      EncodedInfo info;
      REQUIRE(edgefl::inspect({bytes.data(), bytes.size()}, &info) == Status::kOk);
      auto expect_value_size_rejected = [&](const std::vector<uint8_t>& bad) {
        if (info.entropy_coded) {
          const Outcome o = run_all(bad);
          CHECK((o.decode_status == Status::kCorruptPayload || o.decode_status == Status::kSizeMismatch));
          CHECK(o.decode_status == o.add_status);
        } else {
          expect_rejected(bad, Status::kSizeMismatch);
        }
      };
      {  // One value byte more, present in the buffer.
        std::vector<uint8_t> bad = bytes;
        bad.push_back(0);
        store_u32(bad, wire::kValueBytes, value_bytes + 1);
        fix_checksum(bad);
        expect_value_size_rejected(bad);
      }
      if (value_bytes > 0) {  // One value byte fewer.
        std::vector<uint8_t> bad = bytes;
        bad.pop_back();
        store_u32(bad, wire::kValueBytes, value_bytes - 1);
        fix_checksum(bad);
        expect_value_size_rejected(bad);
      }
      // The size of a Rice region follows from its content only: inspect() cannot check it, decode
      // finds a trailing byte (kSizeMismatch) or a stream that ends early (kCorruptPayload).
      const bool rice = bytes[wire::kIndexCoding] == static_cast<uint8_t>(edgefl::IndexCoding::kRice) ||
                        bytes[wire::kIndexCoding] == static_cast<uint8_t>(edgefl::IndexCoding::kBlockRice);
      {  // One index byte more (inserted at the end of the index region).
        std::vector<uint8_t> bad = bytes;
        bad.insert(bad.begin() + static_cast<long>(wire::kHeaderBytes + index_bytes), 0);
        store_u32(bad, wire::kIndexBytes, index_bytes + 1);
        fix_checksum(bad);
        if (rice) {
          const Outcome o = run_all(bad);
          CHECK(o.decode_status == Status::kSizeMismatch);
        } else {
          expect_rejected(bad, Status::kSizeMismatch);
        }
      }
      if (index_bytes > 0) {  // One index byte fewer.
        std::vector<uint8_t> bad = bytes;
        bad.erase(bad.begin() + static_cast<long>(wire::kHeaderBytes + index_bytes - 1));
        store_u32(bad, wire::kIndexBytes, index_bytes - 1);
        fix_checksum(bad);
        if (rice) {
          const Outcome o = run_all(bad);
          CHECK((o.decode_status == Status::kCorruptPayload || o.decode_status == Status::kSizeMismatch));
        } else {
          expect_rejected(bad, Status::kSizeMismatch);
        }
      }
      {  // Region sizes whose sum overflows 32 bits must not wrap around to the real length.
        std::vector<uint8_t> bad = bytes;
        store_u32(bad, wire::kIndexBytes, 0xFFFFFFFFu);
        store_u32(bad, wire::kValueBytes, static_cast<uint32_t>(index_bytes + value_bytes + 1));
        fix_checksum(bad);
        expect_not_ok(bad);
      }
    }
  }

  TEST_CASE("crafted elias-fano indices out of range are kIndexOutOfRange") {
    // n = 1000, k = 10: L = floor(log2(100)) = 6, n >> L = 15: an index up to 15 * 64 + 63 = 1023
    // fits the upper bits, so 1010 is representable and must be caught by the range check.
    const uint32_t n = 1000;
    const std::vector<uint32_t> good = {0, 100, 200, 300, 400, 500, 600, 700, 800, 999};
    std::vector<uint8_t> bytes = encode_ok("thresh:0.5,idx=ef", edgefl_test::indicator_vector(n, good), 1);
    const uint32_t index_bytes = load_u32(bytes, wire::kIndexBytes);
    REQUIRE(edgefl_test::elias_fano_reference(good, n).size() == index_bytes);
    auto with_indices = [&](const std::vector<uint32_t>& idx) {
      const std::vector<uint8_t> ef = edgefl_test::elias_fano_reference(idx, n);
      REQUIRE(ef.size() == index_bytes);
      std::vector<uint8_t> bad = bytes;
      std::copy(ef.begin(), ef.end(), bad.begin() + wire::kHeaderBytes);
      fix_checksum(bad);
      return bad;
    };
    // The reference reproduces the valid encoding exactly.
    CHECK(with_indices(good) == bytes);

    std::vector<uint32_t> out_of_range = good;
    out_of_range.back() = 1010;
    expect_rejected(with_indices(out_of_range), Status::kIndexOutOfRange, n);
    out_of_range.back() = 1000;
    expect_rejected(with_indices(out_of_range), Status::kIndexOutOfRange, n);

    std::vector<uint32_t> duplicate = good;
    duplicate[5] = duplicate[4];
    expect_rejected(with_indices(duplicate), Status::kIndicesNotSorted, n);

    std::vector<uint32_t> decreasing = good;  // 510 then 505: same high part (7), lower bits decrease
    decreasing[4] = 510;
    decreasing[5] = 505;
    expect_rejected(with_indices(decreasing), Status::kIndicesNotSorted, n);
  }

  TEST_CASE("elias-fano upper bits with the wrong number of ones are rejected") {
    const uint32_t n = 1000;
    const std::vector<uint32_t> good = {0, 100, 200, 300, 400, 500, 600, 700, 800, 999};
    const std::vector<uint8_t> bytes =
        encode_ok("thresh:0.5,idx=ef", edgefl_test::indicator_vector(n, good), 1);
    const uint32_t index_bytes = load_u32(bytes, wire::kIndexBytes);
    const size_t low_bytes = (10 * 6 + 7) / 8;
    size_t tried = 0;
    for (size_t byte = low_bytes; byte < index_bytes; ++byte) {
      for (int bit = 0; bit < 8; ++bit) {
        INFO("upper byte ", byte - low_bytes, " bit ", bit);
        std::vector<uint8_t> bad = bytes;
        bad[wire::kHeaderBytes + byte] ^= static_cast<uint8_t>(1u << bit);
        fix_checksum(bad);
        // Clearing a one loses an index; setting a zero adds one or moves indices: either the
        // count, the range or the order is wrong... unless the flip only moves one index to a
        // different valid place, which a decoder cannot detect. Those must decode to finite values.
        const Outcome o = run_all(bad, n);
        if (o.decode_status == Status::kOk) continue;
        ++tried;
        CHECK(o.decode_status != Status::kChecksumMismatch);
      }
    }
    CHECK(tried > 0);
  }

  TEST_CASE("crafted rice indices out of range are kIndexOutOfRange") {
    const uint32_t n = 1000;
    const std::vector<uint32_t> good = {0, 100, 200, 300, 400, 500, 600, 700, 800, 999};
    const std::vector<uint8_t> bytes =
        encode_ok("thresh:0.5,idx=rice", edgefl_test::indicator_vector(n, good), 1);
    // The reference reproduces the valid encoding exactly.
    CHECK(edgefl_test::with_index_region(bytes, edgefl_test::rice_reference(good, n)) == bytes);
    for (uint32_t last : {1000u, 1010u, 1900u}) {  // a plain code, and escapes with a raw gap
      INFO("last index: ", last);
      std::vector<uint32_t> idx = good;
      idx.back() = last;
      expect_rejected(edgefl_test::with_index_region(bytes, edgefl_test::rice_reference(idx, n)),
                      Status::kIndexOutOfRange, n);
    }
    // A gap that overflows 32 bits of index: 24 escapes' worth of raw gaps cannot, but a long run
    // of large gaps walks past n long before, and must be stopped there.
    std::vector<uint32_t> walk;
    for (uint32_t i = 0; i < 10; ++i) walk.push_back(i * 1000);
    expect_rejected(edgefl_test::with_index_region(bytes, edgefl_test::rice_reference(walk, n)),
                    Status::kIndexOutOfRange, n);
  }

  TEST_CASE("a rice stream that ends early or carries extra bytes is rejected") {
    const uint32_t n = 1000;
    const std::vector<uint32_t> good = {0, 100, 200, 300, 400, 500, 600, 700, 800, 999};
    const std::vector<uint8_t> bytes =
        encode_ok("thresh:0.5,idx=rice", edgefl_test::indicator_vector(n, good), 1);
    std::vector<uint8_t> region = edgefl_test::rice_reference(good, n);
    // Fewer indices than nnz: the stream ends early.
    const std::vector<uint32_t> nine(good.begin(), good.end() - 1);
    expect_rejected(edgefl_test::with_index_region(bytes, edgefl_test::rice_reference(nine, n)),
                    Status::kCorruptPayload, n);
    // More than 24 zeros in a unary quotient.
    std::vector<uint8_t> zeros(region.size(), 0);
    expect_rejected(edgefl_test::with_index_region(bytes, zeros), Status::kCorruptPayload, n);
    // A whole byte after the last index: only decoding the stream can see it.
    region.push_back(0xFF);
    const Outcome o = run_all(edgefl_test::with_index_region(bytes, region), n);
    CHECK(o.decode_status == Status::kSizeMismatch);
  }

  TEST_CASE("format version 2 is block rice and nothing else") {
    // Block rice under version 1 (a decoder before it would misread it), and version 2 on
    // encodings that version 1 describes, are each one header too many for one encoding.
    std::vector<uint8_t> v1 = valid_encoding("topk:0.1,idx=blockrice+q4");
    REQUIRE(v1[wire::kVersion] == 2);
    v1[wire::kVersion] = 1;
    fix_checksum(v1);
    expect_rejected(v1, Status::kBadParameters);
    for (const char* text : {"fp32", "topk:0.1+q4", "topk:0.1,idx=rice+q4", "randk:0.1+q8"}) {
      INFO("spec: ", std::string(text));
      std::vector<uint8_t> v2 = valid_encoding(text);
      REQUIRE(v2[wire::kVersion] == 1);
      v2[wire::kVersion] = 2;
      fix_checksum(v2);
      expect_rejected(v2, Status::kBadParameters);
    }
  }

  TEST_CASE("crafted block rice regions are refused with a specific error") {
    const uint32_t n = 1000;
    std::vector<uint32_t> good;
    for (uint32_t i = 0; i < 40; ++i) good.push_back(i < 20 ? i : 100 + 20 * i);  // a run, then strides
    const std::vector<uint8_t> bytes =
        encode_ok("thresh:0.5,idx=blockrice", edgefl_test::indicator_vector(n, good), 1);
    const std::vector<uint8_t> region = edgefl_test::block_rice_reference(good);
    // The reference reproduces the valid encoding exactly.
    REQUIRE(edgefl_test::with_index_region(bytes, region) == bytes);
    auto rejected = [&](const std::vector<uint8_t>& bad_region, Status want) {
      expect_rejected(edgefl_test::with_index_region(bytes, bad_region), want, n);
    };
    // decode's status, which decode_add's must equal.
    auto decode_status = [&](const std::vector<uint8_t>& bad_region) {
      const Outcome o = run_all(edgefl_test::with_index_region(bytes, bad_region), n);
      CHECK(o.add_status == o.decode_status);
      return o.decode_status;
    };
    SUBCASE("an index at or past n") {
      for (uint32_t last : {1000u, 1010u, 4000u}) {
        INFO("last index: ", last);
        std::vector<uint32_t> idx = good;
        idx.back() = last;
        rejected(edgefl_test::block_rice_reference(idx), Status::kIndexOutOfRange);
      }
      // A quotient that would carry an index past 2^32 is stopped before the shift.
      std::vector<uint32_t> idx = good;
      idx.back() = 0xFFFFFFF0u;
      rejected(edgefl_test::block_rice_reference(idx), Status::kIndexOutOfRange);
    }
    SUBCASE("fewer indices than nnz") {
      const std::vector<uint32_t> fewer(good.begin(), good.end() - 1);
      rejected(edgefl_test::block_rice_reference(fewer), Status::kCorruptPayload);
    }
    SUBCASE("a parameter out of range") {
      // A parameter other than the least-bits one still decodes (within the size bound); past 31
      // (reachable within the bound only for large n) is kernels_test's.
      CHECK(decode_status(edgefl_test::block_rice_reference(good, {6, 6, 6})) == Status::kOk);
      // One less than 0 for the first block: bits 1,0,1.
      std::vector<uint8_t> below = region;
      below[1] = static_cast<uint8_t>((below[1] & ~0x7u) | 0x5u);
      CHECK(decode_status(below) == Status::kCorruptPayload);
    }
    SUBCASE("a malformed length prefix") {
      std::vector<uint8_t> long_prefix = region;  // the same length, not minimal: 0x80 | a, 0x00
      REQUIRE(region[0] < 0x80);
      long_prefix[0] = static_cast<uint8_t>(region[0] | 0x80);
      long_prefix.insert(long_prefix.begin() + 1, 0);
      CHECK(decode_status(long_prefix) == Status::kCorruptPayload);
      std::vector<uint8_t> all_of_it = region;  // part A takes the whole region: no part B
      all_of_it[0] = static_cast<uint8_t>(region.size() - 1);
      CHECK(decode_status(all_of_it) == Status::kCorruptPayload);
      std::vector<uint8_t> too_long = region;
      too_long[0] = 0x7F;
      CHECK(decode_status(too_long) == Status::kCorruptPayload);
      CHECK(decode_status(std::vector<uint8_t>(6, 0xFF)) == Status::kCorruptPayload);
    }
    SUBCASE("bits left over") {
      std::vector<uint8_t> extra = region;  // a byte after part B
      extra.push_back(0);
      CHECK(decode_status(extra) == Status::kSizeMismatch);
      // A one bit in part B's padding, and in part A's.
      std::vector<uint8_t> b_pad = region;
      REQUIRE((b_pad.back() & 0x80) == 0);
      b_pad.back() |= 0x80;
      CHECK(decode_status(b_pad) == Status::kSizeMismatch);
      std::vector<uint8_t> a_pad = region;
      const size_t a_last = region[0];  // prefix of one byte: part A is bytes 1 .. region[0]
      REQUIRE((a_pad[a_last] & 0x80) == 0);
      a_pad[a_last] |= 0x80;
      CHECK(decode_status(a_pad) == Status::kSizeMismatch);
    }
  }

  TEST_CASE("non-finite values inside a payload are kCorruptPayload") {
    struct Case {
      const char* spec;
      size_t offset_in_values;  // byte offset inside the value region
      uint32_t pattern;
      size_t width;
    };
    const Case cases[] = {
        {"fp32", 4 * 17, 0x7FC00000u, 4},     // NaN value
        {"fp32", 0, 0x7F800000u, 4},          // +inf value
        {"fp16", 2 * 5, 0x7C00u, 2},          // half +inf
        {"fp16", 2 * 5, 0x7E00u, 2},          // half NaN
        {"bf16", 2 * 9, 0xFF80u, 2},          // bfloat16 -inf
        {"bf16", 2 * 9, 0x7FC0u, 2},          // bfloat16 NaN
        {"q4", 0, 0x7FC00000u, 4},            // block min NaN
        {"q4", 4, 0x7F800000u, 4},            // block step inf
        {"q4", 0, 0xFF800000u, 4},            // block min -inf
        {"qsgd", 0, 0x7FC00000u, 4},          // bucket scale NaN
        {"tern", 0, 0x7F800000u, 4},          // block max inf
        {"sign", 0, 0x7FC00000u, 4},          // block mean NaN
        {"hq2", 0, 0x7FC00000u, 4},           // block scale NaN
        {"topk:0.1", 4 * 3, 0x7FC00000u, 4},  // sparse fp32 NaN
        {"topk:0.1+q4", 0, 0x7F800000u, 4},   // sparse uniform min inf
    };
    for (const Case& c : cases) {
      INFO("spec: ", std::string(c.spec), "  offset: ", c.offset_in_values, "  pattern: ", c.pattern);
      std::vector<uint8_t> bad = valid_encoding(c.spec);
      const size_t at = wire::kHeaderBytes + load_u32(bad, wire::kIndexBytes) + c.offset_in_values;
      REQUIRE(at + c.width <= bad.size());
      for (size_t i = 0; i < c.width; ++i) bad[at + i] = static_cast<uint8_t>(c.pattern >> (8 * i));
      fix_checksum(bad);
      expect_rejected(bad, Status::kCorruptPayload);
    }
  }

  TEST_CASE("a QSGD level above s is kCorruptPayload, at every code width and position") {
    // 8 bits (s = 100: codes to 127), 4 bits (s = 5: to 7) and 3 bits (s = 2: to 3), so that the
    // byte-wise checks of 8- and 4-bit codes and the bit reader of other widths each see one; in
    // 4 bits, a level in the low and in the high nibble of a byte, and in a bucket's odd last code.
    struct Case {
      const char* spec;
      unsigned bits, level;
      size_t code;  // position in the first bucket, or in the last one when `last`
      bool last;
    };
    const Case cases[] = {
        {"qsgd:s=100", 8, 101, 0, false},
        {"qsgd:s=100", 8, 127, 33, false},
        {"qsgd:s=5", 4, 6, 2, false},
        {"qsgd:s=5", 4, 7, 9, false},
        {"qsgd:s=2", 3, 3, 5, false},
        // Buckets of 11 (the last of 300 holds 3): a bucket's last code is half a byte.
        {"qsgd:s=5,bucket=11", 4, 6, 10, false},
        {"qsgd:s=5,bucket=11", 4, 7, 0, true},
    };
    for (const Case& c : cases) {
      INFO("spec: ", std::string(c.spec), "  code: ", c.code, "  level: ", c.level);
      std::vector<uint8_t> bad = valid_encoding(c.spec);
      EncodedInfo info;
      REQUIRE(edgefl::inspect({bad.data(), bad.size()}, &info) == Status::kOk);
      REQUIRE(info.bits == c.bits);
      const size_t values_at = wire::kHeaderBytes + load_u32(bad, wire::kIndexBytes);
      const size_t bucket_bytes = 4 + (size_t(info.block) * c.bits + 7) / 8;
      size_t bucket = 0, code = c.code;
      if (c.last) {
        bucket = (kN - 1) / info.block;
        code = (kN - 1) % info.block;
      }
      const size_t bit = 8 * (values_at + bucket * bucket_bytes + 4) + code * c.bits;
      for (unsigned b = 0; b < c.bits; ++b) {  // LSB first; the sign bit (the top one) stays 0
        const unsigned value = b + 1 < c.bits ? (c.level >> b) & 1u : 0u;
        uint8_t& byte = bad[(bit + b) / 8];
        byte = uint8_t((byte & ~(1u << ((bit + b) % 8))) | (value << ((bit + b) % 8)));
      }
      fix_checksum(bad);
      expect_rejected(bad, Status::kCorruptPayload);
    }
  }

  TEST_CASE(
      "a rANS value stream that does not end in its initial states is refused, whichever path decodes") {
    // run_all compares decoding without a workspace (the stream checked, then decoded again) and
    // with decode_fast_workspace_size() (decoded once into the workspace, then applied): both
    // refuse, and neither touches its output.
    for (const char* text :
         {"sparq:0.1", "sparq:0.3", "topk:0.1,idx=blockrice+q4:sm,ans", "topk:0.1,idx=ef+q4:ans"}) {
      constexpr size_t kLarger = 20000;  // enough kept values for rANS to pay
      // Heavy tails (a product of Gaussians), like real updates: the kept values' levels are
      // skewed, so rANS pays.
      std::vector<float> x = edgefl_test::gaussian_vector(kLarger, 5);
      const std::vector<float> scale = edgefl_test::gaussian_vector(kLarger, 6);
      for (size_t i = 0; i < kLarger; ++i) x[i] *= scale[i] * scale[i];
      const std::vector<uint8_t> bytes = encode_ok(text, x, 5);
      EncodedInfo info;
      REQUIRE(edgefl::inspect({bytes.data(), bytes.size()}, &info) == Status::kOk);
      INFO("spec: ", std::string(text));
      REQUIRE(info.entropy_coded);
      REQUIRE(edgefl::decode_fast_workspace_size(info) >= size_t(info.nnz) * 8);
      // Intact, both paths decode it to the same bits (run_all compares them).
      const Outcome intact = run_all(bytes, kLarger);
      CHECK(intact.decode_status == Status::kOk);
      CHECK(intact.add_status == Status::kOk);
      // The stream's last renormalisation words: the states no longer end where they began.
      for (size_t back = 1; back <= 8; ++back) {
        INFO("spec: ", std::string(text), "  byte from the end: ", back);
        std::vector<uint8_t> bad = bytes;
        bad[bad.size() - back] ^= 0x5A;
        fix_checksum(bad);
        expect_rejected(bad, Status::kCorruptPayload, kLarger);
      }
    }
  }

  TEST_CASE("bytes after the end of an encoding are kSizeMismatch") {
    for (const char* text : kSpecs) {
      INFO("spec: ", std::string(text));
      std::vector<uint8_t> longer = valid_encoding(text);
      longer.push_back(0);
      expect_rejected(longer, Status::kSizeMismatch);
    }
  }

  TEST_CASE("a base-3 terngrad byte above 242 is kCorruptPayload") {
    std::vector<uint8_t> bad = valid_encoding("tern");
    bad[wire::kHeaderBytes + 4] = 243;  // first digits byte after the block's f32 max
    fix_checksum(bad);
    expect_rejected(bad, Status::kCorruptPayload);
  }

  TEST_CASE("finite but huge scales never decode to infinity") {
    // min + code * step can overflow float even when min and step are finite.
    struct Case {
      const char* spec;
      float min;
      float step;
    };
    const Case cases[] = {{"q8", 3e38f, 3e38f}, {"q8", -3e38f, 3e38f}, {"q4", 1e38f, 1e38f}};
    for (const Case& c : cases) {
      INFO("spec: ", std::string(c.spec), "  min: ", c.min, "  step: ", c.step);
      std::vector<uint8_t> bad = valid_encoding(c.spec);
      store_f32(bad, wire::kHeaderBytes, c.min);
      store_f32(bad, wire::kHeaderBytes + 4, c.step);
      fix_checksum(bad);
      const Outcome o = run_all(bad);  // checks: OK only with finite outputs
      if (o.decode_status != Status::kOk) CHECK(o.decode_status == Status::kCorruptPayload);
    }
  }

  TEST_CASE("random bytes never crash the decoder") {
    edgefl_test::SplitMix64 rng(0xF00D);
    size_t accepted = 0;
    for (int iter = 0; iter < 20000; ++iter) {
      const size_t len = rng.below(400);
      std::vector<uint8_t> bytes(len);
      for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng.next());
      if (iter % 2 == 1 && len >= wire::kHeaderBytes) {
        // Half of them get a plausible header, so that they reach the deeper checks.
        memcpy(bytes.data(), "EFLU\x01", 5);
        bytes[wire::kSparsifier] = static_cast<uint8_t>(rng.below(5));
        bytes[wire::kValueCoder] = static_cast<uint8_t>(1 + rng.below(8));
        bytes[wire::kIndexCoding] = static_cast<uint8_t>(rng.below(3));
        store_u32(bytes, wire::kN, static_cast<uint32_t>(rng.below(kN + 1)));
        store_u32(bytes, wire::kNnz, static_cast<uint32_t>(rng.below(kN + 1)));
        bytes[wire::kFlags] &= 7;
        store_u32(bytes, wire::kBlock, static_cast<uint32_t>(rng.below(600)));
        store_u32(bytes, wire::kContributions, 1);
        store_u32(bytes, wire::kIndexBytes, static_cast<uint32_t>(rng.below(len - wire::kHeaderBytes + 1)));
        store_u32(bytes, wire::kValueBytes,
                  static_cast<uint32_t>(len - wire::kHeaderBytes - load_u32(bytes, wire::kIndexBytes)));
        fix_checksum(bytes);
      }
      const size_t n = bytes.size() >= 12 ? std::min<size_t>(load_u32(bytes, wire::kN), 4096) : kN;
      const Outcome o = run_all(bytes, n);
      accepted += o.decode_status == Status::kOk;
    }
    MESSAGE("random buffers accepted: ", accepted);
  }

  TEST_CASE("mutated valid encodings with a fixed checksum never crash the decoder") {
    edgefl_test::SplitMix64 rng(0xBEEF);
    for (const char* text : kSpecs) {
      const std::vector<uint8_t> bytes = valid_encoding(text);
      size_t accepted = 0;
      for (int iter = 0; iter < 1500; ++iter) {
        std::vector<uint8_t> bad = bytes;
        const int edits = 1 + static_cast<int>(rng.below(4));
        for (int e = 0; e < edits; ++e) {
          const size_t at = rng.below(bad.size());
          if (at >= wire::kChecksum && at < wire::kHeaderBytes) continue;
          switch (rng.below(3)) {
            case 0: bad[at] ^= static_cast<uint8_t>(1u << rng.below(8)); break;
            case 1: bad[at] = static_cast<uint8_t>(rng.next()); break;
            default: bad[at] = rng.below(2) ? 0xFF : 0x00; break;
          }
        }
        if (rng.below(8) == 0) bad.resize(rng.below(bad.size() + 1));
        if (bad.size() >= wire::kHeaderBytes) fix_checksum(bad);
        INFO("spec: ", std::string(text), "  iteration: ", iter);
        const size_t n = bad.size() >= 12 ? std::min<size_t>(load_u32(bad, wire::kN), 4096) : kN;
        const Outcome o = run_all(bad, n);
        accepted += o.decode_status == Status::kOk;
      }
      MESSAGE(std::string(text), ": mutations accepted: ", accepted, " of 1500");
    }
  }

  TEST_CASE("add_encoded rejects malformed operands with the status of inspect") {
    const std::vector<float> x = edgefl_test::gaussian_vector(kN, 3);
    const std::vector<uint8_t> a = encode_ok("q8:shared=0.05", x, 1);
    std::vector<uint8_t> b = a;
    b[wire::kHeaderBytes + 3] ^= 1;
    std::vector<uint8_t> out(1 << 16, 0);
    size_t written = 5;
    CHECK(edgefl::add_encoded({a.data(), a.size()}, {b.data(), b.size()}, {out.data(), out.size()},
                              &written) == Status::kChecksumMismatch);
    CHECK(written == 0);
    CHECK(edgefl::add_encoded({a.data(), 10}, {a.data(), a.size()}, {out.data(), out.size()}, &written) ==
          Status::kTruncated);
    CHECK(written == 0);
  }

}  // TEST_SUITE
