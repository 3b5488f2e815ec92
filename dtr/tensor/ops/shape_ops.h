// Joining and splitting tensors along one dim, like torch.cat, torch.stack and
// torch.split:
//   cat([a [2, 3], b [4, 3]], 0)      -> [6, 3]
//   stack([a [2, 3], b [2, 3]], 1)    -> [2, 2, 3]   (a new dim of size 2 at dim 1)
//   split(t [5, 3], 2, 0)             -> views [2, 3], [2, 3], [1, 3]
// cat and stack copy into a new contiguous tensor; split returns views of t.
// Operands of cat/stack must be defined, share one dtype (any dtype) and one
// device (cpu, cuda, or meta: shapes only), and agree in every dim but the joined one
// (stack: in every dim). An empty list, a bad dim or a mismatch is an error that
// names the op, the operand and both shapes / dtypes / devices.
//
// Autograd: all three are differentiable for floating tensors. cat's gradient is
// narrowed back to each operand (dtr/tensor/ops/shape_ops_backward.h), stack is
// unsqueeze + cat, and each piece of split is a narrow() view with its own
// view backward, so any subset of the pieces may be used. On cuda the copies
// (cat's, and the narrow backward's) run on the strided copy kernel
// (dtr/kernels/cuda/copy.h) through Tensor::copy_, so results and gradients equal
// the CPU's bit for bit.
#pragma once

#include "dtr/tensor/tensor.h"

#include <cstdint>
#include <vector>

namespace dtr {

// Concatenates along `dim` (negative counts from the end); operands need >= 1 dim.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);

// Joins equally shaped tensors along a new dim `dim` in [-(n + 1), n] for n-D operands.
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);

// Splits t along `dim` into pieces of split_size (> 0); the last piece holds the
// remainder. A dim of size 0 gives one empty piece, like torch.split.
std::vector<Tensor> split(const Tensor& t, int64_t split_size, int64_t dim = 0);

}  // namespace dtr
