// Internal to tensor/ops: autograd for the matrix products of matmul.h. The
// forward ops compute without recording (under NoGradGuard) and then call one of
// these, which records a backward node for `out` when grad mode is on and some
// operand requires grad (otherwise they do nothing). Each node saves only the
// operands its gradients need (a for b's gradient, b for a's), as detached views.
#pragma once

#include "dtr/tensor/scalar.h"
#include "dtr/tensor/tensor.h"

namespace dtr::ops {

// out = matmul(a, b) (torch.matmul, 1-D promotions and broadcast batch dims).
void record_matmul_backward(const Tensor& a, const Tensor& b, const Tensor& out);
// out = mm(a, b).
void record_mm_backward(const Tensor& a, const Tensor& b, const Tensor& out);
// out = bmm(a, b).
void record_bmm_backward(const Tensor& a, const Tensor& b, const Tensor& out);
// out = x . weight^T + bias over x's last dim (bias may be undefined).
void record_linear_backward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out);
// g itself, or, when g is a large 16-bit cuda tensor whose rows are not 16-byte aligned,
// a copy with padded rows (matmul.cpp's kernel_operand makes the same copy per GEMM): the
// backward nodes read g in two GEMMs and pay that copy once. Gradients made with
// gemm_aligned_rows.h's padded rows (cross_entropy's dlogits) pass through uncopied.
Tensor with_gemm_aligned_rows(const Tensor& g);
// out = beta * c + alpha * mm(a, b), c broadcast to out's shape.
void record_addmm_backward(const Tensor& c, const Tensor& a, const Tensor& b, Scalar beta,
                           Scalar alpha, const Tensor& out);

}  // namespace dtr::ops
