// Activation gradient kernels: g * f'(s) in one pass, one functor per op, applied by detail::map2.
#include "dtr/kernels/cpu/elementwise.h"
#include "dtr/kernels/cpu/elementwise_loops.h"
#include "dtr/kernels/elementwise_functors.h"

#include <stdexcept>
#include <string>

namespace dtr::kernels::cpu::DTR_CPU_LEVEL {

template <class T>
void unary_grad(UnaryOp op, int ndim, const int64_t* sizes, const T* g, const int64_t* g_strides,
                const T* s, const int64_t* s_strides, T* out, const int64_t* out_strides) {
  if constexpr (is_floating_v<T>) {
    auto go = [&](auto f) {
      detail::map2<T, T>(ndim, sizes, g, g_strides, s, s_strides, out, out_strides, f);
    };
    if (ew::with_grad_functor(op, go)) return;
  }
  throw std::invalid_argument("kernels::cpu::unary_grad: no gradient kernel for op " +
                              std::string(unary_op_name(op)) + " on this element type");
}

#define DTR_INSTANTIATE_UNARY_GRAD(T)                                                        \
  template void unary_grad<T>(UnaryOp, int, const int64_t*, const T*, const int64_t*, const T*, \
                              const int64_t*, T*, const int64_t*);
DTR_FOR_EACH_SCALAR(DTR_INSTANTIATE_UNARY_GRAD)

}  // namespace dtr::kernels::cpu::DTR_CPU_LEVEL
