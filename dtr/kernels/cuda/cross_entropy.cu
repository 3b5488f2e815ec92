#include "dtr/kernels/cuda/cross_entropy.h"

#include "dtr/kernels/cuda/acc_math.cuh"
#include "dtr/kernels/cuda/block_reduce.cuh"
#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/kernels/row_logsumexp.h"

#include <algorithm>
#include <limits>
#include <string>

namespace dtr::kernels::cuda {

namespace {

constexpr int kMaxThreads = 512;   // per row (block)
constexpr int kMeanThreads = 1024;
constexpr int64_t kMaxGrid = int64_t{1} << 30;

template <class A>
struct Plus {
  __device__ A operator()(A a, A b) const { return a + b; }
};

using kernels::RowState;

// exp as the row kernels take it for T (acc_math.cuh's row_exp).
template <class T>
struct RowExp {
  template <class A>
  __device__ A operator()(A shifted) const {
    return row_exp<T>(shifted);
  }
};

// Folds the first `valid` (1 to kVec<T>) elements of v into the state.
template <class T, bool kSmooth, class A = acc_t<T>>
__device__ inline void add_vector(RowState<A>& s, const Vec<T>& v, int valid) {
  A a[kVec<T>];
#pragma unroll
  for (int k = 0; k < kVec<T>; ++k) a[k] = convert<A>(v.get(k));
  kernels::add_values<kSmooth>(s, a, valid, RowExp<T>{});
}

template <class T, class A = acc_t<T>>
struct CombineRowState {
  __device__ RowState<A> operator()(const RowState<A>& a, const RowState<A>& b) const {
    return kernels::combine_row_states(a, b, RowExp<T>{});
  }
};

template <class T, bool kSmooth>
__global__ void __launch_bounds__(kMaxThreads)
    cross_entropy_forward_kernel(const T* __restrict__ logits, const int64_t* __restrict__ targets,
                                 int64_t rows, int64_t cols, int64_t ignore_index, acc_t<T> eps,
                                 acc_t<T>* __restrict__ loss, acc_t<T>* __restrict__ row_max,
                                 acc_t<T>* __restrict__ row_log_sum) {
  using A = acc_t<T>;
  constexpr int V = kVec<T>;
  const int64_t vecs = (cols + V - 1) / V;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t target = targets[r];
    if (target == ignore_index) {  // the whole block skips the row (and its reduction)
      if (threadIdx.x == 0) loss[r] = row_max[r] = row_log_sum[r] = A(0);
      continue;
    }
    const T* x = logits + r * cols;
    const bool aligned = is_aligned16(x);
    RowState<A> part = kernels::empty_row_state<A>();
    for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) {
      const Vec<T> v = load_vec_spanning(x, cols, i * V, aligned, convert<T>(A(0)));
      add_vector<T, kSmooth>(part, v, static_cast<int>(std::min<int64_t>(V, cols - i * V)));
    }
    part = block_allreduce(part, CombineRowState<T>{});
    if (threadIdx.x == 0) {
      const A log_sum = log_acc(part.sum_exp);
      const A nll = log_sum - (convert<A>(x[target]) - part.max);
      A l = nll;
      if constexpr (kSmooth) {
        l = (A(1) - eps) * nll + eps * (log_sum - part.sum_shift / static_cast<A>(cols));
      }
      loss[r] = l;
      row_max[r] = part.max;
      row_log_sum[r] = log_sum;
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kMeanThreads)
    cross_entropy_mean_kernel(const acc_t<T>* __restrict__ loss, int64_t rows, int64_t counted,
                              T* __restrict__ out) {
  using A = acc_t<T>;
  A sum = A(0);
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) sum += loss[r];
  sum = block_allreduce(sum, Plus<A>{});
  if (threadIdx.x == 0) out[0] = convert<T>(sum / static_cast<A>(counted));  // 0 / 0 = NaN
}

template <class T>
__global__ void __launch_bounds__(kMaxThreads)
    cross_entropy_backward_kernel(const T* __restrict__ logits, const int64_t* __restrict__ targets,
                                  const acc_t<T>* __restrict__ row_max,
                                  const acc_t<T>* __restrict__ row_log_sum, int64_t rows, int64_t cols,
                                  int64_t ignore_index, acc_t<T> eps, const double* __restrict__ grad_loss,
                                  int64_t counted, T* __restrict__ dlogits, int64_t dlogits_ld) {
  using A = acc_t<T>;
  constexpr int V = kVec<T>;
  const int64_t vecs = (cols + V - 1) / V;
  const A uniform = eps / static_cast<A>(cols);
  const A hit = A(1) - eps;
  // As the CPU op: d(mean loss)/d(row loss) = grad / counted, in double, then acc_t.
  const A scale = counted > 0 ? static_cast<A>(*grad_loss / static_cast<double>(counted)) : A(0);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = logits + r * cols;
    T* y = dlogits + r * dlogits_ld;
    // Each side checks its own row's alignment: x's rows are `cols` elements apart,
    // y's `dlogits_ld` (padded to 16 bytes by the op layer where that matters).
    const bool x_aligned = is_aligned16(x), y_aligned = is_aligned16(y);
    const int64_t target = targets[r];
    if (target == ignore_index) {
      const Vec<T> zero{};  // all bits 0: +0 in every floating type
      for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) store_vec_checked(y, cols, i * V, y_aligned, zero);
      continue;
    }
    const A max = row_max[r];
    const A log_sum = row_log_sum[r];
    for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) {
      const Vec<T> v = load_vec_spanning(x, cols, i * V, x_aligned, convert<T>(A(0)));
      Vec<T> o{};
#pragma unroll
      for (int k = 0; k < V; ++k) {
        A g = row_exp<T>((convert<A>(v.get(k)) - max) - log_sum) - uniform;  // p_j - eps / cols
        if (i * V + k == target) g -= hit;
        o.set(k, convert<T>(g * scale));
      }
      store_vec_checked(y, cols, i * V, y_aligned, o);
    }
  }
}

unsigned grid_of(int64_t blocks) {
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, kMaxGrid));
}

// Threads per row: enough for one vector each, a multiple of 32, 32 to kMaxThreads.
template <class T>
int threads_for(int64_t cols) {
  const int64_t vecs = (cols + kVec<T> - 1) / kVec<T>;
  const int64_t warps = std::clamp<int64_t>((vecs + kWarpSize - 1) / kWarpSize, 1, kMaxThreads / kWarpSize);
  return static_cast<int>(warps * kWarpSize);
}

void check_sizes(const char* what, int64_t rows, int64_t cols) {
  DTR_CUDA_KERNEL_CHECK(rows >= 0 && cols >= 0 && (rows == 0 || cols > 0),
                        std::string("CUDA ") + what + ": expected rows >= 0 and cols > 0, got rows " +
                            std::to_string(rows) + ", cols " + std::to_string(cols));
}

}  // namespace

template <class T>
void cross_entropy_forward(const T* logits, const int64_t* targets, int64_t rows, int64_t cols,
                           int64_t ignore_index, double label_smoothing, acc_t<T>* loss,
                           acc_t<T>* row_max, acc_t<T>* row_log_sum, cudaStream_t stream) {
  using A = acc_t<T>;
  check_sizes("cross_entropy_forward", rows, cols);
  if (rows == 0) return;
  const A eps = static_cast<A>(label_smoothing);
  const unsigned grid = grid_of(rows);
  const int threads = threads_for<T>(cols);
  if (label_smoothing != 0.0) {
    cross_entropy_forward_kernel<T, true><<<grid, threads, 0, stream>>>(logits, targets, rows, cols, ignore_index,
                                                                       eps, loss, row_max, row_log_sum);
  } else {
    cross_entropy_forward_kernel<T, false><<<grid, threads, 0, stream>>>(logits, targets, rows, cols, ignore_index,
                                                                        eps, loss, row_max, row_log_sum);
  }
  DTR_CUDA_CHECK_LAUNCH();
}

template <class T>
void cross_entropy_mean(const acc_t<T>* loss, int64_t rows, int64_t counted, T* out, cudaStream_t stream) {
  DTR_CUDA_KERNEL_CHECK(rows >= 0 && counted >= 0 && counted <= rows,
                        "CUDA cross_entropy_mean: expected 0 <= counted <= rows, got rows " +
                            std::to_string(rows) + ", counted " + std::to_string(counted));
  cross_entropy_mean_kernel<T><<<1, kMeanThreads, 0, stream>>>(loss, rows, counted, out);
  DTR_CUDA_CHECK_LAUNCH();
}

template <class T>
void cross_entropy_backward(const T* logits, const int64_t* targets, const acc_t<T>* row_max,
                            const acc_t<T>* row_log_sum, int64_t rows, int64_t cols,
                            int64_t ignore_index, double label_smoothing, const double* grad_loss,
                            int64_t counted, T* dlogits, int64_t dlogits_ld, cudaStream_t stream) {
  check_sizes("cross_entropy_backward", rows, cols);
  if (rows == 0) return;
  DTR_CUDA_KERNEL_CHECK(dlogits_ld >= cols, "CUDA cross_entropy_backward: expected dlogits_ld >= cols (" +
                                                std::to_string(cols) + "), got " +
                                                std::to_string(dlogits_ld));
  cross_entropy_backward_kernel<T><<<grid_of(rows), threads_for<T>(cols), 0, stream>>>(
      logits, targets, row_max, row_log_sum, rows, cols, ignore_index,
      static_cast<acc_t<T>>(label_smoothing), grad_loss, counted, dlogits, dlogits_ld);
  DTR_CUDA_CHECK_LAUNCH();
}

#define DTR_INSTANTIATE_CUDA_CROSS_ENTROPY(T)                                                              \
  template void cross_entropy_forward<T>(const T*, const int64_t*, int64_t, int64_t, int64_t, double,       \
                                         acc_t<T>*, acc_t<T>*, acc_t<T>*, cudaStream_t);                    \
  template void cross_entropy_mean<T>(const acc_t<T>*, int64_t, int64_t, T*, cudaStream_t);                 \
  template void cross_entropy_backward<T>(const T*, const int64_t*, const acc_t<T>*, const acc_t<T>*,       \
                                          int64_t, int64_t, int64_t, double, const double*, int64_t, T*,    \
                                          int64_t, cudaStream_t);
DTR_FOR_EACH_FLOATING(DTR_INSTANTIATE_CUDA_CROSS_ENTROPY)

}  // namespace dtr::kernels::cuda
