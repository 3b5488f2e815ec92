// Elementwise tensor ops: unary math and activations, binary arithmetic with
// NumPy broadcasting, comparisons, where(), in-place arithmetic and cast().
//
// Rules shared by every op here:
//   - Every op runs on cpu tensors and, in CUDA builds, on cuda tensors (launched on
//     the device's current stream; results match the CPU's, see dtr/kernels/cuda/elementwise.h).
//   - Operands must be on the same device and have the same dtype (no implicit
//     promotion: cast first). A Scalar operand is converted to the tensor's dtype,
//     so int_tensor + 2.7 adds 2, and u8_tensor + (-1) adds 255.
//   - Shapes broadcast like NumPy ([4, 1, 3] with [5, 1] gives [4, 5, 3]); errors
//     name the op, both shapes and the dim that does not match.
//   - Inputs are read through their strides (transposed, sliced and expanded views
//     are never copied); results are new contiguous tensors.
//   - On the meta device an op checks its inputs and returns an (unfilled) meta
//     tensor of the result shape.
//   - bf16 and f16 compute in float and round once; integer arithmetic wraps on
//     overflow and integer division truncates toward zero (-7 / 2 == -3). Integer
//     division by zero, and integer pow with a negative exponent, are errors.
//   - exp, log, sqrt, rsqrt, reciprocal, sin, cos, tanh, sigmoid, gelu and silu are
//     defined for floating dtypes only; neg, abs, square, relu and all binary ops
//     and comparisons work for every dtype.
//
// In-place ops (add_, sub_, mul_, div_) write into `self` and return it. The
// broadcast of self with other must have self's shape, self must not have two
// elements at one memory location (e.g. an expanded view), and `other` may
// overlap self (it is copied first when it does).
//
// Autograd: every op on floating tensors records its backward when grad mode is on
// and an input requires grad (formulas and non-differentiable-point choices in
// dtr/tensor/ops/elementwise_backward.h); gradients are summed back over broadcast
// dims and a Scalar operand gets none. where() passes gradients to a and b, never
// to cond. Comparisons give u8 results, which never require grad. In-place ops are
// not recorded: they refuse (while grad mode is on) a self or an other that
// requires grad. cast() records like Tensor::to(dtype).
#pragma once

#include "dtr/tensor/scalar.h"
#include "dtr/tensor/tensor.h"

namespace dtr {

enum class GeluApproximation { none, tanh };

// --- unary ---
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);  // 1 / sqrt(x)
Tensor square(const Tensor& x);
Tensor reciprocal(const Tensor& x);  // 1 / x
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
// none: x * Phi(x) with the exact normal CDF; tanh: the tanh approximation (torch's
// approximate="tanh").
Tensor gelu(const Tensor& x, GeluApproximation approximate = GeluApproximation::none);
Tensor silu(const Tensor& x);  // x * sigmoid(x)

// --- binary, with broadcasting ---
Tensor add(const Tensor& a, const Tensor& b, Scalar alpha = 1);  // a + alpha * b
Tensor add(const Tensor& a, Scalar b);
Tensor add(Scalar a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, Scalar b);
Tensor sub(Scalar a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, Scalar b);
Tensor mul(Scalar a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, Scalar b);
Tensor div(Scalar a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, Scalar b);
Tensor pow(Scalar a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);  // NaN if either is NaN
Tensor maximum(const Tensor& a, Scalar b);
Tensor maximum(Scalar a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, Scalar b);
Tensor minimum(Scalar a, const Tensor& b);

Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, Scalar b);
Tensor operator+(Scalar a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, Scalar b);
Tensor operator-(Scalar a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, Scalar b);
Tensor operator*(Scalar a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, Scalar b);
Tensor operator/(Scalar a, const Tensor& b);

// --- comparisons: u8 tensors of 0 and 1, with broadcasting (NaN compares unequal) ---
Tensor eq(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, Scalar b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, Scalar b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, Scalar b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, Scalar b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, Scalar b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, Scalar b);

// cond ? a : b elementwise, all three broadcast together; cond must be u8 (non-zero
// is true), a and b share a dtype, which the result has.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// --- in place ---
// self += alpha * other
const Tensor& add_(const Tensor& self, const Tensor& other, Scalar alpha = 1);
const Tensor& add_(const Tensor& self, Scalar other);
const Tensor& sub_(const Tensor& self, const Tensor& other);
const Tensor& sub_(const Tensor& self, Scalar other);
const Tensor& mul_(const Tensor& self, const Tensor& other);
const Tensor& mul_(const Tensor& self, Scalar other);
const Tensor& div_(const Tensor& self, const Tensor& other);
const Tensor& div_(const Tensor& self, Scalar other);

// A copy converted to `dtype` (t itself when it already has it), like t.to(dtype).
Tensor cast(const Tensor& t, DType dtype);

}  // namespace dtr
