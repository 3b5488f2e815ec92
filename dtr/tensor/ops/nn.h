// Neural-network ops with fused CPU kernels and autograd, like their
// torch.nn.functional namesakes: layer_norm, rms_norm, embedding and
// cross_entropy.
//
// Rules shared by every op here:
//   - Floating dtypes (f32, f64, bf16, f16); bf16/f16 compute in float and round
//     once. Parameters (weight, bias) must have the input's dtype and device.
//     (embedding's table may have any dtype; only a floating one gets gradients.)
//     Index tensors (embedding indices, cross_entropy targets) must be i64.
//   - Inputs may be non-contiguous (they are copied to contiguous first); results
//     are new contiguous tensors.
//   - They run on cpu; meta inputs give meta outputs (checked, not computed).
//     All four also run on cuda: layer_norm and rms_norm through
//     dtr/kernels/cuda/norm.h, embedding and cross_entropy through
//     dtr/kernels/cuda/embedding.h and cross_entropy.h, with the same results up to
//     rounding (the embedding gather and its backward are bitwise the CPU's). On
//     cuda the index range check (and cross_entropy's count of non-ignored rows)
//     runs on the device and reads back two numbers, so each call waits for the
//     current stream once.
//   - When grad mode is on and an input requires grad, the op records its
//     backward (dtr/tensor/ops/nn_backward.cpp): gradients flow to x, weight and bias
//     of the norms, to the table of embedding (never to the indices), and to the
//     logits of cross_entropy. Reductions over rows in the backwards
//     (dweight, dbias, the embedding table) are bitwise the same for any thread
//     count, and on cuda from run to run.
#pragma once

#include "dtr/tensor/tensor.h"

#include <cstdint>

namespace dtr {

// Normalises x over its last dim, whose size must be `normalized_size`:
//   y = (x - mean) / sqrt(var + eps) * weight + bias   (var biased, like PyTorch)
// weight and bias are [normalized_size] tensors, or undefined (Tensor{}) for none.
Tensor layer_norm(const Tensor& x, int64_t normalized_size, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);

// y = x / sqrt(mean(x^2 over the last dim) + eps) * weight; weight is
// [x.size(-1)] or undefined for none (like torch.nn.functional.rms_norm).
Tensor rms_norm(const Tensor& x, const Tensor& weight = {}, double eps = 1e-6);

// Looks up rows of `weight` [V, D] by `indices` (i64, any shape, every value in
// [0, V)); the result has shape indices.shape + [D] and weight's dtype. An index
// out of range is an error naming it, its position and V.
Tensor embedding(const Tensor& weight, const Tensor& indices);

// Mean cross-entropy loss of `logits` [N, C] (floating) against class indices
// `targets` [N] (i64), as a 0-d tensor of the logits' dtype:
//   loss_i = (1 - s) * -log p_i[target_i] + s * mean_j(-log p_i[j]),  p_i = softmax(logits_i)
// with s = label_smoothing in [0, 1]. Rows whose target is ignore_index are left
// out of the mean; every other target must be in [0, C). The mean is over the
// rows that are not ignored; when every row is ignored (or N == 0) it is 0 / 0 =
// NaN, like PyTorch, and the gradient is 0. The gradient of large bf16/f16 cuda
// logits whose C is not a multiple of 8 is not contiguous: a [N, C] view of rows
// padded to 16 bytes (dtr/tensor/ops/gemm_aligned_rows.h), which the head's GEMMs
// read in place; a leaf's .grad is still a contiguous copy.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     double label_smoothing = 0.0);

}  // namespace dtr
