// Internal to the CUDA elementwise kernels: element storage types, and the launch of
// one per-element functor over strided operands (launch_map).
//
// Kernels never see Eigen's bf16/f16: launchers reinterpret them as Bf16Bits/F16Bits
// (the same 16 bits), and Elem<S> converts a stored value to the type math runs in
// and back. A functor takes and returns stored values; the wrappers in
// elementwise_functors.cuh do the conversions around the math.
//
// launch_map picks one of three kernels after merging dims (StridedIndexer):
//   - map_vec:    one run where each operand is contiguous (stride 1) or a broadcast
//                 scalar (stride 0) and every contiguous pointer is 16-byte aligned:
//                 each thread loads and stores N elements as 16-byte vectors (N set
//                 by the widest element type), the last n % N elements one by one;
//   - map_1d:     any other single run (misaligned views, strided slices): i * stride;
//   - map_nd:     everything else, through StridedIndexer::offsets.
// All three are grid-stride loops with 64-bit indices.
#pragma once

#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/kernels/cuda/strided_indexer.cuh"
#include "dtr/kernels/scalar_types.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <utility>

namespace dtr::kernels::cuda::detail {

inline constexpr int kThreads = 256;

// --- element storage ---

struct Bf16Bits {
  uint16_t bits;
};
struct F16Bits {
  uint16_t bits;
};

template <class T>
struct StorageOf {
  using type = T;
};
template <>
struct StorageOf<bf16> {
  using type = Bf16Bits;
};
template <>
struct StorageOf<f16> {
  using type = F16Bits;
};
// The type kernels read and write for element type T (same size and bits).
template <class T>
using storage_t = typename StorageOf<T>::type;

template <class T>
const storage_t<T>* as_storage(const T* p) {
  static_assert(sizeof(storage_t<T>) == sizeof(T));
  return reinterpret_cast<const storage_t<T>*>(p);
}
template <class T>
storage_t<T>* as_storage(T* p) {
  return reinterpret_cast<storage_t<T>*>(p);
}

// Elem<S>::load gives a stored value in the type math runs in; store rounds back once.
template <class S>
struct Elem {
  using math = S;
  __device__ static S load(S v) { return v; }
  __device__ static S store(S v) { return v; }
};

template <>
struct Elem<Bf16Bits> {
  using math = float;
  __device__ static float load(Bf16Bits v) {
    return __uint_as_float(static_cast<uint32_t>(v.bits) << 16);  // exact
  }
  // Round to nearest even; NaN becomes the quiet NaN of the same sign (bit-identical
  // to the CPU kernels' store and to Eigen's conversion).
  __device__ static Bf16Bits store(float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    return {float_to_bf16_bits(v)};
#else
    const uint32_t u = __float_as_uint(v);
    const auto rounded = static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    const auto nan = static_cast<uint16_t>(((u >> 16) & 0x8000u) | 0x7FC0u);
    return {(u & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded};
#endif
  }
};

template <>
struct Elem<F16Bits> {
  using math = float;
  __device__ static float load(F16Bits v) { return __half2float(__ushort_as_half(v.bits)); }
  __device__ static F16Bits store(float v) { return {__half_as_ushort(__float2half_rn(v))}; }
};

// --- vectors ---

template <int N, class S>
struct alignas(sizeof(S) * N) Vec {
  S v[N];
};

// Elements per thread in map_vec: 16 bytes of the widest operand.
template <class... S>
constexpr int vec_width() {
  return static_cast<int>(16 / std::max({sizeof(S)...}));
}

template <int N, class S>
bool vec_aligned(const S* p) {
  return reinterpret_cast<uintptr_t>(p) % (sizeof(S) * N) == 0;
}

// One input of a single run: element i is ptr[i * stride].
template <class S>
struct Run {
  const S* ptr;
  int64_t stride;
};

template <int N, class S>
__device__ Vec<N, S> load_vec(const Run<S>& x, int64_t base) {
  if (x.stride == 0) {
    Vec<N, S> r;
    const S s = *x.ptr;
#pragma unroll
    for (int j = 0; j < N; ++j) r.v[j] = s;
    return r;
  }
  return *reinterpret_cast<const Vec<N, S>*>(x.ptr + base);
}

template <int N, class F, class Out, class... In>
__device__ void apply_vec(const F& f, Vec<N, Out>& out, const Vec<N, In>&... in) {
#pragma unroll
  for (int j = 0; j < N; ++j) out.v[j] = f(in.v[j]...);
}

template <class F, class Out, class... In, size_t... I>
__device__ void apply_at(const F& f, Out* out, const int64_t* off, std::index_sequence<I...>,
                         const In*... in) {
  out[off[0]] = f(in[off[I + 1]]...);
}

// --- kernels ---

template <int N, class F, class Out, class... In>
__global__ void __launch_bounds__(kThreads)
    map_vec_kernel(F f, int64_t n, Out* out, Run<In>... in) {
  const int64_t nvec = n / N;
  const int64_t tid = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t step = int64_t{blockDim.x} * gridDim.x;
  for (int64_t v = tid; v < nvec; v += step) {
    const int64_t base = v * N;
    Vec<N, Out> o;
    apply_vec(f, o, load_vec<N>(in, base)...);
    *reinterpret_cast<Vec<N, Out>*>(out + base) = o;
  }
  const int64_t i = nvec * N + tid;  // the last n % N elements
  if (i < n) out[i] = f(in.ptr[i * in.stride]...);
}

template <class F, class Out, class... In>
__global__ void __launch_bounds__(kThreads)
    map_1d_kernel(F f, int64_t n, Out* out, int64_t out_stride, Run<In>... in) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    out[i * out_stride] = f(in.ptr[i * in.stride]...);
  }
}

template <class F, class Out, class... In>
__global__ void __launch_bounds__(kThreads)
    map_nd_kernel(F f, StridedIndexer<1 + sizeof...(In)> ix, Out* out, const In*... in) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < ix.numel;
       i += int64_t{blockDim.x} * gridDim.x) {
    int64_t off[1 + sizeof...(In)];
    ix.offsets(i, off);
    apply_at(f, out, off, std::index_sequence_for<In...>{}, in...);
  }
}

// --- launch ---

// One input operand on the host side: its device pointer and its strides.
template <class S>
struct Operand {
  const S* ptr;
  const int64_t* strides;
};

template <class F, class Out, class... In, size_t... I>
void launch_map_impl(const F& f, int ndim, const int64_t* sizes, Out* out,
                     const int64_t* out_strides, cudaStream_t stream, std::index_sequence<I...>,
                     Operand<In>... in) {
  auto ix = StridedIndexer<1 + sizeof...(In)>::make(ndim, sizes, {out_strides, in.strides...});
  if (ix.numel == 0) return;
  if (ix.ndim == 1) {
    const int64_t n = ix.sizes[0];
    const int64_t out_stride = ix.strides[0][0];
    constexpr int N = vec_width<Out, In...>();
    const bool vectorise =
        out_stride == 1 && vec_aligned<N>(out) &&
        ((ix.strides[I + 1][0] == 0 || (ix.strides[I + 1][0] == 1 && vec_aligned<N>(in.ptr))) &&
         ...);
    if (vectorise) {
      const int64_t work = std::max<int64_t>(n / N, n % N);
      map_vec_kernel<N><<<grid_for(work, kThreads), kThreads, 0, stream>>>(
          f, n, out, Run<In>{in.ptr, ix.strides[I + 1][0]}...);
    } else {
      map_1d_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(
          f, n, out, out_stride, Run<In>{in.ptr, ix.strides[I + 1][0]}...);
    }
  } else {
    map_nd_kernel<<<grid_for(ix.numel, kThreads), kThreads, 0, stream>>>(f, ix, out, in.ptr...);
  }
  DTR_CUDA_CHECK_LAUNCH();
}

// out[i] = f(in[i]...) over the iteration shape `sizes`, on `stream`.
template <class F, class Out, class... In>
void launch_map(const F& f, int ndim, const int64_t* sizes, Out* out, const int64_t* out_strides,
                cudaStream_t stream, Operand<In>... in) {
  launch_map_impl(f, ndim, sizes, out, out_strides, stream, std::index_sequence_for<In...>{},
                  in...);
}

}  // namespace dtr::kernels::cuda::detail
