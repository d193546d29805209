// json_writer.h: a minimal writer for one-line JSON objects (the tool's --json outputs).
#ifndef EDGEFL_CLI_JSON_WRITER_H_
#define EDGEFL_CLI_JSON_WRITER_H_

#include <stdint.h>

#include <string>

namespace edgefl {
namespace cli {

// `s` as a JSON string literal, quotes included (control bytes escaped as \u00XX).
std::string json_quote(const std::string& s);

// `v` with up to `digits` significant digits; "null" when v is NaN or infinite (JSON has neither).
std::string json_number(double v, int digits = 9);

// Builds {"key": value, ...} in insertion order. Keys are written as given (escaped).
class JsonObjectWriter {
 public:
  JsonObjectWriter& add_string(const std::string& key, const std::string& value);
  JsonObjectWriter& add_number(const std::string& key, double value, int digits = 9);
  JsonObjectWriter& add_uint(const std::string& key, uint64_t value);
  JsonObjectWriter& add_bool(const std::string& key, bool value);
  JsonObjectWriter& add_null(const std::string& key);
  // `json` is inserted verbatim (an already-encoded value).
  JsonObjectWriter& add_raw(const std::string& key, const std::string& json);
  // The finished object, without a trailing newline.
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(const std::string& k);
  std::string body_;
};

}  // namespace cli
}  // namespace edgefl

#endif  // EDGEFL_CLI_JSON_WRITER_H_
