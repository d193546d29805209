// The client's message tables (client_tables.h), shared by encode() and the device client.
#include "wire/client_tables.h"

#include <string.h>

#include "core/crc32c.h"

namespace edgefl {
namespace wire {
namespace internal {

namespace {

using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

Offset<flatbuffers::Vector<uint8_t>> bytes(FlatBufferBuilder& b, Span<const uint8_t> v) {
  return b.CreateVector(v.data(), v.size());
}

}  // namespace

Offset<fb::Hello> build_hello(FlatBufferBuilder& b, const HelloView& m) {
  const auto sdk_version = b.CreateString(m.sdk_version.data(), m.sdk_version.size());
  fb::HelloBuilder t(b);
  t.add_protocol_version(m.protocol_version);
  t.add_sdk_version(sdk_version);
  t.add_supported_sparsifiers(m.supported_sparsifiers);
  t.add_supported_value_coders(m.supported_value_coders);
  t.add_supported_index_codings(m.supported_index_codings);
  t.add_memory_budget_bytes(m.memory_budget_bytes);
  t.add_capability_flags(m.capability_flags);
  t.add_cpu_cores(m.cpu_cores);
  t.add_uplink_kbps(m.uplink_kbps);
  t.add_downlink_kbps(m.downlink_kbps);
  t.add_model_version(m.model_version);
  return t.Finish();
}

Offset<fb::ModelRequest> build_model_request(FlatBufferBuilder& b, const ModelRequestView& m) {
  fb::ModelRequestBuilder t(b);
  t.add_round_id(m.round_id);
  t.add_model_version(m.model_version);
  t.add_offset(m.offset);
  t.add_max_length(m.max_length);
  t.add_base_model_version(m.base_model_version);
  return t.Finish();
}

Offset<fb::UploadStart> build_upload_start(FlatBufferBuilder& b, const UploadStartView& m) {
  const auto nonce = bytes(b, m.round_nonce);
  const auto upload_id = bytes(b, m.upload_id);
  fb::UploadStartBuilder t(b);
  t.add_round_id(m.round_id);
  t.add_round_nonce(nonce);
  t.add_upload_id(upload_id);
  t.add_total_bytes(m.total_bytes);
  return t.Finish();
}

Offset<fb::UploadChunk> build_upload_chunk(FlatBufferBuilder& b, const UploadChunkView& m) {
  const auto upload_id = bytes(b, m.upload_id);
  const auto data = bytes(b, m.data);
  fb::UploadChunkBuilder t(b);
  t.add_round_id(m.round_id);
  t.add_upload_id(upload_id);
  t.add_offset(m.offset);
  t.add_total_bytes(m.total_bytes);
  t.add_data(data);
  t.add_crc32c(crc32c_update(0, m.data.data(), m.data.size()));
  return t.Finish();
}

Offset<fb::Commit> build_commit(FlatBufferBuilder& b, const CommitView& m) {
  if (m.metric_offsets.size() < m.metrics.size()) {  // a caller's error: no scratch for the metrics
    FLATBUFFERS_ASSERT(false);
    return Offset<fb::Commit>();
  }
  const auto nonce = bytes(b, m.round_nonce);
  const auto upload_id = bytes(b, m.upload_id);
  for (size_t i = 0; i < m.metrics.size(); ++i) {
    const auto name = b.CreateString(m.metrics[i].name.data(), m.metrics[i].name.size());
    fb::MetricBuilder t(b);
    t.add_name(name);
    t.add_value(m.metrics[i].value);
    m.metric_offsets[i] = t.Finish();
  }
  const auto metrics = m.metrics.size() == 0 ? Offset<flatbuffers::Vector<Offset<fb::Metric>>>()
                                             : b.CreateVector(m.metric_offsets.data(), m.metrics.size());
  const auto digest = bytes(b, m.digest);
  fb::CommitBuilder t(b);
  t.add_round_id(m.round_id);
  t.add_round_nonce(nonce);
  t.add_upload_id(upload_id);
  t.add_total_bytes(m.total_bytes);
  t.add_sample_count(m.sample_count);
  t.add_metrics(metrics);
  t.add_digest(digest);
  return t.Finish();
}

Status write_frame(MessageType type, const FlatBufferBuilder& b, Span<uint8_t> out, size_t* written) {
  const size_t size = b.GetSize();
  if (size > max_payload_bytes(type)) return Status::kFrameTooLarge;
  if (out.size() < kFrameHeaderBytes || out.size() - kFrameHeaderBytes < size) return Status::kBufferTooSmall;
  EDGEFL_RETURN_IF_ERROR(
      write_frame_header(type, static_cast<uint32_t>(size), out.subspan(0, kFrameHeaderBytes)));
  memcpy(out.data() + kFrameHeaderBytes, b.GetBufferPointer(), size);
  *written = kFrameHeaderBytes + size;
  return Status::kOk;
}

}  // namespace internal
}  // namespace wire
}  // namespace edgefl
