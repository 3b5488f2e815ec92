// Fused AdamW on the CPU: one pass over each parameter's contiguous arrays
// (param, grad, exp_avg, exp_avg_sq) does the decoupled weight decay, both moment
// updates and the bias-corrected step, instead of the ~10 full-array passes the
// op-by-op AdamW (dtr/nn/optim/adamw.h) makes. AdamW's fused path (its default, and
// FusedAdamW's) runs it.
//
// The math is the reference's, operation for operation, in T (f32 or f64): every
// hyperparameter is first rounded to T the way the op-by-op path rounds its
// scalars, and every product is rounded before the add that uses it (no FMA), so
// the result is bit-identical to AdamW's. Per element, at update `step` = t:
//   p = p * T(1 - lr * weight_decay)
//   m = m * T(beta1) + T(1 - beta1) * g
//   v = v * T(beta2) + T(1 - beta2) * (g * g)
//   p = p + T(-lr / (1 - beta1^t)) * (m / (sqrt(v) / T(sqrt(1 - beta2^t)) + T(eps)))
// The grad may also be bf16 or f16 (f32 parameters only): it is widened to f32
// exactly on load. Results do not depend on the thread count (each element's
// math is independent of the split).
#pragma once

#include "dtr/kernels/cpu/cpu_level.h"
#include "dtr/kernels/scalar_types.h"

#include <cstddef>
#include <cstdint>

namespace dtr::kernels::cpu {

// The `fused` member of hyperparameters with no choice of kernel to make.
struct NoFusedChoice {};

// Adam's and AdamW's hyperparameters, as given by the user (in double): the one
// definition behind AdamWHyper below and the optimizers' AdamOptions and
// AdamWOptions (dtr/nn/optim/adam.h, adamw.h), which stay aggregates, so
// `AdamWOptions{.lr = 3e-4, .fused = false}` works. `Traits` gives the default
// weight decay (kDefaultWeightDecay: AdamW's 0.01, Adam's 0, as in PyTorch) and
// the type of `fused` (AdamWOptions: std::optional<bool>; else NoFusedChoice).
template <class Traits>
struct AdamHyperparameters {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = Traits::kDefaultWeightDecay;
  typename Traits::Fused fused{};
};

struct AdamWHyperTraits {
  static constexpr double kDefaultWeightDecay = 0.01;
  using Fused = NoFusedChoice;
};

// The hyperparameters shared by every tensor of one call.
using AdamWHyper = AdamHyperparameters<AdamWHyperTraits>;

// One tensor's scalars for update `step`, rounded to T as the op-by-op AdamW rounds
// its Scalars: decay = T(1 - lr * weight_decay), step_size = T(-lr / (1 - beta1^t)),
// bias_correction2_sqrt = T(sqrt(1 - beta2^t)), the others T(hyperparameter).
// Computed on the host in double; the CUDA kernel (dtr/kernels/cuda/adamw.h) takes the
// same values, so both devices start every update from the same bits.
template <class T>
struct AdamWCoeffs {
  T decay, beta1, one_minus_beta1, beta2, one_minus_beta2, bias_correction2_sqrt, eps, step_size;
};

// Instantiated for float and double.
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       AdamWCoeffs<T> adamw_coeffs(const AdamWHyper& hyper, int64_t step);)
template <class T>
AdamWCoeffs<T> adamw_coeffs(const AdamWHyper& hyper, int64_t step) {
  return DTR_CPU_DISPATCH(adamw_coeffs<T>)(hyper, step);
}

// One parameter's arrays, each `numel` contiguous elements (none overlapping),
// and its update count t >= 1 (already incremented for this update).
template <class T, class G>
struct AdamWTensor {
  T* param = nullptr;
  const G* grad = nullptr;
  T* exp_avg = nullptr;
  T* exp_avg_sq = nullptr;
  int64_t numel = 0;
  int64_t step = 1;
};

// Updates `count` tensors in one parallel region: the work is split across
// threads by element count over all tensors together (a thread's range may span
// several small tensors or part of a large one), never one task per tensor.
// Instantiated for (T, G) = (float, float), (float, bf16), (float, f16), (double, double).
DTR_CPU_AT_EVERY_LEVEL(template <class T, class G>
                       void adamw(const AdamWTensor<T, G>* tensors, size_t count,
                                  const AdamWHyper& hyper);)
template <class T, class G>
void adamw(const AdamWTensor<T, G>* tensors, size_t count, const AdamWHyper& hyper) {
  return DTR_CPU_DISPATCH(adamw<T, G>)(tensors, count, hyper);
}

}  // namespace dtr::kernels::cpu
