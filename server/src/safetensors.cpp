// safetensors.cpp: the model file format (safetensors.h), with a small strict JSON parser.
#include "safetensors.h"

#include <string.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "edgefl/config.h"

namespace edgefl {
namespace server {
namespace {

constexpr const char* kSpecKey = "edgefl.model_spec";
constexpr const char* kFormatKey = "format";
constexpr size_t kMaxJsonDepth = 8;
constexpr size_t kMaxRank = 8;

Status fail(std::string* error, Status code, std::string message) {
  if (error != nullptr) *error = "safetensors: " + std::move(message);
  return code;
}

// --- UTF-8 ------------------------------------------------------------------------------------

// Length of the well-formed UTF-8 sequence at p (RFC 3629: no overlong forms, no surrogates,
// <= U+10FFFF), or 0.
size_t utf8_sequence(const uint8_t* p, size_t left) {
  const uint8_t c = p[0];
  if (c < 0x80) return 1;
  size_t n = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (left < n || p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < n; ++i) {
    if (p[i] < 0x80 || p[i] > 0xBF) return 0;
  }
  return n;
}

bool valid_utf8(const std::string& s) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = utf8_sequence(p + i, s.size() - i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(char(cp));
  } else if (cp < 0x800) {
    out->push_back(char(0xC0 | (cp >> 6)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(char(0xE0 | (cp >> 12)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(char(0xF0 | (cp >> 18)));
    out->push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  }
}

// --- JSON writer --------------------------------------------------------------------------------

void put_json_string(const std::string& s, std::string* out) {
  static const char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (const char ch : s) {
    const uint8_t c = uint8_t(ch);
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      default:
        if (c < 0x20) {
          out->append("\\u00");
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 15]);
        } else {
          out->push_back(ch);
        }
    }
  }
  out->push_back('"');
}

// --- JSON reader: objects, arrays, strings, non-negative integers; nothing else -------------------

struct JsonMember;
struct Json {
  enum class Kind : uint8_t { kObject, kArray, kString, kInteger };
  Kind kind = Kind::kInteger;
  uint64_t integer = 0;
  std::string text;
  std::vector<Json> items;          // kArray
  std::vector<JsonMember> members;  // kObject, in file order, keys unique
};
struct JsonMember {
  std::string key;
  Json value;
};

const char* kind_name(Json::Kind k) {
  switch (k) {
    case Json::Kind::kObject: return "an object";
    case Json::Kind::kArray: return "an array";
    case Json::Kind::kString: return "a string";
    case Json::Kind::kInteger: return "an integer";
  }
  return "?";
}

class JsonParser {
 public:
  JsonParser(const uint8_t* p, size_t n) : p_(p), n_(n) {}

  // The whole input: one value, then only whitespace (the header's padding).
  bool parse_document(Json* out) {
    skip_space();
    if (!parse_value(out, 0)) return false;
    skip_space();
    if (i_ != n_) return set_error("unexpected bytes after the top-level value");
    return true;
  }
  const std::string& error() const { return error_; }
  size_t offset() const { return i_; }

 private:
  bool set_error(const char* message) {
    if (error_.empty()) error_ = message;
    return false;
  }
  void skip_space() {
    while (i_ < n_ && (p_[i_] == ' ' || p_[i_] == '\t' || p_[i_] == '\n' || p_[i_] == '\r')) ++i_;
  }
  bool parse_value(Json* out, size_t depth) {
    if (i_ >= n_) return set_error("unexpected end of the header");
    const uint8_t c = p_[i_];
    if (c == '{' || c == '[') {
      if (depth >= kMaxJsonDepth) return set_error("nesting too deep");
      return c == '{' ? parse_object(out, depth + 1) : parse_array(out, depth + 1);
    }
    if (c == '"') {
      out->kind = Json::Kind::kString;
      return parse_string(&out->text);
    }
    if (c >= '0' && c <= '9') {
      out->kind = Json::Kind::kInteger;
      return parse_integer(&out->integer);
    }
    if (c == '-') return set_error("negative numbers are not allowed");
    return set_error("unexpected character (only objects, arrays, strings and integers are allowed)");
  }
  bool parse_object(Json* out, size_t depth) {
    out->kind = Json::Kind::kObject;
    ++i_;  // '{'
    skip_space();
    if (i_ < n_ && p_[i_] == '}') {
      ++i_;
      return true;
    }
    std::set<std::string> keys;
    for (;;) {
      skip_space();
      if (i_ >= n_ || p_[i_] != '"') return set_error("expected a string key");
      std::string key;
      if (!parse_string(&key)) return false;
      if (!keys.insert(key).second) return set_error("duplicate key");
      skip_space();
      if (i_ >= n_ || p_[i_] != ':') return set_error("expected ':'");
      ++i_;
      skip_space();
      Json value;
      if (!parse_value(&value, depth)) return false;
      out->members.push_back(JsonMember{std::move(key), std::move(value)});
      skip_space();
      if (i_ >= n_) return set_error("unexpected end of the header in an object");
      if (p_[i_] == ',') {
        ++i_;
        continue;
      }
      if (p_[i_] == '}') {
        ++i_;
        return true;
      }
      return set_error("expected ',' or '}'");
    }
  }
  bool parse_array(Json* out, size_t depth) {
    out->kind = Json::Kind::kArray;
    ++i_;  // '['
    skip_space();
    if (i_ < n_ && p_[i_] == ']') {
      ++i_;
      return true;
    }
    for (;;) {
      skip_space();
      Json value;
      if (!parse_value(&value, depth)) return false;
      out->items.push_back(std::move(value));
      skip_space();
      if (i_ >= n_) return set_error("unexpected end of the header in an array");
      if (p_[i_] == ',') {
        ++i_;
        continue;
      }
      if (p_[i_] == ']') {
        ++i_;
        return true;
      }
      return set_error("expected ',' or ']'");
    }
  }
  bool parse_integer(uint64_t* out) {
    const size_t start = i_;
    uint64_t v = 0;
    while (i_ < n_ && p_[i_] >= '0' && p_[i_] <= '9') {
      const uint64_t d = uint64_t(p_[i_] - '0');
      if (v > (UINT64_MAX - d) / 10) return set_error("integer too large");
      v = v * 10 + d;
      ++i_;
    }
    if (i_ - start > 1 && p_[start] == '0') return set_error("leading zero in an integer");
    if (i_ < n_ && (p_[i_] == '.' || p_[i_] == 'e' || p_[i_] == 'E'))
      return set_error("only integers are allowed");
    *out = v;
    return true;
  }
  bool hex4(uint32_t* out) {
    if (n_ - i_ < 4) return set_error("truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const uint8_t c = p_[i_++];
      uint32_t d = 0;
      if (c >= '0' && c <= '9') {
        d = uint32_t(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        d = uint32_t(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        d = uint32_t(c - 'A' + 10);
      } else {
        return set_error("bad hex digit in a \\u escape");
      }
      v = v * 16 + d;
    }
    *out = v;
    return true;
  }
  bool parse_string(std::string* out) {
    ++i_;  // '"'
    out->clear();
    for (;;) {
      if (i_ >= n_) return set_error("unterminated string");
      const uint8_t c = p_[i_];
      if (c == '"') {
        ++i_;
        return true;
      }
      if (c < 0x20) return set_error("control character in a string");
      if (c == '\\') {
        if (++i_ >= n_) return set_error("unterminated escape");
        const uint8_t e = p_[i_++];
        switch (e) {
          case '"':
          case '\\':
          case '/': out->push_back(char(e)); break;
          case 'b': out->push_back('\b'); break;
          case 'f': out->push_back('\f'); break;
          case 'n': out->push_back('\n'); break;
          case 'r': out->push_back('\r'); break;
          case 't': out->push_back('\t'); break;
          case 'u': {
            uint32_t cp = 0;
            if (!hex4(&cp)) return false;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return set_error("lone low surrogate in a \\u escape");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
              uint32_t low = 0;
              if (n_ - i_ < 2 || p_[i_] != '\\' || p_[i_ + 1] != 'u') return set_error("lone high surrogate");
              i_ += 2;
              if (!hex4(&low)) return false;
              if (low < 0xDC00 || low > 0xDFFF) return set_error("bad low surrogate");
              cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            }
            append_utf8(cp, out);
            break;
          }
          default: return set_error("unknown escape");
        }
        continue;
      }
      const size_t len = utf8_sequence(p_ + i_, n_ - i_);
      if (len == 0) return set_error("invalid UTF-8");
      out->append(reinterpret_cast<const char*>(p_ + i_), len);
      i_ += len;
    }
  }

  const uint8_t* p_;
  size_t n_;
  size_t i_ = 0;
  std::string error_;
};

// --- helpers ------------------------------------------------------------------------------------

std::string spec_string(const ModelSpec& spec) {
  const size_t n = format_model_spec(spec, nullptr, 0);
  std::string s(n + 1, '\0');
  (void)format_model_spec(spec, s.data(), s.size());
  s.resize(n);
  return s;
}

std::string shape_string(const uint64_t* dims, size_t rank) {
  std::string s = "[";
  for (size_t i = 0; i < rank; ++i) {
    if (i > 0) s += ",";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

void put_u64_le(uint64_t v, uint8_t* p) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}

uint64_t get_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct FileTensor {
  std::string name;
  uint64_t shape[kMaxRank] = {};
  size_t rank = 0;
  TensorDtype dtype = TensorDtype::kF32;
  uint64_t elements = 0;
  uint64_t begin = 0, end = 0;
};

// IEEE 754 half to float, exactly (every half is a float).
float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  uint32_t mantissa = h & 0x3FFu;
  uint32_t bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000u | (mantissa << 13);  // inf, NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;  // +-0
  } else {        // subnormal: normalise
    int e = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    bits = sign | (uint32_t(e) << 23) | ((mantissa & 0x3FFu) << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

// Element `k` of a tensor's data as float32.
float element_at(const uint8_t* src, TensorDtype dtype, uint64_t k) {
  if (dtype == TensorDtype::kF32) {
    const uint8_t* p = src + 4 * k;
    const uint32_t bits = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
    float f;
    memcpy(&f, &bits, 4);
    return f;
  }
  const uint8_t* p = src + 2 * k;
  const uint16_t half = uint16_t(p[0] | p[1] << 8);
  if (dtype == TensorDtype::kF16) return half_to_float(half);
  const uint32_t bits = uint32_t(half) << 16;  // bfloat16: the top half of a float
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

// One tensor entry of the header: {"dtype":"F32","shape":[...],"data_offsets":[b,e]}, exactly.
Status read_tensor(const std::string& name, const Json& v, FileTensor* t, std::string* error) {
  if (v.kind != Json::Kind::kObject) {
    return fail(error, Status::kCorruptPayload,
                "tensor \"" + name + "\" is " + kind_name(v.kind) + ", not an object");
  }
  const Json* dtype = nullptr;
  const Json* shape = nullptr;
  const Json* offsets = nullptr;
  for (const auto& [key, value] : v.members) {
    if (key == "dtype") {
      dtype = &value;
    } else if (key == "shape") {
      shape = &value;
    } else if (key == "data_offsets") {
      offsets = &value;
    } else {
      return fail(error, Status::kCorruptPayload,
                  "tensor \"" + name + "\" has an unknown field \"" + key + "\"");
    }
  }
  if (dtype == nullptr || shape == nullptr || offsets == nullptr) {
    return fail(error, Status::kCorruptPayload, "tensor \"" + name + "\" lacks dtype, shape or data_offsets");
  }
  if (dtype->kind != Json::Kind::kString) {
    return fail(error, Status::kCorruptPayload, "tensor \"" + name + "\": dtype is not a string");
  }
  uint64_t element_bytes = 4;
  if (dtype->text == "F32") {
    t->dtype = TensorDtype::kF32;
  } else if (dtype->text == "F16" || dtype->text == "BF16") {
    t->dtype = dtype->text == "F16" ? TensorDtype::kF16 : TensorDtype::kBf16;
    element_bytes = 2;
  } else {
    return fail(error, Status::kCorruptPayload,
                "tensor \"" + name + "\" has dtype \"" + dtype->text.substr(0, 32) +
                    "\"; a model's tensors are F32, F16 or BF16");
  }
  if (shape->kind != Json::Kind::kArray || shape->items.size() > kMaxRank) {
    return fail(error, Status::kCorruptPayload,
                "tensor \"" + name + "\": shape is not an array of at most 8 integers");
  }
  uint64_t elements = 1;
  t->rank = shape->items.size();
  for (size_t i = 0; i < t->rank; ++i) {
    const Json& d = shape->items[i];
    if (d.kind != Json::Kind::kInteger) {
      return fail(error, Status::kCorruptPayload, "tensor \"" + name + "\": a shape entry is not an integer");
    }
    t->shape[i] = d.integer;
    if (d.integer != 0 && elements > UINT64_MAX / 4 / d.integer) {
      return fail(error, Status::kCorruptPayload, "tensor \"" + name + "\": shape too large");
    }
    elements *= d.integer;
  }
  if (offsets->kind != Json::Kind::kArray || offsets->items.size() != 2 ||
      offsets->items[0].kind != Json::Kind::kInteger || offsets->items[1].kind != Json::Kind::kInteger) {
    return fail(error, Status::kCorruptPayload, "tensor \"" + name + "\": data_offsets is not [begin, end]");
  }
  t->name = name;
  t->elements = elements;
  t->begin = offsets->items[0].integer;
  t->end = offsets->items[1].integer;
  if (t->begin > t->end) {
    return fail(error, Status::kCorruptPayload, "tensor \"" + name + "\": data_offsets begin after they end");
  }
  if (t->end - t->begin != elements * element_bytes) {
    return fail(error, Status::kCorruptPayload,
                "tensor \"" + name + "\": data_offsets span " + std::to_string(t->end - t->begin) +
                    " bytes, its shape " + shape_string(t->shape, t->rank) + " in " + dtype->text +
                    " needs " + std::to_string(elements * element_bytes));
  }
  return Status::kOk;
}

}  // namespace

Status encode_safetensors(const std::vector<TensorDesc>& table, Span<const float> params,
                          const std::vector<std::pair<std::string, std::string>>& metadata,
                          std::vector<uint8_t>* out, std::string* error) {
  if (out == nullptr) return fail(error, Status::kInvalidArgument, "null output");
  std::string why;
  if (validate_tensor_table(table, &why) != Status::kOk) return fail(error, Status::kInvalidSpec, why);
  const size_t n = size_t(tensor_table_parameters(table));
  if (params.size() != n || params.data() == nullptr) {
    return fail(error, Status::kInvalidArgument,
                std::to_string(params.size()) + " parameters given, the model has " + std::to_string(n));
  }
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(params[i])) {
      return fail(error, Status::kNonFiniteInput, "parameter " + std::to_string(i) + " is not finite");
    }
  }
  std::map<std::string, std::string> meta;
  meta[kFormatKey] = "pt";
  for (const auto& [key, value] : metadata) {
    if (!valid_utf8(key) || !valid_utf8(value)) {
      return fail(error, Status::kInvalidArgument, "metadata is not UTF-8 text");
    }
    if (!meta.emplace(key, value).second) {
      return fail(error, Status::kInvalidArgument, "metadata key \"" + key + "\" is repeated or reserved");
    }
  }

  std::string json = "{\"__metadata__\":{";
  bool first = true;
  for (const auto& [key, value] : meta) {
    if (!first) json += ',';
    first = false;
    put_json_string(key, &json);
    json += ':';
    put_json_string(value, &json);
  }
  json += '}';
  uint64_t offset = 0;
  for (const TensorDesc& t : table) {
    const uint64_t elements = tensor_elements(t);
    json += ',';
    put_json_string(t.name, &json);
    json += ":{\"dtype\":\"F32\",\"shape\":[";
    for (size_t r = 0; r < t.shape.size(); ++r) {
      if (r > 0) json += ',';
      json += std::to_string(t.shape[r]);
    }
    json += "],\"data_offsets\":[";
    json += std::to_string(offset * 4);
    json += ',';
    json += std::to_string((offset + elements) * 4);
    json += "]}";
    offset += elements;
  }
  json += '}';
  json.append((8 - json.size() % 8) % 8, ' ');  // the data starts 8-byte aligned

  std::vector<uint8_t> bytes(8 + json.size() + n * 4);
  put_u64_le(json.size(), bytes.data());
  memcpy(bytes.data() + 8, json.data(), json.size());
  uint8_t* d = bytes.data() + 8 + json.size();
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    memcpy(&bits, &params[i], 4);
    d[4 * i + 0] = uint8_t(bits);
    d[4 * i + 1] = uint8_t(bits >> 8);
    d[4 * i + 2] = uint8_t(bits >> 16);
    d[4 * i + 3] = uint8_t(bits >> 24);
  }
  *out = std::move(bytes);
  return Status::kOk;
}

Status encode_safetensors(const ModelSpec& spec, Span<const float> params,
                          const std::vector<std::pair<std::string, std::string>>& metadata,
                          std::vector<uint8_t>* out, std::string* error) {
  if (out == nullptr) return fail(error, Status::kInvalidArgument, "null output");
  std::vector<TensorDesc> table;
  if (tensor_table_from_spec(spec, &table) != Status::kOk) {
    return fail(error, Status::kInvalidSpec, "invalid model spec");
  }
  std::vector<std::pair<std::string, std::string>> meta = metadata;
  for (const auto& [key, value] : metadata) {
    if (key == kSpecKey) {
      return fail(error, Status::kInvalidArgument, "metadata key \"" + key + "\" is repeated or reserved");
    }
  }
  meta.emplace_back(kSpecKey, spec_string(spec));
  return encode_safetensors(table, params, meta, out, error);
}

namespace {

// The header length, then the header's JSON; `*data` and `*data_bytes`: the tensor bytes after it.
Status read_header_json(Span<const uint8_t> file, Json* root, const uint8_t** data, uint64_t* data_bytes,
                        std::string* error) {
  // Header length, then the header.
  if (file.size() < 8) {
    return fail(error, Status::kTruncated,
                "a file of " + std::to_string(file.size()) + " bytes has no header length");
  }
  const uint64_t header_bytes = get_u64_le(file.data());
  if (header_bytes > kMaxSafetensorsHeaderBytes) {
    return fail(error, Status::kCorruptPayload,
                "header length " + std::to_string(header_bytes) + " exceeds the limit of " +
                    std::to_string(kMaxSafetensorsHeaderBytes));
  }
  if (header_bytes > file.size() - 8) {
    return fail(error, Status::kTruncated,
                "header length " + std::to_string(header_bytes) + " runs past the end of the " +
                    std::to_string(file.size()) + "-byte file");
  }
  const uint8_t* header = file.data() + 8;
  if (header_bytes < 2 || header[0] != '{') {
    return fail(error, Status::kCorruptPayload, "the header is not a JSON object");
  }
  *data = header + header_bytes;
  *data_bytes = file.size() - 8 - header_bytes;

  JsonParser parser(header, size_t(header_bytes));
  if (!parser.parse_document(root)) {
    return fail(error, Status::kCorruptPayload,
                "header JSON: " + parser.error() + " at byte " + std::to_string(parser.offset()));
  }
  if (root->kind != Json::Kind::kObject)
    return fail(error, Status::kCorruptPayload, "the header is not a JSON object");

  return Status::kOk;
}

// "__metadata__" and the tensors of the header, each within the data.
Status read_entries(const Json& root, uint64_t data_bytes, std::map<std::string, std::string>* meta,
                    std::vector<FileTensor>* tensors, std::string* error) {
  // Entries: "__metadata__" and the tensors.
  uint64_t total_elements = 0;
  for (const auto& [key, value] : root.members) {
    if (key == "__metadata__") {
      if (value.kind != Json::Kind::kObject) {
        return fail(error, Status::kCorruptPayload, "__metadata__ is not an object");
      }
      for (const auto& [mkey, mvalue] : value.members) {
        if (mvalue.kind != Json::Kind::kString) {
          return fail(error, Status::kCorruptPayload, "__metadata__ entry \"" + mkey + "\" is not a string");
        }
        meta->emplace(mkey, mvalue.text);
      }
      continue;
    }
    FileTensor t;
    EDGEFL_RETURN_IF_ERROR(read_tensor(key, value, &t, error));
    // The size limit before the data bound: a header that claims a huge model says so.
    total_elements += t.elements;  // each < 2^62 (read_tensor), at most 2^20 entries: no overflow
    if (total_elements > EDGEFL_MAX_DIMENSION) {
      return fail(error, Status::kDimensionTooLarge,
                  "the model has more than EDGEFL_MAX_DIMENSION (" +
                      std::to_string(uint64_t{EDGEFL_MAX_DIMENSION}) + ") parameters");
    }
    if (t.end > data_bytes) {
      return fail(error, Status::kCorruptPayload,
                  "tensor \"" + key + "\": data_offsets [" + std::to_string(t.begin) + "," +
                      std::to_string(t.end) + "] run past the " + std::to_string(data_bytes) + " data bytes");
    }
    tensors->push_back(std::move(t));
  }

  return Status::kOk;
}

// Sorted by offset, the tensors must tile [0, data_bytes) exactly.
Status check_tiling(const std::vector<FileTensor>& tensors, uint64_t data_bytes, std::string* error) {
  std::vector<const FileTensor*> by_offset;
  for (const FileTensor& t : tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const FileTensor* a, const FileTensor* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  for (const FileTensor* t : by_offset) {
    if (t->begin < covered) {
      return fail(error, Status::kCorruptPayload, "tensor \"" + t->name + "\" overlaps the tensor before it");
    }
    if (t->begin > covered) {
      return fail(
          error, Status::kCorruptPayload,
          "a gap of " + std::to_string(t->begin - covered) + " bytes before tensor \"" + t->name + "\"");
    }
    covered = t->end;
  }
  if (covered != data_bytes) {
    return fail(error, Status::kCorruptPayload,
                "the tensors cover " + std::to_string(covered) + " of the " + std::to_string(data_bytes) +
                    " data bytes");
  }

  return Status::kOk;
}

// The file's tensors in data order, as a table, and their values widened to float32 (finite).
Status collect_model(const std::vector<FileTensor>& tensors, const uint8_t* data, SafetensorsModel* model,
                     std::string* error) {
  std::vector<const FileTensor*> by_offset;
  for (const FileTensor& t : tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const FileTensor* a, const FileTensor* b) { return a->begin < b->begin; });
  uint64_t total = 0;  // <= EDGEFL_MAX_DIMENSION (read_entries)
  for (const FileTensor* t : by_offset) total += t->elements;
  model->tensors.clear();
  model->values.clear();
  model->values.reserve(size_t(total));
  for (const FileTensor* t : by_offset) {
    TensorDesc desc;
    desc.name = t->name;
    desc.shape.assign(t->shape, t->shape + t->rank);
    desc.dtype = t->dtype;
    for (uint64_t k = 0; k < t->elements; ++k) {
      const float f = element_at(data + t->begin, t->dtype, k);
      if (!std::isfinite(f)) {
        return fail(error, Status::kNonFiniteInput,
                    "tensor \"" + t->name + "\" element " + std::to_string(k) + " is not finite");
      }
      model->values.push_back(f);
    }
    model->tensors.push_back(std::move(desc));
  }
  std::string why;
  if (validate_tensor_table(model->tensors, &why) != Status::kOk)
    return fail(error, Status::kInvalidSpec, why);
  return Status::kOk;
}

// The whole file, checked, as a model.
Status read_model(Span<const uint8_t> file, SafetensorsModel* model, std::string* error) {
  if (file.data() == nullptr && file.size() != 0) return fail(error, Status::kInvalidArgument, "null file");
  Json root;
  const uint8_t* data = nullptr;
  uint64_t data_bytes = 0;
  EDGEFL_RETURN_IF_ERROR(read_header_json(file, &root, &data, &data_bytes, error));
  std::vector<FileTensor> tensors;
  EDGEFL_RETURN_IF_ERROR(read_entries(root, data_bytes, &model->metadata, &tensors, error));
  EDGEFL_RETURN_IF_ERROR(check_tiling(tensors, data_bytes, error));
  return collect_model(tensors, data, model, error);
}

std::string shape_string(const std::vector<uint64_t>& shape) {
  return shape_string(shape.data(), shape.size());
}

// The file's model against the expected table: the same names and shapes (any order in the file),
// nothing more; the values rearranged into table order.
Status match_table(const SafetensorsModel& found, const std::vector<TensorDesc>& table,
                   std::vector<float>* params, std::string* error) {
  std::map<std::string, std::pair<const TensorDesc*, size_t>> by_name;  // name -> (desc, first value)
  size_t offset = 0;
  for (const TensorDesc& t : found.tensors) {
    by_name.emplace(t.name, std::make_pair(&t, offset));
    offset += size_t(tensor_elements(t));
  }
  for (const TensorDesc& t : found.tensors) {
    bool known = false;
    for (const TensorDesc& want : table) known = known || want.name == t.name;
    if (!known) return fail(error, Status::kDimensionMismatch, "unexpected tensor \"" + t.name + "\"");
  }
  std::vector<float> out;
  out.reserve(size_t(tensor_table_parameters(table)));
  for (const TensorDesc& want : table) {
    const auto it = by_name.find(want.name);
    if (it == by_name.end())
      return fail(error, Status::kDimensionMismatch, "missing tensor \"" + want.name + "\"");
    const TensorDesc& have = *it->second.first;
    if (have.shape != want.shape) {
      return fail(error, Status::kDimensionMismatch,
                  "tensor \"" + want.name + "\" has shape " + shape_string(have.shape) +
                      ", the model wants " + shape_string(want.shape));
    }
    const size_t first = it->second.second;
    out.insert(out.end(), found.values.begin() + long(first),
               found.values.begin() + long(first + tensor_elements(want)));
  }
  *params = std::move(out);
  return Status::kOk;
}

}  // namespace

Status read_safetensors(Span<const uint8_t> file, SafetensorsModel* model, std::string* error) {
  if (model == nullptr) return fail(error, Status::kInvalidArgument, "null output");
  SafetensorsModel out;
  EDGEFL_RETURN_IF_ERROR(read_model(file, &out, error));
  *model = std::move(out);
  return Status::kOk;
}

Status decode_safetensors(Span<const uint8_t> file, const std::vector<TensorDesc>& table,
                          std::vector<float>* params, std::map<std::string, std::string>* metadata,
                          std::string* error) {
  if (params == nullptr) return fail(error, Status::kInvalidArgument, "null output");
  std::string why;
  if (validate_tensor_table(table, &why) != Status::kOk) return fail(error, Status::kInvalidSpec, why);
  SafetensorsModel found;
  EDGEFL_RETURN_IF_ERROR(read_model(file, &found, error));
  std::vector<float> out;
  EDGEFL_RETURN_IF_ERROR(match_table(found, table, &out, error));
  *params = std::move(out);
  if (metadata != nullptr) *metadata = std::move(found.metadata);
  return Status::kOk;
}

Status decode_safetensors(Span<const uint8_t> file, const ModelSpec& spec, std::vector<float>* params,
                          std::map<std::string, std::string>* metadata, std::string* error) {
  if (params == nullptr) return fail(error, Status::kInvalidArgument, "null output");
  std::vector<TensorDesc> table;
  if (tensor_table_from_spec(spec, &table) != Status::kOk) {
    return fail(error, Status::kInvalidSpec, "invalid model spec");
  }
  SafetensorsModel found;
  EDGEFL_RETURN_IF_ERROR(read_model(file, &found, error));
  const auto spec_it = found.metadata.find(kSpecKey);
  if (spec_it != found.metadata.end() && spec_it->second != spec_string(spec)) {
    return fail(error, Status::kDimensionMismatch,
                "the file holds model \"" + spec_it->second + "\", expected \"" + spec_string(spec) + "\"");
  }
  std::vector<float> out;
  EDGEFL_RETURN_IF_ERROR(match_table(found, table, &out, error));
  *params = std::move(out);
  if (metadata != nullptr) *metadata = std::move(found.metadata);
  return Status::kOk;
}

}  // namespace server
}  // namespace edgefl
