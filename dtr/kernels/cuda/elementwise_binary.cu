// CUDA binary elementwise kernels, add_scaled and comparisons: one functor per op
// (elementwise_functors.cuh), applied by detail::launch_map.
#include "dtr/kernels/cuda/elementwise.h"

#include "dtr/kernels/cuda/elementwise_functors.cuh"
#include "dtr/kernels/cuda/elementwise_loops.cuh"

namespace dtr::kernels::cuda {

template <class T>
void binary(BinaryOp op, int ndim, const int64_t* sizes, const T* a, const int64_t* a_strides,
            const T* b, const int64_t* b_strides, T* out, const int64_t* out_strides,
            cudaStream_t stream) {
  using S = detail::storage_t<T>;
  auto go = [&](auto f) {
    detail::launch_map(detail::OnStored<S, decltype(f)>{f}, ndim, sizes, detail::as_storage(out),
                       out_strides, stream, detail::Operand<S>{detail::as_storage(a), a_strides},
                       detail::Operand<S>{detail::as_storage(b), b_strides});
  };
  switch (op) {
    case BinaryOp::add: return go(detail::Add{});
    case BinaryOp::sub: return go(detail::Sub{});
    case BinaryOp::mul: return go(detail::Mul{});
    case BinaryOp::div: return go(detail::Div{});
    case BinaryOp::pow: return go(detail::Pow{});
    case BinaryOp::maximum: return go(detail::Maximum{});
    case BinaryOp::minimum: return go(detail::Minimum{});
  }
}

template <class T>
void add_scaled(int ndim, const int64_t* sizes, const T* a, const int64_t* a_strides, const T* b,
                const int64_t* b_strides, opmath_t<T> alpha, T* out, const int64_t* out_strides,
                cudaStream_t stream) {
  using S = detail::storage_t<T>;
  using F = detail::AddScaled<opmath_t<T>>;
  detail::launch_map(detail::OnStored<S, F>{F{alpha}}, ndim, sizes, detail::as_storage(out),
                     out_strides, stream, detail::Operand<S>{detail::as_storage(a), a_strides},
                     detail::Operand<S>{detail::as_storage(b), b_strides});
}

template <class T>
void compare(CompareOp op, int ndim, const int64_t* sizes, const T* a, const int64_t* a_strides,
             const T* b, const int64_t* b_strides, uint8_t* out, const int64_t* out_strides,
             cudaStream_t stream) {
  using S = detail::storage_t<T>;
  auto go = [&](auto pred) {
    detail::launch_map(detail::CompareStored<S, decltype(pred)>{pred}, ndim, sizes, out,
                       out_strides, stream, detail::Operand<S>{detail::as_storage(a), a_strides},
                       detail::Operand<S>{detail::as_storage(b), b_strides});
  };
  switch (op) {
    case CompareOp::eq: return go(detail::Eq{});
    case CompareOp::ne: return go(detail::Ne{});
    case CompareOp::lt: return go(detail::Lt{});
    case CompareOp::le: return go(detail::Le{});
    case CompareOp::gt: return go(detail::Gt{});
    case CompareOp::ge: return go(detail::Ge{});
  }
}

#define DTR_INSTANTIATE_BINARY(T)                                                               \
  template void binary<T>(BinaryOp, int, const int64_t*, const T*, const int64_t*, const T*,  \
                          const int64_t*, T*, const int64_t*, cudaStream_t);                    \
  template void add_scaled<T>(int, const int64_t*, const T*, const int64_t*, const T*,        \
                              const int64_t*, opmath_t<T>, T*, const int64_t*, cudaStream_t);   \
  template void compare<T>(CompareOp, int, const int64_t*, const T*, const int64_t*, const T*, \
                           const int64_t*, uint8_t*, const int64_t*, cudaStream_t);
DTR_FOR_EACH_SCALAR(DTR_INSTANTIATE_BINARY)

}  // namespace dtr::kernels::cuda
