# tests/wire.cmake, included from tests/CMakeLists.txt: the suites of edgefl::wire (the wire
# protocol):
#
#   ctest -R net.wire      frames, round trips, malformed input, field rules, corruption (label unit),
#                          and net.wire.lint (no FlexBuffers, nested FlatBuffers or reflection)
#
# White-box: the suite builds malformed FlatBuffers by hand with the generated header
# (edgefl_wire_schema) and encodes rule-breaking messages through sdk/src/wire/testing.h.
if(TARGET edgefl_wire)
  add_executable(edgefl_wire_tests
    ${CMAKE_CURRENT_LIST_DIR}/main.cpp
    ${CMAKE_CURRENT_LIST_DIR}/sdk/wire_test.cpp)
  target_compile_features(edgefl_wire_tests PRIVATE cxx_std_17)
  target_include_directories(edgefl_wire_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR} ${PROJECT_SOURCE_DIR}/sdk/src)
  target_link_libraries(edgefl_wire_tests PRIVATE edgefl::wire edgefl_wire_schema doctest::doctest)
  edgefl_target_options(edgefl_wire_tests)
  add_test(NAME net.wire COMMAND edgefl_wire_tests --no-intro=true)
  set_tests_properties(net.wire PROPERTIES LABELS unit TIMEOUT 1200)
  # No FlexBuffers, nested FlatBuffers or reflection near untrusted bytes; the identifier stays.
  add_test(NAME net.wire.lint
           COMMAND ${CMAKE_COMMAND} -DSCHEMA=${PROJECT_SOURCE_DIR}/sdk/proto/edgefl_wire.fbs
                   -DSOURCES=${PROJECT_SOURCE_DIR}/sdk/src/wire -P ${CMAKE_CURRENT_LIST_DIR}/check_wire_schema.cmake)
  set_tests_properties(net.wire.lint PROPERTIES LABELS unit)
endif()
