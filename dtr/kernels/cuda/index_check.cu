#include "dtr/kernels/cuda/index_check.h"

#include "dtr/kernels/cuda/block_reduce.cuh"
#include "dtr/kernels/cuda/cuda_check.h"

#include <algorithm>
#include <string>

namespace dtr::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

__global__ void __launch_bounds__(kThreads)
    check_indices_kernel(const int64_t* __restrict__ indices, int64_t n, int64_t bound,
                         bool has_ignore, int64_t ignore_index, unsigned long long* result) {
  unsigned long long worst = 0;  // n - p of the first bad position this thread saw
  unsigned long long counted = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < n; p += stride) {
    const int64_t v = indices[p];
    if (has_ignore && v == ignore_index) continue;
    ++counted;
    if ((v < 0 || v >= bound) && worst == 0) worst = static_cast<unsigned long long>(n - p);
  }
  // Fold the warp, then one atomic per warp (integer max and add: order-independent).
  for (int mask = kWarpSize / 2; mask > 0; mask /= 2) {
    const unsigned long long other = __shfl_xor_sync(kFullWarpMask, worst, mask);
    worst = other > worst ? other : worst;
    counted += __shfl_xor_sync(kFullWarpMask, counted, mask);
  }
  if (threadIdx.x % kWarpSize == 0) {
    if (worst != 0) atomicMax(&result[0], worst);
    if (counted != 0) atomicAdd(&result[1], counted);
  }
}

}  // namespace

void check_indices(const int64_t* indices, int64_t n, int64_t bound, bool has_ignore,
                   int64_t ignore_index, int64_t* result, cudaStream_t stream) {
  DTR_CUDA_KERNEL_CHECK(n >= 0 && bound >= 0, "CUDA check_indices: expected n, bound >= 0, got n " +
                                                  std::to_string(n) + ", bound " +
                                                  std::to_string(bound));
  DTR_CUDA_CHECK(cudaMemsetAsync(result, 0, 2 * sizeof(int64_t), stream));
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks);
  check_indices_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      indices, n, bound, has_ignore, ignore_index, reinterpret_cast<unsigned long long*>(result));
  DTR_CUDA_CHECK_LAUNCH();
}

}  // namespace dtr::kernels::cuda
