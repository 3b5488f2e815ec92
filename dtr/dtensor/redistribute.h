// Redistribute: move a DTensor's local data from one set of placements to
// another on the same mesh, mesh dim by mesh dim:
//   Shard(d)   -> Replicate   all-gather along d
//   Replicate  -> Shard(d)    take the local chunk (no communication)
//   Partial    -> Replicate   all-reduce
//   Partial    -> Shard(d)    reduce-scatter along d
//   Shard(a)   -> Shard(b)    all-to-all
//   Replicate  -> Partial     keep a share locally (sum: value / k; avg, max, min: value)
// Order: shards whose mesh dim changes are gathered innermost first (a tensor dim
// sharded by several mesh dims is chunked in mesh order, so an outer change needs
// the inner ones gathered too), then partials are reduced, then new shards are
// cut outermost first.
//
// Autograd (PyTorch's global-tensor semantics): the gradient of a DTensor has
// the DTensor's placements, except that Partial becomes Replicate (the gradient
// of a sum is the same on every rank). The backward of a redistribute is the
// redistribute of the gradient from the target's gradient placements back to the
// source's: all-gather <-> local chunk, all-reduce <-> identity, all-to-all <->
// the reverse all-to-all.
#pragma once

#include "dtr/dtensor/dtensor_spec.h"
#include "dtr/tensor/tensor.h"

namespace dtr::dtensor {

// Returns the local tensor under `to` of the DTensor whose local tensor under
// `from` is `local`. Differentiable.
Tensor redistribute_local(const Tensor& local, const DTensorSpec& from, const DTensorSpec& to);

// The placements a gradient has: Partial becomes Replicate.
Placements gradient_placements(const Placements& placements);

}  // namespace dtr::dtensor
