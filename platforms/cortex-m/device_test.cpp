// platforms/cortex-m/device_test.cpp: the Cortex-M4F device test, run under
// qemu-system-arm -M mps2-an386 (ctest -R cortex_m.device in the cortex-m4f preset).
//
// For each case of kat_cases.h it encodes the same update as the host did, out of one static
// arena (workspace and output asked for first: workspace_size(), encoded_bound()), compares the
// bytes with the host's (kat_vectors.h), decodes them and compares the decoded values' hash; then
// it reports the arena's high-water mark and the stack used, and ends with one summary line
// ("N passed, M failed") and QEMU's exit status (0 when every case passed).
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "edgefl/codec.h"
#include "edgefl/error_feedback.h"
#include "kat_cases.h"
#include "kat_vectors.h"
#include "semihost.h"

namespace {

// A bump allocator over static memory: what a firmware gives the SDK. Reset between cases; the
// high-water mark is the most any case needed at once.
class StaticArena {
 public:
  StaticArena(uint8_t* base, size_t size) : base_(base), size_(size) {}
  uint8_t* allocate(size_t bytes, size_t align = 8) {
    const size_t start = (used_ + align - 1) & ~(align - 1);
    if (start > size_ || bytes > size_ - start) return nullptr;
    used_ = start + bytes;
    if (used_ > high_water_) high_water_ = used_;
    return base_ + start;
  }
  void reset() { used_ = 0; }
  size_t used() const { return used_; }
  size_t high_water() const { return high_water_; }
  size_t size() const { return size_; }

 private:
  uint8_t* base_;
  size_t size_;
  size_t used_ = 0;
  size_t high_water_ = 0;
};

constexpr size_t kArenaBytes = 128 * 1024;
alignas(8) uint8_t g_arena_storage[kArenaBytes];
float g_update[edgefl_kat::kN];  // the model update (in a real client: the trainer's output)

bool run_case(const edgefl_kat::Vector& v, StaticArena& arena, Line& line) {
  using edgefl_kat::kN;
  arena.reset();
  line << v.spec << ": ";
  edgefl::CodecSpec spec;
  if (edgefl::parse_codec_spec(v.spec, &spec) != edgefl::Status::kOk) {
    line << "FAIL parse";
    return false;
  }
  const size_t ws_size = edgefl::workspace_size(spec, kN), cap = edgefl::encoded_bound(spec, kN);
  uint8_t* ws = arena.allocate(ws_size);
  uint8_t* out = arena.allocate(cap);
  float* decoded = reinterpret_cast<float*>(arena.allocate(kN * sizeof(float), alignof(float)));
  if ((ws == nullptr && ws_size != 0) || out == nullptr || decoded == nullptr) {
    line << "FAIL arena too small";
    return false;
  }
  size_t written = 0;
  edgefl::Status s =
      edgefl::encode(spec, {g_update, kN}, edgefl_kat::kSeed, {ws, ws_size}, {out, cap}, &written);
  if (s != edgefl::Status::kOk) {
    line << "FAIL encode: " << edgefl::status_name(s);
    return false;
  }
  if (written != v.size || memcmp(out, v.bytes, written) != 0) {
    size_t at = 0;
    while (at < written && at < v.size && out[at] == v.bytes[at]) ++at;
    line << "FAIL bytes differ from the host's: " << static_cast<unsigned long>(written) << " vs "
         << static_cast<unsigned long>(v.size) << " bytes, first difference at "
         << static_cast<unsigned long>(at);
    return false;
  }
  // Decoding may use the encoder's workspace (workspace_size() covers decode_workspace_size()).
  s = edgefl::decode({out, written}, {decoded, kN}, {ws, ws_size});
  if (s != edgefl::Status::kOk) {
    line << "FAIL decode: " << edgefl::status_name(s);
    return false;
  }
  const uint32_t h = edgefl_kat::fnv1a(decoded, kN * sizeof(float));
  if (h != v.decoded_fnv1a) {
    line << "FAIL decoded values differ from the host's: ";
    line.hex(h) << " vs ";
    line.hex(v.decoded_fnv1a);
    return false;
  }
  line << "ok, " << static_cast<unsigned long>(written) << " bytes = host's; arena "
       << static_cast<unsigned long>(arena.used()) << " B (workspace " << static_cast<unsigned long>(ws_size)
       << ", output " << static_cast<unsigned long>(cap) << ", decoded " << static_cast<unsigned long>(kN * 4)
       << ")";
  return true;
}

// Error feedback out of the same arena: residual storage persists, the workspace is scratch.
bool run_error_feedback(StaticArena& arena, Line& line) {
  using edgefl_kat::kN;
  arena.reset();
  line << "error feedback (topk:0.05+q4, bf16 residual, 3 rounds): ";
  edgefl::CodecSpec spec;
  if (edgefl::parse_codec_spec("topk:0.05+q4", &spec) != edgefl::Status::kOk) return false;
  const size_t res = edgefl::ErrorFeedback::storage_bytes(kN, edgefl::ResidualPrecision::kBf16);
  const size_t ws_size = edgefl::workspace_size(spec, kN), cap = edgefl::encoded_bound(spec, kN);
  uint8_t* residual = arena.allocate(res);
  uint8_t* ws = arena.allocate(ws_size);
  uint8_t* out = arena.allocate(cap);
  float* update = reinterpret_cast<float*>(arena.allocate(kN * sizeof(float), alignof(float)));
  if (residual == nullptr || ws == nullptr || out == nullptr || update == nullptr) return false;
  edgefl::ErrorFeedback ef;
  if (ef.init({residual, res}, kN, edgefl::ResidualPrecision::kBf16) != edgefl::Status::kOk) return false;
  for (uint64_t round = 0; round < 3; ++round) {
    memcpy(update, g_update, sizeof g_update);
    size_t written = 0;
    if (ef.encode(spec, {update, kN}, round, {ws, ws_size}, {out, cap}, &written) != edgefl::Status::kOk) {
      line << "FAIL encode";
      return false;
    }
  }
  if (!(ef.residual_sq_norm() > 0.0)) {
    line << "FAIL empty residual";
    return false;
  }
  line << "ok; arena " << static_cast<unsigned long>(arena.used()) << " B (residual "
       << static_cast<unsigned long>(res) << ")";
  return true;
}

}  // namespace

int main() {
  Line line;
  line << "edgefl device test: Cortex-M4F, n = " << static_cast<unsigned long>(edgefl_kat::kN) << ", "
       << static_cast<unsigned long>(edgefl_kat::kSpecCount) << " known-answer cases from the host";
  line.print();
  edgefl_kat::make_update(g_update, edgefl_kat::kN);
  unsigned long passed = 0, failed = 0;
  if (edgefl_kat::fnv1a(g_update, sizeof g_update) != edgefl_kat::kInputFnv1a) {
    line << "FAIL the input differs from the host's";
    line.print();
    ++failed;
  }
  StaticArena arena(g_arena_storage, kArenaBytes);
  for (const edgefl_kat::Vector& v : edgefl_kat::kVectors) {
    (run_case(v, arena, line) ? passed : failed) += 1;
    line.print();
  }
  (run_error_feedback(arena, line) ? passed : failed) += 1;
  line.print();
  line << "arena high-water mark: " << static_cast<unsigned long>(arena.high_water()) << " of "
       << static_cast<unsigned long>(arena.size())
       << " bytes; stack used: " << static_cast<unsigned long>(startup_stack_high_water()) << " of "
       << static_cast<unsigned long>(startup_stack_size()) << " bytes";
  line.print();
  line << passed << " passed, " << failed << " failed";
  line.print();
  return failed == 0 ? 0 : 1;
}
