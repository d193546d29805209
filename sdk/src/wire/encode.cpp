// encode(): field rules first (the encoder never writes what decode() refuses), then one
// FlatBuffer with the file identifier "EFW1", then the frame header.
#include <stdint.h>

#include <string>
#include <utility>
#include <vector>

#include "core/crc32c.h"
#include "edgefl/wire.h"
#include "wire/checks.h"
#include "wire/client_tables.h"
#include "wire/schema.h"
#include "wire/testing.h"

namespace edgefl {
namespace wire {

namespace {

using internal::check_message;
namespace fb = internal::fb;
using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

// Optional text is omitted when empty (decode() reads an absent string as "").
Offset<flatbuffers::String> optional_string(FlatBufferBuilder& b, const std::string& s) {
  return s.empty() ? Offset<flatbuffers::String>() : b.CreateString(s.data(), s.size());
}

template <typename Bytes>
Offset<flatbuffers::Vector<uint8_t>> bytes(FlatBufferBuilder& b, const Bytes& v) {
  return b.CreateVector(v.data(), v.size());
}

uint32_t crc_of(const std::vector<uint8_t>& data) {
  return crc32c_update(0, data.data(), data.size());
}

// --- struct -> FlatBuffer table ---------------------------------------------------------------

Offset<fb::Hello> build(FlatBufferBuilder& b, const Hello& m) {
  internal::HelloView v;
  v.protocol_version = m.protocol_version;
  v.sdk_version = {m.sdk_version.data(), m.sdk_version.size()};
  v.supported_sparsifiers = m.supported_sparsifiers;
  v.supported_value_coders = m.supported_value_coders;
  v.supported_index_codings = m.supported_index_codings;
  v.memory_budget_bytes = m.memory_budget_bytes;
  v.capability_flags = m.capability_flags;
  v.cpu_cores = m.cpu_cores;
  v.uplink_kbps = m.uplink_kbps;
  v.downlink_kbps = m.downlink_kbps;
  v.model_version = m.model_version;
  return internal::build_hello(b, v);
}

Offset<fb::TaskOffer> build(FlatBufferBuilder& b, const TaskOffer& m) {
  const auto nonce = bytes(b, m.round_nonce);
  const auto digest = bytes(b, m.model_digest);
  const auto model_spec = optional_string(b, m.model_spec);
  fb::TrainingConfigBuilder tc(b);
  tc.add_batch_size(m.training.batch_size);
  tc.add_local_epochs(m.training.local_epochs);
  tc.add_max_steps(m.training.max_steps);
  tc.add_learning_rate(m.training.learning_rate);
  tc.add_momentum(m.training.momentum);
  tc.add_weight_decay(m.training.weight_decay);
  tc.add_prox_mu(m.training.prox_mu);
  tc.add_seed(m.training.seed);
  const auto training = tc.Finish();
  const auto uplink = b.CreateString(m.uplink_codec.data(), m.uplink_codec.size());
  const auto downlink = optional_string(b, m.downlink_codec);
  const auto public_digest = bytes(b, m.public_model_digest);
  std::vector<Offset<fb::TensorDesc>> tensor_offsets;
  tensor_offsets.reserve(m.tensors.size());
  for (const TensorDesc& d : m.tensors) {
    const auto name = b.CreateString(d.name.data(), d.name.size());
    const auto shape = b.CreateVector(d.shape.data(), d.shape.size());
    fb::TensorDescBuilder tb(b);
    tb.add_name(name);
    tb.add_shape(shape);
    tb.add_dtype(static_cast<fb::TensorDtype>(d.dtype));
    tensor_offsets.push_back(tb.Finish());
  }
  const auto tensors = b.CreateVector(tensor_offsets);
  Offset<fb::SecAggConfig> secure;
  if (m.secure_aggregation) {
    const SecAggConfig& c = *m.secure_aggregation;
    const auto graph_seed = bytes(b, c.graph_seed);
    fb::SecAggConfigBuilder sc(b);
    sc.add_device_index(c.device_index);
    sc.add_cohort(c.cohort);
    sc.add_degree(c.degree);
    sc.add_threshold(c.threshold);
    sc.add_modulus_bits(c.modulus_bits);
    sc.add_words(c.words);
    sc.add_graph_seed(graph_seed);
    sc.add_max_code(c.max_code);
    sc.add_noise_variance(c.noise_variance);
    sc.add_clip_l2_codes(c.clip_l2_codes);
    sc.add_phase_ms(c.phase_ms);
    secure = sc.Finish();
  }
  fb::TaskOfferBuilder t(b);
  t.add_round_id(m.round_id);
  t.add_round_nonce(nonce);
  t.add_model_version(m.model_version);
  t.add_model_bytes(m.model_bytes);
  t.add_model_digest(digest);
  t.add_parameter_count(m.parameter_count);
  t.add_model_spec(model_spec);
  t.add_training(training);
  t.add_uplink_codec(uplink);
  t.add_downlink_codec(downlink);
  t.add_codec_seed(m.codec_seed);
  t.add_deadline_ms(m.deadline_ms);
  t.add_max_upload_bytes(m.max_upload_bytes);
  t.add_max_chunk_bytes(m.max_chunk_bytes);
  t.add_base_model_version(m.base_model_version);
  t.add_public_model_digest(public_digest);
  t.add_initial_model_seed(m.initial_model_seed);
  t.add_tensors(tensors);
  if (m.secure_aggregation) t.add_secure_aggregation(secure);
  return t.Finish();
}

Offset<fb::RetryLater> build(FlatBufferBuilder& b, const RetryLater& m) {
  fb::RetryLaterBuilder t(b);
  t.add_retry_after_ms(m.retry_after_ms);
  t.add_retry_window_ms(m.retry_window_ms);
  t.add_reason(static_cast<fb::RetryReason>(m.reason));
  return t.Finish();
}

Offset<fb::ModelRequest> build(FlatBufferBuilder& b, const ModelRequest& m) {
  return internal::build_model_request(
      b, {m.round_id, m.model_version, m.offset, m.max_length, m.base_model_version});
}

Offset<fb::ModelChunk> build(FlatBufferBuilder& b, const ModelChunk& m) {
  const auto data = bytes(b, m.data);
  fb::ModelChunkBuilder t(b);
  t.add_round_id(m.round_id);
  t.add_model_version(m.model_version);
  t.add_offset(m.offset);
  t.add_total_bytes(m.total_bytes);
  t.add_data(data);
  t.add_crc32c(crc_of(m.data));
  return t.Finish();
}

Offset<fb::UploadStart> build(FlatBufferBuilder& b, const UploadStart& m) {
  return internal::build_upload_start(b, {m.round_id,
                                          {m.round_nonce.data(), m.round_nonce.size()},
                                          {m.upload_id.data(), m.upload_id.size()},
                                          m.total_bytes});
}

Offset<fb::UploadStatus> build(FlatBufferBuilder& b, const UploadStatus& m) {
  const auto upload_id = bytes(b, m.upload_id);
  fb::UploadStatusBuilder t(b);
  t.add_round_id(m.round_id);
  t.add_upload_id(upload_id);
  t.add_offset(m.offset);
  t.add_total_bytes(m.total_bytes);
  return t.Finish();
}

Offset<fb::UploadChunk> build(FlatBufferBuilder& b, const UploadChunk& m) {
  return internal::build_upload_chunk(b, {m.round_id,
                                          {m.upload_id.data(), m.upload_id.size()},
                                          m.offset,
                                          m.total_bytes,
                                          {m.data.data(), m.data.size()}});
}

Offset<fb::Commit> build(FlatBufferBuilder& b, const Commit& m) {
  // Every metric given (encode_unchecked() writes invalid counts too, for the tests).
  std::vector<internal::MetricView> metrics;
  metrics.reserve(m.metrics.size());
  for (const Metric& metric : m.metrics)
    metrics.push_back({{metric.name.data(), metric.name.size()}, metric.value});
  std::vector<Offset<fb::Metric>> offsets(m.metrics.size());
  internal::CommitView v;
  v.round_id = m.round_id;
  v.round_nonce = {m.round_nonce.data(), m.round_nonce.size()};
  v.upload_id = {m.upload_id.data(), m.upload_id.size()};
  v.total_bytes = m.total_bytes;
  v.sample_count = m.sample_count;
  v.metrics = {metrics.data(), metrics.size()};
  v.metric_offsets = {offsets.data(), offsets.size()};
  v.digest = {m.digest.data(), m.digest.size()};
  return internal::build_commit(b, v);
}

Offset<fb::Ack> build(FlatBufferBuilder& b, const Ack& m) {
  const auto upload_id = bytes(b, m.upload_id);
  fb::AckBuilder t(b);
  t.add_round_id(m.round_id);
  t.add_upload_id(upload_id);
  t.add_disposition(static_cast<fb::UpdateDisposition>(m.disposition));
  t.add_reason(static_cast<fb::RejectReason>(m.reason));
  return t.Finish();
}

Offset<fb::Error> build(FlatBufferBuilder& b, const Error& m) {
  const auto message = optional_string(b, m.message);
  fb::ErrorBuilder t(b);
  t.add_code(static_cast<fb::ErrorCode>(m.code));
  t.add_message(message);
  return t.Finish();
}

fb::SecAggDeviceKeys to_fb(const SecAggDeviceKeys& k) {
  return fb::SecAggDeviceKeys(k.device, flatbuffers::make_span(k.cipher_public),
                              flatbuffers::make_span(k.mask_public));
}

fb::SecAggSealedShare to_fb(const SecAggSealedShare& s) {
  return fb::SecAggSealedShare(s.from, s.to, flatbuffers::make_span(s.sealed));
}

fb::SecAggRevealedShare to_fb(const SecAggRevealedShare& r) {
  return fb::SecAggRevealedShare(r.owner, r.kind, r.x, flatbuffers::make_span(r.y));
}

template <typename T>
auto structs(FlatBufferBuilder& b, const std::vector<T>& v) {
  using Fb = decltype(to_fb(v[0]));
  std::vector<Fb> out;
  out.reserve(v.size());
  for (const T& x : v) out.push_back(to_fb(x));
  return b.CreateVectorOfStructs(out.data(), out.size());
}

Offset<fb::SecAggAdvertise> build(FlatBufferBuilder& b, const SecAggAdvertise& m) {
  const auto nonce = bytes(b, m.round_nonce);
  const fb::SecAggDeviceKeys keys = to_fb(m.keys);
  fb::SecAggAdvertiseBuilder t(b);
  t.add_round_id(m.round_id);
  t.add_round_nonce(nonce);
  t.add_keys(&keys);
  return t.Finish();
}

Offset<fb::SecAggKeys> build(FlatBufferBuilder& b, const SecAggKeys& m) {
  const auto keys = structs(b, m.keys);
  fb::SecAggKeysBuilder t(b);
  t.add_round_id(m.round_id);
  t.add_keys(keys);
  return t.Finish();
}

Offset<fb::SecAggShares> build(FlatBufferBuilder& b, const SecAggShares& m) {
  const auto nonce = bytes(b, m.round_nonce);
  const auto commitment = bytes(b, m.seed_commitment);
  const auto shares = structs(b, m.shares);
  fb::SecAggSharesBuilder t(b);
  t.add_round_id(m.round_id);
  t.add_round_nonce(nonce);
  t.add_seed_commitment(commitment);
  t.add_shares(shares);
  return t.Finish();
}

Offset<fb::SecAggInbox> build(FlatBufferBuilder& b, const SecAggInbox& m) {
  const auto shares = structs(b, m.shares);
  fb::SecAggInboxBuilder t(b);
  t.add_round_id(m.round_id);
  t.add_shares(shares);
  return t.Finish();
}

Offset<fb::SecAggPoll> build(FlatBufferBuilder& b, const SecAggPoll& m) {
  const auto nonce = bytes(b, m.round_nonce);
  fb::SecAggPollBuilder t(b);
  t.add_round_id(m.round_id);
  t.add_round_nonce(nonce);
  t.add_phase(static_cast<fb::SecAggPhase>(m.phase));
  return t.Finish();
}

Offset<fb::SecAggStatus> build(FlatBufferBuilder& b, const SecAggStatus& m) {
  fb::SecAggStatusBuilder t(b);
  t.add_round_id(m.round_id);
  t.add_phase(static_cast<fb::SecAggPhase>(m.phase));
  t.add_retry_after_ms(m.retry_after_ms);
  t.add_outcome(static_cast<fb::SecAggOutcome>(m.outcome));
  return t.Finish();
}

Offset<fb::SecAggUnmaskRequest> build(FlatBufferBuilder& b, const SecAggUnmaskRequest& m) {
  const auto survivors = b.CreateVector(m.survivors);
  const auto dropped = b.CreateVector(m.dropped);
  fb::SecAggUnmaskRequestBuilder t(b);
  t.add_round_id(m.round_id);
  t.add_survivors(survivors);
  t.add_dropped(dropped);
  return t.Finish();
}

Offset<fb::SecAggUnmaskResponse> build(FlatBufferBuilder& b, const SecAggUnmaskResponse& m) {
  const auto nonce = bytes(b, m.round_nonce);
  const auto shares = structs(b, m.shares);
  fb::SecAggUnmaskResponseBuilder t(b);
  t.add_round_id(m.round_id);
  t.add_round_nonce(nonce);
  t.add_shares(shares);
  return t.Finish();
}

// Bytes the builder starts with: enough for the whole message, so it never grows by copying.
size_t initial_size(const ModelChunk& m) {
  return m.data.size() + 256;
}
size_t initial_size(const UploadChunk& m) {
  return m.data.size() + 256;
}
size_t initial_size(const SecAggKeys& m) {
  return m.keys.size() * sizeof(fb::SecAggDeviceKeys) + 256;
}
size_t initial_size(const SecAggShares& m) {
  return m.shares.size() * sizeof(fb::SecAggSealedShare) + 256;
}
size_t initial_size(const SecAggInbox& m) {
  return m.shares.size() * sizeof(fb::SecAggSealedShare) + 256;
}
size_t initial_size(const SecAggUnmaskResponse& m) {
  return m.shares.size() * sizeof(fb::SecAggRevealedShare) + 256;
}
template <typename T>
size_t initial_size(const T&) {
  return 1024;
}

template <typename T>
Status encode_message(const T& message, std::vector<uint8_t>* frame, DecodeDetail* detail,
                      bool checked = true) {
  if (detail != nullptr) *detail = DecodeDetail{};
  if (frame == nullptr) return Status::kInvalidArgument;
  if (checked) EDGEFL_RETURN_IF_ERROR(check_message(message, detail));
  constexpr MessageType type = message_type_of<T>();
  FlatBufferBuilder b(initial_size(message));
  const auto body = build(b, message);
  const auto envelope = fb::CreateEnvelope(b, static_cast<fb::Message>(type), body.Union());
  fb::FinishEnvelopeBuffer(b, envelope);
  if (b.GetSize() > max_payload_bytes(type)) return Status::kFrameTooLarge;
  std::vector<uint8_t> out(kFrameHeaderBytes + b.GetSize());
  size_t written = 0;
  EDGEFL_RETURN_IF_ERROR(internal::write_frame(type, b, {out.data(), out.size()}, &written));
  *frame = std::move(out);
  return Status::kOk;
}

}  // namespace

namespace testing {
Status encode_unchecked(const Message& message, std::vector<uint8_t>* frame) {
  return std::visit([frame](const auto& m) { return encode_message(m, frame, nullptr, false); }, message);
}
}  // namespace testing

Status encode(const Message& message, std::vector<uint8_t>* frame, DecodeDetail* detail) {
  return std::visit([frame, detail](const auto& m) { return encode_message(m, frame, detail); }, message);
}

Status encode(const Hello& m, std::vector<uint8_t>* frame, DecodeDetail* detail) {
  return encode_message(m, frame, detail);
}
Status encode(const TaskOffer& m, std::vector<uint8_t>* frame, DecodeDetail* detail) {
  return encode_message(m, frame, detail);
}
Status encode(const RetryLater& m, std::vector<uint8_t>* frame, DecodeDetail* detail) {
  return encode_message(m, frame, detail);
}
Status encode(const ModelRequest& m, std::vector<uint8_t>* frame, DecodeDetail* detail) {
  return encode_message(m, frame, detail);
}
Status encode(const ModelChunk& m, std::vector<uint8_t>* frame, DecodeDetail* detail) {
  return encode_message(m, frame, detail);
}
Status encode(const UploadStart& m, std::vector<uint8_t>* frame, DecodeDetail* detail) {
  return encode_message(m, frame, detail);
}
Status encode(const UploadStatus& m, std::vector<uint8_t>* frame, DecodeDetail* detail) {
  return encode_message(m, frame, detail);
}
Status encode(const UploadChunk& m, std::vector<uint8_t>* frame, DecodeDetail* detail) {
  return encode_message(m, frame, detail);
}
Status encode(const Commit& m, std::vector<uint8_t>* frame, DecodeDetail* detail) {
  return encode_message(m, frame, detail);
}
Status encode(const Ack& m, std::vector<uint8_t>* frame, DecodeDetail* detail) {
  return encode_message(m, frame, detail);
}
Status encode(const Error& m, std::vector<uint8_t>* frame, DecodeDetail* detail) {
  return encode_message(m, frame, detail);
}
Status encode(const SecAggAdvertise& m, std::vector<uint8_t>* frame, DecodeDetail* detail) {
  return encode_message(m, frame, detail);
}
Status encode(const SecAggKeys& m, std::vector<uint8_t>* frame, DecodeDetail* detail) {
  return encode_message(m, frame, detail);
}
Status encode(const SecAggShares& m, std::vector<uint8_t>* frame, DecodeDetail* detail) {
  return encode_message(m, frame, detail);
}
Status encode(const SecAggInbox& m, std::vector<uint8_t>* frame, DecodeDetail* detail) {
  return encode_message(m, frame, detail);
}
Status encode(const SecAggPoll& m, std::vector<uint8_t>* frame, DecodeDetail* detail) {
  return encode_message(m, frame, detail);
}
Status encode(const SecAggStatus& m, std::vector<uint8_t>* frame, DecodeDetail* detail) {
  return encode_message(m, frame, detail);
}
Status encode(const SecAggUnmaskRequest& m, std::vector<uint8_t>* frame, DecodeDetail* detail) {
  return encode_message(m, frame, detail);
}
Status encode(const SecAggUnmaskResponse& m, std::vector<uint8_t>* frame, DecodeDetail* detail) {
  return encode_message(m, frame, detail);
}

}  // namespace wire
}  // namespace edgefl
