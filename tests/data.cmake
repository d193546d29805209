# tests/data.cmake: the suites of edgefl::data and edgefl::aggregate (included by
# tests/CMakeLists.txt), and the freestanding symbol check of edgefl_aggregate.
#
#   ctest -R 'sdk\.(data|aggregate)'   the two doctest suites (label unit)
#
# sdk.data needs Fashion-MNIST (installed by the project's setup script, or found through
# EDGEFL_FASHION_MNIST_DIR); it fails, with the reason, when the dataset is missing.
if(TARGET edgefl_data AND TARGET edgefl_aggregate)
  find_package(ZLIB REQUIRED)  # imported targets are directory-scoped: sdk/'s is not visible here
  add_executable(edgefl_data_tests
    ${CMAKE_CURRENT_LIST_DIR}/main.cpp
    ${CMAKE_CURRENT_LIST_DIR}/sdk/data_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/sdk/aggregate_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/sdk/robust_aggregation_test.cpp)
  target_compile_features(edgefl_data_tests PRIVATE cxx_std_17)
  target_include_directories(edgefl_data_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR})
  # ZLIB: the data suite writes its own gzip fixtures.
  target_link_libraries(edgefl_data_tests PRIVATE edgefl::data edgefl::aggregate edgefl::core ZLIB::ZLIB
                                                  doctest::doctest)
  edgefl_target_options(edgefl_data_tests)
  foreach(suite data aggregate)
    add_test(NAME sdk.${suite} COMMAND edgefl_data_tests --test-suite=${suite} --no-intro=true)
    set_tests_properties(sdk.${suite} PROPERTIES LABELS unit TIMEOUT 1200)
  endforeach()
endif()

# edgefl_aggregate runs in the server and on devices: like edgefl_core, it must need no hosted
# runtime (no heap, exceptions, RTTI, guards, stdio).
if(TARGET edgefl_aggregate)
  add_test(NAME freestanding.symbols.aggregate
           COMMAND ${CMAKE_COMMAND} -DNM=${CMAKE_NM} -DLIB=$<TARGET_FILE:edgefl_aggregate>
                   -P ${CMAKE_CURRENT_LIST_DIR}/freestanding/check_symbols.cmake)
  set_tests_properties(freestanding.symbols.aggregate PROPERTIES LABELS freestanding)
endif()
