# sdk/net.cmake, included from sdk/CMakeLists.txt: the network layer.
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
  ${CMAKE_CURRENT_LIST_DIR}/src/tls/digest.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/tls/tls_credentials.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/tls/tls_session.cpp
)
add_library(edgefl::tls ALIAS edgefl_tls)
set_target_properties(edgefl_tls PROPERTIES EXPORT_NAME tls OUTPUT_NAME edgefl_tls CXX_EXTENSIONS OFF)
target_compile_features(edgefl_tls PUBLIC cxx_std_17)
target_include_directories(edgefl_tls PRIVATE ${CMAKE_CURRENT_LIST_DIR}/src)
target_link_libraries(edgefl_tls PUBLIC edgefl::core edgefl::mbedtls_libs)
edgefl_target_options(edgefl_tls)

# edgefl::net (src/net/): edgefl::Client over a blocking TLS connection (Asio sockets or the app's
# Transport). No dataset, no zlib: the built-in trainer is edgefl::dataset_trainer (sdk/data.cmake).
add_library(edgefl_net STATIC
  ${CMAKE_CURRENT_LIST_DIR}/src/net/tls_stream.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/net/client.cpp
)
add_library(edgefl::net ALIAS edgefl_net)
set_target_properties(edgefl_net PROPERTIES EXPORT_NAME net OUTPUT_NAME edgefl_net CXX_EXTENSIONS OFF
                                            LINKER_LANGUAGE CXX)
target_compile_features(edgefl_net PUBLIC cxx_std_17)
# Public headers (edgefl/client.h) come with edgefl::core; src/net/ and src/tls/ hold the internal
# ones, which the server, the tool and the tests include through edgefl_net_internal.
target_include_directories(edgefl_net PRIVATE ${CMAKE_CURRENT_LIST_DIR}/src)
target_link_libraries(edgefl_net PUBLIC edgefl::core edgefl::wire edgefl::tls edgefl::asio)
add_library(edgefl_net_internal INTERFACE)
target_include_directories(edgefl_net_internal INTERFACE ${CMAKE_CURRENT_LIST_DIR}/src)
target_link_libraries(edgefl_net_internal INTERFACE edgefl_net)
edgefl_target_options(edgefl_net)
