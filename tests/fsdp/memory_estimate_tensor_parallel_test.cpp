// fsdp::estimate_memory for FSDP over tensor parallelism against the allocator's
// tagged statistics, on a (dp, tp) mesh of 2-4 ranks (1x2, 1x3, 2x2): a small
// llama Transformer split by parallelize_transformer, without and with sequence
// and loss parallelism, with and without activation checkpointing, in f32 and
// under bf16 mixed precision, and GPT-2's tied head with a vocabulary-parallel
// embedding. The estimator sees the meta model, the split shapes
// (tensor_parallel::local_parameter_shapes) and the split activation model
// (nn::estimate_tensor_parallel_activation_bytes). Shards, gradients and
// optimizer state are exact; the unsharded peak and the activations within 10
// percent.
#include "dtr/fsdp/memory_estimate.h"
#include "dtr/fsdp/sharding_strategy.h"
#include "dtr/fsdp/wrap_policy.h"
#include "dtr/mesh/device_mesh.h"
#include "dtr/mesh/distributed.h"
#include "dtr/nn/activation_checkpoint.h"
#include "dtr/nn/optim/adamw.h"
#include "dtr/nn/tensor_parallel/loss_parallel.h"
#include "dtr/nn/tensor_parallel/parallelize_module.h"
#include "dtr/nn/tensor_parallel/transformer_plan.h"
#include "dtr/nn/transformer.h"
#include "dtr/nn/transformer_memory.h"
#include "dtr/tensor/allocator.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/random.h"
#include "tests/support/step_memory.h"

#include <catch2/catch.hpp>

#include <functional>

using namespace dtr;
namespace tp = dtr::nn::tensor_parallel;

namespace {

// 6 heads and a 96-token vocabulary: whole heads and even vocabulary slices at 2
// and 3 tensor-parallel ranks; 24 tokens divide by both.
nn::TransformerConfig tp_estimate_config(nn::TransformerStyle style) {
  nn::TransformerConfig c;
  c.style = style;
  c.vocab_size = 96;
  c.dim = 48;
  c.n_layers = 2;
  c.n_heads = 6;
  c.max_seq_len = 24;
  c.tie_weights = style == nn::TransformerStyle::gpt2;
  return c;
}

struct TpEstimateCase {
  const char* name;
  nn::TransformerConfig config;
  tp::TransformerPlanOptions plan;
  std::optional<DType> param_dtype;
  bool checkpointing = false;
};

constexpr int64_t kTpEstimateBatch = 2;

dtr::testing::StepMemory tp_measure(const TpEstimateCase& c, const mesh::DeviceMesh& world) {
  const auto before = memory_stats(Device::cpu());
  manual_seed(3);
  auto model = std::make_shared<nn::Transformer>(c.config);
  if (c.checkpointing) {
    nn::apply_activation_checkpointing(
        *model, [](const nn::Module& m) { return dynamic_cast<const nn::TransformerBlock*>(&m) != nullptr; });
  }
  const mesh::DeviceMesh tp_mesh = world["tp"];
  tp::parallelize_transformer(*model, tp_mesh, c.plan);
  fsdp::FullyShardOptions options{.mesh = world["dp"]};
  options.mp_policy.param_dtype = c.param_dtype;
  auto policy = c.checkpointing ? fsdp::module_type_policy<nn::CheckpointWrapper>()
                                : fsdp::module_type_policy<nn::TransformerBlock>();
  fsdp::apply_fully_shard(*model, policy, options);
  nn::optim::AdamW opt(model->parameters(), {.lr = 1e-3});
  const int64_t T = c.config.max_seq_len, V = c.config.vocab_size;
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < kTpEstimateBatch * (T + 1); ++i) ids.push_back((i * 13 + world["dp"].coordinate(0)) % V);
  Tensor tokens = from_vector(ids, {kTpEstimateBatch, T + 1});
  Tensor inputs = tokens.narrow(1, 0, T).contiguous(), targets = tokens.narrow(1, 1, T).contiguous().reshape({-1});
  return dtr::testing::measure_step_memory(before, opt, [&] {
    Tensor logits = (*model)(inputs);
    Tensor rows = logits.reshape({-1, logits.size(-1)});
    return c.plan.loss_parallel ? tp::vocab_parallel_cross_entropy(rows, targets, tp_mesh, V)
                                : cross_entropy(rows, targets);
  });
}

}  // namespace

TEST_CASE("estimate_memory predicts FSDP over tensor parallelism within 10 percent",
          "[fsdp][tensor_parallel][single_host]") {
  const int64_t n = distributed::world_size(), t = n % 2 == 0 ? 2 : n;
  if (t == 1) return;  // no tensor-parallel group at 1 rank
  const auto world = mesh::init_device_mesh(DeviceType::cpu, {n / t, t}, {"dp", "tp"});
  const nn::TransformerConfig llama = tp_estimate_config(nn::TransformerStyle::llama);
  const tp::TransformerPlanOptions split{.vocab_parallel_embedding = true, .loss_parallel = true,
                                         .sequence_parallel = true};
  std::vector<TpEstimateCase> cases;
  for (bool ckpt : {false, true}) {
    cases.push_back({"llama", llama, {}, std::nullopt, ckpt});
    cases.push_back({"llama sequence+loss parallel", llama, split, std::nullopt, ckpt});
  }
  cases.push_back({"llama", llama, {}, DType::bf16, false});
  cases.push_back({"llama sequence+loss parallel", llama, split, DType::bf16, false});
  cases.push_back({"gpt2 tied, loss parallel", tp_estimate_config(nn::TransformerStyle::gpt2),
                   {.vocab_parallel_embedding = true, .loss_parallel = true}, std::nullopt, false});
  for (const TpEstimateCase& c : cases) {
    nn::TransformerConfig meta = c.config;
    meta.device = Device::meta();
    nn::Transformer meta_model(meta);
    const fsdp::MemoryEstimateOptions options{
        .rank = static_cast<int>(world["dp"].coordinate(0)),
        .param_dtype = c.param_dtype,
        .batch_size = kTpEstimateBatch,
        .seq_len = c.config.max_seq_len,
        .activation_checkpointing = c.checkpointing,
        .tensor_parallel_shapes = tp::local_parameter_shapes(meta_model, tp::transformer_plan(meta, c.plan), t,
                                                             world["tp"].coordinate(0))};
    const fsdp::MemoryEstimate e = fsdp::estimate_memory(
        meta_model, fsdp::module_type_policy<nn::TransformerBlock>(), static_cast<int>(n / t), options,
        [&](int64_t batch, int64_t seq, std::optional<DType> dtype, bool ckpt) {
          return nn::estimate_tensor_parallel_activation_bytes(c.config, t, c.plan, batch, seq, dtype, ckpt);
        });
    const dtr::testing::StepMemory m = tp_measure(c, world);
    const std::string label = fmt::format("{}{}{} at {} x {}", c.name, c.param_dtype ? " bf16" : "",
                                          c.checkpointing ? " ckpt" : "", n / t, t);
    INFO(label);
    if (distributed::rank() == 0) {
      fmt::print(stderr, "{}: params {}/{} grads {}/{} optim {}/{} unsharded {}/{} activations {}/{} "
                       "(estimated/measured)\n",
                       label, e.params, m.params, e.grads, m.grads, e.optimizer_state, m.optimizer_state,
                       e.unsharded_peak, m.unsharded_peak, e.activations, m.activations);
    }
    CHECK(e.params == m.params);
    CHECK(e.grads == m.grads);
    CHECK(e.optimizer_state == m.optimizer_state);
    CHECK(dtr::testing::relative_to(e.unsharded_peak, m.unsharded_peak) <= 0.10);
    CHECK(dtr::testing::relative_to(e.activations, m.activations) <= 0.10);
  }
}
