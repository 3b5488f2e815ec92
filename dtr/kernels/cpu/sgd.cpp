// Fused SGD: per-tensor coefficients rounded to T once, then one loop per contiguous
// span. Compiled with -ffp-contract=off (kernels/CMakeLists.txt), so no FMA ever
// changes the rounding the op-by-op reference does.
#include "dtr/kernels/cpu/sgd.h"

#include "dtr/kernels/cpu/parallel.h"

#include <vector>

namespace dtr::kernels::cpu::DTR_CPU_LEVEL {

template <class T>
SGDCoeffs<T> sgd_coeffs(const SGDHyper& h, int64_t step) {
  return {.weight_decay = convert<T>(h.weight_decay),
          .momentum = convert<T>(h.momentum),
          .one_minus_dampening = convert<T>(1.0 - h.dampening),
          .neg_lr = convert<T>(-h.lr),
          .decay = h.weight_decay != 0.0,
          .momentum_on = h.momentum != 0.0,
          .nesterov = h.nesterov,
          .first = step == 1};
}

template SGDCoeffs<float> sgd_coeffs<float>(const SGDHyper&, int64_t);
template SGDCoeffs<double> sgd_coeffs<double>(const SGDHyper&, int64_t);

namespace {

// Elements [offset, offset + n) of one tensor.
template <class T>
void update_range(const SGDTensor<T>& t, int64_t offset, int64_t n, const SGDCoeffs<T>& c) {
  T* __restrict p = t.param + offset;
  const T* __restrict grad = t.grad + offset;
  T* __restrict buf = c.momentum_on ? t.momentum_buffer + offset : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    T g = grad[i];
    if (c.decay) g = g + c.weight_decay * p[i];
    if (c.momentum_on) {
      const T b = c.first ? g : buf[i] * c.momentum + c.one_minus_dampening * g;
      buf[i] = b;
      g = c.nesterov ? g + c.momentum * b : b;
    }
    p[i] = p[i] + c.neg_lr * g;
  }
}

}  // namespace

template <class T>
void sgd(const SGDTensor<T>* tensors, size_t count, const SGDHyper& hyper) {
  std::vector<int64_t> numels;
  std::vector<SGDCoeffs<T>> coeffs;
  numels.reserve(count);
  coeffs.reserve(count);
  for (size_t k = 0; k < count; ++k) {
    numels.push_back(tensors[k].numel);
    // Qualified: argument-dependent lookup also finds the dispatching cpu::sgd_coeffs.
    coeffs.push_back(DTR_CPU_LEVEL::sgd_coeffs<T>(hyper, tensors[k].step));
  }
  parallel_for_arrays(numels.data(), count, [&](size_t k, int64_t offset, int64_t n) {
    update_range(tensors[k], offset, n, coeffs[k]);
  });
}

template void sgd<float>(const SGDTensor<float>*, size_t, const SGDHyper&);
template void sgd<double>(const SGDTensor<double>*, size_t, const SGDHyper&);

}  // namespace dtr::kernels::cpu::DTR_CPU_LEVEL
