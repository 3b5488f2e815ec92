#include "dtr/kernels/cuda/random.h"

#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/kernels/cuda/ieee_ops.cuh"
#include "dtr/kernels/cuda/strided_indexer.cuh"
#include "dtr/kernels/scalar_types.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace dtr::kernels::cuda {

namespace {

constexpr int kThreads = 256;

// The type a fill computes in before rounding to T: double for double, float otherwise.
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// std::clamp's semantics (a NaN v stays NaN).
__device__ inline double clamp_d(double v, double lo, double hi) {
  return v < lo ? lo : (hi < v ? hi : v);
}

// lo + (hi - lo) * u rounded to T, kept below hi (dtr/kernels/cpu/random.h). The T
// values hi and top travel as their exact values in C.
template <class T>
struct UniformFn {
  using C = compute_t<T>;
  C lo, span, hi, top;
  bool half_open;

  __device__ T operator()(PhiloxStream s, uint64_t i) const {
    C u;
    if constexpr (std::is_same_v<C, double>) {
      u = uniform_double(s, i);
    } else {
      u = uniform_float(s, i);
    }
    const T v = convert<T>(add_rn(lo, mul_rn(span, u)));
    return half_open && !(convert<C>(v) < hi) ? convert<T>(top) : v;
  }
};

template <class T>
struct NormalFn {
  using C = compute_t<T>;
  C mean, std;

  __device__ T operator()(PhiloxStream s, uint64_t i) const {
    C z;
    if constexpr (std::is_same_v<C, double>) {
      z = normal_double(s, i);
    } else {
      z = normal_float(s, i);
    }
    return convert<T>(add_rn(mean, mul_rn(std, z)));
  }
};

// Inverse-CDF truncated normal (dtr/kernels/cpu/random.h), or `constant` when the
// interval holds no mass double can resolve (or std == 0).
template <class T>
struct TruncNormalFn {
  double alpha, beta, p_lo, p_span, mean, std, a, b, constant;
  bool flip, is_constant;

  __device__ T operator()(PhiloxStream s, uint64_t i) const {
    if (is_constant) return convert<T>(constant);
    constexpr double kMinP = std::numeric_limits<double>::min(), kMaxP = 1.0 - 0x1p-53;
    const double p = clamp_d(add_rn(p_lo, mul_rn(uniform_double(s, i), p_span)), kMinP, kMaxP);
    const double z = clamp_d(normcdfinv(p), alpha, beta);
    return convert<T>(clamp_d(add_rn(mean, mul_rn(std, flip ? -z : z)), a, b));
  }
};

// dst at box element j = fn(stream, logical index of j).
template <class T, class Fn>
__global__ void __launch_bounds__(kThreads)
    fill_kernel(T* dst, StridedIndexer<2> ix, uint64_t base, PhiloxStream stream, Fn fn) {
  for (int64_t j = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; j < ix.numel;
       j += int64_t{gridDim.x} * blockDim.x) {
    int64_t off[2];
    ix.offsets(j, off);
    dst[off[0]] = fn(stream, base + static_cast<uint64_t>(off[1]));
  }
}

template <class T, class Fn>
void launch_fill(T* dst, const LogicalBox& box, PhiloxStream stream, const Fn& fn,
                 cudaStream_t cuda_stream) {
  int64_t numel = 1;
  for (int d = 0; d < box.ndim; ++d) numel *= box.sizes[d];
  if (numel == 0) return;
  DTR_CUDA_KERNEL_CHECK(dst != nullptr, "CUDA random fill: the destination must not be null");
  // The logical tensor's row-major strides and the box start's linear index, as on the CPU.
  std::vector<int64_t> logical_strides(static_cast<size_t>(box.ndim));
  int64_t stride = 1, base = 0;
  for (int d = box.ndim - 1; d >= 0; --d) {
    logical_strides[d] = stride;
    base += box.box_offset[d] * stride;
    stride *= std::max<int64_t>(box.logical_shape[d], 1);
  }
  const auto ix = StridedIndexer<2>::make(box.ndim, box.sizes, {box.dst_strides, logical_strides.data()});
  fill_kernel<T, Fn><<<grid_for(ix.numel, kThreads), kThreads, 0, cuda_stream>>>(
      dst, ix, static_cast<uint64_t>(base), stream, fn);
  DTR_CUDA_CHECK_LAUNCH();
}

// The largest T below x (x finite), on the host, as the CPU kernels compute it.
template <class T>
T next_below(T x) {
  if constexpr (is_half_v<T>) {
    uint16_t bits;
    std::memcpy(&bits, &x, sizeof(bits));
    bits = (bits & 0x7FFF) == 0 ? uint16_t{0x8001}
                                : static_cast<uint16_t>(bits & 0x8000 ? bits + 1 : bits - 1);
    T out;
    std::memcpy(&out, &bits, sizeof(bits));
    return out;
  } else {
    return std::nextafter(x, -std::numeric_limits<T>::infinity());
  }
}

double normal_cdf(double x) { return 0.5 * std::erfc(-x * 0.70710678118654752440); }

}  // namespace

template <class T>
void uniform(T* dst, const LogicalBox& box, PhiloxStream stream, double lo, double hi,
             cudaStream_t cuda_stream) {
  using C = compute_t<T>;
  const C lo_c = static_cast<C>(lo), span = static_cast<C>(hi) - lo_c;
  const T lo_t = convert<T>(lo_c), hi_t = convert<T>(static_cast<C>(hi));
  const bool half_open = convert<C>(lo_t) < convert<C>(hi_t);
  const T top = half_open ? next_below(hi_t) : lo_t;
  launch_fill(dst, box, stream,
              UniformFn<T>{lo_c, span, convert<C>(hi_t), convert<C>(top), half_open}, cuda_stream);
}

template <class T>
void normal(T* dst, const LogicalBox& box, PhiloxStream stream, double mean, double std,
            cudaStream_t cuda_stream) {
  using C = compute_t<T>;
  launch_fill(dst, box, stream, NormalFn<T>{static_cast<C>(mean), static_cast<C>(std)},
              cuda_stream);
}

template <class T>
void trunc_normal(T* dst, const LogicalBox& box, PhiloxStream stream, double mean, double std,
                  double a, double b, cudaStream_t cuda_stream) {
  double alpha = 0, beta = 0, p_lo = 0, p_hi = 0;
  bool flip = false;
  if (std > 0) {
    alpha = (a - mean) / std;
    beta = (b - mean) / std;
    flip = alpha > 0;
    if (flip) {
      const double lower = -beta;
      beta = -alpha;
      alpha = lower;
    }
    p_lo = normal_cdf(alpha);
    p_hi = normal_cdf(beta);
  }
  const bool is_constant = !(p_hi > p_lo);
  launch_fill(dst, box, stream,
              TruncNormalFn<T>{alpha, beta, p_lo, p_hi - p_lo, mean, std, a, b,
                               std::clamp(mean, a, b), flip, is_constant},
              cuda_stream);
}

#define DTR_INSTANTIATE_CUDA_RANDOM(T)                                                        \
  template void uniform<T>(T*, const LogicalBox&, PhiloxStream, double, double, cudaStream_t); \
  template void normal<T>(T*, const LogicalBox&, PhiloxStream, double, double, cudaStream_t);  \
  template void trunc_normal<T>(T*, const LogicalBox&, PhiloxStream, double, double, double,   \
                                double, cudaStream_t);
DTR_FOR_EACH_FLOATING(DTR_INSTANTIATE_CUDA_RANDOM)

}  // namespace dtr::kernels::cuda
