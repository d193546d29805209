#include "json_writer.h"

#include <math.h>
#include <stdio.h>

namespace edgefl {
namespace cli {

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
  return out;
}

std::string json_number(double v, int digits) {
  if (!isfinite(v)) return "null";
  char buf[64];
  snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

void JsonObjectWriter::key(const std::string& k) {
  if (!body_.empty()) body_ += ", ";
  body_ += json_quote(k);
  body_ += ": ";
}

JsonObjectWriter& JsonObjectWriter::add_string(const std::string& k, const std::string& value) {
  key(k);
  body_ += json_quote(value);
  return *this;
}

JsonObjectWriter& JsonObjectWriter::add_number(const std::string& k, double value, int digits) {
  key(k);
  body_ += json_number(value, digits);
  return *this;
}

JsonObjectWriter& JsonObjectWriter::add_uint(const std::string& k, uint64_t value) {
  key(k);
  body_ += std::to_string(value);
  return *this;
}

JsonObjectWriter& JsonObjectWriter::add_bool(const std::string& k, bool value) {
  key(k);
  body_ += value ? "true" : "false";
  return *this;
}

JsonObjectWriter& JsonObjectWriter::add_null(const std::string& k) {
  key(k);
  body_ += "null";
  return *this;
}

JsonObjectWriter& JsonObjectWriter::add_raw(const std::string& k, const std::string& json) {
  key(k);
  body_ += json;
  return *this;
}

}  // namespace cli
}  // namespace edgefl
