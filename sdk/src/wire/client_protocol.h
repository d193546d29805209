// Internal: a client's reading of the server's messages, and the rules of the round's sequence
// that every client applies to them. The other half of wire/client_tables.h (which builds the
// client's messages).
//
// One implementation for every client. edgefl::wire's decode() reads TaskOffer, RetryLater,
// ModelChunk, UploadStatus, Ack and Error through these functions (and then copies the views into
// its structs); validate() applies the same rules to the structs; edgefl::Client applies the
// sequence rules to what decode() returns; the bare-metal device client
// (platforms/cortex-m/device_client.cpp) calls the readers on its own reply buffer. So the hosted
// suites, the fuzzers and the end-to-end tests run the code the device runs.
//
// Freestanding: no allocation, no exceptions. A view points into the verified payload and is valid
// while the payload is. What the device does not read is left to the hosted decode(): the offer's
// tensor table and its secure-aggregation settings (a device with a built-in model and no secure
// rounds refuses an offer that has them, or ignores the table).
#ifndef EDGEFL_SRC_WIRE_CLIENT_PROTOCOL_H_
#define EDGEFL_SRC_WIRE_CLIENT_PROTOCOL_H_

#include <stddef.h>
#include <stdint.h>

#include "edgefl/span.h"
#include "edgefl/status.h"
#include "edgefl/wire.h"

namespace edgefl {
namespace wire {
namespace fb {  // the generated tables (edgefl_wire_generated.h), declared only
struct Envelope;
struct TaskOffer;
struct RetryLater;
struct ModelChunk;
struct UploadStatus;
struct Ack;
struct Error;
}  // namespace fb

namespace internal {

// --- Views of the server's messages -----------------------------------------------------------

// A TaskOffer's fields (the plain struct's, edgefl/wire.h, without the tensor table and the
// secure-aggregation settings, which only hosted clients read).
struct OfferView {
  uint64_t round_id = 0;
  Span<const uint8_t> round_nonce;
  uint64_t model_version = 0;
  uint64_t model_bytes = 0;
  Span<const uint8_t> model_digest;
  uint32_t parameter_count = 0;
  Span<const char> model_spec;
  TrainingConfig training;
  Span<const char> uplink_codec;
  Span<const char> downlink_codec;
  uint64_t codec_seed = 0;
  uint32_t deadline_ms = 0;
  uint64_t max_upload_bytes = 0;
  uint32_t max_chunk_bytes = 0;
  uint64_t base_model_version = 0;
  Span<const uint8_t> public_model_digest;
  uint64_t initial_model_seed = 0;
  bool secure_aggregation = false;  // the offer carries SecAggConfig
};

struct ModelChunkView {
  uint64_t round_id = 0;
  uint64_t model_version = 0;
  uint64_t offset = 0;
  uint64_t total_bytes = 0;
  Span<const uint8_t> data;
};

struct ErrorView {
  ErrorCode code = ErrorCode::kInternal;
  Span<const char> message;  // UTF-8, checked: never assume printable ASCII when logging it
};

// RetryLater, UploadStatus and Ack hold no text or variable-length bytes: their plain structs
// (edgefl/wire.h) are their views.

// The views of the plain structs (hosted code).
inline OfferView view_of(const TaskOffer& m) {
  OfferView v;
  v.round_id = m.round_id;
  v.round_nonce = {m.round_nonce.data(), m.round_nonce.size()};
  v.model_version = m.model_version;
  v.model_bytes = m.model_bytes;
  v.model_digest = {m.model_digest.data(), m.model_digest.size()};
  v.parameter_count = m.parameter_count;
  v.model_spec = {m.model_spec.data(), m.model_spec.size()};
  v.training = m.training;
  v.uplink_codec = {m.uplink_codec.data(), m.uplink_codec.size()};
  v.downlink_codec = {m.downlink_codec.data(), m.downlink_codec.size()};
  v.codec_seed = m.codec_seed;
  v.deadline_ms = m.deadline_ms;
  v.max_upload_bytes = m.max_upload_bytes;
  v.max_chunk_bytes = m.max_chunk_bytes;
  v.base_model_version = m.base_model_version;
  v.public_model_digest = {m.public_model_digest.data(), m.public_model_digest.size()};
  v.initial_model_seed = m.initial_model_seed;
  v.secure_aggregation = m.secure_aggregation.has_value();
  return v;
}
inline ModelChunkView view_of(const ModelChunk& m) {
  return {m.round_id, m.model_version, m.offset, m.total_bytes, {m.data.data(), m.data.size()}};
}
inline ErrorView view_of(const Error& m) {
  return {m.code, {m.message.data(), m.message.size()}};
}

// --- The rules of each field (validate() runs them on the structs' views) ----------------------
// kOk, or kInvalidMessage with *detail (may be null) naming the field.
Status check_offer(const OfferView& m, DecodeDetail* detail);
Status check_model_chunk(const ModelChunkView& m, DecodeDetail* detail);
Status check_error(const ErrorView& m, DecodeDetail* detail);
Status check_retry_later(const RetryLater& m, DecodeDetail* detail);
Status check_upload_status(const UploadStatus& m, DecodeDetail* detail);
Status check_ack(const Ack& m, DecodeDetail* detail);

// --- Reading ----------------------------------------------------------------------------------

// Verifies `payload` (the frame's payload, whose header read_frame_header() returned; 8-byte
// aligned, as FlatBuffers reads scalars in place) as an Envelope of header.type, with the SDK's
// Verifier limits (wire/schema.h). *out points into payload.
// Fails: kInvalidArgument (null or misaligned payload), kSizeMismatch (payload.size() !=
// header.payload_length), kBadMagic, kMalformedMessage (fails verification, or no body),
// kMessageTypeMismatch (the body is not header.type).
Status open_envelope(const FrameHeader& header, Span<const uint8_t> payload, const fb::Envelope** out);

// The table's fields into *out, with every rule of the message checked (a ModelChunk's CRC32C
// too). Fails: kInvalidMessage with *detail (may be null); *out is then unspecified.
Status read_offer(const fb::TaskOffer& t, OfferView* out, DecodeDetail* detail);
Status read_retry_later(const fb::RetryLater& t, RetryLater* out, DecodeDetail* detail);
Status read_model_chunk(const fb::ModelChunk& t, ModelChunkView* out, DecodeDetail* detail);
Status read_upload_status(const fb::UploadStatus& t, UploadStatus* out, DecodeDetail* detail);
Status read_ack(const fb::Ack& t, Ack* out, DecodeDetail* detail);
Status read_error(const fb::Error& t, ErrorView* out, DecodeDetail* detail);

// --- The round's sequence ---------------------------------------------------------------------
// Each returns kOk, or kProtocolError with *detail (may be null) naming the field that does not
// match (Violation::kInconsistent): a valid message that is not the answer to what was asked.

// A ModelChunk continues the download the client asked for: the round, version and offset of
// `asked`, no more data than asked.max_length, and the offer's total `model_bytes` (data within
// it: check_model_chunk holds).
Status expect_model_chunk(const ModelChunkView& chunk, const ModelRequest& asked, uint64_t model_bytes,
                          DecodeDetail* detail);
// An UploadStatus is about this upload: its round, id and total; the offset within the total.
Status expect_upload_status(const UploadStatus& status, uint64_t round_id, Span<const uint8_t> upload_id,
                            uint64_t total_bytes, DecodeDetail* detail);
// An Ack is for this upload: its round and id.
Status expect_ack(const Ack& ack, uint64_t round_id, Span<const uint8_t> upload_id, DecodeDetail* detail);

// The chunk length to ask for or send: `wanted` within the offer's max_chunk_bytes and the
// protocol's kMaxChunkBytes, at least 1.
uint32_t chunk_length(uint32_t wanted, uint32_t offer_max_chunk_bytes);

// The pause a RetryLater asks for: retry_after_ms plus the point `uniform` / 2^32 of its window,
// so that devices told the same thing spread out (uniform: 32 random bits).
uint64_t retry_pause_ms(const RetryLater& retry, uint32_t uniform);

// What a TaskOffer (the answer to a Hello after a reconnect, or after training) means for an
// update the client holds and the server has not acknowledged, of round `pending_round_id` with
// `pending_nonce`:
//   kSameRound     the round is still open: upload it (UploadStart resumes at the server's offset);
//   kAskTheLedger  another round is open, but a Commit of the update went out: the server may have
//                  counted it. An UploadStart for its round is answered from the server's ledger
//                  (an UploadStatus holding all of it: Commit again, acked Duplicate; Error
//                  UnknownRound: not counted);
//   kDiscard       another round is open and no Commit went out: the update is not counted.
enum class PendingUpload : uint8_t { kSameRound, kAskTheLedger, kDiscard };
PendingUpload pending_after_offer(uint64_t pending_round_id, Span<const uint8_t> pending_nonce,
                                  bool commit_sent, uint64_t offer_round_id, Span<const uint8_t> offer_nonce);

// The update was counted: an Ack Accepted, or Duplicate (an earlier session's Commit counted it).
inline bool counted(const Ack& ack) {
  return ack.disposition == UpdateDisposition::kAccepted || ack.disposition == UpdateDisposition::kDuplicate;
}

}  // namespace internal
}  // namespace wire
}  // namespace edgefl

#endif  // EDGEFL_SRC_WIRE_CLIENT_PROTOCOL_H_
