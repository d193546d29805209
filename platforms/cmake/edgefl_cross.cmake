# edgefl_cross.cmake: what a hosted cross build (the ARM Linux toolchain files in
# platforms/toolchains/) needs beyond the compiler. Included by the top-level CMakeLists.txt when
# CMAKE_CROSSCOMPILING and not freestanding.
#
#   zlib        the target's static libz from platforms/deps/cross/<triplet> (fetch-cross-zlib.sh,
#               run by setup.sh --cross), unless ZLIB_ROOT or ZLIB_LIBRARY is given
#   FlatBuffers header-only here: the build machine's package (its CMake files live under the
#               build machine's multiarch directory, which a cross find_package does not search)
#               and its flatc, which runs on the build machine

if(NOT DEFINED ZLIB_ROOT AND NOT DEFINED ZLIB_LIBRARY AND CMAKE_LIBRARY_ARCHITECTURE)
  set(_edgefl_zlib "${PROJECT_SOURCE_DIR}/platforms/deps/cross/${CMAKE_LIBRARY_ARCHITECTURE}")
  if(EXISTS "${_edgefl_zlib}/lib/libz.a")
    set(ZLIB_ROOT "${_edgefl_zlib}")
    set(ZLIB_USE_STATIC_LIBS ON)  # no target libz.so needed under qemu-user, nor on the device
  else()
    message(WARNING "edgefl: no zlib for ${CMAKE_LIBRARY_ARCHITECTURE} in ${_edgefl_zlib}: run "
      "platforms/deps/setup.sh --cross (or platforms/deps/fetch-cross-zlib.sh), or give ZLIB_ROOT")
  endif()
endif()

if(NOT DEFINED FlatBuffers_DIR)
  execute_process(COMMAND dpkg-architecture -qDEB_BUILD_MULTIARCH OUTPUT_VARIABLE _edgefl_build_multiarch
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT _edgefl_build_multiarch)
    set(_edgefl_build_multiarch "${CMAKE_HOST_SYSTEM_PROCESSOR}-linux-gnu")
  endif()
  find_path(FlatBuffers_DIR FlatBuffersConfig.cmake NO_CMAKE_FIND_ROOT_PATH NO_DEFAULT_PATH
            PATHS /usr/lib/${_edgefl_build_multiarch}/cmake/flatbuffers /usr/lib/cmake/flatbuffers
                  /usr/local/lib/cmake/flatbuffers
            DOC "edgefl: the build machine's FlatBuffers package (headers and flatc only)")
endif()
