# sdk/src/tls/tls.cmake, included from sdk/CMakeLists.txt: the network layer's shared half.
#
#   edgefl::tls   TLS credentials, mutual-TLS configuration, a sans-IO TLS session, SHA-256 (mbedTLS 3.6)
#   edgefl::net   edgefl::Client (edgefl/client.h): rounds against edgefl-server, over a blocking
#                 TLS connection on Asio sockets (with timeouts) or the app's Transport
#
# Hosted C++17 (allocates, uses threads and sockets); built when EDGEFL_BUILD_NET is ON. Asio is
# Debian's standalone libasio-dev (header-only).
if(EDGEFL_FREESTANDING OR NOT TARGET edgefl::mbedtls_libs)
  return()
endif()

find_path(EDGEFL_ASIO_INCLUDE_DIR asio.hpp DOC "edgefl: standalone Asio (Debian: libasio-dev)")
if(NOT EDGEFL_ASIO_INCLUDE_DIR)
  message(FATAL_ERROR "edgefl: asio.hpp not found; install Debian's libasio-dev (platforms/deps/setup.sh)")
endif()
find_package(Threads REQUIRED)
add_library(edgefl_asio INTERFACE)
target_include_directories(edgefl_asio SYSTEM INTERFACE ${EDGEFL_ASIO_INCLUDE_DIR})
target_compile_definitions(edgefl_asio INTERFACE ASIO_STANDALONE ASIO_NO_DEPRECATED)
target_link_libraries(edgefl_asio INTERFACE Threads::Threads)
add_library(edgefl::asio ALIAS edgefl_asio)

# edgefl::tls (src/tls/): mutual-TLS credentials and the one mbedTLS configuration per role, the
# sans-IO TLS session, SHA-256. Shared by the client below and edgefl-server.
add_library(edgefl_tls STATIC
  ${CMAKE_CURRENT_LIST_DIR}/digest.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tls_credentials.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tls_session.cpp
)
add_library(edgefl::tls ALIAS edgefl_tls)
set_target_properties(edgefl_tls PROPERTIES EXPORT_NAME tls OUTPUT_NAME edgefl_tls CXX_EXTENSIONS OFF)
target_compile_features(edgefl_tls PUBLIC cxx_std_17)
target_include_directories(edgefl_tls PRIVATE ${PROJECT_SOURCE_DIR}/sdk/src)
target_link_libraries(edgefl_tls PUBLIC edgefl::core edgefl::mbedtls_libs)
edgefl_target_options(edgefl_tls)

