// The per-element math of every elementwise op, shared by the CPU and CUDA
// kernels so that both compute the same function: integer arithmetic that wraps
// instead of overflowing, overflow-safe sigmoid/silu/gelu, NaN-propagating
// maximum/minimum, and truncating integer division that never traps.
//
// Functors take and return values in the type math runs in (opmath_t: float for
// bf16/f16, the element type otherwise); the kernels load, apply and round once
// on store. Transcendentals call the C library on the host and libdevice on the
// GPU (results agree within the few ulps dtr/kernels/cuda/elementwise.h states),
// except the f32 exp on the host, in exp itself and in sigmoid, silu and
// tanh-GELU (forward and gradient): exp_arith (exp_arith.h), which lets their
// loops vectorize.
// This header is fmt-free so that .cu files can include it.
#pragma once

#include "dtr/kernels/elementwise_ops.h"
#include "dtr/kernels/scalar_types.h"
#if !defined(__CUDA_ARCH__)
#include "dtr/kernels/exp_arith.h"
#endif

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace dtr::kernels::ew {

// --- integer arithmetic modulo 2^bits (no signed-overflow UB) ---

template <class C>
DTR_HOST_DEVICE C wrap_add(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

template <class C>
DTR_HOST_DEVICE C wrap_sub(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(a) - static_cast<U>(b));
  } else {
    return a - b;
  }
}

template <class C>
DTR_HOST_DEVICE C wrap_mul(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    // uint8_t would promote to (signed) int; multiply in at least unsigned int.
    using U = std::common_type_t<std::make_unsigned_t<C>, unsigned>;
    return static_cast<C>(static_cast<U>(static_cast<std::make_unsigned_t<C>>(a)) *
                          static_cast<U>(static_cast<std::make_unsigned_t<C>>(b)));
  } else {
    return a * b;
  }
}

template <class C>
DTR_HOST_DEVICE C wrap_neg(C x) {
  if constexpr (std::is_integral_v<C>) {
    return wrap_sub(C(0), x);
  } else {
    return -x;  // keeps the sign of zero: -(+0) == -0
  }
}

// --- math functions by overload: the C library on the host, libdevice on the GPU ---

#if defined(__CUDA_ARCH__)
#define DTR_EW_MATH(name, f32, f64)                                  \
  DTR_HOST_DEVICE inline float name(float x) { return ::f32(x); }  \
  DTR_HOST_DEVICE inline double name(double x) { return ::f64(x); }
#else
#define DTR_EW_MATH(name, f32, f64)                                      \
  DTR_HOST_DEVICE inline float name(float x) { return std::f64(x); }  \
  DTR_HOST_DEVICE inline double name(double x) { return std::f64(x); }
#endif
DTR_EW_MATH(exp_, expf, exp)
DTR_EW_MATH(log_, logf, log)
DTR_EW_MATH(sqrt_, sqrtf, sqrt)
DTR_EW_MATH(sin_, sinf, sin)
DTR_EW_MATH(cos_, cosf, cos)
DTR_EW_MATH(tanh_, tanhf, tanh)
DTR_EW_MATH(erfc_, erfcf, erfc)
DTR_EW_MATH(fabs_, fabsf, fabs)
#undef DTR_EW_MATH

// exp_, but for f32 on the host arithmetic that vectorizes (exp_arith.h): exp and
// the activations built on it, whose loops would otherwise stop at a library call
// per element.
template <class C>
DTR_HOST_DEVICE DTR_FORCE_INLINE C vector_exp_(C x) {
#if !defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<C, float>) return exp_arith(x);
#endif
  return exp_(x);
}

#if defined(__CUDA_ARCH__)
DTR_HOST_DEVICE inline float pow_(float x, float y) { return ::powf(x, y); }
DTR_HOST_DEVICE inline double pow_(double x, double y) { return ::pow(x, y); }
// x + y * z with the product rounded first, never contracted into an FMA.
DTR_HOST_DEVICE inline float mul_add_rounded(float x, float y, float z) { return __fadd_rn(x, __fmul_rn(y, z)); }
DTR_HOST_DEVICE inline double mul_add_rounded(double x, double y, double z) { return __dadd_rn(x, __dmul_rn(y, z)); }
#else
DTR_HOST_DEVICE inline float pow_(float x, float y) { return std::pow(x, y); }
DTR_HOST_DEVICE inline double pow_(double x, double y) { return std::pow(x, y); }
// The host compiles in ISO mode (-std=c++20), where GCC does not contract into FMAs.
DTR_HOST_DEVICE inline float mul_add_rounded(float x, float y, float z) { return x + y * z; }
DTR_HOST_DEVICE inline double mul_add_rounded(double x, double y, double z) { return x + y * z; }
#endif

// Numerically stable logistic: exp(-|x|) never overflows, and for x < 0 the result
// is e / (1 + e), which keeps tiny values (down to subnormals) instead of rounding
// 1 / (1 + huge) to zero.
template <class C>
DTR_HOST_DEVICE DTR_FORCE_INLINE C stable_sigmoid(C x) {
  const C e = vector_exp_(-fabs_(x));
  return x >= C(0) ? C(1) / (C(1) + e) : e / (C(1) + e);
}

// {sigmoid(z), sigmoid(-z)} from one exp: each exactly as stable_sigmoid gives it.
template <class C>
struct SigmoidPair {
  C pos, neg;
};
template <class C>
DTR_HOST_DEVICE DTR_FORCE_INLINE SigmoidPair<C> stable_sigmoid_pair(C z) {
  const C e = vector_exp_(-fabs_(z));
  const C big = C(1) / (C(1) + e), small = e / (C(1) + e);
  return z >= C(0) ? SigmoidPair<C>{big, small} : SigmoidPair<C>{small, big};
}

// --- unary ---

struct Neg {
  template <class C>
  DTR_HOST_DEVICE C operator()(C x) const { return wrap_neg(x); }
};
struct Abs {
  template <class C>
  DTR_HOST_DEVICE C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>) {
      return fabs_(x);
    } else if constexpr (std::is_signed_v<C>) {
      return x < C(0) ? wrap_neg(x) : x;
    } else {
      return x;
    }
  }
};
struct Square {
  template <class C>
  DTR_HOST_DEVICE C operator()(C x) const { return wrap_mul(x, x); }
};
struct Relu {
  template <class C>
  DTR_HOST_DEVICE C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>) {
      return x;
    } else {
      return x < C(0) ? C(0) : x;  // keeps NaN, like torch
    }
  }
};
struct Exp {
  template <class C>
  DTR_HOST_DEVICE DTR_FORCE_INLINE C operator()(C x) const { return vector_exp_(x); }
};
struct Log {
  template <class C>
  DTR_HOST_DEVICE C operator()(C x) const { return log_(x); }
};
struct Sqrt {
  template <class C>
  DTR_HOST_DEVICE C operator()(C x) const { return sqrt_(x); }
};
struct Rsqrt {
  template <class C>
  DTR_HOST_DEVICE C operator()(C x) const { return C(1) / sqrt_(x); }
};
struct Reciprocal {
  template <class C>
  DTR_HOST_DEVICE C operator()(C x) const { return C(1) / x; }
};
struct Sin {
  template <class C>
  DTR_HOST_DEVICE C operator()(C x) const { return sin_(x); }
};
struct Cos {
  template <class C>
  DTR_HOST_DEVICE C operator()(C x) const { return cos_(x); }
};
struct Tanh {
  template <class C>
  DTR_HOST_DEVICE C operator()(C x) const { return tanh_(x); }
};
struct Sigmoid {
  template <class C>
  DTR_HOST_DEVICE DTR_FORCE_INLINE C operator()(C x) const { return stable_sigmoid(x); }
};
struct Silu {
  template <class C>
  DTR_HOST_DEVICE DTR_FORCE_INLINE C operator()(C x) const { return x * stable_sigmoid(x); }
};
// 0.5 * (1 + tanh(u)) == 1 / (1 + exp(-2u)): the second form has no cancellation for
// large negative x (where 1 + tanh(u) loses every digit) and gives x / inf = -0
// instead of NaN once exp overflows.
struct GeluTanh {
  template <class C>
  DTR_HOST_DEVICE DTR_FORCE_INLINE C operator()(C x) const {
    const C k0 = C(0.7978845608028654);  // sqrt(2 / pi)
    const C k1 = C(0.044715);
    const C u = k0 * (x + k1 * x * x * x);
    return x / (C(1) + vector_exp_(C(-2) * u));
  }
};
// 0.5 * (1 + erf(x / sqrt2)) == 0.5 * erfc(-x / sqrt2), again without cancellation.
struct GeluErf {
  template <class C>
  DTR_HOST_DEVICE C operator()(C x) const {
    const C inv_sqrt2 = C(0.7071067811865476);
    return C(0.5) * x * erfc_(-x * inv_sqrt2);
  }
};

// --- activation gradients: g * f'(s), one pass, s the saved input x or output y ---
// (which one is grad_reads_output() in dtr/kernels/elementwise_ops.h). 1 - sigmoid(z)
// is taken as sigmoid(-z), which keeps its digits where sigmoid(z) is near 1.

struct TanhGrad {  // 1 - y²
  template <class C>
  DTR_HOST_DEVICE C operator()(C g, C y) const { return g * (C(1) - y * y); }
};
struct SigmoidGrad {  // y (1 - y)
  template <class C>
  DTR_HOST_DEVICE C operator()(C g, C y) const { return g * (y * (C(1) - y)); }
};
struct ReluGrad {  // 1 where y > 0 (relu'(0) = 0); g passes through unchanged
  template <class C>
  DTR_HOST_DEVICE C operator()(C g, C y) const { return y > C(0) ? g : C(0); }
};
struct SiluGrad {  // σ(x) (1 + x (1 - σ(x)))
  template <class C>
  DTR_HOST_DEVICE DTR_FORCE_INLINE C operator()(C g, C x) const {
    const SigmoidPair<C> s = stable_sigmoid_pair(x);
    return g * (s.pos * (C(1) + x * s.neg));
  }
};
// y = x s with s = sigmoid(2u), u = k (x + c x³):
// y' = s + 2k x s (1 - s) (1 + 3c x²).
struct GeluTanhGrad {
  template <class C>
  DTR_HOST_DEVICE DTR_FORCE_INLINE C operator()(C g, C x) const {
    const C k = C(0.7978845608028654);  // sqrt(2 / pi)
    const C c = C(0.044715);
    const C x2 = x * x;
    const C two_u = C(2) * k * (x + c * x2 * x);
    const SigmoidPair<C> s = stable_sigmoid_pair(two_u);  // s and 1 - s
    return g * (s.pos + C(2) * k * x * s.pos * s.neg * (C(1) + C(3) * c * x2));
  }
};
// d/dx x Φ(x) = Φ(x) + x φ(x), Φ(x) = erfc(-x / sqrt2) / 2, φ(x) = exp(-x² / 2) / sqrt(2 pi).
struct GeluErfGrad {
  template <class C>
  DTR_HOST_DEVICE C operator()(C g, C x) const {
    const C inv_sqrt2 = C(0.7071067811865476);
    const C inv_sqrt_2pi = C(0.3989422804014327);
    const C cdf = C(0.5) * erfc_(-x * inv_sqrt2);
    const C pdf = exp_(C(-0.5) * x * x) * inv_sqrt_2pi;
    return g * (cdf + x * pdf);
  }
};

// Calls go(functor) with the gradient functor of `op` and returns true, or returns
// false when `op` has none (has_grad_kernel(op) is false).
template <class Go>
bool with_grad_functor(UnaryOp op, Go&& go) {
  switch (op) {
    case UnaryOp::tanh: go(TanhGrad{}); return true;
    case UnaryOp::sigmoid: go(SigmoidGrad{}); return true;
    case UnaryOp::relu: go(ReluGrad{}); return true;
    case UnaryOp::silu: go(SiluGrad{}); return true;
    case UnaryOp::gelu_tanh: go(GeluTanhGrad{}); return true;
    case UnaryOp::gelu_erf: go(GeluErfGrad{}); return true;
    default: return false;
  }
}

// --- binary ---

struct Add {
  template <class C>
  DTR_HOST_DEVICE C operator()(C a, C b) const { return wrap_add(a, b); }
};
struct Sub {
  template <class C>
  DTR_HOST_DEVICE C operator()(C a, C b) const { return wrap_sub(a, b); }
};
struct Mul {
  template <class C>
  DTR_HOST_DEVICE C operator()(C a, C b) const { return wrap_mul(a, b); }
};
// Integer division truncates; a zero divisor gives 0 (callers reject it first) so
// that the kernel can never trap, and INT_MIN / -1 wraps.
struct Div {
  template <class C>
  DTR_HOST_DEVICE C operator()(C a, C b) const {
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
  DTR_HOST_DEVICE C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      return pow_(a, b);
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
// maximum and minimum propagate NaN from either side (a != a: a is NaN).
struct Maximum {
  template <class C>
  DTR_HOST_DEVICE C operator()(C a, C b) const { return (a > b || a != a) ? a : b; }
};
struct Minimum {
  template <class C>
  DTR_HOST_DEVICE C operator()(C a, C b) const { return (a < b || a != a) ? a : b; }
};
// a + alpha * b, the product rounded before the sum (never one fused rounding).
template <class C>
struct AddScaled {
  C alpha;
  DTR_HOST_DEVICE C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      return mul_add_rounded(a, alpha, b);
    } else {
      return wrap_add(a, wrap_mul(alpha, b));
    }
  }
};

// --- comparisons (NaN is unordered: only ne is true) ---

struct Eq {
  template <class C>
  DTR_HOST_DEVICE bool operator()(C a, C b) const { return a == b; }
};
struct Ne {
  template <class C>
  DTR_HOST_DEVICE bool operator()(C a, C b) const { return a != b; }
};
struct Lt {
  template <class C>
  DTR_HOST_DEVICE bool operator()(C a, C b) const { return a < b; }
};
struct Le {
  template <class C>
  DTR_HOST_DEVICE bool operator()(C a, C b) const { return a <= b; }
};
struct Gt {
  template <class C>
  DTR_HOST_DEVICE bool operator()(C a, C b) const { return a > b; }
};
struct Ge {
  template <class C>
  DTR_HOST_DEVICE bool operator()(C a, C b) const { return a >= b; }
};

}  // namespace dtr::kernels::ew
