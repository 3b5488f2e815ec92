#include "dtr/kernels/cuda/norm.h"

#include "dtr/kernels/cuda/block_reduce.cuh"
#include "dtr/kernels/cuda/cuda_check.h"

#include <algorithm>
#include <limits>
#include <string>

namespace dtr::kernels::cuda {

namespace {

enum class Kind { layer, rms };

constexpr int kWarpBlockThreads = 256;  // the warp-per-row kernels: 8 rows per block
// Block-per-row kernels use at most 512 threads, so that each may hold 128
// registers: 8 cached vectors per thread do not spill.
constexpr int kMaxBlockThreads = 512;
constexpr int kWarpMaxVecs = 4;  // vectors per lane (per cached array) a warp keeps in registers
// Vectors per thread a block keeps in registers in the forward: at most 8, and at
// most 32 elements (their float values stay live across the reductions). The
// backward caches dy and x, so half as many of each.
template <class T>
inline constexpr int kFwdBlockMaxVecs = kVec<T> * 8 <= 32 ? 8 : 32 / kVec<T>;
template <class T>
inline constexpr int kBwdBlockMaxVecs = kFwdBlockMaxVecs<T> / 2;
constexpr int64_t kMaxGrid = int64_t{1} << 30;

// dweight / dbias: threads per block of the column kernels (one thread per column),
// the number of partial-sum blocks aimed at, and the most row chunks.
constexpr int kColumnThreads = 256;
constexpr int64_t kTargetPartialBlocks = 2048;
constexpr int64_t kMaxChunks = 512;

__device__ inline float sqrt_acc(float x) { return sqrtf(x); }
__device__ inline double sqrt_acc(double x) { return sqrt(x); }

template <class A>
struct Plus {
  __device__ A operator()(A a, A b) const { return a + b; }
};

// Two sums reduced together: sum(g) and sum(g * xhat) in the backward.
template <class A>
struct Pair {
  A a;
  A b;
};

template <class A>
struct PairPlus {
  __device__ Pair<A> operator()(const Pair<A>& x, const Pair<A>& y) const {
    return {x.a + y.a, x.b + y.b};
  }
};

// The rows one group of threads (a warp, or the whole block) works on, and this
// thread's place in the group: rows first, first + step, ...
struct RowGroup {
  int size;
  int lane;
  int64_t first;
  int64_t step;
};

template <bool kWarpGroup>
__device__ inline RowGroup row_group() {
  if constexpr (kWarpGroup) {
    const int64_t per_block = blockDim.x / kWarpSize;
    return {kWarpSize, static_cast<int>(threadIdx.x % kWarpSize),
            int64_t{blockIdx.x} * per_block + threadIdx.x / kWarpSize,
            int64_t{gridDim.x} * per_block};
  } else {
    return {static_cast<int>(blockDim.x), static_cast<int>(threadIdx.x), int64_t{blockIdx.x},
            int64_t{gridDim.x}};
  }
}

template <class T>
__device__ inline T zero_of() {
  return convert<T>(acc_t<T>(0));
}
template <class T>
__device__ inline T one_of() {
  return convert<T>(acc_t<T>(1));
}

// y for one element: ((x - mu) * rs) * w + b, the steps the CPU kernel rounds.
template <class A>
__device__ inline A normalized(A x, A mu, A rs, bool has_weight, A w, bool has_bias, A b) {
  A v = (x - mu) * rs;
  if (has_weight) v = v * w;
  if (has_bias) v = v + b;
  return v;
}

// ---------------------------------------------------------------- forward

// A row held in registers: N vectors per thread, a group of 32 threads (a warp,
// several rows per block) or of the whole block per row. One read, one write.
template <class T, Kind kind, int N, bool kWarpGroup>
__global__ void __launch_bounds__(kWarpGroup ? kWarpBlockThreads : kMaxBlockThreads)
    norm_forward_cached_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                               const T* __restrict__ bias, int64_t rows, int64_t cols, acc_t<T> eps,
                               T* __restrict__ y, acc_t<T>* __restrict__ mean,
                               acc_t<T>* __restrict__ rstd) {
  using A = acc_t<T>;
  constexpr int V = kVec<T>;
  const RowGroup g = row_group<kWarpGroup>();
  const A n = static_cast<A>(cols);
  const bool has_weight = weight != nullptr, has_bias = bias != nullptr;
  const bool w_aligned = is_aligned16(weight), b_aligned = is_aligned16(bias);
  for (int64_t r = g.first; r < rows; r += g.step) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const bool x_aligned = is_aligned16(xr), y_aligned = is_aligned16(yr);
    Vec<T> cache[N];
#pragma unroll
    for (int i = 0; i < N; ++i) {
      cache[i] = load_vec_checked(xr, cols, (g.lane + int64_t{i} * g.size) * V, x_aligned, zero_of<T>());
    }
    A mu = 0;
    if constexpr (kind == Kind::layer) {
      A s = 0;  // elements past the end read as 0
#pragma unroll
      for (int i = 0; i < N; ++i) {
#pragma unroll
        for (int k = 0; k < V; ++k) s += convert<A>(cache[i].get(k));
      }
      mu = group_allreduce<kWarpGroup>(s, Plus<A>{}) / n;
    }
    A sq = 0;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int64_t e = (g.lane + int64_t{i} * g.size) * V;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        if (e + k < cols) {
          const A d = convert<A>(cache[i].get(k)) - mu;
          sq += d * d;
        }
      }
    }
    const A rs = A(1) / sqrt_acc(group_allreduce<kWarpGroup>(sq, Plus<A>{}) / n + eps);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int64_t e = (g.lane + int64_t{i} * g.size) * V;
      if (e >= cols) continue;
      Vec<T> wv{}, bv{};
      if (has_weight) wv = load_vec_checked(weight, cols, e, w_aligned, one_of<T>());
      if (has_bias) bv = load_vec_checked(bias, cols, e, b_aligned, zero_of<T>());
      Vec<T> o{};
#pragma unroll
      for (int k = 0; k < V; ++k) {
        o.set(k, convert<T>(normalized(convert<A>(cache[i].get(k)), mu, rs, has_weight,
                                       convert<A>(wv.get(k)), has_bias, convert<A>(bv.get(k)))));
      }
      store_vec_checked(yr, cols, e, y_aligned, o);
    }
    if (g.lane == 0) {
      if (mean != nullptr) mean[r] = mu;
      rstd[r] = rs;
    }
  }
}

// Rows too long for registers: one block per row, reading the row once per pass
// (the mean, the variance, the write).
template <class T, Kind kind>
__global__ void __launch_bounds__(kMaxBlockThreads)
    norm_forward_long_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                             const T* __restrict__ bias, int64_t rows, int64_t cols, acc_t<T> eps,
                             T* __restrict__ y, acc_t<T>* __restrict__ mean,
                             acc_t<T>* __restrict__ rstd) {
  using A = acc_t<T>;
  constexpr int V = kVec<T>;
  const int64_t vecs = (cols + V - 1) / V;
  const A n = static_cast<A>(cols);
  const bool has_weight = weight != nullptr, has_bias = bias != nullptr;
  const bool w_aligned = is_aligned16(weight), b_aligned = is_aligned16(bias);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const bool x_aligned = is_aligned16(xr), y_aligned = is_aligned16(yr);
    A mu = 0;
    if constexpr (kind == Kind::layer) {
      A s = 0;
      for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) {
        const Vec<T> v = load_vec_checked(xr, cols, i * V, x_aligned, zero_of<T>());
#pragma unroll
        for (int k = 0; k < V; ++k) s += convert<A>(v.get(k));
      }
      mu = block_allreduce(s, Plus<A>{}) / n;
    }
    A sq = 0;
    for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) {
      const Vec<T> v = load_vec_checked(xr, cols, i * V, x_aligned, zero_of<T>());
#pragma unroll
      for (int k = 0; k < V; ++k) {
        if (i * V + k < cols) {
          const A d = convert<A>(v.get(k)) - mu;
          sq += d * d;
        }
      }
    }
    const A rs = A(1) / sqrt_acc(block_allreduce(sq, Plus<A>{}) / n + eps);
    for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) {
      const int64_t e = i * V;
      const Vec<T> v = load_vec_checked(xr, cols, e, x_aligned, zero_of<T>());
      Vec<T> wv{}, bv{};
      if (has_weight) wv = load_vec_checked(weight, cols, e, w_aligned, one_of<T>());
      if (has_bias) bv = load_vec_checked(bias, cols, e, b_aligned, zero_of<T>());
      Vec<T> o{};
#pragma unroll
      for (int k = 0; k < V; ++k) {
        o.set(k, convert<T>(normalized(convert<A>(v.get(k)), mu, rs, has_weight,
                                       convert<A>(wv.get(k)), has_bias, convert<A>(bv.get(k)))));
      }
      store_vec_checked(yr, cols, e, y_aligned, o);
    }
    if (threadIdx.x == 0) {
      if (mean != nullptr) mean[r] = mu;
      rstd[r] = rs;
    }
  }
}

// cols == 0: the statistics of every row are NaN (0 / 0), as on the CPU.
template <class A>
__global__ void fill_nan_stats_kernel(A* mean, A* rstd, int64_t rows) {
  const A nan = std::numeric_limits<A>::quiet_NaN();
  for (int64_t r = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; r < rows;
       r += int64_t{gridDim.x} * blockDim.x) {
    if (mean != nullptr) mean[r] = nan;
    rstd[r] = nan;
  }
}

// ---------------------------------------------------------------- backward: dx

// g = dy * w and xhat for one element, then the two sums of a row.
template <class A>
struct GradTerms {
  A g;
  A xhat;
};

template <class A>
__device__ inline GradTerms<A> grad_terms(A dy, A x, A mu, A rs, bool has_weight, A w) {
  return {has_weight ? dy * w : dy, (x - mu) * rs};
}

// dx = rstd * ((g - c1) - xhat * c2), the steps the CPU kernel rounds.
template <class A>
__device__ inline A dx_of(const GradTerms<A>& t, A rs, A c1, A c2) {
  return rs * ((t.g - c1) - t.xhat * c2);
}

// dx of rows held in registers (N vectors of dy and N of x per thread), grouped
// like norm_forward_cached_kernel.
template <class T, Kind kind, int N, bool kWarpGroup>
__global__ void __launch_bounds__(kWarpGroup ? kWarpBlockThreads : kMaxBlockThreads)
    norm_dx_cached_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                          const acc_t<T>* __restrict__ mean, const acc_t<T>* __restrict__ rstd,
                          const T* __restrict__ weight, int64_t rows, int64_t cols,
                          T* __restrict__ dx) {
  using A = acc_t<T>;
  constexpr int V = kVec<T>;
  const RowGroup g = row_group<kWarpGroup>();
  const A n = static_cast<A>(cols);
  const bool has_weight = weight != nullptr;
  const bool w_aligned = is_aligned16(weight);
  for (int64_t r = g.first; r < rows; r += g.step) {
    const T* dyr = dy + r * cols;
    const T* xr = x + r * cols;
    T* dxr = dx + r * cols;
    const bool dy_aligned = is_aligned16(dyr), x_aligned = is_aligned16(xr),
               dx_aligned = is_aligned16(dxr);
    Vec<T> dy_cache[N], x_cache[N];
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int64_t e = (g.lane + int64_t{i} * g.size) * V;
      dy_cache[i] = load_vec_checked(dyr, cols, e, dy_aligned, zero_of<T>());
      x_cache[i] = load_vec_checked(xr, cols, e, x_aligned, zero_of<T>());
    }
    const A mu = kind == Kind::layer ? mean[r] : A(0);
    const A rs = rstd[r];
    Pair<A> part{A(0), A(0)};
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int64_t e = (g.lane + int64_t{i} * g.size) * V;
      if (e >= cols) continue;
      Vec<T> wv{};
      if (has_weight) wv = load_vec_checked(weight, cols, e, w_aligned, zero_of<T>());
#pragma unroll
      for (int k = 0; k < V; ++k) {
        if (e + k < cols) {
          const GradTerms<A> t = grad_terms(convert<A>(dy_cache[i].get(k)),
                                            convert<A>(x_cache[i].get(k)), mu, rs, has_weight,
                                            convert<A>(wv.get(k)));
          if constexpr (kind == Kind::layer) part.a += t.g;
          part.b += t.g * t.xhat;
        }
      }
    }
    part = group_allreduce<kWarpGroup>(part, PairPlus<A>{});
    const A c1 = kind == Kind::layer ? part.a / n : A(0);
    const A c2 = part.b / n;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int64_t e = (g.lane + int64_t{i} * g.size) * V;
      if (e >= cols) continue;
      Vec<T> wv{};
      if (has_weight) wv = load_vec_checked(weight, cols, e, w_aligned, zero_of<T>());
      Vec<T> o{};
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const GradTerms<A> t = grad_terms(convert<A>(dy_cache[i].get(k)),
                                          convert<A>(x_cache[i].get(k)), mu, rs, has_weight,
                                          convert<A>(wv.get(k)));
        o.set(k, convert<T>(dx_of(t, rs, c1, c2)));
      }
      store_vec_checked(dxr, cols, e, dx_aligned, o);
    }
  }
}

// dx of rows too long for registers: one block per row, reading dy and x twice.
template <class T, Kind kind>
__global__ void __launch_bounds__(kMaxBlockThreads)
    norm_dx_long_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                        const acc_t<T>* __restrict__ mean, const acc_t<T>* __restrict__ rstd,
                        const T* __restrict__ weight, int64_t rows, int64_t cols,
                        T* __restrict__ dx) {
  using A = acc_t<T>;
  constexpr int V = kVec<T>;
  const int64_t vecs = (cols + V - 1) / V;
  const A n = static_cast<A>(cols);
  const bool has_weight = weight != nullptr;
  const bool w_aligned = is_aligned16(weight);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* dyr = dy + r * cols;
    const T* xr = x + r * cols;
    T* dxr = dx + r * cols;
    const bool dy_aligned = is_aligned16(dyr), x_aligned = is_aligned16(xr),
               dx_aligned = is_aligned16(dxr);
    const A mu = kind == Kind::layer ? mean[r] : A(0);
    const A rs = rstd[r];
    Pair<A> part{A(0), A(0)};
    for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) {
      const int64_t e = i * V;
      const Vec<T> dv = load_vec_checked(dyr, cols, e, dy_aligned, zero_of<T>());
      const Vec<T> xv = load_vec_checked(xr, cols, e, x_aligned, zero_of<T>());
      Vec<T> wv{};
      if (has_weight) wv = load_vec_checked(weight, cols, e, w_aligned, zero_of<T>());
#pragma unroll
      for (int k = 0; k < V; ++k) {
        if (e + k < cols) {
          const GradTerms<A> t = grad_terms(convert<A>(dv.get(k)), convert<A>(xv.get(k)), mu, rs,
                                            has_weight, convert<A>(wv.get(k)));
          if constexpr (kind == Kind::layer) part.a += t.g;
          part.b += t.g * t.xhat;
        }
      }
    }
    part = block_allreduce(part, PairPlus<A>{});
    const A c1 = kind == Kind::layer ? part.a / n : A(0);
    const A c2 = part.b / n;
    for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) {
      const int64_t e = i * V;
      const Vec<T> dv = load_vec_checked(dyr, cols, e, dy_aligned, zero_of<T>());
      const Vec<T> xv = load_vec_checked(xr, cols, e, x_aligned, zero_of<T>());
      Vec<T> wv{};
      if (has_weight) wv = load_vec_checked(weight, cols, e, w_aligned, zero_of<T>());
      Vec<T> o{};
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const GradTerms<A> t = grad_terms(convert<A>(dv.get(k)), convert<A>(xv.get(k)), mu, rs,
                                          has_weight, convert<A>(wv.get(k)));
        o.set(k, convert<T>(dx_of(t, rs, c1, c2)));
      }
      store_vec_checked(dxr, cols, e, dx_aligned, o);
    }
  }
}

// ---------------------------------------------------------------- backward: dweight, dbias

// Thread (column c, chunk b) sums rows [b * rows_per_chunk, (b + 1) * rows_per_chunk)
// of column c in row order: dy * xhat into dw_parts[b, c], dy into db_parts[b, c]
// (either may be null).
template <class T, Kind kind>
__global__ void __launch_bounds__(kColumnThreads)
    norm_param_partials_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                               const acc_t<T>* __restrict__ mean,
                               const acc_t<T>* __restrict__ rstd, int64_t rows, int64_t cols,
                               int64_t rows_per_chunk, acc_t<T>* __restrict__ dw_parts,
                               acc_t<T>* __restrict__ db_parts) {
  using A = acc_t<T>;
  const int64_t c = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  A sw = 0, sb = 0;
#pragma unroll 4
  for (int64_t r = r0; r < r1; ++r) {
    const A d = convert<A>(dy[r * cols + c]);
    if (dw_parts != nullptr) {
      const A mu = kind == Kind::layer ? mean[r] : A(0);
      sw += d * ((convert<A>(x[r * cols + c]) - mu) * rstd[r]);
    }
    sb += d;
  }
  if (dw_parts != nullptr) dw_parts[chunk * cols + c] = sw;
  if (db_parts != nullptr) db_parts[chunk * cols + c] = sb;
}

// out[c] = the chunk partials of column c added in chunk order, rounded once (0 for no chunks).
template <class T>
__global__ void __launch_bounds__(kColumnThreads)
    norm_param_combine_kernel(const acc_t<T>* __restrict__ dw_parts,
                              const acc_t<T>* __restrict__ db_parts, int64_t chunks, int64_t cols,
                              T* __restrict__ dweight, T* __restrict__ dbias) {
  using A = acc_t<T>;
  const int64_t c = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  if (dweight != nullptr) {
    A s = 0;
    for (int64_t b = 0; b < chunks; ++b) s += dw_parts[b * cols + c];
    dweight[c] = convert<T>(s);
  }
  if (dbias != nullptr) {
    A s = 0;
    for (int64_t b = 0; b < chunks; ++b) s += db_parts[b * cols + c];
    dbias[c] = convert<T>(s);
  }
}

// ---------------------------------------------------------------- launch plans

unsigned grid_of(int64_t blocks) {
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, kMaxGrid));
}

enum class Mode { warp, block, long_rows };

// How rows of `cols` elements are spread: a warp or a block per row holding
// `vecs_per_thread` vectors per thread (at most block_max_vecs for a block), or
// the long-row kernel.
struct RowPlan {
  Mode mode;
  int vecs_per_thread;
  int threads;
  unsigned grid;
};

RowPlan plan_rows(int64_t rows, int64_t cols, int vec, int block_max_vecs) {
  const int64_t vecs = (cols + vec - 1) / vec;
  if (vecs <= int64_t{kWarpSize} * kWarpMaxVecs) {
    const int n = vecs <= kWarpSize ? 1 : vecs <= 2 * kWarpSize ? 2 : 4;
    const int64_t rows_per_block = kWarpBlockThreads / kWarpSize;
    return {Mode::warp, n, kWarpBlockThreads, grid_of((rows + rows_per_block - 1) / rows_per_block)};
  }
  if (vecs <= int64_t{kMaxBlockThreads} * block_max_vecs) {
    // Up to 256 threads while that holds the row in block_max_vecs vectors each; more past that.
    int n = 1;
    while (n < block_max_vecs && vecs > int64_t{256} * n) n *= 2;
    const int64_t per_thread = (vecs + n - 1) / n;
    const int threads = static_cast<int>((per_thread + kWarpSize - 1) / kWarpSize * kWarpSize);
    return {Mode::block, n, threads, grid_of(rows)};
  }
  return {Mode::long_rows, 0, kMaxBlockThreads, grid_of(rows)};
}

// Rows cut into chunks for the dweight / dbias partial sums: a function of rows
// and cols only, so results do not depend on the device.
struct ChunkPlan {
  int64_t chunks = 0;
  int64_t rows_per_chunk = 0;
};

ChunkPlan plan_chunks(int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return {};
  const int64_t col_tiles = (cols + kColumnThreads - 1) / kColumnThreads;
  int64_t want = std::clamp<int64_t>((kTargetPartialBlocks + col_tiles - 1) / col_tiles, 1, kMaxChunks);
  want = std::min(want, rows);
  const int64_t rows_per_chunk = (rows + want - 1) / want;
  return {(rows + rows_per_chunk - 1) / rows_per_chunk, rows_per_chunk};
}

void check_sizes(const char* op, int64_t rows, int64_t cols) {
  DTR_CUDA_KERNEL_CHECK(rows >= 0 && cols >= 0, std::string("CUDA ") + op +
                                                    ": expected rows, cols >= 0, got rows " +
                                                    std::to_string(rows) + ", cols " +
                                                    std::to_string(cols));
}

template <class T, Kind kind, int N, bool kWarpGroup>
void forward_cached(const RowPlan& p, const T* x, const T* weight, const T* bias, int64_t rows,
                    int64_t cols, acc_t<T> eps, T* y, acc_t<T>* mean, acc_t<T>* rstd,
                    cudaStream_t stream) {
  norm_forward_cached_kernel<T, kind, N, kWarpGroup>
      <<<p.grid, p.threads, 0, stream>>>(x, weight, bias, rows, cols, eps, y, mean, rstd);
}

template <class T, Kind kind, bool kWarpGroup, int kMaxN>
void forward_cached_n(const RowPlan& p, const T* x, const T* weight, const T* bias, int64_t rows,
                      int64_t cols, acc_t<T> eps, T* y, acc_t<T>* mean, acc_t<T>* rstd,
                      cudaStream_t stream) {
  DTR_CUDA_KERNEL_CHECK(p.vecs_per_thread >= 1 && p.vecs_per_thread <= kMaxN,
                        "CUDA norm: internal error, " + std::to_string(p.vecs_per_thread) +
                            " vectors per thread");
  switch (p.vecs_per_thread) {
    case 1: forward_cached<T, kind, 1, kWarpGroup>(p, x, weight, bias, rows, cols, eps, y, mean, rstd, stream); break;
    case 2: forward_cached<T, kind, 2, kWarpGroup>(p, x, weight, bias, rows, cols, eps, y, mean, rstd, stream); break;
    case 4:
      if constexpr (kMaxN >= 4) forward_cached<T, kind, 4, kWarpGroup>(p, x, weight, bias, rows, cols, eps, y, mean, rstd, stream);
      break;
    case 8:
      if constexpr (kMaxN >= 8) forward_cached<T, kind, 8, kWarpGroup>(p, x, weight, bias, rows, cols, eps, y, mean, rstd, stream);
      break;
    default:
      DTR_CUDA_KERNEL_CHECK(false, "CUDA norm: internal error, " +
                                       std::to_string(p.vecs_per_thread) + " vectors per thread");
  }
}

template <class T, Kind kind>
void launch_forward(const char* op, const T* x, const T* weight, const T* bias, int64_t rows,
                    int64_t cols, double eps, T* y, acc_t<T>* mean, acc_t<T>* rstd,
                    cudaStream_t stream) {
  using A = acc_t<T>;
  check_sizes(op, rows, cols);
  if (rows == 0) return;
  DTR_CUDA_KERNEL_CHECK(rstd != nullptr && (cols == 0 || (x != nullptr && y != nullptr)),
                        std::string("CUDA ") + op + ": x, y and rstd must not be null");
  if (cols == 0) {
    constexpr int threads = 256;
    fill_nan_stats_kernel<A><<<grid_of((rows + threads - 1) / threads), threads, 0, stream>>>(mean, rstd, rows);
    DTR_CUDA_CHECK_LAUNCH();
    return;
  }
  const A e = static_cast<A>(eps);
  const RowPlan p = plan_rows(rows, cols, kVec<T>, kFwdBlockMaxVecs<T>);
  switch (p.mode) {
    case Mode::warp:
      forward_cached_n<T, kind, true, kWarpMaxVecs>(p, x, weight, bias, rows, cols, e, y, mean, rstd, stream);
      break;
    case Mode::block:
      forward_cached_n<T, kind, false, kFwdBlockMaxVecs<T>>(p, x, weight, bias, rows, cols, e, y, mean, rstd, stream);
      break;
    case Mode::long_rows:
      norm_forward_long_kernel<T, kind>
          <<<p.grid, p.threads, 0, stream>>>(x, weight, bias, rows, cols, e, y, mean, rstd);
      break;
  }
  DTR_CUDA_CHECK_LAUNCH();
}

template <class T, Kind kind, int N, bool kWarpGroup>
void dx_cached(const RowPlan& p, const T* dy, const T* x, const acc_t<T>* mean,
               const acc_t<T>* rstd, const T* weight, int64_t rows, int64_t cols, T* dx,
               cudaStream_t stream) {
  norm_dx_cached_kernel<T, kind, N, kWarpGroup>
      <<<p.grid, p.threads, 0, stream>>>(dy, x, mean, rstd, weight, rows, cols, dx);
}

template <class T, Kind kind, bool kWarpGroup, int kMaxN>
void dx_cached_n(const RowPlan& p, const T* dy, const T* x, const acc_t<T>* mean,
                 const acc_t<T>* rstd, const T* weight, int64_t rows, int64_t cols, T* dx,
                 cudaStream_t stream) {
  DTR_CUDA_KERNEL_CHECK(p.vecs_per_thread >= 1 && p.vecs_per_thread <= kMaxN,
                        "CUDA norm backward: internal error, " +
                            std::to_string(p.vecs_per_thread) + " vectors per thread");
  switch (p.vecs_per_thread) {
    case 1: dx_cached<T, kind, 1, kWarpGroup>(p, dy, x, mean, rstd, weight, rows, cols, dx, stream); break;
    case 2: dx_cached<T, kind, 2, kWarpGroup>(p, dy, x, mean, rstd, weight, rows, cols, dx, stream); break;
    case 4:
      if constexpr (kMaxN >= 4) dx_cached<T, kind, 4, kWarpGroup>(p, dy, x, mean, rstd, weight, rows, cols, dx, stream);
      break;
    default:
      DTR_CUDA_KERNEL_CHECK(false, "CUDA norm backward: internal error, " +
                                       std::to_string(p.vecs_per_thread) + " vectors per thread");
  }
}

template <class T, Kind kind>
void launch_backward(const char* op, const T* dy, const T* x, const acc_t<T>* mean,
                     const acc_t<T>* rstd, const T* weight, int64_t rows, int64_t cols, T* dx,
                     T* dweight, T* dbias, acc_t<T>* scratch, cudaStream_t stream) {
  using A = acc_t<T>;
  check_sizes(op, rows, cols);
  if (cols == 0) return;
  const bool reads_x = rows > 0 && (dx != nullptr || dweight != nullptr);
  DTR_CUDA_KERNEL_CHECK(rows == 0 || dy != nullptr || (dx == nullptr && dweight == nullptr &&
                                                       dbias == nullptr),
                        std::string("CUDA ") + op + ": dy must not be null");
  DTR_CUDA_KERNEL_CHECK(!reads_x || (x != nullptr && rstd != nullptr &&
                                     (kind == Kind::rms || mean != nullptr)),
                        std::string("CUDA ") + op + ": x, mean and rstd must not be null");
  if (rows > 0 && dx != nullptr) {
    static_assert(kBwdBlockMaxVecs<T> <= kWarpMaxVecs, "the backward caches at most 4 vectors");
    const RowPlan p = plan_rows(rows, cols, kVec<T>, kBwdBlockMaxVecs<T>);
    switch (p.mode) {
      case Mode::warp:
        dx_cached_n<T, kind, true, kWarpMaxVecs>(p, dy, x, mean, rstd, weight, rows, cols, dx, stream);
        break;
      case Mode::block:
        dx_cached_n<T, kind, false, kBwdBlockMaxVecs<T>>(p, dy, x, mean, rstd, weight, rows, cols, dx, stream);
        break;
      case Mode::long_rows:
        norm_dx_long_kernel<T, kind><<<p.grid, p.threads, 0, stream>>>(dy, x, mean, rstd, weight, rows, cols, dx);
        break;
    }
    DTR_CUDA_CHECK_LAUNCH();
  }
  if (dweight == nullptr && dbias == nullptr) return;
  const ChunkPlan c = plan_chunks(rows, cols);
  A* dw_parts = nullptr;
  A* db_parts = nullptr;
  if (c.chunks > 0) {
    DTR_CUDA_KERNEL_CHECK(scratch != nullptr,
                          std::string("CUDA ") + op + ": the scratch buffer must not be null");
    if (dweight != nullptr) dw_parts = scratch;
    if (dbias != nullptr) db_parts = scratch + (dweight != nullptr ? c.chunks * cols : 0);
  }
  const int64_t col_tiles = (cols + kColumnThreads - 1) / kColumnThreads;
  DTR_CUDA_KERNEL_CHECK(col_tiles <= std::numeric_limits<int32_t>::max(),
                        std::string("CUDA ") + op + ": too many columns (" +
                            std::to_string(cols) + ")");
  if (c.chunks > 0) {
    const dim3 grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(c.chunks));
    norm_param_partials_kernel<T, kind><<<grid, kColumnThreads, 0, stream>>>(
        dy, x, mean, rstd, rows, cols, c.rows_per_chunk, dw_parts, db_parts);
    DTR_CUDA_CHECK_LAUNCH();
  }
  norm_param_combine_kernel<T><<<static_cast<unsigned>(col_tiles), kColumnThreads, 0, stream>>>(
      dw_parts, db_parts, c.chunks, cols, dweight, dbias);
  DTR_CUDA_CHECK_LAUNCH();
}

}  // namespace

int64_t norm_backward_scratch_elements(int64_t rows, int64_t cols, bool dweight, bool dbias) {
  const ChunkPlan c = plan_chunks(rows, cols);
  return c.chunks * cols * ((dweight ? 1 : 0) + (dbias ? 1 : 0));
}

template <class T>
void layer_norm_forward(const T* x, const T* weight, const T* bias, int64_t rows, int64_t cols,
                        double eps, T* y, acc_t<T>* mean, acc_t<T>* rstd, cudaStream_t stream) {
  launch_forward<T, Kind::layer>("layer_norm", x, weight, bias, rows, cols, eps, y, mean, rstd,
                                 stream);
}

template <class T>
void rms_norm_forward(const T* x, const T* weight, int64_t rows, int64_t cols, double eps, T* y,
                      acc_t<T>* rstd, cudaStream_t stream) {
  launch_forward<T, Kind::rms>("rms_norm", x, weight, nullptr, rows, cols, eps, y, nullptr, rstd,
                               stream);
}

template <class T>
void layer_norm_backward(const T* dy, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd,
                         const T* weight, int64_t rows, int64_t cols, T* dx, T* dweight, T* dbias,
                         acc_t<T>* scratch, cudaStream_t stream) {
  launch_backward<T, Kind::layer>("layer_norm backward", dy, x, mean, rstd, weight, rows, cols, dx,
                                  dweight, dbias, scratch, stream);
}

template <class T>
void rms_norm_backward(const T* dy, const T* x, const acc_t<T>* rstd, const T* weight,
                       int64_t rows, int64_t cols, T* dx, T* dweight, acc_t<T>* scratch,
                       cudaStream_t stream) {
  launch_backward<T, Kind::rms>("rms_norm backward", dy, x, nullptr, rstd, weight, rows, cols, dx,
                                dweight, nullptr, scratch, stream);
}

#define DTR_INSTANTIATE_CUDA_NORM(T)                                                             \
  template void layer_norm_forward<T>(const T*, const T*, const T*, int64_t, int64_t, double, T*, \
                                      acc_t<T>*, acc_t<T>*, cudaStream_t);                       \
  template void rms_norm_forward<T>(const T*, const T*, int64_t, int64_t, double, T*, acc_t<T>*,  \
                                    cudaStream_t);                                               \
  template void layer_norm_backward<T>(const T*, const T*, const acc_t<T>*, const acc_t<T>*,     \
                                       const T*, int64_t, int64_t, T*, T*, T*, acc_t<T>*,        \
                                       cudaStream_t);                                            \
  template void rms_norm_backward<T>(const T*, const T*, const acc_t<T>*, const T*, int64_t,     \
                                     int64_t, T*, T*, acc_t<T>*, cudaStream_t);
DTR_FOR_EACH_FLOATING(DTR_INSTANTIATE_CUDA_NORM)

}  // namespace dtr::kernels::cuda
