// tests/freestanding/link_probe.cpp: links edgefl_core into a program *without* libstdc++ and
// with the C allocator and stdio wrapped to undefined symbols (tests/CMakeLists.txt), so that the
// link fails if the core needs operator new, exceptions, RTTI, thread-safe statics, malloc or
// printf; then runs one encode/decode round trip out of static buffers.
#include "edgefl/codec.h"
#include "edgefl/error_feedback.h"

namespace {

constexpr size_t kN = 1024;
float g_update[kN];
float g_decoded[kN];
uint8_t g_workspace[64 * 1024];
uint8_t g_out[16 * 1024];
uint8_t g_residual[4 * kN];

int run(const char* text) {
  edgefl::CodecSpec spec;
  if (edgefl::parse_codec_spec(text, &spec) != edgefl::Status::kOk) return 1;
  if (edgefl::workspace_size(spec, kN) > sizeof g_workspace) return 2;
  if (edgefl::encoded_bound(spec, kN) > sizeof g_out) return 3;
  size_t written = 0;
  if (edgefl::encode(spec, {g_update, kN}, 42, {g_workspace, sizeof g_workspace}, {g_out, sizeof g_out},
                     &written) != edgefl::Status::kOk)
    return 4;
  if (edgefl::decode({g_out, written}, {g_decoded, kN}) != edgefl::Status::kOk) return 5;
  if (edgefl::decode_add({g_out, written}, 0.5f, {g_decoded, kN}) != edgefl::Status::kOk) return 6;
  edgefl::EncodedInfo info;
  if (edgefl::inspect({g_out, written}, &info) != edgefl::Status::kOk) return 7;
  if (edgefl::is_summable(info)) {
    static uint8_t sum[16 * 1024];
    if (edgefl::add_encoded_bound(info, info) > sizeof sum) return 8;
    if (edgefl::add_encoded({g_out, written}, {g_out, written}, {sum, sizeof sum}, &written) !=
        edgefl::Status::kOk)
      return 9;
  }
  char name[128];
  if (edgefl::format_codec_spec(spec, name, sizeof name) >= sizeof name) return 10;
  edgefl::ErrorFeedback ef;
  if (ef.init({g_residual, sizeof g_residual}, kN, edgefl::ResidualPrecision::kFp32) != edgefl::Status::kOk)
    return 11;
  if (ef.encode(spec, {g_update, kN}, 1, {g_workspace, sizeof g_workspace}, {g_out, sizeof g_out},
                &written) != edgefl::Status::kOk)
    return 12;
  return edgefl::status_name(edgefl::Status::kOk)[0] == 'o' ? 0 : 13;
}

}  // namespace

int main() {
  const char* const specs[] = {"fp32",
                               "fp16",
                               "bf16",
                               "q4",
                               "q8:shared=0.01",
                               "hq4",
                               "qsgd",
                               "tern",
                               "sign",
                               "topk:0.05+q4",
                               "topk:0.05,approx+q8",
                               "topk:0.05,idx=rice",
                               "thresh:0.5",
                               "randk:0.1+q8",
                               "topk:0.05,idx=blockrice"};
  unsigned state = 12345;
  for (size_t i = 0; i < kN; ++i) {
    state = state * 1103515245u + 12345u;
    g_update[i] = static_cast<float>(static_cast<int>(state >> 16) % 2001 - 1000) / 1000.0f;
  }
  for (size_t s = 0; s < sizeof specs / sizeof specs[0]; ++s) {
    const int rc = run(specs[s]);
    if (rc != 0) return static_cast<int>(s * 16) + rc;
  }
  return 0;
}
