# tests/net.cmake, included from tests/CMakeLists.txt: the suites of edgefl::net (sdk/net.cmake).
#
#   ctest -R net.credentials   TlsCredentials + the dev PKI (tls/tls_credentials.h, sdk/cli/dev_pki.h):
#                              in-memory mutual-TLS handshakes that must pass or fail, device ids,
#                              deny list, load errors, certificate fields, file modes
#
# One executable, edgefl_net_tests; add sources to it and, for a new doctest suite, its name to
# edgefl_net_suites. Built when edgefl_net exists (EDGEFL_BUILD_NET=ON, hosted).
if(TARGET edgefl_net AND TARGET edgefl_cli_lib)
  add_executable(edgefl_net_tests ${CMAKE_CURRENT_LIST_DIR}/main.cpp ${CMAKE_CURRENT_LIST_DIR}/net/credentials_test.cpp)
  target_compile_features(edgefl_net_tests PRIVATE cxx_std_17)
  set_target_properties(edgefl_net_tests PROPERTIES CXX_EXTENSIONS OFF)
  target_include_directories(edgefl_net_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR})
  target_link_libraries(edgefl_net_tests PRIVATE edgefl_net_internal edgefl_cli_lib doctest::doctest)
  edgefl_target_options(edgefl_net_tests)

  # One ctest entry per doctest suite (net.<suite>); net.other runs every suite not listed, so that
  # a new suite is never silently skipped.
  set(edgefl_net_suites credentials)
  foreach(suite IN LISTS edgefl_net_suites)
    add_test(NAME net.${suite} COMMAND edgefl_net_tests --test-suite=${suite} --no-intro=true)
    set_tests_properties(net.${suite} PROPERTIES LABELS unit TIMEOUT 600)
  endforeach()
  list(JOIN edgefl_net_suites "," edgefl_net_suite_list)
  add_test(NAME net.other COMMAND edgefl_net_tests --test-suite-exclude=${edgefl_net_suite_list} --no-intro=true)
  set_tests_properties(net.other PROPERTIES LABELS unit TIMEOUT 600)
endif()

# `edgefl client` talks: an unreachable server (exit status 4 at --give-up-after) and a round that
# closes while the device trains (tests/net/client_cli_test.sh).
if(TARGET edgefl AND TARGET edgefl-server)
  add_test(NAME cli.client.talks
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/net/client_cli_test.sh $<TARGET_FILE:edgefl>
                   $<TARGET_FILE:edgefl-server> ${CMAKE_CURRENT_BINARY_DIR}/client_cli)
  set_tests_properties(cli.client.talks PROPERTIES LABELS "unit;e2e" TIMEOUT 300 RESOURCE_LOCK edgefl_e2e)
endif()

# The README's commands use only options their programs have; no link leaves the repository.
if(TARGET edgefl AND TARGET edgefl-server)
  find_program(EDGEFL_PYTHON3 python3)
  if(EDGEFL_PYTHON3)
    add_test(NAME docs.readme
             COMMAND ${EDGEFL_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/docs/readme_options.py ${PROJECT_SOURCE_DIR}/README.md
                     $<TARGET_FILE:edgefl> $<TARGET_FILE:edgefl-server>)
    set_tests_properties(docs.readme PROPERTIES LABELS unit TIMEOUT 60)
  endif()
endif()
