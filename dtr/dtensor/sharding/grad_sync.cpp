#include "dtr/dtensor/sharding/grad_sync.h"

#include "dtr/dtensor/shard_collectives.h"
#include "dtr/tensor/autograd/function.h"
#include "dtr/tensor/ops/elementwise.h"

namespace dtr::dtensor {

namespace {

// sum(grad) computed in `reduce_dtype` when given: a bf16 gradient is cast up,
// summed, and rounded back once.
template <class Sum>
Tensor summed_in(std::optional<DType> reduce_dtype, const Tensor& grad, const Sum& sum) {
  if (!reduce_dtype || *reduce_dtype == grad.dtype()) return sum(grad);
  return cast(sum(cast(grad, *reduce_dtype)), grad.dtype());
}

}  // namespace

Tensor all_reduce_grad(const Tensor& local, const mesh::DeviceMesh& mesh, std::vector<int> mesh_dims,
                       std::optional<DType> reduce_dtype) {
  if (mesh_dims.empty() || !local.requires_grad()) return local;
  // A new handle on the same data, so that the recorded op has its own output.
  return autograd::record_unary(local, local.detach(), "AllReduceGradBackward",
                                [mesh, mesh_dims, reduce_dtype](const Tensor& grad) {
                                  return summed_in(reduce_dtype, grad, [&](Tensor g) {
                                    for (int i : mesh_dims) g = all_reduce(g, *mesh.group(i), mesh::ReduceOp::sum());
                                    return g;
                                  });
                                });
}

Tensor all_gather_sum_grad(const Tensor& local, const mesh::DeviceMesh& mesh, int mesh_dim, int64_t dim,
                           int64_t full_size, std::optional<DType> reduce_dtype) {
  mesh::ProcessGroupPtr group = mesh.group(mesh_dim);
  Tensor whole = all_gather_dim(local.detach(), *group, dim, full_size);
  if (!local.requires_grad()) return whole;
  return autograd::record_unary(local, whole, "AllGatherSumGradBackward",
                                [group, dim, reduce_dtype](const Tensor& grad) {
                                  return summed_in(reduce_dtype, grad, [&](const Tensor& g) {
                                    return reduce_scatter_dim(g, *group, dim, mesh::ReduceOp::sum());
                                  });
                                });
}

}  // namespace dtr::dtensor
