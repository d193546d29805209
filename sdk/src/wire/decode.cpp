// decode(): a capped payload -> identifier -> Verifier with explicit limits -> envelope type
// against the frame header -> plain structs -> field rules -> chunk CRC32C.
#include <stdint.h>
#include <string.h>

#include <string>
#include <utility>
#include <vector>

#include "core/bitio.h"
#include "core/crc32c.h"
#include "edgefl/wire.h"
#include "wire/checks.h"
#include "wire/client_protocol.h"
#include "wire/schema.h"

namespace edgefl {
namespace wire {

namespace {

using internal::check_fixed_length;
using internal::check_message;
using internal::ErrorView;
using internal::fail;
using internal::ModelChunkView;
using internal::OfferView;
using internal::open_envelope;
using internal::read_ack;
using internal::read_error;
using internal::read_model_chunk;
using internal::read_offer;
using internal::read_retry_later;
using internal::read_upload_status;
namespace fb = internal::fb;

std::string to_string(const flatbuffers::String* s) {
  return s != nullptr ? std::string(s->c_str(), s->size()) : std::string();
}

std::vector<uint8_t> to_bytes(const flatbuffers::Vector<uint8_t>* v) {
  return v != nullptr ? std::vector<uint8_t>(v->data(), v->data() + v->size()) : std::vector<uint8_t>();
}

template <size_t N>
Status to_array(const flatbuffers::Vector<uint8_t>* v, std::array<uint8_t, N>* out, DecodeDetail* detail,
                const char* field) {
  EDGEFL_RETURN_IF_ERROR(check_fixed_length(v != nullptr, v != nullptr ? v->size() : 0, N, detail, field));
  memcpy(out->data(), v->data(), N);
  return Status::kOk;
}

Status check_crc(const flatbuffers::Vector<uint8_t>* data, uint32_t crc, DecodeDetail* detail,
                 const char* field) {
  const uint32_t actual = data != nullptr ? crc32c_update(0, data->data(), data->size()) : 0;
  return actual == crc ? Status::kOk : fail(detail, Violation::kChecksumMismatch, field);
}

// --- FlatBuffer table -> struct (field rules come after, from check_message) -------------------

Status convert(const fb::Hello& t, Hello* m, DecodeDetail*) {
  m->protocol_version = t.protocol_version();
  m->sdk_version = to_string(t.sdk_version());
  // What the device says it can do: bits this build does not know are dropped, not refused, so
  // that a newer device advertising more (a codec or a capability added later) still gets in.
  m->supported_sparsifiers = t.supported_sparsifiers() & kKnownSparsifierBits;
  m->supported_value_coders = t.supported_value_coders() & kKnownValueCoderBits;
  m->supported_index_codings = t.supported_index_codings() & kKnownIndexCodingBits;
  m->memory_budget_bytes = t.memory_budget_bytes();
  m->capability_flags = t.capability_flags() & kKnownCapabilityFlags;
  m->cpu_cores = t.cpu_cores();
  m->uplink_kbps = t.uplink_kbps();
  m->downlink_kbps = t.downlink_kbps();
  m->model_version = t.model_version();
  return Status::kOk;
}

Status convert(const fb::TaskOffer& t, TaskOffer* m, DecodeDetail* detail) {
  // The fields every client reads (wire/client_protocol.h, the device's code too), with their rules.
  OfferView view;
  EDGEFL_RETURN_IF_ERROR(read_offer(t, &view, detail));
  m->round_id = view.round_id;
  m->round_nonce.assign(view.round_nonce.begin(), view.round_nonce.end());
  m->model_version = view.model_version;
  m->model_bytes = view.model_bytes;
  memcpy(m->model_digest.data(), view.model_digest.data(), m->model_digest.size());
  m->parameter_count = view.parameter_count;
  m->model_spec.assign(view.model_spec.data(), view.model_spec.size());
  m->training = view.training;
  m->uplink_codec.assign(view.uplink_codec.data(), view.uplink_codec.size());
  m->downlink_codec.assign(view.downlink_codec.data(), view.downlink_codec.size());
  m->codec_seed = view.codec_seed;
  m->deadline_ms = view.deadline_ms;
  m->max_upload_bytes = view.max_upload_bytes;
  m->max_chunk_bytes = view.max_chunk_bytes;
  m->base_model_version = view.base_model_version;
  memcpy(m->public_model_digest.data(), view.public_model_digest.data(), m->public_model_digest.size());
  m->initial_model_seed = view.initial_model_seed;
  m->tensors.clear();
  if (t.tensors() != nullptr) {
    // Counted before anything is copied (the payload cap bounds it too).
    if (t.tensors()->size() > kMaxTensors) return fail(detail, Violation::kTooLong, "TaskOffer.tensors");
    m->tensors.reserve(t.tensors()->size());
    for (const fb::TensorDesc* d : *t.tensors()) {
      TensorDesc desc;
      desc.name = to_string(d->name());
      if (d->shape() != nullptr) {
        if (d->shape()->size() > kMaxTensorTableRank) {
          return fail(detail, Violation::kTooLong, "TaskOffer.tensors.shape");
        }
        // Read byte by byte: the Verifier checks a vector's bounds and 4-byte length, not the
        // 8-byte alignment of its elements, so a hostile buffer may place them 4 bytes off.
        const uint8_t* bytes = d->shape()->Data();
        for (uint32_t i = 0; i < d->shape()->size(); ++i)
          desc.shape.push_back(load_le64(bytes + 8 * size_t(i)));
      }
      desc.dtype = static_cast<TensorDtype>(d->dtype());
      m->tensors.push_back(std::move(desc));
    }
  }
  m->secure_aggregation.reset();
  if (const fb::SecAggConfig* c = t.secure_aggregation()) {
    SecAggConfig config;
    config.device_index = c->device_index();
    config.cohort = c->cohort();
    config.degree = c->degree();
    config.threshold = c->threshold();
    config.modulus_bits = c->modulus_bits();
    config.words = c->words();
    EDGEFL_RETURN_IF_ERROR(to_array(c->graph_seed(), &config.graph_seed, detail, "SecAggConfig.graph_seed"));
    config.max_code = c->max_code();
    config.noise_variance = c->noise_variance();
    config.clip_l2_codes = c->clip_l2_codes();
    config.phase_ms = c->phase_ms();
    m->secure_aggregation = config;
  }
  return Status::kOk;
}

Status convert(const fb::RetryLater& t, RetryLater* m, DecodeDetail* detail) {
  return read_retry_later(t, m, detail);
}

Status convert(const fb::ModelRequest& t, ModelRequest* m, DecodeDetail*) {
  m->round_id = t.round_id();
  m->model_version = t.model_version();
  m->offset = t.offset();
  m->max_length = t.max_length();
  m->base_model_version = t.base_model_version();
  return Status::kOk;
}

Status convert(const fb::ModelChunk& t, ModelChunk* m, DecodeDetail* detail) {
  ModelChunkView view;  // the rules and the CRC32C, as every client reads a chunk
  EDGEFL_RETURN_IF_ERROR(read_model_chunk(t, &view, detail));
  m->round_id = view.round_id;
  m->model_version = view.model_version;
  m->offset = view.offset;
  m->total_bytes = view.total_bytes;
  m->data.assign(view.data.begin(), view.data.end());
  return Status::kOk;
}

Status convert(const fb::UploadStart& t, UploadStart* m, DecodeDetail* detail) {
  m->round_id = t.round_id();
  m->round_nonce = to_bytes(t.round_nonce());
  EDGEFL_RETURN_IF_ERROR(to_array(t.upload_id(), &m->upload_id, detail, "UploadStart.upload_id"));
  m->total_bytes = t.total_bytes();
  return Status::kOk;
}

Status convert(const fb::UploadStatus& t, UploadStatus* m, DecodeDetail* detail) {
  return read_upload_status(t, m, detail);
}

Status convert(const fb::UploadChunk& t, UploadChunk* m, DecodeDetail* detail) {
  m->round_id = t.round_id();
  EDGEFL_RETURN_IF_ERROR(to_array(t.upload_id(), &m->upload_id, detail, "UploadChunk.upload_id"));
  m->offset = t.offset();
  m->total_bytes = t.total_bytes();
  m->data = to_bytes(t.data());
  return Status::kOk;
}

Status convert(const fb::Commit& t, Commit* m, DecodeDetail* detail) {
  m->round_id = t.round_id();
  m->round_nonce = to_bytes(t.round_nonce());
  EDGEFL_RETURN_IF_ERROR(to_array(t.upload_id(), &m->upload_id, detail, "Commit.upload_id"));
  m->total_bytes = t.total_bytes();
  m->sample_count = t.sample_count();
  if (const auto* metrics = t.metrics()) {
    // Checked before anything is copied (the verifier's table count stops far longer lists).
    if (metrics->size() > kMaxMetrics) return fail(detail, Violation::kTooLong, "Commit.metrics");
    m->metrics.reserve(metrics->size());
    for (flatbuffers::uoffset_t i = 0; i < metrics->size(); ++i) {
      const fb::Metric* metric = metrics->Get(i);
      m->metrics.push_back(Metric{to_string(metric->name()), metric->value()});
    }
  }
  return to_array(t.digest(), &m->digest, detail, "Commit.digest");
}

Status convert(const fb::Ack& t, Ack* m, DecodeDetail* detail) {
  return read_ack(t, m, detail);
}

Status convert(const fb::Error& t, Error* m, DecodeDetail* detail) {
  ErrorView view;
  EDGEFL_RETURN_IF_ERROR(read_error(t, &view, detail));
  m->code = view.code;
  m->message.assign(view.message.data(), view.message.size());
  return Status::kOk;
}

SecAggDeviceKeys from_fb(const fb::SecAggDeviceKeys& k) {
  SecAggDeviceKeys out;
  out.device = k.device();
  memcpy(out.cipher_public.data(), k.cipher_public()->Data(), out.cipher_public.size());
  memcpy(out.mask_public.data(), k.mask_public()->Data(), out.mask_public.size());
  return out;
}

SecAggSealedShare from_fb(const fb::SecAggSealedShare& s) {
  SecAggSealedShare out;
  out.from = s.from();
  out.to = s.to();
  memcpy(out.sealed.data(), s.sealed()->Data(), out.sealed.size());
  return out;
}

SecAggRevealedShare from_fb(const fb::SecAggRevealedShare& r) {
  SecAggRevealedShare out;
  out.owner = r.owner();
  out.kind = r.kind();
  out.x = r.x();
  for (size_t i = 0; i < out.y.size(); ++i) out.y[i] = r.y()->Get(flatbuffers::uoffset_t(i));
  return out;
}

// A vector of structs, counted before anything is copied (the payload cap bounds it too).
template <typename T, typename Fb>
Status from_fb_vector(const flatbuffers::Vector<const Fb*>* v, std::vector<T>* out, DecodeDetail* detail,
                      const char* field) {
  out->clear();
  if (v == nullptr) return Status::kOk;
  if (v->size() > kMaxSecAggEntries) return fail(detail, Violation::kTooLong, field);
  out->reserve(v->size());
  for (const Fb* x : *v) out->push_back(from_fb(*x));
  return Status::kOk;
}

Status to_indices(const flatbuffers::Vector<uint32_t>* v, std::vector<uint32_t>* out, DecodeDetail* detail,
                  const char* field) {
  out->clear();
  if (v == nullptr) return Status::kOk;
  if (v->size() > kMaxSecAggEntries) return fail(detail, Violation::kTooLong, field);
  out->assign(v->begin(), v->end());
  return Status::kOk;
}

Status convert(const fb::SecAggAdvertise& t, SecAggAdvertise* m, DecodeDetail* detail) {
  m->round_id = t.round_id();
  m->round_nonce = to_bytes(t.round_nonce());
  if (t.keys() == nullptr) return fail(detail, Violation::kMissing, "SecAggAdvertise.keys");
  m->keys = from_fb(*t.keys());
  return Status::kOk;
}

Status convert(const fb::SecAggKeys& t, SecAggKeys* m, DecodeDetail* detail) {
  m->round_id = t.round_id();
  return from_fb_vector(t.keys(), &m->keys, detail, "SecAggKeys.keys");
}

Status convert(const fb::SecAggShares& t, SecAggShares* m, DecodeDetail* detail) {
  m->round_id = t.round_id();
  m->round_nonce = to_bytes(t.round_nonce());
  EDGEFL_RETURN_IF_ERROR(
      to_array(t.seed_commitment(), &m->seed_commitment, detail, "SecAggShares.seed_commitment"));
  return from_fb_vector(t.shares(), &m->shares, detail, "SecAggShares.shares");
}

Status convert(const fb::SecAggInbox& t, SecAggInbox* m, DecodeDetail* detail) {
  m->round_id = t.round_id();
  return from_fb_vector(t.shares(), &m->shares, detail, "SecAggInbox.shares");
}

Status convert(const fb::SecAggPoll& t, SecAggPoll* m, DecodeDetail*) {
  m->round_id = t.round_id();
  m->round_nonce = to_bytes(t.round_nonce());
  m->phase = static_cast<SecAggPhase>(t.phase());
  return Status::kOk;
}

Status convert(const fb::SecAggStatus& t, SecAggStatus* m, DecodeDetail*) {
  m->round_id = t.round_id();
  m->phase = static_cast<SecAggPhase>(t.phase());
  m->retry_after_ms = t.retry_after_ms();
  m->outcome = static_cast<SecAggOutcome>(t.outcome());
  return Status::kOk;
}

Status convert(const fb::SecAggUnmaskRequest& t, SecAggUnmaskRequest* m, DecodeDetail* detail) {
  m->round_id = t.round_id();
  EDGEFL_RETURN_IF_ERROR(to_indices(t.survivors(), &m->survivors, detail, "SecAggUnmaskRequest.survivors"));
  return to_indices(t.dropped(), &m->dropped, detail, "SecAggUnmaskRequest.dropped");
}

Status convert(const fb::SecAggUnmaskResponse& t, SecAggUnmaskResponse* m, DecodeDetail* detail) {
  m->round_id = t.round_id();
  m->round_nonce = to_bytes(t.round_nonce());
  return from_fb_vector(t.shares(), &m->shares, detail, "SecAggUnmaskResponse.shares");
}

// The CRC32C of an UploadChunk's data, checked once the fields are known to be valid (a
// ModelChunk's: read_model_chunk).
Status check_wire_only(const fb::UploadChunk& t, DecodeDetail* detail) {
  return check_crc(t.data(), t.crc32c(), detail, "UploadChunk.crc32c");
}
template <typename Table>
Status check_wire_only(const Table&, DecodeDetail*) {
  return Status::kOk;
}

// The rules convert() has not applied: all of them (check_message), except for the server's
// messages, which the shared reader (wire/client_protocol.h) checks as it reads them; of a
// TaskOffer, the tables the reader leaves to hosted code remain.
template <typename T>
Status check_rest(const T& m, DecodeDetail* detail) {
  return check_message(m, detail);
}
Status check_rest(const TaskOffer& m, DecodeDetail* detail) {
  return internal::check_offer_tables(m, detail);
}
Status check_rest(const RetryLater&, DecodeDetail*) {
  return Status::kOk;
}
Status check_rest(const ModelChunk&, DecodeDetail*) {
  return Status::kOk;
}
Status check_rest(const UploadStatus&, DecodeDetail*) {
  return Status::kOk;
}
Status check_rest(const Ack&, DecodeDetail*) {
  return Status::kOk;
}
Status check_rest(const Error&, DecodeDetail*) {
  return Status::kOk;
}

template <typename T, typename Table>
Status finish(const Table* table, Message* out, DecodeDetail* detail) {
  if (table == nullptr) return Status::kMalformedMessage;  // unreachable after the type checks
  T message;
  EDGEFL_RETURN_IF_ERROR(convert(*table, &message, detail));
  EDGEFL_RETURN_IF_ERROR(check_rest(message, detail));
  EDGEFL_RETURN_IF_ERROR(check_wire_only(*table, detail));
  out->emplace<T>(std::move(message));
  return Status::kOk;
}

Status decode_envelope(const fb::Envelope& envelope, MessageType type, Message* out, DecodeDetail* detail) {
  switch (type) {
    case MessageType::kHello: return finish<Hello>(envelope.message_as_Hello(), out, detail);
    case MessageType::kTaskOffer: return finish<TaskOffer>(envelope.message_as_TaskOffer(), out, detail);
    case MessageType::kRetryLater: return finish<RetryLater>(envelope.message_as_RetryLater(), out, detail);
    case MessageType::kModelRequest:
      return finish<ModelRequest>(envelope.message_as_ModelRequest(), out, detail);
    case MessageType::kModelChunk: return finish<ModelChunk>(envelope.message_as_ModelChunk(), out, detail);
    case MessageType::kUploadStart:
      return finish<UploadStart>(envelope.message_as_UploadStart(), out, detail);
    case MessageType::kUploadStatus:
      return finish<UploadStatus>(envelope.message_as_UploadStatus(), out, detail);
    case MessageType::kUploadChunk:
      return finish<UploadChunk>(envelope.message_as_UploadChunk(), out, detail);
    case MessageType::kCommit: return finish<Commit>(envelope.message_as_Commit(), out, detail);
    case MessageType::kAck: return finish<Ack>(envelope.message_as_Ack(), out, detail);
    case MessageType::kError: return finish<Error>(envelope.message_as_Error(), out, detail);
    case MessageType::kSecAggAdvertise:
      return finish<SecAggAdvertise>(envelope.message_as_SecAggAdvertise(), out, detail);
    case MessageType::kSecAggKeys: return finish<SecAggKeys>(envelope.message_as_SecAggKeys(), out, detail);
    case MessageType::kSecAggShares:
      return finish<SecAggShares>(envelope.message_as_SecAggShares(), out, detail);
    case MessageType::kSecAggInbox:
      return finish<SecAggInbox>(envelope.message_as_SecAggInbox(), out, detail);
    case MessageType::kSecAggPoll: return finish<SecAggPoll>(envelope.message_as_SecAggPoll(), out, detail);
    case MessageType::kSecAggStatus:
      return finish<SecAggStatus>(envelope.message_as_SecAggStatus(), out, detail);
    case MessageType::kSecAggUnmaskRequest:
      return finish<SecAggUnmaskRequest>(envelope.message_as_SecAggUnmaskRequest(), out, detail);
    case MessageType::kSecAggUnmaskResponse:
      return finish<SecAggUnmaskResponse>(envelope.message_as_SecAggUnmaskResponse(), out, detail);
  }
  return Status::kUnknownMessageType;
}

}  // namespace

Status decode(const FrameHeader& header, Span<const uint8_t> payload, Message* out, DecodeDetail* detail) {
  if (detail != nullptr) *detail = DecodeDetail{};
  if (out == nullptr) return Status::kInvalidArgument;
  // The header again: a caller may have built it by hand.
  if (header.version != kProtocolVersion) return Status::kProtocolVersionMismatch;
  const size_t cap = max_payload_bytes(header.type);
  if (cap == 0) return Status::kUnknownMessageType;
  if (header.payload_length > cap) return Status::kFrameTooLarge;
  if (header.payload_length < kMinPayloadBytes) return Status::kMalformedMessage;
  if (payload.size() < header.payload_length) return Status::kTruncated;
  if (payload.size() > header.payload_length) return Status::kSizeMismatch;
  if (payload.data() == nullptr) return Status::kInvalidArgument;

  // FlatBuffers reads scalars in place: give it 8-byte aligned memory (a copy of at most the cap).
  const uint8_t* bytes = payload.data();
  const size_t size = payload.size();
  std::vector<uint64_t> aligned;
  if (reinterpret_cast<uintptr_t>(bytes) % alignof(uint64_t) != 0) {
    aligned.resize((size + sizeof(uint64_t) - 1) / sizeof(uint64_t));
    memcpy(aligned.data(), bytes, size);
    bytes = reinterpret_cast<const uint8_t*>(aligned.data());
  }

  const fb::Envelope* envelope = nullptr;
  EDGEFL_RETURN_IF_ERROR(open_envelope(header, {bytes, size}, &envelope));
  return decode_envelope(*envelope, header.type, out, detail);
}

Status decode_frame(Span<const uint8_t> frame, Message* out, DecodeDetail* detail) {
  if (detail != nullptr) *detail = DecodeDetail{};
  FrameHeader header;
  EDGEFL_RETURN_IF_ERROR(read_frame_header(frame, &header));
  const size_t rest = frame.size() - kFrameHeaderBytes;
  if (rest < header.payload_length) return Status::kTruncated;
  if (rest > header.payload_length) return Status::kSizeMismatch;
  return decode(header, frame.subspan(kFrameHeaderBytes, rest), out, detail);
}

}  // namespace wire
}  // namespace edgefl
