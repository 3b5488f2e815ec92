// The tiny Transformer the multi-rank tests share: its config, a seeded model, the
// same model sharded with fully_shard on every block and the root, and a
// deterministic batch of token sequences to train it on. With it, helpers that
// several Transformer tests share: token ids as a [b, t] tensor, the next-token
// loss, the AdamW the checkpoint tests train with and one step of it that primes
// its state, and a sharded parameter's full tensor.
#pragma once

#include "dtr/dtensor/dtensor.h"
#include "dtr/fsdp/fully_shard.h"
#include "dtr/mesh/device_mesh.h"
#include "dtr/nn/module.h"
#include "dtr/nn/optim/adamw.h"
#include "dtr/nn/parameter.h"
#include "dtr/nn/transformer.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/nn.h"

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace dtr::testing {

// The global batch of the tests that train the tiny model (rows; divisible by 1-4
// ranks and then by 2 micro-batches) and its sequence length.
inline constexpr int64_t kGlobalBatch = 24;
inline constexpr int64_t kSeq = 8;

// vocab 32, dim 16, 2 layers, 2 heads, llama style: hidden = round_up(2 * 64 / 3, 32) = 64.
inline nn::TransformerConfig tiny_config(DType dtype = DType::f32, Device device = Device::cpu()) {
  nn::TransformerConfig c;
  c.dtype = dtype;
  c.device = device;
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

// Rows [begin, end) of step `step`'s global batch: `seq_len` tokens per row (vocab
// 32, a pattern that differs by row, position and step) and next-token targets (a
// fixed function of the token, so the model can learn it).
inline std::pair<Tensor, Tensor> token_batch(int step, int64_t begin, int64_t end, int64_t seq_len) {
  std::vector<int64_t> tokens, targets;
  for (int64_t b = begin; b < end; ++b) {
    for (int64_t t = 0; t < seq_len; ++t) {
      const int64_t v = (b * 7 + t * 3 + step * 5 + (b * t) % 5) % 32;
      tokens.push_back(v);
      targets.push_back((v * 3 + 1) % 32);
    }
  }
  return {from_vector(tokens, {end - begin, seq_len}), from_vector(targets, {end - begin, seq_len})};
}

// `ids` (row-major) as a [b, t] tensor of token ids.
inline Tensor tokens_of(const std::vector<int64_t>& ids, int64_t b, int64_t t) {
  return from_vector<int64_t>(ids, {b, t});
}

// The mean next-token cross-entropy of `model` on `tokens` against `targets`;
// half-precision logits are cast to f32 first.
inline Tensor lm_loss(nn::Module& model, const Tensor& tokens, const Tensor& targets) {
  Tensor logits = model(tokens);
  if (is_half(logits.dtype())) logits = logits.to(DType::f32);
  return cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

// AdamW at lr 1e-2 over `model`'s parameters.
inline std::unique_ptr<nn::optim::AdamW> make_optimizer(nn::Module& model) {
  return std::make_unique<nn::optim::AdamW>(model.parameters(), nn::optim::AdamWOptions{.lr = 1e-2});
}

// One step of `opt` with gradient 0.1 * parameter: elementwise on each shard, so
// the values do not depend on the world size or the mesh.
inline void prime(nn::Module& model, nn::optim::Optimizer& opt) {
  for (auto& p : model.parameters()) p->set_grad(mul(p->detach(), Scalar(0.1)));
  opt.step();
  opt.zero_grad();
}

// The full (unsharded) tensor of a parameter that fully_shard sharded.
inline Tensor full_of(const nn::Parameter& shard) { return shard.as_dtensor().full_tensor(); }

}  // namespace dtr::testing
