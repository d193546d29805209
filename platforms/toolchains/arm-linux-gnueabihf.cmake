# 32-bit ARM Linux, hard float (Debian armhf: ARMv7-A, Thumb-2, VFPv3-D16), Debian 12's
# g++-arm-linux-gnueabihf; tests run under qemu-arm. 32-bit size_t: the build that catches
# size_t/uint64_t mix-ups.
#   cmake --preset armhf          (CMakePresets.json), or
#   cmake -B build/armhf -DCMAKE_TOOLCHAIN_FILE=platforms/toolchains/arm-linux-gnueabihf.cmake
set(CMAKE_SYSTEM_PROCESSOR armv7l)
set(EDGEFL_CROSS_TRIPLET arm-linux-gnueabihf)
set(EDGEFL_CROSS_QEMU qemu-arm)
include(${CMAKE_CURRENT_LIST_DIR}/linux-gnu-cross.cmake)
# GCC's notes that the passing of some C++ types changed in GCC 7.1 (-Wpsabi) concern mixing code
# built by GCC < 7 with newer; everything here is built by one compiler.
set(CMAKE_CXX_FLAGS_INIT "-Wno-psabi")
