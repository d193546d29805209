# tests/freestanding/check_symbols.cmake: proves that a static library needs no hosted runtime.
#
#   cmake -DNM=<nm> -DLIB=<libedgefl_core.a> -P check_symbols.cmake
#
# Lists the symbols the archive references but does not define (nm: type U), and fails when any
# of them is a heap allocator, a C++ runtime hook (exceptions, RTTI, thread-safe statics, static
# destructors), stdio, or libstdc++ itself (style.md rule 7). Sanitizer and coverage hooks are
# ignored, so that the check also runs in an ASan/UBSan build. Everything else the archive
# imports is printed, for review.
cmake_minimum_required(VERSION 3.25)

if(NOT NM OR NOT LIB)
  message(FATAL_ERROR "usage: cmake -DNM=<nm> -DLIB=<static library> -P check_symbols.cmake")
endif()
if(NOT EXISTS "${LIB}")
  message(FATAL_ERROR "check_symbols: ${LIB} does not exist")
endif()

execute_process(COMMAND "${NM}" -P -g "${LIB}"
                OUTPUT_VARIABLE nm_out ERROR_VARIABLE nm_err RESULT_VARIABLE nm_rc)
if(NOT nm_rc EQUAL 0)
  message(FATAL_ERROR "check_symbols: ${NM} failed (${nm_rc}): ${nm_err}")
endif()

# POSIX format: "name type [value size]", plus "archive[member]:" lines.
string(REPLACE "\n" ";" lines "${nm_out}")
set(defined "")
set(undefined "")
foreach(line IN LISTS lines)
  if(line MATCHES "^([^ ]+) ([A-Za-z]) ?")
    set(name "${CMAKE_MATCH_1}")
    set(type "${CMAKE_MATCH_2}")
    if(type STREQUAL "U")
      list(APPEND undefined "${name}")
    elseif(NOT type MATCHES "^[wv]$")
      list(APPEND defined "${name}")
    endif()
  endif()
endforeach()
list(REMOVE_DUPLICATES undefined)
if(defined)
  list(REMOVE_DUPLICATES defined)
endif()

# Imports: referenced by one member and defined by none.
set(imports "")
foreach(name IN LISTS undefined)
  list(FIND defined "${name}" at)
  if(at EQUAL -1)
    list(APPEND imports "${name}")
  endif()
endforeach()

# Forbidden: exact names ...
set(forbidden_names
  malloc calloc realloc free aligned_alloc posix_memalign memalign valloc pvalloc reallocarray
  strdup strndup
  __cxa_throw __cxa_rethrow __cxa_allocate_exception __cxa_free_exception __cxa_begin_catch
  __cxa_end_catch __cxa_call_unexpected __cxa_get_exception_ptr __gxx_personality_v0
  __gcc_personality_v0 _Unwind_Resume _Unwind_RaiseException
  __cxa_guard_acquire __cxa_guard_release __cxa_guard_abort
  __cxa_atexit atexit __cxa_thread_atexit __cxa_thread_atexit_impl __tls_get_addr
  __cxa_pure_virtual __cxa_deleted_virtual __dynamic_cast
  printf fprintf vprintf vfprintf sprintf snprintf vsprintf vsnprintf puts fputs putchar fputc
  putc fwrite fflush perror stdout stderr
  exit _exit)
# Reported, not fatal: a freestanding target supplies these itself (newlib has abort; an assert()
# left in the core would need __assert_fail from glibc or the port).
set(reported_names abort __assert_fail __assert_func __stack_chk_fail __errno_location)
# ... and prefixes: operator new/delete of every flavour, libstdc++ (std:: functions, RTTI
# vtables of the C++ ABI), and glibc's fortified stdio.
set(forbidden_prefixes
  "_Znw" "_Zna" "_Zdl" "_Zda" "_ZSt" "_ZNSt" "_ZNKSt" "_ZTVN10__cxxabiv1" "_ZTI" "_ZTS"
  "__printf_chk" "__fprintf_chk" "__sprintf_chk" "__snprintf_chk" "__vsnprintf_chk" "__vfprintf_chk")
# Ignored: instrumentation of sanitizer and coverage builds.
set(ignored_prefixes "__asan_" "__ubsan_" "__sanitizer_" "__tsan_" "__msan_" "__lsan_" "__gcov_"
  "__llvm_" "__hwasan_")

set(offenders "")
set(other_imports "")
foreach(name IN LISTS imports)
  set(ignored FALSE)
  foreach(prefix IN LISTS ignored_prefixes)
    string(FIND "${name}" "${prefix}" at)
    if(at EQUAL 0)
      set(ignored TRUE)
    endif()
  endforeach()
  if(ignored)
    continue()
  endif()
  set(bad FALSE)
  list(FIND forbidden_names "${name}" at)
  if(NOT at EQUAL -1)
    set(bad TRUE)
  endif()
  foreach(prefix IN LISTS forbidden_prefixes)
    string(FIND "${name}" "${prefix}" at)
    if(at EQUAL 0)
      set(bad TRUE)
    endif()
  endforeach()
  list(FIND reported_names "${name}" at)
  if(bad)
    list(APPEND offenders "${name}")
  elseif(NOT at EQUAL -1)
    message(WARNING "check_symbols: ${LIB} references ${name}: a freestanding port must provide it")
    list(APPEND other_imports "${name}")
  else()
    list(APPEND other_imports "${name}")
  endif()
endforeach()

list(JOIN other_imports " " other_text)
message(STATUS "check_symbols: ${LIB} imports (allowed): ${other_text}")
if(offenders)
  list(JOIN offenders "\n  " offender_text)
  message(FATAL_ERROR "check_symbols: ${LIB} references hosted-runtime symbols:\n  ${offender_text}")
endif()
message(STATUS "check_symbols: no forbidden symbol in ${LIB}")
