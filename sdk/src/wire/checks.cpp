// The field rules of the wire protocol (wire/checks.h). Freestanding: no allocation, no exceptions
// (edgefl/wire.h's structs are declared but never built here); the device client links this file
// as the hosted clients do.
#include "wire/checks.h"

#include <math.h>
#include <string.h>

#include "edgefl/codec.h"

namespace edgefl {
namespace wire {
namespace internal {

namespace {

bool in_alphabet(unsigned char c, Alphabet alphabet) {
  switch (alphabet) {
    case Alphabet::kPrintable: return c >= 0x20 && c <= 0x7E;
    case Alphabet::kPrintableNoSpace: return c >= 0x21 && c <= 0x7E;
    case Alphabet::kMetricName:
      return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
  }
  return false;
}

}  // namespace

Status fail(DecodeDetail* detail, Violation violation, const char* field) {
  if (detail != nullptr) {
    detail->violation = violation;
    detail->field = field;
  }
  return Status::kInvalidMessage;
}

Status check_fixed_length(bool present, size_t size, size_t expected, DecodeDetail* detail,
                          const char* field) {
  if (!present) return fail(detail, Violation::kMissing, field);
  if (size == 0) return fail(detail, Violation::kEmpty, field);
  if (size != expected) return fail(detail, Violation::kWrongLength, field);
  return Status::kOk;
}

Status check_text(Span<const char> text, size_t min_chars, size_t max_chars, Alphabet alphabet,
                  DecodeDetail* detail, const char* field) {
  if (text.size() < min_chars) return fail(detail, Violation::kEmpty, field);
  if (text.size() > max_chars) return fail(detail, Violation::kTooLong, field);
  for (char c : text) {
    if (!in_alphabet(static_cast<unsigned char>(c), alphabet))
      return fail(detail, Violation::kBadText, field);
  }
  return Status::kOk;
}

// Well-formed UTF-8 (RFC 3629: shortest form, no surrogates, at most U+10FFFF) without C0
// controls other than tab and newline, and without DEL.
bool valid_message_text(Span<const char> text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      if ((c < 0x20 && c != '\t' && c != '\n') || c == 0x7F) return false;
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0;
    uint32_t min_cp = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2, cp = c & 0x1Fu, min_cp = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3, cp = c & 0x0Fu, min_cp = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, cp = c & 0x07u, min_cp = 0x10000;
    } else {
      return false;  // a continuation byte first, an overlong lead (C0, C1) or above U+10FFFF (F5..FF)
    }
    if (n - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      const unsigned cc = p[i + k];
      if ((cc & 0xC0u) != 0x80u) return false;
      cp = (cp << 6) | (cc & 0x3Fu);
    }
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    if (cp >= 0x80 && cp <= 0x9F) return false;  // C1 controls
    i += len;
  }
  return true;
}

Status check_round_id(uint64_t round_id, DecodeDetail* detail, const char* field) {
  return round_id > 0 ? Status::kOk : fail(detail, Violation::kOutOfRange, field);
}

bool all_zero(Span<const uint8_t> bytes) {
  for (uint8_t b : bytes) {
    if (b != 0) return false;
  }
  return true;
}

Status check_nonce(Span<const uint8_t> nonce, DecodeDetail* detail, const char* field) {
  if (nonce.empty()) return fail(detail, Violation::kEmpty, field);
  if (nonce.size() != kRoundNonceShortBytes && nonce.size() != kRoundNonceLongBytes) {
    return fail(detail, Violation::kWrongLength, field);
  }
  if (all_zero(nonce)) return fail(detail, Violation::kAllZero, field);
  return Status::kOk;
}

Status check_upload_id(Span<const uint8_t> id, DecodeDetail* detail, const char* field) {
  if (id.size() != kUploadIdBytes) return fail(detail, Violation::kWrongLength, field);
  return all_zero(id) ? fail(detail, Violation::kAllZero, field) : Status::kOk;
}

Status check_range(uint64_t value, uint64_t lo, uint64_t hi, DecodeDetail* detail, const char* field) {
  return (value >= lo && value <= hi) ? Status::kOk : fail(detail, Violation::kOutOfRange, field);
}

Status check_real(double value, double lo, double hi, bool lo_open, bool hi_open, DecodeDetail* detail,
                  const char* field) {
  if (!isfinite(value)) return fail(detail, Violation::kNonFinite, field);
  const bool above_lo = lo_open ? value > lo : value >= lo;
  const bool below_hi = hi_open ? value < hi : value <= hi;
  return (above_lo && below_hi) ? Status::kOk : fail(detail, Violation::kOutOfRange, field);
}

Status check_codec_spec(Span<const char> spec, bool allow_empty, DecodeDetail* detail, const char* field) {
  if (spec.empty() && allow_empty) return Status::kOk;
  EDGEFL_RETURN_IF_ERROR(check_text(spec, 1, kMaxCodecSpecChars, Alphabet::kPrintableNoSpace, detail, field));
  char terminated[kMaxCodecSpecChars + 1];  // parse_codec_spec() reads a C string
  memcpy(terminated, spec.data(), spec.size());
  terminated[spec.size()] = '\0';
  CodecSpec parsed;
  if (parse_codec_spec(terminated, &parsed) != Status::kOk)
    return fail(detail, Violation::kBadCodecSpec, field);
  return Status::kOk;
}

Status check_piece(uint64_t offset, size_t size, uint64_t total, uint64_t max_total, DecodeDetail* detail,
                   const char* total_field, const char* data_field, const char* offset_field) {
  EDGEFL_RETURN_IF_ERROR(check_range(total, 1, max_total, detail, total_field));
  if (size == 0) return fail(detail, Violation::kEmpty, data_field);
  if (size > kMaxChunkBytes) return fail(detail, Violation::kTooLong, data_field);
  if (offset >= total || size > total - offset)
    return fail(detail, Violation::kOffsetBeyondTotal, offset_field);
  return Status::kOk;
}

Status check_training(const TrainingConfig& t, DecodeDetail* detail) {
  EDGEFL_RETURN_IF_ERROR(check_range(t.batch_size, 1, kMaxBatchSize, detail, "TrainingConfig.batch_size"));
  EDGEFL_RETURN_IF_ERROR(
      check_range(t.local_epochs, 1, kMaxLocalEpochs, detail, "TrainingConfig.local_epochs"));
  EDGEFL_RETURN_IF_ERROR(check_real(t.learning_rate, 0.0, kMaxHyperParameter, true, false, detail,
                                    "TrainingConfig.learning_rate"));
  EDGEFL_RETURN_IF_ERROR(check_real(t.momentum, 0.0, 1.0, false, true, detail, "TrainingConfig.momentum"));
  EDGEFL_RETURN_IF_ERROR(check_real(t.weight_decay, 0.0, kMaxHyperParameter, false, false, detail,
                                    "TrainingConfig.weight_decay"));
  return check_real(t.prox_mu, 0.0, kMaxHyperParameter, false, false, detail, "TrainingConfig.prox_mu");
}

}  // namespace internal
}  // namespace wire
}  // namespace edgefl
