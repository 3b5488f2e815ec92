// Fused row-wise layer norm and RMS norm on the CPU, forward and backward, over
// a contiguous [rows, cols] buffer (the op layer in dtr/tensor/ops/nn.h flattens
// every dim but the normalised last one into rows).
//
//   layer_norm: y = (x - mean) * rstd * weight + bias,  rstd = 1 / sqrt(var + eps)
//               (var is the biased variance over the row, like PyTorch)
//   rms_norm:   y = x * rstd * weight,                  rstd = 1 / sqrt(mean(x^2) + eps)
//
// weight and bias are [cols] and may be null (meaning 1 and 0). Each row is read
// once into a scratch row of acc_t<T> (float for bf16/f16/f32, double for f64);
// mean and variance are computed in two passes over that scratch (no
// cancellation from E[x^2] - E[x]^2), and y is rounded once to T. The per-row
// mean and rstd are written in acc_t<T> for the backward.
//
// Backward, with xhat = (x - mean) * rstd (rms: x * rstd) and g = dy * weight:
//   dx      = rstd * (g - mean(g) - xhat * mean(g * xhat))    (rms: no mean(g) term)
//   dweight = sum over rows of dy * xhat,   dbias = sum over rows of dy
// dweight and dbias are reduced deterministically: rows are cut into a number of
// blocks that depends only on rows and cols (never on the thread count); each
// block sums its rows in order into its own acc_t<T> partial, and the partials
// are added in block order. Any of dx, dweight, dbias may be null to skip it.
//
// Rows are spread across threads when the work reaches kParallelGrain elements.
// cols == 0 gives NaN mean and rstd and writes nothing else.
#pragma once

#include "dtr/kernels/cpu/cpu_level.h"
#include "dtr/kernels/scalar_types.h"

#include <cstdint>

namespace dtr::kernels::cpu {

// Floating T only. weight, bias: [cols] or null. y: [rows, cols]; mean, rstd: [rows].
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void layer_norm_forward(const T* x, const T* weight, const T* bias,
                                               int64_t rows, int64_t cols, double eps, T* y,
                                               acc_t<T>* mean, acc_t<T>* rstd);)
template <class T>
void layer_norm_forward(const T* x, const T* weight, const T* bias, int64_t rows, int64_t cols,
                        double eps, T* y, acc_t<T>* mean, acc_t<T>* rstd) {
  return DTR_CPU_DISPATCH(layer_norm_forward<T>)(x, weight, bias, rows, cols, eps, y, mean, rstd);
}

// dy, x: [rows, cols]; mean, rstd: from layer_norm_forward; weight: [cols] or null.
// dx: [rows, cols], dweight, dbias: [cols]; each may be null.
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void layer_norm_backward(const T* dy, const T* x, const acc_t<T>* mean,
                                                const acc_t<T>* rstd, const T* weight, int64_t rows,
                                                int64_t cols, T* dx, T* dweight, T* dbias);)
template <class T>
void layer_norm_backward(const T* dy, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd,
                         const T* weight, int64_t rows, int64_t cols, T* dx, T* dweight, T* dbias) {
  return DTR_CPU_DISPATCH(layer_norm_backward<T>)(dy, x, mean, rstd, weight, rows, cols, dx,
                                                  dweight, dbias);
}

// Floating T only. weight: [cols] or null. y: [rows, cols]; rstd: [rows].
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void rms_norm_forward(const T* x, const T* weight, int64_t rows,
                                             int64_t cols, double eps, T* y, acc_t<T>* rstd);)
template <class T>
void rms_norm_forward(const T* x, const T* weight, int64_t rows, int64_t cols, double eps, T* y,
                      acc_t<T>* rstd) {
  return DTR_CPU_DISPATCH(rms_norm_forward<T>)(x, weight, rows, cols, eps, y, rstd);
}

// dy, x: [rows, cols]; rstd: from rms_norm_forward; weight: [cols] or null.
// dx: [rows, cols], dweight: [cols]; each may be null.
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void rms_norm_backward(const T* dy, const T* x, const acc_t<T>* rstd,
                                              const T* weight, int64_t rows, int64_t cols, T* dx,
                                              T* dweight);)
template <class T>
void rms_norm_backward(const T* dy, const T* x, const acc_t<T>* rstd, const T* weight,
                       int64_t rows, int64_t cols, T* dx, T* dweight) {
  return DTR_CPU_DISPATCH(rms_norm_backward<T>)(dy, x, rstd, weight, rows, cols, dx, dweight);
}

}  // namespace dtr::kernels::cpu
