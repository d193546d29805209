# Compile options shared by every edgefl target. Targets opt in with edgefl_target_options().

# Warnings: -Wall -Wextra -Wshadow everywhere; errors with EDGEFL_FATAL_WARNINGS (ON in CI).
function(edgefl_target_options target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-Wall -Wextra -Wshadow -Wpedantic>
    $<$<COMPILE_LANG_AND_ID:C,GNU,Clang>:-Wall -Wextra -Wshadow>)
  if(EDGEFL_FATAL_WARNINGS)
    target_compile_options(${target} PRIVATE $<$<CXX_COMPILER_ID:GNU,Clang>:-Werror>)
  endif()
  if(EDGEFL_STRIP_ERROR_STRINGS)
    target_compile_definitions(${target} PRIVATE EDGEFL_STRIP_ERROR_STRINGS)
  endif()
endfunction()

# The freestanding core: no exceptions, no RTTI, no thread-safe statics (they need a runtime),
# and no floating-point contraction, so that the same input gives the same bytes on every ISA.
function(edgefl_freestanding_options target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-fno-exceptions -fno-rtti -fno-threadsafe-statics -ffp-contract=off -fno-math-errno>)
endfunction()

# Sanitized debug builds (the asan preset) compile these targets at -O2, still instrumented and
# with their assertions (no NDEBUG): the compute-bound code that would otherwise dominate the
# sanitized suite's time (training loops, mbedTLS's bignum arithmetic, partitioning). The rest of
# such a build, the tests above all, stays unoptimized.
function(edgefl_optimize_when_sanitized)
  if(EDGEFL_SANITIZE AND CMAKE_BUILD_TYPE STREQUAL "Debug")
    foreach(target IN LISTS ARGN)
      target_compile_options(${target} PRIVATE -O2)
    endforeach()
  endif()
endfunction()

if(EDGEFL_SANITIZE)
  add_compile_options(-fsanitize=${EDGEFL_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${EDGEFL_SANITIZE})
endif()
