// Internal: the field rules of the wire protocol, shared by validate() (on the plain structs),
// decode() (the few rules that must hold before a FlatBuffer field is copied into a struct:
// fixed-length ids and digests, a present training table) and the freestanding reader of the
// server's messages (wire/client_protocol.h), which the hosted and the device clients both use.
#ifndef EDGEFL_SRC_WIRE_CHECKS_H_
#define EDGEFL_SRC_WIRE_CHECKS_H_

#include <stddef.h>
#include <stdint.h>

#include "edgefl/span.h"
#include "edgefl/status.h"
#include "edgefl/wire.h"

namespace edgefl {
namespace wire {
namespace internal {

// --- Field rules (checks.cpp: freestanding, no allocation; the device client links them) -------

// Records (violation, field) in *detail when detail is not null; returns kInvalidMessage.
Status fail(DecodeDetail* detail, Violation violation, const char* field);

// A fixed-length byte string on the wire (upload id, digest): `size` must equal `expected`.
// `present` is false when the FlatBuffer omits the field.
Status check_fixed_length(bool present, size_t size, size_t expected, DecodeDetail* detail,
                          const char* field);

// The alphabet of a text field.
enum class Alphabet {
  kPrintable,         // ASCII 0x20..0x7E (sdk_version)
  kPrintableNoSpace,  // ASCII 0x21..0x7E (model and codec specs)
  kMetricName,        // [a-z0-9_.-]
};

// min_chars <= size <= max_chars, every character in `alphabet`.
Status check_text(Span<const char> text, size_t min_chars, size_t max_chars, Alphabet alphabet,
                  DecodeDetail* detail, const char* field);
// Well-formed UTF-8 (RFC 3629) without control characters other than tab and newline.
bool valid_message_text(Span<const char> text);
Status check_round_id(uint64_t round_id, DecodeDetail* detail, const char* field);
bool all_zero(Span<const uint8_t> bytes);
// 16 or 32 bytes, not all zero.
Status check_nonce(Span<const uint8_t> nonce, DecodeDetail* detail, const char* field);
Status check_upload_id(Span<const uint8_t> id, DecodeDetail* detail, const char* field);
Status check_range(uint64_t value, uint64_t lo, uint64_t hi, DecodeDetail* detail, const char* field);
// lo <= value <= hi, or with an open end where asked; never NaN or infinite.
Status check_real(double value, double lo, double hi, bool lo_open, bool hi_open, DecodeDetail* detail,
                  const char* field);
// A codec spec parse_codec_spec() accepts (1..kMaxCodecSpecChars), or "" when allow_empty.
Status check_codec_spec(Span<const char> spec, bool allow_empty, DecodeDetail* detail, const char* field);
// A piece [offset, offset + size) of a total: 1 <= total <= max_total, offset < total,
// 1 <= size <= kMaxChunkBytes, offset + size <= total.
Status check_piece(uint64_t offset, size_t size, uint64_t total, uint64_t max_total, DecodeDetail* detail,
                   const char* total_field, const char* data_field, const char* offset_field);
Status check_training(const TrainingConfig& t, DecodeDetail* detail);

// The same rules on the plain structs' fields.
inline Span<const char> text_of(const std::string& s) {
  return {s.data(), s.size()};
}
inline Span<const uint8_t> bytes_of(const std::vector<uint8_t>& v) {
  return {v.data(), v.size()};
}
template <size_t N>
Span<const uint8_t> bytes_of(const std::array<uint8_t, N>& a) {
  return {a.data(), N};
}
inline Status check_text(const std::string& text, size_t min_chars, size_t max_chars, Alphabet alphabet,
                         DecodeDetail* detail, const char* field) {
  return check_text(text_of(text), min_chars, max_chars, alphabet, detail, field);
}
inline Status check_nonce(const std::vector<uint8_t>& nonce, DecodeDetail* detail, const char* field) {
  return check_nonce(bytes_of(nonce), detail, field);
}
inline Status check_upload_id(const UploadId& id, DecodeDetail* detail, const char* field) {
  return check_upload_id(bytes_of(id), detail, field);
}
inline Status check_codec_spec(const std::string& spec, bool allow_empty, DecodeDetail* detail,
                               const char* field) {
  return check_codec_spec(text_of(spec), allow_empty, detail, field);
}
template <size_t N>
bool all_zero(const std::array<uint8_t, N>& a) {
  return all_zero(bytes_of(a));
}

// The rules of a TaskOffer's tensor table and secure-aggregation settings: check_message() of a
// TaskOffer without the fields the shared reader checks (check_offer, wire/client_protocol.h).
Status check_offer_tables(const TaskOffer& m, DecodeDetail* detail);

// The rules of each message (validate() without the variant). *detail is written on failure only.
Status check_message(const Hello& m, DecodeDetail* detail);
Status check_message(const TaskOffer& m, DecodeDetail* detail);
Status check_message(const RetryLater& m, DecodeDetail* detail);
Status check_message(const ModelRequest& m, DecodeDetail* detail);
Status check_message(const ModelChunk& m, DecodeDetail* detail);
Status check_message(const UploadStart& m, DecodeDetail* detail);
Status check_message(const UploadStatus& m, DecodeDetail* detail);
Status check_message(const UploadChunk& m, DecodeDetail* detail);
Status check_message(const Commit& m, DecodeDetail* detail);
Status check_message(const Ack& m, DecodeDetail* detail);
Status check_message(const Error& m, DecodeDetail* detail);
Status check_message(const SecAggAdvertise& m, DecodeDetail* detail);
Status check_message(const SecAggKeys& m, DecodeDetail* detail);
Status check_message(const SecAggShares& m, DecodeDetail* detail);
Status check_message(const SecAggInbox& m, DecodeDetail* detail);
Status check_message(const SecAggPoll& m, DecodeDetail* detail);
Status check_message(const SecAggStatus& m, DecodeDetail* detail);
Status check_message(const SecAggUnmaskRequest& m, DecodeDetail* detail);
Status check_message(const SecAggUnmaskResponse& m, DecodeDetail* detail);

}  // namespace internal
}  // namespace wire
}  // namespace edgefl

#endif  // EDGEFL_SRC_WIRE_CHECKS_H_
