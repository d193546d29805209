// Internal: the downlink of a federated round, shared by edgefl-server (server/src/rounds.cpp),
// edgefl::Client (sdk/src/net/client.cpp) and `edgefl sim` (sdk/cli/sim.cpp).
//
// The server keeps two models. The *server model* x (float32) takes the optimizer's steps. The
// *public model* w is what every device holds and trains from; it lives on the bf16 grid (every
// value is exactly a bf16 number), so that a whole download of it in bf16 is lossless. After a
// round, the server moves the public model towards the server model with a compressed patch:
//
//     patch  = C(x - w)                 (C: the round's downlink codec, with its seed)
//     w     <- bf16_round(w + decode(patch))
//
// x - w is the server's error-feedback residual: what one patch leaves out (sparsification,
// quantization, bf16 rounding) stays in x - w and goes out in later patches. This is EF21-P
// (Gruntkowska, Richtarik et al., ICML 2023) and the server half of DoubleSqueeze (Tang et al.,
// ICML 2019). A device that holds version b reaches version v by applying the patches b+1..v in
// order; decode() is bit-exact on every platform and the additions are single float32 additions
// rounded to bf16, so every device computes the very same public model, which it checks against
// the server's SHA-256 of it. No device drifts.
//
// A download is a *stream*: one or more edgefl encodings, each preceded by its length (u32
// little-endian). Either one whole model (a bf16 encoding of w: the device needs nothing) or the
// patches b+1..v (the device needs version b). Everything here works in caller-owned memory.
#ifndef EDGEFL_SRC_ROUND_DOWNLINK_H_
#define EDGEFL_SRC_ROUND_DOWNLINK_H_

#include <stddef.h>
#include <stdint.h>

#include "edgefl/codec.h"
#include "edgefl/span.h"
#include "edgefl/status.h"

namespace edgefl {

// Bytes of the length prefix of each encoding in a download stream.
constexpr size_t kStreamPrefixBytes = 4;

// Rounds every value of `model` to the nearest bf16 (ties to even), in place. kNonFiniteInput
// (model unchanged from that index on) if a value is not finite or rounds to infinity.
[[nodiscard]] Status round_to_bf16_grid(Span<float> model);

// Server: the patch that moves `public_model` towards `server_model`: encode(spec, server_model -
// public_model) with `seed` (round/seeds.h downlink_seed). `difference` holds n floats of scratch;
// `workspace` workspace_size(spec, n) bytes; `out` encoded_bound(spec, n) bytes.
[[nodiscard]] Status make_patch(const CodecSpec& spec, Span<const float> server_model,
                                Span<const float> public_model, uint64_t seed, Span<float> difference,
                                Span<uint8_t> workspace, Span<uint8_t> out, size_t* written);

// Server and device: public_model <- bf16_round(public_model + decode(patch)). The patch is
// verified (checksum, structure, dimension) and decoded into `decoded` (n floats) before
// `public_model` is touched; a failure there leaves it unchanged. `decode_workspace`:
// decode_workspace_size() of the patch's header. kNonFiniteInput if a result is not finite (the
// model is then partly updated: the caller discards it).
[[nodiscard]] Status apply_patch(Span<const uint8_t> patch, Span<float> public_model, Span<float> decoded,
                                 Span<uint8_t> decode_workspace);

// Server and device: public_model <- decode(whole), which must be a dense bf16 encoding of a
// model on the bf16 grid (what full_model_encoding writes).
[[nodiscard]] Status apply_whole_model(Span<const uint8_t> whole, Span<float> public_model);

// Appends `encoding` to a stream being built in out[*used..]: kBufferTooSmall if it does not fit.
[[nodiscard]] Status stream_append(Span<const uint8_t> encoding, Span<uint8_t> out, size_t* used);

// Reads the encoding at stream[*offset..] and advances *offset past it. kOk with *encoding set;
// kTruncated if the stream ends inside a prefix or an encoding (or *offset is already at its
// end: callers loop while *offset < stream.size()); kCorruptPayload for an empty encoding.
[[nodiscard]] Status stream_next(Span<const uint8_t> stream, size_t* offset, Span<const uint8_t>* encoding);

// The decode workspace one encoding of a stream needs (0 if its header does not parse).
size_t stream_decode_workspace(Span<const uint8_t> encoding);

// The largest stream_decode_workspace() of the encodings of a whole download stream (0 if its
// framing is broken: apply_download() then fails on it).
size_t download_decode_workspace(Span<const uint8_t> stream);

// Device (and tests): applies a whole download stream to `model`, as TaskOffer.base_model_version
// says: `whole` (base 0): the stream holds exactly one whole-model encoding (apply_whole_model);
// else every encoding is a patch, applied in order (apply_patch, `decoded` n floats of scratch,
// `workspace` download_decode_workspace() bytes), and *patches receives their count. Fails as
// stream_next() and the apply functions; kCorruptPayload for a whole download of more than one
// encoding. On failure the model is partly updated: the caller discards it.
[[nodiscard]] Status apply_download(Span<const uint8_t> stream, bool whole, Span<float> model,
                                    Span<float> decoded, Span<uint8_t> workspace, uint64_t* patches);

}  // namespace edgefl

#endif  // EDGEFL_SRC_ROUND_DOWNLINK_H_
