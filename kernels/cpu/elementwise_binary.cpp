// Binary elementwise kernels and comparisons: one functor per op, applied by detail::map2.
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/elementwise_loops.h"

#include <cmath>
#include <type_traits>

namespace dtr::kernels::cpu {

namespace {

using detail::wrap_add;
using detail::wrap_mul;
using detail::wrap_neg;
using detail::wrap_sub;

struct Add {
  template <class C>
  C operator()(C a, C b) const { return wrap_add(a, b); }
};
struct Sub {
  template <class C>
  C operator()(C a, C b) const { return wrap_sub(a, b); }
};
struct Mul {
  template <class C>
  C operator()(C a, C b) const { return wrap_mul(a, b); }
};
// Integer division truncates; a zero divisor gives 0 here (callers reject it
// first) so that the kernel can never trap, and INT_MIN / -1 wraps.
struct Div {
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      return a / b;
    } else {
      if (b == C(0)) return C(0);
      if constexpr (std::is_signed_v<C>) {
        if (b == C(-1)) return wrap_neg(a);
      }
      return static_cast<C>(a / b);
    }
  }
};
// Integer pow by squaring, wrapping on overflow. A negative exponent gives the
// truncated value of 1 / a^-b (1, +-1 for a == -1, else 0); callers reject it first.
struct Pow {
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      return std::pow(a, b);
    } else {
      if constexpr (std::is_signed_v<C>) {
        if (b < C(0)) {
          if (a == C(1)) return C(1);
          if (a == C(-1)) return (b & C(1)) ? C(-1) : C(1);
          return C(0);
        }
      }
      C result = C(1);
      auto e = static_cast<std::make_unsigned_t<C>>(b);
      while (e != 0) {
        if (e & 1u) result = wrap_mul(result, a);
        a = wrap_mul(a, a);
        e >>= 1;
      }
      return result;
    }
  }
};
// maximum and minimum propagate NaN from either side.
struct Maximum {
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      return (a > b || std::isnan(a)) ? a : b;
    } else {
      return a > b ? a : b;
    }
  }
};
struct Minimum {
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      return (a < b || std::isnan(a)) ? a : b;
    } else {
      return a < b ? a : b;
    }
  }
};

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
  using C = opmath_t<T>;
  run<T, T>([alpha](C x, C y) { return wrap_add(x, wrap_mul(alpha, y)); }, ndim, sizes, a,
            a_strides, b, b_strides, out, out_strides);
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
    case CompareOp::eq: return go([](C x, C y) { return x == y; });
    case CompareOp::ne: return go([](C x, C y) { return x != y; });
    case CompareOp::lt: return go([](C x, C y) { return x < y; });
    case CompareOp::le: return go([](C x, C y) { return x <= y; });
    case CompareOp::gt: return go([](C x, C y) { return x > y; });
    case CompareOp::ge: return go([](C x, C y) { return x >= y; });
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

}  // namespace dtr::kernels::cpu
