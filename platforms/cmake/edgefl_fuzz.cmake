# The fuzzing build (EDGEFL_FUZZ=ON, included by the top-level CMakeLists.txt before any target):
# libFuzzer with AddressSanitizer and UndefinedBehaviorSanitizer, clang only. Every target is
# instrumented for coverage (-fsanitize=fuzzer-no-link), so that libFuzzer sees the branches of the
# libraries under test, not only those of the harness; only the fuzz targets link libFuzzer's main
# (tests/fuzz/CMakeLists.txt, edgefl_add_fuzz_target). tests/fuzz/run.sh configures and runs it.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang" OR NOT CMAKE_C_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "edgefl: EDGEFL_FUZZ=ON needs clang for libFuzzer, but the compilers are "
                      "${CMAKE_C_COMPILER_ID}/${CMAKE_CXX_COMPILER_ID}. Configure a fresh build directory with "
                      "CC=clang CXX=clang++ (tests/fuzz/run.sh does).")
endif()
if(EDGEFL_FREESTANDING)
  message(FATAL_ERROR "edgefl: EDGEFL_FUZZ=ON is for hosted builds")
endif()
if(EDGEFL_SANITIZE)
  message(FATAL_ERROR "edgefl: EDGEFL_FUZZ=ON brings its own sanitizers (address,undefined); leave EDGEFL_SANITIZE empty")
endif()

# libFuzzer's runtime ships apart from clang on Debian (libclang-rt-14-dev): say so at configure time.
include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_FLAGS "-fsanitize=fuzzer")
set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=fuzzer")
check_cxx_source_compiles([[
  #include <stddef.h>
  #include <stdint.h>
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }
]] EDGEFL_HAVE_LIBFUZZER)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_LINK_OPTIONS)
if(NOT EDGEFL_HAVE_LIBFUZZER)
  message(FATAL_ERROR "edgefl: clang cannot link -fsanitize=fuzzer; install libFuzzer's runtime "
                      "(Debian 12: libclang-rt-14-dev, listed in platforms/deps/setup.sh)")
endif()

add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g)
add_link_options(-fsanitize=address,undefined)
