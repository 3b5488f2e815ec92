// Fused row-wise softmax and log-softmax on the CPU over a contiguous
// [rows, cols] buffer (the op layer in dtr/tensor/ops/softmax.h moves the softmax
// dim last). Each row is read once into a scratch row of acc_t<T> (float for
// bf16/f16/f32, double for f64); then come its max, exp(x - max) and its sum,
// and the write, rounded once to T. Subtracting the max first means large
// inputs (1000, -1000) never overflow.
// Rows are spread across threads when the work reaches kParallelGrain elements.
// A row holding NaN gives NaN; a row of all -inf gives NaN, like PyTorch.
// exp() is Eigen's vectorised one; softmax outputs whose exp(x - max) would be
// subnormal (below the smallest normal number) are flushed to 0, so -inf
// entries (masks) give exactly 0.
#pragma once

#include "dtr/kernels/cpu/cpu_level.h"

#include <cstdint>

namespace dtr::kernels::cpu {

// out[r, j] = exp(in[r, j] - max_r) / sum_k exp(in[r, k] - max_r). Floating T only.
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void softmax_rows(const T* in, int64_t rows, int64_t cols, T* out);)
template <class T>
void softmax_rows(const T* in, int64_t rows, int64_t cols, T* out) {
  return DTR_CPU_DISPATCH(softmax_rows<T>)(in, rows, cols, out);
}

// out[r, j] = in[r, j] - max_r - log(sum_k exp(in[r, k] - max_r)). Floating T only.
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void log_softmax_rows(const T* in, int64_t rows, int64_t cols, T* out);)
template <class T>
void log_softmax_rows(const T* in, int64_t rows, int64_t cols, T* out) {
  return DTR_CPU_DISPATCH(log_softmax_rows<T>)(in, rows, cols, out);
}

}  // namespace dtr::kernels::cpu
