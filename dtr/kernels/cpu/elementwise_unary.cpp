// Unary elementwise kernels: one functor per UnaryOp, applied by detail::map1.
#include "dtr/kernels/cpu/elementwise.h"
#include "dtr/kernels/cpu/elementwise_loops.h"
#include "dtr/kernels/elementwise_functors.h"

#include <stdexcept>
#include <string>

namespace dtr::kernels::cpu::DTR_CPU_LEVEL {

namespace {

using namespace ew;  // the per-element functors, shared with the CUDA kernels

template <class T, class F>
void run(F f, int ndim, const int64_t* sizes, const T* x, const int64_t* x_strides, T* out,
         const int64_t* out_strides) {
  detail::map1<T, T>(ndim, sizes, x, x_strides, out, out_strides, f);
}

}  // namespace

template <class T>
void unary(UnaryOp op, int ndim, const int64_t* sizes, const T* x, const int64_t* x_strides,
           T* out, const int64_t* out_strides) {
  auto go = [&](auto f) { run<T>(f, ndim, sizes, x, x_strides, out, out_strides); };
  switch (op) {
    case UnaryOp::neg: return go(Neg{});
    case UnaryOp::abs: return go(Abs{});
    case UnaryOp::square: return go(Square{});
    case UnaryOp::relu: return go(Relu{});
    default: break;
  }
  if constexpr (is_floating_v<T>) {
    switch (op) {
      case UnaryOp::exp: return go(Exp{});
      case UnaryOp::log: return go(Log{});
      case UnaryOp::sqrt: return go(Sqrt{});
      case UnaryOp::rsqrt: return go(Rsqrt{});
      case UnaryOp::reciprocal: return go(Reciprocal{});
      case UnaryOp::sin: return go(Sin{});
      case UnaryOp::cos: return go(Cos{});
      case UnaryOp::tanh: return go(Tanh{});
      case UnaryOp::sigmoid: return go(Sigmoid{});
      case UnaryOp::gelu_tanh: return go(GeluTanh{});
      case UnaryOp::gelu_erf: return go(GeluErf{});
      case UnaryOp::silu: return go(Silu{});
      default: break;
    }
  }
  throw std::invalid_argument("kernels::cpu::unary: op " + std::string(unary_op_name(op)) +
                              " is not defined for this element type");
}

#define DTR_INSTANTIATE_UNARY(T)                                                    \
  template void unary<T>(UnaryOp, int, const int64_t*, const T*, const int64_t*, T*, \
                         const int64_t*);
DTR_FOR_EACH_SCALAR(DTR_INSTANTIATE_UNARY)

}  // namespace dtr::kernels::cpu::DTR_CPU_LEVEL
