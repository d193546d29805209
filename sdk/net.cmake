# sdk/net.cmake, included from sdk/CMakeLists.txt: edgefl::net, the client's network layer.
#
#   TLS credentials, mutual-TLS configuration and development certificates (mbedTLS 3.6)
#   a sans-IO TLS session driven over Asio sockets (blocking with timeouts on the client side)
#   edgefl::Client (edgefl/client.h): rounds against edgefl-server
#
# Hosted C++17 (allocates, uses threads and sockets); built when EDGEFL_BUILD_NET is ON. Asio is
# Debian's standalone libasio-dev (header-only).
if(EDGEFL_FREESTANDING OR NOT TARGET edgefl::tls)
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

add_library(edgefl_net STATIC
  ${CMAKE_CURRENT_LIST_DIR}/src/net/digest.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/net/tls_credentials.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/net/certs.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/net/tls_session.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/net/tls_stream.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/net/client.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/net/local_trainer.cpp
)
add_library(edgefl::net ALIAS edgefl_net)
set_target_properties(edgefl_net PROPERTIES EXPORT_NAME net OUTPUT_NAME edgefl_net CXX_EXTENSIONS OFF
                                            LINKER_LANGUAGE CXX)
target_compile_features(edgefl_net PUBLIC cxx_std_17)
# Public headers (edgefl/client.h) come with edgefl::core; src/net/ holds the internal ones, which
# the server and the tests include through edgefl_net_internal.
target_include_directories(edgefl_net PRIVATE ${CMAKE_CURRENT_LIST_DIR}/src)
target_link_libraries(edgefl_net PUBLIC edgefl::core edgefl::wire edgefl::train edgefl::data edgefl::tls
                                        edgefl::asio)
add_library(edgefl_net_internal INTERFACE)
target_include_directories(edgefl_net_internal INTERFACE ${CMAKE_CURRENT_LIST_DIR}/src)
target_link_libraries(edgefl_net_internal INTERFACE edgefl_net)
edgefl_target_options(edgefl_net)
