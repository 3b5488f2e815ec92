// FSDP policies at world sizes 1-4: HSDP on a 2x2 mesh against single-process
// training, mixed precision (bf16 tracking the f32 loss curve, all-gather bytes
// halved, reduce dtype against an f64 reference, per-module policies, the f16
// overflow guard). References run in the same process without FSDP.
#include "dtr/fsdp/fully_shard.h"
#include "dtr/mesh/device_mesh.h"
#include "dtr/mesh/distributed.h"
#include "tests/support/mpi_test_util.h"
#include "dtr/nn/linear.h"
#include "dtr/nn/optim/adamw.h"
#include "dtr/nn/transformer.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/ops/reduce.h"

#include "tests/support/tiny_transformer.h"

#include <catch2/catch.hpp>

#include <cmath>

using namespace dtr;
using dtr::testing::kGlobalBatch;
using dtr::testing::kSeq;
using dtr::testing::full_of;
using dtr::testing::lm_loss;
using dtr::testing::values_of;

namespace {


nn::TransformerConfig config(DType dtype = DType::f32) {
  nn::TransformerConfig c;
  c.vocab_size = 32;
  c.dim = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.max_seq_len = 16;
  c.dtype = dtype;
  return c;
}

std::shared_ptr<nn::Transformer> make(DType dtype = DType::f32) {
  manual_seed(17);
  return std::make_shared<nn::Transformer>(config(dtype));
}

// Trains `model` (sharded already, or not) for `steps`; each rank takes its rows
// of the global batch when `sharded`. Returns the global mean loss per step.
std::vector<double> train(nn::Module& model, bool sharded, int steps, int micro_batches = 1,
                          const std::function<void(int micro, bool last)>& before_micro = {}) {
  nn::optim::AdamW opt(model.parameters(), {.lr = 1e-2});
  const int64_t n = sharded ? distributed::world_size() : 1, me = sharded ? distributed::rank() : 0;
  const int64_t local = kGlobalBatch / n, micro = local / micro_batches;
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    double step_loss = 0;
    for (int k = 0; k < micro_batches; ++k) {
      if (before_micro) before_micro(k, k == micro_batches - 1);
      auto [tokens, targets] = testing::token_batch(step, me * local + k * micro, me * local + (k + 1) * micro, kSeq);
      Tensor loss = mul(lm_loss(model, tokens, targets), Scalar(1.0 / micro_batches));
      loss.backward();
      step_loss += loss.item();
    }
    opt.step();
    opt.zero_grad();
    if (sharded) {
      Tensor global = full({1}, step_loss, {.dtype = DType::f64});
      distributed::world_group()->all_reduce(global, mesh::ReduceOp::avg())->wait();
      step_loss = values_of(global)[0];
    }
    losses.push_back(step_loss);
  }
  return losses;
}

fsdp::FSDPModule shard(nn::Transformer& model, const fsdp::FullyShardOptions& block_options,
                       const fsdp::FullyShardOptions& root_options) {
  for (auto& layer : model.layers()) fsdp::fully_shard(*layer, block_options);
  return fsdp::fully_shard(model, root_options);
}

void require_same_parameters(nn::Module& sharded, nn::Module& reference, double tolerance) {
  auto got = sharded.named_parameters(), want = reference.named_parameters();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(got[i].first);
    auto g = values_of(full_of(got[i].second)), w = values_of(want[i].second);
    double scale = 0, error = 0;
    for (size_t j = 0; j < g.size(); ++j) {
      scale = std::max(scale, std::abs(w[j]));
      error = std::max(error, std::abs(g[j] - w[j]));
    }
    REQUIRE(error <= tolerance * scale);
  }
}

}  // namespace

TEST_CASE("HSDP on a 2x2 mesh trains like one process (and so like FSDP on 4 ranks)", "[.np4]") {
  testing::require_four_ranks();
  auto mesh = mesh::init_device_mesh(DeviceType::cpu, {2, 2}, {"replicate", "shard"});
  auto reference = make(DType::f64);
  auto model = make(DType::f64);
  shard(*model, {.mesh = mesh}, {.mesh = mesh});
  auto expected = train(*reference, false, 4);
  auto losses = train(*model, true, 4);
  for (size_t i = 0; i < losses.size(); ++i) REQUIRE(losses[i] == Approx(expected[i]).epsilon(1e-10));
  require_same_parameters(*model, *reference, 1e-9);
  // Each parameter is split over the shard dim only: 2 ranks hold the same rows.
  auto [name, p] = model->named_parameters().front();
  REQUIRE(p.sharding()->placements == Placements{Replicate(), Shard(0)});
}

TEST_CASE("HSDP with set_requires_all_reduce false on the first micro-batch matches one process", "[.np4]") {
  testing::require_four_ranks();
  auto mesh = mesh::init_device_mesh(DeviceType::cpu, {2, 2}, {"replicate", "shard"});
  auto reference = make(DType::f64);
  auto model = make(DType::f64);
  auto root = shard(*model, {.mesh = mesh}, {.mesh = mesh});
  auto expected = train(*reference, false, 3);
  auto losses = train(*model, true, 3, 2, [&](int, bool last) { root.set_requires_all_reduce(last); });
  for (size_t i = 0; i < losses.size(); ++i) REQUIRE(losses[i] == Approx(expected[i]).epsilon(1e-10));
  require_same_parameters(*model, *reference, 1e-9);
}

TEST_CASE("bf16 mixed precision tracks the f32 loss curve over 50 steps, with f32 master weights") {
  fsdp::MixedPrecisionPolicy bf16{.param_dtype = DType::bf16, .reduce_dtype = DType::f32};
  auto f32_model = make();
  auto bf16_model = make();
  shard(*f32_model, {}, {});
  shard(*bf16_model, {.mp_policy = bf16}, {.mp_policy = bf16});
  auto f32_losses = train(*f32_model, true, 50);
  auto bf16_losses = train(*bf16_model, true, 50);
  // Stated tolerance: every step's loss within 2% of the f32 run's (bf16 keeps
  // about 3 significant digits; the loss falls from ~3.5 to ~0.1 meanwhile).
  for (size_t i = 0; i < f32_losses.size(); ++i) {
    INFO("step " << i);
    REQUIRE(bf16_losses[i] == Approx(f32_losses[i]).epsilon(0.02).margin(0.01));
  }
  REQUIRE(f32_losses.back() < 0.5 * f32_losses.front());
  for (auto& [name, p] : bf16_model->named_parameters()) REQUIRE(p->dtype() == DType::f32);  // master weights
}

TEST_CASE("bf16 mixed precision halves the bytes all-gathered") {
  auto all_gather_bytes = [](const fsdp::MixedPrecisionPolicy& mp) {
    auto model = make();
    auto root = shard(*model, {.mp_policy = mp}, {.mp_policy = mp});
    auto group = root.mesh().group(0);
    group->reset_stats();
    train(*model, true, 1);
    return group->stats().bytes_of(mesh::CollectiveKind::all_gather);
  };
  const int64_t f32_bytes = all_gather_bytes({});
  const int64_t bf16_bytes = all_gather_bytes({.param_dtype = DType::bf16});
  if (distributed::world_size() == 1) {  // f32 computes on the shards; bf16 needs its cast copies
    REQUIRE(f32_bytes == 0);
    REQUIRE(bf16_bytes > 0);
    return;
  }
  REQUIRE(f32_bytes > 0);
  REQUIRE(2 * bf16_bytes == f32_bytes);
}

TEST_CASE("reducing f32 gradients in bf16 loses accuracy against f64 that reducing them in f32 does not") {
  auto reference = make();
  reference->to(DType::f64);  // the f32 model's values, computed in f64
  const auto batch = testing::token_batch(0, 0, kGlobalBatch, kSeq);
  const Tensor& tokens = batch.first;
  const Tensor& targets = batch.second;
  lm_loss(*reference, tokens, targets).backward();
  auto gradient_error = [&](DType reduce_dtype) {
    auto model = make();
    // f32 compute, so the reduction's rounding is what differs.
    fsdp::MixedPrecisionPolicy mp{.reduce_dtype = reduce_dtype};
    shard(*model, {.mp_policy = mp}, {.mp_policy = mp});
    const int64_t n = distributed::world_size(), me = distributed::rank(), local = kGlobalBatch / n;
    lm_loss(*model, tokens.narrow(0, me * local, local), targets.narrow(0, me * local, local)).backward();
    double error = 0;
    auto got = model->named_parameters(), want = reference->named_parameters();
    for (size_t i = 0; i < got.size(); ++i) {
      auto g = values_of(got[i].second.as_dtensor().grad().full_tensor());
      auto w = values_of(want[i].second->grad());
      for (size_t j = 0; j < g.size(); ++j) error += std::abs(g[j] - w[j]);
    }
    return error;
  };
  const double f32_error = gradient_error(DType::f32);
  const double bf16_error = gradient_error(DType::bf16);
  WARN("gradient L1 error against f64 at " << distributed::world_size() << " ranks: reduce in f32 " << f32_error
                                           << ", in bf16 " << bf16_error);
  // bf16 keeps 8 bits of mantissa against f32's 24: rounding the reduced
  // gradients to bf16 costs orders of magnitude more than f32 arithmetic does.
  REQUIRE(bf16_error > 30 * f32_error);
}

TEST_CASE("per-module policies: bf16 blocks with f32 outputs under an f32 root") {
  auto f32_model = make();
  auto mixed = make();
  shard(*f32_model, {}, {});
  shard(*mixed, {.mp_policy = {.param_dtype = DType::bf16, .output_dtype = DType::f32}}, {});
  auto f32_losses = train(*f32_model, true, 10);
  auto mixed_losses = train(*mixed, true, 10);
  for (size_t i = 0; i < f32_losses.size(); ++i) REQUIRE(mixed_losses[i] == Approx(f32_losses[i]).epsilon(0.02));
}

TEST_CASE("f16 gradient reduction divides before and after the sum, so large gradients do not overflow") {
  // Every rank's gradient of the weight is 30000: the sum over 4 ranks (120000)
  // exceeds f16's 65504, the pre-divided sum does not.
  auto linear = std::make_shared<nn::Linear>(1, 4, nn::LinearOptions{.bias = false});
  fsdp::fully_shard(*linear, {.mp_policy = {.param_dtype = DType::f16, .reduce_dtype = DType::f16}});
  Tensor x = full({1, 1}, 30000.0);
  sum((*linear)(x)).backward();
  const nn::Parameter weight = linear->named_parameters().front().second;
  for (double v : values_of(weight.as_dtensor().grad().full_tensor())) {
    REQUIRE(v == Approx(30000.0).epsilon(1e-3));
  }
}
