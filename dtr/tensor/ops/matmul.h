// Matrix products on tensors: matmul (torch.matmul semantics), mm, bmm and addmm.
//
// All take floating tensors (f32, f64, bf16, f16) of one dtype on one device;
// bf16 and f16 accumulate in f32. Results are new contiguous tensors allocated
// under the thread's current MemoryTag. Operands whose last two dims are laid out
// row-major or transposed (any row stride, unit column stride or the reverse) are
// read in place; other layouts are copied to contiguous first. On the meta device
// the result is an empty meta tensor of the right shape and nothing is computed.
//
// Devices: cpu (Eigen), and in CUDA builds cuda for f32, bf16 and f16 (the
// handwritten dtr/kernels/cuda/gemm.h on the device's current stream; f32 without
// TF32). f64 on cuda is an error: there is no f64 CUDA GEMM.
//
// Autograd: every op here is differentiable in each operand: grad_a = g . b^T and
// grad_b = a^T . g, summed over the batch dims an operand was broadcast along;
// addmm gives c beta * g summed to c's shape and scales a's and b's by alpha.
#pragma once

#include "dtr/tensor/tensor.h"

namespace dtr {

// torch.matmul:
//   1-D . 1-D        -> 0-dim dot product ([k] . [k] -> [])
//   2-D . 2-D        -> matrix product ([m, k] . [k, n] -> [m, n])
//   1-D . N-D        -> a is treated as [1, k] and that dim is removed from the result
//   N-D . 1-D        -> b is treated as [k, 1] and that dim is removed from the result
//   N-D . N-D        -> batched over the leading dims, which broadcast (NumPy rules):
//                       [j, 1, m, k] . [l, k, n] -> [j, l, m, n]
// Both operands need at least one dim.
Tensor matmul(const Tensor& a, const Tensor& b);

// An activation linear applies to its result in the same pass over it.
enum class LinearActivation { none, gelu_tanh, gelu_erf };

// torch.nn.functional.linear: x . weight^T + bias over x's last dim, for x of any
// rank >= 1, weight [out, in] and bias [out] (optional: undefined for none), then
// the activation, if any: gelu(linear(x, weight, bias)) with the tanh or the erf form.
// One GEMM computes it all: the bias and the activation are its epilogue
// (dtr/kernels/gemm_epilogue.h), applied before the result is rounded to a 16-bit dtype
// (the activation reads the rounded pre-activation, which the backward keeps).
// Gradients: x's is g . weight, weight's g^T . x (contiguous, [out, in]), bias's g
// summed over the rows, with g first multiplied by gelu' of the pre-activation.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              LinearActivation activation = LinearActivation::none);

// [m, k] . [k, n] -> [m, n]; both operands exactly 2-D (no broadcasting).
Tensor mm(const Tensor& a, const Tensor& b);

// [batch, m, k] . [batch, k, n] -> [batch, m, n]; both exactly 3-D with equal batch.
Tensor bmm(const Tensor& a, const Tensor& b);

// beta * c + alpha * (a . b) with a [m, k], b [k, n] and c broadcastable to [m, n].
// As in torch, beta == 0 ignores c's values (NaN included).
Tensor addmm(const Tensor& c, const Tensor& a, const Tensor& b, Scalar beta = 1, Scalar alpha = 1);

}  // namespace dtr
