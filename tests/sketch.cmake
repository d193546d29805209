# tests/sketch.cmake: the suites of the sketch codecs (included by tests/CMakeLists.txt).
#
#   ctest -R 'sdk\.sketch|sketch\.internal'
#
# sdk.sketch       black-box: skc, cs and sparq through edgefl/codec.h only (suite "sketch")
# sketch.internal  white-box: Huffman, the quantile sketch and the skc internals over sdk/src
#                  (suite "sketch.internal"); a separate executable, so that the black-box suite
#                  never sees internals.
# Each executable holds one suite and its ctest entry runs all of it, so no suite goes unrun.
add_executable(edgefl_sketch_tests
  ${CMAKE_CURRENT_LIST_DIR}/main.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sdk/sketch_test.cpp)
target_compile_features(edgefl_sketch_tests PRIVATE cxx_std_17)
target_include_directories(edgefl_sketch_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(edgefl_sketch_tests PRIVATE edgefl::core doctest::doctest)
edgefl_target_options(edgefl_sketch_tests)
add_test(NAME sdk.sketch COMMAND edgefl_sketch_tests --no-intro=true)
set_tests_properties(sdk.sketch PROPERTIES LABELS unit TIMEOUT 1200)

add_executable(edgefl_sketch_internal_tests
  ${CMAKE_CURRENT_LIST_DIR}/main.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sdk/sketch_internal_test.cpp)
target_compile_features(edgefl_sketch_internal_tests PRIVATE cxx_std_17)
target_include_directories(edgefl_sketch_internal_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}
                                                                 ${PROJECT_SOURCE_DIR}/sdk/src)
target_link_libraries(edgefl_sketch_internal_tests PRIVATE edgefl::core doctest::doctest)
edgefl_target_options(edgefl_sketch_internal_tests)
add_test(NAME sketch.internal COMMAND edgefl_sketch_internal_tests --no-intro=true)
set_tests_properties(sketch.internal PROPERTIES LABELS unit TIMEOUT 1200)
