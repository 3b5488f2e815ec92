// The tiny Transformer the checkpoint tests share: its config, a seeded model, and
// the same model sharded with fully_shard on every block and the root.
#pragma once

#include "fsdp/fully_shard.h"
#include "mesh/device_mesh.h"
#include "nn/transformer.h"

#include <cstdint>
#include <memory>

namespace dtr::testing {

inline nn::TransformerConfig tiny_config() {
  nn::TransformerConfig c;
  c.dtype = DType::f32;
  c.vocab_size = 32;
  c.dim = 16;
  c.n_layers = 2;
  c.n_heads = 2;
  c.max_seq_len = 16;
  return c;
}

inline std::shared_ptr<nn::Transformer> make_model(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::Transformer>(tiny_config());
}

// mesh undefined: FSDP over all ranks.
inline std::shared_ptr<nn::Transformer> make_sharded(uint64_t seed, const mesh::DeviceMesh& mesh = {}) {
  auto model = make_model(seed);
  for (auto& layer : model->layers()) fsdp::fully_shard(*layer, {.mesh = mesh});
  fsdp::fully_shard(*model, {.mesh = mesh});
  return model;
}

}  // namespace dtr::testing
