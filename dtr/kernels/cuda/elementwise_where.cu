// CUDA where() (by detail::launch_map) and any_element(), the element tests integer
// div and pow run before they compute.
#include "dtr/kernels/cuda/elementwise.h"

#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/kernels/cuda/elementwise_functors.cuh"
#include "dtr/kernels/cuda/elementwise_loops.cuh"
#include "dtr/kernels/cuda/strided_indexer.cuh"

#include <type_traits>

namespace dtr::kernels::cuda {

namespace {

using detail::Elem;
using detail::kThreads;

struct IsZero {
  template <class S>
  __device__ bool operator()(S v) const {
    using C = typename Elem<S>::math;
    return Elem<S>::load(v) == C(0);
  }
};

struct IsNegative {
  template <class S>
  __device__ bool operator()(S v) const {
    using C = typename Elem<S>::math;
    if constexpr (std::is_unsigned_v<C>) {
      return false;
    } else {
      return Elem<S>::load(v) < C(0);
    }
  }
};

// Sets *flag when a thread of the block saw an element passing `pred`.
template <class S, class P>
__global__ void __launch_bounds__(kThreads)
    any_1d_kernel(P pred, const S* x, int64_t stride, int64_t n, int* flag) {
  bool hit = false;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    hit |= pred(x[i * stride]);
  }
  if (__syncthreads_or(hit) && threadIdx.x == 0) *flag = 1;
}

template <class S, class P>
__global__ void __launch_bounds__(kThreads)
    any_nd_kernel(P pred, StridedIndexer<1> ix, const S* x, int* flag) {
  bool hit = false;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < ix.numel;
       i += int64_t{blockDim.x} * gridDim.x) {
    int64_t off[1];
    ix.offsets(i, off);
    hit |= pred(x[off[0]]);
  }
  if (__syncthreads_or(hit) && threadIdx.x == 0) *flag = 1;
}

// A 4-byte device flag, allocated and freed in stream order.
class DeviceFlag {
 public:
  explicit DeviceFlag(cudaStream_t stream) : stream_(stream) {
    DTR_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&flag_), sizeof(int), stream_));
  }
  ~DeviceFlag() { cudaFreeAsync(flag_, stream_); }
  DeviceFlag(const DeviceFlag&) = delete;
  DeviceFlag& operator=(const DeviceFlag&) = delete;
  int* get() const { return flag_; }

 private:
  cudaStream_t stream_;
  int* flag_ = nullptr;
};

template <class S, class P>
bool launch_any(P pred, const StridedIndexer<1>& ix, const S* x, cudaStream_t stream) {
  DeviceFlag flag(stream);
  DTR_CUDA_CHECK(cudaMemsetAsync(flag.get(), 0, sizeof(int), stream));
  const unsigned blocks = grid_for(ix.numel, kThreads);
  if (ix.ndim == 1) {
    any_1d_kernel<<<blocks, kThreads, 0, stream>>>(pred, x, ix.strides[0][0], ix.sizes[0],
                                                   flag.get());
  } else {
    any_nd_kernel<<<blocks, kThreads, 0, stream>>>(pred, ix, x, flag.get());
  }
  DTR_CUDA_CHECK_LAUNCH();
  int found = 0;
  DTR_CUDA_CHECK(cudaMemcpyAsync(&found, flag.get(), sizeof(int), cudaMemcpyDeviceToHost, stream));
  DTR_CUDA_CHECK(cudaStreamSynchronize(stream));
  return found != 0;
}

}  // namespace

template <class T>
void where(int ndim, const int64_t* sizes, const uint8_t* cond, const int64_t* cond_strides,
           const T* a, const int64_t* a_strides, const T* b, const int64_t* b_strides, T* out,
           const int64_t* out_strides, cudaStream_t stream) {
  using S = detail::storage_t<T>;
  detail::launch_map(detail::Select{}, ndim, sizes, detail::as_storage(out), out_strides, stream,
                     detail::Operand<uint8_t>{cond, cond_strides},
                     detail::Operand<S>{detail::as_storage(a), a_strides},
                     detail::Operand<S>{detail::as_storage(b), b_strides});
}

template <class T>
bool any_element(ElementTest test, int ndim, const int64_t* sizes, const T* x,
                 const int64_t* x_strides, cudaStream_t stream) {
  auto ix = StridedIndexer<1>::make(ndim, sizes, {x_strides});
  if (ix.numel == 0) return false;
  const auto* xs = detail::as_storage(x);
  switch (test) {
    case ElementTest::zero: return launch_any(IsZero{}, ix, xs, stream);
    case ElementTest::negative: return launch_any(IsNegative{}, ix, xs, stream);
  }
  return false;
}

#define DTR_INSTANTIATE_WHERE(T)                                                              \
  template void where<T>(int, const int64_t*, const uint8_t*, const int64_t*, const T*,       \
                         const int64_t*, const T*, const int64_t*, T*, const int64_t*,        \
                         cudaStream_t);                                                       \
  template bool any_element<T>(ElementTest, int, const int64_t*, const T*, const int64_t*,    \
                               cudaStream_t);
DTR_FOR_EACH_SCALAR(DTR_INSTANTIATE_WHERE)

}  // namespace dtr::kernels::cuda
