#include "dtr/kernels/cuda/dropout.h"

#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/kernels/cuda/ieee_ops.cuh"
#include "dtr/kernels/scalar_types.h"

#include <algorithm>
#include <string>
#include <type_traits>

namespace dtr::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t{1} << 20;  // grid-stride loops beyond this

// The type elementwise mul computes in: float for bf16 and f16, T otherwise.
template <class T>
using opmath = std::conditional_t<is_half_v<T>, float, T>;

// Thread k handles elements 4k .. 4k + 3 with Philox block k (uniform_float's block i / 4).
// keep_scale is T(1 / (1 - p)) as an exact opmath value.
template <class T>
__global__ void __launch_bounds__(kThreads)
    dropout_kernel(const T* __restrict__ x, int64_t n, PhiloxStream stream, float p,
                   opmath<T> keep_scale, T* __restrict__ out, T* __restrict__ scale) {
  using O = opmath<T>;
  const int64_t blocks = (n + 3) / 4;
  for (int64_t k = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < blocks;
       k += int64_t{gridDim.x} * blockDim.x) {
    const PhiloxBlock w = philox_block(stream, static_cast<uint64_t>(k));
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t i = 4 * k + j;
      if (i < n) {
        const O s = word_to_uniform_float(w.w[j]) >= p ? keep_scale : O(0);
        scale[i] = convert<T>(s);
        out[i] = convert<T>(mul_rn(convert<O>(x[i]), s));
      }
    }
  }
}

}  // namespace

template <class T>
void dropout_forward(const T* x, int64_t n, PhiloxStream stream, double p, T* out, T* scale,
                     cudaStream_t cuda_stream) {
  DTR_CUDA_KERNEL_CHECK(n >= 0, "CUDA dropout: expected n >= 0, got " + std::to_string(n));
  DTR_CUDA_KERNEL_CHECK(p >= 0.0 && p < 1.0,
                        "CUDA dropout: expected 0 <= p < 1, got " + std::to_string(p));
  if (n == 0) return;
  DTR_CUDA_KERNEL_CHECK(x != nullptr && out != nullptr && scale != nullptr,
                        "CUDA dropout: x, out and scale must not be null");
  const auto keep_scale = convert<opmath<T>>(convert<T>(1.0 / (1.0 - p)));
  const int64_t blocks = std::clamp<int64_t>(((n + 3) / 4 + kThreads - 1) / kThreads, 1, kMaxBlocks);
  dropout_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, cuda_stream>>>(
      x, n, stream, static_cast<float>(p), keep_scale, out, scale);
  DTR_CUDA_CHECK_LAUNCH();
}

#define DTR_INSTANTIATE_CUDA_DROPOUT(T)                                                     \
  template void dropout_forward<T>(const T*, int64_t, PhiloxStream, double, T*, T*, \
                                   cudaStream_t);
DTR_FOR_EACH_FLOATING(DTR_INSTANTIATE_CUDA_DROPOUT)

}  // namespace dtr::kernels::cuda
