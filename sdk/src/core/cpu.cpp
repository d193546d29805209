#include "core/cpu.h"

namespace edgefl {

namespace {
constexpr int kSse42 = 1 << 0;
constexpr int kAvx2 = 1 << 1;

int detect_bits() {
  int bits = 0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(EDGEFL_KERNELS_REF)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("sse4.2")) bits |= kSse42;
#if defined(EDGEFL_HAVE_AVX2_KERNELS)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) bits |= kAvx2;
#endif
#endif
  return bits;
}

// Detection is idempotent, so concurrent first calls may both detect; the relaxed atomics make
// that race benign (the core has no thread-safe statics: it is built with -fno-threadsafe-statics).
int g_bits = -1;
}  // namespace

const CpuFeatures& cpu_features() {
  int bits = __atomic_load_n(&g_bits, __ATOMIC_RELAXED);
  if (bits < 0) {
    bits = detect_bits();
    __atomic_store_n(&g_bits, bits, __ATOMIC_RELAXED);
  }
  static constexpr CpuFeatures kTable[4] = {{false, false}, {true, false}, {false, true}, {true, true}};
  return kTable[bits & 3];
}

}  // namespace edgefl
