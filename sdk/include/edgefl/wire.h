// edgefl/wire.h: the wire protocol of federated rounds: frames, messages, encode and decode.
//
// A conversation, client on the left (TLS around all of it, done elsewhere; the device id comes
// from the client's certificate, never from a message):
//
//   Hello          ->
//                  <-  TaskOffer  |  RetryLater (come back in [after, after + window])  |  Error
//   ModelRequest   ->                                  (repeated: chunked, resumable download)
//                  <-  ModelChunk
//   UploadStart    ->                                  (also on resume, with the same upload id)
//                  <-  UploadStatus (the offset the server holds)
//   UploadChunk    ->                                  (from that offset on)
//   Commit         ->
//                  <-  Ack (accepted, duplicate, straggler, late or rejected)
//
// What the server does with them (server/, not this library): an update is identified by (round
// id, device id from TLS, upload id) and counted at most once (a repeated Commit is acked
// kDuplicate); UploadStart and Commit carry the round nonce of the TaskOffer, so an upload cannot
// be replayed into another round; updates after the quorum or the deadline get kStraggler / kLate.
// This library checks each message on its own (ranges, lengths, finite numbers); whether a round,
// nonce, offset or upload id matches the server's state is for the server to check.
//
// Every message is one frame: an 8-byte header (magic "EF", protocol version, message type,
// payload length, little-endian), then a FlatBuffer (sdk/proto/edgefl_wire.fbs documents the
// layout, and the unit and range of every field). A reader never trusts a length it has not
// checked:
//
//   uint8_t head[edgefl::wire::kFrameHeaderBytes];            // read exactly 8 bytes
//   edgefl::wire::FrameHeader h;
//   if (edgefl::wire::read_frame_header({head, sizeof head}, &h) != edgefl::Status::kOk) close();
//   std::vector<uint8_t> payload(h.payload_length);          // <= max_payload_bytes(h.type)
//   ...read the payload...
//   edgefl::wire::Message m;
//   edgefl::Status s = edgefl::wire::decode(h, {payload.data(), payload.size()}, &m);
//   if (auto* offer = std::get_if<edgefl::wire::TaskOffer>(&m)) { ... }
//
// decode() verifies the FlatBuffer with explicit Verifier limits and the file identifier "EFW1",
// checks that it holds the message type the header announced, copies it into the plain structs
// below and validates every field (validate()). encode() validates first, so it never writes a
// message that decode() would refuse.
//
// Hosted C++17: this library allocates (std::string, std::vector; encode() and decode() may throw
// std::bad_alloc when memory runs out, and for nothing else). It keeps no pointer to its
// arguments after a call returns and has no state: every function is thread-safe.
#ifndef EDGEFL_WIRE_H_
#define EDGEFL_WIRE_H_

#include <stddef.h>
#include <stdint.h>

#include <array>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "edgefl/config.h"
#include "edgefl/span.h"
#include "edgefl/status.h"
#include "edgefl/tensor_table.h"

namespace edgefl {
namespace wire {

// --- Frames ---------------------------------------------------------------------------------

// The protocol version in every frame header. A frame of another version is refused with
// Status::kProtocolVersionMismatch (edgefl-server answers it with Error kVersionMismatch, naming
// the version it speaks). The frame header's layout and the Error message stay the same in every
// version, so that a peer of any version can read that refusal.
constexpr uint32_t kProtocolVersion = 1;

// Frame header: magic 'E' 'F', version (1 byte), message type (1 byte), payload length (uint32
// little-endian). 8 bytes, so a payload that follows its header in 8-byte aligned memory is aligned.
constexpr size_t kFrameHeaderBytes = 8;
constexpr uint8_t kFrameMagic[2] = {0x45, 0x46};  // "EF"

// A FlatBuffer with a file identifier has at least a root offset and the identifier.
constexpr size_t kMinPayloadBytes = 8;

// The message ids of the frame header (and of the schema's union). Never renumbered.
enum class MessageType : uint8_t {
  kHello = 1,         // client -> server
  kTaskOffer = 2,     // server -> client
  kRetryLater = 3,    // server -> client
  kModelRequest = 4,  // client -> server
  kModelChunk = 5,    // server -> client
  kUploadStart = 6,   // client -> server
  kUploadStatus = 7,  // server -> client
  kUploadChunk = 8,   // client -> server
  kCommit = 9,        // client -> server
  kAck = 10,          // server -> client
  kError = 11,        // either direction
  // Secure aggregation rounds (SecAgg+; the schema's SecAgg section and sdk/src/secagg/protocol.h).
  kSecAggAdvertise = 12,       // client -> server
  kSecAggKeys = 13,            // server -> client
  kSecAggShares = 14,          // client -> server
  kSecAggInbox = 15,           // server -> client
  kSecAggPoll = 16,            // client -> server
  kSecAggStatus = 17,          // server -> client
  kSecAggUnmaskRequest = 18,   // server -> client
  kSecAggUnmaskResponse = 19,  // client -> server
};

// Who may send a message type. A server refuses server-to-client types from a client (and vice
// versa); decode() itself accepts both directions.
enum class Direction : uint8_t {
  kClientToServer = 1,
  kServerToClient = 2,
  kEither = 3,
};

// Largest UploadChunk / ModelChunk data, and largest ModelRequest.max_length, in bytes.
constexpr uint32_t kMaxChunkBytes = 1u << 20;

// Payload caps per message type, in bytes, checked by read_frame_header() before a payload is read:
//   Hello 4 KiB, TaskOffer 256 KiB (up to 1024 tensors of 128-character names), RetryLater 1 KiB,
//   ModelRequest 1 KiB, ModelChunk 1 MiB + 1 KiB, UploadStart 1 KiB, UploadStatus 1 KiB, UploadChunk 1 MiB +
//   1 KiB, Commit 8 KiB, Ack 1 KiB, Error 4 KiB, SecAggAdvertise 1 KiB, SecAggKeys 320 KiB,
//   SecAggShares 512 KiB, SecAggInbox 512 KiB, SecAggPoll 1 KiB, SecAggStatus 1 KiB,
//   SecAggUnmaskRequest 40 KiB, SecAggUnmaskResponse 256 KiB (kMaxSecAggEntries entries each).
// Every valid message fits its cap with room to spare (tests/sdk/wire_test.cpp encodes the largest).
constexpr size_t kMaxPayloadBytes = kMaxChunkBytes + 1024;  // the largest cap

// The cap of `type`; 0 for an unknown type.
size_t max_payload_bytes(MessageType type);

// True for the nineteen types above.
bool is_known_message_type(MessageType type);

// Who sends `type` (kEither for kError and for unknown types).
Direction message_direction(MessageType type);

// A stable lower-case name ("hello", "task_offer", ...); "unknown" for an unknown type. Never null.
const char* message_type_name(MessageType type);

// A checked frame header.
struct FrameHeader {
  uint8_t version = static_cast<uint8_t>(kProtocolVersion);
  MessageType type = MessageType::kHello;
  uint32_t payload_length = 0;  // kMinPayloadBytes .. max_payload_bytes(type)
};

// Reads and checks the first kFrameHeaderBytes of `bytes` (more may follow; they are not read).
// Nothing else is read, so a caller can size the payload buffer from header->payload_length.
// Checks, in this order:
//   kTruncated                 bytes.size() < kFrameHeaderBytes
//   kBadMagic                  the first two bytes are not "EF"
//   kProtocolVersionMismatch   version != kProtocolVersion
//   kUnknownMessageType        the type is none of MessageType
//   kFrameTooLarge             payload length > max_payload_bytes(type)
//   kMalformedMessage          payload length < kMinPayloadBytes
// *header is written only on kOk.
[[nodiscard]] Status read_frame_header(Span<const uint8_t> bytes, FrameHeader* header);

// Writes the 8 header bytes for `type` and `payload_length` into out[0..8).
// Fails: kBufferTooSmall (out.size() < kFrameHeaderBytes); kUnknownMessageType; kFrameTooLarge;
// kMalformedMessage (payload_length < kMinPayloadBytes). Nothing is written on failure.
[[nodiscard]] Status write_frame_header(MessageType type, uint32_t payload_length, Span<uint8_t> out);

// --- Limits of the message fields (the schema repeats them next to each field) ---------------

constexpr size_t kRoundNonceShortBytes = 16;  // a round nonce has exactly 16 or 32 bytes
constexpr size_t kRoundNonceLongBytes = 32;
constexpr size_t kUploadIdBytes = 16;
constexpr size_t kDigestBytes = 32;  // SHA-256
constexpr size_t kMaxSdkVersionChars = 32;
constexpr size_t kMaxModelSpecChars = 128;
constexpr size_t kMaxCodecSpecChars = 128;
constexpr size_t kMaxMetrics = 32;
constexpr size_t kMaxMetricNameChars = 64;
constexpr size_t kMaxErrorMessageBytes = 1024;
constexpr uint64_t kMaxModelBytes = uint64_t{1} << 32;   // a model download
constexpr uint64_t kMaxUploadBytes = uint64_t{1} << 32;  // an encoded update
constexpr uint64_t kMaxMemoryBudgetBytes = uint64_t{1} << 48;
constexpr uint32_t kMaxParameterCount = EDGEFL_MAX_DIMENSION;
constexpr uint32_t kMaxDeadlineMs = 7u * 24u * 3600u * 1000u;  // 7 days
constexpr uint32_t kMaxRetryMs = 7u * 24u * 3600u * 1000u;
constexpr uint32_t kMaxBatchSize = 65536;
constexpr uint32_t kMaxLocalEpochs = 1000;
constexpr float kMaxHyperParameter = 1000.0f;  // learning rate, weight decay, prox_mu
constexpr uint16_t kMaxCpuCores = 1024;

// Hello.capability_flags bits. encode() and validate() refuse other bits (a build sends only what
// it knows); decode() drops them, so that a newer device that advertises more still gets in.
constexpr uint32_t kCapabilityCharging = 1u << 0;
constexpr uint32_t kCapabilityUnmetered = 1u << 1;
constexpr uint32_t kCapabilityIdle = 1u << 2;
// The device needs the whole model (its last patched model failed the public-model digest).
constexpr uint32_t kCapabilityNeedsWholeModel = 1u << 3;
// The device can take part in secure aggregation rounds (TaskOffer.secure_aggregation).
constexpr uint32_t kCapabilitySecureAggregation = 1u << 4;
constexpr uint32_t kKnownCapabilityFlags = kCapabilityCharging | kCapabilityUnmetered | kCapabilityIdle |
                                           kCapabilityNeedsWholeModel | kCapabilitySecureAggregation;

// Secure aggregation limits (the schema's SecAgg section).
constexpr size_t kSecAggKeyBytes = 32;      // X25519 public keys, the graph seed, the commitment
constexpr size_t kSecAggSealedBytes = 104;  // a sealed pair of Shamir shares (secagg/protocol.h)
constexpr size_t kSecAggSubshares = 9;      // sub-shares of one Shamir share (secagg/shamir.h)
constexpr uint32_t kMaxSecAggCohort = 1u << 20;
constexpr uint32_t kMaxSecAggDegree = 4096;             // neighbours per device
constexpr size_t kMaxSecAggEntries = kMaxSecAggDegree;  // keys, shares or indices per message
constexpr uint32_t kMaxSecAggWords = 1u << 26;
constexpr uint64_t kMaxSecAggNoiseVariance = uint64_t{1} << 20;

// Hello.supported_* masks: bit i stands for the id i of edgefl::SparsifierKind, ValueCoderKind
// and IndexCoding (edgefl/codec.h). Bits without a kind are refused by encode() and validate()
// and dropped by decode(), as capability_flags' are (supported_value_coders must keep one).
constexpr uint32_t kKnownSparsifierBits = 0x1Fu;   // ids 0..4
constexpr uint32_t kKnownValueCoderBits = 0x1FEu;  // ids 1..8
// Block Rice (index coding 3, encoding format version 2) has no bit here: servers before the rule
// above refuse unknown bits, so a device that named it would be refused by every one of them.
constexpr uint32_t kKnownIndexCodingBits = 0x07u;  // ids 0..2

// --- Messages ---------------------------------------------------------------------------------

enum class RetryReason : uint8_t {
  kNoRound = 1,      // no round is open
  kNotSelected = 2,  // a round is open, this device was not sampled (pace steering)
  kRoundFull = 3,    // the round has enough participants
  kServerBusy = 4,   // overload
  kDraining = 5,     // the server is shutting down or restarting
};

enum class UpdateDisposition : uint8_t {
  kAccepted = 1,   // durably recorded and counted once
  kDuplicate = 2,  // (round, device, upload id) was accepted before: counted once, nothing to redo
  kStraggler = 3,  // before the deadline, but the round had already closed with its quorum
  kLate = 4,       // after the reporting deadline: discarded
  kRejected = 5,   // refused (Ack.reason: failed validation, or already_counted): discarded
};

enum class RejectReason : uint8_t {
  kNone = 0,             // not rejected, or no reason given
  kDigestMismatch = 1,   // the uploaded bytes do not match the Commit's SHA-256
  kInvalidEncoding = 2,  // the encoding does not decode at the model's dimension
  kNonFinite = 3,        // a decoded coordinate is NaN or infinite
  kNormTooLarge = 4,     // the update's L2 norm is above the server's bound
  kSampleCount = 5,      // Commit.sample_count is above the server's limit
  kModelOverflow = 6,    // global + update would not be finite in float32
  // Another update of this device (another upload id or other bytes) is already counted in this
  // round; this one is not. A retry of the counted update itself (same upload id and SHA-256)
  // hears kDuplicate; the same bytes under a new upload id are another update.
  kAlreadyCounted = 7,
};
// "digest_mismatch", "invalid_encoding", ...; "none" for kNone, "unknown" otherwise. Never null.
const char* reject_reason_name(RejectReason reason);

// Why a RetryLater came, in words for logs ("no round is open", "the server is busy", ...).
const char* retry_reason_text(RetryReason reason);

enum class ErrorCode : uint8_t {
  kBadMessage = 1,
  kUnexpectedMessage = 2,
  kVersionMismatch = 3,
  kUnauthorized = 4,
  kUnknownRound = 5,
  kNonceMismatch = 6,
  kUnknownUpload = 7,
  kOffsetMismatch = 8,
  kTooLarge = 9,
  kDigestMismatch = 10,
  kRateLimited = 11,
  kInternal = 12,
};

using UploadId = std::array<uint8_t, kUploadIdBytes>;
using Digest = std::array<uint8_t, kDigestBytes>;
using SecAggKey = std::array<uint8_t, kSecAggKeyBytes>;

// The steps of a secure round as the device sees them (SecAggPoll, SecAggStatus).
enum class SecAggPhase : uint8_t {
  kKeys = 1,         // waiting for the neighbours' keys
  kShares = 2,       // waiting for the neighbours' sealed shares
  kMaskedInput = 3,  // the server takes masked vectors
  kUnmask = 4,       // waiting for the unmask request
  kDone = 5,         // nothing more to do in this round
};

// TaskOffer.secure_aggregation: the round's SecAgg+ parameters.
struct SecAggConfig {
  uint32_t device_index = 0;  // < cohort
  uint32_t cohort = 0;        // n: 3 .. kMaxSecAggCohort
  uint32_t degree = 0;        // k: 2 .. min(cohort - 1, kMaxSecAggDegree)
  uint32_t threshold = 0;     // t: 2 .. degree
  uint32_t modulus_bits = 0;  // m: 1 .. 32
  uint32_t words = 0;         // L: 1 .. min(kMaxSecAggWords, TaskOffer.parameter_count)
  SecAggKey graph_seed{};
  uint32_t max_code = 0;        // largest |integer code| sent: 1 .. 2^31 - 1
  uint64_t noise_variance = 0;  // discrete Gaussian noise per code: 0 .. kMaxSecAggNoiseVariance
  double clip_l2_codes = 0;     // 0 without noise; finite > 0 with noise (and only then)
  uint32_t phase_ms = 0;        // 1 .. kMaxDeadlineMs
};

struct SecAggDeviceKeys {
  uint32_t device = 0;
  SecAggKey cipher_public{};  // not all zero
  SecAggKey mask_public{};    // not all zero
};

struct SecAggSealedShare {
  uint32_t from = 0;
  uint32_t to = 0;  // != from
  std::array<uint8_t, kSecAggSealedBytes> sealed{};
};

struct SecAggRevealedShare {
  uint32_t owner = 0;
  uint8_t kind = 0;  // 0: of owner's self-mask seed, 1: of its mask key
  uint32_t x = 0;    // the revealing device's Shamir x: >= 1
  std::array<uint32_t, kSecAggSubshares> y{};
};

// client -> server. Capability hints only: nothing here identifies the device.
struct Hello {
  uint32_t protocol_version = kProtocolVersion;  // must be kProtocolVersion
  std::string sdk_version;                       // 1..32 printable ASCII characters (space allowed)
  uint32_t supported_sparsifiers = 0;            // within kKnownSparsifierBits (decode: masked)
  uint32_t supported_value_coders = 0;           // within kKnownValueCoderBits, not 0 (decode: masked)
  uint32_t supported_index_codings = 0;          // within kKnownIndexCodingBits (decode: masked)
  uint64_t memory_budget_bytes = 0;              // 1 .. kMaxMemoryBudgetBytes
  uint32_t capability_flags = 0;                 // within kKnownCapabilityFlags (decode: masked)
  uint16_t cpu_cores = 0;                        // 0 = unknown, else <= kMaxCpuCores
  uint32_t uplink_kbps = 0;                      // 0 = unknown
  uint32_t downlink_kbps = 0;                    // 0 = unknown
  uint64_t model_version = 0;                    // public model version held; 0 = none
};

// Local training hyper-parameters (the fields of edgefl::TrainConfig, edgefl/trainer.h).
struct TrainingConfig {
  uint32_t batch_size = 32;     // 1 .. kMaxBatchSize
  uint32_t local_epochs = 1;    // 1 .. kMaxLocalEpochs
  uint32_t max_steps = 0;       // 0 = no cap
  float learning_rate = 0.05f;  // finite, (0, kMaxHyperParameter]
  float momentum = 0.9f;        // finite, [0, 1)
  float weight_decay = 0.0f;    // finite, [0, kMaxHyperParameter]
  float prox_mu = 0.0f;         // finite, [0, kMaxHyperParameter]
  uint64_t seed = 1;
};

// server -> client.
struct TaskOffer {
  uint64_t round_id = 0;             // > 0
  std::vector<uint8_t> round_nonce;  // 16 or 32 bytes, not all zero
  uint64_t model_version = 0;        // >= 1: the public model the round trains from
  uint64_t model_bytes = 0;          // 1 .. kMaxModelBytes; 0 iff base_model_version == model_version
  Digest model_digest{};             // SHA-256 of the download stream
  uint32_t parameter_count = 0;      // 1 .. kMaxParameterCount
  std::string model_spec;            // 0..kMaxModelSpecChars printable ASCII, no space
  TrainingConfig training;
  std::string uplink_codec;    // a codec spec that parse_codec_spec() accepts
  std::string downlink_codec;  // the codec spec of this round's patches (round/downlink.h)
  uint64_t codec_seed = 0;
  uint32_t deadline_ms = 0;       // 1 .. kMaxDeadlineMs, from receipt
  uint64_t max_upload_bytes = 0;  // 1 .. kMaxUploadBytes
  uint32_t max_chunk_bytes = 0;   // 1 .. kMaxChunkBytes
  // The download (round/downlink.h): 0 = the whole model (one dense bf16 encoding); b >= 1 = the
  // patches b+1 .. model_version for a device holding version b (b <= model_version).
  uint64_t base_model_version = 0;
  Digest public_model_digest{};     // SHA-256 of the public model (float32 little-endian) after applying
  uint64_t initial_model_seed = 0;  // != 0: version 1 = init_parameters(model_spec, seed) on the bf16 grid
  // The model's tensors (edgefl/tensor_table.h: validate_tensor_table), whose elements add up to
  // parameter_count.
  std::vector<TensorDesc> tensors;
  // Set: a secure aggregation round; round_nonce is then 32 bytes.
  std::optional<SecAggConfig> secure_aggregation;
};

// server -> client: come back at a uniformly random time in [retry_after_ms, + retry_window_ms].
struct RetryLater {
  uint32_t retry_after_ms = 0;   // 1 .. kMaxRetryMs
  uint32_t retry_window_ms = 0;  // 0 .. kMaxRetryMs
  RetryReason reason = RetryReason::kNoRound;
};

// client -> server: model bytes [offset, offset + max_length).
struct ModelRequest {
  uint64_t round_id = 0;  // > 0
  uint64_t model_version = 0;
  uint64_t offset = 0;              // < kMaxModelBytes
  uint32_t max_length = 0;          // 1 .. kMaxChunkBytes
  uint64_t base_model_version = 0;  // the offer's: which download stream
};

// server -> client. On the wire the data also carries its CRC32C: encode() computes it, decode()
// checks it.
struct ModelChunk {
  uint64_t round_id = 0;  // > 0
  uint64_t model_version = 0;
  uint64_t offset = 0;        // < total_bytes
  uint64_t total_bytes = 0;   // 1 .. kMaxModelBytes
  std::vector<uint8_t> data;  // 1 .. kMaxChunkBytes; offset + size <= total_bytes
};

// client -> server: begin or resume an upload.
struct UploadStart {
  uint64_t round_id = 0;             // > 0
  std::vector<uint8_t> round_nonce;  // 16 or 32 bytes, not all zero
  UploadId upload_id{};              // not all zero
  uint64_t total_bytes = 0;          // 1 .. kMaxUploadBytes
};

// server -> client: the server holds bytes [0, offset) of the upload.
struct UploadStatus {
  uint64_t round_id = 0;     // > 0
  UploadId upload_id{};      // not all zero
  uint64_t offset = 0;       // <= total_bytes
  uint64_t total_bytes = 0;  // 1 .. kMaxUploadBytes
};

// client -> server. CRC32C on the wire as for ModelChunk.
struct UploadChunk {
  uint64_t round_id = 0;      // > 0
  UploadId upload_id{};       // not all zero
  uint64_t offset = 0;        // < total_bytes
  uint64_t total_bytes = 0;   // 1 .. kMaxUploadBytes
  std::vector<uint8_t> data;  // 1 .. kMaxChunkBytes; offset + size <= total_bytes
};

struct Metric {
  std::string name;  // 1..kMaxMetricNameChars of [a-z0-9_.-]
  double value = 0;  // finite
};

// client -> server.
struct Commit {
  uint64_t round_id = 0;             // > 0
  std::vector<uint8_t> round_nonce;  // 16 or 32 bytes, not all zero
  UploadId upload_id{};              // not all zero
  uint64_t total_bytes = 0;          // 1 .. kMaxUploadBytes
  uint32_t sample_count = 0;         // > 0
  std::vector<Metric> metrics;       // 0..kMaxMetrics, names unique
  Digest digest{};                   // SHA-256 of the whole encoded update
};

// server -> client.
struct Ack {
  uint64_t round_id = 0;  // > 0
  UploadId upload_id{};   // not all zero
  UpdateDisposition disposition = UpdateDisposition::kAccepted;
  RejectReason reason = RejectReason::kNone;  // kNone unless disposition is kRejected
};

// either direction.
struct Error {
  ErrorCode code = ErrorCode::kBadMessage;
  std::string message;  // 0..kMaxErrorMessageBytes of UTF-8, no control characters but tab and newline
};

// client -> server: R0 of a secure round.
struct SecAggAdvertise {
  uint64_t round_id = 0;             // > 0
  std::vector<uint8_t> round_nonce;  // 32 bytes, not all zero
  SecAggDeviceKeys keys;
};

// server -> client: the keys of the device's neighbours that advertised.
struct SecAggKeys {
  uint64_t round_id = 0;               // > 0
  std::vector<SecAggDeviceKeys> keys;  // 0 .. kMaxSecAggEntries, devices distinct
};

// client -> server: R1.
struct SecAggShares {
  uint64_t round_id = 0;             // > 0
  std::vector<uint8_t> round_nonce;  // 32 bytes, not all zero
  SecAggKey seed_commitment{};
  std::vector<SecAggSealedShare> shares;  // 1 .. kMaxSecAggEntries, all from one device
};

// server -> client: the sealed shares addressed to the device.
struct SecAggInbox {
  uint64_t round_id = 0;                  // > 0
  std::vector<SecAggSealedShare> shares;  // 0 .. kMaxSecAggEntries, all to one device
};

// client -> server: has the phase ended?
struct SecAggPoll {
  uint64_t round_id = 0;                   // > 0
  std::vector<uint8_t> round_nonce;        // 32 bytes, not all zero
  SecAggPhase phase = SecAggPhase::kKeys;  // kKeys, kShares or kUnmask
};

// SecAggStatus.outcome: what became of a device's acked masked vector (with kDone only).
enum class SecAggOutcome : uint8_t {
  kUnspecified = 0,  // not said (other phases; a server older than this field)
  kPending = 1,      // the round is still open: poll (kUnmask) again after retry_after_ms
  kCounted = 2,      // the round committed a model that counts the vector
  kNotCounted = 3,   // the round ended without counting it (abandoned, or no vector of this device)
};

// server -> client: not yet (poll again after retry_after_ms), or kDone (with the vector's
// outcome for a device whose masked vector the server acked).
struct SecAggStatus {
  uint64_t round_id = 0;  // > 0
  SecAggPhase phase = SecAggPhase::kKeys;
  uint32_t retry_after_ms = 0;                          // 0 .. kMaxRetryMs
  SecAggOutcome outcome = SecAggOutcome::kUnspecified;  // kUnspecified unless phase is kDone
};

// server -> client: R3's question.
struct SecAggUnmaskRequest {
  uint64_t round_id = 0;            // > 0
  std::vector<uint32_t> survivors;  // 0 .. kMaxSecAggEntries; no index twice in both lists
  std::vector<uint32_t> dropped;    // 0 .. kMaxSecAggEntries
};

// client -> server: R3's answer.
struct SecAggUnmaskResponse {
  uint64_t round_id = 0;                    // > 0
  std::vector<uint8_t> round_nonce;         // 32 bytes, not all zero
  std::vector<SecAggRevealedShare> shares;  // 0 .. kMaxSecAggEntries, owners distinct, kind 0 or 1
};

// One message of any type. The alternatives are in MessageType order: index() + 1 is the type id.
using Message =
    std::variant<Hello, TaskOffer, RetryLater, ModelRequest, ModelChunk, UploadStart, UploadStatus,
                 UploadChunk, Commit, Ack, Error, SecAggAdvertise, SecAggKeys, SecAggShares, SecAggInbox,
                 SecAggPoll, SecAggStatus, SecAggUnmaskRequest, SecAggUnmaskResponse>;

inline MessageType message_type(const Message& message) {
  return static_cast<MessageType>(message.index() + 1);
}

namespace detail {
template <typename T, typename... Ts>
constexpr size_t index_in(const std::variant<Ts...>*) {
  constexpr bool matches[] = {std::is_same<T, Ts>::value...};
  for (size_t i = 0; i < sizeof...(Ts); ++i) {
    if (matches[i]) return i;
  }
  return sizeof...(Ts);
}
}  // namespace detail

// The MessageType of a message struct: message_type_of<TaskOffer>() == MessageType::kTaskOffer.
template <typename T>
constexpr MessageType message_type_of() {
  constexpr size_t index = detail::index_in<T>(static_cast<const Message*>(nullptr));
  static_assert(index < std::variant_size<Message>::value, "T is not a message");
  return static_cast<MessageType>(index + 1);
}

// --- Validation, decoding, encoding ------------------------------------------------------------

// Which rule a message broke (kInvalidMessage), for logs and tests.
enum class Violation : uint8_t {
  kNone = 0,
  kMissing = 1,            // a field or table that must be present is absent
  kEmpty = 2,              // an id or string that must not be empty is empty
  kTooLong = 3,            // a string or list above its limit
  kWrongLength = 4,        // a nonce, upload id or digest of another length
  kAllZero = 5,            // a nonce or upload id of zero bytes only
  kBadText = 6,            // a character outside the field's alphabet, or invalid UTF-8
  kOutOfRange = 7,         // a number or enum outside its range, or an unknown flag bit
  kNonFinite = 8,          // NaN or infinity
  kOffsetBeyondTotal = 9,  // offset > total, or offset + length > total
  kBadCodecSpec = 10,      // a codec spec that parse_codec_spec() refuses
  kChecksumMismatch = 11,  // a chunk's data does not match its CRC32C
  kDuplicateName = 12,     // two metrics, or two tensors, with one name
  kInconsistent = 13,      // fields that contradict each other (model_bytes vs parameter_count)
  kDuplicateEntry = 14,    // a device index listed twice (SecAgg keys, shares, indices)
};

// What failed, filled by validate() and decode() when the caller asks (may be null).
struct DecodeDetail {
  Violation violation = Violation::kNone;
  const char* field = "";  // "TaskOffer.round_nonce", ...: a static string; "" when not a field
};

// "none", "missing", "empty", ... Never null.
const char* violation_name(Violation violation);

// Checks every field of `message` against the ranges above.
// Fails: kInvalidMessage (with *detail), or kProtocolVersionMismatch for a Hello whose
// protocol_version is not kProtocolVersion.
[[nodiscard]] Status validate(const Message& message, DecodeDetail* detail = nullptr);

// Decodes a payload whose header read_frame_header() returned. On success *out holds the message
// (of type header.type); on failure *out is unchanged. Checks, in this order:
//   kUnknownMessageType / kFrameTooLarge / kMalformedMessage   the header, again
//   kTruncated        payload.size() < header.payload_length
//   kSizeMismatch     payload.size() > header.payload_length
//   kBadMagic         the file identifier is not "EFW1"
//   kMalformedMessage the FlatBuffer fails verification (max depth 4, max 64 tables, aligned,
//                     within payload_length bytes), or its envelope holds no message
//   kMessageTypeMismatch  the envelope holds another message type than the header says
//   kInvalidMessage (or kProtocolVersionMismatch)  validate()'s failures; a chunk whose data
//                     does not match its CRC32C is kInvalidMessage with Violation::kChecksumMismatch
// The payload may have any alignment (it is copied when not 8-byte aligned).
[[nodiscard]] Status decode(const FrameHeader& header, Span<const uint8_t> payload, Message* out,
                            DecodeDetail* detail = nullptr);

// read_frame_header() then decode() over one whole frame (header + payload, nothing after:
// kSizeMismatch when bytes follow the payload).
[[nodiscard]] Status decode_frame(Span<const uint8_t> frame, Message* out, DecodeDetail* detail = nullptr);

// Validates `message` (as validate()), then replaces *frame with its frame: header + payload.
// Fails: validate()'s failures; kFrameTooLarge if the payload would exceed its cap (cannot happen
// for a valid message; kept as a guard); kInvalidArgument if frame is null. *frame is unchanged on
// failure. The same message always gives the same bytes.
[[nodiscard]] Status encode(const Message& message, std::vector<uint8_t>* frame,
                            DecodeDetail* detail = nullptr);
[[nodiscard]] Status encode(const Hello& message, std::vector<uint8_t>* frame,
                            DecodeDetail* detail = nullptr);
[[nodiscard]] Status encode(const TaskOffer& message, std::vector<uint8_t>* frame,
                            DecodeDetail* detail = nullptr);
[[nodiscard]] Status encode(const RetryLater& message, std::vector<uint8_t>* frame,
                            DecodeDetail* detail = nullptr);
[[nodiscard]] Status encode(const ModelRequest& message, std::vector<uint8_t>* frame,
                            DecodeDetail* detail = nullptr);
[[nodiscard]] Status encode(const ModelChunk& message, std::vector<uint8_t>* frame,
                            DecodeDetail* detail = nullptr);
[[nodiscard]] Status encode(const UploadStart& message, std::vector<uint8_t>* frame,
                            DecodeDetail* detail = nullptr);
[[nodiscard]] Status encode(const UploadStatus& message, std::vector<uint8_t>* frame,
                            DecodeDetail* detail = nullptr);
[[nodiscard]] Status encode(const UploadChunk& message, std::vector<uint8_t>* frame,
                            DecodeDetail* detail = nullptr);
[[nodiscard]] Status encode(const Commit& message, std::vector<uint8_t>* frame,
                            DecodeDetail* detail = nullptr);
[[nodiscard]] Status encode(const Ack& message, std::vector<uint8_t>* frame, DecodeDetail* detail = nullptr);
[[nodiscard]] Status encode(const Error& message, std::vector<uint8_t>* frame,
                            DecodeDetail* detail = nullptr);
[[nodiscard]] Status encode(const SecAggAdvertise& message, std::vector<uint8_t>* frame,
                            DecodeDetail* detail = nullptr);
[[nodiscard]] Status encode(const SecAggKeys& message, std::vector<uint8_t>* frame,
                            DecodeDetail* detail = nullptr);
[[nodiscard]] Status encode(const SecAggShares& message, std::vector<uint8_t>* frame,
                            DecodeDetail* detail = nullptr);
[[nodiscard]] Status encode(const SecAggInbox& message, std::vector<uint8_t>* frame,
                            DecodeDetail* detail = nullptr);
[[nodiscard]] Status encode(const SecAggPoll& message, std::vector<uint8_t>* frame,
                            DecodeDetail* detail = nullptr);
[[nodiscard]] Status encode(const SecAggStatus& message, std::vector<uint8_t>* frame,
                            DecodeDetail* detail = nullptr);
[[nodiscard]] Status encode(const SecAggUnmaskRequest& message, std::vector<uint8_t>* frame,
                            DecodeDetail* detail = nullptr);
[[nodiscard]] Status encode(const SecAggUnmaskResponse& message, std::vector<uint8_t>* frame,
                            DecodeDetail* detail = nullptr);

// --- Equality (field by field; floats compare with ==) -----------------------------------------

bool operator==(const Hello& a, const Hello& b);
bool operator==(const TrainingConfig& a, const TrainingConfig& b);
bool operator==(const TaskOffer& a, const TaskOffer& b);
bool operator==(const RetryLater& a, const RetryLater& b);
bool operator==(const ModelRequest& a, const ModelRequest& b);
bool operator==(const ModelChunk& a, const ModelChunk& b);
bool operator==(const UploadStart& a, const UploadStart& b);
bool operator==(const UploadStatus& a, const UploadStatus& b);
bool operator==(const UploadChunk& a, const UploadChunk& b);
bool operator==(const Metric& a, const Metric& b);
bool operator==(const Commit& a, const Commit& b);
bool operator==(const Ack& a, const Ack& b);
bool operator==(const Error& a, const Error& b);
bool operator==(const SecAggConfig& a, const SecAggConfig& b);
bool operator==(const SecAggDeviceKeys& a, const SecAggDeviceKeys& b);
bool operator==(const SecAggSealedShare& a, const SecAggSealedShare& b);
bool operator==(const SecAggRevealedShare& a, const SecAggRevealedShare& b);
bool operator==(const SecAggAdvertise& a, const SecAggAdvertise& b);
bool operator==(const SecAggKeys& a, const SecAggKeys& b);
bool operator==(const SecAggShares& a, const SecAggShares& b);
bool operator==(const SecAggInbox& a, const SecAggInbox& b);
bool operator==(const SecAggPoll& a, const SecAggPoll& b);
bool operator==(const SecAggStatus& a, const SecAggStatus& b);
bool operator==(const SecAggUnmaskRequest& a, const SecAggUnmaskRequest& b);
bool operator==(const SecAggUnmaskResponse& a, const SecAggUnmaskResponse& b);

}  // namespace wire
}  // namespace edgefl

#endif  // EDGEFL_WIRE_H_
