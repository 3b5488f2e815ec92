#include "kernels/cuda/softmax.h"

#include "kernels/cuda/acc_math.cuh"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/scalar_types.h"

#include <algorithm>
#include <limits>
#include <string>

namespace dtr::kernels::cuda {

namespace {

enum class Kind { softmax, log_softmax };

constexpr int kWarpBlockThreads = 256;  // the warp-per-row kernel: 8 rows per block
constexpr int kMaxBlockThreads = 1024;
constexpr int kWarpMaxVecs = 4;  // vectors per lane a warp keeps in registers
// Vectors per thread a block keeps in registers: at most 8, and at most 32
// elements (their float values stay live across the reductions).
template <class T>
inline constexpr int kBlockMaxVecs = kVec<T> * 8 <= 32 ? 8 : 32 / kVec<T>;
// Rows longer than the register cache are held in shared memory up to this size.
constexpr int kMaxRowCacheBytes = 110 * 1024;  // two blocks per H100 multiprocessor
constexpr int64_t kMaxGrid = int64_t{1} << 30;

// max that propagates NaN (a NaN anywhere makes the row's max NaN).
template <class A>
struct NanMax {
  __device__ A operator()(A a, A b) const { return (b > a || b != b) ? b : a; }
};

template <class A>
struct Plus {
  __device__ A operator()(A a, A b) const { return a + b; }
};

// exp(shifted), flushed to 0 below the smallest normal number, like the CPU kernel.
template <class A>
__device__ inline A flushed_exp(A shifted) {
  const A e = exp_acc(shifted);
  return e < std::numeric_limits<A>::min() ? A(0) : e;
}

// The term x contributes to the row's sum of exponentials.
template <Kind kind, class A>
__device__ inline A sum_term(A x, A max) {
  if constexpr (kind == Kind::softmax) {
    return flushed_exp(x - max);
  } else {
    return exp_acc(x - max);
  }
}

// What the row's sum becomes before the write: 1 / sum (softmax) or log(sum).
template <Kind kind, class A>
__device__ inline A sum_scale(A sum) {
  if constexpr (kind == Kind::softmax) {
    return A(1) / sum;
  } else {
    return log_acc(sum);
  }
}

// One output element from its input, the row max and sum_scale().
template <Kind kind, class A>
__device__ inline A output(A x, A max, A scale) {
  if constexpr (kind == Kind::softmax) {
    return flushed_exp(x - max) * scale;
  } else {
    // (x - max) - log(sum), not x - (max + log(sum)), as on the CPU.
    return (x - max) - scale;
  }
}

// A row held in registers: N vectors per thread, a group of 32 threads (a warp,
// several rows per block) or of the whole block per row. One read, one write.
template <class T, Kind kind, int N, bool kWarpGroup>
__global__ void __launch_bounds__(kWarpGroup ? kWarpBlockThreads : kMaxBlockThreads)
    softmax_cached_kernel(const T* __restrict__ in, int64_t rows, int64_t cols, T* __restrict__ out) {
  using A = acc_t<T>;
  constexpr int V = kVec<T>;
  const int group = kWarpGroup ? kWarpSize : static_cast<int>(blockDim.x);
  const int t = kWarpGroup ? static_cast<int>(threadIdx.x) % kWarpSize : static_cast<int>(threadIdx.x);
  const int64_t groups_per_block = kWarpGroup ? blockDim.x / kWarpSize : 1;
  const int64_t first = blockIdx.x * groups_per_block + (kWarpGroup ? threadIdx.x / kWarpSize : 0);
  const T fill = convert<T>(neg_inf<A>());
  for (int64_t r = first; r < rows; r += gridDim.x * groups_per_block) {
    const T* x = in + r * cols;
    T* y = out + r * cols;
    const bool x_aligned = is_aligned16(x), y_aligned = is_aligned16(y);
    Vec<T> cache[N];
#pragma unroll
    for (int i = 0; i < N; ++i) {
      cache[i] = load_vec_checked(x, cols, (t + int64_t{i} * group) * V, x_aligned, fill);
    }
    A max = neg_inf<A>();  // elements past the end read as -inf: they never change the max
#pragma unroll
    for (int i = 0; i < N; ++i) {
#pragma unroll
      for (int k = 0; k < V; ++k) max = NanMax<A>{}(max, convert<A>(cache[i].get(k)));
    }
    max = group_allreduce<kWarpGroup>(max, NanMax<A>{});
    A sum = 0;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int64_t e = (t + int64_t{i} * group) * V;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        if (e + k < cols) sum += sum_term<kind>(convert<A>(cache[i].get(k)), max);
      }
    }
    const A scale = sum_scale<kind>(group_allreduce<kWarpGroup>(sum, Plus<A>{}));
#pragma unroll
    for (int i = 0; i < N; ++i) {
      Vec<T> o{};
#pragma unroll
      for (int k = 0; k < V; ++k) o.set(k, convert<T>(output<kind>(convert<A>(cache[i].get(k)), max, scale)));
      store_vec_checked(y, cols, (t + int64_t{i} * group) * V, y_aligned, o);
    }
  }
}

// The running max of some elements and the sum of exp(x - max) over them.
template <class A>
struct MaxSum {
  A max;
  A sum;
};

template <class A>
struct CombineMaxSum {
  __device__ static A rescale(const MaxSum<A>& p, A max) {
    return p.sum == A(0) ? A(0) : p.sum * exp_acc(p.max - max);  // 0 for -inf-only parts
  }
  __device__ MaxSum<A> operator()(const MaxSum<A>& a, const MaxSum<A>& b) const {
    const A max = NanMax<A>{}(a.max, b.max);
    return {max, rescale(a, max) + rescale(b, max)};
  }
};

// Rows too long for registers: one block per row, an online max/sum pass, then the
// write pass, which reads the row again from shared memory when `smem_cache` (the
// block's dynamic shared memory holds the row) or else from global memory. (The
// sum is not flushed term by term here: terms that small change a sum >= 1 by nothing.)
template <class T, Kind kind>
__global__ void __launch_bounds__(kMaxBlockThreads)
    softmax_online_kernel(const T* __restrict__ in, int64_t rows, int64_t cols, T* __restrict__ out,
                          bool smem_cache) {
  using A = acc_t<T>;
  constexpr int V = kVec<T>;
  extern __shared__ uint4 dynamic_smem[];
  auto* row_cache = reinterpret_cast<Vec<T>*>(dynamic_smem);
  const int64_t vecs = (cols + V - 1) / V;
  const T fill = convert<T>(neg_inf<A>());
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = in + r * cols;
    T* y = out + r * cols;
    const bool x_aligned = is_aligned16(x), y_aligned = is_aligned16(y);
    MaxSum<A> part{neg_inf<A>(), A(0)};
    for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) {
      const Vec<T> v = load_vec_checked(x, cols, i * V, x_aligned, fill);
      if (smem_cache) row_cache[i] = v;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const A a = convert<A>(v.get(k));
        if (a > part.max || a != a) {  // a new max (or a NaN, which sticks)
          if (part.max == part.max) {
            part.sum = part.sum * exp_acc(part.max - a) + A(1);
            part.max = a;
          }
        } else if (a != neg_inf<A>()) {
          part.sum += exp_acc(a - part.max);
        }
      }
    }
    part = block_allreduce(part, CombineMaxSum<A>{});
    const A scale = sum_scale<kind>(part.sum);
    for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) {
      // Each thread reads back only the vectors it cached itself: no barrier needed.
      const Vec<T> v = smem_cache ? row_cache[i] : load_vec_checked(x, cols, i * V, x_aligned, fill);
      Vec<T> o{};
#pragma unroll
      for (int k = 0; k < V; ++k) o.set(k, convert<T>(output<kind>(convert<A>(v.get(k)), part.max, scale)));
      store_vec_checked(y, cols, i * V, y_aligned, o);
    }
  }
}

unsigned grid_of(int64_t blocks) {
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, kMaxGrid));
}

// The most dynamic shared memory one block of the current device may ask for.
int max_smem_per_block() {
  int device = 0, bytes = 0;
  DTR_CUDA_CHECK(cudaGetDevice(&device));
  DTR_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return bytes - 1024;  // room for the kernel's static shared memory
}

template <class T, Kind kind, bool kWarpGroup>
void launch_cached(int vecs_per_thread, unsigned grid, int threads, const T* in, int64_t rows,
                   int64_t cols, T* out, cudaStream_t stream) {
  switch (vecs_per_thread) {
    case 1: softmax_cached_kernel<T, kind, 1, kWarpGroup><<<grid, threads, 0, stream>>>(in, rows, cols, out); break;
    case 2: softmax_cached_kernel<T, kind, 2, kWarpGroup><<<grid, threads, 0, stream>>>(in, rows, cols, out); break;
    case 4: softmax_cached_kernel<T, kind, 4, kWarpGroup><<<grid, threads, 0, stream>>>(in, rows, cols, out); break;
    default:
      if constexpr (!kWarpGroup && kBlockMaxVecs<T> == 8) {
        softmax_cached_kernel<T, kind, 8, false><<<grid, threads, 0, stream>>>(in, rows, cols, out);
      }
      break;
  }
}

template <class T, Kind kind>
void launch_softmax(const T* in, int64_t rows, int64_t cols, T* out, cudaStream_t stream) {
  DTR_CUDA_KERNEL_CHECK(rows >= 0 && cols >= 0,
                        "CUDA softmax: expected rows, cols >= 0, got rows " + std::to_string(rows) +
                            ", cols " + std::to_string(cols));
  if (rows == 0 || cols == 0) return;
  const int64_t vecs = (cols + kVec<T> - 1) / kVec<T>;  // per row
  if (vecs <= int64_t{kWarpSize} * kWarpMaxVecs) {
    const int n = vecs <= kWarpSize ? 1 : vecs <= 2 * kWarpSize ? 2 : 4;
    const int64_t rows_per_block = kWarpBlockThreads / kWarpSize;
    launch_cached<T, kind, true>(n, grid_of((rows + rows_per_block - 1) / rows_per_block),
                                 kWarpBlockThreads, in, rows, cols, out, stream);
  } else if (vecs <= int64_t{kMaxBlockThreads} * kBlockMaxVecs<T>) {
    // Up to 256 threads while that holds the row in kBlockMaxVecs vectors each; more past that.
    int n = 1;
    while (n < kBlockMaxVecs<T> && vecs > int64_t{256} * n) n *= 2;
    const int64_t per_thread = (vecs + n - 1) / n;
    const int threads = static_cast<int>((per_thread + kWarpSize - 1) / kWarpSize * kWarpSize);
    launch_cached<T, kind, false>(n, grid_of(rows), threads, in, rows, cols, out, stream);
  } else {
    const int64_t cache_bytes = vecs * int64_t{sizeof(Vec<T>)};
    const bool smem_cache = cache_bytes <= kMaxRowCacheBytes && cache_bytes <= max_smem_per_block();
    const size_t smem = smem_cache ? static_cast<size_t>(cache_bytes) : 0;
    if (smem > 48 * 1024) {
      DTR_CUDA_CHECK(cudaFuncSetAttribute(softmax_online_kernel<T, kind>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
    }
    softmax_online_kernel<T, kind><<<grid_of(rows), kMaxBlockThreads, smem, stream>>>(in, rows, cols, out,
                                                                                     smem_cache);
  }
  DTR_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class T>
void softmax_rows(const T* in, int64_t rows, int64_t cols, T* out, cudaStream_t stream) {
  launch_softmax<T, Kind::softmax>(in, rows, cols, out, stream);
}

template <class T>
void log_softmax_rows(const T* in, int64_t rows, int64_t cols, T* out, cudaStream_t stream) {
  launch_softmax<T, Kind::log_softmax>(in, rows, cols, out, stream);
}

#define DTR_INSTANTIATE_CUDA_SOFTMAX(T)                                        \
  template void softmax_rows<T>(const T*, int64_t, int64_t, T*, cudaStream_t); \
  template void log_softmax_rows<T>(const T*, int64_t, int64_t, T*, cudaStream_t);
DTR_FOR_EACH_FLOATING(DTR_INSTANTIATE_CUDA_SOFTMAX)

}  // namespace dtr::kernels::cuda
