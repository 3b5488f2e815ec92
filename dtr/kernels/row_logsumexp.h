// The running state of a row's log-sum-exp as the CUDA cross-entropy kernels fold it
// (dtr/kernels/cuda/cross_entropy.cu): each thread folds its vectors of the row into a
// RowState, then the block combines the threads' states. Host and device code alike,
// so that the CPU tests check the folding against a direct computation; `Exp` is the
// exponential to use (the kernels' row_exp, std::exp on the host).
#pragma once

#include "dtr/kernels/host_device.h"

#include <cstdint>
#include <limits>

namespace dtr::kernels {

// What one thread (then the block) knows about the row elements it has seen: their
// max (NaN once a NaN is seen), the sum of exp(x - max), the sum of (x - max) (only
// kept with label smoothing; -inf once a -inf element is seen) and their count.
template <class A>
struct RowState {
  A max;
  A sum_exp;
  A sum_shift;
  int64_t n;
};

template <class A>
DTR_HOST_DEVICE inline RowState<A> empty_row_state() {
  return {-std::numeric_limits<A>::infinity(), A(0), A(0), 0};
}

// Adds the values a[0..valid) (1 <= valid <= N) to the state: their max first (one
// rescale of the state per call, not a branch per element), then their exponentials
// at the new max.
template <bool kSmooth, int N, class A, class Exp>
DTR_HOST_DEVICE inline void add_values(RowState<A>& s, const A (&a)[N], int valid, Exp exp) {
  constexpr A kNegInf = -std::numeric_limits<A>::infinity();
  A vmax = kNegInf;
DTR_UNROLL
  for (int k = 0; k < N; ++k) {
    if (k < valid && (a[k] > vmax || a[k] != a[k])) vmax = a[k];  // NaN-propagating
  }
  if ((vmax > s.max || vmax != vmax) && s.max == s.max) {  // a new max (a NaN max sticks)
    s.sum_exp = s.n == 0 ? A(0) : s.sum_exp * exp(s.max - vmax);
    if constexpr (kSmooth) {
      // Earlier elements are shifted by the old max; move them to the new one.
      s.sum_shift = s.n == 0 ? A(0) : s.sum_shift - static_cast<A>(s.n) * (vmax - s.max);
    }
    s.max = vmax;
  }
DTR_UNROLL
  for (int k = 0; k < N; ++k) {
    if (k >= valid) continue;
    if (a[k] != kNegInf) {
      s.sum_exp += exp(a[k] - s.max);
      if constexpr (kSmooth) s.sum_shift += a[k] - s.max;
    } else if constexpr (kSmooth) {
      s.sum_shift += a[k];  // -inf - max is -inf (also when max is -inf)
    }
  }
  s.n += valid;
}

// The state of the elements of both a and b (a NaN max in either sticks).
template <class A, class Exp>
DTR_HOST_DEVICE inline RowState<A> combine_row_states(const RowState<A>& a, const RowState<A>& b, Exp exp) {
  const A max = (b.max > a.max || b.max != b.max) ? b.max : a.max;
  auto rescaled_exp = [&](const RowState<A>& p) { return p.sum_exp == A(0) ? A(0) : p.sum_exp * exp(p.max - max); };
  auto rescaled_shift = [&](const RowState<A>& p) {
    return p.n == 0 || p.max == max ? p.sum_shift : p.sum_shift - static_cast<A>(p.n) * (max - p.max);
  };
  return {max, rescaled_exp(a) + rescaled_exp(b), rescaled_shift(a) + rescaled_shift(b), a.n + b.n};
}

}  // namespace dtr::kernels
