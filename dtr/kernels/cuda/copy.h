// Strided copy with element-type conversion, fill and arange on a CUDA device
// (the CUDA twins of dtr/kernels/cpu/copy.h). Every launcher takes an explicit stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dtr::kernels::cuda {

template <class From, class To>
void copy(int ndim, const int64_t* sizes, const From* src, const int64_t* src_strides, To* dst,
          const int64_t* dst_strides, cudaStream_t stream);

template <class T>
void fill(int ndim, const int64_t* sizes, T* dst, const int64_t* dst_strides, T value,
          cudaStream_t stream);

template <class T>
void arange(T* out, int64_t n, double start, double step, cudaStream_t stream);

}  // namespace dtr::kernels::cuda
