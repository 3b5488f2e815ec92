// Autograd for the elementwise ops (internal to tensor/ops/): the forward ops in
// elementwise.cpp compute their result, then call one of these to record its
// backward. Each call does nothing unless grad mode is on and a differentiable
// input requires grad, so ops on plain tensors build no graph.
//
// Backward formulas are written with the elementwise ops themselves (they run with
// grad mode off), so they work on every device the forward runs on; the
// activations (tanh, sigmoid, relu, silu, both gelus) have one-pass gradient
// kernels instead, since their formulas would take a dozen passes over the
// largest activations of a model. Gradients are
// summed back to each input's shape (the adjoint of broadcasting) and have the
// input's dtype; for bf16 and f16 the multi-step formulas compute in f32 and round
// once. Non-differentiable points get PyTorch's choices: relu' (0) = 0, abs' (0) = 0,
// maximum/minimum split the gradient evenly between tied inputs, pow's exponent
// gradient is 0 where the base is 0 and the exponent is >= 0.
#pragma once

#include "dtr/kernels/elementwise_ops.h"
#include "dtr/tensor/scalar.h"
#include "dtr/tensor/tensor.h"

namespace dtr::ops {

// out = kind(x).
void record_unary_grad(kernels::UnaryOp kind, const Tensor& x, const Tensor& out);

// g * f'(s) for f = kind with kernels::has_grad_kernel(kind), in one kernel on g's
// device (s is f's output where kernels::grad_reads_output(kind), else its input;
// both of g's shape and dtype). Records nothing: backward formulas run without grad.
Tensor activation_grad(kernels::UnaryOp kind, const Tensor& g, const Tensor& s);

// out = kind(a, b) with broadcasting; for add, out = a + alpha * b.
void record_binary_grad(kernels::BinaryOp kind, const Tensor& a, const Tensor& b,
                        const Tensor& out, Scalar alpha = 1);

// out = where(cond, a, b): gradients flow to a and b, never to cond.
void record_where_grad(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out);

}  // namespace dtr::ops
