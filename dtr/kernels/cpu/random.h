// Random fills on the CPU. The destination is a strided box of a logical
// row-major tensor; every element gets the value that dtr/kernels/philox.h assigns
// to its logical linear index, so any box (a rank's shard, a column block, the
// whole tensor) receives exactly what a fill of the whole logical tensor puts
// there. Large fills run on the kernel thread pool; values never depend on the
// thread count. bf16 and f16 compute like float and round once on store.
//
// Preconditions (the caller checks them): the box lies inside the logical shape, no
// two destination elements share memory, lo <= hi (both within T's finite range),
// std >= 0, a < b, and all parameters are finite except that a and b may be infinite.
#pragma once

#include "dtr/kernels/philox.h"

#include <cstdint>

namespace dtr::kernels::cpu {

// dst has `ndim` dims of `sizes` with element strides `dst_strides`; its element
// (j_0, ..., j_{ndim-1}) is element (box_offset[d] + j_d) of a row-major tensor of
// `logical_shape`, whose linear index picks the random number.
struct LogicalBox {
  int ndim = 0;
  const int64_t* sizes = nullptr;
  const int64_t* dst_strides = nullptr;
  const int64_t* logical_shape = nullptr;
  const int64_t* box_offset = nullptr;
};

// lo + (hi - lo) * uniform_float(i) in float (uniform_double(i) in double for T = double),
// rounded to T. Values lie in [T(lo), T(hi)): a value that rounding lifts to T(hi)
// becomes the largest T below it. When T(lo) == T(hi) every value is T(lo).
template <class T>
void uniform(T* dst, const LogicalBox& box, PhiloxStream stream, double lo, double hi);

// mean + std * normal_float(i) in float (normal_double(i) in double for T = double),
// rounded to T.
template <class T>
void normal(T* dst, const LogicalBox& box, PhiloxStream stream, double mean, double std);

// The normal(mean, std) distribution truncated to [a, b], by inverse CDF, in double for
// every T: with alpha = (a - mean) / std, beta = (b - mean) / std and Phi the standard
// normal CDF (0.5 * erfc(-x / sqrt 2)),
//   z = ndtri(Phi(alpha) + uniform_double(i) * (Phi(beta) - Phi(alpha))) clamped to [alpha, beta],
//   value = mean + std * z clamped to [a, b], then rounded once (correctly) to T.
// When alpha > 0 the mirrored interval [-beta, -alpha] is sampled and z negated, so that
// Phi is evaluated where it is small and accurate. An interval too far in the tail for
// double to hold any mass (about 37 std away) gives its bound nearest the mean; std == 0
// gives mean clamped to [a, b].
template <class T>
void trunc_normal(T* dst, const LogicalBox& box, PhiloxStream stream, double mean, double std,
                  double a, double b);

}  // namespace dtr::kernels::cpu
