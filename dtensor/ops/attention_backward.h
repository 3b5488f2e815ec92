// The backward node of scaled_dot_product_attention (dtensor/ops/attention.h),
// internal to dtensor/ops: attention.cpp creates it, attention_backward.cpp runs
// the fused backward kernel of kernels/cpu/attention.h or kernels/cuda/attention.h.
#pragma once

#include "dtensor/autograd/node.h"
#include "kernels/cpu/attention.h"

#include <string>
#include <vector>

namespace dtr::ops {

// Inputs (edges): q, k, v.
class AttentionBackward final : public autograd::Node {
 public:
  // q, k, v, out: contiguous; on cpu in the compute dtype (f32, or f64 for f64
  // inputs), on cuda in the inputs' dtype; lse: [B, Hq, T] in f32 (f64 for f64);
  // dtype: the inputs' dtype, which the gradients get.
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

}  // namespace dtr::ops
