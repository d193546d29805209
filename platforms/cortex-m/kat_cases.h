// platforms/cortex-m/kat_cases.h: the known-answer cases of the Cortex-M device test, shared by
// the host generator (kat_gen.cpp, which writes kat_vectors.h) and the device (device_test.cpp).
// The input is made from integers by exact float operations, so host and device build the same
// update bit for bit; the codecs promise the same bytes for the same (spec, update, seed) on every
// platform, which the device test checks byte for byte.
#ifndef EDGEFL_PLATFORMS_CORTEX_M_KAT_CASES_H_
#define EDGEFL_PLATFORMS_CORTEX_M_KAT_CASES_H_

#include <stddef.h>
#include <stdint.h>

namespace edgefl_kat {

constexpr size_t kN = 2048;       // coordinates of the update (a small model's layer)
constexpr uint64_t kSeed = 2024;  // the encoding seed of every case

// Specs encoded on the device: the dense bf16 baseline, top-k + 4-bit, edgefl's sparse codec
// (sampled top-k, adaptive index coding, rANS-coded codes), and one per other family of coders.
constexpr const char* kSpecs[] = {
    "bf16", "topk:0.05+q4", "sparq:0.1", "q8", "randk:0.1+q8", "hq4", "qsgd", "tern", "cs:0.1", "skc",
};
constexpr size_t kSpecCount = sizeof kSpecs / sizeof kSpecs[0];

// A heavy-tailed update: most coordinates small, every 37th large (so that top-k has a target).
inline void make_update(float* x, size_t n) {
  uint32_t state = 0x9E3779B9u;
  for (size_t i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;                 // Numerical Recipes LCG
    const int32_t v = int32_t(state >> 8) % 20001 - 10000;  // [-10000, 10000], exact in float
    const float scale = (i % 37 == 0) ? 0.5f : 0.01f;
    x[i] = float(v) / 10000.0f * scale;  // two correctly rounded IEEE operations
  }
}

// FNV-1a over bytes: the device's check of decoded values (their bit patterns).
inline uint32_t fnv1a(const void* data, size_t size) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < size; ++i) h = (h ^ p[i]) * 16777619u;
  return h;
}

// One case as kat_vectors.h records it.
struct Vector {
  const char* spec;
  const uint8_t* bytes;  // the encoding
  size_t size;
  uint32_t decoded_fnv1a;  // fnv1a of decode(bytes) as kN floats
};

}  // namespace edgefl_kat

#endif  // EDGEFL_PLATFORMS_CORTEX_M_KAT_CASES_H_
