// Internal: the generated FlatBuffers code of sdk/proto/edgefl_wire.fbs (flatc writes it into the
// build tree; it is never committed), the Verifier limits, and compile-time proof that the public
// enums of edgefl/wire.h carry the schema's ids.
#ifndef EDGEFL_SRC_WIRE_SCHEMA_H_
#define EDGEFL_SRC_WIRE_SCHEMA_H_

#include <stdint.h>

#include <flatbuffers/flatbuffers.h>

#include "edgefl/wire.h"
#include "edgefl_wire_generated.h"

namespace edgefl {
namespace wire {
namespace internal {

namespace fb = ::edgefl::wire::fb;

// Verifier limits. The deepest valid message is Envelope -> Commit -> Metric (3 tables); the one
// with most tables is a Commit: 2 + kMaxMetrics. Anything beyond is refused before it is walked.
// The size limit is the payload length itself, which read_frame_header() capped per type.
constexpr flatbuffers::uoffset_t kVerifierMaxDepth = 4;
constexpr flatbuffers::uoffset_t kVerifierMaxTables = 64;
static_assert(2 + kMaxMetrics <= kVerifierMaxTables, "a Commit with kMaxMetrics metrics must verify");
// A TaskOffer: Envelope, TaskOffer, TrainingConfig, SecAggConfig and one table per tensor of the
// largest model.
constexpr flatbuffers::uoffset_t kVerifierMaxTablesTaskOffer = 4 + kMaxTensors;

template <typename Public, typename Generated>
constexpr bool same_id(Public p, Generated g) {
  return static_cast<uint8_t>(p) == static_cast<uint8_t>(g);
}

static_assert(same_id(MessageType::kHello, fb::Message::Hello) &&
                  same_id(MessageType::kTaskOffer, fb::Message::TaskOffer) &&
                  same_id(MessageType::kRetryLater, fb::Message::RetryLater) &&
                  same_id(MessageType::kModelRequest, fb::Message::ModelRequest) &&
                  same_id(MessageType::kModelChunk, fb::Message::ModelChunk) &&
                  same_id(MessageType::kUploadStart, fb::Message::UploadStart) &&
                  same_id(MessageType::kUploadStatus, fb::Message::UploadStatus) &&
                  same_id(MessageType::kUploadChunk, fb::Message::UploadChunk) &&
                  same_id(MessageType::kCommit, fb::Message::Commit) &&
                  same_id(MessageType::kAck, fb::Message::Ack) &&
                  same_id(MessageType::kError, fb::Message::Error) &&
                  same_id(MessageType::kSecAggAdvertise, fb::Message::SecAggAdvertise) &&
                  same_id(MessageType::kSecAggKeys, fb::Message::SecAggKeys) &&
                  same_id(MessageType::kSecAggShares, fb::Message::SecAggShares) &&
                  same_id(MessageType::kSecAggInbox, fb::Message::SecAggInbox) &&
                  same_id(MessageType::kSecAggPoll, fb::Message::SecAggPoll) &&
                  same_id(MessageType::kSecAggStatus, fb::Message::SecAggStatus) &&
                  same_id(MessageType::kSecAggUnmaskRequest, fb::Message::SecAggUnmaskRequest) &&
                  same_id(MessageType::kSecAggUnmaskResponse, fb::Message::SecAggUnmaskResponse) &&
                  same_id(MessageType::kSecAggUnmaskResponse, fb::Message::MAX),
              "MessageType ids must equal the schema's union ids");
static_assert(same_id(RetryReason::kNoRound, fb::RetryReason::NoRound) &&
                  same_id(RetryReason::kNotSelected, fb::RetryReason::NotSelected) &&
                  same_id(RetryReason::kRoundFull, fb::RetryReason::RoundFull) &&
                  same_id(RetryReason::kServerBusy, fb::RetryReason::ServerBusy) &&
                  same_id(RetryReason::kDraining, fb::RetryReason::Draining) &&
                  same_id(RetryReason::kDraining, fb::RetryReason::MAX),
              "RetryReason ids must equal the schema's");
static_assert(same_id(UpdateDisposition::kAccepted, fb::UpdateDisposition::Accepted) &&
                  same_id(UpdateDisposition::kDuplicate, fb::UpdateDisposition::Duplicate) &&
                  same_id(UpdateDisposition::kStraggler, fb::UpdateDisposition::Straggler) &&
                  same_id(UpdateDisposition::kLate, fb::UpdateDisposition::Late) &&
                  same_id(UpdateDisposition::kRejected, fb::UpdateDisposition::Rejected) &&
                  same_id(UpdateDisposition::kRejected, fb::UpdateDisposition::MAX),
              "UpdateDisposition ids must equal the schema's");
static_assert(same_id(RejectReason::kDigestMismatch, fb::RejectReason::DigestMismatch) &&
                  same_id(RejectReason::kInvalidEncoding, fb::RejectReason::InvalidEncoding) &&
                  same_id(RejectReason::kNonFinite, fb::RejectReason::NonFinite) &&
                  same_id(RejectReason::kNormTooLarge, fb::RejectReason::NormTooLarge) &&
                  same_id(RejectReason::kSampleCount, fb::RejectReason::SampleCount) &&
                  same_id(RejectReason::kModelOverflow, fb::RejectReason::ModelOverflow) &&
                  same_id(RejectReason::kAlreadyCounted, fb::RejectReason::AlreadyCounted) &&
                  same_id(RejectReason::kAlreadyCounted, fb::RejectReason::MAX),
              "RejectReason ids must equal the schema's");
static_assert(same_id(ErrorCode::kBadMessage, fb::ErrorCode::BadMessage) &&
                  same_id(ErrorCode::kUnexpectedMessage, fb::ErrorCode::UnexpectedMessage) &&
                  same_id(ErrorCode::kVersionMismatch, fb::ErrorCode::VersionMismatch) &&
                  same_id(ErrorCode::kUnauthorized, fb::ErrorCode::Unauthorized) &&
                  same_id(ErrorCode::kUnknownRound, fb::ErrorCode::UnknownRound) &&
                  same_id(ErrorCode::kNonceMismatch, fb::ErrorCode::NonceMismatch) &&
                  same_id(ErrorCode::kUnknownUpload, fb::ErrorCode::UnknownUpload) &&
                  same_id(ErrorCode::kOffsetMismatch, fb::ErrorCode::OffsetMismatch) &&
                  same_id(ErrorCode::kTooLarge, fb::ErrorCode::TooLarge) &&
                  same_id(ErrorCode::kDigestMismatch, fb::ErrorCode::DigestMismatch) &&
                  same_id(ErrorCode::kRateLimited, fb::ErrorCode::RateLimited) &&
                  same_id(ErrorCode::kInternal, fb::ErrorCode::Internal) &&
                  same_id(ErrorCode::kInternal, fb::ErrorCode::MAX),
              "ErrorCode ids must equal the schema's");
static_assert(same_id(SecAggPhase::kKeys, fb::SecAggPhase::Keys) &&
                  same_id(SecAggPhase::kShares, fb::SecAggPhase::Shares) &&
                  same_id(SecAggPhase::kMaskedInput, fb::SecAggPhase::MaskedInput) &&
                  same_id(SecAggPhase::kUnmask, fb::SecAggPhase::Unmask) &&
                  same_id(SecAggPhase::kDone, fb::SecAggPhase::Done) &&
                  same_id(SecAggPhase::kDone, fb::SecAggPhase::MAX),
              "SecAggPhase ids must equal the schema's");
static_assert(sizeof(fb::SecAggDeviceKeys) == 4 + 2 * kSecAggKeyBytes &&
                  sizeof(fb::SecAggSealedShare) == 8 + kSecAggSealedBytes &&
                  sizeof(fb::SecAggRevealedShare) == 12 + 4 * kSecAggSubshares,
              "the SecAgg structs have the sizes the payload caps assume");

}  // namespace internal
}  // namespace wire
}  // namespace edgefl

#endif  // EDGEFL_SRC_WIRE_SCHEMA_H_
