#include "dtr/kernels/cuda/cuda_check.h"

#include "dtr/base/error.h"

namespace dtr::kernels::cuda {

void throw_cuda_error(cudaError_t status, const char* expr, const char* file, int line) {
  cudaGetLastError();  // clear a non-sticky error so the next call does not report it again
  detail::throw_error(file, line,
                      fmt::format("CUDA call {} failed: {} ({})", expr, cudaGetErrorString(status),
                                  cudaGetErrorName(status)));
}

void throw_kernel_error(const std::string& message, const char* file, int line) {
  detail::throw_error(file, line, message);
}

}  // namespace dtr::kernels::cuda
