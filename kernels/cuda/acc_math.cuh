// exp, log and -inf in a kernel's accumulation type (float for f32/bf16/f16
// inputs, double for f64), for the softmax, cross-entropy and attention kernels.
#pragma once

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

}  // namespace dtr::kernels::cuda
