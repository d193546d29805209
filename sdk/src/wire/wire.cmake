# sdk/src/wire/wire.cmake, included from sdk/CMakeLists.txt: edgefl::wire, the wire protocol of federated
# rounds (edgefl/wire.h): frames, the FlatBuffers schema proto/edgefl_wire.fbs, encode, decode,
# validation. Hosted C++17 only (it allocates): never built for a freestanding target.
#
# Debian 12: libflatbuffers-dev (headers, FlatBuffersConfig.cmake) and flatbuffers-compiler (flatc),
# both 2.0.8. flatc writes the generated header into the build tree at build time; it is never
# committed. Only FlatBuffers' headers are used (Builder and Verifier are header-only), so nothing
# of libflatbuffers is linked.
if(EDGEFL_FREESTANDING)
  return()
endif()

find_package(FlatBuffers CONFIG REQUIRED)
find_program(EDGEFL_FLATC flatc DOC "edgefl: the FlatBuffers compiler (Debian: flatbuffers-compiler)")
if(NOT EDGEFL_FLATC)
  message(FATAL_ERROR "edgefl: flatc not found; install Debian's flatbuffers-compiler (platforms/deps/setup.sh)")
endif()
# The generated code static_asserts the exact FlatBuffers version it was made for: compiler and
# headers must agree, which is cheaper to say now than as a compile error.
execute_process(COMMAND ${EDGEFL_FLATC} --version OUTPUT_VARIABLE edgefl_flatc_version
                OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE edgefl_flatc_result)
string(REGEX MATCH "[0-9]+\\.[0-9]+\\.[0-9]+" edgefl_flatc_version "${edgefl_flatc_version}")
if(NOT edgefl_flatc_result EQUAL 0 OR NOT edgefl_flatc_version VERSION_EQUAL FlatBuffers_VERSION)
  message(FATAL_ERROR "edgefl: ${EDGEFL_FLATC} is version '${edgefl_flatc_version}' but the FlatBuffers "
                      "headers are ${FlatBuffers_VERSION}; they must match")
endif()

set(edgefl_wire_fbs ${PROJECT_SOURCE_DIR}/sdk/proto/edgefl_wire.fbs)
set(edgefl_wire_gen_dir ${CMAKE_CURRENT_BINARY_DIR}/generated)
set(edgefl_wire_gen_header ${edgefl_wire_gen_dir}/edgefl_wire_generated.h)
add_custom_command(
  OUTPUT ${edgefl_wire_gen_header}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${edgefl_wire_gen_dir}
  COMMAND ${EDGEFL_FLATC} --cpp --scoped-enums --cpp-std c++17 -o ${edgefl_wire_gen_dir} ${edgefl_wire_fbs}
  DEPENDS ${edgefl_wire_fbs}
  COMMENT "flatc: generating edgefl_wire_generated.h"
  VERBATIM)
add_custom_target(edgefl_wire_generate DEPENDS ${edgefl_wire_gen_header})

# Internal (not exported): the generated header and FlatBuffers' headers, for edgefl_wire and for
# the white-box tests and fuzzers that build FlatBuffers by hand. SYSTEM: generated code is not ours
# to warn about.
# (The include directory is read here: the imported target is visible in this directory only.)
get_target_property(edgefl_flatbuffers_include flatbuffers::flatbuffers INTERFACE_INCLUDE_DIRECTORIES)
add_library(edgefl_wire_schema INTERFACE)
target_include_directories(edgefl_wire_schema SYSTEM INTERFACE ${edgefl_wire_gen_dir} ${edgefl_flatbuffers_include})
add_dependencies(edgefl_wire_schema edgefl_wire_generate)

add_library(edgefl_wire STATIC
  ${CMAKE_CURRENT_LIST_DIR}/frame.cpp
  ${CMAKE_CURRENT_LIST_DIR}/checks.cpp
  ${CMAKE_CURRENT_LIST_DIR}/validate.cpp
  ${CMAKE_CURRENT_LIST_DIR}/decode.cpp
  ${CMAKE_CURRENT_LIST_DIR}/encode.cpp
  ${CMAKE_CURRENT_LIST_DIR}/client_tables.cpp
  ${CMAKE_CURRENT_LIST_DIR}/client_protocol.cpp
  ${CMAKE_CURRENT_LIST_DIR}/messages.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tensor_table.cpp
)
add_library(edgefl::wire ALIAS edgefl_wire)
set_target_properties(edgefl_wire PROPERTIES EXPORT_NAME wire OUTPUT_NAME edgefl_wire CXX_EXTENSIONS OFF)
target_compile_features(edgefl_wire PUBLIC cxx_std_17)
# Public headers (sdk/include) come with edgefl::core; src/ holds the internal headers.
target_include_directories(edgefl_wire PRIVATE ${PROJECT_SOURCE_DIR}/sdk/src)
# The schema's headers by directory, not by linking edgefl_wire_schema: nothing of it belongs in
# the exported link interface (platforms/cmake/edgefl_install.cmake).
target_link_libraries(edgefl_wire PUBLIC edgefl::core edgefl::train)  # train: the built-in models (tensor_table.h)
target_include_directories(edgefl_wire SYSTEM PRIVATE ${edgefl_wire_gen_dir} ${edgefl_flatbuffers_include})
add_dependencies(edgefl_wire edgefl_wire_generate)
edgefl_target_options(edgefl_wire)
