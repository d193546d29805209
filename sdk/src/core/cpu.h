// Internal: CPU features, detected once. On targets without run-time detection every feature
// the build was not compiled for is false.
#ifndef EDGEFL_SRC_CORE_CPU_H_
#define EDGEFL_SRC_CORE_CPU_H_

namespace edgefl {

struct CpuFeatures {
  bool sse42 = false;
  bool avx2 = false;   // AVX2 + F16C + BMI1 + OS support for YMM state
  bool neon = false;   // Arm Advanced SIMD: always on AArch64; HWCAP_NEON on 32-bit Arm Linux
  bool crc32 = false;  // ARMv8 CRC32 instructions (AArch64): HWCAP_CRC32 on Linux, or the build's -march
};

// Detected on first call; cheap afterwards. EDGEFL_KERNELS=ref builds report no features.
const CpuFeatures& cpu_features();

}  // namespace edgefl

#endif  // EDGEFL_SRC_CORE_CPU_H_
