// tests/sdk/wire_test.cpp: the wire protocol (edgefl/wire.h). Frames are refused from their header
// alone when their type or length is wrong; every message type survives encode -> decode field by
// field; every rule of the schema is enforced with its own Violation, identically by validate(),
// encode() and decode(); corrupted frames give an error or a valid message, never a crash.
// Deterministic: every random input comes from a fixed seed.
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <doctest/doctest.h>
#include <flatbuffers/flatbuffers.h>

#include "core/crc32c.h"
#include "edgefl/status.h"
#include "edgefl/wire.h"
#include "edgefl_wire_generated.h"
#include "support/wire_samples.h"
#include "wire/client_protocol.h"
#include "wire/client_tables.h"
#include "wire/testing.h"

namespace doctest {
template <>
struct StringMaker<edgefl::Status> {
  static String convert(edgefl::Status s) {
    return String(edgefl::status_name(s)) + "(" + toString(static_cast<int>(s)) + ")";
  }
};
template <>
struct StringMaker<edgefl::wire::Violation> {
  static String convert(edgefl::wire::Violation v) { return String(edgefl::wire::violation_name(v)); }
};
}  // namespace doctest

namespace {

namespace w = edgefl::wire;
namespace fbw = edgefl::wire::fb;
namespace samples = edgefl_test::wire_samples;
using edgefl::Status;
using w::MessageType;
using w::Violation;

constexpr MessageType kAllTypes[] = {MessageType::kHello,
                                     MessageType::kTaskOffer,
                                     MessageType::kRetryLater,
                                     MessageType::kModelRequest,
                                     MessageType::kModelChunk,
                                     MessageType::kUploadStart,
                                     MessageType::kUploadStatus,
                                     MessageType::kUploadChunk,
                                     MessageType::kCommit,
                                     MessageType::kAck,
                                     MessageType::kError,
                                     MessageType::kSecAggAdvertise,
                                     MessageType::kSecAggKeys,
                                     MessageType::kSecAggShares,
                                     MessageType::kSecAggInbox,
                                     MessageType::kSecAggPoll,
                                     MessageType::kSecAggStatus,
                                     MessageType::kSecAggUnmaskRequest,
                                     MessageType::kSecAggUnmaskResponse};

uint64_t next_random(uint64_t* state) {  // SplitMix64
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::vector<uint8_t> header_bytes(uint8_t version, uint8_t type, uint32_t length) {
  return {0x45,
          0x46,
          version,
          type,
          static_cast<uint8_t>(length),
          static_cast<uint8_t>(length >> 8),
          static_cast<uint8_t>(length >> 16),
          static_cast<uint8_t>(length >> 24)};
}

std::vector<uint8_t> encode_ok(const w::Message& m) {
  std::vector<uint8_t> frame;
  w::DecodeDetail detail;
  const Status s = w::encode(m, &frame, &detail);
  INFO("field: " << detail.field);
  REQUIRE(s == Status::kOk);
  return frame;
}

std::vector<uint8_t> encode_raw(const w::Message& m) {
  std::vector<uint8_t> frame;
  REQUIRE(w::testing::encode_unchecked(m, &frame) == Status::kOk);
  return frame;
}

// A frame around a FlatBuffer built by hand, with the header the test chooses.
std::vector<uint8_t> frame_of(MessageType type, const flatbuffers::FlatBufferBuilder& b) {
  const std::vector<uint8_t> head =
      header_bytes(1, static_cast<uint8_t>(type), static_cast<uint32_t>(b.GetSize()));
  std::vector<uint8_t> frame(head.size() + b.GetSize());
  memcpy(frame.data(), head.data(), head.size());
  memcpy(frame.data() + head.size(), b.GetBufferPointer(), b.GetSize());
  return frame;
}

// samples::task_offer() as a hand-built FlatBuffer, with parts left out or a tensor's shape
// vector written by `shape` (default: the [ulong] the encoder writes).
struct HandBuiltOffer {
  bool training = true, digest = true, public_digest = true;
  std::function<flatbuffers::Offset<flatbuffers::Vector<uint64_t>>(flatbuffers::FlatBufferBuilder&, size_t,
                                                                   const edgefl::TensorDesc&)>
      shape;
};
std::vector<uint8_t> hand_built_offer(const HandBuiltOffer& o) {
  const w::TaskOffer m = samples::task_offer();
  flatbuffers::FlatBufferBuilder b;
  const auto nonce = b.CreateVector(m.round_nonce);
  const auto digest = o.digest ? b.CreateVector(m.model_digest.data(), m.model_digest.size())
                               : flatbuffers::Offset<flatbuffers::Vector<uint8_t>>();
  const auto public_digest = o.public_digest
                                 ? b.CreateVector(m.public_model_digest.data(), m.public_model_digest.size())
                                 : flatbuffers::Offset<flatbuffers::Vector<uint8_t>>();
  const auto training = o.training ? fbw::CreateTrainingConfig(b, 32, 1, 0, 0.1f, 0.0f, 0.0f, 0.0f, 1)
                                   : flatbuffers::Offset<fbw::TrainingConfig>();
  const auto uplink = b.CreateString(m.uplink_codec);
  const auto downlink = b.CreateString(m.downlink_codec);
  std::vector<flatbuffers::Offset<fbw::TensorDesc>> tensors;
  for (size_t t = 0; t < m.tensors.size(); ++t) {
    const edgefl::TensorDesc& desc = m.tensors[t];
    const auto name = b.CreateString(desc.name);
    const auto shape = o.shape ? o.shape(b, t, desc) : b.CreateVector(desc.shape);
    tensors.push_back(fbw::CreateTensorDesc(b, name, shape, static_cast<fbw::TensorDtype>(desc.dtype)));
  }
  const auto tensor_vector = b.CreateVector(tensors);
  const auto body = fbw::CreateTaskOffer(b, m.round_id, nonce, m.model_version, m.model_bytes, digest,
                                         m.parameter_count, 0, training, uplink, downlink, 0, m.deadline_ms,
                                         m.max_upload_bytes, m.max_chunk_bytes, m.base_model_version,
                                         public_digest, m.initial_model_seed, tensor_vector);
  fbw::FinishEnvelopeBuffer(b, fbw::CreateEnvelope(b, fbw::Message::TaskOffer, body.Union()));
  return frame_of(MessageType::kTaskOffer, b);
}

struct Decoded {
  Status status = Status::kOk;
  w::DecodeDetail detail;
  w::Message message;
};

// Decodes a copy of `frame` in an exactly sized heap block, so that ASan sees any read past it.
// The output starts as an Error sentinel, and must still be one after a failure.
Decoded decode(const std::vector<uint8_t>& frame) {
  const std::vector<uint8_t> exact(frame);
  Decoded d;
  const w::Error sentinel{w::ErrorCode::kInternal, "sentinel"};
  d.message = sentinel;
  d.status = w::decode_frame({exact.data(), exact.size()}, &d.message, &d.detail);
  if (d.status != Status::kOk) {
    const w::Error* e = std::get_if<w::Error>(&d.message);
    CHECK((e != nullptr && *e == sentinel));
  }
  return d;
}

// --- field-by-field comparison (each field its own CHECK, so a dropped field is named) ----------

void check_fields(const w::Hello& a, const w::Hello& b) {
  CHECK(a.protocol_version == b.protocol_version);
  CHECK(a.sdk_version == b.sdk_version);
  CHECK(a.supported_sparsifiers == b.supported_sparsifiers);
  CHECK(a.supported_value_coders == b.supported_value_coders);
  CHECK(a.supported_index_codings == b.supported_index_codings);
  CHECK(a.memory_budget_bytes == b.memory_budget_bytes);
  CHECK(a.capability_flags == b.capability_flags);
  CHECK(a.cpu_cores == b.cpu_cores);
  CHECK(a.uplink_kbps == b.uplink_kbps);
  CHECK(a.downlink_kbps == b.downlink_kbps);
  CHECK(a.model_version == b.model_version);
}
void check_fields(const w::TaskOffer& a, const w::TaskOffer& b) {
  CHECK(a.round_id == b.round_id);
  CHECK(a.round_nonce == b.round_nonce);
  CHECK(a.model_version == b.model_version);
  CHECK(a.model_bytes == b.model_bytes);
  CHECK(a.model_digest == b.model_digest);
  CHECK(a.parameter_count == b.parameter_count);
  CHECK(a.model_spec == b.model_spec);
  CHECK(a.training.batch_size == b.training.batch_size);
  CHECK(a.training.local_epochs == b.training.local_epochs);
  CHECK(a.training.max_steps == b.training.max_steps);
  CHECK(a.training.learning_rate == b.training.learning_rate);
  CHECK(a.training.momentum == b.training.momentum);
  CHECK(a.training.weight_decay == b.training.weight_decay);
  CHECK(a.training.prox_mu == b.training.prox_mu);
  CHECK(a.training.seed == b.training.seed);
  CHECK(a.uplink_codec == b.uplink_codec);
  CHECK(a.downlink_codec == b.downlink_codec);
  CHECK(a.codec_seed == b.codec_seed);
  CHECK(a.deadline_ms == b.deadline_ms);
  CHECK(a.max_upload_bytes == b.max_upload_bytes);
  CHECK(a.max_chunk_bytes == b.max_chunk_bytes);
  CHECK(a.base_model_version == b.base_model_version);
  CHECK(a.public_model_digest == b.public_model_digest);
  CHECK(a.initial_model_seed == b.initial_model_seed);
  REQUIRE(a.secure_aggregation.has_value() == b.secure_aggregation.has_value());
  if (a.secure_aggregation) {
    const w::SecAggConfig &x = *a.secure_aggregation, &y = *b.secure_aggregation;
    CHECK(x.device_index == y.device_index);
    CHECK(x.cohort == y.cohort);
    CHECK(x.degree == y.degree);
    CHECK(x.threshold == y.threshold);
    CHECK(x.modulus_bits == y.modulus_bits);
    CHECK(x.words == y.words);
    CHECK(x.graph_seed == y.graph_seed);
    CHECK(x.max_code == y.max_code);
    CHECK(x.noise_variance == y.noise_variance);
    CHECK(x.clip_l2_codes == y.clip_l2_codes);
    CHECK(x.phase_ms == y.phase_ms);
  }
}
void check_fields(const w::RetryLater& a, const w::RetryLater& b) {
  CHECK(a.retry_after_ms == b.retry_after_ms);
  CHECK(a.retry_window_ms == b.retry_window_ms);
  CHECK(a.reason == b.reason);
}
void check_fields(const w::ModelRequest& a, const w::ModelRequest& b) {
  CHECK(a.round_id == b.round_id);
  CHECK(a.model_version == b.model_version);
  CHECK(a.offset == b.offset);
  CHECK(a.max_length == b.max_length);
  CHECK(a.base_model_version == b.base_model_version);
}
void check_fields(const w::ModelChunk& a, const w::ModelChunk& b) {
  CHECK(a.round_id == b.round_id);
  CHECK(a.model_version == b.model_version);
  CHECK(a.offset == b.offset);
  CHECK(a.total_bytes == b.total_bytes);
  CHECK(a.data == b.data);
}
void check_fields(const w::UploadStart& a, const w::UploadStart& b) {
  CHECK(a.round_id == b.round_id);
  CHECK(a.round_nonce == b.round_nonce);
  CHECK(a.upload_id == b.upload_id);
  CHECK(a.total_bytes == b.total_bytes);
}
void check_fields(const w::UploadStatus& a, const w::UploadStatus& b) {
  CHECK(a.round_id == b.round_id);
  CHECK(a.upload_id == b.upload_id);
  CHECK(a.offset == b.offset);
  CHECK(a.total_bytes == b.total_bytes);
}
void check_fields(const w::UploadChunk& a, const w::UploadChunk& b) {
  CHECK(a.round_id == b.round_id);
  CHECK(a.upload_id == b.upload_id);
  CHECK(a.offset == b.offset);
  CHECK(a.total_bytes == b.total_bytes);
  CHECK(a.data == b.data);
}
void check_fields(const w::Commit& a, const w::Commit& b) {
  CHECK(a.round_id == b.round_id);
  CHECK(a.round_nonce == b.round_nonce);
  CHECK(a.upload_id == b.upload_id);
  CHECK(a.total_bytes == b.total_bytes);
  CHECK(a.sample_count == b.sample_count);
  REQUIRE(a.metrics.size() == b.metrics.size());
  for (size_t i = 0; i < a.metrics.size(); ++i) {
    CHECK(a.metrics[i].name == b.metrics[i].name);
    CHECK(a.metrics[i].value == b.metrics[i].value);
  }
  CHECK(a.digest == b.digest);
}
void check_fields(const w::Ack& a, const w::Ack& b) {
  CHECK(a.round_id == b.round_id);
  CHECK(a.upload_id == b.upload_id);
  CHECK(a.disposition == b.disposition);
  CHECK(a.reason == b.reason);
}
void check_fields(const w::Error& a, const w::Error& b) {
  CHECK(a.code == b.code);
  CHECK(a.message == b.message);
}
void check_fields(const w::SecAggDeviceKeys& a, const w::SecAggDeviceKeys& b) {
  CHECK(a.device == b.device);
  CHECK(a.cipher_public == b.cipher_public);
  CHECK(a.mask_public == b.mask_public);
}
void check_fields(const w::SecAggSealedShare& a, const w::SecAggSealedShare& b) {
  CHECK(a.from == b.from);
  CHECK(a.to == b.to);
  CHECK(a.sealed == b.sealed);
}
void check_fields(const w::SecAggRevealedShare& a, const w::SecAggRevealedShare& b) {
  CHECK(a.owner == b.owner);
  CHECK(a.kind == b.kind);
  CHECK(a.x == b.x);
  CHECK(a.y == b.y);
}
template <typename T>
void check_fields(const std::vector<T>& a, const std::vector<T>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) check_fields(a[i], b[i]);
}
void check_fields(const w::SecAggAdvertise& a, const w::SecAggAdvertise& b) {
  CHECK(a.round_id == b.round_id);
  CHECK(a.round_nonce == b.round_nonce);
  check_fields(a.keys, b.keys);
}
void check_fields(const w::SecAggKeys& a, const w::SecAggKeys& b) {
  CHECK(a.round_id == b.round_id);
  check_fields(a.keys, b.keys);
}
void check_fields(const w::SecAggShares& a, const w::SecAggShares& b) {
  CHECK(a.round_id == b.round_id);
  CHECK(a.round_nonce == b.round_nonce);
  CHECK(a.seed_commitment == b.seed_commitment);
  check_fields(a.shares, b.shares);
}
void check_fields(const w::SecAggInbox& a, const w::SecAggInbox& b) {
  CHECK(a.round_id == b.round_id);
  check_fields(a.shares, b.shares);
}
void check_fields(const w::SecAggPoll& a, const w::SecAggPoll& b) {
  CHECK(a.round_id == b.round_id);
  CHECK(a.round_nonce == b.round_nonce);
  CHECK(a.phase == b.phase);
}
void check_fields(const w::SecAggStatus& a, const w::SecAggStatus& b) {
  CHECK(a.round_id == b.round_id);
  CHECK(a.phase == b.phase);
  CHECK(a.retry_after_ms == b.retry_after_ms);
  CHECK(a.outcome == b.outcome);
}
void check_fields(const w::SecAggUnmaskRequest& a, const w::SecAggUnmaskRequest& b) {
  CHECK(a.round_id == b.round_id);
  CHECK(a.survivors == b.survivors);
  CHECK(a.dropped == b.dropped);
}
void check_fields(const w::SecAggUnmaskResponse& a, const w::SecAggUnmaskResponse& b) {
  CHECK(a.round_id == b.round_id);
  CHECK(a.round_nonce == b.round_nonce);
  check_fields(a.shares, b.shares);
}

// Encodes, decodes and compares field by field; also checks operator== and the message type.
void check_round_trip(const w::Message& original) {
  const std::vector<uint8_t> frame = encode_ok(original);
  CHECK(frame.size() - w::kFrameHeaderBytes <= w::max_payload_bytes(w::message_type(original)));
  const Decoded d = decode(frame);
  REQUIRE(d.status == Status::kOk);
  REQUIRE(d.message.index() == original.index());
  CHECK(w::message_type(d.message) == w::message_type(original));
  std::visit(
      [&](const auto& expected) {
        using T = std::decay_t<decltype(expected)>;
        const T* got = std::get_if<T>(&d.message);
        REQUIRE(got != nullptr);
        check_fields(expected, *got);
        CHECK(expected == *got);
      },
      original);
}

// The largest valid message of every type (each string and list at its limit).
std::vector<w::Message> largest_messages() {
  std::vector<w::Message> out;
  w::Hello hello = samples::hello();
  hello.sdk_version = std::string(w::kMaxSdkVersionChars, 'v');
  hello.memory_budget_bytes = w::kMaxMemoryBudgetBytes;
  out.push_back(hello);

  w::TaskOffer offer = samples::task_offer();
  offer.model_spec = std::string(w::kMaxModelSpecChars, 'm');
  offer.uplink_codec = "topk:k=1000000,approx,sample=0.0125,idx=auto+q8:block=1024,det";
  offer.downlink_codec = "randk:0.123456789,unscaled";
  offer.model_bytes = w::kMaxModelBytes;
  offer.parameter_count = w::kMaxParameterCount;
  offer.max_upload_bytes = w::kMaxUploadBytes;
  offer.max_chunk_bytes = w::kMaxChunkBytes;
  offer.tensors.clear();
  for (size_t i = 0; i < edgefl::kMaxTensors; ++i) {  // 2^20 elements each: 2^30 in all
    std::string name = std::to_string(i) + ".";
    name.resize(edgefl::kMaxTensorNameChars, 'n');
    offer.tensors.push_back({name, {16, 16, 4, 4, 4, 4, 4, 4}, edgefl::TensorDtype::kBf16});
  }
  out.push_back(offer);

  w::RetryLater retry = samples::retry_later();
  retry.retry_after_ms = w::kMaxRetryMs;
  retry.retry_window_ms = w::kMaxRetryMs;
  out.push_back(retry);

  w::ModelRequest request = samples::model_request();
  request.offset = w::kMaxModelBytes - 1;
  request.max_length = w::kMaxChunkBytes;
  out.push_back(request);

  w::ModelChunk model_chunk = samples::model_chunk();
  model_chunk.total_bytes = w::kMaxModelBytes;
  model_chunk.offset = w::kMaxModelBytes - w::kMaxChunkBytes;
  model_chunk.data = samples::pattern(w::kMaxChunkBytes, 3);
  out.push_back(model_chunk);

  w::UploadStart start = samples::upload_start();
  start.round_nonce = samples::pattern(w::kRoundNonceLongBytes, 9);
  start.total_bytes = w::kMaxUploadBytes;
  out.push_back(start);

  w::UploadStatus status = samples::upload_status();
  status.total_bytes = w::kMaxUploadBytes;
  status.offset = w::kMaxUploadBytes;
  out.push_back(status);

  w::UploadChunk upload_chunk = samples::upload_chunk();
  upload_chunk.total_bytes = w::kMaxUploadBytes;
  upload_chunk.offset = w::kMaxUploadBytes - w::kMaxChunkBytes;
  upload_chunk.data = samples::pattern(w::kMaxChunkBytes, 5);
  out.push_back(upload_chunk);

  w::Commit commit = samples::commit();
  commit.metrics.clear();
  for (size_t i = 0; i < w::kMaxMetrics; ++i) {
    std::string name = "metric_" + std::to_string(i) + "_";
    name.resize(w::kMaxMetricNameChars, 'x');
    commit.metrics.push_back({name, -1.0e300 * static_cast<double>(i)});
  }
  out.push_back(commit);

  w::Ack ack = samples::ack();
  ack.round_id = std::numeric_limits<uint64_t>::max();
  out.push_back(ack);
  ack.disposition = w::UpdateDisposition::kRejected;
  ack.reason = w::RejectReason::kModelOverflow;
  out.push_back(ack);
  ack.reason = w::RejectReason::kAlreadyCounted;  // the largest reason
  out.push_back(ack);

  w::Error error = samples::error();
  error.message.clear();
  while (error.message.size() + 3 <= w::kMaxErrorMessageBytes) error.message += "\xE2\x9C\x93";  // U+2713
  while (error.message.size() < w::kMaxErrorMessageBytes) error.message += '.';
  out.push_back(error);

  // Secure aggregation: kMaxSecAggEntries entries where a message has a list.
  const uint32_t n = static_cast<uint32_t>(w::kMaxSecAggEntries);
  w::TaskOffer secure = offer;
  secure.secure_aggregation = samples::secagg_config();
  secure.secure_aggregation->cohort = w::kMaxSecAggCohort;
  secure.secure_aggregation->device_index = w::kMaxSecAggCohort - 1;
  secure.secure_aggregation->degree = w::kMaxSecAggDegree;
  out.push_back(secure);
  w::SecAggAdvertise advertise = samples::secagg_advertise();
  advertise.round_id = std::numeric_limits<uint64_t>::max();
  out.push_back(advertise);
  w::SecAggKeys keys = samples::secagg_keys();
  keys.keys.clear();
  for (uint32_t d = 0; d < n; ++d) keys.keys.push_back(samples::device_keys(d));
  out.push_back(keys);
  w::SecAggShares shares = samples::secagg_shares();
  w::SecAggInbox inbox = samples::secagg_inbox();
  shares.shares.clear();
  inbox.shares.clear();
  for (uint32_t d = 1; d <= n; ++d) {
    shares.shares.push_back(samples::sealed_share(0, d));
    inbox.shares.push_back(samples::sealed_share(d, 0));
  }
  out.push_back(shares);
  out.push_back(inbox);
  out.push_back(samples::secagg_poll());
  w::SecAggStatus status_message = samples::secagg_status();
  status_message.retry_after_ms = w::kMaxRetryMs;
  out.push_back(status_message);
  status_message.phase = w::SecAggPhase::kDone;
  status_message.outcome = w::SecAggOutcome::kNotCounted;  // the largest outcome
  out.push_back(status_message);
  w::SecAggUnmaskRequest unmask;
  unmask.round_id = 1;
  for (uint32_t d = 0; d < n; ++d) unmask.survivors.push_back(d);
  for (uint32_t d = n; d < 2 * n; ++d) unmask.dropped.push_back(d);
  out.push_back(unmask);
  w::SecAggUnmaskResponse response = samples::secagg_unmask_response();
  response.shares.resize(n, response.shares[0]);
  for (uint32_t d = 0; d < n; ++d) response.shares[d].owner = d;
  out.push_back(response);
  return out;
}

}  // namespace

TEST_SUITE("wire.frame") {
  TEST_CASE("a header round-trips through write_frame_header and read_frame_header") {
    for (MessageType type : kAllTypes) {
      uint8_t buf[w::kFrameHeaderBytes] = {};
      const uint32_t length = static_cast<uint32_t>(w::max_payload_bytes(type));
      REQUIRE(w::write_frame_header(type, length, {buf, sizeof buf}) == Status::kOk);
      CHECK(buf[0] == 'E');
      CHECK(buf[1] == 'F');
      CHECK(buf[2] == 1);
      CHECK(buf[3] == static_cast<uint8_t>(type));
      CHECK((buf[4] | buf[5] << 8 | buf[6] << 16 | uint32_t{buf[7]} << 24) == length);
      w::FrameHeader h;
      REQUIRE(w::read_frame_header({buf, sizeof buf}, &h) == Status::kOk);
      CHECK(h.version == w::kProtocolVersion);
      CHECK(h.type == type);
      CHECK(h.payload_length == length);
    }
  }

  TEST_CASE("the caps are the documented ones, and every cap is at most kMaxPayloadBytes") {
    CHECK(w::max_payload_bytes(MessageType::kHello) == 4096);
    CHECK(w::max_payload_bytes(MessageType::kTaskOffer) == 262144);
    CHECK(w::max_payload_bytes(MessageType::kRetryLater) == 1024);
    CHECK(w::max_payload_bytes(MessageType::kModelRequest) == 1024);
    CHECK(w::max_payload_bytes(MessageType::kModelChunk) == (1u << 20) + 1024);
    CHECK(w::max_payload_bytes(MessageType::kUploadStart) == 1024);
    CHECK(w::max_payload_bytes(MessageType::kUploadStatus) == 1024);
    CHECK(w::max_payload_bytes(MessageType::kUploadChunk) == (1u << 20) + 1024);
    CHECK(w::max_payload_bytes(MessageType::kCommit) == 8192);
    CHECK(w::max_payload_bytes(MessageType::kAck) == 1024);
    CHECK(w::max_payload_bytes(MessageType::kError) == 4096);
    CHECK(w::max_payload_bytes(MessageType::kSecAggAdvertise) == 1024);
    CHECK(w::max_payload_bytes(MessageType::kSecAggKeys) == 320 * 1024);
    CHECK(w::max_payload_bytes(MessageType::kSecAggShares) == 512 * 1024);
    CHECK(w::max_payload_bytes(MessageType::kSecAggInbox) == 512 * 1024);
    CHECK(w::max_payload_bytes(MessageType::kSecAggPoll) == 1024);
    CHECK(w::max_payload_bytes(MessageType::kSecAggStatus) == 1024);
    CHECK(w::max_payload_bytes(MessageType::kSecAggUnmaskRequest) == 40 * 1024);
    CHECK(w::max_payload_bytes(MessageType::kSecAggUnmaskResponse) == 256 * 1024);
    for (MessageType type : kAllTypes) CHECK(w::max_payload_bytes(type) <= w::kMaxPayloadBytes);
    CHECK(w::max_payload_bytes(static_cast<MessageType>(0)) == 0);
    CHECK(w::max_payload_bytes(static_cast<MessageType>(20)) == 0);
  }

  TEST_CASE("a declared length above the type's cap is refused from the 8 header bytes alone") {
    // Only the header exists: no payload buffer is passed, so nothing but the header can be read.
    for (MessageType type : kAllTypes) {
      const uint32_t cap = static_cast<uint32_t>(w::max_payload_bytes(type));
      for (uint32_t length : {cap + 1, cap + 4096, 0x7FFFFFFFu, 0xFFFFFFFFu}) {
        const std::vector<uint8_t> head = header_bytes(1, static_cast<uint8_t>(type), length);
        w::FrameHeader h;
        h.payload_length = 12345;
        CHECK(w::read_frame_header({head.data(), head.size()}, &h) == Status::kFrameTooLarge);
        CHECK(h.payload_length == 12345);  // untouched
      }
      const std::vector<uint8_t> at_cap = header_bytes(1, static_cast<uint8_t>(type), cap);
      w::FrameHeader h;
      CHECK(w::read_frame_header({at_cap.data(), at_cap.size()}, &h) == Status::kOk);
    }
    // A chunk-sized length is fine for a chunk and too large for a control message.
    const uint32_t chunk = 64u << 10;
    w::FrameHeader h;
    const auto upload = header_bytes(1, static_cast<uint8_t>(MessageType::kUploadChunk), chunk);
    const auto hello = header_bytes(1, static_cast<uint8_t>(MessageType::kHello), chunk);
    CHECK(w::read_frame_header({upload.data(), upload.size()}, &h) == Status::kOk);
    CHECK(w::read_frame_header({hello.data(), hello.size()}, &h) == Status::kFrameTooLarge);
  }

  TEST_CASE("unknown message types are refused") {
    for (int type : {0, 20, 21, 0x7F, 0x80, 0xFF}) {
      const auto head = header_bytes(1, static_cast<uint8_t>(type), 64);
      w::FrameHeader h;
      CHECK(w::read_frame_header({head.data(), head.size()}, &h) == Status::kUnknownMessageType);
      CHECK_FALSE(w::is_known_message_type(static_cast<MessageType>(type)));
      CHECK(std::string(w::message_type_name(static_cast<MessageType>(type))) == "unknown");
    }
  }

  TEST_CASE(
      "another protocol version is refused with kProtocolVersionMismatch, before the type is looked at") {
    for (int version : {0, 2, 3, 0xFF}) {
      for (int type : {1, 2, 0, 200}) {
        const auto head = header_bytes(static_cast<uint8_t>(version), static_cast<uint8_t>(type), 64);
        w::FrameHeader h;
        CHECK(w::read_frame_header({head.data(), head.size()}, &h) == Status::kProtocolVersionMismatch);
      }
    }
    // decode() re-checks a header built by hand.
    const std::vector<uint8_t> frame = encode_ok(samples::ack());
    w::FrameHeader h;
    REQUIRE(w::read_frame_header({frame.data(), frame.size()}, &h) == Status::kOk);
    h.version = 2;
    w::Message m;
    CHECK(w::decode(h, {frame.data() + 8, frame.size() - 8}, &m) == Status::kProtocolVersionMismatch);
  }

  TEST_CASE("bad magic, short headers and payloads too short for a FlatBuffer are refused") {
    w::FrameHeader h;
    auto head = header_bytes(1, 1, 64);
    head[0] = 'X';
    CHECK(w::read_frame_header({head.data(), head.size()}, &h) == Status::kBadMagic);
    head = header_bytes(1, 1, 64);
    head[1] = 'G';
    CHECK(w::read_frame_header({head.data(), head.size()}, &h) == Status::kBadMagic);
    head = header_bytes(1, 1, 64);
    for (size_t n = 0; n < w::kFrameHeaderBytes; ++n) {
      CHECK(w::read_frame_header({head.data(), n}, &h) == Status::kTruncated);
    }
    for (uint32_t length : {0u, 1u, 7u}) {
      head = header_bytes(1, 1, length);
      CHECK(w::read_frame_header({head.data(), head.size()}, &h) == Status::kMalformedMessage);
    }
    CHECK(w::read_frame_header({head.data(), head.size()}, nullptr) == Status::kInvalidArgument);
  }

  TEST_CASE("write_frame_header refuses what read_frame_header would refuse") {
    uint8_t buf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    CHECK(w::write_frame_header(MessageType::kHello, 64, {buf, 7}) == Status::kBufferTooSmall);
    CHECK(w::write_frame_header(static_cast<MessageType>(0), 64, {buf, 8}) == Status::kUnknownMessageType);
    CHECK(w::write_frame_header(MessageType::kHello, 4097, {buf, 8}) == Status::kFrameTooLarge);
    CHECK(w::write_frame_header(MessageType::kHello, 7, {buf, 8}) == Status::kMalformedMessage);
    for (int i = 0; i < 8; ++i) CHECK(buf[i] == i + 1);  // nothing written
  }

  TEST_CASE("names and directions") {
    CHECK(std::string(w::message_type_name(MessageType::kHello)) == "hello");
    CHECK(std::string(w::message_type_name(MessageType::kUploadChunk)) == "upload_chunk");
    CHECK(w::message_direction(MessageType::kHello) == w::Direction::kClientToServer);
    CHECK(w::message_direction(MessageType::kTaskOffer) == w::Direction::kServerToClient);
    CHECK(w::message_direction(MessageType::kCommit) == w::Direction::kClientToServer);
    CHECK(w::message_direction(MessageType::kAck) == w::Direction::kServerToClient);
    CHECK(w::message_direction(MessageType::kError) == w::Direction::kEither);
    CHECK(w::message_type_of<w::Commit>() == MessageType::kCommit);
    CHECK(std::string(edgefl::status_name(Status::kFrameTooLarge)) == "frame_too_large");
    CHECK(std::string(edgefl::status_name(Status::kMessageTypeMismatch)) == "message_type_mismatch");
    CHECK(std::string(w::violation_name(Violation::kOffsetBeyondTotal)) == "offset_beyond_total");
  }
}

TEST_SUITE("wire.roundtrip") {
  TEST_CASE("every message type round-trips field by field") {
    const std::vector<w::Message> all = samples::all();
    REQUIRE(all.size() == 19);
    for (const w::Message& m : all) {
      CAPTURE(std::string(w::message_type_name(w::message_type(m))));
      check_round_trip(m);
    }
  }

  TEST_CASE("the largest valid message of every type fits its cap and round-trips") {
    for (const w::Message& m : largest_messages()) {
      const MessageType type = w::message_type(m);
      CAPTURE(std::string(w::message_type_name(type)));
      const std::vector<uint8_t> frame = encode_ok(m);
      const size_t payload = frame.size() - w::kFrameHeaderBytes;
      MESSAGE(std::string(w::message_type_name(type))
              << ": largest payload " << payload << " of " << w::max_payload_bytes(type));
      CHECK(payload <= w::max_payload_bytes(type));
      check_round_trip(m);
    }
  }

  TEST_CASE(
      "optional fields may be empty: no model spec, nothing to download, no metrics, empty error text") {
    w::TaskOffer offer = samples::task_offer();
    offer.model_spec.clear();
    offer.initial_model_seed = 0;
    check_round_trip(offer);
    offer.base_model_version = offer.model_version;  // the device holds the model already
    offer.model_bytes = 0;
    check_round_trip(offer);
    offer.base_model_version = 0;  // the whole model
    offer.model_bytes = 123;
    check_round_trip(offer);
    w::Commit commit = samples::commit();
    commit.metrics.clear();
    check_round_trip(commit);
    w::Error error = samples::error();
    error.message.clear();
    check_round_trip(error);
    w::Hello hello = samples::hello();
    hello.supported_sparsifiers = 0;
    hello.supported_index_codings = 0;
    hello.capability_flags = 0;
    hello.cpu_cores = 0;
    check_round_trip(hello);
    w::UploadStatus status = samples::upload_status();
    status.offset = 0;
    check_round_trip(status);
    w::RetryLater retry = samples::retry_later();
    retry.retry_window_ms = 0;
    check_round_trip(retry);
    w::TaskOffer secure = samples::secure_task_offer();
    check_round_trip(secure);
    secure.secure_aggregation->noise_variance = 0;  // no DP
    secure.secure_aggregation->clip_l2_codes = 0;
    check_round_trip(secure);
    w::SecAggKeys keys = samples::secagg_keys();
    keys.keys.clear();  // no neighbour advertised
    check_round_trip(keys);
    w::SecAggInbox inbox = samples::secagg_inbox();
    inbox.shares.clear();
    check_round_trip(inbox);
    w::SecAggUnmaskRequest request = samples::secagg_unmask_request();
    request.survivors.clear();
    request.dropped.clear();
    check_round_trip(request);
  }

  TEST_CASE("encoding is deterministic and the variant overload gives the struct overload's bytes") {
    for (const w::Message& m : samples::all()) {
      std::vector<uint8_t> a, b;
      REQUIRE(w::encode(m, &a) == Status::kOk);
      REQUIRE(w::encode(m, &b) == Status::kOk);
      CHECK(a == b);
      std::visit(
          [&](const auto& typed) {
            std::vector<uint8_t> c;
            REQUIRE(w::encode(typed, &c) == Status::kOk);
            CHECK(c == a);
          },
          m);
      // Re-encoding what was decoded gives the same bytes again.
      const Decoded d = decode(a);
      REQUIRE(d.status == Status::kOk);
      CHECK(encode_ok(d.message) == a);
    }
  }

  TEST_CASE("a payload at any alignment decodes") {
    const std::vector<uint8_t> frame = encode_ok(samples::commit());
    w::FrameHeader h;
    REQUIRE(w::read_frame_header({frame.data(), frame.size()}, &h) == Status::kOk);
    for (size_t shift = 0; shift < 8; ++shift) {
      std::vector<uint8_t> buf(shift + h.payload_length);
      memcpy(buf.data() + shift, frame.data() + 8, h.payload_length);
      w::Message m;
      REQUIRE(w::decode(h, {buf.data() + shift, h.payload_length}, &m) == Status::kOk);
      CHECK(std::get<w::Commit>(m) == samples::commit());
    }
  }

  TEST_CASE("the schema carries the file identifier EFW1 at payload bytes 4..7") {
    const std::vector<uint8_t> frame = encode_ok(samples::hello());
    CHECK(memcmp(frame.data() + 8 + 4, "EFW1", 4) == 0);
    CHECK(std::string(fbw::EnvelopeIdentifier()) == "EFW1");
  }
}

TEST_SUITE("wire.malformed") {
  TEST_CASE("every truncation of a valid frame is kTruncated; trailing bytes are kSizeMismatch") {
    for (const w::Message& m : samples::all()) {
      const std::vector<uint8_t> frame = encode_ok(m);
      for (size_t n = 0; n < frame.size(); ++n) {
        const std::vector<uint8_t> cut(frame.begin(), frame.begin() + static_cast<std::ptrdiff_t>(n));
        CHECK(decode(cut).status == Status::kTruncated);
      }
      std::vector<uint8_t> longer = frame;
      longer.push_back(0);
      CHECK(decode(longer).status == Status::kSizeMismatch);
    }
    // decode() with a payload shorter than the header says.
    const std::vector<uint8_t> frame = encode_ok(samples::task_offer());
    w::FrameHeader h;
    REQUIRE(w::read_frame_header({frame.data(), frame.size()}, &h) == Status::kOk);
    w::Message m;
    CHECK(w::decode(h, {frame.data() + 8, h.payload_length - 1}, &m) == Status::kTruncated);
    CHECK(w::decode(h, {frame.data() + 8, h.payload_length}, nullptr) == Status::kInvalidArgument);
  }

  TEST_CASE("a wrong file identifier is kBadMagic") {
    for (const w::Message& m : samples::all()) {
      std::vector<uint8_t> frame = encode_ok(m);
      frame[8 + 7] = '2';  // "EFW2"
      CHECK(decode(frame).status == Status::kBadMagic);
    }
    // A FlatBuffer finished without any identifier.
    flatbuffers::FlatBufferBuilder b;
    const auto body =
        fbw::CreateAck(b, 42, b.CreateVector(std::vector<uint8_t>(16, 1)), fbw::UpdateDisposition::Accepted);
    b.Finish(fbw::CreateEnvelope(b, fbw::Message::Ack, body.Union()));
    CHECK(decode(frame_of(MessageType::kAck, b)).status == Status::kBadMagic);
  }

  TEST_CASE("a frame whose payload holds another message type is kMessageTypeMismatch") {
    const std::vector<w::Message> all = samples::all();
    for (size_t i = 0; i < all.size(); ++i) {
      const std::vector<uint8_t> frame = encode_ok(all[i]);
      for (MessageType type : kAllTypes) {
        if (type == w::message_type(all[i])) continue;
        std::vector<uint8_t> relabelled = frame;
        relabelled[3] = static_cast<uint8_t>(type);
        const size_t payload = frame.size() - 8;
        CAPTURE(std::string(w::message_type_name(type)));
        CHECK(decode(relabelled).status ==
              (payload > w::max_payload_bytes(type) ? Status::kFrameTooLarge : Status::kMessageTypeMismatch));
      }
    }
  }

  TEST_CASE("a FlatBuffer whose root is not an Envelope is refused") {
    // A bare Hello table as the root, with the right identifier: it does not verify as an Envelope.
    flatbuffers::FlatBufferBuilder b;
    const auto version = b.CreateString("0.1.0");
    fbw::HelloBuilder hb(b);
    hb.add_protocol_version(1);
    hb.add_sdk_version(version);
    hb.add_supported_value_coders(2);
    hb.add_memory_budget_bytes(1 << 20);
    b.Finish(hb.Finish(), fbw::EnvelopeIdentifier());
    CHECK(decode(frame_of(MessageType::kHello, b)).status == Status::kMalformedMessage);

    // A bare Ack table: its round_id (8 bytes) sits where the Envelope keeps its type byte.
    flatbuffers::FlatBufferBuilder a;
    a.Finish(fbw::CreateAck(a, 0x0101, a.CreateVector(std::vector<uint8_t>(16, 1)),
                            fbw::UpdateDisposition::Accepted),
             fbw::EnvelopeIdentifier());
    const Status s = decode(frame_of(MessageType::kAck, a)).status;
    CHECK((s == Status::kMalformedMessage || s == Status::kMessageTypeMismatch));
  }

  TEST_CASE("an envelope with no message, or with a type id this build does not know, is refused") {
    {
      flatbuffers::FlatBufferBuilder b;
      fbw::FinishEnvelopeBuffer(b, fbw::CreateEnvelope(b));  // NONE
      CHECK(decode(frame_of(MessageType::kHello, b)).status == Status::kMalformedMessage);
    }
    {
      flatbuffers::FlatBufferBuilder b;  // type Ack, body absent
      fbw::FinishEnvelopeBuffer(b, fbw::CreateEnvelope(b, fbw::Message::Ack));
      CHECK(decode(frame_of(MessageType::kAck, b)).status == Status::kMalformedMessage);
    }
    {
      // Union type 200 (unknown: FlatBuffers' verifier accepts it) around an Ack body, framed as Ack.
      flatbuffers::FlatBufferBuilder b;
      const auto body = fbw::CreateAck(b, 42, b.CreateVector(std::vector<uint8_t>(16, 1)),
                                       fbw::UpdateDisposition::Accepted);
      fbw::FinishEnvelopeBuffer(b, fbw::CreateEnvelope(b, static_cast<fbw::Message>(200), body.Union()));
      CHECK(decode(frame_of(MessageType::kAck, b)).status == Status::kMessageTypeMismatch);
    }
  }

  TEST_CASE("more tables than the verifier allows is kMalformedMessage, before any field rule") {
    // 62 metrics = 64 tables with the envelope and the commit: the verifier's limit; 63 is over it.
    w::Commit commit = samples::commit();
    commit.metrics.clear();
    for (int i = 0; i < 63; ++i) commit.metrics.push_back({"m" + std::to_string(i), 1.0});
    CHECK(decode(encode_raw(commit)).status == Status::kMalformedMessage);
    commit.metrics.pop_back();
    const Decoded d = decode(encode_raw(commit));
    CHECK(d.status == Status::kInvalidMessage);  // verifies, then breaks the kMaxMetrics rule
    CHECK(d.detail.violation == Violation::kTooLong);
    CHECK(std::string(d.detail.field) == "Commit.metrics");
  }

  TEST_CASE("many references to one shared Metric table count as many tables") {
    flatbuffers::FlatBufferBuilder b;
    const auto name = b.CreateString("loss");
    const auto metric = fbw::CreateMetric(b, name, 1.0);
    const std::vector<flatbuffers::Offset<fbw::Metric>> refs(500, metric);
    const auto metrics = b.CreateVector(refs);
    const auto nonce = b.CreateVector(std::vector<uint8_t>(16, 7));
    const auto id = b.CreateVector(std::vector<uint8_t>(16, 8));
    const auto digest = b.CreateVector(std::vector<uint8_t>(32, 9));
    const auto body = fbw::CreateCommit(b, 1, nonce, id, 100, 10, metrics, digest);
    fbw::FinishEnvelopeBuffer(b, fbw::CreateEnvelope(b, fbw::Message::Commit, body.Union()));
    CHECK(decode(frame_of(MessageType::kCommit, b)).status == Status::kMalformedMessage);
  }

  TEST_CASE("fixed-length fields missing or mis-sized on the wire, and a missing training table") {
    struct Case {
      const char* name;
      std::vector<uint8_t> frame;
      Violation violation;
      const char* field;
    };
    std::vector<Case> cases;
    auto ack_with_id = [](const std::vector<uint8_t>* id) {
      flatbuffers::FlatBufferBuilder b;
      flatbuffers::Offset<flatbuffers::Vector<uint8_t>> id_offset;
      if (id != nullptr) id_offset = b.CreateVector(*id);
      const auto body = fbw::CreateAck(b, 42, id_offset, fbw::UpdateDisposition::Accepted);
      fbw::FinishEnvelopeBuffer(b, fbw::CreateEnvelope(b, fbw::Message::Ack, body.Union()));
      return frame_of(MessageType::kAck, b);
    };
    const std::vector<uint8_t> id15(15, 1), id17(17, 1), id0;
    cases.push_back({"upload id absent", ack_with_id(nullptr), Violation::kMissing, "Ack.upload_id"});
    cases.push_back({"upload id empty", ack_with_id(&id0), Violation::kEmpty, "Ack.upload_id"});
    cases.push_back({"upload id 15 bytes", ack_with_id(&id15), Violation::kWrongLength, "Ack.upload_id"});
    cases.push_back({"upload id 17 bytes", ack_with_id(&id17), Violation::kWrongLength, "Ack.upload_id"});

    auto commit_with_digest = [](size_t digest_bytes) {
      flatbuffers::FlatBufferBuilder b;
      const auto nonce = b.CreateVector(std::vector<uint8_t>(16, 7));
      const auto id = b.CreateVector(std::vector<uint8_t>(16, 8));
      const auto digest = b.CreateVector(std::vector<uint8_t>(digest_bytes, 9));
      const auto body = fbw::CreateCommit(b, 1, nonce, id, 100, 10, 0, digest);
      fbw::FinishEnvelopeBuffer(b, fbw::CreateEnvelope(b, fbw::Message::Commit, body.Union()));
      return frame_of(MessageType::kCommit, b);
    };
    cases.push_back({"digest 31 bytes", commit_with_digest(31), Violation::kWrongLength, "Commit.digest"});
    cases.push_back({"digest 0 bytes", commit_with_digest(0), Violation::kEmpty, "Commit.digest"});
    {
      const std::vector<uint8_t> good = commit_with_digest(32);
      CHECK(decode(good).status == Status::kOk);
    }

    auto offer = [](bool with_training, bool with_digest, bool with_public_digest = true) {
      HandBuiltOffer o;
      o.training = with_training;
      o.digest = with_digest;
      o.public_digest = with_public_digest;
      return hand_built_offer(o);
    };
    cases.push_back({"training absent", offer(false, true), Violation::kMissing, "TaskOffer.training"});
    cases.push_back(
        {"model digest absent", offer(true, false), Violation::kMissing, "TaskOffer.model_digest"});
    cases.push_back({"public model digest absent", offer(true, true, false), Violation::kMissing,
                     "TaskOffer.public_model_digest"});
    CHECK(decode(offer(true, true)).status == Status::kOk);

    for (const Case& c : cases) {
      CAPTURE(c.name);
      const Decoded d = decode(c.frame);
      CHECK(d.status == Status::kInvalidMessage);
      CHECK(d.detail.violation == c.violation);
      CHECK(std::string(d.detail.field) == c.field);
    }
  }

  TEST_CASE("a tensor shape whose 8-byte elements sit 4 bytes off alignment decodes (no misaligned load)") {
    // The Verifier checks a vector's bounds and its 4-byte length, not the alignment of 8-byte
    // elements: build the shape as a [uint] vector of (low, high) halves, then give it the length
    // of the [ulong] it stands for. Under UBSan a misaligned 8-byte load would stop this test.
    const w::TaskOffer m = samples::task_offer();
    REQUIRE(!m.tensors.empty());
    const edgefl::TensorDesc& first = m.tensors[0];
    REQUIRE(!first.shape.empty());
    bool misaligned_seen = false;
    for (int pad = 0; pad < 2; ++pad) {
      CAPTURE(pad);
      HandBuiltOffer o;
      o.shape = [pad](flatbuffers::FlatBufferBuilder& b, size_t t, const edgefl::TensorDesc& desc) {
        if (t != 0) return b.CreateVector(desc.shape);
        std::vector<uint32_t> halves;
        for (uint64_t d : desc.shape) {
          halves.push_back(uint32_t(d));
          halves.push_back(uint32_t(d >> 32));
        }
        if (pad == 1) b.PushElement(uint32_t(0));
        return flatbuffers::Offset<flatbuffers::Vector<uint64_t>>(b.CreateVector(halves).o);
      };
      std::vector<uint8_t> frame = hand_built_offer(o);
      uint8_t* payload = frame.data() + w::kFrameHeaderBytes;
      const auto* shape = fbw::GetEnvelope(payload)->message_as_TaskOffer()->tensors()->Get(0)->shape();
      const size_t length_at = size_t(reinterpret_cast<const uint8_t*>(shape) - payload);
      REQUIRE(length_at + 4 <= frame.size() - w::kFrameHeaderBytes);
      REQUIRE(flatbuffers::ReadScalar<uint32_t>(payload + length_at) == 2 * first.shape.size());
      flatbuffers::WriteScalar<uint32_t>(payload + length_at, uint32_t(first.shape.size()));
      if ((length_at + 4) % 8 != 0) misaligned_seen = true;
      const Decoded d = decode(frame);
      REQUIRE(d.status == Status::kOk);
      const w::TaskOffer* got = std::get_if<w::TaskOffer>(&d.message);
      REQUIRE(got != nullptr);
      CHECK(got->tensors == m.tensors);
    }
    CHECK(misaligned_seen);
  }

  TEST_CASE("a chunk whose data does not match its CRC32C is refused") {
    for (const w::Message& m : {w::Message(samples::model_chunk()), w::Message(samples::upload_chunk())}) {
      std::vector<uint8_t> frame = encode_ok(m);
      const std::vector<uint8_t>& data =
          m.index() == 4 ? std::get<w::ModelChunk>(m).data : std::get<w::UploadChunk>(m).data;
      // Find the data in the payload and change one byte of it.
      size_t at = 0;
      for (size_t i = 8; i + data.size() <= frame.size(); ++i) {
        if (memcmp(frame.data() + i, data.data(), data.size()) == 0) at = i;
      }
      REQUIRE(at != 0);
      frame[at + data.size() / 2] ^= 0x10;
      const Decoded d = decode(frame);
      CHECK(d.status == Status::kInvalidMessage);
      CHECK(d.detail.violation == Violation::kChecksumMismatch);
      CHECK(std::string(d.detail.field) == (m.index() == 4 ? "ModelChunk.crc32c" : "UploadChunk.crc32c"));
    }
  }

  TEST_CASE("a string too long for the frame cap never reaches the decoder") {
    w::Error error;
    error.code = w::ErrorCode::kInternal;
    error.message = std::string(5000, 'x');
    std::vector<uint8_t> frame;
    CHECK(w::testing::encode_unchecked(error, &frame) == Status::kFrameTooLarge);
    const auto head = header_bytes(1, static_cast<uint8_t>(MessageType::kError), 5000 + 64);
    w::FrameHeader h;
    CHECK(w::read_frame_header({head.data(), head.size()}, &h) == Status::kFrameTooLarge);
  }
}

namespace {

struct RuleCase {
  std::string name;
  w::Message message;
  Status status;
  Violation violation;
  std::string field;
};

template <typename T, typename F>
RuleCase rule(const char* name, T message, F mutate, Violation violation, const char* field,
              Status status = Status::kInvalidMessage) {
  mutate(message);
  return RuleCase{name, w::Message(std::move(message)), status, violation, field};
}

std::vector<RuleCase> rule_cases() {
  using V = Violation;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<uint8_t> zeros16(16, 0), bytes15(15, 1), bytes33(33, 1);
  std::vector<RuleCase> c;
  // Hello
  const w::Hello h = samples::hello();
  c.push_back(rule(
      "hello: protocol version 2", h, [](w::Hello& m) { m.protocol_version = 2; }, V::kInconsistent,
      "Hello.protocol_version", Status::kProtocolVersionMismatch));
  c.push_back(rule(
      "hello: empty sdk version", h, [](w::Hello& m) { m.sdk_version.clear(); }, V::kEmpty,
      "Hello.sdk_version"));
  c.push_back(rule(
      "hello: 33-char sdk version", h, [](w::Hello& m) { m.sdk_version = std::string(33, '1'); }, V::kTooLong,
      "Hello.sdk_version"));
  c.push_back(rule(
      "hello: newline in sdk version", h, [](w::Hello& m) { m.sdk_version = "0.1\n"; }, V::kBadText,
      "Hello.sdk_version"));
  c.push_back(rule(
      "hello: NUL in sdk version", h, [](w::Hello& m) { m.sdk_version = std::string("0.1\0x", 5); },
      V::kBadText, "Hello.sdk_version"));
  c.push_back(rule(
      "hello: no value coder", h, [](w::Hello& m) { m.supported_value_coders = 0; }, V::kOutOfRange,
      "Hello.supported_value_coders"));
  c.push_back(rule(
      "hello: only value coder bits this build does not know", h,
      [](w::Hello& m) { m.supported_value_coders = 1u | (1u << 12); }, V::kOutOfRange,
      "Hello.supported_value_coders"));
  c.push_back(rule(
      "hello: no memory", h, [](w::Hello& m) { m.memory_budget_bytes = 0; }, V::kOutOfRange,
      "Hello.memory_budget_bytes"));
  c.push_back(rule(
      "hello: memory above 2^48", h, [](w::Hello& m) { m.memory_budget_bytes = (1ull << 48) + 1; },
      V::kOutOfRange, "Hello.memory_budget_bytes"));
  c.push_back(rule(
      "hello: 1025 cores", h, [](w::Hello& m) { m.cpu_cores = 1025; }, V::kOutOfRange, "Hello.cpu_cores"));
  // TaskOffer
  const w::TaskOffer o = samples::task_offer();
  c.push_back(rule(
      "offer: round 0", o, [](w::TaskOffer& m) { m.round_id = 0; }, V::kOutOfRange, "TaskOffer.round_id"));
  c.push_back(rule(
      "offer: empty nonce", o, [](w::TaskOffer& m) { m.round_nonce.clear(); }, V::kEmpty,
      "TaskOffer.round_nonce"));
  c.push_back(rule(
      "offer: 15-byte nonce", o, [&](w::TaskOffer& m) { m.round_nonce = bytes15; }, V::kWrongLength,
      "TaskOffer.round_nonce"));
  c.push_back(rule(
      "offer: 33-byte nonce", o, [&](w::TaskOffer& m) { m.round_nonce = bytes33; }, V::kWrongLength,
      "TaskOffer.round_nonce"));
  c.push_back(rule(
      "offer: zero nonce", o, [&](w::TaskOffer& m) { m.round_nonce = zeros16; }, V::kAllZero,
      "TaskOffer.round_nonce"));
  c.push_back(rule(
      "offer: no model bytes", o, [](w::TaskOffer& m) { m.model_bytes = 0; }, V::kOutOfRange,
      "TaskOffer.model_bytes"));
  c.push_back(rule(
      "offer: model above 4 GiB", o, [](w::TaskOffer& m) { m.model_bytes = (1ull << 32) + 4; },
      V::kOutOfRange, "TaskOffer.model_bytes"));
  c.push_back(rule(
      "offer: no parameters", o, [](w::TaskOffer& m) { m.parameter_count = 0; }, V::kOutOfRange,
      "TaskOffer.parameter_count"));
  c.push_back(rule(
      "offer: space in model spec", o, [](w::TaskOffer& m) { m.model_spec = "mlp 784"; }, V::kBadText,
      "TaskOffer.model_spec"));
  c.push_back(rule(
      "offer: 129-char model spec", o, [](w::TaskOffer& m) { m.model_spec = std::string(129, 'c'); },
      V::kTooLong, "TaskOffer.model_spec"));
  c.push_back(rule(
      "offer: no tensors", o, [](w::TaskOffer& m) { m.tensors.clear(); }, V::kMissing, "TaskOffer.tensors"));
  c.push_back(rule(
      "offer: tensors short of parameter_count", o, [](w::TaskOffer& m) { m.tensors.pop_back(); },
      V::kInconsistent, "TaskOffer.tensors"));
  c.push_back(rule(
      "offer: tensors beyond parameter_count", o, [](w::TaskOffer& m) { m.tensors[2].shape = {51}; },
      V::kInconsistent, "TaskOffer.tensors"));
  c.push_back(rule(
      "offer: empty tensor name", o, [](w::TaskOffer& m) { m.tensors[0].name.clear(); }, V::kEmpty,
      "TaskOffer.tensors.name"));
  c.push_back(rule(
      "offer: space in a tensor name", o, [](w::TaskOffer& m) { m.tensors[0].name = "conv weight"; },
      V::kBadText, "TaskOffer.tensors.name"));
  c.push_back(rule(
      "offer: 129-char tensor name", o, [](w::TaskOffer& m) { m.tensors[0].name = std::string(129, 't'); },
      V::kTooLong, "TaskOffer.tensors.name"));
  c.push_back(rule(
      "offer: tensor name twice", o, [](w::TaskOffer& m) { m.tensors[2].name = "conv.weight"; },
      V::kDuplicateName, "TaskOffer.tensors.name"));
  c.push_back(rule(
      "offer: zero dimension", o,
      [](w::TaskOffer& m) {
        m.tensors[0].shape = {0, 5000};
      },
      V::kOutOfRange, "TaskOffer.tensors.shape"));
  c.push_back(rule(
      "offer: rank 9", o, [](w::TaskOffer& m) { m.tensors[0].shape.assign(9, 1); }, V::kTooLong,
      "TaskOffer.tensors.shape"));
  c.push_back(rule(
      "offer: unknown dtype", o, [](w::TaskOffer& m) { m.tensors[1].dtype = edgefl::TensorDtype(7); },
      V::kOutOfRange, "TaskOffer.tensors.dtype"));
  c.push_back(rule(
      "offer: batch 0", o, [](w::TaskOffer& m) { m.training.batch_size = 0; }, V::kOutOfRange,
      "TrainingConfig.batch_size"));
  c.push_back(rule(
      "offer: batch 65537", o, [](w::TaskOffer& m) { m.training.batch_size = 65537; }, V::kOutOfRange,
      "TrainingConfig.batch_size"));
  c.push_back(rule(
      "offer: 0 epochs", o, [](w::TaskOffer& m) { m.training.local_epochs = 0; }, V::kOutOfRange,
      "TrainingConfig.local_epochs"));
  c.push_back(rule(
      "offer: NaN learning rate", o, [&](w::TaskOffer& m) { m.training.learning_rate = nan; }, V::kNonFinite,
      "TrainingConfig.learning_rate"));
  c.push_back(rule(
      "offer: infinite learning rate", o, [&](w::TaskOffer& m) { m.training.learning_rate = inf; },
      V::kNonFinite, "TrainingConfig.learning_rate"));
  c.push_back(rule(
      "offer: zero learning rate", o, [](w::TaskOffer& m) { m.training.learning_rate = 0.0f; },
      V::kOutOfRange, "TrainingConfig.learning_rate"));
  c.push_back(rule(
      "offer: negative learning rate", o, [](w::TaskOffer& m) { m.training.learning_rate = -0.1f; },
      V::kOutOfRange, "TrainingConfig.learning_rate"));
  c.push_back(rule(
      "offer: momentum 1", o, [](w::TaskOffer& m) { m.training.momentum = 1.0f; }, V::kOutOfRange,
      "TrainingConfig.momentum"));
  c.push_back(rule(
      "offer: -inf momentum", o, [&](w::TaskOffer& m) { m.training.momentum = -inf; }, V::kNonFinite,
      "TrainingConfig.momentum"));
  c.push_back(rule(
      "offer: NaN weight decay", o, [&](w::TaskOffer& m) { m.training.weight_decay = nan; }, V::kNonFinite,
      "TrainingConfig.weight_decay"));
  c.push_back(rule(
      "offer: negative prox mu", o, [](w::TaskOffer& m) { m.training.prox_mu = -0.5f; }, V::kOutOfRange,
      "TrainingConfig.prox_mu"));
  c.push_back(rule(
      "offer: no uplink codec", o, [](w::TaskOffer& m) { m.uplink_codec.clear(); }, V::kEmpty,
      "TaskOffer.uplink_codec"));
  c.push_back(rule(
      "offer: unknown uplink codec", o, [](w::TaskOffer& m) { m.uplink_codec = "zstd"; }, V::kBadCodecSpec,
      "TaskOffer.uplink_codec"));
  c.push_back(rule(
      "offer: impossible uplink codec", o, [](w::TaskOffer& m) { m.uplink_codec = "topk:2+q4"; },
      V::kBadCodecSpec, "TaskOffer.uplink_codec"));
  c.push_back(rule(
      "offer: q3 downlink codec", o, [](w::TaskOffer& m) { m.downlink_codec = "q3"; }, V::kBadCodecSpec,
      "TaskOffer.downlink_codec"));
  c.push_back(rule(
      "offer: 129-char codec", o, [](w::TaskOffer& m) { m.uplink_codec = "fp32" + std::string(125, ' '); },
      V::kTooLong, "TaskOffer.uplink_codec"));
  c.push_back(rule(
      "offer: patches from a version after the model's", o,
      [](w::TaskOffer& m) { m.base_model_version = m.model_version + 1; }, V::kInconsistent,
      "TaskOffer.base_model_version"));
  c.push_back(rule(
      "offer: bytes to download from the version held", o,
      [](w::TaskOffer& m) { m.base_model_version = m.model_version; }, V::kOutOfRange,
      "TaskOffer.model_bytes"));
  c.push_back(rule(
      "offer: model version 0", o, [](w::TaskOffer& m) { m.model_version = 0; }, V::kOutOfRange,
      "TaskOffer.model_version"));
  c.push_back(rule(
      "offer: no downlink codec", o, [](w::TaskOffer& m) { m.downlink_codec.clear(); }, V::kEmpty,
      "TaskOffer.downlink_codec"));
  c.push_back(rule(
      "offer: no deadline", o, [](w::TaskOffer& m) { m.deadline_ms = 0; }, V::kOutOfRange,
      "TaskOffer.deadline_ms"));
  c.push_back(rule(
      "offer: deadline above 7 days", o, [](w::TaskOffer& m) { m.deadline_ms = w::kMaxDeadlineMs + 1; },
      V::kOutOfRange, "TaskOffer.deadline_ms"));
  c.push_back(rule(
      "offer: no upload allowed", o, [](w::TaskOffer& m) { m.max_upload_bytes = 0; }, V::kOutOfRange,
      "TaskOffer.max_upload_bytes"));
  c.push_back(rule(
      "offer: chunk above 1 MiB", o, [](w::TaskOffer& m) { m.max_chunk_bytes = w::kMaxChunkBytes + 1; },
      V::kOutOfRange, "TaskOffer.max_chunk_bytes"));
  // RetryLater
  const w::RetryLater r = samples::retry_later();
  c.push_back(rule(
      "retry: after 0", r, [](w::RetryLater& m) { m.retry_after_ms = 0; }, V::kOutOfRange,
      "RetryLater.retry_after_ms"));
  c.push_back(rule(
      "retry: after 8 days", r, [](w::RetryLater& m) { m.retry_after_ms = 8u * 86400000u; }, V::kOutOfRange,
      "RetryLater.retry_after_ms"));
  c.push_back(rule(
      "retry: window 8 days", r, [](w::RetryLater& m) { m.retry_window_ms = 8u * 86400000u; }, V::kOutOfRange,
      "RetryLater.retry_window_ms"));
  c.push_back(rule(
      "retry: reason 0", r, [](w::RetryLater& m) { m.reason = static_cast<w::RetryReason>(0); },
      V::kOutOfRange, "RetryLater.reason"));
  c.push_back(rule(
      "retry: reason 6", r, [](w::RetryLater& m) { m.reason = static_cast<w::RetryReason>(6); },
      V::kOutOfRange, "RetryLater.reason"));
  // ModelRequest
  const w::ModelRequest q = samples::model_request();
  c.push_back(rule(
      "request: round 0", q, [](w::ModelRequest& m) { m.round_id = 0; }, V::kOutOfRange,
      "ModelRequest.round_id"));
  c.push_back(rule(
      "request: offset 4 GiB", q, [](w::ModelRequest& m) { m.offset = 1ull << 32; }, V::kOffsetBeyondTotal,
      "ModelRequest.offset"));
  c.push_back(rule(
      "request: length 0", q, [](w::ModelRequest& m) { m.max_length = 0; }, V::kOutOfRange,
      "ModelRequest.max_length"));
  c.push_back(rule(
      "request: length above 1 MiB", q, [](w::ModelRequest& m) { m.max_length = w::kMaxChunkBytes + 1; },
      V::kOutOfRange, "ModelRequest.max_length"));
  // ModelChunk
  const w::ModelChunk mc = samples::model_chunk();
  c.push_back(rule(
      "model chunk: round 0", mc, [](w::ModelChunk& m) { m.round_id = 0; }, V::kOutOfRange,
      "ModelChunk.round_id"));
  c.push_back(rule(
      "model chunk: total 0", mc, [](w::ModelChunk& m) { m.total_bytes = 0; }, V::kOutOfRange,
      "ModelChunk.total_bytes"));
  c.push_back(rule(
      "model chunk: no data", mc, [](w::ModelChunk& m) { m.data.clear(); }, V::kEmpty, "ModelChunk.data"));
  c.push_back(rule(
      "model chunk: offset = total", mc, [](w::ModelChunk& m) { m.offset = m.total_bytes; },
      V::kOffsetBeyondTotal, "ModelChunk.offset"));
  c.push_back(rule(
      "model chunk: offset > total", mc, [](w::ModelChunk& m) { m.offset = ~uint64_t{0}; },
      V::kOffsetBeyondTotal, "ModelChunk.offset"));
  c.push_back(rule(
      "model chunk: data past the end", mc, [](w::ModelChunk& m) { m.offset = m.total_bytes - 99; },
      V::kOffsetBeyondTotal, "ModelChunk.offset"));
  c.push_back(rule(
      "model chunk: data above 1 MiB", mc, [](w::ModelChunk& m) { m.data.assign(w::kMaxChunkBytes + 1, 1); },
      V::kTooLong, "ModelChunk.data"));
  // UploadStart
  const w::UploadStart us = samples::upload_start();
  c.push_back(rule(
      "upload start: zero upload id", us, [](w::UploadStart& m) { m.upload_id = w::UploadId{}; }, V::kAllZero,
      "UploadStart.upload_id"));
  c.push_back(rule(
      "upload start: empty nonce", us, [](w::UploadStart& m) { m.round_nonce.clear(); }, V::kEmpty,
      "UploadStart.round_nonce"));
  c.push_back(rule(
      "upload start: total 0", us, [](w::UploadStart& m) { m.total_bytes = 0; }, V::kOutOfRange,
      "UploadStart.total_bytes"));
  c.push_back(rule(
      "upload start: total above 4 GiB", us, [](w::UploadStart& m) { m.total_bytes = (1ull << 32) + 1; },
      V::kOutOfRange, "UploadStart.total_bytes"));
  // UploadStatus
  const w::UploadStatus st = samples::upload_status();
  c.push_back(rule(
      "upload status: offset > total", st, [](w::UploadStatus& m) { m.offset = m.total_bytes + 1; },
      V::kOffsetBeyondTotal, "UploadStatus.offset"));
  c.push_back(rule(
      "upload status: zero upload id", st, [](w::UploadStatus& m) { m.upload_id = w::UploadId{}; },
      V::kAllZero, "UploadStatus.upload_id"));
  // UploadChunk
  const w::UploadChunk uc = samples::upload_chunk();
  c.push_back(rule(
      "upload chunk: round 0", uc, [](w::UploadChunk& m) { m.round_id = 0; }, V::kOutOfRange,
      "UploadChunk.round_id"));
  c.push_back(rule(
      "upload chunk: no data", uc, [](w::UploadChunk& m) { m.data.clear(); }, V::kEmpty, "UploadChunk.data"));
  c.push_back(rule(
      "upload chunk: offset > total", uc, [](w::UploadChunk& m) { m.offset = m.total_bytes + 5; },
      V::kOffsetBeyondTotal, "UploadChunk.offset"));
  c.push_back(rule(
      "upload chunk: offset + length overflows", uc,
      [](w::UploadChunk& m) {
        m.total_bytes = w::kMaxUploadBytes;
        m.offset = w::kMaxUploadBytes - 1;
      },
      V::kOffsetBeyondTotal, "UploadChunk.offset"));
  c.push_back(rule(
      "upload chunk: zero upload id", uc, [](w::UploadChunk& m) { m.upload_id = w::UploadId{}; }, V::kAllZero,
      "UploadChunk.upload_id"));
  // Commit
  const w::Commit cm = samples::commit();
  c.push_back(rule(
      "commit: no samples", cm, [](w::Commit& m) { m.sample_count = 0; }, V::kOutOfRange,
      "Commit.sample_count"));
  c.push_back(rule(
      "commit: 15-byte nonce", cm, [&](w::Commit& m) { m.round_nonce = bytes15; }, V::kWrongLength,
      "Commit.round_nonce"));
  c.push_back(rule(
      "commit: total 0", cm, [](w::Commit& m) { m.total_bytes = 0; }, V::kOutOfRange, "Commit.total_bytes"));
  c.push_back(rule(
      "commit: NaN metric", cm, [](w::Commit& m) { m.metrics[1].value = std::nan(""); }, V::kNonFinite,
      "Metric.value"));
  c.push_back(rule(
      "commit: infinite metric", cm, [](w::Commit& m) { m.metrics[0].value = -HUGE_VAL; }, V::kNonFinite,
      "Metric.value"));
  c.push_back(rule(
      "commit: unnamed metric", cm, [](w::Commit& m) { m.metrics[2].name.clear(); }, V::kEmpty,
      "Metric.name"));
  c.push_back(rule(
      "commit: upper-case metric name", cm, [](w::Commit& m) { m.metrics[2].name = "Loss"; }, V::kBadText,
      "Metric.name"));
  c.push_back(rule(
      "commit: 65-char metric name", cm, [](w::Commit& m) { m.metrics[2].name = std::string(65, 'a'); },
      V::kTooLong, "Metric.name"));
  c.push_back(rule(
      "commit: duplicate metric", cm, [](w::Commit& m) { m.metrics[2].name = m.metrics[0].name; },
      V::kDuplicateName, "Metric.name"));
  c.push_back(rule(
      "commit: 33 metrics", cm,
      [](w::Commit& m) {
        m.metrics.clear();
        for (int i = 0; i < 33; ++i) m.metrics.push_back({"m" + std::to_string(i), 0.5});
      },
      V::kTooLong, "Commit.metrics"));
  // Ack
  const w::Ack a = samples::ack();
  c.push_back(rule(
      "ack: round 0", a, [](w::Ack& m) { m.round_id = 0; }, V::kOutOfRange, "Ack.round_id"));
  c.push_back(rule(
      "ack: zero upload id", a, [](w::Ack& m) { m.upload_id = w::UploadId{}; }, V::kAllZero,
      "Ack.upload_id"));
  c.push_back(rule(
      "ack: disposition 0", a, [](w::Ack& m) { m.disposition = static_cast<w::UpdateDisposition>(0); },
      V::kOutOfRange, "Ack.disposition"));
  c.push_back(rule(
      "ack: disposition 6", a, [](w::Ack& m) { m.disposition = static_cast<w::UpdateDisposition>(6); },
      V::kOutOfRange, "Ack.disposition"));
  c.push_back(rule(
      "ack: reason 8", a,
      [](w::Ack& m) {
        m.disposition = w::UpdateDisposition::kRejected;
        m.reason = static_cast<w::RejectReason>(8);
      },
      V::kOutOfRange, "Ack.reason"));
  c.push_back(rule(
      "ack: a reason on an accepted update", a,
      [](w::Ack& m) {
        m.disposition = w::UpdateDisposition::kAccepted;
        m.reason = w::RejectReason::kNormTooLarge;
      },
      V::kInconsistent, "Ack.reason"));
  // Error
  const w::Error e = samples::error();
  c.push_back(rule(
      "error: code 0", e, [](w::Error& m) { m.code = static_cast<w::ErrorCode>(0); }, V::kOutOfRange,
      "Error.code"));
  c.push_back(rule(
      "error: code 13", e, [](w::Error& m) { m.code = static_cast<w::ErrorCode>(13); }, V::kOutOfRange,
      "Error.code"));
  c.push_back(rule(
      "error: 1025-byte message", e, [](w::Error& m) { m.message = std::string(1025, 'x'); }, V::kTooLong,
      "Error.message"));
  const char* const bad_texts[] = {
      "\xC0\x80",          // overlong NUL
      "\xE0\x80\xAF",      // overlong '/'
      "\x80",              // continuation byte first
      "\xC3",              // truncated sequence
      "\xED\xA0\x80",      // UTF-16 surrogate
      "\xF4\x90\x80\x80",  // above U+10FFFF
      "\xF5\x80\x80\x80",  // invalid lead byte
      "\xC2\x85",          // C1 control (NEL)
      "bell\x07",          // C0 control
      "del\x7F",           // DEL
      "cr\r",              // only tab and newline pass
  };
  for (const char* text : bad_texts) {
    c.push_back(rule(
        "error: bad text", e, [text](w::Error& m) { m.message = text; }, V::kBadText, "Error.message"));
  }
  c.push_back(rule(
      "error: embedded NUL", e, [](w::Error& m) { m.message = std::string("a\0b", 3); }, V::kBadText,
      "Error.message"));
  // Secure aggregation
  const w::TaskOffer so = samples::secure_task_offer();
  c.push_back(rule(
      "secure offer: 16-byte nonce", so, [](w::TaskOffer& m) { m.round_nonce.resize(16); }, V::kInconsistent,
      "TaskOffer.round_nonce"));
  c.push_back(rule(
      "secure offer: cohort 2", so, [](w::TaskOffer& m) { m.secure_aggregation->cohort = 2; }, V::kOutOfRange,
      "SecAggConfig.cohort"));
  c.push_back(rule(
      "secure offer: index = cohort", so,
      [](w::TaskOffer& m) { m.secure_aggregation->device_index = m.secure_aggregation->cohort; },
      V::kOutOfRange, "SecAggConfig.device_index"));
  c.push_back(rule(
      "secure offer: degree = cohort", so,
      [](w::TaskOffer& m) { m.secure_aggregation->degree = m.secure_aggregation->cohort; }, V::kOutOfRange,
      "SecAggConfig.degree"));
  c.push_back(rule(
      "secure offer: threshold above degree", so,
      [](w::TaskOffer& m) { m.secure_aggregation->threshold = m.secure_aggregation->degree + 1; },
      V::kOutOfRange, "SecAggConfig.threshold"));
  c.push_back(rule(
      "secure offer: 33-bit modulus", so, [](w::TaskOffer& m) { m.secure_aggregation->modulus_bits = 33; },
      V::kOutOfRange, "SecAggConfig.modulus_bits"));
  c.push_back(rule(
      "secure offer: more words than parameters", so,
      [](w::TaskOffer& m) { m.secure_aggregation->words = m.parameter_count + 1; }, V::kOutOfRange,
      "SecAggConfig.words"));
  c.push_back(rule(
      "secure offer: max code 0", so, [](w::TaskOffer& m) { m.secure_aggregation->max_code = 0; },
      V::kOutOfRange, "SecAggConfig.max_code"));
  c.push_back(rule(
      "secure offer: noise without a clip", so,
      [](w::TaskOffer& m) { m.secure_aggregation->clip_l2_codes = 0; }, V::kInconsistent,
      "SecAggConfig.clip_l2_codes"));
  c.push_back(rule(
      "secure offer: NaN clip", so,
      [](w::TaskOffer& m) { m.secure_aggregation->clip_l2_codes = std::numeric_limits<double>::quiet_NaN(); },
      V::kNonFinite, "SecAggConfig.clip_l2_codes"));
  c.push_back(rule(
      "secure offer: noise above 2^20", so,
      [](w::TaskOffer& m) { m.secure_aggregation->noise_variance = w::kMaxSecAggNoiseVariance + 1; },
      V::kOutOfRange, "SecAggConfig.noise_variance"));
  c.push_back(rule(
      "secure offer: phase 0 ms", so, [](w::TaskOffer& m) { m.secure_aggregation->phase_ms = 0; },
      V::kOutOfRange, "SecAggConfig.phase_ms"));
  const w::SecAggAdvertise adv = samples::secagg_advertise();
  c.push_back(rule(
      "advertise: round 0", adv, [](w::SecAggAdvertise& m) { m.round_id = 0; }, V::kOutOfRange,
      "SecAggAdvertise.round_id"));
  c.push_back(rule(
      "advertise: 16-byte nonce", adv, [](w::SecAggAdvertise& m) { m.round_nonce.resize(16); },
      V::kWrongLength, "SecAggAdvertise.round_nonce"));
  c.push_back(rule(
      "advertise: zero mask key", adv, [](w::SecAggAdvertise& m) { m.keys.mask_public = w::SecAggKey{}; },
      V::kAllZero, "SecAggAdvertise.keys"));
  c.push_back(rule(
      "advertise: device 2^20", adv, [](w::SecAggAdvertise& m) { m.keys.device = w::kMaxSecAggCohort; },
      V::kOutOfRange, "SecAggAdvertise.keys"));
  const w::SecAggKeys keys = samples::secagg_keys();
  c.push_back(rule(
      "keys: a device twice", keys, [](w::SecAggKeys& m) { m.keys[2].device = m.keys[0].device; },
      V::kDuplicateEntry, "SecAggKeys.keys.device"));
  c.push_back(rule(
      "keys: a zero cipher key", keys, [](w::SecAggKeys& m) { m.keys[1].cipher_public = w::SecAggKey{}; },
      V::kAllZero, "SecAggKeys.keys"));
  const w::SecAggShares shares = samples::secagg_shares();
  c.push_back(rule(
      "shares: none", shares, [](w::SecAggShares& m) { m.shares.clear(); }, V::kEmpty,
      "SecAggShares.shares"));
  c.push_back(rule(
      "shares: to the sender", shares, [](w::SecAggShares& m) { m.shares[1].to = m.shares[1].from; },
      V::kOutOfRange, "SecAggShares.shares"));
  c.push_back(rule(
      "shares: two senders", shares, [](w::SecAggShares& m) { m.shares[2].from = 11; }, V::kInconsistent,
      "SecAggShares.shares"));
  c.push_back(rule(
      "shares: one receiver twice", shares, [](w::SecAggShares& m) { m.shares[2].to = m.shares[0].to; },
      V::kDuplicateEntry, "SecAggShares.shares"));
  c.push_back(rule(
      "shares: zero commitment", shares, [](w::SecAggShares& m) { m.seed_commitment = w::SecAggKey{}; },
      V::kAllZero, "SecAggShares.seed_commitment"));
  c.push_back(rule(
      "shares: more than 4096", shares,
      [](w::SecAggShares& m) {
        m.shares.clear();
        for (uint32_t d = 1; d <= w::kMaxSecAggEntries + 1; ++d)
          m.shares.push_back(samples::sealed_share(0, d));
      },
      V::kTooLong, "SecAggShares.shares"));
  const w::SecAggInbox inbox = samples::secagg_inbox();
  c.push_back(rule(
      "inbox: two receivers", inbox, [](w::SecAggInbox& m) { m.shares[1].to = 4; }, V::kInconsistent,
      "SecAggInbox.shares"));
  c.push_back(rule(
      "inbox: one sender twice", inbox, [](w::SecAggInbox& m) { m.shares[1].from = m.shares[0].from; },
      V::kDuplicateEntry, "SecAggInbox.shares"));
  const w::SecAggPoll poll = samples::secagg_poll();
  c.push_back(rule(
      "poll: masked-input phase", poll, [](w::SecAggPoll& m) { m.phase = w::SecAggPhase::kMaskedInput; },
      V::kOutOfRange, "SecAggPoll.phase"));
  c.push_back(rule(
      "poll: phase 0", poll, [](w::SecAggPoll& m) { m.phase = static_cast<w::SecAggPhase>(0); },
      V::kOutOfRange, "SecAggPoll.phase"));
  const w::SecAggStatus ss = samples::secagg_status();
  c.push_back(rule(
      "status: phase 6", ss, [](w::SecAggStatus& m) { m.phase = static_cast<w::SecAggPhase>(6); },
      V::kOutOfRange, "SecAggStatus.phase"));
  c.push_back(rule(
      "status: retry above 7 days", ss, [](w::SecAggStatus& m) { m.retry_after_ms = w::kMaxRetryMs + 1; },
      V::kOutOfRange, "SecAggStatus.retry_after_ms"));
  c.push_back(rule(
      "status: outcome 4", ss,
      [](w::SecAggStatus& m) {
        m.phase = w::SecAggPhase::kDone;
        m.outcome = static_cast<w::SecAggOutcome>(4);
      },
      V::kOutOfRange, "SecAggStatus.outcome"));
  c.push_back(rule(
      "status: an outcome before the round is done", ss,
      [](w::SecAggStatus& m) { m.outcome = w::SecAggOutcome::kCounted; }, V::kInconsistent,
      "SecAggStatus.outcome"));
  const w::SecAggUnmaskRequest req = samples::secagg_unmask_request();
  c.push_back(rule(
      "unmask request: survivor also dropped", req, [](w::SecAggUnmaskRequest& m) { m.dropped.push_back(3); },
      V::kDuplicateEntry, "SecAggUnmaskRequest.dropped"));
  c.push_back(rule(
      "unmask request: index 2^20", req,
      [](w::SecAggUnmaskRequest& m) { m.survivors.push_back(w::kMaxSecAggCohort); }, V::kOutOfRange,
      "SecAggUnmaskRequest.survivors"));
  const w::SecAggUnmaskResponse resp = samples::secagg_unmask_response();
  c.push_back(rule(
      "unmask response: kind 2", resp, [](w::SecAggUnmaskResponse& m) { m.shares[0].kind = 2; },
      V::kOutOfRange, "SecAggUnmaskResponse.shares.kind"));
  c.push_back(rule(
      "unmask response: x 0", resp, [](w::SecAggUnmaskResponse& m) { m.shares[1].x = 0; }, V::kOutOfRange,
      "SecAggUnmaskResponse.shares.x"));
  c.push_back(rule(
      "unmask response: one owner twice", resp,
      [](w::SecAggUnmaskResponse& m) { m.shares[1].owner = m.shares[0].owner; }, V::kDuplicateEntry,
      "SecAggUnmaskResponse.shares.owner"));
  return c;
}

}  // namespace

TEST_SUITE("wire.semantics") {
  TEST_CASE("every field rule: validate, encode and decode all refuse with the same violation") {
    const std::vector<RuleCase> cases = rule_cases();
    MESSAGE(cases.size() << " rule cases");
    for (const RuleCase& c : cases) {
      CAPTURE(c.name);
      w::DecodeDetail detail;
      CHECK(w::validate(c.message, &detail) == c.status);
      CHECK(detail.violation == c.violation);
      CHECK(std::string(detail.field) == c.field);

      std::vector<uint8_t> frame = {1, 2, 3};
      detail = w::DecodeDetail{};
      CHECK(w::encode(c.message, &frame, &detail) == c.status);
      CHECK(frame == std::vector<uint8_t>{1, 2, 3});  // unchanged
      CHECK(detail.violation == c.violation);

      const Decoded d = decode(encode_raw(c.message));
      CHECK(d.status == c.status);
      CHECK(d.detail.violation == c.violation);
      CHECK(std::string(d.detail.field) == c.field);
    }
  }

  TEST_CASE(
      "a Hello's unknown advertisement bits: encode and validate refuse them, decode drops them (a newer "
      "device gets in)") {
    struct BitCase {
      const char* field;
      std::function<void(w::Hello&)> add;
    };
    const std::vector<BitCase> cases = {
        {"Hello.supported_sparsifiers", [](w::Hello& m) { m.supported_sparsifiers |= 1u << 5; }},
        {"Hello.supported_value_coders", [](w::Hello& m) { m.supported_value_coders |= 1u; }},  // id 0
        {"Hello.supported_value_coders", [](w::Hello& m) { m.supported_value_coders |= 1u << 12; }},
        {"Hello.supported_index_codings", [](w::Hello& m) { m.supported_index_codings |= 1u << 3; }},
        {"Hello.capability_flags", [](w::Hello& m) { m.capability_flags |= 1u << 5; }},
        {"Hello.capability_flags", [](w::Hello& m) { m.capability_flags |= 1u << 31; }},
    };
    const w::Hello known = samples::hello();
    REQUIRE(known.supported_value_coders != 0);
    for (const BitCase& c : cases) {
      CAPTURE(c.field);
      w::Hello newer = known;
      c.add(newer);
      w::DecodeDetail detail;
      CHECK(w::validate(w::Message{newer}, &detail) == Status::kInvalidMessage);
      CHECK(std::string(detail.field) == c.field);
      std::vector<uint8_t> frame;
      CHECK(w::encode(w::Message{newer}, &frame) == Status::kInvalidMessage);
      const Decoded d = decode(encode_raw(w::Message{newer}));
      REQUIRE(d.status == Status::kOk);
      const auto* got = std::get_if<w::Hello>(&d.message);
      REQUIRE(got != nullptr);
      check_fields(*got, known);  // the bits this build knows, and nothing else
    }
  }

  TEST_CASE(
      "edges that are valid: 16- and 32-byte nonces, offset = total in UploadStatus, last byte chunks") {
    w::UploadStart start = samples::upload_start();
    start.round_nonce.assign(16, 0);
    start.round_nonce[15] = 1;  // not all zero
    check_round_trip(start);
    start.round_nonce.assign(32, 0xFF);
    check_round_trip(start);
    w::UploadChunk chunk = samples::upload_chunk();
    chunk.total_bytes = 1;
    chunk.offset = 0;
    chunk.data = {0};
    check_round_trip(chunk);
    chunk.total_bytes = 1000;
    chunk.offset = 880;  // 120 bytes: exactly to the end
    check_round_trip(chunk);
    w::TaskOffer offer = samples::task_offer();
    offer.training.momentum = 0.0f;
    offer.training.learning_rate = w::kMaxHyperParameter;
    offer.deadline_ms = w::kMaxDeadlineMs;
    check_round_trip(offer);
    w::Error error;
    error.code = w::ErrorCode::kInternal;
    error.message =
        "tab\tnewline\n \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF \xEF\xBF\xBD";  // U+1F600, U+10FFFF, U+FFFD
    check_round_trip(error);
  }
}

TEST_SUITE("wire.corruption") {
  // Each corrupted frame must decode to an error, or to a message that is valid and survives its
  // own round trip. Never a crash (this suite also runs under ASan + UBSan).
  void check_outcome(const std::vector<uint8_t>& frame, size_t* ok, size_t* errors) {
    const Decoded d = decode(frame);
    if (d.status != Status::kOk) {
      ++*errors;
      return;
    }
    ++*ok;
    CHECK(w::validate(d.message) == Status::kOk);
    const Decoded again = decode(encode_ok(d.message));
    REQUIRE(again.status == Status::kOk);
    CHECK(again.message == d.message);
  }

  TEST_CASE("random bit flips over valid frames of every type (19 x 3000 seeds)") {
    size_t ok = 0, errors = 0;
    const std::vector<w::Message> all = samples::all();
    for (size_t t = 0; t < all.size(); ++t) {
      const std::vector<uint8_t> frame = encode_ok(all[t]);
      for (uint64_t seed = 0; seed < 3000; ++seed) {
        uint64_t state = seed * 1000003u + t;
        std::vector<uint8_t> bad = frame;
        const int flips = 1 + static_cast<int>(next_random(&state) % 8);
        for (int f = 0; f < flips; ++f) {
          // Mostly in the payload; one flip in eight anywhere, header included.
          const uint64_t r = next_random(&state);
          const size_t lo = (r & 7) == 0 ? 0 : w::kFrameHeaderBytes;
          const size_t at = lo + (r >> 8) % (bad.size() - lo);
          bad[at] ^= static_cast<uint8_t>(1u << ((r >> 3) & 7));
        }
        check_outcome(bad, &ok, &errors);
      }
    }
    MESSAGE("bit flips: " << ok << " decoded valid, " << errors << " refused");
    CHECK(errors > 0);
    CHECK(ok > 0);  // flips in padding, or in values that stay in range
  }

  TEST_CASE("random byte overwrites, truncations and garbage payloads") {
    size_t ok = 0, errors = 0;
    const std::vector<w::Message> all = samples::all();
    uint64_t state = 12345;
    for (int i = 0; i < 20000; ++i) {
      const std::vector<uint8_t> frame = encode_ok(all[next_random(&state) % all.size()]);
      std::vector<uint8_t> bad = frame;
      switch (next_random(&state) % 3) {
        case 0: {  // overwrite a few bytes of the payload with random values
          const int n = 1 + static_cast<int>(next_random(&state) % 4);
          for (int k = 0; k < n; ++k) {
            bad[8 + next_random(&state) % (bad.size() - 8)] = static_cast<uint8_t>(next_random(&state));
          }
          break;
        }
        case 1: {  // truncate the payload and fix the header's length to match
          const size_t keep = 8 + next_random(&state) % (bad.size() - 8);
          bad.resize(keep);
          const uint32_t length = static_cast<uint32_t>(keep - 8);
          for (int k = 0; k < 4; ++k) bad[4 + k] = static_cast<uint8_t>(length >> (8 * k));
          break;
        }
        default: {  // a random payload with a valid header and, half the time, the identifier
          const size_t length = 8 + next_random(&state) % 400;
          bad = header_bytes(1, static_cast<uint8_t>(1 + next_random(&state) % 11),
                             static_cast<uint32_t>(length));
          for (size_t k = 0; k < length; ++k) bad.push_back(static_cast<uint8_t>(next_random(&state)));
          if (next_random(&state) & 1) memcpy(bad.data() + 12, "EFW1", 4);
          break;
        }
      }
      check_outcome(bad, &ok, &errors);
    }
    MESSAGE("overwrites/truncations/garbage: " << ok << " decoded valid, " << errors << " refused");
    CHECK(errors > 0);
  }
}

// The device client's way of building the client's messages (platforms/cortex-m/device_client.cpp):
// views of its own fields, a builder over one fixed arena, the shared tables of
// wire/client_tables.h, write_frame into caller memory. The frames must be the very bytes encode()
// writes for the same fields, and decode back to them.
namespace {

class FixedArena final : public flatbuffers::Allocator {
 public:
  uint8_t* allocate(size_t size) override {
    if (in_use_ || size > sizeof bytes_) return nullptr;
    in_use_ = true;
    return bytes_;
  }
  void deallocate(uint8_t*, size_t) override { in_use_ = false; }

 private:
  alignas(8) uint8_t bytes_[8192];
  bool in_use_ = false;
};

template <typename Message>
std::vector<uint8_t> device_frame(MessageType type, const Message& expected,
                                  const std::function<void(flatbuffers::FlatBufferBuilder&)>& build) {
  FixedArena arena;
  flatbuffers::FlatBufferBuilder builder(8192 - 64, &arena, false, 8);
  build(builder);
  std::vector<uint8_t> out(w::kFrameHeaderBytes + builder.GetSize());
  size_t written = 0;
  REQUIRE(w::internal::write_frame(type, builder, {out.data(), out.size()}, &written) == Status::kOk);
  CHECK(written == out.size());
  std::vector<uint8_t> hosted;
  REQUIRE(w::encode(w::Message{expected}, &hosted) == Status::kOk);
  CHECK(out == hosted);
  const Decoded d = decode(out);
  REQUIRE(d.status == Status::kOk);
  REQUIRE(std::holds_alternative<Message>(d.message));
  check_fields(std::get<Message>(d.message), expected);
  return out;
}

}  // namespace

TEST_SUITE("wire.client_tables") {
  TEST_CASE("the device's Hello, ModelRequest, UploadStart, UploadChunk and Commit are encode()'s bytes") {
    const w::Hello hello = samples::hello();
    device_frame(MessageType::kHello, hello, [&](flatbuffers::FlatBufferBuilder& b) {
      w::internal::HelloView v;
      v.protocol_version = hello.protocol_version;
      v.sdk_version = {hello.sdk_version.data(), hello.sdk_version.size()};
      v.supported_sparsifiers = hello.supported_sparsifiers;
      v.supported_value_coders = hello.supported_value_coders;
      v.supported_index_codings = hello.supported_index_codings;
      v.memory_budget_bytes = hello.memory_budget_bytes;
      v.capability_flags = hello.capability_flags;
      v.cpu_cores = hello.cpu_cores;
      v.uplink_kbps = hello.uplink_kbps;
      v.downlink_kbps = hello.downlink_kbps;
      v.model_version = hello.model_version;
      w::internal::finish_envelope(b, MessageType::kHello, w::internal::build_hello(b, v));
    });
    const w::ModelRequest request = samples::model_request();
    device_frame(MessageType::kModelRequest, request, [&](flatbuffers::FlatBufferBuilder& b) {
      w::internal::finish_envelope(
          b, MessageType::kModelRequest,
          w::internal::build_model_request(b, {request.round_id, request.model_version, request.offset,
                                               request.max_length, request.base_model_version}));
    });
    const w::UploadStart start = samples::upload_start();
    device_frame(MessageType::kUploadStart, start, [&](flatbuffers::FlatBufferBuilder& b) {
      w::internal::finish_envelope(
          b, MessageType::kUploadStart,
          w::internal::build_upload_start(b, {start.round_id,
                                              {start.round_nonce.data(), start.round_nonce.size()},
                                              {start.upload_id.data(), start.upload_id.size()},
                                              start.total_bytes}));
    });
    const w::UploadChunk chunk = samples::upload_chunk();
    device_frame(MessageType::kUploadChunk, chunk, [&](flatbuffers::FlatBufferBuilder& b) {
      w::internal::finish_envelope(
          b, MessageType::kUploadChunk,
          w::internal::build_upload_chunk(b, {chunk.round_id,
                                              {chunk.upload_id.data(), chunk.upload_id.size()},
                                              chunk.offset,
                                              chunk.total_bytes,
                                              {chunk.data.data(), chunk.data.size()}}));
    });
    const w::Commit commit = samples::commit();
    REQUIRE(!commit.metrics.empty());
    device_frame(MessageType::kCommit, commit, [&](flatbuffers::FlatBufferBuilder& b) {
      std::vector<w::internal::MetricView> metrics;
      for (const w::Metric& m : commit.metrics) metrics.push_back({{m.name.data(), m.name.size()}, m.value});
      std::vector<flatbuffers::Offset<fbw::Metric>> offsets(metrics.size());
      w::internal::CommitView v;
      v.round_id = commit.round_id;
      v.round_nonce = {commit.round_nonce.data(), commit.round_nonce.size()};
      v.upload_id = {commit.upload_id.data(), commit.upload_id.size()};
      v.total_bytes = commit.total_bytes;
      v.sample_count = commit.sample_count;
      v.metrics = {metrics.data(), metrics.size()};
      v.metric_offsets = {offsets.data(), offsets.size()};
      v.digest = {commit.digest.data(), commit.digest.size()};
      w::internal::finish_envelope(b, MessageType::kCommit, w::internal::build_commit(b, v));
    });
  }

  TEST_CASE("write_frame refuses a buffer one byte short and a payload above the type's cap") {
    FixedArena arena;
    flatbuffers::FlatBufferBuilder builder(8192 - 64, &arena, false, 8);
    w::internal::finish_envelope(builder, MessageType::kModelRequest,
                                 w::internal::build_model_request(builder, {1, 1, 0, 1024, 0}));
    std::vector<uint8_t> out(w::kFrameHeaderBytes + builder.GetSize() - 1, 0xEE);
    size_t written = 7;
    CHECK(w::internal::write_frame(MessageType::kModelRequest, builder, {out.data(), out.size()}, &written) ==
          Status::kBufferTooSmall);
    CHECK(written == 7);
    CHECK(std::all_of(out.begin(), out.end(), [](uint8_t v) { return v == 0xEE; }));
    // A Hello of 5000 bytes is above Hello's 4 KiB cap.
    FixedArena big_arena;
    flatbuffers::FlatBufferBuilder big(8192 - 64, &big_arena, false, 8);
    const std::string version(5000, 'v');
    w::internal::HelloView hello;
    hello.sdk_version = {version.data(), version.size()};
    w::internal::finish_envelope(big, MessageType::kHello, w::internal::build_hello(big, hello));
    std::vector<uint8_t> frame(8192);
    CHECK(w::internal::write_frame(MessageType::kHello, big, {frame.data(), frame.size()}, &written) ==
          Status::kFrameTooLarge);
  }
}

// The reading of the server's messages that every client runs (wire/client_protocol.h): the
// device client calls these functions on its reply buffer; decode() calls them too. Whatever a
// server puts on the wire, the device's reading and decode() must agree: the same status, the same
// Violation and field, the same fields when valid.
namespace {

struct DeviceRead {
  Status status = Status::kOk;
  w::DecodeDetail detail;
  MessageType type = MessageType::kError;
  w::internal::OfferView offer;
  w::RetryLater retry;
  w::internal::ModelChunkView chunk;
  w::UploadStatus upload_status;
  w::Ack ack;
  w::internal::ErrorView error;
  std::vector<uint64_t> payload;  // 8-byte aligned, as the device's g_reply; the views point here
};

// What device_client.cpp's receive() does with one frame.
void device_read(const std::vector<uint8_t>& frame, DeviceRead* r) {
  w::FrameHeader header;
  r->status = w::read_frame_header({frame.data(), frame.size()}, &header);
  if (r->status != Status::kOk) return;
  REQUIRE(frame.size() == w::kFrameHeaderBytes + header.payload_length);
  r->payload.assign((header.payload_length + 7) / 8, 0);
  memcpy(r->payload.data(), frame.data() + w::kFrameHeaderBytes, header.payload_length);
  const fbw::Envelope* e = nullptr;
  r->status = w::internal::open_envelope(
      header, {reinterpret_cast<const uint8_t*>(r->payload.data()), header.payload_length}, &e);
  if (r->status != Status::kOk) return;
  r->type = header.type;
  switch (header.type) {
    case MessageType::kTaskOffer:
      r->status = w::internal::read_offer(*e->message_as_TaskOffer(), &r->offer, &r->detail);
      break;
    case MessageType::kRetryLater:
      r->status = w::internal::read_retry_later(*e->message_as_RetryLater(), &r->retry, &r->detail);
      break;
    case MessageType::kModelChunk:
      r->status = w::internal::read_model_chunk(*e->message_as_ModelChunk(), &r->chunk, &r->detail);
      break;
    case MessageType::kUploadStatus:
      r->status =
          w::internal::read_upload_status(*e->message_as_UploadStatus(), &r->upload_status, &r->detail);
      break;
    case MessageType::kAck:
      r->status = w::internal::read_ack(*e->message_as_Ack(), &r->ack, &r->detail);
      break;
    case MessageType::kError:
      r->status = w::internal::read_error(*e->message_as_Error(), &r->error, &r->detail);
      break;
    default: FAIL("not a message the server sends in a plain round");
  }
}

std::string text(edgefl::Span<const char> t) {
  return {t.data(), t.size()};
}
std::vector<uint8_t> bytes(edgefl::Span<const uint8_t> b) {
  return {b.begin(), b.end()};
}

// The frame of `m` without the field rules (a hostile server's), read both ways.
template <typename Message>
void check_both_refuse(const Message& m, Violation violation, const char* field) {
  std::vector<uint8_t> frame;
  REQUIRE(w::testing::encode_unchecked(w::Message{m}, &frame) == Status::kOk);
  const Decoded hosted = decode(frame);
  DeviceRead device;
  device_read(frame, &device);
  w::DecodeDetail validated;
  CHECK(w::validate(w::Message{m}, &validated) == Status::kInvalidMessage);
  CHECK(hosted.status == Status::kInvalidMessage);
  CHECK(device.status == Status::kInvalidMessage);
  CHECK(validated.violation == violation);
  CHECK(hosted.detail.violation == violation);
  CHECK(device.detail.violation == violation);
  CHECK(std::string(validated.field) == field);
  CHECK(std::string(hosted.detail.field) == field);
  CHECK(std::string(device.detail.field) == field);
}

}  // namespace

TEST_SUITE("wire.client_protocol") {
  TEST_CASE("the device's reading of each server message gives decode()'s fields") {
    std::vector<uint8_t> frame;
    const w::TaskOffer offer = samples::task_offer();
    REQUIRE(w::encode(w::Message{offer}, &frame) == Status::kOk);
    DeviceRead r;
    device_read(frame, &r);
    REQUIRE(r.status == Status::kOk);
    CHECK(r.type == MessageType::kTaskOffer);
    CHECK(r.offer.round_id == offer.round_id);
    CHECK(bytes(r.offer.round_nonce) == offer.round_nonce);
    CHECK(r.offer.model_version == offer.model_version);
    CHECK(r.offer.model_bytes == offer.model_bytes);
    CHECK(bytes(r.offer.model_digest) ==
          std::vector<uint8_t>(offer.model_digest.begin(), offer.model_digest.end()));
    CHECK(r.offer.parameter_count == offer.parameter_count);
    CHECK(text(r.offer.model_spec) == offer.model_spec);
    CHECK(r.offer.training.batch_size == offer.training.batch_size);
    CHECK(r.offer.training.local_epochs == offer.training.local_epochs);
    CHECK(r.offer.training.max_steps == offer.training.max_steps);
    CHECK(r.offer.training.learning_rate == offer.training.learning_rate);
    CHECK(r.offer.training.momentum == offer.training.momentum);
    CHECK(r.offer.training.weight_decay == offer.training.weight_decay);
    CHECK(r.offer.training.prox_mu == offer.training.prox_mu);
    CHECK(r.offer.training.seed == offer.training.seed);
    CHECK(text(r.offer.uplink_codec) == offer.uplink_codec);
    CHECK(text(r.offer.downlink_codec) == offer.downlink_codec);
    CHECK(r.offer.codec_seed == offer.codec_seed);
    CHECK(r.offer.deadline_ms == offer.deadline_ms);
    CHECK(r.offer.max_upload_bytes == offer.max_upload_bytes);
    CHECK(r.offer.max_chunk_bytes == offer.max_chunk_bytes);
    CHECK(r.offer.base_model_version == offer.base_model_version);
    CHECK(bytes(r.offer.public_model_digest) ==
          std::vector<uint8_t>(offer.public_model_digest.begin(), offer.public_model_digest.end()));
    CHECK(r.offer.initial_model_seed == offer.initial_model_seed);
    CHECK_FALSE(r.offer.secure_aggregation);

    REQUIRE(w::encode(w::Message{samples::secure_task_offer()}, &frame) == Status::kOk);
    device_read(frame, &r);
    REQUIRE(r.status == Status::kOk);
    CHECK(r.offer.secure_aggregation);

    REQUIRE(w::encode(w::Message{samples::retry_later()}, &frame) == Status::kOk);
    device_read(frame, &r);
    REQUIRE(r.status == Status::kOk);
    CHECK(r.retry == samples::retry_later());

    const w::ModelChunk chunk = samples::model_chunk();
    REQUIRE(w::encode(w::Message{chunk}, &frame) == Status::kOk);
    device_read(frame, &r);
    REQUIRE(r.status == Status::kOk);
    CHECK(r.chunk.round_id == chunk.round_id);
    CHECK(r.chunk.model_version == chunk.model_version);
    CHECK(r.chunk.offset == chunk.offset);
    CHECK(r.chunk.total_bytes == chunk.total_bytes);
    CHECK(bytes(r.chunk.data) == chunk.data);

    REQUIRE(w::encode(w::Message{samples::upload_status()}, &frame) == Status::kOk);
    device_read(frame, &r);
    REQUIRE(r.status == Status::kOk);
    CHECK(r.upload_status == samples::upload_status());

    REQUIRE(w::encode(w::Message{samples::ack()}, &frame) == Status::kOk);
    device_read(frame, &r);
    REQUIRE(r.status == Status::kOk);
    CHECK(r.ack == samples::ack());

    REQUIRE(w::encode(w::Message{samples::error()}, &frame) == Status::kOk);
    device_read(frame, &r);
    REQUIRE(r.status == Status::kOk);
    CHECK(r.error.code == samples::error().code);
    CHECK(text(r.error.message) == samples::error().message);
  }

  TEST_CASE("a rule broken on the wire: validate(), decode() and the device name the same field") {
    using V = Violation;
    const auto offer_with = [](const std::function<void(w::TaskOffer&)>& change) {
      w::TaskOffer m = samples::task_offer();
      change(m);
      return m;
    };
    check_both_refuse(offer_with([](w::TaskOffer& m) { m.round_id = 0; }), V::kOutOfRange,
                      "TaskOffer.round_id");
    check_both_refuse(offer_with([](w::TaskOffer& m) { m.round_nonce.assign(32, 0); }), V::kAllZero,
                      "TaskOffer.round_nonce");
    check_both_refuse(offer_with([](w::TaskOffer& m) { m.round_nonce.resize(15); }), V::kWrongLength,
                      "TaskOffer.round_nonce");
    check_both_refuse(offer_with([](w::TaskOffer& m) { m.model_version = 0; }), V::kOutOfRange,
                      "TaskOffer.model_version");
    check_both_refuse(offer_with([](w::TaskOffer& m) { m.base_model_version = m.model_version + 1; }),
                      V::kInconsistent, "TaskOffer.base_model_version");
    check_both_refuse(offer_with([](w::TaskOffer& m) { m.model_bytes = 0; }), V::kOutOfRange,
                      "TaskOffer.model_bytes");
    check_both_refuse(offer_with([](w::TaskOffer& m) { m.model_bytes = w::kMaxModelBytes + 1; }),
                      V::kOutOfRange, "TaskOffer.model_bytes");
    check_both_refuse(offer_with([](w::TaskOffer& m) { m.parameter_count = 0; }), V::kOutOfRange,
                      "TaskOffer.parameter_count");
    check_both_refuse(offer_with([](w::TaskOffer& m) { m.model_spec = "mlp 784"; }), V::kBadText,
                      "TaskOffer.model_spec");
    check_both_refuse(offer_with([](w::TaskOffer& m) { m.training.batch_size = 0; }), V::kOutOfRange,
                      "TrainingConfig.batch_size");
    check_both_refuse(offer_with([](w::TaskOffer& m) { m.training.learning_rate = NAN; }), V::kNonFinite,
                      "TrainingConfig.learning_rate");
    check_both_refuse(offer_with([](w::TaskOffer& m) { m.training.momentum = 1.0f; }), V::kOutOfRange,
                      "TrainingConfig.momentum");
    check_both_refuse(offer_with([](w::TaskOffer& m) { m.uplink_codec = "nosuchcodec:1"; }), V::kBadCodecSpec,
                      "TaskOffer.uplink_codec");
    check_both_refuse(offer_with([](w::TaskOffer& m) { m.downlink_codec = ""; }), V::kEmpty,
                      "TaskOffer.downlink_codec");
    check_both_refuse(offer_with([](w::TaskOffer& m) { m.deadline_ms = 0; }), V::kOutOfRange,
                      "TaskOffer.deadline_ms");
    check_both_refuse(offer_with([](w::TaskOffer& m) { m.max_upload_bytes = 0; }), V::kOutOfRange,
                      "TaskOffer.max_upload_bytes");
    check_both_refuse(offer_with([](w::TaskOffer& m) { m.max_chunk_bytes = w::kMaxChunkBytes + 1; }),
                      V::kOutOfRange, "TaskOffer.max_chunk_bytes");
    check_both_refuse(offer_with([](w::TaskOffer& m) {
                        m.secure_aggregation = samples::secagg_config();
                        m.round_nonce.resize(16);
                      }),
                      V::kInconsistent, "TaskOffer.round_nonce");

    w::RetryLater retry = samples::retry_later();
    retry.retry_after_ms = 0;
    check_both_refuse(retry, V::kOutOfRange, "RetryLater.retry_after_ms");
    retry = samples::retry_later();
    retry.retry_window_ms = w::kMaxRetryMs + 1;
    check_both_refuse(retry, V::kOutOfRange, "RetryLater.retry_window_ms");

    w::ModelChunk chunk = samples::model_chunk();
    chunk.offset = chunk.total_bytes - 10;  // 100 bytes of data past the total
    check_both_refuse(chunk, V::kOffsetBeyondTotal, "ModelChunk.offset");
    chunk = samples::model_chunk();
    chunk.data.clear();
    check_both_refuse(chunk, V::kEmpty, "ModelChunk.data");

    w::UploadStatus status = samples::upload_status();
    status.offset = status.total_bytes + 1;
    check_both_refuse(status, V::kOffsetBeyondTotal, "UploadStatus.offset");
    status = samples::upload_status();
    status.upload_id.fill(0);
    check_both_refuse(status, V::kAllZero, "UploadStatus.upload_id");

    w::Ack ack = samples::ack();
    ack.reason = w::RejectReason::kNonFinite;  // a reason without a rejection
    check_both_refuse(ack, V::kInconsistent, "Ack.reason");

    chunk = samples::model_chunk();
    chunk.round_id = 0;
    check_both_refuse(chunk, V::kOutOfRange, "ModelChunk.round_id");
    chunk = samples::model_chunk();
    chunk.total_bytes = 0;
    check_both_refuse(chunk, V::kOutOfRange, "ModelChunk.total_bytes");
    retry = samples::retry_later();
    retry.reason = static_cast<w::RetryReason>(9);
    check_both_refuse(retry, V::kOutOfRange, "RetryLater.reason");
    ack = samples::ack();
    ack.disposition = static_cast<w::UpdateDisposition>(0);
    check_both_refuse(ack, V::kOutOfRange, "Ack.disposition");
    ack.disposition = static_cast<w::UpdateDisposition>(6);
    check_both_refuse(ack, V::kOutOfRange, "Ack.disposition");

    w::Error error = samples::error();
    error.code = static_cast<w::ErrorCode>(0);
    check_both_refuse(error, V::kOutOfRange, "Error.code");
    error = samples::error();
    error.message = "forged\x1b[2Jline";
    check_both_refuse(error, V::kBadText, "Error.message");
    error.message = "\xC0\xAF";  // overlong UTF-8
    check_both_refuse(error, V::kBadText, "Error.message");
  }

  TEST_CASE("a ModelChunk whose data fails its CRC32C is refused by both readers") {
    const w::ModelChunk chunk = samples::model_chunk();
    std::vector<uint8_t> frame;
    REQUIRE(w::encode(w::Message{chunk}, &frame) == Status::kOk);
    const auto at = std::search(frame.begin(), frame.end(), chunk.data.begin(), chunk.data.end());
    REQUIRE(at != frame.end());
    at[50] ^= 0x10;
    const Decoded hosted = decode(frame);
    DeviceRead device;
    device_read(frame, &device);
    CHECK(hosted.status == Status::kInvalidMessage);
    CHECK(device.status == Status::kInvalidMessage);
    CHECK(hosted.detail.violation == Violation::kChecksumMismatch);
    CHECK(device.detail.violation == Violation::kChecksumMismatch);
    CHECK(std::string(device.detail.field) == "ModelChunk.crc32c");
  }

  TEST_CASE("open_envelope refuses misaligned, short, foreign and mistyped payloads") {
    std::vector<uint8_t> frame;
    REQUIRE(w::encode(w::Message{samples::ack()}, &frame) == Status::kOk);
    w::FrameHeader header;
    REQUIRE(w::read_frame_header({frame.data(), frame.size()}, &header) == Status::kOk);
    std::vector<uint64_t> aligned((header.payload_length + 8) / 8 + 1, 0);
    auto* base = reinterpret_cast<uint8_t*>(aligned.data());
    memcpy(base, frame.data() + w::kFrameHeaderBytes, header.payload_length);
    const fbw::Envelope* e = nullptr;
    CHECK(w::internal::open_envelope(header, {base, header.payload_length}, &e) == Status::kOk);
    CHECK(e != nullptr);

    memmove(base + 4, base, header.payload_length);  // 4 bytes off: FlatBuffers would read in place
    e = nullptr;
    CHECK(w::internal::open_envelope(header, {base + 4, header.payload_length}, &e) ==
          Status::kInvalidArgument);
    CHECK(e == nullptr);
    memmove(base, base + 4, header.payload_length);

    CHECK(w::internal::open_envelope(header, {base, header.payload_length - 1}, &e) == Status::kSizeMismatch);
    w::FrameHeader other = header;
    other.type = MessageType::kUploadStatus;
    CHECK(w::internal::open_envelope(other, {base, header.payload_length}, &e) ==
          Status::kMessageTypeMismatch);
    base[5] ^= 0x01;  // the file identifier "EFW1" at bytes 4..7
    CHECK(w::internal::open_envelope(header, {base, header.payload_length}, &e) == Status::kBadMagic);
    base[5] ^= 0x01;
    base[0] ^= 0x80;  // the root offset: now beyond the buffer
    CHECK(w::internal::open_envelope(header, {base, header.payload_length}, &e) == Status::kMalformedMessage);
    CHECK(e == nullptr);
  }

  TEST_CASE("the sequence rules: a chunk, a status and an ack must answer what was asked") {
    const w::ModelChunk chunk = samples::model_chunk();
    const w::internal::ModelChunkView view = w::internal::view_of(chunk);
    w::ModelRequest asked;
    asked.round_id = chunk.round_id;
    asked.model_version = chunk.model_version;
    asked.offset = chunk.offset;
    asked.max_length = static_cast<uint32_t>(chunk.data.size());
    w::DecodeDetail detail;
    CHECK(w::internal::expect_model_chunk(view, asked, chunk.total_bytes, &detail) == Status::kOk);
    const auto refused = [&](const w::ModelRequest& request, uint64_t total, const char* field) {
      w::DecodeDetail d;
      CHECK(w::internal::expect_model_chunk(view, request, total, &d) == Status::kProtocolError);
      CHECK(d.violation == Violation::kInconsistent);
      CHECK(std::string(d.field) == field);
    };
    w::ModelRequest r = asked;
    r.round_id += 1;
    refused(r, chunk.total_bytes, "ModelChunk.round_id");
    r = asked;
    r.model_version -= 1;
    refused(r, chunk.total_bytes, "ModelChunk.model_version");
    r = asked;
    r.offset -= 1;  // a chunk that overlaps what the device holds
    refused(r, chunk.total_bytes, "ModelChunk.offset");
    r = asked;
    r.max_length -= 1;  // more than asked for
    refused(r, chunk.total_bytes, "ModelChunk.data");
    refused(asked, chunk.total_bytes + 1, "ModelChunk.total_bytes");

    const w::UploadStatus status = samples::upload_status();
    const w::UploadId id = status.upload_id;
    CHECK(w::internal::expect_upload_status(status, status.round_id, {id.data(), id.size()},
                                            status.total_bytes, &detail) == Status::kOk);
    CHECK(w::internal::expect_upload_status(status, status.round_id + 1, {id.data(), id.size()},
                                            status.total_bytes, &detail) == Status::kProtocolError);
    CHECK(std::string(detail.field) == "UploadStatus.round_id");
    w::UploadId other = id;
    other[15] ^= 1;
    CHECK(w::internal::expect_upload_status(status, status.round_id, {other.data(), other.size()},
                                            status.total_bytes, &detail) == Status::kProtocolError);
    CHECK(std::string(detail.field) == "UploadStatus.upload_id");
    CHECK(w::internal::expect_upload_status(status, status.round_id, {id.data(), id.size()},
                                            status.total_bytes - 1, &detail) == Status::kProtocolError);
    CHECK(std::string(detail.field) == "UploadStatus.total_bytes");

    w::Ack ack = samples::ack();
    CHECK(w::internal::expect_ack(ack, ack.round_id, {id.data(), id.size()}, &detail) == Status::kOk);
    CHECK(w::internal::expect_ack(ack, ack.round_id, {other.data(), other.size()}, &detail) ==
          Status::kProtocolError);
    CHECK(std::string(detail.field) == "Ack.upload_id");
    CHECK(w::internal::expect_ack(ack, ack.round_id + 1, {id.data(), id.size()}, &detail) ==
          Status::kProtocolError);
    CHECK(std::string(detail.field) == "Ack.round_id");
    CHECK_FALSE(w::internal::counted(ack));  // a straggler's update is not counted
    ack.disposition = w::UpdateDisposition::kAccepted;
    CHECK(w::internal::counted(ack));
    ack.disposition = w::UpdateDisposition::kDuplicate;
    CHECK(w::internal::counted(ack));
    ack.disposition = w::UpdateDisposition::kRejected;
    CHECK_FALSE(w::internal::counted(ack));
  }

  TEST_CASE("an unacknowledged update and a new offer: same round, ask the ledger, or drop it") {
    using P = w::internal::PendingUpload;
    const std::vector<uint8_t> nonce = samples::pattern(32, 0x11);
    std::vector<uint8_t> other = nonce;
    other[31] ^= 1;
    const std::vector<uint8_t> shorter(nonce.begin(), nonce.begin() + 16);
    const auto meaning = [&](uint64_t round, const std::vector<uint8_t>& offered, bool commit_sent) {
      return w::internal::pending_after_offer(42, {nonce.data(), nonce.size()}, commit_sent, round,
                                              {offered.data(), offered.size()});
    };
    CHECK(meaning(42, nonce, false) == P::kSameRound);
    CHECK(meaning(42, nonce, true) == P::kSameRound);
    CHECK(meaning(43, nonce, false) == P::kDiscard);
    CHECK(meaning(43, nonce, true) == P::kAskTheLedger);
    // The same round id with another nonce is another round (a server that restarted its ids).
    CHECK(meaning(42, other, false) == P::kDiscard);
    CHECK(meaning(42, other, true) == P::kAskTheLedger);
    CHECK(meaning(42, shorter, false) == P::kDiscard);
    CHECK(meaning(41, nonce, true) == P::kAskTheLedger);
  }

  TEST_CASE("chunk lengths stay within the offer and the protocol; RetryLater pauses within the window") {
    CHECK(w::internal::chunk_length(3072, 256u << 10) == 3072);
    CHECK(w::internal::chunk_length(3072, 100) == 100);
    CHECK(w::internal::chunk_length(0, 100) == 1);
    CHECK(w::internal::chunk_length(UINT32_MAX, UINT32_MAX) == w::kMaxChunkBytes);

    w::RetryLater retry;
    retry.retry_after_ms = w::kMaxRetryMs;
    retry.retry_window_ms = w::kMaxRetryMs;
    CHECK(w::internal::retry_pause_ms(retry, 0) == w::kMaxRetryMs);
    const uint64_t longest = w::internal::retry_pause_ms(retry, UINT32_MAX);
    CHECK(longest < uint64_t{2} * w::kMaxRetryMs);
    CHECK(longest > uint64_t{2} * w::kMaxRetryMs - 2);
    retry.retry_after_ms = 1000;
    retry.retry_window_ms = 4000;
    CHECK(w::internal::retry_pause_ms(retry, 1u << 31) == 3000);  // the window's middle
    retry.retry_window_ms = 0;
    CHECK(w::internal::retry_pause_ms(retry, UINT32_MAX) == 1000);
  }
}

// The bytes of the client's messages, pinned to what encode() wrote before the device and the
// hosted clients shared client_tables.cpp: a change to the schema, to the tables' build order or to
// FlatBuffers' builder that moves a byte of what clients send fails here (a format change must be
// deliberate). Each frame of the sample messages by its length and CRC32C; the device's path
// writes the same bytes ("the device's Hello, ... are encode()'s bytes" above).
TEST_SUITE("wire.client_tables") {
  TEST_CASE("the frames of the sample client messages are pinned byte for byte") {
    struct Pin {
      const char* name;
      std::vector<uint8_t> frame;
      size_t size;
      uint32_t crc;
    };
    std::vector<Pin> pins;
    const auto add = [&](const char* name, const w::Message& m, size_t size, uint32_t crc) {
      Pin pin{name, {}, size, crc};
      REQUIRE(w::encode(m, &pin.frame) == Status::kOk);
      pins.push_back(std::move(pin));
    };
    // The values: encode() before client_tables.cpp existed (commit 881f669's parent), built and
    // run on these samples.
    add("Hello", w::Message{samples::hello()}, 144, 2476069270u);
    add("ModelRequest", w::Message{samples::model_request()}, 96, 3579445699u);
    add("UploadStart", w::Message{samples::upload_start()}, 120, 3397015688u);
    add("UploadChunk", w::Message{samples::upload_chunk()}, 240, 905404119u);
    add("Commit", w::Message{samples::commit()}, 320, 2357707463u);
    for (const Pin& pin : pins) {
      CAPTURE(pin.name);
      const uint32_t crc = edgefl::crc32c_update(0, pin.frame.data(), pin.frame.size());
      CHECK(pin.frame.size() == pin.size);
      CHECK(crc == pin.crc);
    }
  }
}
