#include "dtr/kernels/cpu/cross_entropy.h"

#include "dtr/kernels/cpu/parallel.h"

#include <algorithm>
#include <cmath>

namespace dtr::kernels::cpu::DTR_CPU_LEVEL {

namespace {

template <class T>
using Row = Eigen::Array<T, Eigen::Dynamic, 1>;

int64_t row_grain(int64_t cols) { return (kParallelGrain + cols - 1) / cols; }

}  // namespace

template <class T>
void cross_entropy_forward(const T* logits, const int64_t* targets, int64_t rows, int64_t cols,
                           int64_t ignore_index, double label_smoothing, acc_t<T>* loss,
                           acc_t<T>* row_max, acc_t<T>* row_log_sum) {
  using Acc = acc_t<T>;
  if (rows <= 0 || cols <= 0) return;
  const Acc eps = static_cast<Acc>(label_smoothing);
  const Acc n = static_cast<Acc>(cols);
  parallel_for(0, rows, row_grain(cols), [&](int64_t lo, int64_t hi) {
    Row<Acc> s(cols);
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t target = targets[r];
      if (target == ignore_index) {
        loss[r] = row_max[r] = row_log_sum[r] = Acc(0);
        continue;
      }
      s = Eigen::Map<const Row<T>>(logits + r * cols, cols).template cast<Acc>();
      const Acc max = s.template maxCoeff<Eigen::PropagateNaN>();
      s -= max;  // s_j = x_j - max
      const Acc log_sum = std::log(s.exp().sum());
      const Acc nll = log_sum - s[target];
      Acc l = nll;
      if (label_smoothing != 0.0) l = (Acc(1) - eps) * nll + eps * (log_sum - s.sum() / n);
      loss[r] = l;
      row_max[r] = max;
      row_log_sum[r] = log_sum;
    }
  });
}

template <class T>
void cross_entropy_backward(const T* logits, const int64_t* targets, const acc_t<T>* row_max,
                            const acc_t<T>* row_log_sum, int64_t rows, int64_t cols,
                            int64_t ignore_index, double label_smoothing, double scale,
                            T* dlogits) {
  using Acc = acc_t<T>;
  if (rows <= 0 || cols <= 0) return;
  const Acc eps = static_cast<Acc>(label_smoothing);
  const Acc uniform = eps / static_cast<Acc>(cols);
  const Acc k = static_cast<Acc>(scale);
  parallel_for(0, rows, row_grain(cols), [&](int64_t lo, int64_t hi) {
    Row<Acc> s(cols);
    for (int64_t r = lo; r < hi; ++r) {
      T* dst = dlogits + r * cols;
      const int64_t target = targets[r];
      if (target == ignore_index) {
        std::fill(dst, dst + cols, T(0));
        continue;
      }
      s = Eigen::Map<const Row<T>>(logits + r * cols, cols).template cast<Acc>();
      s = ((s - row_max[r]) - row_log_sum[r]).exp() - uniform;  // p_j - eps / cols
      s[target] -= Acc(1) - eps;
      Eigen::Map<Row<T>>(dst, cols) = (s * k).template cast<T>();
    }
  });
}

#define DTR_INSTANTIATE_CROSS_ENTROPY(T)                                                          \
  template void cross_entropy_forward<T>(const T*, const int64_t*, int64_t, int64_t, int64_t,     \
                                         double, acc_t<T>*, acc_t<T>*, acc_t<T>*);                \
  template void cross_entropy_backward<T>(const T*, const int64_t*, const acc_t<T>*,              \
                                          const acc_t<T>*, int64_t, int64_t, int64_t, double,     \
                                          double, T*);
DTR_FOR_EACH_FLOATING(DTR_INSTANTIATE_CROSS_ENTROPY)

}  // namespace dtr::kernels::cpu::DTR_CPU_LEVEL
