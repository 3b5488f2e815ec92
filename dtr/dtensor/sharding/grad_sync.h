// The identity whose backward all-reduces (sums) the gradient over some mesh
// dims: Megatron's "copy to tensor-parallel region".
//
// Why: a DTensor's gradient has the DTensor's placements (Partial -> Replicate;
// dtr/dtensor/redistribute.h). When an input is Replicate on a mesh dim but the op's
// result is not (x Replicate . W Shard(1) -> Shard(1); a Replicate bias added to
// a Shard(0) activation), each rank's local backward sees only its part of the
// result, so the input's local gradient is one summand of the true gradient.
// Passing the input's local tensor through this op before the local compute sums
// those summands, so the gradient is Replicate again.
#pragma once

#include "dtr/mesh/device_mesh.h"
#include "dtr/tensor/tensor.h"

#include <optional>
#include <vector>

namespace dtr::dtensor {

// Returns `local` (recorded as an op when it needs grad); in backward, the
// gradient is summed over mesh.group(i) for every i in `mesh_dims`, in
// `reduce_dtype` when given (mixed precision's reduce dtype: a bf16 gradient is
// summed in f32, then rounded back once).
Tensor all_reduce_grad(const Tensor& local, const mesh::DeviceMesh& mesh, std::vector<int> mesh_dims,
                       std::optional<DType> reduce_dtype = std::nullopt);

// All-gathers `local`, this rank's rows of dim `dim` of a tensor with `full_size`
// such rows (torch.chunk rows), over mesh dim `mesh_dim`. In backward the whole
// tensor's gradient is summed over those ranks and each keeps its rows (one
// reduce-scatter, in `reduce_dtype` when given): Megatron's gather from the
// sequence-parallel region, whose consumers each see a part of the gradient
// (column-wise products over their own output features).
Tensor all_gather_sum_grad(const Tensor& local, const mesh::DeviceMesh& mesh, int mesh_dim, int64_t dim,
                           int64_t full_size, std::optional<DType> reduce_dtype = std::nullopt);

}  // namespace dtr::dtensor
