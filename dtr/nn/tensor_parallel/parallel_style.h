// Tensor-parallel styles, like PyTorch's ColwiseParallel, RowwiseParallel and
// SequenceParallel (torch.distributed.tensor.parallel), on a 1-D DeviceMesh:
//
//   ColwiseParallel  weight [out, in] Shard(0), bias Shard(0): each rank computes
//                    its slice of the output features. The input (input_layout,
//                    default Replicate) is made Replicate; its gradient is summed
//                    over the mesh in backward ("copy to the TP region"). The
//                    output is this rank's Shard(-1) slice, or redistributed to
//                    output_layout.
//   RowwiseParallel  weight Shard(1), bias Replicate: each rank multiplies its
//                    slice of the input features; the partial sums are reduced
//                    to output_layout (default Replicate: all-reduce; Shard(d):
//                    reduce-scatter, as sequence parallelism does) and the bias
//                    is added once, after the reduction. The input (input_layout,
//                    default Shard(-1), i.e. a ColwiseParallel output) is made
//                    Shard(-1).
//   PrepareModuleInput for a module whose column-wise projections share one
//                    input (attention's q, k and v; the MLP's up and gate): the
//                    input (input_layout) is made Replicate once, gathered from
//                    sequence shards when it is Shard(d), and its gradient is
//                    summed over the mesh once in backward (a reduce-scatter
//                    back to the shards, or an all-reduce), not once per
//                    projection. Its column-wise layers then take that input as
//                    it is (ColwiseParallel::input_prepared).
//   SequenceParallel for a module that computes token by token on this rank's
//                    slice of the sequence (a norm, between a RowwiseParallel
//                    whose output is Shard(1) and a ColwiseParallel whose input
//                    is): its parameters stay whole on every rank and each
//                    forward computes with them passed through a gradient sum
//                    over the mesh, since each rank's backward sees only its
//                    tokens.
//
// Modules take and return plain Tensors, so inputs and outputs are local tensors
// of DTensors with the layouts above (PyTorch's use_local_output=True). A
// Shard input's global size along its sharded dim is taken to be the in_features
// of the Linear when that dim is the last one, and even otherwise (as
// DTensor::from_local infers it).
#pragma once

#include "dtr/dtensor/placement.h"
#include "dtr/tensor/dtype.h"

#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace dtr::nn::tensor_parallel {

struct ColwiseParallel {
  Placement input_layout = Replicate();
  Placement output_layout = Shard(-1);
  // The dtype the input's gradient is summed in (mixed precision's reduce
  // dtype); unset: the gradient's own.
  std::optional<DType> grad_reduce_dtype{};
  // The input is whole and its gradient summed by an enclosing module's
  // PrepareModuleInput (input_layout and grad_reduce_dtype then unused).
  bool input_prepared = false;
};

struct RowwiseParallel {
  Placement input_layout = Shard(-1);
  Placement output_layout = Replicate();
};

struct PrepareModuleInput {
  Placement input_layout = Replicate();
  std::optional<DType> grad_reduce_dtype{};  // as ColwiseParallel's
};

struct SequenceParallel {
  std::optional<DType> grad_reduce_dtype{};  // the dtype the parameters' gradients are summed in
};

using ParallelStyle = std::variant<ColwiseParallel, RowwiseParallel, PrepareModuleInput, SequenceParallel>;

// Module name (dotted, as named_modules() gives it; "" is the root) -> style.
using ParallelizePlan = std::vector<std::pair<std::string, ParallelStyle>>;

}  // namespace dtr::nn::tensor_parallel
