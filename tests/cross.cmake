# tests/cross.cmake, included from tests/CMakeLists.txt: ARM clients against the build machine's
# edgefl-server, in the ARM Linux cross builds (presets aarch64, armhf).
#
#   ctest -R cross.round   a development PKI made by the ARM `edgefl certs`; a host edgefl-server on
#                          loopback (mutual TLS); one round by the ARM C example (examples/c_client,
#                          through the C API), then one by the ARM `edgefl client` (trains on its
#                          shard of Fashion-MNIST); both under qemu-user (tests/capi/round_test.sh)
#
# The server is the build machine's: -DEDGEFL_HOST_SERVER=<host build>/server/edgefl-server
# (.ci/run cross builds it in build/release). Without it the test is not defined.
if(NOT CMAKE_CROSSCOMPILING OR NOT CMAKE_CROSSCOMPILING_EMULATOR OR NOT TARGET edgefl
   OR NOT TARGET edgefl_example_c_client)
  return()
endif()
set(EDGEFL_HOST_SERVER "" CACHE FILEPATH "edgefl: a build-machine edgefl-server for the cross round test")
if(NOT EDGEFL_HOST_SERVER)
  message(STATUS "edgefl: no EDGEFL_HOST_SERVER: the cross round test (ARM client, host server) is not defined")
  return()
endif()
find_program(EDGEFL_BASH bash)

# round_test.sh runs its CLI and clients as single commands: wrappers put the emulator in front.
list(JOIN CMAKE_CROSSCOMPILING_EMULATOR " " edgefl_emulator_words)
set(edgefl_cross_dir ${CMAKE_CURRENT_BINARY_DIR}/cross)
file(GENERATE OUTPUT ${edgefl_cross_dir}/edgefl CONTENT
     "#!/bin/sh\nexec ${edgefl_emulator_words} $<TARGET_FILE:edgefl> \"$@\"\n"
     FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
file(GENERATE OUTPUT ${edgefl_cross_dir}/c_client CONTENT
     "#!/bin/sh\nexec ${edgefl_emulator_words} $<TARGET_FILE:edgefl_example_c_client> \"$@\"\n"
     FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
# round_test.sh appends HOST:PORT CA CERT KEY; `edgefl client` takes them as options. One round on
# 1/20 of the training set (3000 samples), with room for the emulator's pace.
file(GENERATE OUTPUT ${edgefl_cross_dir}/cli_client CONTENT
     "#!/bin/sh\nexec ${edgefl_emulator_words} $<TARGET_FILE:edgefl> client --server \"$1\" --ca \"$2\" --cert \"$3\" --key \"$4\" --rounds 1 --shard 0/20 --timeout 120000\n"
     FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
add_test(NAME cross.round
         COMMAND ${EDGEFL_BASH} ${CMAKE_CURRENT_LIST_DIR}/capi/round_test.sh ${edgefl_cross_dir}/edgefl
                 ${EDGEFL_HOST_SERVER} ${CMAKE_CURRENT_BINARY_DIR}/cross_round
                 -- ${edgefl_cross_dir}/c_client -- ${edgefl_cross_dir}/cli_client)
set_tests_properties(cross.round PROPERTIES LABELS "e2e;cross" TIMEOUT 600 RESOURCE_LOCK edgefl_e2e)
