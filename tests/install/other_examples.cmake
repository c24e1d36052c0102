# The install test's addition to the CMake consumer of docs/CLIENT.md, whose CMakeLists.txt (with
# the router's lines appended, as the document says) is the consumer's top-level file unchanged:
# included after its project() (CMAKE_PROJECT_INCLUDE), this defers to the end of that file and
# then builds every other C++ example of the documentation (*.cc beside it that no target of the
# documented file compiles) as the documented file links its own: kvtier::kvtier, nothing else, no
# standard or flags of its own. Writes examples.txt into the build directory: one executable per
# line, each to be run against the daemon.
function(kvtier_add_other_examples)
  get_property(targets DIRECTORY ${CMAKE_SOURCE_DIR} PROPERTY BUILDSYSTEM_TARGETS)
  set(built)
  foreach(target IN LISTS targets)
    get_target_property(sources ${target} SOURCES)
    list(APPEND built ${sources})
  endforeach()
  file(GLOB examples RELATIVE ${CMAKE_SOURCE_DIR} ${CMAKE_SOURCE_DIR}/*.cc)
  foreach(source IN LISTS examples)
    if(NOT source IN_LIST built)
      get_filename_component(name ${source} NAME_WE)
      add_executable(${name} ${source})
      target_link_libraries(${name} PRIVATE kvtier::kvtier)
      list(APPEND targets ${name})
    endif()
  endforeach()
  set(executables "")
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "EXECUTABLE")
      string(APPEND executables "$<TARGET_FILE:${target}>\n")
    endif()
  endforeach()
  file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/examples.txt CONTENT "${executables}")
endfunction()
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL kvtier_add_other_examples)
