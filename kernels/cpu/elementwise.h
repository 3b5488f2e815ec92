// Elementwise math on the CPU: unary ops, binary ops, comparisons and where().
//
// Every kernel takes one iteration shape (`ndim`, `sizes`) and, per operand, a
// pointer to its first element and its element strides over that shape (0 on
// broadcast dims), so broadcast, transposed and sliced operands are read in
// place. The output may be the same memory as an input at the same index (an
// in-place op); any other overlap between output and inputs is the caller's to
// avoid. Rows are split across threads for large shapes (strided_loop.h).
//
// Math runs in opmath_t<T>: float for bf16 and f16 (each result rounded once on
// store), T itself otherwise. Integer semantics:
//   - add, sub, mul, neg, abs, square and pow wrap around on overflow (two's
//     complement, as if computed in the unsigned type of the same width);
//   - div truncates toward zero, like C++ (-7 / 2 == -3); INT_MIN / -1 wraps to
//     INT_MIN. A zero divisor, or a negative exponent in pow, must be rejected by
//     the caller first (any_element() finds them): the kernels do not check;
//   - the floating-only unary ops (exp, log, ..., silu) throw
//     std::invalid_argument for integer T; callers reject them before that.
// Floating semantics follow IEEE (x / 0 is +-inf or NaN); maximum and minimum
// propagate NaN. sigmoid, silu and both gelus are evaluated in forms that
// neither overflow nor cancel at large |x| (see elementwise_unary.cpp).
#pragma once

#include "kernels/scalar_types.h"

#include <cstdint>
#include <string_view>
#include <type_traits>

namespace dtr::kernels::cpu {

// The type elementwise math runs in for element type T.
template <class T>
using opmath_t = std::conditional_t<is_half_v<T>, float, T>;

enum class UnaryOp {
  neg,
  abs,
  exp,
  log,
  sqrt,
  rsqrt,
  square,
  reciprocal,
  sin,
  cos,
  tanh,
  sigmoid,
  relu,
  gelu_tanh,  // x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
  gelu_erf,   // x * 0.5 * (1 + erf(x / sqrt(2)))
  silu,       // x * sigmoid(x)
};

enum class BinaryOp { add, sub, mul, div, pow, maximum, minimum };

enum class CompareOp { eq, ne, lt, le, gt, ge };

// Element tests for the checks integer ops need before they run.
enum class ElementTest { zero, negative };

std::string_view unary_op_name(UnaryOp op);      // "neg", "gelu_tanh", ...
std::string_view binary_op_name(BinaryOp op);    // "add", ...
std::string_view compare_op_name(CompareOp op);  // "eq", ...
// True for the ops defined on floating types only (everything but neg, abs, square, relu).
bool is_floating_only(UnaryOp op);

// out[i] = op(x[i]).
template <class T>
void unary(UnaryOp op, int ndim, const int64_t* sizes, const T* x, const int64_t* x_strides,
           T* out, const int64_t* out_strides);

// out[i] = op(a[i], b[i]).
template <class T>
void binary(BinaryOp op, int ndim, const int64_t* sizes, const T* a, const int64_t* a_strides,
            const T* b, const int64_t* b_strides, T* out, const int64_t* out_strides);

// out[i] = a[i] + alpha * b[i], computed in opmath_t<T> and rounded once (add with
// torch's alpha; sub is alpha = -alpha).
template <class T>
void add_scaled(int ndim, const int64_t* sizes, const T* a, const int64_t* a_strides, const T* b,
                const int64_t* b_strides, opmath_t<T> alpha, T* out, const int64_t* out_strides);

// out[i] = op(a[i], b[i]) ? 1 : 0.
template <class T>
void compare(CompareOp op, int ndim, const int64_t* sizes, const T* a, const int64_t* a_strides,
             const T* b, const int64_t* b_strides, uint8_t* out, const int64_t* out_strides);

// out[i] = cond[i] != 0 ? a[i] : b[i].
template <class T>
void where(int ndim, const int64_t* sizes, const uint8_t* cond, const int64_t* cond_strides,
           const T* a, const int64_t* a_strides, const T* b, const int64_t* b_strides, T* out,
           const int64_t* out_strides);

// True when some element x[i] passes `test` (e.g. a zero divisor for integer div).
template <class T>
bool any_element(ElementTest test, int ndim, const int64_t* sizes, const T* x,
                 const int64_t* x_strides);

}  // namespace dtr::kernels::cpu
