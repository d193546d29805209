#include "core/cpu.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(EDGEFL_KERNELS_REF)
#define EDGEFL_CPU_X86 1
#include <cpuid.h>
#endif
#if (defined(EDGEFL_HAVE_NEON_KERNELS) && defined(__arm__) && defined(__linux__)) || \
    (defined(__aarch64__) && defined(__linux__) && !defined(EDGEFL_KERNELS_REF))
#include <sys/auxv.h>  // getauxval: NEON on ARMv7, the CRC32 instructions on AArch64
#endif

namespace edgefl {

namespace {
constexpr int kSse42 = 1 << 0;
constexpr int kAvx2 = 1 << 1;
constexpr int kNeon = 1 << 2;
constexpr int kCrc32 = 1 << 3;
constexpr int kFeatureCombinations = 16;

// The CpuFeatures of every combination of the bits above, so that cpu_features() can return a
// reference without a (thread-safe) static.
struct FeatureTable {
  CpuFeatures of_bits[kFeatureCombinations];
};
constexpr FeatureTable make_feature_table() {
  FeatureTable table{};
  for (int bits = 0; bits < kFeatureCombinations; ++bits) {
    table.of_bits[bits].sse42 = (bits & kSse42) != 0;
    table.of_bits[bits].avx2 = (bits & kAvx2) != 0;
    table.of_bits[bits].neon = (bits & kNeon) != 0;
    table.of_bits[bits].crc32 = (bits & kCrc32) != 0;
  }
  return table;
}
constexpr FeatureTable kFeatureTable = make_feature_table();

int detect_bits() {
  int bits = 0;
#if defined(EDGEFL_CPU_X86)
  // CPUID directly (not __builtin_cpu_supports, whose feature names differ between compilers).
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return 0;
  if (c & (1u << 20)) bits |= kSse42;
#if defined(EDGEFL_HAVE_AVX2_KERNELS)
  const bool f16c = (c & (1u << 29)) != 0, osxsave = (c & (1u << 27)) != 0, avx = (c & (1u << 28)) != 0;
  if (f16c && osxsave && avx) {
    unsigned xcr0_lo = 0, xcr0_hi = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    const bool ymm_state = (xcr0_lo & 0x6u) == 0x6u;  // the OS saves XMM and YMM registers
    unsigned a7 = 0, b7 = 0, c7 = 0, d7 = 0;
    // AVX2 (leaf 7 EBX bit 5) and BMI1 (bit 3), which every AVX2 CPU has; the table uses both.
    if (ymm_state && __get_cpuid_count(7, 0, &a7, &b7, &c7, &d7) != 0 && (b7 & (1u << 5)) && (b7 & (1u << 3)))
      bits |= kAvx2;
  }
#endif
#endif
#if defined(EDGEFL_HAVE_NEON_KERNELS) && !defined(EDGEFL_KERNELS_REF)
#if defined(__aarch64__)
  bits |= kNeon;  // part of the AArch64 base ISA
#elif defined(__arm__) && defined(__linux__)
  constexpr unsigned long kHwcapNeon = 1ul << 12;  // HWCAP_NEON, <asm/hwcap.h>
  if (getauxval(AT_HWCAP) & kHwcapNeon) bits |= kNeon;
#endif
#endif
#if defined(__aarch64__) && !defined(EDGEFL_KERNELS_REF)
#if defined(__ARM_FEATURE_CRC32)
  bits |= kCrc32;  // the build targets a CPU that has them
#elif defined(__linux__)
  constexpr unsigned long kHwcapCrc32 = 1ul << 7;  // HWCAP_CRC32, <asm/hwcap.h> (AArch64)
  if (getauxval(AT_HWCAP) & kHwcapCrc32) bits |= kCrc32;
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
  return kFeatureTable.of_bits[bits & (kFeatureCombinations - 1)];
}

}  // namespace edgefl
