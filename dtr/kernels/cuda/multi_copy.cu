#include "dtr/kernels/cuda/multi_copy.h"

#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/kernels/cuda/multi_tensor.cuh"
#include "dtr/kernels/scalar_types.h"

#include <string>
#include <type_traits>
#include <vector>

namespace dtr::kernels::cuda {

namespace {

constexpr int kThreads = 256;

// An unsigned integer of N bytes: same-dtype copies move bits.
template <size_t N>
struct BitsOf;
template <>
struct BitsOf<1> {
  using type = uint8_t;
};
template <>
struct BitsOf<2> {
  using type = uint16_t;
};
template <>
struct BitsOf<4> {
  using type = uint32_t;
};
template <>
struct BitsOf<8> {
  using type = uint64_t;
};

// One item of a launch, with its row count in chunks.
struct CopyItem {
  const void* src;
  void* dst;
  int64_t rows;
  int64_t cols;
  int64_t src_row_stride;
  int64_t dst_row_stride;
  int64_t chunks_per_row;
};

template <class From, class To>
inline constexpr int kCopyVec = 16 / static_cast<int>(sizeof(From) > sizeof(To) ? sizeof(From) : sizeof(To));
static_assert(kMultiCopyChunk % (kThreads * 16) == 0, "a chunk is whole block-wide vector rows");

template <class From, class To>
__device__ inline To convert_element(From x) {
  if constexpr (std::is_same_v<From, To>) {
    return x;
  } else {
    return convert<To>(x);
  }
}

template <class From, class To>
__global__ void __launch_bounds__(kThreads) multi_copy_kernel(const __grid_constant__ MultiTensorBatch<CopyItem> batch) {
  constexpr int V = kCopyVec<From, To>;
  int64_t first_chunk = 0;
  const int64_t chunk = blockIdx.x;
  const CopyItem& t = batch.items[batch_item_of(batch, chunk, &first_chunk)];
  const int64_t local = chunk - first_chunk;
  const int64_t row = local / t.chunks_per_row;
  const int64_t begin = (local - row * t.chunks_per_row) * kMultiCopyChunk;
  const int64_t end = begin + kMultiCopyChunk < t.cols ? begin + kMultiCopyChunk : t.cols;
  To* __restrict__ dst = static_cast<To*>(t.dst) + row * t.dst_row_stride;
  if (t.src == nullptr) {
    const To zero = convert<To>(0.0f);
    int64_t scalar_begin = begin;
    if (is_aligned_to(dst, V * sizeof(To))) {
      Pack<To, V> z;
#pragma unroll
      for (int k = 0; k < V; ++k) z.v[k] = zero;
      const int64_t vec_end = begin + (end - begin) / V * V;
      for (int64_t i = begin + int64_t{threadIdx.x} * V; i < vec_end; i += int64_t{kThreads} * V) {
        store_pack<To, V>(dst + i, z);
      }
      scalar_begin = vec_end;
    }
    for (int64_t i = scalar_begin + threadIdx.x; i < end; i += kThreads) dst[i] = zero;
    return;
  }
  const From* __restrict__ src = static_cast<const From*>(t.src) + row * t.src_row_stride;
  int64_t scalar_begin = begin;
  if (is_aligned_to(src, V * sizeof(From)) && is_aligned_to(dst, V * sizeof(To))) {
    const int64_t vec_end = begin + (end - begin) / V * V;
    for (int64_t i = begin + int64_t{threadIdx.x} * V; i < vec_end; i += int64_t{kThreads} * V) {
      const Pack<From, V> in = load_pack<From, V>(src + i);
      Pack<To, V> out;
#pragma unroll
      for (int k = 0; k < V; ++k) out.v[k] = convert_element<From, To>(in.v[k]);
      store_pack<To, V>(dst + i, out);
    }
    scalar_begin = vec_end;
  }
  for (int64_t i = scalar_begin + threadIdx.x; i < end; i += kThreads) dst[i] = convert_element<From, To>(src[i]);
}

template <class From, class To>
void launch_multi_copy(const MultiCopyItem* items, size_t count, cudaStream_t stream) {
  std::vector<CopyItem> work;
  work.reserve(count);
  for (size_t k = 0; k < count; ++k) {
    const MultiCopyItem& it = items[k];
    DTR_CUDA_KERNEL_CHECK(it.rows >= 0 && it.cols >= 0,
                          "cuda multi_copy: item " + std::to_string(k) + " is " + std::to_string(it.rows) + " x " +
                              std::to_string(it.cols));
    if (it.rows == 0 || it.cols == 0) continue;
    DTR_CUDA_KERNEL_CHECK(it.dst != nullptr, "cuda multi_copy: item " + std::to_string(k) + " has a null destination");
    work.push_back({.src = it.src,
                    .dst = it.dst,
                    .rows = it.rows,
                    .cols = it.cols,
                    .src_row_stride = it.src_row_stride,
                    .dst_row_stride = it.dst_row_stride,
                    .chunks_per_row = ceil_div(it.cols, kMultiCopyChunk)});
  }
  for_each_batch(
      work.data(), work.size(), [](const CopyItem& t) { return t.rows * t.chunks_per_row; },
      [&](const MultiTensorBatch<CopyItem>& batch, int64_t chunks) {
        multi_copy_kernel<From, To><<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(batch);
        DTR_CUDA_CHECK_LAUNCH();
      });
}

}  // namespace

template <class From, class To>
void multi_copy(const MultiCopyItem* items, size_t count, cudaStream_t stream) {
  if constexpr (std::is_same_v<From, To>) {
    using Bits = typename BitsOf<sizeof(To)>::type;
    launch_multi_copy<Bits, Bits>(items, count, stream);
  } else {
    launch_multi_copy<From, To>(items, count, stream);
  }
}

#define DTR_INSTANTIATE_MULTI_COPY(From, To) \
  template void multi_copy<From, To>(const MultiCopyItem*, size_t, cudaStream_t);
#define DTR_INSTANTIATE_MULTI_COPY_SAME(T) DTR_INSTANTIATE_MULTI_COPY(T, T)
DTR_FOR_EACH_SCALAR(DTR_INSTANTIATE_MULTI_COPY_SAME)
DTR_INSTANTIATE_MULTI_COPY(float, double)
DTR_INSTANTIATE_MULTI_COPY(float, bf16)
DTR_INSTANTIATE_MULTI_COPY(float, f16)
DTR_INSTANTIATE_MULTI_COPY(double, float)
DTR_INSTANTIATE_MULTI_COPY(double, bf16)
DTR_INSTANTIATE_MULTI_COPY(double, f16)
DTR_INSTANTIATE_MULTI_COPY(bf16, float)
DTR_INSTANTIATE_MULTI_COPY(bf16, double)
DTR_INSTANTIATE_MULTI_COPY(bf16, f16)
DTR_INSTANTIATE_MULTI_COPY(f16, float)
DTR_INSTANTIATE_MULTI_COPY(f16, double)
DTR_INSTANTIATE_MULTI_COPY(f16, bf16)

}  // namespace dtr::kernels::cuda
