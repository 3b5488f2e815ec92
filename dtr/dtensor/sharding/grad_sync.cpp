#include "dtr/dtensor/sharding/grad_sync.h"

#include "dtr/dtensor/shard_collectives.h"
#include "dtr/tensor/autograd/function.h"

namespace dtr::dtensor {

Tensor all_reduce_grad(const Tensor& local, const mesh::DeviceMesh& mesh, std::vector<int> mesh_dims) {
  if (mesh_dims.empty() || !local.requires_grad()) return local;
  // A new handle on the same data, so that the recorded op has its own output.
  return autograd::record_unary(local, local.detach(), "AllReduceGradBackward",
                                [mesh, mesh_dims](const Tensor& grad) {
                                  Tensor g = grad;
                                  for (int i : mesh_dims) g = all_reduce(g, *mesh.group(i), mesh::ReduceOp::sum());
                                  return g;
                                });
}

}  // namespace dtr::dtensor
