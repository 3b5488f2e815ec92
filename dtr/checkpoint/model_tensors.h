// A model's parameters and buffers as a file sees them: the part this rank holds,
// the global shape, the box of the global tensor that part is, and (collectively)
// the whole tensor. Shared by the safetensors and Hugging Face import and export.
#pragma once

#include "dtr/checkpoint/box.h"
#include "dtr/dtensor/dtensor_spec.h"
#include "dtr/nn/module.h"

#include <optional>
#include <string>
#include <vector>

namespace dtr::checkpoint {

struct ModelTensor {
  std::string name;
  Tensor local;                        // the parameter's own tensor (a shard when sharded)
  std::optional<DTensorSpec> sharding;  // its layout, when sharded

  Shape global_shape() const;
  // The part of the global tensor `local` holds (the whole tensor when not sharded).
  Box local_box() const;
  // Collective over the parameter's mesh when sharded: the whole tensor, detached.
  Tensor full() const;
};

// Every parameter then every buffer of `model`, by dotted name, after resharding
// whatever fully_shard left unsharded.
std::vector<ModelTensor> model_tensors(nn::Module& model);

}  // namespace dtr::checkpoint
