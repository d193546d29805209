# tests/capi.cmake, included from tests/CMakeLists.txt: the C API (edgefl/edgefl.h; sdk/capi.cmake).
#
#   edgefl_capi_header_c99   the header compiled as strict C99 (-std=c99 -pedantic -Werror ...):
#                            an object library, so a header that is not C99 breaks the build
#   ctest -R capi.offline    options, status names, argument checks, credential failures,
#                            the caller's allocator (no server)
#   ctest -R capi.round      real rounds: development PKI, edgefl-server on loopback, the C
#                            tests' trainer callbacks, a round through a C transport over POSIX
#                            sockets, then examples/c_client (tests/capi/round_test.sh)
if(NOT TARGET edgefl_c)
  return()
endif()

add_library(edgefl_capi_header_c99 OBJECT ${CMAKE_CURRENT_LIST_DIR}/capi/header_c99.c)
set_target_properties(edgefl_capi_header_c99 PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
target_include_directories(edgefl_capi_header_c99 PRIVATE ${PROJECT_SOURCE_DIR}/sdk/include)
if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(edgefl_capi_header_c99 PRIVATE -std=c99 -pedantic -Werror -Wall -Wextra -Wshadow
                         -Wstrict-prototypes -Wmissing-prototypes -Wconversion -Wsign-conversion -Wcast-qual)
endif()

add_executable(edgefl_capi_tests ${CMAKE_CURRENT_LIST_DIR}/capi/capi_test.c)
set_target_properties(edgefl_capi_tests PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
target_link_libraries(edgefl_capi_tests PRIVATE edgefl::c)
edgefl_target_options(edgefl_capi_tests)
if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(edgefl_capi_tests PRIVATE -pedantic)  # strict C99 (plus POSIX sockets)
endif()
add_dependencies(edgefl_capi_tests edgefl_capi_header_c99)

add_test(NAME capi.offline COMMAND edgefl_capi_tests offline ${CMAKE_CURRENT_BINARY_DIR})
set_tests_properties(capi.offline PROPERTIES LABELS unit TIMEOUT 120)

if(TARGET edgefl-server AND TARGET edgefl AND TARGET edgefl_example_c_client)
  find_program(EDGEFL_BASH bash)
  if(EDGEFL_BASH)
    add_test(NAME capi.round
             COMMAND ${EDGEFL_BASH} ${CMAKE_CURRENT_LIST_DIR}/capi/round_test.sh $<TARGET_FILE:edgefl>
                     $<TARGET_FILE:edgefl-server> ${CMAKE_CURRENT_BINARY_DIR}/capi_round
                     -- $<TARGET_FILE:edgefl_capi_tests> round -- $<TARGET_FILE:edgefl_capi_tests> transport
                     -- $<TARGET_FILE:edgefl_example_c_client>)
    set_tests_properties(capi.round PROPERTIES LABELS "unit;e2e;example" TIMEOUT 300 RESOURCE_LOCK edgefl_e2e)
  endif()
endif()

# The JNI shim on the desktop JVM: org.edgefl.ClientSmokeTest through libedgefl_jni, one round
# (platforms/android/jni; needs a JDK and EDGEFL_BUILD_CAPI_SHARED=ON).
if(TARGET edgefl_jni AND TARGET edgefl_jni_jar AND TARGET edgefl-server AND TARGET edgefl AND EDGEFL_BASH)
  get_target_property(edgefl_jni_jar_file edgefl_jni_jar JAR_FILE)
  add_test(NAME capi.jni.round
           COMMAND ${EDGEFL_BASH} ${CMAKE_CURRENT_LIST_DIR}/capi/round_test.sh $<TARGET_FILE:edgefl>
                   $<TARGET_FILE:edgefl-server> ${CMAKE_CURRENT_BINARY_DIR}/capi_jni_round
                   -- ${Java_JAVA_EXECUTABLE} -Djava.library.path=$<TARGET_FILE_DIR:edgefl_jni>
                   -cp ${edgefl_jni_jar_file} org.edgefl.ClientSmokeTest)
  set_tests_properties(capi.jni.round PROPERTIES LABELS "unit;e2e;example" TIMEOUT 300 RESOURCE_LOCK edgefl_e2e)
endif()
