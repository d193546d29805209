# sdk/src/net/net.cmake, included from sdk/CMakeLists.txt after src/tls/tls.cmake (which defines
# edgefl::tls and edgefl::asio, or returns early without mbedTLS).
if(NOT TARGET edgefl_tls)
  return()
endif()

# edgefl::net (src/net/): edgefl::Client over a blocking TLS connection (Asio sockets or the app's
# Transport). No dataset, no zlib: the built-in trainer is edgefl::dataset_trainer (sdk/src/data/data.cmake).
add_library(edgefl_net STATIC
  ${CMAKE_CURRENT_LIST_DIR}/tls_stream.cpp
  ${CMAKE_CURRENT_LIST_DIR}/client.cpp
)
add_library(edgefl::net ALIAS edgefl_net)
add_library(edgefl::client ALIAS edgefl_net)  # the installed package's name for it
set_target_properties(edgefl_net PROPERTIES EXPORT_NAME client OUTPUT_NAME edgefl_net CXX_EXTENSIONS OFF
                                            LINKER_LANGUAGE CXX)
target_compile_features(edgefl_net PUBLIC cxx_std_17)
# Public headers (edgefl/client.h) come with edgefl::core; src/net/ and src/tls/ hold the internal
# ones, which the server, the tool and the tests include through edgefl_net_internal.
target_include_directories(edgefl_net PRIVATE ${PROJECT_SOURCE_DIR}/sdk/src)
# Asio is header-only and used only inside the library: what an installed edgefl::client needs of
# it is the thread library.
target_link_libraries(edgefl_net PUBLIC edgefl::core edgefl::train edgefl::wire edgefl::tls edgefl::secagg
                                         Threads::Threads)
target_include_directories(edgefl_net SYSTEM PRIVATE $<TARGET_PROPERTY:edgefl_asio,INTERFACE_INCLUDE_DIRECTORIES>)
target_compile_definitions(edgefl_net PRIVATE $<TARGET_PROPERTY:edgefl_asio,INTERFACE_COMPILE_DEFINITIONS>)
add_library(edgefl_net_internal INTERFACE)
target_include_directories(edgefl_net_internal INTERFACE ${PROJECT_SOURCE_DIR}/sdk/src)
target_link_libraries(edgefl_net_internal INTERFACE edgefl_net edgefl::asio)
edgefl_target_options(edgefl_net)
