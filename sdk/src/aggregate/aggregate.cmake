# sdk/src/aggregate/aggregate.cmake: edgefl::aggregate, streaming FedAvg and the server optimizers (included by
# sdk/CMakeLists.txt after edgefl_core). Freestanding like the core: it runs in the server, in the
# simulator, and on an aggregating gateway device.
add_library(edgefl_aggregate STATIC
  ${CMAKE_CURRENT_LIST_DIR}/aggregator.cpp
  ${CMAKE_CURRENT_LIST_DIR}/server_optimizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/robust.cpp
)
add_library(edgefl::aggregate ALIAS edgefl_aggregate)
set_target_properties(edgefl_aggregate PROPERTIES EXPORT_NAME aggregate OUTPUT_NAME edgefl_aggregate
                                                  CXX_EXTENSIONS OFF)
target_compile_features(edgefl_aggregate PUBLIC cxx_std_17)
target_include_directories(edgefl_aggregate PRIVATE ${PROJECT_SOURCE_DIR}/sdk/src)
target_link_libraries(edgefl_aggregate PUBLIC edgefl::core)
edgefl_target_options(edgefl_aggregate)
edgefl_freestanding_options(edgefl_aggregate)
