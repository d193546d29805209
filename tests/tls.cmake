# tests/tls.cmake, included from tests/CMakeLists.txt: the suite of the mbedTLS build itself.
#
#   ctest -R net.tls_config   mbedTLS 3.6.x; only AEAD + ECDHE-ECDSA / TLS 1.3 suites; PSA; P-256
#                             keys and certificates through PEM; in-memory mutual TLS 1.3 and 1.2
#                             handshakes, and the ones that must fail
#
# Built when EDGEFL_BUILD_NET is ON (platforms/cmake/edgefl_mbedtls.cmake defines edgefl::mbedtls_libs).
if(TARGET edgefl::mbedtls_libs)
  add_executable(edgefl_tls_tests
    ${CMAKE_CURRENT_LIST_DIR}/main.cpp
    ${CMAKE_CURRENT_LIST_DIR}/net/tls_config_test.cpp)
  target_compile_features(edgefl_tls_tests PRIVATE cxx_std_17)
  target_link_libraries(edgefl_tls_tests PRIVATE edgefl::mbedtls_libs doctest::doctest)
  # The test checks the config header's promises only when that header was applied (bundled).
  if(EDGEFL_MBEDTLS_PROVIDER STREQUAL "bundled")
    target_compile_definitions(edgefl_tls_tests PRIVATE EDGEFL_MBEDTLS_BUNDLED=1
                               EDGEFL_MBEDTLS_EXPECTED_VERSION="${EDGEFL_MBEDTLS_VERSION_FOUND}")
  else()
    target_compile_definitions(edgefl_tls_tests PRIVATE EDGEFL_MBEDTLS_BUNDLED=0)
  endif()
  edgefl_target_options(edgefl_tls_tests)
  add_test(NAME net.tls_config COMMAND edgefl_tls_tests --no-intro=true)
  set_tests_properties(net.tls_config PROPERTIES LABELS unit TIMEOUT 600)
endif()
