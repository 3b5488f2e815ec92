// Binary elementwise kernels and comparisons: one functor per op, applied by detail::map2.
#include "dtr/kernels/cpu/elementwise.h"
#include "dtr/kernels/cpu/elementwise_loops.h"
#include "dtr/kernels/elementwise_functors.h"

#include <type_traits>

namespace dtr::kernels::cpu::DTR_CPU_LEVEL {

namespace {

using namespace ew;  // the per-element functors, shared with the CUDA kernels

template <class T, class Out, class F>
void run(F f, int ndim, const int64_t* sizes, const T* a, const int64_t* a_strides, const T* b,
         const int64_t* b_strides, Out* out, const int64_t* out_strides) {
  detail::map2<T, Out>(ndim, sizes, a, a_strides, b, b_strides, out, out_strides, f);
}

}  // namespace

template <class T>
void binary(BinaryOp op, int ndim, const int64_t* sizes, const T* a, const int64_t* a_strides,
            const T* b, const int64_t* b_strides, T* out, const int64_t* out_strides) {
  auto go = [&](auto f) {
    run<T, T>(f, ndim, sizes, a, a_strides, b, b_strides, out, out_strides);
  };
  switch (op) {
    case BinaryOp::add: return go(Add{});
    case BinaryOp::sub: return go(Sub{});
    case BinaryOp::mul: return go(Mul{});
    case BinaryOp::div: return go(Div{});
    case BinaryOp::pow: return go(Pow{});
    case BinaryOp::maximum: return go(Maximum{});
    case BinaryOp::minimum: return go(Minimum{});
  }
}

template <class T>
void add_scaled(int ndim, const int64_t* sizes, const T* a, const int64_t* a_strides, const T* b,
                const int64_t* b_strides, opmath_t<T> alpha, T* out, const int64_t* out_strides) {
  run<T, T>(AddScaled<opmath_t<T>>{alpha}, ndim, sizes, a, a_strides, b, b_strides, out,
            out_strides);
}

template <class T>
void compare(CompareOp op, int ndim, const int64_t* sizes, const T* a, const int64_t* a_strides,
             const T* b, const int64_t* b_strides, uint8_t* out, const int64_t* out_strides) {
  using C = opmath_t<T>;
  auto go = [&](auto pred) {
    run<T, uint8_t>([pred](C x, C y) { return static_cast<uint8_t>(pred(x, y) ? 1 : 0); }, ndim,
                    sizes, a, a_strides, b, b_strides, out, out_strides);
  };
  switch (op) {
    case CompareOp::eq: return go(Eq{});
    case CompareOp::ne: return go(Ne{});
    case CompareOp::lt: return go(Lt{});
    case CompareOp::le: return go(Le{});
    case CompareOp::gt: return go(Gt{});
    case CompareOp::ge: return go(Ge{});
  }
}

#define DTR_INSTANTIATE_BINARY(T)                                                               \
  template void binary<T>(BinaryOp, int, const int64_t*, const T*, const int64_t*, const T*,  \
                          const int64_t*, T*, const int64_t*);                                  \
  template void add_scaled<T>(int, const int64_t*, const T*, const int64_t*, const T*,        \
                              const int64_t*, opmath_t<T>, T*, const int64_t*);                 \
  template void compare<T>(CompareOp, int, const int64_t*, const T*, const int64_t*, const T*, \
                           const int64_t*, uint8_t*, const int64_t*);
DTR_FOR_EACH_SCALAR(DTR_INSTANTIATE_BINARY)

}  // namespace dtr::kernels::cpu::DTR_CPU_LEVEL
