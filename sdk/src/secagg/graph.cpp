#include "secagg/graph.h"

#include <math.h>

#include <algorithm>

namespace edgefl {
namespace secagg {
namespace {

constexpr double kSecurityBits = 40;     // statistical security: failure below 2^-40
constexpr double kCorrectnessBits = 20;  // the round fails with probability below 2^-20
constexpr double kRateSlack = 1e-14;     // keeps floor(rate * n) from rounding the unsafe way

double log_choose(double n, double k) {
  return lgamma(n + 1) - lgamma(k + 1) - lgamma(n - k + 1);
}

// The number of "marked" devices among k neighbours drawn from n devices of which `marked` are
// marked (hypergeometric).
struct Hypergeometric {
  double n, marked, draws;
  double lo() const { return std::max(0.0, draws - (n - marked)); }
  double hi() const { return std::min(draws, marked); }
  double pmf(double x) const {
    if (x < lo() || x > hi()) return 0;
    return exp(log_choose(marked, x) + log_choose(n - marked, draws - x) - log_choose(n, draws));
  }
  double cdf(double x) const {  // P(X <= x), summed from the lower end
    double sum = 0;
    for (double v = lo(); v <= std::min(x, hi()); ++v) sum += pmf(v);
    return sum;
  }
  double above(double x) const {  // P(X > x), summed from the upper end
    double sum = 0;
    for (double v = hi(); v > x && v >= lo(); --v) sum += pmf(v);
    return sum;
  }
};

// log P(the honest survivors of a random H(n, k) are disconnected): cutting the ring needs two
// runs of k/2 consecutive bad devices; n (n - k - 1) / 2 pairs of places, each bad with the
// probability that k given devices are among the `bad` ones.
double log_disconnected(double n, double k, double bad) {
  if (k > bad) return -HUGE_VAL;
  return log(n) + log(n - k - 1) - log(2.0) + lgamma(bad + 1) + lgamma(n - k + 1) - lgamma(n + 1) -
         lgamma(bad - k + 1);
}

// The threshold for degree k, or 0 if k does not qualify.
uint32_t threshold_for(uint32_t clients, uint32_t k, double adversarial, double dropout, ThreatModel threat) {
  const double n = clients;
  const double per_event = kSecurityBits + 1;  // the security budget is split over two events
  const double bad_adversarial = floor((adversarial + kRateSlack) * n);
  const double bad_dropout = floor((dropout + kRateSlack) * n);
  if (log_disconnected(n, k, bad_adversarial + bad_dropout) >= -per_event * log(2.0)) return 0;
  const double survivors = ceil((1 - dropout - kRateSlack) * n);
  const Hypergeometric adversarial_neighbours{n, bad_adversarial, double(k)};
  const Hypergeometric surviving_neighbours{n, survivors, double(k)};
  const double security = pow(2.0, -per_event) / n;
  const double correctness = pow(2.0, -kCorrectnessBits) / n;
  // t1: the smallest count of adversarial neighbours exceeded with probability <= security.
  double t1 = adversarial_neighbours.lo();
  while (adversarial_neighbours.above(t1) > security) ++t1;
  if (threat == ThreatModel::kSemiMaliciousServer) t1 = ceil((t1 + k - 1.25) / 2);
  // t2: the largest t with P(fewer than t surviving neighbours) <= correctness.
  double t2 = 0;
  while (t2 + 1 <= k && surviving_neighbours.cdf(t2) <= correctness) ++t2;
  const double t = std::max(t1 + 1, 2.0);
  return t <= t2 ? uint32_t(t) : 0;
}

}  // namespace

Status find_graph_parameters(uint32_t clients, double adversarial, double dropout, ThreatModel threat,
                             GraphParameters* out) {
  if (out == nullptr || clients < 3 || clients > kMaxClients || !(adversarial >= 0 && adversarial < 1) ||
      !(dropout >= 0 && dropout < 1)) {
    return Status::kInvalidArgument;
  }
  const double limit =
      threat == ThreatModel::kCuriousServer ? adversarial + dropout : adversarial + 2 * dropout;
  if (limit > 0.9) return Status::kUnsafeConfiguration;
  for (uint32_t k = 2; k < clients - 1; k += 2) {
    const uint32_t t = threshold_for(clients, k, adversarial, dropout, threat);
    if (t != 0) {
      *out = GraphParameters{clients, k, t};
      return Status::kOk;
    }
  }
  // The complete graph: each device has n - 1 neighbours, of which at most floor(adv n) are
  // adversarial and at least ceil((1 - drop) n) - 1 survive.
  const double n = clients;
  const double k = n - 1;
  double t1 = floor((adversarial + kRateSlack) * n);
  if (threat == ThreatModel::kSemiMaliciousServer) t1 = ceil((t1 + k - 1.25) / 2);
  const double t2 = ceil((1 - dropout - kRateSlack) * n) - 1;
  const double t = std::max(t1 + 1, 2.0);
  if (t > t2) return Status::kUnsafeConfiguration;
  *out = GraphParameters{clients, clients - 1, uint32_t(t)};
  return Status::kOk;
}

Status check_graph_parameters(const GraphParameters& p) {
  if (p.clients < 3 || p.clients > kMaxClients) return Status::kUnsafeConfiguration;
  const bool complete = p.degree == p.clients - 1;
  if (!complete && (p.degree < 2 || p.degree % 2 != 0 || p.degree >= p.clients - 1)) {
    return Status::kUnsafeConfiguration;
  }
  if (p.threshold < 2 || p.threshold > p.degree || p.threshold > kMaxThreshold)
    return Status::kUnsafeConfiguration;
  return Status::kOk;
}

Status HararyGraph::build(const GraphParameters& p, const Key32& seed) {
  EDGEFL_RETURN_IF_ERROR(check_graph_parameters(p));
  EDGEFL_RETURN_IF_ERROR(crypto_init());
  static const uint8_t kGraphNonce[kAeadNonceBytes] = {'e', 'd', 'g', 'e', 'f', 'l',
                                                       ' ', 'g', 'r', 'a', 'p', 'h'};
  MaskStream stream;
  EDGEFL_RETURN_IF_ERROR(stream.start(seed, kGraphNonce, 32));
  std::vector<uint32_t> at(p.clients);
  for (uint32_t i = 0; i < p.clients; ++i) at[i] = i;
  uint32_t words[64];
  size_t used = 64;
  for (uint32_t i = p.clients - 1; i > 0; --i) {
    // j uniform in [0, i]: rejection of the top partial range of 32-bit words
    const uint64_t range = uint64_t(i) + 1;
    const uint64_t limit = (uint64_t(1) << 32) - ((uint64_t(1) << 32) % range);
    uint32_t word;
    do {
      if (used == 64) {
        EDGEFL_RETURN_IF_ERROR(stream.next(words, 64));
        used = 0;
      }
      word = words[used++];
    } while (word >= limit);
    std::swap(at[i], at[uint32_t(word % range)]);
  }
  std::vector<uint32_t> position(p.clients);
  for (uint32_t r = 0; r < p.clients; ++r) position[at[r]] = r;
  p_ = p;
  at_ = std::move(at);
  position_ = std::move(position);
  return Status::kOk;
}

bool HararyGraph::adjacent(uint32_t a, uint32_t b) const {
  if (a == b || a >= p_.clients || b >= p_.clients) return false;
  if (p_.degree == p_.clients - 1) return true;
  const uint32_t d = position_[a] > position_[b] ? position_[a] - position_[b] : position_[b] - position_[a];
  return std::min(d, p_.clients - d) <= p_.degree / 2;
}

std::vector<uint32_t> HararyGraph::neighbours(uint32_t device) const {
  std::vector<uint32_t> out;
  if (device >= p_.clients) return out;
  out.reserve(p_.degree);
  if (p_.degree == p_.clients - 1) {
    for (uint32_t v = 0; v < p_.clients; ++v) {
      if (v != device) out.push_back(v);
    }
    return out;
  }
  const uint32_t half = p_.degree / 2;
  for (uint32_t d = 1; d <= half; ++d) {
    out.push_back(at_[(position_[device] + d) % p_.clients]);
    out.push_back(at_[(position_[device] + p_.clients - d) % p_.clients]);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace secagg
}  // namespace edgefl
