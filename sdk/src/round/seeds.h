// Internal: the one rule for every random seed of a federated round, shared by edgefl-server (which
// puts a device's seeds in its TaskOffer), `edgefl sim`, and the tests.
//
//   round seed     = SipHash-2-4 under (federation seed, "edgefl-round-seed") of the round id
//   training seed  = SipHash-2-4 under the round key of 'T' || device id
//   codec seed     = SipHash-2-4 under the round key of 'C' || device id, or of 'S' alone when
//                    the uplink codec needs one seed for the whole round (codec_seed_is_shared)
//   downlink seed  = SipHash-2-4 under the round key of 'D' (one encoding serves every device)
// where the round key is the 128-bit SipHash key expanded from the round seed by SplitMix64.
//
// Why per device: the codec seed drives stochastic rounding (q*, qsgd, tern, sign), the Hadamard
// signs of hq and the top-k sample. Devices of one round that shared it would make correlated
// rounding errors, and the error of the cohort's mean would not fall as 1/K (tests/sdk/seeds_test).
// Why shared: random-k draws its coordinates from the seed (every device must send the same ones
// for the sums of random-k encodings) and Count Sketch hashes from it (sketches add cell by cell
// only under the same hashes); add_encoded() refuses both with different seeds. Shared-scale
// codes sum with independent seeds: the seed only drives their rounding.
//
// The device id is the certificate's CN on the server and "sim-<index>" in the simulator; any
// bytes are allowed. A keyed hash, not a mix of id and seed, so that no choice of device id
// makes two devices' seeds collide more often than chance.
#ifndef EDGEFL_SRC_ROUND_SEEDS_H_
#define EDGEFL_SRC_ROUND_SEEDS_H_

#include <stddef.h>
#include <stdint.h>

#include "edgefl/codec.h"

namespace edgefl {

// The seed of round `round_id` of the federation seeded `federation_seed` (server --seed, sim --seed).
uint64_t round_seed(uint64_t federation_seed, uint64_t round_id);

// True when every device of a round must encode with the same codec seed: random-k, Count Sketch.
bool codec_seed_is_shared(const CodecSpec& uplink);

// A device's seeds in one round.
struct DeviceSeeds {
  uint64_t training = 0;  // the trainer's shuffling and dropout
  uint64_t codec = 0;     // encode()'s seed for this device's update
};

// The seeds of device `device_id` (`id_len` bytes; null only when id_len == 0) in the round whose
// seed is `round_seed`, for uplink codec `uplink`. Pure: the same arguments give the same seeds.
DeviceSeeds device_seeds(uint64_t round_seed, const char* device_id, size_t id_len, const CodecSpec& uplink);

// The seed of the round's downlink encoding (one for all devices).
uint64_t downlink_seed(uint64_t round_seed);

}  // namespace edgefl

#endif  // EDGEFL_SRC_ROUND_SEEDS_H_
