# DTR_CUDA=AUTO|ON|OFF. AUTO enables CUDA whenever nvcc is found on PATH or in /usr/local/cuda/bin.
# Sets DTR_WITH_CUDA.
set(DTR_WITH_CUDA OFF)
# Device code built with nvcc -G (no optimization) compiles about 4x faster: for builds
# that only prove the CUDA code compiles, where no GPU will run it (scripts/test.sh on a
# machine without one). Never for code that runs on a GPU: it is many times slower there.
option(DTR_CUDA_UNOPTIMIZED "Compile dtr's CUDA kernels without device optimization (nvcc -G)" OFF)
if(NOT DTR_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER)
    find_program(DTR_NVCC nvcc PATHS /usr/local/cuda/bin NO_CACHE)
    if(DTR_NVCC)
      set(CMAKE_CUDA_COMPILER ${DTR_NVCC})
    endif()
  endif()
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES "80;90")
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    # Eigen's headers (for bf16/f16) trigger nvcc's "annotation ignored on a defaulted
    # function" warning (20012); it is about Eigen, not dtr.
    string(APPEND CMAKE_CUDA_FLAGS " -diag-suppress=20012 --expt-relaxed-constexpr")
    # CMake 3.25 does not know that nvcc 12+ takes -std=c++20; tell it.
    if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(DTR_WITH_CUDA ON)
    message(STATUS "dtr: CUDA on (${CMAKE_CUDA_COMPILER}, architectures ${CMAKE_CUDA_ARCHITECTURES})")
  elseif(DTR_CUDA STREQUAL "ON")
    message(FATAL_ERROR "DTR_CUDA=ON but nvcc was found neither on PATH nor in /usr/local/cuda/bin")
  else()
    message(STATUS "dtr: CUDA off (nvcc not found)")
  endif()
else()
  message(STATUS "dtr: CUDA off (DTR_CUDA=OFF)")
endif()
