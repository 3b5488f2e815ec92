// Unary elementwise kernels: one functor per UnaryOp, applied by detail::map1.
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/elementwise_loops.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace dtr::kernels::cpu {

namespace {

using detail::wrap_mul;
using detail::wrap_neg;

// Numerically stable logistic: exp(-|x|) never overflows, and for x < 0 the
// result is e / (1 + e), which keeps tiny values (down to subnormals) instead of
// rounding 1 / (1 + huge) to zero.
template <class C>
C stable_sigmoid(C x) {
  const C e = std::exp(-std::abs(x));
  return x >= C(0) ? C(1) / (C(1) + e) : e / (C(1) + e);
}

struct Neg {
  template <class C>
  C operator()(C x) const { return wrap_neg(x); }
};
struct Abs {
  template <class C>
  C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>) {
      return std::abs(x);
    } else if constexpr (std::is_signed_v<C>) {
      return x < C(0) ? wrap_neg(x) : x;
    } else {
      return x;
    }
  }
};
struct Square {
  template <class C>
  C operator()(C x) const { return wrap_mul(x, x); }
};
struct Relu {
  template <class C>
  C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>) {
      return x;
    } else {
      return x < C(0) ? C(0) : x;  // keeps NaN, like torch
    }
  }
};
struct Exp {
  template <class C>
  C operator()(C x) const { return std::exp(x); }
};
struct Log {
  template <class C>
  C operator()(C x) const { return std::log(x); }
};
struct Sqrt {
  template <class C>
  C operator()(C x) const { return std::sqrt(x); }
};
struct Rsqrt {
  template <class C>
  C operator()(C x) const { return C(1) / std::sqrt(x); }
};
struct Reciprocal {
  template <class C>
  C operator()(C x) const { return C(1) / x; }
};
struct Sin {
  template <class C>
  C operator()(C x) const { return std::sin(x); }
};
struct Cos {
  template <class C>
  C operator()(C x) const { return std::cos(x); }
};
struct Tanh {
  template <class C>
  C operator()(C x) const { return std::tanh(x); }
};
struct Sigmoid {
  template <class C>
  C operator()(C x) const { return stable_sigmoid(x); }
};
struct Silu {
  template <class C>
  C operator()(C x) const { return x * stable_sigmoid(x); }
};
// 0.5 * (1 + tanh(u)) == 1 / (1 + exp(-2u)): the second form has no cancellation
// for large negative x (where 1 + tanh(u) loses every digit) and gives x / inf = -0
// instead of NaN once exp overflows.
struct GeluTanh {
  template <class C>
  C operator()(C x) const {
    const C k0 = C(0.7978845608028654);  // sqrt(2 / pi)
    const C k1 = C(0.044715);
    const C u = k0 * (x + k1 * x * x * x);
    return x / (C(1) + std::exp(C(-2) * u));
  }
};
// 0.5 * (1 + erf(x / sqrt2)) == 0.5 * erfc(-x / sqrt2), again without cancellation.
struct GeluErf {
  template <class C>
  C operator()(C x) const {
    const C inv_sqrt2 = C(0.7071067811865476);
    return C(0.5) * x * std::erfc(-x * inv_sqrt2);
  }
};

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

}  // namespace dtr::kernels::cpu
