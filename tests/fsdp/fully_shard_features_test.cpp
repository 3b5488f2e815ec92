// fully_shard beyond the training parity: meta-device initialisation, uneven and
// empty shards, grad clipping across ranks, sharded state dicts, unused modules,
// the gradient divide factor, memory, and the API's error cases. References are
// computed in the same process without FSDP.
#include "dtr/fsdp/fully_shard.h"
#include "dtr/fsdp/state_dict.h"
#include "dtr/mesh/distributed.h"
#include "dtr/mesh/process_group.h"
#include "dtr/mesh/reduce_op.h"
#include "tests/support/mpi_test_util.h"
#include "dtr/nn/container.h"
#include "dtr/nn/linear.h"
#include "dtr/nn/optim/adamw.h"
#include "dtr/nn/optim/clip_grad.h"
#include "dtr/nn/optim/sgd.h"
#include "dtr/nn/simple_model.h"
#include "dtr/nn/transformer.h"
#include "dtr/tensor/allocator.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/matmul.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/ops/reduce.h"
#include "dtr/tensor/random.h"

#include "tests/support/tiny_transformer.h"

#include <catch2/catch.hpp>

#include <functional>
#include <optional>

using namespace dtr;
using dtr::testing::full_of;
using dtr::testing::values_of;

namespace {

void shard_transformer(nn::Transformer& model) {
  for (auto& layer : model.layers()) fsdp::fully_shard(*layer);
  fsdp::fully_shard(model);
}

// The sharded model's full parameters equal the unsharded reference's, within 1e-10.
void require_full_parameters_equal(nn::Module& model, nn::Module& reference) {
  auto expected = reference.named_parameters();
  auto got = model.named_parameters();
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(got[i].first);
    auto g = values_of(full_of(got[i].second)), e = values_of(expected[i].second);
    for (size_t j = 0; j < g.size(); ++j) REQUIRE(g[j] == Approx(e[j]).margin(1e-10));
  }
}

Tensor tokens_for(int64_t begin, int64_t end, int64_t seq = 8) {
  std::vector<int64_t> v;
  for (int64_t b = begin; b < end; ++b) {
    for (int64_t t = 0; t < seq; ++t) v.push_back((b * 5 + t * 3 + 1) % 32);
  }
  return from_vector(v, {end - begin, seq});
}

// This rank's rows of a global batch of `global` rows.
std::pair<int64_t, int64_t> my_rows(int64_t global) {
  const int64_t n = distributed::world_size(), me = distributed::rank();
  return {me * global / n, (me + 1) * global / n};
}

}  // namespace

TEST_CASE("meta-device init: each rank fills its shard with exactly the unsharded init values") {
  auto reference = std::make_shared<nn::Transformer>(testing::tiny_config());
  manual_seed(11);
  reference->reset_parameters();

  auto model = std::make_shared<nn::Transformer>(testing::tiny_config(DType::f32, Device::meta()));
  shard_transformer(*model);
  model->to_empty(Device::cpu());
  manual_seed(11);
  model->reset_parameters();
  auto expected = reference->named_parameters();
  auto got = model->named_parameters();
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(got[i].first);
    REQUIRE(got[i].second->device().is_cpu());
    REQUIRE(values_of(full_of(got[i].second)) == values_of(expected[i].second));  // bit for bit
  }
}

TEST_CASE("uneven and empty shards: a 7x5 weight and a bias of 3 train like the unsharded model") {
  auto make = [] {
    manual_seed(3);
    return std::make_shared<nn::SimpleModel>(5, 7, 3, nn::LinearOptions{.dtype = DType::f64});
  };
  auto reference = make();
  auto model = make();
  fsdp::fully_shard(*model);
  nn::optim::AdamW ref_opt(reference->parameters(), {.lr = 0.05});
  nn::optim::AdamW opt(model->parameters(), {.lr = 0.05});
  const int64_t global = 12;
  auto [begin, end] = my_rows(global);
  for (int step = 0; step < 5; ++step) {
    std::vector<double> xs;
    std::vector<int64_t> ys;
    for (int64_t b = 0; b < global; ++b) {
      for (int64_t f = 0; f < 5; ++f) xs.push_back(std::sin(1.0 + b * 5 + f + step));
      ys.push_back((b + step) % 3);
    }
    Tensor x = from_vector(xs, {global, 5}), y = from_vector(ys, {global});
    Tensor ref_loss = cross_entropy((*reference)(x), y);
    ref_loss.backward();
    ref_opt.step();
    ref_opt.zero_grad();
    Tensor loss = cross_entropy((*model)(x.narrow(0, begin, end - begin)), y.narrow(0, begin, end - begin));
    loss.backward();
    opt.step();
    opt.zero_grad();
  }
  auto expected = reference->named_parameters();
  auto got = model->named_parameters();
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(got[i].first);
    auto g = values_of(full_of(got[i].second)), e = values_of(expected[i].second);
    for (size_t j = 0; j < g.size(); ++j) REQUIRE(g[j] == Approx(e[j]).margin(1e-10));
  }
  if (distributed::world_size() == 4 && distributed::rank() == 3) {
    REQUIRE(model->named_parameters().back().second->numel() == 0);  // fc2.bias: 3 rows over 4 ranks
  }
}

namespace {

// Step `step`'s global batch of `global` rows for CachedHandles: inputs [global, 3]
// and targets [global, 5].
std::pair<Tensor, Tensor> regression_batch(int64_t global, int step) {
  std::vector<double> xs, ys;
  for (int64_t b = 0; b < global; ++b) {
    for (int64_t f = 0; f < 3; ++f) xs.push_back(std::sin(0.3 * b + 0.7 * f + step));
    for (int64_t o = 0; o < 5; ++o) ys.push_back(std::cos(0.2 * b - 0.5 * o + step));
  }
  return {from_vector(xs, {global, 3}), from_vector(ys, {global, 5})};
}

// A user's module in the libtorch habit: it keeps the Parameter handles
// register_parameter returns in members and computes with them, never reading its
// parameters by name. 5 rows: uneven over 2-4 ranks, empty on the last of 4.
class CachedHandles : public nn::Module {
 public:
  CachedHandles() {
    autograd::NoGradGuard no_grad;
    manual_seed(5);
    uniform_(weight_, -0.5, 0.5);
    uniform_(bias_, -0.5, 0.5);
  }
  std::string type_name() const override { return "CachedHandles"; }
  Tensor forward(const Tensor& x) override { return add(matmul(x, weight_->t()), bias_); }

 private:
  nn::Parameter weight_ = register_parameter("weight", empty({5, 3}, {.dtype = DType::f64}));
  nn::Parameter bias_ = register_parameter("bias", empty({5}, {.dtype = DType::f64}));
};

}  // namespace

namespace {

struct Losses {
  std::vector<double> reference, sharded;  // the sharded model's averaged over the ranks
};

// Six AdamW steps of `reference` on the global batch and of the fully_shard-ed
// `model` on this rank's rows, side by side; `before_step(step)` runs first at each.
Losses train_side_by_side(CachedHandles& reference, CachedHandles& model,
                          const std::function<void(int)>& before_step = {}) {
  nn::optim::AdamW ref_opt(reference.parameters(), {.lr = 0.05});
  nn::optim::AdamW opt(model.parameters(), {.lr = 0.05});
  const int64_t global = 12;
  auto [begin, end] = my_rows(global);
  Losses losses;
  for (int step = 0; step < 6; ++step) {
    if (before_step) before_step(step);
    auto [x, y] = regression_batch(global, step);
    Tensor ref_diff = sub(reference(x), y);
    Tensor ref_loss = mean(mul(ref_diff, ref_diff));
    ref_loss.backward();
    ref_opt.step();
    ref_opt.zero_grad();
    losses.reference.push_back(ref_loss.item());
    Tensor xr = x.narrow(0, begin, end - begin), yr = y.narrow(0, begin, end - begin);
    Tensor diff = sub(model(xr), yr);
    Tensor loss = mean(mul(diff, diff));
    loss.backward();
    opt.step();
    opt.zero_grad();
    Tensor total = loss.detach().clone();  // the global mean: ranks hold equal row counts
    distributed::world_group()->all_reduce(total, mesh::ReduceOp::avg())->wait();
    losses.sharded.push_back(total.item());
  }
  return losses;
}

}  // namespace

TEST_CASE("a module that keeps its Parameter handles in members trains under fully_shard like one process") {
  CachedHandles reference, model;
  fsdp::fully_shard(model);
  const Losses losses = train_side_by_side(reference, model);
  REQUIRE(losses.reference.back() < 0.8 * losses.reference.front());  // the reference learns
  for (size_t i = 0; i < losses.sharded.size(); ++i) {
    REQUIRE(losses.sharded[i] == Approx(losses.reference[i]).epsilon(1e-12));
  }
  require_full_parameters_equal(model, reference);
}

TEST_CASE("shards replaced mid-training (to_empty, then a load) are what the next all-gather reads") {
  // On the CPU the all-gather reads each shard where it lives, so it must follow
  // the slots to the new tensors; CachedHandles' 5 rows pad at 2-4 ranks.
  CachedHandles reference, model;
  fsdp::fully_shard(model);
  train_side_by_side(reference, model, [&](int step) {
    if (step != 3) return;
    const auto saved = fsdp::get_sharded_state_dict(model);  // new shard tensors with the same values
    const Tensor before = model.parameters().front().data();
    model.to_empty(Device::cpu());
    if (before.numel() > 0) CHECK_FALSE(model.parameters().front().data().storage().is_same(before.storage()));
    fsdp::load_sharded_state_dict(model, saved);
  });
  require_full_parameters_equal(model, reference);
}

TEST_CASE("offload_policy on a CPU model is a no-op, pinned or not: same training, nothing pinned") {
  // Trains one model per policy; each must equal the model without a policy bit for bit.
  auto train = [](std::optional<fsdp::OffloadPolicy> policy) {
    manual_seed(3);
    auto model = std::make_shared<nn::SimpleModel>(5, 7, 3, nn::LinearOptions{.dtype = DType::f64});
    fsdp::FullyShardOptions options;
    if (policy) options.offload_policy = *policy;
    fsdp::fully_shard(*model, options);
    nn::optim::AdamW opt(model->parameters(), {.lr = 0.05});
    const int64_t global = 12;
    auto [begin, end] = my_rows(global);
    for (int step = 0; step < 3; ++step) {
      std::vector<double> xs;
      std::vector<int64_t> ys;
      for (int64_t b = begin; b < end; ++b) {
        for (int64_t f = 0; f < 5; ++f) xs.push_back(std::cos(0.5 + b * 5 + f - step));
        ys.push_back((b + 2 * step) % 3);
      }
      cross_entropy((*model)(from_vector(xs, {end - begin, 5})), from_vector(ys, {end - begin})).backward();
      for (auto& [name, p] : model->named_parameters()) {
        INFO(name);
        REQUIRE(p->device().is_cpu());
        REQUIRE_FALSE(p->is_pinned());
        REQUIRE(p->grad().defined());
        REQUIRE_FALSE(p->grad().is_pinned());
      }
      opt.step();
      opt.zero_grad();
    }
    std::vector<std::vector<double>> values;
    for (auto& [name, p] : model->named_parameters()) values.push_back(values_of(full_of(p)));
    return values;
  };
  const auto plain = train(std::nullopt);
  CHECK(train(fsdp::OffloadPolicy{.offload_params = true}) == plain);  // pin_memory defaults to true
  CHECK(train(fsdp::OffloadPolicy{.offload_params = true, .pin_memory = false}) == plain);
}

TEST_CASE("clip_grad_norm_ on sharded gradients returns the global norm and clips like one process") {
  auto reference = std::make_shared<nn::Transformer>(testing::tiny_config());
  manual_seed(5);
  reference->reset_parameters();
  auto model = std::make_shared<nn::Transformer>(testing::tiny_config());
  manual_seed(5);
  model->reset_parameters();
  shard_transformer(*model);
  const int64_t global = 12;  // equal slices at 1-4 ranks, so the mean of means is the mean
  Tensor tokens = tokens_for(0, global);
  Tensor targets = tokens_for(1, global + 1);
  auto loss_of = [](nn::Module& m, const Tensor& x, const Tensor& y) {
    Tensor logits = m(x);
    return cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1}));
  };
  loss_of(*reference, tokens, targets).backward();
  double expected = nn::optim::clip_grad_norm_(reference->parameters(), 0.1);
  auto [begin, end] = my_rows(global);
  loss_of(*model, tokens.narrow(0, begin, end - begin), targets.narrow(0, begin, end - begin)).backward();
  double norm = nn::optim::clip_grad_norm_(model->parameters(), 0.1);
  REQUIRE(norm == Approx(expected).epsilon(1e-5));
  REQUIRE(norm > 0.1);  // the clipping branch ran
  auto ref_params = reference->named_parameters();
  auto params = model->named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    INFO(params[i].first);
    Tensor grad = params[i].second.as_dtensor().grad().full_tensor();
    auto g = values_of(grad), e = values_of(ref_params[i].second->grad());
    for (size_t j = 0; j < g.size(); ++j) REQUIRE(g[j] == Approx(e[j]).margin(1e-6));
  }
}

TEST_CASE("sharded state dicts: DTensors with the full values, loaded into another sharded model") {
  auto reference = std::make_shared<nn::Transformer>(testing::tiny_config());
  auto a = std::make_shared<nn::Transformer>(testing::tiny_config());
  manual_seed(21);
  a->reset_parameters();
  manual_seed(21);
  reference->reset_parameters();
  shard_transformer(*a);
  auto state = fsdp::get_sharded_state_dict(*a);
  REQUIRE(state.size() == reference->named_parameters().size());
  for (auto& [name, p] : reference->named_parameters()) {
    INFO(name);
    REQUIRE(state.at(name).placements() == Placements{Shard(0)});
    REQUIRE(values_of(state.at(name).full_tensor()) == values_of(p));
  }
  auto b = std::make_shared<nn::Transformer>(testing::tiny_config());  // different init
  shard_transformer(*b);
  fsdp::load_sharded_state_dict(*b, state);
  Tensor tokens = tokens_for(0, 2);
  REQUIRE(values_of((*b)(tokens)) == values_of((*reference)(tokens)));
  auto broken = state;
  broken.erase("tok_embeddings.weight");
  REQUIRE_THROWS_WITH(fsdp::load_sharded_state_dict(*b, broken), Catch::Contains("missing keys [tok_embeddings.weight]"));
}

namespace {

// Two branches; only the first reaches the loss.
class TwoBranch : public nn::Module {
 public:
  TwoBranch()
      : used_(register_module("used", std::make_shared<nn::Linear>(4, 4))),
        unused_(register_module("unused", std::make_shared<nn::Linear>(4, 4))) {}
  std::string type_name() const override { return "TwoBranch"; }
  Tensor forward(const Tensor& x) override {
    last_unused_ = (*unused_)(x);
    return (*used_)(x);
  }
  std::shared_ptr<nn::Linear> used_, unused_;
  Tensor last_unused_;
};

}  // namespace

TEST_CASE("a module whose output gets no gradient does not hang the ranks: its gradient is zero") {
  manual_seed(2);
  auto model = std::make_shared<TwoBranch>();
  fsdp::fully_shard(*model->used_);
  fsdp::fully_shard(*model->unused_);
  fsdp::fully_shard(*model);
  for (int step = 0; step < 2; ++step) {
    Tensor x = full({2, 4}, 0.5).requires_grad_();
    sum((*model)(x)).backward();
  }
  for (auto& [name, p] : model->named_parameters()) {
    INFO(name);
    REQUIRE(p->grad().defined());
    double magnitude = sum(abs(p->grad())).item();
    if (name.rfind("unused", 0) == 0) {
      REQUIRE(magnitude == 0.0);
    } else if (p->numel() > 0) {
      REQUIRE(magnitude > 0.0);
    }
  }
}

TEST_CASE("set_gradient_divide_factor(1) sums gradients over the ranks instead of averaging") {
  auto make = [] {
    manual_seed(9);
    return std::make_shared<nn::SimpleModel>(4, 8, 2, nn::LinearOptions{.dtype = DType::f64});
  };
  auto reference = make();
  auto model = make();
  fsdp::fully_shard(*model).set_gradient_divide_factor(1.0);
  const int n = distributed::world_size();
  // Every rank uses the same batch: summed gradients are n times the reference's.
  Tensor x = from_vector<double>({0.1, 0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8}, {2, 4});
  sum((*reference)(x)).backward();
  sum((*model)(x)).backward();
  auto expected = reference->named_parameters();
  auto got = model->named_parameters();
  for (size_t i = 0; i < got.size(); ++i) {
    auto g = values_of(got[i].second.as_dtensor().grad().full_tensor());
    auto e = values_of(expected[i].second->grad());
    for (size_t j = 0; j < g.size(); ++j) REQUIRE(g[j] == Approx(n * e[j]).margin(1e-12));
  }
}

// One rank: the groups compute on the shards' own memory and reduce by scaling,
// so training is the unsharded model's, bit for bit, with no collective.
TEST_CASE("FSDP over one rank trains bitwise like the unsharded model, without a collective or a copy") {
  if (distributed::world_size() != 1) return;  // the one-rank path; the parity tests cover more ranks
  auto reference = testing::make_model(5);
  auto model = testing::make_sharded(5);
  auto halved = testing::make_sharded(5);
  fsdp::fsdp_module(*halved).set_gradient_divide_factor(2.0);
  for (auto& layer : halved->layers()) fsdp::fsdp_module(*layer).set_gradient_divide_factor(2.0);
  nn::optim::AdamW reference_opt(reference->parameters(), {.lr = 1e-2});
  nn::optim::AdamW opt(model->parameters(), {.lr = 1e-2});
  auto group = fsdp::fsdp_module(*model).mesh().group(0);
  group->reset_stats();
  auto loss_of = [](nn::Transformer& m, const Tensor& tokens, const Tensor& targets) {
    return cross_entropy(m(tokens).view({-1, 32}), targets.view({-1}));
  };
  for (int step = 0; step < 3; ++step) {
    auto [tokens, targets] = testing::token_batch(step, 0, 4, 8);
    Tensor expected = loss_of(*reference, tokens, targets);
    Tensor got = loss_of(*model, tokens, targets);
    REQUIRE(got.item() == expected.item());
    expected.backward();
    got.backward();
    if (step == 0) loss_of(*halved, tokens, targets).backward();  // it takes no optimizer step
    auto want = reference->named_parameters();
    auto have = model->named_parameters();
    auto half = halved->named_parameters();
    REQUIRE(have.size() == want.size());
    for (size_t i = 0; i < have.size(); ++i) {
      INFO(have[i].first << " at step " << step);
      const auto e = values_of(want[i].second->grad());
      const auto g = values_of(have[i].second->grad());
      REQUIRE(g == e);
      if (step > 0) continue;
      const auto h = values_of(half[i].second->grad());
      for (size_t j = 0; j < e.size(); ++j) REQUIRE(h[j] == e[j] / 2);  // a power of two: exact
    }
    reference_opt.step();
    opt.step();
    reference_opt.zero_grad();
    opt.zero_grad();
    for (size_t i = 0; i < have.size(); ++i) REQUIRE(values_of(have[i].second.data()) == values_of(want[i].second.data()));
  }
  const mesh::CommStats stats = group->stats();
  CHECK(stats.calls[static_cast<int>(mesh::CollectiveKind::all_gather)] == 0);
  CHECK(stats.calls[static_cast<int>(mesh::CollectiveKind::reduce_scatter)] == 0);
}

TEST_CASE("memory: parameters, gradients and AdamW state take 16 bytes per local element, gradients with padding") {
  const int n = distributed::world_size();
  nn::TransformerConfig c = testing::tiny_config();
  c.dim = 64;
  c.n_layers = 4;
  c.vocab_size = 256;
  reset_peak_memory_stats(Device::cpu());
  const auto before = memory_stats(Device::cpu());
  auto model = std::make_shared<nn::Transformer>(c);
  const int64_t psi = model->num_parameters();
  shard_transformer(*model);
  // The peak of training, not of building the whole model and sharding it.
  reset_peak_memory_stats(Device::cpu());
  nn::optim::AdamW opt(model->parameters(), {.lr = 1e-3});
  Tensor tokens = tokens_for(0, 2, 16);
  Tensor logits = (*model)(tokens);
  cross_entropy(logits.reshape({-1, c.vocab_size}), tokens.reshape({-1})).backward();
  opt.step();
  const auto after = memory_stats(Device::cpu());
  int64_t local = 0, padded = 0, padding_bound = 0;
  for (auto& [name, p] : model->named_parameters()) {
    local += p->numel();
    const Shape global_shape = p.global_shape();
    padding_bound += n * (numel_of(global_shape) / global_shape[0]);  // under one row per rank
  }
  for (auto& [path, m] : model->named_modules()) {
    if (fsdp::is_fully_sharded(*m)) padded += fsdp::fsdp_module(*m).shard_numel_padded();
  }
  // The model's size stays the unsharded model's; the local count is this rank's shards.
  CHECK(model->num_parameters() == psi);
  CHECK(model->num_local_parameters() == local);
  auto grown = [&](MemoryTag tag) { return after[tag].current_bytes - before[tag].current_bytes; };
  const int64_t state = grown(MemoryTag::param) + grown(MemoryTag::grad) + grown(MemoryTag::optimizer_state);
  INFO("rank " << distributed::rank() << " of " << n << ": psi " << psi << ", local elements " << local
               << ", padded " << padded << ", param/grad/optimizer bytes " << grown(MemoryTag::param) << "/"
               << grown(MemoryTag::grad) << "/" << grown(MemoryTag::optimizer_state) << " (16*psi/N = "
               << 16 * psi / n << "), peak param bytes " << after[MemoryTag::param].peak_bytes);
  // Gradients are views into each group's reduce-scatter output, padding included.
  REQUIRE(grown(MemoryTag::param) == 4 * local);
  REQUIRE(grown(MemoryTag::optimizer_state) == 8 * local);
  REQUIRE(grown(MemoryTag::grad) == 4 * padded);
  REQUIRE(local <= padded);
  REQUIRE(padded * n < psi + padding_bound);
  // Peak unsharded memory: shards + the root group + at most two blocks, far from the whole model.
  const int64_t block = model->layers()[0].num_parameters();
  const int64_t root_own = psi - c.n_layers * block;
  REQUIRE(after[MemoryTag::param].peak_bytes - before[MemoryTag::param].current_bytes <=
          4 * (local + root_own + 2 * block + padding_bound));
  WARN("memory at " << n << " ranks: psi " << psi << ", state bytes " << state << " vs 16*psi/N "
                    << 16 * psi / n << ", peak param bytes "
                    << after[MemoryTag::param].peak_bytes - before[MemoryTag::param].current_bytes);
}

TEST_CASE("fully_shard refuses: twice, a parent before its child, and tied weights split across groups") {
  auto model = std::make_shared<nn::SimpleModel>(4, 4, 2);
  fsdp::fully_shard(*model);
  REQUIRE_THROWS_WITH(fsdp::fully_shard(*model), Catch::Contains("already sharded"));
  REQUIRE_THROWS_WITH(fsdp::fsdp_module(*model).set_gradient_divide_factor(0), Catch::Contains("positive"));

  auto tied = std::make_shared<nn::Sequential>();
  auto first = std::make_shared<nn::Linear>(4, 4);
  auto second = std::make_shared<nn::Linear>(4, 4);
  tied->push_back(first);
  tied->push_back(second);
  second->set_parameter("weight", first->parameter("weight"));  // tie
  fsdp::fully_shard(*first);
  REQUIRE_THROWS_WITH(fsdp::fully_shard(*tied), Catch::Contains("already sharded by another fully_shard call"));
  // Siblings too: the second finds the tensor the first sharded.
  auto left = std::make_shared<nn::Linear>(4, 4);
  auto right = std::make_shared<nn::Linear>(4, 4);
  right->set_parameter("weight", left->parameter("weight"));
  fsdp::fully_shard(*left);
  REQUIRE_THROWS_WITH(fsdp::fully_shard(*right), Catch::Contains("parameter 'weight' is already sharded"));

  auto parent_first = std::make_shared<nn::SimpleModel>(4, 4, 2);
  fsdp::fully_shard(*parent_first);
  auto& child = *parent_first->named_modules()[1].second;
  REQUIRE_THROWS_WITH(fsdp::fully_shard(child), Catch::Contains("apply fully_shard bottom-up"));

  auto plain = std::make_shared<nn::SimpleModel>(4, 4, 2);
  REQUIRE_THROWS_WITH(fsdp::fsdp_module(*plain), Catch::Contains("fully_shard was not applied"));
}

TEST_CASE("load_state_dict of a full state dict on a sharded model keeps each rank's rows") {
  auto reference = std::make_shared<nn::Transformer>(testing::tiny_config());  // the full values
  manual_seed(21);
  auto model = std::make_shared<nn::Transformer>(testing::tiny_config());  // other values
  shard_transformer(*model);
  model->load_state_dict(reference->state_dict());
  require_full_parameters_equal(*model, *reference);

  // A shape that is neither the global one nor the shard's: the same message on every rank.
  nn::StateDict wrong = reference->state_dict();
  wrong["tok_embeddings.weight"] = zeros({3, 5});
  REQUIRE_THROWS_WITH(model->load_state_dict(wrong),
                      Catch::Contains("tok_embeddings.weight (checkpoint [3, 5], sharded parameter of global shape [32, 16])"));
}

TEST_CASE("unshard (async) installs the full parameters, reshard puts the shards back") {
  auto make = [] {
    manual_seed(4);
    return std::make_shared<nn::SimpleModel>(6, 5, 3);
  };
  auto reference = make();
  auto model = make();
  auto handle = fsdp::fully_shard(*model);
  auto pending = handle.unshard(/*async=*/true);
  pending.wait();
  auto expected = reference->named_parameters();
  auto unsharded = model->named_parameters();
  for (size_t i = 0; i < unsharded.size(); ++i) {
    INFO(unsharded[i].first);
    REQUIRE(unsharded[i].second->sizes() == expected[i].second->sizes());
    REQUIRE(values_of(unsharded[i].second) == values_of(expected[i].second));
  }
  handle.reshard();
  const int64_t n = distributed::world_size(), me = distributed::rank();
  auto sharded = model->named_parameters();
  REQUIRE(sharded[0].second->sizes() == Shape{shard_range(5, n, me).length, 6});  // fc1.weight rows
  REQUIRE(values_of(full_of(sharded[0].second)) == values_of(expected[0].second));
}
