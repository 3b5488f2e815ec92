// Fused log-softmax + negative log-likelihood on the CPU over contiguous
// [rows, cols] logits (cols = classes) with int64 targets, forward and
// backward, with PyTorch's label smoothing and ignore_index:
//
//   log p_j  = (x_j - max) - log_sum,   log_sum = log(sum_k exp(x_k - max))
//   loss     = (1 - eps) * (-log p_target) + eps * mean_j(-log p_j)
//   dlogits  = scale * (p_j - (1 - eps) * [j == target] - eps / cols)
//
// A row whose target equals ignore_index gets loss 0 and gradient 0. The op
// layer (dtr/tensor/ops/nn.h) checks every other target is in [0, cols) first; the
// kernels trust it. The forward writes, per row, the max and log_sum in
// acc_t<T> (float for bf16/f16/f32, double for f64); the backward recomputes
// p_j = exp((x_j - max) - log_sum) from them while writing dlogits, in the same
// pass, so probabilities are never stored. Subtracting the max first means large
// logits never overflow. Rows are spread across threads when the work reaches
// kParallelGrain elements.
#pragma once

#include "dtr/kernels/cpu/cpu_level.h"
#include "dtr/kernels/scalar_types.h"

#include <cstdint>

namespace dtr::kernels::cpu {

// loss, row_max, row_log_sum: [rows] (ignored rows: 0, 0, 0). Floating T only.
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void cross_entropy_forward(const T* logits, const int64_t* targets,
                                                  int64_t rows, int64_t cols, int64_t ignore_index,
                                                  double label_smoothing, acc_t<T>* loss,
                                                  acc_t<T>* row_max, acc_t<T>* row_log_sum);)
template <class T>
void cross_entropy_forward(const T* logits, const int64_t* targets, int64_t rows, int64_t cols,
                           int64_t ignore_index, double label_smoothing, acc_t<T>* loss,
                           acc_t<T>* row_max, acc_t<T>* row_log_sum) {
  return DTR_CPU_DISPATCH(cross_entropy_forward<T>)(logits, targets, rows, cols, ignore_index,
                                                    label_smoothing, loss, row_max, row_log_sum);
}

// dlogits: [rows, cols], every element written. `scale` multiplies every
// non-ignored row (for a mean loss: the incoming gradient / non-ignored rows).
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void cross_entropy_backward(const T* logits, const int64_t* targets,
                                                   const acc_t<T>* row_max,
                                                   const acc_t<T>* row_log_sum, int64_t rows,
                                                   int64_t cols, int64_t ignore_index,
                                                   double label_smoothing, double scale,
                                                   T* dlogits);)
template <class T>
void cross_entropy_backward(const T* logits, const int64_t* targets, const acc_t<T>* row_max,
                            const acc_t<T>* row_log_sum, int64_t rows, int64_t cols,
                            int64_t ignore_index, double label_smoothing, double scale,
                            T* dlogits) {
  return DTR_CPU_DISPATCH(cross_entropy_backward<T>)(logits, targets, row_max, row_log_sum, rows,
                                                     cols, ignore_index, label_smoothing, scale,
                                                     dlogits);
}

}  // namespace dtr::kernels::cpu
