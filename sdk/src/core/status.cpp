#include "edgefl/status.h"

namespace edgefl {

namespace {
struct StatusText {
  Status status;
  const char* name;
  const char* message;
};

#if defined(EDGEFL_STRIP_ERROR_STRINGS)
#define EDGEFL_MSG(text) ""
#else
#define EDGEFL_MSG(text) text
#endif

constexpr StatusText kStatusTexts[] = {
    {Status::kOk, "ok", EDGEFL_MSG("success")},
    {Status::kInvalidArgument, "invalid_argument",
     EDGEFL_MSG("an argument is null, mis-sized or out of range")},
    {Status::kInvalidSpec, "invalid_spec",
     EDGEFL_MSG("the spec (codec, model, optimizer) does not parse or names impossible parameters")},
    {Status::kBufferTooSmall, "buffer_too_small", EDGEFL_MSG("the output buffer is smaller than the bound")},
    {Status::kWorkspaceTooSmall, "workspace_too_small",
     EDGEFL_MSG("the workspace is smaller than workspace_size()")},
    {Status::kNonFiniteInput, "non_finite_input", EDGEFL_MSG("the update holds NaN or Inf")},
    {Status::kValueOutOfRange, "value_out_of_range", EDGEFL_MSG("a value does not fit the chosen format")},
    {Status::kDimensionTooLarge, "dimension_too_large",
     EDGEFL_MSG("the dimension exceeds EDGEFL_MAX_DIMENSION")},
    {Status::kTruncated, "truncated", EDGEFL_MSG("the encoding is shorter than its header says")},
    {Status::kBadMagic, "bad_magic", EDGEFL_MSG("not an edgefl encoding")},
    {Status::kUnsupportedVersion, "unsupported_version",
     EDGEFL_MSG("format version not supported by this build")},
    {Status::kUnknownCodec, "unknown_codec",
     EDGEFL_MSG("unknown sparsifier, value coder or index coding id")},
    {Status::kBadParameters, "bad_parameters", EDGEFL_MSG("header parameters out of range or inconsistent")},
    {Status::kChecksumMismatch, "checksum_mismatch", EDGEFL_MSG("the CRC32C of the encoding does not match")},
    {Status::kSizeMismatch, "size_mismatch",
     EDGEFL_MSG("payload size differs from what the parameters imply")},
    {Status::kIndexOutOfRange, "index_out_of_range",
     EDGEFL_MSG("a decoded index is not below the dimension")},
    {Status::kIndicesNotSorted, "indices_not_sorted",
     EDGEFL_MSG("decoded indices are not strictly increasing")},
    {Status::kCorruptPayload, "corrupt_payload", EDGEFL_MSG("the payload holds an invalid code or scale")},
    {Status::kDimensionMismatch, "dimension_mismatch",
     EDGEFL_MSG("buffer length differs from the encoded dimension")},
    {Status::kNotSummable, "not_summable", EDGEFL_MSG("these encodings cannot be added without decoding")},
    {Status::kIncompatible, "incompatible", EDGEFL_MSG("encodings differ in dimension, seed, step or codec")},
    {Status::kOverflow, "overflow", EDGEFL_MSG("an integer sum does not fit in 31 bits")},
    {Status::kFrameTooLarge, "frame_too_large",
     EDGEFL_MSG("the frame declares more payload than its message type allows")},
    {Status::kUnknownMessageType, "unknown_message_type",
     EDGEFL_MSG("the frame names an unknown message type")},
    {Status::kProtocolVersionMismatch, "protocol_version_mismatch",
     EDGEFL_MSG("the peer speaks another protocol version")},
    {Status::kMalformedMessage, "malformed_message",
     EDGEFL_MSG("the message fails FlatBuffers verification")},
    {Status::kInvalidMessage, "invalid_message",
     EDGEFL_MSG("a message field is out of range, mis-sized, not finite or not valid text")},
    {Status::kMessageTypeMismatch, "message_type_mismatch",
     EDGEFL_MSG("the payload holds another message type than the frame header says")},
    {Status::kIoError, "io_error", EDGEFL_MSG("a file could not be read or written")},
    {Status::kConnectionFailed, "connection_failed",
     EDGEFL_MSG("the connection failed or the peer closed it")},
    {Status::kTimeout, "timeout", EDGEFL_MSG("the operation did not complete within its timeout")},
    {Status::kTlsHandshakeFailed, "tls_handshake_failed",
     EDGEFL_MSG("the TLS handshake failed (untrusted, expired or revoked certificate, or protocol)")},
    {Status::kTlsError, "tls_error", EDGEFL_MSG("TLS setup (key, certificate) or a TLS record failed")},
    {Status::kUnauthorized, "unauthorized", EDGEFL_MSG("the server refused this device")},
    {Status::kServerError, "server_error", EDGEFL_MSG("the server answered with an error")},
    {Status::kProtocolError, "protocol_error",
     EDGEFL_MSG("the peer sent a message at the wrong time or with ids that do not match")},
    {Status::kMemoryBudgetExceeded, "memory_budget_exceeded",
     EDGEFL_MSG("the round needs more memory than the budget allows")},
    {Status::kCancelled, "cancelled", EDGEFL_MSG("stopped by the caller")},
    {Status::kUpdateNotAccepted, "update_not_accepted",
     EDGEFL_MSG("the server did not count the update (straggler, late or rejected)")},
// Secure aggregation is hosted-only (sdk/src/secagg needs mbedTLS): bare-metal builds, which
// cannot return these codes, leave their texts out (EDGEFL_FREESTANDING_STATUS_TABLE, set by the
// build for freestanding targets) and name them "unknown_status".
#if !defined(EDGEFL_FREESTANDING_STATUS_TABLE)
    {Status::kAuthenticationFailed, "authentication_failed",
     EDGEFL_MSG("a ciphertext or its associated data was altered, or it was meant for someone else")},
    {Status::kBadShare, "bad_share",
     EDGEFL_MSG("secret shares are out of range, duplicated or do not lie on one polynomial")},
    {Status::kTooFewSurvivors, "too_few_survivors",
     EDGEFL_MSG("fewer devices than the threshold remain: the sum cannot be unmasked")},
    {Status::kSecAggRefused, "secagg_refused",
     EDGEFL_MSG("the request would reveal both secrets of one device, or breaks the protocol")},
    {Status::kKeyReuse, "key_reuse", EDGEFL_MSG("a device advertised public keys another device holds")},
    {Status::kUnsafeConfiguration, "unsafe_configuration",
     EDGEFL_MSG("the parameters could let the masked sum wrap or reveal a device's input")},
    {Status::kCryptoError, "crypto_error",
     EDGEFL_MSG("a cryptographic primitive failed or is missing from the linked mbedTLS")},
#endif
};
}  // namespace

const char* status_name(Status s) {
  for (const StatusText& t : kStatusTexts) {
    if (t.status == s) return t.name;
  }
  return "unknown_status";
}

const char* status_message(Status s) {
  for (const StatusText& t : kStatusTexts) {
    if (t.status == s) return t.message;
  }
  return EDGEFL_MSG("unknown status");
}

}  // namespace edgefl
