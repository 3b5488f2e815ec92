// Strided copy with element-type conversion, fill, and arange on the CPU.
// Sizes and strides are in elements; src and dst share one shape.
#pragma once

#include "dtr/kernels/cpu/cpu_level.h"

#include <cstdint>

namespace dtr::kernels::cpu {

// dst[i] = convert<To>(src[i]) for every index i of `sizes`.
DTR_CPU_AT_EVERY_LEVEL(template <class From, class To>
                       void copy(int ndim, const int64_t* sizes, const From* src,
                                 const int64_t* src_strides, To* dst, const int64_t* dst_strides);)
template <class From, class To>
void copy(int ndim, const int64_t* sizes, const From* src, const int64_t* src_strides, To* dst,
          const int64_t* dst_strides) {
  return DTR_CPU_DISPATCH(copy<From, To>)(ndim, sizes, src, src_strides, dst, dst_strides);
}

// dst[i] = value for every index i of `sizes`.
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void fill(int ndim, const int64_t* sizes, T* dst, const int64_t* dst_strides,
                                 T value);)
template <class T>
void fill(int ndim, const int64_t* sizes, T* dst, const int64_t* dst_strides, T value) {
  return DTR_CPU_DISPATCH(fill<T>)(ndim, sizes, dst, dst_strides, value);
}

// out[i] = start + i * step, computed in double then converted, for a contiguous out of n elements.
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void arange(T* out, int64_t n, double start, double step);)
template <class T>
void arange(T* out, int64_t n, double start, double step) {
  return DTR_CPU_DISPATCH(arange<T>)(out, n, start, step);
}

}  // namespace dtr::kernels::cpu
