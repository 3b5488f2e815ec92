// Fused AdamW: per-tensor coefficients rounded to T once, then one vectorisable
// loop per contiguous span. This file is compiled with -fno-math-errno (so GCC
// turns sqrt into a vector instruction) and -ffp-contract=off (so no FMA ever
// changes the rounding the reference does); see kernels/CMakeLists.txt.
#include "dtr/kernels/cpu/adamw.h"

#include "dtr/kernels/cpu/parallel.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

namespace dtr::kernels::cpu::DTR_CPU_LEVEL {

template <class T>
AdamWCoeffs<T> adamw_coeffs(const AdamWHyper& h, int64_t step) {
  const auto t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(h.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(h.beta2, t);
  return {.decay = convert<T>(1.0 - h.lr * h.weight_decay),
          .beta1 = convert<T>(h.beta1),
          .one_minus_beta1 = convert<T>(1.0 - h.beta1),
          .beta2 = convert<T>(h.beta2),
          .one_minus_beta2 = convert<T>(1.0 - h.beta2),
          .bias_correction2_sqrt = convert<T>(std::sqrt(bias_correction2)),
          .eps = convert<T>(h.eps),
          .step_size = convert<T>(-h.lr / bias_correction1)};
}

template AdamWCoeffs<float> adamw_coeffs<float>(const AdamWHyper&, int64_t);
template AdamWCoeffs<double> adamw_coeffs<double>(const AdamWHyper&, int64_t);

namespace {

template <class T>
using Coeffs = AdamWCoeffs<T>;

// The fused update over n contiguous elements: no branches, no aliasing, so GCC
// vectorises it (SSE2: 4 floats / 2 doubles a lane; wider with -march).
template <class T>
void update_span(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
                 int64_t n, const Coeffs<T>& c) {
  const T decay = c.decay, b1 = c.beta1, a1 = c.one_minus_beta1, b2 = c.beta2,
          a2 = c.one_minus_beta2, bc2 = c.bias_correction2_sqrt, eps = c.eps,
          step_size = c.step_size;
  for (int64_t i = 0; i < n; ++i) {
    const T gi = g[i];
    const T mi = m[i] * b1 + a1 * gi;
    const T vi = v[i] * b2 + a2 * (gi * gi);
    const T denom = std::sqrt(vi) / bc2 + eps;
    p[i] = p[i] * decay + step_size * (mi / denom);
    m[i] = mi;
    v[i] = vi;
  }
}

// Elements of a half-precision grad widened at a time (on the stack, in L1).
constexpr int64_t kStage = 1024;

// Elements [offset, offset + n) of one tensor.
template <class T, class G>
void update_range(const AdamWTensor<T, G>& t, int64_t offset, int64_t n, const Coeffs<T>& c) {
  T* p = t.param + offset;
  T* m = t.exp_avg + offset;
  T* v = t.exp_avg_sq + offset;
  const G* g = t.grad + offset;
  if constexpr (std::is_same_v<T, G>) {
    update_span<T>(p, g, m, v, n, c);
  } else {
    static_assert(std::is_same_v<T, float> && is_half_v<G>, "half grads go with f32 params");
    float staged[kStage];
    for (int64_t b = 0; b < n; b += kStage) {
      const int64_t len = std::min(kStage, n - b);
      for (int64_t i = 0; i < len; ++i) staged[i] = static_cast<float>(g[b + i]);  // exact
      update_span<float>(p + b, staged, m + b, v + b, len, c);
    }
  }
}

}  // namespace

template <class T, class G>
void adamw(const AdamWTensor<T, G>* tensors, size_t count, const AdamWHyper& hyper) {
  std::vector<int64_t> numels;
  std::vector<Coeffs<T>> coeffs;
  numels.reserve(count);
  coeffs.reserve(count);
  for (size_t k = 0; k < count; ++k) {
    numels.push_back(tensors[k].numel);
    // Qualified: argument-dependent lookup also finds the dispatching cpu::adamw_coeffs.
    coeffs.push_back(DTR_CPU_LEVEL::adamw_coeffs<T>(hyper, tensors[k].step));
  }
  parallel_for_arrays(numels.data(), count, [&](size_t k, int64_t offset, int64_t n) {
    update_range(tensors[k], offset, n, coeffs[k]);
  });
}

template void adamw<float, float>(const AdamWTensor<float, float>*, size_t, const AdamWHyper&);
template void adamw<float, bf16>(const AdamWTensor<float, bf16>*, size_t, const AdamWHyper&);
template void adamw<float, f16>(const AdamWTensor<float, f16>*, size_t, const AdamWHyper&);
template void adamw<double, double>(const AdamWTensor<double, double>*, size_t,
                                    const AdamWHyper&);

}  // namespace dtr::kernels::cpu::DTR_CPU_LEVEL
