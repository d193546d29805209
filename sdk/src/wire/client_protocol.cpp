// A client's reading of the server's messages and the rules of the round's sequence
// (wire/client_protocol.h). Freestanding: the device client links this file as the hosted clients
// do.
#include "wire/client_protocol.h"

#include <stdint.h>

#include "core/crc32c.h"
#include "wire/checks.h"
#include "wire/schema.h"

namespace edgefl {
namespace wire {
namespace internal {

namespace {

Span<const uint8_t> bytes(const flatbuffers::Vector<uint8_t>* v) {
  return v != nullptr ? Span<const uint8_t>(v->data(), v->size()) : Span<const uint8_t>();
}

Span<const char> text(const flatbuffers::String* s) {
  return s != nullptr ? Span<const char>(s->c_str(), s->size()) : Span<const char>();
}

// A fixed-length byte string (digest, upload id): present, of `expected` bytes.
Status fixed(const flatbuffers::Vector<uint8_t>* v, size_t expected, Span<const uint8_t>* out,
             DecodeDetail* detail, const char* field) {
  EDGEFL_RETURN_IF_ERROR(
      check_fixed_length(v != nullptr, v != nullptr ? v->size() : 0, expected, detail, field));
  *out = bytes(v);
  return Status::kOk;
}

Status copy_upload_id(const flatbuffers::Vector<uint8_t>* v, UploadId* out, DecodeDetail* detail,
                      const char* field) {
  Span<const uint8_t> id;
  EDGEFL_RETURN_IF_ERROR(fixed(v, kUploadIdBytes, &id, detail, field));
  for (size_t i = 0; i < kUploadIdBytes; ++i) (*out)[i] = id[i];
  return Status::kOk;
}

Status mismatch(DecodeDetail* detail, const char* field) {
  fail(detail, Violation::kInconsistent, field);
  return Status::kProtocolError;
}

bool same_bytes(Span<const uint8_t> a, Span<const uint8_t> b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

}  // namespace

// --- Rules ------------------------------------------------------------------------------------

Status check_offer(const OfferView& m, DecodeDetail* detail) {
  EDGEFL_RETURN_IF_ERROR(check_round_id(m.round_id, detail, "TaskOffer.round_id"));
  EDGEFL_RETURN_IF_ERROR(check_nonce(m.round_nonce, detail, "TaskOffer.round_nonce"));
  if (m.model_version == 0) return fail(detail, Violation::kOutOfRange, "TaskOffer.model_version");
  if (m.base_model_version > m.model_version) {
    return fail(detail, Violation::kInconsistent, "TaskOffer.base_model_version");
  }
  const bool nothing_to_download = m.base_model_version == m.model_version;
  EDGEFL_RETURN_IF_ERROR(check_range(m.model_bytes, nothing_to_download ? 0 : 1,
                                     nothing_to_download ? 0 : kMaxModelBytes, detail,
                                     "TaskOffer.model_bytes"));
  EDGEFL_RETURN_IF_ERROR(
      check_range(m.parameter_count, 1, kMaxParameterCount, detail, "TaskOffer.parameter_count"));
  EDGEFL_RETURN_IF_ERROR(check_text(m.model_spec, 0, kMaxModelSpecChars, Alphabet::kPrintableNoSpace, detail,
                                    "TaskOffer.model_spec"));
  EDGEFL_RETURN_IF_ERROR(check_training(m.training, detail));
  EDGEFL_RETURN_IF_ERROR(check_codec_spec(m.uplink_codec, false, detail, "TaskOffer.uplink_codec"));
  EDGEFL_RETURN_IF_ERROR(check_codec_spec(m.downlink_codec, false, detail, "TaskOffer.downlink_codec"));
  EDGEFL_RETURN_IF_ERROR(check_range(m.deadline_ms, 1, kMaxDeadlineMs, detail, "TaskOffer.deadline_ms"));
  EDGEFL_RETURN_IF_ERROR(
      check_range(m.max_upload_bytes, 1, kMaxUploadBytes, detail, "TaskOffer.max_upload_bytes"));
  EDGEFL_RETURN_IF_ERROR(
      check_range(m.max_chunk_bytes, 1, kMaxChunkBytes, detail, "TaskOffer.max_chunk_bytes"));
  if (m.secure_aggregation && m.round_nonce.size() != kRoundNonceLongBytes) {
    return fail(detail, Violation::kInconsistent, "TaskOffer.round_nonce");
  }
  return Status::kOk;
}

Status check_model_chunk(const ModelChunkView& m, DecodeDetail* detail) {
  EDGEFL_RETURN_IF_ERROR(check_round_id(m.round_id, detail, "ModelChunk.round_id"));
  return check_piece(m.offset, m.data.size(), m.total_bytes, kMaxModelBytes, detail, "ModelChunk.total_bytes",
                     "ModelChunk.data", "ModelChunk.offset");
}

Status check_error(const ErrorView& m, DecodeDetail* detail) {
  EDGEFL_RETURN_IF_ERROR(check_range(static_cast<uint8_t>(m.code),
                                     static_cast<uint8_t>(ErrorCode::kBadMessage),
                                     static_cast<uint8_t>(ErrorCode::kInternal), detail, "Error.code"));
  if (m.message.size() > kMaxErrorMessageBytes) return fail(detail, Violation::kTooLong, "Error.message");
  if (!valid_message_text(m.message)) return fail(detail, Violation::kBadText, "Error.message");
  return Status::kOk;
}

Status check_retry_later(const RetryLater& m, DecodeDetail* detail) {
  EDGEFL_RETURN_IF_ERROR(check_range(m.retry_after_ms, 1, kMaxRetryMs, detail, "RetryLater.retry_after_ms"));
  EDGEFL_RETURN_IF_ERROR(
      check_range(m.retry_window_ms, 0, kMaxRetryMs, detail, "RetryLater.retry_window_ms"));
  return check_range(static_cast<uint8_t>(m.reason), static_cast<uint8_t>(RetryReason::kNoRound),
                     static_cast<uint8_t>(RetryReason::kDraining), detail, "RetryLater.reason");
}

Status check_upload_status(const UploadStatus& m, DecodeDetail* detail) {
  EDGEFL_RETURN_IF_ERROR(check_round_id(m.round_id, detail, "UploadStatus.round_id"));
  EDGEFL_RETURN_IF_ERROR(check_upload_id(m.upload_id, detail, "UploadStatus.upload_id"));
  EDGEFL_RETURN_IF_ERROR(check_range(m.total_bytes, 1, kMaxUploadBytes, detail, "UploadStatus.total_bytes"));
  if (m.offset > m.total_bytes) return fail(detail, Violation::kOffsetBeyondTotal, "UploadStatus.offset");
  return Status::kOk;
}

Status check_ack(const Ack& m, DecodeDetail* detail) {
  EDGEFL_RETURN_IF_ERROR(check_round_id(m.round_id, detail, "Ack.round_id"));
  EDGEFL_RETURN_IF_ERROR(check_upload_id(m.upload_id, detail, "Ack.upload_id"));
  EDGEFL_RETURN_IF_ERROR(
      check_range(static_cast<uint8_t>(m.disposition), static_cast<uint8_t>(UpdateDisposition::kAccepted),
                  static_cast<uint8_t>(UpdateDisposition::kRejected), detail, "Ack.disposition"));
  EDGEFL_RETURN_IF_ERROR(
      check_range(static_cast<uint8_t>(m.reason), static_cast<uint8_t>(RejectReason::kNone),
                  static_cast<uint8_t>(RejectReason::kAlreadyCounted), detail, "Ack.reason"));
  if (m.reason != RejectReason::kNone && m.disposition != UpdateDisposition::kRejected) {
    return fail(detail, Violation::kInconsistent, "Ack.reason");
  }
  return Status::kOk;
}

// --- Reading ----------------------------------------------------------------------------------

Status open_envelope(const FrameHeader& header, Span<const uint8_t> payload, const fb::Envelope** out) {
  if (out == nullptr || payload.data() == nullptr) return Status::kInvalidArgument;
  if (reinterpret_cast<uintptr_t>(payload.data()) % alignof(uint64_t) != 0) return Status::kInvalidArgument;
  if (payload.size() != header.payload_length) return Status::kSizeMismatch;
  if (payload.size() < kMinPayloadBytes) return Status::kMalformedMessage;
  if (!flatbuffers::BufferHasIdentifier(payload.data(), fb::EnvelopeIdentifier())) return Status::kBadMagic;
  flatbuffers::Verifier::Options options;
  options.max_depth = kVerifierMaxDepth;
  options.max_tables =
      header.type == MessageType::kTaskOffer ? kVerifierMaxTablesTaskOffer : kVerifierMaxTables;
  options.check_alignment = true;
  options.check_nested_flatbuffers = false;  // the schema has none; never follow one
  flatbuffers::Verifier verifier(payload.data(), payload.size(), options);
  if (!fb::VerifyEnvelopeBuffer(verifier)) return Status::kMalformedMessage;
  // An unknown union type verifies as true (FlatBuffers generates `default: return true`): the
  // type byte is compared with the header's known type before the body is touched.
  const fb::Envelope* envelope = fb::GetEnvelope(payload.data());
  const uint8_t body_type = static_cast<uint8_t>(envelope->message_type());
  if (body_type == static_cast<uint8_t>(fb::Message::NONE) || envelope->message() == nullptr) {
    return Status::kMalformedMessage;
  }
  if (body_type != static_cast<uint8_t>(header.type)) return Status::kMessageTypeMismatch;
  *out = envelope;
  return Status::kOk;
}

Status read_offer(const fb::TaskOffer& t, OfferView* m, DecodeDetail* detail) {
  m->round_id = t.round_id();
  m->round_nonce = bytes(t.round_nonce());
  m->model_version = t.model_version();
  m->model_bytes = t.model_bytes();
  EDGEFL_RETURN_IF_ERROR(
      fixed(t.model_digest(), kDigestBytes, &m->model_digest, detail, "TaskOffer.model_digest"));
  m->parameter_count = t.parameter_count();
  m->model_spec = text(t.model_spec());
  const fb::TrainingConfig* training = t.training();
  if (training == nullptr) return fail(detail, Violation::kMissing, "TaskOffer.training");
  m->training.batch_size = training->batch_size();
  m->training.local_epochs = training->local_epochs();
  m->training.max_steps = training->max_steps();
  m->training.learning_rate = training->learning_rate();
  m->training.momentum = training->momentum();
  m->training.weight_decay = training->weight_decay();
  m->training.prox_mu = training->prox_mu();
  m->training.seed = training->seed();
  m->uplink_codec = text(t.uplink_codec());
  m->downlink_codec = text(t.downlink_codec());
  m->codec_seed = t.codec_seed();
  m->deadline_ms = t.deadline_ms();
  m->max_upload_bytes = t.max_upload_bytes();
  m->max_chunk_bytes = t.max_chunk_bytes();
  m->base_model_version = t.base_model_version();
  EDGEFL_RETURN_IF_ERROR(fixed(t.public_model_digest(), kDigestBytes, &m->public_model_digest, detail,
                               "TaskOffer.public_model_digest"));
  m->initial_model_seed = t.initial_model_seed();
  m->secure_aggregation = t.secure_aggregation() != nullptr;
  return check_offer(*m, detail);
}

Status read_retry_later(const fb::RetryLater& t, RetryLater* m, DecodeDetail* detail) {
  m->retry_after_ms = t.retry_after_ms();
  m->retry_window_ms = t.retry_window_ms();
  m->reason = static_cast<RetryReason>(t.reason());
  return check_retry_later(*m, detail);
}

Status read_model_chunk(const fb::ModelChunk& t, ModelChunkView* m, DecodeDetail* detail) {
  m->round_id = t.round_id();
  m->model_version = t.model_version();
  m->offset = t.offset();
  m->total_bytes = t.total_bytes();
  m->data = bytes(t.data());
  EDGEFL_RETURN_IF_ERROR(check_model_chunk(*m, detail));
  // The CRC32C lives only on the wire: checked once the fields are known to be valid.
  if (crc32c_update(0, m->data.data(), m->data.size()) != t.crc32c()) {
    return fail(detail, Violation::kChecksumMismatch, "ModelChunk.crc32c");
  }
  return Status::kOk;
}

Status read_upload_status(const fb::UploadStatus& t, UploadStatus* m, DecodeDetail* detail) {
  m->round_id = t.round_id();
  EDGEFL_RETURN_IF_ERROR(copy_upload_id(t.upload_id(), &m->upload_id, detail, "UploadStatus.upload_id"));
  m->offset = t.offset();
  m->total_bytes = t.total_bytes();
  return check_upload_status(*m, detail);
}

Status read_ack(const fb::Ack& t, Ack* m, DecodeDetail* detail) {
  m->round_id = t.round_id();
  EDGEFL_RETURN_IF_ERROR(copy_upload_id(t.upload_id(), &m->upload_id, detail, "Ack.upload_id"));
  m->disposition = static_cast<UpdateDisposition>(t.disposition());
  m->reason = static_cast<RejectReason>(t.reason());
  return check_ack(*m, detail);
}

Status read_error(const fb::Error& t, ErrorView* m, DecodeDetail* detail) {
  m->code = static_cast<ErrorCode>(t.code());
  m->message = text(t.message());
  return check_error(*m, detail);
}

// --- The round's sequence ---------------------------------------------------------------------

Status expect_model_chunk(const ModelChunkView& chunk, const ModelRequest& asked, uint64_t model_bytes,
                          DecodeDetail* detail) {
  if (chunk.round_id != asked.round_id) return mismatch(detail, "ModelChunk.round_id");
  if (chunk.model_version != asked.model_version) return mismatch(detail, "ModelChunk.model_version");
  if (chunk.total_bytes != model_bytes) return mismatch(detail, "ModelChunk.total_bytes");
  if (chunk.offset != asked.offset) return mismatch(detail, "ModelChunk.offset");
  if (chunk.data.size() > asked.max_length) return mismatch(detail, "ModelChunk.data");
  return Status::kOk;
}

Status expect_upload_status(const UploadStatus& status, uint64_t round_id, Span<const uint8_t> upload_id,
                            uint64_t total_bytes, DecodeDetail* detail) {
  if (status.round_id != round_id) return mismatch(detail, "UploadStatus.round_id");
  if (!same_bytes({status.upload_id.data(), status.upload_id.size()}, upload_id)) {
    return mismatch(detail, "UploadStatus.upload_id");
  }
  if (status.total_bytes != total_bytes) return mismatch(detail, "UploadStatus.total_bytes");
  return Status::kOk;  // offset <= total_bytes: check_upload_status
}

Status expect_ack(const Ack& ack, uint64_t round_id, Span<const uint8_t> upload_id, DecodeDetail* detail) {
  if (ack.round_id != round_id) return mismatch(detail, "Ack.round_id");
  if (!same_bytes({ack.upload_id.data(), ack.upload_id.size()}, upload_id))
    return mismatch(detail, "Ack.upload_id");
  return Status::kOk;
}

PendingUpload pending_after_offer(uint64_t pending_round_id, Span<const uint8_t> pending_nonce,
                                  bool commit_sent, uint64_t offer_round_id,
                                  Span<const uint8_t> offer_nonce) {
  if (pending_round_id == offer_round_id && same_bytes(pending_nonce, offer_nonce))
    return PendingUpload::kSameRound;
  return commit_sent ? PendingUpload::kAskTheLedger : PendingUpload::kDiscard;
}

uint32_t chunk_length(uint32_t wanted, uint32_t offer_max_chunk_bytes) {
  uint32_t length = wanted < offer_max_chunk_bytes ? wanted : offer_max_chunk_bytes;
  if (length > kMaxChunkBytes) length = static_cast<uint32_t>(kMaxChunkBytes);
  return length > 0 ? length : 1;
}

uint64_t retry_pause_ms(const RetryLater& retry, uint32_t uniform) {
  return retry.retry_after_ms + ((uint64_t{retry.retry_window_ms} * uniform) >> 32);
}

}  // namespace internal
}  // namespace wire
}  // namespace edgefl
