// fsdp::estimate_memory against the allocator's tagged statistics at world sizes
// 1-4, for a tiny and a small llama Transformer under FULL_SHARD, SHARD_GRAD_OP,
// NO_SHARD, HYBRID_SHARD, bf16 mixed precision and (at 4 ranks) blocks keeping
// half their parameters after forward, with and without activation
// checkpointing (and a small GPT-2-style one under FULL_SHARD, f32 and bf16):
// parameters, gradients, optimizer state (current after a step),
// the peak of unsharded parameters (param-tag peak above the shards) and the
// activation peak (forward + backward under MemoryTagGuard(activation)).
#include "dtr/fsdp/memory_estimate.h"
#include "dtr/fsdp/sharding_strategy.h"
#include "dtr/fsdp/wrap_policy.h"
#include "dtr/mesh/distributed.h"
#include "dtr/nn/activation_checkpoint.h"
#include "dtr/nn/optim/adamw.h"
#include "dtr/nn/transformer.h"
#include "dtr/nn/transformer_memory.h"
#include "dtr/tensor/allocator.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/nn.h"
#include "tests/support/step_memory.h"

#include <catch2/catch.hpp>

#include <functional>

using namespace dtr;

namespace {

nn::TransformerConfig tiny_measured_config() {
  nn::TransformerConfig c;
  c.vocab_size = 64;
  c.dim = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.max_seq_len = 16;
  return c;
}

nn::TransformerConfig small_measured_config() {
  nn::TransformerConfig c;
  c.vocab_size = 256;
  c.dim = 128;
  c.n_layers = 4;
  c.n_heads = 4;
  c.max_seq_len = 64;
  return c;
}

using dtr::testing::relative_to;
using dtr::testing::StepMemory;

StepMemory measure(const nn::TransformerConfig& config, const fsdp::MemoryEstimateOptions& o) {
  const auto before = memory_stats(Device::cpu());
  manual_seed(3);
  auto model = std::make_shared<nn::Transformer>(config);
  if (o.activation_checkpointing) {
    nn::apply_activation_checkpointing(
        *model, [](const nn::Module& m) { return dynamic_cast<const nn::TransformerBlock*>(&m) != nullptr; });
  }
  fsdp::FullyShardOptions base;
  base.mp_policy.param_dtype = o.param_dtype;
  auto options = fsdp::strategy_options(o.strategy, base, o.hybrid_shard_size);
  if (o.reshard_after_forward_ranks > 1) options.reshard_after_forward = o.reshard_after_forward_ranks;
  auto policy = o.activation_checkpointing ? fsdp::module_type_policy<nn::CheckpointWrapper>()
                                           : fsdp::module_type_policy<nn::TransformerBlock>();
  fsdp::apply_fully_shard(*model, policy, options);
  nn::optim::AdamW opt(model->parameters(), {.lr = 1e-3});
  const int64_t T = o.seq_len;
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < o.batch_size * (T + 1); ++i) ids.push_back((i * 13 + distributed::rank()) % config.vocab_size);
  Tensor tokens = from_vector(ids, {o.batch_size, T + 1});
  Tensor inputs = tokens.narrow(1, 0, T).contiguous(), targets = tokens.narrow(1, 1, T).contiguous();
  return dtr::testing::measure_step_memory(before, opt, [&] {
    return cross_entropy((*model)(inputs).reshape({-1, config.vocab_size}), targets.reshape({-1}));
  });
}

}  // namespace

TEST_CASE("estimate_memory predicts the measured per-rank bytes within 10 percent", "[single_host]") {
  const int n = distributed::world_size(), r = distributed::rank();
  const int hybrid = n % 2 == 0 ? 2 : 1;
  struct Case {
    const char* name;
    nn::TransformerConfig config;
    fsdp::MemoryEstimateOptions options;
  };
  std::vector<Case> cases;
  for (auto [name, config] : {std::pair{"tiny", tiny_measured_config()}, std::pair{"small", small_measured_config()}}) {
    const int64_t T = config.max_seq_len;
    for (bool ckpt : {false, true}) {
      for (auto s : {fsdp::ShardingStrategy::full_shard, fsdp::ShardingStrategy::shard_grad_op,
                     fsdp::ShardingStrategy::no_shard, fsdp::ShardingStrategy::hybrid_shard}) {
        cases.push_back({name, config,
                         {.strategy = s, .hybrid_shard_size = hybrid, .rank = r, .batch_size = 2, .seq_len = T,
                          .activation_checkpointing = ckpt}});
      }
      cases.push_back({name, config,
                       {.strategy = fsdp::ShardingStrategy::full_shard, .rank = r, .param_dtype = DType::bf16,
                        .batch_size = 2, .seq_len = T, .activation_checkpointing = ckpt}});
      // Blocks keeping half of their parameters after forward (2 of 4 ranks: a host-local shard's layout), tiny.
      if (n == 4 && config.dim == tiny_measured_config().dim) {
        cases.push_back({name, config,
                         {.strategy = fsdp::ShardingStrategy::full_shard, .rank = r, .reshard_after_forward_ranks = 2,
                          .batch_size = 2, .seq_len = T, .activation_checkpointing = ckpt}});
      }
    }
  }
  // GPT-2 style (LayerNorm, learned positions, GELU MLP), f32 and bf16.
  nn::TransformerConfig gpt2 = small_measured_config();
  gpt2.style = nn::TransformerStyle::gpt2;
  for (bool ckpt : {false, true}) {
    for (std::optional<DType> dtype : {std::optional<DType>(), std::optional<DType>(DType::bf16)}) {
      cases.push_back({"small-gpt2", gpt2,
                       {.strategy = fsdp::ShardingStrategy::full_shard, .rank = r, .param_dtype = dtype,
                        .batch_size = 2, .seq_len = gpt2.max_seq_len, .activation_checkpointing = ckpt}});
    }
  }
  for (const Case& c : cases) {
    nn::TransformerConfig meta = c.config;
    meta.device = Device::meta();
    nn::Transformer meta_model(meta);
    const fsdp::MemoryEstimate e =
        fsdp::estimate_memory(meta_model, fsdp::module_type_policy<nn::TransformerBlock>(), n, c.options,
                              std::bind_front(nn::estimate_activation_bytes, c.config));
    const StepMemory m = measure(c.config, c.options);
    const std::string label = fmt::format(
        "{} {}{}{}{}", c.name, e.strategy, c.options.param_dtype ? " bf16" : "",
        c.options.activation_checkpointing ? " ckpt" : "",
        c.options.reshard_after_forward_ranks > 1 ? fmt::format(" keeping 1/{}", c.options.reshard_after_forward_ranks)
                                                  : "");
    INFO(label);
    if (r == 0) {
      fmt::print(stderr, "{} at {} ranks: params {}/{} grads {}/{} optim {}/{} unsharded {}/{} activations {}/{} "
                       "(estimated/measured)\n",
                       label, n, e.params, m.params, e.grads, m.grads, e.optimizer_state, m.optimizer_state,
                       e.unsharded_peak, m.unsharded_peak, e.activations, m.activations);
    }
    // The sharded state is exact (torch.chunk rows per rank).
    CHECK(e.params == m.params);
    CHECK(e.grads == m.grads);
    CHECK(e.optimizer_state == m.optimizer_state);
    CHECK(relative_to(e.unsharded_peak, m.unsharded_peak) <= 0.10);
    CHECK(relative_to(e.state() + e.unsharded_peak, m.params + m.grads + m.optimizer_state + m.unsharded_peak) <= 0.10);
    CHECK(relative_to(e.activations, m.activations) <= 0.10);
  }
}
