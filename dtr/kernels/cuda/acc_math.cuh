// exp, log and -inf in a kernel's accumulation type (float for f32/bf16/f16
// inputs, double for f64), for the softmax, cross-entropy and attention kernels.
#pragma once

#include "dtr/kernels/scalar_types.h"

#include <limits>

namespace dtr::kernels::cuda {

__device__ inline float exp_acc(float x) { return expf(x); }
__device__ inline double exp_acc(double x) { return exp(x); }
__device__ inline float log_acc(float x) { return logf(x); }
__device__ inline double log_acc(double x) { return log(x); }

template <class A>
__device__ inline A neg_inf() {
  return -std::numeric_limits<A>::infinity();
}

// exp(shifted) for a row of T shifted by its max (so shifted <= 0). For 16-bit T the
// hardware's fast exp2 of a prescaled argument (__expf: relative error ~1e-6 over the
// range that matters, far below their rounding of 4e-3 or 5e-4; its libm twin takes
// ~10 instructions, and the row kernels over bf16 are bound by instructions, not
// bytes); the accurate one otherwise. exp(0) is exactly 1 either way, so a row's max
// element stays exact.
template <class T, class A>
__device__ inline A row_exp(A shifted) {
  if constexpr (is_half_v<T>) {
    return shifted == A(0) ? A(1) : __expf(shifted);
  } else {
    return exp_acc(shifted);
  }
}

}  // namespace dtr::kernels::cuda
