// Fused log-softmax + negative log-likelihood on a CUDA device over contiguous
// [rows, cols] logits with int64 targets, forward and backward (the CUDA twins
// of dtr/kernels/cpu/cross_entropy.h, with the same formulas, label smoothing and
// ignore_index). The backward writes dlogits rows `dlogits_ld` elements apart
// (>= cols), so that it can fill padded rows a GEMM reads next:
//
//   log p_j  = (x_j - max) - log_sum,   log_sum = log(sum_k exp(x_k - max))
//   loss     = (1 - eps) * (-log p_target) + eps * mean_j(-log p_j)
//   dlogits  = scale * (p_j - (1 - eps) * [j == target] - eps / cols)
//
// A row whose target equals ignore_index gets loss 0 (stats 0) and gradient 0.
// The op layer checks every other target is in [0, cols) first (with
// dtr/kernels/cuda/index_check.h); the kernels trust it. Everything is computed in
// acc_t<T> (float for f32/bf16/f16, double for f64) and rounded once on store.
//
// Launch strategy: one block per row (grid-stride over rows), 32 to 512 threads
// from cols, reading (and in the backward writing) the row as 16-byte vectors.
// Logits rows of 50257 bf16 mostly start unaligned: a vector is then cut from the
// two aligned 16-byte chunks around it (dtr/kernels/cuda/block_reduce.cuh), two loads
// instead of eight. Stores check their own row's alignment: dlogits rows padded to
// a multiple of 8 elements are all aligned (vector stores but the partial last one).
//   - forward: one read of the row; each thread keeps an online (max, sum of
//     exp(x - max), sum of (x - max), count), moved to a new max once per vector,
//     folded across the block by a fixed shuffle + shared-memory tree; thread 0
//     reads the target logit and writes loss, max and log_sum of the row;
//   - mean: one block folds the per-row losses in a fixed order and writes
//     sum / counted (0 / 0 = NaN when nothing is counted, like the CPU op);
//   - backward: one read and one write of the row, recomputing p_j from the
//     saved (max, log_sum); probabilities are never stored.
// No float atomics anywhere: results are bitwise the same on every run. They
// match the CPU within rounding (different summation order; exp is expf for f32,
// __expf for bf16/f16 as in dtr/kernels/cuda/acc_math.cuh's row_exp, Eigen's on the CPU).
// Launchers enqueue on `stream` and return without synchronizing. Floating T only.
#pragma once

#include "dtr/kernels/scalar_types.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace dtr::kernels::cuda {

// loss, row_max, row_log_sum: [rows] device buffers (ignored rows: 0, 0, 0).
template <class T>
void cross_entropy_forward(const T* logits, const int64_t* targets, int64_t rows, int64_t cols,
                           int64_t ignore_index, double label_smoothing, acc_t<T>* loss,
                           acc_t<T>* row_max, acc_t<T>* row_log_sum, cudaStream_t stream);

// out[0] = convert<T>((sum over r of loss[r]) / counted): the mean over the
// `counted` non-ignored rows (ignored rows hold 0).
template <class T>
void cross_entropy_mean(const acc_t<T>* loss, int64_t rows, int64_t counted, T* out,
                        cudaStream_t stream);

// dlogits: [rows, cols] with row stride dlogits_ld >= cols; every one of the cols
// elements of each row is written, the dlogits_ld - cols after them are not
// touched. The scale of every non-ignored row is acc_t<T>(*grad_loss / counted)
// computed in double on the device from the incoming gradient of the mean loss
// (`grad_loss`: one double in device memory), or 0 when counted == 0, exactly as
// the CPU op computes it on the host.
template <class T>
void cross_entropy_backward(const T* logits, const int64_t* targets, const acc_t<T>* row_max,
                            const acc_t<T>* row_log_sum, int64_t rows, int64_t cols,
                            int64_t ignore_index, double label_smoothing, const double* grad_loss,
                            int64_t counted, T* dlogits, int64_t dlogits_ld, cudaStream_t stream);

}  // namespace dtr::kernels::cuda
