# The layers of dtr, bottom to top. Each layer is a folder of the same name under
# dtr/, built as the OBJECT library dtr_<layer>, and may use only itself and the
# layers before it in this list. The build enforces that: a layer's sources are
# compiled against an include "view" (build/layer_views/<layer>/, whose dtr/ holds
# links to exactly those folders), so an include that reaches upward (say
# "dtr/fsdp/fully_shard.h" from dtr/tensor/) is a "No such file" compile error. The
# repository root itself is on no layer's include path; programs and tests that
# link dtr::dtr see every layer.
set(DTR_LAYERS base kernels tensor mesh dtensor nn fsdp checkpoint)

# dtr_layer_view(<layer> <out-var>): creates the include view of <layer> and returns
# its path.
function(dtr_layer_view layer out_var)
  list(FIND DTR_LAYERS ${layer} position)
  if(position LESS 0)
    message(FATAL_ERROR "dtr_layer_view: '${layer}' is not one of the layers: ${DTR_LAYERS}")
  endif()
  set(view ${PROJECT_BINARY_DIR}/layer_views/${layer})
  file(REMOVE_RECURSE ${view})
  file(MAKE_DIRECTORY ${view}/dtr)
  foreach(index RANGE ${position})
    list(GET DTR_LAYERS ${index} visible)
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/dtr/${visible} ${view}/dtr/${visible} SYMBOLIC)
  endforeach()
  set(${out_var} ${view} PARENT_SCOPE)
endfunction()

# dtr_layer_target(<target> <layer> [CUDA]): compiles <target>'s sources as part of
# <layer>, against the layer's view. CUDA targets take dtr_config_base (no C++20
# compile feature, which CMake 3.25 cannot express for nvcc).
function(dtr_layer_target target layer)
  dtr_layer_view(${layer} view)
  target_include_directories(${target} PRIVATE ${view})
  if("CUDA" IN_LIST ARGN)
    target_link_libraries(${target} PRIVATE dtr_config_base dtr_warnings)
  else()
    target_link_libraries(${target} PRIVATE dtr_config dtr_warnings)
  endif()
endfunction()

# dtr_add_layer(<layer> SOURCES <files...>): the OBJECT library dtr_<layer>, which
# links the layer just below it (so, transitively, all the lower ones).
function(dtr_add_layer layer)
  cmake_parse_arguments(ARG "" "" "SOURCES" ${ARGN})
  add_library(dtr_${layer} OBJECT ${ARG_SOURCES})
  dtr_layer_target(dtr_${layer} ${layer})
  list(FIND DTR_LAYERS ${layer} position)
  if(position GREATER 0)
    math(EXPR below "${position} - 1")
    list(GET DTR_LAYERS ${below} below_layer)
    target_link_libraries(dtr_${layer} PUBLIC dtr_${below_layer})
  endif()
endfunction()
