// Backward nodes of the ops in dtr/tensor/ops/nn.h (layer_norm, rms_norm,
// embedding, cross_entropy), internal to tensor/ops: nn.cpp creates them,
// nn_backward.cpp runs the fused backward kernels. Each saves the contiguous
// inputs the forward computed on plus the forward's per-row statistics, never
// its output. On meta tensors the backwards return meta gradients.
#pragma once

#include "dtr/tensor/autograd/node.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtr::ops {

// The dtype per-row statistics are kept in: f64 for f64, f32 otherwise.
DType acc_dtype(DType dtype);

enum class NormKind { layer, rms };

// Inputs (edges): x, weight, and for layer norm bias (undefined ones get no gradient).
class NormBackward final : public autograd::Node {
 public:
  // x: the contiguous input (any shape, normalised over its last dim); weight:
  // contiguous or undefined; mean (layer only) and rstd: [rows] of acc_dtype.
  NormBackward(NormKind kind, const Tensor& x, const Tensor& weight, const Tensor& mean,
               const Tensor& rstd);
  std::string name() const override;
  std::vector<Tensor> apply(std::vector<Tensor> grads) override;
  void release_saved() override;

 private:
  NormKind kind_;
  autograd::SavedTensor x_, weight_, mean_, rstd_;
};

// Input (edge): the table weight [V, D] only.
class EmbeddingBackward final : public autograd::Node {
 public:
  // indices: contiguous i64; weight_meta: shape [V, D], dtype and device of the table.
  EmbeddingBackward(const Tensor& indices, autograd::OutputMeta weight_meta);
  std::string name() const override { return "EmbeddingBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override;
  // On the CPU: adds the looked-up rows' gradients into a gradient already summed
  // for the table (a tied output layer's), instead of a whole table of zeros.
  bool accumulate_into(const std::vector<Tensor>& grads, Tensor& grad_weight) override;
  void release_saved() override { indices_.release(); }

 private:
  autograd::SavedTensor indices_;
  autograd::OutputMeta weight_meta_;
};

// Input (edge): the logits [N, C] only. On cuda the gradient may have padded rows
// (empty_with_gemm_aligned_rows, dtr/tensor/ops/gemm_aligned_rows.h).
class CrossEntropyBackward final : public autograd::Node {
 public:
  // logits: contiguous [N, C]; targets: contiguous i64 [N]; stats: [2, N] of
  // acc_dtype (row max, then row log-sum-exp); counted: rows not ignored.
  CrossEntropyBackward(const Tensor& logits, const Tensor& targets, const Tensor& stats,
                       int64_t ignore_index, double label_smoothing, int64_t counted);
  std::string name() const override { return "CrossEntropyBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override;
  void release_saved() override;

 private:
  autograd::SavedTensor logits_, targets_, stats_;
  int64_t ignore_index_;
  double label_smoothing_;
  int64_t counted_;
};

}  // namespace dtr::ops
