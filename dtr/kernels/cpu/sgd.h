// Fused SGD on the CPU: one pass over each parameter's contiguous arrays (param,
// grad, momentum_buffer) does the weight decay, the momentum update and the step,
// instead of the up to five full-array passes of the op-by-op SGD (dtr/nn/optim/sgd.h).
// Used by dtr/nn/optim/fused_sgd.h.
//
// The math is the reference's, operation for operation, in T (f32 or f64): every
// hyperparameter is first rounded to T the way the op-by-op path rounds its scalars,
// and every product is rounded before the add that uses it (no FMA), so the result
// is bit-identical to SGD's. Per element, at update `step` = t:
//   g = grad;  g = g + T(weight_decay) * p                  (when weight_decay != 0)
//   b = g (t == 1), else (b * T(momentum)) + T(1 - dampening) * g   (when momentum != 0)
//   g = nesterov ? g + T(momentum) * b : b                  (when momentum != 0)
//   p = p + T(-lr) * g
// Results do not depend on the thread count (each element's math is independent of
// the split).
#pragma once

#include "dtr/kernels/cpu/cpu_level.h"
#include "dtr/kernels/scalar_types.h"

#include <cstddef>
#include <cstdint>

namespace dtr::kernels::cpu {

// The hyperparameters shared by every tensor of one call (as given by the user, in double).
struct SGDHyper {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

// One tensor's scalars for update `step`, rounded to T as the op-by-op SGD rounds its
// Scalars (computed on the host; the CUDA kernel, dtr/kernels/cuda/sgd.h, takes the same
// values, so both devices start every update from the same bits).
template <class T>
struct SGDCoeffs {
  T weight_decay, momentum, one_minus_dampening, neg_lr;
  bool decay;        // weight_decay != 0
  bool momentum_on;  // momentum != 0 (then the tensor has a momentum buffer)
  bool nesterov;
  bool first;        // step == 1: the buffer starts as the gradient
};

// Instantiated for float and double.
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       SGDCoeffs<T> sgd_coeffs(const SGDHyper& hyper, int64_t step);)
template <class T>
SGDCoeffs<T> sgd_coeffs(const SGDHyper& hyper, int64_t step) {
  return DTR_CPU_DISPATCH(sgd_coeffs<T>)(hyper, step);
}

// One parameter's arrays, each `numel` contiguous elements (none overlapping;
// momentum_buffer null when the momentum is 0), and its update count t >= 1
// (already incremented for this update).
template <class T>
struct SGDTensor {
  T* param = nullptr;
  const T* grad = nullptr;
  T* momentum_buffer = nullptr;
  int64_t numel = 0;
  int64_t step = 1;
};

// Updates `count` tensors in one parallel region, split across threads by element
// count over all tensors together. Instantiated for float and double.
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void sgd(const SGDTensor<T>* tensors, size_t count, const SGDHyper& hyper);)
template <class T>
void sgd(const SGDTensor<T>* tensors, size_t count, const SGDHyper& hyper) {
  return DTR_CPU_DISPATCH(sgd<T>)(tensors, count, hyper);
}

}  // namespace dtr::kernels::cpu
