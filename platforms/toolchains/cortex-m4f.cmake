# Cortex-M4 with the single-precision FPU (FPv4-SP-D16), hard-float ABI, Thumb-2; bare metal.
#   cmake --preset cortex-m4f     (CMakePresets.json: -Os, the QEMU device test, size budget), or
#   cmake -B build/cm4 -DCMAKE_TOOLCHAIN_FILE=platforms/toolchains/cortex-m4f.cmake
# Programs (platforms/cortex-m/) run on QEMU's Arm MPS2 AN386 board (a Cortex-M4F), output and
# exit status through semihosting: ctest prefixes them with CMAKE_CROSSCOMPILING_EMULATOR.
set(CMAKE_SYSTEM_PROCESSOR cortex-m4)
include(${CMAKE_CURRENT_LIST_DIR}/arm-none-eabi.cmake)
set(EDGEFL_CPU_FLAGS "-mcpu=cortex-m4 -mthumb -mfloat-abi=hard -mfpu=fpv4-sp-d16")
# One section per function and object, so that firmware linked with --gc-sections keeps only
# what it calls.
set(CMAKE_C_FLAGS_INIT "${EDGEFL_CPU_FLAGS} -ffunction-sections -fdata-sections")
set(CMAKE_CXX_FLAGS_INIT "${EDGEFL_CPU_FLAGS} -ffunction-sections -fdata-sections")
set(CMAKE_ASM_FLAGS_INIT "${EDGEFL_CPU_FLAGS}")
set(CMAKE_EXE_LINKER_FLAGS_INIT "${EDGEFL_CPU_FLAGS}")

find_program(EDGEFL_QEMU_SYSTEM_ARM qemu-system-arm)
if(EDGEFL_QEMU_SYSTEM_ARM)
  set(CMAKE_CROSSCOMPILING_EMULATOR "${EDGEFL_QEMU_SYSTEM_ARM};-M;mps2-an386;-cpu;cortex-m4;-nographic;-monitor;none;-serial;none;-semihosting-config;enable=on,target=native;-kernel")
endif()
