// tests/support/wire_samples.h: one valid message of every type, with every field away from its
// default (so that a field the encoder or decoder drops shows up), shared by the wire suite and the
// fuzzer's seed generator.
#ifndef EDGEFL_TESTS_SUPPORT_WIRE_SAMPLES_H_
#define EDGEFL_TESTS_SUPPORT_WIRE_SAMPLES_H_

#include <stddef.h>
#include <stdint.h>

#include <string>
#include <vector>

#include "edgefl/wire.h"

namespace edgefl_test {

namespace wire_samples {

namespace w = edgefl::wire;

inline std::vector<uint8_t> pattern(size_t n, uint8_t start) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(start + 7 * i);
  return v;
}

inline w::UploadId upload_id() {
  w::UploadId id{};
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<uint8_t>(0xA0 + i);
  return id;
}

inline w::Digest digest(uint8_t start) {
  w::Digest d{};
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<uint8_t>(start + 3 * i);
  return d;
}

inline w::Hello hello() {
  w::Hello m;
  m.sdk_version = "0.1.0 (test)";
  m.supported_sparsifiers = 0x1F;
  m.supported_value_coders = 0x1FE;
  m.supported_index_codings = 0x7;
  m.memory_budget_bytes = 48ull << 20;
  m.capability_flags = w::kCapabilityCharging | w::kCapabilityIdle;
  m.cpu_cores = 8;
  m.uplink_kbps = 1000;
  m.downlink_kbps = 10000;
  m.model_version = 33;
  return m;
}

inline w::TaskOffer task_offer() {
  w::TaskOffer m;
  m.round_id = 42;
  m.round_nonce = pattern(32, 0x11);
  m.model_version = 41;
  m.model_bytes = 8 * 1031 + 4;
  m.model_digest = digest(0x21);
  m.parameter_count = 55050;
  m.model_spec = "cnn";
  m.training.batch_size = 64;
  m.training.local_epochs = 2;
  m.training.max_steps = 500;
  m.training.learning_rate = 0.125f;
  m.training.momentum = 0.5f;
  m.training.weight_decay = 1e-4f;
  m.training.prox_mu = 0.01f;
  m.training.seed = 0x0123456789ABCDEFull;
  m.uplink_codec = "topk:0.01+q4";
  m.downlink_codec = "sparq:0.05";
  m.codec_seed = 0xFEDCBA9876543210ull;
  m.deadline_ms = 600000;
  m.max_upload_bytes = 1u << 20;
  m.max_chunk_bytes = 256u << 10;
  m.base_model_version = 33;
  m.public_model_digest = digest(0x5A);
  m.initial_model_seed = 7;
  m.tensors = {{"conv.weight", {50, 1, 10, 10}, edgefl::TensorDtype::kF32},
               {"fc.weight", {10, 5000}, edgefl::TensorDtype::kF16},
               {"fc.bias", {50}, edgefl::TensorDtype::kBf16}};  // 55,050 parameters
  return m;
}

inline w::RetryLater retry_later() {
  w::RetryLater m;
  m.retry_after_ms = 30000;
  m.retry_window_ms = 15000;
  m.reason = w::RetryReason::kNotSelected;
  return m;
}

inline w::ModelRequest model_request() {
  w::ModelRequest m;
  m.round_id = 42;
  m.model_version = 41;
  m.offset = 65536;
  m.max_length = 65536;
  m.base_model_version = 33;
  return m;
}

inline w::ModelChunk model_chunk() {
  w::ModelChunk m;
  m.round_id = 42;
  m.model_version = 41;
  m.offset = 65536;
  m.total_bytes = 4 * 55050;
  m.data = pattern(100, 0x31);
  return m;
}

inline w::UploadStart upload_start() {
  w::UploadStart m;
  m.round_id = 42;
  m.round_nonce = pattern(16, 0x41);
  m.upload_id = upload_id();
  m.total_bytes = 9000;
  return m;
}

inline w::UploadStatus upload_status() {
  w::UploadStatus m;
  m.round_id = 42;
  m.upload_id = upload_id();
  m.offset = 4096;
  m.total_bytes = 9000;
  return m;
}

inline w::UploadChunk upload_chunk() {
  w::UploadChunk m;
  m.round_id = 42;
  m.upload_id = upload_id();
  m.offset = 4096;
  m.total_bytes = 9000;
  m.data = pattern(120, 0x51);
  return m;
}

inline w::Commit commit() {
  w::Commit m;
  m.round_id = 42;
  m.round_nonce = pattern(32, 0x11);
  m.upload_id = upload_id();
  m.total_bytes = 9000;
  m.sample_count = 600;
  m.metrics = {{"train_loss", 0.4375}, {"train_accuracy", 0.875}, {"steps", 19.0}};
  m.digest = digest(0x61);
  return m;
}

inline w::Ack ack() {
  w::Ack m;
  m.round_id = 42;
  m.upload_id = upload_id();
  m.disposition = w::UpdateDisposition::kStraggler;
  return m;
}

inline w::Error error() {
  w::Error m;
  m.code = w::ErrorCode::kNonceMismatch;
  m.message =
      "round nonce does not match round 42\n\tretry with a fresh offer (\xC3\xA9t\xC3\xA9 \xE2\x9C\x93)";
  return m;
}

inline w::SecAggKey key(uint8_t start) {
  w::SecAggKey k{};
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint8_t>(start + 3 * i);
  return k;
}

inline w::SecAggConfig secagg_config() {
  w::SecAggConfig c;
  c.device_index = 7;
  c.cohort = 100;
  c.degree = 40;
  c.threshold = 21;
  c.modulus_bits = 11;
  c.words = 55050;
  c.graph_seed = key(0x33);
  c.max_code = 7;
  c.noise_variance = 9;
  c.clip_l2_codes = 1234.5;
  c.phase_ms = 30000;
  return c;
}

// A secure round's offer: task_offer() with a SecAggConfig (its nonce is 32 bytes).
inline w::TaskOffer secure_task_offer() {
  w::TaskOffer m = task_offer();
  m.uplink_codec = "q4:shared=0.001";
  m.secure_aggregation = secagg_config();
  return m;
}

inline w::SecAggDeviceKeys device_keys(uint32_t device) {
  return {device, key(static_cast<uint8_t>(device + 1)), key(static_cast<uint8_t>(device + 101))};
}

inline w::SecAggSealedShare sealed_share(uint32_t from, uint32_t to) {
  w::SecAggSealedShare s;
  s.from = from;
  s.to = to;
  for (size_t i = 0; i < s.sealed.size(); ++i) s.sealed[i] = static_cast<uint8_t>(from * 7 + to * 13 + i);
  return s;
}

inline w::SecAggAdvertise secagg_advertise() {
  w::SecAggAdvertise m;
  m.round_id = 42;
  m.round_nonce = pattern(32, 0x11);
  m.keys = device_keys(7);
  return m;
}

inline w::SecAggKeys secagg_keys() {
  w::SecAggKeys m;
  m.round_id = 42;
  m.keys = {device_keys(3), device_keys(5), device_keys(9)};
  return m;
}

inline w::SecAggShares secagg_shares() {
  w::SecAggShares m;
  m.round_id = 42;
  m.round_nonce = pattern(32, 0x11);
  m.seed_commitment = key(0x44);
  m.shares = {sealed_share(7, 3), sealed_share(7, 5), sealed_share(7, 9)};
  return m;
}

inline w::SecAggInbox secagg_inbox() {
  w::SecAggInbox m;
  m.round_id = 42;
  m.shares = {sealed_share(3, 7), sealed_share(9, 7)};
  return m;
}

inline w::SecAggPoll secagg_poll() {
  w::SecAggPoll m;
  m.round_id = 42;
  m.round_nonce = pattern(32, 0x11);
  m.phase = w::SecAggPhase::kShares;
  return m;
}

inline w::SecAggStatus secagg_status() {
  w::SecAggStatus m;
  m.round_id = 42;
  m.phase = w::SecAggPhase::kUnmask;
  m.retry_after_ms = 250;
  return m;
}

inline w::SecAggUnmaskRequest secagg_unmask_request() {
  w::SecAggUnmaskRequest m;
  m.round_id = 42;
  m.survivors = {3, 9};
  m.dropped = {5};
  return m;
}

inline w::SecAggUnmaskResponse secagg_unmask_response() {
  w::SecAggUnmaskResponse m;
  m.round_id = 42;
  m.round_nonce = pattern(32, 0x11);
  w::SecAggRevealedShare a, b;
  a.owner = 3;
  a.kind = 0;
  a.x = 8;
  b.owner = 5;
  b.kind = 1;
  b.x = 8;
  for (uint32_t i = 0; i < w::kSecAggSubshares; ++i) {
    a.y[i] = 0x7FFFFF00u + i;
    b.y[i] = 1000u * i;
  }
  m.shares = {a, b};
  return m;
}

// One of each, in MessageType order.
inline std::vector<w::Message> all() {
  return {hello(),
          task_offer(),
          retry_later(),
          model_request(),
          model_chunk(),
          upload_start(),
          upload_status(),
          upload_chunk(),
          commit(),
          ack(),
          error(),
          secagg_advertise(),
          secagg_keys(),
          secagg_shares(),
          secagg_inbox(),
          secagg_poll(),
          secagg_status(),
          secagg_unmask_request(),
          secagg_unmask_response()};
}

}  // namespace wire_samples
}  // namespace edgefl_test

#endif  // EDGEFL_TESTS_SUPPORT_WIRE_SAMPLES_H_
