// Internal: the FlatBuffer tables of the client's messages (Hello, ModelRequest, UploadStart,
// UploadChunk, Commit), built from views of the caller's fields.
//
// One implementation for every client: edgefl::wire's encode() (hosted: edgefl::Client, the
// tools, the tests and fuzzers) converts its structs to these views, and the bare-metal device
// client (platforms/cortex-m/device_client.cpp) fills them directly, with a builder over its own
// arena. Freestanding: no allocation beyond the builder's (whose allocator the caller chooses), no
// exceptions. The fields are not validated here: encode() validates the structs first; the
// device fills them from a validated offer.
#ifndef EDGEFL_SRC_WIRE_CLIENT_TABLES_H_
#define EDGEFL_SRC_WIRE_CLIENT_TABLES_H_

#include <stddef.h>
#include <stdint.h>

#include <flatbuffers/flatbuffers.h>

#include "edgefl/span.h"
#include "edgefl/status.h"
#include "edgefl/wire.h"
#include "edgefl_wire_generated.h"

namespace edgefl {
namespace wire {
namespace internal {

struct HelloView {
  uint32_t protocol_version = kProtocolVersion;
  Span<const char> sdk_version;
  uint32_t supported_sparsifiers = 0;
  uint32_t supported_value_coders = 0;
  uint32_t supported_index_codings = 0;
  uint64_t memory_budget_bytes = 0;
  uint32_t capability_flags = 0;
  uint16_t cpu_cores = 0;
  uint32_t uplink_kbps = 0;
  uint32_t downlink_kbps = 0;
  uint64_t model_version = 0;
};

struct ModelRequestView {
  uint64_t round_id = 0;
  uint64_t model_version = 0;
  uint64_t offset = 0;
  uint32_t max_length = 0;
  uint64_t base_model_version = 0;
};

struct UploadStartView {
  uint64_t round_id = 0;
  Span<const uint8_t> round_nonce;
  Span<const uint8_t> upload_id;
  uint64_t total_bytes = 0;
};

struct UploadChunkView {
  uint64_t round_id = 0;
  Span<const uint8_t> upload_id;
  uint64_t offset = 0;
  uint64_t total_bytes = 0;
  Span<const uint8_t> data;  // its CRC32C is computed here
};

struct MetricView {
  Span<const char> name;
  double value = 0;
};

// A Commit. build_commit() builds the tables in the order encode() always has (nonce, upload id,
// each metric, the metric vector, digest), so every client sends the same bytes for the same
// fields; the metric tables' offsets go to the caller's scratch, metric_offsets (at least
// metrics.size() entries: otherwise nothing is built and the returned offset is null).
struct CommitView {
  uint64_t round_id = 0;
  Span<const uint8_t> round_nonce;
  Span<const uint8_t> upload_id;
  uint64_t total_bytes = 0;
  uint32_t sample_count = 0;
  Span<const MetricView> metrics;  // none: the field is left out
  Span<flatbuffers::Offset<fb::Metric>> metric_offsets;
  Span<const uint8_t> digest;
};

flatbuffers::Offset<fb::Hello> build_hello(flatbuffers::FlatBufferBuilder& b, const HelloView& m);
flatbuffers::Offset<fb::ModelRequest> build_model_request(flatbuffers::FlatBufferBuilder& b,
                                                          const ModelRequestView& m);
flatbuffers::Offset<fb::UploadStart> build_upload_start(flatbuffers::FlatBufferBuilder& b,
                                                        const UploadStartView& m);
flatbuffers::Offset<fb::UploadChunk> build_upload_chunk(flatbuffers::FlatBufferBuilder& b,
                                                        const UploadChunkView& m);
flatbuffers::Offset<fb::Commit> build_commit(flatbuffers::FlatBufferBuilder& b, const CommitView& m);

// Finishes `body` as the Envelope of a `type` message (file identifier "EFW1") in `b`.
template <typename Table>
void finish_envelope(flatbuffers::FlatBufferBuilder& b, MessageType type, flatbuffers::Offset<Table> body) {
  fb::FinishEnvelopeBuffer(b, fb::CreateEnvelope(b, static_cast<fb::Message>(type), body.Union()));
}

// Writes the frame of the finished message in `b` (header, then the FlatBuffer) to out[0..*written).
// kFrameTooLarge above the type's cap; kBufferTooSmall if `out` cannot hold it.
[[nodiscard]] Status write_frame(MessageType type, const flatbuffers::FlatBufferBuilder& b, Span<uint8_t> out,
                                 size_t* written);

}  // namespace internal
}  // namespace wire
}  // namespace edgefl

#endif  // EDGEFL_SRC_WIRE_CLIENT_TABLES_H_
