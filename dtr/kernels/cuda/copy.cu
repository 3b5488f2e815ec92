#include "dtr/kernels/cuda/copy.h"

#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/kernels/cuda/strided_indexer.cuh"
#include "dtr/kernels/scalar_types.h"

#include <type_traits>

namespace dtr::kernels::cuda {

namespace {

constexpr int kThreads = 256;

template <class From, class To>
__global__ void copy_linear_kernel(const From* __restrict__ src, To* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    dst[i] = convert<To>(src[i]);
  }
}

template <class From, class To>
__global__ void copy_strided_kernel(StridedIndexer<2> ix, const From* __restrict__ src,
                                    To* __restrict__ dst) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < ix.numel;
       i += int64_t{blockDim.x} * gridDim.x) {
    int64_t off[2];
    ix.offsets(i, off);
    dst[off[0]] = convert<To>(src[off[1]]);
  }
}

template <class T>
__global__ void fill_kernel(StridedIndexer<1> ix, T* __restrict__ dst, T value) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < ix.numel;
       i += int64_t{blockDim.x} * gridDim.x) {
    int64_t off[1];
    ix.offsets(i, off);
    dst[off[0]] = value;
  }
}

template <class T>
__global__ void arange_kernel(T* __restrict__ out, int64_t n, double start, double step) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    out[i] = convert<T>(start + static_cast<double>(i) * step);
  }
}

}  // namespace

template <class From, class To>
void copy(int ndim, const int64_t* sizes, const From* src, const int64_t* src_strides, To* dst,
          const int64_t* dst_strides, cudaStream_t stream) {
  auto ix = StridedIndexer<2>::make(ndim, sizes, {dst_strides, src_strides});
  if (ix.numel == 0) return;
  if (ix.is_linear()) {
    if constexpr (std::is_same_v<From, To>) {
      DTR_CUDA_CHECK(cudaMemcpyAsync(dst, src, ix.numel * sizeof(To), cudaMemcpyDeviceToDevice, stream));
      return;
    }
    copy_linear_kernel<<<grid_for(ix.numel, kThreads), kThreads, 0, stream>>>(src, dst, ix.numel);
  } else {
    copy_strided_kernel<<<grid_for(ix.numel, kThreads), kThreads, 0, stream>>>(ix, src, dst);
  }
  DTR_CUDA_CHECK_LAUNCH();
}

template <class T>
void fill(int ndim, const int64_t* sizes, T* dst, const int64_t* dst_strides, T value,
          cudaStream_t stream) {
  auto ix = StridedIndexer<1>::make(ndim, sizes, {dst_strides});
  if (ix.numel == 0) return;
  fill_kernel<<<grid_for(ix.numel, kThreads), kThreads, 0, stream>>>(ix, dst, value);
  DTR_CUDA_CHECK_LAUNCH();
}

template <class T>
void arange(T* out, int64_t n, double start, double step, cudaStream_t stream) {
  if (n == 0) return;
  arange_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(out, n, start, step);
  DTR_CUDA_CHECK_LAUNCH();
}

#define DTR_INSTANTIATE_COPY_TO(To, From) \
  template void copy<From, To>(int, const int64_t*, const From*, const int64_t*, To*, const int64_t*, cudaStream_t);
#define DTR_INSTANTIATE_COPY_FROM(From)  \
  DTR_INSTANTIATE_COPY_TO(float, From)   \
  DTR_INSTANTIATE_COPY_TO(double, From)  \
  DTR_INSTANTIATE_COPY_TO(bf16, From)    \
  DTR_INSTANTIATE_COPY_TO(f16, From)     \
  DTR_INSTANTIATE_COPY_TO(int32_t, From) \
  DTR_INSTANTIATE_COPY_TO(int64_t, From) \
  DTR_INSTANTIATE_COPY_TO(uint8_t, From)
DTR_FOR_EACH_SCALAR(DTR_INSTANTIATE_COPY_FROM)

#define DTR_INSTANTIATE_FILL(T)                                                      \
  template void fill<T>(int, const int64_t*, T*, const int64_t*, T, cudaStream_t); \
  template void arange<T>(T*, int64_t, double, double, cudaStream_t);
DTR_FOR_EACH_SCALAR(DTR_INSTANTIATE_FILL)

}  // namespace dtr::kernels::cuda
