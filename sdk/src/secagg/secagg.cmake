# sdk/src/secagg/secagg.cmake, included from sdk/CMakeLists.txt after src/tls/tls.cmake: the
# secure aggregation protocol (SecAgg+) of private rounds, shared by devices and edgefl-server.
#
#   edgefl::secagg   Shamir sharing over GF(2^31 + 11), the Harary graph and its parameters, the
#                    PSA primitives (X25519, HKDF-SHA256, ChaCha20, ChaCha20-Poly1305) and the
#                    sans-IO device and server state machines
#
# Hosted C++17 (the state machines allocate per round); built with mbedTLS (EDGEFL_BUILD_NET).
if(EDGEFL_FREESTANDING OR NOT TARGET edgefl::mbedtls_libs)
  return()
endif()

add_library(edgefl_secagg STATIC
  ${CMAKE_CURRENT_LIST_DIR}/shamir.cpp
  ${CMAKE_CURRENT_LIST_DIR}/crypto.cpp
  ${CMAKE_CURRENT_LIST_DIR}/graph.cpp
  ${CMAKE_CURRENT_LIST_DIR}/protocol.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dp.cpp
)
add_library(edgefl::secagg ALIAS edgefl_secagg)
set_target_properties(edgefl_secagg PROPERTIES EXPORT_NAME secagg OUTPUT_NAME edgefl_secagg CXX_EXTENSIONS OFF)
target_compile_features(edgefl_secagg PUBLIC cxx_std_17)
target_include_directories(edgefl_secagg PRIVATE ${PROJECT_SOURCE_DIR}/sdk/src)
target_link_libraries(edgefl_secagg PUBLIC edgefl::core edgefl::mbedtls_libs)
edgefl_target_options(edgefl_secagg)
