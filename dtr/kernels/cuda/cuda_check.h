// Error checks for CUDA runtime calls and kernel launches: a failure throws
// dtr::Error carrying the CUDA error name and string and the call site, never exit().
// This header stays free of fmt and Eigen so that .cu files compile quickly and
// cleanly under nvcc; the reporting functions are defined in cuda_check.cpp.
#pragma once

#include <cuda_runtime.h>

#include <string>

namespace dtr::kernels::cuda {
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* expr, const char* file, int line);
[[noreturn]] void throw_kernel_error(const std::string& message, const char* file, int line);
}  // namespace dtr::kernels::cuda

#define DTR_CUDA_CHECK(expr)                                                                     \
  do {                                                                                           \
    cudaError_t dtr_cuda_status_ = (expr);                                                       \
    if (dtr_cuda_status_ != cudaSuccess) [[unlikely]] {                                          \
      ::dtr::kernels::cuda::throw_cuda_error(dtr_cuda_status_, #expr, __FILE__, __LINE__);       \
    }                                                                                            \
  } while (0)

// After a <<<...>>> launch: reports bad launch configurations at once.
#define DTR_CUDA_CHECK_LAUNCH() DTR_CUDA_CHECK(cudaGetLastError())

// Input checks inside CUDA launchers (message built without fmt).
#define DTR_CUDA_KERNEL_CHECK(cond, message)                                           \
  do {                                                                                 \
    if (!(cond)) [[unlikely]] {                                                        \
      ::dtr::kernels::cuda::throw_kernel_error((message), __FILE__, __LINE__);         \
    }                                                                                  \
  } while (0)
