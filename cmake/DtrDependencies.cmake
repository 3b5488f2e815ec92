# Third-party dependencies, all from Debian packages (scripts/setup.sh installs them).
# dtr_config_base and dtr_config carry the dependencies and definitions every dtr target
# needs; the include path of dtr's own headers is each layer's view (DtrLayers.cmake).
find_package(Eigen3 3.3 REQUIRED NO_MODULE)
find_package(spdlog REQUIRED)
find_package(Threads REQUIRED)
find_path(RANDOM123_INCLUDE_DIR Random123/philox.h REQUIRED)
# Checkpoints: JSON metadata (nlohmann-json3-dev ships a CMake package) and XXH3
# checksums (libxxhash-dev ships a header and a library, no CMake package).
find_package(nlohmann_json 3 REQUIRED)
find_path(XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
find_library(XXHASH_LIBRARY xxhash REQUIRED)
# The C API through the CXX component (no deprecated C++ bindings), so neither dtr nor
# a consumer project needs the C language enabled.
set(MPI_CXX_SKIP_MPICXX ON)
find_package(MPI REQUIRED COMPONENTS CXX)

# NCCL ships with the CUDA toolkit here (/usr/local/cuda); the NCCL backend is
# built whenever CUDA is and NCCL is found.
set(DTR_WITH_NCCL OFF)
if(DTR_WITH_CUDA)
  find_path(DTR_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(DTR_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
  if(DTR_NCCL_INCLUDE_DIR AND DTR_NCCL_LIBRARY)
    set(DTR_WITH_NCCL ON)
    message(STATUS "dtr: NCCL backend on (${DTR_NCCL_LIBRARY})")
  else()
    message(STATUS "dtr: NCCL not found; CUDA tensors use the MPI backend through host memory")
  endif()
endif()

# dtr_config_base has no compile feature, so CUDA sources can use it: CMake 3.25
# cannot express a C++20 requirement for nvcc (DtrCuda.cmake passes -std=c++20).
add_library(dtr_config_base INTERFACE)
# Paths found here stay out of the installed package (it must work wherever it is
# moved to): dtrConfig.cmake finds Random123 and NCCL again on the consumer's machine.
target_include_directories(dtr_config_base SYSTEM INTERFACE $<BUILD_INTERFACE:${RANDOM123_INCLUDE_DIR}>)
target_link_libraries(dtr_config_base INTERFACE Eigen3::Eigen spdlog::spdlog Threads::Threads MPI::MPI_CXX
                                                nlohmann_json::nlohmann_json)
# xxhash is used only inside dtr's sources (dtr/checkpoint/checksum.cpp): its
# header stays private, and a consumer links the library by name (found again by
# dtrConfig.cmake).
target_include_directories(dtr_config_base SYSTEM INTERFACE $<BUILD_INTERFACE:${XXHASH_INCLUDE_DIR}>)
target_link_libraries(dtr_config_base INTERFACE $<BUILD_INTERFACE:${XXHASH_LIBRARY}> $<INSTALL_INTERFACE:xxhash>)
# Plain definitions, only when set, so a CPU-only package names no CUDA at all.
if(DTR_WITH_CUDA)
  target_compile_definitions(dtr_config_base INTERFACE DTR_WITH_CUDA=1)
  target_link_libraries(dtr_config_base INTERFACE CUDA::cudart)
endif()
if(DTR_WITH_NCCL)
  target_compile_definitions(dtr_config_base INTERFACE DTR_WITH_NCCL=1)
  target_include_directories(dtr_config_base SYSTEM INTERFACE $<BUILD_INTERFACE:${DTR_NCCL_INCLUDE_DIR}>)
  target_link_libraries(dtr_config_base INTERFACE $<BUILD_INTERFACE:${DTR_NCCL_LIBRARY}>)
endif()

add_library(dtr_config INTERFACE)
target_link_libraries(dtr_config INTERFACE dtr_config_base)
target_compile_features(dtr_config INTERFACE cxx_std_20)
