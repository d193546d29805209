# edgefl_install.cmake: what `cmake --install` puts on a system, the CMake package that
# find_package(edgefl) loads (from the install tree and from the build tree), the pkg-config file
# of the C API, and the Debian package CPack builds (included last by the top-level CMakeLists.txt).
#
#   include/edgefl/*.h                 the public headers (the SDK's internal ones, sdk/src, are not)
#   lib/libedgefl_*.a                  the static libraries, one per target below
#   lib/libedgefl_c.so.0               the C API as a shared library (EDGEFL_BUILD_CAPI_SHARED=ON):
#                                      the one stable ABI; the C++ libraries are static
#   lib/libedgefl_mbed*.a              the bundled mbedTLS 3.6 (EDGEFL_MBEDTLS=bundled), renamed so
#                                      that it never shadows a system libmbedtls
#   lib/cmake/edgefl/                  edgeflConfig.cmake, its version file, edgeflTargets.cmake
#   lib/pkgconfig/edgefl.pc            the C API: `pkg-config --cflags --libs edgefl` (add --static
#                                      for the static archive)
#   bin/edgefl, bin/edgefl-server      the tools, when built
#
# Targets, all in the edgefl:: namespace: core, train, aggregate, data, dataset_trainer, wire,
# tls, client, c, c_shared. An application links what it uses, e.g. edgefl::core alone for the
# codecs, edgefl::client for rounds against edgefl-server, edgefl::c (or the pkg-config file) from C.
# The package is relocatable: nothing in it names the prefix it was built for.
if(EDGEFL_FREESTANDING)
  return()  # a bare-metal build is linked into firmware, never installed
endif()

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(EDGEFL_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/edgefl" CACHE STRING
    "edgefl: where the CMake package files are installed, relative to the prefix")

set(_edgefl_export_targets)
foreach(_edgefl_target edgefl_core edgefl_train edgefl_aggregate edgefl_data edgefl_dataset_trainer edgefl_wire
                       edgefl_tls edgefl_secagg edgefl_net edgefl_c edgefl_c_shared edgefl_mbedtls_libs)
  if(TARGET ${_edgefl_target})
    list(APPEND _edgefl_export_targets ${_edgefl_target})
  endif()
endforeach()
if(TARGET edgefl_mbedtls_libs)
  set_target_properties(edgefl_mbedtls_libs PROPERTIES EXPORT_NAME mbedtls_libs)
endif()

# The bundled mbedTLS goes into the package (a static edgefl::tls needs its archives), under
# names of its own. Its targets carry our config header's path for its own compilation; a user of
# the package never includes mbedTLS's headers through edgefl, so that path stays in the build tree.
if(EDGEFL_MBEDTLS_PROVIDER STREQUAL "bundled")
  foreach(_edgefl_lib everest p256m mbedcrypto mbedx509 mbedtls)
    if(TARGET edgefl_${_edgefl_lib})
      set_target_properties(edgefl_${_edgefl_lib} PROPERTIES OUTPUT_NAME edgefl_${_edgefl_lib}
                                                           EXPORT_NAME bundled_${_edgefl_lib})
      get_target_property(_edgefl_defs edgefl_${_edgefl_lib} INTERFACE_COMPILE_DEFINITIONS)
      if(_edgefl_defs)
        set_target_properties(edgefl_${_edgefl_lib} PROPERTIES
                              INTERFACE_COMPILE_DEFINITIONS "$<BUILD_INTERFACE:${_edgefl_defs}>")
      endif()
      list(APPEND _edgefl_export_targets edgefl_${_edgefl_lib})
    endif()
  endforeach()
endif()

install(TARGETS ${_edgefl_export_targets}
  EXPORT edgeflTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT development
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/sdk/include/edgefl DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT development FILES_MATCHING PATTERN "*.h")
foreach(_edgefl_tool edgefl edgefl-server)
  if(TARGET ${_edgefl_tool})
    install(TARGETS ${_edgefl_tool} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
  endif()
endforeach()

# The CMake package: edgeflTargets.cmake in both trees, the same config file for both.
install(EXPORT edgeflTargets NAMESPACE edgefl:: DESTINATION ${EDGEFL_INSTALL_CMAKEDIR} COMPONENT development)
export(EXPORT edgeflTargets NAMESPACE edgefl:: FILE ${PROJECT_BINARY_DIR}/edgeflTargets.cmake)
set(EDGEFL_PACKAGE_MBEDTLS ${EDGEFL_MBEDTLS_PROVIDER})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/edgeflConfig.cmake.in
  ${PROJECT_BINARY_DIR}/edgeflConfig.cmake INSTALL_DESTINATION ${EDGEFL_INSTALL_CMAKEDIR})
# SameMinorVersion while the major version is 0: 0.2 may break what 0.1 offered.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/edgeflConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/edgeflConfig.cmake ${PROJECT_BINARY_DIR}/edgeflConfigVersion.cmake
        DESTINATION ${EDGEFL_INSTALL_CMAKEDIR} COMPONENT development)

# pkg-config for C programs. Libs: the shared library when there is one (the linker prefers
# libedgefl_c.so over libedgefl_c.a); Libs.private: what the static archive needs besides.
if(TARGET edgefl_c)
  set(EDGEFL_PC_LIBS_PRIVATE "-ledgefl_net -ledgefl_dataset_trainer -ledgefl_data -ledgefl_tls -ledgefl_wire -ledgefl_secagg")
  string(APPEND EDGEFL_PC_LIBS_PRIVATE " -ledgefl_train -ledgefl_core")
  if(EDGEFL_MBEDTLS_PROVIDER STREQUAL "bundled")
    string(APPEND EDGEFL_PC_LIBS_PRIVATE " -ledgefl_mbedtls -ledgefl_mbedx509 -ledgefl_mbedcrypto")
    foreach(_edgefl_lib everest p256m)
      if(TARGET edgefl_${_edgefl_lib})
        string(APPEND EDGEFL_PC_LIBS_PRIVATE " -ledgefl_${_edgefl_lib}")
      endif()
    endforeach()
  else()
    string(APPEND EDGEFL_PC_LIBS_PRIVATE " -lmbedtls -lmbedx509 -lmbedcrypto")
  endif()
  string(APPEND EDGEFL_PC_LIBS_PRIVATE " -lz -lstdc++ -lm -pthread")
  # ${pcfiledir} is <prefix>/<libdir>/pkgconfig; libdir may have several parts (lib/x86_64-linux-gnu).
  file(RELATIVE_PATH EDGEFL_PC_PREFIX_FROM_PCFILEDIR "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
  configure_file(${CMAKE_CURRENT_LIST_DIR}/edgefl.pc.in ${PROJECT_BINARY_DIR}/edgefl.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/edgefl.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT development)
endif()

# The Debian package: `cpack -G DEB` in the build directory (tests/package/run.sh). One package
# holding everything above; dpkg-shlibdeps finds the runtime dependencies of the binaries, and the
# static archives' link dependencies are named by hand.
set(CPACK_PACKAGE_NAME edgefl)
set(CPACK_PACKAGE_VENDOR edgefl)
set(CPACK_PACKAGE_CONTACT "edgefl maintainers <maintainers@edgefl.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Federated-learning client SDK, codecs and aggregation server")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_GENERATOR DEB)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "zlib1g-dev")
if(NOT EDGEFL_MBEDTLS_PROVIDER STREQUAL "bundled")
  string(APPEND CPACK_DEBIAN_PACKAGE_DEPENDS ", libmbedtls-dev (>= 3.6)")
endif()
include(CPack)
