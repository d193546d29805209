// Field-by-field equality of the message structs (edgefl/wire.h).
#include "edgefl/wire.h"

namespace edgefl {
namespace wire {

bool operator==(const Hello& a, const Hello& b) {
  return a.protocol_version == b.protocol_version && a.sdk_version == b.sdk_version &&
         a.supported_sparsifiers == b.supported_sparsifiers &&
         a.supported_value_coders == b.supported_value_coders &&
         a.supported_index_codings == b.supported_index_codings &&
         a.memory_budget_bytes == b.memory_budget_bytes && a.capability_flags == b.capability_flags &&
         a.cpu_cores == b.cpu_cores && a.uplink_kbps == b.uplink_kbps && a.downlink_kbps == b.downlink_kbps &&
         a.model_version == b.model_version;
}

bool operator==(const TrainingConfig& a, const TrainingConfig& b) {
  return a.batch_size == b.batch_size && a.local_epochs == b.local_epochs && a.max_steps == b.max_steps &&
         a.learning_rate == b.learning_rate && a.momentum == b.momentum && a.weight_decay == b.weight_decay &&
         a.prox_mu == b.prox_mu && a.seed == b.seed;
}

bool operator==(const TaskOffer& a, const TaskOffer& b) {
  return a.round_id == b.round_id && a.round_nonce == b.round_nonce && a.model_version == b.model_version &&
         a.model_bytes == b.model_bytes && a.model_digest == b.model_digest &&
         a.parameter_count == b.parameter_count && a.model_spec == b.model_spec && a.training == b.training &&
         a.uplink_codec == b.uplink_codec && a.downlink_codec == b.downlink_codec &&
         a.base_model_version == b.base_model_version && a.public_model_digest == b.public_model_digest &&
         a.initial_model_seed == b.initial_model_seed && a.codec_seed == b.codec_seed &&
         a.deadline_ms == b.deadline_ms && a.max_upload_bytes == b.max_upload_bytes &&
         a.max_chunk_bytes == b.max_chunk_bytes && a.tensors == b.tensors &&
         a.secure_aggregation == b.secure_aggregation;
}

bool operator==(const RetryLater& a, const RetryLater& b) {
  return a.retry_after_ms == b.retry_after_ms && a.retry_window_ms == b.retry_window_ms &&
         a.reason == b.reason;
}

bool operator==(const ModelRequest& a, const ModelRequest& b) {
  return a.round_id == b.round_id && a.model_version == b.model_version && a.offset == b.offset &&
         a.max_length == b.max_length && a.base_model_version == b.base_model_version;
}

bool operator==(const ModelChunk& a, const ModelChunk& b) {
  return a.round_id == b.round_id && a.model_version == b.model_version && a.offset == b.offset &&
         a.total_bytes == b.total_bytes && a.data == b.data;
}

bool operator==(const UploadStart& a, const UploadStart& b) {
  return a.round_id == b.round_id && a.round_nonce == b.round_nonce && a.upload_id == b.upload_id &&
         a.total_bytes == b.total_bytes;
}

bool operator==(const UploadStatus& a, const UploadStatus& b) {
  return a.round_id == b.round_id && a.upload_id == b.upload_id && a.offset == b.offset &&
         a.total_bytes == b.total_bytes;
}

bool operator==(const UploadChunk& a, const UploadChunk& b) {
  return a.round_id == b.round_id && a.upload_id == b.upload_id && a.offset == b.offset &&
         a.total_bytes == b.total_bytes && a.data == b.data;
}

bool operator==(const Metric& a, const Metric& b) {
  return a.name == b.name && a.value == b.value;
}

bool operator==(const Commit& a, const Commit& b) {
  return a.round_id == b.round_id && a.round_nonce == b.round_nonce && a.upload_id == b.upload_id &&
         a.total_bytes == b.total_bytes && a.sample_count == b.sample_count && a.metrics == b.metrics &&
         a.digest == b.digest;
}

bool operator==(const Ack& a, const Ack& b) {
  return a.round_id == b.round_id && a.upload_id == b.upload_id && a.disposition == b.disposition &&
         a.reason == b.reason;
}

bool operator==(const Error& a, const Error& b) {
  return a.code == b.code && a.message == b.message;
}

bool operator==(const SecAggConfig& a, const SecAggConfig& b) {
  return a.device_index == b.device_index && a.cohort == b.cohort && a.degree == b.degree &&
         a.threshold == b.threshold && a.modulus_bits == b.modulus_bits && a.words == b.words &&
         a.graph_seed == b.graph_seed && a.max_code == b.max_code && a.noise_variance == b.noise_variance &&
         a.clip_l2_codes == b.clip_l2_codes && a.phase_ms == b.phase_ms;
}

bool operator==(const SecAggDeviceKeys& a, const SecAggDeviceKeys& b) {
  return a.device == b.device && a.cipher_public == b.cipher_public && a.mask_public == b.mask_public;
}

bool operator==(const SecAggSealedShare& a, const SecAggSealedShare& b) {
  return a.from == b.from && a.to == b.to && a.sealed == b.sealed;
}

bool operator==(const SecAggRevealedShare& a, const SecAggRevealedShare& b) {
  return a.owner == b.owner && a.kind == b.kind && a.x == b.x && a.y == b.y;
}

bool operator==(const SecAggAdvertise& a, const SecAggAdvertise& b) {
  return a.round_id == b.round_id && a.round_nonce == b.round_nonce && a.keys == b.keys;
}

bool operator==(const SecAggKeys& a, const SecAggKeys& b) {
  return a.round_id == b.round_id && a.keys == b.keys;
}

bool operator==(const SecAggShares& a, const SecAggShares& b) {
  return a.round_id == b.round_id && a.round_nonce == b.round_nonce &&
         a.seed_commitment == b.seed_commitment && a.shares == b.shares;
}

bool operator==(const SecAggInbox& a, const SecAggInbox& b) {
  return a.round_id == b.round_id && a.shares == b.shares;
}

bool operator==(const SecAggPoll& a, const SecAggPoll& b) {
  return a.round_id == b.round_id && a.round_nonce == b.round_nonce && a.phase == b.phase;
}

bool operator==(const SecAggStatus& a, const SecAggStatus& b) {
  return a.round_id == b.round_id && a.phase == b.phase && a.retry_after_ms == b.retry_after_ms &&
         a.outcome == b.outcome;
}

bool operator==(const SecAggUnmaskRequest& a, const SecAggUnmaskRequest& b) {
  return a.round_id == b.round_id && a.survivors == b.survivors && a.dropped == b.dropped;
}

bool operator==(const SecAggUnmaskResponse& a, const SecAggUnmaskResponse& b) {
  return a.round_id == b.round_id && a.round_nonce == b.round_nonce && a.shares == b.shares;
}

}  // namespace wire
}  // namespace edgefl
