# The CPU kernels at several instruction-set levels in one library (dtr/kernels/cpu/cpu_level.h).
#
# dtr_add_cpu_levels(<prefix> SOURCES <files...>) compiles the sources once per level,
# with DTR_CPU_LEVEL=<level> (the namespace their definitions go in) and the level's
# -march, as the OBJECT library <prefix>_<level>. Each level's objects are then linked
# into one relocatable object (ld -r, section groups dissolved) in which every symbol
# is made local except those of dtr::kernels::cpu::<level>. Inline and template code
# (Eigen, the standard library) compiled with AVX-512 in one level can then never be
# the copy another level's code, or any other part of the program, calls: the linker
# would otherwise keep one copy of each such function, whichever it met first.
# Sets DTR_KERNELS_CPU_LEVEL_OBJECTS to the relocatable objects, for the dtr library.
#
# DTR_CPU_LEVELS (cache) chooses the levels: empty for all of them (a library that
# runs at full speed on any CPU of the architecture), "host" for the build machine's
# own level only (the quickstart: a third of the kernels' compile time), or a list.
# Each level left out is DTR_CPU_WITHOUT_<LEVEL> in dtr::dtr's compile definitions.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set(DTR_CPU_ALL_LEVELS baseline avx2 avx512)
else()
  set(DTR_CPU_ALL_LEVELS baseline)
endif()
set(DTR_CPU_LEVELS "" CACHE STRING
    "CPU kernel levels to build: empty for all, host for the build machine's, or a list of baseline;avx2;avx512")

# The best level the build machine runs, by the x86-64 psABI levels' features as
# /proc/cpuinfo reports them (baseline elsewhere).
function(dtr_host_cpu_level out_var)
  set(level baseline)
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$" AND EXISTS /proc/cpuinfo)
    file(STRINGS /proc/cpuinfo flags_line REGEX "^flags" LIMIT_COUNT 1)
    string(REGEX REPLACE "^flags[ \t]*:" "" flags " ${flags_line} ")
    set(v3 TRUE)
    foreach(feature avx avx2 bmi1 bmi2 f16c fma movbe abm)
      if(NOT flags MATCHES " ${feature} ")
        set(v3 FALSE)
      endif()
    endforeach()
    set(v4 ${v3})
    foreach(feature avx512f avx512bw avx512cd avx512dq avx512vl)
      if(NOT flags MATCHES " ${feature} ")
        set(v4 FALSE)
      endif()
    endforeach()
    if(v4)
      set(level avx512)
    elseif(v3)
      set(level avx2)
    endif()
  endif()
  set(${out_var} ${level} PARENT_SCOPE)
endfunction()

if(DTR_CPU_LEVELS STREQUAL "")
  set(DTR_CPU_BUILT_LEVELS ${DTR_CPU_ALL_LEVELS})
elseif(DTR_CPU_LEVELS STREQUAL "host")
  dtr_host_cpu_level(DTR_CPU_BUILT_LEVELS)
else()
  foreach(level IN LISTS DTR_CPU_LEVELS)
    if(NOT level IN_LIST DTR_CPU_ALL_LEVELS)
      message(FATAL_ERROR "DTR_CPU_LEVELS=${DTR_CPU_LEVELS}: '${level}' is not a CPU level of "
                          "${CMAKE_SYSTEM_PROCESSOR}; expected empty (all), host, or some of: ${DTR_CPU_ALL_LEVELS}")
    endif()
  endforeach()
  # In the levels' own order, each once, so that naming every level is the full build.
  string(REPLACE ";" "|" chosen "${DTR_CPU_LEVELS}")
  set(DTR_CPU_BUILT_LEVELS ${DTR_CPU_ALL_LEVELS})
  list(FILTER DTR_CPU_BUILT_LEVELS INCLUDE REGEX "^(${chosen})$")
endif()
if(NOT DTR_CPU_BUILT_LEVELS STREQUAL DTR_CPU_ALL_LEVELS)
  if(DTR_BUILD_TESTS)
    message(FATAL_ERROR "DTR_CPU_LEVELS=${DTR_CPU_LEVELS} builds the CPU kernels for ${DTR_CPU_BUILT_LEVELS} "
                        "only, but the tests compare every level (${DTR_CPU_ALL_LEVELS}) with baseline: "
                        "configure with -DDTR_BUILD_TESTS=OFF, or leave DTR_CPU_LEVELS empty")
  endif()
  message(STATUS "dtr: CPU kernels for ${DTR_CPU_BUILT_LEVELS} only (DTR_CPU_LEVELS=${DTR_CPU_LEVELS})")
endif()
foreach(level IN LISTS DTR_CPU_ALL_LEVELS)
  if(NOT level IN_LIST DTR_CPU_BUILT_LEVELS)
    string(TOUPPER ${level} upper)
    target_compile_definitions(dtr_config_base INTERFACE DTR_CPU_WITHOUT_${upper})
  endif()
endforeach()
set(DTR_CPU_LEVEL_FLAGS_baseline "")
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set(DTR_CPU_LEVEL_FLAGS_baseline -march=x86-64)
endif()
set(DTR_CPU_LEVEL_FLAGS_avx2 -march=x86-64-v3)
set(DTR_CPU_LEVEL_FLAGS_avx512 -march=x86-64-v4)
# GNU ld and objcopy (binutils >= 2.30 for --force-group-allocation), also under clang,
# whose CMAKE_LINKER may be an lld without that option.
find_program(DTR_GNU_LD NAMES ld.bfd ld REQUIRED)
find_program(DTR_GNU_OBJCOPY NAMES objcopy REQUIRED)

function(dtr_add_cpu_levels prefix)
  cmake_parse_arguments(ARG "" "" "SOURCES" ${ARGN})
  set(merged_objects)
  foreach(level IN LISTS DTR_CPU_BUILT_LEVELS)
    set(target ${prefix}_${level})
    add_library(${target} OBJECT ${ARG_SOURCES})
    # One object per source even in a unity build: these sources are mostly code
    # generation, which a unity batch would serialise onto one core. And machine code,
    # never link-time-optimisation IR, whose symbols objcopy cannot make local: the
    # linker would again merge the levels' inline code.
    set_target_properties(${target} PROPERTIES UNITY_BUILD OFF INTERPROCEDURAL_OPTIMIZATION OFF)
    dtr_layer_target(${target} kernels)
    target_compile_definitions(${target} PRIVATE DTR_CPU_LEVEL=${level})
    # No contraction into FMAs, so that elementwise results are the same at every level.
    # No trapping floating-point operations: dtr reads no floating-point exception
    # flags, and without AVX-512's masked operations GCC otherwise keeps a select
    # whose operand it computes in one arm only (exp_arith's) as a branch, which
    # leaves the loop scalar at avx2 and the baseline. Values do not change.
    target_compile_options(${target} PRIVATE ${DTR_CPU_LEVEL_FLAGS_${level}} -ffp-contract=off -fno-trapping-math)
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      # Static locals of inline functions as ordinary weak symbols, which objcopy can
      # make local (it keeps GCC's STB_GNU_UNIQUE ones global).
      target_compile_options(${target} PRIVATE -fno-gnu-unique)
    endif()
    if(level STREQUAL "avx512" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      # GCC 12 reports the undefined pass-through operand of AVX-512 intrinsics that
      # Eigen's packet math calls as "may be used uninitialized" (a false positive).
      target_compile_options(${target} PRIVATE -Wno-maybe-uninitialized)
    endif()

    string(LENGTH ${level} length)
    set(merged ${CMAKE_CURRENT_BINARY_DIR}/${target}.o)
    add_custom_command(
      OUTPUT ${merged}
      COMMAND ${DTR_GNU_LD} -r --force-group-allocation -o ${merged}.all $<TARGET_OBJECTS:${target}>
      COMMAND ${DTR_GNU_OBJCOPY} --wildcard --keep-global-symbol=_ZN3dtr7kernels3cpu${length}${level}*
              ${merged}.all ${merged}
      DEPENDS ${target} $<TARGET_OBJECTS:${target}>
      COMMAND_EXPAND_LISTS
      COMMENT "Linking the ${level} CPU kernels into ${target}.o, their own symbols the only global ones"
      VERBATIM)
    list(APPEND merged_objects ${merged})
  endforeach()
  add_custom_target(${prefix}_levels DEPENDS ${merged_objects})
  set_source_files_properties(${merged_objects} PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)
  set(DTR_KERNELS_CPU_LEVEL_OBJECTS ${merged_objects} PARENT_SCOPE)
endfunction()
