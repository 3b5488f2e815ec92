// parallelize_module: applies a tensor-parallel plan (dtensor placements for the
// parameters, hooks for the inputs and outputs) to the nn::Linear layers of a
// module tree, and RowwiseParallel to an nn::Embedding (a vocabulary-parallel
// table: rows sharded, lookups all-reduced), like
// torch.distributed.tensor.parallel.parallelize_module.
//
//   namespace tp = dtr::nn::tensor_parallel;
//   auto mesh = mesh::init_device_mesh(DeviceType::cpu, {world_size}, {"tp"});
//   tp::parallelize_module(mlp, mesh, {{"0", tp::ColwiseParallel{}}, {"2", tp::RowwiseParallel{}}});
//   Tensor y = mlp(x);                                  // x and y: the full tensors on every rank
//   DTensor w = tp::parameter_dtensor(mlp, "0.weight");  // its Shard(0) DTensor
//
// Each planned Linear's parameter slots then hold this rank's local shard (a leaf
// requiring grad) of the parameter's DTensor, and record its layout
// (nn::Parameter::sharding(); a rowwise bias: Replicate), so optimizers see local
// shards and grad clipping, state dicts and checkpoints the global parameters.
// Every rank must call it with the same plan (it takes the rank's chunk of the
// current full parameters; no communication). Errors name a planned module
// that does not exist or is not a Linear, and a mesh that is not 1-D.
//
// Rowwise layers compute without their bias (Module::install_parameter) and the
// forward hook adds it after the reduction of the partial outputs; the pre-hook
// checks the input's shape and dtype first, so a bad input is refused before the
// slot changes.
#pragma once

#include "dtr/dtensor/dtensor.h"
#include "dtr/nn/module.h"
#include "dtr/nn/tensor_parallel/parallel_style.h"

#include <cstdint>
#include <map>
#include <string>

namespace dtr::nn::tensor_parallel {

void parallelize_module(nn::Module& module, const mesh::DeviceMesh& mesh, const ParallelizePlan& plan);

// The shape each parameter the plan splits has on rank `rank` of `ranks`
// (dotted names from `module`, which is not parallelized; a module on the meta
// device will do): what parallelize_module leaves in the parameter slots, found
// without a mesh, for memory estimates. Parameters the plan keeps whole are not
// listed.
std::map<std::string, Shape> local_parameter_shapes(nn::Module& module, const ParallelizePlan& plan, int64_t ranks,
                                                    int64_t rank);

// The parameter `name` (dotted) of `module`, which the plan laid out, as a DTensor
// (its local shard, with its gradient).
DTensor parameter_dtensor(const nn::Module& module, const std::string& name);

}  // namespace dtr::nn::tensor_parallel
