# tests/cortex_m.cmake, included from tests/CMakeLists.txt: the host half of the Cortex-M device
# test (platforms/cortex-m/, preset cortex-m4f).
#
#   ctest -R cortex_m.kat_vectors   the known answers the device checks (the committed
#                                   platforms/cortex-m/kat_vectors.h) are what this build encodes
#                                   (in a cross build: under qemu-user, so ARM Linux agrees too)
#
# After a deliberate change of the format: build/<preset>/tests/edgefl_cortex_m_kat_gen >
# platforms/cortex-m/kat_vectors.h, and commit it with the change.
add_executable(edgefl_cortex_m_kat_gen ${PROJECT_SOURCE_DIR}/platforms/cortex-m/kat_gen.cpp)
target_compile_features(edgefl_cortex_m_kat_gen PRIVATE cxx_std_17)
target_include_directories(edgefl_cortex_m_kat_gen PRIVATE ${PROJECT_SOURCE_DIR}/platforms/cortex-m)
target_link_libraries(edgefl_cortex_m_kat_gen PRIVATE edgefl::core)
edgefl_target_options(edgefl_cortex_m_kat_gen)
set(edgefl_kat_emulator "")
if(CMAKE_CROSSCOMPILING)
  set(edgefl_kat_emulator ${CMAKE_CROSSCOMPILING_EMULATOR})
endif()
add_test(NAME cortex_m.kat_vectors
         COMMAND ${CMAKE_COMMAND} "-DGENERATOR=${edgefl_kat_emulator};$<TARGET_FILE:edgefl_cortex_m_kat_gen>"
                 -DEXPECTED=${PROJECT_SOURCE_DIR}/platforms/cortex-m/kat_vectors.h
                 -DACTUAL=${CMAKE_CURRENT_BINARY_DIR}/kat_vectors.h
                 -P ${PROJECT_SOURCE_DIR}/platforms/cortex-m/check_kat_vectors.cmake)
set_tests_properties(cortex_m.kat_vectors PROPERTIES LABELS "unit;golden")
