// tests/support/codec_util.h: helpers shared by the codec suites.
//
// Buffers are std::vectors sized exactly as the API asks (workspace_size(), encoded_bound()), so
// that AddressSanitizer catches any access past what the contract allows.
#ifndef EDGEFL_TESTS_SUPPORT_CODEC_UTIL_H_
#define EDGEFL_TESTS_SUPPORT_CODEC_UTIL_H_

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "edgefl/codec.h"
#include "edgefl/status.h"
#include "support/crc32c.h"

// doctest prints these by name in failure messages.
namespace doctest {
template <>
struct StringMaker<edgefl::Status> {
  static String convert(edgefl::Status s) {
    return String(edgefl::status_name(s)) + "(" + toString(static_cast<int>(s)) + ")";
  }
};
template <>
struct StringMaker<edgefl::SparsifierKind> {
  static String convert(edgefl::SparsifierKind k) {
    return String(edgefl::sparsifier_name(k)) + "(" + toString(static_cast<int>(k)) + ")";
  }
};
template <>
struct StringMaker<edgefl::ValueCoderKind> {
  static String convert(edgefl::ValueCoderKind k) {
    return String(edgefl::value_coder_name(k)) + "(" + toString(static_cast<int>(k)) + ")";
  }
};
template <>
struct StringMaker<edgefl::IndexCoding> {
  static String convert(edgefl::IndexCoding k) {
    return String(edgefl::index_coding_name(k)) + "(" + toString(static_cast<int>(k)) + ")";
  }
};
}  // namespace doctest

namespace edgefl_test {

using edgefl::CodecSpec;
using edgefl::EncodedInfo;
using edgefl::Status;

// The byte layout of an encoding, format version 1 (mirrors sdk/src/codec/format.h; kept separate
// on purpose: the tests state the format independently of the implementation).
namespace wire {
constexpr size_t kMagic = 0;
constexpr size_t kVersion = 4;
constexpr size_t kSparsifier = 5;
constexpr size_t kValueCoder = 6;
constexpr size_t kIndexCoding = 7;
constexpr size_t kN = 8;
constexpr size_t kNnz = 12;
constexpr size_t kBits = 16;
constexpr size_t kFlags = 17;
constexpr size_t kLevels = 18;
constexpr size_t kBlock = 20;
constexpr size_t kParam = 24;
constexpr size_t kSeed = 28;
constexpr size_t kContributions = 36;
constexpr size_t kIndexBytes = 40;
constexpr size_t kValueBytes = 44;
constexpr size_t kChecksum = 48;
constexpr size_t kHeaderBytes = 52;
}  // namespace wire

inline uint32_t load_u32(const std::vector<uint8_t>& b, size_t at) {
  return static_cast<uint32_t>(b[at]) | static_cast<uint32_t>(b[at + 1]) << 8 |
         static_cast<uint32_t>(b[at + 2]) << 16 | static_cast<uint32_t>(b[at + 3]) << 24;
}
inline void store_u32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
inline float load_f32(const std::vector<uint8_t>& b, size_t at) {
  const uint32_t u = load_u32(b, at);
  float f;
  memcpy(&f, &u, 4);
  return f;
}
inline void store_f32(std::vector<uint8_t>& b, size_t at, float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  store_u32(b, at, u);
}

// The checksum an encoding should carry: CRC32C of [0, 48) followed by everything after the header.
inline uint32_t expected_checksum(const std::vector<uint8_t>& b) {
  uint32_t crc = crc32c_update(0, b.data(), wire::kChecksum);
  if (b.size() > wire::kHeaderBytes)
    crc = crc32c_update(crc, b.data() + wire::kHeaderBytes, b.size() - wire::kHeaderBytes);
  return crc;
}
// Rewrites the stored checksum so that a crafted encoding gets past the CRC check.
inline void fix_checksum(std::vector<uint8_t>& b) {
  store_u32(b, wire::kChecksum, expected_checksum(b));
}

inline CodecSpec parse_or_fail(const char* text) {
  CodecSpec spec;
  const Status s = edgefl::parse_codec_spec(text, &spec);
  INFO("spec: ", std::string(text));
  REQUIRE(s == Status::kOk);
  return spec;
}

struct Encoding {
  Status status = Status::kInvalidArgument;
  size_t written = 0;
  std::vector<uint8_t> bytes;  // resized to `written`
};

// Encodes with a workspace of exactly workspace_size() bytes and an output of exactly
// encoded_bound() bytes (both heap blocks of that size: ASan sees any overrun).
inline Encoding encode_vec(const CodecSpec& spec, const std::vector<float>& x, uint64_t seed) {
  const size_t ws = edgefl::workspace_size(spec, x.size());
  const size_t cap = edgefl::encoded_bound(spec, x.size());
  std::vector<uint8_t> work(ws);
  Encoding e;
  e.bytes.assign(cap, 0);
  e.written = 0xDEADBEEF;
  e.status =
      edgefl::encode(spec, {x.data(), x.size()}, seed, {work.data(), ws}, {e.bytes.data(), cap}, &e.written);
  if (e.status == Status::kOk) {
    REQUIRE(e.written <= cap);
    e.bytes.resize(e.written);
  }
  return e;
}

// encode_vec() that must succeed.
inline std::vector<uint8_t> encode_ok(const CodecSpec& spec, const std::vector<float>& x, uint64_t seed) {
  Encoding e = encode_vec(spec, x, seed);
  REQUIRE(e.status == Status::kOk);
  return e.bytes;
}
inline std::vector<uint8_t> encode_ok(const char* spec, const std::vector<float>& x, uint64_t seed) {
  INFO("spec: ", std::string(spec));
  return encode_ok(parse_or_fail(spec), x, seed);
}

// Decodes into *out. An empty output is passed as a non-null pointer with size 0 (the null empty
// span has a test of its own, suite "codec.empty").
inline Status decode_vec(const std::vector<uint8_t>& bytes, std::vector<float>* out) {
  static float empty_target = 0.0f;
  float* data = out->empty() ? &empty_target : out->data();
  return edgefl::decode({bytes.data(), bytes.size()}, {data, out->size()});
}
inline std::vector<float> decode_ok(const std::vector<uint8_t>& bytes, size_t n) {
  std::vector<float> out(n, 0.0f);
  REQUIRE(decode_vec(bytes, &out) == Status::kOk);
  return out;
}
inline EncodedInfo inspect_ok(const std::vector<uint8_t>& bytes) {
  EncodedInfo info;
  REQUIRE(edgefl::inspect({bytes.data(), bytes.size()}, &info) == Status::kOk);
  return info;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || memcmp(a.data(), b.data(), a.size() * 4) == 0);
}
inline bool all_finite(const std::vector<float>& v) {
  for (float f : v)
    if (!isfinite(f)) return false;
  return true;
}

inline double sq_norm(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += static_cast<double>(v) * v;
  return s;
}
// ||x - y||^2 / ||x||^2.
inline double vnmse(const std::vector<float>& x, const std::vector<float>& y) {
  double e = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = static_cast<double>(x[i]) - y[i];
    e += d * d;
  }
  return e / sq_norm(x);
}

// Reference float -> bfloat16 -> float, round to nearest even (finite inputs only).
inline float bf16_round(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  memcpy(&f, &u, 4);
  return f;
}

// Reference float -> IEEE binary16 -> float, round to nearest even, subnormals included.
// Returns +-inf when the value rounds past 65504.
inline float fp16_round(float f) {
  const double a = fabs(static_cast<double>(f));
  if (a == 0.0) return f;
  int e;
  frexp(a, &e);                        // a = m * 2^e, m in [0.5, 1)
  int exp_unit = e - 11;               // binary16 has an 11-bit significand
  if (exp_unit < -24) exp_unit = -24;  // subnormal spacing 2^-24
  const double unit = ldexp(1.0, exp_unit);
  const double r = nearbyint(a / unit) * unit;  // default rounding mode: to nearest even
  const double out = r > 65504.0 ? INFINITY : r;
  return static_cast<float>(f < 0 ? -out : out);
}

// Reference Elias-Fano encoding of sorted `idx` over [0, n), laid out as format.h describes:
// L = floor(log2(n / k)) low bits per index, k * L bits LSB-first padded to a byte, then the high
// parts in unary, k + (n >> L) bits (bit (idx[i] >> L) + i set). Accepts any input (unsorted,
// out-of-range) as long as the high bits fit, so that tests can craft malformed sets.
inline std::vector<uint8_t> elias_fano_reference(const std::vector<uint32_t>& idx, uint32_t n) {
  const size_t k = idx.size();
  if (k == 0) return {};
  uint32_t l = 0;
  while ((static_cast<uint64_t>(n) / k) >> (l + 1)) ++l;  // floor(log2(n / k)), n / k >= 1
  const size_t low_bytes = (k * l + 7) / 8;
  const size_t high_bits = k + (n >> l);
  std::vector<uint8_t> out(low_bytes + (high_bits + 7) / 8, 0);
  for (size_t i = 0; i < k; ++i)
    for (uint32_t b = 0; b < l; ++b)
      if ((idx[i] >> b) & 1u) {
        const size_t pos = i * l + b;
        out[pos / 8] |= static_cast<uint8_t>(1u << (pos % 8));
      }
  for (size_t i = 0; i < k; ++i) {
    const size_t pos = (idx[i] >> l) + i;
    REQUIRE(pos / 8 < (high_bits + 7) / 8);
    out[low_bytes + pos / 8] |= static_cast<uint8_t>(1u << (pos % 8));
  }
  return out;
}

// Reference adaptive Rice coding of the gaps of `idx` over [0, n) (sdk/src/codec/index_coding.h,
// the wire format): gap g = i_j - i_{j-1} - 1 (i_{-1} = -1); with parameter r, the quotient
// q = g >> r in unary (q zero bits, then a one) then the low r bits of g, LSB-first; a quotient of
// 24 or more is unary(24) then g in ceil(log2 n) bits (1 bit when n <= 1). r comes from a running
// mean primed with n / k: sum = 4 * (n / k), count = 4; r = (least r' with count << r' >= sum) - 1,
// at least 0; after each gap sum += g + 1, count += 1, and both halve when count reaches 32.
// Accepts any ascending input, including indices >= n, so that tests can craft malformed sets.
inline std::vector<uint8_t> rice_reference(const std::vector<uint32_t>& idx, uint32_t n) {
  const uint64_t k = idx.size();
  uint64_t sum = 4 * (k == 0 ? 1 : n / k), count = 4;
  unsigned raw_bits = 1;
  if (n > 1) {
    raw_bits = 0;
    while ((uint64_t{1} << raw_bits) < n) ++raw_bits;
  }
  std::vector<uint8_t> out;
  size_t bit = 0;
  auto put_bit = [&](unsigned b) {
    if (bit / 8 >= out.size()) out.push_back(0);
    out[bit / 8] |= static_cast<uint8_t>(b << (bit % 8));
    ++bit;
  };
  auto put = [&](uint64_t v, unsigned bits) {
    for (unsigned i = 0; i < bits; ++i) put_bit(static_cast<unsigned>((v >> i) & 1u));
  };
  uint64_t next = 0;
  for (uint32_t i : idx) {
    const uint64_t gap = i - next;
    next = uint64_t{i} + 1;
    unsigned r = 0;
    while ((count << r) < sum && r < 31) ++r;
    r = r > 0 ? r - 1 : 0;
    const uint64_t q = gap >> r;
    if (q < 24) {
      put(0, static_cast<unsigned>(q));
      put_bit(1);
      put(gap, r);
    } else {
      put(0, 24);
      put_bit(1);
      put(gap, raw_bits);
    }
    sum += gap + 1;
    if (++count >= 32) {
      sum >>= 1;
      count >>= 1;
    }
  }
  return out;
}

// Reference block Rice coding of the gaps of `idx` over [0, n) (sdk/src/codec/index_coding.h, the
// wire format of format version 2): gaps g as for Rice, in blocks of 16 (the last may be short);
// each block's parameter r is the smallest r in [0, 31] minimising sum(g >> r) + count * r, found
// here by trying all 32. Part A: per block the parameter code against the previous block's r (0
// before the first): bit 0 if equal; bits 1,0,0 if one more; 1,0,1 if one less; else 1,1 and r in
// 5 bits; then each gap's low r bits. Part B: per gap, g >> r zero bits then a one. Both LSB-first
// and zero-padded to a byte; the region is LEB128(bytes of A), A, B. Accepts any ascending input,
// including indices >= n; `force[b]` in [0, 31] codes block b with that parameter instead.
inline std::vector<uint8_t> block_rice_reference(const std::vector<uint32_t>& idx,
                                                 const std::vector<int>& force = {}) {
  if (idx.empty()) return {};
  std::vector<uint8_t> a, b;
  size_t a_bit = 0, b_bit = 0;
  auto put_bit = [](std::vector<uint8_t>& out, size_t& bit, unsigned v) {
    if (bit / 8 >= out.size()) out.push_back(0);
    out[bit / 8] |= static_cast<uint8_t>(v << (bit % 8));
    ++bit;
  };
  std::vector<uint64_t> gaps;
  uint64_t next = 0;
  for (uint32_t i : idx) {
    gaps.push_back(i - next);
    next = uint64_t{i} + 1;
  }
  unsigned prev = 0;
  for (size_t start = 0; start < gaps.size(); start += 16) {
    const size_t end = std::min(gaps.size(), start + 16);
    unsigned best_r = 0;
    uint64_t best = ~uint64_t{0};
    for (unsigned r = 0; r < 32; ++r) {
      uint64_t bits = (end - start) * r;
      for (size_t j = start; j < end; ++j) bits += gaps[j] >> r;
      if (bits < best) {
        best = bits;
        best_r = r;
      }
    }
    const size_t block = start / 16;
    const unsigned r =
        block < force.size() && force[block] >= 0 ? static_cast<unsigned>(force[block]) : best_r;
    if (r == prev) {
      put_bit(a, a_bit, 0);
    } else if (r == prev + 1 || r + 1 == prev) {
      put_bit(a, a_bit, 1);
      put_bit(a, a_bit, 0);
      put_bit(a, a_bit, r + 1 == prev ? 1 : 0);
    } else {
      put_bit(a, a_bit, 1);
      put_bit(a, a_bit, 1);
      for (unsigned i = 0; i < 5; ++i) put_bit(a, a_bit, (r >> i) & 1u);
    }
    for (size_t j = start; j < end; ++j)
      for (unsigned i = 0; i < r; ++i) put_bit(a, a_bit, static_cast<unsigned>((gaps[j] >> i) & 1u));
    for (size_t j = start; j < end; ++j) {
      for (uint64_t z = 0; z < (gaps[j] >> r); ++z) put_bit(b, b_bit, 0);
      put_bit(b, b_bit, 1);
    }
    prev = r;
  }
  std::vector<uint8_t> out;
  uint64_t v = a.size();
  do {
    out.push_back(static_cast<uint8_t>((v & 0x7F) | (v >= 0x80 ? 0x80 : 0)));
    v >>= 7;
  } while (v != 0);
  out.insert(out.end(), a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

// Replaces the index region of a valid encoding with `region` (any length), fixing the sizes and
// the checksum.
inline std::vector<uint8_t> with_index_region(const std::vector<uint8_t>& bytes,
                                              const std::vector<uint8_t>& region) {
  const uint32_t old_size = load_u32(bytes, wire::kIndexBytes);
  std::vector<uint8_t> out(bytes.begin(), bytes.begin() + wire::kHeaderBytes);
  out.insert(out.end(), region.begin(), region.end());
  out.insert(out.end(), bytes.begin() + static_cast<long>(wire::kHeaderBytes + old_size), bytes.end());
  store_u32(out, wire::kIndexBytes, static_cast<uint32_t>(region.size()));
  fix_checksum(out);
  return out;
}

// A vector of n zeros with 1 + i/1024 at the given indices (distinct magnitudes, all >= 1):
// "thresh:0.5" keeps exactly `idx`.
inline std::vector<float> indicator_vector(size_t n, const std::vector<uint32_t>& idx) {
  std::vector<float> x(n, 0.0f);
  for (size_t i = 0; i < idx.size(); ++i) x[idx[i]] = 1.0f + static_cast<float>(i % 1024) / 1024.0f;
  return x;
}

// Indices of the non-zero coordinates of v.
inline std::vector<uint32_t> nonzero_indices(const std::vector<float>& v) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != 0.0f) out.push_back(static_cast<uint32_t>(i));
  return out;
}

}  // namespace edgefl_test

#endif  // EDGEFL_TESTS_SUPPORT_CODEC_UTIL_H_
