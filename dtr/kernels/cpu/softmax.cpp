#include "dtr/kernels/cpu/softmax.h"

#include "dtr/kernels/cpu/parallel.h"
#include "dtr/kernels/scalar_types.h"

#include <cmath>
#include <limits>

namespace dtr::kernels::cpu::DTR_CPU_LEVEL {

namespace {

enum class SoftmaxKind { softmax, log_softmax };

template <class T>
using Row = Eigen::Array<T, Eigen::Dynamic, 1>;

// One row. `scratch` (n elements of acc_t<T>) holds the row in the accumulation
// type, so the input is converted once and exp() is evaluated once per element,
// vectorised by Eigen.
template <class T, SoftmaxKind kind>
void softmax_row(const T* in, int64_t n, T* out, Row<acc_t<T>>& scratch) {
  using Acc = acc_t<T>;
  scratch = Eigen::Map<const Row<T>>(in, n).template cast<Acc>();
  const Acc max = scratch.template maxCoeff<Eigen::PropagateNaN>();
  scratch -= max;
  Eigen::Map<Row<T>> dst(out, n);
  if constexpr (kind == SoftmaxKind::softmax) {
    scratch = scratch.exp();
    // Eigen's vectorised exp returns a tiny subnormal instead of 0 below
    // log(min normal), even for -inf; flush those so masked entries are exactly 0.
    constexpr Acc kMinNormal = std::numeric_limits<Acc>::min();
    for (int64_t i = 0; i < n; ++i) scratch[i] = scratch[i] < kMinNormal ? Acc(0) : scratch[i];
    const Acc inv = Acc(1) / scratch.sum();
    dst = (scratch * inv).template cast<T>();
  } else {
    // (x - max) - log(sum), not x - (max + log(sum)): the latter rounds log(sum)
    // to the ulp of max, which is coarse when max is large.
    const Acc log_sum = std::log(scratch.exp().sum());
    dst = (scratch - log_sum).template cast<T>();
  }
}

template <class T, SoftmaxKind kind>
void softmax_impl(const T* in, int64_t rows, int64_t cols, T* out) {
  if (rows <= 0 || cols <= 0) return;
  parallel_for(0, rows, (kParallelGrain + cols - 1) / cols, [&](int64_t lo, int64_t hi) {
    Row<acc_t<T>> scratch(cols);
    for (int64_t r = lo; r < hi; ++r) {
      softmax_row<T, kind>(in + r * cols, cols, out + r * cols, scratch);
    }
  });
}

}  // namespace

template <class T>
void softmax_rows(const T* in, int64_t rows, int64_t cols, T* out) {
  softmax_impl<T, SoftmaxKind::softmax>(in, rows, cols, out);
}

template <class T>
void log_softmax_rows(const T* in, int64_t rows, int64_t cols, T* out) {
  softmax_impl<T, SoftmaxKind::log_softmax>(in, rows, cols, out);
}

#define DTR_INSTANTIATE_SOFTMAX(T)                               \
  template void softmax_rows<T>(const T*, int64_t, int64_t, T*); \
  template void log_softmax_rows<T>(const T*, int64_t, int64_t, T*);
DTR_FOR_EACH_FLOATING(DTR_INSTANTIATE_SOFTMAX)

}  // namespace dtr::kernels::cpu::DTR_CPU_LEVEL
