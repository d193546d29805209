# sdk/src/capi/capi.cmake, included from sdk/CMakeLists.txt: edgefl::c, the C ABI (edgefl/edgefl.h) over
# edgefl::Client, for C programs, JNI (platforms/android) and Swift (platforms/ios).
#
#   edgefl_c          STATIC, always (with edgefl_net). A C program links it like any library;
#                     CMake adds the C++ runtime, which the library needs.
#   edgefl_c_shared   SHARED libedgefl_c.so, with EDGEFL_BUILD_CAPI_SHARED=ON: exports only the
#                     edgefl_* functions (the static SDK and mbedTLS inside are hidden).
#
# Hosted only (edgefl::Client uses sockets and threads).
if(EDGEFL_FREESTANDING OR NOT TARGET edgefl_net)
  return()
endif()

if(ANDROID OR CMAKE_POSITION_INDEPENDENT_CODE)
  set(_edgefl_capi_shared_default ON)
else()
  set(_edgefl_capi_shared_default OFF)
endif()
option(EDGEFL_BUILD_CAPI_SHARED
       "edgefl: also build the C API as a shared library (libedgefl_c) and the JNI shim; compiles the SDK's static libraries as position-independent code"
       ${_edgefl_capi_shared_default})

add_library(edgefl_c STATIC ${CMAKE_CURRENT_LIST_DIR}/edgefl_c.cpp)
add_library(edgefl::c ALIAS edgefl_c)
set_target_properties(edgefl_c PROPERTIES EXPORT_NAME c OUTPUT_NAME edgefl_c CXX_EXTENSIONS OFF)
target_compile_features(edgefl_c PUBLIC cxx_std_17)
target_include_directories(edgefl_c PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/sdk/include>
                                           $<INSTALL_INTERFACE:include>)
target_link_libraries(edgefl_c PUBLIC edgefl::net)
edgefl_target_options(edgefl_c)

if(EDGEFL_BUILD_CAPI_SHARED)
  # Everything linked into the shared library must be position-independent (mbedTLS already is:
  # platforms/cmake/edgefl_mbedtls.cmake).
  foreach(_edgefl_lib edgefl_core edgefl_train edgefl_wire edgefl_tls edgefl_net edgefl_c)
    if(TARGET ${_edgefl_lib})
      set_target_properties(${_edgefl_lib} PROPERTIES POSITION_INDEPENDENT_CODE ON)
    endif()
  endforeach()
  add_library(edgefl_c_shared SHARED ${CMAKE_CURRENT_LIST_DIR}/edgefl_c.cpp)
  add_library(edgefl::c_shared ALIAS edgefl_c_shared)
  set_target_properties(edgefl_c_shared PROPERTIES EXPORT_NAME c_shared OUTPUT_NAME edgefl_c CXX_EXTENSIONS OFF
                        CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
                        VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR})
  target_compile_features(edgefl_c_shared PUBLIC cxx_std_17)
  target_compile_definitions(edgefl_c_shared PUBLIC EDGEFL_C_SHARED PRIVATE EDGEFL_C_BUILDING)
  target_include_directories(edgefl_c_shared PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/sdk/include>
                                                    $<INSTALL_INTERFACE:include>)
  target_link_libraries(edgefl_c_shared PRIVATE edgefl::net)
  if(NOT APPLE AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    # Symbols of the static archives (the SDK's C++, mbedTLS) stay inside the library.
    target_link_options(edgefl_c_shared PRIVATE -Wl,--exclude-libs,ALL -Wl,--no-undefined)
  endif()
  edgefl_target_options(edgefl_c_shared)
endif()
