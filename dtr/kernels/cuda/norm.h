// Fused row-wise layer norm and RMS norm on a CUDA device, forward and backward,
// over a contiguous [rows, cols] device buffer: the CUDA twins of
// dtr/kernels/cpu/norm.h, with the same semantics:
//
//   layer_norm: y = (x - mean) * rstd * weight + bias,  rstd = 1 / sqrt(var + eps)
//               (var is the biased variance over the row, like PyTorch)
//   rms_norm:   y = x * rstd * weight,                  rstd = 1 / sqrt(mean(x^2) + eps)
//
// weight and bias are [cols] and may be null (meaning 1 and 0). Each row is
// computed in acc_t<T> (float for bf16/f16/f32, double for f64): the mean, then
// the variance as the mean of (x - mean)^2 in a second pass over the row (never
// E[x^2] - E[x]^2), and y is rounded once to T. The per-row mean and rstd are
// written in acc_t<T> for the backward (mean may be null). cols == 0 gives NaN
// mean and rstd and writes nothing else.
//
// Backward, with xhat = (x - mean) * rstd (rms: x * rstd) and g = dy * weight:
//   dx      = rstd * (g - mean(g) - xhat * mean(g * xhat))    (rms: no mean(g) term)
//   dweight = sum over rows of dy * xhat,   dbias = sum over rows of dy
// Any of dx, dweight, dbias may be null to skip it. rows == 0 gives zero
// dweight and dbias.
//
// Strategy (forward and dx), chosen from cols like dtr/kernels/cuda/softmax.h:
//   - rows of up to 4 vectors of 16 bytes per lane (512 f32 / 1024 bf16 elements):
//     one warp per row, 8 rows per 256-thread block, the row held in registers;
//   - longer rows up to 8 vectors per thread of a 512-thread block in the forward
//     (16384 f32 or bf16 elements, 8192 f64), 4 per thread for each of dy and x in
//     the backward (8192 f32 or bf16, 4096 f64): one block per row, the row held
//     in registers (one read, one write);
//   - longer rows: one block per row reading the row from global memory once per
//     pass (three in the forward, two in the backward).
// dweight and dbias never use atomics: rows are cut into `chunks` contiguous runs
// of rows_per_chunk rows (a function of rows and cols only, not of the device);
// one thread per (column, chunk) sums its rows in row order into a scratch
// [chunks, cols] buffer of acc_t<T>, then one thread per column adds the chunk
// partials in chunk order and rounds once to T. Every reduction has a fixed order
// (warp shuffles, then per-warp results in warp order), so all results are
// bitwise reproducible run to run. They differ from the CPU kernels only by
// summation order (and fused multiply-adds) in acc_t<T>.
//
// Launchers enqueue on `stream` and return without synchronizing. Floating T only.
#pragma once

#include "dtr/kernels/scalar_types.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace dtr::kernels::cuda {

// weight, bias: [cols] or null. y: [rows, cols]; mean (or null), rstd: [rows].
template <class T>
void layer_norm_forward(const T* x, const T* weight, const T* bias, int64_t rows, int64_t cols,
                        double eps, T* y, acc_t<T>* mean, acc_t<T>* rstd, cudaStream_t stream);

// weight: [cols] or null. y: [rows, cols]; rstd: [rows].
template <class T>
void rms_norm_forward(const T* x, const T* weight, int64_t rows, int64_t cols, double eps, T* y,
                      acc_t<T>* rstd, cudaStream_t stream);

// How many acc_t elements the backward's `scratch` must hold for these sizes and
// the parameter gradients asked for (0 when neither is: scratch may then be null).
int64_t norm_backward_scratch_elements(int64_t rows, int64_t cols, bool dweight, bool dbias);

// dy, x: [rows, cols]; mean, rstd: from layer_norm_forward; weight: [cols] or null.
// dx: [rows, cols], dweight, dbias: [cols]; each may be null. scratch: device
// memory of norm_backward_scratch_elements(rows, cols, dweight != null, dbias != null)
// elements, free for the kernels' use until they complete.
template <class T>
void layer_norm_backward(const T* dy, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd,
                         const T* weight, int64_t rows, int64_t cols, T* dx, T* dweight, T* dbias,
                         acc_t<T>* scratch, cudaStream_t stream);

// dy, x: [rows, cols]; rstd: from rms_norm_forward; weight: [cols] or null.
// dx: [rows, cols], dweight: [cols]; each may be null. scratch as above (dbias false).
template <class T>
void rms_norm_backward(const T* dy, const T* x, const acc_t<T>* rstd, const T* weight,
                       int64_t rows, int64_t cols, T* dx, T* dweight, acc_t<T>* scratch,
                       cudaStream_t stream);

}  // namespace dtr::kernels::cuda
