// Every ISA kernel table gives the bytes of the scalar reference (style rule 9). The tolerance is
// zero: the kernels use the same float operations in the same order, so codes match bit for bit.
#include <doctest/doctest.h>
#include <string.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "codec/format.h"
#include "codec/index_coding.h"
#include "codec/kernels.h"
#include "codec/select.h"
#include "codec/values.h"
#include "core/crc32c.h"
#include "core/half.h"
#include "edgefl/codec.h"
#include "support/codec_util.h"

namespace {

std::vector<float> test_vector(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t s = seed;
  for (size_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double u = double(s >> 11) / 9007199254740992.0;
    const double scale = (i % 97 == 0) ? 1e3 : (i % 13 == 0) ? 1e-6 : 1.0;
    v[i] = float((u - 0.5) * 2.0 * scale);
  }
  if (n > 3) {
    v[1] = 0.0f;
    v[2] = -0.0f;
    v[3] = 1e-40f;  // subnormal
  }
  return v;
}

// Lengths that exercise every tail of 8-, 16- and 32-wide loops.
const size_t kLengths[] = {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 255, 256, 257, 1000, 4099};

// The ISA tables this build and CPU have (none on a plain x86-64 without AVX2, or Cortex-M).
std::vector<const edgefl::Kernels*> simd_tables() {
  std::vector<const edgefl::Kernels*> tables;
  if (const edgefl::Kernels* t = edgefl::kernels_avx2()) tables.push_back(t);
  if (const edgefl::Kernels* t = edgefl::kernels_neon()) tables.push_back(t);
  return tables;
}

void check_table_matches_reference(const edgefl::Kernels& simd, const std::vector<float>& x) {
  const edgefl::Kernels& ref = edgefl::kernels_ref();
  const size_t n = x.size();
  CHECK(simd.max_abs_bits(x.data(), n) == ref.max_abs_bits(x.data(), n));
  float lo_a, hi_a, lo_b, hi_b;
  simd.min_max(x.data(), n, &lo_a, &hi_a);
  ref.min_max(x.data(), n, &lo_b, &hi_b);
  CHECK(edgefl::float_bits(lo_a) == edgefl::float_bits(lo_b));
  CHECK(edgefl::float_bits(hi_a) == edgefl::float_bits(hi_b));
  std::vector<float> small(x);
  for (float& f : small) f = std::fmod(f, 60000.0f);
  std::vector<uint8_t> a(2 * n), b(2 * n);
  CHECK(simd.to_fp16(small.data(), n, a.data()) == ref.to_fp16(small.data(), n, b.data()));
  CHECK(a == b);
  std::vector<float> fa(n), fb(n);
  simd.from_fp16(a.data(), n, fa.data());
  ref.from_fp16(a.data(), n, fb.data());
  CHECK(memcmp(fa.data(), fb.data(), n * sizeof(float)) == 0);
  CHECK(simd.to_bf16(x.data(), n, a.data()) == ref.to_bf16(x.data(), n, b.data()));
  CHECK(a == b);
  for (uint32_t threshold : {0u, 0x3F000000u, 0x3F800000u, 0x7F7FFFFFu}) {
    CHECK(simd.count_abs_at_least(x.data(), n, threshold) == ref.count_abs_at_least(x.data(), n, threshold));
  }
  if (hi_b == lo_b) return;  // no uniform grid over a single value
  for (unsigned bits : {1u, 2u, 4u, 8u}) {
    for (bool stochastic : {true, false}) {
      CAPTURE(bits);
      CAPTURE(stochastic);
      std::vector<uint8_t> qa((n * bits + 7) / 8 + 1, 0xAB), qb(qa);
      const float inv = float((1u << bits) - 1) / (hi_b - lo_b);
      simd.quantize_uniform(x.data(), uint32_t(n), lo_b, inv, bits, stochastic, 77, 5, qa.data());
      ref.quantize_uniform(x.data(), uint32_t(n), lo_b, inv, bits, stochastic, 77, 5, qb.data());
      CHECK(qa == qb);
      if (bits >= 2) {
        const int32_t limit = int32_t((1u << (bits - 1)) - 1);
        simd.quantize_shared(x.data(), uint32_t(n), 3.0f, limit, bits, stochastic, 91, 3, qa.data());
        ref.quantize_shared(x.data(), uint32_t(n), 3.0f, limit, bits, stochastic, 91, 3, qb.data());
        CHECK(qa == qb);
      }
    }
  }
}

}  // namespace

TEST_SUITE("kernels") {
  TEST_CASE("every ISA table matches the scalar reference bit for bit") {
    const std::vector<const edgefl::Kernels*> tables = simd_tables();
    if (tables.empty()) {
      // Nothing to compare, and the codecs must then be running the reference.
      MESSAGE("no ISA table in this build or on this CPU");
      CHECK(std::string(edgefl::kernels().name) == "ref");
      return;
    }
    for (const edgefl::Kernels* simd : tables) {
      const std::string table = simd->name;
      CAPTURE(table);
      for (size_t n : kLengths) {
        CAPTURE(n);
        check_table_matches_reference(*simd, test_vector(n, 1234 + n));
      }
      // Edge cases: signed zeros only, all negative, subnormals and fp16/bf16 rounding ties.
      check_table_matches_reference(*simd, std::vector<float>(37, -0.0f));
      std::vector<float> zeros(41, 0.0f);
      zeros[17] = -0.0f;
      check_table_matches_reference(*simd, zeros);
      std::vector<float> negative = test_vector(77, 9);
      for (float& f : negative) f = -std::fabs(f) - 1e-3f;
      check_table_matches_reference(*simd, negative);
      std::vector<float> ties(72);
      for (size_t i = 0; i < ties.size(); ++i) {
        const uint32_t mantissa_tie = (i % 3 == 0) ? 0x1000u : (i % 3 == 1) ? 0x8000u : 0x0FFFu;
        const uint32_t exponent = (i % 2 == 0) ? 0x38000000u /* fp16 subnormal */ : 0x3F800000u;
        ties[i] = edgefl::bits_float((exponent | (uint32_t(i) << 13) | mantissa_tie) ^
                                     (i % 4 == 0 ? 0x80000000u : 0u));
      }
      check_table_matches_reference(*simd, ties);
    }
    // The codecs use the first table present (kernels()).
    CHECK(std::string(edgefl::kernels().name) == tables.front()->name);
  }

  TEST_CASE("fused convert-and-checksum kernels give to_fp16 / to_bf16's bytes and their CRC32C") {
    // Lengths around the three-lane blocks (768 floats of output per block) and their tails;
    // a running CRC is continued; an overflowing value anywhere (block or tail) is reported.
    std::vector<size_t> lengths = {1, 15, 16, 17, 767, 768, 769, 2 * 768 + 5, 3 * 768, 5000};
    size_t fused_tables = 0;
    for (const edgefl::Kernels* simd : simd_tables()) {
      for (int kind = 0; kind < 2; ++kind) {
        const bool bf16 = kind == 1;
        auto fused = bf16 ? simd->to_bf16_crc : simd->to_fp16_crc;
        auto plain = bf16 ? edgefl::kernels_ref().to_bf16 : edgefl::kernels_ref().to_fp16;
        if (fused == nullptr) continue;
        ++fused_tables;
        const std::string table = std::string(simd->name) + (bf16 ? " bf16" : " fp16");
        CAPTURE(table);
        for (size_t n : lengths) {
          CAPTURE(n);
          std::vector<float> x = test_vector(n, 77 + n);
          for (float& f : x) f = std::fmod(f, 60000.0f);
          std::vector<uint8_t> a(2 * n), b(2 * n);
          uint32_t crc = 0x12345678u;
          CHECK(fused(x.data(), n, a.data(), &crc));
          CHECK(plain(x.data(), n, b.data()));
          CHECK(a == b);
          CHECK(crc == edgefl::crc32c_update_ref(0x12345678u, b.data(), b.size()));
          // Outputs at every offset from a 32-byte boundary (the kernels align their stores
          // with a head; odd offsets cannot be aligned).
          std::vector<uint8_t> shifted(2 * n + 64);
          const uintptr_t base = reinterpret_cast<uintptr_t>(shifted.data());
          for (size_t offset = 0; offset < 32; offset += (offset < 4 ? 1 : 6)) {
            CAPTURE(offset);
            uint8_t* at = shifted.data() + ((32 - base % 32) % 32) + offset;
            uint32_t shifted_crc = 7;
            CHECK(fused(x.data(), n, at, &shifted_crc));
            CHECK(memcmp(at, b.data(), b.size()) == 0);
            CHECK(shifted_crc == edgefl::crc32c_update_ref(7, b.data(), b.size()));
          }
          for (size_t at : {size_t(0), n / 2, n - 1}) {
            std::vector<float> bad(x);
            bad[at] = bf16 ? INFINITY : 70000.0f;
            crc = 0;
            CHECK_FALSE(fused(bad.data(), n, a.data(), &crc));
          }
        }
      }
    }
    MESSAGE("tables with fused kernels: " << fused_tables);
  }

  TEST_CASE("tern_decode of every ISA table that has one gives each byte's base-3 digits as 0, a, -a") {
    // Every byte 0..242 (in order, then shuffled), runs of 1 to 60 bytes (the last byte is
    // written without the 8-float stores), scales of both signs, zero and subnormal; nothing is
    // written past 5 x bytes.
    std::vector<uint8_t> bytes(243);
    for (unsigned b = 0; b < 243; ++b) bytes[b] = uint8_t(b);
    uint64_t state = 5;
    for (size_t i = bytes.size(); i > 1; --i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      std::swap(bytes[i - 1], bytes[size_t((state >> 33) % i)]);
    }
    bytes.insert(bytes.end(), bytes.begin(), bytes.end());
    size_t tables = 0;
    for (const edgefl::Kernels* simd : simd_tables()) {
      if (simd->tern_decode == nullptr) continue;
      ++tables;
      CAPTURE(simd->name);
      for (float a : {0.75f, -1.5f, 0.0f, 1e-40f, 3.0e38f}) {
        CAPTURE(a);
        for (size_t first = 0; first < bytes.size(); first += 61) {
          const uint32_t count = uint32_t(std::min<size_t>(1 + first % 60, bytes.size() - first));
          std::vector<float> out(5 * count + 8, 7.0f);
          simd->tern_decode(bytes.data() + first, count, a, out.data());
          const float values3[3] = {0.0f, a, -a};
          for (uint32_t i = 0; i < count; ++i) {
            unsigned v = bytes[first + i];
            for (unsigned j = 0; j < 5; ++j, v /= 3) {
              REQUIRE(edgefl::float_bits(out[5 * i + j]) == edgefl::float_bits(values3[v % 3]));
            }
          }
          for (size_t j = 5 * size_t(count); j < out.size(); ++j) REQUIRE(out[j] == 7.0f);
        }
      }
    }
    MESSAGE("tables with tern_decode: " << tables);
  }

  TEST_CASE(
      "the hq kernels (signs, transform, quantize) of every ISA table match the reference bit for bit") {
    const edgefl::Kernels& ref = edgefl::kernels_ref();
    REQUIRE(bool(ref.hadamard_transform));
    const float levels4[16] = {-2.7326f, -2.0690f, -1.6181f, -1.2562f, -0.9423f, -0.6568f, -0.3880f, -0.1284f,
                               0.1284f,  0.3880f,  0.6568f,  0.9423f,  1.2562f,  1.6181f,  2.0690f,  2.7326f};
    float thresholds[15];
    for (int j = 0; j < 15; ++j) thresholds[j] = 0.5f * (levels4[j] + levels4[j + 1]);
    for (const edgefl::Kernels* simd : simd_tables()) {
      CAPTURE(std::string(simd->name));
      for (uint32_t padded = 1; padded <= 1024; padded *= 2) {
        for (uint32_t count : {padded, padded - padded / 3, (padded + 1) / 2}) {
          CAPTURE(padded);
          CAPTURE(count);
          const std::vector<float> x = test_vector(padded, 31 + padded + count);
          std::vector<float> a(padded, -7.0f), b(padded, 7.0f);
          simd->hadamard_signs(x.data(), count, padded, 0xABCDu, 1000u + count, a.data());
          ref.hadamard_signs(x.data(), count, padded, 0xABCDu, 1000u + count, b.data());
          CHECK(memcmp(a.data(), b.data(), padded * sizeof(float)) == 0);
          simd->hadamard_transform(a.data(), padded);
          ref.hadamard_transform(b.data(), padded);
          CHECK(memcmp(a.data(), b.data(), padded * sizeof(float)) == 0);
          for (unsigned bits = 1; bits <= 4; ++bits) {
            // Levels and thresholds of a narrower code: the middle of the 4-bit tables.
            const unsigned count_levels = 1u << bits;
            float lv[16], th[15];
            for (unsigned j = 0; j < count_levels; ++j) lv[j] = levels4[8 - count_levels / 2 + j];
            for (unsigned j = 0; j + 1 < count_levels; ++j) th[j] = 0.5f * (lv[j] + lv[j + 1]);
            std::vector<uint8_t> ca(padded, 99), cb(padded, 98);
            float da[4] = {0.5f, 0, 0, -1}, db[4] = {0.5f, 0, 0, -1};
            simd->hadamard_quantize(a.data(), padded, 3.0f, bits == 4 ? thresholds : th, lv, bits, ca.data(),
                                    da);
            ref.hadamard_quantize(b.data(), padded, 3.0f, bits == 4 ? thresholds : th, lv, bits, cb.data(),
                                  db);
            CHECK(ca == cb);
            CHECK(memcmp(da, db, sizeof da) == 0);
            // Tables that do not mirror about zero (each level moved up by 0.01): the kernels'
            // general path, where the tables above take the mirrored one.
            float shifted_levels[16], shifted_thresholds[15];
            for (unsigned j = 0; j < count_levels; ++j) shifted_levels[j] = lv[j] + 0.01f;
            for (unsigned j = 0; j + 1 < count_levels; ++j) {
              shifted_thresholds[j] = 0.5f * (shifted_levels[j] + shifted_levels[j + 1]);
            }
            simd->hadamard_quantize(a.data(), padded, 3.0f, shifted_thresholds, shifted_levels, bits,
                                    ca.data(), da);
            ref.hadamard_quantize(b.data(), padded, 3.0f, shifted_thresholds, shifted_levels, bits, cb.data(),
                                  db);
            CHECK(ca == cb);
            CHECK(memcmp(da, db, sizeof da) == 0);
          }
        }
      }
    }
  }

  TEST_CASE(
      "hq quantizing agrees with the reference on the thresholds themselves, their neighbours and zeros") {
    const edgefl::Kernels& ref = edgefl::kernels_ref();
    // The Lloyd-Max tables the coder uses (values.cpp), mirrored about zero bit for bit.
    const float levels4[16] = {-2.7326f, -2.0690f, -1.6180f, -1.2562f, -0.9424f, -0.6568f, -0.3881f, -0.1284f,
                               0.1284f,  0.3881f,  0.6568f,  0.9424f,  1.2562f,  1.6180f,  2.0690f,  2.7326f};
    for (const edgefl::Kernels* simd : simd_tables()) {
      CAPTURE(std::string(simd->name));
      for (unsigned bits = 1; bits <= 4; ++bits) {
        CAPTURE(bits);
        const unsigned count_levels = 1u << bits;
        float lv[16], th[15];
        for (unsigned j = 0; j < count_levels; ++j) lv[j] = levels4[8 - count_levels / 2 + j];
        for (unsigned j = 0; j + 1 < count_levels; ++j) th[j] = 0.5f * (lv[j] + lv[j + 1]);
        // Every threshold, its float neighbours on both sides, both zeros and the smallest
        // subnormals, each with both signs: 8 lanes at a time, so the vector loops see them all.
        std::vector<float> v;
        for (unsigned j = 0; j + 1 < count_levels; ++j) {
          for (float t : {th[j], std::nextafter(th[j], -1.0f), std::nextafter(th[j], 1.0f)}) {
            v.push_back(t);
            v.push_back(-t);
          }
        }
        for (float t : {0.0f, -0.0f, std::nextafter(0.0f, 1.0f), std::nextafter(0.0f, -1.0f)}) v.push_back(t);
        while (v.size() % 8 != 0) v.push_back(th[0]);
        std::vector<uint8_t> ca(v.size(), 99), cb(v.size(), 98);
        float da[4] = {0, 0, 0, 0}, db[4] = {0, 0, 0, 0};
        // inv_rms 1: z is v itself, exactly on the thresholds.
        simd->hadamard_quantize(v.data(), uint32_t(v.size()), 1.0f, th, lv, bits, ca.data(), da);
        ref.hadamard_quantize(v.data(), uint32_t(v.size()), 1.0f, th, lv, bits, cb.data(), db);
        CHECK(ca == cb);
        CHECK(memcmp(da, db, sizeof da) == 0);
        for (size_t i = 0; i < v.size(); ++i) {  // the codes' meaning: how many thresholds lie below
          unsigned below = 0;
          for (unsigned j = 0; j + 1 < count_levels; ++j) below += v[i] > th[j] ? 1u : 0u;
          CHECK(unsigned(ca[i]) == below);
        }
        // NaN (never the coder's input, which is checked finite, but the kernels' contract): code
        // 0, as no threshold lies below it, whatever its sign and payload, the largest included.
        std::vector<float> nans;
        for (uint32_t bits_of_nan : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0x7FFFFFFFu, 0xFFFFFFFFu}) {
          float nan;
          memcpy(&nan, &bits_of_nan, 4);
          nans.push_back(nan);
        }
        while (nans.size() % 8 != 0) nans.push_back(th[0]);  // one vector step of each table
        std::vector<uint8_t> nan_codes(nans.size(), 99), nan_codes_ref(nans.size(), 98);
        float dot_simd[4] = {0, 0, 0, 0}, dot_ref[4] = {0, 0, 0, 0};
        simd->hadamard_quantize(nans.data(), uint32_t(nans.size()), 1.0f, th, lv, bits, nan_codes.data(),
                                dot_simd);
        ref.hadamard_quantize(nans.data(), uint32_t(nans.size()), 1.0f, th, lv, bits, nan_codes_ref.data(),
                              dot_ref);
        CHECK(nan_codes == nan_codes_ref);
        for (size_t i = 0; i < nans.size(); ++i) {
          if (std::isnan(nans[i])) CHECK(nan_codes[i] == 0);
        }
      }
    }
  }

  TEST_CASE("fp16 overflow is reported by both tables") {
    const float big[9] = {1, 2, 3, 4, 5, 6, 7, 8, 65520.0f};
    uint8_t out[18];
    CHECK_FALSE(edgefl::kernels_ref().to_fp16(big, 9, out));
    CHECK_FALSE(edgefl::kernels().to_fp16(big, 9, out));
    const float edge[1] = {65504.0f};
    CHECK(edgefl::kernels().to_fp16(edge, 1, out));
  }
}

TEST_SUITE("crc32c") {
  TEST_CASE("the check value of \"123456789\" is 0xE3069283") {
    const uint8_t text[] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
    CHECK(edgefl::crc32c_update_ref(0, text, 9) == 0xE3069283u);
    CHECK(edgefl::crc32c_update(0, text, 9) == 0xE3069283u);
  }

  TEST_CASE("crc32c_combine joins the CRCs of two pieces at any split") {
    std::vector<uint8_t> data(3000);
    for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 167 + 11);
    for (size_t len : {size_t(0), size_t(1), size_t(9), size_t(1536), size_t(3000)}) {
      for (size_t cut : {size_t(0), len / 3, len}) {
        CAPTURE(len);
        CAPTURE(cut);
        const uint32_t a = edgefl::crc32c_update_ref(0, data.data(), cut);
        const uint32_t b = edgefl::crc32c_update_ref(0, data.data() + cut, len - cut);
        CHECK(edgefl::crc32c_combine(a, b, len - cut) == edgefl::crc32c_update_ref(0, data.data(), len));
      }
    }
    // Runs of zeros, and lengths beyond memory: joining is associative, (A B) C == A (B C).
    const std::vector<uint8_t> zeros(10000, 0);
    CHECK(edgefl::crc32c_combine(0xDEADBEEFu, edgefl::crc32c_update_ref(0, zeros.data(), zeros.size()),
                                 zeros.size()) ==
          edgefl::crc32c_update_ref(0xDEADBEEFu, zeros.data(), zeros.size()));
    const uint64_t lb = (uint64_t(1) << 40) + 3, lc = (uint64_t(1) << 33) + 12345;
    const uint32_t a = 0xDEADBEEFu, b = 0x01234567u, c = 0x89ABCDEFu;
    CHECK(edgefl::crc32c_combine(edgefl::crc32c_combine(a, b, lb), c, lc) ==
          edgefl::crc32c_combine(a, edgefl::crc32c_combine(b, c, lc), lb + lc));
  }

  TEST_CASE("the hardware path matches the reference at every length, split and alignment") {
    // Long inputs take the three-lane path (blocks of 3 x 512 bytes joined by the shift tables):
    // lengths cross 0, 1, 2 and 3 blocks, starts are unaligned, and a running CRC is continued.
    std::vector<uint8_t> data(5 * 1536 + 64);
    uint64_t state = 0x9E3779B97F4A7C15ull;
    for (uint8_t& b : data) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      b = uint8_t(state >> 56);
    }
    std::vector<size_t> lengths;
    for (size_t len = 0; len <= 1100; len += 37) lengths.push_back(len);
    for (size_t blocks = 1; blocks <= 4; ++blocks) {
      for (size_t delta : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(1535)}) {
        lengths.push_back(blocks * 1536 - 1);
        lengths.push_back(blocks * 1536 + delta);
      }
    }
    for (size_t offset : {size_t(0), size_t(1), size_t(3), size_t(5)}) {
      for (size_t len : lengths) {
        CAPTURE(offset);
        CAPTURE(len);
        const uint8_t* p = data.data() + offset;
        const uint32_t whole = edgefl::crc32c_update_ref(0, p, len);
        CHECK(edgefl::crc32c_update(0, p, len) == whole);
        const size_t third = len / 3;
        CHECK(edgefl::crc32c_update(edgefl::crc32c_update(0, p, third), p + third, len - third) == whole);
        CHECK(edgefl::crc32c_update_ref(edgefl::crc32c_update_ref(0, p, third), p + third, len - third) ==
              whole);
      }
    }
  }
}

TEST_SUITE("values") {
  // Dense decodes (decode, decode_add) take whole runs from decode_dense_runs; every other path
  // takes decode_region's values one by one. Both must give the same values, bit for bit.
  TEST_CASE("dense runs give decode_region's values bit for bit") {
    using edgefl::ValueCoderKind;
    namespace values = edgefl::values;
    struct Layout {
      ValueCoderKind kind;
      uint8_t bits;
      uint32_t block;
      bool shared;
      bool signmag = false;
      uint16_t qsgd_levels = 0;  // 0: every level the codes hold (8 bits: 100)
    };
    const Layout layouts[] = {
        {ValueCoderKind::kFp32, 32, 0, false},
        {ValueCoderKind::kFp16, 16, 0, false},
        {ValueCoderKind::kBf16, 16, 0, false},
        {ValueCoderKind::kUniform, 8, 0, true},
        {ValueCoderKind::kUniform, 4, 0, true},
        {ValueCoderKind::kUniform, 8, 256, false},
        {ValueCoderKind::kUniform, 4, 256, false},
        {ValueCoderKind::kUniform, 8, 1000, false},
        {ValueCoderKind::kUniform, 4, 1000, false},
        {ValueCoderKind::kUniform, 4, 7, false},
        {ValueCoderKind::kUniform, 2, 64, false},
        {ValueCoderKind::kScaledSign, 1, 256, false},
        {ValueCoderKind::kScaledSign, 1, 1000, false},
        {ValueCoderKind::kScaledSign, 1, 7, false},
        {ValueCoderKind::kTernGrad, 2, 256, false},
        {ValueCoderKind::kTernGrad, 2, 1000, false},
        {ValueCoderKind::kTernGrad, 2, 7, false},
        {ValueCoderKind::kHadamard, 4, 256, false},
        {ValueCoderKind::kHadamard, 4, 1000, false},
        {ValueCoderKind::kHadamard, 2, 7, false},
        {ValueCoderKind::kHadamard, 3, 64, false},
        {ValueCoderKind::kHadamard, 1, 256, false},
        {ValueCoderKind::kQsgd, 4, 512, false},
        {ValueCoderKind::kQsgd, 4, 7, false},
        {ValueCoderKind::kQsgd, 8, 256, false},
        {ValueCoderKind::kQsgd, 8, 1000, false},
        {ValueCoderKind::kQsgd, 3, 64, false},
        {ValueCoderKind::kUniform, 4, 256, false, true},
        {ValueCoderKind::kUniform, 4, 7, false, true},
        {ValueCoderKind::kUniform, 8, 1000, false, true},
        {ValueCoderKind::kUniform, 3, 64, false, true},
        {ValueCoderKind::kUniform, 2, 0, true},
        {ValueCoderKind::kUniform, 1, 0, true},
        {ValueCoderKind::kUniform, 1, 256, false},
        {ValueCoderKind::kUniform, 2, 1000, false},
        {ValueCoderKind::kUniform, 1, 7, false},
        {ValueCoderKind::kUniform, 2, 13, false, true},
        {ValueCoderKind::kUniform, 2, 1000, false, true},
        {ValueCoderKind::kQsgd, 2, 64, false},
        {ValueCoderKind::kQsgd, 2, 5, false},
        {ValueCoderKind::kQsgd, 3, 7, false},
        {ValueCoderKind::kQsgd, 3, 1000, false, false, 2},
        {ValueCoderKind::kQsgd, 5, 256, false},
        {ValueCoderKind::kQsgd, 6, 13, false, false, 20},
        {ValueCoderKind::kQsgd, 7, 1000, false},
        {ValueCoderKind::kUniform, 3, 13, false, true},
        {ValueCoderKind::kUniform, 6, 1000, false, true},
        {ValueCoderKind::kUniform, 5, 7, false, true},
        {ValueCoderKind::kHadamard, 3, 1024, false},
        {ValueCoderKind::kHadamard, 1, 16, false},
    };
    for (const Layout& layout : layouts) {
      values::Params p;
      p.kind = layout.kind;
      p.bits = layout.bits;
      p.block = layout.block;
      p.shared = layout.shared;
      p.signmag = layout.signmag;
      p.step = 1.0f / 64.0f;
      p.round_key = 42;
      p.sign_key = 0x5EEDu;
      // QSGD: s levels below the code's largest (8 bits: 100, not 127), or all of them (4 bits).
      p.levels = layout.qsgd_levels != 0 ? layout.qsgd_levels
                                         : uint16_t(layout.bits == 8 ? 100 : (1u << (layout.bits - 1)) - 1);
      for (uint32_t total : {1u, 255u, 256u, 257u, 3001u}) {
        CAPTURE(int(layout.kind));
        CAPTURE(int(layout.bits));
        CAPTURE(layout.block);
        CAPTURE(layout.signmag);
        CAPTURE(total);
        std::vector<float> x = test_vector(total, total * 7 + layout.bits);
        for (float& f : x) f = std::fmod(f, 1.5f);
        std::vector<uint8_t> region(size_t(values::region_bytes(p, total)));
        std::vector<float> scratch(values::kMaxHadamardBlock);
        size_t offset = 0;
        const uint32_t group = values::group_size(p);
        for (uint32_t first = 0; first < total; first += group) {
          const uint32_t count = total - first < group ? total - first : group;
          REQUIRE(values::encode_group(p, x.data() + first, count, first, region.data() + offset,
                                       scratch.data()) == edgefl::Status::kOk);
          offset += values::is_blocked(p) ? values::group_bytes(p, count) : (size_t(count) * p.bits + 7) / 8;
        }
        REQUIRE(offset == region.size());
        REQUIRE(values::validate_region(p, region.data(), total) == edgefl::Status::kOk);
        std::vector<float> one_by_one(total, -1.0f);
        uint64_t expected_position = 0;
        values::decode_region(p, region.data(), total, [&](uint64_t position, float v) {
          CHECK(position == expected_position++);
          one_by_one[size_t(position)] = v;
        });
        CHECK(expected_position == total);
        if (!values::has_dense_runs(p)) continue;  // built for size: uniform codes have no runs
        std::vector<float> runs(total, -1.0f);
        uint64_t next = 0;
        values::decode_dense_runs(p, region.data(), total,
                                  [&](uint64_t first, const float* v, uint32_t count) {
                                    CHECK(first == next);
                                    CHECK(count >= 1);
                                    CHECK(count <= values::kFloatChunk);
                                    memcpy(runs.data() + first, v, size_t(count) * sizeof(float));
                                    next = first + count;
                                  });
        CHECK(next == total);
        CHECK(memcmp(runs.data(), one_by_one.data(), size_t(total) * sizeof(float)) == 0);
      }
    }
  }
}

#if !defined(__OPTIMIZE_SIZE__)  // built for size, codes go through the bit reader only
TEST_SUITE("values") {
  // Every run decoder of 1- to 8-bit codes (uniform, QSGD, hq, the entropy recoder) reads its
  // codes through unpack_codes: the codes a bit reader reads, in order, and no byte past them.
  TEST_CASE(
      "unpack_codes reads what a bit reader reads, and pack_codes_of_width writes what a bit writer writes, "
      "for codes of 1 to 8 bits") {
    namespace values = edgefl::values;
    for (unsigned bits = 1; bits <= 8; ++bits) {
      for (uint32_t m : {0u, 1u, 5u, 7u, 8u, 9u, 15u, 16u, 17u, 63u, 64u, 250u, 1024u}) {
        CAPTURE(bits);
        CAPTURE(m);
        // Exactly the m codes' bytes on the heap, so that a read past them is an ASan error.
        const size_t bytes = (size_t(m) * bits + 7) / 8;
        std::unique_ptr<uint8_t[]> packed(new uint8_t[bytes > 0 ? bytes : 1]);
        uint64_t state = 0x9E3779B97F4A7C15ull * (bits * 1000 + m + 1);
        for (size_t i = 0; i < bytes; ++i) {
          state = state * 6364136223846793005ull + 1442695040888963407ull;
          packed[i] = uint8_t(state >> 56);
        }
        std::vector<unsigned> expected(m), got(m, 999u);
        edgefl::BitReader r(packed.get(), bytes);
        for (uint32_t j = 0; j < m; ++j) expected[j] = unsigned(r.get(bits));
        uint32_t visits = 0;
        values::with_code_width(bits, [&](auto width) {
          values::unpack_codes<decltype(width)::kBits>(packed.get(), m, [&](uint32_t j, unsigned code) {
            REQUIRE(j < m);
            got[j] = code;
            ++visits;
          });
        });
        CHECK(visits == m);
        CHECK(got == expected);
        // Packing the codes back gives the bytes (padded with zero bits, as a BitWriter pads).
        std::vector<uint8_t> codes(m), by_writer(bytes + 1, 0xEE), packed_again(bytes + 1, 0xEE);
        for (uint32_t j = 0; j < m; ++j) codes[j] = uint8_t(expected[j]);
        edgefl::BitWriter w(by_writer.data(), bytes);
        for (uint32_t j = 0; j < m; ++j) w.put(codes[j], bits);
        w.finish();
        values::with_code_width(bits, [&](auto width) {
          values::pack_codes_of_width<decltype(width)::kBits>(codes.data(), m, packed_again.data());
        });
        CHECK(packed_again == by_writer);  // the same bytes, and nothing written past them
      }
    }
  }
}
#endif

TEST_SUITE("index coding") {
  // A 64-bit LCG's top 31 bits: the same streams on every platform.
  struct Lcg {
    uint64_t state;
    uint64_t operator()() {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      return state >> 33;
    }
  };

  TEST_CASE("the word-at-a-time Elias-Fano reader gives the bit-by-bit reader's indices and failures") {
    namespace ic = edgefl::index_coding;
    Lcg next_random{12345};
    size_t well_formed = 0, failing = 0;
    for (int trial = 0; trial < 1000; ++trial) {
      const uint64_t n = 1 + next_random() % 2000;
      const uint64_t k = 1 + next_random() % n;
      std::vector<uint8_t> data(size_t(ic::ef_bytes(n, k)));
      if (trial % 2 == 0) {
        // A real encoding of a random k-subset, then (half the time) one flipped bit.
        std::vector<uint32_t> chosen;
        for (uint64_t i = 0; i < n && chosen.size() < k; ++i) {
          if (next_random() % (n - i) < k - chosen.size()) chosen.push_back(uint32_t(i));
        }
        ic::EliasFanoWriter w(n, k, data.data());
        for (uint32_t i : chosen) w.add(i);
        w.finish();
        REQUIRE_FALSE(w.overflowed());
        if (trial % 4 == 0 && !data.empty())
          data[next_random() % data.size()] ^= uint8_t(1u << (next_random() % 8));
      } else {
        for (uint8_t& b : data) b = uint8_t(next_random());  // arbitrary bytes
        if (trial % 3 == 0)
          for (uint8_t& b : data) b = b & 0x11;  // long zero runs
      }
      CAPTURE(n);
      CAPTURE(k);
      CAPTURE(trial);
      ic::EliasFanoWordReader fast(n, k, data.data());
      ic::EliasFanoBitReader slow(n, k, data.data());
      for (uint64_t j = 0; j < k; ++j) {
        const uint64_t a = fast.next(), b = slow.next();
        REQUIRE(fast.failed() == slow.failed());
        if (slow.failed()) break;
        REQUIRE(a == b);
      }
      (slow.failed() ? failing : well_formed) += 1;
    }
    MESSAGE("well-formed streams " << well_formed << ", failing " << failing);
    CHECK(well_formed > 200);
    CHECK(failing > 50);
  }

  // Random k-subsets of [0, n) (well formed) or arbitrary bytes, one bit flipped in some.
  struct IndexStreamCase {
    uint64_t n, k;
    std::vector<uint8_t> data;
  };

  // `indices` (ascending) in block Rice, as the encoder writes them: a measuring pass, then the
  // region at exactly its size.
  std::vector<uint8_t> block_rice_region(const std::vector<uint32_t>& indices) {
    namespace ic = edgefl::index_coding;
    ic::BlockRiceWriter cost;  // measuring
    for (uint32_t i : indices) cost.add(i);
    std::vector<uint8_t> region(size_t(cost.bytes()));
    ic::BlockRiceWriter w(region.data(), region.size(), cost.a_bytes());
    for (uint32_t i : indices) w.add(i);
    w.finish();
    REQUIRE_FALSE(w.overflowed());
    return region;
  }
  template <typename Writer, typename Next, typename Size>
  IndexStreamCase random_index_stream(int trial, Next&& next_random, Size&& stream_bytes) {
    IndexStreamCase c;
    c.n = 1 + next_random() % (trial % 3 == 0 ? 300000 : 3000);
    c.k = 1 + next_random() % (trial % 5 == 0 ? c.n : (c.n + 9) / 10);
    c.data.assign(size_t(stream_bytes(c.n, c.k)), 0);
    if (trial % 4 != 3) {
      Writer w(c.n, c.k, c.data.data(), c.data.size());
      uint64_t chosen = 0;
      for (uint64_t i = 0; i < c.n && chosen < c.k; ++i) {
        if (next_random() % (c.n - i) < c.k - chosen) {
          w.add(uint32_t(i));
          ++chosen;
        }
      }
      w.finish();
      if (trial % 4 == 1 && !c.data.empty())
        c.data[next_random() % c.data.size()] ^= uint8_t(1u << (next_random() % 8));
    } else {
      for (uint8_t& b : c.data) b = uint8_t(next_random() & (trial % 8 == 3 ? 0x11 : 0xFF));
    }
    return c;
  }

  // Reads c's k indices with next() from the reference reader and with next_many() in random
  // chunk sizes from the reader under test: the same indices while neither failed, and the chunk
  // that holds the first failure fails. Returns whether the stream failed.
  template <typename MakeReference, typename MakeTested, typename Next>
  bool compare_next_many(const IndexStreamCase& c, MakeReference&& make_reference, MakeTested&& make_tested,
                         Next&& next_random) {
    auto one = make_reference(c);
    auto many = make_tested(c);
    std::vector<uint32_t> chunk(300);
    for (uint64_t done = 0; done < c.k;) {
      const uint32_t count = uint32_t(std::min<uint64_t>(c.k - done, 1 + next_random() % 300));
      many.next_many(chunk.data(), count);
      bool failed = false;
      for (uint32_t j = 0; j < count; ++j) {
        const uint64_t index = one.next();
        failed |= one.failed() || index >> 32 != 0;
        if (!failed) REQUIRE(chunk[j] == index);
      }
      REQUIRE(many.failed() == failed);
      if (failed) return true;
      done += count;
    }
    return false;
  }

  TEST_CASE("next_many() gives next()'s indices and failures: Elias-Fano, and adaptive Rice") {
    namespace ic = edgefl::index_coding;
    Lcg next_random{777};
    struct EliasFanoWriter : ic::EliasFanoWriter {
      EliasFanoWriter(uint64_t n, uint64_t k, uint8_t* out, size_t) : ic::EliasFanoWriter(n, k, out) {}
    };
    size_t failing = 0, trials = 600;
    for (size_t trial = 0; trial < trials; ++trial) {
      CAPTURE(trial);
      const IndexStreamCase ef = random_index_stream<EliasFanoWriter>(int(trial), next_random, ic::ef_bytes);
      CAPTURE(ef.n);
      CAPTURE(ef.k);
      auto bit_reader = [](const IndexStreamCase& c) {
        return ic::EliasFanoBitReader(c.n, c.k, c.data.data());
      };
      auto word_reader = [](const IndexStreamCase& c) {
        return ic::EliasFanoWordReader(c.n, c.k, c.data.data());
      };
      failing += compare_next_many(ef, bit_reader, word_reader, next_random);
      compare_next_many(ef, bit_reader, bit_reader, next_random);
      const IndexStreamCase rice =
          random_index_stream<ic::RiceWriter>(int(trial), next_random, ic::rice_bound_bytes);
      auto rice_reader = [](const IndexStreamCase& c) {
        return ic::RiceReader(c.n, c.k, c.data.data(), c.data.size());
      };
      failing += compare_next_many(rice, rice_reader, rice_reader, next_random);
    }
    MESSAGE("failing streams " << failing << " of " << 2 * trials);
    CHECK(failing > trials / 4);
    CHECK(failing < 2 * trials - trials / 2);
  }

  TEST_CASE("the word-at-a-time block Rice reader gives the bit-by-bit reader's indices and failures") {
    namespace ic = edgefl::index_coding;
    Lcg next_random{4242};
    size_t well_formed = 0, failing = 0;
    const size_t trials = 800;
    for (size_t trial = 0; trial < trials; ++trial) {
      CAPTURE(trial);
      IndexStreamCase c;
      std::vector<uint32_t> chosen;
      if (trial % 7 == 6) {
        // Up to EDGEFL_MAX_DIMENSION, a few indices: parameters up to 30.
        c.n = 1 + (next_random() << 1 | (next_random() & 1)) % EDGEFL_MAX_DIMENSION;
        c.k = 1 + next_random() % 200;
        for (uint64_t j = 0; j < c.k; ++j)
          chosen.push_back(uint32_t((next_random() << 1 | (next_random() & 1)) % c.n));
        std::sort(chosen.begin(), chosen.end());
        chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
      } else {
        c.n = 1 + next_random() % (trial % 3 == 0 ? 300000 : 3000);
        c.k = 1 + next_random() % (trial % 5 == 0 ? c.n : (c.n + 9) / 10);
        for (uint64_t i = 0; i < c.n && chosen.size() < c.k; ++i) {
          // Clustered half the time: runs of neighbours, then jumps.
          const bool take = trial % 2 == 0 ? next_random() % (c.n - i) < c.k - chosen.size()
                                           : (i / 37) % 5 == 0 || next_random() % (c.n - i) < 1;
          if (take) chosen.push_back(uint32_t(i));
        }
      }
      c.k = chosen.size();
      if (c.k == 0) continue;
      if (trial % 4 != 3) {
        c.data = block_rice_region(chosen);
        REQUIRE(c.data.size() <= ic::block_rice_bound_bytes(c.n, c.k));
        if (trial % 4 == 1) c.data[next_random() % c.data.size()] ^= uint8_t(1u << (next_random() % 8));
      } else {
        c.data.assign(size_t(1 + next_random() % ic::block_rice_bound_bytes(c.n, c.k)), 0);
        for (uint8_t& b : c.data) b = uint8_t(next_random() & (trial % 8 == 3 ? 0x11 : 0xFF));
        c.data[0] = uint8_t(next_random() % c.data.size());  // a plausible part A length
      }
      CAPTURE(c.n);
      CAPTURE(c.k);
      auto bit_reader = [](const IndexStreamCase& s) {
        return ic::BlockRiceBitReader(s.n, s.k, s.data.data(), s.data.size());
      };
      auto word_reader = [](const IndexStreamCase& s) {
        return ic::BlockRiceWordReader(s.n, s.k, s.data.data(), s.data.size());
      };
      const bool failed = compare_next_many(c, bit_reader, word_reader, next_random);
      {  // next() of both, index by index: the same index, and a failure at the same call
        ic::BlockRiceBitReader one_bit = bit_reader(c);
        ic::BlockRiceWordReader one_word = word_reader(c);
        for (uint64_t j = 0; j < c.k; ++j) {
          const uint64_t x = one_bit.next(), y = one_word.next();
          REQUIRE(one_bit.failed() == one_word.failed());
          if (one_bit.failed()) break;
          REQUIRE(x == y);
        }
      }
      compare_next_many(c, word_reader, word_reader, next_random);  // next() against next_many()
      failing += failed;
      // Read whole, both agree on what is left over.
      ic::BlockRiceBitReader slow = bit_reader(c);
      ic::BlockRiceWordReader fast = word_reader(c);
      std::vector<uint32_t> got(c.k);
      fast.next_many(got.data(), uint32_t(c.k));
      for (uint64_t j = 0; j < c.k; ++j) slow.next();
      REQUIRE(slow.failed() == fast.failed());
      CHECK(slow.finished_exactly() == fast.finished_exactly());
      if (trial % 4 == 0 || trial % 4 == 2) {  // unmodified: every index back, nothing left over
        REQUIRE_FALSE(fast.failed());
        CHECK(fast.finished_exactly());
        CHECK(got == chosen);
        ++well_formed;
      }
    }
    MESSAGE("well-formed streams " << well_formed << ", failing " << failing << " of " << trials);
    CHECK(well_formed > trials / 3);
    CHECK(failing > trials / 8);
  }

  // Kernels::block_rice_blocks of a table, counting the indices it decodes.
  decltype(edgefl::Kernels::block_rice_blocks) g_block_kernel = nullptr;
  uint64_t g_block_kernel_indices = 0;
  uint32_t counting_block_kernel(edgefl::BlockRiceState * s, uint32_t * out, uint32_t count) {
    const uint32_t done = g_block_kernel(s, out, count);
    g_block_kernel_indices += done;
    return done;
  }

  TEST_CASE("each table's block Rice kernel gives the word reader's own loop: indices, failures, state") {
    namespace ic = edgefl::index_coding;
    std::vector<const edgefl::Kernels*> tables = {edgefl::kernels_avx2(), edgefl::kernels_neon()};
    tables.erase(std::remove(tables.begin(), tables.end(), nullptr), tables.end());
    if (std::find(tables.begin(), tables.end(), &edgefl::kernels()) == tables.end())
      tables.push_back(&edgefl::kernels());  // the one decoding uses (the reference: no kernel)
    for (const edgefl::Kernels* table : tables) {
      const std::string name = table->name;
      CAPTURE(name);
      if (table->block_rice_blocks == nullptr) continue;  // that table has none: the loop alone
      g_block_kernel = table->block_rice_blocks;
      g_block_kernel_indices = 0;
      Lcg next_random{515};
      size_t well_formed = 0, intact = 0, failing = 0;
      const size_t trials = 700;
      for (size_t trial = 0; trial < trials; ++trial) {
        CAPTURE(trial);
        // Gaps of about 2^r for r = 0 .. 27 (the kernel takes r <= 24), some far longer (past
        // 2^26 when n allows: the kernel leaves those blocks), up to n = 2^30.
        const unsigned r = unsigned(trial % 28);
        IndexStreamCase c;
        std::vector<uint32_t> chosen;
        uint64_t at = next_random() % (uint64_t(1) << r);
        const uint64_t n_limit = EDGEFL_MAX_DIMENSION;
        const size_t wanted = 1 + size_t(next_random() % 700);
        while (chosen.size() < wanted && at < n_limit) {
          chosen.push_back(uint32_t(at));
          const uint64_t draw = next_random() << 1 | (next_random() & 1);
          // From r = 20 on, gaps in [2^r, 2^(r+1)): whole blocks with parameters up to 25 fit in n.
          uint64_t gap = r < 20 ? draw % (uint64_t(2) << r) : (uint64_t(1) << r) + draw % (uint64_t(1) << r);
          if (next_random() % 97 == 0) gap += uint64_t(1) << (26 + next_random() % 3);
          at += gap + 1;
        }
        c.n = std::min<uint64_t>(n_limit, uint64_t(chosen.back()) + 1 + next_random() % 1000);
        c.k = chosen.size();
        c.data = block_rice_region(chosen);
        const unsigned damage = unsigned(trial / 28 % 4);  // 0, 1: intact; 2: a bit flipped; 3: bytes
        intact += damage < 2;
        if (damage == 2) {
          c.data[next_random() % c.data.size()] ^= uint8_t(1u << (next_random() % 8));
        } else if (damage == 3) {
          for (size_t j = 1 + next_random() % 4; j < c.data.size(); ++j) c.data[j] = uint8_t(next_random());
        }
        CAPTURE(c.n);
        CAPTURE(c.k);
        ic::BlockRiceWordReader with_kernel(c.n, c.k, c.data.data(), c.data.size());
        ic::BlockRiceWordReader without(c.n, c.k, c.data.data(), c.data.size());
        std::vector<uint32_t> got(c.k), expected(c.k);
        bool failed = false;
        for (uint64_t done = 0; done < c.k;) {
          const uint32_t count = uint32_t(std::min<uint64_t>(c.k - done, 1 + next_random() % 300));
          with_kernel.next_many(got.data() + done, count, counting_block_kernel);
          without.next_many(expected.data() + done, count, nullptr);
          REQUIRE(with_kernel.failed() == without.failed());
          failed = without.failed();
          if (failed) break;  // what a failing chunk holds is unspecified
          REQUIRE(std::equal(got.begin() + long(done), got.begin() + long(done + count),
                             expected.begin() + long(done)));
          done += count;
        }
        // The same state after: what is left over, and the call past the end.
        CHECK(with_kernel.finished_exactly() == without.finished_exactly());
        CHECK(with_kernel.next() == without.next());
        CHECK(with_kernel.failed() == without.failed());
        if (damage < 2) {
          REQUIRE_FALSE(failed);
          CHECK(got == chosen);
          ++well_formed;
        }
        failing += failed;
      }
      // Parameters the encoder would not pick, forced on every block of the reference encoder
      // (tests/support/codec_util.h): 24 .. 31 (the kernel takes up to 24; past 25 a remainder
      // would not fit one 32-bit load), random remainders and small quotients, n from 2^24
      // (quotients past n >> r: the kernel leaves those blocks) to 2^30. The region exactly
      // sized in its own allocation: a read past it is caught (ASan).
      const uint64_t kernel_before = g_block_kernel_indices;
      size_t hand_set_read = 0;
      for (unsigned r = 24; r <= 31; ++r) {
        for (int rep = 0; rep < 20; ++rep) {
          CAPTURE(r);
          CAPTURE(rep);
          const uint64_t n = uint64_t(1) << (24 + next_random() % 7);
          std::vector<uint32_t> idx;
          uint64_t next = 0;  // the previous index + 1
          for (size_t j = 0; j < 48; ++j) {
            const uint64_t low =
                ((next_random() << 1 | (next_random() & 1)) >> (rep % 4)) & ((uint64_t(1) << r) - 1);
            const uint64_t quotient = next_random() % 8 == 0 ? next_random() % 9 : 0;
            const uint64_t index = next + ((quotient << r) | low);
            if (index >> 32 != 0) break;
            idx.push_back(uint32_t(index));
            next = index + 1;
          }
          const uint64_t k = idx.size();
          const std::vector<uint8_t> region =
              edgefl_test::block_rice_reference(idx, std::vector<int>(3, int(r)));
          ic::BlockRiceWordReader with_kernel(n, k, region.data(), region.size());
          ic::BlockRiceWordReader without(n, k, region.data(), region.size());
          std::vector<uint32_t> got(k), expected(k);
          with_kernel.next_many(got.data(), uint32_t(k), counting_block_kernel);
          without.next_many(expected.data(), uint32_t(k), nullptr);
          REQUIRE(with_kernel.failed() == without.failed());
          if (!without.failed()) {
            CHECK(got == expected);  // (not idx: a quotient past n >> r reads as a gap of n)
            ++hand_set_read;
          }
          CHECK(with_kernel.finished_exactly() == without.finished_exactly());
        }
      }
      CHECK(hand_set_read == 160);                          // every hand-set stream is read whole
      CHECK(g_block_kernel_indices - kernel_before > 100);  // parameter 24 blocks, by the kernel
      MESSAGE(name << ": well-formed " << well_formed << ", failing " << failing << " of " << trials
                   << "; indices from the kernel " << g_block_kernel_indices);
      CHECK(well_formed == intact);
      CHECK(failing > trials / 8);
      CHECK(g_block_kernel_indices > 20000);  // the kernel did the bulk, not only the fallbacks
    }
  }

  TEST_CASE("block Rice refuses a parameter past 31, and picks the least-bits parameter") {
    namespace ic = edgefl::index_coding;
    // Two blocks: r = 31 (bits 1,1,11111), 16 remainders of 31 zero bits; then "one more" (1,0,0).
    // Both parts long enough for next_many()'s whole loads, so that its own parameter decoding
    // refuses the second; next() refuses it too.
    std::vector<uint8_t> region = {0};
    std::vector<uint8_t> a(72, 0);
    a[0] = 0x7F;                                   // bits 0..6: 1,1,1,1,1,1,1
    const size_t second = 7 + 16 * 31;             // the second block's code
    a[second / 8] |= uint8_t(1u << (second % 8));  // 1, then 0, 0
    region[0] = uint8_t(a.size());
    region.insert(region.end(), a.begin(), a.end());
    region.insert(region.end(), 8, 0xFF);  // quotients 0: 17 one bits and more
    ic::BlockRiceWordReader r(uint64_t(1) << 30, 17, region.data(), region.size());
    std::vector<uint32_t> out(17);
    r.next_many(out.data(), 16);
    CHECK_FALSE(r.failed());
    r.next_many(out.data() + 16, 1);
    CHECK(r.failed());
    ic::BlockRiceWordReader one(uint64_t(1) << 30, 17, region.data(), region.size());
    ic::BlockRiceBitReader by_bits(uint64_t(1) << 30, 17, region.data(), region.size());
    for (int j = 0; j < 16; ++j) {
      one.next();
      by_bits.next();
    }
    CHECK_FALSE(one.failed());
    CHECK_FALSE(by_bits.failed());
    one.next();
    by_bits.next();
    CHECK(one.failed());
    CHECK(by_bits.failed());

    // The size bound is largest at k = n (so encoded_bound(), sized at the most indices a spec can
    // keep, covers every smaller set), and holds on the sets that cost block Rice most: runs of
    // neighbours with one long jump per block, equal gaps, everything at the end.
    for (uint64_t n = 1; n <= 3000; n += n < 100 ? 1 : 37)
      for (uint64_t k = 0; k <= n; ++k)
        REQUIRE(ic::block_rice_bound_bytes(n, k) <= ic::block_rice_bound_bytes(n, n));
    for (uint64_t n : {uint64_t(1) << 10, uint64_t(1) << 20, uint64_t(EDGEFL_MAX_DIMENSION)}) {
      for (uint64_t k : {1, 2, 15, 16, 17, 33, 1000, 100000}) {
        if (k > n) continue;
        for (int pattern = 0; pattern < 4; ++pattern) {
          std::vector<uint32_t> idx;
          const uint64_t stride = n / k;
          for (uint64_t j = 0; j < k; ++j) {
            uint64_t i = j * stride;
            if (pattern == 0) i += j % 16 == 15 ? stride - 1 : j % 16;  // 15 neighbours, then a jump
            if (pattern == 2) i = n - k + j;                            // all at the end
            if (pattern == 3) i = j == 0 ? 0 : n - k + j;               // one at 0, the rest at the end
            idx.push_back(uint32_t(i));
          }
          std::sort(idx.begin(), idx.end());
          idx.erase(std::unique(idx.begin(), idx.end()), idx.end());
          CAPTURE(n);
          CAPTURE(k);
          CAPTURE(pattern);
          const std::vector<uint8_t> data = block_rice_region(idx);
          REQUIRE(data.size() <= ic::block_rice_bound_bytes(n, idx.size()));
          ic::BlockRiceWordReader back(n, idx.size(), data.data(), data.size());
          std::vector<uint32_t> got(idx.size());
          back.next_many(got.data(), uint32_t(got.size()));
          REQUIRE_FALSE(back.failed());
          CHECK(back.finished_exactly());
          CHECK(got == idx);
        }
      }
    }

    // The walk from the estimate finds the brute-force least-bits parameter (the smallest one).
    Lcg next_random{99};
    for (int trial = 0; trial < 5000; ++trial) {
      const unsigned count = 1 + unsigned(next_random() % ic::kBlockRiceGaps);
      uint32_t gaps[ic::kBlockRiceGaps] = {};  // zero past count, as block_rice_parameter() asks
      const unsigned scale = unsigned(next_random() % 32);
      for (unsigned j = 0; j < count; ++j) {
        gaps[j] = uint32_t((next_random() << 2) >> (31 - scale % 31)) >> (next_random() % 4 == 0 ? 0 : 3);
        if (next_random() % 7 == 0) gaps[j] = 0;
      }
      unsigned best = 0;
      uint64_t best_bits = ~uint64_t(0);
      for (unsigned rr = 0; rr <= ic::kBlockRiceMaxParameter; ++rr) {
        uint64_t bits = uint64_t(count) * rr;
        for (unsigned j = 0; j < count; ++j) bits += gaps[j] >> rr;
        if (bits < best_bits) {
          best_bits = bits;
          best = rr;
        }
      }
      CAPTURE(trial);
      REQUIRE(ic::block_rice_parameter(gaps, count) == best);
    }
  }

  TEST_CASE("the Rice parameter's closed form is the search it replaces") {
    // The least r <= 31 with count << r >= sum, minus one (0 for r = 0): the LOCO-I rule.
    auto searched = [](uint64_t sum, uint64_t count) {
      unsigned r = 0;
      while ((count << r) < sum && r < 31) ++r;
      return r > 0 ? r - 1 : 0;
    };
    // RiceState starts at (4 * mean, 4) and moves by update(); drive it over gaps of every scale.
    uint64_t state = 99;
    for (int trial = 0; trial < 2000; ++trial) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const uint64_t n = 1 + (state >> 20) % (uint64_t(1) << 31), k = 1 + (state >> 7) % 5000;
      edgefl::index_coding::RiceState rice(n, k);
      uint64_t sum = (n / k) * 4, count = 4;
      for (int step = 0; step < 200; ++step) {
        REQUIRE(rice.parameter() == searched(sum, count));
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        const uint64_t gap = (state >> 11) >> (state % 53);
        rice.update(gap);
        sum += gap + 1;
        if (++count >= 32) {
          sum >>= 1;
          count >>= 1;
        }
      }
    }
  }
}

TEST_SUITE("random-k indices") {
  using edgefl::select::PermutedIndexStream;

  TEST_CASE("the permuted stream gives distinct indices below n; k = n gives a permutation") {
    for (size_t n : {size_t(1), size_t(2), size_t(10), size_t(1000), size_t(65535), size_t(65536),
                     size_t(65537), size_t(300001)}) {
      CAPTURE(n);
      PermutedIndexStream stream(n, 77 + n);
      std::vector<uint8_t> seen(n, 0);
      for (size_t j = 0; j < n; ++j) {
        const uint32_t i = stream.next();
        REQUIRE(i < n);
        REQUIRE(seen[i] == 0);
        seen[i] = 1;
      }
    }
  }

  TEST_CASE("each coordinate is kept with probability k/n, pairs with k(k-1)/(n(n-1)), first draws uniform") {
    // Fixed seeds, so the statistics are the same on every run; the bounds are 5 standard
    // deviations of the chi-square (or of the normal approximation) around its mean.
    const size_t n = 1000, k = 50, trials = 20000;
    std::vector<double> kept(n, 0.0);
    double adjacent_pairs = 0.0;
    std::vector<double> first_decile(10, 0.0);
    for (size_t t = 0; t < trials; ++t) {
      PermutedIndexStream stream(n, 0x1234567ull * t + 1);
      std::vector<uint8_t> in(n, 0);
      for (size_t j = 0; j < k; ++j) {
        const uint32_t i = stream.next();
        if (j == 0) first_decile[i * 10 / n] += 1;
        in[i] = 1;
        kept[i] += 1;
      }
      for (size_t i = 0; i + 1 < n; ++i) adjacent_pairs += double(in[i] & in[i + 1]);
    }
    const double expected = double(trials) * double(k) / double(n);
    double chi2 = 0.0;
    for (double c : kept) chi2 += (c - expected) * (c - expected) / expected;
    const double dof = double(n - 1);
    MESSAGE("inclusion chi-square " << chi2 << " (" << dof << " degrees of freedom)");
    CHECK(chi2 < dof + 5.0 * std::sqrt(2.0 * dof));
    CHECK(chi2 > dof - 5.0 * std::sqrt(2.0 * dof));
    const double pair_p = double(k) * double(k - 1) / (double(n) * double(n - 1));
    const double pairs_expected = double(trials) * double(n - 1) * pair_p;
    MESSAGE("adjacent pairs " << adjacent_pairs << ", expected " << pairs_expected);
    CHECK(std::fabs(adjacent_pairs - pairs_expected) < 5.0 * std::sqrt(pairs_expected));
    double chi2_first = 0.0;
    for (double c : first_decile) chi2_first += (c - trials / 10.0) * (c - trials / 10.0) / (trials / 10.0);
    MESSAGE("first index by decile: chi-square " << chi2_first << " (9 degrees of freedom)");
    CHECK(chi2_first < 9.0 + 5.0 * std::sqrt(18.0));
  }

  TEST_CASE("PermutedIndexStream::next_many (AVX2 where the CPU has it) gives next()'s indices") {
    for (const size_t n : {size_t{1}, size_t{7}, size_t{100}, size_t{65536}, size_t{65537}, size_t{1000003},
                           size_t{1} << 20}) {
      for (const uint64_t seed : {uint64_t{1}, uint64_t{99}}) {
        CAPTURE(n);
        CAPTURE(seed);
        const size_t k = std::min<size_t>(n, 3000);
        edgefl::select::PermutedIndexStream one(n, seed), many(n, seed);
        std::vector<uint32_t> expected(k), got(k + 1, 0xFFFFFFFFu);
        for (uint32_t& e : expected) e = one.next();
        // Calls of every length 0..17, then the rest.
        size_t at = 0;
        for (size_t len = 0; len < 18 && at < k; ++len) {
          const size_t take = std::min(len, k - at);
          many.next_many(got.data() + at, take);
          at += take;
        }
        many.next_many(got.data() + at, k - at);
        CHECK(std::equal(expected.begin(), expected.end(), got.begin()));
        CHECK(got[k] == 0xFFFFFFFFu);                 // nothing written past the count
        if (k < n) CHECK(many.next() == one.next());  // both streams continue alike
      }
    }
  }

  TEST_CASE("an encoding from before kFlagRandkPermuted (ascending Algorithm S indices) still decodes") {
    namespace format = edgefl::format;
    const size_t n = 5000, k = 60;
    const uint64_t seed = 99;
    std::vector<float> x = test_vector(n, 5);
    edgefl::EncodedInfo h;
    h.sparsifier = edgefl::SparsifierKind::kRandomK;
    h.values = edgefl::ValueCoderKind::kFp32;
    h.index_coding = edgefl::IndexCoding::kNone;
    h.n = uint32_t(n);
    h.nnz = uint32_t(k);
    h.bits = 32;
    h.seed = seed;
    h.contributions = 1;
    h.randk_unscaled = true;
    h.randk_permuted = false;
    h.header_bytes = format::kHeaderBytes;
    h.value_bytes = 4 * k;
    h.total_bytes = format::kHeaderBytes + 4 * k;
    std::vector<uint8_t> bytes(h.total_bytes);
    std::vector<float> expected(n, 0.0f);
    edgefl::select::RandomIndexStream old_stream(n, k, seed);
    for (size_t j = 0; j < k; ++j) {
      const uint32_t i = old_stream.next();
      memcpy(bytes.data() + format::kHeaderBytes + 4 * j, &x[i], 4);
      expected[i] = x[i];
    }
    format::seal(h, bytes.data());
    std::vector<float> decoded(n, -1.0f);
    REQUIRE(edgefl::decode({bytes.data(), bytes.size()}, {decoded.data(), n}) == edgefl::Status::kOk);
    CHECK(memcmp(decoded.data(), expected.data(), n * sizeof(float)) == 0);
    // The same bytes with the flag set are read as permuted indices: other coordinates.
    h.randk_permuted = true;
    format::seal(h, bytes.data());
    REQUIRE(edgefl::decode({bytes.data(), bytes.size()}, {decoded.data(), n}) == edgefl::Status::kOk);
    CHECK(memcmp(decoded.data(), expected.data(), n * sizeof(float)) != 0);
  }
}

TEST_SUITE("rANS lanes") {
  std::vector<uint8_t> encode_with(const char* text, const std::vector<float>& x, uint64_t seed) {
    edgefl::CodecSpec spec;
    REQUIRE(edgefl::parse_codec_spec(text, &spec) == edgefl::Status::kOk);
    std::vector<uint8_t> ws(edgefl::workspace_size(spec, x.size()));
    std::vector<uint8_t> out(edgefl::encoded_bound(spec, x.size()));
    size_t written = 0;
    REQUIRE(edgefl::encode(spec, {x.data(), x.size()}, seed, {ws.data(), ws.size()}, {out.data(), out.size()},
                           &written) == edgefl::Status::kOk);
    out.resize(written);
    return out;
  }

  TEST_CASE("long streams use 32 lanes; an encoding from before kFlagRansWide (4 lanes) still decodes") {
    namespace format = edgefl::format;
    namespace values = edgefl::values;
    const uint64_t seed = 7;
    for (const size_t n : {size_t{32767}, size_t{32768}, size_t{70001}}) {
      CAPTURE(n);
      // Peaked values (cubes of sums of four uniforms), whose q4 codes cluster: rANS pays.
      std::vector<float> x(n);
      uint64_t state = 3;
      for (float& v : x) {
        double sum = 0.0;
        for (int j = 0; j < 4; ++j) {
          state = state * 6364136223846793005ull + 1442695040888963407ull;
          sum += double(state >> 11) / 9007199254740992.0 - 0.5;
        }
        v = float(sum * sum * sum);
      }
      const std::vector<uint8_t> raw = encode_with("q4", x, seed);
      const std::vector<uint8_t> coded = encode_with("q4:ans", x, seed);
      edgefl::EncodedInfo hr, hc;
      REQUIRE(edgefl::inspect({raw.data(), raw.size()}, &hr) == edgefl::Status::kOk);
      REQUIRE(edgefl::inspect({coded.data(), coded.size()}, &hc) == edgefl::Status::kOk);
      REQUIRE(hc.entropy_coded);
      CHECK(hc.rans_wide == (n >= edgefl::entropy::kRansWideMinSymbols));
      std::vector<float> want(n), got(n);
      REQUIRE(edgefl::decode({raw.data(), raw.size()}, {want.data(), n}) == edgefl::Status::kOk);
      REQUIRE(edgefl::decode({coded.data(), coded.size()}, {got.data(), n}) == edgefl::Status::kOk);
      CHECK(memcmp(want.data(), got.data(), n * sizeof(float)) == 0);
      // The raw codes re-coded by hand, in the lanes the codec chose and in the other count: the
      // first is the codec's own region byte for byte; the second, flagged as it says, decodes
      // to the same values.
      for (const unsigned lanes : {edgefl::entropy::kRansLanes, edgefl::entropy::kRansWideLanes}) {
        CAPTURE(lanes);
        values::Params p;
        p.kind = edgefl::ValueCoderKind::kUniform;
        p.bits = 4;
        p.block = hr.block;
        p.rans_lanes = uint8_t(lanes);
        std::vector<uint8_t> region(raw.begin() + long(hr.header_bytes), raw.end());
        std::vector<uint8_t> codes(n), scratch(region.size());
        const size_t bytes =
            values::entropy_recode(p, region.data(), region.size(), n, codes.data(), scratch.data());
        REQUIRE(bytes < region.size());
        edgefl::EncodedInfo h = hr;
        h.entropy_coded = true;
        h.rans_wide = lanes == edgefl::entropy::kRansWideLanes;
        h.value_bytes = bytes;
        h.total_bytes = h.header_bytes + bytes;
        std::vector<uint8_t> built(h.total_bytes);
        memcpy(built.data() + h.header_bytes, region.data(), bytes);
        format::seal(h, built.data());
        if (h.rans_wide == hc.rans_wide) CHECK(built == coded);
        std::vector<float> again(n);
        REQUIRE(edgefl::decode({built.data(), built.size()}, {again.data(), n}) == edgefl::Status::kOk);
        CHECK(memcmp(want.data(), again.data(), n * sizeof(float)) == 0);
        // Read with the other lane count (the flag flipped, the checksum resealed): refused.
        h.rans_wide = !h.rans_wide;
        format::seal(h, built.data());
        CHECK(edgefl::decode({built.data(), built.size()}, {again.data(), n}) ==
              edgefl::Status::kCorruptPayload);
      }
    }
  }

  TEST_CASE("kFlagRansWide without an entropy-coded region is refused") {
    const std::vector<float> x = test_vector(5000, 4);
    std::vector<uint8_t> raw = encode_with("q4", x, 1);
    edgefl::EncodedInfo h;
    REQUIRE(edgefl::inspect({raw.data(), raw.size()}, &h) == edgefl::Status::kOk);
    h.rans_wide = true;
    edgefl::format::seal(h, raw.data());
    CHECK(edgefl::inspect({raw.data(), raw.size()}, &h) == edgefl::Status::kBadParameters);
  }
}

TEST_SUITE("bf16:ans regions") {
  // White-box: regions built by entropy_recode from raw bf16 bytes the encoder would never write.
  namespace values = edgefl::values;

  std::vector<uint8_t> recoded(const std::vector<uint16_t>& raw, size_t* bytes) {
    values::Params p;
    p.kind = edgefl::ValueCoderKind::kBf16;
    p.bits = 16;
    std::vector<uint8_t> region(raw.size() * 2);
    for (size_t i = 0; i < raw.size(); ++i) {
      region[2 * i] = uint8_t(raw[i]);
      region[2 * i + 1] = uint8_t(raw[i] >> 8);
    }
    std::vector<uint8_t> codes(raw.size()), stream(raw.size() * 2);
    *bytes = values::entropy_recode(p, region.data(), region.size(), raw.size(), codes.data(), stream.data());
    return region;
  }

  TEST_CASE("an exponent of 255 (Inf, NaN), a cut stream or a changed table is refused") {
    values::Params p;
    p.kind = edgefl::ValueCoderKind::kBf16;
    p.bits = 16;
    const size_t n = 3000;
    std::vector<uint16_t> raw(n);
    for (size_t i = 0; i < n; ++i) raw[i] = uint16_t(0x3A00u + (i * 7919u) % 0x0200u);  // a few binades
    size_t bytes = 0;
    std::vector<uint8_t> good = recoded(raw, &bytes);
    REQUIRE(bytes < 2 * n);
    CHECK(values::validate_entropy_region(p, good.data(), bytes, n) == edgefl::Status::kOk);
    std::vector<float> decoded(n);
    values::decode_entropy_region(p, good.data(), bytes, n, [&](uint64_t i, float v) { decoded[i] = v; });
    for (size_t i = 0; i < n; ++i) CHECK(decoded[i] == edgefl::bf16_to_float(raw[i]));
    for (uint16_t special : {uint16_t(0x7F80u), uint16_t(0xFF80u), uint16_t(0x7FC1u)}) {  // +Inf, -Inf, NaN
      std::vector<uint16_t> bad_raw(raw);
      bad_raw[n / 2] = special;
      size_t bad_bytes = 0;
      const std::vector<uint8_t> bad = recoded(bad_raw, &bad_bytes);
      REQUIRE(bad_bytes < 2 * n);
      CHECK(values::validate_entropy_region(p, bad.data(), bad_bytes, n) == edgefl::Status::kCorruptPayload);
    }
    CHECK(values::validate_entropy_region(p, good.data(), bytes - 1, n) != edgefl::Status::kOk);
    std::vector<uint8_t> changed(good);
    changed[n] ^= 0x21;  // the first table byte
    CHECK(values::validate_entropy_region(p, changed.data(), bytes, n) != edgefl::Status::kOk);
    changed = good;
    changed[bytes - 3] ^= 0x10;  // a renormalization word of the stream
    CHECK(values::validate_entropy_region(p, changed.data(), bytes, n) != edgefl::Status::kOk);
  }
}
