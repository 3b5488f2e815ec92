#include "dtr/kernels/cuda/block_quantize.h"

#include "dtr/kernels/block_quantize.h"
#include "dtr/kernels/cuda/block_reduce.cuh"
#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/kernels/scalar_types.h"

namespace dtr::kernels::cuda {

namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void block_quantize_kernel(const T* x, int64_t n, int64_t block, int bits, uint8_t* codes,
                                      float* absmax) {
  const int64_t b = blockIdx.x;
  const int64_t begin = b * block, end = min(n, begin + block);
  float largest = 0.0f;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    largest = fmaxf(largest, block_magnitude(static_cast<float>(x[i])));
  }
  const float m = block_absmax_of(block_allreduce(largest, [](float a, float c) { return fmaxf(a, c); }));
  if (threadIdx.x == 0) absmax[b] = m;
  const int qmax = block_quantize_qmax(bits);
  if (bits == 8) {
    for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
      codes[i] = static_cast<uint8_t>(static_cast<int8_t>(block_quantize_value(static_cast<float>(x[i]), m, qmax)));
    }
    return;
  }
  for (int64_t i = begin + 2 * static_cast<int64_t>(threadIdx.x); i < end; i += 2 * kThreads) {
    const unsigned low = static_cast<unsigned>(block_quantize_value(static_cast<float>(x[i]), m, qmax)) & 0xFu;
    const unsigned high =
        i + 1 < end ? static_cast<unsigned>(block_quantize_value(static_cast<float>(x[i + 1]), m, qmax)) & 0xFu : 0u;
    codes[i / 2] = static_cast<uint8_t>(low | (high << 4));
  }
}

template <class T>
__global__ void block_dequantize_kernel(const uint8_t* codes, const float* absmax, int64_t n, int64_t block,
                                        int bits, T* out) {
  const int64_t b = blockIdx.x;
  const int64_t begin = b * block, end = min(n, begin + block);
  const float m = absmax[b];
  const int qmax = block_quantize_qmax(bits);
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const int q = bits == 8 ? static_cast<int>(static_cast<int8_t>(codes[i]))
                            : int4_from_nibble(codes[i / 2] >> (i % 2 == 0 ? 0 : 4));
    out[i] = convert<T>(block_dequantize_value(q, m, qmax));
  }
}

}  // namespace

template <class T>
void block_quantize(const T* x, int64_t n, int64_t block, int bits, uint8_t* codes, float* absmax,
                    cudaStream_t stream) {
  const int64_t blocks = (n + block - 1) / block;
  if (blocks == 0) return;
  block_quantize_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, n, block, bits, codes, absmax);
  DTR_CUDA_CHECK_LAUNCH();
}

template <class T>
void block_dequantize(const uint8_t* codes, const float* absmax, int64_t n, int64_t block, int bits, T* out,
                      cudaStream_t stream) {
  const int64_t blocks = (n + block - 1) / block;
  if (blocks == 0) return;
  block_dequantize_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(codes, absmax, n, block, bits, out);
  DTR_CUDA_CHECK_LAUNCH();
}

#define DTR_INSTANTIATE_BLOCK_QUANTIZE(T)                                                                  \
  template void block_quantize<T>(const T*, int64_t, int64_t, int, uint8_t*, float*, cudaStream_t); \
  template void block_dequantize<T>(const uint8_t*, const float*, int64_t, int64_t, int, T*, cudaStream_t);
DTR_INSTANTIATE_BLOCK_QUANTIZE(float)
DTR_INSTANTIATE_BLOCK_QUANTIZE(::dtr::bf16)

}  // namespace dtr::kernels::cuda
