#include "core/text.h"

namespace edgefl {
namespace text {

const double kPow10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                           1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

bool parse_decimal(const char* begin, const char* end, double* out) {
  const char* p = begin;
  uint64_t mantissa = 0;
  int digits = 0, exp10 = 0, significant = 0;
  bool any = false;
  while (p < end && *p >= '0' && *p <= '9') {
    any = true;
    if (significant < 19) {
      mantissa = mantissa * 10 + uint64_t(*p - '0');
      if (mantissa != 0) ++significant;
    } else {
      ++exp10;
    }
    ++p;
    ++digits;
  }
  if (p < end && *p == '.') {
    ++p;
    while (p < end && *p >= '0' && *p <= '9') {
      any = true;
      if (significant < 19) {
        mantissa = mantissa * 10 + uint64_t(*p - '0');
        if (mantissa != 0) ++significant;
        --exp10;
      }
      ++p;
    }
  }
  if (!any) return false;
  if (p < end && (*p == 'e' || *p == 'E')) {
    ++p;
    bool negative = false;
    if (p < end && (*p == '+' || *p == '-')) negative = (*p++ == '-');
    int e = 0;
    bool exp_digits = false;
    while (p < end && *p >= '0' && *p <= '9') {
      exp_digits = true;
      if (e < 1000) e = e * 10 + (*p - '0');
      ++p;
    }
    if (!exp_digits) return false;
    exp10 += negative ? -e : e;
  }
  if (p != end) return false;
  (void)digits;
  double v = double(mantissa);
  if (mantissa == 0) {
    *out = 0.0;
    return true;
  }
  if (exp10 < -60 || exp10 > 60) return false;  // no codec parameter lives out there
  while (exp10 > 22) {
    v *= 1e22;
    exp10 -= 22;
  }
  while (exp10 < -22) {
    v /= 1e22;
    exp10 += 22;
  }
  v = exp10 >= 0 ? v * kPow10[exp10] : v / kPow10[-exp10];
  *out = v;
  return true;
}

void Appender::put_float(float f) {
  char text[32];
  for (int digits = 1; digits <= 9; ++digits) {
    const size_t length = format_digits(f, digits, text);
    double back;
    if (parse_decimal(text, text + length, &back) && float(back) == f) break;
  }
  put(text);
}
void Appender::put_double(double v) {
  char text[32];
  for (int digits = 1; digits <= 17; ++digits) {
    const size_t length = format_digits(v, digits, text);
    double back;
    if (parse_decimal(text, text + length, &back) && back == v) break;
  }
  put(text);
}

size_t Appender::format_digits(double v, int digits, char* text) {
  Appender a{text, 32};
  if (v == 0.0) {
    a.put('0');
    a.buf[a.len] = '\0';
    return a.len;
  }
  int e10 = 0;
  double probe = v;
  while (probe >= 10.0) {
    probe /= 10.0;
    ++e10;
  }
  while (probe < 1.0) {
    probe *= 10.0;
    --e10;
  }
  const int shift = digits - 1 - e10;
  double scaled = v;
  int s = shift < 0 ? -shift : shift;
  while (s > 22) {
    scaled = shift < 0 ? scaled / 1e22 : scaled * 1e22;
    s -= 22;
  }
  scaled = shift < 0 ? scaled / kPow10[s] : scaled * kPow10[s];
  uint64_t mant = uint64_t(scaled + 0.5);
  if (mant >= uint64_t(kPow10[digits])) {
    mant /= 10;
    ++e10;
  }
  char d[17] = {};
  for (int i = digits - 1; i >= 0; --i) {
    d[i] = char('0' + mant % 10);
    mant /= 10;
  }
  int last = digits - 1;
  while (last > 0 && d[last] == '0') --last;
  if (e10 >= -5 && e10 < 9) {
    if (e10 < 0) {
      a.put("0.");
      for (int i = 0; i < -e10 - 1; ++i) a.put('0');
      for (int i = 0; i <= last; ++i) a.put(d[i]);
    } else {
      for (int i = 0; i <= e10; ++i) a.put(i <= last ? d[i] : '0');
      if (last > e10) {
        a.put('.');
        for (int i = e10 + 1; i <= last; ++i) a.put(d[i]);
      }
    }
  } else {
    a.put(d[0]);
    if (last > 0) {
      a.put('.');
      for (int i = 1; i <= last; ++i) a.put(d[i]);
    }
    a.put('e');
    if (e10 < 0) {
      a.put('-');
      e10 = -e10;
    }
    a.put_uint(uint64_t(e10));
  }
  a.buf[a.len < 31 ? a.len : 31] = '\0';
  return a.len;
}

}  // namespace text
}  // namespace edgefl
