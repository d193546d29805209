#include "npy.h"

#include <stdint.h>
#include <string.h>

#include "file_io.h"

namespace edgefl {
namespace cli {

namespace {

constexpr uint8_t kNpyMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
constexpr size_t kNpyAlignment = 64;

uint32_t load_le16(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8);
}

uint32_t load_le32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

// A strict parser for the header dictionary numpy writes:
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
// Python literal syntax restricted to what a float array header can hold: quoted strings without
// escapes, True/False, and tuples of non-negative integers (a trailing 'L' from Python 2 allowed).
class HeaderParser {
 public:
  HeaderParser(const char* begin, const char* end) : p_(begin), end_(end) {}

  bool parse(std::string* descr, bool* fortran_order, std::vector<uint64_t>* shape, std::string* error) {
    bool have_descr = false, have_order = false, have_shape = false;
    skip_space();
    if (!consume('{')) return fail("header is not a Python dict (expected '{')", error);
    for (;;) {
      skip_space();
      if (consume('}')) break;
      std::string key;
      if (!parse_string(&key)) return fail("expected a quoted key or '}' in the header dict", error);
      skip_space();
      if (!consume(':')) return fail("expected ':' after key '" + key + "'", error);
      skip_space();
      if (key == "descr") {
        if (have_descr) return fail("duplicate key 'descr'", error);
        have_descr = true;
        if (peek() == '[') return fail("structured dtypes are not supported (descr is a list)", error);
        if (!parse_string(descr)) return fail("'descr' must be a quoted dtype string", error);
      } else if (key == "fortran_order") {
        if (have_order) return fail("duplicate key 'fortran_order'", error);
        have_order = true;
        if (!parse_bool(fortran_order)) return fail("'fortran_order' must be True or False", error);
      } else if (key == "shape") {
        if (have_shape) return fail("duplicate key 'shape'", error);
        have_shape = true;
        if (!parse_shape(shape, error)) return false;
      } else {
        return fail("unexpected key '" + key + "' in the header dict", error);
      }
      skip_space();
      if (consume(',')) continue;
      skip_space();
      if (consume('}')) break;
      return fail("expected ',' or '}' after the value of '" + key + "'", error);
    }
    skip_space();
    if (p_ != end_) return fail("unexpected text after the header dict", error);
    if (!have_descr) return fail("header has no 'descr'", error);
    if (!have_order) return fail("header has no 'fortran_order'", error);
    if (!have_shape) return fail("header has no 'shape'", error);
    return true;
  }

 private:
  static bool fail(const std::string& message, std::string* error) {
    *error = message;
    return false;
  }
  char peek() const { return p_ < end_ ? *p_ : '\0'; }
  bool consume(char c) {
    if (p_ < end_ && *p_ == c) {
      ++p_;
      return true;
    }
    return false;
  }
  bool consume_word(const char* word) {
    const size_t len = strlen(word);
    if (static_cast<size_t>(end_ - p_) < len || memcmp(p_, word, len) != 0) return false;
    const char* after = p_ + len;
    if (after < end_ && (is_ident(*after))) return false;
    p_ = after;
    return true;
  }
  static bool is_ident(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  }
  void skip_space() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
  }
  bool parse_string(std::string* out) {
    if (p_ >= end_ || (*p_ != '\'' && *p_ != '"')) return false;
    const char quote = *p_++;
    const char* start = p_;
    while (p_ < end_ && *p_ != quote) {
      if (*p_ == '\\' || *p_ == '\n') return false;  // no escapes, no line breaks
      ++p_;
    }
    if (p_ >= end_) return false;
    out->assign(start, static_cast<size_t>(p_ - start));
    ++p_;
    return true;
  }
  bool parse_bool(bool* out) {
    if (consume_word("True")) {
      *out = true;
      return true;
    }
    if (consume_word("False")) {
      *out = false;
      return true;
    }
    return false;
  }
  bool parse_shape(std::vector<uint64_t>* shape, std::string* error) {
    shape->clear();
    if (!consume('(')) return fail("'shape' must be a tuple of integers", error);
    skip_space();
    if (consume(')')) return true;  // () : a 0-d array
    bool trailing_comma = false;
    for (;;) {
      skip_space();
      if (peek() == '-') return fail("'shape' has a negative dimension", error);
      if (peek() < '0' || peek() > '9')
        return fail("'shape' must be a tuple of non-negative integers", error);
      uint64_t dim = 0;
      while (peek() >= '0' && peek() <= '9') {
        dim = dim * 10 + static_cast<uint64_t>(*p_ - '0');
        ++p_;
        if (dim > kNpyMaxElements) {
          return fail("shape dimension exceeds " + std::to_string(kNpyMaxElements) + " elements", error);
        }
      }
      consume('L');  // Python 2 long literal
      if (shape->size() >= 64) return fail("'shape' has more than 64 dimensions", error);
      shape->push_back(dim);
      skip_space();
      trailing_comma = consume(',');
      skip_space();
      if (consume(')')) break;
      if (!trailing_comma) return fail("expected ',' or ')' in 'shape'", error);
    }
    if (shape->size() == 1 && !trailing_comma) {
      return fail("'shape' must be a tuple: a 1-D shape is written (n,)", error);
    }
    return true;
  }

  const char* p_;
  const char* end_;
};

bool describe_dtype(const std::string& descr, NpyDtype* dtype, size_t* item_bytes, std::string* error) {
  if (descr == "<f4") {
    *dtype = NpyDtype::kFloat32;
    *item_bytes = 4;
    return true;
  }
  if (descr == "<f2") {
    *dtype = NpyDtype::kFloat16;
    *item_bytes = 2;
    return true;
  }
  if (descr.size() >= 2 && descr[0] == '>') {
    *error =
        "big-endian dtype '" + descr + "' is not supported; save with x.astype('<" + descr.substr(1) + "')";
    return false;
  }
  if (descr == "<f8" || descr == "=f8" || descr == "|f8") {
    *error = "dtype float64 ('" + descr + "') is not supported; save with x.astype(np.float32)";
    return false;
  }
  if (descr == "=f4" || descr == "=f2") {
    *error = "native-order dtype '" + descr + "' is ambiguous in a file; expected '<" + descr.substr(1) + "'";
    return false;
  }
  *error = "unsupported dtype '" + descr + "': only float32 ('<f4') and float16 ('<f2') are read";
  return false;
}

}  // namespace

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  uint32_t mantissa = h & 0x3FFu;
  uint32_t bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000u | (mantissa << 13);  // inf / NaN (payload kept)
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);  // 127 - 15 = 112
  } else if (mantissa == 0) {
    bits = sign;  // +-0
  } else {
    // Subnormal: value = mantissa * 2^-24. Normalize: shift until the implicit bit is set.
    uint32_t e = 113;  // exponent of 2^-14 in binary32, minus the shifts below
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    mantissa &= 0x3FFu;
    bits = sign | (e << 23) | (mantissa << 13);
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

std::string npy_shape_string(const std::vector<uint64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  s += ")";
  return s;
}

bool parse_npy(const uint8_t* bytes, size_t size, NpyArray* out, std::string* error) {
  if (size < 10) {
    *error = "truncated: " + std::to_string(size) + " bytes is shorter than a .npy preamble (10 bytes)";
    return false;
  }
  if (memcmp(bytes, kNpyMagic, sizeof kNpyMagic) != 0) {
    *error = "bad magic: not a NumPy .npy file (expected \\x93NUMPY)";
    return false;
  }
  const uint8_t major = bytes[6], minor = bytes[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0) {
    *error = "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
             " (1.0, 2.0 and 3.0 are read)";
    return false;
  }
  size_t prefix, header_len;
  if (major == 1) {
    prefix = 10;
    header_len = load_le16(bytes + 8);
  } else {
    if (size < 12) {
      *error = "truncated: " + std::to_string(size) + " bytes is shorter than a version " +
               std::to_string(major) + " preamble (12 bytes)";
      return false;
    }
    prefix = 12;
    header_len = load_le32(bytes + 8);
  }
  if (header_len > kNpyMaxHeaderBytes) {
    *error = "header length " + std::to_string(header_len) + " exceeds the " +
             std::to_string(kNpyMaxHeaderBytes) + "-byte limit";
    return false;
  }
  if (header_len > size - prefix) {
    *error = "truncated header: it claims " + std::to_string(header_len) + " bytes, the file has " +
             std::to_string(size - prefix) + " after the preamble";
    return false;
  }
  const char* text = reinterpret_cast<const char*>(bytes + prefix);
  for (size_t i = 0; i < header_len; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      *error = "header holds non-ASCII bytes (only plain dtypes are supported)";
      return false;
    }
    if (c < 0x20 && c != '\n' && c != '\r' && c != '\t') {
      *error = "header holds a control byte at offset " + std::to_string(prefix + i);
      return false;
    }
  }

  std::string descr;
  bool fortran_order = false;
  std::vector<uint64_t> shape;
  std::string parse_error;
  if (!HeaderParser(text, text + header_len).parse(&descr, &fortran_order, &shape, &parse_error)) {
    *error = "malformed header: " + parse_error;
    return false;
  }
  NpyDtype dtype;
  size_t item_bytes;
  if (!describe_dtype(descr, &dtype, &item_bytes, error)) return false;
  if (fortran_order) {
    *error = "fortran_order True is not supported; save np.ascontiguousarray(x) instead";
    return false;
  }
  uint64_t count = 1;
  for (uint64_t dim : shape) {
    if (dim == 0) {
      count = 0;
      break;
    }
  }
  if (count != 0) {
    for (uint64_t dim : shape) {
      // dim <= kNpyMaxElements (checked by the parser), so count * dim fits in 64 bits.
      count *= dim;
      if (count > kNpyMaxElements) {
        *error = "shape " + npy_shape_string(shape) + " holds more than " + std::to_string(kNpyMaxElements) +
                 " elements";
        return false;
      }
    }
  }
  const size_t data_offset = prefix + header_len;
  const uint64_t need = count * item_bytes;
  const size_t have = size - data_offset;
  if (have < need) {
    *error = "truncated data: shape " + npy_shape_string(shape) + " of '" + descr + "' needs " +
             std::to_string(need) + " bytes, the file has " + std::to_string(have);
    return false;
  }
  if (have > need) {
    *error = "size mismatch: " + std::to_string(have - need) + " bytes follow the " + std::to_string(need) +
             " bytes that shape " + npy_shape_string(shape) + " of '" + descr + "' needs";
    return false;
  }

  out->dtype = dtype;
  out->major_version = major;
  out->shape = shape;
  out->values.resize(static_cast<size_t>(count));
  const uint8_t* data = bytes + data_offset;
  if (dtype == NpyDtype::kFloat32) {
    for (size_t i = 0; i < count; ++i) {
      const uint32_t bits = load_le32(data + 4 * i);
      memcpy(&out->values[i], &bits, 4);
    }
  } else {
    for (size_t i = 0; i < count; ++i) {
      out->values[i] = half_to_float(static_cast<uint16_t>(load_le16(data + 2 * i)));
    }
  }
  return true;
}

bool read_npy_file(const std::string& path, NpyArray* out, std::string* error) {
  std::vector<uint8_t> bytes;
  // The largest valid file: preamble + header cap + 2^30 float32 values (in 64 bits, capped at
  // SIZE_MAX: 4 GiB does not fit a 32-bit size_t).
  const uint64_t max_bytes64 = 12 + kNpyMaxHeaderBytes + kNpyMaxElements * 4;
  const size_t max_bytes = max_bytes64 > SIZE_MAX ? SIZE_MAX : static_cast<size_t>(max_bytes64);
  if (!read_file_bytes(path, max_bytes, &bytes, error)) return false;
  std::string reason;
  if (!parse_npy(bytes.data(), bytes.size(), out, &reason)) {
    *error = path + ": " + reason;
    return false;
  }
  return true;
}

std::vector<uint8_t> serialize_npy_f32(const float* values, size_t n) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(n) + ",), }";
  // Pad with spaces so that the preamble + header + '\n' is a multiple of 64 bytes.
  const size_t unpadded = 10 + header.size() + 1;
  const size_t padded = (unpadded + kNpyAlignment - 1) / kNpyAlignment * kNpyAlignment;
  header.append(padded - unpadded, ' ');
  header.push_back('\n');

  std::vector<uint8_t> bytes(10 + header.size() + 4 * n);
  memcpy(bytes.data(), kNpyMagic, sizeof kNpyMagic);
  bytes[6] = 1;
  bytes[7] = 0;
  bytes[8] = static_cast<uint8_t>(header.size() & 0xFF);
  bytes[9] = static_cast<uint8_t>(header.size() >> 8);
  memcpy(bytes.data() + 10, header.data(), header.size());
  uint8_t* data = bytes.data() + 10 + header.size();
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    memcpy(&bits, &values[i], 4);
    data[4 * i + 0] = static_cast<uint8_t>(bits);
    data[4 * i + 1] = static_cast<uint8_t>(bits >> 8);
    data[4 * i + 2] = static_cast<uint8_t>(bits >> 16);
    data[4 * i + 3] = static_cast<uint8_t>(bits >> 24);
  }
  return bytes;
}

bool write_npy_f32_file(const std::string& path, const float* values, size_t n, std::string* error) {
  const std::vector<uint8_t> bytes = serialize_npy_f32(values, n);
  return write_file_bytes(path, bytes.data(), bytes.size(), error);
}

}  // namespace cli
}  // namespace edgefl
