# sdk/src/train/train.cmake, included from sdk/CMakeLists.txt: edgefl::train, the model descriptions
# (edgefl/model.h) and the built-in on-device trainer (edgefl/trainer.h).
# Freestanding like edgefl::core: C++17, no heap, no exceptions, no RTTI, no OS, no libm.
add_library(edgefl_train STATIC
  ${CMAKE_CURRENT_LIST_DIR}/model.cpp
  ${CMAKE_CURRENT_LIST_DIR}/layers.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sgd_trainer.cpp
)
add_library(edgefl::train ALIAS edgefl_train)
set_target_properties(edgefl_train PROPERTIES EXPORT_NAME train OUTPUT_NAME edgefl_train CXX_EXTENSIONS OFF)
target_compile_features(edgefl_train PUBLIC cxx_std_17)
# Public headers (sdk/include) come with edgefl::core; src/ holds the internal headers.
target_include_directories(edgefl_train PRIVATE ${PROJECT_SOURCE_DIR}/sdk/src)
target_link_libraries(edgefl_train PUBLIC edgefl::core)
edgefl_target_options(edgefl_train)
edgefl_freestanding_options(edgefl_train)
# Sanitized debug builds (the asan preset) compile the training loops at -O2, still instrumented:
# unoptimized, they dominate the sanitized suite's time (the simulator's tests train). The rest of
# such a build stays unoptimized, with its assertions.
if(EDGEFL_SANITIZE AND CMAKE_BUILD_TYPE STREQUAL "Debug")
  target_compile_options(edgefl_train PRIVATE -O2)
endif()
