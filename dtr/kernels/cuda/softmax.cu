#include "dtr/kernels/cuda/softmax.h"

#include "dtr/kernels/cuda/acc_math.cuh"
#include "dtr/kernels/cuda/block_reduce.cuh"
#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/kernels/scalar_types.h"

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

// row_exp flushed to 0 below the smallest normal number, like the CPU kernel.
template <class T, class A>
__device__ inline A flushed_exp(A shifted) {
  const A e = row_exp<T>(shifted);
  return e < std::numeric_limits<A>::min() ? A(0) : e;
}

// The term x contributes to the row's sum of exponentials.
template <class T, Kind kind, class A>
__device__ inline A sum_term(A x, A max) {
  if constexpr (kind == Kind::softmax) {
    return flushed_exp<T>(x - max);
  } else {
    return row_exp<T>(x - max);
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
template <class T, Kind kind, class A>
__device__ inline A output(A x, A max, A scale) {
  if constexpr (kind == Kind::softmax) {
    return flushed_exp<T>(x - max) * scale;
  } else {
    // (x - max) - log(sum), not x - (max + log(sum)), as on the CPU.
    return (x - max) - scale;
  }
}

// A row held in registers, N vectors per thread, one read and one write. kLanes > 0:
// a row per kLanes lanes (4 to 32), so a warp takes 32 / kLanes rows at once and short
// rows keep every lane loading; kLanes == 0: a row per block. Softmax keeps each
// exp(x - max) of its sum for the write, so every element costs one exponential.
template <class T, Kind kind, int N, int kLanes>
__global__ void __launch_bounds__(kLanes > 0 ? kWarpBlockThreads : kMaxBlockThreads)
    softmax_cached_kernel(const T* __restrict__ in, int64_t rows, int64_t cols, T* __restrict__ out) {
  using A = acc_t<T>;
  constexpr int V = kVec<T>;
  constexpr bool kInWarp = kLanes > 0;
  const int group = kInWarp ? kLanes : static_cast<int>(blockDim.x);
  const int t = kInWarp ? static_cast<int>(threadIdx.x) % kLanes : static_cast<int>(threadIdx.x);
  const int64_t groups_per_block = kInWarp ? blockDim.x / kLanes : 1;
  const int64_t group_in_block = kInWarp ? threadIdx.x / kLanes : 0;
  // The loop runs while the first row of this thread's warp exists, so that every lane
  // of the warp joins each shuffle; a group past the last row reads and writes nothing.
  const int64_t warp_first_group = kInWarp ? group_in_block / (kWarpSize / kLanes) * (kWarpSize / kLanes) : 0;
  const T fill = convert<T>(neg_inf<A>());
  for (int64_t base = blockIdx.x * groups_per_block; base + warp_first_group < rows;
       base += gridDim.x * groups_per_block) {
    const int64_t r = base + group_in_block;
    const int64_t n = r < rows ? cols : 0;  // elements this group reads and writes
    const T* x = in + (r < rows ? r : 0) * cols;
    T* y = out + (r < rows ? r : 0) * cols;
    const bool x_aligned = is_aligned16(x), y_aligned = is_aligned16(y);
    Vec<T> cache[N];
#pragma unroll
    for (int i = 0; i < N; ++i) {
      cache[i] = load_vec_checked(x, n, (t + int64_t{i} * group) * V, x_aligned, fill);
    }
    A max = neg_inf<A>();  // elements past the end read as -inf: they never change the max
#pragma unroll
    for (int i = 0; i < N; ++i) {
#pragma unroll
      for (int k = 0; k < V; ++k) max = NanMax<A>{}(max, convert<A>(cache[i].get(k)));
    }
    if constexpr (kInWarp) {
      max = lanes_allreduce<kLanes>(max, NanMax<A>{});
    } else {
      max = block_allreduce(max, NanMax<A>{});
    }
    A sum = 0;
    A terms[N][V];  // softmax: exp(x - max) of each element, or 0 past the end
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int64_t e = (t + int64_t{i} * group) * V;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        terms[i][k] = e + k < n ? sum_term<T, kind>(convert<A>(cache[i].get(k)), max) : A(0);
        sum += terms[i][k];
      }
    }
    if constexpr (kInWarp) {
      sum = lanes_allreduce<kLanes>(sum, Plus<A>{});
    } else {
      sum = block_allreduce(sum, Plus<A>{});
    }
    const A scale = sum_scale<kind>(sum);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      Vec<T> o{};
#pragma unroll
      for (int k = 0; k < V; ++k) {
        if constexpr (kind == Kind::softmax) {
          o.set(k, convert<T>(terms[i][k] * scale));
        } else {
          o.set(k, convert<T>(output<T, kind>(convert<A>(cache[i].get(k)), max, scale)));
        }
      }
      store_vec_checked(y, n, (t + int64_t{i} * group) * V, y_aligned, o);
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

// Rows too long for registers: one block per row. With the row in shared memory
// (`smem_cache`: the block's dynamic shared memory holds it) the first pass reads it
// from global memory into shared memory for the max, a second pass over shared memory
// sums the exponentials, and the write pass reads it there once more. Otherwise a
// single online max/sum pass (the sum rescaled as the max grows; its terms not flushed:
// terms that small change a sum >= 1 by nothing), then the write pass reads the row
// again from global memory.
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
    // Each thread reads back from shared memory only the vectors it stored itself: no
    // barrier is needed between the passes beyond the reductions' own.
    MaxSum<A> row{neg_inf<A>(), A(0)};
    if (smem_cache) {
      for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) {
        const Vec<T> v = load_vec_checked(x, cols, i * V, x_aligned, fill);
        row_cache[i] = v;
#pragma unroll
        for (int k = 0; k < V; ++k) row.max = NanMax<A>{}(row.max, convert<A>(v.get(k)));
      }
      row.max = block_allreduce(row.max, NanMax<A>{});
      for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) {
        const Vec<T> v = row_cache[i];
#pragma unroll
        for (int k = 0; k < V; ++k) {
          if (i * V + k < cols) row.sum += sum_term<T, kind>(convert<A>(v.get(k)), row.max);
        }
      }
      row.sum = block_allreduce(row.sum, Plus<A>{});
    } else {
      for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) {
        const Vec<T> v = load_vec_checked(x, cols, i * V, x_aligned, fill);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const A a = convert<A>(v.get(k));
          if (a > row.max || a != a) {  // a new max (or a NaN, which sticks)
            if (row.max == row.max) {
              row.sum = row.sum * exp_acc(row.max - a) + A(1);
              row.max = a;
            }
          } else if (a != neg_inf<A>()) {
            row.sum += exp_acc(a - row.max);
          }
        }
      }
      row = block_allreduce(row, CombineMaxSum<A>{});
    }
    const A scale = sum_scale<kind>(row.sum);
    for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) {
      const Vec<T> v = smem_cache ? row_cache[i] : load_vec_checked(x, cols, i * V, x_aligned, fill);
      Vec<T> o{};
#pragma unroll
      for (int k = 0; k < V; ++k) o.set(k, convert<T>(output<T, kind>(convert<A>(v.get(k)), row.max, scale)));
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

template <class T, Kind kind, int kLanes>
void launch_cached(int vecs_per_thread, unsigned grid, int threads, const T* in, int64_t rows,
                   int64_t cols, T* out, cudaStream_t stream) {
  switch (vecs_per_thread) {
    case 1: softmax_cached_kernel<T, kind, 1, kLanes><<<grid, threads, 0, stream>>>(in, rows, cols, out); break;
    case 2: softmax_cached_kernel<T, kind, 2, kLanes><<<grid, threads, 0, stream>>>(in, rows, cols, out); break;
    case 4: softmax_cached_kernel<T, kind, 4, kLanes><<<grid, threads, 0, stream>>>(in, rows, cols, out); break;
    default:
      if constexpr (kLanes == 0 && kBlockMaxVecs<T> == 8) {
        softmax_cached_kernel<T, kind, 8, 0><<<grid, threads, 0, stream>>>(in, rows, cols, out);
      }
      break;
  }
}

// A row per kLanes lanes of a warp, vecs_per_thread vectors each, in blocks of
// kWarpBlockThreads.
template <class T, Kind kind, int kLanes>
void launch_lanes_per_row(int vecs_per_thread, const T* in, int64_t rows, int64_t cols, T* out,
                          cudaStream_t stream) {
  const int64_t rows_per_block = kWarpBlockThreads / kLanes;
  launch_cached<T, kind, kLanes>(vecs_per_thread, grid_of((rows + rows_per_block - 1) / rows_per_block),
                                 kWarpBlockThreads, in, rows, cols, out, stream);
}

template <class T, Kind kind>
void launch_softmax(const T* in, int64_t rows, int64_t cols, T* out, cudaStream_t stream) {
  DTR_CUDA_KERNEL_CHECK(rows >= 0 && cols >= 0,
                        "CUDA softmax: expected rows, cols >= 0, got rows " + std::to_string(rows) +
                            ", cols " + std::to_string(cols));
  if (rows == 0 || cols == 0) return;
  const int64_t vecs = (cols + kVec<T> - 1) / kVec<T>;  // per row
  if (vecs <= 4) {
    launch_lanes_per_row<T, kind, 4>(1, in, rows, cols, out, stream);
  } else if (vecs <= 8) {
    launch_lanes_per_row<T, kind, 8>(1, in, rows, cols, out, stream);
  } else if (vecs <= 16) {
    launch_lanes_per_row<T, kind, 16>(1, in, rows, cols, out, stream);
  } else if (vecs <= int64_t{kWarpSize} * kWarpMaxVecs) {
    const int n = vecs <= kWarpSize ? 1 : vecs <= 2 * kWarpSize ? 2 : 4;
    launch_lanes_per_row<T, kind, kWarpSize>(n, in, rows, cols, out, stream);
  } else if (vecs <= int64_t{kMaxBlockThreads} * kBlockMaxVecs<T>) {
    // Up to 256 threads while that holds the row in kBlockMaxVecs vectors each; more past that.
    int n = 1;
    while (n < kBlockMaxVecs<T> && vecs > int64_t{256} * n) n *= 2;
    const int64_t per_thread = (vecs + n - 1) / n;
    const int threads = static_cast<int>((per_thread + kWarpSize - 1) / kWarpSize * kWarpSize);
    launch_cached<T, kind, 0>(n, grid_of(rows), threads, in, rows, cols, out, stream);
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
