// Internal to the CUDA elementwise kernels: the per-element math of every op, as
// device functors over the type math runs in (float, double or an integer type),
// written as the CPU functors in kernels/cpu/elementwise_{unary,binary}.cpp are, so
// that both give the same results; and the wrappers that apply them to stored
// values (loading half types into float and rounding once on store).
#pragma once

#include "kernels/cuda/elementwise_loops.cuh"

#include <cstdint>
#include <type_traits>

namespace dtr::kernels::cuda::detail {

// --- integer arithmetic modulo 2^bits (no signed-overflow UB) ---

template <class C>
__device__ C wrap_add(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

template <class C>
__device__ C wrap_sub(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(a) - static_cast<U>(b));
  } else {
    return a - b;
  }
}

template <class C>
__device__ C wrap_mul(C a, C b) {
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
__device__ C wrap_neg(C x) {
  if constexpr (std::is_integral_v<C>) {
    return wrap_sub(C(0), x);
  } else {
    return -x;
  }
}

// --- libdevice functions by overload (float -> the *f version) ---

__device__ inline float exp_(float x) { return ::expf(x); }
__device__ inline double exp_(double x) { return ::exp(x); }
__device__ inline float log_(float x) { return ::logf(x); }
__device__ inline double log_(double x) { return ::log(x); }
__device__ inline float sqrt_(float x) { return ::sqrtf(x); }
__device__ inline double sqrt_(double x) { return ::sqrt(x); }
__device__ inline float sin_(float x) { return ::sinf(x); }
__device__ inline double sin_(double x) { return ::sin(x); }
__device__ inline float cos_(float x) { return ::cosf(x); }
__device__ inline double cos_(double x) { return ::cos(x); }
__device__ inline float tanh_(float x) { return ::tanhf(x); }
__device__ inline double tanh_(double x) { return ::tanh(x); }
__device__ inline float erfc_(float x) { return ::erfcf(x); }
__device__ inline double erfc_(double x) { return ::erfc(x); }
__device__ inline float pow_(float x, float y) { return ::powf(x, y); }
__device__ inline double pow_(double x, double y) { return ::pow(x, y); }
__device__ inline float fabs_(float x) { return ::fabsf(x); }
__device__ inline double fabs_(double x) { return ::fabs(x); }
// x + y * z with the product rounded first, never contracted into an FMA.
__device__ inline float mul_add_rounded(float x, float y, float z) {
  return __fadd_rn(x, __fmul_rn(y, z));
}
__device__ inline double mul_add_rounded(double x, double y, double z) {
  return __dadd_rn(x, __dmul_rn(y, z));
}

// Numerically stable logistic (see the CPU twin).
template <class C>
__device__ C stable_sigmoid(C x) {
  const C e = exp_(-fabs_(x));
  return x >= C(0) ? C(1) / (C(1) + e) : e / (C(1) + e);
}

// --- unary ---

struct Neg {
  template <class C>
  __device__ C operator()(C x) const { return wrap_neg(x); }
};
struct Abs {
  template <class C>
  __device__ C operator()(C x) const {
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
  __device__ C operator()(C x) const { return wrap_mul(x, x); }
};
struct Relu {
  template <class C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>) {
      return x;
    } else {
      return x < C(0) ? C(0) : x;  // keeps NaN
    }
  }
};
struct Exp {
  template <class C>
  __device__ C operator()(C x) const { return exp_(x); }
};
struct Log {
  template <class C>
  __device__ C operator()(C x) const { return log_(x); }
};
struct Sqrt {
  template <class C>
  __device__ C operator()(C x) const { return sqrt_(x); }
};
struct Rsqrt {
  template <class C>
  __device__ C operator()(C x) const { return C(1) / sqrt_(x); }
};
struct Reciprocal {
  template <class C>
  __device__ C operator()(C x) const { return C(1) / x; }
};
struct Sin {
  template <class C>
  __device__ C operator()(C x) const { return sin_(x); }
};
struct Cos {
  template <class C>
  __device__ C operator()(C x) const { return cos_(x); }
};
struct Tanh {
  template <class C>
  __device__ C operator()(C x) const { return tanh_(x); }
};
struct Sigmoid {
  template <class C>
  __device__ C operator()(C x) const { return stable_sigmoid(x); }
};
struct Silu {
  template <class C>
  __device__ C operator()(C x) const { return x * stable_sigmoid(x); }
};
// x / (1 + exp(-2u)) == x * 0.5 * (1 + tanh(u)), without cancellation or overflow.
struct GeluTanh {
  template <class C>
  __device__ C operator()(C x) const {
    const C k0 = C(0.7978845608028654);  // sqrt(2 / pi)
    const C k1 = C(0.044715);
    const C u = k0 * (x + k1 * x * x * x);
    return x / (C(1) + exp_(C(-2) * u));
  }
};
// 0.5 * x * erfc(-x / sqrt2) == x * 0.5 * (1 + erf(x / sqrt2)), without cancellation.
struct GeluErf {
  template <class C>
  __device__ C operator()(C x) const {
    const C inv_sqrt2 = C(0.7071067811865476);
    return C(0.5) * x * erfc_(-x * inv_sqrt2);
  }
};

// --- binary ---

struct Add {
  template <class C>
  __device__ C operator()(C a, C b) const { return wrap_add(a, b); }
};
struct Sub {
  template <class C>
  __device__ C operator()(C a, C b) const { return wrap_sub(a, b); }
};
struct Mul {
  template <class C>
  __device__ C operator()(C a, C b) const { return wrap_mul(a, b); }
};
// Integer division truncates; a zero divisor gives 0 (callers reject it first) so the
// kernel can never trap, and INT_MIN / -1 wraps.
struct Div {
  template <class C>
  __device__ C operator()(C a, C b) const {
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
// Integer pow by squaring, wrapping; a negative exponent gives the truncated value of
// 1 / a^-b (callers reject it first).
struct Pow {
  template <class C>
  __device__ C operator()(C a, C b) const {
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
  __device__ C operator()(C a, C b) const { return (a > b || a != a) ? a : b; }
};
struct Minimum {
  template <class C>
  __device__ C operator()(C a, C b) const { return (a < b || a != a) ? a : b; }
};
template <class C>
struct AddScaled {
  C alpha;
  __device__ C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      return mul_add_rounded(a, alpha, b);
    } else {
      return wrap_add(a, wrap_mul(alpha, b));
    }
  }
};

// --- comparisons ---

struct Eq {
  template <class C>
  __device__ bool operator()(C a, C b) const { return a == b; }
};
struct Ne {
  template <class C>
  __device__ bool operator()(C a, C b) const { return a != b; }
};
struct Lt {
  template <class C>
  __device__ bool operator()(C a, C b) const { return a < b; }
};
struct Le {
  template <class C>
  __device__ bool operator()(C a, C b) const { return a <= b; }
};
struct Gt {
  template <class C>
  __device__ bool operator()(C a, C b) const { return a > b; }
};
struct Ge {
  template <class C>
  __device__ bool operator()(C a, C b) const { return a >= b; }
};

// --- wrappers over stored values ---

// S -> S: loads every operand into Elem<S>::math, applies F, rounds once on store.
template <class S, class F>
struct OnStored {
  F f;
  template <class... A>
  __device__ S operator()(A... x) const {
    return Elem<S>::store(f(Elem<S>::load(x)...));
  }
};

// S, S -> uint8_t 0 or 1.
template <class S, class P>
struct CompareStored {
  P pred;
  __device__ uint8_t operator()(S a, S b) const {
    return pred(Elem<S>::load(a), Elem<S>::load(b)) ? uint8_t{1} : uint8_t{0};
  }
};

// cond ? a : b, copying the chosen element's bits.
struct Select {
  template <class S>
  __device__ S operator()(uint8_t cond, S a, S b) const { return cond != 0 ? a : b; }
};

}  // namespace dtr::kernels::cuda::detail
