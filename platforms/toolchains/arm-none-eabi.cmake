# Bare-metal ARM (Debian 12's gcc-arm-none-eabi + libnewlib-arm-none-eabi headers, and
# libstdc++-arm-none-eabi-dev for the freestanding C++ headers <new> and <type_traits>).
# CMAKE_SYSTEM_NAME Generic makes the top-level CMakeLists.txt build freestanding
# (EDGEFL_FREESTANDING: edgefl::core, ::train, ::aggregate; no tools, examples or network).
# Included by the CPU files (cortex-m4f.cmake), which set the CPU flags.
set(CMAKE_SYSTEM_NAME Generic)
set(CMAKE_C_COMPILER arm-none-eabi-gcc)
set(CMAKE_CXX_COMPILER arm-none-eabi-g++)
set(CMAKE_ASM_COMPILER arm-none-eabi-gcc)
# Compiler checks build a static library: they need no linker script, startup code or syscalls.
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
