#include "dtr/kernels/cuda/grad_norm.h"

#include "dtr/kernels/cuda/block_reduce.cuh"
#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/kernels/cuda/multi_tensor.cuh"
#include "dtr/kernels/scalar_types.h"

#include <cmath>
#include <string>
#include <vector>

namespace dtr::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kFoldThreads = 1024;
constexpr int64_t kScaleChunk = 8192;
static_assert(kNormChunk % (kThreads * 16) == 0, "a norm chunk is whole vectors of every dtype");

enum class Kind { two, one, inf, other };

Kind kind_of(double norm_type) {
  DTR_CUDA_KERNEL_CHECK(norm_type > 0.0 && !std::isnan(norm_type),
                        "cuda grad norm: norm_type must be > 0 or inf, got " + std::to_string(norm_type));
  if (std::isinf(norm_type)) return Kind::inf;
  if (norm_type == 2.0) return Kind::two;
  if (norm_type == 1.0) return Kind::one;
  return Kind::other;
}

// The maximum of two values, NaN if either is NaN.
__device__ inline double nan_max(double a, double b) { return (b > a || b != b) ? b : a; }

template <Kind kind>
struct Combine {
  __device__ double operator()(double a, double b) const {
    if constexpr (kind == Kind::inf) {
      return nan_max(a, b);
    } else {
      return a + b;
    }
  }
};

// What element x (widened to double) adds to an accumulator.
template <Kind kind>
__device__ inline double accumulate(double acc, double x, double p) {
  if constexpr (kind == Kind::two) {
    return acc + x * x;
  } else if constexpr (kind == Kind::one) {
    return acc + fabs(x);
  } else if constexpr (kind == Kind::inf) {
    return nan_max(acc, fabs(x));
  } else {
    return acc + pow(fabs(x), p);
  }
}

template <class T>
struct NormItem {
  const T* data;
  int64_t numel;
};

template <class T, Kind kind>
__global__ void __launch_bounds__(kThreads)
    norm_partials_kernel(const __grid_constant__ MultiTensorBatch<NormItem<T>> batch, double p,
                         double* __restrict__ partials) {
  int64_t first_chunk = 0;
  const int64_t chunk = blockIdx.x;
  const NormItem<T>& t = batch.items[batch_item_of(batch, chunk, &first_chunk)];
  const int64_t begin = (chunk - first_chunk) * kNormChunk;
  const int64_t len = t.numel - begin < kNormChunk ? t.numel - begin : kNormChunk;
  const T* base = t.data + begin;
  const bool aligned = is_aligned16(base);
  const T zero = convert<T>(0.0f);  // pads the last vector: adds exactly nothing
  const int64_t vectors = (len + kVec<T> - 1) / kVec<T>;
  double acc = 0.0;
  for (int64_t vi = threadIdx.x; vi < vectors; vi += kThreads) {
    const Vec<T> v = load_vec_checked(base, len, vi * kVec<T>, aligned, zero);
#pragma unroll
    for (int k = 0; k < kVec<T>; ++k) acc = accumulate<kind>(acc, convert<double>(v.get(k)), p);
  }
  const double total = block_allreduce(acc, Combine<kind>());
  if (threadIdx.x == 0) partials[chunk] = total;
}

template <Kind kind>
__global__ void __launch_bounds__(kFoldThreads)
    norm_fold_kernel(const double* __restrict__ partials, int64_t n, bool accumulate_into, double* out) {
  const Combine<kind> combine;
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kFoldThreads) acc = combine(acc, partials[i]);
  const double total = block_allreduce(acc, combine);
  if (threadIdx.x == 0) *out = accumulate_into ? combine(*out, total) : total;
}

__global__ void clip_coefficient_kernel(const double* pow_sum, double norm_type, double max_norm, double* norm,
                                        double* coef) {
  const double s = *pow_sum;
  double n;
  if (isinf(norm_type) || norm_type == 1.0) {
    n = s;
  } else if (norm_type == 2.0) {
    n = sqrt(s);
  } else {
    n = pow(s, 1.0 / norm_type);
  }
  *norm = n;
  *coef = (isfinite(n) && n > max_norm) ? max_norm / (n + 1e-6) : 1.0;
}

template <class T>
struct ScaleItem {
  T* data;
  int64_t numel;
  int vectorized;  // data 16-byte aligned
};

template <class T>
__global__ void __launch_bounds__(kThreads)
    scale_kernel(const __grid_constant__ MultiTensorBatch<ScaleItem<T>> batch, const double* coef_device,
                 double coef_value) {
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  const double coef = coef_device != nullptr ? *coef_device : coef_value;
  if (coef == 1.0) return;
  using A = acc_t<T>;
  const A c = convert<A>(convert<T>(coef));  // the Scalar is rounded to T first, like mul_
  int64_t first_chunk = 0;
  const int64_t chunk = blockIdx.x;
  const ScaleItem<T>& t = batch.items[batch_item_of(batch, chunk, &first_chunk)];
  const int64_t begin = (chunk - first_chunk) * kScaleChunk;
  const int64_t end = begin + kScaleChunk < t.numel ? begin + kScaleChunk : t.numel;
  T* __restrict__ data = t.data;
  int64_t scalar_begin = begin;
  if (t.vectorized) {
    const int64_t vec_end = begin + (end - begin) / V * V;
    for (int64_t i = begin + int64_t{threadIdx.x} * V; i < vec_end; i += int64_t{kThreads} * V) {
      Pack<T, V> x = load_pack<T, V>(data + i);
#pragma unroll
      for (int k = 0; k < V; ++k) x.v[k] = convert<T>(convert<A>(x.v[k]) * c);
      store_pack<T, V>(data + i, x);
    }
    scalar_begin = vec_end;
  }
  for (int64_t i = scalar_begin + threadIdx.x; i < end; i += kThreads) {
    data[i] = convert<T>(convert<A>(data[i]) * c);
  }
}

template <class T, Kind kind>
void launch_partials(const std::vector<NormItem<T>>& items, double p, double* partials, cudaStream_t stream) {
  int64_t offset = 0;
  for_each_batch(
      items.data(), items.size(), [](const NormItem<T>& t) { return norm_pow_partial_count(t.numel); },
      [&](const MultiTensorBatch<NormItem<T>>& batch, int64_t chunks) {
        norm_partials_kernel<T, kind><<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(batch, p,
                                                                                               partials + offset);
        DTR_CUDA_CHECK_LAUNCH();
        offset += chunks;
      });
}

}  // namespace

template <class T>
void norm_pow_partials(const NormTensor<T>* tensors, size_t count, double norm_type, double* partials,
                       cudaStream_t stream) {
  const Kind kind = kind_of(norm_type);
  std::vector<NormItem<T>> items;
  items.reserve(count);
  for (size_t k = 0; k < count; ++k) {
    DTR_CUDA_KERNEL_CHECK(tensors[k].numel >= 0 && (tensors[k].numel == 0 || tensors[k].data != nullptr),
                          "cuda grad norm: tensor " + std::to_string(k) + " has numel " +
                              std::to_string(tensors[k].numel) + " and a null pointer");
    items.push_back({tensors[k].data, tensors[k].numel});
  }
  switch (kind) {
    case Kind::two: return launch_partials<T, Kind::two>(items, norm_type, partials, stream);
    case Kind::one: return launch_partials<T, Kind::one>(items, norm_type, partials, stream);
    case Kind::inf: return launch_partials<T, Kind::inf>(items, norm_type, partials, stream);
    case Kind::other: return launch_partials<T, Kind::other>(items, norm_type, partials, stream);
  }
}

void norm_pow_fold(const double* partials, int64_t n, double norm_type, bool accumulate, double* out,
                   cudaStream_t stream) {
  DTR_CUDA_KERNEL_CHECK(n >= 0, "cuda grad norm: negative partial count " + std::to_string(n));
  if (kind_of(norm_type) == Kind::inf) {
    norm_fold_kernel<Kind::inf><<<1, kFoldThreads, 0, stream>>>(partials, n, accumulate, out);
  } else {
    norm_fold_kernel<Kind::two><<<1, kFoldThreads, 0, stream>>>(partials, n, accumulate, out);  // a plain sum
  }
  DTR_CUDA_CHECK_LAUNCH();
}

void clip_coefficient(const double* pow_sum, double norm_type, double max_norm, double* norm, double* coef,
                      cudaStream_t stream) {
  kind_of(norm_type);  // checks it
  clip_coefficient_kernel<<<1, 1, 0, stream>>>(pow_sum, norm_type, max_norm, norm, coef);
  DTR_CUDA_CHECK_LAUNCH();
}

template <class T>
void scale(const ScaleTensor<T>* tensors, size_t count, const double* coef_device, double coef_value,
           cudaStream_t stream) {
  if (coef_device == nullptr && coef_value == 1.0) return;
  std::vector<ScaleItem<T>> items;
  items.reserve(count);
  for (size_t k = 0; k < count; ++k) {
    DTR_CUDA_KERNEL_CHECK(tensors[k].numel >= 0 && (tensors[k].numel == 0 || tensors[k].data != nullptr),
                          "cuda scale: tensor " + std::to_string(k) + " has numel " +
                              std::to_string(tensors[k].numel) + " and a null pointer");
    items.push_back({tensors[k].data, tensors[k].numel, is_aligned16(tensors[k].data) ? 1 : 0});
  }
  for_each_batch(
      items.data(), items.size(), [](const ScaleItem<T>& t) { return ceil_div(t.numel, kScaleChunk); },
      [&](const MultiTensorBatch<ScaleItem<T>>& batch, int64_t chunks) {
        scale_kernel<T><<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(batch, coef_device, coef_value);
        DTR_CUDA_CHECK_LAUNCH();
      });
}

#define DTR_INSTANTIATE_GRAD_NORM(T)                                                                   \
  template void norm_pow_partials<T>(const NormTensor<T>*, size_t, double, double*, cudaStream_t); \
  template void scale<T>(const ScaleTensor<T>*, size_t, const double*, double, cudaStream_t);
DTR_FOR_EACH_FLOATING(DTR_INSTANTIATE_GRAD_NORM)

}  // namespace dtr::kernels::cuda
