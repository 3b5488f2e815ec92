#include "dtr/checkpoint/model_tensors.h"

#include "dtr/dtensor/dtensor.h"
#include "dtr/fsdp/fully_shard.h"

namespace dtr::checkpoint {

Shape ModelTensor::global_shape() const { return sharding ? sharding->shape : local.sizes(); }

Box ModelTensor::local_box() const {
  if (sharding) return {sharding->local_offset(), sharding->local_shape()};
  return {Shape(local.sizes().size(), 0), local.sizes()};
}

Tensor ModelTensor::full() const { return sharding ? DTensor(local.detach(), *sharding).full_tensor() : local.detach(); }

std::vector<ModelTensor> model_tensors(nn::Module& model) {
  fsdp::reshard_all(model);
  std::vector<ModelTensor> out;
  for (auto& [name, p] : model.named_parameters()) {
    out.push_back({name, p.data(), p.is_sharded() ? std::optional<DTensorSpec>(*p.sharding()) : std::nullopt});
  }
  for (auto& [name, b] : model.named_buffers()) out.push_back({name, b, std::nullopt});
  return out;
}

}  // namespace dtr::checkpoint
