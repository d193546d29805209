// The semantic rules of every message (edgefl::wire::validate). FlatBuffers' Verifier only proves
// that reads stay inside the buffer; everything a peer could get wrong or lie about is checked
// here: ids, lengths, ranges, finite numbers, text, codec specs, offsets against totals. (The
// CRC32C of chunk data lives only on the wire: decode() checks it.) The field rules themselves are
// in checks.cpp, which the device client links too.
#include <math.h>

#include <algorithm>
#include <string>
#include <vector>

#include "edgefl/codec.h"
#include "edgefl/wire.h"
#include "wire/checks.h"
#include "wire/client_protocol.h"

namespace edgefl {
namespace wire {

namespace {

using internal::all_zero;
using internal::check_nonce;
using internal::fail;

// A secure round's nonce: 32 bytes (SecAgg+ derives keys from it), not all zero.
Status check_secagg_nonce(const std::vector<uint8_t>& nonce, DecodeDetail* detail, const char* field) {
  EDGEFL_RETURN_IF_ERROR(check_nonce(nonce, detail, field));
  return nonce.size() == kRoundNonceLongBytes ? Status::kOk : fail(detail, Violation::kWrongLength, field);
}

Status check_keys(const SecAggDeviceKeys& k, DecodeDetail* detail, const char* field) {
  if (k.device >= kMaxSecAggCohort) return fail(detail, Violation::kOutOfRange, field);
  if (all_zero(k.cipher_public) || all_zero(k.mask_public)) return fail(detail, Violation::kAllZero, field);
  return Status::kOk;
}

// Device indices listed once each (sorts its argument).
Status check_distinct(std::vector<uint32_t> devices, DecodeDetail* detail, const char* field) {
  std::sort(devices.begin(), devices.end());
  if (std::adjacent_find(devices.begin(), devices.end()) != devices.end()) {
    return fail(detail, Violation::kDuplicateEntry, field);
  }
  return Status::kOk;
}

// 1 .. kMaxSecAggEntries sealed pairs, indices in range, never to the sender; one_sender: all
// from one device to distinct receivers; otherwise all to one device from distinct senders.
Status check_sealed(const std::vector<SecAggSealedShare>& shares, bool one_sender, DecodeDetail* detail,
                    const char* field) {
  if (shares.empty()) return fail(detail, Violation::kEmpty, field);
  if (shares.size() > kMaxSecAggEntries) return fail(detail, Violation::kTooLong, field);
  std::vector<uint32_t> others;
  others.reserve(shares.size());
  for (const SecAggSealedShare& s : shares) {
    if (s.from >= kMaxSecAggCohort || s.to >= kMaxSecAggCohort || s.from == s.to) {
      return fail(detail, Violation::kOutOfRange, field);
    }
    const uint32_t fixed = one_sender ? s.from : s.to;
    if (fixed != (one_sender ? shares[0].from : shares[0].to))
      return fail(detail, Violation::kInconsistent, field);
    others.push_back(one_sender ? s.to : s.from);
  }
  return check_distinct(std::move(others), detail, field);
}

}  // namespace

namespace internal {

Status check_message(const Hello& m, DecodeDetail* detail) {
  if (m.protocol_version != kProtocolVersion) {
    fail(detail, Violation::kInconsistent, "Hello.protocol_version");
    return Status::kProtocolVersionMismatch;
  }
  EDGEFL_RETURN_IF_ERROR(
      check_text(m.sdk_version, 1, kMaxSdkVersionChars, Alphabet::kPrintable, detail, "Hello.sdk_version"));
  if ((m.supported_sparsifiers & ~kKnownSparsifierBits) != 0) {
    return fail(detail, Violation::kOutOfRange, "Hello.supported_sparsifiers");
  }
  if (m.supported_value_coders == 0 || (m.supported_value_coders & ~kKnownValueCoderBits) != 0) {
    return fail(detail, Violation::kOutOfRange, "Hello.supported_value_coders");
  }
  if ((m.supported_index_codings & ~kKnownIndexCodingBits) != 0) {
    return fail(detail, Violation::kOutOfRange, "Hello.supported_index_codings");
  }
  EDGEFL_RETURN_IF_ERROR(
      check_range(m.memory_budget_bytes, 1, kMaxMemoryBudgetBytes, detail, "Hello.memory_budget_bytes"));
  if ((m.capability_flags & ~kKnownCapabilityFlags) != 0) {
    return fail(detail, Violation::kOutOfRange, "Hello.capability_flags");
  }
  return check_range(m.cpu_cores, 0, kMaxCpuCores, detail, "Hello.cpu_cores");
}

Status check_secagg_config(const SecAggConfig& c, uint32_t parameter_count, DecodeDetail* detail) {
  EDGEFL_RETURN_IF_ERROR(check_range(c.cohort, 3, kMaxSecAggCohort, detail, "SecAggConfig.cohort"));
  EDGEFL_RETURN_IF_ERROR(check_range(c.device_index, 0, c.cohort - 1, detail, "SecAggConfig.device_index"));
  EDGEFL_RETURN_IF_ERROR(
      check_range(c.degree, 2, std::min(c.cohort - 1, kMaxSecAggDegree), detail, "SecAggConfig.degree"));
  EDGEFL_RETURN_IF_ERROR(check_range(c.threshold, 2, c.degree, detail, "SecAggConfig.threshold"));
  EDGEFL_RETURN_IF_ERROR(check_range(c.modulus_bits, 1, 32, detail, "SecAggConfig.modulus_bits"));
  EDGEFL_RETURN_IF_ERROR(
      check_range(c.words, 1, std::min(kMaxSecAggWords, parameter_count), detail, "SecAggConfig.words"));
  EDGEFL_RETURN_IF_ERROR(check_range(c.max_code, 1, INT32_MAX, detail, "SecAggConfig.max_code"));
  EDGEFL_RETURN_IF_ERROR(
      check_range(c.noise_variance, 0, kMaxSecAggNoiseVariance, detail, "SecAggConfig.noise_variance"));
  if (!isfinite(c.clip_l2_codes)) return fail(detail, Violation::kNonFinite, "SecAggConfig.clip_l2_codes");
  if (c.clip_l2_codes < 0) return fail(detail, Violation::kOutOfRange, "SecAggConfig.clip_l2_codes");
  if ((c.noise_variance > 0) != (c.clip_l2_codes > 0)) {
    return fail(detail, Violation::kInconsistent, "SecAggConfig.clip_l2_codes");
  }
  return check_range(c.phase_ms, 1, kMaxDeadlineMs, detail, "SecAggConfig.phase_ms");
}

// The offer's tensor table (edgefl/tensor_table.h), field by field, then against parameter_count.
Status check_tensors(const std::vector<TensorDesc>& tensors, uint32_t parameter_count, DecodeDetail* detail) {
  if (tensors.empty()) return fail(detail, Violation::kMissing, "TaskOffer.tensors");
  if (tensors.size() > kMaxTensors) return fail(detail, Violation::kTooLong, "TaskOffer.tensors");
  uint64_t total = 0;
  for (const TensorDesc& t : tensors) {
    EDGEFL_RETURN_IF_ERROR(check_text(t.name, 1, kMaxTensorNameChars, Alphabet::kPrintableNoSpace, detail,
                                      "TaskOffer.tensors.name"));
    if (t.shape.size() > kMaxTensorTableRank)
      return fail(detail, Violation::kTooLong, "TaskOffer.tensors.shape");
    for (uint64_t d : t.shape) {
      if (d == 0 || d > kMaxTensorDim) return fail(detail, Violation::kOutOfRange, "TaskOffer.tensors.shape");
    }
    if (t.dtype != TensorDtype::kF32 && t.dtype != TensorDtype::kF16 && t.dtype != TensorDtype::kBf16) {
      return fail(detail, Violation::kOutOfRange, "TaskOffer.tensors.dtype");
    }
    const uint64_t e = tensor_elements(t);
    if (e == 0 || e > parameter_count || total > parameter_count - e) {
      return fail(detail, Violation::kInconsistent, "TaskOffer.tensors");
    }
    total += e;
  }
  if (total != parameter_count) return fail(detail, Violation::kInconsistent, "TaskOffer.tensors");
  std::vector<const std::string*> names;
  names.reserve(tensors.size());
  for (const TensorDesc& t : tensors) names.push_back(&t.name);
  std::sort(names.begin(), names.end(), [](const std::string* a, const std::string* b) { return *a < *b; });
  for (size_t i = 1; i < names.size(); ++i) {
    if (*names[i] == *names[i - 1]) return fail(detail, Violation::kDuplicateName, "TaskOffer.tensors.name");
  }
  return Status::kOk;
}

Status check_offer_tables(const TaskOffer& m, DecodeDetail* detail) {
  EDGEFL_RETURN_IF_ERROR(check_tensors(m.tensors, m.parameter_count, detail));
  if (!m.secure_aggregation) return Status::kOk;
  return check_secagg_config(*m.secure_aggregation, m.parameter_count, detail);
}

Status check_message(const TaskOffer& m, DecodeDetail* detail) {
  EDGEFL_RETURN_IF_ERROR(check_offer(view_of(m), detail));
  return check_offer_tables(m, detail);
}

Status check_message(const RetryLater& m, DecodeDetail* detail) {
  return check_retry_later(m, detail);
}

Status check_message(const ModelRequest& m, DecodeDetail* detail) {
  EDGEFL_RETURN_IF_ERROR(check_round_id(m.round_id, detail, "ModelRequest.round_id"));
  if (m.offset >= kMaxModelBytes) return fail(detail, Violation::kOffsetBeyondTotal, "ModelRequest.offset");
  return check_range(m.max_length, 1, kMaxChunkBytes, detail, "ModelRequest.max_length");
}

Status check_message(const ModelChunk& m, DecodeDetail* detail) {
  return check_model_chunk(view_of(m), detail);
}

Status check_message(const UploadStart& m, DecodeDetail* detail) {
  EDGEFL_RETURN_IF_ERROR(check_round_id(m.round_id, detail, "UploadStart.round_id"));
  EDGEFL_RETURN_IF_ERROR(check_nonce(m.round_nonce, detail, "UploadStart.round_nonce"));
  EDGEFL_RETURN_IF_ERROR(check_upload_id(m.upload_id, detail, "UploadStart.upload_id"));
  return check_range(m.total_bytes, 1, kMaxUploadBytes, detail, "UploadStart.total_bytes");
}

Status check_message(const UploadStatus& m, DecodeDetail* detail) {
  return check_upload_status(m, detail);
}

Status check_message(const UploadChunk& m, DecodeDetail* detail) {
  EDGEFL_RETURN_IF_ERROR(check_round_id(m.round_id, detail, "UploadChunk.round_id"));
  EDGEFL_RETURN_IF_ERROR(check_upload_id(m.upload_id, detail, "UploadChunk.upload_id"));
  return check_piece(m.offset, m.data.size(), m.total_bytes, kMaxUploadBytes, detail,
                     "UploadChunk.total_bytes", "UploadChunk.data", "UploadChunk.offset");
}

Status check_message(const Commit& m, DecodeDetail* detail) {
  EDGEFL_RETURN_IF_ERROR(check_round_id(m.round_id, detail, "Commit.round_id"));
  EDGEFL_RETURN_IF_ERROR(check_nonce(m.round_nonce, detail, "Commit.round_nonce"));
  EDGEFL_RETURN_IF_ERROR(check_upload_id(m.upload_id, detail, "Commit.upload_id"));
  EDGEFL_RETURN_IF_ERROR(check_range(m.total_bytes, 1, kMaxUploadBytes, detail, "Commit.total_bytes"));
  if (m.sample_count == 0) return fail(detail, Violation::kOutOfRange, "Commit.sample_count");
  if (m.metrics.size() > kMaxMetrics) return fail(detail, Violation::kTooLong, "Commit.metrics");
  for (size_t i = 0; i < m.metrics.size(); ++i) {
    const Metric& metric = m.metrics[i];
    EDGEFL_RETURN_IF_ERROR(
        check_text(metric.name, 1, kMaxMetricNameChars, Alphabet::kMetricName, detail, "Metric.name"));
    if (!isfinite(metric.value)) return fail(detail, Violation::kNonFinite, "Metric.value");
    for (size_t j = 0; j < i; ++j) {  // at most 32 x 31 / 2 comparisons
      if (m.metrics[j].name == metric.name) return fail(detail, Violation::kDuplicateName, "Metric.name");
    }
  }
  return Status::kOk;
}

Status check_message(const Ack& m, DecodeDetail* detail) {
  return check_ack(m, detail);
}

Status check_message(const Error& m, DecodeDetail* detail) {
  return check_error(view_of(m), detail);
}

Status check_message(const SecAggAdvertise& m, DecodeDetail* detail) {
  EDGEFL_RETURN_IF_ERROR(check_round_id(m.round_id, detail, "SecAggAdvertise.round_id"));
  EDGEFL_RETURN_IF_ERROR(check_secagg_nonce(m.round_nonce, detail, "SecAggAdvertise.round_nonce"));
  return check_keys(m.keys, detail, "SecAggAdvertise.keys");
}

Status check_message(const SecAggKeys& m, DecodeDetail* detail) {
  EDGEFL_RETURN_IF_ERROR(check_round_id(m.round_id, detail, "SecAggKeys.round_id"));
  if (m.keys.size() > kMaxSecAggEntries) return fail(detail, Violation::kTooLong, "SecAggKeys.keys");
  std::vector<uint32_t> devices;
  devices.reserve(m.keys.size());
  for (const SecAggDeviceKeys& k : m.keys) {
    EDGEFL_RETURN_IF_ERROR(check_keys(k, detail, "SecAggKeys.keys"));
    devices.push_back(k.device);
  }
  return check_distinct(std::move(devices), detail, "SecAggKeys.keys.device");
}

Status check_message(const SecAggShares& m, DecodeDetail* detail) {
  EDGEFL_RETURN_IF_ERROR(check_round_id(m.round_id, detail, "SecAggShares.round_id"));
  EDGEFL_RETURN_IF_ERROR(check_secagg_nonce(m.round_nonce, detail, "SecAggShares.round_nonce"));
  if (all_zero(m.seed_commitment)) return fail(detail, Violation::kAllZero, "SecAggShares.seed_commitment");
  return check_sealed(m.shares, /*one_sender=*/true, detail, "SecAggShares.shares");
}

Status check_message(const SecAggInbox& m, DecodeDetail* detail) {
  EDGEFL_RETURN_IF_ERROR(check_round_id(m.round_id, detail, "SecAggInbox.round_id"));
  if (m.shares.empty()) return Status::kOk;
  return check_sealed(m.shares, /*one_sender=*/false, detail, "SecAggInbox.shares");
}

Status check_message(const SecAggPoll& m, DecodeDetail* detail) {
  EDGEFL_RETURN_IF_ERROR(check_round_id(m.round_id, detail, "SecAggPoll.round_id"));
  EDGEFL_RETURN_IF_ERROR(check_secagg_nonce(m.round_nonce, detail, "SecAggPoll.round_nonce"));
  if (m.phase != SecAggPhase::kKeys && m.phase != SecAggPhase::kShares && m.phase != SecAggPhase::kUnmask) {
    return fail(detail, Violation::kOutOfRange, "SecAggPoll.phase");
  }
  return Status::kOk;
}

Status check_message(const SecAggStatus& m, DecodeDetail* detail) {
  EDGEFL_RETURN_IF_ERROR(check_round_id(m.round_id, detail, "SecAggStatus.round_id"));
  EDGEFL_RETURN_IF_ERROR(check_range(static_cast<uint8_t>(m.phase), static_cast<uint8_t>(SecAggPhase::kKeys),
                                     static_cast<uint8_t>(SecAggPhase::kDone), detail, "SecAggStatus.phase"));
  EDGEFL_RETURN_IF_ERROR(check_range(static_cast<uint8_t>(m.outcome), uint8_t{0},
                                     static_cast<uint8_t>(SecAggOutcome::kNotCounted), detail,
                                     "SecAggStatus.outcome"));
  if (m.outcome != SecAggOutcome::kUnspecified && m.phase != SecAggPhase::kDone) {
    return fail(detail, Violation::kInconsistent, "SecAggStatus.outcome");
  }
  return check_range(m.retry_after_ms, 0, kMaxRetryMs, detail, "SecAggStatus.retry_after_ms");
}

Status check_message(const SecAggUnmaskRequest& m, DecodeDetail* detail) {
  EDGEFL_RETURN_IF_ERROR(check_round_id(m.round_id, detail, "SecAggUnmaskRequest.round_id"));
  if (m.survivors.size() > kMaxSecAggEntries) {
    return fail(detail, Violation::kTooLong, "SecAggUnmaskRequest.survivors");
  }
  if (m.dropped.size() > kMaxSecAggEntries)
    return fail(detail, Violation::kTooLong, "SecAggUnmaskRequest.dropped");
  std::vector<uint32_t> all(m.survivors);
  all.insert(all.end(), m.dropped.begin(), m.dropped.end());
  for (uint32_t d : all) {
    if (d >= kMaxSecAggCohort) return fail(detail, Violation::kOutOfRange, "SecAggUnmaskRequest.survivors");
  }
  return check_distinct(std::move(all), detail, "SecAggUnmaskRequest.dropped");
}

Status check_message(const SecAggUnmaskResponse& m, DecodeDetail* detail) {
  EDGEFL_RETURN_IF_ERROR(check_round_id(m.round_id, detail, "SecAggUnmaskResponse.round_id"));
  EDGEFL_RETURN_IF_ERROR(check_secagg_nonce(m.round_nonce, detail, "SecAggUnmaskResponse.round_nonce"));
  if (m.shares.size() > kMaxSecAggEntries)
    return fail(detail, Violation::kTooLong, "SecAggUnmaskResponse.shares");
  std::vector<uint32_t> owners;
  owners.reserve(m.shares.size());
  for (const SecAggRevealedShare& r : m.shares) {
    if (r.owner >= kMaxSecAggCohort)
      return fail(detail, Violation::kOutOfRange, "SecAggUnmaskResponse.shares.owner");
    if (r.kind > 1) return fail(detail, Violation::kOutOfRange, "SecAggUnmaskResponse.shares.kind");
    if (r.x == 0 || r.x > kMaxSecAggCohort) {
      return fail(detail, Violation::kOutOfRange, "SecAggUnmaskResponse.shares.x");
    }
    owners.push_back(r.owner);
  }
  return check_distinct(std::move(owners), detail, "SecAggUnmaskResponse.shares.owner");
}

}  // namespace internal

Status validate(const Message& message, DecodeDetail* detail) {
  if (detail != nullptr) *detail = DecodeDetail{};
  return std::visit([detail](const auto& m) { return internal::check_message(m, detail); }, message);
}

}  // namespace wire
}  // namespace edgefl
