// Seeded client partitions (IID, Dirichlet label skew, shards) and their spec strings.
//
// Portability: std::shuffle and the std:: distributions are implementation-defined (libstdc++,
// libc++ and MSVC give different results for one seed), and libm's log/exp may differ in the last
// bit between C libraries. Everything random here is therefore explicit: SplitMix64 for bits,
// Lemire's unbiased bounded integers, Fisher-Yates, the Marsaglia polar method for normals,
// Marsaglia-Tsang for gammas, and a log/exp built from + - * / and exact scaling only. With IEEE
// binary64 and no contraction (data.cmake passes -ffp-contract=off), a seed gives the same
// partition on every platform; a golden test pins it.
#include <stdint.h>

#include <algorithm>
#include <cmath>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "core/text.h"
#include "edgefl/data.h"

namespace edgefl {

namespace {

// ----- random numbers ----------------------------------------------------------------------------

// The core's SplitMix64 (core/rng.h) with an exactly uniform bounded draw and open-unit doubles.
class PartitionRng {
 public:
  explicit PartitionRng(uint64_t seed) : generator_(seed) {}
  uint64_t next() { return generator_.next(); }
  // Uniform in [0, bound), exactly (Lemire, "Fast random integer generation in an interval",
  // ACM TOMACS 2019: multiply-shift with rejection of the biased low products).
  uint32_t below(uint32_t bound) {
    uint64_t m = uint64_t(uint32_t(next() >> 32)) * bound;
    uint32_t low = uint32_t(m);
    if (low < bound) {
      const uint32_t threshold = uint32_t(-bound) % bound;
      while (low < threshold) {
        m = uint64_t(uint32_t(next() >> 32)) * bound;
        low = uint32_t(m);
      }
    }
    return uint32_t(m >> 32);
  }
  // Uniform in the open interval (0, 1), 53 random bits.
  double open_unit() { return (double(next() >> 11) + 0.5) * 0x1.0p-53; }

 private:
  edgefl::SplitMix64 generator_;
};

// Natural log of x > 0 (finite): x = m 2^e with m in [sqrt(1/2), sqrt(2)), then
// ln m = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), s = (m - 1) / (m + 1), |s| <= 0.1716; 13 terms
// reach 2^-60. ln 2 is split (fdlibm's ln2_hi has 32 trailing zero bits, so e * ln2_hi is exact).
// Error below 2 ulp; deterministic because every step is one IEEE operation.
double det_log(double x) {
  constexpr double kLn2Hi = 6.93147180369123816490e-01;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  int e = 0;
  double m = std::frexp(x, &e);  // exact: m in [0.5, 1)
  if (m < 0.70710678118654752440) {
    m *= 2.0;  // exact
    --e;
  }
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  double series = 1.0 / 25.0;
  for (int k = 11; k >= 0; --k) series = 1.0 / double(2 * k + 1) + s2 * series;
  const double ln_m = 2.0 * s * series;
  return double(e) * kLn2Hi + (ln_m + double(e) * kLn2Lo);
}

// e^x for x <= 709: x = k ln2 + r, |r| <= ln2 / 2, Taylor series to r^17 / 17!, then exact
// scaling by 2^k (gradual underflow to 0 below about -745).
double det_exp(double x) {
  constexpr double kLn2Hi = 6.93147180369123816490e-01;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  constexpr double kInvLn2 = 1.44269504088896338700e+00;
  if (x < -760.0) return 0.0;
  const double k = std::floor(x * kInvLn2 + 0.5);
  const double r = (x - k * kLn2Hi) - k * kLn2Lo;
  double p = 1.0;
  for (int i = 17; i >= 1; --i) p = 1.0 + p * r / double(i);
  return std::ldexp(p, int(k));
}

// Standard normal: Marsaglia's polar method (Marsaglia & Bray, SIAM Review 1964).
double normal(PartitionRng& rng) {
  for (;;) {
    const double u = 2.0 * rng.open_unit() - 1.0;
    const double v = 2.0 * rng.open_unit() - 1.0;
    const double s = u * u + v * v;
    if (s >= 1.0 || s == 0.0) continue;
    return u * std::sqrt(-2.0 * det_log(s) / s);  // sqrt is correctly rounded (IEEE 754)
  }
}

// log of a Gamma(alpha, 1) variate. Marsaglia & Tsang, "A simple method for generating gamma
// variables", ACM TOMS 26(3), 2000: for alpha >= 1 directly; for alpha < 1 through
// Gamma(alpha) = Gamma(alpha + 1) * U^(1/alpha), kept in log space so that tiny alphas (whose
// variates underflow binary64) still give usable proportions.
double log_gamma_variate(double alpha, PartitionRng& rng) {
  const double a = alpha < 1.0 ? alpha + 1.0 : alpha;
  const double d = a - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  double log_g = 0.0;
  for (;;) {
    const double x = normal(rng);
    double v = 1.0 + c * x;
    if (v <= 0.0) continue;
    v = v * v * v;
    const double u = rng.open_unit();
    const double x2 = x * x;
    if (u < 1.0 - 0.0331 * x2 * x2) {
      log_g = det_log(d * v);
      break;
    }
    if (det_log(u) < 0.5 * x2 + d * (1.0 - v + det_log(v))) {
      log_g = det_log(d * v);
      break;
    }
  }
  if (alpha < 1.0) log_g += det_log(rng.open_unit()) / alpha;
  return log_g;
}

// p ~ Dirichlet(alpha, ..., alpha) of size n: normalized gammas, computed from their logs.
void dirichlet(double alpha, size_t n, PartitionRng& rng, std::vector<double>* p) {
  p->resize(n);
  double max_log = -HUGE_VAL;
  for (size_t j = 0; j < n; ++j) {
    (*p)[j] = log_gamma_variate(alpha, rng);
    max_log = std::max(max_log, (*p)[j]);
  }
  double sum = 0.0;
  for (size_t j = 0; j < n; ++j) {
    (*p)[j] = det_exp((*p)[j] - max_log);  // the largest is exactly 1, so sum >= 1
    sum += (*p)[j];
  }
  for (size_t j = 0; j < n; ++j) (*p)[j] /= sum;
}

template <typename T>
void fisher_yates(std::vector<T>* v, PartitionRng& rng) {
  for (size_t i = v->size(); i > 1; --i) {
    const size_t j = rng.below(uint32_t(i));
    std::swap((*v)[i - 1], (*v)[j]);
  }
}

// Distinct streams for the partition kinds, so that one seed gives unrelated draws.
uint64_t stream_seed(uint64_t seed, PartitionKind kind) {
  return seed ^ (0xD1B54A32D192ED03ull * (uint64_t(kind) + 1));
}

constexpr double kMinAlpha = 1e-3;
constexpr double kMaxAlpha = 1e6;
constexpr uint32_t kMaxShards = 1000000;

bool parse_decimal(const std::string& text, double* out) {
  return text::parse_decimal(text.data(), text.data() + text.size(), out);
}

// The shortest spelling that parse_decimal() reads back as `v` (v finite, > 0).
std::string format_decimal(double v) {
  char buf[32];
  text::Appender a{buf, sizeof buf};
  a.put_double(v);
  a.finish();
  return buf;
}

bool spec_error(std::string* error, const std::string& message) {
  if (error != nullptr) *error = message;
  return false;
}

bool check_spec(const PartitionSpec& spec, std::string* error) {
  switch (spec.kind) {
    case PartitionKind::kIid: return true;
    case PartitionKind::kDirichlet:
      if (spec.alpha >= kMinAlpha && spec.alpha <= kMaxAlpha) return true;
      return spec_error(error, "dirichlet alpha must be in [0.001, 1e6], got " + std::to_string(spec.alpha));
    case PartitionKind::kShards:
      if (spec.shards_per_client >= 1 && spec.shards_per_client <= kMaxShards) return true;
      return spec_error(
          error, "shards per client must be in [1, 1000000], got " + std::to_string(spec.shards_per_client));
  }
  return spec_error(error, "unknown partition kind");
}

// ----- the three schemes -------------------------------------------------------------------------

using Partition = std::vector<std::vector<uint32_t>>;

Partition partition_iid(size_t count, size_t clients, PartitionRng& rng) {
  std::vector<uint32_t> order(count);
  for (size_t i = 0; i < count; ++i) order[i] = uint32_t(i);
  fisher_yates(&order, rng);
  Partition parts(clients);
  const size_t base = count / clients, extra = count % clients;
  size_t at = 0;
  for (size_t c = 0; c < clients; ++c) {
    const size_t size = base + (c < extra ? 1 : 0);
    parts[c].assign(order.begin() + at, order.begin() + at + size);
    at += size;
  }
  return parts;
}

Partition partition_dirichlet(const std::vector<uint8_t>& labels, size_t clients, double alpha,
                              PartitionRng& rng) {
  std::vector<std::vector<uint32_t>> by_class(256);
  for (size_t i = 0; i < labels.size(); ++i) by_class[labels[i]].push_back(uint32_t(i));
  Partition parts(clients);
  std::vector<double> p;
  for (auto& members : by_class) {
    if (members.empty()) continue;
    fisher_yates(&members, rng);
    dirichlet(alpha, clients, rng, &p);
    const size_t n = members.size();
    double cumulative = 0.0;
    size_t begin = 0;
    for (size_t j = 0; j < clients; ++j) {
      cumulative += p[j];
      size_t end = j + 1 == clients ? n : size_t(cumulative * double(n));
      end = std::min(std::max(end, begin), n);
      parts[j].insert(parts[j].end(), members.begin() + begin, members.begin() + end);
      begin = end;
    }
  }
  // Every client gets at least one sample: an empty client takes the most recently assigned
  // sample of the currently largest client (lowest index among equals). The heap's keys are
  // distinct, so its order is the same in every standard library.
  std::priority_queue<std::pair<size_t, size_t>> largest;  // (size, clients - 1 - index)
  for (size_t c = 0; c < clients; ++c) largest.push({parts[c].size(), clients - 1 - c});
  for (size_t c = 0; c < clients; ++c) {
    if (!parts[c].empty()) continue;
    for (;;) {
      const auto top = largest.top();
      largest.pop();
      const size_t donor = clients - 1 - top.second;
      if (parts[donor].size() != top.first) continue;  // stale entry
      parts[c].push_back(parts[donor].back());
      parts[donor].pop_back();
      largest.push({parts[donor].size(), top.second});
      largest.push({1, clients - 1 - c});
      break;
    }
  }
  return parts;
}

Partition partition_shards(const std::vector<uint8_t>& labels, size_t clients, uint32_t k,
                           PartitionRng& rng) {
  // Stable counting sort by label: ties keep index order.
  size_t start[257] = {};
  for (uint8_t l : labels) ++start[size_t(l) + 1];
  for (size_t c = 1; c <= 256; ++c) start[c] += start[c - 1];
  std::vector<uint32_t> sorted(labels.size());
  for (size_t i = 0; i < labels.size(); ++i) sorted[start[labels[i]]++] = uint32_t(i);

  const size_t shards = clients * k;
  std::vector<uint32_t> shard_order(shards);
  for (size_t s = 0; s < shards; ++s) shard_order[s] = uint32_t(s);
  fisher_yates(&shard_order, rng);
  const size_t n = labels.size();
  Partition parts(clients);
  for (size_t c = 0; c < clients; ++c) {
    for (size_t t = 0; t < k; ++t) {
      const size_t s = shard_order[c * k + t];
      // Shard s is [floor(s n / S), floor((s + 1) n / S)): sizes differ by at most 1. No
      // overflow: s < S <= n < 2^32.
      const size_t begin = size_t(uint64_t(s) * n / shards);
      const size_t end = size_t(uint64_t(s + 1) * n / shards);
      parts[c].insert(parts[c].end(), sorted.begin() + begin, sorted.begin() + end);
    }
  }
  return parts;
}

}  // namespace

bool parse_partition_spec(const std::string& text, PartitionSpec* spec, std::string* error) {
  if (spec == nullptr) return spec_error(error, "parse_partition_spec: spec is null");
  const std::string usage = " (expected iid, dirichlet:ALPHA or shards:K)";
  PartitionSpec s;
  const size_t colon = text.find(':');
  const std::string name = text.substr(0, colon);
  const std::string arg = colon == std::string::npos ? std::string() : text.substr(colon + 1);
  if (name == "iid") {
    if (colon != std::string::npos)
      return spec_error(error, "'" + text + "': iid takes no parameter" + usage);
    s.kind = PartitionKind::kIid;
  } else if (name == "dirichlet") {
    s.kind = PartitionKind::kDirichlet;
    double alpha = 0.0;
    if (!parse_decimal(arg, &alpha)) {
      return spec_error(error, "'" + text + "': dirichlet needs a decimal alpha, e.g. dirichlet:0.5");
    }
    s.alpha = alpha;
  } else if (name == "shards") {
    s.kind = PartitionKind::kShards;
    uint64_t k = 0;
    bool ok = !arg.empty() && arg.size() <= 10;
    for (char c : arg) {
      ok = ok && c >= '0' && c <= '9';
      if (ok) k = k * 10 + uint64_t(c - '0');
    }
    if (!ok || k > UINT32_MAX) {
      return spec_error(error, "'" + text + "': shards needs an integer count per client, e.g. shards:2");
    }
    s.shards_per_client = uint32_t(k);
  } else {
    return spec_error(error, "'" + text + "': unknown partition" + usage);
  }
  std::string why;
  if (!check_spec(s, &why)) return spec_error(error, "'" + text + "': " + why);
  *spec = s;
  return true;
}

std::string format_partition_spec(const PartitionSpec& spec) {
  switch (spec.kind) {
    case PartitionKind::kIid: return "iid";
    case PartitionKind::kDirichlet: return "dirichlet:" + format_decimal(spec.alpha);
    case PartitionKind::kShards: return "shards:" + std::to_string(spec.shards_per_client);
  }
  return "unknown";
}

std::vector<std::vector<uint32_t>> partition(const std::vector<uint8_t>& labels, size_t clients,
                                             const PartitionSpec& spec, uint64_t seed, std::string* error) {
  const size_t n = labels.size();
  std::string why;
  if (!check_spec(spec, &why)) {
    spec_error(error, "partition: " + why);
    return {};
  }
  if (clients == 0) {
    spec_error(error, "partition: clients must be at least 1");
    return {};
  }
  if (n > UINT32_MAX) {
    spec_error(error, "partition: more than 2^32 - 1 samples");
    return {};
  }
  if (n < clients) {
    spec_error(error, "partition: " + std::to_string(n) + " samples cannot give each of " +
                          std::to_string(clients) + " clients at least one");
    return {};
  }
  if (spec.kind == PartitionKind::kShards && spec.shards_per_client > n / clients) {
    spec_error(error, "partition: " + std::to_string(n) + " samples cannot make " + std::to_string(clients) +
                          " x " + std::to_string(spec.shards_per_client) + " non-empty shards");
    return {};
  }
  PartitionRng rng(stream_seed(seed, spec.kind));
  Partition parts;
  switch (spec.kind) {
    case PartitionKind::kIid: parts = partition_iid(n, clients, rng); break;
    case PartitionKind::kDirichlet: parts = partition_dirichlet(labels, clients, spec.alpha, rng); break;
    case PartitionKind::kShards:
      parts = partition_shards(labels, clients, spec.shards_per_client, rng);
      break;
  }
  for (auto& part : parts) std::sort(part.begin(), part.end());
  return parts;
}

std::vector<size_t> label_histogram(const std::vector<uint8_t>& labels, const std::vector<uint32_t>& indices,
                                    size_t num_classes) {
  std::vector<size_t> h(num_classes, 0);
  for (uint32_t i : indices) {
    if (i < labels.size() && labels[i] < num_classes) ++h[labels[i]];
  }
  return h;
}

}  // namespace edgefl
