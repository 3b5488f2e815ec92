// Full (unsharded) state dicts of fully_shard models and their optimizers, like
// torch.distributed.checkpoint.state_dict's get/set_model_state_dict and
// get/set_optimizer_state_dict with StateDictOptions.
//
//   auto sd = get_model_state_dict(model, {.full_state_dict = true, .cpu_offload = true,
//                                          .rank0_only = true});   // every rank calls
//   if (rank == 0) write(sd);                                      // others got {}
//   ...
//   set_model_state_dict(model, sd, {.full_state_dict = true, .broadcast_from_rank0 = true});
//
// get_*: collective over each sharded parameter's mesh (every rank calls, in the
// same order). Parameters are gathered ONE AT A TIME (an all-gather per
// parameter, in named_parameters() order); with cpu_offload each gathered tensor
// is copied to the CPU before the next is gathered, so at most one unsharded
// parameter is on the accelerator at any time. With rank0_only the other ranks
// drop each gathered tensor at once and return an empty dict. Plain (unsharded)
// parameters and buffers are returned as detached handles (cloned to the CPU with
// cpu_offload). Without full_state_dict the entries are the local shards, with no
// communication (their layouts are the parameters' sharding(); fsdp's
// get_sharded_state_dict gives the shards as DTensors).
//
// set_*: the dict holds full tensors (the single-process model's). Without
// broadcast_from_rank0 every rank passes the whole dict and keeps its own rows
// (no communication). With broadcast_from_rank0 only rank 0's dict is read (the
// others pass an empty one): rank 0 checks keys, shapes and dtypes first and its
// verdict reaches every rank (so a bad dict is the same dtr::Error on every rank
// and nothing is loaded), then each tensor is broadcast and split one at a time.
// Values are converted to the parameter's device; dtypes must match.
//
// Optimizer state is keyed by parameter fqn (the optimizer's parameters are
// matched to the module's by identity: build it from model.parameters() after
// fully_shard); its tensors are shaped and sharded like their parameter.
#pragma once

#include "dtr/nn/module.h"
#include "dtr/nn/optim/optimizer.h"

#include <map>
#include <string>

namespace dtr::checkpoint {

struct StateDictOptions {
  bool full_state_dict = false;       // get: gather unsharded tensors; set: the dict holds full tensors
  bool cpu_offload = false;           // get: returned tensors live on the CPU
  bool rank0_only = false;            // get (full): only rank 0 gets the values, others an empty dict
  bool broadcast_from_rank0 = false;  // set (full): only rank 0's dict is read
  bool strict = true;                 // set: no missing and no unexpected keys
};

// A parameter's optimizer state by fqn; parameters without state are absent.
struct OptimizerStateDict {
  std::string kind;  // "SGD", "Adam", "AdamW"
  double lr = 0.0;
  std::map<std::string, nn::optim::ParamState> state;
};

nn::StateDict get_model_state_dict(nn::Module& model, const StateDictOptions& options = {});
void set_model_state_dict(nn::Module& model, const nn::StateDict& state, const StateDictOptions& options = {});

OptimizerStateDict get_optimizer_state_dict(nn::Module& model, const nn::optim::Optimizer& optimizer,
                                            const StateDictOptions& options = {});
// Requires full_state_dict (the entries are full tensors); strict is about
// parameters with state that are not in the model.
void set_optimizer_state_dict(nn::Module& model, nn::optim::Optimizer& optimizer, const OptimizerStateDict& state,
                              const StateDictOptions& options = {});

}  // namespace dtr::checkpoint
