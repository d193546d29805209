# AArch64 Linux (glibc), Debian 12's g++-aarch64-linux-gnu; tests run under qemu-aarch64.
#   cmake --preset aarch64        (CMakePresets.json), or
#   cmake -B build/aarch64 -DCMAKE_TOOLCHAIN_FILE=platforms/toolchains/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(EDGEFL_CROSS_TRIPLET aarch64-linux-gnu)
set(EDGEFL_CROSS_QEMU qemu-aarch64)
include(${CMAKE_CURRENT_LIST_DIR}/linux-gnu-cross.cmake)
