// How an op on DTensors runs, shared by every op in dtr/dtensor/dtensor_ops.h:
//   1. check the inputs share one mesh (an error names both meshes);
//   2. get the rule's decision (cached per op, arguments and input specs);
//   3. redistribute each input to its target placements (differentiable), and
//      pass an input that is Replicate on a mesh dim where the result is not
//      through all_reduce_grad (dtr/dtensor/sharding/grad_sync.h) so its gradient
//      keeps the Replicate placement;
//   4. the caller runs the local op on the local tensors and wraps the result.
// When the rule found nothing better than replicating everything, a warning
// naming the op is logged once per op.
#pragma once

#include "dtr/dtensor/dtensor.h"
#include "dtr/dtensor/sharding/op_sharding.h"

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace dtr::dtensor {

// Errors unless every input is defined and all share the first one's mesh.
void check_same_mesh(std::string_view op, const std::vector<const DTensor*>& inputs);

struct PreparedOp {
  OpSharding sharding;
  std::vector<Tensor> locals;  // the inputs' local tensors under sharding.inputs
  mesh::DeviceMesh mesh;
};

// Steps 1-3 for `inputs`, with `rule` computing the decision on a cache miss.
PreparedOp prepare_op(std::string_view op, const std::string& args, const std::vector<const DTensor*>& inputs,
                      const std::function<OpSharding(const std::vector<const DTensorSpec*>&)>& rule);

// Wraps the local result of a prepared op as a DTensor with the decision's output spec.
DTensor wrap_result(const PreparedOp& prepared, const Tensor& local);

// Logs "<op>: no sharding rule for ..., computing replicated" once per op name.
void warn_fallback_once(std::string_view op, const std::vector<const DTensorSpec*>& inputs);

}  // namespace dtr::dtensor
