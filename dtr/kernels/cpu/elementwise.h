// Elementwise math on the CPU: unary ops, binary ops, comparisons and where().
//
// Every kernel takes one iteration shape (`ndim`, `sizes`) and, per operand, a
// pointer to its first element and its element strides over that shape (0 on
// broadcast dims), so broadcast, transposed and sliced operands are read in
// place. The output may be the same memory as an input at the same index (an
// in-place op); any other overlap between output and inputs is the caller's to
// avoid. Rows are split across threads for large shapes (strided_loop.h).
//
// The op codes live in dtr/kernels/elementwise_ops.h (shared with kernels/cuda/).
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

#include "dtr/kernels/cpu/cpu_level.h"
#include "dtr/kernels/elementwise_ops.h"
#include "dtr/kernels/scalar_types.h"

#include <cstdint>

namespace dtr::kernels::cpu {

// The op codes, their names and opmath_t are shared with the CUDA kernels.
using kernels::BinaryOp;
using kernels::binary_op_name;
using kernels::compare_op_name;
using kernels::CompareOp;
using kernels::ElementTest;
using kernels::grad_reads_output;
using kernels::has_grad_kernel;
using kernels::is_floating_only;
using kernels::opmath_t;
using kernels::unary_op_name;
using kernels::UnaryOp;

// out[i] = op(x[i]).
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void unary(UnaryOp op, int ndim, const int64_t* sizes, const T* x,
                                  const int64_t* x_strides, T* out, const int64_t* out_strides);)
template <class T>
void unary(UnaryOp op, int ndim, const int64_t* sizes, const T* x, const int64_t* x_strides,
           T* out, const int64_t* out_strides) {
  return DTR_CPU_DISPATCH(unary<T>)(op, ndim, sizes, x, x_strides, out, out_strides);
}

// out[i] = op(a[i], b[i]).
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void binary(BinaryOp op, int ndim, const int64_t* sizes, const T* a,
                                   const int64_t* a_strides, const T* b, const int64_t* b_strides,
                                   T* out, const int64_t* out_strides);)
template <class T>
void binary(BinaryOp op, int ndim, const int64_t* sizes, const T* a, const int64_t* a_strides,
            const T* b, const int64_t* b_strides, T* out, const int64_t* out_strides) {
  return DTR_CPU_DISPATCH(binary<T>)(op, ndim, sizes, a, a_strides, b, b_strides, out, out_strides);
}

// out[i] = g[i] * f'(s[i]) for f = op, one of has_grad_kernel(op), with s the
// forward's output where grad_reads_output(op), else its input: computed in
// opmath_t<T> and rounded once. Floating T only (throws std::invalid_argument else).
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void unary_grad(UnaryOp op, int ndim, const int64_t* sizes, const T* g,
                                       const int64_t* g_strides, const T* s,
                                       const int64_t* s_strides, T* out,
                                       const int64_t* out_strides);)
template <class T>
void unary_grad(UnaryOp op, int ndim, const int64_t* sizes, const T* g, const int64_t* g_strides,
                const T* s, const int64_t* s_strides, T* out, const int64_t* out_strides) {
  return DTR_CPU_DISPATCH(unary_grad<T>)(op, ndim, sizes, g, g_strides, s, s_strides, out,
                                         out_strides);
}

// out[i] = a[i] + alpha * b[i], computed in opmath_t<T> and rounded once (add with
// torch's alpha; sub is alpha = -alpha).
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void add_scaled(int ndim, const int64_t* sizes, const T* a,
                                       const int64_t* a_strides, const T* b,
                                       const int64_t* b_strides, opmath_t<T> alpha, T* out,
                                       const int64_t* out_strides);)
template <class T>
void add_scaled(int ndim, const int64_t* sizes, const T* a, const int64_t* a_strides, const T* b,
                const int64_t* b_strides, opmath_t<T> alpha, T* out, const int64_t* out_strides) {
  return DTR_CPU_DISPATCH(add_scaled<T>)(ndim, sizes, a, a_strides, b, b_strides, alpha, out,
                                         out_strides);
}

// out[i] = op(a[i], b[i]) ? 1 : 0.
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void compare(CompareOp op, int ndim, const int64_t* sizes, const T* a,
                                    const int64_t* a_strides, const T* b, const int64_t* b_strides,
                                    uint8_t* out, const int64_t* out_strides);)
template <class T>
void compare(CompareOp op, int ndim, const int64_t* sizes, const T* a, const int64_t* a_strides,
             const T* b, const int64_t* b_strides, uint8_t* out, const int64_t* out_strides) {
  return DTR_CPU_DISPATCH(compare<T>)(op, ndim, sizes, a, a_strides, b, b_strides, out,
                                      out_strides);
}

// out[i] = cond[i] != 0 ? a[i] : b[i].
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void where(int ndim, const int64_t* sizes, const uint8_t* cond,
                                  const int64_t* cond_strides, const T* a, const int64_t* a_strides,
                                  const T* b, const int64_t* b_strides, T* out,
                                  const int64_t* out_strides);)
template <class T>
void where(int ndim, const int64_t* sizes, const uint8_t* cond, const int64_t* cond_strides,
           const T* a, const int64_t* a_strides, const T* b, const int64_t* b_strides, T* out,
           const int64_t* out_strides) {
  return DTR_CPU_DISPATCH(where<T>)(ndim, sizes, cond, cond_strides, a, a_strides, b, b_strides,
                                    out, out_strides);
}

// True when some element x[i] passes `test` (e.g. a zero divisor for integer div).
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       bool any_element(ElementTest test, int ndim, const int64_t* sizes,
                                        const T* x, const int64_t* x_strides);)
template <class T>
bool any_element(ElementTest test, int ndim, const int64_t* sizes, const T* x,
                 const int64_t* x_strides) {
  return DTR_CPU_DISPATCH(any_element<T>)(test, ndim, sizes, x, x_strides);
}

}  // namespace dtr::kernels::cpu
