# tests/train.cmake, included from tests/CMakeLists.txt: the suite of edgefl::train.
# The test also reaches the internal kernels (sdk/src/train/layers.h) for per-layer gradient
# checks, so sdk/src is on its include path (like edgefl_kernels_tests).
add_executable(edgefl_train_tests main.cpp sdk/train_test.cpp)
target_compile_features(edgefl_train_tests PRIVATE cxx_std_17)
target_include_directories(edgefl_train_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/sdk/src)
target_link_libraries(edgefl_train_tests PRIVATE edgefl::train doctest::doctest)
edgefl_target_options(edgefl_train_tests)
add_test(NAME sdk.train COMMAND edgefl_train_tests --no-intro=true)
set_tests_properties(sdk.train PROPERTIES LABELS unit TIMEOUT 1200)

# edgefl_train needs no hosted runtime either (no allocator, exceptions, RTTI, stdio, libstdc++).
add_test(NAME freestanding.symbols.train
         COMMAND ${CMAKE_COMMAND} -DNM=${CMAKE_NM} -DLIB=$<TARGET_FILE:edgefl_train>
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/freestanding/check_symbols.cmake)
set_tests_properties(freestanding.symbols.train PROPERTIES LABELS freestanding)
