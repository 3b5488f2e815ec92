#include "dtr/kernels/cuda/adamw.h"

#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/kernels/cuda/ieee_ops.cuh"
#include "dtr/kernels/cuda/multi_tensor.cuh"
#include "dtr/kernels/scalar_types.h"

#include <string>
#include <vector>

namespace dtr::kernels::cuda {

namespace {

constexpr int kThreads = 256;
// Parameter elements per 16-byte vector.
template <class T>
inline constexpr int kAdamWVec = 16 / static_cast<int>(sizeof(T));
static_assert(kAdamWChunk % (kThreads * kAdamWVec<float>) == 0, "a chunk is whole block-wide vector rows");

// One tensor of a launch.
template <class T, class G>
struct AdamWItem {
  T* param;
  const G* grad;
  T* exp_avg;
  T* exp_avg_sq;
  int64_t numel;
  cpu::AdamWCoeffs<T> c;
  int vectorized;  // every array aligned for kAdamWVec<T>-element accesses
};

// The update of one element, in the CPU kernel's order of operations.
template <class T>
__device__ inline void adamw_element(T& p, T g, T& m, T& v, const cpu::AdamWCoeffs<T>& c) {
  const T mi = add_rn(mul_rn(m, c.beta1), mul_rn(c.one_minus_beta1, g));
  const T vi = add_rn(mul_rn(v, c.beta2), mul_rn(c.one_minus_beta2, mul_rn(g, g)));
  const T denom = add_rn(div_rn(sqrt_rn(vi), c.bias_correction2_sqrt), c.eps);
  p = add_rn(mul_rn(p, c.decay), mul_rn(c.step_size, div_rn(mi, denom)));
  m = mi;
  v = vi;
}

template <class T, class G>
__global__ void __launch_bounds__(kThreads)
    adamw_kernel(const __grid_constant__ MultiTensorBatch<AdamWItem<T, G>> batch) {
  constexpr int V = kAdamWVec<T>;
  int64_t first_chunk = 0;
  const int64_t chunk = blockIdx.x;
  const AdamWItem<T, G>& t = batch.items[batch_item_of(batch, chunk, &first_chunk)];
  const cpu::AdamWCoeffs<T> c = t.c;
  const int64_t begin = (chunk - first_chunk) * kAdamWChunk;
  const int64_t end = begin + kAdamWChunk < t.numel ? begin + kAdamWChunk : t.numel;
  T* __restrict__ param = t.param;
  const G* __restrict__ grad = t.grad;
  T* __restrict__ exp_avg = t.exp_avg;
  T* __restrict__ exp_avg_sq = t.exp_avg_sq;
  int64_t scalar_begin = begin;
  if (t.vectorized) {
    const int64_t vec_end = begin + (end - begin) / V * V;
    for (int64_t i = begin + int64_t{threadIdx.x} * V; i < vec_end; i += int64_t{kThreads} * V) {
      Pack<T, V> p = load_pack<T, V>(param + i);
      Pack<T, V> m = load_pack<T, V>(exp_avg + i);
      Pack<T, V> v = load_pack<T, V>(exp_avg_sq + i);
      const Pack<G, V> g = load_pack<G, V>(grad + i);
#pragma unroll
      for (int k = 0; k < V; ++k) adamw_element<T>(p.v[k], convert<T>(g.v[k]), m.v[k], v.v[k], c);
      store_pack<T, V>(param + i, p);
      store_pack<T, V>(exp_avg + i, m);
      store_pack<T, V>(exp_avg_sq + i, v);
    }
    scalar_begin = vec_end;
  }
  for (int64_t i = scalar_begin + threadIdx.x; i < end; i += kThreads) {
    T p = param[i], m = exp_avg[i], v = exp_avg_sq[i];
    adamw_element<T>(p, convert<T>(grad[i]), m, v, c);
    param[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
  }
}

}  // namespace

template <class T, class G>
void adamw(const AdamWTensor<T, G>* tensors, size_t count, const AdamWHyper& hyper,
           cudaStream_t stream) {
  constexpr int V = kAdamWVec<T>;
  std::vector<AdamWItem<T, G>> items;
  items.reserve(count);
  for (size_t k = 0; k < count; ++k) {
    const AdamWTensor<T, G>& t = tensors[k];
    DTR_CUDA_KERNEL_CHECK(t.numel >= 0 && t.step >= 1,
                          "cuda adamw: tensor " + std::to_string(k) + " has numel " +
                              std::to_string(t.numel) + " and step " + std::to_string(t.step) +
                              " (need numel >= 0, step >= 1)");
    if (t.numel == 0) continue;
    DTR_CUDA_KERNEL_CHECK(t.param && t.grad && t.exp_avg && t.exp_avg_sq,
                          "cuda adamw: tensor " + std::to_string(k) + " has a null array");
    const bool vectorized = is_aligned_to(t.param, V * sizeof(T)) && is_aligned_to(t.exp_avg, V * sizeof(T)) &&
                            is_aligned_to(t.exp_avg_sq, V * sizeof(T)) && is_aligned_to(t.grad, V * sizeof(G));
    items.push_back({.param = t.param,
                     .grad = t.grad,
                     .exp_avg = t.exp_avg,
                     .exp_avg_sq = t.exp_avg_sq,
                     .numel = t.numel,
                     .c = cpu::adamw_coeffs<T>(hyper, t.step),
                     .vectorized = vectorized ? 1 : 0});
  }
  for_each_batch(
      items.data(), items.size(), [](const AdamWItem<T, G>& t) { return ceil_div(t.numel, kAdamWChunk); },
      [&](const MultiTensorBatch<AdamWItem<T, G>>& batch, int64_t chunks) {
        adamw_kernel<T, G><<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(batch);
        DTR_CUDA_CHECK_LAUNCH();
      });
}

template void adamw<float, float>(const AdamWTensor<float, float>*, size_t, const AdamWHyper&, cudaStream_t);
template void adamw<float, bf16>(const AdamWTensor<float, bf16>*, size_t, const AdamWHyper&, cudaStream_t);
template void adamw<float, f16>(const AdamWTensor<float, f16>*, size_t, const AdamWHyper&, cudaStream_t);
template void adamw<double, double>(const AdamWTensor<double, double>*, size_t, const AdamWHyper&,
                                    cudaStream_t);

}  // namespace dtr::kernels::cuda
