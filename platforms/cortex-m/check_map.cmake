# platforms/cortex-m/check_map.cmake: fails when a Cortex-M program's linker map shows a heap
# allocator, stdio, exception support or the C++ runtime; prints what newlib, libm and libgcc
# contributed otherwise.
#
#   cmake "-DMAPS=<a.map>;<b.map>" -P check_map.cmake
#
# GNU ld lists, under "Archive member included to satisfy reference by file (symbol)", every
# archive member it pulled in and the symbol that pulled it: that is the list checked here.
cmake_minimum_required(VERSION 3.25)
if(NOT MAPS)
  message(FATAL_ERROR "usage: cmake \"-DMAPS=<map>;...\" -P check_map.cmake")
endif()

# Archive members that must not appear, matched against the member's name (newlib's are
# lib_a-<function>.o; libgcc's and libsupc++'s <name>.o), and libraries that must not appear at all.
set(forbidden_members
  "^(lib_a-)?(nano-)?(malloc|mallocr|mlock|free|freer|calloc|callocr|realloc|reallocr|memalign|sbrk|sbrkr)\\.o"
  "^(lib_a-)?(nano-)?(v?f?s?n?printf|vfprintf|svfprintf|puts|fputs|fwrite|putchar|stdio|findfp|fflush|wsetup|makebuf|writer)\\.o"
  "^(lib_a-)?(abort|signal|signalr|exit|atexit|__atexit|__call_atexit)\\.o"
  "unwind" "pr-support" "^eh_" "^pure\\.o" "^new_op" "^del_op" "^guard\\.o")
set(forbidden_libraries "libstdc\\+\\+" "libsupc\\+\\+" "libnosys" "librdimon")

set(failed FALSE)
foreach(map IN LISTS MAPS)
  if(NOT EXISTS "${map}")
    message(SEND_ERROR "check_map: ${map} does not exist")
    set(failed TRUE)
    continue()
  endif()
  file(READ "${map}" text)
  string(FIND "${text}" "Archive member included to satisfy reference by file (symbol)" begin)
  string(FIND "${text}" "\nMemory Configuration" end)
  if(begin EQUAL -1)
    set(members_text "")
  else()
    math(EXPR length "${end} - ${begin}")
    string(SUBSTRING "${text}" ${begin} ${length} members_text)
  endif()
  # Member lines start in column 0: "/path/libc_nano.a(lib_a-memcpy.o)"; the next line says why.
  string(REGEX MATCHALL "\n[^ \n][^\n]*\\.a\\([^)\n]+\\)" members "${members_text}")
  set(summary "")
  foreach(member IN LISTS members)
    string(STRIP "${member}" member)
    get_filename_component(name "${member}" NAME)
    string(REGEX REPLACE "^([^(]+)\\(([^)]+)\\)$" "\\1" library "${name}")
    string(REGEX REPLACE "^([^(]+)\\(([^)]+)\\)$" "\\2" object "${name}")
    foreach(pattern IN LISTS forbidden_members)
      if(object MATCHES "${pattern}")
        message(SEND_ERROR "check_map: ${map} pulls in ${name} (matches '${pattern}')")
        set(failed TRUE)
      endif()
    endforeach()
    foreach(pattern IN LISTS forbidden_libraries)
      if(library MATCHES "${pattern}")
        message(SEND_ERROR "check_map: ${map} links ${library}")
        set(failed TRUE)
      endif()
    endforeach()
    string(REGEX REPLACE "^lib([^.]+)\\.a\\((lib_a-)?([^)]+)\\.o(bj)?\\)$" "\\1:\\3" short "${name}")
    list(APPEND summary "${short}")
  endforeach()
  list(JOIN summary " " summary_text)
  get_filename_component(map_name "${map}" NAME)
  message(STATUS "check_map: ${map_name}: archive members: ${summary_text}")
endforeach()
if(failed)
  message(FATAL_ERROR "check_map: a program needs a hosted runtime (see above)")
endif()
message(STATUS "check_map: no allocator, stdio, exception support or C++ runtime in ${MAPS}")
