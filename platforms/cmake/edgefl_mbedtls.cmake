# edgefl_mbedtls.cmake: mbedTLS 3.6 LTS for the network layer, the client and the server.
# Included by the top-level CMakeLists.txt when EDGEFL_BUILD_NET is ON. Whichever mbedTLS is
# chosen, it defines:
#   edgefl::mbedtls, edgefl::mbedx509, edgefl::mbedcrypto   the three libraries
#   edgefl::mbedtls_libs                                    an interface target linking all three
#   EDGEFL_MBEDTLS_PROVIDER                                 "bundled" or "system"
#   EDGEFL_MBEDTLS_VERSION_FOUND                            the version in use, e.g. 3.6.6
#
# EDGEFL_MBEDTLS says where mbedTLS comes from:
#   auto     an installed mbedTLS 3.6 (find_package(MbedTLS 3.6 CONFIG)) if there is one, else the
#            fetched source
#   system   an installed mbedTLS 3.6, or fail. It keeps the configuration it was built with:
#            edgefl's config header cannot be applied to it, so only what edgefl needs is checked
#            (platforms/mbedtls/edgefl_mbedtls_check.c: >= 3.6, TLS 1.3, ECDSA P-256, X.509 write)
#   bundled  the source fetched by platforms/deps/fetch-mbedtls.sh (platforms/deps/src/mbedtls-<v>)
#            or EDGEFL_MBEDTLS_SOURCE_DIR, built here with EDGEFL_MBEDTLS_CONFIG_FILE, or fail
# Configuring never downloads anything. mbedTLS's own MBEDTLS_CONFIG_FILE cache variable is
# overridden by EDGEFL_MBEDTLS_CONFIG_FILE; its MBEDTLS_USER_CONFIG_FILE (included after the
# config header) is honoured for local additions.

set(EDGEFL_MBEDTLS auto CACHE STRING "edgefl: where mbedTLS 3.6 comes from: auto|system|bundled")
set_property(CACHE EDGEFL_MBEDTLS PROPERTY STRINGS auto system bundled)
set(EDGEFL_MBEDTLS_SOURCE_DIR "" CACHE PATH
    "edgefl: an mbedTLS 3.6 source tree to build (default: platforms/deps/src/mbedtls-<pinned version>)")
set(EDGEFL_MBEDTLS_CONFIG_FILE "${PROJECT_SOURCE_DIR}/platforms/mbedtls/edgefl_mbedtls_config.h" CACHE FILEPATH
    "edgefl: MBEDTLS_CONFIG_FILE of the bundled mbedTLS")
if(NOT EDGEFL_MBEDTLS MATCHES "^(auto|system|bundled)$")
  message(FATAL_ERROR "edgefl: EDGEFL_MBEDTLS must be auto, system or bundled (not '${EDGEFL_MBEDTLS}')")
endif()

# The pinned version lives in one place: the fetch script.
set(_edgefl_fetch_script "${PROJECT_SOURCE_DIR}/platforms/deps/fetch-mbedtls.sh")
file(STRINGS "${_edgefl_fetch_script}" _edgefl_pin REGEX "^mbedtls_version=[0-9]+\\.[0-9]+\\.[0-9]+")
string(REGEX MATCH "[0-9]+\\.[0-9]+\\.[0-9]+" _edgefl_pinned_version "${_edgefl_pin}")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_edgefl_fetch_script}")

set(_edgefl_check_source "${PROJECT_SOURCE_DIR}/platforms/mbedtls/edgefl_mbedtls_check.c")
set(_edgefl_check_dir "${CMAKE_BINARY_DIR}/CMakeFiles/edgefl_mbedtls_check")

# --- system: an installed mbedTLS 3.6 -----------------------------------------------------------
set(EDGEFL_MBEDTLS_PROVIDER "")
if(EDGEFL_MBEDTLS STREQUAL "system" OR EDGEFL_MBEDTLS STREQUAL "auto")
  find_package(MbedTLS 3.6 CONFIG QUIET)
  if(MbedTLS_FOUND)
    try_compile(_edgefl_mbedtls_ok "${_edgefl_check_dir}" "${_edgefl_check_source}" NO_CACHE
      LINK_LIBRARIES MbedTLS::mbedtls MbedTLS::mbedx509 MbedTLS::mbedcrypto
      OUTPUT_VARIABLE _edgefl_check_log)
    if(NOT _edgefl_mbedtls_ok)
      message(FATAL_ERROR "edgefl: the installed mbedTLS ${MbedTLS_VERSION} (${MbedTLS_DIR}) does not "
        "have what edgefl needs (see the #error below); use -DEDGEFL_MBEDTLS=bundled after running "
        "platforms/deps/setup.sh.\n${_edgefl_check_log}")
    endif()
    if(MbedTLS_VERSION VERSION_LESS 3.6.6)
      message(WARNING "edgefl: the installed mbedTLS is ${MbedTLS_VERSION}; 3.6.6 fixes a TLS 1.3 client "
        "authentication bypass and other flaws (see shared/reference/security.md §4.2): upgrade it.")
    endif()
    foreach(_edgefl_lib mbedtls mbedx509 mbedcrypto)
      add_library(edgefl::${_edgefl_lib} ALIAS MbedTLS::${_edgefl_lib})  # visible here and below
    endforeach()
    set(EDGEFL_MBEDTLS_PROVIDER system)
    set(EDGEFL_MBEDTLS_VERSION_FOUND ${MbedTLS_VERSION})
    message(STATUS "edgefl: mbedTLS ${MbedTLS_VERSION} installed in ${MbedTLS_DIR} (its own configuration; "
      "edgefl's config header is not applied)")
  elseif(EDGEFL_MBEDTLS STREQUAL "system")
    set(_edgefl_seen "")
    if(MbedTLS_CONSIDERED_VERSIONS)
      set(_edgefl_seen " (found only ${MbedTLS_CONSIDERED_VERSIONS}: too old)")
    endif()
    message(FATAL_ERROR "edgefl: EDGEFL_MBEDTLS=system, but no installed mbedTLS 3.6 was found${_edgefl_seen}. "
      "Point CMAKE_PREFIX_PATH (or MbedTLS_DIR) at an installation with lib/cmake/MbedTLS, or use "
      "-DEDGEFL_MBEDTLS=bundled after running platforms/deps/setup.sh.")
  endif()
endif()

# --- bundled: the fetched source, built with edgefl's config header -----------------------------
if(NOT EDGEFL_MBEDTLS_PROVIDER)
  if(EDGEFL_MBEDTLS_SOURCE_DIR)
    set(_edgefl_src "${EDGEFL_MBEDTLS_SOURCE_DIR}")
  else()
    set(_edgefl_src "${PROJECT_SOURCE_DIR}/platforms/deps/src/mbedtls-${_edgefl_pinned_version}")
  endif()
  if(NOT EXISTS "${_edgefl_src}/include/mbedtls/build_info.h" OR NOT EXISTS "${_edgefl_src}/CMakeLists.txt")
    if(EDGEFL_MBEDTLS STREQUAL "bundled")
      set(_edgefl_why "EDGEFL_MBEDTLS=bundled, but there is no mbedTLS source in ${_edgefl_src}.")
    else()
      set(_edgefl_why "no mbedTLS 3.6 found: none installed (find_package(MbedTLS 3.6 CONFIG)) and no source in ${_edgefl_src}.")
    endif()
    message(FATAL_ERROR "edgefl: ${_edgefl_why}\n"
      "Run platforms/deps/setup.sh (it fetches mbedTLS ${_edgefl_pinned_version} from Debian 13 and checks its "
      "SHA-256; or platforms/deps/fetch-mbedtls.sh alone, no root needed), or configure with "
      "-DEDGEFL_BUILD_NET=OFF to build without TLS.")
  endif()
  file(STRINGS "${_edgefl_src}/include/mbedtls/build_info.h" _edgefl_version_line
       REGEX "^#define MBEDTLS_VERSION_STRING +\"[0-9.]+\"")
  string(REGEX MATCH "[0-9]+\\.[0-9]+\\.[0-9]+" EDGEFL_MBEDTLS_VERSION_FOUND "${_edgefl_version_line}")
  if(NOT EDGEFL_MBEDTLS_VERSION_FOUND MATCHES "^3\\.6\\.")
    message(FATAL_ERROR "edgefl: ${_edgefl_src} holds mbedTLS '${EDGEFL_MBEDTLS_VERSION_FOUND}', not 3.6.x")
  endif()
  if(NOT EXISTS "${EDGEFL_MBEDTLS_CONFIG_FILE}")
    message(FATAL_ERROR "edgefl: EDGEFL_MBEDTLS_CONFIG_FILE ${EDGEFL_MBEDTLS_CONFIG_FILE} does not exist")
  endif()

  # Compile (no link: the libraries are not built yet) the check over our config header: this
  # also runs mbedTLS's check_config.h, so a broken config header fails here, early.
  block()
    set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
    try_compile(_edgefl_mbedtls_ok "${_edgefl_check_dir}" "${_edgefl_check_source}" NO_CACHE
      CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${_edgefl_src}/include"
      COMPILE_DEFINITIONS "-DMBEDTLS_CONFIG_FILE=\"${EDGEFL_MBEDTLS_CONFIG_FILE}\""
      OUTPUT_VARIABLE _edgefl_check_log)
    if(NOT _edgefl_mbedtls_ok)
      message(FATAL_ERROR "edgefl: mbedTLS ${EDGEFL_MBEDTLS_VERSION_FOUND} with ${EDGEFL_MBEDTLS_CONFIG_FILE} "
        "fails its checks:\n${_edgefl_check_log}")
    endif()
  endblock()

  # mbedTLS's own options. Its CMakeLists.txt asks for CMake 3.5, under which option() and
  # set(CACHE) would drop these plain variables: the two policy defaults keep them, and the
  # block keeps them (and the prefix) away from the rest of the build and from the cache.
  block()
    set(CMAKE_POLICY_DEFAULT_CMP0077 NEW)  # option() honours a plain variable
    set(CMAKE_POLICY_DEFAULT_CMP0126 NEW)  # set(CACHE) leaves a plain variable alone
    set(ENABLE_TESTING OFF)
    set(ENABLE_PROGRAMS OFF)
    set(GEN_FILES OFF)                     # the release tarball ships the generated sources
    set(MBEDTLS_FATAL_WARNINGS OFF)        # a new compiler's warning must not break our build
    set(USE_STATIC_MBEDTLS_LIBRARY ON)
    set(USE_SHARED_MBEDTLS_LIBRARY OFF)
    set(LINK_WITH_PTHREAD ON)              # MBEDTLS_THREADING_PTHREAD
    set(INSTALL_MBEDTLS_HEADERS OFF)
    set(DISABLE_PACKAGE_CONFIG_AND_INSTALL ON)
    set(MBEDTLS_AS_SUBPROJECT ON)
    set(MBEDTLS_TARGET_PREFIX edgefl_)     # edgefl_mbedtls, ...: no clash on "lib" or "apidoc"
    set(MBEDTLS_CONFIG_FILE "${EDGEFL_MBEDTLS_CONFIG_FILE}")
    set(CMAKE_POSITION_INDEPENDENT_CODE ON)  # linkable into a shared edgefl library (Android, C ABI)
    # EXCLUDE_FROM_ALL: built only for what links it. SYSTEM: its headers are system headers to
    # us, so our warnings (-Wpedantic, -Werror) never fire on them. Our warning flags are set
    # per target (edgefl_target_options), so none reaches mbedTLS's sources; the sanitizer flags
    # of EDGEFL_SANITIZE do, on purpose: mbedTLS is instrumented with the rest.
    add_subdirectory("${_edgefl_src}" "${CMAKE_BINARY_DIR}/_deps/mbedtls" EXCLUDE_FROM_ALL SYSTEM)
  endblock()
  foreach(_edgefl_lib mbedtls mbedx509 mbedcrypto)
    add_library(edgefl::${_edgefl_lib} ALIAS edgefl_${_edgefl_lib})
  endforeach()
  # One exception to the instrumentation: mbedTLS 3.6 skips a peer certificate whose signature
  # algorithm it cannot parse (e.g. ECDSA-SHA1) and, when that was the only one, verifies the empty
  # entry left behind; x509_name_cmp() then calls memcmp(NULL, NULL, 0) (x509_crt.c, from
  # x509_crt_check_ee_locally_trusted). Harmless on every libc, undefined by the letter of C11
  # 7.24.1p2, and reachable by any client over TLS 1.2: UBSan's nonnull-attribute check would
  # abort the sanitized server there (e2e.rejections sends such a certificate).
  if(EDGEFL_SANITIZE MATCHES "undefined")
    target_compile_options(edgefl_mbedx509 PRIVATE -fno-sanitize=nonnull-attribute)
  endif()
  # Every handshake's ECDHE and ECDSA and secure aggregation's X25519: what the sanitized TLS
  # tests would spend their time in, unoptimized.
  edgefl_optimize_when_sanitized(edgefl_mbedtls edgefl_mbedx509 edgefl_mbedcrypto)
  set(EDGEFL_MBEDTLS_PROVIDER bundled)
  message(STATUS "edgefl: mbedTLS ${EDGEFL_MBEDTLS_VERSION_FOUND} built from ${_edgefl_src} with "
    "${EDGEFL_MBEDTLS_CONFIG_FILE}")
endif()

add_library(edgefl_mbedtls_libs INTERFACE)
add_library(edgefl::mbedtls_libs ALIAS edgefl_mbedtls_libs)
target_link_libraries(edgefl_mbedtls_libs INTERFACE edgefl::mbedtls edgefl::mbedx509 edgefl::mbedcrypto)
