// tests/secagg/graph_test.cpp: SecAgg+'s graph parameters (sdk/src/secagg/graph.h) against the
// table of shared/reference/security.md §1.1 (its bold rows are Google FCP's own test values),
// refusals of infeasible threat models, and the random Harary graph.
#include <set>
#include <vector>

#include <doctest/doctest.h>

#include "secagg/graph.h"

namespace {

using edgefl::Status;
using namespace edgefl::secagg;

GraphParameters find(uint32_t n, double adversarial, double dropout, ThreatModel threat) {
  GraphParameters p;
  REQUIRE(find_graph_parameters(n, adversarial, dropout, threat, &p) == Status::kOk);
  CHECK(check_graph_parameters(p) == Status::kOk);
  return p;
}

Key32 seed_of(uint8_t b) {
  Key32 k;
  k.fill(b);
  return k;
}

}  // namespace

TEST_SUITE("secagg.graph") {
  TEST_CASE("the parameter finder reproduces the reference table") {
    struct Row {
      uint32_t n;
      double adversarial, dropout;
      ThreatModel threat;
      uint32_t k, t;
    };
    const ThreatModel curious = ThreatModel::kCuriousServer, malicious = ThreatModel::kSemiMaliciousServer;
    const Row rows[] = {
        {100, 0.05, 0.33, curious, 28, 6},    {1000, 0.05, 0.33, curious, 72, 24},
        {100, 0.05, 0.33, malicious, 72, 39}, {1000, 0.05, 0.33, malicious, 398, 223},
        {100, 0.05, 0.30, curious, 26, 6},    {500, 0.05, 0.30, curious, 58, 20},
        {300, 0.10, 0.30, curious, 66, 26},   {200, 0.05, 0.30, malicious, 116, 64},
    };
    for (const Row& r : rows) {
      CAPTURE(r.n);
      CAPTURE(r.adversarial);
      CAPTURE(r.dropout);
      const GraphParameters p = find(r.n, r.adversarial, r.dropout, r.threat);
      CHECK(p.clients == r.n);
      CHECK(p.degree == r.k);
      CHECK(p.threshold == r.t);
    }
  }

  TEST_CASE("small cohorts: a ring when one qualifies, else the complete graph; infeasible models refused") {
    const GraphParameters p = find(10, 0.0, 0.3, ThreatModel::kCuriousServer);
    CHECK(p.degree == 6);
    CHECK(p.threshold == 2);
    const GraphParameters m = find(10, 0.1, 0.3, ThreatModel::kSemiMaliciousServer);
    CHECK(m.degree == 8);
    CHECK(m.threshold == 5);
    CHECK(2 * m.threshold > m.degree + 1);  // no device is asked for both secrets by t devices
    const GraphParameters complete = find(4, 0.0, 0.3, ThreatModel::kCuriousServer);
    CHECK(complete.degree == 3);
    CHECK(complete.threshold == 2);
    GraphParameters out;
    CHECK(find_graph_parameters(100, 0.5, 0.45, ThreatModel::kCuriousServer, &out) ==
          Status::kUnsafeConfiguration);
    CHECK(find_graph_parameters(100, 0.1, 0.41, ThreatModel::kSemiMaliciousServer, &out) ==
          Status::kUnsafeConfiguration);
    CHECK(find_graph_parameters(4, 0.0, 0.6, ThreatModel::kCuriousServer, &out) ==
          Status::kUnsafeConfiguration);
    CHECK(find_graph_parameters(2, 0.0, 0.1, ThreatModel::kCuriousServer, &out) == Status::kInvalidArgument);
    CHECK(find_graph_parameters(100, -0.1, 0.1, ThreatModel::kCuriousServer, &out) ==
          Status::kInvalidArgument);
    CHECK(find_graph_parameters(100, 0.0, 1.0, ThreatModel::kCuriousServer, &out) ==
          Status::kInvalidArgument);
  }

  TEST_CASE("check_graph_parameters refuses what a server must not impose") {
    CHECK(check_graph_parameters({100, 28, 6}) == Status::kOk);
    CHECK(check_graph_parameters({100, 99, 51}) == Status::kOk);
    CHECK(check_graph_parameters({100, 27, 6}) == Status::kUnsafeConfiguration);   // odd degree
    CHECK(check_graph_parameters({100, 28, 1}) == Status::kUnsafeConfiguration);   // t = 1 reveals
    CHECK(check_graph_parameters({100, 28, 29}) == Status::kUnsafeConfiguration);  // t > k
    CHECK(check_graph_parameters({100, 98, 6}) == Status::kOk);                    // 49 on each side
    CHECK(check_graph_parameters({100, 100, 6}) == Status::kUnsafeConfiguration);  // more than n - 1
    CHECK(check_graph_parameters({2, 1, 2}) == Status::kUnsafeConfiguration);
  }

  TEST_CASE("the Harary graph: k-regular, symmetric, the same from the same seed") {
    for (uint32_t n : {5u, 30u, 101u, 1000u}) {
      const uint32_t k = n == 5 ? 4 : (n == 30 ? 6 : 28);
      HararyGraph g, again, other;
      REQUIRE(g.build({n, k, 3}, seed_of(1)) == Status::kOk);
      REQUIRE(again.build({n, k, 3}, seed_of(1)) == Status::kOk);
      REQUIRE(other.build({n, k, 3}, seed_of(2)) == Status::kOk);
      size_t differ = 0;
      for (uint32_t u = 0; u < n; ++u) {
        const std::vector<uint32_t> nb = g.neighbours(u);
        CHECK(nb.size() == k);
        CHECK(std::set<uint32_t>(nb.begin(), nb.end()).size() == k);
        CHECK(nb == again.neighbours(u));
        differ += nb != other.neighbours(u);
        for (uint32_t v : nb) {
          CHECK(v != u);
          CHECK(g.adjacent(u, v));
          CHECK(g.adjacent(v, u));
        }
        uint32_t adjacent = 0;
        for (uint32_t v = 0; v < n; ++v) adjacent += g.adjacent(u, v);
        CHECK(adjacent == k);
      }
      if (n > 5) CHECK(differ > n / 2);  // another seed, another graph
    }
  }
}
