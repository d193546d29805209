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
edgefl_optimize_when_sanitized(edgefl_train)  # the simulator's tests train
