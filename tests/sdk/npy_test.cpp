// Tests of the .npy reader and writer of the edgefl tool (sdk/cli/npy.h).
#include "npy.h"

#include <doctest/doctest.h>
#include <math.h>
#include <string.h>

#include <string>
#include <vector>

namespace {

using edgefl::cli::half_to_float;
using edgefl::cli::NpyArray;
using edgefl::cli::NpyDtype;
using edgefl::cli::parse_npy;
using edgefl::cli::serialize_npy_f32;

// A .npy file with the given header text (used as is, padded with spaces and '\n' to 64 bytes
// unless `raw`) and data bytes.
std::vector<uint8_t> make_npy(const std::string& dict, const std::vector<uint8_t>& data, int major = 1,
                              bool raw = false) {
  const size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  if (!raw) {
    const size_t unpadded = prefix + header.size() + 1;
    header.append((unpadded + 63) / 64 * 64 - unpadded, ' ');
    header.push_back('\n');
  }
  std::vector<uint8_t> bytes = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  const size_t len = header.size();
  bytes.push_back(static_cast<uint8_t>(len));
  bytes.push_back(static_cast<uint8_t>(len >> 8));
  if (major != 1) {
    bytes.push_back(static_cast<uint8_t>(len >> 16));
    bytes.push_back(static_cast<uint8_t>(len >> 24));
  }
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t bits;
    memcpy(&bits, &v[i], 4);
    for (int b = 0; b < 4; ++b) out[4 * i + b] = static_cast<uint8_t>(bits >> (8 * b));
  }
  return out;
}

std::vector<uint8_t> f16_bytes(const std::vector<uint16_t>& v) {
  std::vector<uint8_t> out;
  for (uint16_t h : v) {
    out.push_back(static_cast<uint8_t>(h));
    out.push_back(static_cast<uint8_t>(h >> 8));
  }
  return out;
}

std::string dict_f4(const std::string& shape, const char* descr = "<f4", const char* order = "False") {
  return std::string("{'descr': '") + descr + "', 'fortran_order': " + order + ", 'shape': " + shape + ", }";
}

// Parses `bytes`, expecting failure; returns the message.
std::string parse_error(const std::vector<uint8_t>& bytes) {
  NpyArray array;
  std::string error;
  const bool ok = parse_npy(bytes.data(), bytes.size(), &array, &error);
  CHECK_FALSE(ok);
  CHECK_FALSE(error.empty());
  return error;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

uint32_t bits_of(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return b;
}

}  // namespace

TEST_SUITE("npy") {
  TEST_CASE("a float32 array survives a write and a read bit for bit") {
    std::vector<float> values = {0.0f, -0.0f, 1.5f, -3.25e-7f, 1e30f, 1.17549435e-38f, 1e-45f, 123456.789f};
    const std::vector<uint8_t> bytes = serialize_npy_f32(values.data(), values.size());
    NpyArray array;
    std::string error;
    REQUIRE(parse_npy(bytes.data(), bytes.size(), &array, &error));
    CHECK(array.dtype == NpyDtype::kFloat32);
    CHECK(array.major_version == 1);
    REQUIRE(array.shape.size() == 1);
    CHECK(array.shape[0] == values.size());
    REQUIRE(array.values.size() == values.size());
    for (size_t i = 0; i < values.size(); ++i) CHECK(bits_of(array.values[i]) == bits_of(values[i]));
  }

  TEST_CASE("the written header is version 1.0, 64-byte aligned and ends with a newline") {
    std::vector<float> values(1000, 2.0f);
    const std::vector<uint8_t> bytes = serialize_npy_f32(values.data(), values.size());
    REQUIRE(bytes.size() > 10);
    CHECK(bytes[6] == 1);
    CHECK(bytes[7] == 0);
    const size_t header_len = bytes[8] | (size_t{bytes[9]} << 8);
    CHECK((10 + header_len) % 64 == 0);
    CHECK(bytes[10 + header_len - 1] == '\n');
    CHECK(bytes.size() == 10 + header_len + 4 * values.size());
    const std::string header(bytes.begin() + 10, bytes.begin() + 10 + static_cast<long>(header_len));
    CHECK(contains(header, "'shape': (1000,)"));
    CHECK(contains(header, "'descr': '<f4'"));
  }

  TEST_CASE("an empty array round-trips") {
    const std::vector<uint8_t> bytes = serialize_npy_f32(nullptr, 0);
    NpyArray array;
    std::string error;
    REQUIRE(parse_npy(bytes.data(), bytes.size(), &array, &error));
    CHECK(array.values.empty());
    REQUIRE(array.shape.size() == 1);
    CHECK(array.shape[0] == 0);
  }

  TEST_CASE("arrays of any shape are flattened in C order") {
    const std::vector<float> values = {1, 2, 3, 4, 5, 6};
    NpyArray array;
    std::string error;
    const auto bytes = make_npy(dict_f4("(2, 3)"), f32_bytes(values));
    REQUIRE(parse_npy(bytes.data(), bytes.size(), &array, &error));
    CHECK(array.shape == std::vector<uint64_t>{2, 3});
    CHECK(array.values == values);

    const auto scalar = make_npy(dict_f4("()"), f32_bytes({7.0f}));
    REQUIRE(parse_npy(scalar.data(), scalar.size(), &array, &error));
    CHECK(array.shape.empty());
    REQUIRE(array.values.size() == 1);
    CHECK(array.values[0] == 7.0f);

    const auto zero_dim = make_npy(dict_f4("(4, 0, 3)"), {});
    REQUIRE(parse_npy(zero_dim.data(), zero_dim.size(), &array, &error));
    CHECK(array.values.empty());
  }

  TEST_CASE("format versions 2.0 and 3.0 and other header spellings are read") {
    NpyArray array;
    std::string error;
    for (int major : {2, 3}) {
      const auto bytes = make_npy(dict_f4("(2,)"), f32_bytes({1.0f, 2.0f}), major);
      REQUIRE_MESSAGE(parse_npy(bytes.data(), bytes.size(), &array, &error), error);
      CHECK(array.major_version == major);
      CHECK(array.values == std::vector<float>{1.0f, 2.0f});
    }
    // Key order, double quotes, no trailing comma, Python 2 longs, no padding.
    const auto other = make_npy("{\"shape\": (2L,), \"fortran_order\": False, \"descr\": \"<f4\"}",
                                f32_bytes({1.0f, 2.0f}), 1, true);
    REQUIRE_MESSAGE(parse_npy(other.data(), other.size(), &array, &error), error);
    CHECK(array.values.size() == 2);
  }

  TEST_CASE("float16 converts to float32 exactly, subnormals and infinities included") {
    struct Case {
      uint16_t half;
      float expected;
    };
    const Case cases[] = {
        {0x0000, 0.0f},
        {0x3C00, 1.0f},
        {0xC000, -2.0f},
        {0x7BFF, 65504.0f},
        {0x3555, 0.333251953125f},
        {0x0400, 6.103515625e-05f},         // 2^-14
        {0x0001, 5.9604644775390625e-08f},  // 2^-24
        {0x03FF, 6.097555160522461e-05f},   // 1023 * 2^-24
        {0x8001, -5.9604644775390625e-08f},
    };
    for (const Case& c : cases) {
      CAPTURE(c.half);
      CHECK(bits_of(half_to_float(c.half)) == bits_of(c.expected));
    }
    CHECK(bits_of(half_to_float(0x8000)) == 0x80000000u);  // -0
    CHECK(half_to_float(0x7C00) == INFINITY);
    CHECK(half_to_float(0xFC00) == -INFINITY);
    CHECK(isnan(half_to_float(0x7E00)));
    CHECK(isnan(half_to_float(0xFC01)));

    // Every finite half equals (-1)^s * m * 2^(e - 25) computed in double.
    for (uint32_t h = 0; h < 0x10000u; ++h) {
      const uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
      if (e == 0x1F) continue;
      const double mag = e == 0 ? ldexp(static_cast<double>(m), -24)
                                : ldexp(static_cast<double>(m | 0x400), static_cast<int>(e) - 25);
      const double expected = (h & 0x8000) ? -mag : mag;
      if (static_cast<double>(half_to_float(static_cast<uint16_t>(h))) != expected) {
        FAIL("half " << h << " converts wrongly");
      }
    }

    const auto bytes = make_npy(dict_f4("(4,)", "<f2"), f16_bytes({0x3C00, 0x0001, 0x7C00, 0xFC00}));
    NpyArray array;
    std::string error;
    REQUIRE_MESSAGE(parse_npy(bytes.data(), bytes.size(), &array, &error), error);
    CHECK(array.dtype == NpyDtype::kFloat16);
    REQUIRE(array.values.size() == 4);
    CHECK(array.values[0] == 1.0f);
    CHECK(array.values[1] == 5.9604644775390625e-08f);
    CHECK(array.values[2] == INFINITY);
    CHECK(array.values[3] == -INFINITY);
  }

  TEST_CASE("a file shorter than the preamble or with a truncated header is rejected") {
    CHECK(contains(parse_error({}), "truncated"));
    CHECK(contains(parse_error({0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0}), "truncated"));
    auto bytes = make_npy(dict_f4("(2,)"), f32_bytes({1.0f, 2.0f}));
    bytes.resize(40);  // inside the header
    CHECK(contains(parse_error(bytes), "truncated header"));
    // Version 2 needs a 4-byte length.
    CHECK(contains(parse_error({0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0x10, 0, 0}), "truncated"));
  }

  TEST_CASE("every truncation of a valid file is rejected without a crash") {
    const std::vector<float> values = {1, 2, 3, 4, 5};
    const auto bytes = serialize_npy_f32(values.data(), values.size());
    for (size_t len = 0; len < bytes.size(); ++len) {
      NpyArray array;
      std::string error;
      CHECK_FALSE(parse_npy(bytes.data(), len, &array, &error));
    }
  }

  TEST_CASE("bad magic and unknown versions are rejected") {
    auto bytes = make_npy(dict_f4("(1,)"), f32_bytes({1.0f}));
    bytes[1] = 'X';
    CHECK(contains(parse_error(bytes), "magic"));
    bytes = make_npy(dict_f4("(1,)"), f32_bytes({1.0f}));
    bytes[6] = 4;
    CHECK(contains(parse_error(bytes), "version 4.0"));
    bytes[6] = 1;
    bytes[7] = 1;
    CHECK(contains(parse_error(bytes), "version 1.1"));
  }

  TEST_CASE("big-endian, float64 and other dtypes are rejected by name") {
    CHECK(contains(parse_error(make_npy(dict_f4("(1,)", ">f4"), f32_bytes({1.0f}))), "big-endian"));
    CHECK(contains(parse_error(make_npy(dict_f4("(1,)", ">f2"), {0, 0})), "big-endian"));
    CHECK(contains(parse_error(make_npy(dict_f4("(1,)", "<f8"), std::vector<uint8_t>(8))), "float64"));
    CHECK(contains(parse_error(make_npy(dict_f4("(1,)", "<i4"), std::vector<uint8_t>(4))),
                   "unsupported dtype"));
    CHECK(contains(parse_error(make_npy(dict_f4("(1,)", "|u1"), std::vector<uint8_t>(1))),
                   "unsupported dtype"));
    CHECK(contains(parse_error(make_npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }",
                                        std::vector<uint8_t>(4))),
                   "structured"));
  }

  TEST_CASE("fortran_order True is rejected") {
    const auto bytes = make_npy(dict_f4("(2, 2)", "<f4", "True"), f32_bytes({1, 2, 3, 4}));
    CHECK(contains(parse_error(bytes), "fortran_order"));
  }

  TEST_CASE("a data size that does not match the shape is rejected") {
    CHECK(contains(parse_error(make_npy(dict_f4("(3,)"), f32_bytes({1, 2}))), "truncated data"));
    CHECK(contains(parse_error(make_npy(dict_f4("(1,)"), f32_bytes({1, 2}))), "size mismatch"));
    CHECK(contains(parse_error(make_npy(dict_f4("(2,)", "<f2"), {0, 0, 0})), "truncated data"));
  }

  TEST_CASE("absurd shapes are rejected before any allocation") {
    CHECK(contains(parse_error(make_npy(dict_f4("(2147483648,)"), {})), "exceeds"));
    CHECK(contains(parse_error(make_npy(dict_f4("(65536, 65536)"), {})), "more than"));
    CHECK(contains(parse_error(make_npy(dict_f4("(99999999999999999999999,)"), {})), "exceeds"));
    CHECK(contains(parse_error(make_npy(dict_f4("(1073741824, 2)"), {})), "more than"));
    CHECK(contains(parse_error(make_npy(dict_f4("(-1,)"), {})), "negative"));
    // 2^30 elements is accepted by the shape check and then fails on the missing data.
    CHECK(contains(parse_error(make_npy(dict_f4("(1073741824,)"), {})), "truncated data"));
  }

  TEST_CASE("a header longer than 64 KiB is rejected") {
    std::vector<uint8_t> bytes = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0x01, 0x00, 0x01, 0x00};  // 65537
    bytes.resize(bytes.size() + 65537, ' ');
    CHECK(contains(parse_error(bytes), "limit"));
  }

  TEST_CASE("malformed header dicts are rejected with a reason") {
    const std::vector<uint8_t> one = f32_bytes({1.0f});
    CHECK(contains(parse_error(make_npy("{'descr': '<f4', 'shape': (1,), }", one)), "fortran_order"));
    CHECK(contains(parse_error(make_npy("{'descr': '<f4', 'fortran_order': False, }", one)), "shape"));
    CHECK(contains(parse_error(make_npy("{'fortran_order': False, 'shape': (1,), }", one)), "descr"));
    CHECK(contains(parse_error(make_npy(dict_f4("(1,)") + "x", one)), "after the header"));
    CHECK(contains(
        parse_error(make_npy("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", one)),
        "duplicate"));
    CHECK(contains(
        parse_error(make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", one)),
        "unexpected key"));
    CHECK(contains(parse_error(make_npy("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}", one)),
                   "True or False"));
    CHECK(contains(parse_error(make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1)}", one)),
                   "tuple"));
    CHECK(contains(parse_error(make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': [1]}", one)),
                   "tuple"));
    CHECK(contains(parse_error(make_npy("{'descr': '<f4', 'fortran_order': Falsey, 'shape': (1,)}", one)),
                   "True or False"));
    CHECK(contains(parse_error(make_npy("'descr': '<f4'", one)), "dict"));
    CHECK(contains(parse_error(make_npy("{'descr': '<f4", one)), "descr"));
    std::string with_nul = dict_f4("(1,)");
    with_nul[3] = '\0';
    CHECK(contains(parse_error(make_npy(with_nul, one)), "control byte"));
    CHECK(contains(parse_error(make_npy(dict_f4("(1,)") + "\xc3\xa9", one)), "non-ASCII"));
  }

  TEST_CASE("arbitrary byte flips never crash the parser") {
    const std::vector<float> values = {1, 2, 3, 4, 5, 6, 7, 8};
    const auto good = make_npy(dict_f4("(2, 4)"), f32_bytes(values));
    uint64_t state = 0x9E3779B97F4A7C15ull;
    for (int trial = 0; trial < 20000; ++trial) {
      std::vector<uint8_t> bytes = good;
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const size_t flips = 1 + (state >> 60) % 4;
      for (size_t f = 0; f < flips; ++f) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        bytes[(state >> 33) % bytes.size()] = static_cast<uint8_t>(state >> 17);
      }
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      if ((state >> 62) == 0) bytes.resize((state >> 20) % bytes.size());
      NpyArray array;
      std::string error;
      if (parse_npy(bytes.data(), bytes.size(), &array, &error)) {
        CHECK(array.values.size() <= 16);
      } else {
        CHECK_FALSE(error.empty());
      }
    }
  }

}  // TEST_SUITE
