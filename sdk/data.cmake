# sdk/data.cmake: edgefl::data, hosted helpers for simulation and examples: IDX / Fashion-MNIST
# loading (zlib for .gz) and seeded client partitions (included by sdk/CMakeLists.txt after
# edgefl_core). Hosted C++17 only: never built for a freestanding target.
if(NOT EDGEFL_FREESTANDING)
  find_package(ZLIB REQUIRED)
  add_library(edgefl_data STATIC
    ${CMAKE_CURRENT_LIST_DIR}/src/data/idx.cpp
    ${CMAKE_CURRENT_LIST_DIR}/src/data/partition.cpp
  )
  add_library(edgefl::data ALIAS edgefl_data)
  set_target_properties(edgefl_data PROPERTIES EXPORT_NAME data OUTPUT_NAME edgefl_data CXX_EXTENSIONS OFF)
  target_compile_features(edgefl_data PUBLIC cxx_std_17)
  target_include_directories(edgefl_data PRIVATE ${CMAKE_CURRENT_LIST_DIR}/src)
  # edgefl::core brings the public include directory; ZLIB stays private (a static archive
  # passes it on as link-only).
  target_link_libraries(edgefl_data PUBLIC edgefl::core PRIVATE ZLIB::ZLIB)
  edgefl_target_options(edgefl_data)
  # Partitions must not depend on the ISA: no fused multiply-add contraction (see partition.cpp).
  target_compile_options(edgefl_data PRIVATE $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-ffp-contract=off>)
endif()
