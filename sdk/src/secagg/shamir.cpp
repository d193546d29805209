#include "secagg/shamir.h"

#include <string.h>

#include <vector>

#include <mbedtls/platform_util.h>

#include "core/bitio.h"

namespace edgefl {
namespace secagg {
namespace {

constexpr uint32_t kSubsecretBits[kSubsecrets] = {31, 31, 31, 31, 31, 31, 31, 31, 8};

uint32_t mul(uint32_t a, uint32_t b) {
  return uint32_t(uint64_t(a) * b % kFieldPrime);
}
uint32_t add(uint32_t a, uint32_t b) {
  const uint64_t s = uint64_t(a) + b;
  return uint32_t(s >= kFieldPrime ? s - kFieldPrime : s);
}
uint32_t sub(uint32_t a, uint32_t b) {
  return a >= b ? a - b : uint32_t(uint64_t(a) + kFieldPrime - b);
}
uint32_t power(uint32_t base, uint32_t exponent) {
  uint32_t result = 1;
  while (exponent != 0) {
    if (exponent & 1) result = mul(result, base);
    base = mul(base, base);
    exponent >>= 1;
  }
  return result;
}
uint32_t inverse(uint32_t a) {  // a != 0 (Fermat: a^(p-2))
  return power(a, kFieldPrime - 2);
}

// Bit `i` of the secret read as a 256-bit little-endian number.
uint32_t subsecret(const Secret& secret, size_t j) {
  uint32_t value = 0;
  for (uint32_t b = 0; b < kSubsecretBits[j]; ++b) {
    const size_t bit = 31 * j + b;
    value |= uint32_t((secret[bit / 8] >> (bit % 8)) & 1u) << b;
  }
  return value;
}

bool set_subsecret(Secret* secret, size_t j, uint32_t value) {
  if (value >> kSubsecretBits[j] != 0) return false;
  for (uint32_t b = 0; b < kSubsecretBits[j]; ++b) {
    const size_t bit = 31 * j + b;
    (*secret)[bit / 8] = uint8_t((*secret)[bit / 8] | (((value >> b) & 1u) << (bit % 8)));
  }
  return true;
}

bool valid_x(uint32_t x) {
  return x >= 1 && x <= kMaxHolders;
}

// Draws `count` field elements uniformly (rejection sampling of 32-bit words).
Status uniform_elements(RandomSource random, uint32_t* out, size_t count) {
  uint8_t block[256];
  size_t have = 0, used = sizeof block;
  Status status = Status::kOk;
  while (have < count) {
    if (used == sizeof block) {
      status = random.fill(random.context, block, sizeof block);
      if (status != Status::kOk) break;
      used = 0;
    }
    uint32_t word;
    memcpy(&word, block + used, 4);
    used += 4;
    if (word < kFieldPrime) out[have++] = word;
  }
  mbedtls_platform_zeroize(block, sizeof block);
  return status;
}

// Lagrange weights w[i] of the points xs[0..t) at `at`: P(at) = sum of w[i] * P(xs[i]).
// Denominators are inverted together (Montgomery's trick: one field inversion). `scratch`
// holds t words.
void lagrange_weights(const uint32_t* xs, uint32_t t, uint32_t at, uint32_t* w, uint32_t* scratch) {
  for (uint32_t i = 0; i < t; ++i) {
    uint32_t den = 1;
    for (uint32_t j = 0; j < t; ++j) {
      if (j != i) den = mul(den, sub(xs[i], xs[j]));
    }
    w[i] = den;
  }
  // prefix products, one inversion, then back
  uint32_t running = 1;
  for (uint32_t i = 0; i < t; ++i) {
    scratch[i] = running;
    running = mul(running, w[i]);
  }
  uint32_t inv = inverse(running);
  for (uint32_t i = t; i-- > 0;) {
    const uint32_t den_inverse = mul(inv, scratch[i]);
    inv = mul(inv, w[i]);
    w[i] = den_inverse;
  }
  for (uint32_t i = 0; i < t; ++i) {
    uint32_t num = 1;
    for (uint32_t j = 0; j < t; ++j) {
      if (j != i) num = mul(num, sub(at % kFieldPrime, xs[j]));
    }
    w[i] = mul(w[i], num);
  }
}

// The checks every reconstruction makes on its input shares: x in range and distinct, y in the field.
bool shares_well_formed(Span<const Share> shares) {
  for (size_t i = 0; i < shares.size(); ++i) {
    if (!valid_x(shares[i].x)) return false;
    for (size_t s = 0; s < kSubsecrets; ++s) {
      if (shares[i].y[s] >= kFieldPrime) return false;
    }
    for (size_t j = 0; j < i; ++j) {
      if (shares[j].x == shares[i].x) return false;
    }
  }
  return true;
}

// Berlekamp-Welch: the polynomial P (k coefficients into p) that agrees with all but at most e of
// the m >= k + 2e points (x[i], y[i]). Unknowns: Q of degree < e + k and the monic error locator E
// of degree e, with Q(x[i]) = y[i] E(x[i]) for every i; then P = Q / E. false when no such P
// exists (more than e points are wrong). `a` is scratch (m rows of e + k + e + 1 words).
bool berlekamp_welch(const uint32_t* x, const uint32_t* y, uint32_t m, uint32_t k, uint32_t e,
                     std::vector<uint32_t>* a, uint32_t* p) {
  const uint32_t nq = e + k, cols = nq + e, stride = cols + 1;
  a->assign(size_t(m) * stride, 0);
  for (uint32_t i = 0; i < m; ++i) {
    uint32_t* row = a->data() + size_t(i) * stride;
    uint32_t power_of_x = 1;  // x^j
    for (uint32_t j = 0; j < nq; ++j) {
      row[j] = power_of_x;
      if (j < e) row[nq + j] = sub(0, mul(y[i], power_of_x));
      if (j == e) row[cols] = mul(y[i], power_of_x);
      power_of_x = mul(power_of_x, x[i]);
    }
  }
  // Gauss-Jordan elimination; free unknowns are 0.
  std::vector<uint32_t> pivot_column;
  uint32_t rank = 0;
  for (uint32_t c = 0; c < cols && rank < m; ++c) {
    uint32_t r = rank;
    while (r < m && (*a)[size_t(r) * stride + c] == 0) ++r;
    if (r == m) continue;
    uint32_t* pivot = a->data() + size_t(rank) * stride;
    if (r != rank) {
      uint32_t* other = a->data() + size_t(r) * stride;
      for (uint32_t j = 0; j < stride; ++j) std::swap(pivot[j], other[j]);
    }
    const uint32_t scale = inverse(pivot[c]);
    for (uint32_t j = c; j < stride; ++j) pivot[j] = mul(pivot[j], scale);
    for (uint32_t i = 0; i < m; ++i) {
      uint32_t* row = a->data() + size_t(i) * stride;
      if (i == rank || row[c] == 0) continue;
      const uint32_t factor = row[c];
      for (uint32_t j = c; j < stride; ++j) row[j] = sub(row[j], mul(factor, pivot[j]));
    }
    pivot_column.push_back(c);
    ++rank;
  }
  for (uint32_t i = rank; i < m; ++i) {
    if ((*a)[size_t(i) * stride + cols] != 0) {  // inconsistent
      mbedtls_platform_zeroize(a->data(), a->size() * 4);
      return false;
    }
  }
  std::vector<uint32_t> solution(cols + 1, 0);
  for (uint32_t i = 0; i < rank; ++i) solution[pivot_column[i]] = (*a)[size_t(i) * stride + cols];
  // E: solution[nq .. nq + e) and a leading 1. Q / E by long division; the remainder must vanish.
  std::vector<uint32_t> rem(solution.begin(), solution.begin() + nq);
  solution[cols] = 1;
  const uint32_t* locator = solution.data() + nq;  // e + 1 coefficients, monic
  for (uint32_t d = nq; d-- > e;) {
    const uint32_t coefficient = rem[d];
    p[d - e] = coefficient;
    for (uint32_t j = 0; j <= e; ++j) rem[d - e + j] = sub(rem[d - e + j], mul(coefficient, locator[j]));
  }
  bool divides = true;
  for (uint32_t j = 0; j < e; ++j) divides = divides && rem[j] == 0;
  mbedtls_platform_zeroize(solution.data(), solution.size() * 4);  // Q and E: P = Q / E
  mbedtls_platform_zeroize(rem.data(), rem.size() * 4);
  return divides;
}

}  // namespace

Status shamir_split(const Secret& secret, uint32_t threshold, Span<const uint32_t> holders,
                    RandomSource random, Span<Share> out) {
  if (random.fill == nullptr || out.size() != holders.size() || threshold < 2 || threshold > kMaxThreshold ||
      threshold > holders.size()) {
    return Status::kInvalidArgument;
  }
  for (size_t i = 0; i < holders.size(); ++i) {
    if (!valid_x(holders[i])) return Status::kBadShare;
    for (size_t j = 0; j < i; ++j) {
      if (holders[j] == holders[i]) return Status::kBadShare;
    }
  }
  uint32_t coefficients[kMaxThreshold];  // c[1..t-1] of one sub-secret's polynomial
  for (size_t s = 0; s < kSubsecrets; ++s) {
    const Status status = uniform_elements(random, coefficients + 1, threshold - 1);
    if (status != Status::kOk) {
      mbedtls_platform_zeroize(coefficients, sizeof coefficients);
      mbedtls_platform_zeroize(out.data(), out.size() * sizeof(Share));
      return status;
    }
    coefficients[0] = subsecret(secret, s);
    for (size_t h = 0; h < holders.size(); ++h) {
      uint32_t y = 0;  // Horner
      for (uint32_t k = threshold; k-- > 0;) y = add(mul(y, holders[h]), coefficients[k]);
      out[h].x = holders[h];
      out[h].y[s] = y;
    }
  }
  mbedtls_platform_zeroize(coefficients, sizeof coefficients);
  return Status::kOk;
}

Status shamir_reconstruct(Span<const Share> shares, uint32_t threshold, Secret* secret) {
  if (secret == nullptr || threshold < 2 || threshold > kMaxThreshold) return Status::kInvalidArgument;
  secret->fill(0);
  if (shares.size() < threshold) return Status::kTooFewSurvivors;
  if (!shares_well_formed(shares)) return Status::kBadShare;
  uint32_t xs[kMaxThreshold], weights[kMaxThreshold], scratch[kMaxThreshold];
  for (uint32_t i = 0; i < threshold; ++i) xs[i] = shares[i].x;
  lagrange_weights(xs, threshold, 0, weights, scratch);
  uint32_t values[kSubsecrets];
  for (size_t s = 0; s < kSubsecrets; ++s) {
    uint32_t v = 0;
    for (uint32_t i = 0; i < threshold; ++i) v = add(v, mul(weights[i], shares[i].y[s]));
    values[s] = v;
  }
  Status status = Status::kOk;
  for (size_t e = threshold; e < shares.size() && status == Status::kOk; ++e) {
    lagrange_weights(xs, threshold, shares[e].x, weights, scratch);
    for (size_t s = 0; s < kSubsecrets; ++s) {
      uint32_t v = 0;
      for (uint32_t i = 0; i < threshold; ++i) v = add(v, mul(weights[i], shares[i].y[s]));
      if (v != shares[e].y[s]) status = Status::kBadShare;
    }
  }
  for (size_t s = 0; s < kSubsecrets && status == Status::kOk; ++s) {
    if (!set_subsecret(secret, s, values[s])) status = Status::kBadShare;
  }
  mbedtls_platform_zeroize(values, sizeof values);
  mbedtls_platform_zeroize(weights, sizeof weights);
  if (status != Status::kOk) secret->fill(0);
  return status;
}

Status shamir_decode(Span<const Share> shares, uint32_t threshold, Secret* secret, Span<uint8_t> wrong) {
  if (secret == nullptr || threshold < 2 || threshold > kMaxThreshold ||
      (!wrong.empty() && wrong.size() != shares.size())) {
    return Status::kInvalidArgument;
  }
  secret->fill(0);
  for (uint8_t& flag : wrong) flag = 0;
  if (shares.size() < threshold) return Status::kTooFewSurvivors;
  if (!shares_well_formed(shares)) return Status::kBadShare;
  const uint32_t m = uint32_t(shares.size()), e = (m - threshold) / 2;
  std::vector<uint32_t> xs(m), ys(m), scratch, p(threshold);
  for (uint32_t i = 0; i < m; ++i) xs[i] = shares[i].x;
  Status status = Status::kOk;
  for (size_t s = 0; s < kSubsecrets && status == Status::kOk; ++s) {
    for (uint32_t i = 0; i < m; ++i) ys[i] = shares[i].y[s];
    if (!berlekamp_welch(xs.data(), ys.data(), m, threshold, e, &scratch, p.data())) {
      status = Status::kBadShare;
      break;
    }
    uint32_t off = 0;
    for (uint32_t i = 0; i < m; ++i) {
      uint32_t v = 0;  // Horner
      for (uint32_t j = threshold; j-- > 0;) v = add(mul(v, xs[i]), p[j]);
      if (v != ys[i]) {
        ++off;
        if (!wrong.empty()) wrong[i] = 1;
      }
    }
    if (off > e || !set_subsecret(secret, s, p[0])) status = Status::kBadShare;
  }
  mbedtls_platform_zeroize(p.data(), p.size() * 4);
  mbedtls_platform_zeroize(ys.data(), ys.size() * 4);
  if (!scratch.empty()) mbedtls_platform_zeroize(scratch.data(), scratch.size() * 4);
  if (status != Status::kOk) {
    secret->fill(0);
    for (uint8_t& flag : wrong) flag = 0;
  }
  return status;
}

Status shamir_off_polynomial(Span<const Share> shares, uint32_t threshold, Span<uint8_t> off) {
  if (threshold < 2 || threshold > kMaxThreshold || off.size() != shares.size())
    return Status::kInvalidArgument;
  for (uint8_t& flag : off) flag = 0;
  if (shares.size() < threshold) return Status::kTooFewSurvivors;
  if (!shares_well_formed(shares)) return Status::kBadShare;
  uint32_t xs[kMaxThreshold], weights[kMaxThreshold], scratch[kMaxThreshold];
  for (uint32_t i = 0; i < threshold; ++i) xs[i] = shares[i].x;
  for (size_t e = threshold; e < shares.size(); ++e) {
    lagrange_weights(xs, threshold, shares[e].x, weights, scratch);
    for (size_t s = 0; s < kSubsecrets; ++s) {
      uint32_t v = 0;
      for (uint32_t i = 0; i < threshold; ++i) v = add(v, mul(weights[i], shares[i].y[s]));
      if (v != shares[e].y[s]) off[e] = 1;
    }
  }
  mbedtls_platform_zeroize(weights, sizeof weights);
  return Status::kOk;
}

void shamir_share_to_bytes(const Share& share, uint8_t out[kShareBytes]) {
  store_le32(out, share.x);
  for (size_t s = 0; s < kSubsecrets; ++s) store_le32(out + 4 + 4 * s, share.y[s]);
}

Status shamir_share_from_bytes(const uint8_t in[kShareBytes], Share* share) {
  Share s;
  s.x = load_le32(in);
  if (!valid_x(s.x)) return Status::kBadShare;
  for (size_t k = 0; k < kSubsecrets; ++k) {
    s.y[k] = load_le32(in + 4 + 4 * k);
    if (s.y[k] >= kFieldPrime) return Status::kBadShare;
  }
  *share = s;
  return Status::kOk;
}

}  // namespace secagg
}  // namespace edgefl
