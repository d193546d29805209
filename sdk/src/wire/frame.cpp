// Frame headers, per-type payload caps and names (edgefl/wire.h).
#include "edgefl/wire.h"

namespace edgefl {
namespace wire {

namespace {

struct TypeInfo {
  MessageType type;
  const char* name;
  size_t cap;  // payload bytes
  Direction direction;
};

// Caps leave room for the FlatBuffer overhead of the largest valid message of each type
// (tests/sdk/wire_test.cpp encodes those and checks that they fit).
constexpr TypeInfo kTypes[] = {
    {MessageType::kHello, "hello", 4096, Direction::kClientToServer},
    {MessageType::kTaskOffer, "task_offer", 262144, Direction::kServerToClient},
    {MessageType::kRetryLater, "retry_later", 1024, Direction::kServerToClient},
    {MessageType::kModelRequest, "model_request", 1024, Direction::kClientToServer},
    {MessageType::kModelChunk, "model_chunk", kMaxChunkBytes + 1024, Direction::kServerToClient},
    {MessageType::kUploadStart, "upload_start", 1024, Direction::kClientToServer},
    {MessageType::kUploadStatus, "upload_status", 1024, Direction::kServerToClient},
    {MessageType::kUploadChunk, "upload_chunk", kMaxChunkBytes + 1024, Direction::kClientToServer},
    {MessageType::kCommit, "commit", 8192, Direction::kClientToServer},
    {MessageType::kAck, "ack", 1024, Direction::kServerToClient},
    {MessageType::kError, "error", 4096, Direction::kEither},
    {MessageType::kSecAggAdvertise, "secagg_advertise", 1024, Direction::kClientToServer},
    {MessageType::kSecAggKeys, "secagg_keys", 320 * 1024, Direction::kServerToClient},
    {MessageType::kSecAggShares, "secagg_shares", 512 * 1024, Direction::kClientToServer},
    {MessageType::kSecAggInbox, "secagg_inbox", 512 * 1024, Direction::kServerToClient},
    {MessageType::kSecAggPoll, "secagg_poll", 1024, Direction::kClientToServer},
    {MessageType::kSecAggStatus, "secagg_status", 1024, Direction::kServerToClient},
    {MessageType::kSecAggUnmaskRequest, "secagg_unmask_request", 40 * 1024, Direction::kServerToClient},
    {MessageType::kSecAggUnmaskResponse, "secagg_unmask_response", 256 * 1024, Direction::kClientToServer},
};

const TypeInfo* find(MessageType type) {
  const size_t index = static_cast<size_t>(type);
  if (index < 1 || index > sizeof(kTypes) / sizeof(kTypes[0])) return nullptr;
  return &kTypes[index - 1];
}

constexpr bool types_in_order() {
  for (size_t i = 0; i < sizeof(kTypes) / sizeof(kTypes[0]); ++i) {
    if (static_cast<size_t>(kTypes[i].type) != i + 1) return false;
    if (kTypes[i].cap > kMaxPayloadBytes) return false;
  }
  return true;
}
static_assert(types_in_order(), "kTypes is indexed by MessageType id, and no cap exceeds kMaxPayloadBytes");
static_assert(std::variant_size_v<Message> == sizeof(kTypes) / sizeof(kTypes[0]),
              "one Message alternative per MessageType");
static_assert(kMaxPayloadBytes < (size_t{1} << 31), "FlatBuffers buffers stay below 2 GiB");

Status check_length(const TypeInfo& info, uint32_t payload_length) {
  if (payload_length > info.cap) return Status::kFrameTooLarge;
  if (payload_length < kMinPayloadBytes) return Status::kMalformedMessage;
  return Status::kOk;
}

}  // namespace

size_t max_payload_bytes(MessageType type) {
  const TypeInfo* info = find(type);
  return info != nullptr ? info->cap : 0;
}

bool is_known_message_type(MessageType type) {
  return find(type) != nullptr;
}

Direction message_direction(MessageType type) {
  const TypeInfo* info = find(type);
  return info != nullptr ? info->direction : Direction::kEither;
}

const char* message_type_name(MessageType type) {
  const TypeInfo* info = find(type);
  return info != nullptr ? info->name : "unknown";
}

Status read_frame_header(Span<const uint8_t> bytes, FrameHeader* header) {
  if (header == nullptr) return Status::kInvalidArgument;
  if (bytes.size() < kFrameHeaderBytes) return Status::kTruncated;
  const uint8_t* p = bytes.data();
  if (p[0] != kFrameMagic[0] || p[1] != kFrameMagic[1]) return Status::kBadMagic;
  if (p[2] != kProtocolVersion) return Status::kProtocolVersionMismatch;
  const TypeInfo* info = find(static_cast<MessageType>(p[3]));
  if (info == nullptr) return Status::kUnknownMessageType;
  const uint32_t length = static_cast<uint32_t>(p[4]) | static_cast<uint32_t>(p[5]) << 8 |
                          static_cast<uint32_t>(p[6]) << 16 | static_cast<uint32_t>(p[7]) << 24;
  EDGEFL_RETURN_IF_ERROR(check_length(*info, length));
  header->version = p[2];
  header->type = info->type;
  header->payload_length = length;
  return Status::kOk;
}

Status write_frame_header(MessageType type, uint32_t payload_length, Span<uint8_t> out) {
  if (out.size() < kFrameHeaderBytes) return Status::kBufferTooSmall;
  const TypeInfo* info = find(type);
  if (info == nullptr) return Status::kUnknownMessageType;
  EDGEFL_RETURN_IF_ERROR(check_length(*info, payload_length));
  uint8_t* p = out.data();
  p[0] = kFrameMagic[0];
  p[1] = kFrameMagic[1];
  p[2] = static_cast<uint8_t>(kProtocolVersion);
  p[3] = static_cast<uint8_t>(type);
  for (int i = 0; i < 4; ++i) p[4 + i] = static_cast<uint8_t>(payload_length >> (8 * i));
  return Status::kOk;
}

const char* violation_name(Violation violation) {
  switch (violation) {
    case Violation::kNone: return "none";
    case Violation::kMissing: return "missing";
    case Violation::kEmpty: return "empty";
    case Violation::kTooLong: return "too_long";
    case Violation::kWrongLength: return "wrong_length";
    case Violation::kAllZero: return "all_zero";
    case Violation::kBadText: return "bad_text";
    case Violation::kOutOfRange: return "out_of_range";
    case Violation::kNonFinite: return "non_finite";
    case Violation::kOffsetBeyondTotal: return "offset_beyond_total";
    case Violation::kBadCodecSpec: return "bad_codec_spec";
    case Violation::kChecksumMismatch: return "checksum_mismatch";
    case Violation::kDuplicateName: return "duplicate_name";
    case Violation::kInconsistent: return "inconsistent";
    case Violation::kDuplicateEntry: return "duplicate_entry";
  }
  return "unknown";
}

const char* reject_reason_name(RejectReason reason) {
  switch (reason) {
    case RejectReason::kNone: return "none";
    case RejectReason::kDigestMismatch: return "digest_mismatch";
    case RejectReason::kInvalidEncoding: return "invalid_encoding";
    case RejectReason::kNonFinite: return "non_finite";
    case RejectReason::kNormTooLarge: return "norm_too_large";
    case RejectReason::kSampleCount: return "sample_count";
    case RejectReason::kModelOverflow: return "model_overflow";
    case RejectReason::kAlreadyCounted: return "already_counted";
  }
  return "unknown";
}

const char* retry_reason_text(RetryReason reason) {
  switch (reason) {
    case RetryReason::kNoRound: return "no round is open";
    case RetryReason::kNotSelected: return "this check-in was not selected for the round";
    case RetryReason::kRoundFull: return "the round has all its participants";
    case RetryReason::kServerBusy: return "the server is at its connection limit";
    case RetryReason::kDraining: return "the server is draining";
  }
  return "unknown reason";
}

}  // namespace wire
}  // namespace edgefl
