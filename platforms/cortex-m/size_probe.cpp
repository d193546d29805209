// platforms/cortex-m/size_probe.cpp: programs that reference one part of the SDK each, linked
// like firmware (--gc-sections), so that their maps say what that part costs in flash and RAM
// (size_report.py). EDGEFL_PROBE selects the part:
//   0 baseline   startup and semihosting only
//   1 encode     a sending client: parse_codec_spec, workspace_size, encoded_bound, encode,
//                error feedback (every codec is reachable: the spec is a run-time string)
//   2 codecs     every codec both ways, as a device uses them: encode, inspect, decode, error
//                feedback, format_codec_spec (the server's decode_add and add_encoded: see 4)
//   3 train      on-device training and sending: edgefl::train's SgdTrainer + encode
//   4 aggregate  an aggregating gateway: StreamingAggregator + ServerOptimizer, decode_add
//                (float and double) and add_encoded
//   5 all        2 + 3 + 4
// Inputs come from volatile objects so that nothing is folded away; the probes are linked, not run.
#include <stddef.h>
#include <stdint.h>

#include "edgefl/aggregate.h"
#include "edgefl/codec.h"
#include "edgefl/error_feedback.h"
#include "edgefl/model.h"
#include "edgefl/trainer.h"

#ifndef EDGEFL_PROBE
#error "define EDGEFL_PROBE (0..5)"
#endif

namespace {

const char* volatile g_spec_text = "sparq:0.1";
volatile size_t g_n = 256;
float g_floats[256];
double g_doubles[256];
uint8_t g_bytes[16 * 1024];
uint8_t g_work[64 * 1024];

[[maybe_unused]] int probe_encode() {
  edgefl::CodecSpec spec;
  if (edgefl::parse_codec_spec(g_spec_text, &spec) != edgefl::Status::kOk) return 1;
  const size_t n = g_n, ws = edgefl::workspace_size(spec, n), cap = edgefl::encoded_bound(spec, n);
  size_t written = 0;
  if (edgefl::encode(spec, {g_floats, n}, 1, {g_work, ws}, {g_bytes, cap}, &written) != edgefl::Status::kOk)
    return 2;
  edgefl::ErrorFeedback ef;
  if (ef.init({g_work, sizeof g_work}, n, edgefl::ResidualPrecision::kBf16) != edgefl::Status::kOk) return 3;
  return ef.encode(spec, {g_floats, n}, 2, {g_work, ws}, {g_bytes, cap}, &written) == edgefl::Status::kOk ? 0
                                                                                                          : 4;
}

[[maybe_unused]] int probe_codecs() {
  int rc = probe_encode();
  const size_t n = g_n, size = g_n;
  edgefl::EncodedInfo info;
  if (edgefl::inspect({g_bytes, size}, &info) != edgefl::Status::kOk) rc |= 8;
  if (edgefl::decode({g_bytes, size}, {g_floats, n}, {g_work, sizeof g_work}) != edgefl::Status::kOk)
    rc |= 16;
  char name[96];
  edgefl::CodecSpec spec;
  if (edgefl::parse_codec_spec(g_spec_text, &spec) == edgefl::Status::kOk) {
    rc |= edgefl::format_codec_spec(spec, name, sizeof name) >= sizeof name ? 256 : 0;
  }
  return rc | (edgefl::status_message(edgefl::Status::kOk)[0] == 'x' ? 512 : 0);
}

[[maybe_unused]] int probe_train() {
  edgefl::ModelSpec model;
  if (edgefl::parse_model_spec("mlp:16-8-4", &model) != edgefl::Status::kOk) return 1;
  const size_t p = edgefl::parameter_count(model);
  if (p > g_n) return 2;
  edgefl::init_parameters(model, 7, {g_floats, p});
  edgefl::TrainConfig config;
  edgefl::SgdTrainer trainer;
  const size_t ws = edgefl::SgdTrainer::workspace_bytes(model, config);
  if (ws > sizeof g_work || trainer.init(model, config, {g_work, ws}) != edgefl::Status::kOk) return 3;
  static uint8_t labels[8];
  edgefl::DataView data;
  data.inputs = g_floats;
  data.labels = labels;
  data.count = 8;
  data.input_dim = edgefl::input_dim(model);
  if (trainer.set_data(data) != edgefl::Status::kOk) return 4;
  edgefl::FitResult result;
  static float delta[256];
  if (trainer.fit({g_floats, p}, {delta, p}, &result) != edgefl::Status::kOk) return 5;
  return probe_encode();
}

[[maybe_unused]] int probe_aggregate() {
  const size_t n = g_n;
  static uint8_t storage[8 * 256 + 64];
  edgefl::StreamingAggregator agg;
  if (edgefl::StreamingAggregator::storage_bytes(n) > sizeof storage) return 1;
  if (agg.init({storage, sizeof storage}, n) != edgefl::Status::kOk) return 2;
  if (agg.add_encoded({g_bytes, g_n}, 1.0, {g_work, sizeof g_work}) != edgefl::Status::kOk) return 3;
  if (agg.mean({g_floats, n}) != edgefl::Status::kOk) return 4;
  edgefl::ServerOptimizerSpec opt;
  if (edgefl::parse_server_optimizer_spec("fedadam", &opt) != edgefl::Status::kOk) return 5;
  edgefl::ServerOptimizer server;
  if (server.init(opt, {g_work, sizeof g_work}, n) != edgefl::Status::kOk) return 6;
  static float global[256];
  if (server.apply({global, n}, {g_floats, n}) != edgefl::Status::kOk) return 7;
  const size_t size = g_n;
  if (edgefl::decode_add({g_bytes, size}, 0.5f, {g_floats, n}, {g_work, sizeof g_work}) !=
      edgefl::Status::kOk)
    return 8;
  if (edgefl::decode_add({g_bytes, size}, 0.5, {g_doubles, n}, {g_work, sizeof g_work}) !=
      edgefl::Status::kOk)
    return 9;
  edgefl::EncodedInfo info;
  size_t written = 0;
  if (edgefl::inspect({g_bytes, size}, &info) == edgefl::Status::kOk && edgefl::is_summable(info) &&
      edgefl::add_encoded({g_bytes, size}, {g_bytes, size}, {g_work, edgefl::add_encoded_bound(info, info)},
                          &written) != edgefl::Status::kOk)
    return 10;
  return 0;
}

}  // namespace

int main() {
#if EDGEFL_PROBE == 0
  return 0;
#elif EDGEFL_PROBE == 1
  return probe_encode();
#elif EDGEFL_PROBE == 2
  return probe_codecs();
#elif EDGEFL_PROBE == 3
  return probe_train();
#elif EDGEFL_PROBE == 4
  return probe_aggregate();
#else
  return probe_codecs() | probe_train() | probe_aggregate();
#endif
}
