# sdk/src/data/data.cmake: edgefl::data, hosted helpers for simulation and examples: IDX / Fashion-MNIST
# loading (zlib for .gz) and seeded client partitions (included by sdk/CMakeLists.txt after
# edgefl_core). Hosted C++17 only: never built for a freestanding target.
if(NOT EDGEFL_FREESTANDING)
  find_package(ZLIB REQUIRED)
  add_library(edgefl_data STATIC
    ${CMAKE_CURRENT_LIST_DIR}/idx.cpp
    ${CMAKE_CURRENT_LIST_DIR}/partition.cpp
  )
  add_library(edgefl::data ALIAS edgefl_data)
  set_target_properties(edgefl_data PROPERTIES EXPORT_NAME data OUTPUT_NAME edgefl_data CXX_EXTENSIONS OFF)
  target_compile_features(edgefl_data PUBLIC cxx_std_17)
  target_include_directories(edgefl_data PRIVATE ${PROJECT_SOURCE_DIR}/sdk/src)
  # edgefl::core brings the public include directory; ZLIB stays private (a static archive
  # passes it on as link-only).
  target_link_libraries(edgefl_data PUBLIC edgefl::core PRIVATE ZLIB::ZLIB)
  edgefl_target_options(edgefl_data)
  # Partitions must not depend on the ISA: no fused multiply-add contraction (see partition.cpp).
  target_compile_options(edgefl_data PRIVATE $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-ffp-contract=off>)

  # edgefl::dataset_trainer (edgefl/dataset_trainer.h): the built-in LocalTrainer of edgefl::Client
  # rounds, SgdTrainer on a Dataset. Needs only edgefl/client.h's interface, not edgefl::net.
  add_library(edgefl_dataset_trainer STATIC ${CMAKE_CURRENT_LIST_DIR}/dataset_trainer.cpp)
  add_library(edgefl::dataset_trainer ALIAS edgefl_dataset_trainer)
  set_target_properties(edgefl_dataset_trainer PROPERTIES EXPORT_NAME dataset_trainer
                        OUTPUT_NAME edgefl_dataset_trainer CXX_EXTENSIONS OFF)
  target_compile_features(edgefl_dataset_trainer PUBLIC cxx_std_17)
  target_link_libraries(edgefl_dataset_trainer PUBLIC edgefl::core edgefl::train edgefl::data)
  edgefl_target_options(edgefl_dataset_trainer)
endif()
