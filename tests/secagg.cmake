# tests/secagg.cmake, included from tests/CMakeLists.txt: the suites of secure aggregation.
#
#   ctest -R secagg.shamir     split/reconstruct, any t of n, fewer refused, wrong shares detected
#   ctest -R secagg.graph      the parameter finder against FCP's table, the Harary graph
#   ctest -R secagg.protocol   exact sums for n = 10 and 100 with 0/10/30% dropouts at each phase
#                              (n = 10 only under qemu and the sanitizers), wrong shares corrected;
#                              masked vectors uniform; every refusal with its specific status
#   ctest -R secagg.dp         the exact discrete Gaussian sampler, code clipping, the accountant
#
# Built when EDGEFL_BUILD_NET is ON (edgefl::secagg needs mbedTLS).
if(TARGET edgefl::secagg)
  add_executable(edgefl_secagg_tests main.cpp secagg/shamir_test.cpp secagg/graph_test.cpp secagg/protocol_test.cpp secagg/dp_test.cpp)
  target_compile_features(edgefl_secagg_tests PRIVATE cxx_std_17)
  target_include_directories(edgefl_secagg_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/sdk/src)
  target_link_libraries(edgefl_secagg_tests PRIVATE edgefl::secagg doctest::doctest)
  edgefl_target_options(edgefl_secagg_tests)
  # Under an emulator (the ARM Linux presets run under qemu-user) or the sanitizers (preset asan),
  # the rounds of 100 devices (about 6,000 X25519 operations each) take many minutes: the same
  # code paths run there at n = 10, and in the release build at both sizes.
  # Under the emulator only, the round whose devices reveal wrong shares (its X25519 operations
  # are 70% of the suite there) is left to the host as well: the correction it relies on,
  # shamir_decode, is checked on the target by secagg.shamir.
  set(edgefl_secagg_exclude "")
  if(CMAKE_CROSSCOMPILING OR EDGEFL_SANITIZE)
    set(edgefl_secagg_exclude "--test-case-exclude=*n = 100*,*one round of 100*")
    if(CMAKE_CROSSCOMPILING)
      string(APPEND edgefl_secagg_exclude ",*reveal wrong shares*")
    endif()
  endif()
  foreach(suite shamir graph protocol dp)
    add_test(NAME secagg.${suite} COMMAND edgefl_secagg_tests --test-suite=secagg.${suite} ${edgefl_secagg_exclude}
                                          --no-intro=true)
    set_tests_properties(secagg.${suite} PROPERTIES LABELS unit TIMEOUT 900)
  endforeach()
endif()
