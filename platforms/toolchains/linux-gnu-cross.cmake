# Shared by the ARM Linux toolchain files (aarch64-linux-gnu.cmake, arm-linux-gnueabihf.cmake):
# Debian 12's cross compilers (g++-<triplet>) and qemu-user. The including file sets
# CMAKE_SYSTEM_PROCESSOR, EDGEFL_CROSS_TRIPLET and EDGEFL_CROSS_QEMU before including this one.
#
# Debian's cross compilers search their own sysroot (/usr/<triplet>: glibc, libstdc++) first and
# /usr/include last, so header-only host packages (doctest, FlatBuffers, Asio) are found as they
# are; libraries must never come from the host: CMAKE_LIBRARY_ARCHITECTURE makes find_library
# look in /usr/lib/<triplet> (never /usr/lib/x86_64-linux-gnu). zlib, the one library the hosted
# SDK needs, comes from platforms/deps/fetch-cross-zlib.sh (platforms/cmake/edgefl_cross.cmake).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_C_COMPILER ${EDGEFL_CROSS_TRIPLET}-gcc)
set(CMAKE_CXX_COMPILER ${EDGEFL_CROSS_TRIPLET}-g++)
set(CMAKE_LIBRARY_ARCHITECTURE ${EDGEFL_CROSS_TRIPLET})

set(CMAKE_FIND_ROOT_PATH /usr/${EDGEFL_CROSS_TRIPLET})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)  # flatc and friends run on the build machine
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# Target executables (tests, probes) run under qemu-user with the cross glibc as their root for
# the dynamic loader and shared libraries: ctest prefixes every test whose command is a target.
find_program(EDGEFL_CROSS_QEMU_PROGRAM ${EDGEFL_CROSS_QEMU})
if(EDGEFL_CROSS_QEMU_PROGRAM)
  set(CMAKE_CROSSCOMPILING_EMULATOR "${EDGEFL_CROSS_QEMU_PROGRAM};-L;/usr/${EDGEFL_CROSS_TRIPLET}")
endif()
