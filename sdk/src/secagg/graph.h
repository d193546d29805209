// SecAgg+'s communication graph (Bell, Bonawitz, Gascón, Lepoint, Raykova, CCS 2020): each device
// masks with, and shares its secrets among, only its k neighbours in a random Harary graph
// H(n, k) (the n devices on a ring in a random order, each joined to the k/2 nearest on either
// side), with Shamir threshold t among the neighbours; the complete graph (k = n - 1) is the
// original SecAgg (Bonawitz et al., CCS 2017).
//
// find_graph_parameters() chooses the smallest even k (and its t) that keeps, for n devices of
// which a fraction `adversarial` collude with the server and a fraction `dropout` drop out:
//   - security with probability 1 - 2^-40: the graph of honest surviving devices stays connected
//     (a union bound over the ways of cutting the ring twice with k/2 consecutive bad devices),
//     and no device has t or more adversarial neighbours (a hypergeometric tail, union bound over
//     the n devices); against a semi-malicious server also 2t - k above that tail;
//   - correctness with probability 1 - 2^-20: every device keeps at least t surviving neighbours.
// This is the analysis of Bell et al. §4 as Google FCP's parameter finder implements it
// (fcp/secagg/server/graph_parameter_finder.cc); shared/reference/security.md §1.1 has its table.
// When no k < n - 1 qualifies (small cohorts), the complete graph is used with the threshold
// that both threat models need; when even that fails, the configuration is refused.
#ifndef EDGEFL_SRC_SECAGG_GRAPH_H_
#define EDGEFL_SRC_SECAGG_GRAPH_H_

#include <stdint.h>

#include <vector>

#include "edgefl/span.h"
#include "edgefl/status.h"
#include "secagg/crypto.h"

namespace edgefl {
namespace secagg {

enum class ThreatModel : uint8_t {
  kCuriousServer = 0,        // the server follows the protocol and tries to learn inputs
  kSemiMaliciousServer = 1,  // the server may lie about who dropped out
};

struct GraphParameters {
  uint32_t clients = 0;    // n
  uint32_t degree = 0;     // k: even, or n - 1 for the complete graph
  uint32_t threshold = 0;  // t: shares needed to recover a secret, 2 <= t <= k
};

constexpr uint32_t kMaxClients = 1u << 20;

// Fails with kUnsafeConfiguration when no graph meets the bounds above (e.g. adversarial +
// dropout > 0.9 for a curious server, adversarial + 2 dropout > 0.9 for a semi-malicious one,
// or a cohort too small to survive the dropouts), kInvalidArgument for n outside 3 .. kMaxClients
// or rates outside [0, 1).
[[nodiscard]] Status find_graph_parameters(uint32_t clients, double adversarial, double dropout,
                                           ThreatModel threat, GraphParameters* out);

// Checks parameters received from elsewhere (a device checks the server's): n in 3 ..
// kMaxClients, k even and 2 <= k < n - 1 or k = n - 1, 2 <= t <= k. kUnsafeConfiguration if not.
[[nodiscard]] Status check_graph_parameters(const GraphParameters& p);

// The random Harary graph of the parameters: the ring order is a Fisher-Yates shuffle driven by
// the ChaCha20 keystream of `seed` (so every device and the server build the same graph).
class HararyGraph {
 public:
  [[nodiscard]] Status build(const GraphParameters& p, const Key32& seed);
  bool adjacent(uint32_t a, uint32_t b) const;
  // The neighbours of `device` in increasing index order (k of them).
  std::vector<uint32_t> neighbours(uint32_t device) const;
  uint32_t clients() const { return p_.clients; }
  uint32_t degree() const { return p_.degree; }

 private:
  GraphParameters p_;
  std::vector<uint32_t> position_;  // ring position of each device
  std::vector<uint32_t> at_;        // device at each ring position
};

}  // namespace secagg
}  // namespace edgefl

#endif  // EDGEFL_SRC_SECAGG_GRAPH_H_
