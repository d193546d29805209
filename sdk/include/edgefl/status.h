// edgefl/status.h: the status codes every edgefl function returns.
//
// Contract: a function that returns Status changes none of its outputs' *state* (error-feedback
// residuals, accumulators, counters) unless it returns Status::kOk. Output byte buffers may hold
// partial data after an error; the byte count reported is then 0.
#ifndef EDGEFL_STATUS_H_
#define EDGEFL_STATUS_H_

#include <stdint.h>

namespace edgefl {

enum class Status : int32_t {
  kOk = 0,
  // Caller errors.
  kInvalidArgument = 1,    // a null pointer, a size that does not match, an impossible parameter
  kInvalidSpec = 2,        // a spec string (codec, model, optimizer) does not parse or is impossible
  kBufferTooSmall = 3,     // `out` is smaller than encoded_bound() / the decoded dimension
  kWorkspaceTooSmall = 4,  // `workspace` is smaller than workspace_size()
  kNonFiniteInput = 5,     // the update holds NaN or +-Inf; nothing is encoded
  kValueOutOfRange = 6,    // a finite value the chosen format cannot represent (e.g. > 65504 in fp16)
  kDimensionTooLarge = 7,  // n exceeds EDGEFL_MAX_DIMENSION
  // Malformed encodings (untrusted bytes).
  kTruncated = 20,           // fewer bytes than the header or the header's payload length says
  kBadMagic = 21,            // not an edgefl encoding
  kUnsupportedVersion = 22,  // format version this build does not read
  kUnknownCodec = 23,        // codec or index-coding id this build does not know
  kBadParameters = 24,       // header parameters out of range or inconsistent with each other
  kChecksumMismatch = 25,    // CRC32C of header + payload does not match
  kSizeMismatch = 26,        // payload length differs from what the parameters imply
  kIndexOutOfRange = 27,     // a decoded index >= n
  kIndicesNotSorted = 28,    // decoded indices are not strictly increasing
  kCorruptPayload = 29,      // any other inconsistency inside the payload (bad code, non-finite scale)
  kDimensionMismatch = 30,   // the accumulator / output length differs from the encoded dimension
  // Combining encodings.
  kNotSummable = 40,   // `add` on encodings whose codes cannot be added without decoding
  kIncompatible = 41,  // `add` on encodings with different dimension, seed, scale or codec
  kOverflow = 42,      // an integer sum would not fit in 32 bits
  // Wire protocol (frames and messages from the network: edgefl/wire.h).
  kFrameTooLarge = 60,            // a frame header declares more payload than its message type allows
  kUnknownMessageType = 61,       // a frame header names a message type this build does not know
  kProtocolVersionMismatch = 62,  // a frame (or a Hello) of another protocol version, or the
                                  // server refused this device's version (Error kVersionMismatch)
  kMalformedMessage = 63,         // the payload fails FlatBuffers verification, or is too short to be one
  kInvalidMessage = 64,           // a verified message breaks a field rule (range, length, text, finiteness)
  kMessageTypeMismatch = 65,      // the payload holds another message type than its frame header says
  // Files, network, TLS and rounds (edgefl/client.h, edgefl-server).
  kIoError = 80,               // a file (certificate, key, model, state) could not be read or written
  kConnectionFailed = 81,      // connect, read or write failed, or the peer closed the connection
  kTimeout = 82,               // an operation did not complete within its timeout
  kTlsHandshakeFailed = 83,    // the TLS handshake failed (untrusted, expired or revoked certificate)
  kTlsError = 84,              // a TLS setup failure (bad key or certificate) or a TLS record error
  kUnauthorized = 85,          // the server refused this device (unknown, revoked, no certificate)
  kServerError = 86,           // the server answered with an Error message
  kProtocolError = 87,         // a valid message at the wrong time, or with ids that do not match
  kMemoryBudgetExceeded = 88,  // a round needs more memory than the device's budget allows
  kCancelled = 89,             // stopped by the caller
  kUpdateNotAccepted = 90,     // the server did not count the update (straggler, late, rejected)
  // Secure aggregation (SecAgg+) and its cryptography. (100-102 are the C API's own codes.)
  kAuthenticationFailed = 110,  // an AEAD ciphertext or its associated data was altered, or misaddressed
  kBadShare = 111,              // secret shares out of the field, duplicated, or not on one polynomial
  kTooFewSurvivors = 112,       // fewer devices than the threshold remain: nothing can be unmasked
  kSecAggRefused = 113,         // a request that would reveal both secrets of a device, or break the protocol
  kKeyReuse = 114,              // a device advertised public keys another device already holds
  kUnsafeConfiguration = 115,   // parameters that could let the masked sum wrap or leak a device's input
  kCryptoError = 116,           // a cryptographic primitive failed or is missing from the linked mbedTLS
};

// A stable, human-readable name for `s` ("ok", "checksum_mismatch", ...). Never null.
const char* status_name(Status s);

// One sentence describing `s`. Never null. Returns "" when EDGEFL_STRIP_ERROR_STRINGS is defined.
const char* status_message(Status s);

inline bool ok(Status s) {
  return s == Status::kOk;
}

}  // namespace edgefl

#define EDGEFL_RETURN_IF_ERROR(expr)                                    \
  do {                                                                  \
    const ::edgefl::Status edgefl_status_ = (expr);                     \
    if (edgefl_status_ != ::edgefl::Status::kOk) return edgefl_status_; \
  } while (0)

#endif  // EDGEFL_STATUS_H_
