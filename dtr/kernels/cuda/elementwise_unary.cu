// CUDA unary elementwise kernels: one functor per UnaryOp (elementwise_functors.cuh),
// applied by detail::launch_map.
#include "dtr/kernels/cuda/elementwise.h"

#include "dtr/kernels/cuda/elementwise_functors.cuh"
#include "dtr/kernels/cuda/elementwise_loops.cuh"

#include <string>

namespace dtr::kernels::cuda {

template <class T>
void unary(UnaryOp op, int ndim, const int64_t* sizes, const T* x, const int64_t* x_strides,
           T* out, const int64_t* out_strides, cudaStream_t stream) {
  using S = detail::storage_t<T>;
  auto go = [&](auto f) {
    detail::launch_map(detail::OnStored<S, decltype(f)>{f}, ndim, sizes, detail::as_storage(out),
                       out_strides, stream, detail::Operand<S>{detail::as_storage(x), x_strides});
  };
  switch (op) {
    case UnaryOp::neg: return go(detail::Neg{});
    case UnaryOp::abs: return go(detail::Abs{});
    case UnaryOp::square: return go(detail::Square{});
    case UnaryOp::relu: return go(detail::Relu{});
    default: break;
  }
  if constexpr (is_floating_v<T>) {
    switch (op) {
      case UnaryOp::exp: return go(detail::Exp{});
      case UnaryOp::log: return go(detail::Log{});
      case UnaryOp::sqrt: return go(detail::Sqrt{});
      case UnaryOp::rsqrt: return go(detail::Rsqrt{});
      case UnaryOp::reciprocal: return go(detail::Reciprocal{});
      case UnaryOp::sin: return go(detail::Sin{});
      case UnaryOp::cos: return go(detail::Cos{});
      case UnaryOp::tanh: return go(detail::Tanh{});
      case UnaryOp::sigmoid: return go(detail::Sigmoid{});
      case UnaryOp::gelu_tanh: return go(detail::GeluTanh{});
      case UnaryOp::gelu_erf: return go(detail::GeluErf{});
      case UnaryOp::silu: return go(detail::Silu{});
      default: break;
    }
  }
  DTR_CUDA_KERNEL_CHECK(false, "kernels::cuda::unary: op " + std::string(unary_op_name(op)) +
                                   " is not defined for this element type");
}

#define DTR_INSTANTIATE_UNARY(T)                                                    \
  template void unary<T>(UnaryOp, int, const int64_t*, const T*, const int64_t*, T*, \
                         const int64_t*, cudaStream_t);
DTR_FOR_EACH_SCALAR(DTR_INSTANTIATE_UNARY)

}  // namespace dtr::kernels::cuda
