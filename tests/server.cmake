# tests/server.cmake, included from tests/CMakeLists.txt: the suites of edgefl-server's library.
#
#   ctest -R '^server\.'    storage (SQLite: WAL, durability across a killed process, the ledger's
#                           rules), model files (atomic writes, bounded reads), safetensors
#
# Built when server/ is (EDGEFL_BUILD_NET and EDGEFL_BUILD_TOOLS). Other parts of the server add
# their test files to edgefl_server_test_sources and their doctest suites to
# edgefl_server_test_suites (one ctest entry each); server.other runs any suite not listed.
if(TARGET edgefl_server_lib)
  set(edgefl_server_test_sources
      ${CMAKE_CURRENT_LIST_DIR}/server/storage_test.cpp
      ${CMAKE_CURRENT_LIST_DIR}/server/model_files_test.cpp)
  set(edgefl_server_test_suites server.storage server.model_files server.safetensors)

  add_executable(edgefl_server_tests ${CMAKE_CURRENT_LIST_DIR}/main.cpp ${edgefl_server_test_sources})
  set_target_properties(edgefl_server_tests PROPERTIES CXX_EXTENSIONS OFF)
  target_compile_features(edgefl_server_tests PRIVATE cxx_std_20)
  target_include_directories(edgefl_server_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR})
  target_link_libraries(edgefl_server_tests PRIVATE edgefl_server_lib doctest::doctest)
  edgefl_target_options(edgefl_server_tests)

  foreach(suite IN LISTS edgefl_server_test_suites)
    add_test(NAME ${suite} COMMAND edgefl_server_tests --test-suite=${suite} --no-intro=true)
    set_tests_properties(${suite} PROPERTIES LABELS unit TIMEOUT 600)
  endforeach()
  list(JOIN edgefl_server_test_suites "," edgefl_server_suite_list)
  add_test(NAME server.other COMMAND edgefl_server_tests --test-suite-exclude=${edgefl_server_suite_list}
                                     --no-intro=true)
  set_tests_properties(server.other PROPERTIES LABELS unit TIMEOUT 600)
endif()
