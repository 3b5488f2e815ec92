// The backward node of scaled_dot_product_attention (dtr/tensor/ops/attention.h),
// internal to tensor/ops: attention.cpp creates it, attention_backward.cpp runs
// the fused backward kernel of dtr/kernels/cpu/attention.h or dtr/kernels/cuda/attention.h.
#pragma once

#include "dtr/kernels/cpu/attention.h"
#include "dtr/tensor/autograd/node.h"

#ifdef DTR_WITH_CUDA
#include "dtr/kernels/cuda/attention.h"
#endif

#include <string>
#include <vector>

namespace dtr::ops {

// Inputs (edges): q, k, v.
class AttentionBackward final : public autograd::Node {
 public:
  // q, k, v, out: on cpu contiguous, in the compute dtype (f32, or f64 for f64
  // inputs); on cuda in the inputs' dtype with a unit-stride head dim, any other
  // strides (the inputs themselves, read in place); lse: [B, Hq, T] in f32 (f64 for
  // f64); dtype: the inputs' dtype, which the gradients get. On cuda each gradient is
  // laid out in its input's order of dims (cuda_attention_empty_like).
  AttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                    const Tensor& lse, kernels::cpu::AttentionDims dims, DType dtype);
  std::string name() const override { return "ScaledDotProductAttentionBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override;
  void release_saved() override;

 private:
  autograd::SavedTensor q_, k_, v_, out_, lse_;
  kernels::cpu::AttentionDims dims_;
  DType dtype_;
};

#ifdef DTR_WITH_CUDA
// Layout helpers of the CUDA path (attention.cpp, attention_backward.cpp): the kernels
// take any batch, head and row strides as long as the head dim (the last) is unit-stride.

// `t` itself when the kernels can use it in place, else a contiguous copy.
Tensor cuda_attention_operand(const Tensor& t);

// The batch, head and row strides of a 4-D `t`.
kernels::cuda::AttentionStrides cuda_attention_strides(const Tensor& t);

// A new tensor of like's sizes [B, H, L, D] in `dtype` on like's device, stored as
// [B, L, H, D] when like is (its head stride below its row stride: an attention
// layer's [B, T, H, D] projection seen as [B, H, T, D]), else contiguous. An output or
// gradient in its input's order of dims makes the caller's transpose back a view.
Tensor cuda_attention_empty_like(const Tensor& like, DType dtype);
#endif

}  // namespace dtr::ops
