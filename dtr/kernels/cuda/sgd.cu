#include "dtr/kernels/cuda/sgd.h"

#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/kernels/cuda/ieee_ops.cuh"
#include "dtr/kernels/cuda/multi_tensor.cuh"

#include <string>
#include <vector>

namespace dtr::kernels::cuda {

namespace {

constexpr int kThreads = 256;
// Parameter elements per 16-byte vector.
template <class T>
inline constexpr int kSGDVec = 16 / static_cast<int>(sizeof(T));
static_assert(kSGDChunk % (kThreads * kSGDVec<float>) == 0, "a chunk is whole block-wide vector rows");

// One tensor of a launch.
template <class T>
struct SGDItem {
  T* param;
  const T* grad;
  T* momentum_buffer;  // null without momentum
  int64_t numel;
  cpu::SGDCoeffs<T> c;
  int vectorized;  // every array aligned for kSGDVec<T>-element accesses
};

// The update of one element, in the CPU kernel's order of operations; `b` is the
// element's momentum buffer (untouched without momentum).
template <class T>
__device__ inline void sgd_element(T& p, T g, T& b, const cpu::SGDCoeffs<T>& c) {
  if (c.decay) g = add_rn(g, mul_rn(c.weight_decay, p));
  if (c.momentum_on) {
    b = c.first ? g : add_rn(mul_rn(b, c.momentum), mul_rn(c.one_minus_dampening, g));
    g = c.nesterov ? add_rn(g, mul_rn(c.momentum, b)) : b;
  }
  p = add_rn(p, mul_rn(c.neg_lr, g));
}

template <class T>
__global__ void __launch_bounds__(kThreads) sgd_kernel(const __grid_constant__ MultiTensorBatch<SGDItem<T>> batch) {
  constexpr int V = kSGDVec<T>;
  int64_t first_chunk = 0;
  const int64_t chunk = blockIdx.x;
  const SGDItem<T>& t = batch.items[batch_item_of(batch, chunk, &first_chunk)];
  const cpu::SGDCoeffs<T> c = t.c;
  const int64_t begin = (chunk - first_chunk) * kSGDChunk;
  const int64_t end = begin + kSGDChunk < t.numel ? begin + kSGDChunk : t.numel;
  T* __restrict__ param = t.param;
  const T* __restrict__ grad = t.grad;
  T* __restrict__ buffer = t.momentum_buffer;
  int64_t scalar_begin = begin;
  if (t.vectorized) {
    const int64_t vec_end = begin + (end - begin) / V * V;
    for (int64_t i = begin + int64_t{threadIdx.x} * V; i < vec_end; i += int64_t{kThreads} * V) {
      Pack<T, V> p = load_pack<T, V>(param + i);
      const Pack<T, V> g = load_pack<T, V>(grad + i);
      Pack<T, V> b{};
      if (c.momentum_on && !c.first) b = load_pack<T, V>(buffer + i);
#pragma unroll
      for (int k = 0; k < V; ++k) sgd_element<T>(p.v[k], g.v[k], b.v[k], c);
      store_pack<T, V>(param + i, p);
      if (c.momentum_on) store_pack<T, V>(buffer + i, b);
    }
    scalar_begin = vec_end;
  }
  for (int64_t i = scalar_begin + threadIdx.x; i < end; i += kThreads) {
    T p = param[i];
    T b = c.momentum_on && !c.first ? buffer[i] : T(0);
    sgd_element<T>(p, grad[i], b, c);
    param[i] = p;
    if (c.momentum_on) buffer[i] = b;
  }
}

}  // namespace

template <class T>
void sgd(const SGDTensor<T>* tensors, size_t count, const SGDHyper& hyper, cudaStream_t stream) {
  constexpr int V = kSGDVec<T>;
  const bool momentum = hyper.momentum != 0.0;
  std::vector<SGDItem<T>> items;
  items.reserve(count);
  for (size_t k = 0; k < count; ++k) {
    const SGDTensor<T>& t = tensors[k];
    DTR_CUDA_KERNEL_CHECK(t.numel >= 0 && t.step >= 1,
                          "cuda sgd: tensor " + std::to_string(k) + " has numel " + std::to_string(t.numel) +
                              " and step " + std::to_string(t.step) + " (need numel >= 0, step >= 1)");
    if (t.numel == 0) continue;
    DTR_CUDA_KERNEL_CHECK(t.param && t.grad && (!momentum || t.momentum_buffer),
                          "cuda sgd: tensor " + std::to_string(k) + " has a null array" +
                              (momentum ? " (with momentum it needs a momentum buffer)" : ""));
    const bool vectorized = is_aligned_to(t.param, V * sizeof(T)) && is_aligned_to(t.grad, V * sizeof(T)) &&
                            (!momentum || is_aligned_to(t.momentum_buffer, V * sizeof(T)));
    items.push_back({.param = t.param,
                     .grad = t.grad,
                     .momentum_buffer = momentum ? t.momentum_buffer : nullptr,
                     .numel = t.numel,
                     .c = cpu::sgd_coeffs<T>(hyper, t.step),
                     .vectorized = vectorized ? 1 : 0});
  }
  for_each_batch(
      items.data(), items.size(), [](const SGDItem<T>& t) { return ceil_div(t.numel, kSGDChunk); },
      [&](const MultiTensorBatch<SGDItem<T>>& batch, int64_t chunks) {
        sgd_kernel<T><<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(batch);
        DTR_CUDA_CHECK_LAUNCH();
      });
}

template void sgd<float>(const SGDTensor<float>*, size_t, const SGDHyper&, cudaStream_t);
template void sgd<double>(const SGDTensor<double>*, size_t, const SGDHyper&, cudaStream_t);

}  // namespace dtr::kernels::cuda
