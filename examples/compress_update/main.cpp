// Compresses a model update the way a device does each round: ask the sizes, supply the memory
// once, then encode with error feedback, and aggregate on the "server" side with decode_add.
//
//   ./edgefl_example_compress_update [SPEC]        (default: topk:0.01+q4)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <vector>

#include "edgefl/codec.h"
#include "edgefl/error_feedback.h"

int main(int argc, char** argv) {
  const char* text = argc > 1 ? argv[1] : "topk:0.01+q4";
  edgefl::CodecSpec spec;
  if (edgefl::parse_codec_spec(text, &spec) != edgefl::Status::kOk) {
    fprintf(stderr, "invalid codec spec '%s'\n", text);
    return 2;
  }
  const size_t n = 100000;  // parameters of the model

  // Ask, then give: every buffer is the app's, sized once, reused every round.
  std::vector<uint8_t> workspace(edgefl::workspace_size(spec, n));
  std::vector<uint8_t> encoded(edgefl::encoded_bound(spec, n));
  std::vector<uint8_t> residual(edgefl::ErrorFeedback::storage_bytes(n, edgefl::ResidualPrecision::kBf16));
  edgefl::ErrorFeedback feedback;
  if (feedback.init({residual.data(), residual.size()}, n, edgefl::ResidualPrecision::kBf16) !=
      edgefl::Status::kOk) {
    return 1;
  }
  printf("codec %s: workspace %zu B, bound %zu B, residual %zu B (bf16) for %zu parameters\n", text,
         workspace.size(), encoded.size(), residual.size(), n);

  std::vector<float> update(n), sum_sent(n, 0.0f), sum_true(n, 0.0f);
  for (int round = 0; round < 5; ++round) {
    for (size_t i = 0; i < n; ++i) {  // a stand-in for local training
      update[i] = float(sin(0.001 * double(i) * (round + 1)) * 1e-2);
      sum_true[i] += update[i];
    }
    size_t written = 0;
    const edgefl::Status s =
        feedback.encode(spec, {update.data(), n}, /*seed=*/uint64_t(round) + 1,
                        {workspace.data(), workspace.size()}, {encoded.data(), encoded.size()}, &written);
    if (s != edgefl::Status::kOk) {
      fprintf(stderr, "encode failed: %s\n", edgefl::status_name(s));
      return 1;
    }
    // Server side: decode straight into the running sum.
    if (edgefl::decode_add({encoded.data(), written}, 1.0f, {sum_sent.data(), n}) != edgefl::Status::kOk)
      return 1;
    double err = 0, ref = 0;
    for (size_t i = 0; i < n; ++i) {
      const double d = double(sum_sent[i]) + double(feedback.residual(i)) - double(sum_true[i]);
      err += d * d;
      ref += double(sum_true[i]) * sum_true[i];
    }
    printf("round %d: %zu bytes (%.3f bits/param); |sent + residual - true|/|true| = %.2e\n", round, written,
           8.0 * double(written) / double(n), sqrt(err / ref));
  }
  return 0;
}
