// Collectives on one tensor dim of local shards, the building blocks of
// redistribute. Each takes a local tensor and a ProcessGroup (one mesh dim) and
// returns a new local tensor; uneven shards (torch.chunk semantics) are padded to
// ceil(n/k) rows for the collective and unpadded after, so padding is never
// visible. Not differentiable by themselves (redistribute records the autograd).
// They wait for the collective before returning.
#pragma once

#include "dtr/mesh/process_group.h"
#include "dtr/tensor/tensor.h"

namespace dtr::dtensor {

// `local` holds this rank's shard_range(full_size, k, rank) rows of dim `dim`;
// returns the tensor with all `full_size` rows.
Tensor all_gather_dim(const Tensor& local, mesh::ProcessGroup& group, int64_t dim, int64_t full_size);

// Reduces `full` over the group and returns this rank's rows of dim `dim`.
Tensor reduce_scatter_dim(const Tensor& full, mesh::ProcessGroup& group, int64_t dim, mesh::ReduceOp op);

// Out of place: the reduction of every rank's `t`.
Tensor all_reduce(const Tensor& t, mesh::ProcessGroup& group, mesh::ReduceOp op);

// `local` holds this rank's rows of dim `from_dim` (of `from_size` in all) and all
// rows of `to_dim`; returns all rows of `from_dim` and this rank's rows of `to_dim`.
Tensor all_to_all_dims(const Tensor& local, mesh::ProcessGroup& group, int64_t from_dim, int64_t from_size,
                       int64_t to_dim);

// This rank's rows of dim `dim` (a view, no communication).
Tensor local_chunk(const Tensor& t, int64_t dim, int64_t chunks, int64_t index);

}  // namespace dtr::dtensor
