# How a test is registered. Every test lives in the folder of what it tests
# (tests/<layer>/, dtr-train/tests/); how it runs is the call that names it there:
#
#   dtr_unit_tests(<files...> [LIBRARIES <libs...>])   one process; label `unit`
#   dtr_mpi_tests(AREA <area> FILES <files...>)        under mpirun at 1, 2, 3 and 4 ranks:
#                                                      CTest entries mpi_<area>_np<N>, labels `mpi;<area>`
#   dtr_gpu_tests(<files...>)                          one process on a GPU; label `gpu`
#   dtr_gpu_mpi_tests(<files...>)                      under mpirun on GPUs; labels `gpu;mpi`
#
# The files of each kind gather into one Catch2 executable (dtr_unit_tests,
# dtr_mpi_tests, dtr_gpu_tests, dtr_gpu_mpi_tests), which dtr_add_test_executables()
# makes once every folder has named its files. Catch2's implementation is compiled
# once and linked into each executable with its kind of main() (one process, MPI);
# the executables share one precompiled header of Catch2 and dtr's common API, and
# are unity builds (batches of test files compiled as one translation unit), so two
# test files must not define file-local helpers of the same name. Which files share a
# batch depends on the whole file list, so the CTest entries
# test_files_compile_as_one_unit_<exe> (labels `unit;layering`) compile all of an
# executable's test files as one translation unit, syntax only: any two that clash
# fail there, whatever the batches. Helpers that several files need belong in
# tests/support/. Multi-rank tests tagged [.np4] need four ranks and run only in the
# 4-rank entries.
find_package(Catch2 2 REQUIRED)
include(Catch)

# Shared test helpers are included by their path from the repository root
# ("tests/support/gradcheck.h"): the test programs link this (the layering probes
# must not, or the root would make every layer's headers reachable).
add_library(dtr_test_support INTERFACE)
target_include_directories(dtr_test_support INTERFACE ${PROJECT_SOURCE_DIR})
# Hugging Face model directories and transformers' logits for them (scripts/hf_fixtures.py).
target_compile_definitions(dtr_test_support INTERFACE
  DTR_HF_FIXTURES="${PROJECT_SOURCE_DIR}/tests/fixtures/hf"
  # Catch2 v2: cheaper assertion macros in every test translation unit.
  CATCH_CONFIG_FAST_COMPILE)
target_link_libraries(dtr_test_support INTERFACE dtr::dtr Catch2::Catch2 dtr_warnings)

# Catch2's implementation, compiled once (GCC 12 reports a false -Wmaybe-uninitialized
# inside <regex> for it under sanitizers; it is not dtr's code), and the two kinds of
# main(), one process and MPI, that run its session.
add_library(dtr_catch_session STATIC ${PROJECT_SOURCE_DIR}/tests/support/catch_session.cpp)
target_link_libraries(dtr_catch_session PUBLIC dtr_test_support)
target_compile_options(dtr_catch_session PRIVATE -Wno-maybe-uninitialized)
foreach(main catch mpi)
  add_library(dtr_${main}_main STATIC ${PROJECT_SOURCE_DIR}/tests/support/${main}_main.cpp)
  target_link_libraries(dtr_${main}_main PUBLIC dtr_catch_session)
endforeach()

# Files named with a path relative to the calling folder, made absolute.
function(_dtr_absolute out)
  set(files)
  foreach(file IN LISTS ARGN)
    get_filename_component(file ${file} ABSOLUTE BASE_DIR ${CMAKE_CURRENT_SOURCE_DIR})
    list(APPEND files ${file})
  endforeach()
  set(${out} ${files} PARENT_SCOPE)
endfunction()

function(dtr_unit_tests)
  cmake_parse_arguments(ARG "" "" "LIBRARIES" ${ARGN})
  _dtr_absolute(files ${ARG_UNPARSED_ARGUMENTS})
  set_property(GLOBAL APPEND PROPERTY DTR_UNIT_TEST_SOURCES ${files})
  set_property(GLOBAL APPEND PROPERTY DTR_UNIT_TEST_LIBRARIES ${ARG_LIBRARIES})
endfunction()

function(dtr_mpi_tests)
  cmake_parse_arguments(ARG "" "AREA" "FILES" ${ARGN})
  if(NOT ARG_AREA MATCHES "^[a-z_]+$" OR NOT ARG_FILES)
    message(FATAL_ERROR "dtr_mpi_tests(AREA <area> FILES <files...>): got '${ARGN}'")
  endif()
  _dtr_absolute(files ${ARG_FILES})
  set_property(GLOBAL APPEND PROPERTY DTR_MPI_TEST_SOURCES ${files})
  set_property(GLOBAL APPEND PROPERTY DTR_MPI_TEST_AREAS ${ARG_AREA})
  set_property(GLOBAL APPEND PROPERTY DTR_MPI_TEST_AREA_${ARG_AREA} ${files})
endfunction()

function(dtr_gpu_tests)
  _dtr_absolute(files ${ARGN})
  set_property(GLOBAL APPEND PROPERTY DTR_GPU_TEST_SOURCES ${files})
endfunction()

function(dtr_gpu_mpi_tests)
  _dtr_absolute(files ${ARGN})
  set_property(GLOBAL APPEND PROPERTY DTR_GPU_MPI_TEST_SOURCES ${files})
endfunction()

# A Catch2 test executable of <sources> with <main> (catch or mpi), also linking
# <libraries>, in unity batches unless NO_UNITY is given. The first one made
# precompiles the header they all use, Catch2's declarations and dtr's common API,
# parsed once instead of once per translation unit; the others reuse it.
function(_dtr_test_executable name main)
  cmake_parse_arguments(ARG "NO_UNITY" "" "LIBRARIES" ${ARGN})
  set(sources ${ARG_UNPARSED_ARGUMENTS})
  set(pch_headers <catch2/catch.hpp> <dtr/dtr.h>)
  add_executable(${name} ${sources})
  target_link_libraries(${name} PRIVATE dtr_${main}_main dtr_test_support ${ARG_LIBRARIES})
  get_property(pch_owner GLOBAL PROPERTY DTR_TEST_PCH_OWNER)
  if(pch_owner)
    target_precompile_headers(${name} REUSE_FROM ${pch_owner})
  else()
    target_precompile_headers(${name} PRIVATE ${pch_headers})
    set_property(GLOBAL PROPERTY DTR_TEST_PCH_OWNER ${name})
  endif()
  if(ARG_NO_UNITY)
    set_target_properties(${name} PROPERTIES UNITY_BUILD OFF)
  else()
    set_target_properties(${name} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
    _dtr_one_unit_check(${name} "${pch_headers}" "${ARG_LIBRARIES}" ${sources})
  endif()
  # Test code compiles at -O1: it is assertions and small reference loops, and the
  # library it calls keeps the build type's optimisation.
  target_compile_options(${name} PRIVATE $<$<CXX_COMPILER_ID:GNU,Clang>:-O1>)
endfunction()

# The check that unity executable <name>'s test files (<sources>) compile as one
# translation unit: <name>_one_unit, an object library built only by its CTest entry
# test_files_compile_as_one_unit_<name>, compiles them all in one unity file with the
# executable's include directories, definitions and options (it links what the
# executable links but its main()), after the headers <pch_headers> that the
# executable's precompiled header holds, so the names every batch sees are the same.
# -fsyntax-only: parsed and checked, no code generated (a few seconds). GCC and Clang
# still write the depfile (-MD) that Ninja reads, and write no object file: Ninja
# accepts that and runs the compile again on every build of the target (through
# ccache, which may answer it for unchanged sources), as a check should.
# The headers are included, not precompiled: reusing the executables' precompiled
# header (REUSE_FROM) would make the check wait for the whole executable that owns
# it to be built, and in one translation unit they are parsed only once anyway.
function(_dtr_one_unit_check name pch_headers libraries)
  set(target ${name}_one_unit)
  set(prelude ${CMAKE_CURRENT_BINARY_DIR}/${target}_prelude.h)
  list(TRANSFORM pch_headers PREPEND "#include ")
  list(JOIN pch_headers "\n" includes)
  # As CMake's precompiled header does: warnings inside these headers are not the tests'.
  file(CONFIGURE OUTPUT ${prelude} CONTENT
       "// Generated by cmake/DtrTesting.cmake: the headers of the test executables' precompiled header.\n#pragma GCC system_header\n${includes}\n")
  add_library(${target} OBJECT EXCLUDE_FROM_ALL ${ARGN})
  target_link_libraries(${target} PRIVATE dtr_test_support ${libraries})
  set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 0)  # 0: all in one
  target_compile_options(${target} PRIVATE
    "$<$<CXX_COMPILER_ID:GNU,Clang>:-O1;-fsyntax-only;SHELL:-include \"${prelude}\">")
  add_test(NAME test_files_compile_as_one_unit_${name}
    COMMAND ${CMAKE_COMMAND} --build ${PROJECT_BINARY_DIR} --target ${target})
  set_tests_properties(test_files_compile_as_one_unit_${name} PROPERTIES LABELS "unit;layering"
    RESOURCE_LOCK dtr_build_tree TIMEOUT 300)
endfunction()

# Catch2's test spec that selects the tests of <files> (--filenames-as-tags tags each
# test with [#<file>]), hidden ones excluded; with NP4 also their [.np4] tests, which
# need four ranks (named only for the files that have such tests: Catch2 fails a
# run in which any part of the spec matches nothing).
# With CLUSTER, files with a test tagged [single_host] (what they check, such as
# memory accounting, no host boundary changes) are left out.
function(_dtr_mpi_spec out np4 cluster)
  set(spec)
  foreach(source IN LISTS ARGN)
    get_filename_component(file ${source} NAME_WE)
    if(cluster)
      file(STRINGS ${source} single_host REGEX "\\[single_host\\]")
      if(single_host)
        continue()
      endif()
    endif()
    list(APPEND spec "[#${file}]~[.]")
    if(np4)
      file(STRINGS ${source} np4_tests REGEX "\\[\\.np4\\]")
      if(np4_tests)
        list(APPEND spec "[#${file}][np4]")
      endif()
    endif()
  endforeach()
  list(JOIN spec "," spec)
  set(${out} "${spec}" PARENT_SCOPE)
endfunction()

# Makes the test executables and the CTest entries of every file registered above.
function(dtr_add_test_executables)
  get_property(unit_sources GLOBAL PROPERTY DTR_UNIT_TEST_SOURCES)
  get_property(unit_libraries GLOBAL PROPERTY DTR_UNIT_TEST_LIBRARIES)
  get_property(mpi_sources GLOBAL PROPERTY DTR_MPI_TEST_SOURCES)
  get_property(areas GLOBAL PROPERTY DTR_MPI_TEST_AREAS)
  get_property(gpu_sources GLOBAL PROPERTY DTR_GPU_TEST_SOURCES)
  get_property(gpu_mpi_sources GLOBAL PROPERTY DTR_GPU_MPI_TEST_SOURCES)

  # CTest discovery goes through CMake lists: a ';' in a test name, or a '[' (an
  # unbalanced one opens a bracket that swallows the separators after it), silently
  # merges the following tests into one CTest entry; a name starting with '-' is
  # read by Catch2 as an option when CTest runs it. Refuse such names.
  foreach(source IN LISTS unit_sources mpi_sources gpu_sources gpu_mpi_sources)
    file(STRINGS ${source} bad REGEX "TEST_CASE\\(\"[^\"]*[;[]")
    if(bad)
      message(FATAL_ERROR "${source}: a TEST_CASE name contains ';' or '[', which breaks CTest discovery: ${bad}")
    endif()
    file(STRINGS ${source} bad REGEX "TEST_CASE\\(\"-")
    if(bad)
      message(FATAL_ERROR "${source}: a TEST_CASE name starts with '-', which Catch2 reads as an option: ${bad}")
    endif()
  endforeach()
  # Every test file is named by exactly one call: a file left out would never run.
  set(registered ${unit_sources} ${mpi_sources} ${gpu_sources} ${gpu_mpi_sources})
  file(GLOB_RECURSE on_disk CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/*_test.cpp
       ${PROJECT_SOURCE_DIR}/dtr-train/tests/*_test.cpp)
  list(FILTER on_disk EXCLUDE REGEX "/tests/cpu_levels/")  # its own executable
  if(NOT TARGET dtr_train_lib)
    list(FILTER on_disk EXCLUDE REGEX "/dtr-train/tests/")  # not built (DTR_BUILD_TOOLS=OFF)
  endif()
  foreach(source IN LISTS on_disk)
    list(FIND registered ${source} found)
    if(found LESS 0)
      message(FATAL_ERROR "${source} is named by no dtr_*_tests() call (cmake/DtrTesting.cmake), so it would never run")
    endif()
  endforeach()
  set(distinct ${registered})
  list(REMOVE_DUPLICATES distinct)
  if(NOT "${distinct}" STREQUAL "${registered}")
    message(FATAL_ERROR "a test file is named by more than one dtr_*_tests() call: ${registered}")
  endif()
  # The multi-rank entries select tests by file name, so no two files may share one.
  set(names)
  foreach(source IN LISTS mpi_sources)
    get_filename_component(name ${source} NAME_WE)
    if(name IN_LIST names)
      message(FATAL_ERROR "${source}: another multi-rank test file is also named ${name}.cpp; "
                          "the mpi_<area> entries select tests by file name")
    endif()
    list(APPEND names ${name})
  endforeach()

  _dtr_test_executable(dtr_unit_tests catch ${unit_sources} LIBRARIES ${unit_libraries})
  catch_discover_tests(dtr_unit_tests PROPERTIES LABELS unit)

  # A rank that fails or hangs ends its run within DTR_COLLECTIVE_TIMEOUT instead of hanging CTest.
  set(mpi_env OMPI_MCA_mpi_yield_when_idle=1 DTR_COLLECTIVE_TIMEOUT=120)
  _dtr_test_executable(dtr_mpi_tests mpi ${mpi_sources})
  list(REMOVE_DUPLICATES areas)
  foreach(area IN LISTS areas)
    get_property(files GLOBAL PROPERTY DTR_MPI_TEST_AREA_${area})
    _dtr_mpi_spec(spec OFF OFF ${files})
    _dtr_mpi_spec(spec_np4 ON OFF ${files})
    _dtr_mpi_spec(spec_cluster ON ON ${files})
    foreach(np 1 2 3 4)
      if(np EQUAL 4)
        set(run_spec "${spec_np4}")
      else()
        set(run_spec "${spec}")
      endif()
      # NoTests: an area that matched nothing fails instead of passing empty.
      add_test(NAME mpi_${area}_np${np}
        COMMAND ${DTR_MPIEXEC} ${DTR_MPIRUN_FLAGS} -np ${np} $<TARGET_FILE:dtr_mpi_tests>
                --filenames-as-tags --warn NoTests "${run_spec}")
      set_tests_properties(mpi_${area}_np${np} PROPERTIES LABELS "mpi;${area}" TIMEOUT 600 PROCESSORS 2
        ENVIRONMENT "${mpi_env}")
    endforeach()
    # The same 4-rank tests across 2 simulated hosts x 2 ranks (tests/cluster/): the
    # 2x2 meshes then shard within a host and replicate across hosts (HSDP's layout).
    add_test(NAME cluster_${area}_2hosts_np4
      COMMAND ${PROJECT_SOURCE_DIR}/tests/cluster/on_cluster.sh 2 4 $<TARGET_FILE:dtr_mpi_tests>
              --filenames-as-tags --warn NoTests "${spec_cluster}")
    set_tests_properties(cluster_${area}_2hosts_np4 PROPERTIES LABELS "cluster;${area}" TIMEOUT 600
      PROCESSORS 2 ENVIRONMENT "${mpi_env}" SKIP_RETURN_CODE 77)
  endforeach()

  # GPU tests: built whenever CUDA is (so CI compiles them), run only where a GPU
  # exists (scripts/test.sh includes them when nvidia-smi sees one).
  # The GPU tests compile one file at a time: they are built only where CUDA is and
  # share many helper names through tests/support/gpu_test_support.h.
  if(DTR_WITH_CUDA)
    _dtr_test_executable(dtr_gpu_tests catch NO_UNITY ${gpu_sources})
    catch_discover_tests(dtr_gpu_tests PROPERTIES LABELS gpu)
    # The allocator's cases again with the caching off (the mode compute-sanitizer runs in).
    add_test(NAME gpu_allocator_without_caching COMMAND dtr_gpu_tests "[allocator]")
    set_tests_properties(gpu_allocator_without_caching PROPERTIES LABELS gpu ENVIRONMENT DTR_CUDA_NO_CACHING=1)
  endif()
  # Multi-rank GPU tests, over NCCL (one GPU per rank; those tests skip with a warning
  # where a node has fewer) and over MPI staging through host memory.
  if(DTR_WITH_NCCL)
    _dtr_test_executable(dtr_gpu_mpi_tests mpi NO_UNITY ${gpu_mpi_sources})
    foreach(np 1 2)
      add_test(NAME gpu_mpi_tests_np${np}
        COMMAND ${DTR_MPIEXEC} ${DTR_MPIRUN_FLAGS} -np ${np} $<TARGET_FILE:dtr_gpu_mpi_tests>)
      set_tests_properties(gpu_mpi_tests_np${np} PROPERTIES LABELS "gpu;mpi" TIMEOUT 600 PROCESSORS 2
        ENVIRONMENT "${mpi_env}")
    endforeach()
  endif()
endfunction()
