# platforms/cortex-m/check_kat_vectors.cmake: runs kat_gen (GENERATOR: the command, with its
# emulator in a cross build) into ACTUAL and fails unless it equals EXPECTED, the committed
# kat_vectors.h that the Cortex-M device test checks its encodings against.
cmake_minimum_required(VERSION 3.25)
execute_process(COMMAND ${GENERATOR} OUTPUT_FILE "${ACTUAL}" RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "check_kat_vectors: ${GENERATOR} failed (${rc}): ${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files "${EXPECTED}" "${ACTUAL}" RESULT_VARIABLE differ)
if(differ)
  message(FATAL_ERROR "check_kat_vectors: this build encodes the known-answer cases differently from "
    "${EXPECTED}.\nIf the encoding changed on purpose, regenerate it: copy ${ACTUAL} over it (see "
    "tests/cortex_m.cmake); otherwise the codecs are no longer deterministic across platforms.")
endif()
message(STATUS "check_kat_vectors: ${ACTUAL} == ${EXPECTED}")
