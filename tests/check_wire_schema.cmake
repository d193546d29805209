# tests/check_wire_schema.cmake: lint of the wire schema and its decoder (ctest net.wire.lint),
# after security.md section 5: untrusted input never meets FlexBuffers, nested FlatBuffers or
# reflection, and the schema keeps its file identifier.
#   cmake -DSCHEMA=<edgefl_wire.fbs> -DSOURCES=<dir of the wire sources> -P check_wire_schema.cmake
file(READ ${SCHEMA} schema)
string(REGEX REPLACE "//[^\n]*" "" code "${schema}")  # attributes only, not the comments about them
set(problems "")
if(NOT code MATCHES "file_identifier \"EFW1\";")
  list(APPEND problems "the schema lost file_identifier \"EFW1\"")
endif()
foreach(banned nested_flatbuffer flexbuffer)
  if(code MATCHES "${banned}")
    list(APPEND problems "the schema uses ${banned}")
  endif()
endforeach()
file(GLOB sources ${SOURCES}/*.cpp ${SOURCES}/*.h)
foreach(source IN LISTS sources)
  file(STRINGS ${source} includes REGEX "#include")
  foreach(line IN LISTS includes)
    if(line MATCHES "flexbuffers\\.h|reflection|idl\\.h|minireflect")
      list(APPEND problems "${source}: ${line}")
    endif()
  endforeach()
endforeach()
if(problems)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "wire lint:\n  ${text}")
endif()
message(STATUS "wire lint: ${SCHEMA} and ${SOURCES} are clean")
