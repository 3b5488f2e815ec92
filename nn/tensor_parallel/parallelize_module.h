// parallelize_module: applies a tensor-parallel plan (dtensor placements for the
// parameters, hooks for the inputs and outputs) to the nn::Linear layers of a
// module tree, like torch.distributed.tensor.parallel.parallelize_module.
//
//   namespace tp = dtr::nn::tensor_parallel;
//   auto mesh = mesh::init_device_mesh(DeviceType::cpu, {world_size}, {"tp"});
//   auto specs = tp::parallelize_module(mlp, mesh, {{"0", tp::ColwiseParallel{}},
//                                                   {"2", tp::RowwiseParallel{}}});
//   Tensor y = mlp(x);                       // x and y: the full tensors on every rank
//   DTensor w = tp::parameter_dtensor(mlp, specs, "0.weight");  // its Shard(0) DTensor
//
// Each planned Linear's parameter slots then hold this rank's local shard (a leaf
// requiring grad) of the parameter's DTensor, whose spec is returned by name;
// optimizers and grad clipping see local shards, as with DTensor parameters.
// Every rank must call it with the same plan (it takes the rank's chunk of the
// current full parameters; no communication). Errors name a planned module
// that does not exist or is not a Linear, and a mesh that is not 1-D.
//
// Rowwise layers drop their bias from the bias slot while their forward runs
// (it is added after the reduction of the partial outputs) and put it back in
// the forward hook; the pre-hook checks the input's shape and dtype first, so a
// bad input is refused before the slot changes.
#pragma once

#include "dtensor/dtensor.h"
#include "nn/module.h"
#include "nn/tensor_parallel/parallel_style.h"

#include <map>
#include <string>

namespace dtr::nn::tensor_parallel {

// The DTensor spec of every parameter the plan sharded, by dotted name.
using ParameterSpecs = std::map<std::string, DTensorSpec>;

ParameterSpecs parallelize_module(nn::Module& module, const mesh::DeviceMesh& mesh, const ParallelizePlan& plan);

// The parameter `name` of `module` (its local shard) as a DTensor with its spec.
DTensor parameter_dtensor(nn::Module& module, const ParameterSpecs& specs, const std::string& name);

}  // namespace dtr::nn::tensor_parallel
