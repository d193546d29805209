// Internal: decimal numbers in spec strings (codec, model, optimizer, partition specs), parsed and
// printed without the C library: strtod allocates in newlib and follows the locale, printf is not
// available to the freestanding core, and std::from_chars for floats is missing from older libc++.
#ifndef EDGEFL_SRC_CORE_TEXT_H_
#define EDGEFL_SRC_CORE_TEXT_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

namespace edgefl {
namespace text {

// 1e0 .. 1e22, exact in binary64.
extern const double kPow10[23];

// [begin, end) is exactly the NUL-terminated `word`: a spec's keyword.
inline bool equals(const char* begin, const char* end, const char* word) {
  const size_t n = strlen(word);
  return size_t(end - begin) == n && memcmp(begin, word, n) == 0;
}

// Decimal number: digits [ '.' digits ] [ ('e'|'E') [+-] digits ], or '.' digits; no sign, inf or
// nan. Exact to one rounding for up to 19 significant digits and |exponent| <= 22; exponents
// beyond +-60 are refused (no parameter lives there).
bool parse_decimal(const char* begin, const char* end, double* out);

// Appends text to a bounded buffer (caller-owned), counting the full length even when it does
// not fit.
struct Appender {
  char* buf;
  size_t cap;
  size_t len = 0;
  void put(char c) {
    if (len + 1 < cap) buf[len] = c;
    ++len;
  }
  void put(const char* str) {
    while (*str) put(*str++);
  }
  // NUL-terminates (truncating to cap) and returns the full length, excluding the NUL.
  size_t finish() {
    if (cap > 0) buf[len < cap ? len : cap - 1] = '\0';
    return len;
  }
  void put_uint(uint64_t v) {
    char tmp[24];
    int n = 0;
    do {
      tmp[n++] = char('0' + v % 10);
      v /= 10;
    } while (v);
    while (n) put(tmp[--n]);
  }
  // A non-negative float in the fewest significant digits (at most 9) that parse back to the
  // same binary32; scientific notation outside [1e-5, 1e9).
  void put_float(float f);
  // The same for a double (at most 17 significant digits).
  void put_double(double v);
  // Writes v rounded to `digits` significant digits into text (32 bytes, NUL-terminated);
  // returns the length.
  static size_t format_digits(double v, int digits, char* text);
};

}  // namespace text
}  // namespace edgefl

#endif  // EDGEFL_SRC_CORE_TEXT_H_
