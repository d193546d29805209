// Internal: the SecAgg+ state machines' structs (secagg/protocol.h) to and from their wire
// messages (edgefl/wire.h), shared by edgefl::Client, edgefl-server and the tests. Header-only;
// no checks beyond the types' (the wire decoder and the state machines check the values).
#ifndef EDGEFL_SRC_SECAGG_WIRE_FORM_H_
#define EDGEFL_SRC_SECAGG_WIRE_FORM_H_

#include <algorithm>
#include <iterator>
#include <vector>

#include "edgefl/wire.h"
#include "secagg/protocol.h"

namespace edgefl {
namespace secagg {

// The round's parameters as a device reads them from its offer (which must carry a
// SecAggConfig and a 32-byte nonce: wire::validate checks both).
inline RoundParameters round_parameters_of(const wire::TaskOffer& offer) {
  const wire::SecAggConfig& c = *offer.secure_aggregation;
  RoundParameters p;
  p.round_id = offer.round_id;
  std::copy_n(offer.round_nonce.begin(), std::min(offer.round_nonce.size(), p.round_nonce.size()),
              p.round_nonce.begin());
  p.graph_seed = c.graph_seed;
  p.graph.clients = c.cohort;
  p.graph.degree = c.degree;
  p.graph.threshold = c.threshold;
  p.modulus_bits = c.modulus_bits;
  p.words = c.words;
  return p;
}

inline wire::SecAggDeviceKeys to_wire(const AdvertisedKeys& k) {
  return wire::SecAggDeviceKeys{k.device, k.cipher_public, k.mask_public};
}
inline AdvertisedKeys from_wire(const wire::SecAggDeviceKeys& k) {
  return AdvertisedKeys{k.device, k.cipher_public, k.mask_public};
}

inline wire::SecAggSealedShare to_wire(const SealedShares& s) {
  wire::SecAggSealedShare w;
  w.from = s.from;
  w.to = s.to;
  std::copy(s.sealed.begin(), s.sealed.end(), w.sealed.begin());
  return w;
}
inline SealedShares from_wire(const wire::SecAggSealedShare& w) {
  SealedShares s;
  s.from = w.from;
  s.to = w.to;
  std::copy(w.sealed.begin(), w.sealed.end(), s.sealed.begin());
  return s;
}

inline wire::SecAggRevealedShare to_wire(const RevealedShare& r) {
  wire::SecAggRevealedShare w;
  w.owner = r.owner;
  w.kind = static_cast<uint8_t>(r.kind);
  w.x = r.share.x;
  std::copy(std::begin(r.share.y), std::end(r.share.y), w.y.begin());
  return w;
}

// Every element of `in` converted.
template <typename In>
auto to_wire_all(const std::vector<In>& in) {
  std::vector<decltype(to_wire(in.front()))> out;
  out.reserve(in.size());
  for (const In& x : in) out.push_back(to_wire(x));
  return out;
}
template <typename In>
auto from_wire_all(const std::vector<In>& in) {
  std::vector<decltype(from_wire(in.front()))> out;
  out.reserve(in.size());
  for (const In& x : in) out.push_back(from_wire(x));
  return out;
}

}  // namespace secagg
}  // namespace edgefl

#endif  // EDGEFL_SRC_SECAGG_WIRE_FORM_H_
