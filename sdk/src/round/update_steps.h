// Internal: the steps of a federated round that touch an update, as small functions shared by
// edgefl::Client (sdk/src/net/client.cpp), `edgefl sim` (sdk/cli/sim.cpp) and edgefl-server
// (server/src/rounds.cpp), so that the simulator measures the code the product runs.
//
//   device:  train (the app's or a built-in trainer) -> encode_update -> verify_update -> upload
//   server:  check_update (header, seed, checksum, decode once, bounded influence) -> add_dense
//            into the round's StreamingAggregator -> commit
//
// Every function works in caller-owned memory (sizes from workspace_size(), encoded_bound(),
// decode_workspace_size()) and allocates nothing.
#ifndef EDGEFL_SRC_ROUND_UPDATE_STEPS_H_
#define EDGEFL_SRC_ROUND_UPDATE_STEPS_H_

#include <stddef.h>
#include <stdint.h>

#include "edgefl/codec.h"
#include "edgefl/error_feedback.h"
#include "edgefl/span.h"
#include "edgefl/status.h"

namespace edgefl {

// Device: encodes `delta` for upload with the device's codec seed (round/seeds.h), through
// `feedback` when it is not null (error feedback: the residual is added first and what the code
// dropped is kept; `delta` is then modified), else with encode() directly. Fails as encode().
[[nodiscard]] Status encode_update(const CodecSpec& codec, ErrorFeedback* feedback, Span<float> delta,
                                   uint64_t codec_seed, Span<uint8_t> workspace, Span<uint8_t> out,
                                   size_t* written);

// Device: checks its own encoding before spending the uplink on it: it must verify() at dimension
// `n` with `codec_seed` in its header. `workspace` is the codec workspace (workspace_size() of
// the codec covers decode_workspace_size() of its encodings). kOk, kDimensionMismatch,
// kInvalidArgument (wrong seed), or verify()'s failure.
[[nodiscard]] Status verify_update(Span<const uint8_t> encoded, size_t n, uint64_t codec_seed,
                                   Span<uint8_t> workspace);

// Why check_update() refuses an update (mapped to wire::RejectReason by the server).
enum class UpdateVerdict : uint8_t {
  kAccepted = 0,
  kInvalidEncoding,  // header, checksum, structure, dimension or seed
  kNonFinite,        // a decoded coordinate is NaN or infinite
  kModelOverflow,    // model + update is not finite in float32 at some coordinate
  kNormTooLarge,     // the decoded update's L2 norm is above the bound
};

// What check_update() found.
struct UpdateCheck {
  UpdateVerdict verdict = UpdateVerdict::kInvalidEncoding;
  Status status = Status::kOk;  // the codec's status for kInvalidEncoding (kInvalidArgument: seed)
  size_t coordinate = 0;        // the first offending coordinate (kNonFinite, kModelOverflow)
  double norm = 0;              // L2 norm of the decoded update (when decoded)
  EncodedInfo info;             // the header (when it parsed)
};

// Server (and the simulator's server): reads the header of `encoded` (dimension model.size();
// seed `*codec_seed` unless null), then checksum, structure and values in one decode pass into
// `decoded` (model.size() floats), then the bounded-influence checks against `model` and
// `norm_bound` (+infinity: none). Adding `decoded` to a StreamingAggregator with add_dense() is
// then exact and cannot fail on the values. `decode_workspace` grows as
// decode_workspace_size(result.info) asks; the caller sizes it (kWorkspaceTooSmall otherwise).
UpdateCheck check_update(Span<const uint8_t> encoded, const uint64_t* codec_seed, Span<const float> model,
                         double norm_bound, Span<float> decoded, Span<uint8_t> decode_workspace);

// Short name of a verdict ("accepted", "invalid_encoding", ...). Never null.
const char* update_verdict_name(UpdateVerdict verdict);

}  // namespace edgefl

#endif  // EDGEFL_SRC_ROUND_UPDATE_STEPS_H_
