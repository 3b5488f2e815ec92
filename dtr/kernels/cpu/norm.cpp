#include "dtr/kernels/cpu/norm.h"

#include "dtr/kernels/cpu/parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace dtr::kernels::cpu::DTR_CPU_LEVEL {

namespace {

enum class NormKind { layer, rms };

template <class T>
using Row = Eigen::Array<T, Eigen::Dynamic, 1>;

// At most this many row blocks (and so dweight/dbias partial rows) in a backward.
constexpr int64_t kMaxNormBlocks = 64;

// A [cols] parameter in the accumulation type, or an empty row when absent.
template <class T>
Row<acc_t<T>> param_row(const T* p, int64_t cols) {
  if (p == nullptr) return {};
  return Eigen::Map<const Row<T>>(p, cols).template cast<acc_t<T>>();
}

template <class T, NormKind kind>
void norm_forward(const T* x, const T* weight, const T* bias, int64_t rows, int64_t cols,
                  double eps, T* y, acc_t<T>* mean, acc_t<T>* rstd) {
  using Acc = acc_t<T>;
  if (rows <= 0) return;
  if (cols <= 0) {
    for (int64_t r = 0; r < rows; ++r) {
      if (mean != nullptr) mean[r] = std::numeric_limits<Acc>::quiet_NaN();
      rstd[r] = std::numeric_limits<Acc>::quiet_NaN();
    }
    return;
  }
  const Row<Acc> w = param_row(weight, cols);
  const Row<Acc> b = param_row(bias, cols);
  const Acc n = static_cast<Acc>(cols);
  parallel_for(0, rows, (kParallelGrain + cols - 1) / cols, [&](int64_t lo, int64_t hi) {
    Row<Acc> s(cols);
    for (int64_t r = lo; r < hi; ++r) {
      s = Eigen::Map<const Row<T>>(x + r * cols, cols).template cast<Acc>();
      Acc mu = 0;
      if constexpr (kind == NormKind::layer) {
        mu = s.sum() / n;
        s -= mu;
      }
      const Acc rs = Acc(1) / std::sqrt(s.square().sum() / n + static_cast<Acc>(eps));
      s *= rs;
      if (weight != nullptr) s *= w;
      if (bias != nullptr) s += b;
      Eigen::Map<Row<T>>(y + r * cols, cols) = s.template cast<T>();
      if (mean != nullptr) mean[r] = mu;
      rstd[r] = rs;
    }
  });
}

// dweight/dbias[c] = sum over blocks, in block order, of parts[block * cols + c].
template <class T>
void combine_partials(const std::vector<acc_t<T>>& parts, int64_t blocks, int64_t cols, T* out) {
  parallel_for(0, cols, std::max<int64_t>(1, kParallelGrain / blocks), [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      acc_t<T> s = 0;
      for (int64_t b = 0; b < blocks; ++b) s += parts[b * cols + c];
      out[c] = convert<T>(s);
    }
  });
}

template <class T, NormKind kind>
void norm_backward(const T* dy, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd,
                   const T* weight, int64_t rows, int64_t cols, T* dx, T* dweight, T* dbias) {
  using Acc = acc_t<T>;
  if (cols <= 0) return;
  if (rows <= 0) {
    if (dweight != nullptr) std::fill(dweight, dweight + cols, T(0));
    if (dbias != nullptr) std::fill(dbias, dbias + cols, T(0));
    return;
  }
  // Blocks depend only on the problem size, so the partial sums (and their
  // order) are the same for every thread count.
  const int64_t wanted =
      std::min({std::max<int64_t>(1, rows * cols / kParallelGrain), kMaxNormBlocks, rows});
  const int64_t rows_per_block = (rows + wanted - 1) / wanted;
  const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  std::vector<Acc> dw_parts(dweight != nullptr ? blocks * cols : 0, Acc(0));
  std::vector<Acc> db_parts(dbias != nullptr ? blocks * cols : 0, Acc(0));
  const Row<Acc> w = param_row(weight, cols);
  const Acc n = static_cast<Acc>(cols);

  parallel_for(0, blocks, 1, [&](int64_t lo, int64_t hi) {
    Row<Acc> dyv(cols), xhat(cols), g(cols);
    for (int64_t blk = lo; blk < hi; ++blk) {
      const int64_t r_end = std::min(rows, (blk + 1) * rows_per_block);
      for (int64_t r = blk * rows_per_block; r < r_end; ++r) {
        dyv = Eigen::Map<const Row<T>>(dy + r * cols, cols).template cast<Acc>();
        xhat = Eigen::Map<const Row<T>>(x + r * cols, cols).template cast<Acc>();
        if constexpr (kind == NormKind::layer) xhat -= mean[r];
        xhat *= rstd[r];
        if (dx != nullptr) {
          if (weight != nullptr) {
            g = dyv * w;
          } else {
            g = dyv;
          }
          const Acc c2 = (g * xhat).sum() / n;
          Acc c1 = 0;
          if constexpr (kind == NormKind::layer) c1 = g.sum() / n;
          Eigen::Map<Row<T>>(dx + r * cols, cols) =
              (rstd[r] * (g - c1 - xhat * c2)).template cast<T>();
        }
        if (dweight != nullptr) {
          Eigen::Map<Row<Acc>>(dw_parts.data() + blk * cols, cols) += dyv * xhat;
        }
        if (dbias != nullptr) Eigen::Map<Row<Acc>>(db_parts.data() + blk * cols, cols) += dyv;
      }
    }
  });
  if (dweight != nullptr) combine_partials(dw_parts, blocks, cols, dweight);
  if (dbias != nullptr) combine_partials(db_parts, blocks, cols, dbias);
}

}  // namespace

template <class T>
void layer_norm_forward(const T* x, const T* weight, const T* bias, int64_t rows, int64_t cols,
                        double eps, T* y, acc_t<T>* mean, acc_t<T>* rstd) {
  norm_forward<T, NormKind::layer>(x, weight, bias, rows, cols, eps, y, mean, rstd);
}

template <class T>
void layer_norm_backward(const T* dy, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd,
                         const T* weight, int64_t rows, int64_t cols, T* dx, T* dweight, T* dbias) {
  norm_backward<T, NormKind::layer>(dy, x, mean, rstd, weight, rows, cols, dx, dweight, dbias);
}

template <class T>
void rms_norm_forward(const T* x, const T* weight, int64_t rows, int64_t cols, double eps, T* y,
                      acc_t<T>* rstd) {
  norm_forward<T, NormKind::rms>(x, weight, nullptr, rows, cols, eps, y, nullptr, rstd);
}

template <class T>
void rms_norm_backward(const T* dy, const T* x, const acc_t<T>* rstd, const T* weight,
                       int64_t rows, int64_t cols, T* dx, T* dweight) {
  norm_backward<T, NormKind::rms>(dy, x, nullptr, rstd, weight, rows, cols, dx, dweight, nullptr);
}

#define DTR_INSTANTIATE_NORM(T)                                                                  \
  template void layer_norm_forward<T>(const T*, const T*, const T*, int64_t, int64_t, double, T*, \
                                      acc_t<T>*, acc_t<T>*);                                     \
  template void layer_norm_backward<T>(const T*, const T*, const acc_t<T>*, const acc_t<T>*,     \
                                       const T*, int64_t, int64_t, T*, T*, T*);                  \
  template void rms_norm_forward<T>(const T*, const T*, int64_t, int64_t, double, T*, acc_t<T>*); \
  template void rms_norm_backward<T>(const T*, const T*, const acc_t<T>*, const T*, int64_t,     \
                                     int64_t, T*, T*);
DTR_FOR_EACH_FLOATING(DTR_INSTANTIATE_NORM)

}  // namespace dtr::kernels::cpu::DTR_CPU_LEVEL
